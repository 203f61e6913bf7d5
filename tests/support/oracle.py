"""An independent, plain-Python oracle of SPEC sections 1-8 (numerics only).

Written from the SPEC text alone: only ``math``, plain floats, tuples, lists and
dicts. Datetimes only ever enter through ``(t1 - t0).total_seconds()``.

Conventions:
    affect: a ``(valence, arousal, dominance)`` tuple.
    mood:   an :class:`OMood`.
    memory: an :class:`OMemory` (what the scorer needs from a ``Memory``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

SQRT6 = math.sqrt(6.0)
LN2 = math.log(2.0)

Affect = tuple[float, float, float]
Vec3 = tuple[float, float, float]


# --------------------------------------------------------------------------- basics


def clamp(x: float, lo: float, hi: float) -> float:
    return min(hi, max(lo, x))


def seconds(t1: datetime, t0: datetime) -> float:
    """``t1 - t0`` in seconds."""
    return (t1 - t0).total_seconds()


def norm3(v: Vec3) -> float:
    return math.sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2])


# --------------------------------------------------------------------------- SPEC 1: affect


def core_affect(valence: float, arousal: float, dominance: float = 0.5) -> Affect:
    """CoreAffect's clamping validator."""
    return (clamp(valence, -1.0, 1.0), clamp(arousal, 0.0, 1.0), clamp(dominance, 0.0, 1.0))


def distance(p: Affect, q: Affect) -> float:
    return math.sqrt((p[0] - q[0]) ** 2 + (p[1] - q[1]) ** 2 + (p[2] - q[2]) ** 2)


def lerp(p: Affect, q: Affect, alpha: float) -> Affect:
    t = clamp(alpha, 0.0, 1.0)
    return core_affect(p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] - p[1]), p[2] + t * (q[2] - p[2]))


@dataclass
class OMood:
    valence: float
    arousal: float
    dominance: float
    inertia: float
    timestamp: datetime

    def vad(self) -> Affect:
        return (self.valence, self.arousal, self.dominance)


def mood(valence: float, arousal: float, dominance: float, inertia: float, ts: datetime) -> OMood:
    """MoodField's clamping validator."""
    return OMood(
        clamp(valence, -1.0, 1.0),
        clamp(arousal, 0.0, 1.0),
        clamp(dominance, 0.0, 1.0),
        clamp(inertia, 0.0, 1.0),
        ts,
    )


@dataclass
class ODecayMood:
    """MoodDecayConfig."""

    base_half_life_seconds: float = 3600.0
    inertia_scale: float = 2.0
    baseline_valence: float = 0.0
    baseline_arousal: float = 0.3
    baseline_dominance: float = 0.5


def mood_regress(m: OMood, now: datetime, cfg: ODecayMood) -> OMood:
    elapsed = max(0.0, seconds(now, m.timestamp))
    hl = cfg.base_half_life_seconds * (1.0 + m.inertia * cfg.inertia_scale)
    f = math.exp(-elapsed * LN2 / hl)
    return mood(
        cfg.baseline_valence + (m.valence - cfg.baseline_valence) * f,
        cfg.baseline_arousal + (m.arousal - cfg.baseline_arousal) * f,
        cfg.baseline_dominance + (m.dominance - cfg.baseline_dominance) * f,
        m.inertia,
        now,
    )


def mood_update(
    m: OMood, affect: Affect, alpha: float, now: datetime, decay: ODecayMood | None = None
) -> OMood:
    if decay is not None:
        m = mood_regress(m, now, decay)
    e = alpha * (1.0 - m.inertia)
    return mood(
        (1.0 - e) * m.valence + e * affect[0],
        (1.0 - e) * m.arousal + e * affect[1],
        (1.0 - e) * m.dominance + e * affect[2],
        m.inertia,
        now,
    )


DT_FLOOR = 0.001


