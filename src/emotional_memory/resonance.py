"""Resonance: associative links between memories and spreading activation (docs/behaviour.md §7).

At encoding, a new memory links to the candidates it resembles semantically,
emotionally or in time (an associative network in the spirit of Bower's 1981
network theory of affect). At retrieval, activation spreads from the best matches
along these links (Collins & Loftus 1975), and co-retrieved memories strengthen
their mutual links (Hebb 1949).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from operator import itemgetter

import jax.numpy as jnp
import numpy as np
from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from emotional_memory._bank import adjacency_from_memories
from emotional_memory._precision import float64
from emotional_memory._validation import finite, in_range, non_negative, not_bool, positive
from emotional_memory.affect import MAX_PAD_DISTANCE
from emotional_memory.kernel.activation import spreading_activation_jit
from emotional_memory.kernel.columns import bucket_size
from emotional_memory.models import LinkType, Memory, ResonanceLink, with_fields

MAX_LINK_CANDIDATES = 2**53
"""Largest ``max_links * candidate_multiplier`` (the encode-time search limit, which a
SQL store passes as a 64-bit LIMIT)."""


class ResonanceConfig(BaseModel):
    """How links are built at encode time and how activation spreads.

    Attributes:
        threshold: minimum link score kept.
        max_links: links per memory (forward and backward).
        semantic_weight, emotional_weight, temporal_weight: score mixture.
        temporal_half_life_seconds: half-life of temporal proximity (> 0).
        candidate_multiplier: prefilter ``max_links * multiplier`` by embedding.
        propagation_hops: hops of spreading activation (1..5).
        hebbian_increment: strengthening per co-retrieval (0..0.5).
        contrastive_temporal_threshold, contrastive_valence_threshold,
        causal_temporal_threshold, causal_semantic_threshold: link typing rules
            (each in [0, 1], the valence one in [0, 2], as in the original).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    threshold: float = 0.3
    max_links: int = 5
    semantic_weight: float = 0.5
    emotional_weight: float = 0.3
    temporal_weight: float = 0.2
    temporal_half_life_seconds: float = 3600.0
    candidate_multiplier: int = 3
    propagation_hops: int = 2
    hebbian_increment: float = 0.05
    contrastive_temporal_threshold: float = 0.5
    contrastive_valence_threshold: float = 1.0
    causal_temporal_threshold: float = 0.7
    causal_semantic_threshold: float = 0.6

    @field_validator(
        "threshold", "semantic_weight", "emotional_weight", "temporal_weight", mode="before",
    )
    @classmethod
    def _finite(cls, v: float, info: object) -> float:
        return finite(str(getattr(info, "field_name", "value")), v)

    @field_validator(
        "contrastive_temporal_threshold", "causal_temporal_threshold",
        "causal_semantic_threshold", mode="before",
    )
    @classmethod
    def _unit_threshold(cls, v: float, info: object) -> float:
        # the original 0.18.1's ranges: a threshold outside never (or always) fires
        return in_range(str(getattr(info, "field_name", "value")), v, 0.0, 1.0)

    @field_validator("contrastive_valence_threshold", mode="before")
    @classmethod
    def _valence_threshold(cls, v: float) -> float:
        return in_range("contrastive_valence_threshold", v, 0.0, 2.0)

    @field_validator("temporal_half_life_seconds", mode="before")
    @classmethod
    def _half_life(cls, v: float) -> float:
        return positive("temporal_half_life_seconds", v)

    @field_validator("hebbian_increment", mode="before")
    @classmethod
    def _hebbian(cls, v: float) -> float:
        return in_range("hebbian_increment", v, 0.0, 0.5)

    @field_validator("propagation_hops", mode="after")
    @classmethod
    def _hops(cls, v: int) -> int:
        if not 1 <= v <= 5:
            shown = v if abs(v) < 10**6 else "an int beyond that"
            raise ValueError(f"propagation_hops must lie in [1, 5], got {shown}")
        return v

    @field_validator("max_links", "candidate_multiplier", "propagation_hops", mode="before")
    @classmethod
    def _not_bool(cls, v: object, info: object) -> object:
        return not_bool(getattr(info, "field_name", "value"), v)

    @field_validator("max_links", "candidate_multiplier", mode="after")
    @classmethod
    def _at_least_one(cls, v: int, info: object) -> int:
        name = getattr(info, "field_name", "value")
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
        if v > MAX_LINK_CANDIDATES:
            raise ValueError(f"{name} must be <= MAX_LINK_CANDIDATES = 2**53, got a larger int")
        return v

    @model_validator(mode="after")
    def _candidates_bounded(self) -> ResonanceConfig:
        if self.max_links * self.candidate_multiplier > MAX_LINK_CANDIDATES:
            raise ValueError(
                "max_links * candidate_multiplier must be <= MAX_LINK_CANDIDATES = 2**53"
            )
        return self


