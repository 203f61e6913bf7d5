"""The affective-state store contract: save, load, clear, scoped keys, reopen.

Over every state backend (in-memory, SQLite, PostgreSQL, Redis on a real server):

* ``save`` takes an AffectiveState or its snapshot dict and replaces what was there;
  ``load`` gives back an AffectiveState (history included) that moves on exactly as
  the saved one, ``load_snapshot`` the dict, never aliased with the caller's;
  ``clear`` forgets it; bad input is a TypeError and leaves the saved state.
* ``scoped(path)`` is the state store of an engine view: one state per path, the
  root's untouched, each path's its own, under ``scoped_key`` of the root's key where
  the backend keeps keys. A key or path no backend can hold (a NUL, a lone
  surrogate, an empty part) is refused alike on every backend.
* On the durable backends a store opened again on the same place and key finds the
  root's and every scope's state; a second engine restores them, per view.
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

import pytest

from emotional_memory import CoreAffect, EmotionalMemory, InMemoryStore
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.interfaces import AffectiveStateStore
from emotional_memory.state import AffectiveState
from emotional_memory.stores._shared.state import scoped_key
from support.backends import DURABLE_STATE_STORES, StateBackend
from support.states import STATE_T0 as T0
from support.states import moved_state


def test_save_load_round_trip(state_backend: StateBackend) -> None:
    store = state_backend.new()
    assert isinstance(store, AffectiveStateStore)
    assert store.load() is None and store.load_snapshot() is None
    state = moved_state()
    store.save(state)
    loaded = store.load()
    assert isinstance(loaded, AffectiveState)
    assert loaded.snapshot() == state.snapshot() and loaded.history == state.history
    assert loaded.momentum == state.momentum and loaded.mood == state.mood
    nxt, t = CoreAffect(valence=0.1, arousal=0.2), T0 + timedelta(seconds=40)
    assert loaded.update(nxt, now=t).snapshot() == state.update(nxt, now=t).snapshot()
    store.save(state.snapshot())  # a snapshot dict is accepted as well
    assert store.load_snapshot() == state.snapshot()
    store.clear()
    assert store.load() is None and store.load_snapshot() is None
    store.clear()  # clearing nothing is fine


def test_saves_replace_and_are_never_aliased(state_backend: StateBackend) -> None:
    store = state_backend.new()
    store.save(moved_state(0.3))
    snap = moved_state().snapshot()
    store.save(snap)
    expected = json.loads(json.dumps(snap))
    snap["core_affect"]["valence"] = -1.0  # the caller's dict changes afterwards
    loaded = store.load_snapshot()
    assert loaded == expected
    assert loaded is not None
    loaded["mood"]["valence"] = 99  # so does the loaded one
    assert store.load_snapshot() == expected


def test_bad_input_is_refused_and_changes_nothing(state_backend: StateBackend) -> None:
    store = state_backend.new()
    store.save({"b": 2})
    with pytest.raises(TypeError, match=r"state|snapshot"):
        store.save([1, 2])  # type: ignore[arg-type]
    assert store.load_snapshot() == {"b": 2}


@pytest.mark.parametrize("key", ["k\x00", "k\ud800"])
@pytest.mark.parametrize("state_backend", DURABLE_STATE_STORES, indirect=True)
def test_a_key_no_backend_can_hold_is_refused_on_every_backend(
    state_backend: StateBackend, key: str
) -> None:
    """PostgreSQL text holds no NUL and no driver encodes a lone surrogate: such a key
    is a ValueError naming it when the store opens, on every backend alike (it was a
    raw database error, or a UnicodeEncodeError at the first save)."""
    with pytest.raises(ValueError, match="key"):
        state_backend.new(key)


@pytest.mark.parametrize("path", [("a\x00",), ("\ud800",), ("",), ("a", 1), "alice"])
def test_a_scope_path_no_view_can_have_is_refused(
    state_backend: StateBackend, path: object
) -> None:
    """``scoped`` checks its path as an engine view does (the engine checked it first,
    a direct caller was not): a TypeError or ValueError naming it, nothing saved."""
    root = state_backend.new(key="team")
    root.save(moved_state(0.1))
    with pytest.raises((TypeError, ValueError), match="path"):
        root.scoped(path).save(moved_state(0.2))  # type: ignore[arg-type]
    assert root.load_snapshot() == moved_state(0.1).snapshot()


def test_scoped_stores_keep_one_state_per_path(state_backend: StateBackend) -> None:
    root = state_backend.new(key="team")
    alice, session = root.scoped(("alice",)), root.scoped(("alice", "s1"))
    alice.save(moved_state(0.1))
    session.save(moved_state(0.2))
    assert root.load() is None  # the root's state untouched
    assert alice.load_snapshot() == moved_state(0.1).snapshot()
    assert session.load_snapshot() == moved_state(0.2).snapshot()
    assert root.scoped(("alice",)).load_snapshot() == moved_state(0.1).snapshot()
    assert root.scoped(("bob",)).load() is None
    root.save(moved_state(0.3))
    assert root.scoped(()).load_snapshot() == moved_state(0.3).snapshot()  # the root's
    assert alice.load_snapshot() == moved_state(0.1).snapshot()
    if hasattr(root, "key"):
        assert alice.key == scoped_key(root.key, ("alice",))
        assert session.key == scoped_key(root.key, ("alice", "s1"))
    alice.clear()
    assert alice.load() is None and session.load() is not None


def test_a_deep_scope_of_long_parts_keeps_its_own_state(state_backend: StateBackend) -> None:
    """32 parts of 1,024 bytes (the most a service request may name): a key past a
    btree index entry's size on PostgreSQL, still one state per path."""
    root = state_backend.new(key="deep")
    # incompressible parts (PostgreSQL compresses a long key of one repeated letter)
    long_parts = tuple(
        "".join(hashlib.sha256(f"{i}/{j}".encode()).hexdigest() for j in range(16))
        for i in range(32)
    )
    deep, sibling = root.scoped(long_parts), root.scoped((*long_parts[:-1], "other"))
    deep.save(moved_state(0.1))
    sibling.save(moved_state(0.2))
    assert root.scoped(long_parts).load_snapshot() == moved_state(0.1).snapshot()
    assert sibling.load_snapshot() == moved_state(0.2).snapshot()
    assert root.load() is None
    deep.clear()
    assert deep.load() is None and sibling.load() is not None


