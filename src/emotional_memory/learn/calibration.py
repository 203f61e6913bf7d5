"""Calibrated relevance: Platt scaling of the pass-2 score, fitted on held-out folds.

A fit's out-of-fold scores (each query scored by a model fitted without its scenario)
of every query's first ``top_n`` candidates, labelled relevant or not, give the map
``p = sigmoid(slope * score + intercept)`` (logistic regression on one feature,
``slope >= 0``). The threshold the fit suggests is the largest probability that keeps
``keep`` of the out-of-fold hit@k.
"""

from __future__ import annotations

import math

import numpy as np

from emotional_memory._validation import non_negative, positive_int, strict_finite
from emotional_memory.learn.metrics import as_mask, no_nan, same_shape
from emotional_memory.retrieval.config import RelevanceCalibration


def _rows(rows: np.ndarray | None, n_queries: int) -> np.ndarray:
    """``rows`` checked as a (Q,) bool mask (None: every query)."""
    if rows is None:
        return np.ones(n_queries, bool)
    mask = np.asarray(rows)
    if mask.dtype != bool:  # integer indices would read as a mask
        raise TypeError(f"rows must be a ({n_queries},) bool mask, got dtype {mask.dtype}")
    if mask.shape != (n_queries,):
        raise ValueError(f"rows must have shape ({n_queries},), got {mask.shape}")
    return mask


def _keep_share(keep: float) -> float:
    """``keep`` checked to lie in (0, 1]."""
    keep = strict_finite("keep", keep)
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"keep must be in (0, 1], got {keep}")
    return keep


