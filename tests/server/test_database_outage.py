"""A PostgreSQL database that cannot be reached while the service runs (a restart, a
failover, connections refused): a request whose pool wait ends without a connection
is told the database cannot be reached (a 503 worth retrying), not that every
connection is busy with other requests; nothing is stored; the store recovers once
the database accepts connections again; ``/readyz`` says so while it lasts. The
database refuses connections here by ``ALTER DATABASE ... ALLOW_CONNECTIONS false``
after its sessions are terminated.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from emotional_memory.interfaces import StoreBusyError, StoreUnreachableError
from emotional_memory.models import Memory
from support.memories import basic_memory
from support.service_process import start

HANG = 60.0
"""The HTTP client's timeout: a request not answered by then hangs."""
POOL_WAIT = 1.0
"""Seconds the test's store waits for a pooled connection (the default is 30)."""


@contextlib.contextmanager
def _refusing(pg_server: Any, name: str) -> Iterator[None]:
    """Terminate every session of database ``name`` and refuse new ones, until exit."""
    import psycopg

    with psycopg.connect(pg_server.dsn(), autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
        try:
            yield
        finally:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


def _unreachable_error(call: Any) -> BaseException:
    """The error of the first of a few calls that fails without a connection (the
    first call may instead find its pooled connection cut: a plain store error)."""
    from emotional_memory.stores.postgres import PostgresStoreError

    for _ in range(3):
        with pytest.raises(PostgresStoreError) as caught:
            call()
        if isinstance(caught.value, StoreBusyError):
            return caught.value
    raise AssertionError(f"no pool timeout, last error: {caught.value!r}")


def test_an_unreachable_database_is_no_busy_pool_and_the_store_recovers(
    pg_server: Any,
) -> None:
    from emotional_memory.server.service import BUSY_DETAIL, timeout_detail
    from emotional_memory.stores.postgres import PostgresStore

    name = "outage_unreachable"
    dsn = pg_server.create_database(name)
    store = PostgresStore(dsn, max_connections=2)
    try:
        store._pool.timeout = POOL_WAIT  # psycopg_pool's wait for a connection
        kept: Memory = basic_memory("kept", [1.0, 0.0, 0.0])
        store.save(kept)
        with _refusing(pg_server, name):
            error = _unreachable_error(lambda: store.get(kept.id))
            assert isinstance(error, StoreUnreachableError), repr(error)
            assert pg_server.password not in str(error)
            detail = timeout_detail(error)
            assert detail != BUSY_DETAIL and "cannot be reached" in detail, detail
            added = basic_memory("lost", [0.0, 1.0, 0.0])
            write_error = _unreachable_error(lambda: store.save(added))
            assert isinstance(write_error, StoreUnreachableError), repr(write_error)
        # the database accepts connections again: the pool reconnects
        got = store.get(kept.id)
        assert got is not None and got.content == "kept"
        assert store.get(added.id) is None and len(store) == 1
    finally:
        store.close()


def test_readyz_tells_a_database_refusing_connections_and_recovers(
    pg_server: Any, tmp_path: Path
) -> None:
    """``/healthz`` is liveness (200 while the process serves); ``/readyz`` answers
    503 within a few seconds while the store cannot be read, naming no secret, and
    200 again once the database accepts connections (polled, bounded)."""
    name = "outage_ready"
    dsn = pg_server.create_database(name)
    server = start(["--no-auth", "--store", dsn, "--embedder", "hashing"],
                   tmp_path / "serve.log")
    try:
        with httpx.Client(base_url=server.url, timeout=HANG) as http:
            assert http.get("/readyz").json() == {"status": "ready"}
            with _refusing(pg_server, name):
                started = time.monotonic()
                refused = http.get("/readyz")
                assert time.monotonic() - started < 15, "readiness hangs with the pool"
                assert refused.status_code == 503, refused.text
                assert refused.json()["status"] == "unavailable" and refused.json()["detail"]
                assert pg_server.password not in refused.text
                assert http.get("/healthz").status_code == 200
            deadline = time.monotonic() + HANG
            while (ready := http.get("/readyz")).status_code != 200:
                assert time.monotonic() < deadline, ready.text
                time.sleep(0.5)
            assert ready.json() == {"status": "ready"}
            assert http.post("/v1/memories", json={"content": "back"}).status_code == 201
    finally:
        assert server.stop() == 0, server.log_text()
    assert pg_server.password not in server.log_text()


def test_the_pool_reconnects_promptly_after_a_long_outage(pg_server: Any) -> None:
    """psycopg_pool retries a lost connection with a doubling delay (1, 2, 4, 8 s...),
    so after an outage of 8 s its next try came up to 7 s after the database was
    back, every request failing meanwhile; the store's pools give a lost connection
    up after a short window, and a request short of connections then opens one at
    once: the store answers within a few seconds of the database's return."""
    from emotional_memory.stores.postgres import PostgresStore

    name = "outage_reconnect"
    dsn = pg_server.create_database(name)
    store = PostgresStore(dsn, min_connections=1, max_connections=1)
    try:
        store._pool.timeout = POOL_WAIT
        kept: Memory = basic_memory("kept", [1.0, 0.0, 0.0])
        store.save(kept)
        with _refusing(pg_server, name):
            outage_ends = time.monotonic() + 8.0
            while time.monotonic() < outage_ends:
                with contextlib.suppress(Exception):
                    store.get(kept.id)
        back = time.monotonic()
        while True:
            try:
                got = store.get(kept.id)
                break
            except Exception:
                assert time.monotonic() - back < 3.0, "no connection 3 s after the outage"
        assert got is not None and got.content == "kept"
    finally:
        store.close()


def test_readyz_tells_an_unreadable_state_store() -> None:
    """The scopes' states may live elsewhere (``--state redis://...``): readiness
    reads the root's state too, so a state store that cannot be reached is a 503
    naming no secret, not "ready" while every request would fail."""
    from emotional_memory.embedders import HashingEmbedder
    from emotional_memory.engine import EmotionalMemory
    from emotional_memory.server.app import build_app
    from emotional_memory.server.service import MemoryService
    from emotional_memory.state_stores import InMemoryAffectiveStateStore
    from emotional_memory.stores import InMemoryStore

    class Unreachable(InMemoryAffectiveStateStore):
        down = False

        def load(self) -> Any:
            if self.down:
                raise ConnectionError("Error 111 connecting to redis://:hunter2@db:6379")
            return super().load()

    states = Unreachable()
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), state_store=states)
    app = build_app(MemoryService(engine), None)

    async def ask() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            ready = await http.get("/readyz")
            states.down = True
            return [ready, await http.get("/readyz")]

    ready, refused = asyncio.run(ask())
    assert ready.json() == {"status": "ready"}
    assert refused.status_code == 503, refused.text
    assert refused.json()["status"] == "unavailable" and "hunter2" not in refused.text