@pytest.mark.parametrize("state_backend", DURABLE_STATE_STORES, indirect=True)
def test_a_reopened_store_finds_every_scopes_state(state_backend: StateBackend) -> None:
    root = state_backend.new(key="agent")
    root.save(moved_state())
    root.scoped(("alice",)).save(moved_state(0.4))
    again = state_backend.reopen(root)
    assert again.load_snapshot() == moved_state().snapshot()
    assert again.scoped(("alice",)).load_snapshot() == moved_state(0.4).snapshot()
    assert again.scoped(("bob",)).load() is None


def test_engine_views_keep_and_restore_one_state_each(state_backend: StateBackend) -> None:
    states = state_backend.new(key="engine")
    clock = lambda: T0  # noqa: E731
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), clock=clock,
                             state_store=states)
    alice = engine.scoped("alice")
    alice.set_affect(CoreAffect(valence=-0.8, arousal=0.9))
    alice.scoped("s1").set_affect(CoreAffect(valence=0.6, arousal=0.1))
    engine.scoped("bob").encode("a storm", affect=CoreAffect(valence=-0.6, arousal=0.7))
    assert engine.get_state().core_affect.valence == 0.0  # the root's untouched
    want = {path: engine.scoped(*path).get_state().snapshot()
            for path in (("alice",), ("alice", "s1"), ("bob",))}
    root_state = engine.get_state().snapshot()
    if state_backend.durable:
        states = state_backend.reopen(states)
    second = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), clock=clock,
                             state_store=states)  # another worker
    assert second.get_state().snapshot() == root_state
    for path, snapshot in want.items():
        assert second.scoped(*path).get_state().snapshot() == snapshot
    assert second.scoped("carol").get_state().core_affect.valence == 0.0


