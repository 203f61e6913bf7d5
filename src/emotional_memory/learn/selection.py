"""Model selection: the candidate models and the inner-CV choice among them."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from emotional_memory._progress import progress_iter
from emotional_memory._validation import instance
from emotional_memory.engine import EmotionalMemoryConfig
from emotional_memory.learn.calibration import fit_relevance_calibration
from emotional_memory.learn.losses import evaluate_batch, scored_groups
from emotional_memory.learn.metrics import ranking_metrics
from emotional_memory.learn.recall_batch import RecallBatch, RecallInfo
from emotional_memory.learn.training import FitResult, fit
from emotional_memory.learn.tuning import (
    DEFAULT_GRID,
    checked_folds,
    fit_auto,
    inner_folds,
    select_adapter,
)
from emotional_memory.scoring_config import params_from_config


def semantic_only_config(config: EmotionalMemoryConfig) -> EmotionalMemoryConfig:
    """``config`` ranking by cosine alone: weights (1, 0, ..., 0), no mood gates, no s7
    (and no relevance calibration: ``config``'s maps other scores).

    Args:
        config: the template (non-scoring fields are kept).

    Returns:
        A config whose pass-2 order is the plain cosine order of the candidates.
    """
    gates = config.retrieval.adaptive_weights_config.model_copy(update={
        "negative_mood_strength": 0.0, "high_arousal_strength": 0.0, "calm_strength": 0.0,
    })
    retrieval = config.retrieval.model_copy(update={
        "base_weights": [1.0, 0.0, 0.0, 0.0, 0.0, 0.0], "adaptive_weights_config": gates,
        "lexical_weight": 0.0, "query_classifier": None, "relevance_calibration": None,
    })
    return config.model_copy(update={"retrieval": retrieval})


LEXICAL_ANALYSES: dict[str, dict[str, Any]] = {
    "stem": {"lexical_stemmer": "english", "lexical_query_counts": True},
}
"""Lexical analyses :func:`select_model` can try besides the batch's own: name -> the
``RetrievalConfig`` fields it sets (``stem``: Snowball English stems, query terms
weighted by their count). Each needs its own batch (:func:`analysis_config`)."""


def analysis_config(config: EmotionalMemoryConfig, analysis: str) -> EmotionalMemoryConfig:
    """``config`` with the retrieval fields of one of :data:`LEXICAL_ANALYSES`.

    Args:
        config: the template.
        analysis: a key of :data:`LEXICAL_ANALYSES`.

    Returns:
        The config (build the analysis' batch with it).

    Raises:
        ValueError: an unknown analysis.
    """
    if analysis not in LEXICAL_ANALYSES:
        raise ValueError(
            f"analysis must be one of {tuple(LEXICAL_ANALYSES)}, got {analysis!r}"
        )
    return config.model_copy(update={"retrieval": config.retrieval.model_copy(
        update=LEXICAL_ANALYSES[analysis]
    )})


def candidate_models(
    config: EmotionalMemoryConfig, lexical: bool, *, analyses: Sequence[str] = (),
    adapter: bool = False, context: bool = False,
) -> dict[str, tuple[EmotionalMemoryConfig, tuple[str, ...] | None]]:
    """The models :func:`select_model` chooses among: name -> (start config, trainable).

    ``trainable`` None means the config is used as it is (no fit).

    * ``default``: ``config`` unchanged;
    * ``semantic``: cosine only (:func:`semantic_only_config`);
    * ``fitted``: ``config`` with fitted base weights and mood gates;
    * with lexical statistics, ``lexical``: cosine + BM25 (s7 weight 0.6, b 0.5) with
      small affective weights, fitting the base weights and s7's weight, k1 and b;
      and ``lexical_full``: ``config`` + s7 (weight 0.35) fitting base weights, gates,
      s7 and the per-signal calibration;
    * with ``adapter`` (a batch with embeddings), ``lexical_adapter``: ``lexical``
      fitting the query adapter too;
    * with ``context`` (a batch with neighbours), ``lexical_context``: ``lexical`` with
      the context signal s8 (weight 0.3, mix 0.5) fitting its weight and mix too; and
      with ``adapter`` also ``lexical_context_adapter``;
    * per analysis ``a`` of ``analyses`` (:data:`LEXICAL_ANALYSES`), each lexical model
      again as ``NAME@a`` under that analysis (scored on its own batch).

    Args:
        config: the starting configuration.
        lexical: whether the batch carries lexical statistics.
        analyses: extra lexical analyses to try.
        adapter: add the adapter variant.
        context: add the context variants.

    Returns:
        Ordered dict of the candidates.
    """
    models: dict[str, tuple[EmotionalMemoryConfig, tuple[str, ...] | None]] = {
        "default": (config, None),
        "semantic": (semantic_only_config(config), None),
        "fitted": (config, ("base_weights", "gates")),
    }
    if lexical:
        sem = semantic_only_config(config)
        lex = sem.model_copy(update={"retrieval": sem.retrieval.model_copy(update={
            "base_weights": [1.0, 0.01, 0.01, 0.01, 0.01, 0.01],
            "lexical_weight": 0.6, "lexical_b": 0.5,
        })})
        full = config.model_copy(update={"retrieval": config.retrieval.model_copy(update={
            "lexical_weight": 0.35,
        })})
        lexical_models: dict[str, tuple[EmotionalMemoryConfig, tuple[str, ...]]] = {
            "lexical": (lex, ("base_weights", "lexical")),
            "lexical_full": (full, ("base_weights", "gates", "lexical", "calibration")),
        }
        if adapter:
            lexical_models["lexical_adapter"] = (lex, ("base_weights", "lexical", "adapter"))
        if context:
            ctx = lex.model_copy(update={"retrieval": lex.retrieval.model_copy(update={
                "context_weight": 0.3, "context_mix": 0.5,
            })})
            lexical_models["lexical_context"] = (ctx, ("base_weights", "lexical", "context"))
            if adapter:
                lexical_models["lexical_context_adapter"] = (
                    ctx, ("base_weights", "lexical", "context", "adapter")
                )
        models.update(lexical_models)
        for analysis in analyses:
            for name, (start, trainable) in lexical_models.items():
                models[f"{name}@{analysis}"] = (analysis_config(start, analysis), trainable)
    return models


def _analysis_of(name: str) -> str | None:
    return name.split("@", 1)[1] if "@" in name else None


def _checked_selection(
    batch: RecallBatch, info: RecallInfo, folds: int, select_by: str,
    analysis_batches: Mapping[str, RecallBatch] | None, adapter: bool = False,
) -> dict[str, RecallBatch]:
    """Check :func:`select_model`'s arguments; the extra analyses' batches."""
    instance("info", info, RecallInfo)
    checked_folds("folds", folds)
    if select_by not in ("mrr", "top1"):
        raise ValueError(f"select_by must be 'mrr' or 'top1', got {select_by!r}")
    extra = dict(analysis_batches or {})
    if batch.lexical is None:  # no lexical models, which take the analyses and adapter
        given = ["analysis_batches"] * bool(extra) + ["adapter=True"] * bool(adapter)
        if given:
            raise ValueError(f"{given[0]} applies to the lexical models, which a batch "
                             "without lexical statistics has none of (build it with "
                             "build_recall_batch(..., lexical=True))")
    for name, other in extra.items():
        if other.n_queries != batch.n_queries or not np.array_equal(
            np.asarray(other.scenario), np.asarray(batch.scenario)
        ):
            raise ValueError(
                f"analysis_batches[{name!r}] must hold the batch's queries in its order"
            )
    return extra


def _check_scored(
    models: Mapping[str, tuple[EmotionalMemoryConfig, tuple[str, ...] | None]],
    batch_of: Callable[[str], RecallBatch],
) -> None:
    """Refuse a candidate whose trainable group its batch does not score
    (:func:`~emotional_memory.learn.losses.scored_groups`)."""
    for name, (start, trainable) in models.items():
        if trainable is not None:
            scored_groups(trainable, batch_of(name), start)


def _calibrate(result: FitResult, data: RecallBatch, scores: np.ndarray, info: RecallInfo,
               available: np.ndarray) -> None:
    """Fit the relevance calibration (Platt scaling) on the winner's out-of-fold
    ``scores`` and store it in ``result``'s config and selection report."""
    calibration = fit_relevance_calibration(
        scores, np.asarray(data.labels), np.asarray(data.columns.valid), info.top_k,
        rows=available,
    )
    result.config = result.config.model_copy(update={
        "retrieval": result.config.retrieval.model_copy(
            update={"relevance_calibration": calibration}
        )
    })
    assert result.selection is not None
    result.selection["relevance_calibration"] = calibration.model_dump()


def _warn_one_scenario() -> None:
    """The warning of :func:`select_model` when its queries come from one scenario."""
    warnings.warn(
        "select_model: the training queries come from one scenario, so there is no "
        "inner cross-validation: the candidates are compared unfitted (on their "
        "starting configs) and the winner is fitted untuned; give queries from at "
        "least two scenarios (conversations) to choose a fitted model",
        UserWarning, stacklevel=3,
    )


def select_model(
    batch: RecallBatch,
    info: RecallInfo,
    config: EmotionalMemoryConfig | None = None,
    *,
    folds: int = 3,
    train_mask: np.ndarray | None = None,
    seed: int = 0,
    progress: bool = False,
    tune: bool = True,
    analysis_batches: Mapping[str, RecallBatch] | None = None,
    adapter: bool = False,
    tune_adapter: bool = True,
    select_by: str = "mrr",
    prune: bool = False,
    calibrate: bool = False,
    **fit_kwargs: Any,
) -> FitResult:
    """Choose among :func:`candidate_models` by inner grouped CV, then fit the winner.

    Every candidate is scored out-of-fold on the available scenarios (fitted ones are
    fitted on the other inner folds), with the batch forward. The best mean
    reciprocal rank wins (``select_by``; ties: top-1, then the earlier candidate, so
    the unfitted default and cosine win ties): MRR rewards a model that puts the answer
    first and one that keeps it near the top. Because the default and plain cosine are
    candidates, the choice is never worse than the better of them on the inner folds
    by that criterion. The winner is then fitted
    (or taken as is) on every available query, with ``l2``/``temperature`` chosen by
    another inner CV (:func:`fit_auto`) when ``tune`` (values given in ``fit_kwargs``
    are kept fixed). With available queries from one scenario there is no inner CV:
    a warning, the candidates compared unfitted, the winner fitted untuned.

    Args:
        batch: the recall batch (with lexical statistics, the lexical models compete).
        info: its metadata.
        config: the starting configuration (default: the defaults of docs/behaviour.md).
        folds: inner folds (>= 2; at most the number of available scenarios).
        train_mask: (Q,) queries available (default: all).
        seed: fold and split seed.
        progress: progress bars.
        tune: choose the winner's ``l2``/``temperature`` by inner CV.
        analysis_batches: per extra lexical analysis (:data:`LEXICAL_ANALYSES`), the
            batch built under it (same data, same queries in the same order): its
            lexical models compete too.
        adapter: let the query-adapter variant compete (the batches need their
            embeddings).
        tune_adapter: when a model with the query adapter wins, choose its rank and
            L2 pull by another inner CV (:func:`select_adapter`; ``adapter_rank`` /
            ``adapter_l2`` given in ``fit_kwargs`` stay fixed).
        select_by: the inner-CV criterion: ``"mrr"`` (default: mean reciprocal rank,
            ties by top-1) or ``"top1"`` (ties by MRR); further ties go to the
            earlier candidate.
        prune: score the models under the extra analyses (``NAME@a``) only for the
            winner among the batch's own models (one more inner CV per analysis)
            instead of for every lexical model: the CLI's fast default; the choice
            is then never worse than that winner (and than default and cosine).
        calibrate: also fit the relevance calibration
            (:func:`~emotional_memory.learn.calibration.fit_relevance_calibration`) on
            the winner's out-of-fold scores of the inner CV and store it in the
            config (``retrieval.relevance_calibration``); it never changes a ranking.
        **fit_kwargs: other :func:`fit` arguments (``steps``, ``l2``, ...).

    Returns:
        The :class:`FitResult` of the chosen model; ``result.selection`` holds
        ``{"chosen": name, "table": [...]}`` (and ``"hyperparameters"`` when tuned,
        ``"adapter"`` when the adapter's rank and pull were chosen).
    """
    cfg = config if config is not None else EmotionalMemoryConfig()
    extra = _checked_selection(batch, info, folds, select_by, analysis_batches, adapter)
    available, scen, parts = inner_folds(batch, train_mask, folds, seed + 7)
    if len(parts) < 2:
        _warn_one_scenario()
        tune = tune_adapter = False  # nothing to choose their values by
    models = candidate_models(cfg, batch.lexical is not None, analyses=tuple(extra),
                              adapter=adapter, context=batch.context is not None)

    def batch_of(name: str) -> RecallBatch:
        analysis = _analysis_of(name)
        return batch if analysis is None else extra[analysis]

    _check_scored(models, batch_of)  # before any candidate is fitted

    first, second = ("top1", "mrr") if select_by == "top1" else ("mrr", "top1")

    def winner(rows: list[dict[str, Any]]) -> dict[str, Any]:
        return max(enumerate(rows), key=lambda it: (round(it[1][first], 9),
                                                    round(it[1][second], 9), -it[0]))[1]

    oof: dict[str, np.ndarray] = {}

    def score(subset: Mapping[str, Any]) -> list[dict[str, Any]]:
        return _inner_cv_table(subset, batch_of, info, available, scen, parts, seed=seed,
                               progress=progress, oof=oof, **fit_kwargs)

    if prune and extra:  # the analyses only on the winner of the batch's own analysis
        table = score({n: m for n, m in models.items() if _analysis_of(n) is None})
        lead = winner(table)["model"]
        variants = {f"{lead}@{a}": models[f"{lead}@{a}"] for a in extra
                    if f"{lead}@{a}" in models}
        if variants:  # none when the lead has no lexical signal (default, cosine)
            table += score(variants)
    else:
        table = score(models)
    best = winner(table)
    start, trainable = models[best["model"]]
    result, adapter_choice, chosen_hyper = _fit_winner(
        batch_of(best["model"]), info, start, trainable, folds=folds,
        train_mask=train_mask, seed=seed, tune=tune, tune_adapter=tune_adapter,
        progress=progress, **fit_kwargs,
    )
    result.selection = {"chosen": best["model"], "table": table}
    if calibrate:
        _calibrate(result, batch_of(best["model"]), oof[best["model"]], info, available)
    if adapter_choice is not None:
        result.selection["adapter"] = adapter_choice
    if chosen_hyper is not None:
        result.selection["hyperparameters"] = chosen_hyper
    return result


def _inner_cv_table(
    models: Mapping[str, tuple[EmotionalMemoryConfig, tuple[str, ...] | None]],
    batch_of: Callable[[str], RecallBatch],
    info: RecallInfo,
    available: np.ndarray,
    scen: np.ndarray,
    parts: Sequence[np.ndarray],
    *,
    seed: int,
    progress: bool,
    oof: dict[str, np.ndarray] | None = None,
    **fit_kwargs: Any,
) -> list[dict[str, Any]]:
    """Every candidate's out-of-fold top-1, MRR and hit@k over the inner folds.

    Args:
        models: the candidates (:func:`candidate_models`).
        batch_of: a candidate's name -> the batch it is scored on.
        info: the batch metadata.
        available: (Q,) queries available.
        scen: (Q,) scenario index of each query.
        parts: the scenario indices of each inner fold.
        seed: fit seed.
        progress: progress bar.
        oof: filled with each candidate's (Q, C) out-of-fold totals (rows of
            unavailable queries 0) when given.
        **fit_kwargs: other :func:`fit` arguments.

    Returns:
        One row per candidate, in order: ``model``, ``top1``, ``mrr``, ``hit_at_k``.
    """
    table: list[dict[str, Any]] = []
    for name, (start, trainable) in progress_iter(list(models.items()), "select",
                                                 enabled=progress):
        data = batch_of(name)
        lab, val = np.asarray(data.labels), np.asarray(data.columns.valid)
        top1 = np.zeros(data.n_queries)
        rr = np.zeros(data.n_queries)
        hit = np.zeros(data.n_queries)
        totals_oof = np.zeros(np.shape(lab))
        for held in parts:
            held_mask = available & np.isin(scen, held)
            scored = start
            if trainable is not None and len(parts) >= 2:
                scored = fit(data, info, start, trainable=trainable, seed=seed,
                             train_mask=available & ~held_mask, **fit_kwargs).config
            params = params_from_config(scored.retrieval, scored.decay)
            totals = evaluate_batch(params, data, scored)
            totals_oof[held_mask] = totals[held_mask]
            per = ranking_metrics(totals, lab, val, info.top_k)
            top1[held_mask] = per["top1"][held_mask]
            rr[held_mask] = per["rr"][held_mask]
            hit[held_mask] = per["hit_at_k"][held_mask]
        if oof is not None:
            oof[name] = totals_oof
        table.append({"model": name, "top1": float(top1[available].mean()),
                      "mrr": float(rr[available].mean()),
                      "hit_at_k": float(hit[available].mean())})
    return table


def _fit_winner(
    data: RecallBatch,
    info: RecallInfo,
    start: EmotionalMemoryConfig,
    trainable: tuple[str, ...] | None,
    *,
    folds: int,
    train_mask: np.ndarray | None,
    seed: int,
    tune: bool,
    tune_adapter: bool,
    progress: bool = False,
    **fit_kwargs: Any,
) -> tuple[FitResult, dict[str, Any] | None, dict[str, Any] | None]:
    """Fit the chosen candidate on every available query (see :func:`select_model`).

    Returns:
        ``(result, adapter_choice, chosen_hyperparameters)`` (None where not chosen).
    """
    fit_kwargs = {**fit_kwargs, "progress": progress}  # a bar per training loop
    chosen_hyper: dict[str, Any] | None = None
    adapter_choice: dict[str, Any] | None = None
    fixed = {k for k in ("adapter_rank", "adapter_l2") if k in fit_kwargs}
    if trainable is not None and "adapter" in trainable and tune_adapter and len(fixed) < 2:
        # the adapter's rank and pull by another inner CV (values given stay fixed)
        adapter_choice, _ = select_adapter(
            data, info, start, grid={k: (fit_kwargs[k],) for k in fixed}, folds=folds,
            train_mask=train_mask, seed=seed, trainable=trainable,
            **{k: v for k, v in fit_kwargs.items() if k not in fixed},
        )
        fit_kwargs = {**fit_kwargs, **adapter_choice}
    if trainable is None:
        result = fit(data, info, start, trainable=("base_weights",), steps=0,
                     train_mask=train_mask, seed=seed)
        result.config = start
    elif tune:
        grid: dict[str, Sequence[float]] = {
            k: (v,) for k, v in fit_kwargs.items() if k in DEFAULT_GRID
        }
        rest = {k: v for k, v in fit_kwargs.items() if k not in DEFAULT_GRID}
        result = fit_auto(data, info, start, trainable=trainable, train_mask=train_mask,
                          seed=seed, grid=grid, inner_folds=folds, **rest)
        chosen_hyper = result.selection.get("chosen")
    else:
        result = fit(data, info, start, trainable=trainable, train_mask=train_mask,
                     seed=seed, **fit_kwargs)
    if trainable is not None and data.lexical is not None:
        # ranked as it was fitted: over hybrid candidates (with the shortlist's
        # neighbours when the batch had them)
        result.config = result.config.model_copy(update={
            "retrieval": result.config.retrieval.model_copy(update={
                "hybrid_candidates": True,
                "context_candidates": result.config.retrieval.context_candidates
                or data.context is not None,
            })
        })
    return result, adapter_choice, chosen_hyper
