"""Hyperparameters (``l2``, ``temperature``, the query adapter's rank and pull) chosen
by inner scenario-grouped cross-validation."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from emotional_memory._validation import positive_int
from emotional_memory.engine import EmotionalMemoryConfig
from emotional_memory.learn.losses import evaluate_batch
from emotional_memory.learn.metrics import ranking_metrics
from emotional_memory.learn.recall_batch import RecallBatch, RecallInfo
from emotional_memory.learn.training import (
    FitResult,
    available_queries,
    fit,
    fit_many_configs,
)
from emotional_memory.scoring_config import params_from_config

DEFAULT_GRID: dict[str, tuple[float, ...]] = {
    "l2": (0.001, 0.01, 0.1),
    "temperature": (0.05, 0.2),
}
"""Hyperparameter grid searched by :func:`fit_auto` (inner scenario-grouped CV)."""


def inner_folds(
    batch: RecallBatch, train_mask: np.ndarray | None, folds: int, seed: int
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Inner CV groups: the available queries' scenarios split into ``folds`` parts.

    Args:
        batch: the recall batch.
        train_mask: (Q,) queries available (None: all).
        folds: parts wanted (fewer when fewer scenarios are available).
        seed: shuffle seed.

    Returns:
        ``(available, scenario, parts)``: (Q,) available mask, (Q,) scenario index,
        and the sorted scenario indices of each part.

    Raises:
        ValueError: ``train_mask`` selects no query.
    """
    available = available_queries(batch, train_mask)
    if not available.any():  # was numpy's "number sections must be larger than 0"
        raise ValueError("train_mask selects no query to fit")
    scen = np.asarray(batch.scenario)
    pool = np.unique(scen[available])
    perm = np.random.default_rng(seed).permutation(pool)
    return available, scen, [np.sort(p) for p in np.array_split(perm, min(folds, len(pool)))]


def checked_folds(field: str, folds: int) -> int:
    """``folds`` checked to be an int >= 2 (``field`` names it)."""
    if positive_int(field, folds) < 2:
        raise ValueError(f"{field} must be >= 2, got {folds}")
    return folds


def _cv_parts(
    who: str, batch: RecallBatch, train_mask: np.ndarray | None, folds: int, seed: int
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """:func:`inner_folds` for a grid search: at least two parts, else a ``ValueError``
    (a fit on the other parts would see no query)."""
    available, scen, parts = inner_folds(batch, train_mask, folds, seed)
    if len(parts) < 2:
        raise ValueError(
            f"{who} chooses by inner cross-validation over scenarios: the training "
            f"queries must come from at least 2 scenarios, got 1 (fit with given values "
            f"instead)"
        )
    return available, scen, parts


def _grid(defaults: Mapping[str, Sequence[float]],
          grid: Mapping[str, Sequence[float]] | None) -> dict[str, Sequence[float]]:
    """``defaults`` updated by ``grid``, its keys and values checked."""
    given = dict(grid or {})
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ValueError(f"unknown grid key(s) {unknown}; a grid sets {sorted(defaults)}")
    for key, values in given.items():
        if (isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray)
                or np.ndim(values) != 1):
            raise TypeError(f"grid[{key!r}] must be a sequence of values, got {values!r}")
        if len(values) == 0:
            raise ValueError(f"grid[{key!r}] holds no value")
    return {**defaults, **given}


def _fixed_grid(grid: Mapping[str, Sequence[float]] | None,
                fit_kwargs: dict[str, Any]) -> dict[str, Sequence[float]]:
    """The grid with an ``l2`` / ``temperature`` given among ``fit_kwargs`` (removed
    from them) as its one value.

    Raises:
        ValueError: a value given both ways.
    """
    out = dict(grid or {})
    for key in DEFAULT_GRID:
        if key in fit_kwargs:
            if key in out:
                raise ValueError(f"{key} is given both as a fixed value and in grid; "
                                 f"give one")
            out[key] = (fit_kwargs.pop(key),)
    return out


