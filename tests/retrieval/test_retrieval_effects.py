"""The engine's retrieval side effects (SPEC 6) equal the public functions chained.

The engine gathers each winner's changed tag fields in one dict and copies the tag
once. The reference here applies the public steps one after another, each making its
own copy: ``with_fields`` for the retrieval stamp, ``reconsolidate`` (opening, keeping
or closing the window), ``update_prediction``, then ``hebbian_strengthen``. Both must
give equal memories, the same fields marked as set, and the same JSON.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory import EmotionalMemory, EmotionalMemoryConfig, InMemoryStore
from emotional_memory.affect import CoreAffect
from emotional_memory.models import EmotionalTag, Memory, with_fields
from emotional_memory.resonance import ResonanceConfig, hebbian_strengthen
from emotional_memory.retrieval import (
    RetrievalConfig,
    compute_ape,
    reconsolidate,
    update_prediction,
)
from support.memories import IDS, memories

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


class _NoEmbedder:
    def embed(self, text: str) -> list[float]:
        return [1.0, 0.0, 0.0, 0.0]


def _chained(engine: EmotionalMemory, winners: list[Memory], now: datetime) -> list[Memory]:
    """SPEC 6 step by step through the public functions (one copy per step)."""
    cfg = engine.config.retrieval
    affect = engine.get_state().core_affect
    tags: list[EmotionalTag] = []
    for memory in winners:
        tag = with_fields(memory.tag, {
            "last_retrieved": now, "retrieval_count": memory.tag.retrieval_count + 1,
        })
        ape = compute_ape(tag, affect)
        if engine.config.enable_reconsolidation:
            if ape > cfg.ape_threshold and tag.window_opened_at is None:
                tag = reconsolidate(tag, affect, ape, cfg.reconsolidation_learning_rate)
                tag = with_fields(tag, {"window_opened_at": now})
            elif tag.window_opened_at is not None:
                open_for = (now - tag.window_opened_at).total_seconds()
                if open_for <= cfg.reconsolidation_window_seconds:
                    tag = reconsolidate(tag, affect, ape, cfg.reconsolidation_learning_rate)
                else:
                    tag = with_fields(tag, {"window_opened_at": None})
        tags.append(update_prediction(tag, affect, ape))
    increment = engine.config.resonance.hebbian_increment
    if increment > 0 and len(winners) > 1:
        ids = [m.id for m in winners]
        tags = [
            # the original's engine: each memory's co-retrieved ids without its own
            with_fields(tag, {"resonance_links": hebbian_strengthen(
                m, [i for i in ids if i != m.id], increment
            )})
            for m, tag in zip(winners, tags, strict=True)
        ]
    return [with_fields(m, {"tag": tag}) for m, tag in zip(winners, tags, strict=True)]


@st.composite
def winner_lists(draw: Any) -> list[Memory]:
    ids = draw(st.lists(st.sampled_from(IDS), min_size=1, max_size=5, unique=True))
    out = []
    for mid in ids:
        memory = draw(memories(memory_id=mid))
        # windows opened just now, a while ago, or long ago (closed on retrieval)
        window = draw(st.sampled_from([None, "recent", "old", "keep"]))
        if window in ("recent", "old"):
            back = timedelta(seconds=5) if window == "recent" else timedelta(days=30)
            tag = with_fields(memory.tag, {"window_opened_at": NOW - back})
            memory = with_fields(memory, {"tag": tag})
        out.append(memory)
    return out


@settings(max_examples=150, deadline=None)
@given(
    winners=winner_lists(),
    valence=st.floats(-1.0, 1.0),
    arousal=st.floats(0.0, 1.0),
    reconsolidation=st.booleans(),
    increment=st.sampled_from([0.0, 0.05, 0.5]),
    threshold=st.sampled_from([0.0, 0.3, 2.0]),
)
def test_fused_effects_equal_chained_public_functions(
    winners: list[Memory], valence: float, arousal: float, reconsolidation: bool,
    increment: float, threshold: float,
) -> None:
    engine = EmotionalMemory(InMemoryStore(), _NoEmbedder(), config=EmotionalMemoryConfig(
        enable_reconsolidation=reconsolidation,
        retrieval=RetrievalConfig(ape_threshold=threshold),
        resonance=ResonanceConfig(hebbian_increment=increment),
    ))
    engine.set_affect(CoreAffect(valence=valence, arousal=arousal))
    got = engine._retrieval_effects(winners, NOW)
    want = _chained(engine, winners, NOW)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g == w
        assert g.model_dump_json() == w.model_dump_json()
        assert g.tag.model_fields_set == w.tag.model_fields_set
        assert g.model_fields_set == w.model_fields_set


# ------------------------------------------------------------- InMemoryStore.update_tags


def _seeded(stored: list[Memory], store: InMemoryStore | None = None) -> InMemoryStore:
    store = store if store is not None else InMemoryStore()
    for memory in stored:
        store.save(memory)
    return store


def _state(store: InMemoryStore) -> Any:
    """Everything a reader sees: the memories, and the columns the ranking scores."""
    listed = sorted(store.list_all(), key=lambda m: m.id)
    ids, cols = store.columns(NOW)
    return [m.model_dump_json() for m in listed], ids, jax_leaves(cols)


def jax_leaves(cols: Any) -> list[Any]:
    import jax
    import numpy as np

    return [np.asarray(leaf).tolist() for leaf in jax.tree_util.tree_leaves(cols)]


@st.composite
def tag_updates(draw: Any) -> tuple[list[Memory], list[tuple[str, EmotionalTag]]]:
    ids = draw(st.lists(st.sampled_from(IDS), min_size=1, max_size=6, unique=True))
    stored = [draw(memories(memory_id=mid)) for mid in ids]
    changed = draw(st.lists(st.sampled_from(ids), min_size=1, max_size=len(ids), unique=True))
    return stored, [(mid, draw(memories(memory_id=mid)).tag) for mid in changed]


@settings(max_examples=120, deadline=None)
@given(case=tag_updates(), read_first=st.booleans(), fail=st.booleans())
def test_update_tags_writes_what_update_writes(
    case: tuple[list[Memory], list[tuple[str, EmotionalTag]]], read_first: bool, fail: bool
) -> None:
    stored, tags = case
    by_update, by_tags = _seeded(stored), _seeded(stored)
    before = _state(by_tags)
    if read_first:  # the engine reads the winners first (they become recent objects)
        by_update.memories([mid for mid, _ in tags])
        by_tags.memories([mid for mid, _ in tags])
    # the oracle: update() with each stored memory's tag replaced
    for mid, tag in tags:
        current = by_update.get(mid)
        assert current is not None
        by_update.update(with_fields(current, {"tag": tag}))
    try:
        with by_tags.transaction():
            by_tags.update_tags(tags)
            if fail:
                raise RuntimeError("roll back")
    except RuntimeError:
        assert _state(by_tags) == before  # every tag write undone
        return
    assert _state(by_tags) == _state(by_update)
    for mid, tag in tags:  # the stored tag is the store's own copy
        got = by_tags.get(mid)
        assert got is not None and got.tag == tag
        assert got.tag.resonance_links is not tag.resonance_links


def test_update_tags_rejects_unknown_ids_and_non_tags_writing_nothing() -> None:
    import pytest

    store = InMemoryStore()
    engine = EmotionalMemory(store, _NoEmbedder())
    kept = engine.encode("kept")
    other = engine.encode("other", metadata={"k": 1})
    before = _state(store)
    new_tag = with_fields(kept.tag, {"retrieval_count": 7})
    with pytest.raises(KeyError, match="nope"):
        store.update_tags([(kept.id, new_tag), ("nope", new_tag)])
    with pytest.raises(TypeError, match="EmotionalTag"):
        store.update_tags([(kept.id, new_tag), (other.id, "not a tag")])  # type: ignore[list-item]
    assert _state(store) == before
    store.update_tags([(kept.id, new_tag), (kept.id, other.tag)])  # repeated: the last wins
    got = store.get(kept.id)
    assert got is not None and got.tag == other.tag and got.content == "kept"


def test_update_tags_goes_through_an_overridden_update() -> None:
    calls: list[str] = []

    class Logged(InMemoryStore):
        def update(self, memory: Memory) -> None:
            calls.append(memory.id)
            super().update(memory)

    store = Logged()
    engine = EmotionalMemory(store, _NoEmbedder())
    first = engine.encode("one")
    engine.encode("two")
    calls.clear()
    winners = engine.retrieve("one", top_k=2)
    assert sorted(calls) == sorted(m.id for m in winners) and first.id in calls
    assert all(store.get(m.id) == m for m in winners)