def test_readyz_stays_ready_over_a_spoiled_root_state(tmp_path: Path) -> None:
    """The root's stored state spoiled (another program's value, edited by hand): the
    state store answered the readiness read, so the server is ready (it was a 503:
    every replica, reading the same row, left the rotation, while the requests are
    served: the root's from the state the engine holds, the scopes' from theirs)."""
    import sqlite3

    from emotional_memory.embedders import HashingEmbedder
    from emotional_memory.engine import EmotionalMemory
    from emotional_memory.server.app import build_app
    from emotional_memory.server.service import MemoryService
    from emotional_memory.stores import InMemoryStore
    from emotional_memory.stores.sqlite.state import SQLiteAffectiveStateStore

    path = tmp_path / "states.db"
    states = SQLiteAffectiveStateStore(path)
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), state_store=states)
    engine.persist_state()
    app = build_app(MemoryService(engine), None)
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE em_affective_state SET snapshot = 'no json'")

    async def ask() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            return [await http.get("/readyz"), await http.get("/v1/state"),
                    await http.get("/v1/state", params={"scope": "fine"})]

    ready, root, scope = asyncio.run(ask())
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}, ready.text
    assert root.status_code == 200 and scope.status_code == 200, (root.text, scope.text)
    states.close()


def test_requests_fail_fast_while_the_database_stays_unreachable(pg_server: Any) -> None:
    """Once a pool has given up reconnecting (the database refused it for its whole
    retry window), a request waits a short while for a connection, not the pool's
    30 s (each request held a worker thread that long, and clients timed out before
    the 503); the database back, the next request is served at once."""
    from emotional_memory.stores.postgres import PostgresStore, PostgresStoreError
    from emotional_memory.stores.postgres.common import RECONNECT_WINDOW_S

    name = "outage_fail_fast"
    dsn = pg_server.create_database(name)
    store = PostgresStore(dsn, max_connections=1)  # the pool's default 30 s wait
    try:
        kept: Memory = basic_memory("kept", [1.0, 0.0, 0.0])
        store.save(kept)
        with _refusing(pg_server, name):
            with contextlib.suppress(PostgresStoreError):
                store.get(kept.id)  # its connection was cut: discarded
            time.sleep(RECONNECT_WINDOW_S + 1.5)  # the pool's retries give up
            for _ in range(2):
                started = time.monotonic()
                with pytest.raises(StoreUnreachableError):
                    store.get(kept.id)
                assert time.monotonic() - started < 10.0, "a request waited the pool's 30 s"
        started = time.monotonic()
        got = store.get(kept.id)
        assert got is not None and got.content == "kept"
        assert time.monotonic() - started < 5.0
    finally:
        store.close()


