"""The service's failure paths, against real ``emotional-memory serve`` processes.

- A scope held by a stuck operation of another process (a PostgreSQL advisory lock
  or an SQLite ``flock``, as a hung worker would hold it) bounds the wait of a
  request on that scope by ``--statement-timeout``: a 503 naming no secret, nothing
  stored, the scope's state unchanged, other scopes served meanwhile, and the scope
  served again once the hold ends.
- Every PostgreSQL connection of a worker held by slow requests (their reads wait
  for a table another session locked): another request waits a bounded time for a
  connection, then gets a 503 saying the database is busy, with nothing stored; the
  slow requests finish once the table is free, and the service goes on.

Every wait here is bounded by the HTTP client's 60 s timeout ("does not hang"); no
test asserts a duration.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")

from emotional_memory.stores._shared.scope_hold import lock_plan
from emotional_memory.stores.sqlite.scope_locks import hold_scope
from support.rest_keys import ADMIN, ALICE, BOB, KEYS, all_memories, auth, post_memory
from support.service_process import start

HANG = 60.0
"""The HTTP client's timeout: a request not answered by then hangs."""


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(KEYS), encoding="utf-8")
    return path


@contextlib.contextmanager
def _pg_hold(dsn: str, path: tuple[str, ...]) -> Iterator[None]:
    """Hold ``path`` as a stuck operation of another service process would: its
    advisory locks, on a connection of this process."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, exclusive in lock_plan("emotional_memory:scopes", path):
            key = int.from_bytes(name[:8], "big", signed=True)
            conn.execute("SELECT pg_advisory_lock(%s)" if exclusive
                         else "SELECT pg_advisory_lock_shared(%s)", (key,))
        yield


def _stuck_scope_is_refused(url: str, hold: contextlib.AbstractContextManager[None],
                            secret: str | None) -> None:
    with httpx.Client(base_url=url, timeout=HANG) as http:
        post_memory(http, ALICE, {"content": "before the hold"})
        state = http.get("/v1/state", headers=auth(ALICE)).json()
        with hold:
            refused = http.post("/v1/memories", headers=auth(ALICE), json={
                "content": "while held", "affect": {"valence": -0.9, "arousal": 0.9}})
            assert refused.status_code == 503, refused.text
            if secret is not None:
                assert secret not in refused.text
            searched = http.post("/v1/search", headers=auth(ALICE), json={"query": "held"})
            assert searched.status_code == 503, searched.text
            post_memory(http, BOB, {"content": "another scope goes on"})
        assert [m["content"] for m in all_memories(http, ALICE)] == ["before the hold"]
        assert http.get("/v1/state", headers=auth(ALICE)).json() == state
        post_memory(http, ALICE, {"content": "after the hold"})
        found = http.post("/v1/search", headers=auth(ALICE), json={"query": "hold"})
        assert found.status_code == 200, found.text


def test_a_scope_held_by_a_stuck_process_is_a_503_on_postgresql(
    keys_file: Path, tmp_path: Path, pg_server: Any
) -> None:
    dsn = pg_server.create_database("failures_held_scope")
    server = start(["--keys", str(keys_file), "--store", dsn, "--embedder", "hashing",
                    "--statement-timeout", "2"], tmp_path / "serve.log")
    try:
        _stuck_scope_is_refused(server.url, _pg_hold(dsn, ("alice",)), pg_server.password)
    finally:
        assert server.stop() == 0, server.log_text()
    assert pg_server.password not in server.log_text()


def test_a_scope_held_by_a_stuck_process_is_a_503_on_sqlite(
    keys_file: Path, tmp_path: Path
) -> None:
    db = tmp_path / "memories.db"
    server = start(["--keys", str(keys_file), "--store", f"sqlite:///{db}", "--embedder",
                    "hashing", "--statement-timeout", "2"], tmp_path / "serve.log")
    try:
        # an flock of this process on the scope's lock files, as another worker's
        _stuck_scope_is_refused(server.url, hold_scope(str(db), ("alice",)), None)
    finally:
        assert server.stop() == 0, server.log_text()


def _wait_for_lock_waiters(dsn: str, count: int) -> None:
    """Until ``count`` sessions wait for a heavyweight lock (polled, bounded; each
    poll its own transaction: a transaction sees one snapshot of the statistics)."""
    import psycopg

    deadline = time.monotonic() + HANG
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            waiting = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            ).fetchone()[0]
            if waiting >= count:
                return
            assert time.monotonic() < deadline, f"only {waiting} of {count} requests wait"
            time.sleep(0.05)


def test_an_exhausted_postgresql_pool_is_a_503_not_a_hang(
    keys_file: Path, tmp_path: Path, pg_server: Any
) -> None:
    import psycopg

    from emotional_memory.stores.postgres.store import PostgresStore

    dsn = pg_server.create_database("failures_pool")
    # the service's data pool: PostgresStore's default size (url.py opens it so)
    pool_size = PostgresStore.__init__.__kwdefaults__["max_connections"]
    server = start(["--keys", str(keys_file), "--store", dsn, "--embedder", "hashing",
                    "--statement-timeout", "0"], tmp_path / "serve.log")
    scopes = [[f"slow{i}"] for i in range(pool_size)]
    try:
        with httpx.Client(base_url=server.url, timeout=HANG) as http:
            for scope in [*scopes, ["late"]]:
                post_memory(http, ADMIN, {"content": "a memory", "scope": scope})
            before = [(m["id"], m["content"]) for m in all_memories(http, ADMIN)]
            with (psycopg.connect(dsn) as blocker,
                  concurrent.futures.ThreadPoolExecutor(pool_size) as pool):
                blocker.execute("LOCK TABLE emotional_memory_memories IN ACCESS EXCLUSIVE MODE")
                slow = [pool.submit(httpx.post, f"{server.url}/v1/search", headers=auth(ADMIN),
                                    json={"query": "memory", "scope": scope}, timeout=HANG)
                        for scope in scopes]
                _wait_for_lock_waiters(dsn, pool_size)  # every connection is held
                busy = http.post("/v1/memories", headers=auth(ADMIN),
                                 json={"content": "no connection", "scope": ["late"]})
                assert busy.status_code == 503, busy.text
                assert "busy" in busy.json()["detail"], busy.text
                assert pg_server.password not in busy.text
                blocker.rollback()  # the table is free: the slow requests finish
                for done in slow:
                    assert done.result().status_code == 200, done.result().text
            # the searches counted their retrievals; nothing else changed
            assert [(m["id"], m["content"]) for m in all_memories(http, ADMIN)] == before
            post_memory(http, ADMIN, {"content": "served again", "scope": ["late"]})
    finally:
        assert server.stop() == 0, server.log_text()
    assert pg_server.password not in server.log_text()
