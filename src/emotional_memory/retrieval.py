"""Multi-signal, mood-adaptive retrieval scoring: the public, seed-compatible API.

Recall is ranked by six signals (SPEC 4) - semantic similarity, mood congruence
(Bower 1981), affect proximity, momentum alignment, recency (power-law decay) and
spreading-activation resonance (Collins & Loftus 1975) - whose weights shift with
mood. Every number here comes from the JAX kernel (``emotional_memory.kernel``),
evaluated in float64 inside a local x64 context, so explanations, training and the
runtime path share one implementation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from emotional_memory._bank import (
    CandidateBank,
    bank_from_memories,
    columns_from_memories,
    embedding_dim,
    query_features,
)
from emotional_memory._params import params_from_config
from emotional_memory._precision import float64
from emotional_memory._validation import (
    finite,
    in_range,
    non_negative,
    positive,
    positive_int,
    weight_vector,
)
from emotional_memory.affect import MAX_PAD_DISTANCE as MAX_PAD_DISTANCE
from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.decay import DecayConfig
from emotional_memory.kernel import (
    SIGNAL_NAMES,
    ContextInputs,
    LexicalInputs,
    MemoryColumns,
    QueryFeatures,
    ScoringParams,
    apply_signal_mask,
    bucket_size,
)
from emotional_memory.kernel import adaptive_weights as kernel_adaptive_weights
from emotional_memory.kernel import signals as kernel_signals
from emotional_memory.kernel.params import pack_params, unpack_params
from emotional_memory.kernel.plan import (
    RESONANCE,
    TABLE,
    pack_columns,
    pack_query,
    retrieval_plan_packed,
    top_k_bucket,
)
from emotional_memory.models import EmotionalTag, Memory, with_fields
from emotional_memory.mood import MoodField

ParamsLike = ScoringParams | np.ndarray | jax.Array
"""Scoring parameters, or their :func:`~emotional_memory.kernel.params.pack_params`
vector (the engine caches the packed form per config: one operand per program)."""

SIGNAL_FIELDS: tuple[str, ...] = SIGNAL_NAMES
"""Signal names in weight order (the kernel's :data:`SIGNAL_NAMES`)."""


# --------------------------------------------------------------------------- configs


class AdaptiveWeightsConfig(BaseModel):
    """Parameters for smooth mood-modulated weight adjustment (SPEC 4).

    Three conditions - negative mood, high arousal, calm - are smooth sigmoid or
    Gaussian gates; ``*_sharpness`` sets how step-like each transition is.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

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

    @field_validator(
        "negative_mood_strength", "high_arousal_strength", "calm_strength", mode="before"
    )
    @classmethod
    def _strength(cls, v: float, info: Any) -> float:
        return in_range(info.field_name, v, 0.0, 1.0)

    @field_validator(
        "negative_mood_sharpness", "high_arousal_sharpness", "calm_sharpness",
        "calm_valence_width", mode="before",
    )
    @classmethod
    def _positive(cls, v: float, info: Any) -> float:
        return positive(info.field_name, v)

    @field_validator("negative_mood_center", mode="before")
    @classmethod
    def _valence_center(cls, v: float) -> float:
        return in_range("negative_mood_center", v, -1.0, 1.0)

    @field_validator("high_arousal_center", "calm_arousal_center", mode="before")
    @classmethod
    def _arousal_center(cls, v: float, info: Any) -> float:
        return in_range(info.field_name, v, 0.0, 1.0)


class QueryClassifierConfig(BaseModel):
    """Per-query-type routing of the base weights (SPEC 4, "Query routing").

    ``mode``: ``"heuristic"`` uses the built-in classifier, ``"llm"`` a classifier passed
    to the engine, ``"disabled"`` turns routing off. The routed vector replaces
    ``base_weights`` and is still modulated by mood and the ablation mask.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Literal["disabled", "heuristic", "llm"] = "disabled"
    routed_weights: dict[str, list[float]] = Field(default_factory=dict)
    default_type: str = "default"

    @field_validator("routed_weights", mode="before")
    @classmethod
    def _routes(cls, v: Any) -> dict[str, list[float]]:
        if not isinstance(v, dict):
            raise TypeError("routed_weights must be a dict of query type -> 6 weights")
        return {
            str(k): weight_vector(f"routed_weights[{k!r}]", w, weights=True)
            for k, w in v.items()
        }


class QueryAdapterConfig(BaseModel):
    """A fitted query adapter, inline: ``q -> q + left @ (right.T @ q)`` (see
    :mod:`emotional_memory.kernel.adapter`).

    Attributes:
        dim: D, the embedding dimension it maps (an embedder of another dimension is
            refused at the first query).
        rank: R, the rank of the learned product (1 <= R <= D).
        left: the (D, R) factor, row-major, D * R finite numbers.
        right: the (D, R) factor, row-major.
        sha256: hex SHA-256 of the factors (``left`` then ``right`` as little-endian
            float64 bytes): a hand-edited or truncated config is refused on load.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    dim: int
    rank: int
    left: list[float]
    right: list[float]
    sha256: str

    @field_validator("dim", "rank", mode="before")
    @classmethod
    def _sizes(cls, v: Any, info: Any) -> int:
        return positive_int(f"query_adapter.{info.field_name}", v)

    @field_validator("left", "right", mode="before")
    @classmethod
    def _factor(cls, v: Any, info: Any) -> list[float]:
        field = f"query_adapter.{info.field_name}"
        if isinstance(v, str | bytes) or not hasattr(v, "__len__"):
            raise TypeError(f"{field} must be a list of numbers")
        try:
            arr = np.asarray(v, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{field} must be a flat list of numbers") from exc
        if arr.ndim != 1:
            raise ValueError(f"{field} must be a flat list of numbers, got shape {arr.shape}")
        if not np.isfinite(arr).all():
            raise ValueError(f"{field} contains NaN or infinite values")
        return arr.tolist()

    @model_validator(mode="after")
    def _consistent(self) -> QueryAdapterConfig:
        """Check the factors' sizes and checksum (clear errors naming the field)."""
        size = self.dim * self.rank
        if self.rank > self.dim:
            raise ValueError(
                f"query_adapter.rank must be <= dim ({self.dim}), got {self.rank}"
            )
        for name in ("left", "right"):
            got = len(getattr(self, name))
            if got != size:
                raise ValueError(
                    f"query_adapter.{name} must hold dim * rank = {size} numbers, got {got}"
                )
        want = adapter_checksum(self.factors())
        if self.sha256 != want:
            raise ValueError(
                "query_adapter.sha256 does not match its factors (the config was edited "
                "or truncated): refit or restore the file"
            )
        return self

    def factors(self) -> tuple[np.ndarray, np.ndarray]:
        """The factors as float64 (D, R) arrays.

        Returns:
            ``(left, right)``.
        """
        shape = (self.dim, self.rank)
        return (np.asarray(self.left, np.float64).reshape(shape),
                np.asarray(self.right, np.float64).reshape(shape))

    @classmethod
    def from_factors(cls, left: Any, right: Any) -> QueryAdapterConfig:
        """The config of given factors, with their checksum.

        Args:
            left: (D, R) factor.
            right: (D, R) factor.

        Returns:
            The validated config.
        """
        lf = np.asarray(left, np.float64)
        rf = np.asarray(right, np.float64)
        if lf.ndim != 2 or lf.shape != rf.shape:
            raise ValueError(
                f"query_adapter factors must be two (D, R) arrays, got {lf.shape} and "
                f"{rf.shape}"
            )
        return cls(dim=lf.shape[0], rank=lf.shape[1], left=lf.reshape(-1).tolist(),
                   right=rf.reshape(-1).tolist(), sha256=adapter_checksum((lf, rf)))


def adapter_checksum(factors: tuple[np.ndarray, np.ndarray]) -> str:
    """Hex SHA-256 of adapter factors (little-endian float64, ``left`` then ``right``).

    Args:
        factors: ``(left, right)`` arrays.

    Returns:
        The hex digest.
    """
    import hashlib

    digest = hashlib.sha256()
    for part in factors:
        digest.update(np.ascontiguousarray(part, dtype="<f8").tobytes())
    return digest.hexdigest()


class RetrievalConfig(BaseModel):
    """Parameters for multi-signal retrieval scoring.

    Attributes:
        base_weights: weights of [semantic, mood_congruence, affect_proximity,
            momentum_alignment, recency, resonance]; exactly 6 finite numbers.
        query_classifier: optional per-query-type routing.
        ape_threshold: prediction error that opens reconsolidation.
        reconsolidation_learning_rate: tag update rate (capped at 50% per retrieval).
        reconsolidation_window_seconds: how long a reopened trace stays labile.
        candidate_multiplier: prefilter ``top_k * multiplier`` candidates by embedding
            when the store is larger than that.
        adaptive_weights_config: the mood gates.
        signal_scale, signal_shift: opt-in per-signal affine calibration (a fitted
            model's output); ``None`` means identity (the SPEC score).
        lexical_weight: base weight of the opt-in lexical signal s7 (Okapi BM25 of the
            query against the memory's words, relative to the best candidate; see
            :mod:`emotional_memory.kernel.lexical`). 0 (default) keeps the six-signal
            SPEC score bit for bit; > 0 joins the normalisation as a seventh weight
            and makes the candidates hybrid (semantic + lexical shortlists).
        lexical_k1, lexical_b: BM25's term-frequency saturation (> 0) and length
            normalisation (in [0, 1]).
        lexical_stop_words: query words ignored by s7: ``"english"`` (a built-in list,
            :data:`emotional_memory.lexical.ENGLISH_STOP_WORDS`), ``"none"``, or a list.
        lexical_stemmer: the lexical analysis, applied to memories and queries alike:
            ``"none"`` (default: the tokens as they are) or ``"english"`` (the Snowball
            English stemmer; needs PyStemmer, extra ``stem``).
        lexical_query_counts: weigh each query term by its count in the query (BM25
            sums over every occurrence); False (default): each distinct term once.
        query_adapter: an opt-in fitted linear map of the query embedding
            (:class:`QueryAdapterConfig`), applied before the candidate search and
            scoring; None (default): the query as embedded.
        context_weight: base weight of the opt-in conversational context signal s8
            (:mod:`emotional_memory.kernel.context`): a memory borrows the best blend of
            s1 and s7 of the memories encoded just before and after it in the
            retrieving scope. 0 (default) keeps the score bit for bit; > 0 joins the
            normalisation as an eighth weight (s7 is then scored too, with its own
            weight, possibly 0), and the neighbours of the candidates join them.
        context_mix: share of the neighbours' s1 in what they lend (the rest is their
            s7), in [0, 1].
        context_window_seconds: optional time window: neighbours encoded further
            apart than this (by their tags' timestamps) do not lend; None: no window.
        context_candidates: add the encode-order neighbours of the shortlisted
            candidates to the candidates even while ``context_weight`` is 0 (what a
            fit over context batches ranked); with s8 on they are always added.
        full_bank_candidates: score every memory instead of a shortlist (for fitting
            and small stores).
        hybrid_candidates: take the union of the semantic and the lexical shortlists
            as candidates even while ``lexical_weight`` is 0 (the six-signal score
            over hybrid candidates; fitting captures these). With s7 on they are
            always hybrid.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_weights: list[float] = Field(
        default_factory=lambda: [0.35, 0.25, 0.15, 0.10, 0.10, 0.05]
    )
    query_classifier: QueryClassifierConfig | None = None
    ape_threshold: float = 0.3
    reconsolidation_learning_rate: float = 0.2
    reconsolidation_window_seconds: float = 300.0
    candidate_multiplier: int = 3
    adaptive_weights_config: AdaptiveWeightsConfig = Field(default_factory=AdaptiveWeightsConfig)
    signal_scale: list[float] | None = None
    signal_shift: list[float] | None = None
    lexical_weight: float = 0.0
    lexical_k1: float = 1.2
    lexical_b: float = 0.75
    lexical_stop_words: Literal["english", "none"] | list[str] = "english"
    lexical_stemmer: Literal["none", "english"] = "none"
    lexical_query_counts: bool = False
    query_adapter: QueryAdapterConfig | None = None
    context_weight: float = 0.0
    context_mix: float = 0.5
    context_window_seconds: float | None = None
    context_candidates: bool = False
    full_bank_candidates: bool = False
    hybrid_candidates: bool = False

    @field_validator("lexical_weight", mode="before")
    @classmethod
    def _lexical_weight(cls, v: Any) -> float:
        return non_negative("lexical_weight", v)

    @field_validator("context_weight", mode="before")
    @classmethod
    def _context_weight(cls, v: Any) -> float:
        return non_negative("context_weight", v)

    @field_validator("context_mix", mode="before")
    @classmethod
    def _context_mix(cls, v: Any) -> float:
        return in_range("context_mix", v, 0.0, 1.0)

    @field_validator("context_window_seconds", mode="before")
    @classmethod
    def _context_window(cls, v: Any) -> float | None:
        if v is None:
            return None
        value = finite("context_window_seconds", v)
        if value <= 0:
            raise ValueError(f"context_window_seconds must be > 0 or None, got {value}")
        return value

    @property
    def context_on(self) -> bool:
        """Whether the context signal s8 takes part (``context_weight > 0``)."""
        return self.context_weight > 0

    @field_validator("lexical_stemmer", mode="after")
    @classmethod
    def _lexical_stemmer(cls, v: str) -> str:
        from emotional_memory.lexical import check_analysis

        return check_analysis(v)  # the stemmer's package is there, or a clear error

    @field_validator("lexical_k1", mode="before")
    @classmethod
    def _lexical_k1(cls, v: Any) -> float:
        value = finite("lexical_k1", v)
        if value <= 0:
            raise ValueError(f"lexical_k1 must be > 0, got {value}")
        return value

    @field_validator("lexical_b", mode="before")
    @classmethod
    def _lexical_b(cls, v: Any) -> float:
        return in_range("lexical_b", v, 0.0, 1.0)

    @property
    def lexical_on(self) -> bool:
        """Whether the lexical signal s7 takes part (``lexical_weight > 0``)."""
        return self.lexical_weight > 0

    @field_validator("base_weights", mode="before")
    @classmethod
    def _weights(cls, v: Any) -> list[float]:
        return weight_vector("base_weights", v, nonneg=False, weights=True)

    @field_validator("signal_scale", "signal_shift", mode="before")
    @classmethod
    def _calibration(cls, v: Any, info: Any) -> list[float] | None:
        return None if v is None else weight_vector(info.field_name, v, nonneg=False)

    @field_validator("ape_threshold", "reconsolidation_window_seconds", mode="before")
    @classmethod
    def _non_negative(cls, v: float, info: Any) -> float:
        return non_negative(info.field_name, v)

    @field_validator("reconsolidation_learning_rate", mode="before")
    @classmethod
    def _lr(cls, v: float) -> float:
        return finite("reconsolidation_learning_rate", v)

    @field_validator("candidate_multiplier", mode="after")
    @classmethod
    def _multiplier(cls, v: int) -> int:
        if v < 1:
            raise ValueError(f"candidate_multiplier must be >= 1, got {v}")
        return v


# --------------------------------------------------------------------------- results


class RetrievalSignals(BaseModel):
    """Named values of the six signals (raw, weights, or weighted)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    semantic_similarity: float = 0.0
    mood_congruence: float = 0.0
    affect_proximity: float = 0.0
    momentum_alignment: float = 0.0
    recency: float = 0.0
    resonance: float = 0.0

    def total(self) -> float:
        """Return the sum of all six signals (left to right).

        Returns:
            ``s1 + s2 + ... + s6`` in SPEC 4 signal order.
        """
        return (
            self.semantic_similarity
            + self.mood_congruence
            + self.affect_proximity
            + self.momentum_alignment
            + self.recency
            + self.resonance
        )

    def as_tuple(self) -> tuple[float, float, float, float, float, float]:
        """The six values in signal order.

        Returns:
            ``(semantic_similarity, mood_congruence, affect_proximity,
            momentum_alignment, recency, resonance)``.
        """
        return (
            self.semantic_similarity, self.mood_congruence, self.affect_proximity,
            self.momentum_alignment, self.recency, self.resonance,
        )


class RetrievalBreakdown(BaseModel):
    """Structured decomposition of one retrieval score."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    weights: RetrievalSignals
    raw_signals: RetrievalSignals
    weighted_signals: RetrievalSignals
    total_score: float
    lexical_weight: float | None = Field(default=None, exclude_if=lambda v: v is None)
    """Weight of the opt-in lexical signal s7 (None when s7 is off)."""
    lexical_signal: float | None = Field(default=None, exclude_if=lambda v: v is None)
    """Raw s7 of this memory (None when s7 is off); ``total_score`` includes
    ``lexical_weight * lexical_signal`` after the six signals."""
    context_weight: float | None = Field(default=None, exclude_if=lambda v: v is None)
    """Weight of the opt-in context signal s8 (None when s8 is off)."""
    context_signal: float | None = Field(default=None, exclude_if=lambda v: v is None)
    """Raw s8 of this memory (None when s8 is off); ``total_score`` includes
    ``context_weight * context_signal`` after s7."""


class RetrievalExplanation(BaseModel):
    """One retrieved memory plus the ranking-time decomposition that ranked it.

    ``score`` and ``breakdown`` are ranking-time values; ``memory`` is the state after
    retrieval side effects. Ranks are 1-based.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    memory: Memory
    score: float
    breakdown: RetrievalBreakdown
    activation_level: float = 0.0
    pass1_rank: int | None = None
    pass2_rank: int | None = None
    selected_as_seed: bool = False
    candidate_count: int = 0


class RankedMemory(BaseModel):
    """A candidate with its score and breakdown in one pass of the plan.

    A frozen pydantic model, as in the original (the plan builds it without
    re-validating the memory).
    """

    model_config = ConfigDict(frozen=True)

    memory: Memory
    score: float
    breakdown: RetrievalBreakdown


class PlanWeights(RetrievalSignals):
    """The weights of a :class:`RetrievalPlan`: named like :class:`RetrievalSignals`
    (the original's type: ``plan.weights.semantic_similarity``) and also a sequence of
    floats in signal order (``plan.weights[0]``, ``len``, ``np.asarray``), with the
    lexical signal's weight last when s7 took part.
    """

    lexical: float | None = Field(default=None, exclude_if=lambda v: v is None)
    """Weight of the opt-in lexical signal s7 (None when it took no part)."""
    context: float | None = Field(default=None, exclude_if=lambda v: v is None)
    """Weight of the opt-in context signal s8 (None when it took no part)."""

    @classmethod
    def from_values(cls, values: Any) -> PlanWeights:
        """Build from 6 (or 7, lexical last; or 8, lexical then context) numbers.

        Args:
            values: array-like of 6, 7 or 8 floats.

        Returns:
            The weights.
        """
        if isinstance(values, PlanWeights):
            return values
        if isinstance(values, RetrievalSignals):
            return cls(**values.model_dump())
        flat = [float(v) for v in np.asarray(values, dtype=np.float64).reshape(-1)]
        if len(flat) not in (6, 7, 8):
            raise ValueError(f"weights must have 6, 7 or 8 elements, got {len(flat)}")
        named = dict(zip(SIGNAL_FIELDS, flat[:6], strict=True))
        return cls(**named, lexical=flat[6] if len(flat) >= 7 else None,
                   context=flat[7] if len(flat) == 8 else None)

    def values(self) -> tuple[float, ...]:
        """The weights in signal order (7 with the lexical weight last, 8 with the
        context weight after it)."""
        out: tuple[float, ...] = self.as_tuple()
        if self.lexical is not None:
            out = (*out, self.lexical)
        if self.context is not None:
            out = (*out, self.context)
        return out

    def __len__(self) -> int:
        return len(self.values())

    def __getitem__(self, index: Any) -> Any:
        return self.values()[index]

    def __iter__(self) -> Any:  # a sequence of floats
        return iter(self.values())

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self.values(), dtype=np.float64 if dtype is None else dtype)


