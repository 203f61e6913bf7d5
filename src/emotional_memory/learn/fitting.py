"""Fitting the scoring model (compatibility module: the code lives in ``losses``,
``metrics``, ``training``, ``tuning``, ``cross_validation`` and ``selection``)."""

from emotional_memory.learn.cross_validation import (
    CVResult,
    cross_validate,
    scenario_folds,
    subset_dataset,
)
from emotional_memory.learn.losses import (
    batch_for,
    batch_scores,
    batch_signal_mask,
    evaluate_batch,
    listwise_loss,
)
from emotional_memory.learn.metrics import ranking_metrics, summarize_metrics
from emotional_memory.learn.selection import (
    LEXICAL_ANALYSES,
    analysis_config,
    candidate_models,
    select_model,
    semantic_only_config,
)
from emotional_memory.learn.training import (
    FitResult,
    config_with_params,
    fit,
    fit_many,
    fit_many_configs,
    lr_schedule,
)
from emotional_memory.learn.tuning import (
    ADAPTER_GRID,
    DEFAULT_GRID,
    fit_auto,
    select_adapter,
    select_hyperparameters,
)

__all__ = [
    "ADAPTER_GRID",
    "DEFAULT_GRID",
    "LEXICAL_ANALYSES",
    "CVResult",
    "FitResult",
    "analysis_config",
    "batch_for",
    "batch_scores",
    "batch_signal_mask",
    "candidate_models",
    "config_with_params",
    "cross_validate",
    "evaluate_batch",
    "fit",
    "fit_auto",
    "fit_many",
    "fit_many_configs",
    "listwise_loss",
    "lr_schedule",
    "ranking_metrics",
    "scenario_folds",
    "select_adapter",
    "select_hyperparameters",
    "select_model",
    "semantic_only_config",
    "subset_dataset",
    "summarize_metrics",
]