def temporal_proximity(t1: datetime, t2: datetime, half_life_seconds: float = 3600.0) -> float:
    """``exp(-|t1 - t2| * ln2 / half_life)``; 0 when the half-life is <= 0 (docs/behaviour.md §7).

    Args:
        t1: First time.
        t2: Second time (order does not matter; both aware or both naive).
        half_life_seconds: Time gap at which proximity halves.

    Returns:
        The proximity, in [0, 1].

    Raises:
        TypeError: ``half_life_seconds`` is not a real number (a bool or a str included).
        ValueError: ``half_life_seconds`` is NaN.
    """
    if isinstance(half_life_seconds, bool) or not isinstance(half_life_seconds, numbers.Real):
        raise TypeError(
            f"half_life_seconds must be a number, got {type(half_life_seconds).__name__}"
        )
    if half_life_seconds <= 0:
        return 0.0
    try:
        half_life = float(half_life_seconds)
    except OverflowError:  # an int beyond the float range: an infinite half-life
        half_life = math.inf
    if math.isnan(half_life):
        raise ValueError("half_life_seconds must not be NaN")
    dt = abs((t1 - t2).total_seconds())
    return math.exp(-dt * math.log(2.0) / half_life)


def _cosine(a: Sequence[float] | None, b: Sequence[float] | None) -> float:
    """Cosine of two embeddings; 0 when either is missing, zero-norm or has NaN."""
    if not a or not b:
        return 0.0
    if len(a) != len(b):
        raise ValueError(f"embedding length mismatch: {len(a)} vs {len(b)}")
    va = np.asarray(a, dtype=np.float64)
    return _cosine_to(a, va, _norm(va), b)


def _norm(vector: np.ndarray) -> float:
    """``float(np.linalg.norm(vector))`` of a 1-D float64 vector, without its overhead.

    ``np.linalg.norm`` computes ``sqrt(x.dot(x))``; ``math.sqrt`` rounds the same way.
    """
    return math.sqrt(vector.dot(vector))


def _cosine_to(
    a: Sequence[float], va: np.ndarray, na: float, b: Sequence[float] | None
) -> float:
    """:func:`_cosine` of ``a`` and ``b`` with ``a``'s float64 vector and norm given.

    Args:
        a: the first embedding (non-empty).
        va: ``a`` as a float64 array.
        na: ``_norm(va)``.
        b: the second embedding.

    Returns:
        The cosine, bit-for-bit that of :func:`_cosine` (0 when ``b`` is missing or
        either norm is zero or not finite).

    Raises:
        ValueError: unequal lengths.
    """
    if not b:
        return 0.0
    if len(a) != len(b):
        raise ValueError(f"embedding length mismatch: {len(a)} vs {len(b)}")
    if na == 0.0 or not math.isfinite(na):
        return 0.0
    vb = np.asarray(b, dtype=np.float64)
    nb = _norm(vb)
    if nb == 0.0 or not math.isfinite(nb):
        return 0.0
    return float(np.dot(va, vb) / (na * nb))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _microseconds(moment: datetime) -> int:
    """An aware datetime as integer microseconds since the Unix epoch (exact)."""
    return (moment - _EPOCH) // _MICROSECOND