def top_candidates(
    totals: np.ndarray, labels: np.ndarray, valid: np.ndarray, top_n: int,
    rows: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The scores and labels of each query's ``top_n`` best valid candidates.

    Args:
        totals: (Q, C) pass-2 totals.
        labels: (Q, C) relevant candidates.
        valid: (Q, C) real candidates.
        top_n: candidates per query (>= 1).
        rows: (Q,) bool mask of the queries to use (default: all).

    Returns:
        ``(scores, relevant)``: flat float64 and bool arrays.

    Raises:
        TypeError: ``top_n`` is not an int (or is a bool), ``rows`` not a bool mask.
        ValueError: ``top_n`` < 1, arrays of different shapes, ``rows`` not (Q,),
            ``labels`` or ``valid`` not booleans (or 0/1), or a NaN total of a real
            candidate.
    """
    top_n = positive_int("top_n", top_n)
    labels, valid = as_mask("labels", labels), as_mask("valid", valid)
    same_shape(totals=totals, labels=labels, valid=valid)
    totals = np.where(valid, np.asarray(totals, np.float64), -np.inf)
    use = _rows(rows, totals.shape[0])
    no_nan("totals", totals[use])
    order = np.argsort(-totals, axis=1, kind="stable")[:, :top_n]
    scores = np.take_along_axis(totals, order, axis=1)[use]
    relevant = np.take_along_axis(labels, order, axis=1)[use]
    keep = np.isfinite(scores)
    return scores[keep], relevant[keep]


def fit_platt(scores: np.ndarray, relevant: np.ndarray, ridge: float = 1e-6,
              iterations: int = 100) -> tuple[float, float]:
    """Logistic regression of ``relevant`` on ``scores`` (Newton's method).

    The slope is kept >= 0 (a negative fitted slope gives slope 0 and the base rate);
    scores all equal (up to rounding), or labels all alike, carry no information on
    the slope: slope 0 and the base rate.

    Args:
        scores: (N,) scores.
        relevant: (N,) labels.
        ridge: L2 on both coefficients (keeps separable data finite).
        iterations: Newton steps at most.

    Returns:
        ``(slope, intercept)``.

    Raises:
        TypeError: ``iterations`` is not an int.
        ValueError: no scores, a non-finite score, ``relevant`` not booleans (or
            0/1), ``scores`` and ``relevant`` of different shapes, ``ridge`` not
            finite >= 0 or ``iterations`` < 1.
    """
    x = np.asarray(scores, np.float64)
    y = as_mask("relevant", relevant).astype(np.float64)
    if x.size == 0:
        raise ValueError("fit_platt needs at least one score")
    same_shape(scores=x, relevant=y)
    if not np.isfinite(x).all():
        raise ValueError("scores must be finite (a NaN or infinite score)")
    ridge = non_negative("ridge", strict_finite("ridge", ridge))
    iterations = positive_int("iterations", iterations)
    # standardised (after scaling by the largest |score|, so squares cannot overflow),
    # so Newton is well conditioned
    size = float(np.max(np.abs(x)))
    size = size if size > 0 else 1.0
    xs = x / size
    center, scale = float(xs.mean()), float(xs.std())
    base_rate = float(np.clip(y.mean(), 1e-6, 1 - 1e-6))
    one_label = bool(y.min() == y.max())
    if one_label or scale <= 1e-12 * max(1.0, abs(center)):
        # one label, or equal scores (up to rounding): nothing to rank by, no slope
        return 0.0, math.log(base_rate / (1 - base_rate))
    z = (xs - center) / scale
    w = np.zeros(2)
    design = np.stack([z, np.ones_like(z)], axis=1)
    for _ in range(iterations):
        p = np.exp(-np.logaddexp(0.0, -(design @ w)))  # the sigmoid, without overflow
        grad = design.T @ (p - y) + ridge * w
        hess = (design * (p * (1 - p))[:, None]).T @ design + ridge * np.eye(2)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    slope, intercept = w[0] / scale / size, w[1] - w[0] * center / scale
    if slope < 0 or not math.isfinite(slope):
        return 0.0, math.log(base_rate / (1 - base_rate))
    return float(slope), float(intercept)


def expected_calibration_error(
    probs: np.ndarray, relevant: np.ndarray, bins: int = 10
) -> float:
    """Expected calibration error: per equal-width probability bin, the gap between
    the mean probability and the share relevant, weighted by the bin's size.

    Args:
        probs: (N,) probabilities in [0, 1].
        relevant: (N,) labels.
        bins: number of bins over [0, 1].

    Returns:
        The ECE (0 for no probabilities).

    Raises:
        TypeError: ``bins`` is not an int.
        ValueError: ``bins`` < 1, a probability outside [0, 1] (or NaN),
            ``relevant`` not booleans (or 0/1), or ``probs`` and ``relevant`` of
            different shapes.
    """
    bins = positive_int("bins", bins)
    p = np.asarray(probs, np.float64)
    y = as_mask("relevant", relevant).astype(np.float64)
    same_shape(probs=p, relevant=y)
    if not ((p >= 0.0) & (p <= 1.0)).all():
        raise ValueError("probs must lie in [0, 1] (a value outside, or NaN)")
    if p.size == 0:
        return 0.0
    which = np.minimum((p * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        inside = which == b
        if inside.any():
            total += inside.sum() * abs(p[inside].mean() - y[inside].mean())
    return float(total / p.size)


def suggested_threshold(
    calibration: RelevanceCalibration, totals: np.ndarray, labels: np.ndarray,
    valid: np.ndarray, top_k: int, rows: np.ndarray | None = None, keep: float = 0.95,
) -> float:
    """The largest probability threshold keeping ``keep`` of the queries' hit@k.

    A query keeps its hit when one of its relevant top-``k`` results reaches the
    threshold.

    Args:
        calibration: the fitted map.
        totals, labels, valid: (Q, C) scores, relevant and real candidates.
        top_k: results per query.
        rows: (Q,) bool mask of the queries to use (default: all).
        keep: share of the hits to keep, in (0, 1].

    Returns:
        The threshold (0 when no query hits).

    Raises:
        TypeError: ``top_k`` is not an int, ``keep`` not a number, ``rows`` not a
            bool mask.
        ValueError: ``top_k`` < 1, ``keep`` outside (0, 1], arrays of different
            shapes, ``rows`` not (Q,), ``labels`` or ``valid`` not booleans (or 0/1),
            or a NaN total of a real candidate.
    """
    top_k = positive_int("top_k", top_k)
    keep = _keep_share(keep)
    labels, valid = as_mask("labels", labels), as_mask("valid", valid)
    same_shape(totals=totals, labels=labels, valid=valid)
    t = np.where(valid, np.asarray(totals, np.float64), -np.inf)
    use = _rows(rows, t.shape[0])
    no_nan("totals", t[use])
    order = np.argsort(-t, axis=1, kind="stable")[:, :top_k]
    hit_scores = np.where(np.take_along_axis(labels, order, axis=1),
                          np.take_along_axis(t, order, axis=1), -np.inf)[use]
    best = hit_scores.max(axis=1) if hit_scores.size else np.zeros(0)
    best = best[np.isfinite(best)]  # the best relevant result of each hitting query
    if best.size == 0:
        return 0.0
    probs = np.sort(calibration.probability(best))[::-1]
    index = max(math.ceil(keep * probs.size) - 1, 0)
    return float(np.floor(probs[index] * 1000) / 1000)  # rounded down: keeps >= keep


def fit_relevance_calibration(
    totals: np.ndarray, labels: np.ndarray, valid: np.ndarray, top_k: int, *,
    rows: np.ndarray | None = None, top_n: int | None = None, keep: float = 0.95,
) -> RelevanceCalibration:
    """Platt scaling fitted on out-of-fold scores, with its suggested threshold.

    Args:
        totals: (Q, C) out-of-fold pass-2 totals.
        labels: (Q, C) relevant candidates.
        valid: (Q, C) real candidates.
        top_k: results per query (the threshold keeps ``keep`` of hit@k).
        rows: (Q,) bool mask of the queries to use (default: all).
        top_n: candidates per query in the fit (default ``2 * top_k``: the results
            and the ones just below).
        keep: share of hit@k the suggested threshold keeps.

    Returns:
        The :class:`RelevanceCalibration`.

    Raises:
        TypeError, ValueError: a bad ``top_k``, ``top_n``, ``keep`` or ``rows``
            (named), labels or valid entries other than booleans or 0/1, arrays of
            different shapes or a NaN total.
    """
    top_k = positive_int("top_k", top_k)
    keep = _keep_share(keep)
    n = 2 * top_k if top_n is None else positive_int("top_n", top_n)
    scores, relevant = top_candidates(totals, labels, valid, n, rows)
    slope, intercept = fit_platt(scores, relevant)
    calibration = RelevanceCalibration(slope=slope, intercept=intercept)
    threshold = suggested_threshold(calibration, totals, labels, valid, top_k, rows, keep)
    return calibration.model_copy(update={"default_min_relevance": threshold})
