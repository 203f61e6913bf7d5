"""``emotional-memory serve`` (one process) sent SIGTERM, as systemd, Docker or
Kubernetes stop a service: it finishes the request in flight, then exits with
status 0 (it exited killed by the signal, status -15 / 143, which such supervisors
report as a failure; SIGINT and ``--workers N`` already exited 0), and the SQLite
file is intact with the request's memory in it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import signal
import socket
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")

from emotional_memory.stores.sqlite.scope_locks import hold_scope
from support.service_process import start

HANG = 60.0
"""The HTTP client's and the exit's timeout: not done by then hangs."""


def test_sigterm_finishes_the_request_in_flight_and_exits_0(tmp_path: Path) -> None:
    db = tmp_path / "memories.db"
    server = start(["--no-auth", "--store", f"sqlite:///{db}", "--embedder", "hashing",
                    "--statement-timeout", "30"], tmp_path / "serve.log")
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool, \
                hold_scope(str(db), ("alice",)):
            # the request waits for its scope, held here as by another worker
            pending = pool.submit(httpx.post, f"{server.url}/v1/memories", timeout=HANG,
                                  json={"content": "in flight", "scope": ["alice"]})
            time.sleep(1.0)
            assert not pending.done(), pending.result().text
            server.proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            assert server.proc.poll() is None, "it did not wait for the request"
        answer = pending.result(timeout=HANG)
        assert answer.status_code == 201, answer.text
        assert server.proc.wait(timeout=HANG) == 0, server.log_text()
    finally:
        server.stop()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    restarted = start(["--no-auth", "--store", f"sqlite:///{db}", "--embedder", "hashing"],
                      tmp_path / "restarted.log")
    try:
        listed = httpx.get(f"{restarted.url}/v1/memories", timeout=HANG).json()["memories"]
        assert [m["content"] for m in listed] == ["in flight"]
    finally:
        assert restarted.stop() == 0, restarted.log_text()


LIMIT = 2.0
"""``--shutdown-timeout`` of the tests below (seconds)."""


def test_a_request_stuck_in_the_database_does_not_keep_a_stopped_server_alive(
    pg_server: Any, tmp_path: Path
) -> None:
    """A request whose database call never returns (a table lock held by another
    session, no statement timeout) kept the process alive after SIGTERM for as long as
    it lasted; it is cut at ``--shutdown-timeout``, and the process, which cannot
    cancel the call, exits with status 1 once ``CLOSE_GRACE_S`` more have passed,
    saying why; nothing of the request is stored."""
    import psycopg

    from emotional_memory.server.shutdown import CLOSE_GRACE_S, FORCED_EXIT_STATUS

    dsn = pg_server.create_database("shutdown_stuck")
    server = start(["--no-auth", "--store", dsn, "--embedder", "hashing",
                    "--statement-timeout", "0", "--shutdown-timeout", str(LIMIT)],
                   tmp_path / "serve.log")
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool, \
                psycopg.connect(dsn) as locker:
            locker.execute("LOCK TABLE emotional_memory_memories IN ACCESS EXCLUSIVE MODE")
            pending = pool.submit(httpx.post, f"{server.url}/v1/memories", timeout=HANG,
                                  json={"content": "stuck"})
            time.sleep(1.0)
            assert not pending.done(), pending.result().text
            server.proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            try:
                status = server.proc.wait(timeout=LIMIT + CLOSE_GRACE_S + 10)
            except subprocess.TimeoutExpired:
                raise AssertionError("the stopped server waits for its request") from None
            assert time.monotonic() - signalled >= LIMIT
            locker.rollback()
            with contextlib.suppress(httpx.HTTPError):
                assert pending.result(timeout=HANG).status_code != 201
        assert status == FORCED_EXIT_STATUS, server.log_text()
        assert "still busy" in server.log_text()
        with psycopg.connect(dsn) as check:
            stored = check.execute("SELECT count(*) FROM emotional_memory_memories")
            assert stored.fetchone() == (0,)
    finally:
        server.stop()


def test_a_request_whose_body_never_comes_is_cut_at_the_limit(tmp_path: Path) -> None:
    """A client that sends half a body and stalls kept the stopped process alive (it
    waited for the body); at ``--shutdown-timeout`` the request is cut and the process
    exits cleanly, status 0."""
    server = start(["--no-auth", "--store", f"sqlite:///{tmp_path / 'm.db'}",
                    "--embedder", "hashing", "--shutdown-timeout", str(LIMIT)],
                   tmp_path / "serve.log")
    port = int(server.url.rsplit(":", 1)[1])
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=HANG) as client:
            client.sendall(b"POST /v1/memories HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           b"Content-Type: application/json\r\nContent-Length: 100\r\n"
                           b'\r\n{"content": ')
            time.sleep(1.0)
            server.proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            try:
                status = server.proc.wait(timeout=LIMIT + 10)
            except subprocess.TimeoutExpired:
                raise AssertionError("the stopped server waits for the body") from None
            assert time.monotonic() - signalled >= LIMIT - 0.5
            # it is told to retry (a 503, was a 500) and the log says so in one line
            # (was uvicorn's "Exception in ASGI application" and a traceback)
            answer = b""
            while chunk := client.recv(4096):
                answer += chunk
        assert status == 0, server.log_text()
        assert answer.startswith(b"HTTP/1.1 503 "), answer
        assert b"retry-after: 1" in answer.lower() and b"shutting down" in answer
        log = server.log_text()
        # (the MCP SDK's rich log handler may wrap the line around its source place)
        assert "POST /v1/memories cut at the" in log and "shutdown limit" in log, log
        assert "Traceback" not in log and "Exception in ASGI" not in log, log
    finally:
        server.stop()
