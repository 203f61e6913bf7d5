"""Start ``emotional-memory serve`` as a real process on a free 127.0.0.1 port (tests)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

START_TIMEOUT = 180.0  # seconds: importing JAX on a busy 2-core machine is slow


def free_port() -> int:
    """A TCP port nothing listens on right now (127.0.0.1)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def command(*args: str) -> list[str]:
    """The ``emotional-memory`` command line, run by this interpreter.

    ``python -m emotional_memory.server`` is the console script's own entry point
    (``emotional_memory.server.cli:main``); it works from a source checkout too.
    """
    return [sys.executable, "-m", "emotional_memory.server", *args]


def child_env() -> dict[str, str]:
    """The environment for a server process: this one, with ``src`` importable."""
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


@dataclass
class Server:
    """A running server process.

    Attributes:
        url: ``http://127.0.0.1:PORT``.
        proc: the process.
        log: the file its stdout and stderr go to.
    """

    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> int:
        """Stop it gracefully (SIGINT, as Ctrl-C), then by force; returns its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log_text(self) -> str:
        """Everything the process wrote so far."""
        return self.log.read_text(encoding="utf-8", errors="replace")


def start(
    args: Sequence[str], log: Path, *, port: int | None = None, cwd: Path | None = None
) -> Server:
    """Start ``emotional-memory serve ARGS --host 127.0.0.1 --port PORT`` and wait for it.

    Args:
        args: the arguments after ``serve`` (store, keys, ...).
        log: file for the process's output.
        port: the port (default: a free one).
        cwd: its working directory (default: this process's).

    Returns:
        The server, answering ``GET /healthz``.

    Raises:
        RuntimeError: it exited or did not answer within ``START_TIMEOUT`` (the
            message holds its output).
    """
    port = free_port() if port is None else port
    out = log.open("wb")
    proc = subprocess.Popen(
        command("serve", *args, "--host", "127.0.0.1", "--port", str(port)),
        stdout=out,
        stderr=subprocess.STDOUT,
        env=child_env(),
        cwd=cwd,
    )
    out.close()
    server = Server(f"http://127.0.0.1:{port}", proc, log)
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}):\n{server.log_text()}")
        try:
            if httpx.get(f"{server.url}/healthz", timeout=2.0).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"the server did not start:\n{server.log_text()}")
        time.sleep(0.1)
