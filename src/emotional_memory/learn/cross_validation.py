"""Scenario-grouped k-fold cross-validation, evaluated through the real engine."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emotional_memory._progress import progress_iter
from emotional_memory.engine import EmotionalMemoryConfig
from emotional_memory.interfaces import Embedder
from emotional_memory.learn.recall_batch import RecallBatch, RecallInfo, build_recall_batch
from emotional_memory.learn.selection import analysis_config, select_model
from emotional_memory.learn.training import fit
from emotional_memory.learn.tuning import fit_auto
from emotional_memory.replay import QueryResult, ReplayAffect, replay_dataset, summarize


def scenario_folds(n_scenarios: int, folds: int, seed: int = 0) -> list[np.ndarray]:
    """Split scenario indices into ``folds`` groups (deterministic shuffle).

    Args:
        n_scenarios: Number of scenarios S.
        folds: Number of groups, in [2, S].
        seed: Shuffle seed.

    Returns:
        A list of sorted int arrays of scenario indices in [0, S), one per fold.

    Raises:
        ValueError: If ``folds`` lies outside [2, S].
    """
    if folds < 2 or folds > n_scenarios:
        raise ValueError(f"folds must lie in [2, {n_scenarios}], got {folds}")
    perm = np.random.default_rng(seed).permutation(n_scenarios)
    return [np.sort(part) for part in np.array_split(perm, folds)]


def subset_dataset(data: dict[str, Any], scenario_ids: Sequence[str]) -> dict[str, Any]:
    """The dataset restricted to the given scenarios (file order kept).

    Args:
        data: A realistic-recall dataset.
        scenario_ids: Ids of the scenarios to keep.

    Returns:
        A shallow copy of ``data`` whose ``scenarios`` list holds only those scenarios.
    """
    keep = set(scenario_ids)
    return {**data, "scenarios": [s for s in data["scenarios"] if s.get("scenario_id") in keep]}


@dataclass
class CVResult:
    """Out-of-fold cross-validation outcome.

    Attributes:
        metrics: out-of-fold engine-replay metrics of the fitted configs.
        default_metrics: engine-replay metrics of the starting configuration.
        fold_metrics: per fold, out-of-fold metrics.
        results: the out-of-fold per-query results.
        chosen: per fold, what the selection chose (model name or hyper-parameters).
    """

    metrics: dict[str, Any]
    default_metrics: dict[str, Any]
    fold_metrics: list[dict[str, Any]]
    results: list[QueryResult]
    chosen: list[Any] = field(default_factory=list)


def cross_validate(
    data: dict[str, Any],
    embedder: Embedder,
    config: EmotionalMemoryConfig | None = None,
    *,
    folds: int = 5,
    seed: int = 0,
    progress: bool = False,
    batch: tuple[RecallBatch, RecallInfo] | None = None,
    select: bool | str = True,
    affect: ReplayAffect | None = None,
    lexical: bool = False,
    analyses: Sequence[str] = (),
    adapter: bool = False,
    context: bool = False,
    **fit_kwargs: Any,
) -> CVResult:
    """k-fold cross-validation grouped by scenario, evaluated through the engine.

    Each fold fits on the other folds' scenarios and replays its own scenarios
    through a real engine with the fitted configuration (so pass-1 seeds and
    activation are recomputed, not held fixed).

    Args:
        data: the dataset.
        embedder: text embedder.
        config: starting configuration.
        folds: number of folds (>= 2).
        seed: fold assignment seed.
        progress: progress bars.
        batch: a prebuilt ``(batch, info)`` for ``data`` (built when None).
        select: ``True``: choose ``l2``/``temperature`` inside each fold by inner CV
            (:func:`fit_auto`, nested CV); ``"model"``: choose the model inside each
            fold by inner CV (:func:`select_model`: default, cosine, fitted variants);
            False uses ``fit_kwargs`` as given.
        affect: unlabelled events and queries (default: estimated when needed).
        lexical: capture lexical statistics when building the batch (full-bank
            candidates), so lexical models can be fitted.
        analyses: with ``select="model"``, extra lexical analyses
            (:data:`LEXICAL_ANALYSES`) whose models compete (one batch built per
            analysis).
        adapter: with ``select="model"``, let the query-adapter variant compete (the
            batches keep their embeddings).
        context: capture the candidates' encode-order neighbours when building the
            batches (with ``lexical``: the context models compete).
        **fit_kwargs: passed to :func:`fit` / :func:`fit_auto` / :func:`select_model`.

    Returns:
        :class:`CVResult`.
    """
    cfg = config if config is not None else EmotionalMemoryConfig()
    settings = affect if affect is not None else ReplayAffect.prepare(data)
    rb, info = batch if batch is not None else build_recall_batch(
        data, embedder, cfg, lexical=lexical, affect=settings, embeddings=adapter,
        context=context,
    )
    if select == "model":
        fit_kwargs["adapter"] = adapter
        fit_kwargs["analysis_batches"] = {
            name: build_recall_batch(data, embedder, analysis_config(cfg, name),
                                     lexical=lexical, affect=settings,
                                     embeddings=adapter, context=context)[0]
            for name in analyses
        }
    parts = scenario_folds(len(info.scenario_ids), folds, seed)
    scen = np.asarray(rb.scenario)
    oof: list[QueryResult] = []
    per_fold: list[dict[str, Any]] = []
    chosen: list[Any] = []
    for held in progress_iter(parts, "cv", enabled=progress):
        train_mask = ~np.isin(scen, held)
        fitter = select_model if select == "model" else fit_auto if select else fit
        result = fitter(rb, info, cfg, train_mask=train_mask, seed=seed, **fit_kwargs)
        held_ids = [info.scenario_ids[i] for i in held]
        fold_results = replay_dataset(
            subset_dataset(data, held_ids), embedder, result.config, top_k=info.top_k,
            affect=settings,
        )
        chosen.append(result.selection.get("chosen"))
        per_fold.append(summarize(fold_results))
        oof.extend(fold_results)
    default = summarize(replay_dataset(data, embedder, cfg, top_k=info.top_k, affect=settings))
    return CVResult(
        metrics=summarize(oof), default_metrics=default, fold_metrics=per_fold, results=oof,
        chosen=chosen,
    )
