"""The engine's affective state: set, reset, save, load, persist, and the mood."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime
from typing import Any

from emotional_memory._engine.core import EngineCore
from emotional_memory._engine.locks import (
    _R,
    _replaces_state,
    _synchronized,
    _synchronized_state,
)
from emotional_memory._validation import aware
from emotional_memory.affect import CoreAffect
from emotional_memory.mood import MoodField
from emotional_memory.state import AffectiveState
from emotional_memory.stores._shared.state import StoredStateError
from emotional_memory.stores.base import VersionedStateStore


class StateMixin(EngineCore):
    """The affective state of the engine and its (transactional) persistence."""

    def _adopt(self, state: AffectiveState) -> AffectiveState:
        """Persist ``state`` (when a state store is configured), then make it current.

        Persisting first means a failing state store leaves the in-memory state as it
        was (docs/behaviour.md §9).
        """
        if self.state_store is not None:
            self._persist(state)
        self._state = state
        return state

    def _persist(self, state: AffectiveState, state_store: Any = None) -> None:
        """Write ``state`` to the configured state store (or to ``state_store``)."""
        target = state_store if state_store is not None else self._joined_state_store()
        if target is None:
            target = self.state_store
        assert target is not None
        shared = self._shared_states()
        if shared is not None and shared is target:
            # in the operation's turn, the save checks that the state is still the one
            # the turn started from: a scope lock lost mid-operation (its connection
            # cut) is a StateConflictError and a rollback, not a lost update
            expected = (
                self.__dict__.get("_state_version")
                if self.__dict__.get("_sharing_depth", 0) else None
            )
            self._state_version: str | None = shared.save_versioned(state, expected=expected)
        else:
            target.save(state)  # the original's protocol: save(AffectiveState)

    # ------------------------------------------------------------ shared state

    def _shared_states(self) -> VersionedStateStore | None:
        """The versioned state store when the state is shared across processes."""
        if not self.__dict__.get("_shared_state", False):
            return None
        joined = self._joined_state_store()
        return joined if isinstance(joined, VersionedStateStore) else None

    @contextmanager
    def _sharing(self, replacing: bool = False, wait: bool = True) -> Iterator[None]:
        """Run an operation on the database's current state, serialised across processes.

        With ``shared_state``, the outermost operation holds its scope against
        overlapping operations of every process (the state store's ``hold_scope``:
        database locks, not a store transaction, so ranking and embedding run with
        nothing locked but the scope), reloads the state when its version moved
        (another process saved it), and saves the new state, with a new version, in
        its write transaction. ``replacing``: the operation replaces the state whatever
        is stored (see :meth:`_take_stored`). ``wait=False``: the database locks are
        taken only if free at once (else ``ScopeHoldTimeout``, nothing changed).
        """
        states = self._shared_states()
        if states is None or self.__dict__.get("_sharing_depth", 0):
            yield
            return
        path = self._scope
        # a call nested in an operation of this thread (an embedder calling the
        # engine): taking the scope's locks again would wait for that operation's own
        held = self._scope_locks.database_cover(path)
        if held is not None and tuple(path[: len(held)]) != held:
            raise RuntimeError(
                f"a call on scope {list(path)} inside an operation on scope {list(held)} "
                "(same thread) cannot take its parent's cross-process locks (shared_state)"
            )
        self._sharing_depth = 1
        try:
            with (
                nullcontext() if held is not None
                else states.hold_scope(path) if wait else states.hold_scope(path, wait=False),
                nullcontext() if held is not None else self._scope_locks.database_held(path),
            ):
                self._take_stored(states, replacing)
                self._time_floor = None if replacing else _latest_time(self._state)
                yield
        finally:
            self._sharing_depth = 0
            self._time_floor = None

    @contextmanager
    def _out_of_turn(self, replacing: bool = False) -> Iterator[None]:
        """Run a state change outside this engine's turn (on an event loop's thread
        while an overlapping operation of this process has the turn), never waiting.

        With ``shared_state`` the change writes the scope's state only under
        cross-process locks covering the scope: the running overlapping operation's
        (pinned meanwhile), or, when that one still waits for its locks (another
        process holds the scope), the scope's own taken without waiting.

        Raises:
            ScopeHoldTimeout: another process holds the scope (nothing changed; the
                change may not wait here: retry it).
        """
        states = self._shared_states()
        locks, path = self._scope_locks, self._scope
        if states is None or locks.pin(path):
            try:
                self._catch_up(replacing)
                yield
            finally:
                if states is not None:
                    locks.unpin(path)
            return
        with states.hold_scope(path, wait=False):
            depth = self.__dict__.get("_sharing_depth", 0)
            floor = self.__dict__.get("_time_floor")
            self._sharing_depth = 1  # a turn of its own: the save checks its version
            try:
                self._take_stored(states, replacing)
                self._time_floor = None if replacing else _latest_time(self._state)
                yield
            finally:
                self._sharing_depth = depth
                self._time_floor = floor

    def _catch_up(self, replacing: bool = False) -> None:
        """Adopt the stored state before a state change made outside this engine's
        turn (an event loop's while an overlapping operation runs), unless this
        engine's own operation is the one running (its state is the stored one)."""
        states = self._shared_states()
        if states is not None and not self.__dict__.get("_sharing_depth", 0):
            self._take_stored(states, replacing)

    def _take_stored(self, states: VersionedStateStore, replacing: bool = False) -> None:
        """Adopt the stored state when its version is not the one this engine holds.

        Raises:
            StoredStateError: the stored state is no snapshot (edited by hand), unless
                ``replacing`` (an operation that overwrites it starts from the initial
                state instead).
        """
        version: str | None
        try:
            snapshot, version = states.load_versioned()
            if version == self.__dict__.get("_state_version"):
                return
            state = self._restored(states, snapshot)
        except StoredStateError:
            if not replacing:
                raise
            # a garbage row's version is unknown: its replacement is saved unchecked
            state, version = AffectiveState.initial(self._now()), None
        self._state = state
        self._state_version = version

    def _restored(self, states: VersionedStateStore, snapshot: Any) -> AffectiveState:
        """The state of a stored ``snapshot``; None (nothing stored) is the initial one.

        Raises:
            StoredStateError: not a state snapshot (named by the state's key).
        """
        if snapshot is None:
            return AffectiveState.initial(self._now())
        try:
            return AffectiveState.restore(snapshot)
        except (TypeError, ValueError) as exc:
            raise StoredStateError(str(getattr(states, "key", "?")), str(exc)) from None

    def _current_state(self) -> AffectiveState:
        """The state to answer with: the stored one when it moved (shared state), else
        the engine's own (a read: nothing is adopted or locked)."""
        states = self._shared_states()
        if states is None or self.__dict__.get("_sharing_depth", 0):
            return self._state
        snapshot, version = states.load_versioned()
        if version == self.__dict__.get("_state_version"):
            return self._state
        # as _take_stored: no stored state (cleared, or its row deleted) is the initial one
        return self._restored(states, snapshot)

    def _joined_state_store(self) -> Any:
        """A state store whose saves join the store's transactions, or None.

        ``SQLiteAffectiveStateStore`` offers ``joined_with(store)``: itself when it
        was made by ``from_store(store)``, a twin on the store's connection when it
        has its own connection to the store's file, else None.
        """
        cached = getattr(self, "_joined_cache", None)
        if cached is not None and cached[0] is self.state_store and cached[1] is self.store:
            return cached[2]
        joined_with = getattr(self.state_store, "joined_with", None)
        joined = joined_with(self.store) if callable(joined_with) else None
        self._joined_cache = (self.state_store, self.store, joined)
        return joined

    def _store_with_state(
        self, write: Callable[[], _R], final_state: Callable[[], AffectiveState]
    ) -> _R:
        """Run the store writes ``write`` and adopt the state after them: both or neither.

        A state store that can join the store's transactions (an
        ``SQLiteAffectiveStateStore`` on the store's file) saves inside it: one
        commit. Any other state store saves at the end of the store's transaction, so
        a failing save rolls the store back; when the commit itself fails, the
        previously persisted snapshot is put back. After a failure the store, the
        persisted state and the in-memory state are as they were.

        Args:
            write: the store writes (run inside one store transaction).
            final_state: the state once ``write`` has run.

        Returns:
            What ``write`` returns.
        """
        state_store = self.state_store
        joined = self._joined_state_store() if state_store is not None else None
        saved = False
        before: Any = None
        try:
            with self._columnar.transaction():
                out = write()
                new_state = final_state()
                if joined is not None:
                    self._persist(new_state, joined)
                elif state_store is not None:
                    before = state_store.load()
                    self._persist(new_state)
                    saved = True
        except BaseException:
            if saved and state_store is not None:  # the store's commit failed
                if before is None:
                    state_store.clear()
                else:
                    state_store.save(before)
            raise
        self._state = new_state
        return out

    def _update_state(self, affect: CoreAffect, now: datetime) -> AffectiveState:
        return self._state.update(
            affect, now=now, mood_alpha=self.config.mood_alpha, mood_decay=self.config.mood_decay
        )

    # ------------------------------------------------------------------ state

    def get_state(self) -> AffectiveState:
        """The current affective state.

        Returns:
            The engine's (immutable) ``AffectiveState``; with ``shared_state``, the
            state as last saved by any process.
        """
        return self._current_state()

    @_synchronized_state
    def set_affect(self, core_affect: CoreAffect) -> AffectiveState:
        """Feed an observed affect into the state (momentum and mood follow).

        Args:
            core_affect: The observed core affect.

        Returns:
            The new state (persisted first when a state store is configured).

        Raises:
            TypeError: If ``core_affect`` is not a ``CoreAffect``.
        """
        if not isinstance(core_affect, CoreAffect):
            raise TypeError("core_affect must be a CoreAffect")
        return self._adopt(self._update_state(core_affect, self._now()))

    @_synchronized_state
    @_replaces_state
    def reset_state(self) -> None:
        """Back to the initial neutral state."""
        self._adopt(AffectiveState.initial(self._now()))

    def save_state(self) -> dict[str, Any]:
        """A JSON-able snapshot of the state (see :meth:`load_state`).

        Returns:
            ``AffectiveState.snapshot()`` of the current state (as :meth:`get_state`
            answers it), history included.
        """
        return self._current_state().snapshot()

    @_synchronized_state
    @_replaces_state
    def load_state(self, data: dict[str, Any]) -> None:
        """Restore a snapshot from :meth:`save_state` (of this library or the original).

        Args:
            data: A snapshot dict; persisted when a state store is configured.
        """
        self._adopt(AffectiveState.restore(data))

    @_synchronized
    def persist_state(self) -> dict[str, Any]:
        """Write the state to the state store, when one is configured.

        Returns:
            The state's snapshot (as :meth:`save_state`), also without a state store.
        """
        if self.state_store is not None:
            self._persist(self._state)
        return self._state.snapshot()

    @_synchronized
    def restore_persisted_state(self) -> bool:
        """Load the state from the state store.

        Returns:
            True when a stored state was loaded; False without a state store or when
            none was stored.
        """
        return self._restore_persisted()

    def _restore_new_view(self) -> bool:
        """:meth:`restore_persisted_state` for a view that ``scoped()`` just made.

        On a thread running an event loop (``AsyncEmotionalMemory.scoped``) it never
        waits for an overlapping operation in flight: that operation may be waiting
        for the loop (async stores and embedders), and a new view has no operation
        of its own to wait for. Also what a new engine with ``shared_state`` runs: a
        stored state that is no snapshot (edited by hand) is not loaded, so that the
        view or engine can replace it (every other operation raises
        :class:`~emotional_memory.interfaces.StoredStateError`); without
        ``shared_state`` it raises here (the engine would hold the initial state). It only
        reads the state as last saved, so it takes no database lock (with
        ``shared_state`` their holder, another engine of this process included, may
        be waiting for the loop).

        Returns:
            True when a stored state was loaded.
        """
        locks, path = self._scope_locks, self._scope
        took = locks.acquire(path, blocking=asyncio._get_running_loop() is None)
        try:
            return self._restore_persisted()
        except StoredStateError:
            if self._shared_states() is None:  # the engine's own copy: nothing to re-read
                raise
            return False
        finally:
            if took:
                locks.release(path)

    def _restore_persisted(self) -> bool:
        """The body of :meth:`restore_persisted_state` (the caller holds the turn)."""
        if self.state_store is None:
            return False
        states = self._shared_states()
        if states is not None:
            snapshot, version = states.load_versioned()
            if snapshot is not None:
                self._state = self._restored(states, snapshot)
            self._state_version = version
            return snapshot is not None
        loaded: Any = self.state_store.load()
        if loaded is None:
            return False
        # Stores of the original protocol return a state; older ones a snapshot dict.
        self._state = loaded if isinstance(loaded, AffectiveState) else AffectiveState.restore(
            loaded
        )
        return True

    @_synchronized
    @_replaces_state
    def clear_persisted_state(self) -> None:
        """Forget the persisted state (the in-memory state is kept).

        With ``shared_state`` the state lives in the database, so every engine sharing
        it (this one included) answers, and next operates on, the initial state.
        """
        if self.state_store is not None:
            self.state_store.clear()

    def get_current_mood(self, now: datetime | None = None) -> MoodField:
        """The mood at ``now``, regressed towards baseline when ``mood_decay`` is set.

        Args:
            now: Aware time to read the mood at (default: the engine clock); only used
                with ``mood_decay``.

        Returns:
            The stored mood, or its regression to ``now`` (the state is not changed).
        """
        mood = self._current_state().mood
        if self.config.mood_decay is None:
            return mood
        at = self._now() if now is None else aware("now", now)
        return mood.regress(at, self.config.mood_decay)


def _latest_time(state: AffectiveState) -> datetime:
    """The latest time ``state`` holds (its mood's stamp or last history point), in UTC."""
    history = state.history
    latest = state.mood.timestamp
    if history and history[-1][0] > latest:
        latest = history[-1][0]
    return latest.astimezone(UTC)
