"""Drop-in compatibility with the original library 0.18.1 (SPEC 11): names at the original's
module paths, keyword names, result and plan models.

The expectations are written from SPEC 11 (the facts checked against the original's
code), with plain-Python oracles where a number is involved; nothing here imports or
needs the original.
"""

from __future__ import annotations

import importlib
from datetime import timedelta
from typing import Any

import pytest

import emotional_memory as em
from emotional_memory import (
    CoreAffect,
    EmotionalMemory,
    InMemoryStore,
    LLMAppraisalEngine,
    Memory,
    MoodDecayConfig,
    StaticAppraisalEngine,
    SyncToAsyncAppraisalEngine,
    SyncToAsyncEmbedder,
    SyncToAsyncStore,
    label_tag,
)
from support.compat_original import (
    START,
    HashEmbedder,
    _params,
    _seeded_memories,
    engine,
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


def test_engine_and_plain_store_reprs_of_the_original() -> None:
    """The engines and the stores that had the default ``object`` repr show what the
    original's reprs show: the store and its memory count, whether a state is held,
    the state file's path."""
    from emotional_memory import (
        AsyncEmotionalMemory,
        InMemoryAffectiveStateStore,
        SQLiteAffectiveStateStore,
    )

    store = InMemoryStore()
    assert repr(store) == "InMemoryStore(count=0)"
    eng = EmotionalMemory(store, HashEmbedder())
    eng.encode("hello")
    assert repr(store) == "InMemoryStore(count=1)"
    assert repr(eng) == "EmotionalMemory(store=InMemoryStore(count=1), memories=1)"
    states = InMemoryAffectiveStateStore()
    assert repr(states) == "InMemoryAffectiveStateStore(has_state=False)"
    states.save(eng.get_state())
    assert repr(states) == "InMemoryAffectiveStateStore(has_state=True)"
    assert repr(SQLiteAffectiveStateStore()) == "SQLiteAffectiveStateStore(path=':memory:')"
    sync_store = InMemoryStore()
    wrapped = SyncToAsyncStore(sync_store)
    aeng = AsyncEmotionalMemory(wrapped, SyncToAsyncEmbedder(HashEmbedder()))
    assert repr(aeng) == f"AsyncEmotionalMemory(store={wrapped!r})"
    assert repr(AsyncEmotionalMemory.from_engine(eng)) == (
        "AsyncEmotionalMemory(store=InMemoryStore(count=1))"
    )


def test_wrapper_reprs_name_their_parts_as_the_original() -> None:
    vector = em.AppraisalVector.neutral()
    static = StaticAppraisalEngine(vector)
    assert repr(static) == f"StaticAppraisalEngine(vector={vector!r})"
    wrapped = SyncToAsyncAppraisalEngine(static)
    assert repr(wrapped) == f"SyncToAsyncAppraisalEngine(inner={static!r})"
    store = InMemoryStore()
    assert repr(SyncToAsyncStore(store)) == "SyncToAsyncStore(inner=InMemoryStore(count=0))"
    embedder = HashEmbedder()
    assert repr(SyncToAsyncEmbedder(embedder)) == f"SyncToAsyncEmbedder(inner={embedder!r})"
