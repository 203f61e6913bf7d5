"""Engine behaviour (SPEC 5-8): encode pipeline, two-pass retrieval, side effects,
resonance links, ablation, routing, dual-path encoding, prune, import/export, state.

Everything runs on a deterministic ``TickClock`` (1 ms per reading unless stated), so
each engine operation's timestamp is known in advance: the engine reads the clock
once per encode / observe / set_affect / retrieve / prune / elaborate.
"""

from __future__ import annotations

import copy
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from emotional_memory import (
    AdaptiveWeightsConfig,
    AppraisalVector,
    CoreAffect,
    EmotionalMemory,
    EmotionalMemoryConfig,
    InMemoryAffectiveStateStore,
    InMemoryStore,
    KeywordAppraisalEngine,
    Memory,
    MoodDecayConfig,
    QueryClassifierConfig,
    ResonanceConfig,
    ResonanceLink,
    RetrievalConfig,
    SQLiteStore,
    categorize_affect,
    consolidation_strength,
    spreading_activation,
)
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.replay import TickClock
from emotional_memory.retrieval import retrieval_breakdown
from support.plain_store import PerMemoryStore

SQRT6 = math.sqrt(6.0)
START = datetime(2026, 1, 1, tzinfo=UTC)
DIM = 8

# --------------------------------------------------------------------------- helpers


class TableEmbedder:
    """Maps texts to fixed vectors (unknown texts -> zero vector); counts calls."""

    def __init__(self, table: dict[str, list[float]], dim: int = DIM) -> None:
        self.table = table
        self.dim = dim
        self.embed_calls = 0
        self.batch_calls = 0

    def embed(self, text: str) -> list[float]:
        self.embed_calls += 1
        return list(self.table.get(text, [0.0] * self.dim))

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        self.batch_calls += 1
        return [list(self.table.get(t, [0.0] * self.dim)) for t in texts]


class CountingEmbedder:
    """Wraps a real embedder and counts calls."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.embed_calls = 0
        self.batch_calls = 0

    def embed(self, text: str) -> list[float]:
        self.embed_calls += 1
        return self.inner.embed(text)

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        self.batch_calls += 1
        return self.inner.embed_batch(texts)


class SpyStore(InMemoryStore):
    """InMemoryStore recording search_by_embedding calls and close()."""

    def __init__(self) -> None:
        super().__init__()
        self.searches: list[tuple[list[float], int]] = []
        self.closed_count = 0

    def search_by_embedding(self, embedding: Any, top_k: int) -> list[Memory]:
        self.searches.append((list(embedding), top_k))
        return super().search_by_embedding(embedding, top_k)

    def close(self) -> None:
        self.closed_count += 1


class SpyAppraisal:
    """Appraisal engine returning a fixed vector and recording its inputs."""

    def __init__(self, vector: AppraisalVector) -> None:
        self.vector = vector
        self.calls: list[str] = []

    def appraise(self, content: str, context: dict[str, Any] | None = None) -> AppraisalVector:
        self.calls.append(content)
        return self.vector


class FakeClassifier:
    """A QueryClassifier returning a fixed type and recording queries."""

    def __init__(self, qtype: str) -> None:
        self.qtype = qtype
        self.queries: list[str] = []

    def classify(self, query: str) -> str:
        self.queries.append(query)
        return self.qtype


def unit(cos0: float, axis: int, dim: int = DIM) -> list[float]:
    """Unit vector with cosine ``cos0`` to e0, the rest on ``axis``."""
    v = [0.0] * dim
    v[0] = cos0
    v[axis] = math.sqrt(max(0.0, 1.0 - cos0 * cos0))
    return v


def e(axis: int, dim: int = DIM) -> list[float]:
    v = [0.0] * dim
    v[axis] = 1.0
    return v


def make(
    embedder: Any = None,
    store: Any = None,
    clock: TickClock | None = None,
    appraisal_engine: Any = None,
    state_store: Any = None,
    query_classifier: Any = None,
    **cfg: Any,
) -> tuple[EmotionalMemory, TickClock]:
    clock = clock if clock is not None else TickClock(START)
    engine = EmotionalMemory(
        store if store is not None else InMemoryStore(),
        embedder if embedder is not None else HashingEmbedder(dim=64),
        appraisal_engine=appraisal_engine,
        config=EmotionalMemoryConfig(**cfg),
        state_store=state_store,
        query_classifier=query_classifier,
        clock=clock,
    )
    return engine, clock


def by_content(engine: EmotionalMemory) -> dict[str, Memory]:
    return {m.content: m for m in engine.list_all()}


def canon(export: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Exported memories with every id replaced by its memory's content."""
    names = {d["id"]: d["content"] for d in export}
    out = []
    for d in copy.deepcopy(export):
        d["id"] = names[d["id"]]
        for link in d["tag"]["resonance_links"]:
            link["source_id"] = names[link["source_id"]]
            link["target_id"] = names[link["target_id"]]
        out.append(d)
    return out


def set_links(engine: EmotionalMemory, memory_id: str, links: list[ResonanceLink]) -> None:
    m = engine.get(memory_id)
    assert m is not None
    engine.store.update(
        m.model_copy(update={"tag": m.tag.model_copy(update={"resonance_links": links})})
    )


def link(src: str, dst: str, strength: float, kind: str = "semantic") -> ResonanceLink:
    return ResonanceLink(source_id=src, target_id=dst, strength=strength, link_type=kind)


def gate(x: float, c: float, k: float) -> float:
    return 0.5 * (1.0 + math.tanh(k * (x - c)))


def hand_adaptive(
    valence: float, arousal: float, base: list[float], cfg: AdaptiveWeightsConfig | None = None
) -> list[float]:
    """SPEC 4 adaptive weights, written out independently."""
    cfg = cfg or AdaptiveWeightsConfig()
    w = list(base)
    neg = gate(valence, cfg.negative_mood_center, -cfg.negative_mood_sharpness)
    sn = cfg.negative_mood_strength
    w[1] += sn * neg * 2 / 3
    w[2] += sn * neg / 3
    w[0] -= sn * neg
    aro = gate(arousal, cfg.high_arousal_center, cfg.high_arousal_sharpness)
    w[3] += cfg.high_arousal_strength * aro
    w[0] -= cfg.high_arousal_strength * aro
    calm = math.exp(-((valence / cfg.calm_valence_width) ** 2)) * gate(
        arousal, cfg.calm_arousal_center, -cfg.calm_sharpness
    )
    sc = cfg.calm_strength
    w[0] += sc * calm
    w[1] -= sc * calm * 2 / 3
    w[2] -= sc * calm / 3
    w = [max(0.0, x) for x in w]
    s = sum(w)
    return [x / s for x in w] if s > 0 else [1 / 6] * 6


def hand_mask(w: list[float], mask: list[float]) -> list[float]:
    m = [a * b for a, b in zip(w, mask, strict=True)]
    s = sum(m)
    if s > 0:
        return [x / s for x in m]
    n = sum(mask)
    return [x / n for x in mask]


def hand_strength(tag: Any, now: datetime) -> float:
    """SPEC 3 effective strength with default DecayConfig."""
    elapsed = max((now - tag.timestamp).total_seconds(), 1.0)
    a = tag.core_affect.arousal
    d = max(0.0, 0.5 * (1 - 0.5 * a) / (1 + 0.1 * tag.retrieval_count))
    s = tag.consolidation_strength * elapsed ** (-d)
    s = min(max(s, 0.0), tag.consolidation_strength)
    if a >= 0.7:
        s = max(s, min(0.1, tag.consolidation_strength))
    return s


def cosine(a: list[float] | None, b: list[float] | None) -> float:
    if not a or not b:
        return 0.0
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def affect_tuple(a: CoreAffect) -> tuple[float, float, float]:
    return (a.valence, a.arousal, a.dominance)


def approx_affect(a: CoreAffect, b: CoreAffect, tol: float = 1e-12) -> bool:
    return all(abs(x - y) <= tol for x, y in zip(affect_tuple(a), affect_tuple(b), strict=True))


