"""Scope locks across processes on one SQLite file: ``flock`` on files beside it.

An engine with ``shared_state`` holds its scope for the whole of each operation
(:func:`~emotional_memory.stores._shared.scope_hold.lock_plan`: the path exclusive,
its prefixes shared) outside the store's transactions, so ranking and embedding run
with the database unlocked and other scopes' operations go on; only the short write
transactions take SQLite's file lock. Each lock is an ``flock`` on a file in the
directory ``<database>.scope-locks``: the root's own file, and :data:`STRIPES` files
that the other scope paths share by their hash, so the directory holds at most
``STRIPES + 1`` files however many scopes clients name (one file per scope let any
request, a read of a scope never written included, leave a file behind). Two paths on
one stripe only wait for each other more often than needed; an operation takes its
stripes in one global order (the root, then by number, each once, exclusive when any
of its paths is), so no two holders deadlock. ``flock`` belongs to an open file, so
threads of one process exclude each other as processes do, and a process that dies
releases its locks. A wait is bounded when the holder gives a timeout: past it the
operation fails with :class:`ScopeHoldTimeout` (a stuck holder elsewhere never
hangs a request). POSIX only: where
``fcntl`` is missing (Windows), operations of one process are still serialised by the
engine, but not those of other processes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from emotional_memory.stores._shared.scope_hold import ScopeHoldTimeout, lock_plan

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["STRIPES", "ScopeHoldTimeout", "hold_scope", "lock_directory", "stripe_plan"]

STRIPES = 4096
"""Lock files the scope paths other than the root share (by hash)."""


_POLL_MAX_S = 0.05
"""Longest pause between two tries of a bounded wait."""


def _lock(fd: int, mode: int, deadline: float | None, path: tuple[str, ...]) -> None:
    """``flock(fd, mode)``, blocking, or tried until ``deadline`` (monotonic).

    Raises:
        ScopeHoldTimeout: still held elsewhere at the deadline.
    """
    if deadline is None:
        fcntl.flock(fd, mode)
        return
    pause = 0.001
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ScopeHoldTimeout(
                    f"scope {list(path)} stayed held by another operation past the "
                    "wait's bound; nothing was changed"
                ) from None
            time.sleep(min(pause, left))
            pause = min(pause * 2, _POLL_MAX_S)


def lock_directory(database: str) -> str | None:
    """The directory of ``database``'s scope-lock files, or None for a private database.

    Args:
        database: the SQLite file's path (``":memory:"`` or ``""``: private).

    Returns:
        ``<real path>.scope-locks``, or None. The path with symlinks resolved (as
        SQLite resolves them for its WAL file): workers naming one file by different
        paths share its locks.
    """
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return os.path.realpath(database) + ".scope-locks"


def stripe_plan(path: tuple[str, ...]) -> list[tuple[str, bool]]:
    """The lock files an operation on ``path`` takes, in acquisition order.

    Args:
        path: the operation's scope path.

    Returns:
        ``(file name, exclusive)`` pairs: ``"root"`` first (exclusive only for the
        root itself), then each stripe of the path and its other prefixes once, by
        number, exclusive when the path itself falls on it.
    """
    root, *rest = lock_plan("", path)
    stripes: dict[int, bool] = {}
    for name, exclusive in rest:
        stripe = int.from_bytes(name[:8], "big") % STRIPES
        stripes[stripe] = stripes.get(stripe, False) or exclusive
    return [("root", root[1]), *((f"{k:04d}", stripes[k]) for k in sorted(stripes))]


@contextmanager
def hold_scope(
    database: str, path: tuple[str, ...], timeout: float | None = None
) -> Iterator[None]:
    """Hold scope ``path`` of ``database`` against overlapping operations anywhere.

    Args:
        database: the SQLite file's path.
        path: the operation's scope path (``()``: the root, which excludes all).
        timeout: seconds to wait for overlapping holders, all locks together
            (None: as long as they hold).

    Yields:
        None, while the locks are held (nothing is locked for a private database).

    Raises:
        ScopeHoldTimeout: ``timeout`` passed with an overlapping scope still held
            (the locks taken so far are released).
    """
    directory = lock_directory(database)
    if directory is None or fcntl is None:
        yield
        return
    os.makedirs(directory, mode=0o700, exist_ok=True)
    deadline = None if timeout is None else time.monotonic() + timeout
    fds: list[int] = []
    try:
        for name, exclusive in stripe_plan(path):
            fd = os.open(os.path.join(directory, name), os.O_RDWR | os.O_CREAT, 0o600)
            fds.append(fd)
            _lock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, deadline, path)
        yield
    finally:
        for fd in reversed(fds):
            os.close(fd)  # closing the file releases its flock
