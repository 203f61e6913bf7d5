"""Drop-in compatibility with the original library 0.18.1 (SPEC 11): engine behaviour,
affective state and the async engine.

The expectations are written from SPEC 11 (the facts checked against the original's
code), with plain-Python oracles where a number is involved; nothing here imports or
needs the original.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

import emotional_memory as em
from emotional_memory import (
    AffectiveState,
    AppraisalVector,
    AsyncEmotionalMemory,
    CoreAffect,
    EmotionalMemory,
    EmotionalMemoryConfig,
    InMemoryAffectiveStateStore,
    InMemoryStore,
    Memory,
    MoodDecayConfig,
    label_tag,
)
from emotional_memory.replay import TickClock
from emotional_memory.retrieval import RetrievalExplanation, RetrievalSignals
from support.compat_original import (
    SQRT6,
    START,
    ContextSpy,
    HashEmbedder,
    engine,
    vad,
)

# --------------------------------------------------------------------------- engine


def test_observe_returns_the_tag_encode_would_store() -> None:
    a = engine(appraisal_engine=ContextSpy(vad(-0.6, 0.8, 0.3)))
    b = engine(appraisal_engine=ContextSpy(vad(-0.6, 0.8, 0.3)))
    a.set_affect(CoreAffect(valence=0.2, arousal=0.4))
    b.set_affect(CoreAffect(valence=0.2, arousal=0.4))
    tag = a.observe("a loud argument", metadata={"who": "boss"})
    stored = b.encode("a loud argument", metadata={"who": "boss"}).tag
    assert tag == stored.model_copy(update={"resonance_links": []})
    assert len(a) == 0
    assert a.save_state() == b.save_state()
    assert a.appraisal_engine.calls == [("a loud argument", {"who": "boss"})]  # type: ignore[union-attr]


def test_metadata_is_the_appraisal_context() -> None:
    spy = ContextSpy(AppraisalVector.neutral())
    eng = engine(appraisal_engine=spy)
    eng.encode("one", metadata={"k": 1})
    eng.encode("two")
    eng.encode_batch(["three", "four"], metadata=[{"i": 3}, None])
    assert spy.calls == [("one", {"k": 1}), ("two", None), ("three", {"i": 3}), ("four", None)]


def test_generic_appraisal_sets_affect_not_the_tag_field() -> None:
    eng = engine(appraisal_engine=ContextSpy(vad(-0.8, 0.9, 0.2)), auto_categorize=True)
    m = eng.encode("x")
    assert m.tag.core_affect == CoreAffect(valence=-0.8, arousal=0.9, dominance=0.2)
    assert m.tag.appraisal is None
    assert m.tag.emotion_label is not None and m.tag.emotion_label.primary == "fear"


def test_label_tag_copy_uses_mood_dominance() -> None:
    eng = engine()
    for _ in range(30):  # a dominant, angry mood
        eng.set_affect(CoreAffect(valence=-0.5, arousal=1.0, dominance=1.0))
    tag = eng.observe("x")
    assert tag.mood_snapshot.dominance >= 0.5
    labelled = label_tag(tag)
    assert labelled is not tag and tag.emotion_label is None
    assert labelled.emotion_label == em.categorize_affect(
        tag.core_affect, tag.mood_snapshot.dominance
    )
    assert labelled.emotion_label.primary == "anger"
    assert label_tag(tag, dominance=0.0).emotion_label.primary == "fear"  # type: ignore[union-attr]
    auto = engine(auto_categorize=True)
    for _ in range(30):
        auto.set_affect(CoreAffect(valence=-0.5, arousal=1.0, dominance=1.0))
    assert auto.encode("y").tag.emotion_label.primary == "anger"  # type: ignore[union-attr]


def test_elaborate_returns_none() -> None:
    plain = engine()
    m = plain.encode("x")
    assert plain.elaborate(m.id) is None  # no appraisal engine
    eng = engine(appraisal_engine=ContextSpy(AppraisalVector.neutral()))
    m = eng.encode("not pending")
    assert eng.elaborate(m.id) is None
    assert eng.elaborate("unknown") is None


def test_dual_path_observe_appraises_and_elaborate_passes_no_context() -> None:
    """Dual-path encoding defers only ``encode``'s appraisal: ``observe`` has no
    ``elaborate`` to come back to, so it appraises (with the metadata as context) and
    its tag is not pending; ``elaborate`` appraises the content alone, without the
    memory's metadata as context (as the original does)."""
    spy = ContextSpy(vad(-0.6, 0.8, 0.3))
    eng = engine(appraisal_engine=spy, dual_path_encoding=True)
    tag = eng.observe("a loud argument", metadata={"who": "boss"})
    appraised = CoreAffect(valence=-0.6, arousal=0.8, dominance=0.3)
    assert spy.calls == [("a loud argument", {"who": "boss"})]
    assert not tag.pending_appraisal
    assert tag.core_affect == appraised == eng.get_state().core_affect
    m = eng.encode("a quiet walk", metadata={"where": "park"})
    assert m.tag.pending_appraisal and len(spy.calls) == 1  # encode defers
    assert m.tag.core_affect == appraised  # the current affect, fed again
    done = eng.elaborate(m.id)
    assert done is not None and not done.tag.pending_appraisal
    assert spy.calls[1:] == [("a quiet walk", None)]