def momentum_from_history(history: list[tuple[datetime, float, float, float]]) -> list[float]:
    """``[dv, da, dd, ddv, dda, ddd]`` from the last (up to) 3 points."""
    if len(history) < 2:
        return [0.0] * 6

    def vel(p0: tuple[datetime, float, float, float], p1: tuple[datetime, float, float, float]):
        dt = max(seconds(p1[0], p0[0]), DT_FLOOR)
        return [(p1[1] - p0[1]) / dt, (p1[2] - p0[2]) / dt, (p1[3] - p0[3]) / dt]

    v = vel(history[-2], history[-1])
    if len(history) < 3:
        return [*v, 0.0, 0.0, 0.0]
    pv = vel(history[-3], history[-2])
    return [*v, v[0] - pv[0], v[1] - pv[1], v[2] - pv[2]]


@dataclass
class OState:
    core_affect: Affect
    momentum: list[float]
    mood: OMood
    history: list[tuple[datetime, float, float, float]] = field(default_factory=list)

    @classmethod
    def initial(cls, now: datetime) -> OState:
        return cls((0.0, 0.0, 0.5), [0.0] * 6, mood(0.0, 0.0, 0.5, 0.5, now), [])

    def update(
        self,
        new_affect: Affect,
        now: datetime,
        mood_alpha: float = 0.1,
        mood_decay: ODecayMood | None = None,
    ) -> OState:
        hist = [*self.history, (now, new_affect[0], new_affect[1], new_affect[2])][-3:]
        return OState(
            new_affect,
            momentum_from_history(hist),
            mood_update(self.mood, new_affect, mood_alpha, now, mood_decay),
            hist,
        )


# --------------------------------------------------------------------------- SPEC 2, 3


def consolidation_strength(arousal: float, mood_arousal: float) -> float:
    a = clamp(arousal, 0.0, 1.0)
    m = clamp(mood_arousal, 0.0, 1.0)
    e = 0.7 * a + 0.3 * m
    raw = 1.0 - 4.0 * (e - 0.7) ** 2
    return clamp(raw, 0.1, 1.0)


@dataclass
class ODecay:
    """DecayConfig."""

    base_decay: float = 0.5
    arousal_modulation: float = 0.5
    retrieval_boost: float = 0.1
    floor_arousal_threshold: float = 0.7
    floor_value: float = 0.1
    min_seconds: float = 1.0
    power: float = 1.0


def effective_strength(
    arousal: float,
    consolidation: float,
    retrieval_count: int,
    timestamp: datetime,
    now: datetime,
    cfg: ODecay,
) -> float:
    elapsed = max(seconds(now, timestamp), cfg.min_seconds)
    d = max(
        0.0,
        cfg.base_decay
        * (1.0 - cfg.arousal_modulation * arousal)
        / (1.0 + cfg.retrieval_boost * retrieval_count),
    )
    s = consolidation * elapsed ** (-d * cfg.power)
    s = clamp(s, 0.0, consolidation)
    if arousal >= cfg.floor_arousal_threshold:
        s = max(s, min(cfg.floor_value, consolidation))
    return s


# --------------------------------------------------------------------------- SPEC 4


@dataclass
class OMemory:
    """What scoring, activation and linking read from a memory."""

    id: str
    embedding: list[float] | None
    affect: Affect
    velocity: Vec3
    mood_snapshot: Affect
    timestamp: datetime
    consolidation: float
    retrieval_count: int = 0
    links: list[tuple[str, float]] = field(default_factory=list)


def semantic_similarity(q: list[float] | None, e: list[float] | None) -> float:
    """s1. Unequal (non-empty) lengths raise ValueError."""
    if q is None or e is None or len(q) == 0 or len(e) == 0:
        return 0.0
    if len(q) != len(e):
        raise ValueError("embedding length mismatch")
    if any(math.isnan(x) for x in q) or any(math.isnan(x) for x in e):
        return 0.0
    nq = math.sqrt(sum(x * x for x in q))
    ne = math.sqrt(sum(x * x for x in e))
    if nq == 0.0 or ne == 0.0:
        return 0.0
    return sum(a * b for a, b in zip(q, e, strict=True)) / (nq * ne)


def mood_congruence(current_mood: Affect, snapshot: Affect) -> float:
    return max(0.0, 1.0 - distance(current_mood, snapshot) / SQRT6)


def affect_proximity(query_affect: Affect, tag_affect: Affect) -> float:
    return max(0.0, 1.0 - distance(query_affect, tag_affect) / SQRT6)