NEG = AppraisalVector(
    novelty=0.8, goal_relevance=-0.9, coping_potential=0.1, norm_congruence=-0.5,
    self_relevance=0.9,
)
POS = AppraisalVector(
    novelty=0.1, goal_relevance=0.8, coping_potential=0.9, norm_congruence=0.6,
    self_relevance=0.3,
)


# --------------------------------------------------------------------------- encode


def test_set_affect_then_encode_stores_zero_velocity_and_snapshots_state() -> None:
    engine, _ = make()
    a = CoreAffect(valence=0.6, arousal=0.8, dominance=0.3)
    engine.set_affect(CoreAffect(valence=-0.5, arousal=0.1))
    engine.set_affect(a)
    m = engine.encode("a sunny day at the beach")
    state = engine.get_state()
    assert m.tag.core_affect == a
    assert m.tag.momentum.velocity() == (0.0, 0.0, 0.0)
    assert m.tag.momentum.magnitude() == 0.0
    # the tag snapshots the state after the update
    assert state.core_affect == a
    assert m.tag.momentum == state.momentum
    assert m.tag.mood_snapshot == state.mood
    assert m.tag.timestamp == START + timedelta(milliseconds=3)
    assert m.tag.appraisal is None
    assert m.tag.pending_appraisal is False
    assert m.tag.emotion_label is None
    assert engine.get(m.id) == m


def test_encode_feeds_current_affect_twice_into_mood() -> None:
    engine, _ = make()
    a = CoreAffect(valence=0.8, arousal=0.9, dominance=0.5)
    engine.set_affect(a)
    m = engine.encode("event")
    # neutral mood (0, 0, .5; inertia .5); e = 0.1 * (1 - 0.5) = 0.05; two updates with a
    e1 = 0.05
    v = (1 - e1) * (e1 * 0.8) + e1 * 0.8
    ar = (1 - e1) * (e1 * 0.9) + e1 * 0.9
    assert m.tag.mood_snapshot.valence == pytest.approx(v, abs=1e-15)
    assert m.tag.mood_snapshot.arousal == pytest.approx(ar, abs=1e-15)
    assert m.tag.mood_snapshot.dominance == pytest.approx(0.5, abs=1e-15)


def test_encode_with_affect_stores_real_trajectory_velocity() -> None:
    engine, _ = make(clock=TickClock(START, step=timedelta(seconds=1)))
    a0 = CoreAffect(valence=-0.4, arousal=0.2, dominance=0.6)
    a1 = CoreAffect(valence=0.5, arousal=0.7, dominance=0.4)
    engine.set_affect(a0)
    m = engine.encode("the call came through", affect=a1)
    assert m.tag.core_affect == a1
    vel = m.tag.momentum.velocity()  # dt = 1 s between the two readings
    assert vel == pytest.approx((0.9, 0.5, -0.2), abs=1e-12)
    assert engine.get_state().core_affect == a1
    assert m.tag.consolidation_strength == consolidation_strength(
        a1.arousal, engine.get_state().mood.arousal
    )

    # the default path after the same two set_affects has zero velocity
    other, _ = make(clock=TickClock(START, step=timedelta(seconds=1)))
    other.set_affect(a0)
    other.set_affect(a1)
    m2 = other.encode("the call came through")
    assert m2.tag.momentum.velocity() == (0.0, 0.0, 0.0)
    assert m2.tag.momentum.dd_valence == pytest.approx(-0.9, abs=1e-12)


def test_consolidation_uses_event_arousal_and_new_mood_arousal() -> None:
    engine, _ = make()
    engine.set_affect(CoreAffect(valence=0.2, arousal=0.9))
    mood_before = engine.get_state().mood.arousal
    m = engine.encode("high arousal event")
    mood_after = engine.get_state().mood.arousal
    assert mood_after != mood_before
    assert m.tag.mood_snapshot.arousal == mood_after
    e_ = 0.7 * 0.9 + 0.3 * mood_after
    expected = min(1.0, max(0.1, 1 - 4 * (e_ - 0.7) ** 2))
    assert m.tag.consolidation_strength == pytest.approx(expected, abs=1e-15)
    assert m.tag.consolidation_strength != consolidation_strength(0.9, mood_before)


def test_given_appraisal_drives_state() -> None:
    engine, _ = make()
    m = engine.encode("I failed the exam", appraisal=NEG)
    projected = NEG.to_core_affect()
    assert m.tag.core_affect == projected
    assert m.tag.appraisal == NEG
    assert engine.get_state().core_affect == projected
    assert m.tag.consolidation_strength == consolidation_strength(
        projected.arousal, engine.get_state().mood.arousal
    )


def test_appraisal_engine_used_when_enabled() -> None:
    spy = SpyAppraisal(POS)
    engine, _ = make(appraisal_engine=spy)
    m = engine.encode("got the job")
    assert spy.calls == ["got the job"]
    assert m.tag.appraisal == POS
    assert m.tag.core_affect == POS.to_core_affect()
    assert engine.get_state().core_affect == POS.to_core_affect()
    # an explicit appraisal or affect bypasses the engine
    m2 = engine.encode("explicit", appraisal=NEG)
    assert m2.tag.appraisal == NEG
    a = CoreAffect(valence=-0.2, arousal=0.3)
    m3 = engine.encode("explicit affect", affect=a)
    assert m3.tag.core_affect == a
    assert spy.calls == ["got the job"]


def test_keyword_appraisal_engine_drives_encode() -> None:
    kw = KeywordAppraisalEngine()
    engine, _ = make(appraisal_engine=kw)
    text = "I was furious and terrified when the car crashed"
    m = engine.encode(text)
    expected = kw.appraise(text)
    assert m.tag.appraisal == expected
    assert m.tag.core_affect == expected.to_core_affect()


def test_appraisal_engine_skipped_when_disabled() -> None:
    spy = SpyAppraisal(POS)
    engine, _ = make(appraisal_engine=spy, enable_appraisal=False)
    a = CoreAffect(valence=-0.3, arousal=0.4)
    engine.set_affect(a)
    m = engine.encode("got the job")
    assert spy.calls == []
    assert m.tag.appraisal is None
    assert m.tag.core_affect == a
    # an explicitly given appraisal still counts
    m2 = engine.encode("explicit", appraisal=POS)
    assert m2.tag.core_affect == POS.to_core_affect()
    assert spy.calls == []


def test_auto_categorize_stores_label() -> None:
    engine, _ = make(auto_categorize=True)
    a = CoreAffect(valence=0.8, arousal=0.6)
    m = engine.encode("party", affect=a)
    assert m.tag.emotion_label is not None
    assert m.tag.emotion_label == categorize_affect(a)
    assert engine.get(m.id).tag.emotion_label == m.tag.emotion_label
    plain, _ = make()
    assert plain.encode("party", affect=a).tag.emotion_label is None


def test_metadata_stored_and_copied() -> None:
    engine, _ = make()
    meta = {"source": "chat", "turn": 3, "tags": ["a", "b"]}
    m = engine.encode("hello", metadata=meta)
    meta["source"] = "mutated"
    stored = engine.get(m.id)
    assert stored.metadata == {"source": "chat", "turn": 3, "tags": ["a", "b"]}
    assert engine.encode("no meta").metadata == {}


def test_encode_persists_state_when_state_store_configured() -> None:
    ss = InMemoryAffectiveStateStore()
    engine, _ = make(state_store=ss)
    engine.encode("event", affect=CoreAffect(valence=0.3, arousal=0.6))
    assert ss.load_snapshot() == engine.save_state()
    assert ss.load() == engine.get_state()  # the original's protocol: a state


# --------------------------------------------------------------------------- encode_batch


