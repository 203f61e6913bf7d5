"""Scope locks across processes on one SQLite file: ``flock`` on files beside it.

An engine with ``shared_state`` holds its scope for the whole of each operation
(:func:`~emotional_memory.stores._shared.scope_hold.lock_plan`: the path exclusive,
its prefixes shared) outside the store's transactions, so ranking and embedding run
with the database unlocked and other scopes' operations go on; only the short write
transactions take SQLite's file lock. Each lock is an ``flock`` on a file in the
directory ``<database>.scope-locks`` (one small file per scope path, named by its
hash): ``flock`` belongs to an open file, so threads of one process exclude each other
as processes do, and a process that dies releases its locks. POSIX only: where
``fcntl`` is missing (Windows), operations of one process are still serialised by the
engine, but not those of other processes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from emotional_memory.stores._shared.scope_hold import lock_plan

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["hold_scope", "lock_directory"]


def lock_directory(database: str) -> str | None:
    """The directory of ``database``'s scope-lock files, or None for a private database.

    Args:
        database: the SQLite file's path (``":memory:"`` or ``""``: private).

    Returns:
        ``<absolute path>.scope-locks``, or None.
    """
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return os.path.abspath(database) + ".scope-locks"


@contextmanager
def hold_scope(database: str, path: tuple[str, ...]) -> Iterator[None]:
    """Hold scope ``path`` of ``database`` against overlapping operations anywhere.

    Args:
        database: the SQLite file's path.
        path: the operation's scope path (``()``: the root, which excludes all).

    Yields:
        None, while the locks are held (nothing is locked for a private database).
    """
    directory = lock_directory(database)
    if directory is None or fcntl is None:
        yield
        return
    os.makedirs(directory, mode=0o700, exist_ok=True)
    fds: list[int] = []
    try:
        for name, exclusive in lock_plan("", path):
            fd = os.open(os.path.join(directory, name.hex()[:32]), os.O_RDWR | os.O_CREAT, 0o600)
            fds.append(fd)
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        for fd in reversed(fds):
            os.close(fd)  # closing the file releases its flock
