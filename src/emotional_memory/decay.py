"""Forgetting: power-law decay of memory strength (docs/behaviour.md §3), the recency signal s5.

Strength falls as a power of elapsed time (Wixted & Ebbesen 1991), more slowly for
arousing events (McGaugh 2004) and for often-rehearsed ones, and high-arousal
memories keep a floor. The arithmetic is the kernel's :func:`effective_strength`,
evaluated in float64 here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from pydantic import BaseModel, ConfigDict, field_validator

from emotional_memory._bank import tag_recency_columns
from emotional_memory._params import params_from_config
from emotional_memory._precision import float64
from emotional_memory._validation import aware, finite, in_range, instance, non_negative, positive
from emotional_memory.kernel.columns import bucket_size
from emotional_memory.kernel.params import GATE_FIELDS, ScoringParams
from emotional_memory.kernel.signals import effective_strength
from emotional_memory.models import EmotionalTag


class DecayConfig(BaseModel):
    """Parameters of the recency signal.

    Attributes:
        base_decay: power-law exponent at zero arousal and no retrievals (>= 0).
        arousal_modulation: how much arousal slows decay.
        retrieval_boost: slowing per past retrieval (>= 0).
        floor_arousal_threshold: arousal at or above which the floor applies.
        floor_value: the floor (in [0, 1]), never above consolidation.
        min_seconds: ages below this count as this (> 0).
        power: extra exponent multiplier.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_decay: float = 0.5
    arousal_modulation: float = 0.5
    retrieval_boost: float = 0.1
    floor_arousal_threshold: float = 0.7
    floor_value: float = 0.1
    min_seconds: float = 1.0
    power: float = 1.0

    @field_validator("base_decay", "retrieval_boost", "power", mode="before")
    @classmethod
    def _non_negative(cls, v: float, info: object) -> float:
        return non_negative(str(getattr(info, "field_name", "value")), v)

    @field_validator("arousal_modulation", "floor_arousal_threshold", mode="before")
    @classmethod
    def _finite(cls, v: float, info: object) -> float:
        return finite(str(getattr(info, "field_name", "value")), v)

    @field_validator("floor_value", mode="before")
    @classmethod
    def _floor(cls, v: float) -> float:
        return in_range("floor_value", v, 0.0, 1.0)

    @field_validator("min_seconds", mode="before")
    @classmethod
    def _min_seconds(cls, v: float) -> float:
        return positive("min_seconds", v)


# Retrieval leaves for :func:`_decay_params`: effective strength reads only the decay
# leaves, so these zeros are never used (and decay need not import retrieval).
_NO_RETRIEVAL = SimpleNamespace(
    base_weights=[0.0] * 6,
    adaptive_weights_config=SimpleNamespace(**dict.fromkeys(GATE_FIELDS, 0.0)),
)


def _decay_params(config: DecayConfig) -> ScoringParams:
    """Parameters whose decay leaves come from ``config`` (the other leaves are unused)."""
    return params_from_config(_NO_RETRIEVAL, config)


@jax.jit
def _strength_batch(
    params: ScoringParams, ages: jax.Array, arousal: jax.Array, consolidation: jax.Array,
    counts: jax.Array,
) -> Any:
    return jax.vmap(effective_strength, in_axes=(None, 0, 0, 0, 0))(
        params, ages, arousal, consolidation, counts
    )


def compute_effective_strength_batch(
    tags: Sequence[EmotionalTag], now: datetime, config: DecayConfig | None = None
) -> np.ndarray:
    """Effective strength of many tags at ``now``.

    Args:
        tags: the tags.
        now: aware datetime.
        config: decay parameters (default: ``DecayConfig()``).

    Returns:
        float64 array of shape ``(len(tags),)``, identical to the per-tag function.

    Raises:
        TypeError: ``config`` is not a ``DecayConfig`` (or None), an item of ``tags``
            not an ``EmotionalTag``, ``now`` not a datetime.
        ValueError: ``now`` is naive.
    """
    instance("config", config, DecayConfig, optional=True)
    cfg = config if config is not None else DecayConfig()
    now = aware("now", now)
    if len(tags) == 0:
        return np.zeros((0,), dtype=np.float64)
    for i, tag in enumerate(tags):
        instance(f"tags[{i}]", tag, EmotionalTag)
    ages, consolidation, counts = tag_recency_columns(tags, now)
    arousal = np.asarray([t.core_affect.arousal for t in tags], dtype=np.float64)
    return strength_from_columns(ages, arousal, consolidation, counts, cfg)


def strength_from_columns(
    ages: np.ndarray, arousal: np.ndarray, consolidation: np.ndarray, counts: np.ndarray,
    config: DecayConfig,
) -> np.ndarray:
    """Effective strength from column arrays (ages in seconds), in float64.

    Args:
        ages, arousal, consolidation, counts: (N,) arrays.
        config: decay parameters.

    Returns:
        (N,) float64 numpy array.
    """
    n = len(ages)
    size = bucket_size(n)  # pad: a growing store compiles O(log N) times, not per size

    def padded(x: np.ndarray) -> jax.Array:
        return jnp.asarray(np.pad(np.asarray(x, np.float64), (0, size - n)), jnp.float64)

    with float64():
        out = _strength_batch(
            _decay_params(config), padded(ages), padded(arousal), padded(consolidation),
            padded(counts),
        )
        return np.asarray(out, dtype=np.float64)[:n]


def compute_effective_strength(
    tag: EmotionalTag, now: datetime, config: DecayConfig | None = None
) -> float:
    """Effective strength of one tag at ``now`` (docs/behaviour.md §3).

    Args:
        tag: the memory's tag.
        now: aware datetime.
        config: decay parameters (default: ``DecayConfig()``).

    Returns:
        A float in [0, consolidation_strength].

    Raises:
        TypeError: ``tag`` is not an ``EmotionalTag``, ``config`` not a
            ``DecayConfig`` (or None), ``now`` not a datetime.
        ValueError: ``now`` is naive.
    """
    instance("tag", tag, EmotionalTag)
    return float(compute_effective_strength_batch([tag], now, config)[0])
