"""``emotional-memory serve`` (one process) sent SIGTERM, as systemd, Docker or
Kubernetes stop a service: it finishes the request in flight, then exits with
status 0 (it exited killed by the signal, status -15 / 143, which such supervisors
report as a failure; SIGINT and ``--workers N`` already exited 0), and the SQLite
file is intact with the request's memory in it.
"""

from __future__ import annotations

import concurrent.futures
import signal
import sqlite3
import time
from pathlib import Path

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
