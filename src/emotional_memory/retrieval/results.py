"""Retrieval results: signals, breakdowns, explanations and plans."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from emotional_memory.affect import MAX_PAD_DISTANCE as MAX_PAD_DISTANCE
from emotional_memory.models import Memory
from emotional_memory.retrieval._common import (
    SIGNAL_FIELDS,
)


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
            ``s1 + s2 + ... + s6`` in docs/behaviour.md §4 signal order.
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
    relevance: float | None = Field(default=None, exclude_if=lambda v: v is None)
    """Calibrated probability that the memory is relevant (``retrieval.
    relevance_calibration``); None without a calibration."""


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
    """The pure two-pass ranking (docs/behaviour.md §5), before any side effects (a frozen model).

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
