"""Drop-in compatibility with the original library 0.18.1 (SPEC 11).

The expectations are written from SPEC 11 (the facts checked against the original's
code), with plain-Python oracles where a number is involved; nothing here imports or
needs the original.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import inspect
import json
import math
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import emotional_memory as em
from emotional_memory import (
    DIRECT_VAD_SCHEMA,
    AffectiveState,
    AppraisalVector,
    AsyncEmotionalMemory,
    CoreAffect,
    EmotionalMemory,
    EmotionalMemoryConfig,
    GenericAppraisalVector,
    InMemoryAffectiveStateStore,
    InMemoryStore,
    LLMAppraisalConfig,
    LLMAppraisalEngine,
    LLMCallable,
    LLMQueryClassifier,
    Memory,
    MoodDecayConfig,
    SQLiteAffectiveStateStore,
    SQLiteStore,
    StaticAppraisalEngine,
    SyncToAsyncAppraisalEngine,
    SyncToAsyncEmbedder,
    SyncToAsyncStore,
    label_tag,
)
from emotional_memory.replay import TickClock
from emotional_memory.retrieval import RetrievalExplanation, RetrievalSignals

START = datetime(2026, 1, 1, tzinfo=UTC)
SQRT6 = math.sqrt(6.0)


class HashEmbedder:
    """Deterministic 8-d embedder (the same text always gives the same vector)."""

    def embed(self, text: str) -> list[float]:
        digest = hashlib.sha256(text.encode()).digest()
        return [b / 255 - 0.5 for b in digest[:8]]

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [self.embed(t) for t in texts]


class ContextSpy:
    """Appraisal engine recording ``(event_text, context)`` of every call."""

    def __init__(self, vector: AppraisalVector | GenericAppraisalVector) -> None:
        self.vector = vector
        self.calls: list[tuple[str, Any]] = []
        self.closed = 0

    def appraise(self, event_text: str, context: dict[str, Any] | None = None) -> Any:
        self.calls.append((event_text, context))
        return self.vector

    def close(self) -> None:
        self.closed += 1


def vad(v: float, a: float, d: float) -> GenericAppraisalVector:
    return GenericAppraisalVector({"valence": v, "arousal": a, "dominance": d}, DIRECT_VAD_SCHEMA)


def engine(**kw: Any) -> EmotionalMemory:
    appraiser = kw.pop("appraisal_engine", None)
    store = kw.pop("store", None)
    state_store = kw.pop("state_store", None)
    clock = kw.pop("clock", None) or TickClock(START)
    return EmotionalMemory(
        store if store is not None else InMemoryStore(),
        HashEmbedder(),
        appraiser,
        EmotionalMemoryConfig(**kw),
        state_store,
        clock=clock,
    )


# --------------------------------------------------------------------------- names


ORIGINAL_PATHS = {
    "emotional_memory.appraisal": [
        "AppraisalEngine",
        "AppraisalVector",
        "GenericAppraisalVector",
        "SCHERER_CPM_SCHEMA",
        "StaticAppraisalEngine",
        "consolidation_strength",
    ],
    "emotional_memory.appraisal_llm": [
        "KeywordAppraisalEngine",
        "KeywordRule",
        "LLMAppraisalConfig",
        "LLMAppraisalEngine",
        "LLMCallable",
        "SCHERER_CPM_SCHEMA",
    ],
    "emotional_memory.appraisal_schema": [
        "AppraisalDimension",
        "AppraisalSchema",
        "DIRECT_VAD_SCHEMA",
        "SCHERER_CPM_SCHEMA",
        "coerce_appraisal_dimensions",
    ],
    "emotional_memory.async_adapters": [
        "SyncToAsyncAppraisalEngine",
        "SyncToAsyncEmbedder",
        "SyncToAsyncStore",
        "as_async",
    ],
    "emotional_memory.interfaces_async": [
        "AsyncAppraisalEngine",
        "AsyncEmbedder",
        "AsyncMemoryStore",
    ],
    "emotional_memory.interfaces": [
        "AffectiveStateStore",
        "Embedder",
        "MemoryStore",
        "SequentialEmbedder",
    ],
    "emotional_memory.categorize": [
        "EmotionLabel",
        "PrimaryEmotion",
        "categorize_affect",
        "label_tag",
    ],
    "emotional_memory.retrieval": [
        "MAX_PAD_DISTANCE",
        "AdaptiveWeightsConfig",
        "QueryClassifierConfig",
        "RankedMemory",
        "RetrievalBreakdown",
        "RetrievalConfig",
        "RetrievalExplanation",
        "RetrievalPlan",
        "RetrievalSignals",
        "adaptive_weights",
        "build_retrieval_plan",
        "compute_ape",
        "reconsolidate",
        "retrieval_breakdown",
        "retrieval_score",
        "update_prediction",
    ],
    "emotional_memory.engine_shared": [
        "DEFAULT_QUERY_AFFECT_GATE_TAU",
        "check_content_length",
        "is_query_affect_neutral",
        "semantic_only_weights",
        "validate_prune_threshold",
    ],
    "emotional_memory.resonance": [
        "MAX_PAD_DISTANCE",
        "ResonanceConfig",
        "build_resonance_links",
        "hebbian_strengthen",
        "spreading_activation",
        "temporal_proximity",
    ],
}

ORIGINAL_ROOT = [
    "AdaptiveWeightsConfig",
    "AffectiveMomentum",
    "AffectiveState",
    "AffectiveStateStore",
    "AppraisalDimension",
    "AppraisalEngine",
    "AppraisalSchema",
    "AppraisalVector",
    "AsyncAppraisalEngine",
    "AsyncEmbedder",
    "AsyncEmotionalMemory",
    "AsyncMemoryStore",
    "CoreAffect",
    "DIRECT_VAD_SCHEMA",
    "DecayConfig",
    "Embedder",
    "EmotionLabel",
    "EmotionalMemory",
    "EmotionalMemoryConfig",
    "EmotionalTag",
    "GenericAppraisalVector",
    "HeuristicQueryClassifier",
    "InMemoryAffectiveStateStore",
    "InMemoryStore",
    "KeywordAppraisalEngine",
    "KeywordRule",
    "LLMAppraisalConfig",
    "LLMAppraisalEngine",
    "LLMCallable",
    "LLMQueryClassifier",
    "LOCOMO_ROUTING",
    "Memory",
    "MemoryStore",
    "MoodDecayConfig",
    "MoodField",
    "QUERY_TYPES",
    "QueryClassifier",
    "QueryClassifierConfig",
    "ResonanceConfig",
    "ResonanceLink",
    "RetrievalBreakdown",
    "RetrievalConfig",
    "RetrievalExplanation",
    "RetrievalSignals",
    "SCHERER_CPM_SCHEMA",
    "SQLiteAffectiveStateStore",
    "SQLiteStore",
    "SequentialEmbedder",
    "StaticAppraisalEngine",
    "SyncToAsyncAppraisalEngine",
    "SyncToAsyncEmbedder",
    "SyncToAsyncStore",
    "__version__",
    "as_async",
    "categorize_affect",
    "compute_ape",
    "consolidation_strength",
    "hebbian_strengthen",
    "label_tag",
    "make_emotional_tag",
    "spreading_activation",
    "update_prediction",
]


@pytest.mark.parametrize("module", sorted(ORIGINAL_PATHS))
def test_names_at_the_original_module_paths(module: str) -> None:
    mod = importlib.import_module(module)
    missing = [n for n in ORIGINAL_PATHS[module] if not hasattr(mod, n)]
    assert missing == []


def test_root_names_and_root_is_lazy() -> None:
    missing = [n for n in ORIGINAL_ROOT if not hasattr(em, n)]
    assert missing == []
    assert em.as_async is importlib.import_module("emotional_memory.async_adapters").as_async
    # A fresh interpreter importing the package loads neither pydantic nor jax.
    import subprocess
    import sys

    code = "import sys, emotional_memory; print('pydantic' in sys.modules, 'jax' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": ":".join(sys.path)},
    ).stdout.split()
    assert out == ["False", "False"]


def _params(fn: Any) -> list[str]:
    return list(inspect.signature(fn).parameters)


def test_original_keyword_names() -> None:
    assert _params(em.MoodField.regress)[1:] == ["now", "config"]
    assert _params(em.categorize_affect) == ["core_affect", "dominance"]
    assert _params(label_tag) == ["tag", "dominance"]
    for cls in (StaticAppraisalEngine, em.KeywordAppraisalEngine, LLMAppraisalEngine):
        assert _params(cls.appraise)[1:3] == ["event_text", "context"]
    assert _params(SyncToAsyncStore) == ["sync_store"]
    assert _params(SyncToAsyncEmbedder) == ["sync_embedder"]
    assert _params(SyncToAsyncAppraisalEngine) == ["sync_engine"]
    assert _params(EmotionalMemory.set_affect)[1:] == ["core_affect"]
    assert _params(EmotionalMemory.load_state)[1:] == ["data"]
    assert _params(LLMAppraisalEngine)[:3] == ["llm", "config", "fallback"]
    mood = em.MoodField(valence=0.8, arousal=0.9, dominance=0.2, inertia=0.0, timestamp=START)
    later = mood.regress(now=START + timedelta(hours=1), config=MoodDecayConfig())
    assert later.valence == pytest.approx(0.4)  # one half-life at inertia 0


# --------------------------------------------------------------------------- appraisal


unbounded = st.floats(-10, 10, allow_nan=False)


@settings(max_examples=100, deadline=None)
@given(unbounded, unbounded, unbounded, unbounded, unbounded)
def test_appraisal_vector_clamps(n: float, g: float, c: float, nc: float, s: float) -> None:
    v = AppraisalVector(
        novelty=n, goal_relevance=g, coping_potential=c, norm_congruence=nc, self_relevance=s
    )
    assert (v.novelty, v.goal_relevance, v.norm_congruence) == tuple(
        min(1.0, max(-1.0, x)) for x in (n, g, nc)
    )
    assert (v.coping_potential, v.self_relevance) == tuple(min(1.0, max(0.0, x)) for x in (c, s))


def test_appraisal_vector_required_neutral_and_static_default() -> None:
    with pytest.raises(ValueError, match="novelty"):
        AppraisalVector(goal_relevance=0, coping_potential=0, norm_congruence=0, self_relevance=0)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="coping_potential"):
        AppraisalVector(
            novelty=0,
            goal_relevance=0,
            coping_potential=math.nan,
            norm_congruence=0,
            self_relevance=0,
        )
    neutral = AppraisalVector.neutral()
    assert neutral.model_dump() == {
        "novelty": 0.0,
        "goal_relevance": 0.0,
        "coping_potential": 0.5,
        "norm_congruence": 0.0,
        "self_relevance": 0.0,
    }
    assert StaticAppraisalEngine().appraise("anything") == neutral


def test_llm_callable_and_llm_engine_surface() -> None:
    def answer(prompt: str, schema: dict[str, Any]) -> str:
        return '{"valence": -0.5, "arousal": 0.75, "dominance": 0.25}'

    assert isinstance(answer, LLMCallable)
    cfg = LLMAppraisalConfig(appraisal_schema=DIRECT_VAD_SCHEMA)
    assert LLMAppraisalConfig().cache_size == 128
    eng = LLMAppraisalEngine(answer, cfg)
    got = eng.appraise("x")
    assert got == vad(-0.5, 0.75, 0.25)
    assert got.to_core_affect() == CoreAffect(valence=-0.5, arousal=0.75, dominance=0.25)
    assert "cached=1" in repr(eng)

    class Closable:
        closed = False

        def __call__(self, prompt: str, schema: dict[str, Any]) -> str:
            raise ConnectionError("down")

        def close(self) -> None:
            self.closed = True

    llm = Closable()
    fb = AppraisalVector(
        novelty=0.1,
        goal_relevance=0.2,
        coping_potential=0.3,
        norm_congruence=0.4,
        self_relevance=0.5,
    )
    eng2 = LLMAppraisalEngine(llm, fallback=fb)
    with pytest.warns(RuntimeWarning):
        assert eng2.appraise("a") == fb
    with pytest.warns(RuntimeWarning):
        assert eng2.appraise("b") == fb
    assert eng2.fallback_count == 2
    eng2.reset_fallback_count()
    assert eng2.fallback_count == 0
    eng2.close()
    assert llm.closed
    strict = LLMAppraisalEngine(llm, LLMAppraisalConfig(fallback_on_error=False))
    with pytest.raises(ConnectionError, match="down"):
        strict.appraise("c")


def test_llm_query_classifier_original_defaults() -> None:
    def boom(prompt: str, schema: dict[str, Any]) -> str:
        raise KeyError("exact")

    assert LLMQueryClassifier(boom).classify("q") == "open_domain"
    with pytest.raises(KeyError, match="exact"):
        LLMQueryClassifier(boom, fallback_on_error=False).classify("q")


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


def test_sqlite_defaults_to_memory() -> None:
    with SQLiteStore() as store, SQLiteAffectiveStateStore() as states:
        assert store.path == ":memory:"
        assert len(store) == 0 and states.load() is None


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


# --------------------------------------------------------------------------- files


def _original_layout_db(path: Path, memories: list[Memory]) -> None:
    """A memory database in the original's layout, written by hand (SPEC 11)."""
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE memories (id TEXT PRIMARY KEY, content TEXT NOT NULL, data TEXT NOT NULL)"
    )
    for m in memories:
        conn.execute(
            "INSERT INTO memories (id, content, data) VALUES (?, ?, ?)",
            (m.id, m.content, m.model_dump_json()),
        )
    # The original's sqlite-vec table (a vec0 virtual table this library cannot load)
    # and one of its shadow tables: both must survive untouched.
    conn.execute("CREATE TABLE memory_vec_rowids (id TEXT, x INTEGER)")
    conn.execute("INSERT INTO memory_vec_rowids VALUES ('x', 1)")
    conn.commit()
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute(
        "INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) VALUES "
        "('table', 'memory_vec', 'memory_vec', 0, "
        "'CREATE VIRTUAL TABLE memory_vec USING vec0(id TEXT PRIMARY KEY, embedding float[8])')"
    )
    conn.execute("PRAGMA writable_schema=OFF")
    conn.commit()
    conn.close()


