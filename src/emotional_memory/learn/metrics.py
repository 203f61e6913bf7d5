"""Ranking metrics of scored recall batches."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from emotional_memory._validation import positive_int
from emotional_memory.learn.recall_batch import RecallBatch, RecallInfo


def same_shape(**arrays: np.ndarray) -> None:
    """Raise ``ValueError`` naming the arrays when their shapes differ."""
    shapes = {name: np.shape(a) for name, a in arrays.items()}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise ValueError(f"the arrays must have one shape, got {listed}")


def no_nan(field: str, values: np.ndarray) -> None:
    """Raise ``ValueError`` naming ``field`` when ``values`` holds a NaN."""
    if np.isnan(values).any():
        raise ValueError(f"{field} holds NaN")


def as_mask(field: str, values: Any) -> np.ndarray:
    """``values`` as a bool array: booleans, or numbers that are all 0 or 1.

    Raises:
        ValueError: naming ``field`` when a number is neither 0 nor 1 (a NaN or a 0.5
            would be read as true, a graded label as relevant).
    """
    x = np.asarray(values)
    if x.dtype == bool:
        return x
    if x.dtype.kind not in "iuf" or not np.isin(x, (0, 1)).all():
        raise ValueError(f"{field} must hold booleans (or 0/1), got values outside "
                         f"{{0, 1}} (dtype {x.dtype})")
    return x.astype(bool)


def ranking_metrics(
    totals: np.ndarray, labels: np.ndarray, valid: np.ndarray, k: int
) -> dict[str, np.ndarray]:
    """Per-query top-1, hit@k and reciprocal rank under a stable descending sort.

    Args:
        totals, labels, valid: (Q, C) arrays.
        k: cut-off for hit@k.

    Returns:
        Dict of (Q,) float arrays ``top1``, ``hit_at_k``, ``rr`` (the reciprocal rank
        over all C candidates; :func:`emotional_memory.replay.summarize`'s ``mrr``
        counts only the top k the engine returned, 0 beyond it).

    Raises:
        TypeError: ``k`` is not an int (or is a bool).
        ValueError: ``k`` < 1, arrays of different or non-(Q, C) shapes, labels or
            valid entries other than booleans or 0/1 (a NaN label was relevant), or a
            NaN total of a real candidate (it would be ranked last silently).
    """
    k = positive_int("k", k)
    totals, labels, valid = (np.asarray(totals, np.float64), as_mask("labels", labels),
                             as_mask("valid", valid))
    same_shape(totals=totals, labels=labels, valid=valid)
    if totals.ndim != 2:
        raise ValueError(f"totals, labels and valid must be (Q, C) arrays, got shape "
                         f"{totals.shape}")
    no_nan("totals", totals[valid])
    keys = np.where(valid, -totals, np.inf)
    order = np.argsort(keys, axis=-1, kind="stable")
    ranked = np.take_along_axis(labels & valid, order, axis=-1)
    first = np.where(ranked.any(axis=-1), ranked.argmax(axis=-1), -1)
    return {
        "top1": ranked[:, 0].astype(float),
        "hit_at_k": ranked[:, :k].any(axis=-1).astype(float),
        "rr": np.where(first >= 0, 1.0 / np.maximum(first + 1.0, 1.0), 0.0),
    }


def summarize_metrics(
    per_query: dict[str, np.ndarray], mask: np.ndarray, batch: RecallBatch, info: RecallInfo
) -> dict[str, Any]:
    """Mean metrics over the masked queries, with top-1 per challenge type.

    Args:
        per_query: Output of :func:`ranking_metrics`: (Q,) arrays ``top1``,
            ``hit_at_k`` and ``rr``.
        mask: (Q,) bool, queries to include.
        batch: The recall batch (for ``challenge`` indices).
        info: Its metadata (for ``challenge_names``).

    Returns:
        Dict with ``top1``, ``hit_at_k``, ``mrr`` (over all candidates; NaN when the
            mask is empty),
        ``n_queries`` and ``by_challenge`` (name -> top-1, present types only).
    """
    m = np.asarray(mask, bool)
    mean = lambda x: float(np.mean(x[m])) if m.any() else math.nan  # noqa: E731
    challenge = np.asarray(batch.challenge)
    by = {
        name: float(np.mean(per_query["top1"][m & (challenge == i)]))
        for i, name in enumerate(info.challenge_names)
        if (m & (challenge == i)).any()
    }
    return {
        "top1": mean(per_query["top1"]),
        "hit_at_k": mean(per_query["hit_at_k"]),
        "mrr": mean(per_query["rr"]),
        "n_queries": int(m.sum()),
        "by_challenge": by,
    }