def test_dual_path_with_appraisal_disabled_still_defers() -> None:
    """``enable_appraisal=False`` turns off encode-time appraisal; with dual-path
    encoding and an appraisal engine the memories are still marked pending (as in
    the original), so ``elaborate`` / ``elaborate_pending`` appraise them later.
    ``observe`` neither appraises nor marks anything."""
    spy = ContextSpy(vad(0.7, 0.6, 0.8))
    eng = engine(appraisal_engine=spy, dual_path_encoding=True, enable_appraisal=False)
    assert not eng.observe("seen").pending_appraisal
    one = eng.encode("one", metadata={"k": 1})
    two, three = eng.encode_batch(["two", "three"])
    assert spy.calls == []
    assert all(m.tag.pending_appraisal for m in (one, two, three))
    elaborated = eng.elaborate_pending()
    assert [m.content for m in elaborated] == ["one", "two", "three"]
    assert spy.calls == [("one", None), ("two", None), ("three", None)]
    lr = eng.config.elaboration_learning_rate
    target = CoreAffect(valence=0.7, arousal=0.6, dominance=0.8)
    assert elaborated[0].tag.core_affect == one.tag.core_affect.lerp(target, lr)


def test_encode_batch_returns_what_repeated_encode_returns() -> None:
    """``encode_batch`` = repeated ``encode`` (SPEC 8), return values included: each
    memory as it was stored at its own step, with its forward links only; the
    backward twins that later memories of the batch add are in the store, not in the
    returned copies (as in the original)."""
    texts = [f"event number {i}" for i in range(12)]
    batched = engine(clock=TickClock(START, timedelta(0)))
    one_by_one = engine(clock=TickClock(START, timedelta(0)))
    got = batched.encode_batch(texts)
    want = [one_by_one.encode(t) for t in texts]

    def canon(memories: list[Memory], eng: EmotionalMemory) -> list[Any]:
        name = {m.id: m.content for m in eng.list_all()}
        return [
            (m.content, [(name[lk.source_id], name[lk.target_id], lk.strength, lk.link_type)
                         for lk in m.tag.resonance_links],
             m.tag.model_dump(exclude={"resonance_links"}))
            for m in memories
        ]

    assert canon(got, batched) == canon(want, one_by_one)
    assert any(len(m.tag.resonance_links) < len(s.tag.resonance_links)
               for m, s in zip(got, batched.list_all(), strict=True))  # twins came later
    assert canon(batched.list_all(), batched) == canon(one_by_one.list_all(), one_by_one)


def _signals_oracle(eng: EmotionalMemory, memory: Memory) -> float:
    """s2 by SPEC 4 from the state's mood as last updated."""
    mood = eng.get_state().mood
    d = math.dist(
        (mood.valence, mood.arousal, mood.dominance),
        (
            memory.tag.mood_snapshot.valence,
            memory.tag.mood_snapshot.arousal,
            memory.tag.mood_snapshot.dominance,
        ),
    )
    return max(0.0, 1.0 - d / SQRT6)