class RetrievalPlan(BaseModel):
    """The pure two-pass ranking (SPEC 5), before any side effects (a frozen model).

    Attributes:
        weights: the weights used (:class:`PlanWeights`: named and indexable).
        pass1: candidates ranked without activation.
        pass2: candidates ranked with activation (``pass1`` when none spread).
        activation_map: id -> activation from the pass-1 seeds.
        seed_ids: ids of the pass-1 top_k.
        candidate_count: number of candidates scored.
        candidates: the candidates in candidate order (ties keep this order; not
            serialised).
        now: the scoring time (not serialised).
        query: the float64 query features that were scored (None for an empty plan;
            not serialised).
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    weights: PlanWeights
    pass1: list[RankedMemory]
    pass2: list[RankedMemory]
    activation_map: dict[str, float] = Field(default_factory=dict)
    seed_ids: list[str] = Field(default_factory=list)
    candidate_count: int = 0
    candidates: list[Memory] = Field(default_factory=list, exclude=True, repr=False)
    now: datetime | None = Field(default=None, exclude=True)
    query: Any = Field(default=None, exclude=True, repr=False)  # QueryFeatures | None

    @field_validator("weights", mode="before")
    @classmethod
    def _weights(cls, v: Any) -> PlanWeights:
        return PlanWeights.from_values(v)


# --------------------------------------------------------------------------- helpers


def _signals_from_values(values: Sequence[float]) -> RetrievalSignals:
    return RetrievalSignals(**dict(zip(SIGNAL_FIELDS, (float(v) for v in values), strict=True)))


def breakdown_from_values(weights: Sequence[float], raw: Sequence[float]) -> RetrievalBreakdown:
    """Build a :class:`RetrievalBreakdown` from the weights and raw signals.

    Args:
        weights: the six weights, or seven with the lexical signal s7 last, or eight
            with the context signal s8 after s7.
        raw: the signal values (as many as ``weights``).

    Returns:
        The breakdown; ``total_score`` is the left-to-right sum of ``w_i * s_i``.
    """
    w = tuple(float(v) for v in weights)
    s = tuple(float(v) for v in raw)
    if len(w) != len(s) or len(w) not in (6, 7, 8):
        raise ValueError(
            f"need 6, 7 or 8 weights and as many signals, got {len(w)} and {len(s)}"
        )
    weighted = _signals_from_values(tuple(a * b for a, b in zip(w[:6], s[:6], strict=True)))
    total = weighted.total()
    if len(w) == 8:
        return RetrievalBreakdown(
            weights=_signals_from_values(w[:6]),
            raw_signals=_signals_from_values(s[:6]),
            weighted_signals=weighted,
            total_score=total + w[6] * s[6] + w[7] * s[7],
            lexical_weight=w[6],
            lexical_signal=s[6],
            context_weight=w[7],
            context_signal=s[7],
        )
    if len(w) == 7:
        return RetrievalBreakdown(
            weights=_signals_from_values(w[:6]),
            raw_signals=_signals_from_values(s[:6]),
            weighted_signals=weighted,
            total_score=total + w[6] * s[6],
            lexical_weight=w[6],
            lexical_signal=s[6],
        )
    return RetrievalBreakdown(
        weights=_signals_from_values(w),
        raw_signals=_signals_from_values(s),
        weighted_signals=weighted,
        total_score=total,
    )


def scoring_params(
    retrieval_config: RetrievalConfig,
    decay_config: DecayConfig,
    base_weights: Sequence[float] | None = None,
) -> ScoringParams:
    """Float64 :class:`ScoringParams` for these configs (optional routed base weights).

    Args:
        retrieval_config: Source of the base weights and the gate parameters.
        decay_config: Source of the recency parameters.
        base_weights: Optional (6,) override of ``retrieval_config.base_weights``.

    Returns:
        The parameters with float64 numpy leaves.
    """
    return params_from_config(retrieval_config, decay_config, base_weights=base_weights)


_weights_jit = jax.jit(kernel_adaptive_weights)
_packed_weights_jit = jax.jit(
    lambda packed, valence, arousal: kernel_adaptive_weights(
        unpack_params(packed), valence, arousal
    )
)
_signals_jit = jax.jit(kernel_signals)


def _check_weights(
    precomputed_weights: Any, *, lexical: bool = False, context: bool = False
) -> np.ndarray:
    arr = np.asarray(precomputed_weights, dtype=np.float64).reshape(-1)
    if lexical and arr.shape == ((8,) if context else (7,)):
        pass
    elif arr.shape != (6,):
        raise ValueError(f"precomputed_weights must have exactly 6 elements, got {arr.size}")
    if not np.isfinite(arr).all():
        raise ValueError("precomputed_weights contains NaN or infinite values")
    return arr


def _check_query_embedding(query_embedding: Sequence[float] | None) -> None:
    if query_embedding is not None and len(query_embedding):
        arr = np.asarray(query_embedding, dtype=np.float64)
        if arr.ndim != 1:
            raise ValueError("query_embedding must be a 1-D sequence of numbers")


# --------------------------------------------------------------------------- public API


def adaptive_weights(
    mood: MoodField,
    base: Sequence[float],
    config: AdaptiveWeightsConfig | None = None,
) -> NDArray[np.float64]:
    """Return retrieval weights modulated by the current mood (Bower 1981).

    Negative mood raises mood congruence and affect proximity, high arousal raises
    momentum alignment, a calm mood raises semantic similarity; all as smooth gates.

    Args:
        mood: current mood (valence and arousal are used).
        base: six base weights.
        config: gate parameters (default: ``AdaptiveWeightsConfig()``).

    Returns:
        (6,) float64 array: clipped at 0 and normalised (uniform when all cancel).
    """
    base_w = weight_vector("base", base, nonneg=False)
    cfg = config if config is not None else AdaptiveWeightsConfig()
    params = params_from_config(
        RetrievalConfig(adaptive_weights_config=cfg), DecayConfig(), base_weights=base_w
    )
    with float64():
        out = _weights_jit(
            params, jnp.asarray(mood.valence, jnp.float64), jnp.asarray(mood.arousal, jnp.float64)
        )
        return np.asarray(out, dtype=np.float64)


def retrieval_breakdown(
    query_embedding: list[float] | None,
    query_affect: CoreAffect,
    current_mood: MoodField,
    current_momentum: AffectiveMomentum,
    memory: Memory,
    activation_map: dict[str, float],
    now: datetime,
    decay_config: DecayConfig,
    retrieval_config: RetrievalConfig,
    precomputed_weights: NDArray[np.float64] | None = None,
) -> RetrievalBreakdown:
    """Return the full score decomposition for one memory.

    The explainable counterpart of :func:`retrieval_score`, on the same kernel path.

    Args:
        query_embedding: (D,) or None/empty (semantic signal 0).
        query_affect: affect for the proximity signal s3.
        current_mood: mood for s2 and the weight gates.
        current_momentum: momentum for s4.
        memory: the memory to score.
        activation_map: id -> spreading activation (empty in pass 1).
        now: aware datetime for recency.
        decay_config: recency parameters.
        retrieval_config: weights and gates.
        precomputed_weights: optional (6,) weights used as they are.

    Returns:
        :class:`RetrievalBreakdown` (weights, raw, weighted, total).

    Raises:
        ValueError: unequal embedding lengths, or malformed ``precomputed_weights``.
    """
    _check_query_embedding(query_embedding)
    dim = embedding_dim(query_embedding, [memory])
    cols = columns_from_memories([memory], now, dim, activation_map)
    row = jax.tree_util.tree_map(lambda x: x[0], cols)
    query = query_features(query_embedding, query_affect, current_mood, current_momentum, dim)
    params = scoring_params(retrieval_config, decay_config)
    with float64():
        if precomputed_weights is not None:
            weights = _check_weights(precomputed_weights)
        else:
            weights = np.asarray(
                _weights_jit(params, jnp.float64(current_mood.valence),
                             jnp.float64(current_mood.arousal)),
                dtype=np.float64,
            )
        raw = np.asarray(_signals_jit(params, query, row), dtype=np.float64)
    return breakdown_from_values(weights.tolist(), raw.tolist())


def retrieval_score(
    query_embedding: list[float] | None,
    query_affect: CoreAffect,
    current_mood: MoodField,
    current_momentum: AffectiveMomentum,
    memory: Memory,
    activation_map: dict[str, float],
    now: datetime,
    decay_config: DecayConfig,
    retrieval_config: RetrievalConfig,
    precomputed_weights: NDArray[np.float64] | None = None,
) -> float:
    """Composite retrieval score for one memory: ``retrieval_breakdown(...).total_score``.

    Args: as :func:`retrieval_breakdown`.

    Returns:
        The weighted sum of the six signals.
    """
    return retrieval_breakdown(
        query_embedding=query_embedding,
        query_affect=query_affect,
        current_mood=current_mood,
        current_momentum=current_momentum,
        memory=memory,
        activation_map=activation_map,
        now=now,
        decay_config=decay_config,
        retrieval_config=retrieval_config,
        precomputed_weights=precomputed_weights,
    ).total_score


@dataclass(frozen=True)
class PlanArrays:
    """Array form of a two-pass plan over ``n`` candidates (numpy, float64 or float32).

    Attributes:
        weights: (6,); raw1/raw2: (n, 6); totals1/totals2: (n,); order1/order2: (n,)
        candidate indices by rank; activation: (n,); reached: (n,) bool;
        seeds: indices of the pass-1 top_k.
    """

    weights: np.ndarray
    raw1: np.ndarray
    totals1: np.ndarray
    order1: np.ndarray
    raw2: np.ndarray
    totals2: np.ndarray
    order2: np.ndarray
    activation: np.ndarray
    reached: np.ndarray
    seeds: np.ndarray


def plan_arrays(
    params: ParamsLike,
    query: QueryFeatures,
    columns: MemoryColumns,
    n: int,
    top_k: int,
    adjacency: tuple[np.ndarray, np.ndarray] | None,
    hops: int,
    *,
    weights: Any = None,
    weight_params: ParamsLike | None = None,
    signal_mask: Any = None,
    lexical: LexicalInputs | None = None,
    features: np.ndarray | None = None,
    context: ContextInputs | None = None,
) -> PlanArrays:
    """Run the two-pass plan on (padded) columns: ONE compiled program, one transfer.

    The shared array-level path of :func:`build_retrieval_plan` and the engine's
    ``retrieve`` (:func:`~emotional_memory.kernel.plan.retrieval_plan_packed`).

    Args:
        params: scoring parameters, or their
            :func:`~emotional_memory.kernel.params.pack_params` vector (what the engine
            caches per config: one operand for the program).
        query: query features.
        columns: bank padded to a bucket; rows ``>= n`` are padding.
        n: number of real candidates.
        top_k: number of seeds.
        adjacency: ``(targets, strengths)`` for the first ``n`` rows (or already
            padded to the columns' rows), or None to skip spreading activation
            (resonance disabled).
        hops: propagation hops.
        weights: optional (6,) final weights; else the mood-adaptive weights of
            ``weight_params`` (then ``signal_mask``) are computed in the program.
        weight_params: parameters of the adaptive weights (default: ``params``),
            as parameters or packed like ``params``.
        signal_mask: optional (6,) ablation mask of the adaptive weights.
        lexical: optional term statistics padded to the columns' rows: adds the
            lexical signal s7 (7 weights, 7 signal columns).
        features: the columns' features matrix when already packed
            (:attr:`~emotional_memory._bank.CandidateBank.features`, the very values
            :func:`~emotional_memory.kernel.plan.pack_columns` gives); None: packed here.
        context: optional neighbours padded to the columns' rows (with ``lexical``):
            adds the context signal s8 (8 weights, 8 signal columns).

    Returns:
        :class:`PlanArrays` sliced to the ``n`` real rows.
    """
    size = columns.size
    dtype = np.asarray(query.affect).dtype
    if adjacency is None:
        targets = np.full((size, 1), -1, dtype=np.int32)
        strengths = np.zeros((size, 1), dtype=dtype)
    elif adjacency[0].shape[0] == size and adjacency[1].dtype == dtype:
        targets, strengths = adjacency  # already padded (a CandidateBank's)
    else:
        width = adjacency[0].shape[1]
        targets = np.full((size, width), -1, dtype=np.int32)
        targets[:n] = adjacency[0][:n]
        strengths = np.zeros((size, width), dtype=dtype)
        strengths[:n] = adjacency[1][:n]
    # numpy operands go to the compiled program directly (no eager transfers), the
    # small columns packed (fewer host arrays to convert per call; same bits)
    query_embedding, query_state = pack_query(query)
    if features is None:
        embedding, features, valid = pack_columns(columns)
    else:
        embedding, valid = columns.embedding, columns.valid
    if isinstance(params, ScoringParams):
        params = pack_params(params)
    if isinstance(weight_params, ScoringParams):
        weight_params = pack_params(weight_params)
    out_weights, out_table = retrieval_plan_packed(
        params, query_embedding, query_state, embedding, features, valid, targets,
        strengths, top_k=top_k_bucket(top_k), hops=hops, spread=adjacency is not None,
        weights=weights, weight_params=weight_params, signal_mask=signal_mask,
        lexical=lexical, context=context, seed_count=np.int32(min(top_k, size)),
    )
    plan_weights = np.asarray(out_weights)
    # the signal columns: 7 with s7 even when 6 precomputed weights are given
    s = out_table.shape[1] - len(TABLE)
    table = np.asarray(out_table)[:n]  # padding rows sort after every real row
    col = {name: s + i for i, name in enumerate(TABLE)}
    raw1 = table[:, :s]
    totals1 = table[:, col["totals1"]]
    order1 = table[:, col["order1"]].astype(np.int32)
    reached = table[:, col["reached"]] != 0
    if reached.any():
        raw2 = raw1.copy()
        raw2[:, RESONANCE] = table[:, col["resonance2"]]
        totals2 = table[:, col["totals2"]]
        order2 = table[:, col["order2"]].astype(np.int32)
    else:  # nothing reached: pass 2 is pass 1, bit for bit
        raw2, totals2, order2 = raw1, totals1, order1
    return PlanArrays(
        weights=plan_weights, raw1=raw1, totals1=totals1, order1=order1,
        raw2=raw2, totals2=totals2, order2=order2,
        activation=table[:, col["activation"]], reached=reached, seeds=order1[:top_k],
    )


def build_retrieval_plan(
    query_embedding: list[float] | None,
    query_affect: CoreAffect,
    current_mood: MoodField,
    current_momentum: AffectiveMomentum,
    candidates: Sequence[Memory],
    top_k: Any,
    now: Any,
    decay_config: Any,
    retrieval_config: Any,
    propagation_hops: int = 2,
    spreading_activation_fn: Callable[..., dict[str, float]] | None = None,
    precomputed_weights: NDArray[np.float64] | None = None,
    enable_resonance: bool = True,
) -> RetrievalPlan:
    """Pure two-pass ranking of ``candidates`` (SPEC 5); no store writes.

    Pass 1 scores everything without activation and sorts (stable, descending); the
    pass-1 top_k seed spreading activation; pass 2 rescores with it when any spread.

    The signature is the original's. The earlier order of this library,
    ``(..., candidates, now, decay_config, retrieval_config, top_k, ...)``, is
    recognised (a datetime in the ``top_k`` position) and still works.

    Args:
        query_embedding, query_affect, current_mood, current_momentum: query features.
        candidates: memories to rank, in candidate order (ties keep it).
        top_k: number of seeds (>= 1).
        now: aware datetime.
        decay_config, retrieval_config: configs.
        propagation_hops: hops of spreading activation (1..5).
        spreading_activation_fn: ``(seed_ids: set[str], candidates: list[Memory],
            hops: int) -> dict[str, float]``; ``None`` or
            :func:`~emotional_memory.resonance.spreading_activation` use the compiled
            plan, any other function is called for the activation of pass 2.
        precomputed_weights: optional (6,) final weights (e.g. after ablation).
        enable_resonance: False skips spreading activation (pass 2 = pass 1).

    Returns:
        :class:`RetrievalPlan`.
    """
    if isinstance(top_k, datetime):  # this library's earlier positional order
        top_k, now, decay_config, retrieval_config = retrieval_config, top_k, now, decay_config
    try:
        top_k = positive_int("top_k", top_k)
    except TypeError as exc:  # the plan reports every bad top_k as a ValueError
        raise ValueError(str(exc)) from exc
    if not 1 <= int(propagation_hops) <= 5:
        raise ValueError(f"propagation_hops must lie in [1, 5], got {propagation_hops}")
    if spreading_activation_fn is not None and not callable(spreading_activation_fn):
        raise TypeError("spreading_activation_fn must be callable or None")
    _check_query_embedding(query_embedding)
    cands = list(candidates)
    params = scoring_params(retrieval_config, decay_config)
    if precomputed_weights is not None:
        weights: np.ndarray = _check_weights(precomputed_weights)
    else:
        weights = adaptive_weights(
            current_mood, retrieval_config.base_weights, retrieval_config.adaptive_weights_config
        )
    if not cands:
        return RetrievalPlan(weights=weights, pass1=[], pass2=[], candidate_count=0, now=now)
    from emotional_memory.resonance import spreading_activation

    custom = spreading_activation_fn not in (None, spreading_activation)
    arrays, query = rank_candidates(
        query_embedding, query_affect, current_mood, current_momentum, cands, now, params,
        weights, top_k, int(propagation_hops), enable_resonance and not custom,
    )
    plan = plan_from_arrays(cands, arrays, now, query)
    if not (custom and enable_resonance):
        return plan
    assert spreading_activation_fn is not None
    activation = dict(
        spreading_activation_fn(set(plan.seed_ids), list(cands), int(propagation_hops))
    )
    if not activation:
        return plan
    w = arrays.weights.tolist()
    rescored = []
    for i, memory in enumerate(cands):
        raw = arrays.raw1[i].tolist()
        raw[5] = float(activation.get(memory.id, 0.0))
        bd = breakdown_from_values(w, raw)
        rescored.append(
            RankedMemory.model_construct(memory=memory, score=bd.total_score, breakdown=bd)
        )
    pass2 = sorted(rescored, key=lambda r: -r.score if r.score == r.score else math.inf)
    return plan.model_copy(update={"pass2": pass2, "activation_map": activation})


def rank_candidates(
    query_embedding: Sequence[float] | None,
    query_affect: CoreAffect,
    current_mood: MoodField,
    current_momentum: AffectiveMomentum,
    candidates: list[Memory],
    now: datetime,
    params: ParamsLike,
    weights: np.ndarray | None,
    top_k: int,
    propagation_hops: int,
    enable_resonance: bool,
    *,
    weight_params: ParamsLike | None = None,
    signal_mask: Any = None,
    lexical: LexicalInputs | None = None,
) -> tuple[PlanArrays, QueryFeatures]:
    """The array half of :func:`build_retrieval_plan` (inputs already validated).

    Args:
        query_embedding, query_affect, current_mood, current_momentum: query features.
        candidates: the memories to rank (non-empty), in candidate order.
        now: aware datetime.
        params: scoring parameters (e.g. :func:`scoring_params`) or their packed
            vector (:data:`ParamsLike`; the engine caches the packed form).
        weights: (6,) float64 final weights, or None to compute the mood-adaptive
            weights of ``weight_params`` and ``signal_mask`` inside the plan program.
        top_k: number of seeds (>= 1).
        propagation_hops: hops of spreading activation (1..5).
        enable_resonance: False skips spreading activation.
        weight_params: parameters of the adaptive weights (default: ``params``).
        signal_mask: optional (6,) ablation mask of the adaptive weights (7 entries
            with ``lexical``).
        lexical: optional unpadded term statistics of the candidates (rows in
            candidate order): adds the lexical signal s7.

    Returns:
        ``(arrays, query)``: the plan's :class:`PlanArrays` over the candidates and the
        float64 query features scored.
    """
    return rank_bank(
        query_embedding, query_affect, current_mood, current_momentum,
        bank_from_memories(candidates, now, query_embedding), params, weights, top_k,
        propagation_hops, enable_resonance, weight_params=weight_params,
        signal_mask=signal_mask, lexical=lexical,
    )


def rank_bank(
    query_embedding: Sequence[float] | np.ndarray | None,
    query_affect: CoreAffect,
    current_mood: MoodField,
    current_momentum: AffectiveMomentum,
    bank: CandidateBank,
    params: ParamsLike,
    weights: np.ndarray | None,
    top_k: int,
    propagation_hops: int,
    enable_resonance: bool,
    *,
    weight_params: ParamsLike | None = None,
    signal_mask: Any = None,
    lexical: LexicalInputs | None = None,
    neighbours: np.ndarray | None = None,
) -> tuple[PlanArrays, QueryFeatures]:
    """:func:`rank_candidates` of candidates already in columns (a store's bank).

    Args:
        query_embedding, query_affect, current_mood, current_momentum: query features.
        bank: the candidates (non-empty) as columns and adjacency.
        params, weights, top_k, propagation_hops, enable_resonance, weight_params,
            signal_mask, lexical: as :func:`rank_candidates`.
        neighbours: optional (n, 2) int32 neighbour rows of the n candidates (-1:
            none), with ``lexical``: adds the context signal s8.

    Returns:
        ``(arrays, query)``: the plan arrays over the bank's candidates and the float64
        query features scored.
    """
    query = query_features(
        query_embedding, query_affect, current_mood, current_momentum, bank.dim
    )
    padded = None if lexical is None else pad_lexical(lexical, bank.columns.size)
    context = None
    if neighbours is not None:
        rows = np.full((bank.columns.size, 2), -1, np.int32)
        rows[: len(neighbours)] = neighbours
        context = ContextInputs(neighbours=rows)
    with float64():
        arrays = plan_arrays(
            params, query, bank.columns, len(bank), top_k,
            bank.adjacency if enable_resonance else None, propagation_hops,
            weights=weights, weight_params=weight_params, signal_mask=signal_mask,
            lexical=padded, features=bank.features, context=context,
        )
    return arrays, query


def pad_lexical(lexical: LexicalInputs, rows: int, min_terms: int = 4) -> LexicalInputs:
    """Pad term statistics to ``rows`` rows and a power-of-two number of terms.

    Few shapes mean few compiled programs: the term axis grows in buckets like the
    row axis. Padding terms and rows hold zeros (they never contribute).

    Args:
        lexical: statistics with numpy leaves, (n, T) term frequencies.
        rows: target rows (the padded bank's size).
        min_terms: smallest term bucket.

    Returns:
        Padded statistics (float64 numpy leaves).
    """
    tf = np.asarray(lexical.tf, np.float64)
    n, t = tf.shape
    width = bucket_size(t, min_terms)
    out = np.zeros((rows, width), np.float64)
    out[:n, :t] = tf
    length = np.zeros((rows,), np.float64)
    length[:n] = np.asarray(lexical.length, np.float64)[:n]
    df = np.zeros((width,), np.float64)
    df[:t] = np.asarray(lexical.df, np.float64)
    return LexicalInputs(
        tf=out, length=length, df=df, n_docs=np.asarray(lexical.n_docs, np.float64),
        avg_length=np.asarray(lexical.avg_length, np.float64),
    )


def plan_from_arrays(
    candidates: list[Memory], arrays: PlanArrays, now: datetime, query: QueryFeatures
) -> RetrievalPlan:
    """The :class:`RetrievalPlan` of :func:`rank_candidates`' arrays, every breakdown built.

    Args:
        candidates: the ranked memories, in candidate order.
        arrays: their plan arrays.
        now: the scoring time.
        query: the query features scored.

    Returns:
        The plan, as :func:`build_retrieval_plan` returns it.
    """
    w = arrays.weights.tolist()

    def ranked(order: np.ndarray, raw: np.ndarray) -> list[RankedMemory]:
        out = []
        for i in order.tolist():
            bd = breakdown_from_values(w, raw[i].tolist())
            out.append(
                RankedMemory.model_construct(
                    memory=candidates[i], score=bd.total_score, breakdown=bd
                )
            )
        return out

    pass1 = ranked(arrays.order1, arrays.raw1)
    pass2 = ranked(arrays.order2, arrays.raw2) if arrays.reached.any() else pass1
    activation_map = {
        candidates[i].id: float(arrays.activation[i]) for i in np.flatnonzero(arrays.reached)
    }
    return RetrievalPlan(
        weights=np.asarray(w, dtype=np.float64),
        pass1=pass1,
        pass2=pass2,
        activation_map=activation_map,
        seed_ids=[candidates[i].id for i in arrays.seeds.tolist()],
        candidate_count=len(candidates),
        candidates=candidates,
        now=now,
        query=query,
    )


def explain_top(
    candidate_count: int, arrays: PlanArrays, memories: Sequence[Memory]
) -> list[RetrievalExplanation]:
    """Explanations of the pass-2 winners, building breakdowns for them only.

    The same explanations as a full :func:`plan_from_arrays` plan gives for its first
    ``len(memories)`` pass-2 entries.

    Args:
        candidate_count: the number of ranked candidates.
        arrays: their plan arrays.
        memories: the first ``len(memories)`` pass-2 winners after retrieval side
            effects, in rank order.

    Returns:
        One :class:`RetrievalExplanation` per winner.
    """
    n = candidate_count
    w = arrays.weights.tolist()
    pass1_rank = np.empty(n, dtype=np.int64)
    pass1_rank[arrays.order1] = np.arange(1, n + 1)
    seeds = set(arrays.seeds.tolist())
    top = arrays.order2[: len(memories)].tolist()
    out = []
    for rank, (i, memory) in enumerate(zip(top, memories, strict=True), start=1):
        bd = breakdown_from_values(w, arrays.raw2[i].tolist())
        out.append(
            RetrievalExplanation(
                memory=memory,
                score=bd.total_score,
                breakdown=bd,
                activation_level=float(arrays.activation[i]) if arrays.reached[i] else 0.0,
                pass1_rank=int(pass1_rank[i]),
                pass2_rank=rank,
                selected_as_seed=i in seeds,
                candidate_count=n,
            )
        )
    return out


def mood_weights(params: ParamsLike, mood: MoodField) -> NDArray[np.float64]:
    """Mood-adaptive weights from ready-made parameters (the kernel, float64).

    :func:`adaptive_weights` without building parameters from configs each call.

    Args:
        params: parameters (or their packed vector) whose ``base_weights`` and
            ``gates`` are used.
        mood: the current mood.

    Returns:
        (6,) float64 weights.
    """
    weights = _weights_jit if isinstance(params, ScoringParams) else _packed_weights_jit
    with float64():
        out = weights(params, np.float64(mood.valence), np.float64(mood.arousal))
        return np.asarray(out, dtype=np.float64)


def affective_prediction_error(expected: CoreAffect, observed: CoreAffect) -> float:
    """Euclidean distance in PAD space between expected and observed affect.

    Args:
        expected: The predicted affect.
        observed: The affect actually observed.

    Returns:
        The distance, in [0, sqrt(6)].
    """
    return expected.distance(observed)


def compute_ape(tag: EmotionalTag, observed: CoreAffect) -> float:
    """Affective prediction error of a tag (Pearce & Hall 1980; SPEC 6).

    Uses ``tag.expected_affect`` when set, else the encoding ``core_affect``.

    Args:
        tag: The retrieved memory's tag.
        observed: The engine's current core affect.

    Returns:
        The PAD distance between the tag's reference affect and ``observed``.
    """
    reference = tag.expected_affect if tag.expected_affect is not None else tag.core_affect
    return affective_prediction_error(reference, observed)


def reconsolidation_fields(
    tag: EmotionalTag, current_affect: CoreAffect, ape: float, learning_rate: float
) -> dict[str, Any]:
    """The fields :func:`reconsolidate` changes, with their new values.

    Args:
        tag, current_affect, ape, learning_rate: as :func:`reconsolidate`.

    Returns:
        ``{"core_affect": ..., "reconsolidation_count": ...}``.

    Raises:
        ValueError: If ``ape`` or ``learning_rate`` is NaN or infinite.
    """
    alpha = min(finite("ape", ape) * finite("learning_rate", learning_rate), 0.5)
    return {
        "core_affect": tag.core_affect.lerp(current_affect, alpha),
        "reconsolidation_count": tag.reconsolidation_count + 1,
    }


def reconsolidate(
    tag: EmotionalTag, current_affect: CoreAffect, ape: float, learning_rate: float
) -> EmotionalTag:
    """Pull the tag's core affect towards ``current_affect`` (Nader et al. 2000).

    ``alpha = min(ape * learning_rate, 0.5)``; ``reconsolidation_count`` += 1; nothing
    else changes (SPEC 6).

    Args:
        tag: The tag to update.
        current_affect: The affect to move towards.
        ape: Affective prediction error (from :func:`compute_ape`); must be finite.
        learning_rate: Reconsolidation learning rate; must be finite.

    Returns:
        The updated tag (a copy).

    Raises:
        ValueError: If ``ape`` or ``learning_rate`` is NaN or infinite.
    """
    return with_fields(tag, reconsolidation_fields(tag, current_affect, ape, learning_rate))


_LR_MIN = 0.05
_LR_MAX = 0.80
_LR_ADAPT_RATE = 0.2


def prediction_fields(
    tag: EmotionalTag, observed: CoreAffect, ape: float, core_affect: CoreAffect | None = None
) -> dict[str, Any]:
    """The fields :func:`update_prediction` changes, with their new values.

    Args:
        tag, observed, ape: as :func:`update_prediction`.
        core_affect: the tag's core affect as it is now, when it has just changed
            (reconsolidated) and ``tag`` still holds the old one; None: the tag's.

    Returns:
        ``{"expected_affect": ..., "prediction_learning_rate": ...}``.
    """
    ape = finite("ape", ape)
    target = max(_LR_MIN, min(_LR_MAX, ape))
    lr = tag.prediction_learning_rate + _LR_ADAPT_RATE * (target - tag.prediction_learning_rate)
    lr = max(_LR_MIN, min(_LR_MAX, lr))
    base = tag.expected_affect
    if base is None:
        base = core_affect if core_affect is not None else tag.core_affect
    return {"expected_affect": base.lerp(observed, lr), "prediction_learning_rate": lr}


def update_prediction(tag: EmotionalTag, observed: CoreAffect, ape: float) -> EmotionalTag:
    """Pearce-Hall update of the tag's expected affect and associability.

    ``target = clamp(ape, 0.05, 0.8)``; ``lr += 0.2 * (target - lr)`` (clamped);
    ``expected = (expected or core_affect).lerp(observed, lr)``.

    Args:
        tag: the tag to update.
        observed: affect observed at retrieval.
        ape: prediction error (from :func:`compute_ape`).

    Returns:
        The tag with new ``expected_affect`` and ``prediction_learning_rate``.
    """
    return with_fields(tag, prediction_fields(tag, observed, ape))


_mask_jit = jax.jit(apply_signal_mask)


def masked_weights(weights: Sequence[float], mask: Sequence[float]) -> NDArray[np.float64]:
    """Apply the engine's ablation mask to final weights (kernel path, float64).

    Args:
        weights: (6,) normalised weights.
        mask: (6,) 1.0 for enabled signals, 0.0 for disabled ones.

    Returns:
        (6,) float64 weights: unchanged when all enabled, else renormalised (uniform
        over enabled signals when all enabled weights are 0).
    """
    with float64():
        out = _mask_jit(
            jnp.asarray(np.asarray(weights, np.float64)), jnp.asarray(np.asarray(mask, np.float64))
        )
        return np.asarray(out, dtype=np.float64)