def test_encode_batch_equals_repeated_encode() -> None:
    texts = [
        "the server crashed before the demo",
        "we fixed the server after the demo",
        "lunch with the team was fun",
        "the demo went well in the end",
        "crashed again, the server is flaky",
    ]
    metas = [{"i": i} if i % 2 else None for i in range(len(texts))]
    start_affect = CoreAffect(valence=-0.3, arousal=0.7, dominance=0.4)

    emb_a = CountingEmbedder(HashingEmbedder(dim=64))
    a, _ = make(embedder=emb_a, auto_categorize=True)
    a.set_affect(start_affect)
    out_a = a.encode_batch(texts, metas)
    assert emb_a.batch_calls == 1
    assert emb_a.embed_calls == 0

    b, _ = make(auto_categorize=True)
    b.set_affect(start_affect)
    out_b = [b.encode(t, metadata=m) for t, m in zip(texts, metas, strict=True)]

    assert [m.content for m in out_a] == texts
    assert canon(a.export_memories()) == canon(b.export_memories())
    assert a.save_state() == b.save_state()
    assert [m.tag.timestamp for m in out_a] == [m.tag.timestamp for m in out_b]
    # the returned memories are the store's copies
    assert out_a == [a.get(m.id) for m in out_a]
    assert len(a) == len(texts)


def test_encode_batch_with_appraisal_engine_matches_encode() -> None:
    texts = ["I was furious", "what a happy surprise", "a calm walk"]
    kw = KeywordAppraisalEngine()
    a, _ = make(appraisal_engine=kw)
    a.encode_batch(texts)
    b, _ = make(appraisal_engine=kw)
    for t in texts:
        b.encode(t)
    assert canon(a.export_memories()) == canon(b.export_memories())
    assert a.save_state() == b.save_state()


def test_encode_batch_empty() -> None:
    emb = CountingEmbedder(HashingEmbedder(dim=64))
    engine, _ = make(embedder=emb)
    before = engine.save_state()
    assert engine.encode_batch([]) == []
    assert len(engine) == 0
    assert engine.save_state() == before


# --------------------------------------------------------------------------- observe


def test_observe_updates_state_and_stores_nothing() -> None:
    engine, _ = make()
    a = CoreAffect(valence=0.4, arousal=0.5, dominance=0.7)
    tag = engine.observe("something happened", affect=a)
    assert len(engine) == 0
    # SPEC 11: observe returns the tag encode would have stored
    assert tag.core_affect == a
    assert tag.mood_snapshot == engine.get_state().mood
    assert engine.get_state().core_affect == a
    engine.observe(appraisal=NEG)
    assert engine.get_state().core_affect == NEG.to_core_affect()
    assert len(engine) == 0


def test_observe_matches_encode_state_update() -> None:
    spy = SpyAppraisal(NEG)
    a, _ = make(appraisal_engine=spy)
    b, _ = make(appraisal_engine=SpyAppraisal(NEG))
    a.set_affect(CoreAffect(valence=0.2, arousal=0.2))
    b.set_affect(CoreAffect(valence=0.2, arousal=0.2))
    a.observe("bad news")
    b.encode("bad news")
    assert spy.calls == ["bad news"]
    assert a.save_state() == b.save_state()
    assert len(a) == 0 and len(b) == 1


# --------------------------------------------------------------------------- candidates


def _seeded(embedder: Any, texts: list[str], **cfg: Any) -> tuple[EmotionalMemory, TickClock]:
    engine, clock = make(embedder=embedder, **cfg)
    for t in texts:
        engine.encode(t)
    return engine, clock


def test_candidates_all_memories_when_store_small() -> None:
    table = {"m1": e(1), "m2": e(2), "m3": e(3), "q": e(1)}
    store = SpyStore()
    engine, _ = _seeded(TableEmbedder(table), ["m1", "m2", "m3"], store=store)
    store.searches.clear()
    res = engine.retrieve_with_explanations("q", top_k=1)  # limit 3 == len(store)
    assert store.searches == []
    assert res[0].candidate_count == 3
    assert res[0].memory.content == "m1"


def test_candidates_prefiltered_by_embedding_when_store_large() -> None:
    table = {
        "near": unit(0.9, 1),
        "mid": unit(0.5, 2),
        "far": unit(0.0, 3),
        "other": unit(0.7, 4),
        "q": e(0),
    }
    store = SpyStore()
    engine, _ = _seeded(TableEmbedder(table), ["far", "mid", "near", "other"], store=store)
    store.searches.clear()
    res = engine.retrieve_with_explanations("q", top_k=1)  # limit 3 < 4 memories
    assert store.searches == [(e(0), 3)]
    assert res[0].candidate_count == 3
    assert res[0].memory.content == "near"

    # candidate_multiplier=1, top_k=2: only the two cosine-nearest can be returned
    store2 = SpyStore()
    engine2, _ = _seeded(
        TableEmbedder(table), ["far", "mid", "near", "other"], store=store2,
        retrieval=RetrievalConfig(candidate_multiplier=1),
    )
    store2.searches.clear()
    res2 = engine2.retrieve("q", top_k=2)
    assert store2.searches == [(e(0), 2)]
    assert {m.content for m in res2} == {"near", "other"}


# --------------------------------------------------------------------------- two-pass


def _two_pass_engine() -> tuple[EmotionalMemory, TickClock, dict[str, str]]:
    table = {
        "A": e(0),
        "B": unit(0.30, 1),
        "C": unit(0.32, 2),
        "D": unit(0.0, 4),
        "E": unit(0.31, 3),
        "q": e(0),
    }
    # threshold above any possible link score: no automatic links
    engine, clock = make(
        embedder=TableEmbedder(table), resonance=ResonanceConfig(threshold=5.0)
    )
    ids = {t: engine.encode(t).id for t in ["A", "B", "C", "D", "E"]}
    assert all(not m.tag.resonance_links for m in engine.list_all())
    set_links(engine, ids["A"], [link(ids["A"], ids["B"], 1.0)])
    set_links(engine, ids["D"], [link(ids["D"], ids["E"], 1.0)])
    clock.advance(timedelta(seconds=10))
    return engine, clock, ids


def test_two_pass_activation_only_from_seeds_and_rerank() -> None:
    engine, clock, ids = _two_pass_engine()
    before = {m.id: m for m in engine.list_all()}
    now = clock.now
    res = engine.retrieve_with_explanations("q", top_k=2)
    # pass 1: A, C, E, B, D -> seeds A, C. Only A's link spreads (to B); D is no seed,
    # so E gets nothing. Pass 2: B's activation lifts it above C and E.
    assert [r.memory.content for r in res] == ["A", "B"]
    a, b = res
    assert (a.pass1_rank, a.pass2_rank, a.selected_as_seed) == (1, 1, True)
    assert a.activation_level == 0.0
    assert (b.pass1_rank, b.pass2_rank, b.selected_as_seed) == (4, 2, False)
    assert b.activation_level == pytest.approx(1.0)
    assert b.breakdown.raw_signals.resonance == pytest.approx(1.0)
    for r in res:
        assert r.candidate_count == 5
        assert r.score == r.breakdown.total_score
        stored = engine.get(r.memory.id)
        assert r.memory == stored
        assert stored.tag.retrieval_count == 1
        assert stored.tag.last_retrieved == now

    # activation computed from the seeds over the pre-retrieval candidates
    act = spreading_activation([ids["A"], ids["C"]], list(before.values()), hops=2)
    assert act == {ids["B"]: pytest.approx(1.0)}
    assert spreading_activation([ids["D"]], list(before.values()))[ids["E"]] == 1.0

    # scores agree with an independent per-memory breakdown
    state = engine.get_state()
    weights = engine.current_weights("q", now)
    for r, amap in ((a, {}), (b, {ids["B"]: 1.0})):
        bd = retrieval_breakdown(
            e(0), state.core_affect, engine.get_current_mood(now), state.momentum,
            before[r.memory.id], amap, now, engine.config.decay, engine.config.retrieval,
            precomputed_weights=weights,
        )
        assert r.score == pytest.approx(bd.total_score, abs=1e-12)
        assert r.breakdown.raw_signals.as_tuple() == pytest.approx(
            bd.raw_signals.as_tuple(), abs=1e-12
        )
        assert r.breakdown.weights.as_tuple() == pytest.approx(weights.tolist(), abs=1e-15)

    # untouched memories keep their bookkeeping
    for name in ("C", "D", "E"):
        tag = engine.get(ids[name]).tag
        assert tag.retrieval_count == 0
        assert tag.last_retrieved is None