def momentum_alignment(v_current: Vec3, v_tag: Vec3) -> float:
    n1, n2 = norm3(v_current), norm3(v_tag)
    if n1 < 1e-12 or n2 < 1e-12:
        return 0.5
    dot = v_current[0] * v_tag[0] + v_current[1] * v_tag[1] + v_current[2] * v_tag[2]
    return (dot / (n1 * n2) + 1.0) / 2.0


def signals(
    query_embedding: list[float] | None,
    query_affect: Affect,
    current_mood: Affect,
    current_velocity: Vec3,
    mem: OMemory,
    activation: dict[str, float],
    now: datetime,
    decay: ODecay,
) -> list[float]:
    return [
        semantic_similarity(query_embedding, mem.embedding),
        mood_congruence(current_mood, mem.mood_snapshot),
        affect_proximity(query_affect, mem.affect),
        momentum_alignment(current_velocity, mem.velocity),
        effective_strength(
            mem.affect[1], mem.consolidation, mem.retrieval_count, mem.timestamp, now, decay
        ),
        activation.get(mem.id, 0.0),
    ]


@dataclass
class OAdaptive:
    """AdaptiveWeightsConfig."""

    negative_mood_strength: float = 0.15
    negative_mood_center: float = -0.5
    negative_mood_sharpness: float = 5.0
    high_arousal_strength: float = 0.10
    high_arousal_center: float = 0.7
    high_arousal_sharpness: float = 5.0
    calm_strength: float = 0.15
    calm_valence_width: float = 0.2
    calm_arousal_center: float = 0.3
    calm_sharpness: float = 5.0


def gate(x: float, c: float, k: float) -> float:
    return 0.5 * (1.0 + math.tanh(k * (x - c)))


def adaptive_weights(
    mood_valence: float, mood_arousal: float, base: list[float], cfg: OAdaptive
) -> list[float]:
    w = [float(x) for x in base]
    neg = gate(mood_valence, cfg.negative_mood_center, -cfg.negative_mood_sharpness)
    sn = cfg.negative_mood_strength
    w[1] += sn * neg * (2.0 / 3.0)
    w[2] += sn * neg * (1.0 / 3.0)
    w[0] -= sn * neg
    aro = gate(mood_arousal, cfg.high_arousal_center, cfg.high_arousal_sharpness)
    sa = cfg.high_arousal_strength
    w[3] += sa * aro
    w[0] -= sa * aro
    calm = math.exp(-((mood_valence / cfg.calm_valence_width) ** 2)) * gate(
        mood_arousal, cfg.calm_arousal_center, -cfg.calm_sharpness
    )
    sc = cfg.calm_strength
    w[0] += sc * calm
    w[1] -= sc * calm * (2.0 / 3.0)
    w[2] -= sc * calm * (1.0 / 3.0)
    w = [max(0.0, x) for x in w]
    total = sum(w)
    if total > 0:
        return [x / total for x in w]
    return [1.0 / 6.0] * 6


def weighted(weights: list[float], raw: list[float]) -> list[float]:
    return [w * s for w, s in zip(weights, raw, strict=True)]


def total_score(weights: list[float], raw: list[float]) -> float:
    """Left-to-right sum of w_i * s_i."""
    total = 0.0
    for term in weighted(weights, raw):
        total = total + term
    return total


# --------------------------------------------------------------------------- SPEC 5


def spreading_activation(
    seed_ids: list[str], candidates: list[OMemory], hops: int = 2
) -> dict[str, float]:
    ids = {m.id for m in candidates}
    adjacency: dict[str, list[tuple[str, float]]] = {m.id: [] for m in candidates}
    for m in candidates:
        for target, strength in m.links:
            if target in ids:
                adjacency[m.id].append((target, strength))
    seeds = {s for s in seed_ids if s in ids}
    wave: dict[str, float] = {s: 1.0 for s in seed_ids if s in ids}
    result: dict[str, float] = {}
    for _ in range(hops):
        nxt: dict[str, float] = {}
        for node, act in wave.items():
            for target, strength in adjacency[node]:
                if target in seeds:
                    continue
                spread = act * strength
                if spread > nxt.get(target, 0.0):  # a zero spread is never recorded
                    nxt[target] = spread
        for target, value in nxt.items():
            v = min(1.0, value)
            result[target] = max(result[target], v) if target in result else v
        wave = nxt
    return result


