"""Output scale of the affect head on the memory register (``training affect``).

A regression head trained mostly on EmoBank predicts the memory events' valence and
arousal with the right order but too mildly: out of fold, its valence spreads a third
as wide as the labels (a clearly good event is rated near +0.2).  An affine map per
axis, ``slope * prediction + intercept``, fitted by least squares on the events'
out-of-fold predictions, undoes that shrinkage:

* valence keeps its neutral point (intercept 0: a text rated neutral stays neutral),
* arousal gets slope and intercept (its labels and EmoBank's have different centres).

An axis is calibrated only when the map lowers the mean absolute error on held-out
scenarios (the map is fitted on the other scenarios' predictions, scenario-grouped
folds); otherwise it keeps slope 1 and intercept 0.  The map is folded into the head's
output de-standardisation (``y_mean``, ``y_scale``), so a calibrated head is an ordinary
head file.  Pearson r on any data is unchanged; EmoBank's mild-register error grows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np
import numpy.typing as npt

from emotional_memory.appraisal_embedding import AffectHead

__all__ = ["RegisterCalibration", "calibrated_head", "fit_register_calibration",
           "scenario_fold_ids"]

_RANGES = ((-1.0, 1.0), (0.0, 1.0))  # valence, arousal
_AXES = ("valence", "arousal")


@dataclass(frozen=True)
class RegisterCalibration:
    """Per-axis affine map of the head's valence and arousal.

    Attributes:
        slope: ``(valence, arousal)`` multipliers (1 where the axis is left alone).
        intercept: ``(valence, arousal)`` offsets (valence's is always 0).
        report: per axis, the held-out MAE before and after, the fold slopes and
            whether the axis was calibrated (JSON-ready).
    """

    slope: tuple[float, float]
    intercept: tuple[float, float]
    report: dict[str, Any]


def scenario_fold_ids(groups: npt.ArrayLike, folds: int) -> tuple[npt.NDArray[np.int64], int]:
    """Assign each event's scenario to a fold (sorted scenario ids dealt round-robin).

    Args:
        groups: ``(M,)`` scenario ids.
        folds: wanted folds, clipped to [2, number of scenarios].

    Returns:
        ``((M,) fold index per event, number of folds)``.

    Raises:
        ValueError: When the events come from fewer than two scenarios.
    """
    ids = np.asarray(groups).astype(str)
    scenarios, which = np.unique(ids, return_inverse=True)  # sorted, as round-robin expects
    if len(scenarios) < 2:
        raise ValueError("grouped folds need events from at least two scenarios")
    n_folds = max(2, min(folds, len(scenarios)))
    return (which % n_folds).astype(np.int64), n_folds


def _affine(p: npt.NDArray[np.float64], y: npt.NDArray[np.float64],
            through_zero: bool) -> tuple[float, float]:
    """Least-squares ``(slope, intercept)`` of ``y`` on ``p``; ``(1, 0)`` when degenerate."""
    if through_zero:
        den = float(p @ p)
        return (float(p @ y) / den, 0.0) if den > 0 else (1.0, 0.0)
    if np.ptp(p) == 0:
        return 1.0, 0.0
    slope, intercept = np.linalg.lstsq(np.c_[p, np.ones_like(p)], y, rcond=None)[0]
    return float(slope), float(intercept)


def fit_register_calibration(
    oof: npt.ArrayLike, labels: npt.ArrayLike, groups: npt.ArrayLike, *, folds: int = 5
) -> RegisterCalibration:
    """Fit the per-axis map on out-of-fold predictions; keep it only where it pays.

    Args:
        oof: ``(M, 2)`` unclipped valence and arousal predicted for each event by a head
            that did not see its scenario.
        labels: ``(M, 2)`` the events' valence and arousal.
        groups: ``(M,)`` scenario ids (held-out folds never split a scenario).
        folds: number of scenario-grouped folds, clipped to [2, number of scenarios].

    Returns:
        The calibration (slopes, intercepts and a report).

    Raises:
        ValueError: When shapes disagree, values are not finite, or the events come
            from fewer than two scenarios.
    """
    p = np.asarray(oof, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    g = np.asarray(groups).astype(str)
    if p.ndim != 2 or p.shape[1] != 2 or y.shape != p.shape or g.shape != (len(p),):
        raise ValueError(
            f"oof and labels must be (M, 2) and groups (M,), got {p.shape}, {y.shape}, "
            f"{g.shape}"
        )
    if not (np.isfinite(p).all() and np.isfinite(y).all()):
        raise ValueError("oof and labels must be finite")
    fold, n_folds = scenario_fold_ids(g, folds)
    slopes: list[float] = []
    intercepts: list[float] = []
    report: dict[str, Any] = {}
    for k, (axis, (low, high)) in enumerate(zip(_AXES, _RANGES, strict=True)):
        through_zero = axis == "valence"
        held_out = np.empty(len(p))
        fold_slopes = []
        for f in range(n_folds):
            held = fold == f
            b, a = _affine(p[~held, k], y[~held, k], through_zero)
            held_out[held] = b * p[held, k] + a
            fold_slopes.append(round(b, 4))
        before = float(np.abs(np.clip(p[:, k], low, high) - y[:, k]).mean())
        after = float(np.abs(np.clip(held_out, low, high) - y[:, k]).mean())
        use = after < before
        b, a = _affine(p[:, k], y[:, k], through_zero) if use else (1.0, 0.0)
        slopes.append(b)
        intercepts.append(a)
        report[axis] = {"calibrated": use, "slope": round(b, 4), "intercept": round(a, 4),
                        "fold_slopes": fold_slopes, "held_out_mae_before": round(before, 4),
                        "held_out_mae_after": round(after, 4)}
    return RegisterCalibration((slopes[0], slopes[1]), (intercepts[0], intercepts[1]), report)


def calibrated_head(head: AffectHead, calibration: RegisterCalibration) -> AffectHead:
    """The head whose valence and arousal pass through the calibration's affine map.

    Args:
        head: a trained head.
        calibration: from :func:`fit_register_calibration`.

    Returns:
        A head with ``raw(x)[:, k] == slope[k] * head.raw(x)[:, k] + intercept[k]`` for
        valence and arousal (dominance unchanged).
    """
    slope = jnp.asarray([*calibration.slope, 1.0], dtype=head.y_scale.dtype)
    intercept = jnp.asarray([*calibration.intercept, 0.0], dtype=head.y_mean.dtype)
    return AffectHead(
        x_mean=head.x_mean, x_scale=head.x_scale, w1=head.w1, b1=head.b1, w2=head.w2,
        b2=head.b2, y_mean=slope * head.y_mean + intercept, y_scale=slope * head.y_scale,
        feature=head.feature, layers=head.layers, poolings=head.poolings,
    )
