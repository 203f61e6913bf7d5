"""Config objects -> kernel :class:`ScoringParams`, and parameters -> plain dicts.

The duck-typed half of :mod:`emotional_memory.scoring_config` (which re-exports
both functions): it imports only the kernel, so ``decay`` and ``retrieval`` use it
while ``scoring_config`` builds their config classes, with no import circle.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from emotional_memory.kernel.params import (
    CONTEXT_FIELDS,
    DECAY_FIELDS,
    DEFAULT_CONTEXT,
    DEFAULT_LEXICAL,
    GATE_FIELDS,
    LEXICAL_FIELDS,
    ContextParams,
    DecayParams,
    GateParams,
    LexicalParams,
    ScoringParams,
)

__all__ = ["params_from_config", "params_to_config_dicts"]


def params_from_config(
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
    return ScoringParams(
        base_weights=np.asarray(weights, dtype=dtype),
        gates=GateParams(**{f: np.asarray(getattr(gate_cfg, f), dtype) for f in GATE_FIELDS}),
        decay=DecayParams(
            **{f: np.asarray(getattr(decay_config, f), dtype) for f in DECAY_FIELDS}
        ),
        distance_scale=np.asarray(math.sqrt(6.0), dtype=dtype),
        signal_scale=np.asarray(scale if scale is not None else [1.0] * 6, dtype=dtype),
        signal_shift=np.asarray(shift if shift is not None else [0.0] * 6, dtype=dtype),
        lexical=LexicalParams(*(
            np.asarray(getattr(retrieval_config, f, d), dtype)
            for f, d in zip(LEXICAL_FIELDS, DEFAULT_LEXICAL, strict=True)
        )),
        context=ContextParams(*(
            np.asarray(getattr(retrieval_config, f, d), dtype)
            for f, d in zip(CONTEXT_FIELDS, DEFAULT_CONTEXT, strict=True)
        )),
    )


def params_to_config_dicts(params: ScoringParams) -> tuple[dict[str, Any], dict[str, float]]:
    """Return plain ``(retrieval_fields, decay_fields)`` dicts of Python floats.

    ``retrieval_fields`` holds ``base_weights``, ``adaptive_weights_config`` (a dict),
    ``signal_scale``/``signal_shift`` (each None when it is the identity), and the
    :data:`LEXICAL_FIELDS` and :data:`CONTEXT_FIELDS`.

    Args:
        params: the parameters to read.

    Returns:
        ``(retrieval_fields, decay_fields)``; ``decay_fields`` maps each of
        :data:`DECAY_FIELDS` to its value.
    """

    def as_list(x: Any) -> list[float]:
        return [float(v) for v in np.asarray(x, dtype=np.float64).tolist()]

    def as_dict(group: Any, names: tuple[str, ...]) -> dict[str, float]:
        return dict(zip(names, as_list(group.vector()), strict=True))

    retrieval: dict[str, Any] = {
        "base_weights": as_list(params.base_weights),
        "adaptive_weights_config": as_dict(params.gates, GATE_FIELDS),
    }
    scale, shift = as_list(params.signal_scale), as_list(params.signal_shift)
    # each None when it is the identity: "none" overrides a template's calibration
    retrieval["signal_scale"] = None if scale == [1.0] * 6 else scale
    retrieval["signal_shift"] = None if shift == [0.0] * 6 else shift
    retrieval.update(as_dict(params.lexical, LEXICAL_FIELDS))
    retrieval.update(as_dict(params.context, CONTEXT_FIELDS))
    decay = as_dict(params.decay, DECAY_FIELDS)
    return retrieval, decay
