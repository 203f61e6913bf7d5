"""QdrantStore (local mode on disk) and ChromaStore (the session's ``chroma run``
server) with values the engine never writes but a store's own caller may: each is
kept as the in-memory store keeps it, or refused before anything is written.
"""

from __future__ import annotations

import math

import pytest

from emotional_memory import EmotionalMemory
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.filters import parse_where
from emotional_memory.interfaces import UnstorableValueError
from emotional_memory.models import Memory, ResonanceLink
from emotional_memory.stores.base import Selection
from support.backends import Backend, oracle_store
from support.memories import basic_memory as mem
from support.memories import memory_key as key


def test_non_finite_metadata_comes_back_as_saved(backend: Backend) -> None:
    """NaN and infinite metadata numbers (which the in-memory and SQLite stores keep)
    were stored as null."""
    store, oracle = backend.new(), oracle_store()
    odd = mem("odd", [1.0, 0.0], metadata={
        "nan": math.nan, "inf": math.inf, "deep": {"l": [-math.inf, 1, None]}})
    for s in (store, oracle):
        s.save(odd)
    assert key(store.get(odd.id)) == key(oracle.get(odd.id)) == key(odd)
    again = backend.reopen(store)
    assert [key(m) for m in again.list_all()] == [key(odd)]
    not_null = again.selected(Selection(where=parse_where({"nan": None})))
    assert not_null.list_all() == []


class _Refused(RuntimeError):
    """The database's refusal of a write, as a network or server error would be."""


@pytest.mark.parametrize("embedded", [False, True])
def test_a_failed_write_keeps_the_memory_it_would_replace(
    backend: Backend, embedded: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replace that moves a memory between the collection of embedded memories and
    the other one removed the old record before writing the new: a write the database
    then refused (Chroma: a lone surrogate, before it was refused up front) lost the
    memory. The database's refusal is a write that raises."""
    store = backend.new()
    old = mem("old", [1.0, 0.0] if embedded else None)
    store.save(old)
    moved = old.model_copy(update={"content": "moved",
                                   "embedding": None if embedded else [1.0, 0.0]})

    def refuse(*_: object) -> None:
        raise _Refused("the database refused the write")

    monkeypatch.setattr(store, "_upsert", refuse)
    with pytest.raises(_Refused):
        store.update(moved)
    monkeypatch.undo()
    assert key(store.get(old.id)) == key(old)
    assert [key(m) for m in store.list_all()] == [key(old)] and len(store) == 1
    store.update(moved)  # the same move, accepted, replaces it
    assert [key(m) for m in store.list_all()] == [key(moved)] and len(store) == 1


def _linked(memory: Memory, target: str) -> Memory:
    link = ResonanceLink(source_id=memory.id, target_id=target, strength=0.5,
                         link_type="semantic")
    tag = memory.tag.model_copy(update={"resonance_links": [link]})
    return memory.model_copy(update={"tag": tag})


def _unstorable(backend: Backend) -> list[tuple[str, Memory]]:
    base = mem("m", [1.0, 0.0])
    cases = [("id", base.model_copy(update={"id": i})) for i in ("a\x00b", "\x00", "a\ud800")]
    if backend.name == "chroma":  # Qdrant's local mode holds these as the oracle does
        cases += [
            ("id", base.model_copy(update={"id": ""})),
            ("content", mem("c \udfff", [1.0, 0.0])),
            ("metadata", mem("m", None, metadata={"k": ["\ud800"]})),
            ("metadata", mem("m", [1.0, 0.0], metadata={"k\udfff": 1})),
            ("scope", base.model_copy(update={"scope": ("a\ud800",)})),
            ("tag", _linked(base, "t\udfff")),
        ]
    return cases


def test_a_value_the_database_cannot_hold_is_refused_naming_it(backend: Backend) -> None:
    """An id with a NUL was stored but never found again (``get`` None, ``delete``
    False, listed for good); a lone surrogate or (Chroma) an empty id was the client's
    own error, naming no field: now an UnstorableValueError naming it, nothing written,
    as PostgreSQL refuses what it cannot hold."""
    store = backend.new()
    kept = mem("kept", None)
    store.save(kept)
    for field, memory in _unstorable(backend):
        for write in (store.save, store.update):
            with pytest.raises(UnstorableValueError, match=field) as caught:
                write(memory)
            assert caught.value.field == field
        assert [key(m) for m in store.list_all()] == [key(kept)] and len(store) == 1
        assert store.dim is None
    with pytest.raises(UnstorableValueError):
        store.update(kept.model_copy(update={"id": "kept\x00"}))
    assert store.get(kept.id) == kept


def test_an_import_holding_such_an_id_is_refused_whole(backend: Backend) -> None:
    """The engine checks an import against the store first: nothing is written."""
    source = EmotionalMemory(oracle_store(), HashingEmbedder(dim=8))
    source.encode("fine")
    source.store.save(mem("odd", None).model_copy(update={"id": "x\x00y"}))
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=8))
    with pytest.raises(UnstorableValueError, match=r"data\[1\]") as caught:
        engine.import_memories(source.export_memories())
    assert caught.value.field == "id" and len(engine.store) == 0


@pytest.mark.parametrize("embedded", [True, False])
def test_a_replaced_memory_keeps_none_of_its_old_filter_fields(
    backend: Backend, embedded: bool
) -> None:
    """A replace drops the filter fields the new version lacks: Chroma's upsert
    merged metadata keys, so a memory whose metadata lost a key still matched the old
    value, and one moved from a scope to the root was still seen (and counted) by the
    old scope's views."""
    store, oracle = backend.new(), oracle_store()
    vector = [1.0, 0.0] if embedded else None
    for s in (store, oracle):
        old = mem("moved", vector, metadata={"a": 1, "s": "x", "n": {"k": True}})
        s.save(old.model_copy(update={"scope": ("u", "v")}))
        s.save(mem("other", vector, metadata={"b": 2}))
        s.save(old.model_copy(update={"metadata": {"b": 2}}))  # to the root, new metadata
    wheres = [{"a": 1}, {"a": {"$ne": 1}}, {"a": {"$exists": True}}, {"s": "x"},
              {"n.k": True}, {"b": 2}, {"a": None}]
    for scope in [(), ("u",), ("u", "v")]:
        for where in [None, *wheres]:
            selection = Selection(scope, None if where is None else parse_where(where))
            got, want = store.selected(selection), oracle.selected(selection)
            assert [m.content for m in got.list_all()] == [
                m.content for m in want.list_all()], (scope, where)
            assert len(got) == len(want), (scope, where)
