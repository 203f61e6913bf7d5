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
- Every PostgreSQL connection of the server killed (``pg_terminate_backend``, as a
  database restart or failover does): each request after it gets an answer on the
  same keep-alive connection (a 500 naming no secret, or its normal answer; a 500
  used to close the connection under the client, whose next request then failed
  with a reset), nothing half written, and the service recovers.
- ``serve --workers 2`` on SQLite sent SIGTERM while clients write batches: the
  supervisor and its workers exit, every batch answered 201 is there, every other
  one all or nothing, the file is intact, and a server restarted on it answers the
  same memories and states and goes on.

Every wait here is bounded by the HTTP client's 60 s timeout ("does not hang"); no
test asserts a duration.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import signal
import sqlite3
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
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            ).fetchone()
            waiting = row[0] if row is not None else 0
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


def test_sigterm_during_batches_stops_every_worker_and_loses_nothing(tmp_path: Path) -> None:
    import psutil

    db = tmp_path / "memories.db"
    args = ["--no-auth", "--store", f"sqlite:///{db}", "--embedder", "hashing"]
    server = start([*args, "--workers", "2"], tmp_path / "workers.log")
    workers = psutil.Process(server.proc.pid).children(recursive=True)
    answered: list[tuple[int, int]] = []  # (client, batch) answered 201
    started = concurrent.futures.Future[None]()

    def client(i: int) -> None:
        with httpx.Client(base_url=server.url, timeout=HANG) as http:
            for j in range(1000):
                items = [{"content": f"client {i} batch {j} item {k}",
                          "metadata": {"c": i, "b": j}} for k in range(20)]
                try:
                    r = http.post("/v1/memories/batch", json={"items": items, "scope": [f"c{i}"]})
                    http.put("/v1/state/affect", json={"valence": 0.1 * (j % 10),
                                                       "arousal": 0.5, "scope": [f"c{i}"]})
                except httpx.TransportError:
                    return  # the server went away
                if r.status_code != 201:
                    return  # 503 or a closing connection's answer: the server stops
                answered.append((i, j))
                if len(answered) >= 8 and not started.done():
                    started.set_result(None)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        clients = [pool.submit(client, i) for i in range(4)]
        started.result(timeout=HANG)
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=HANG) == 0, server.log_text()
        for done in clients:
            done.result(timeout=HANG)
    _, alive = psutil.wait_procs(workers, timeout=HANG)
    assert not alive, f"workers still running: {alive}"

    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    second = start(args, tmp_path / "restarted.log")
    try:
        with httpx.Client(base_url=second.url, timeout=HANG) as http:
            memories: list[dict[str, Any]] = []
            while page := http.get("/v1/memories", params={"limit": 1000, "offset": len(memories)}
                                   ).raise_for_status().json()["memories"]:
                memories.extend(page)
            sizes: dict[tuple[int, int], int] = {}
            for m in memories:
                key = (m["metadata"]["c"], m["metadata"]["b"])
                sizes[key] = sizes.get(key, 0) + 1
            assert set(sizes.values()) == {20}, "a batch was stored in part"
            assert set(answered) <= set(sizes)
            states = [http.get("/v1/state", params={"scope": f"c{i}"}).raise_for_status().json()
                      for i in range(4)]
            http.post("/v1/memories", json={"content": "after the restart"}).raise_for_status()
    finally:
        assert second.stop() == 0, second.log_text()
    third = start(args, tmp_path / "third.log")  # once more: the same answers
    try:
        with httpx.Client(base_url=third.url, timeout=HANG) as http:
            assert [http.get("/v1/state", params={"scope": f"c{i}"}).json()
                    for i in range(4)] == states
            listed = http.get("/v1/memories", params={"limit": 1000}).json()["memories"]
            assert [m["id"] for m in listed][:len(memories)] == [m["id"] for m in memories][:1000]
    finally:
        assert third.stop() == 0, third.log_text()


