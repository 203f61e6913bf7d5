"""Differentiable fitting of the scoring model on labelled recall data.

Typical use::

    from emotional_memory.learn import build_recall_batch, fit
    batch, info = build_recall_batch(data, embedder)
    result = fit(batch, info, trainable=("base_weights", "gates"))
    open("fitted.json", "w").write(result.config.model_dump_json(indent=2))
"""

from emotional_memory.learn.fitting import (
    ADAPTER_GRID,
    DEFAULT_GRID,
    LEXICAL_ANALYSES,
    CVResult,
    FitResult,
    analysis_config,
    batch_scores,
    candidate_models,
    config_with_params,
    cross_validate,
    evaluate_batch,
    fit,
    fit_auto,
    fit_many,
    fit_many_configs,
    listwise_loss,
    ranking_metrics,
    scenario_folds,
    select_adapter,
    select_hyperparameters,
    select_model,
    semantic_only_config,
    subset_dataset,
    summarize_metrics,
)
from emotional_memory.learn.params import GROUPS, TRAINABLE_GROUPS, Reparam
from emotional_memory.learn.recall_batch import RecallBatch, RecallInfo, build_recall_batch

__all__ = [
    "ADAPTER_GRID",
    "DEFAULT_GRID",
    "GROUPS",
    "LEXICAL_ANALYSES",
    "TRAINABLE_GROUPS",
    "CVResult",
    "FitResult",
    "RecallBatch",
    "RecallInfo",
    "Reparam",
    "analysis_config",
    "batch_scores",
    "build_recall_batch",
    "candidate_models",
    "config_with_params",
    "cross_validate",
    "evaluate_batch",
    "fit",
    "fit_auto",
    "fit_many",
    "fit_many_configs",
    "listwise_loss",
    "ranking_metrics",
    "scenario_folds",
    "select_adapter",
    "select_hyperparameters",
    "select_model",
    "semantic_only_config",
    "subset_dataset",
    "summarize_metrics",
]