def _seeded_memories() -> tuple[list[Memory], dict[str, Any]]:
    src = engine(clock=TickClock(START, timedelta(seconds=5)))
    for i, text in enumerate(
        [
            "won the prize",
            "my dog died",
            "boring meeting",
            "surprise party",
            "loud argument",
            "calm walk",
            "rainy day",
        ]
    ):
        src.set_affect(CoreAffect(valence=math.sin(i), arousal=0.5 + 0.4 * math.cos(i)))
        src.encode(text, metadata={"i": i})
    return src.list_all(), src.save_state()


def _original_tables(path: Path) -> dict[str, Any]:
    """Every table of the file that is not this library's, with its SQL and rows."""
    conn = sqlite3.connect(path)
    try:
        out: dict[str, Any] = {}
        for name, sql in conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name"
        ).fetchall():
            if name in {"meta", "changes", "em_memories", "em_affective_state"}:
                continue
            if name.startswith("sqlite_"):
                continue
            rows = (
                None if sql.startswith("CREATE VIRTUAL")
                else conn.execute(f'SELECT rowid, * FROM "{name}" ORDER BY rowid').fetchall()
            )
            out[name] = (sql, rows)
        return out
    finally:
        conn.close()


def test_sqlite_opens_the_originals_memory_file(tmp_path: Path) -> None:
    memories, state = _seeded_memories()
    # float64 values that are not float32 numbers: they must come back exactly
    memories = [
        m.model_copy(update={"embedding": [v + 1e-12 for v in m.embedding or []]})
        for m in memories
    ]
    path = tmp_path / "original.db"
    _original_layout_db(path, memories)
    before = _original_tables(path)
    assert set(before) == {"memories", "memory_vec", "memory_vec_rowids"}
    with SQLiteStore(path) as store:
        got = store.list_all()
        assert got == memories  # the original's order; embeddings float64, exactly
        engine(store=store).encode("a new memory")  # writes go to our table only
    with SQLiteStore(path) as store:
        reread = store.list_all()
        assert [(m.id, m.embedding) for m in reread[: len(memories)]] == [
            (m.id, m.embedding) for m in memories
        ]
        assert len(reread) == len(memories) + 1
    # The original's tables are exactly as they were: its store still finds them.
    assert _original_tables(path) == before
    conn = sqlite3.connect(path)
    try:
        count = conn.execute("SELECT COUNT(*) FROM em_memories").fetchone()[0]
        assert count == len(memories) + 1
        rows = conn.execute("SELECT data FROM memories ORDER BY rowid").fetchall()
        assert [Memory.model_validate_json(data) for (data,) in rows] == memories
    finally:
        conn.close()
    # Reopening does not migrate again; rankings equal an in-memory twin's.
    clock_a, clock_b = TickClock(START + timedelta(hours=1)), TickClock(START + timedelta(hours=1))
    with SQLiteStore(path) as store:
        a = engine(store=store, clock=clock_a)
        b = engine(clock=clock_b)
        b.import_memories([m.model_dump(mode="json") for m in store.list_all()])
        a.load_state(state)
        b.load_state(state)
        for q in ["prize party", "dog", "walk in the rain"]:
            ra = a.retrieve_with_explanations(q, top_k=3)
            rb = b.retrieve_with_explanations(q, top_k=3)
            assert [r.memory.id for r in ra] == [r.memory.id for r in rb]
            assert [r.score for r in ra] == pytest.approx([r.score for r in rb], abs=1e-12)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_interrupted_first_open_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    memories, _ = _seeded_memories()
    path = tmp_path / "original.db"
    _original_layout_db(path, memories)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE memories SET data = '{not json' WHERE rowid = 5")
    conn.commit()
    conn.close()
    before = _digest(path)
    with pytest.raises(ValueError, match="row 5"):
        SQLiteStore(path)
    assert _digest(path) == before
    assert not (tmp_path / "original.db-wal").exists() or (
        (tmp_path / "original.db-wal").stat().st_size == 0
    )
    conn = sqlite3.connect(path)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(memories)")]
    assert cols == ["id", "content", "data"]
    conn.close()