@dataclass
class OPlan:
    weights: list[float]
    pass1: list[tuple[str, float]]
    pass2: list[tuple[str, float]]
    activation: dict[str, float]
    seed_ids: list[str]
    raw1: dict[str, list[float]]
    raw2: dict[str, list[float]]


def stable_rank(ids: list[str], scores: list[float]) -> list[tuple[str, float]]:
    order = sorted(range(len(ids)), key=lambda i: -scores[i])  # sorted() is stable
    return [(ids[i], scores[i]) for i in order]


def retrieval_plan(
    query_embedding: list[float] | None,
    query_affect: Affect,
    current_mood: Affect,
    current_velocity: Vec3,
    candidates: list[OMemory],
    now: datetime,
    decay: ODecay,
    weights: list[float],
    top_k: int,
    hops: int = 2,
) -> OPlan:
    ids = [m.id for m in candidates]

    def score_all(act: dict[str, float]) -> tuple[list[float], dict[str, list[float]]]:
        raws = {}
        scores = []
        for m in candidates:
            raw = signals(
                query_embedding, query_affect, current_mood, current_velocity, m, act, now, decay
            )
            raws[m.id] = raw
            scores.append(total_score(weights, raw))
        return scores, raws

    s1, raw1 = score_all({})
    pass1 = stable_rank(ids, s1)
    seeds = [i for i, _ in pass1[:top_k]]
    activation = spreading_activation(seeds, candidates, hops)
    if activation:
        s2, raw2 = score_all(activation)
        pass2 = stable_rank(ids, s2)
    else:
        pass2, raw2 = pass1, raw1
    return OPlan(weights, pass1, pass2, activation, seeds, raw1, raw2)


# --------------------------------------------------------------------------- SPEC 6


def compute_ape(core: Affect, expected: Affect | None, observed: Affect) -> float:
    return distance(expected if expected is not None else core, observed)


def reconsolidate(core: Affect, affect: Affect, ape: float, lr: float) -> Affect:
    return lerp(core, affect, min(ape * lr, 0.5))


def update_prediction(
    core: Affect, expected: Affect | None, current_lr: float, observed: Affect, ape: float
) -> tuple[Affect, float]:
    """Returns ``(new_expected, new_lr)``."""
    target = clamp(ape, 0.05, 0.80)
    new_lr = clamp(current_lr + 0.2 * (target - current_lr), 0.05, 0.80)
    base = expected if expected is not None else core
    return lerp(base, observed, new_lr), new_lr


def hebbian_strengthen(
    links: list[tuple[str, float]], co_retrieved: list[str], increment: float
) -> list[tuple[str, float]]:
    co = set(co_retrieved)
    return [(t, min(1.0, s + increment)) if t in co else (t, s) for t, s in links]


# --------------------------------------------------------------------------- SPEC 7


def temporal_proximity(t1: datetime, t2: datetime, half_life_seconds: float = 3600.0) -> float:
    if half_life_seconds <= 0:
        return 0.0
    return math.exp(-abs(seconds(t1, t2)) * LN2 / half_life_seconds)


@dataclass
class OResonance:
    """ResonanceConfig (the fields link building reads)."""

    threshold: float = 0.3
    max_links: int = 5
    semantic_weight: float = 0.5
    emotional_weight: float = 0.3
    temporal_weight: float = 0.2
    temporal_half_life_seconds: float = 3600.0
    contrastive_temporal_threshold: float = 0.5
    contrastive_valence_threshold: float = 1.0
    causal_temporal_threshold: float = 0.7
    causal_semantic_threshold: float = 0.6


def link_semantic(new_emb: list[float] | None, cand_emb: list[float] | None) -> float:
    if new_emb is None or cand_emb is None or len(new_emb) == 0 or len(cand_emb) == 0:
        return 0.0
    n1 = math.sqrt(sum(x * x for x in new_emb))
    n2 = math.sqrt(sum(x * x for x in cand_emb))
    if n1 == 0.0 or n2 == 0.0:
        return 0.0
    return sum(a * b for a, b in zip(new_emb, cand_emb, strict=True)) / (n1 * n2)