def test_two_pass_without_links_pass2_equals_pass1() -> None:
    table = {"x": unit(0.9, 1), "y": unit(0.5, 2), "z": unit(0.1, 3), "q": e(0)}
    engine, _ = _seeded(
        TableEmbedder(table), ["z", "y", "x"], resonance=ResonanceConfig(threshold=5.0)
    )
    res = engine.retrieve_with_explanations("q", top_k=3)
    assert [r.memory.content for r in res] == ["x", "y", "z"]
    for i, r in enumerate(res, start=1):
        assert r.pass1_rank == r.pass2_rank == i
        assert r.selected_as_seed
        assert r.activation_level == 0.0
        assert r.breakdown.raw_signals.resonance == 0.0
    assert [m.content for m in engine.retrieve("q", top_k=2)] == ["x", "y"]


def test_retrieve_bad_top_k_and_empty_store() -> None:
    engine, _ = make()
    assert engine.retrieve("anything") == []
    assert engine.retrieve_with_explanations("anything", top_k=3) == []
    with pytest.raises(ValueError):
        engine.retrieve("anything", top_k=0)
    engine.encode("something")
    with pytest.raises(ValueError):
        engine.retrieve("anything", top_k=0)
    with pytest.raises(ValueError):
        engine.retrieve_with_explanations("anything", top_k=-1)


# --------------------------------------------------------------------------- query_affect


def test_query_affect_overrides_s3_only() -> None:
    a0 = CoreAffect(valence=-0.7, arousal=0.3, dominance=0.4)
    a1 = CoreAffect(valence=0.8, arousal=0.9, dominance=0.6)
    override = CoreAffect(valence=-0.7, arousal=0.3, dominance=0.4)

    def build() -> EmotionalMemory:
        eng, _ = make(resonance=ResonanceConfig(threshold=5.0))
        eng.encode("rainy commute to work", affect=a0)
        eng.encode("sunny picnic in the park", affect=CoreAffect(valence=0.5, arousal=0.5))
        eng.set_affect(a1)
        return eng

    e1, e2 = build(), build()
    before = by_content(e1)
    r1 = e1.retrieve_with_explanations("commute", top_k=2, query_affect=override)
    r2 = e2.retrieve_with_explanations("commute", top_k=2)
    s1 = {r.memory.content: r for r in r1}
    s2 = {r.memory.content: r for r in r2}
    assert set(s1) == set(s2) == {"rainy commute to work", "sunny picnic in the park"}
    for content, x in s1.items():
        y = s2[content]
        rx, ry = x.breakdown.raw_signals, y.breakdown.raw_signals
        assert x.breakdown.weights == y.breakdown.weights
        for name in ("semantic_similarity", "mood_congruence", "momentum_alignment",
                     "recency", "resonance"):
            assert getattr(rx, name) == pytest.approx(getattr(ry, name), abs=1e-12)
        tag = before[content].tag
        assert rx.affect_proximity == pytest.approx(
            max(0.0, 1 - override.distance(tag.core_affect) / SQRT6), abs=1e-12
        )
        assert ry.affect_proximity == pytest.approx(
            max(0.0, 1 - a1.distance(tag.core_affect) / SQRT6), abs=1e-12
        )
        # side effects use the engine's current affect, not the override
        tx = x.memory.tag.model_copy(update={"resonance_links": []})
        ty = y.memory.tag.model_copy(update={"resonance_links": []})
        assert tx == ty
    rainy = s1["rainy commute to work"].memory.tag
    assert rainy.reconsolidation_count == 1  # ape vs a1 is large; vs override it is 0


# --------------------------------------------------------------------------- reconsolidation


A0 = CoreAffect(valence=-0.8, arousal=0.2, dominance=0.5)
A1 = CoreAffect(valence=0.8, arousal=0.9, dominance=0.5)


def _one_memory(**cfg: Any) -> tuple[EmotionalMemory, TickClock, str]:
    engine, clock = make(**cfg)
    mid = engine.encode("the old argument", affect=A0).id
    engine.set_affect(A1)
    return engine, clock, mid


def _pred(tag_core: CoreAffect, expected: CoreAffect | None, lr: float, affect: CoreAffect,
          ape: float) -> tuple[CoreAffect, float]:
    target = min(0.8, max(0.05, ape))
    new_lr = min(0.8, max(0.05, lr + 0.2 * (target - lr)))
    base = expected if expected is not None else tag_core
    return base.lerp(affect, new_lr), new_lr


def test_reconsolidation_window_lifecycle() -> None:
    engine, clock, mid = _one_memory()
    # first retrieval: ape > 0.3 opens the window and reconsolidates
    t1 = clock.now
    m1 = engine.retrieve("argument", top_k=1)[0]
    ape1 = A0.distance(A1)
    assert ape1 > 0.3
    alpha1 = min(ape1 * 0.2, 0.5)
    core1 = A0.lerp(A1, alpha1)
    assert m1.tag.window_opened_at == t1
    assert m1.tag.reconsolidation_count == 1
    assert approx_affect(m1.tag.core_affect, core1)
    exp1, lr1 = _pred(core1, None, 0.2, A1, ape1)
    assert approx_affect(m1.tag.expected_affect, exp1)
    assert m1.tag.prediction_learning_rate == pytest.approx(lr1, abs=1e-15)
    assert engine.get(mid) == m1

    # within the window (exactly 300 s later): reconsolidates again, window stays
    clock.now = t1 + timedelta(seconds=300)
    m2 = engine.retrieve("argument", top_k=1)[0]
    ape2 = exp1.distance(A1)
    core2 = core1.lerp(A1, min(ape2 * 0.2, 0.5))
    assert m2.tag.reconsolidation_count == 2
    assert m2.tag.window_opened_at == t1
    assert approx_affect(m2.tag.core_affect, core2)
    exp2, lr2 = _pred(core2, exp1, lr1, A1, ape2)
    assert approx_affect(m2.tag.expected_affect, exp2)
    assert m2.tag.prediction_learning_rate == pytest.approx(lr2, abs=1e-15)

    # past the window: it closes, no reconsolidation
    clock.now = t1 + timedelta(seconds=301)
    m3 = engine.retrieve("argument", top_k=1)[0]
    assert m3.tag.window_opened_at is None
    assert m3.tag.reconsolidation_count == 2
    assert m3.tag.core_affect == m2.tag.core_affect
    assert m3.tag.retrieval_count == 3


def test_no_reconsolidation_below_threshold() -> None:
    engine, _ = make()
    a = CoreAffect(valence=0.1, arousal=0.4)
    engine.encode("calm", affect=a)
    engine.set_affect(CoreAffect(valence=0.2, arousal=0.4))  # ape 0.1 < 0.3
    m = engine.retrieve("calm", top_k=1)[0]
    assert m.tag.window_opened_at is None
    assert m.tag.reconsolidation_count == 0
    assert m.tag.core_affect == a
    assert m.tag.expected_affect is not None


def test_reconsolidation_disabled_never_changes_core_affect() -> None:
    engine, clock, _ = _one_memory(enable_reconsolidation=False)
    core, lr, expected = A0, 0.2, None
    for _ in range(3):
        m = engine.retrieve("argument", top_k=1)[0]
        clock.advance(timedelta(seconds=60))
        assert m.tag.core_affect == A0
        assert m.tag.reconsolidation_count == 0
        assert m.tag.window_opened_at is None
        ape = (expected if expected is not None else core).distance(A1)
        expected, lr = _pred(core, expected, lr, A1, ape)
        assert approx_affect(m.tag.expected_affect, expected)
        assert m.tag.prediction_learning_rate == pytest.approx(lr, abs=1e-15)


def test_prediction_lr_clamped_low_when_ape_tiny() -> None:
    engine, _ = make()
    a = CoreAffect(valence=0.3, arousal=0.3)
    engine.encode("steady", affect=a)  # current affect == a -> ape 0
    m = engine.retrieve("steady", top_k=1)[0]
    # target = 0.05; lr = 0.2 + 0.2 * (0.05 - 0.2) = 0.17
    assert m.tag.prediction_learning_rate == pytest.approx(0.17, abs=1e-15)
    assert m.tag.expected_affect == a