def test_interrupt_mid_migration_rolls_back(tmp_path: Path, monkeypatch: Any) -> None:
    memories, _ = _seeded_memories()
    path = tmp_path / "original.db"
    _original_layout_db(path, memories)
    before = _digest(path)
    calls = {"n": 0}
    real = Memory.model_validate_json.__func__  # type: ignore[attr-defined]

    def flaky(cls: Any, data: Any, *a: Any, **kw: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return real(cls, data, *a, **kw)

    monkeypatch.setattr(Memory, "model_validate_json", classmethod(flaky))
    with pytest.raises(KeyboardInterrupt):
        SQLiteStore(path)
    monkeypatch.undo()
    assert _digest(path) == before
    with SQLiteStore(path) as store:  # the next open migrates fully
        assert [m.id for m in store.list_all()] == [m.id for m in memories]


def test_sqlite_state_store_opens_the_originals_state_file(tmp_path: Path) -> None:
    state = AffectiveState.initial(START)
    for i in range(3):
        state = state.update(
            CoreAffect(valence=-0.2 * i, arousal=0.7), now=START + timedelta(seconds=i)
        )
    snap = state.snapshot()
    path = tmp_path / "state.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE affective_state (slot TEXT PRIMARY KEY, data TEXT NOT NULL)")
    conn.execute("INSERT INTO affective_state VALUES ('current', ?)", (json.dumps(snap),))
    conn.commit()
    conn.close()
    with SQLiteAffectiveStateStore(path) as store:
        loaded = store.load()
        assert loaded is not None and loaded.snapshot() == snap
    with SQLiteAffectiveStateStore(path) as store:  # second open: no re-migration
        assert store.load_snapshot() == snap
    conn = sqlite3.connect(path)  # the original's table is untouched
    assert conn.execute("SELECT slot, data FROM affective_state").fetchall() == [
        ("current", json.dumps(snap))
    ]
    assert [r[1] for r in conn.execute("PRAGMA table_info(affective_state)")] == ["slot", "data"]
    conn.close()
    eng = engine(state_store=SQLiteAffectiveStateStore(path))
    assert eng.save_state() == snap


