"""Retrieval configuration: signal weights, gates, the query classifier and adapter."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from emotional_memory._validation import (
    finite,
    in_range,
    non_negative,
    not_bool,
    positive,
    positive_int,
    weight_vector,
)
from emotional_memory.affect import MAX_PAD_DISTANCE as MAX_PAD_DISTANCE

MAX_CANDIDATE_MULTIPLIER = 2**31
"""Largest ``candidate_multiplier`` (``top_k`` times it is a SQL store's 64-bit LIMIT)."""


class AdaptiveWeightsConfig(BaseModel):
    """Parameters for smooth mood-modulated weight adjustment (docs/behaviour.md §4).

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
    """Per-query-type routing of the base weights (docs/behaviour.md §4, "Query routing").

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


class RelevanceCalibration(BaseModel):
    """A fitted map from a memory's pass-2 score to the probability that it is relevant.

    ``p = sigmoid(slope * score + intercept)`` (Platt scaling, fitted on held-out
    folds by ``python -m training fit``). ``slope >= 0``, so the probability never
    falls as the score rises and the results a threshold keeps are a prefix of the
    ranking.

    Attributes:
        slope: the score's coefficient (>= 0).
        intercept: the offset.
        default_min_relevance: the threshold the fit suggests (documented with the
            held-out abstention measurements); it is not applied unless a caller
            passes ``min_relevance``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    slope: float
    intercept: float
    default_min_relevance: float = 0.5

    @field_validator("slope", mode="before")
    @classmethod
    def _slope(cls, v: Any) -> float:
        return non_negative("relevance_calibration.slope", v)

    @field_validator("intercept", mode="before")
    @classmethod
    def _intercept(cls, v: Any) -> float:
        return finite("relevance_calibration.intercept", v)

    @field_validator("default_min_relevance", mode="before")
    @classmethod
    def _default(cls, v: Any) -> float:
        return in_range("relevance_calibration.default_min_relevance", v, 0.0, 1.0)

    def probability(self, scores: Any) -> np.ndarray:
        """The relevance probability of each score.

        Args:
            scores: pass-2 total scores (any shape).

        Returns:
            float64 probabilities in [0, 1], same shape (a non-finite score gives 0;
            a finite score whose ``slope * score + intercept`` overflows float64 gets
            the limit, 1 or 0, so the probability still never falls as the score rises).
        """
        s = np.asarray(scores, np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            z = self.slope * s + self.intercept
            p = np.where(z >= 0, 1.0 / (1.0 + np.exp(-np.abs(z))),
                         np.exp(-np.abs(z)) / (1.0 + np.exp(-np.abs(z))))
        return np.where(np.isfinite(s), p, 0.0)


def check_min_relevance(value: Any) -> float | None:
    """Validate a ``min_relevance`` argument.

    Args:
        value: None, or a number in [0, 1].

    Returns:
        The value as a float (None stays None).

    Raises:
        ValueError: anything else (a bool, a string, NaN, outside [0, 1]), naming
            ``min_relevance``.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise ValueError(f"min_relevance must be a number in [0, 1], got {value!r}")
    out = float(value)
    if not 0.0 <= out <= 1.0:  # NaN fails too
        raise ValueError(f"min_relevance must be a number in [0, 1], got {value!r}")
    return out


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
            model's output); ``None`` means identity (the default score).
        lexical_weight: base weight of the opt-in lexical signal s7 (Okapi BM25 of the
            query against the memory's words, relative to the best candidate; see
            :mod:`emotional_memory.kernel.lexical`). 0 (default) keeps the six-signal
            score bit for bit; > 0 joins the normalisation as a seventh weight
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
        relevance_calibration: an opt-in fitted map from a result's score to the
            probability that it is relevant (:class:`RelevanceCalibration`); it never
            changes the ranking; ``retrieve(..., min_relevance=p)`` drops results
            below ``p`` and explanations carry each result's ``relevance``. None
            (default): no probabilities, and ``min_relevance`` is refused.
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
    relevance_calibration: RelevanceCalibration | None = Field(
        default=None, exclude_if=lambda v: v is None
    )

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

    @field_validator("candidate_multiplier", mode="before")
    @classmethod
    def _multiplier_not_bool(cls, v: Any) -> Any:
        return not_bool("candidate_multiplier", v)

    @field_validator("candidate_multiplier", mode="after")
    @classmethod
    def _multiplier(cls, v: int) -> int:
        if v < 1:
            raise ValueError(f"candidate_multiplier must be >= 1, got {v}")
        if v > MAX_CANDIDATE_MULTIPLIER:
            raise ValueError(
                "candidate_multiplier must be <= MAX_CANDIDATE_MULTIPLIER = 2**31, got a "
                "larger int"
            )
        return v