def test_retrieval_count_and_last_retrieved() -> None:
    table = {"hit": e(0), "miss": e(1), "q": e(0)}
    engine, clock = _seeded(TableEmbedder(table), ["hit", "miss"])
    engine.retrieve("q", top_k=1)
    clock.advance(timedelta(seconds=5))
    t2 = clock.now
    engine.retrieve("q", top_k=1)
    mems = by_content(engine)
    assert mems["hit"].tag.retrieval_count == 2
    assert mems["hit"].tag.last_retrieved == t2
    assert mems["miss"].tag.retrieval_count == 0
    assert mems["miss"].tag.last_retrieved is None


# --------------------------------------------------------------------------- Hebbian


def _hebbian_engine(**cfg: Any) -> tuple[EmotionalMemory, dict[str, str]]:
    table = {"A": e(0), "B": unit(0.6, 1), "C": e(2), "q": e(0)}
    engine, _ = _seeded(TableEmbedder(table), ["A", "B", "C"], **cfg)
    ids = {m.content: m.id for m in engine.list_all()}
    return engine, ids


def _links(engine: EmotionalMemory) -> dict[str, dict[str, float]]:
    return {
        m.content: {
            engine.get(lk.target_id).content: lk.strength for lk in m.tag.resonance_links
        }
        for m in engine.list_all()
    }


def test_hebbian_strengthens_links_between_co_retrieved() -> None:
    engine, _ = _hebbian_engine()
    before = _links(engine)
    assert set(before["A"]) == {"B", "C"} and set(before["B"]) == {"A", "C"}
    res = engine.retrieve("q", top_k=2)
    assert [m.content for m in res] == ["A", "B"]
    after = _links(engine)
    assert after["A"]["B"] == pytest.approx(before["A"]["B"] + 0.05, abs=1e-15)
    assert after["B"]["A"] == pytest.approx(before["B"]["A"] + 0.05, abs=1e-15)
    assert after["A"]["C"] == before["A"]["C"]
    assert after["B"]["C"] == before["B"]["C"]
    assert after["C"] == before["C"]


def test_hebbian_caps_at_one() -> None:
    engine, ids = _hebbian_engine()
    a, b, c = ids["A"], ids["B"], ids["C"]
    set_links(engine, a, [link(a, b, 0.98), link(a, c, 0.5)])
    set_links(engine, b, [link(b, a, 0.99)])
    engine.retrieve("q", top_k=2)
    after = _links(engine)
    assert after["A"]["B"] == 1.0
    assert after["B"]["A"] == 1.0
    assert after["A"]["C"] == 0.5


@pytest.mark.parametrize("variant", ["single", "zero_increment"])
def test_hebbian_no_change(variant: str) -> None:
    if variant == "single":
        engine, _ = _hebbian_engine()
        top_k = 1
    else:
        engine, _ = _hebbian_engine(resonance=ResonanceConfig(hebbian_increment=0.0))
        top_k = 2
    before = _links(engine)
    res = engine.retrieve("q", top_k=top_k)
    assert len(res) == top_k
    assert _links(engine) == before


# --------------------------------------------------------------------------- resonance


def _hand_link_score(new: Memory, cand: Memory) -> tuple[float, str]:
    sem = cosine(new.embedding, cand.embedding)
    emo = max(0.0, 1 - new.tag.core_affect.distance(cand.tag.core_affect) / SQRT6)
    dt = abs((new.tag.timestamp - cand.tag.timestamp).total_seconds())
    temp = math.exp(-dt * math.log(2) / 3600.0)
    score = 0.5 * sem + 0.3 * emo + 0.2 * temp
    dv = abs(new.tag.core_affect.valence - cand.tag.core_affect.valence)
    if temp > 0.5 and dv > 1.0:
        kind = "contrastive"
    elif cand.tag.timestamp < new.tag.timestamp and temp > 0.7 and sem > 0.6:
        kind = "causal"
    elif sem >= emo and sem >= temp:
        kind = "semantic"
    elif emo >= temp:
        kind = "emotional"
    else:
        kind = "temporal"
    return score, kind


def test_forward_and_backward_links_at_encode() -> None:
    engine, clock = make()
    texts = [
        ("the server crashed during the demo", CoreAffect(valence=-0.8, arousal=0.9)),
        ("coffee with an old friend", CoreAffect(valence=0.7, arousal=0.3)),
        ("the demo server is down again", CoreAffect(valence=-0.6, arousal=0.8)),
        ("quiet evening reading a book", CoreAffect(valence=0.4, arousal=0.1)),
        ("deadline stress before the release", CoreAffect(valence=-0.5, arousal=0.85)),
        ("celebrated the release with the team", CoreAffect(valence=0.9, arousal=0.8)),
        ("rainy day, nothing happened", CoreAffect(valence=0.0, arousal=0.1)),
        ("server logs show a crash loop", CoreAffect(valence=-0.4, arousal=0.6)),
    ]
    for i, (t, a) in enumerate(texts):
        engine.encode(t, affect=a)
        clock.advance(timedelta(minutes=7 * (i + 1)))
    before = {m.id: list(m.tag.resonance_links) for m in engine.list_all()}
    new = engine.encode("the server crashed again", affect=CoreAffect(valence=-0.7, arousal=0.8))
    others = [m for m in engine.list_all() if m.id != new.id]

    scored = []
    for cand in others:
        score, kind = _hand_link_score(new, cand)
        if score >= 0.3:
            scored.append((score, cand.id, kind))
    scored.sort(key=lambda x: -x[0])
    expected = scored[:5]
    links = new.tag.resonance_links
    assert len(links) == min(5, len(scored)) >= 3
    assert [lk.target_id for lk in links] == [t for _, t, _ in expected]
    assert [lk.strength for lk in links] == pytest.approx([s for s, _, _ in expected], abs=1e-12)
    assert [lk.link_type for lk in links] == [k for _, _, k in expected]
    assert all(lk.source_id == new.id for lk in links)
    strengths = [lk.strength for lk in links]
    assert strengths == sorted(strengths, reverse=True)
    assert engine.get(new.id).tag.resonance_links == links

    # backward twins on targets; a full target replaces its weakest only if stronger
    for lk in links:
        back = ResonanceLink(
            source_id=lk.target_id, target_id=new.id, strength=lk.strength,
            link_type=lk.link_type,
        )
        exp = list(before[lk.target_id])
        if len(exp) < 5:
            exp.append(back)
        else:
            weakest = min(range(len(exp)), key=lambda i: exp[i].strength)
            if back.strength > exp[weakest].strength:
                exp[weakest] = back
        assert engine.get(lk.target_id).tag.resonance_links == exp
    # non-targets unchanged
    targets = {lk.target_id for lk in links}
    for m in others:
        if m.id not in targets:
            assert m.tag.resonance_links == before[m.id]
    assert all(len(m.tag.resonance_links) <= 5 for m in engine.list_all())


def test_target_at_max_links_replaces_weakest_only_if_strictly_stronger() -> None:
    table = {
        "A": e(0),
        "B": unit(0.2, 1),
        "C": [0.8, 0.0, 0.6, 0.0, 0.0, 0.0, 0.0, 0.0],
        "D": [0.5, 0.0, 0.0, math.sqrt(0.75), 0.0, 0.0, 0.0, 0.0],
        "E": [0.8, 0.0, 0.0, 0.0, 0.6, 0.0, 0.0, 0.0],
    }
    # zero-step clock: all timestamps equal (temporal proximity 1), neutral affect
    # (emotional 1): link score = 0.5 * cos + 0.5
    engine, _ = make(
        embedder=TableEmbedder(table),
        clock=TickClock(START, step=timedelta(0)),
        resonance=ResonanceConfig(max_links=1),
    )
    ids: dict[str, str] = {}

    def links_of(name: str) -> list[tuple[str, str, float]]:
        names = {v: k for k, v in ids.items()}
        return [
            (names[lk.source_id], names[lk.target_id], lk.strength)
            for lk in engine.get(ids[name]).tag.resonance_links
        ]

    for name in "AB":
        ids[name] = engine.encode(name).id
    assert links_of("B") == [("B", "A", pytest.approx(0.6))]
    assert links_of("A") == [("A", "B", pytest.approx(0.6))]

    ids["C"] = engine.encode("C").id  # C->A 0.9 beats A's 0.6 link: replaced
    assert links_of("C") == [("C", "A", pytest.approx(0.9))]
    assert links_of("A") == [("A", "C", pytest.approx(0.9))]
    assert links_of("B") == [("B", "A", pytest.approx(0.6))]

    ids["D"] = engine.encode("D").id  # D->A 0.75 weaker than A->C 0.9: A unchanged
    assert links_of("D") == [("D", "A", pytest.approx(0.75))]
    assert links_of("A") == [("A", "C", pytest.approx(0.9))]

    ids["E"] = engine.encode("E").id  # E->A 0.9 ties A->C exactly: not strictly stronger
    e_link = engine.get(ids["E"]).tag.resonance_links[0]
    a_link = engine.get(ids["A"]).tag.resonance_links[0]
    assert e_link.target_id == ids["A"]
    assert e_link.strength == a_link.strength
    assert links_of("A") == [("A", "C", pytest.approx(0.9))]


