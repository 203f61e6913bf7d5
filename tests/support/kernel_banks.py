"""Builders and plain-Python oracles shared by the kernel tests (tests/kernel/test_kernel_*.py):
SPEC constants, random and edge-case banks, parameter variants, dtype casts."""

from __future__ import annotations

import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import settings

from emotional_memory.decay import DecayConfig
from emotional_memory.kernel import (
    MemoryColumns,
    QueryFeatures,
    ScoringParams,
    pad_columns,
    score_bank,
)
from emotional_memory.retrieval import AdaptiveWeightsConfig, RetrievalConfig
from emotional_memory.scoring_config import params_from_config

_score_bank_jit = jax.jit(score_bank)

SQRT6 = math.sqrt(6.0)

N_ROWS, DIM = 24, 6

FAST = settings(max_examples=12, deadline=None)

SPEC_BASE_WEIGHTS = [0.35, 0.25, 0.15, 0.10, 0.10, 0.05]

SPEC_GATES = {
    "negative_mood_strength": 0.15,
    "negative_mood_center": -0.5,
    "negative_mood_sharpness": 5.0,
    "high_arousal_strength": 0.10,
    "high_arousal_center": 0.7,
    "high_arousal_sharpness": 5.0,
    "calm_strength": 0.15,
    "calm_valence_width": 0.2,
    "calm_arousal_center": 0.3,
    "calm_sharpness": 5.0,
}

SPEC_DECAY = {
    "base_decay": 0.5,
    "arousal_modulation": 0.5,
    "retrieval_boost": 0.1,
    "floor_arousal_threshold": 0.7,
    "floor_value": 0.1,
    "min_seconds": 1.0,
    "power": 1.0,
}

