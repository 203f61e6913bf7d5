"""Exclusion by scope path: operations on disjoint scopes run at the same time.

Two scope paths *overlap* when one is a prefix of the other (equal paths included):
an operation of the view ``("alice",)`` sees ``("alice", "notes")``'s memories, so
the two must not interleave, while ``("alice",)`` and ``("bob",)`` share nothing.
The root ``()`` overlaps every path.

:class:`ScopeLocks` is the threads' table (the synchronous engine: a thread holding a
path may take it, or any overlapping path, again), :class:`AsyncScopeLocks` one event
loop's (the async engine queues its operations there, so a waiting operation holds
no worker thread). Both hand turns out first come, first served among overlapping
paths: an operation waits for the earlier ones it overlaps, never for later ones, so
a stream of operations on sub-scopes cannot starve an operation on their parent.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Iterator

__all__ = ["AsyncScopeLocks", "ScopeLocks", "overlap"]

Path = tuple[str, ...]


def overlap(a: Path, b: Path) -> bool:
    """Whether operations on paths ``a`` and ``b`` must exclude each other.

    Args:
        a: a scope path.
        b: another.

    Returns:
        True when one is a prefix of the other (the root overlaps everything).
    """
    n = min(len(a), len(b))
    return a[:n] == b[:n]


class ScopeLocks:
    """A re-entrant lock per scope path, shared by an engine and all its views.

    A thread waits until no other thread holds an overlapping path and no earlier
    waiter wants one; a thread that already holds an overlapping path (a nested call)
    proceeds at once.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._held: dict[Path, tuple[int, int]] = {}  # path -> (owner thread, depth)
        self._waiting: dict[int, Path] = {}  # ticket -> path, in arrival order
        self._tickets = itertools.count()
        # shared states: paths whose cross-process locks a holder here has taken (count),
        # and the out-of-turn state changes pinning them (path -> count)
        self._database: dict[Path, int] = {}
        self._pins: dict[Path, int] = {}

    def _blocked(self, path: Path, me: int, ticket: int | None) -> bool:
        if any(owner != me and overlap(path, p) for p, (owner, _) in self._held.items()):
            return True
        if ticket is None:
            return False
        return any(t < ticket and overlap(path, p) for t, p in self._waiting.items())

    def _nested(self, path: Path, me: int) -> bool:
        return any(owner == me and overlap(path, p) for p, (owner, _) in self._held.items())

    def acquire(self, path: Path, blocking: bool = True) -> bool:
        """Take ``path``'s turn.

        Args:
            path: the scope path.
            blocking: wait for the turn (else return False at once when busy).

        Returns:
            Whether the turn was taken.
        """
        me = threading.get_ident()
        with self._cond:
            if not blocking or self._nested(path, me):  # a nested call never queues
                if self._blocked(path, me, None):
                    if not blocking:
                        return False
                    self._cond.wait_for(lambda: not self._blocked(path, me, None))
            else:
                ticket = next(self._tickets)
                self._waiting[ticket] = path
                try:
                    self._cond.wait_for(lambda: not self._blocked(path, me, ticket))
                finally:
                    del self._waiting[ticket]
                    self._cond.notify_all()
            _, depth = self._held.get(path, (me, 0))
            self._held[path] = (me, depth + 1)
            return True

    def release(self, path: Path) -> None:
        """Give ``path``'s turn back (once per :meth:`acquire`)."""
        with self._cond:
            owner, depth = self._held[path]
            if depth > 1:
                self._held[path] = (owner, depth - 1)
            else:
                del self._held[path]
            self._cond.notify_all()

    @contextlib.contextmanager
    def hold(self, path: Path) -> Iterator[None]:
        """``with locks.hold(path):`` the block runs in ``path``'s turn."""
        self.acquire(path)
        try:
            yield
        finally:
            self.release(path)

    @contextlib.contextmanager
    def database_held(self, path: Path) -> Iterator[None]:
        """Mark ``path``'s cross-process locks (shared states) as held by an operation
        of this process while the block runs. Leaving it waits for the out-of-turn
        state changes pinning an overlapping path (:meth:`pin`): they write under the
        locks this operation holds, so the locks outlive their writes."""
        with self._cond:
            self._database[path] = self._database.get(path, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                self._cond.wait_for(lambda: not any(overlap(path, p) for p in self._pins))
                if self._database[path] > 1:
                    self._database[path] -= 1
                else:
                    del self._database[path]

    def database_cover(self, path: Path) -> Path | None:
        """The path whose cross-process locks an operation of this thread holds and
        that overlaps ``path`` (a call nested in that operation), or None.

        Args:
            path: the nested call's scope path.

        Returns:
            The held path, or None (no operation of this thread holds such locks).
        """
        me = threading.get_ident()
        with self._cond:
            for held in self._database:
                if overlap(path, held) and self._held.get(held, (None, 0))[0] == me:
                    return held
        return None

    def pin(self, path: Path) -> bool:
        """Pin the cross-process locks of an operation of this process on a path
        overlapping ``path`` (never waits; undo with :meth:`unpin`).

        Returns:
            False when no such operation holds its locks (none runs, or the one whose
            turn it is still waits for them): nothing is pinned.
        """
        with self._cond:
            if not any(overlap(path, p) for p in self._database):
                return False
            self._pins[path] = self._pins.get(path, 0) + 1
            return True

    def unpin(self, path: Path) -> None:
        """Undo one :meth:`pin` of ``path``."""
        with self._cond:
            if self._pins[path] > 1:
                self._pins[path] -= 1
            else:
                del self._pins[path]
            self._cond.notify_all()


class AsyncScopeLocks:
    """The turns of one event loop's operations, per scope path (not re-entrant).

    Used on the loop's thread only: :meth:`acquire` waits (as a task) until no
    overlapping path is held and no earlier waiter wants one; :meth:`release` may be
    called from a callback (it wakes the waiters whose turn it is).
    """

    def __init__(self) -> None:
        self._held: dict[Path, int] = {}
        self._waiters: list[tuple[Path, asyncio.Future[None]]] = []

    def _free(self, path: Path, before: int) -> bool:
        if any(overlap(path, p) for p in self._held):
            return False
        return not any(overlap(path, p) for p, _ in self._waiters[:before])

    def _take(self, path: Path) -> None:
        self._held[path] = self._held.get(path, 0) + 1

    async def acquire(self, path: Path) -> None:
        """Wait for ``path``'s turn; cancelled while waiting, it never takes it."""
        if self._free(path, len(self._waiters)):
            self._take(path)
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (path, waiter)
        self._waiters.append(entry)
        try:
            await waiter
        except asyncio.CancelledError:
            if entry in self._waiters:  # never granted
                self._waiters.remove(entry)
                self._wake()
            else:  # granted as it was cancelled: hand it on
                self.release(path)
            raise

    def release(self, path: Path) -> None:
        """Give ``path``'s turn back and start the waiters it was holding up."""
        count = self._held[path]
        if count > 1:
            self._held[path] = count - 1
        else:
            del self._held[path]
        self._wake()

    def _wake(self) -> None:
        i = 0
        while i < len(self._waiters):
            path, waiter = self._waiters[i]
            if waiter.done():  # cancelled: its acquire removes it
                i += 1
                continue
            if self._free(path, i):
                del self._waiters[i]
                self._take(path)
                waiter.set_result(None)
                continue
            i += 1