def test_link_candidates_prefiltered_when_store_large() -> None:
    table = {"m1": e(1), "m2": unit(0.3, 2), "m3": unit(0.9, 3), "new": e(0)}
    store = SpyStore()
    engine, _ = make(
        embedder=TableEmbedder(table), store=store,
        resonance=ResonanceConfig(max_links=1, candidate_multiplier=2),
    )
    engine.encode("m1")
    engine.encode("m2")  # store holds 2 <= 2: all candidates
    assert store.searches == []
    engine.encode("m3")  # 3 > 2: search_by_embedding(new embedding, 2)
    assert store.searches == [(unit(0.9, 3), 2)]
    new = engine.encode("new")
    assert store.searches[-1] == (e(0), 2)
    assert [engine.get(lk.target_id).content for lk in new.tag.resonance_links] == ["m3"]


def test_resonance_disabled() -> None:
    table = {"A": e(0), "B": unit(0.9, 1), "C": unit(0.8, 2), "q": e(0)}
    engine, _ = _seeded(TableEmbedder(table), ["A", "B", "C"], enable_resonance=False)
    assert all(not m.tag.resonance_links for m in engine.list_all())
    w = engine.current_weights("q")
    assert w[5] == 0.0
    assert float(np.sum(w)) == pytest.approx(1.0, abs=1e-12)
    # even with links present (e.g. imported), nothing spreads
    ids = {m.content: m.id for m in engine.list_all()}
    set_links(engine, ids["A"], [link(ids["A"], ids["C"], 1.0)])
    res = engine.retrieve_with_explanations("q", top_k=2)
    assert [r.memory.content for r in res] == ["A", "B"]
    for r in res:
        assert r.activation_level == 0.0
        assert r.breakdown.weights.resonance == 0.0
        assert r.breakdown.raw_signals.resonance == 0.0
        assert r.pass1_rank == r.pass2_rank


# --------------------------------------------------------------------------- ablation


@pytest.mark.parametrize(
    ("flags", "mask"),
    [
        ({}, [1, 1, 1, 1, 1, 1]),
        ({"enable_mood_signal": False}, [1, 0, 1, 1, 1, 1]),
        ({"enable_momentum": False}, [1, 1, 1, 0, 1, 1]),
        ({"enable_mood_signal": False, "enable_momentum": False, "enable_resonance": False},
         [1, 0, 1, 0, 1, 0]),
    ],
)
def test_ablation_weights_hand_computed(flags: dict[str, bool], mask: list[int]) -> None:
    engine, _ = make(**flags)
    for _ in range(5):
        engine.set_affect(CoreAffect(valence=-0.9, arousal=0.95))
    mood = engine.get_state().mood
    base = [0.35, 0.25, 0.15, 0.10, 0.10, 0.05]
    expected = hand_mask(hand_adaptive(mood.valence, mood.arousal, base), mask)
    got = engine.current_weights("anything")
    assert got.tolist() == pytest.approx(expected, abs=1e-12)
    for i, m in enumerate(mask):
        if not m:
            assert got[i] == 0.0


def test_ablation_all_enabled_weights_zero_gives_uniform_over_enabled() -> None:
    engine, _ = make(
        enable_mood_signal=False,
        retrieval=RetrievalConfig(
            base_weights=[0.0, 1.0, 0.0, 0.0, 0.0, 0.0],
            adaptive_weights_config=AdaptiveWeightsConfig(
                negative_mood_strength=0.0, high_arousal_strength=0.0, calm_strength=0.0
            ),
        ),
    )
    assert engine.current_weights().tolist() == pytest.approx([0.2, 0, 0.2, 0.2, 0.2, 0.2])


def test_ablation_used_by_retrieval() -> None:
    engine, clock = make(enable_mood_signal=False, enable_momentum=False)
    engine.encode("a memory about cats", affect=CoreAffect(valence=0.3, arousal=0.5))
    expected = engine.current_weights("cats", clock.now)
    r = engine.retrieve_with_explanations("cats", top_k=1)[0]
    assert r.breakdown.weights.as_tuple() == pytest.approx(expected.tolist(), abs=1e-15)
    assert r.breakdown.weights.mood_congruence == 0.0
    assert r.breakdown.weights.momentum_alignment == 0.0
    assert r.breakdown.weighted_signals.mood_congruence == 0.0


# --------------------------------------------------------------------------- routing


W_T = [0.5, 0.3, 0.1, 0.05, 0.05, 0.0]
W_D = [0.2, 0.2, 0.2, 0.2, 0.1, 0.1]
W_S = [0.7, 0.1, 0.05, 0.05, 0.05, 0.05]
BASE = [0.35, 0.25, 0.15, 0.10, 0.10, 0.05]


def _routed(mode: str, routes: dict[str, list[float]], **kw: Any) -> RetrievalConfig:
    return RetrievalConfig(
        query_classifier=QueryClassifierConfig(mode=mode, routed_weights=routes, **kw)
    )


def _expect(engine: EmotionalMemory, base: list[float]) -> list[float]:
    mood = engine.get_state().mood
    return pytest.approx(hand_adaptive(mood.valence, mood.arousal, base), abs=1e-12)


def test_heuristic_routing() -> None:
    engine, _ = make(retrieval=_routed("heuristic", {"temporal": W_T, "default": W_D}))
    engine.set_affect(CoreAffect(valence=-0.6, arousal=0.8))
    assert engine.current_weights("When did we meet?").tolist() == _expect(engine, W_T)
    # single_hop is not routed -> routed_weights[default_type]
    assert engine.current_weights("Who is Bob?").tolist() == _expect(engine, W_D)

    no_default, _ = make(retrieval=_routed("heuristic", {"single_hop": W_S}))
    assert no_default.current_weights("Who is Bob?").tolist() == _expect(no_default, W_S)
    # neither the type nor default_type routed -> base weights
    assert no_default.current_weights("tell me a story").tolist() == _expect(no_default, BASE)

    custom, _ = make(
        retrieval=_routed("heuristic", {"single_hop": W_S}, default_type="single_hop")
    )
    assert custom.current_weights("since when?").tolist() == _expect(custom, W_S)

    disabled, _ = make(retrieval=_routed("disabled", {"temporal": W_T}))
    assert disabled.current_weights("When did we meet?").tolist() == _expect(disabled, BASE)


def test_heuristic_routing_reaches_retrieval() -> None:
    engine, _ = make(retrieval=_routed("heuristic", {"temporal": W_T}))
    engine.encode("we met in spring")
    r = engine.retrieve_with_explanations("when did we meet", top_k=1)[0]
    assert r.breakdown.weights.as_tuple() == _expect(engine, W_T)


def test_llm_routing_uses_engine_classifier() -> None:
    fake = FakeClassifier("multi_hop")
    engine, _ = make(
        retrieval=_routed("llm", {"multi_hop": W_T, "default": W_D}), query_classifier=fake
    )
    assert engine.current_weights("When did we meet?").tolist() == _expect(engine, W_T)
    assert fake.queries == ["When did we meet?"]
    engine.encode("we met in spring")
    r = engine.retrieve_with_explanations("anything at all", top_k=1)[0]
    assert "anything at all" in fake.queries
    assert r.breakdown.weights.as_tuple() == _expect(engine, W_T)

    fallback = FakeClassifier("open_domain")
    eng2, _ = make(
        retrieval=_routed("llm", {"multi_hop": W_T, "default": W_D}), query_classifier=fallback
    )
    assert eng2.current_weights("x").tolist() == _expect(eng2, W_D)

    # llm mode without a classifier -> base weights
    eng3, _ = make(retrieval=_routed("llm", {"multi_hop": W_T, "default": W_D}))
    assert eng3.current_weights("x").tolist() == _expect(eng3, BASE)