def _link_type(
    dv: float, older: bool, sem: float, emo: float, temp: float, cfg: ResonanceConfig
) -> LinkType:
    """The type of a link (docs/behaviour.md §7).

    Args:
        dv: absolute valence difference of the two memories.
        older: whether the candidate is strictly older than the new memory.
        sem, emo, temp: the link's score components.
        cfg: the typing thresholds.

    Returns:
        "contrastive", "causal", "semantic", "emotional" or "temporal".
    """
    if temp > cfg.contrastive_temporal_threshold and dv > cfg.contrastive_valence_threshold:
        return "contrastive"
    if older and temp > cfg.causal_temporal_threshold and sem > cfg.causal_semantic_threshold:
        return "causal"
    if sem >= emo and sem >= temp:
        return "semantic"
    if emo >= temp:
        return "emotional"
    return "temporal"


def link_scores(
    new_memory: Memory, candidate: Memory, config: ResonanceConfig
) -> tuple[float, float, float, float]:
    """``(score, semantic, emotional, temporal)`` of a prospective link.

    Args:
        new_memory: the memory being encoded.
        candidate: an existing memory.
        config: weights and half-life.

    Returns:
        The weighted score and its three components.
    """
    sem = _cosine(new_memory.embedding, candidate.embedding)
    emo = max(0.0, 1.0 - new_memory.tag.core_affect.distance(candidate.tag.core_affect)
              / MAX_PAD_DISTANCE)
    temp = temporal_proximity(
        new_memory.tag.timestamp, candidate.tag.timestamp, config.temporal_half_life_seconds
    )
    score = config.semantic_weight * sem + config.emotional_weight * emo
    score = score + config.temporal_weight * temp
    return score, sem, emo, temp


def build_resonance_links(
    new_memory: Memory, candidates: Iterable[Memory], config: ResonanceConfig | None = None
) -> list[ResonanceLink]:
    """Forward links from ``new_memory`` to its strongest associates.

    Args:
        new_memory: the memory being encoded.
        candidates: existing memories (``new_memory`` itself is skipped).
        config: link parameters (default ``ResonanceConfig()``).

    Returns:
        At most ``max_links`` links with score >= threshold, strongest first (ties
        keep candidate order); strengths clamped to [0, 1].
    """
    cfg = config if config is not None else ResonanceConfig()
    cands = list(candidates)
    tag = new_memory.tag
    kept = score_links(
        new_memory.id,
        new_memory.embedding,
        (tag.core_affect.valence, tag.core_affect.arousal, tag.core_affect.dominance),
        _microseconds(tag.timestamp),
        [c.id for c in cands],
        [np.asarray(c.embedding, dtype=np.float64) if c.embedding else None for c in cands],
        [
            (c.tag.core_affect.valence, c.tag.core_affect.arousal, c.tag.core_affect.dominance)
            for c in cands
        ],
        [_microseconds(c.tag.timestamp) for c in cands],
        cfg,
    )
    return [
        ResonanceLink(
            source_id=new_memory.id, target_id=cands[i].id, strength=strength,
            link_type=link_type,
        )
        for i, strength, link_type in kept
    ]


