"""ScoringParams: every tunable number of the retrieval score, as one pytree.

Leaves hold the *constrained* values (weights >= 0, strengths in [0, 1], ...), so the
default parameters reproduce SPEC numbers exactly. Training code reparametrises them
(softplus / sigmoid) outside the kernel. ``from_config`` reads any objects exposing the
config attributes (duck typing keeps pydantic out of the kernel) into float64 numpy
leaves, so ``from_config`` -> ``to_config_dicts`` is an exact round trip.
"""

from __future__ import annotations

import math
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



class ScoringParams(eqx.Module):
    """All tunable numbers of the score.

    Attributes:
        base_weights: (6,) base weights of the six signals.
        gates: (10,) gate parameters in :data:`GATE_FIELDS` order.
        decay: (7,) recency parameters in :data:`DECAY_FIELDS` order.
        distance_scale: () normaliser of PAD distances (sqrt 6).
        signal_scale: (6,) per-signal affine calibration scale (identity: 1).
        signal_shift: (6,) per-signal affine calibration shift (identity: 0).
    """

    base_weights: Float[Array, 6]
    gates: Float[Array, 10]
    decay: Float[Array, 7]
    distance_scale: Float[Array, ""]
    signal_scale: Float[Array, 6]
    signal_shift: Float[Array, 6]

    @classmethod
    def from_config(
        cls,
        retrieval_config: Any,
        decay_config: Any,
        *,
        base_weights: Any = None,
        dtype: Any = np.float64,
    ) -> ScoringParams:
        """Build parameters from a ``RetrievalConfig`` and a ``DecayConfig``.

        Args:
            retrieval_config: object with ``base_weights`` and ``adaptive_weights_config``
                (and optionally ``signal_scale``/``signal_shift``).
            decay_config: object with the :data:`DECAY_FIELDS` attributes.
            base_weights: optional (6,) override (e.g. a query-type route).
            dtype: numpy dtype of the leaves (float64 keeps config numbers exact).

        Returns:
            The parameters, as numpy leaves of ``dtype``.
        """
        gate_cfg = retrieval_config.adaptive_weights_config
        weights = retrieval_config.base_weights if base_weights is None else base_weights
        scale = getattr(retrieval_config, "signal_scale", None)
        shift = getattr(retrieval_config, "signal_shift", None)
        return cls(
            base_weights=np.asarray(weights, dtype=dtype),
            gates=np.asarray([getattr(gate_cfg, f) for f in GATE_FIELDS], dtype=dtype),
            decay=np.asarray([getattr(decay_config, f) for f in DECAY_FIELDS], dtype=dtype),
            distance_scale=np.asarray(math.sqrt(6.0), dtype=dtype),
            signal_scale=np.asarray(scale if scale is not None else [1.0] * 6, dtype=dtype),
            signal_shift=np.asarray(shift if shift is not None else [0.0] * 6, dtype=dtype),
        )

    def to_config_dicts(self) -> tuple[dict[str, Any], dict[str, float]]:
        """Return plain ``(retrieval_fields, decay_fields)`` dicts of Python floats.

        ``retrieval_fields`` holds ``base_weights``, ``adaptive_weights_config`` (a dict)
        and, only when they differ from the identity, ``signal_scale``/``signal_shift``.

        Returns:
            ``(retrieval_fields, decay_fields)``; ``decay_fields`` maps each of
            :data:`DECAY_FIELDS` to its value.
        """
        as_list = lambda x: [float(v) for v in np.asarray(x, dtype=np.float64).tolist()]  # noqa: E731
        gates = as_list(self.gates)
        retrieval: dict[str, Any] = {
            "base_weights": as_list(self.base_weights),
            "adaptive_weights_config": dict(zip(GATE_FIELDS, gates, strict=True)),
        }
        scale, shift = as_list(self.signal_scale), as_list(self.signal_shift)
        if scale != [1.0] * 6 or shift != [0.0] * 6:
            retrieval["signal_scale"] = scale
            retrieval["signal_shift"] = shift
        decay = dict(zip(DECAY_FIELDS, as_list(self.decay), strict=True))
        return retrieval, decay

    def to_config(self, retrieval_config: Any = None, decay_config: Any = None) -> tuple[Any, Any]:
        """Return ``(RetrievalConfig, DecayConfig)`` holding these parameters.

        Fields that are not scoring parameters (thresholds, routing, ...) are copied
        from the optional templates. The import is local: the config classes live in
        the public layer, and this boundary method is the kernel's only contact with it.

        Args:
            retrieval_config: template RetrievalConfig (default: defaults).
            decay_config: template DecayConfig (default: defaults).

        Returns:
            Validated config objects.
        """
        from emotional_memory.decay import DecayConfig
        from emotional_memory.retrieval import AdaptiveWeightsConfig, RetrievalConfig

        retrieval_fields, decay_fields = self.to_config_dicts()
        retrieval_fields["adaptive_weights_config"] = AdaptiveWeightsConfig(
            **retrieval_fields["adaptive_weights_config"]
        )
        base_r = retrieval_config if retrieval_config is not None else RetrievalConfig()
        base_d = decay_config if decay_config is not None else DecayConfig()
        r = RetrievalConfig.model_validate({**base_r.model_dump(), **retrieval_fields})
        d = DecayConfig.model_validate({**base_d.model_dump(), **decay_fields})
        return r, d

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

    def gate(self, name: str) -> Any:
        """The gate parameter ``name`` (one of :data:`GATE_FIELDS`).

        Args:
            name: A gate field name.

        Returns:
            The scalar () leaf element for ``name``.

        Raises:
            ValueError: If ``name`` is not in :data:`GATE_FIELDS`.
        """
        return self.gates[GATE_FIELDS.index(name)]

    def decay_param(self, name: str) -> Any:
        """The decay parameter ``name`` (one of :data:`DECAY_FIELDS`).

        Args:
            name: A decay field name.

        Returns:
            The scalar () leaf element for ``name``.

        Raises:
            ValueError: If ``name`` is not in :data:`DECAY_FIELDS`.
        """
        return self.decay[DECAY_FIELDS.index(name)]


_FIELDS = ("base_weights", "gates", "decay", "distance_scale", "signal_scale", "signal_shift")
