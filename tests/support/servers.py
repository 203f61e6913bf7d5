"""Real servers for the tests, each on a free 127.0.0.1 port: ``redis-server`` and a
Chroma server (``chroma run``, shipped with chromadb). PostgreSQL is in
:mod:`support.pg_server`. The session fixtures of ``tests/conftest.py`` start them
once per test session (per xdist worker)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

START_TIMEOUT = 60.0  # seconds


def free_port() -> int:
    """A TCP port nothing listens on right now (127.0.0.1)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def redis_binary() -> str | None:
    """The ``redis-server`` binary, or None when it is not installed."""
    return shutil.which("redis-server")


@contextmanager
def redis_server(workdir: Path) -> Iterator[str]:
    """A throwaway ``redis-server`` without persistence; yields its ``redis://`` URL.

    Raises:
        RuntimeError: when ``redis-server`` is missing or does not answer in time.
    """
    import redis

    binary = redis_binary()
    if binary is None:
        raise RuntimeError("redis-server binary not found (apt-get install redis-server)")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                if client.ping():
                    break
            except redis.exceptions.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        client.close()
        yield url
    finally:
        _stop(proc)


def chroma_cli() -> str | None:
    """The ``chroma`` command (chromadb's server), or None when it is not installed."""
    cli = shutil.which("chroma") or str(Path(sys.executable).parent / "chroma")
    return cli if Path(cli).exists() else None


@contextmanager
def chroma_server(workdir: Path) -> Iterator[int]:
    """A Chroma server (``chroma run``) keeping its data in ``workdir``; yields its port.

    Raises:
        RuntimeError: when the CLI is missing or the server does not answer in time.
    """
    import chromadb

    cli = chroma_cli()
    if cli is None:
        raise RuntimeError("the chroma CLI (chromadb's server) is not installed")
    port = free_port()
    proc = subprocess.Popen(
        [cli, "run", "--path", str(workdir), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                chromadb.HttpClient(host="127.0.0.1", port=port).heartbeat()
                break
            except Exception:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("chroma server did not start") from None
                time.sleep(0.2)
        yield port
    finally:
        _stop(proc)