def test_retrieval_reads_the_unregressed_mood() -> None:
    clock = TickClock(START)
    eng = engine(clock=clock, mood_decay=MoodDecayConfig(base_half_life_seconds=60.0))
    for text in ["grim news", "bad day", "gloomy rain"]:
        eng.set_affect(CoreAffect(valence=-0.9, arousal=0.9))
        eng.encode(text)
    clock.advance(timedelta(hours=5))  # the regressed mood would be back at baseline
    mood = eng.get_state().mood
    assert eng.get_current_mood().valence != pytest.approx(mood.valence)
    expected_w = em.retrieval.adaptive_weights(mood, [0.35, 0.25, 0.15, 0.10, 0.10, 0.05])
    ex = eng.retrieve_with_explanations("news", top_k=3)
    for r in ex:
        np.testing.assert_allclose(r.breakdown.weights.as_tuple(), expected_w, atol=1e-12)
        s2 = r.breakdown.raw_signals.mood_congruence
        assert s2 == pytest.approx(_signals_oracle(eng, r.memory), abs=1e-12)


def test_precomputed_weights_and_query_gate() -> None:
    eng = engine(appraisal_engine=ContextSpy(vad(0.05, 0.5, 0.5)))
    texts = [f"memory number {i}" for i in range(6)]
    for t in texts:
        eng.encode(t)
    q = HashEmbedder().embed("memory number 3")

    def cos(v: list[float]) -> float:
        return float(np.dot(q, v) / (np.linalg.norm(q) * np.linalg.norm(v)))

    by_cosine = sorted(eng.list_all(), key=lambda m: -cos(m.embedding or []))
    semantic = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    got = eng.retrieve("memory number 3", top_k=3, precomputed_weights=np.array(semantic))
    assert [m.id for m in got] == [m.id for m in by_cosine[:3]]
    with pytest.raises(ValueError, match="precomputed_weights"):
        eng.retrieve("x", precomputed_weights=[1.0, 0.0])
    # |valence| 0.05 < tau 0.2: semantic-only, like the weights above
    gated = eng.retrieve_query_gated("memory number 3", top_k=3)
    assert [m.id for m in gated] == [m.id for m in by_cosine[:3]]
    twin = engine(appraisal_engine=ContextSpy(vad(0.05, 0.5, 0.5)))
    assert twin.config.query_affect_gate_tau == 0.2
    with pytest.raises(RuntimeError):
        engine().retrieve_query_gated("q")
    with pytest.raises(RuntimeError):
        engine().retrieve_with_query_appraisal("q")


def test_query_appraisal_always_appraises() -> None:
    spy = ContextSpy(vad(-0.7, 0.9, 0.3))
    eng = engine(appraisal_engine=spy, enable_appraisal=False)
    eng.encode("stored without appraisal")
    assert spy.calls == []
    before = eng.get_state()
    out = eng.retrieve_with_query_appraisal("what scared me", top_k=1)
    assert spy.calls == [("what scared me", None)] and len(out) == 1
    assert eng.get_state() == before  # the query's affect never enters the state
    high = eng.retrieve_query_gated("what scared me", top_k=1, tau=0.5)  # |v| 0.7 >= 0.5
    assert len(high) == 1 and len(spy.calls) == 2


def test_update_memory_tag_and_config_fields() -> None:
    eng = engine()
    m = eng.encode("x")
    new_tag = m.tag.model_copy(update={"retrieval_count": 7})
    assert eng.update_memory(m.id, tag=new_tag).tag.retrieval_count == 7
    assert eng.get(m.id).tag.retrieval_count == 7  # type: ignore[union-attr]
    with pytest.raises(TypeError, match="tag"):
        eng.update_memory(m.id, tag={"retrieval_count": 1})  # type: ignore[arg-type]
    cfg = EmotionalMemoryConfig()
    assert (cfg.appraisal_max_concurrency, cfg.query_affect_gate_tau) == (8, 0.2)
    with pytest.raises(ValueError, match="appraisal_max_concurrency"):
        EmotionalMemoryConfig(appraisal_max_concurrency=0)
    with pytest.raises(ValueError, match="query_affect_gate_tau"):
        EmotionalMemoryConfig(query_affect_gate_tau=2.5)