# --------------------------------------------------------------------------- dual path


def test_dual_path_encode_marks_pending_and_elaborate_blends() -> None:
    spy = SpyAppraisal(NEG)
    engine, clock = make(appraisal_engine=spy, dual_path_encoding=True)
    a = CoreAffect(valence=0.3, arousal=0.4, dominance=0.6)
    engine.set_affect(a)
    m = engine.encode("the meeting got cancelled")
    assert spy.calls == []
    assert m.tag.pending_appraisal is True
    assert m.tag.appraisal is None
    assert m.tag.core_affect == a
    assert engine.get_state().core_affect == a

    state_before = engine.save_state()
    t = clock.now
    out = engine.elaborate(m.id)
    appraised = NEG.to_core_affect()
    assert spy.calls == ["the meeting got cancelled"]
    assert out.tag.core_affect == a.lerp(appraised, 0.7)
    assert out.tag.consolidation_strength == consolidation_strength(
        appraised.arousal, m.tag.mood_snapshot.arousal
    )
    assert out.tag.pending_appraisal is False
    assert out.tag.appraisal == NEG
    assert out.tag.window_opened_at == t
    assert engine.get(m.id) == out
    assert engine.save_state() == state_before  # elaboration leaves the state alone
    # elaborating again is a no-op returning None (SPEC 11)
    assert engine.elaborate(m.id) is None
    assert engine.get(m.id) == out
    assert spy.calls == ["the meeting got cancelled"]


def test_dual_path_explicit_affect_or_appraisal_not_pending() -> None:
    engine, _ = make(appraisal_engine=SpyAppraisal(NEG), dual_path_encoding=True)
    assert engine.encode("x", appraisal=POS).tag.pending_appraisal is False
    assert engine.encode("y", affect=CoreAffect(valence=0.1, arousal=0.1)).tag.pending_appraisal \
        is False


def test_dual_path_without_engine_or_disabled_not_pending() -> None:
    engine, _ = make(dual_path_encoding=True)
    assert engine.encode("x").tag.pending_appraisal is False
    assert engine.elaborate_pending() == []
    assert engine.elaborate(engine.list_all()[0].id) is None  # no engine: None
    off, _ = make(appraisal_engine=SpyAppraisal(NEG), dual_path_encoding=True,
                  enable_appraisal=False)
    assert off.encode("x").tag.pending_appraisal is False


def test_elaborate_pending_handles_all() -> None:
    spy = SpyAppraisal(POS)
    engine, _ = make(appraisal_engine=spy, dual_path_encoding=True, auto_categorize=True)
    ids = [engine.encode(f"event {i}").id for i in range(3)]
    engine.encode("explicit", affect=CoreAffect(valence=-0.5, arousal=0.5))
    out = engine.elaborate_pending()
    assert sorted(m.id for m in out) == sorted(ids)
    assert spy.calls == ["event 0", "event 1", "event 2"]
    for m in engine.list_all():
        assert m.tag.pending_appraisal is False
    for mid in ids:
        tag = engine.get(mid).tag
        assert tag.appraisal == POS
        assert tag.window_opened_at is not None
        # auto_categorize labels through label_tag: the mood snapshot's dominance
        assert tag.emotion_label == categorize_affect(
            tag.core_affect, tag.mood_snapshot.dominance
        )
    assert engine.elaborate_pending() == []
    assert engine.elaborate("no-such-id") is None


# --------------------------------------------------------------------------- prune


def test_prune_removes_weak_memories() -> None:
    engine, clock = make()
    for i, arousal in enumerate([0.0, 0.3, 0.5, 0.75, 0.95]):
        engine.encode(f"memory {i}", affect=CoreAffect(valence=0.1, arousal=arousal))
    clock.advance(timedelta(days=1))
    now = clock.now
    strengths = {m.id: hand_strength(m.tag, now) for m in engine.list_all()}
    doomed = {mid for mid, s in strengths.items() if s < 0.05}
    assert 0 < len(doomed) < len(strengths)
    removed = engine.prune(0.05)
    assert removed == len(doomed)
    assert {m.id for m in engine.list_all()} == set(strengths) - doomed
    # the high-arousal memories are floored and survive any age
    clock.advance(timedelta(days=3650))
    assert engine.prune(0.05) == 0
    assert engine.prune(0.0) == 0
    assert len(engine) == len(strengths) - len(doomed)
    # floored at exactly min(floor_value, consolidation) = 0.1: "below" is strict
    floored = [m for m in engine.list_all() if m.tag.core_affect.arousal >= 0.7]
    assert floored and all(m.tag.consolidation_strength >= 0.1 for m in floored)
    assert all(hand_strength(m.tag, clock.now) == 0.1 for m in floored)
    assert engine.prune(0.1) == len(engine) - len(floored)
    assert {m.id for m in engine.list_all()} == {m.id for m in floored}
    assert engine.prune(0.1) == 0
    assert engine.prune(0.100001) == len(floored)


def test_prune_fresh_memories_kept_and_bad_threshold() -> None:
    engine, _ = make()
    engine.encode("fresh", affect=CoreAffect(valence=0.0, arousal=0.6))
    assert engine.prune() == 0
    for bad in (-0.1, 1.1, float("nan")):
        with pytest.raises(ValueError):
            engine.prune(bad)
    assert len(engine) == 1
    assert make()[0].prune(0.5) == 0


# --------------------------------------------------------------------------- import/export


def _populated() -> tuple[EmotionalMemory, TickClock]:
    engine, clock = make(auto_categorize=True)
    engine.encode("the server crashed", affect=CoreAffect(valence=-0.8, arousal=0.9),
                  metadata={"k": 1})
    engine.encode("coffee with a friend", appraisal=POS)
    engine.set_affect(CoreAffect(valence=0.5, arousal=0.5))
    engine.encode("server is fine now")
    engine.retrieve("server", top_k=2)
    return engine, clock


def test_export_import_round_trip() -> None:
    src, _ = _populated()
    data = src.export_memories()
    assert len(data) == 3
    dst, _ = make()
    assert dst.import_memories(data) == 3
    assert dst.list_all() == src.list_all()
    assert dst.export_memories() == data
    # overwrite=False skips existing ids
    changed = copy.deepcopy(data)
    changed[0]["content"] = "edited"
    assert dst.import_memories(changed) == 0
    assert dst.list_all() == src.list_all()
    # overwrite=True replaces them, keeping order
    assert dst.import_memories(changed, overwrite=True) == 3
    assert [m.content for m in dst.list_all()] == ["edited"] + [d["content"] for d in data[1:]]


def test_import_into_sqlite_round_trip(tmp_path: Any) -> None:
    src, _ = _populated()
    data = src.export_memories()
    path = tmp_path / "mem.db"
    with SQLiteStore(path) as store:
        dst, _ = make(store=store)
        assert dst.import_memories(data) == 3
        assert [m.id for m in dst.list_all()] == [d["id"] for d in data]
    with SQLiteStore(path) as store:
        again = store.list_all()
        assert [m.content for m in again] == [d["content"] for d in data]
        assert [m.tag for m in again] == [m.tag for m in src.list_all()]


# --------------------------------------------------------------------------- store access


def test_get_delete_update_len() -> None:
    engine, _ = make()
    m = engine.encode("original text", metadata={"a": 1})
    assert len(engine) == 1
    assert engine.get("missing") is None
    up = engine.update_memory(m.id, content="new text", metadata={"b": 2})
    assert up.content == "new text"
    assert up.metadata == {"b": 2}
    assert up.embedding == HashingEmbedder(dim=64).embed("new text")
    assert engine.get(m.id) == up
    emb = [0.5] * 64
    assert engine.update_memory(m.id, embedding=emb).embedding == emb
    assert engine.delete(m.id) is True
    assert engine.delete(m.id) is False
    assert len(engine) == 0


