"""The store contract: ``update_tags``, the retrieval side effects' write.

A store that writes tags itself (the in-memory store, Qdrant, Chroma) must leave
exactly what ``update`` with each memory's tag replaced leaves (the oracle), filters
included: a ``where`` on a tag field (valence, emotion, retrieval count) selects by the
new tag, a field the new tag lacks (no label any more) is gone. Vectors are kept.
Unknown ids and non-tags are refused before anything is written. On the vector
databases the write is batched: a retrieval's side effects cost the same number of
database calls whatever ``top_k``.
"""

from __future__ import annotations

from typing import Any

import pytest

from emotional_memory import EmotionalMemory
from emotional_memory.affect import CoreAffect
from emotional_memory.categorize import EmotionLabel
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.models import EmotionalTag, Memory, ResonanceLink, with_fields
from emotional_memory.stores.base import TagWritingStore
from support.backends import Backend, oracle_store
from support.memories import basic_memory as mem

TAG_WRITING = ("memory", "qdrant", "chroma")
VECTOR_DBS = ("qdrant", "chroma")


def _label(primary: str | None) -> EmotionLabel | None:
    if primary is None:
        return None
    return EmotionLabel(primary=primary, intensity="moderate", name=primary, confidence=0.5)


def _stored() -> list[Memory]:
    out = []
    for i, (valence, label) in enumerate([(0.6, "joy"), (-0.4, "sadness"), (0.1, None),
                                          (0.8, "joy"), (-0.9, None)]):
        memory = mem(f"memory {i}", [1.0, 0.5 * i, -0.25 * i], valence=valence,
                     metadata={"n": i, "tag": "kept"})
        out.append(with_fields(memory, {
            "tag": with_fields(memory.tag, {"emotion_label": _label(label)}),
            "scope": ("a",) if i % 2 else ("b",),
        }))
    return out


def _new_tags(stored: list[Memory]) -> list[tuple[str, EmotionalTag]]:
    """Tags moving valence, dropping and adding labels, counting retrievals, linking."""
    first, second, third = stored[0], stored[1], stored[2]
    return [
        (first.id, with_fields(first.tag, {
            "emotion_label": None, "retrieval_count": 3,
            "core_affect": CoreAffect(valence=-0.7, arousal=0.2),
        })),
        (second.id, with_fields(second.tag, {
            "emotion_label": _label("anger"), "retrieval_count": 1,
            "resonance_links": [ResonanceLink(source_id=second.id, target_id=third.id,
                                              strength=0.4, link_type="semantic")],
        })),
        (third.id, with_fields(third.tag, {
            "emotion_label": _label("joy"), "core_affect": CoreAffect(valence=0.9, arousal=0.9),
        })),
    ]


def _seen(store: Any) -> dict[str, Any]:
    """What readers see: every memory, filtered lists on tag fields, a search."""
    engine = EmotionalMemory(store, HashingEmbedder(dim=8))  # lists only
    ids = {
        name: sorted(m.id for m in engine.list_all(where=where))
        for name, where in {
            "positive": {"valence": {"$gt": 0.5}},
            "joy": {"emotion": "joy"},
            "retrieved": {"retrieval_count": {"$gte": 1}},
            "scoped_joy": None,
        }.items() if where is not None
    }
    ids["scoped_joy"] = sorted(m.id for m in engine.scoped("a").list_all(
        where={"emotion": {"$in": ["joy", "anger"]}}))
    found = store.search_by_embedding([1.0, 1.0, -0.5], 5)
    return {
        "memories": sorted(m.model_dump_json() for m in store.list_all()),
        "filters": ids,
        "search": [(m.id, m.embedding) for m in found],
    }


@pytest.mark.parametrize("backend", TAG_WRITING, indirect=True)
def test_update_tags_leaves_what_update_leaves(backend: Backend) -> None:
    store, oracle = backend.new(), oracle_store()
    assert isinstance(store, TagWritingStore)
    stored = _stored()
    for memory in stored:
        store.save(memory)
        oracle.save(memory)
    tags = _new_tags(stored)
    for memory_id, tag in tags:  # the oracle: update() with the tag replaced
        current = oracle.get(memory_id)
        assert current is not None
        oracle.update(with_fields(current, {"tag": tag}))
    store.update_tags(tags)
    got, want = _seen(store), _seen(oracle)
    assert got == want
    assert want["filters"]["joy"] == sorted([stored[2].id, stored[3].id])  # label moved


@pytest.mark.parametrize("backend", TAG_WRITING, indirect=True)
def test_update_tags_refuses_unknown_ids_and_non_tags_writing_nothing(backend: Backend) -> None:
    store = backend.new()
    stored = _stored()
    for memory in stored:
        store.save(memory)
    before = _seen(store)
    tag = with_fields(stored[0].tag, {"retrieval_count": 9})
    with pytest.raises(KeyError, match="nope"):
        store.update_tags([(stored[0].id, tag), ("nope", tag)])
    with pytest.raises(TypeError, match="EmotionalTag"):
        store.update_tags([(stored[0].id, tag), (stored[1].id, "not a tag")])  # type: ignore[list-item]
    assert _seen(store) == before
    store.update_tags([(stored[0].id, tag), (stored[0].id, stored[1].tag)])  # the last wins
    got = store.get(stored[0].id)
    assert got is not None and got.tag == stored[1].tag and got.content == "memory 0"


@pytest.mark.parametrize("backend", VECTOR_DBS, indirect=True)
def test_retrieval_side_effects_cost_no_call_per_winner(backend: Backend) -> None:
    """A retrieval wrote its winners one by one (a read, a write and a delete each):
    now the database calls do not grow with ``top_k``."""
    store = backend.new()
    engine = EmotionalMemory(store, HashingEmbedder(dim=32))
    engine.encode_batch([f"a note about cats number {i}" for i in range(12)])
    calls: list[str] = []
    for name in ("_fetch", "_upsert", "_remove", "_rewrite", "_set_fields"):
        original = getattr(store, name, None)
        if original is None:  # (a primitive this version lacks)
            continue

        def counted(*args: Any, _name: str = name, _original: Any = original) -> Any:
            if args[1]:  # (main, ids or records): an empty one asks the database nothing
                calls.append(_name)
            return _original(*args)

        setattr(store, name, counted)
    costs = {}
    for top_k in (2, 8):
        calls.clear()
        winners = engine.retrieve("cats", top_k=top_k)
        costs[top_k] = len(calls)
        assert len(winners) == top_k
        assert all(store.get(m.id) == m for m in winners)  # the side effects are stored
        assert all(m.tag.retrieval_count >= 1 for m in winners)
    assert costs[2] == costs[8], costs