@pytest.mark.parametrize("state_backend", ["sqlite", "postgres"], indirect=True)
def test_a_versioned_save_is_a_compare_and_set(state_backend: StateBackend) -> None:
    """``save_versioned(state, expected=v)`` stores only over version ``v`` (``""``:
    nothing stored) and returns the new version; otherwise it raises
    StateConflictError and the stored state stays as it was."""
    from emotional_memory.interfaces import StateConflictError

    store = state_backend.new()
    assert store.load_versioned() == (None, "")
    first = store.save_versioned(moved_state(0.1), expected="")
    assert store.load_versioned() == (moved_state(0.1).snapshot(), first)
    with pytest.raises(StateConflictError, match="default"):
        store.save_versioned(moved_state(0.2), expected="")  # another saved first
    second = store.save_versioned(moved_state(0.3), expected=first)
    assert second != first and store.load_versioned() == (moved_state(0.3).snapshot(), second)
    for stale in (first, "0", "not a version"):
        with pytest.raises(StateConflictError):
            store.save_versioned(moved_state(0.4), expected=stale)
    assert store.load_versioned() == (moved_state(0.3).snapshot(), second)
    third = store.save_versioned(moved_state(0.5))  # unchecked
    assert store.load_versioned() == (moved_state(0.5).snapshot(), third)
    store.clear()
    with pytest.raises(StateConflictError):
        store.save_versioned(moved_state(0.6), expected=third)  # the row is gone
    assert store.load_versioned() == (None, "")
    assert store.load_versioned()[1] == "" and store.save_versioned(moved_state(0.7)) != ""


@pytest.mark.parametrize("garbage", ["not json", '{"core_affect":', "[1]", '"text"',
                                     "[" * 10_000 + "]" * 10_000])
@pytest.mark.parametrize("state_backend", DURABLE_STATE_STORES, indirect=True)
def test_a_stored_value_that_is_no_snapshot_is_a_value_error_naming_the_key(
    state_backend: StateBackend, garbage: str
) -> None:
    """Another program's value (or a truncated one) where the state is kept: ``load``
    and ``load_snapshot`` raise a ValueError naming the key on every backend (SQLite
    and PostgreSQL raised a bare JSONDecodeError, or returned a list as the snapshot
    dict), and the value stays as it was."""
    import re

    store = state_backend.new(key="garbled")
    store.save(moved_state())
    state_backend.overwrite(store, garbage)
    for read in (store.load_snapshot, store.load):
        with pytest.raises(ValueError, match=re.escape(repr(store.key))):
            read()
    state_backend.overwrite(store, json.dumps(moved_state().snapshot()))
    assert store.load_snapshot() == moved_state().snapshot()  # the key is readable again


@pytest.mark.parametrize("foreign", [
    '{"a": 1}', "{}", '{"core_affect": 1, "momentum": 1, "mood": 1}',
    '{"core_affect": {"valence": "x"}, "momentum": {}, "mood": {}}',
])
@pytest.mark.parametrize("state_backend", DURABLE_STATE_STORES, indirect=True)
def test_a_stored_object_that_is_no_state_is_a_value_error_naming_the_key(
    state_backend: StateBackend, foreign: str
) -> None:
    """Another program's JSON object under the key: ``load`` (and an engine restoring
    it) raise a ValueError naming the key (it was the snapshot's bare complaint,
    "state snapshot lacks field 'core_affect'" or a pydantic dump for CoreAffect, with
    no word of which key or store held it); the value stays as it was."""
    import re

    store = state_backend.new(key="foreign")
    store.save(moved_state())
    state_backend.overwrite(store, foreign)
    named = re.escape(repr(store.key)) + ".*not a state snapshot"
    with pytest.raises(ValueError, match=named):
        store.load()
    with pytest.raises(ValueError, match=named):
        EmotionalMemory(InMemoryStore(), HashingEmbedder(), state_store=store)
    assert store.load_snapshot() == json.loads(foreign)


def test_a_saved_dict_that_is_no_state_is_a_stored_state_error_on_every_backend(
    state_backend: StateBackend,
) -> None:
    """``save`` takes any snapshot dict; one that is no state read back as a
    StoredStateError naming the key from the durable stores, and as a bare
    ValueError ("unknown field(s)", no key) from the in-memory one."""
    from emotional_memory.interfaces import StoredStateError

    store = state_backend.new(key="foreign").scoped(("a",))
    store.save({"a": 1})
    import re

    with pytest.raises(StoredStateError, match=re.escape('/scope:["a"]') + ".*not a state"):
        store.load()
    store.save(moved_state())
    assert store.load() == moved_state()


