"""The per-engine lock decorators of :class:`~emotional_memory.engine.EmotionalMemory`."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _synchronized(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run an engine method in its scope's turn (:class:`~emotional_memory._scope_locks.
    ScopeLocks`, shared by an engine and its views, re-entrant).

    One operation at a time per scope: threads sharing an engine see each call run
    whole (an encode's save, links and state; a retrieve's ranking and side effects)
    with no other call on the same scope, one of its sub-scopes or one of its parents
    (the root included) interleaved; calls on disjoint scopes run at once. Reads of the (immutable)
    current state - ``get_state``, ``save_state``, ``get_current_mood`` - take no
    lock, so an event loop calling them never waits for a running operation.
    """

    replacing = getattr(method, "_replaces_state", False)

    @functools.wraps(method)
    def locked(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        engine = args[0]
        with (
            engine._scope_locks.hold(engine._scope),  # type: ignore[attr-defined]
            engine._sharing(replacing),  # type: ignore[attr-defined]
        ):
            return method(*args, **kwargs)

    return locked


def _synchronized_state(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """:func:`_synchronized` for the methods that change only the in-memory state.

    Called on a thread running an event loop while an operation holds the lock
    (``AsyncEmotionalMemory``'s synchronous state methods, as in the original), the
    method runs at once instead of blocking the loop: the running operation may be
    waiting for that very loop (async stores and embedders are called back on it), so
    waiting could deadlock. That is the original's semantics: a state change between
    two steps of a running operation. With ``shared_state`` it still starts from the
    state as last saved and writes only under database locks covering the scope
    (``_out_of_turn``): the running overlapping operation's, or, while that one still
    waits for them, the scope's own taken without waiting (``ScopeHoldTimeout`` when
    another process holds it). In its own turn on such a thread it likewise takes the
    scope's database locks without waiting: their holder (another engine of this
    process included) may be waiting for that very loop.
    """

    replacing = getattr(method, "_replaces_state", False)

    @functools.wraps(method)
    def locked(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        engine = args[0]
        locks, path = engine._scope_locks, engine._scope  # type: ignore[attr-defined]
        on_loop = asyncio._get_running_loop() is not None
        if not locks.acquire(path, blocking=not on_loop):
            with engine._out_of_turn(replacing):  # type: ignore[attr-defined]
                return method(*args, **kwargs)
        try:
            with engine._sharing(replacing, wait=not on_loop):  # type: ignore[attr-defined]
                return method(*args, **kwargs)
        finally:
            locks.release(path)

    return locked


def _replaces_state(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Mark a state method that replaces the state whatever is stored (reset, load,
    clear): with ``shared_state`` it still runs when the stored state is no snapshot
    (edited by hand), from the initial state. Put it under the lock decorator."""
    setattr(method, "_replaces_state", True)  # noqa: B010 - an attribute of a function
    return method