# --------------------------------------------------------------------------- embedders


def test_sentence_transformer_embedder_original_surface(monkeypatch: Any) -> None:
    import sys
    import types

    created: list[tuple[str, dict[str, Any]]] = []

    class FakeModel:
        def __init__(self, name: str, **kwargs: Any) -> None:
            created.append((name, kwargs))

        def encode(self, items: list[str], **kwargs: Any) -> np.ndarray:
            return np.array([[3.0, 4.0]] * len(items))

    fake = types.ModuleType("sentence_transformers")
    fake.SentenceTransformer = FakeModel  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", fake)
    cls = em.SentenceTransformerEmbedder
    assert _params(cls)[0] == "model_name"
    assert cls(model_name="m1").model_name == "m1"
    assert cls.make_bge_small().model_name == "BAAI/bge-small-en-v1.5"
    assert cls.make_mpnet(device="cpu").model_name == "all-mpnet-base-v2"
    assert created == [
        ("m1", {}),
        ("BAAI/bge-small-en-v1.5", {}),
        ("all-mpnet-base-v2", {"device": "cpu"}),
    ]
    assert cls(model_name_or_path="legacy").embed("x") == [3.0, 4.0]


# --------------------------------------------------------------------------- keyword rules

DIMS = ("novelty", "goal_relevance", "coping_potential", "norm_congruence", "self_relevance")


