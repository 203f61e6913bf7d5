"""The model's numbers behind :mod:`emotional_memory.visualization`'s figures.

Pure computation (no matplotlib): the six signal values of a retrieval result and the
grid of mood-adaptive weights drawn by the heatmap.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from emotional_memory.retrieval import SIGNAL_FIELDS

__all__ = ["DEFAULT_MOODS", "SIGNAL_FIELDS", "appraisal_axes", "configs", "engine_config",
           "families", "history_rows", "items", "six_values", "weights_grid"]

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
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Iterable):
        raise TypeError("scores must be a sequence of numbers or a RetrievalSignals / "
                        f"RetrievalBreakdown / RetrievalExplanation, got {type(values).__name__}")
    out = []
    for i, v in enumerate(values):
        try:
            out.append(float(v))
        except (TypeError, ValueError):
            raise TypeError(f"scores[{i}] must be a number, got {type(v).__name__}") from None
    return out


def items(name: str, value: Any) -> list[Any]:
    """``value``'s items as a list, a ``TypeError`` naming ``name`` when it is text or
    not iterable."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a sequence, got {type(value).__name__}")
    return list(value)


def families(arousals: Any, counts: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The decay figure's ``arousal_values`` and ``retrieval_counts`` as tuples (read
    once: a generator is not exhausted after the first family), each non-empty."""
    out = []
    for field, values in (("arousal_values", arousals), ("retrieval_counts", counts)):
        if isinstance(values, str | bytes) or not isinstance(values, Iterable):
            raise TypeError(f"{field} must be a sequence of numbers, got {type(values).__name__}")
        values = tuple(values)
        if not values:
            raise ValueError(f"{field} must hold at least one value")
        out.append(values)
    return out[0], out[1]


def weights_grid(
    base_weights: Sequence[float], resolution: int, config: Any = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(valences, arousals, weights[arousal, valence, 6]) from the kernel's weights,
    every cell of the grid in one vectorised call."""
    import jax

    from emotional_memory._precision import float64
    from emotional_memory.kernel import adaptive_weights
    from emotional_memory.scoring_config import params_from_config

    retrieval, decay = configs(config)
    params = params_from_config(retrieval, decay, base_weights=np.asarray(base_weights, float))
    valences = np.linspace(-1.0, 1.0, resolution)
    arousals = np.linspace(0.0, 1.0, resolution)
    v, a = np.meshgrid(valences, arousals)  # rows: arousal, columns: valence
    with float64():
        cells = jax.vmap(adaptive_weights, in_axes=(None, 0, 0))(params, v.ravel(), a.ravel())
        grid = np.asarray(cells, dtype=np.float64).reshape(resolution, resolution, 6)
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


def history_rows(history: Any) -> list[tuple[Any, float, float, float]]:
    """Every :func:`history_row` of ``history``, the times all numbers, all aware or all
    naive datetimes (a ``TypeError`` naming the history times otherwise)."""
    rows = [history_row(i, h) for i, h in enumerate(items("history", history))]
    kinds = {None if not isinstance(t, datetime) else t.utcoffset() is None for t, *_ in rows}
    if len(kinds) > 1:
        raise TypeError("history times must be all datetimes or all numbers (seconds)"
                        if None in kinds else "history times must be all timezone-aware "
                        "or all naive datetimes")
    return rows


_APPRAISAL_FIELDS = (
    "novelty",
    "goal_relevance",
    "coping_potential",
    "norm_congruence",
    "self_relevance",
)


def appraisal_axes(appraisal: Any, vector_labels: Sequence[str]) -> tuple[list[str], list[float]]:
    """The radar's ``(labels, values)`` of an appraisal, each value mapped from its
    dimension's range to [0, 1] (a dict's values as given); ``vector_labels`` name the
    five ``AppraisalVector`` axes.

    Raises:
        TypeError: An appraisal of another kind. ValueError: A sequence without five
            values, an empty dict or a NaN / inf value (named ``appraisal[key]``).
    """
    from emotional_memory.appraisal import APPRAISAL_DIMENSIONS
    from emotional_memory.appraisal_schema import GenericAppraisalVector

    ranges: list[tuple[float, float] | None]
    if isinstance(appraisal, GenericAppraisalVector):
        dims = appraisal.schema.dimensions
        labels = [d.name.replace("_", " ").title() for d in dims]
        raw = [float(appraisal.dimensions[d.name]) for d in dims]
        ranges = [tuple(d.range) for d in dims]  # type: ignore[misc]
    elif isinstance(appraisal, dict):
        if not appraisal:
            raise ValueError("appraisal must hold at least one dimension, got an empty dict")
        labels = [str(k).replace("_", " ").title() for k in appraisal]
        raw = finite_values("appraisal", appraisal.items())
        ranges = [None] * len(raw)
    elif all(hasattr(appraisal, f) for f in _APPRAISAL_FIELDS) or (
        isinstance(appraisal, Sequence | np.ndarray) and not isinstance(appraisal, str)
    ):
        if all(hasattr(appraisal, f) for f in _APPRAISAL_FIELDS):
            pairs = ((f, getattr(appraisal, f)) for f in _APPRAISAL_FIELDS)
            raw = finite_values("appraisal", pairs)
        else:
            raw = finite_values("appraisal", enumerate(appraisal))
            if len(raw) != 5:
                raise ValueError(f"expected 5 appraisal values, got {len(raw)}")
        labels = list(vector_labels)
        ranges = [APPRAISAL_DIMENSIONS[f] for f in _APPRAISAL_FIELDS]
    else:
        raise TypeError(
            "appraisal must be AppraisalVector, GenericAppraisalVector, or dict, got "
            f"{type(appraisal).__name__}"
        )
    values = [
        r if rng is None else (r - rng[0]) / (rng[1] - rng[0])
        for r, rng in zip(raw, ranges, strict=True)
    ]
    return labels, values


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