def build_resonance_links(
    new: OMemory, candidates: list[OMemory], cfg: OResonance
) -> list[tuple[str, float, str]]:
    """Forward links ``(target_id, strength, link_type)``, strongest first."""
    kept: list[tuple[float, str, str]] = []
    for cand in candidates:
        if cand.id == new.id:
            continue
        sem = link_semantic(new.embedding, cand.embedding)
        emo = max(0.0, 1.0 - distance(new.affect, cand.affect) / SQRT6)
        temp = temporal_proximity(new.timestamp, cand.timestamp, cfg.temporal_half_life_seconds)
        score = cfg.semantic_weight * sem + cfg.emotional_weight * emo + cfg.temporal_weight * temp
        if score < cfg.threshold:
            continue
        if (
            temp > cfg.contrastive_temporal_threshold
            and abs(new.affect[0] - cand.affect[0]) > cfg.contrastive_valence_threshold
        ):
            kind = "contrastive"
        elif (
            cand.timestamp < new.timestamp
            and temp > cfg.causal_temporal_threshold
            and sem > cfg.causal_semantic_threshold
        ):
            kind = "causal"
        elif sem >= emo and sem >= temp:
            kind = "semantic"
        elif emo >= temp:
            kind = "emotional"
        else:
            kind = "temporal"
        kept.append((score, cand.id, kind))
    kept.sort(key=lambda x: -x[0])  # stable: ties keep candidate order
    return [(cid, clamp(score, 0.0, 1.0), kind) for score, cid, kind in kept[: cfg.max_links]]


# --------------------------------------------------------------------------- SPEC 8


def appraisal_to_core_affect(
    novelty: float, goal: float, coping: float, norm: float, self_rel: float
) -> Affect:
    c = 2.0 * coping - 1.0
    valence = 0.4805 * goal + 0.1862 * norm + 0.1643 * c + 0.0179 * novelty
    arousal = 0.3694 * abs(novelty) + 0.1357 * (1.0 - coping) + 0.2208 * self_rel + 0.1399
    return core_affect(valence, arousal, coping)


SECTORS = [
    "joy",
    "anticipation",
    "surprise",
    "fear",
    "disgust",
    "sadness",
    "disgust",
    "trust",
]
TIER_NAMES = {
    "joy": ("serenity", "joy", "ecstasy"),
    "trust": ("acceptance", "trust", "admiration"),
    "fear": ("apprehension", "fear", "terror"),
    "surprise": ("distraction", "surprise", "amazement"),
    "sadness": ("pensiveness", "sadness", "grief"),
    "disgust": ("boredom", "disgust", "loathing"),
    "anger": ("annoyance", "anger", "rage"),
    "anticipation": ("interest", "anticipation", "vigilance"),
}


def plutchik_angle(valence: float, arousal: float) -> tuple[float, float]:
    """``(r, angle_degrees in [0, 360))``."""
    ap = 2.0 * (arousal - 0.5)
    return math.hypot(valence, ap), math.degrees(math.atan2(ap, valence)) % 360.0


def categorize(
    valence: float, arousal: float, dominance: float | None
) -> tuple[str, str, str | None, float]:
    """``(primary, intensity, name, confidence)`` (SPEC 8 as corrected by SPEC 11).

    There is no "neutral": a point near the origin (r < 0.05, or |v| < 0.05 with
    arousal < 0.05) keeps its sector's emotion, low tier, confidence 0.
    """
    r, angle = plutchik_angle(valence, arousal)
    sector = int((angle + 22.5) / 45.0) % 8
    primary = SECTORS[sector]
    if primary == "fear" and dominance is not None and dominance >= 0.5:
        primary = "anger"
    if r < 0.05 or (abs(valence) < 0.05 and arousal < 0.05):
        return primary, "low", TIER_NAMES[primary][0], 0.0
    tier = 0 if r < 0.3 else (1 if r < 0.7 else 2)
    intensity = ("low", "moderate", "high")[tier]
    diff = (angle - sector * 45.0 + 180.0) % 360.0 - 180.0
    confidence = max(0.0, 1.0 - abs(diff) / 22.5)
    return primary, intensity, TIER_NAMES[primary][tier], confidence