def _delta_oracle(deltas: list[dict[str, float]]) -> dict[str, float]:
    """Original-form rules: mean of the non-zero deltas per dimension over the rules
    that fired, added to the neutral appraisal (coping 0.5), clamped."""
    base = {
        "novelty": 0.0,
        "goal_relevance": 0.0,
        "coping_potential": 0.5,
        "norm_congruence": 0.0,
        "self_relevance": 0.0,
    }
    for dim in DIMS:
        votes = [d[dim] for d in deltas if d[dim] != 0.0]
        if votes:
            base[dim] += sum(votes) / len(votes)
    lo = {"coping_potential": 0.0, "self_relevance": 0.0}
    return {k: min(1.0, max(lo.get(k, -1.0), v)) for k, v in base.items()}


delta = st.sampled_from([0.0, 0.0, -0.7, -0.2, 0.3, 0.9, 1.5])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(*(delta for _ in DIMS)), min_size=1, max_size=4), st.data())
def test_original_form_keyword_rules(rows: list[tuple[float, ...]], data: Any) -> None:
    words = [f"word{i}" for i in range(len(rows))]
    rules = [
        em.KeywordRule(rf"\b{w}\b", **dict(zip(DIMS, row, strict=True)))
        for w, row in zip(words, rows, strict=True)
    ]
    present = data.draw(st.lists(st.sampled_from(words), unique=True))
    text = " and ".join(p.upper() for p in present)  # case-insensitive
    got = em.KeywordAppraisalEngine(rules).appraise(text)
    fired = [dict(zip(DIMS, rows[words.index(p)], strict=True)) for p in present]
    expected = _delta_oracle(fired)
    assert got.model_dump() == pytest.approx(expected, abs=1e-12)