# A record as the original's export_memories() writes it (no scope, no expires_at).
ORIGINAL_RECORD: dict[str, Any] = {
    "id": "c6941e5f-4647-481a-a778-f3f974eb1560", "content": "rain on the bridge",
    "embedding": [0.5, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0, 0.5],
    "tag": {
        "core_affect": {"valence": 0.18158, "arousal": 0.45363, "dominance": 0.7},
        "momentum": {"d_valence": 0.0, "d_arousal": 0.0, "d_dominance": 0.0,
                     "dd_valence": 0.0, "dd_arousal": 0.0, "dd_dominance": 0.0},
        "mood_snapshot": {"valence": 0.009079, "arousal": 0.0226815, "dominance": 0.51,
                          "inertia": 0.5, "timestamp": "2026-12-07T05:57:32.859778Z"},
        "appraisal": {"novelty": 0.5, "goal_relevance": 0.3, "coping_potential": 0.7,
                      "norm_congruence": -0.2, "self_relevance": 0.4},
        "resonance_links": [], "timestamp": "2026-12-07T05:57:32.859870Z",
        "consolidation_strength": 0.43553463625719,
        "last_retrieved": "2026-12-07T05:57:32.860587Z", "retrieval_count": 1,
        "reconsolidation_count": 0, "pending_appraisal": False, "window_opened_at": None,
        "expected_affect": {"valence": 0.18158, "arousal": 0.45363, "dominance": 0.7},
        "prediction_learning_rate": 0.17, "emotion_label": None,
    },
    "metadata": {"k": "\u00fc\u65e5\u672c", "nested": {"a": [1, 2.5, None, True]}},
}


def test_import_takes_the_originals_records_from_any_iterable() -> None:
    # the original loops over ``data``: records streamed from a file (a generator)
    # import as a list does, in the sync and the async engine
    lines = [json.dumps(ORIGINAL_RECORD)]
    eng = engine()
    assert eng.import_memories(json.loads(line) for line in lines) == 1
    got = eng.export_memories()[0]
    assert {k: v for k, v in got.items() if k not in ("scope", "expires_at")} == ORIGINAL_RECORD
    assert eng.import_memories(iter([ORIGINAL_RECORD]), overwrite=True) == 1
    aeng = AsyncEmotionalMemory(InMemoryStore(), HashEmbedder())
    assert asyncio.run(aeng.import_memories(json.loads(line) for line in lines)) == 1
    with pytest.raises(ValueError, match=r"data\[0\] must be a memory dict"):
        eng.import_memories(iter(["not a record"]))  # type: ignore[list-item]
    with pytest.raises(TypeError, match="data must be"):  # one record, not a list of them
        eng.import_memories(Memory.model_validate(ORIGINAL_RECORD))  # type: ignore[arg-type]
    assert len(eng) == 1


def test_close_closes_the_appraisal_engine() -> None:
    spy = ContextSpy(AppraisalVector.neutral())
    with engine(appraisal_engine=spy):
        pass
    assert spy.closed == 1


def test_result_model_defaults() -> None:
    assert RetrievalSignals().as_tuple() == (0.0,) * 6
    fields = RetrievalExplanation.model_fields
    assert fields["pass1_rank"].default is None and fields["candidate_count"].default == 0
    assert fields["activation_level"].default == 0.0 and fields["selected_as_seed"].default is False


# --------------------------------------------------------------------------- state


def test_snapshot_history_key_and_lenient_restore() -> None:
    state = AffectiveState.initial(START)
    for i in range(3):
        state = state.update(
            CoreAffect(valence=0.1 * i, arousal=0.5), now=START + timedelta(seconds=i)
        )
    snap = state.snapshot()
    assert "_history" in snap and "history" not in snap
    assert len(snap["_history"]) == 3
    # An original-style snapshot: tuples, a 'Z' mood timestamp, a malformed entry.
    original = json.loads(json.dumps(snap))
    original["mood"]["timestamp"] = original["mood"]["timestamp"].replace("+00:00", "Z")
    original["_history"] = [["bad"], *original["_history"]]
    restored = AffectiveState.restore(original)
    nxt = CoreAffect(valence=0.9, arousal=0.1)
    t = START + timedelta(seconds=10)
    assert restored.update(nxt, now=t).snapshot() == state.update(nxt, now=t).snapshot()
    # Older snapshots of this library used "history".
    legacy = {**snap, "history": snap["_history"]}
    del legacy["_history"]
    assert AffectiveState.restore(legacy).snapshot() == snap


