from hypothesis import settings

# derandomize: CI runs the same examples every time (reproducible, never flaky); run
# with --hypothesis-profile=explore locally to search new random examples.
settings.register_profile("ci", deadline=None, max_examples=60, derandomize=True)
settings.register_profile("explore", deadline=None, max_examples=200)
settings.load_profile("ci")


# --- A real PostgreSQL + pgvector server (tests/pg_server.py), started on first use ---

import re  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """One PostgreSQL + pgvector server for the session (127.0.0.1, free port)."""
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    import pg_server as server_module

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