ABLATION_MASKS = {
    "all": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
    "no_mood": [1.0, 0.0, 1.0, 1.0, 1.0, 1.0],
    "no_momentum": [1.0, 1.0, 1.0, 0.0, 1.0, 1.0],
    "no_resonance": [1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
    "none_of_three": [1.0, 0.0, 1.0, 0.0, 1.0, 0.0],
}


# --------------------------------------------------------------------------- builders


def default_params(**decay_overrides: float) -> ScoringParams:
    return params_from_config(RetrievalConfig(), DecayConfig(**decay_overrides))


def params_variant(name: str) -> ScoringParams:
    """Parameter sets that drive the weight normalisation into its branches."""
    zero_gates = AdaptiveWeightsConfig(
        negative_mood_strength=0.0, high_arousal_strength=0.0, calm_strength=0.0
    )
    if name == "default":
        return default_params()
    if name == "min_seconds_zero":  # beyond config validation (a training step may go there)
        params = default_params()
        return eqx.tree_at(lambda t: t.decay.min_seconds, params, np.float64(0.0))
    if name == "all_zero_base":  # everything cancels -> uniform 1/6 fallback
        cfg = RetrievalConfig(base_weights=[0.0] * 6, adaptive_weights_config=zero_gates)
    elif name == "all_negative_base":  # everything clipped at 0 -> uniform fallback
        cfg = RetrievalConfig(base_weights=[-1.0] * 6, adaptive_weights_config=zero_gates)
    elif name == "clipped":  # w0 pushed below 0 by a negative/aroused mood, clipped
        cfg = RetrievalConfig(
            base_weights=[0.01, 0.3, 0.2, 0.2, 0.2, 0.09],
            adaptive_weights_config=AdaptiveWeightsConfig(
                negative_mood_strength=1.0, high_arousal_strength=1.0
            ),
        )
    elif name == "masked_all_zero":  # enabled weights all 0 under "none_of_three" mask
        cfg = RetrievalConfig(
            base_weights=[0.0, 1.0, 0.0, 1.0, 0.0, 1.0], adaptive_weights_config=zero_gates
        )
    elif name == "calibrated":
        cfg = RetrievalConfig(
            signal_scale=[1.5, 0.5, 2.0, 1.0, 0.7, 3.0],
            signal_shift=[0.1, -0.2, 0.0, 0.3, -0.1, 0.05],
        )
    else:  # pragma: no cover
        raise KeyError(name)
    return params_from_config(cfg, DecayConfig())


PARAM_VARIANTS = (
    "default", "all_zero_base", "all_negative_base", "clipped", "masked_all_zero", "calibrated",
    "min_seconds_zero",
)


def _unit(rng: np.random.Generator, d: int) -> np.ndarray:
    v = rng.normal(size=d)
    return v / np.linalg.norm(v)


def random_bank(
    rng: np.random.Generator,
    n: int = N_ROWS,
    d: int = DIM,
    *,
    edge_fraction: float = 0.0,
    near_threshold: bool = True,
) -> tuple[QueryFeatures, MemoryColumns]:
    """A random query and bank as float64 numpy leaves.

    With ``edge_fraction`` > 0 that share of rows is overwritten with a random SPEC
    edge case (missing/NaN embedding, identical affect, zero velocity, tiny ages, the
    arousal floor, ...). ``near_threshold=False`` avoids velocities near 1e-12.
    """
    q_affect = np.array([rng.uniform(-1, 1), rng.uniform(0, 1), rng.uniform(0, 1)])
    q_mood = np.array([rng.uniform(-1, 1), rng.uniform(0, 1), rng.uniform(0, 1)])
    query = QueryFeatures(
        embedding=rng.normal(size=d),
        affect=q_affect,
        mood=q_mood,
        velocity=rng.normal(size=3) * 10 ** rng.uniform(-3, 0),
    )
    emb = rng.normal(size=(n, d))
    affect = np.column_stack([rng.uniform(-1, 1, n), rng.uniform(0, 1, n), rng.uniform(0, 1, n)])
    mood = np.column_stack([rng.uniform(-1, 1, n), rng.uniform(0, 1, n), rng.uniform(0, 1, n)])
    velocity = rng.normal(size=(n, 3)) * 10 ** rng.uniform(-3, 0, size=(n, 1))
    age = 10 ** rng.uniform(-1, 7.5, n)
    consolidation = rng.uniform(0.1, 1.0, n)
    count = rng.integers(0, 25, n).astype(np.float64)
    activation = np.where(rng.random(n) < 0.5, rng.uniform(0, 1, n), 0.0)

    edges = [
        "zero_emb", "nan_emb", "same_affect", "same_mood", "zero_vel", "age_below_min",
        "age_zero", "age_negative", "arousal_at_floor", "arousal_above", "low_consolidation",
        "zero_consolidation", "full_activation",
    ]
    if near_threshold:
        edges.append("tiny_vel")
    for i in range(n):
        if rng.random() >= edge_fraction:
            continue
        edge = edges[rng.integers(len(edges))]
        if edge == "zero_emb":
            emb[i] = 0.0
        elif edge == "nan_emb":
            emb[i, rng.integers(d)] = np.nan
        elif edge == "same_affect":
            affect[i] = q_affect
        elif edge == "same_mood":
            mood[i] = q_mood
        elif edge == "zero_vel":
            velocity[i] = 0.0
        elif edge == "tiny_vel":
            velocity[i] = _unit(rng, 3) * 1e-13
        elif edge == "age_below_min":
            age[i] = rng.uniform(0.0, 1.0)
        elif edge == "age_zero":
            age[i] = 0.0
        elif edge == "age_negative":
            age[i] = -rng.uniform(1.0, 1e4)
        elif edge == "arousal_at_floor":
            affect[i, 1] = 0.7
        elif edge == "arousal_above":
            affect[i, 1] = rng.choice([0.85, 1.0])
            age[i] = 1e7
        elif edge == "low_consolidation":
            consolidation[i] = 0.05
            affect[i, 1] = 0.9
        elif edge == "zero_consolidation":
            consolidation[i] = 0.0
        elif edge == "full_activation":
            activation[i] = 1.0
    cols = MemoryColumns(
        embedding=emb,
        affect=affect,
        mood=mood,
        velocity=velocity,
        age_seconds=age,
        consolidation=consolidation,
        retrieval_count=count,
        activation=activation,
        valid=np.ones(n, dtype=bool),
    )
    return query, cols


def edge_bank(query_kind: str = "normal") -> tuple[QueryFeatures, MemoryColumns]:
    """A deterministic bank with one row per SPEC edge case, plus padding rows."""
    rng = np.random.default_rng(1234)
    d = DIM
    q_affect = np.array([0.2, 0.4, 0.6])
    q_mood = np.array([-0.6, 0.7, 0.5])  # negative, at the arousal gate centre
    q_emb = rng.normal(size=d)
    q_vel = np.array([0.3, -0.2, 0.1])
    if query_kind == "zero_embedding":
        q_emb = np.zeros(d)
    elif query_kind == "nan_embedding":
        q_emb[2] = np.nan
    elif query_kind == "zero_velocity":
        q_vel = np.zeros(3)
    elif query_kind == "calm":
        q_mood = np.array([0.0, 0.0, 0.5])
    elif query_kind == "extreme_mood":
        q_mood = np.array([1.0, 1.0, 1.0])
    query = QueryFeatures(embedding=q_emb, affect=q_affect, mood=q_mood, velocity=q_vel)

    rows: list[dict[str, Any]] = []

    def row(**kw: Any) -> None:
        base = {
            "embedding": rng.normal(size=d),
            "affect": np.array([rng.uniform(-1, 1), 0.3, rng.uniform(0, 1)]),
            "mood": np.array([rng.uniform(-1, 1), rng.uniform(0, 1), rng.uniform(0, 1)]),
            "velocity": rng.normal(size=3),
            "age_seconds": 3600.0,
            "consolidation": 0.8,
            "retrieval_count": 2.0,
            "activation": 0.0,
        }
        base.update(kw)
        rows.append(base)

    row()  # an ordinary memory
    row(embedding=np.zeros(d))  # missing embedding
    row(embedding=np.array([np.nan] + [1.0] * (d - 1)))  # NaN embedding
    row(embedding=q_emb.copy())  # identical embedding (cosine 1)
    row(embedding=-q_emb)  # opposite embedding (cosine -1)
    row(affect=q_affect.copy())  # identical affect: distance 0, sqrt at 0
    row(mood=q_mood.copy())  # identical mood
    row(affect=np.array([-1.0, 0.0, 0.0]), mood=np.array([1.0, 0.0, 0.0]))  # far affects
    row(velocity=np.zeros(3))  # zero memory velocity
    row(velocity=np.array([1e-13, 0.0, 0.0]))  # below MOMENTUM_EPS
    row(velocity=q_vel.copy())  # aligned
    row(velocity=-q_vel)  # opposed
    row(age_seconds=0.0)
    row(age_seconds=0.5)  # below min_seconds
    row(age_seconds=1.0)  # exactly min_seconds
    row(age_seconds=-50.0)  # negative age (clock skew)
    row(affect=np.array([0.1, 0.7, 0.5]), age_seconds=1e8)  # arousal exactly at threshold
    row(affect=np.array([0.1, 0.95, 0.5]), age_seconds=1e8)  # above threshold, floored
    row(affect=np.array([0.1, 1.0, 0.5]), age_seconds=10.0)  # above threshold, not floored
    row(affect=np.array([0.1, 0.9, 0.5]), consolidation=0.05, age_seconds=1e8)  # c < floor
    row(consolidation=0.0, affect=np.array([0.0, 0.8, 0.5]))
    row(retrieval_count=0.0, age_seconds=1e6)
    row(activation=1.0)
    row(activation=0.37, embedding=np.zeros(d), velocity=np.zeros(3))
    n_real = len(rows)
    cols = MemoryColumns(
        **{k: np.stack([np.asarray(r[k], dtype=np.float64) for r in rows]) for k in rows[0]},
        valid=np.ones(n_real, dtype=bool),
    )
    return query, pad_columns(cols, n_real + 8)  # 24 real rows + 8 padding = 32


def to_dtype(tree: Any, dtype: Any) -> Any:
    """Cast every inexact leaf to a JAX array of ``dtype`` (bool leaves stay bool)."""

    def cast(x: Any) -> Any:
        arr = np.asarray(x)
        if arr.dtype == bool:
            return jnp.asarray(arr)
        return jnp.asarray(arr, dtype=dtype)

    return jax.tree.map(cast, tree)


def row_of(cols: MemoryColumns, i: int) -> MemoryColumns:
    return jax.tree.map(lambda x: x[i], cols)


def oracle_weights(mood_valence: float, mood_arousal: float, base: list[float]) -> list[float]:
    cfg = SPEC_GATES

    def gate(x: float, c: float, k: float) -> float:
        return 0.5 * (1 + math.tanh(k * (x - c)))

    w = list(base)
    s_n = cfg["negative_mood_strength"]
    neg = gate(mood_valence, cfg["negative_mood_center"], -cfg["negative_mood_sharpness"])
    w[1] += s_n * neg * 2 / 3
    w[2] += s_n * neg / 3
    w[0] -= s_n * neg
    aro = gate(mood_arousal, cfg["high_arousal_center"], cfg["high_arousal_sharpness"])
    w[3] += cfg["high_arousal_strength"] * aro
    w[0] -= cfg["high_arousal_strength"] * aro
    calm = math.exp(-((mood_valence / cfg["calm_valence_width"]) ** 2)) * gate(
        mood_arousal, cfg["calm_arousal_center"], -cfg["calm_sharpness"]
    )
    s_c = cfg["calm_strength"]
    w[0] += s_c * calm
    w[1] -= s_c * calm * 2 / 3
    w[2] -= s_c * calm / 3
    w = [max(0.0, x) for x in w]
    total = sum(w)
    return [x / total for x in w] if total > 0 else [1 / 6] * 6


def oracle_signals(
    query: QueryFeatures, cols: MemoryColumns, i: int, decay: dict[str, float]
) -> list[float]:
    """SPEC 4 signals for row ``i`` in plain Python floats (independent of the kernel)."""
    qe = [float(x) for x in np.asarray(query.embedding)]
    me = [float(x) for x in np.asarray(cols.embedding)[i]]

    def norm(v: list[float]) -> float:
        return math.sqrt(sum(x * x for x in v))

    if any(math.isnan(x) for x in qe + me) or norm(qe) == 0 or norm(me) == 0:
        s1 = 0.0
    else:
        s1 = sum(a * b for a, b in zip(qe, me, strict=True)) / (norm(qe) * norm(me))

    def prox(a: Any, b: Any) -> float:
        dist = math.sqrt(sum((float(x) - float(y)) ** 2 for x, y in zip(a, b, strict=True)))
        return max(0.0, 1.0 - dist / SQRT6)

    s2 = prox(query.mood, np.asarray(cols.mood)[i])
    s3 = prox(query.affect, np.asarray(cols.affect)[i])
    vq = [float(x) for x in np.asarray(query.velocity)]
    vm = [float(x) for x in np.asarray(cols.velocity)[i]]
    if norm(vq) < 1e-12 or norm(vm) < 1e-12:
        s4 = 0.5
    else:
        s4 = (sum(a * b for a, b in zip(vq, vm, strict=True)) / (norm(vq) * norm(vm)) + 1) / 2
    a = float(np.asarray(cols.affect)[i, 1])
    c = float(np.asarray(cols.consolidation)[i])
    elapsed = max(float(np.asarray(cols.age_seconds)[i]), decay["min_seconds"])
    rate = max(
        0.0,
        decay["base_decay"]
        * (1 - decay["arousal_modulation"] * a)
        / (1 + decay["retrieval_boost"] * float(np.asarray(cols.retrieval_count)[i])),
    )
    s = c * elapsed ** (-rate * decay["power"])
    s = min(max(s, 0.0), c)
    if a >= decay["floor_arousal_threshold"]:
        s = max(s, min(decay["floor_value"], c))
    s6 = float(np.asarray(cols.activation)[i])
    return [s1, s2, s3, s4, s, s6]


def oracle_activation(
    seeds: set[int], links: dict[int, list[tuple[int, float]]], hops: int
) -> dict[int, float]:
    """SPEC 5 spreading_activation written literally over dicts."""
    result: dict[int, float] = {}
    wave = {s: 1.0 for s in seeds}
    for _ in range(hops):
        nxt: dict[int, float] = {}
        for node, act in wave.items():
            for target, strength in links.get(node, []):
                if target in seeds:
                    continue
                spread = act * strength
                nxt[target] = max(nxt.get(target, -math.inf), spread)
        for target, value in nxt.items():
            result[target] = max(result.get(target, -math.inf), min(1.0, value))
        wave = nxt
    return result


SMOOTH_LEAVES = ("base_weights", "gates", "decay", "distance_scale", "signal_scale",
                 "signal_shift")