def test_persist_state_and_state_store_protocol() -> None:
    store = InMemoryAffectiveStateStore()
    eng = engine(state_store=store)
    eng.set_affect(CoreAffect(valence=0.3, arousal=0.6))
    snap = eng.persist_state()
    assert snap == eng.save_state()
    loaded = store.load()
    assert isinstance(loaded, AffectiveState) and loaded.snapshot() == snap
    assert engine().persist_state() == engine().save_state()

    class OriginalStyleStore:
        """A state store written for the original: save(state) / load() -> state."""

        def __init__(self) -> None:
            self.state: AffectiveState | None = None

        def save(self, state: AffectiveState) -> None:
            assert isinstance(state, AffectiveState)
            self.state = state

        def load(self) -> AffectiveState | None:
            return self.state

        def clear(self) -> None:
            self.state = None

    custom = OriginalStyleStore()
    first = engine(state_store=custom)
    first.set_affect(CoreAffect(valence=-0.4, arousal=0.8))
    second = engine(state_store=custom)
    assert second.save_state() == first.save_state()


# --------------------------------------------------------------------------- async


def test_async_state_methods_are_sync_and_as_async_copies() -> None:
    sync = engine()
    sync.set_affect(CoreAffect(valence=0.5, arousal=0.5))
    aeng = em.as_async(sync)
    assert isinstance(aeng, AsyncEmotionalMemory)
    assert aeng.save_state() == sync.save_state()
    aeng.set_affect(CoreAffect(valence=-0.5, arousal=0.9))
    assert sync.get_state().core_affect == CoreAffect(valence=0.5, arousal=0.5)
    assert aeng.get_state().core_affect == CoreAffect(valence=-0.5, arousal=0.9)
    for name in (
        "get_state",
        "set_affect",
        "reset_state",
        "save_state",
        "load_state",
        "get_current_mood",
    ):
        assert not inspect.iscoroutinefunction(getattr(AsyncEmotionalMemory, name)), name

    async def run() -> tuple[Any, Any]:
        tag = await aeng.observe("x", metadata={"a": 1})
        snap = await aeng.persist_state()
        return tag, snap

    tag, snap = asyncio.run(run())
    assert tag.core_affect == aeng.get_state().core_affect
    assert snap == aeng.save_state()


def test_async_encode_batch_appraises_concurrently_up_to_the_limit() -> None:
    class SlowAsyncAppraiser:
        def __init__(self) -> None:
            self.running = 0
            self.peak = 0
            self.contexts: list[Any] = []

        async def appraise(self, event_text: str, context: dict[str, Any] | None = None) -> Any:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.contexts.append(context)
            await asyncio.sleep(0.02)
            self.running -= 1
            n = len(event_text) % 7
            return vad(n / 7 - 0.5, n / 7, 0.5)

    texts = [f"event {'x' * i}" for i in range(9)]
    metas = [{"i": i} for i in range(9)]
    slow = SlowAsyncAppraiser()
    aeng = AsyncEmotionalMemory(
        InMemoryStore(),
        HashEmbedder(),
        slow,
        EmotionalMemoryConfig(appraisal_max_concurrency=3),
        clock=TickClock(START),
    )
    got = asyncio.run(aeng.encode_batch(texts, metas))
    assert slow.peak == 3
    assert sorted(c["i"] for c in slow.contexts) == list(range(9))

    class SyncTwin:
        def appraise(self, event_text: str, context: dict[str, Any] | None = None) -> Any:
            n = len(event_text) % 7
            return vad(n / 7 - 0.5, n / 7, 0.5)

    twin = EmotionalMemory(InMemoryStore(), HashEmbedder(), SyncTwin(), clock=TickClock(START))
    want = twin.encode_batch(texts, metas)
    strip = [
        m.model_copy(update={"id": "", "tag": m.tag.model_copy(update={"resonance_links": []})})
        for m in got
    ]
    strip_want = [
        m.model_copy(update={"id": "", "tag": m.tag.model_copy(update={"resonance_links": []})})
        for m in want
    ]
    assert strip == strip_want
    assert aeng.save_state() == twin.save_state()
    assert aeng.engine.appraisal_engine is not None and not hasattr(
        aeng.engine.appraisal_engine, "_pending"
    )