def test_keyword_rule_forms_and_multilingual() -> None:
    rule = em.KeywordRule(r"\bwin\b", goal_relevance=0.6)
    assert repr(rule) == "KeywordRule(pattern='\\\\bwin\\\\b')"
    assert rule.matches("We WIN") and not rule.matches("winner")
    phrase = em.KeywordRule(keywords=["won"], appraisal={"goal_relevance": 0.8})
    assert phrase.matches("we won!") and not phrase.is_pattern_rule
    with pytest.raises(ValueError, match="pattern"):
        em.KeywordRule("(")
    with pytest.raises(ValueError, match="novelty"):
        em.KeywordRule("x", novelty=math.nan)
    with pytest.raises(ValueError, match="mixes"):
        em.KeywordAppraisalEngine([rule, phrase])
    multi = em.KeywordAppraisalEngine.make_multilingual()
    assert multi.appraise("Ho vinto la gara!").goal_relevance > 0.5
    assert multi.appraise("Il mio cane è morto").goal_relevance < -0.5
    assert multi.appraise("I won the race").goal_relevance > 0.5


# --------------------------------------------------------------------------- retrieval plan


def test_build_retrieval_plan_original_signature() -> None:
    from emotional_memory.resonance import spreading_activation
    from emotional_memory.retrieval import build_retrieval_plan

    memories, _ = _seeded_memories()
    now = START + timedelta(hours=2)
    q = HashEmbedder().embed("surprise party")
    common = (
        q,
        CoreAffect.neutral(),
        em.MoodField.neutral(START),
        em.AffectiveMomentum.zero(),
        memories,
    )
    dc, rc = em.DecayConfig(), em.RetrievalConfig()
    original = build_retrieval_plan(*common, 2, now, dc, rc, 2, spreading_activation)
    legacy = build_retrieval_plan(*common, now, dc, rc, 2, propagation_hops=2)
    assert [r.memory.id for r in original.pass2] == [r.memory.id for r in legacy.pass2]
    assert [r.score for r in original.pass2] == [r.score for r in legacy.pass2]

    calls: list[tuple[Any, ...]] = []
    target = memories[-1].id

    def custom(seed_ids: set[str], cands: list[Memory], hops: int) -> dict[str, float]:
        calls.append((seed_ids, len(cands), hops))
        return {target: 1.0}

    plan = build_retrieval_plan(*common, 2, now, dc, rc, 3, custom)
    assert calls == [(set(original.seed_ids), len(memories), 3)]
    assert plan.activation_map == {target: 1.0}
    # oracle: pass-1 breakdown with the resonance term replaced by the activation
    w = plan.weights
    expected = {
        r.memory.id: r.score
        - w[5] * r.breakdown.raw_signals.resonance
        + w[5] * (1.0 if r.memory.id == target else 0.0)
        for r in plan.pass1
    }
    for r in plan.pass2:
        assert r.score == pytest.approx(expected[r.memory.id], abs=1e-12)
    scores = [r.score for r in plan.pass2]
    assert scores == sorted(scores, reverse=True)