def select_hyperparameters(
    batch: RecallBatch,
    info: RecallInfo,
    config: EmotionalMemoryConfig | None = None,
    *,
    grid: dict[str, Sequence[float]] | None = None,
    folds: int = 3,
    train_mask: np.ndarray | None = None,
    seed: int = 0,
    **fit_kwargs: Any,
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Choose ``l2`` and ``temperature`` by inner cross-validation on the training queries.

    Each grid point is fitted on ``folds - 1`` groups of the available scenarios and
    scored on the held-out group with the batch forward (activation held fixed).
    The best mean out-of-fold top-1 wins; ties go to higher MRR, then to the
    stronger prior (larger ``l2``) and softer loss (larger temperature).

    Args:
        batch, info: the recall batch.
        config: starting configuration.
        grid: ``{"l2": [...], "temperature": [...]}`` (default :data:`DEFAULT_GRID`).
        folds: inner folds (>= 2).
        train_mask: (Q,) queries available (default: all).
        seed: fold seed.
        **fit_kwargs: other :func:`fit` arguments (``trainable``, ``steps``, ...); an
            ``l2`` or ``temperature`` given here is kept fixed (a one-value grid).

    Returns:
        ``(best, table)``: the chosen values and one row per grid point.

    Raises:
        ValueError: ``folds`` < 2, an unknown or empty grid entry, or training
            queries from fewer than 2 scenarios (no inner CV is possible).
        TypeError: ``folds`` is not an int, a grid entry is not a sequence.
    """
    fit_kwargs = dict(fit_kwargs)
    g = _grid(DEFAULT_GRID, _fixed_grid(grid, fit_kwargs))
    available, scen, parts = _cv_parts("select_hyperparameters", batch, train_mask,
                                       checked_folds("folds", folds), seed + 1)
    lab, val = np.asarray(batch.labels), np.asarray(batch.columns.valid)
    points = [(l2, temperature) for l2 in g["l2"] for temperature in g["temperature"]]
    held_masks = [available & np.isin(scen, held) for held in parts]
    configs = fit_many_configs(
        batch, config,
        [{"l2": l2, "temperature": temperature, "train_mask": available & ~held_mask}
         for l2, temperature in points for held_mask in held_masks],
        seed=seed, **fit_kwargs,
    )
    table: list[dict[str, Any]] = []
    for i, (l2, temperature) in enumerate(points):
        top1: list[float] = []
        rr: list[float] = []
        for j, held_mask in enumerate(held_masks):
            fitted = configs[i * len(held_masks) + j]
            totals = evaluate_batch(
                params_from_config(fitted.retrieval, fitted.decay), batch, fitted
            )
            per = ranking_metrics(totals, lab, val, info.top_k)
            top1.extend(per["top1"][held_mask].tolist())
            rr.extend(per["rr"][held_mask].tolist())
        table.append({"l2": l2, "temperature": temperature,
                      "top1": float(np.mean(top1)), "mrr": float(np.mean(rr))})
    best = max(table, key=lambda r: (round(r["top1"], 9), round(r["mrr"], 9), r["l2"],
                                     r["temperature"]))
    return {"l2": best["l2"], "temperature": best["temperature"]}, table


ADAPTER_GRID: dict[str, tuple[float, ...]] = {
    "adapter_rank": (4, 16),
    "adapter_l2": (0.01, 0.1, 1.0),
}
"""The query adapter's rank and L2 pull searched by :func:`select_adapter`."""


def select_adapter(
    batch: RecallBatch,
    info: RecallInfo,
    config: EmotionalMemoryConfig | None = None,
    *,
    grid: Mapping[str, Sequence[float]] | None = None,
    folds: int = 3,
    train_mask: np.ndarray | None = None,
    seed: int = 0,
    **fit_kwargs: Any,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Choose the query adapter's rank and L2 pull by inner cross-validation.

    Each grid point's model (``fit_kwargs["trainable"]`` must hold ``adapter``) is
    fitted on ``folds - 1`` groups of the available scenarios, the inner folds trained
    together (:func:`fit_many_configs`), and scored on the held-out group with the batch
    forward. The best mean out-of-fold top-1 wins; ties go to higher MRR, then to the
    stronger pull and the smaller rank (the simpler map).

    Args:
        batch, info: the recall batch (with its embeddings).
        config: starting configuration.
        grid: ``{"adapter_rank": [...], "adapter_l2": [...]}`` (default
            :data:`ADAPTER_GRID`; a key given replaces its default).
        folds: inner folds (>= 2).
        train_mask: (Q,) queries available (default: all).
        seed: fold seed.
        **fit_kwargs: other :func:`fit` arguments (``trainable``, ``steps``, ``l2``,
            ``temperature``, ...).

    Returns:
        ``(best, table)``: ``{"adapter_rank": int, "adapter_l2": float}`` and one row
        per grid point.

    Raises:
        ValueError, TypeError: as :func:`select_hyperparameters`, or no ``adapter``
            in ``trainable``.
    """
    if "adapter" not in tuple(fit_kwargs.get("trainable", ())):
        raise ValueError("select_adapter needs trainable groups that hold 'adapter'")
    g = _grid(ADAPTER_GRID, grid)
    available, scen, parts = _cv_parts("select_adapter", batch, train_mask,
                                       checked_folds("folds", folds), seed + 3)
    lab, val = np.asarray(batch.labels), np.asarray(batch.columns.valid)
    held_masks = [available & np.isin(scen, held) for held in parts]
    per_run: dict[str, Any] = {
        k: fit_kwargs.pop(k) for k in ("l2", "temperature") if k in fit_kwargs
    }
    dim = int(np.shape(batch.query.embedding)[-1])
    table: list[dict[str, Any]] = []
    for rank in g["adapter_rank"]:
        for pull in g["adapter_l2"]:
            configs = fit_many_configs(
                batch, config, [{**per_run, "train_mask": available & ~h} for h in held_masks],
                seed=seed, adapter_rank=min(int(rank), max(dim, 1)), adapter_l2=float(pull),
                **fit_kwargs,
            )
            top1: list[float] = []
            rr: list[float] = []
            for fitted, held_mask in zip(configs, held_masks, strict=True):
                totals = evaluate_batch(
                    params_from_config(fitted.retrieval, fitted.decay), batch, fitted
                )
                per = ranking_metrics(totals, lab, val, info.top_k)
                top1.extend(per["top1"][held_mask].tolist())
                rr.extend(per["rr"][held_mask].tolist())
            table.append({"adapter_rank": int(rank), "adapter_l2": float(pull),
                          "top1": float(np.mean(top1)), "mrr": float(np.mean(rr))})
    best = max(table, key=lambda r: (round(r["top1"], 9), round(r["mrr"], 9),
                                     r["adapter_l2"], -r["adapter_rank"]))
    return {"adapter_rank": best["adapter_rank"], "adapter_l2": best["adapter_l2"]}, table


def fit_auto(
    batch: RecallBatch,
    info: RecallInfo,
    config: EmotionalMemoryConfig | None = None,
    *,
    grid: dict[str, Sequence[float]] | None = None,
    inner_folds: int = 3,
    train_mask: np.ndarray | None = None,
    seed: int = 0,
    **fit_kwargs: Any,
) -> FitResult:
    """:func:`select_hyperparameters`, then :func:`fit` with the chosen values.

    Args:
        batch: The labelled recall batch.
        info: Its metadata.
        config: Starting configuration (default: the defaults of docs/behaviour.md).
        grid: ``{"l2": [...], "temperature": [...]}`` (default :data:`DEFAULT_GRID`).
        inner_folds: Inner cross-validation folds (>= 2).
        train_mask: (Q,) queries available (default: all).
        seed: Fold and split seed.
        **fit_kwargs: Other :func:`fit` arguments (``trainable``, ``steps``, ...); an
            ``l2`` or ``temperature`` given here is kept fixed, the other is tuned.

    Returns:
        The :class:`FitResult`; ``result.selection`` holds the chosen values and table.
        With training queries from one scenario there is nothing to hold out: a
        warning, a fit at the given (or :func:`fit`'s) values, ``chosen`` None and the
        reason under ``untuned`` (as :func:`select_model` does).

    Raises:
        ValueError, TypeError: as :func:`select_hyperparameters` (``inner_folds``
            named for its ``folds``), except for the one-scenario case.
    """
    checked_folds("inner_folds", inner_folds)
    scenarios = np.asarray(batch.scenario)[available_queries(batch, train_mask)]
    if np.unique(scenarios).size == 1:
        reason = "the training queries come from one scenario: no inner cross-validation"
        warnings.warn(f"fit_auto: {reason}; l2 and temperature are not tuned (give queries "
                      "from at least two scenarios to tune them)", UserWarning, stacklevel=2)
        result = fit(batch, info, config, train_mask=train_mask, seed=seed, **fit_kwargs)
        result.selection = {"chosen": None, "table": [], "untuned": reason}
        return result
    rest = dict(fit_kwargs)
    grid = _fixed_grid(grid, rest)
    best, table = select_hyperparameters(
        batch, info, config, grid=grid, folds=checked_folds("inner_folds", inner_folds),
        train_mask=train_mask, seed=seed,
        **rest,
    )
    result = fit(batch, info, config, train_mask=train_mask, seed=seed, l2=best["l2"],
                 temperature=best["temperature"], **rest)
    result.selection = {"chosen": best, "table": table}
    return result