def score_links(
    new_id: str,
    new_embedding: Sequence[float] | np.ndarray | None,
    new_affect: Sequence[float],
    new_time_us: int,
    ids: Sequence[str],
    vectors: Sequence[np.ndarray | None],
    affects: Sequence[Sequence[float]],
    times_us: Sequence[int],
    cfg: ResonanceConfig,
    norms: Sequence[float] | None = None,
) -> list[tuple[int, float, LinkType]]:
    """The forward links of a new memory, from its candidates' columns (docs/behaviour.md §7).

    The numbers are those of :func:`link_scores` bit for bit, computed pair by pair
    with the same scalar operations (a matrix product could sum in another order):
    the cosine of the new embedding with each stored one, ``1 - distance /
    MAX_PAD_DISTANCE`` of the core affects, the temporal proximity of the timestamps.

    Args:
        new_id: the new memory's id (a candidate with this id is skipped).
        new_embedding: its embedding, as a list or a float64 vector (None or empty:
            no semantic component).
        new_affect: its core affect as ``(valence, arousal, dominance)``.
        new_time_us: its timestamp in epoch microseconds.
        ids: the candidates' ids, in candidate order.
        vectors: their embeddings as float64 vectors (None when missing or empty).
        affects: their core affects as triples.
        times_us: their timestamps in epoch microseconds.
        cfg: the link parameters.
        norms: the candidates' embedding norms, each ``sqrt(v . v)`` of its float64
            vector as ``np.dot`` sums it (what a store keeps per row), or None to
            compute them here; only read where ``vectors`` has a vector.

    Returns:
        ``(candidate index, strength, link type)`` of at most ``max_links`` links with
        score >= threshold, strongest first (ties keep candidate order), strengths
        clamped to [0, 1].

    Raises:
        ValueError: a candidate embedding of another length than the new one.
    """
    # The new memory's vector and norm are computed once (not once per candidate);
    # the cosine is _cosine_to's, the distance CoreAffect.distance's and the
    # proximity temporal_proximity's, operation for operation (timedelta's
    # total_seconds() divides the exact microsecond difference by 10**6 once).
    new_vec = (
        np.asarray(new_embedding, dtype=np.float64)
        if new_embedding is not None and len(new_embedding)
        else None
    )
    new_norm = _norm(new_vec) if new_vec is not None else 0.0
    dim = new_vec.shape[0] if new_vec is not None else 0
    semantic = new_vec is not None and new_norm != 0.0 and math.isfinite(new_norm)
    nv, na, nd = new_affect
    w_sem, w_emo, w_temp = cfg.semantic_weight, cfg.emotional_weight, cfg.temporal_weight
    half_life, threshold = cfg.temporal_half_life_seconds, cfg.threshold
    ln2 = math.log(2.0)
    sqrt, exp, isfinite = math.sqrt, math.exp, math.isfinite
    # The bound method: the same product as np.dot(new_vec, vec), without its dispatch.
    dot = (new_vec if new_vec is not None else np.zeros(0)).dot
    has_new = new_vec is not None
    temporal = not half_life <= 0  # (as written per candidate before: NaN included)
    scored: list[tuple[float, float, float, float, int]] = []
    append = scored.append
    # One pass over the columns side by side (no indexing by candidate); the per
    # candidate operations and their order are unchanged.
    given_norms: Sequence[float | None] = norms if norms is not None else [None] * len(ids)
    for i, (cand_id, vec, (av, aa, ad), time_us, given) in enumerate(
        zip(ids, vectors, affects, times_us, given_norms, strict=True)
    ):
        if cand_id == new_id:
            continue
        sem = 0.0
        if has_new and vec is not None:
            if vec.shape[0] != dim:
                raise ValueError(f"embedding length mismatch: {dim} vs {vec.shape[0]}")
            if semantic:
                nb = sqrt(vec.dot(vec)) if given is None else given
                if nb != 0.0 and isfinite(nb):
                    # float64 division either way: the same quotient as dot / (...)
                    sem = float(dot(vec)) / (new_norm * nb)
        emo = max(
            0.0, 1.0 - sqrt((nv - av) ** 2 + (na - aa) ** 2 + (nd - ad) ** 2) / MAX_PAD_DISTANCE
        )
        if temporal:
            dt = abs(new_time_us - time_us) / 1_000_000
            temp = exp(-dt * ln2 / half_life)
        else:
            temp = 0.0
        score = w_sem * sem + w_emo * emo
        score = score + w_temp * temp
        if score < threshold:
            continue
        append((score, sem, emo, temp, i))
    # Strongest first; a stable sort keeps equal scores in candidate order (reverse
    # included), as sorting by -score does.
    scored.sort(key=itemgetter(0), reverse=True)
    return [
        (
            i,
            min(1.0, max(0.0, score)),
            _link_type(
                abs(new_affect[0] - affects[i][0]), times_us[i] < new_time_us, sem, emo, temp,
                cfg,
            ),
        )
        for score, sem, emo, temp, i in scored[: cfg.max_links]
    ]