def test_sqlite_rebuild_vector_index(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "m.db") as store:
        eng = engine(store=store)
        eng.encode("one")
        eng.encode("two")
        assert store.rebuild_vector_index() == 2
        assert [m.content for m in store.list_all()] == ["one", "two"]


def test_ranked_memory_is_a_frozen_pydantic_model() -> None:
    from pydantic import BaseModel

    from emotional_memory.retrieval import RankedMemory

    assert issubclass(RankedMemory, BaseModel)
    assert list(RankedMemory.model_fields) == ["memory", "score", "breakdown"]
    plan = engine().plan_retrieval("x")  # empty store: no candidates
    assert plan.pass1 == []
    eng = engine()
    eng.encode("hello")
    ranked = eng.plan_retrieval("hello").pass1[0]
    assert isinstance(ranked, RankedMemory)
    with pytest.raises(ValueError):
        ranked.score = 1.0  # type: ignore[misc]


_V1_MEMORIES = """CREATE TABLE memories (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, content TEXT NOT NULL,
    embedding BLOB, dim INTEGER, tag TEXT NOT NULL, metadata TEXT NOT NULL)"""


def test_a_file_migrated_by_version_1_gets_the_originals_tables_back(tmp_path: Path) -> None:
    """Schema 1 renamed the original's tables and kept its own rows in ``memories`` /
    ``affective_state``; opening restores the original's names (a roll-back works again)
    and moves ours to ``em_*``, rows and order kept."""
    memories, state = _seeded_memories()
    path = tmp_path / "v1.db"
    _original_layout_db(path, memories)
    original = _original_tables(path)
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE memories RENAME TO memories_v0_18")
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    conn.execute(_V1_MEMORIES)
    conn.execute(
        "CREATE TABLE changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL, "
        "deleted INTEGER NOT NULL)"
    )
    for m in reversed(memories):  # schema 1 ordered by seq, not by the original's rowid
        blob = np.asarray(m.embedding, dtype="<f4").tobytes()
        conn.execute(
            "INSERT INTO memories (id, content, embedding, dim, tag, metadata) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (m.id, m.content, blob, len(m.embedding or []), m.tag.model_dump_json(),
             json.dumps(m.metadata)),
        )
    conn.execute("CREATE TABLE affective_state_v0_18 (slot TEXT PRIMARY KEY, data TEXT)")
    conn.execute("INSERT INTO affective_state_v0_18 VALUES ('current', '{}')")
    conn.execute(
        "CREATE TABLE affective_state (key TEXT PRIMARY KEY, snapshot TEXT NOT NULL, "
        "updated_at TEXT NOT NULL)"
    )
    conn.execute(
        "INSERT INTO affective_state VALUES ('default', ?, '2026-01-01')", (json.dumps(state),)
    )
    conn.commit()
    conn.close()
    with SQLiteStore(path) as store:
        assert store.schema_version == 3
        assert [m.id for m in store.list_all()] == [m.id for m in reversed(memories)]
        for got, want in zip(store.list_all(), reversed(memories), strict=True):
            assert got.embedding == np.asarray(want.embedding, "<f4").astype(float).tolist()
    with SQLiteAffectiveStateStore(path) as states:
        assert states.load_snapshot() == state
    after = _original_tables(path)
    # same rows (SQLite quotes a renamed table's name in its CREATE statement)
    assert after["memories"][1] == original["memories"][1]
    assert after["memories"][0].replace('"memories"', "memories") == original["memories"][0]
    assert after["memory_vec_rowids"] == original["memory_vec_rowids"]
    assert after["affective_state"][1] == [(1, "current", "{}")]
    assert not {"memories_v0_18", "affective_state_v0_18"} & set(after)


