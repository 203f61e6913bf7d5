"""The store contract, metadata of thousands of keys.

Every backend either holds such a memory as the in-memory store does (read back equal,
found by filters on any of its keys) or refuses it with an ``UnstorableValueError``
naming ``metadata`` before writing anything (Chroma: a record of some 3,000 keys
made its compaction fail, and every later write to the collection with it): the
store, the affective state and later writes are unaffected, and ``import_memories``
/ ``encode_batch`` write all of their memories or none.
"""

from __future__ import annotations

from typing import Any

import pytest

from emotional_memory import CoreAffect, EmotionalMemory
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.interfaces import UnstorableValueError
from support.backends import ENGINES, Backend, oracle_store

pytestmark = pytest.mark.parametrize("backend", ENGINES, indirect=True)

WIDE = {f"key{i}": i for i in range(3000)}
NESTED = {"outer": {f"k{i}": [i] for i in range(3000)}}


def _fingerprint(engine: EmotionalMemory) -> Any:
    return ([m.model_dump(mode="json") for m in engine.list_all()],
            engine.get_state().snapshot())


@pytest.mark.parametrize("metadata", [WIDE, NESTED], ids=["wide", "nested"])
def test_a_memory_of_thousands_of_keys_is_held_or_refused_cleanly(
    backend: Backend, metadata: dict[str, Any]
) -> None:
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=16))
    engine.encode("before", metadata={"key1": 1})
    before = _fingerprint(engine)
    try:
        wide = engine.encode("wide", metadata=metadata,
                             affect=CoreAffect(valence=-0.7, arousal=0.9))
    except UnstorableValueError as exc:
        assert exc.field == "metadata" and "metadata" in str(exc)
        assert _fingerprint(engine) == before
    else:
        assert engine.get(wide.id) == wide
        key = "key2999" if metadata is WIDE else "outer.k2999"
        value = 2999 if metadata is WIDE else [2999]
        assert [m.content for m in engine.list_all(where={key: {"$exists": True}})] == ["wide"]
        if metadata is WIDE:
            assert [m.content for m in engine.list_all(where={key: value})] == ["wide"]
    after = engine.encode("after", metadata={"key1": 1})  # the store still takes writes
    assert engine.get(after.id) == after
    assert [m.content for m in engine.list_all(where={"key1": 1})][-1] == "after"


def test_an_import_or_batch_with_such_a_memory_writes_all_or_nothing(backend: Backend) -> None:
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=16))
    engine.encode("before")
    source = EmotionalMemory(oracle_store(), HashingEmbedder(dim=16))
    source.encode("first import")
    source.encode("wide import", metadata=WIDE)
    data = source.export_memories()
    for write in (lambda: engine.import_memories(data),
                  lambda: engine.encode_batch(["first", "wide"], metadata=[None, WIDE])):
        before = _fingerprint(engine)
        try:
            write()
        except UnstorableValueError as exc:
            assert exc.field == "metadata" and exc.index == 1
            assert _fingerprint(engine) == before
        else:
            assert len(engine.list_all()) == len(before[0]) + 2