def spreading_activation(
    seed_ids: Iterable[str], candidates: Sequence[Memory], hops: int = 2
) -> dict[str, float]:
    """Multi-hop activation from the seeds over the candidates' own links (docs/behaviour.md §5).

    Runs the kernel's dense implementation in float64.

    Args:
        seed_ids: ids that start with activation 1.0 (those among candidates).
        candidates: the memory set; links leaving it are ignored.
        hops: number of hops (>= 0; an integral float such as 2.0 is accepted).

    Returns:
        id -> activation in (0, 1] for every non-seed memory a positive spread reached
        (as the original 0.18.1, a zero spread, e.g. over a link of strength 0, is not
        recorded).

    Raises:
        TypeError: ``hops`` is not a number (a bool or a str included).
        ValueError: ``hops`` is not a whole number (2.5, NaN, inf).
    """
    hops = _hop_count(hops)
    cands = list(candidates)
    if hops < 1 or not cands:
        return {}
    # A walk of more than len(cands) links revisits a memory; as strengths lie in
    # [0, 1] it never beats the shorter walk, so more hops change nothing (and each
    # hop is unrolled into the traced program).
    hops = min(hops, len(cands))
    seeds = set(seed_ids)
    seed_mask = np.asarray([m.id in seeds for m in cands], dtype=bool)
    if not seed_mask.any():
        return {}
    targets, strengths = adjacency_from_memories(cands)
    n, size = len(cands), bucket_size(len(cands))  # padded: few compilations
    pad = ((0, size - n), (0, 0))
    with float64():
        act, reached = spreading_activation_jit(
            jnp.asarray(np.pad(seed_mask, (0, size - n))),
            jnp.asarray(np.pad(targets, pad, constant_values=-1)),
            jnp.asarray(np.pad(strengths, pad), jnp.float64),
            int(hops),
        )
        act_np = np.asarray(act, dtype=np.float64)
        reached_np = np.asarray(reached)
    hit = reached_np[:n] & (act_np[:n] > 0)
    return {cands[i].id: float(act_np[i]) for i in np.flatnonzero(hit)}


def _hop_count(hops: object) -> int:
    """``hops`` as an int: an int, or a float with an integral value."""
    if isinstance(hops, bool) or not isinstance(hops, numbers.Real):
        raise TypeError(f"hops must be an int, got {type(hops).__name__}")
    if isinstance(hops, numbers.Integral):
        return int(hops)
    value = float(hops)
    if not value.is_integer():
        raise ValueError(f"hops must be a whole number, got {value}")
    return int(value)


def hebbian_strengthen(
    memory: Memory, co_retrieved_ids: Iterable[str], increment: float
) -> list[ResonanceLink]:
    """Strengthen links to co-retrieved memories (Hebb 1949).

    Args:
        memory: the memory whose links change.
        co_retrieved_ids: ids retrieved together with it (a link to one of them is
            strengthened, a link to the memory itself too when its id is listed).
        increment: added strength (>= 0), capped at 1.0.

    Returns:
        The memory's new link list (same order).

    Raises:
        ValueError: ``increment`` is negative (a link's strength lies in [0, 1]),
            NaN or infinite.
    """
    inc = non_negative("increment", increment)
    # every listed id, the memory's own included (as the original; the engine leaves
    # a memory's own id out of its co-retrieved ids)
    co = set(co_retrieved_ids)
    return [
        with_fields(link, {"strength": min(1.0, link.strength + inc)})
        if link.target_id in co else link
        for link in memory.tag.resonance_links
    ]
