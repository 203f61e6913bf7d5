"""Embedders, spy stores and hand-computed SPEC formulas shared by the engine tests
(tests/engine/test_engine_*.py)."""

from __future__ import annotations

import copy
import math
from datetime import UTC, datetime
from typing import Any

import numpy as np

from emotional_memory import (
    AdaptiveWeightsConfig,
    AppraisalVector,
    CoreAffect,
    EmotionalMemory,
    EmotionalMemoryConfig,
    InMemoryStore,
    Memory,
    ResonanceLink,
)
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.replay import TickClock

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


def canon(
    export: list[dict[str, Any]], known: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Exported memories with every id replaced by its memory's content.

    ``known`` names ids no longer exported (prune leaves links to deleted memories).
    """
    names = {**(known or {}), **{d["id"]: d["content"] for d in export}}
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


def _seeded(embedder: Any, texts: list[str], **cfg: Any) -> tuple[EmotionalMemory, TickClock]:
    engine, clock = make(embedder=embedder, **cfg)
    for t in texts:
        engine.encode(t)
    return engine, clock