# --------------------------------------------------------------------------- state


def test_state_methods() -> None:
    engine, clock = make()
    s0 = engine.get_state()
    assert s0.core_affect == CoreAffect.neutral()
    assert s0.momentum.magnitude() == 0.0
    a = CoreAffect(valence=0.5, arousal=0.6, dominance=0.2)
    s1 = engine.set_affect(a)
    assert s1.core_affect == a
    assert engine.get_state() == s1
    engine.set_affect(CoreAffect(valence=-0.5, arousal=0.1))
    assert engine.get_state().momentum.magnitude() > 0
    t = clock.now
    engine.reset_state()
    st = engine.get_state()
    assert st.core_affect == CoreAffect.neutral()
    assert st.momentum.magnitude() == 0.0
    assert (st.mood.valence, st.mood.arousal, st.mood.dominance, st.mood.inertia) == (
        0.0, 0.0, 0.5, 0.5
    )
    assert st.mood.timestamp == t
    assert st.history == []


def test_save_load_state_continues_momentum() -> None:
    a, clock_a = make()
    a.set_affect(CoreAffect(valence=0.1, arousal=0.2))
    a.set_affect(CoreAffect(valence=0.4, arousal=0.5))
    snap = a.save_state()
    b, clock_b = make(clock=TickClock(START + timedelta(days=3)))
    b.load_state(snap)
    assert b.save_state() == snap
    assert b.get_state().momentum == a.get_state().momentum
    clock_b.now = clock_a.now
    nxt = CoreAffect(valence=0.9, arousal=0.9)
    a.set_affect(nxt)
    b.set_affect(nxt)
    assert b.save_state() == a.save_state()
    assert b.get_state().momentum.dd_valence != 0.0  # acceleration needs the history


def test_persist_restore_clear_state_store() -> None:
    ss = InMemoryAffectiveStateStore()
    engine, _ = make(state_store=ss)
    assert ss.load() is None  # nothing stored yet
    assert engine.restore_persisted_state() is False
    engine.set_affect(CoreAffect(valence=0.6, arousal=0.7))
    assert ss.load_snapshot() == engine.save_state()
    engine.clear_persisted_state()
    assert ss.load() is None
    kept = engine.save_state()
    assert kept["core_affect"]["valence"] == 0.6
    assert engine.persist_state() == kept  # SPEC 11: returns the snapshot
    assert ss.load_snapshot() == kept
    # a fresh engine with the same state store restores at construction
    fresh, _ = make(state_store=ss, clock=TickClock(START + timedelta(days=1)))
    assert fresh.save_state() == kept
    # restore_persisted_state brings back the persisted snapshot
    engine.set_affect(CoreAffect(valence=-1.0, arousal=0.0))
    ss.save(kept)
    assert engine.restore_persisted_state() is True
    assert engine.save_state() == kept
    # reset_state and load_state persist too
    engine.reset_state()
    assert ss.load_snapshot() == engine.save_state()
    engine.load_state(kept)
    assert ss.load_snapshot() == kept


def test_persist_state_without_store_returns_snapshot() -> None:
    engine, _ = make()
    assert engine.persist_state() == engine.save_state()  # as the original: no error
    assert engine.restore_persisted_state() is False
    engine.clear_persisted_state()  # no-op


def test_get_current_mood_regresses_with_mood_decay() -> None:
    cfg = MoodDecayConfig(base_half_life_seconds=100.0)
    engine, _ = make(mood_decay=cfg)
    for _ in range(10):
        engine.set_affect(CoreAffect(valence=0.9, arousal=0.9, dominance=0.9))
    mood = engine.get_state().mood
    at = mood.timestamp + timedelta(seconds=100)
    got = engine.get_current_mood(at)
    f = math.exp(-100 * math.log(2) / (100 * (1 + mood.inertia * 2.0)))
    assert got.valence == pytest.approx(mood.valence * f, abs=1e-12)
    assert got.arousal == pytest.approx(0.3 + (mood.arousal - 0.3) * f, abs=1e-12)
    assert got.dominance == pytest.approx(0.5 + (mood.dominance - 0.5) * f, abs=1e-12)
    assert got.timestamp == at
    assert abs(got.valence) < abs(mood.valence)
    # without mood_decay the mood is returned as is
    plain, _ = make()
    plain.set_affect(CoreAffect(valence=0.9, arousal=0.9))
    m = plain.get_state().mood
    assert plain.get_current_mood(m.timestamp + timedelta(days=5)) == m


def test_mood_decay_applies_between_updates() -> None:
    cfg = MoodDecayConfig(base_half_life_seconds=10.0)
    engine, clock = make(mood_decay=cfg)
    engine.set_affect(CoreAffect(valence=1.0, arousal=1.0))
    clock.advance(timedelta(hours=5))
    engine.set_affect(CoreAffect(valence=0.0, arousal=0.3))
    mood = engine.get_state().mood
    assert mood.valence == pytest.approx(0.0, abs=1e-9)
    assert mood.arousal == pytest.approx(0.3, abs=1e-9)


# --------------------------------------------------------------------------- lifecycle


def test_context_manager_closes_store(tmp_path: Any) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    with make(store=store)[0] as engine:
        engine.encode("hello")
        assert not store.closed
    assert store.closed

    spy = SpyStore()

    class ClosingStateStore(InMemoryAffectiveStateStore):
        closed = 0

        def close(self) -> None:
            ClosingStateStore.closed += 1

    ss = ClosingStateStore()
    with make(store=spy, state_store=ss)[0] as engine:
        engine.encode("x")
    assert spy.closed_count == 1
    assert ClosingStateStore.closed == 1


def test_delete_removes_backward_links_to_the_deleted_memory() -> None:
    engine, _ = make()
    for text in ("the server crashed", "the server crashed again", "server crash postmortem"):
        engine.encode(text, affect=CoreAffect(valence=-0.5, arousal=0.6))
    mems = by_content(engine)
    victim = mems["the server crashed again"]
    assert victim.tag.resonance_links, "fixture must create links"
    partners = {lk.target_id for lk in victim.tag.resonance_links}
    assert any(
        lk.target_id == victim.id
        for pid in partners
        for lk in engine.get(pid).tag.resonance_links  # type: ignore[union-attr]
    )
    assert engine.delete(victim.id) is True
    assert engine.get(victim.id) is None
    for m in engine.list_all():
        assert all(lk.target_id != victim.id for lk in m.tag.resonance_links)
    assert engine.delete(victim.id) is False


def test_encode_batch_with_an_embed_only_embedder() -> None:
    class EmbedOnly:
        def embed(self, text: str) -> list[float]:
            return [float(len(text)), 1.0, 0.0]

    engine, _ = make(embedder=EmbedOnly())
    out = engine.encode_batch(["a", "bb"])
    assert [m.embedding for m in out] == [[1.0, 1.0, 0.0], [2.0, 1.0, 0.0]]


def test_columnar_fast_paths_equal_the_generic_paths() -> None:
    """prune (from columns), delete (linking_to) and elaborate_pending (pending_ids)
    give the same stores as the list_all paths of a protocol-only store."""
    runs = []
    for store in (InMemoryStore(), PerMemoryStore()):
        engine, clock = make(store=store)
        for i in range(40):
            engine.encode(f"memory {i} about {['rain', 'coffee', 'launch'][i % 3]}",
                          affect=CoreAffect(valence=0.1 * (i % 7) - 0.3,
                                            arousal=(i % 10) / 10))
        clock.advance(timedelta(hours=30))
        removed = engine.prune(0.01)
        doomed = [m.id for m in engine.list_all()[::4]]
        deleted = [engine.delete(mid) for mid in doomed]
        pending = engine.elaborate_pending()
        runs.append((removed, deleted, pending, canon(engine.export_memories())))
    assert runs[0][0] > 0 and all(runs[0][1])
    assert any(m["tag"]["resonance_links"] for m in runs[0][3])
    assert runs[0] == runs[1]
