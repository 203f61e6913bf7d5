"""ScoringParams: every tunable number of the retrieval score, as one pytree.

Leaves hold the *constrained* values (weights >= 0, strengths in [0, 1], ...), so the
default parameters reproduce SPEC numbers exactly. Training code reparametrises them
(softplus / sigmoid) outside the kernel. The conversion from and to the pydantic
configs lives outside the kernel, in :mod:`emotional_memory.scoring_config`.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Float

from emotional_memory.kernel._types import Array

GATE_FIELDS: tuple[str, ...] = (
    "negative_mood_strength",
    "negative_mood_center",
    "negative_mood_sharpness",
    "high_arousal_strength",
    "high_arousal_center",
    "high_arousal_sharpness",
    "calm_strength",
    "calm_valence_width",
    "calm_arousal_center",
    "calm_sharpness",
)
"""The ten parameters of the smooth mood gates (AdaptiveWeightsConfig field names)."""

DECAY_FIELDS: tuple[str, ...] = (
    "base_decay",
    "arousal_modulation",
    "retrieval_boost",
    "floor_arousal_threshold",
    "floor_value",
    "min_seconds",
    "power",
)
"""The seven parameters of the recency signal (DecayConfig field names)."""

LEXICAL_FIELDS: tuple[str, ...] = ("lexical_weight", "lexical_k1", "lexical_b")
"""The three parameters of the opt-in lexical signal s7 (RetrievalConfig field names):
its base weight, and Okapi BM25's term-frequency saturation ``k1`` and length
normalisation ``b``."""

DEFAULT_LEXICAL: tuple[float, float, float] = (0.0, 1.2, 0.75)
"""Default :data:`LEXICAL_FIELDS` values: weight 0 (off), k1 = 1.2, b = 0.75."""


def _default_lexical() -> Any:
    return np.asarray(DEFAULT_LEXICAL, dtype=np.float64)


class ScoringParams(eqx.Module):
    """All tunable numbers of the score.

    Attributes:
        base_weights: (6,) base weights of the six signals.
        gates: (10,) gate parameters in :data:`GATE_FIELDS` order.
        decay: (7,) recency parameters in :data:`DECAY_FIELDS` order.
        distance_scale: () normaliser of PAD distances (sqrt 6).
        signal_scale: (6,) per-signal affine calibration scale (identity: 1).
        signal_shift: (6,) per-signal affine calibration shift (identity: 0).
        lexical: (3,) the lexical signal's parameters in :data:`LEXICAL_FIELDS` order
            (weight, BM25 k1, BM25 b); used only when lexical inputs are scored.
    """

    base_weights: Float[Array, 6]
    gates: Float[Array, 10]
    decay: Float[Array, 7]
    distance_scale: Float[Array, ""]
    signal_scale: Float[Array, 6]
    signal_shift: Float[Array, 6]
    lexical: Float[Array, 3] = eqx.field(default_factory=_default_lexical)

    def astype(self, dtype: Any) -> ScoringParams:
        """Cast every leaf to ``dtype`` (as JAX arrays).

        Args:
            dtype: Target dtype (e.g. ``jnp.float32``).

        Returns:
            New parameters with JAX-array leaves of ``dtype`` (shapes unchanged).
        """
        return ScoringParams(
            *(jnp.asarray(getattr(self, f), dtype=dtype) for f in _FIELDS)
        )


_FIELDS = (
    "base_weights", "gates", "decay", "distance_scale", "signal_scale", "signal_shift",
    "lexical",
)