def test_a_worker_started_while_the_database_is_down_says_so_in_one_line(
    tmp_path: Path,
) -> None:
    """``serve --workers N`` starts (and restarts) each worker process apart: one
    started while the database is down exits with status 2 and one line naming the
    database without its password (it printed a 40-line traceback, again at every
    restart by the supervisor while the outage lasted)."""
    import json
    import subprocess
    import sys

    from emotional_memory.server import cli
    from support.service_process import child_env, free_port

    secret = "pw-9f8e7d6c"
    args = cli._parser().parse_args(
        ["serve", "--no-auth", "--embedder", "hashing", "--workers", "2",
         "--store", f"postgresql://em:{secret}@127.0.0.1:{free_port()}/db"])
    env = {**child_env(), cli._WORKER_ARGS_ENV: json.dumps(vars(args))}
    done = subprocess.run(
        [sys.executable, "-c", "from emotional_memory.server.cli import worker_app; "
         "worker_app()"], env=env, capture_output=True, text=True, timeout=HANG,
    )
    err = done.stderr
    assert done.returncode == 2, err
    assert "Traceback" not in err and secret not in err, err
    lines = [line for line in err.splitlines() if line.startswith("emotional-memory: error:")]
    assert len(lines) == 1 and "127.0.0.1" in lines[0], err


@pytest.mark.parametrize("pool", ["data", "scope_locks"])
def test_the_first_request_of_an_outage_fails_fast(pg_server: Any, pool: str) -> None:
    """The database refusing connections before any pool gave up reconnecting: the
    first request short of a connection waited the pool's whole 30 s before its
    "cannot be reached" (the later ones 2 s); it is told within a few seconds now,
    from the memories' pool and from the scope locks' pool alike, and the database
    back, the next request is served."""
    from emotional_memory.stores.postgres import PostgresStore
    from emotional_memory.stores.postgres.state import PostgresAffectiveStateStore

    name = f"outage_first_{pool}"
    dsn = pg_server.create_database(name)
    store = PostgresStore(dsn, max_connections=1)  # the pool's default 30 s wait
    store._IDLE_CHECK_S = 0.0  # every pooled connection pinged: a cut one is replaced
    states = PostgresAffectiveStateStore.from_store(store)

    def request() -> None:
        if pool == "data":
            store.get(kept.id)
        else:
            with states.hold_scope(("alice",)):
                pass

    try:
        kept: Memory = basic_memory("kept", [1.0, 0.0, 0.0])
        store.save(kept)
        request()  # the pool has a connection (now idle) to lose
        with _refusing(pg_server, name):
            started = time.monotonic()
            with pytest.raises(StoreUnreachableError) as caught:
                request()
            assert time.monotonic() - started < 10.0, "it waited the pool's 30 s"
            assert pg_server.password not in str(caught.value)
        started = time.monotonic()
        request()
        assert time.monotonic() - started < 5.0
        assert store.get(kept.id) is not None
    finally:
        store.close()


def test_the_service_answers_the_first_request_of_an_outage_fast(
    pg_server: Any, tmp_path: Path
) -> None:
    """Over HTTP: while the database refuses connections, every request is answered
    within a few seconds, a 503 saying it cannot be reached (not after 30 s, when a
    client or proxy has long given up); the database back, a write is served."""
    name = "outage_first_http"
    dsn = pg_server.create_database(name)
    server = start(["--no-auth", "--store", dsn, "--embedder", "hashing"],
                   tmp_path / "serve.log")
    try:
        with httpx.Client(base_url=server.url, timeout=HANG) as http:
            assert http.post("/v1/memories", json={"content": "kept"}).status_code == 201
            with _refusing(pg_server, name):
                answers = []
                for _ in range(3):  # the first may find its pooled connection cut
                    started = time.monotonic()
                    answers.append(http.post("/v1/memories", json={"content": "lost"}))
                    assert time.monotonic() - started < 10.0, "it waited the pool's 30 s"
                unreachable = [a for a in answers if a.status_code == 503
                               and "cannot be reached" in a.text]
                assert unreachable, [a.text for a in answers]
                assert all(pg_server.password not in a.text for a in answers)
            deadline = time.monotonic() + HANG
            while (back := http.post("/v1/memories", json={"content": "back"})).status_code \
                    != 201:
                assert time.monotonic() < deadline, back.text
                time.sleep(0.5)
            listed = http.get("/v1/memories").json()["memories"]
            assert sorted(m["content"] for m in listed) == ["back", "kept"]
    finally:
        assert server.stop() == 0, server.log_text()
