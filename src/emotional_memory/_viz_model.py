"""The model's numbers behind :mod:`emotional_memory.visualization`'s figures.

Pure computation (no matplotlib): the six signal values of a retrieval result and the
grid of mood-adaptive weights drawn by the heatmap.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from emotional_memory.retrieval import SIGNAL_FIELDS

__all__ = ["DEFAULT_MOODS", "SIGNAL_FIELDS", "configs", "engine_config", "six_values",
           "weights_grid"]

DEFAULT_MOODS: dict[str, tuple[float, float]] = {
    "calm +": (0.6, 0.2),
    "excited +": (0.6, 0.9),
    "neutral": (0.0, 0.3),
    "sad -": (-0.6, 0.2),
    "anxious -": (-0.6, 0.9),
}
"""``label -> (valence, arousal)``: the moods :func:`plot_fitted_weights` compares."""


def six_values(values: Any) -> list[float]:
    """The six signal values of a RetrievalSignals, breakdown or explanation (its
    weighted signals), else the values of a sequence or array, as many as it holds."""
    breakdown = getattr(values, "breakdown", values)
    signals = getattr(breakdown, "weighted_signals", breakdown)
    if all(hasattr(signals, f) for f in SIGNAL_FIELDS):
        return [float(getattr(signals, f)) for f in SIGNAL_FIELDS]
    return [float(v) for v in values]


def weights_grid(
    base_weights: Sequence[float], resolution: int, config: Any = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(valences, arousals, weights[arousal, valence, 6]) from the kernel's weights."""
    from emotional_memory.mood import MoodField
    from emotional_memory.retrieval import mood_weights
    from emotional_memory.scoring_config import params_from_config

    retrieval, decay = configs(config)
    params = params_from_config(retrieval, decay, base_weights=np.asarray(base_weights, float))
    valences = np.linspace(-1.0, 1.0, resolution)
    arousals = np.linspace(0.0, 1.0, resolution)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    grid = np.empty((resolution, resolution, 6))
    for i, a in enumerate(arousals):
        for j, v in enumerate(valences):
            mood = MoodField(
                valence=float(v), arousal=float(a), dominance=0.5, inertia=0.5, timestamp=now
            )
            grid[i, j] = mood_weights(params, mood)
    return valences, arousals, grid


def configs(config: Any) -> tuple[Any, Any]:
    """``(RetrievalConfig, DecayConfig)`` of an engine config, or the defaults for None."""
    from emotional_memory.decay import DecayConfig
    from emotional_memory.retrieval import RetrievalConfig

    if config is None:
        return RetrievalConfig(), DecayConfig()
    return config.retrieval, config.decay


def engine_config(name: str, value: Any) -> Any:
    """``value`` when it is an ``EmotionalMemoryConfig``, else a ``TypeError`` naming
    ``name`` (and, for a ``FitResult``, its ``.config``)."""
    from emotional_memory.engine import EmotionalMemoryConfig

    if isinstance(value, EmotionalMemoryConfig):
        return value
    hint = " (for a FitResult pass its .config)" if hasattr(value, "config") else ""
    raise TypeError(f"{name} must be an EmotionalMemoryConfig, got {type(value).__name__}{hint}")


def finite_values(field: str, items: Any) -> list[float]:
    """``[(key, value), ...]`` as floats, a NaN / inf / non-number named ``field[key]``."""
    from emotional_memory._validation import finite

    return [finite(f"{field}[{key!r}]", value) for key, value in items]


def history_row(i: int, h: Any) -> tuple[Any, float, float, float]:
    """``(t, valence, arousal, dominance)`` of one mood-history entry (a MoodField or a
    4-tuple, ``t`` a datetime or seconds), each problem named ``history[i]``."""
    from emotional_memory._validation import finite

    if hasattr(h, "valence") and hasattr(h, "timestamp"):
        return h.timestamp, h.valence, h.arousal, h.dominance
    if isinstance(h, str | bytes) or not hasattr(h, "__len__"):
        raise TypeError(f"history[{i}] must be a MoodField or a (t, valence, arousal, "
                        f"dominance) tuple, got {type(h).__name__}")
    if len(h) != 4:
        raise ValueError(
            f"history[{i}] must be (t, valence, arousal, dominance), got {len(h)} values"
        )
    t = h[0] if isinstance(h[0], datetime) else finite(f"history[{i}]", h[0])
    v, a, d = (finite(f"history[{i}]", x) for x in h[1:])
    return t, v, a, d


def breakdown_of(explanation: Any) -> Any:
    """The ``RetrievalBreakdown`` of an explanation (or a breakdown itself), else a
    ``TypeError`` naming ``explanation``."""
    breakdown = getattr(explanation, "breakdown", explanation)
    parts = ("raw_signals", "weights", "weighted_signals", "total_score")
    if not all(hasattr(breakdown, p) for p in parts):
        raise TypeError("explanation must be a RetrievalExplanation or a RetrievalBreakdown, "
                        f"got {type(explanation).__name__}")
    return breakdown


def mood_pairs(moods: Any) -> dict[str, tuple[float, float]]:
    """``label -> (valence, arousal)`` with each pair checked, named ``moods[label]``."""
    from emotional_memory._validation import finite

    chosen = dict(moods) if moods is not None else dict(DEFAULT_MOODS)
    out = {}
    for label, pair in chosen.items():
        field = f"moods[{label!r}]"
        if isinstance(pair, str | bytes) or not hasattr(pair, "__len__"):
            raise TypeError(f"{field} must be a (valence, arousal) pair, "
                            f"got {type(pair).__name__}")
        if len(pair) != 2:
            raise ValueError(f"{field} must be a (valence, arousal) pair, got {len(pair)} values")
        out[label] = (finite(field, pair[0]), finite(field, pair[1]))
    return out


def flat_series(series: Any) -> dict[str, np.ndarray]:
    """Each learning-curve series as a 1-d float array (a series that is not one is a
    ``ValueError`` naming it)."""
    arrays = {}
    for name, values in series.items():
        try:
            ys = np.asarray(list(values), dtype=float)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"history {name!r} must be a sequence of numbers: {exc}") from None
        if ys.ndim != 1:
            raise ValueError(f"history {name!r} must be one value per step, got shape "
                             f"{ys.shape}")
        arrays[name] = ys
    return arrays