@pytest.mark.parametrize(
    ("given", "read_back"),
    [({1: 2}, {"1": 2}), ({"t": (1, 2)}, {"t": [1, 2]}), ({"n": None, "s": "é"},
                                                          {"n": None, "s": "é"})],
)
def test_a_snapshot_reads_back_as_every_backend_stores_it(
    state_backend: StateBackend, given: dict[object, object], read_back: dict[str, object]
) -> None:
    """The same snapshot dict reads back the same from every backend: as JSON keeps
    it (the in-memory store kept integer keys and tuples the durable ones turn into
    strings and lists)."""
    store = state_backend.new()
    store.save(given)  # type: ignore[arg-type]
    assert store.load_snapshot() == read_back
    assert json.dumps(store.load_snapshot()) == json.dumps(read_back)


@pytest.mark.parametrize(
    ("bad", "error"),
    [({"x": float("nan")}, ValueError), ({"x": [float("inf")]}, ValueError),
     ({"x": object()}, TypeError), ({(1, 2): 0}, TypeError)],
)
def test_a_snapshot_no_backend_can_store_is_refused_on_every_backend(
    state_backend: StateBackend, bad: dict[object, object], error: type[Exception]
) -> None:
    """A NaN or infinite number, or a value JSON cannot hold: refused alike on every
    backend (the in-memory store took it, so code that worked there failed on a
    durable store), and the saved state stays as it was."""
    store = state_backend.new()
    store.save(moved_state())
    with pytest.raises(error, match="snapshot"):
        store.save(bad)  # type: ignore[arg-type]
    assert store.load_snapshot() == moved_state().snapshot()


@pytest.mark.parametrize("bad", [{"x": "\ud800"}, {"\udfff": 1}, {"x": ["ok", {"y": "a\ud83d"}]}])
def test_a_snapshot_holding_a_lone_surrogate_is_refused_naming_it(
    state_backend: StateBackend, bad: dict[str, object]
) -> None:
    """No database driver (nor Redis's client) encodes a lone surrogate: a snapshot
    holding one is a ValueError naming the snapshot on every backend, the saved
    state untouched (SQLite and PostgreSQL raised the driver's UnicodeEncodeError,
    Redis logged it and dropped the save unless strict, the in-memory store took it)."""
    store = state_backend.new()
    store.save(moved_state())
    with pytest.raises(ValueError, match=r"snapshot.*surrogate"):
        store.save(bad)
    assert store.load_snapshot() == moved_state().snapshot()


def _nested(depth: int) -> dict[str, object]:
    inner: list[object] = []
    snapshot: dict[str, object] = {"x": inner}
    for _ in range(depth):
        inner.append([])
        inner = inner[0]  # type: ignore[assignment]
    return snapshot


@pytest.mark.parametrize(
    ("bad", "words"),
    [({"x": "a\x00b"}, "NUL"), ({"k\x00": 1}, "NUL"), ({"x": [{"y": "\x00"}]}, "NUL"),
     (_nested(100_000), "nest")],
)
def test_a_snapshot_no_backend_can_hold_is_a_value_error_naming_it(
    state_backend: StateBackend, bad: dict[str, object], words: str
) -> None:
    """A NUL character (which PostgreSQL's jsonb cannot hold: its raw driver error)
    or nesting past the JSON encoder (a RecursionError): a ValueError naming the
    snapshot on every backend alike, the saved state untouched."""
    store = state_backend.new()
    store.save(moved_state())
    with pytest.raises(ValueError, match=rf"snapshot.*{words}"):
        store.save(bad)
    assert store.load_snapshot() == moved_state().snapshot()


@pytest.mark.parametrize("text", ["\\u0000", "a\\\\u0000", "\\", "\\\\\\"])
def test_backslashes_that_spell_no_nul_are_kept(state_backend: StateBackend, text: str) -> None:
    """Only a real NUL is refused: backslashes and the six characters ``\\u0000``
    written as text are stored and read back as they were."""
    store = state_backend.new()
    store.save({"x": text, text: 1})
    assert store.load_snapshot() == {"x": text, text: 1}