def test_sqlite_embeddings_stored_exactly(tmp_path: Path) -> None:
    """float32 numbers go in 4-byte blobs, other float64 values in 8-byte ones; both
    come back exactly (and NaN / -0.0 / huge values too)."""
    path = tmp_path / "e.db"
    tag = _seeded_memories()[0][0].tag
    vecs = [[0.5, -0.25, 1.0, 0.0], [0.1, 0.2, 0.3, 1e300], [float("nan"), -0.0, 3.0, 1e-320]]
    with SQLiteStore(path) as store:
        for i, v in enumerate(vecs):
            store.save(Memory(id=f"m{i}", content=str(i), embedding=v, tag=tag))
    conn = sqlite3.connect(path)
    sizes = [len(b) for (b,) in conn.execute("SELECT embedding FROM em_memories ORDER BY seq")]
    conn.close()
    assert sizes == [16, 32, 32]
    with SQLiteStore(path) as store:
        for i, v in enumerate(vecs):
            got = store.get(f"m{i}")
            assert got is not None and got.embedding is not None
            assert np.asarray(got.embedding).tobytes() == np.asarray(v).tobytes()


def test_sqlite_opens_an_original_file_in_wal_mode(tmp_path: Path) -> None:
    memories, _ = _seeded_memories()
    path = tmp_path / "wal.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")  # the original's stores run in WAL mode
    conn.commit()
    conn.close()
    _original_layout_db(path, memories)
    held = sqlite3.connect(path)  # another connection keeps the -wal/-shm files alive
    held.execute("SELECT COUNT(*) FROM memories").fetchone()
    try:
        with SQLiteStore(path) as store:
            assert [m.id for m in store.list_all()] == [m.id for m in memories]
    finally:
        held.close()


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


def test_retrieval_plan_is_a_pydantic_model_with_named_weights() -> None:
    """The original's RetrievalPlan: a frozen model, ``weights`` a RetrievalSignals;
    ours is also indexable (and carries the lexical weight last when s7 took part)."""
    from pydantic import BaseModel, ValidationError

    from emotional_memory.embedders import HashingEmbedder
    from emotional_memory.retrieval import PlanWeights, RetrievalPlan, RetrievalSignals

    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=32))
    for text in ("a walk in the rain", "rain on the tin roof", "sunny picnic"):
        engine.encode(text)
    plan = engine.plan_retrieval("rain", top_k=2)
    assert isinstance(plan, BaseModel) and isinstance(plan.weights, RetrievalSignals)
    w = plan.weights
    assert [w[i] for i in range(6)] == [
        w.semantic_similarity, w.mood_congruence, w.affect_proximity,
        w.momentum_alignment, w.recency, w.resonance,
    ]
    assert len(w) == 6 and w.lexical is None
    assert sum(w) == pytest.approx(1.0)
    dumped = plan.model_dump()
    assert set(dumped) == {"weights", "pass1", "pass2", "activation_map", "seed_ids",
                           "candidate_count"}
    assert set(dumped["weights"]) == set(RetrievalSignals.model_fields)
    with pytest.raises(ValidationError):
        plan.candidate_count = 3  # type: ignore[misc]  # frozen
    seven = PlanWeights.from_values([0.1] * 6 + [0.4])
    assert len(seven) == 7 and seven[-1] == 0.4 and seven.lexical == 0.4
    eight = PlanWeights.from_values([0.1] * 6 + [0.2, 0.2])
    assert len(eight) == 8 and (eight.lexical, eight.context) == (0.2, 0.2)
    with pytest.raises(ValueError, match="6, 7 or 8"):
        RetrievalPlan(weights=[1.0, 2.0], pass1=[], pass2=[])
