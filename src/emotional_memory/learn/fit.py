"""Fitting the scoring model to labelled recall data with optax.

The loss is listwise: for each query, the softmax cross-entropy of its expected
memories against all candidates, at a temperature, plus an L2 pull of the
unconstrained parameters towards their starting point (the SPEC defaults, a prior).
Fitting runs full-batch Adam with early stopping on a scenario-grouped validation
split; :func:`cross_validate` evaluates out-of-fold through the real engine.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from emotional_memory._precision import float64
from emotional_memory._progress import progress_iter
from emotional_memory.engine import EmotionalMemoryConfig
from emotional_memory.interfaces import Embedder
from emotional_memory.kernel import (
    ScoringParams,
    adaptive_weights,
    apply_signal_mask,
    signals_given_semantic,
    weighted_total,
)
from emotional_memory.learn.batch import RecallBatch, RecallInfo, build_recall_batch
from emotional_memory.learn.params import Reparam
from emotional_memory.replay import QueryResult, replay_dataset, summarize

_NEG = -1e30


def batch_scores(
    params: ScoringParams, batch: RecallBatch, signal_mask: Any = None
) -> jax.Array:
    """Pass-2 totals of every candidate of every query.

    Args:
        params: scoring parameters.
        batch: the recall batch.
        signal_mask: optional (6,) ablation mask.

    Returns:
        (Q, C) totals; padding candidates get a very negative score.
    """

    def one(query: Any, columns: Any, semantic: Any) -> Any:
        w = adaptive_weights(params, query.mood[0], query.mood[1])
        if signal_mask is not None:
            w = apply_signal_mask(w, jnp.asarray(signal_mask, w.dtype))
        raw = jax.vmap(signals_given_semantic, in_axes=(None, None, 0, 0))(
            params, query, columns, semantic
        )
        return weighted_total(w, raw)

    totals = jax.vmap(one)(batch.query, batch.columns, batch.semantic)
    return jnp.where(batch.columns.valid, totals, _NEG)


def listwise_loss(
    totals: jax.Array, labels: jax.Array, valid: jax.Array, temperature: float
) -> jax.Array:
    """Per-query ``-log(sum of softmax(totals / T) over the positives)``.

    Args:
        totals: (Q, C) scores.
        labels: (Q, C) positives.
        valid: (Q, C) real candidates.
        temperature: softmax temperature (> 0).

    Returns:
        (Q,) losses (0 for queries without a positive candidate).
    """
    z = jnp.where(valid, totals / temperature, _NEG)
    pos = labels & valid
    has_pos = jnp.any(pos, axis=-1)
    lse_all = jax.nn.logsumexp(z, axis=-1)
    lse_pos = jax.nn.logsumexp(jnp.where(pos, z, _NEG), axis=-1)
    return jnp.where(has_pos, lse_all - lse_pos, 0.0)


def ranking_metrics(
    totals: np.ndarray, labels: np.ndarray, valid: np.ndarray, k: int
) -> dict[str, np.ndarray]:
    """Per-query top-1, hit@k and reciprocal rank under a stable descending sort.

    Args:
        totals, labels, valid: (Q, C) arrays.
        k: cut-off for hit@k.

    Returns:
        Dict of (Q,) float arrays ``top1``, ``hit_at_k``, ``rr``.
    """
    keys = np.where(valid, -np.asarray(totals, np.float64), np.inf)
    order = np.argsort(keys, axis=-1, kind="stable")
    ranked = np.take_along_axis(np.asarray(labels) & np.asarray(valid), order, axis=-1)
    first = np.where(ranked.any(axis=-1), ranked.argmax(axis=-1), -1)
    return {
        "top1": ranked[:, 0].astype(float),
        "hit_at_k": ranked[:, :k].any(axis=-1).astype(float),
        "rr": np.where(first >= 0, 1.0 / (first + 1.0), 0.0),
    }


def summarize_metrics(
    per_query: dict[str, np.ndarray], mask: np.ndarray, batch: RecallBatch, info: RecallInfo
) -> dict[str, Any]:
    """Mean metrics over the masked queries, with top-1 per challenge type."""
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


@dataclass
class FitResult:
    """Outcome of :func:`fit`.

    Attributes:
        config: the fitted engine configuration (load it with ``model_validate_json``).
        params: fitted float64 ScoringParams.
        history: per-step ``train_loss``, ``val_loss`` and ``val_top1`` lists.
        best_step: step whose parameters were kept.
        train_metrics, val_metrics, initial_metrics: batch metrics (fixed activation).
    """

    config: EmotionalMemoryConfig
    params: ScoringParams
    history: dict[str, list[float]] = field(default_factory=dict)
    best_step: int = 0
    train_metrics: dict[str, Any] = field(default_factory=dict)
    val_metrics: dict[str, Any] = field(default_factory=dict)
    initial_metrics: dict[str, Any] = field(default_factory=dict)


def scenario_folds(n_scenarios: int, folds: int, seed: int = 0) -> list[np.ndarray]:
    """Split scenario indices into ``folds`` groups (deterministic shuffle).

    Returns:
        A list of int arrays of scenario indices, one per fold.
    """
    if folds < 2 or folds > n_scenarios:
        raise ValueError(f"folds must lie in [2, {n_scenarios}], got {folds}")
    perm = np.random.default_rng(seed).permutation(n_scenarios)
    return [np.sort(part) for part in np.array_split(perm, folds)]


def config_with_params(
    base: EmotionalMemoryConfig, params: ScoringParams
) -> EmotionalMemoryConfig:
    """``base`` with the scoring parameters replaced (retrieval + decay configs)."""
    retrieval, decay = params.to_config(base.retrieval, base.decay)
    return base.model_copy(update={"retrieval": retrieval, "decay": decay})


def fit(
    batch: RecallBatch,
    info: RecallInfo,
    config: EmotionalMemoryConfig | None = None,
    *,
    trainable: Iterable[str] = ("base_weights", "gates"),
    temperature: float = 0.05,
    l2: float = 0.01,
    learning_rate: float = 0.05,
    steps: int = 400,
    patience: int = 60,
    val_fraction: float = 0.2,
    train_mask: np.ndarray | None = None,
    seed: int = 0,
    progress: bool = False,
) -> FitResult:
    """Fit the selected parameter groups to the batch.

    Args:
        batch: labelled recall batch (from :func:`build_recall_batch`).
        info: its metadata.
        config: starting configuration (default: SPEC defaults); also the prior.
        trainable: groups from :data:`emotional_memory.learn.params.GROUPS`.
        temperature: softmax temperature of the listwise loss.
        l2: weight of the L2 pull towards the starting parameters.
        learning_rate: Adam peak learning rate (cosine decay over ``steps``).
        steps: maximum optimisation steps.
        patience: early-stopping patience (steps without validation improvement).
        val_fraction: share of the training scenarios held out for early stopping
            (0 disables early stopping: the last step is kept).
        train_mask: (Q,) queries available for fitting (default: all).
        seed: split seed.
        progress: draw a progress bar.

    Returns:
        :class:`FitResult`.
    """
    cfg = config if config is not None else EmotionalMemoryConfig()
    if temperature <= 0 or not math.isfinite(temperature):
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if l2 < 0 or not math.isfinite(l2):
        raise ValueError(f"l2 must be >= 0, got {l2}")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction must lie in [0, 1), got {val_fraction}")
    q = batch.n_queries
    available = np.ones(q, bool) if train_mask is None else np.asarray(train_mask, bool)
    scen = np.asarray(batch.scenario)
    train_scen = np.unique(scen[available])
    n_val = round(val_fraction * len(train_scen))
    rng = np.random.default_rng(seed)
    val_scen = rng.choice(train_scen, size=n_val, replace=False) if n_val else np.array([])
    val_mask = available & np.isin(scen, val_scen)
    fit_mask = available & ~val_mask
    mask = cfg.signal_mask()
    signal_mask = None if all(m == 1.0 for m in mask) else np.asarray(mask)

    base = ScoringParams.from_config(cfg.retrieval, cfg.decay)
    reparam = Reparam(base, trainable)
    with float64():
        data = jax.tree_util.tree_map(jnp.asarray, batch)
        fit_w = jnp.asarray(fit_mask, jnp.float64)
        val_w = jnp.asarray(val_mask, jnp.float64)
        labels, valid = data.labels, data.columns.valid

        def losses(u: dict[str, Any]) -> tuple[jax.Array, jax.Array]:
            totals = batch_scores(reparam.params(u), data, signal_mask)
            per_query = listwise_loss(totals, labels, valid, temperature)
            return per_query, totals

        def objective(u: dict[str, Any]) -> jax.Array:
            per_query, _ = losses(u)
            data_loss = jnp.sum(per_query * fit_w) / jnp.maximum(jnp.sum(fit_w), 1.0)
            return data_loss + l2 * reparam.penalty(u)

        schedule = optax.cosine_decay_schedule(learning_rate, max(steps, 1), alpha=0.05)
        optimizer = optax.adam(schedule)

        @eqx.filter_jit
        def step(u: dict[str, Any], opt_state: Any) -> tuple[Any, Any, jax.Array, jax.Array]:
            value, grads = jax.value_and_grad(objective)(u)
            updates, opt_state = optimizer.update(grads, opt_state, u)
            per_query, _ = losses(u)
            val_loss = jnp.sum(per_query * val_w) / jnp.maximum(jnp.sum(val_w), 1.0)
            return optax.apply_updates(u, updates), opt_state, value, val_loss

        @eqx.filter_jit
        def scores(u: dict[str, Any]) -> jax.Array:
            return losses(u)[1]

        u = {k: jnp.asarray(v) for k, v in reparam.init().items()}
        opt_state = optimizer.init(u)
        best_u, best_val, best_step = u, math.inf, 0
        history: dict[str, list[float]] = {"train_loss": [], "val_loss": []}
        since_best = 0
        for i in progress_iter(range(steps), "fit", enabled=progress):
            new_u, opt_state, train_loss, val_loss = step(u, opt_state)
            history["train_loss"].append(float(train_loss))
            history["val_loss"].append(float(val_loss))
            # val_loss belongs to ``u`` (before this update).
            current = float(val_loss) if val_mask.any() else -float(i)
            if current < best_val - 1e-9:
                best_u, best_val, best_step, since_best = u, current, i, 0
            else:
                since_best += 1
            u = new_u
            if val_mask.any() and since_best > patience:
                break
        if not val_mask.any():
            best_u, best_step = u, len(history["train_loss"])
        exported = reparam.export({k: np.asarray(v) for k, v in best_u.items()})
        initial_totals = np.asarray(scores({k: jnp.asarray(v) for k, v in reparam.init().items()}))
        final_totals = np.asarray(scores(best_u))
    lab, val = np.asarray(batch.labels), np.asarray(batch.columns.valid)
    per_final = ranking_metrics(final_totals, lab, val, info.top_k)
    per_init = ranking_metrics(initial_totals, lab, val, info.top_k)
    return FitResult(
        config=config_with_params(cfg, exported),
        params=exported,
        history=history,
        best_step=best_step,
        train_metrics=summarize_metrics(per_final, fit_mask, batch, info),
        val_metrics=summarize_metrics(per_final, val_mask, batch, info),
        initial_metrics=summarize_metrics(per_init, available, batch, info),
    )


def subset_dataset(data: dict[str, Any], scenario_ids: Sequence[str]) -> dict[str, Any]:
    """The dataset restricted to the given scenarios (file order kept)."""
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
    """

    metrics: dict[str, Any]
    default_metrics: dict[str, Any]
    fold_metrics: list[dict[str, Any]]
    results: list[QueryResult]


