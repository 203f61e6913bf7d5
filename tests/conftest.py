import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# derandomize: CI runs the same examples every time (reproducible, never flaky); run
# with --hypothesis-profile=explore locally to search new random examples.
settings.register_profile("ci", deadline=None, max_examples=60, derandomize=True)
settings.register_profile("explore", deadline=None, max_examples=200)
settings.load_profile("ci")


# --- EMOTIONAL_MEMORY_NO_SKIPS=1 (set by .ci/run): a skipped test fails instead ---
# Every skip in tests/ names what the environment lacks (an extra, a server binary,
# ../shared/data). CI installs all of it, so there a skip could only hide a feature
# that stopped working: it is reported as a failure with the skip's reason.


def _fail_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    """Turn a skip into a failure under ``EMOTIONAL_MEMORY_NO_SKIPS=1``."""
    if (
        os.environ.get("EMOTIONAL_MEMORY_NO_SKIPS") == "1"
        and report.skipped
        and not hasattr(report, "wasxfail")
    ):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under EMOTIONAL_MEMORY_NO_SKIPS=1: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """A test's skip (a marker, ``pytest.skip`` or ``importorskip`` inside it)."""
    outcome = yield
    _fail_skip(outcome.get_result())  # type: ignore[attr-defined]
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> object:
    """A whole module's skip (a module-level ``importorskip``)."""
    outcome = yield
    _fail_skip(outcome.get_result())  # type: ignore[attr-defined]
    return None


# --- A real PostgreSQL + pgvector server (tests/support/pg_server.py), started on first use ---


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """One PostgreSQL + pgvector server for the session (127.0.0.1, free port)."""
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    from support import pg_server as server_module

    try:
        server_module.binaries()
    except ImportError as exc:
        pytest.skip(str(exc))
    workdir = Path(tempfile.mkdtemp(prefix="em-pg-"))
    server = server_module.start(workdir)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def pg_dsn(pg_server: Any, request: pytest.FixtureRequest) -> str:
    """A fresh database (with the vector extension) for each test module."""
    name = re.sub(r"[^a-z0-9_]", "_", request.module.__name__.lower())[-50:]
    dsn: str = pg_server.create_database(f"db_{name}")
    return dsn


# --- redis-server and a Chroma server (tests/support/servers.py), started on first use ---


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway redis-server for the session; its ``redis://`` URL."""
    pytest.importorskip("redis", reason="the redis extra is not installed")
    from support import servers

    if servers.redis_binary() is None:
        pytest.skip("redis-server binary not found (apt-get install redis-server)")
    with servers.redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A real Chroma server (``chroma run``) for the session; its port on 127.0.0.1."""
    pytest.importorskip("chromadb", reason="the chroma extra is not installed")
    from support import servers

    if servers.chroma_cli() is None:
        pytest.skip("the chroma CLI (chromadb's server) is not installed")
    with servers.chroma_server(tmp_path_factory.mktemp("chroma-server")) as port:
        yield port