def test_killed_database_connections_answer_cleanly_and_the_service_recovers(
    keys_file: Path, tmp_path: Path, pg_server: Any
) -> None:
    import psycopg

    dsn = pg_server.create_database("failures_killed")
    server = start(["--keys", str(keys_file), "--store", dsn, "--embedder", "hashing"],
                   tmp_path / "serve.log")
    try:
        with httpx.Client(base_url=server.url, timeout=HANG) as http:
            for i in range(4):
                post_memory(http, ALICE, {"content": f"before {i}"})
                assert http.post("/v1/search", headers=auth(ALICE),
                                 json={"query": "before"}).status_code == 200
            with psycopg.connect(dsn, autocommit=True) as admin:
                row = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()
            killed = row[0] if row is not None else 0
            assert killed >= 2  # a data connection and a scope-lock connection
            stored = []
            for i in range(12):  # one keep-alive connection: every request answered
                r = http.post("/v1/memories", headers=auth(ALICE), json={"content": f"after {i}"})
                assert r.status_code in (201, 500), r.text
                if r.status_code == 500:
                    assert r.json() == {"detail": "internal server error"}
                else:
                    stored.append(f"after {i}")
            assert stored and stored[-1] == "after 11", "the service did not recover"
            contents = [m["content"] for m in all_memories(http, ALICE)]
            assert contents == [f"before {i}" for i in range(4)] + stored
    finally:
        assert server.stop() == 0, server.log_text()
    log = server.log_text()
    assert pg_server.password not in log
    if len(stored) < 12:  # each 500's traceback is in the server's log
        assert "unhandled PostgresStoreError" in log, log


def test_a_sqlite_file_locked_by_another_process_is_a_503_busy(
    keys_file: Path, tmp_path: Path
) -> None:
    """Another process holding the file's write lock past the busy timeout (bounded by
    --statement-timeout) is SQLite's "database is locked": a 503 'busy' with nothing
    changed (was a 500), and the service goes on once the lock is released."""
    db = tmp_path / "memories.db"
    server = start(["--keys", str(keys_file), "--store", f"sqlite:///{db}", "--embedder",
                    "hashing", "--statement-timeout", "1"], tmp_path / "serve.log")
    try:
        with httpx.Client(base_url=server.url, timeout=HANG) as http:
            post_memory(http, ALICE, {"content": "before the lock"})
            state = http.get("/v1/state", headers=auth(ALICE)).json()
            other = sqlite3.connect(db, isolation_level=None)
            try:
                other.execute("BEGIN IMMEDIATE")  # the file's one writer, as another process
                refused = http.post("/v1/memories", headers=auth(ALICE), json={
                    "content": "while locked", "affect": {"valence": -0.9, "arousal": 0.9}})
                assert refused.status_code == 503, refused.text
                assert "busy" in refused.json()["detail"]
                assert refused.headers["retry-after"] == "1"
            finally:
                other.execute("ROLLBACK")
                other.close()
            assert [m["content"] for m in all_memories(http, ALICE)] == ["before the lock"]
            assert http.get("/v1/state", headers=auth(ALICE)).json() == state
            post_memory(http, ALICE, {"content": "after the lock"})
    finally:
        assert server.stop() == 0, server.log_text()
    assert "database busy" in server.log_text()


@pytest.mark.parametrize("foreign", ["list", "object", "text"])
def test_a_scope_state_spoiled_in_redis_is_a_500_naming_no_key(
    tmp_path: Path, redis_url: str, foreign: str
) -> None:
    """Another program's value under a scope's state key in Redis (a list, a JSON
    object that is no state, text that is no JSON): that is the server's data, not
    the client's input, so a request on the scope answers 500 (was 422 blaming the
    request, with the internal key in the message), stores nothing and leaves the
    value as it is; the log says so; other scopes are served."""
    import redis

    from emotional_memory.stores._shared.state import scoped_key
    from emotional_memory.stores.redis.state import DEFAULT_REDIS_KEY

    server = start(["--store", "memory://", "--state", redis_url, "--embedder", "hashing",
                    "--no-auth"], tmp_path / "serve.log")
    client = redis.Redis.from_url(redis_url)
    key = scoped_key(DEFAULT_REDIS_KEY, ("spoiled",))
    try:
        client.delete(key)
        if foreign == "list":
            client.rpush(key, "x")
        else:
            client.set(key, '{"a": 1}' if foreign == "object" else "no json")
        with httpx.Client(base_url=server.url, timeout=HANG) as http:
            for method, url, body in (
                ("POST", "/v1/memories", {"content": "x", "scope": ["spoiled"]}),
                ("POST", "/v1/search", {"query": "x", "scope": ["spoiled"]}),
                ("POST", "/v1/memories", {"content": "y", "scope": ["spoiled"]}),
            ):
                r = http.request(method, url, json=body)
                assert r.status_code == 500, r.text
                assert key not in r.text and "spoiled" not in r.text
            r = http.get("/v1/memories")  # the root sees every scope: nothing stored
            assert r.status_code == 200 and r.json()["memories"] == []
            r = http.post("/v1/memories", json={"content": "x", "scope": ["fine"]})
            assert r.status_code == 201, r.text
        assert client.type(key) == (b"list" if foreign == "list" else b"string")
    finally:
        client.delete(key)
        server.stop()
    log = " ".join((tmp_path / "serve.log").read_text().split())  # lines wrapped
    assert "StoredStateError on POST /v1/memories" in log and "not a state snapshot" in log