def cross_validate(
    data: dict[str, Any],
    embedder: Embedder,
    config: EmotionalMemoryConfig | None = None,
    *,
    folds: int = 5,
    seed: int = 0,
    progress: bool = False,
    batch: tuple[RecallBatch, RecallInfo] | None = None,
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
        **fit_kwargs: passed to :func:`fit`.

    Returns:
        :class:`CVResult`.
    """
    cfg = config if config is not None else EmotionalMemoryConfig()
    rb, info = batch if batch is not None else build_recall_batch(data, embedder, cfg)
    parts = scenario_folds(len(info.scenario_ids), folds, seed)
    scen = np.asarray(rb.scenario)
    oof: list[QueryResult] = []
    per_fold: list[dict[str, Any]] = []
    for held in progress_iter(parts, "cv", enabled=progress):
        train_mask = ~np.isin(scen, held)
        result = fit(rb, info, cfg, train_mask=train_mask, seed=seed, **fit_kwargs)
        held_ids = [info.scenario_ids[i] for i in held]
        fold_results = replay_dataset(
            subset_dataset(data, held_ids), embedder, result.config, top_k=info.top_k
        )
        per_fold.append(summarize(fold_results))
        oof.extend(fold_results)
    default = summarize(replay_dataset(data, embedder, cfg, top_k=info.top_k))
    return CVResult(
        metrics=summarize(oof), default_metrics=default, fold_metrics=per_fold, results=oof
    )
