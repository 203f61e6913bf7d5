"""Fitting the scoring model to labelled recall data with optax.

The loss is listwise: for each query, the softmax cross-entropy of its expected
memories against all candidates, at a temperature, plus an L2 pull of the
unconstrained parameters towards their starting point (the SPEC defaults, a prior).
Fitting runs full-batch Adam with early stopping on a scenario-grouped validation
split; :func:`cross_validate` evaluates out-of-fold through the real engine.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
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
from emotional_memory.kernel import ScoringParams, score_given_semantic
from emotional_memory.kernel.adapter import QueryAdapter, adapt_query
from emotional_memory.kernel.signals import bank_cosine
from emotional_memory.learn.params import (
    Reparam,
    adapter_of,
    constrained_params,
    initial_adapter,
    l2_penalty,
)
from emotional_memory.learn.recall_batch import RecallBatch, RecallInfo, build_recall_batch
from emotional_memory.replay import QueryResult, ReplayAffect, replay_dataset, summarize
from emotional_memory.retrieval import QueryAdapterConfig
from emotional_memory.scoring_config import params_from_config, params_to_config

_NEG = -1e30


def batch_scores(
    params: ScoringParams, batch: RecallBatch, signal_mask: Any = None,
    adapter: QueryAdapter | None = None,
) -> jax.Array:
    """Pass-2 totals of every candidate of every query.

    Args:
        params: scoring parameters.
        batch: the recall batch (with ``lexical`` statistics, s7 is scored too; with
            ``context`` neighbours as well, s8).
        signal_mask: optional (6,) ablation mask (7 entries with lexical statistics,
            8 with neighbours too).
        adapter: optional query adapter: s1 is then the cosine of the adapted query
            embeddings with the candidates' (the batch must hold its embeddings,
            ``build_recall_batch(..., embeddings=True)``); None: ``batch.semantic``.

    Returns:
        (Q, C) totals; padding candidates get a very negative score.
    """
    semantic = batch.semantic
    if adapter is not None:
        if batch.query.embedding.shape[-1] == 0:
            raise ValueError(
                "the adapter needs the batch's embeddings: build_recall_batch(..., "
                "embeddings=True)"
            )
        adapted = adapt_query(adapter, batch.query.embedding)
        semantic = jax.vmap(bank_cosine)(adapted, batch.columns.embedding)

    def one(query: Any, columns: Any, semantic: Any, lexical: Any, context: Any) -> Any:
        return score_given_semantic(
            params, query, columns, semantic, signal_mask, lexical, context
        ).totals

    totals = jax.vmap(one)(batch.query, batch.columns, semantic, batch.lexical,
                           batch.context)
    return jnp.where(batch.columns.valid, totals, _NEG)


_batch_scores_jit = eqx.filter_jit(batch_scores)


def evaluate_batch(
    params: ScoringParams, batch: RecallBatch, config: EmotionalMemoryConfig | None = None
) -> np.ndarray:
    """Float64 pass-2 totals (Q, C) of ``batch`` under ``params`` (compiled).

    Args:
        params: scoring parameters.
        batch: recall batch.
        config: supplies the ablation mask (default: all signals on) and the query
            adapter (``retrieval.query_adapter``; the batch then needs its embeddings).

    Returns:
        (Q, C) numpy totals.
    """
    cfg = config or EmotionalMemoryConfig()
    batch = batch_for(batch, cfg)
    mask = batch_signal_mask(cfg, batch)
    spec = cfg.retrieval.query_adapter
    with float64():
        adapter = None if spec is None else QueryAdapter(
            *(jnp.asarray(f) for f in spec.factors())
        )
        return np.asarray(_batch_scores_jit(
            jax.tree_util.tree_map(jnp.asarray, params),
            jax.tree_util.tree_map(jnp.asarray, batch),
            jnp.asarray(mask, jnp.float64), adapter,
        ))


def batch_signal_mask(config: EmotionalMemoryConfig, batch: RecallBatch) -> list[float]:
    """The ablation mask for scoring ``batch``: 7 entries when it has lexical statistics,
    8 when it has neighbours too (s8 always on).

    Args:
        config: supplies the six switches (and ``enable_lexical``).
        batch: the recall batch.

    Returns:
        The mask as a list of floats.
    """
    mask = config.signal_mask()
    if batch.lexical is not None:
        mask.append(1.0 if config.enable_lexical else 0.0)
        if batch.context is not None:
            mask.append(1.0)
    return mask


def batch_for(
    batch: RecallBatch, config: EmotionalMemoryConfig, trainable: Iterable[str] = ()
) -> RecallBatch:
    """``batch`` as a model scores it: its neighbours only when the model uses s8.

    A model without the context signal (``context_weight`` 0 and the ``context`` group
    not trained) scores six (or seven) signals, as the engine does, even on a batch
    captured with neighbours.

    Args:
        batch: the recall batch.
        config: the model's configuration.
        trainable: the groups a fit trains.

    Returns:
        ``batch``, or a copy without ``context``.
    """
    if batch.context is None or config.retrieval.context_on or "context" in tuple(trainable):
        return batch
    return dataclasses.replace(batch, context=None)


def listwise_loss(totals: Any, labels: Any, valid: Any, temperature: Any) -> jax.Array:
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
        Dict with ``top1``, ``hit_at_k``, ``mrr`` (NaN when the mask is empty),
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


@dataclass
class FitResult:
    """Outcome of :func:`fit`.

    Attributes:
        config: the fitted engine configuration (load it with ``model_validate_json``).
        params: fitted float64 ScoringParams.
        history: per-step ``train_loss`` and ``val_loss`` lists.
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
    selection: dict[str, Any] = field(default_factory=dict)


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


def config_with_params(
    base: EmotionalMemoryConfig, params: ScoringParams
) -> EmotionalMemoryConfig:
    """``base`` with the scoring parameters replaced (retrieval + decay configs).

    Args:
        base: Configuration providing every non-scoring field.
        params: Fitted scoring parameters.

    Returns:
        A copy of ``base`` with validated ``retrieval`` and ``decay`` configs.
    """
    retrieval, decay = params_to_config(params, base.retrieval, base.decay)
    return base.model_copy(update={"retrieval": retrieval, "decay": decay})


class _Problem(eqx.Module):
    """Everything a training step needs, as arrays (so one compiled step serves all fits)."""

    base: ScoringParams
    kinds: dict[str, Any]
    initial: dict[str, Any]
    data: RecallBatch
    fit_weight: Any
    val_weight: Any
    signal_mask: Any
    temperature: Any
    l2: Any
    adapter_l2: Any


def _per_query(u: dict[str, Any], p: _Problem) -> tuple[jax.Array, jax.Array]:
    totals = batch_scores(constrained_params(p.base, p.kinds, u), p.data, p.signal_mask,
                          adapter_of(u))
    per_query = listwise_loss(totals, p.data.labels, p.data.columns.valid, p.temperature)
    return per_query, totals


def _weighted_mean(values: jax.Array, weight: jax.Array) -> jax.Array:
    return jnp.sum(values * weight) / jnp.maximum(jnp.sum(weight), 1.0)


def _objective(u: dict[str, Any], p: _Problem) -> tuple[jax.Array, jax.Array]:
    """Training objective, with the per-query losses as auxiliary output."""
    per_query, _ = _per_query(u, p)
    prior = (p.l2 * l2_penalty(u, p.initial, adapter=False)
             + p.adapter_l2 * l2_penalty(u, p.initial, adapter=True))
    return _weighted_mean(per_query, p.fit_weight) + prior, per_query


_OPTIMIZER = optax.inject_hyperparams(optax.adam)(learning_rate=0.0)
"""Adam whose learning rate lives in the optimiser state, so one compiled training
step serves every fit and every step of a schedule (set on the host per step)."""


def lr_schedule(peak: float, steps: int, floor: float = 0.05) -> optax.Schedule:
    """The learning-rate schedule of :func:`fit`: cosine decay from ``peak`` to
    ``floor * peak`` over ``steps`` (:func:`optax.cosine_decay_schedule`).

    Args:
        peak: initial (peak) learning rate.
        steps: decay steps (at least 1 is used).
        floor: final fraction of the peak.

    Returns:
        An optax schedule ``step -> learning rate``.
    """
    return optax.cosine_decay_schedule(peak, decay_steps=max(steps, 1), alpha=floor)


_RUN_AXES_OF: dict[str, Any] = {  # None: shared by every run; 0: the run axis
    "base": None, "kinds": None, "initial": None, "data": None, "fit_weight": 0,
    "val_weight": 0, "signal_mask": None, "temperature": 0, "l2": 0, "adapter_l2": None,
}
_RUN_AXES = _Problem(**_RUN_AXES_OF)
"""``vmap`` axes of a batch of runs: per run its query split, temperature and L2; the
data, starting point and constraints shared."""


class _Runs(eqx.Module):
    """The state of G training runs stepped together (leading axis G everywhere).

    Attributes:
        u: the current unconstrained parameters.
        opt_state: the optimiser state.
        last_good: the parameters of the last step whose training loss was finite.
        best_u: the parameters with the best validation loss so far.
        best_val: (G,) that loss (inf before the first step).
        since_best: (G,) steps since it last improved.
        best_step: (G,) the step it was reached at.
        active: (G,) runs still stepping (not stopped early, not diverged).
    """

    u: dict[str, Any]
    opt_state: Any
    last_good: dict[str, Any]
    best_u: dict[str, Any]
    best_val: jax.Array
    since_best: jax.Array
    best_step: jax.Array
    active: jax.Array


def _where(mask: jax.Array, a: Any, b: Any) -> Any:
    """Per run: the tree ``a`` where ``mask`` (G,) is true, else ``b``."""
    return jax.tree_util.tree_map(
        lambda x, y: jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - 1)), x, y), a, b
    )


def _one_step(
    u: dict[str, Any], opt_state: Any, p: _Problem
) -> tuple[dict[str, Any], Any, jax.Array, jax.Array]:
    """One Adam step of one run: the new parameters and state, the training loss and
    the validation loss, both of ``u`` (the parameters before the update)."""
    (value, per_query), grads = jax.value_and_grad(_objective, has_aux=True)(u, p)
    updates, opt_state = _OPTIMIZER.update(grads, opt_state, u)
    val_loss = _weighted_mean(per_query, p.val_weight)
    return optax.apply_updates(u, updates), opt_state, value, val_loss


@eqx.filter_jit
def _train_step(
    runs: _Runs, p: _Problem, has_val: jax.Array, learning_rate: jax.Array,
    step: jax.Array, patience: jax.Array,
) -> tuple[_Runs, jax.Array, jax.Array]:
    """One step of every active run, with its early-stopping bookkeeping, compiled once
    per problem shape and number of runs (the rates, step and patience are operands).

    A run whose training loss is not finite falls back to its last finite-loss
    parameters and stops; a run with validation queries keeps its best parameters and
    stops after ``patience`` steps without improving by more than 1e-9. Stopped runs
    are carried unchanged.

    Args:
        runs: the state of the G runs.
        p: the problem, per-run leaves batched along :data:`_RUN_AXES`.
        has_val: (G,) runs with validation queries.
        learning_rate: () this step's rate (one schedule for every run).
        step: () the step index.
        patience: () early-stopping patience.

    Returns:
        ``(runs, train_loss, val_loss)``: the new state and the (G,) losses of the
        parameters before the update.
    """
    opt_state = runs.opt_state
    opt_state.hyperparams["learning_rate"] = jnp.broadcast_to(
        learning_rate, runs.active.shape
    )
    new_u, new_opt, train_loss, val_loss = jax.vmap(_one_step, in_axes=(0, 0, _RUN_AXES))(
        runs.u, opt_state, p
    )
    finite = jnp.isfinite(train_loss)
    stepping = runs.active & finite
    diverged = runs.active & ~finite  # back to the last finite-loss parameters
    u = _where(diverged, runs.last_good, runs.u)
    improved = stepping & has_val & (val_loss < runs.best_val - 1e-9)
    since_best = jnp.where(improved, 0, runs.since_best + (stepping & has_val))
    out = _Runs(
        u=_where(stepping, new_u, u),
        opt_state=_where(stepping, new_opt, opt_state),
        last_good=_where(stepping, u, runs.last_good),
        best_u=_where(improved, u, runs.best_u),
        best_val=jnp.where(improved, val_loss, runs.best_val),
        since_best=since_best,
        best_step=jnp.where(improved, step, runs.best_step),
        active=stepping & ~(has_val & (since_best > patience)),
    )
    return out, train_loss, val_loss


@dataclass
class _Trained:
    """One run's outcome: its kept parameters, the step they come from, its history."""

    u: dict[str, np.ndarray]
    best_step: int
    history: dict[str, list[float]]


def _train(
    reparam: Reparam,
    problem: _Problem,
    has_val: np.ndarray,
    learning_rate: float,
    steps: int,
    patience: int,
    progress: bool = False,
) -> list[_Trained]:
    """Run G fits of one problem together (vmapped), each with its own early stopping.

    Call inside :func:`~emotional_memory._precision.float64`.

    Args:
        reparam: the parametrisation (every run starts at its initial point).
        problem: the problem with per-run leaves batched along :data:`_RUN_AXES`.
        has_val: (G,) runs with validation queries (others keep their last step).
        learning_rate: peak learning rate of :func:`lr_schedule`.
        steps: maximum steps.
        patience: early-stopping patience.
        progress: draw a progress bar.

    Returns:
        Per run, its kept parameters (unconstrained, host), best step and history.
    """
    g = len(has_val)
    u0 = {k: jnp.broadcast_to(jnp.asarray(v), (g, *v.shape)) for k, v in reparam.init().items()}
    opt_state = jax.vmap(_OPTIMIZER.init)(u0)
    # the rate as the step returns it (strongly typed), so the first step's state and
    # every later one have one signature: one compilation
    opt_state.hyperparams["learning_rate"] = jnp.zeros(g, jnp.float64)
    runs = _Runs(
        u=u0, opt_state=opt_state, last_good=u0, best_u=u0,
        best_val=jnp.full(g, jnp.inf, jnp.float64), since_best=jnp.zeros(g, jnp.int32),
        best_step=jnp.zeros(g, jnp.int32), active=jnp.ones(g, bool),
    )
    with_val = jnp.asarray(has_val)
    schedule = lr_schedule(learning_rate, steps)
    histories: list[dict[str, list[float]]] = [
        {"train_loss": [], "val_loss": []} for _ in range(g)
    ]
    for i in progress_iter(range(steps), "fit", enabled=progress):
        was_active = np.asarray(runs.active)
        if not was_active.any():
            break
        runs, train_loss, val_loss = _train_step(
            runs, problem, with_val, jnp.asarray(schedule(i), jnp.float64),
            jnp.asarray(i, jnp.int32), jnp.asarray(_patience_steps(patience), jnp.int32),
        )
        losses = np.asarray(train_loss), np.asarray(val_loss)
        for r in np.flatnonzero(was_active & np.isfinite(losses[0])).tolist():
            histories[r]["train_loss"].append(float(losses[0][r]))
            histories[r]["val_loss"].append(float(losses[1][r]))
    best_step = np.asarray(runs.best_step)
    out = []
    for r in range(g):
        kept = runs.best_u if has_val[r] else runs.u  # no validation: the last step
        out.append(_Trained(
            u={k: np.asarray(v[r]) for k, v in kept.items()},
            best_step=int(best_step[r]) if has_val[r] else len(histories[r]["train_loss"]),
            history=histories[r],
        ))
    return out


def _problem(
    reparam: Reparam, batch: RecallBatch, cfg: EmotionalMemoryConfig,
    splits: Sequence[tuple[np.ndarray, np.ndarray]], temperature: Sequence[float],
    l2: Sequence[float], adapter_l2: float = 0.0,
) -> _Problem:
    """The problem of G runs: per run a (fit, validation) query split, a temperature and
    an L2 weight (leading axis G). Call inside ``float64()``."""
    return _Problem(
        base=jax.tree_util.tree_map(jnp.asarray, reparam.base),
        kinds={k: jnp.asarray(v) for k, v in reparam.kinds.items()},
        initial={k: jnp.asarray(v) for k, v in reparam.initial.items()},
        data=jax.tree_util.tree_map(jnp.asarray, batch),
        fit_weight=jnp.asarray(np.stack([f for f, _ in splits]), jnp.float64),
        val_weight=jnp.asarray(np.stack([v for _, v in splits]), jnp.float64),
        signal_mask=jnp.asarray(batch_signal_mask(cfg, batch), jnp.float64),
        temperature=jnp.asarray(temperature, jnp.float64),
        l2=jnp.asarray(l2, jnp.float64),
        adapter_l2=jnp.asarray(adapter_l2, jnp.float64),
    )


def _patience_steps(patience: float) -> int:
    """``patience`` as the int32 the compiled step compares with: a run stops once it
    has gone more than ``floor(patience)`` steps without improving (any number: an
    infinite or huge patience never stops a run early)."""
    limit = np.iinfo(np.int32)
    if patience >= limit.max:
        return int(limit.max)
    if patience <= limit.min:
        return int(limit.min)
    return math.floor(patience)


def _check_fit_args(temperature: float, l2: float, steps: int, val_fraction: float) -> None:
    if temperature <= 0 or not math.isfinite(temperature):
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if l2 < 0 or not math.isfinite(l2):
        raise ValueError(f"l2 must be >= 0, got {l2}")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction must lie in [0, 1), got {val_fraction}")


_RUN_KEYS = frozenset({"l2", "temperature", "train_mask"})


def _run_settings(batch: RecallBatch, run: Any) -> tuple[float, float, np.ndarray]:
    """``(l2, temperature, available)`` of one :func:`fit_many` run, checked."""
    if not isinstance(run, Mapping):
        raise TypeError(f"each run must be a dict, got {type(run).__name__}")
    unknown = set(run) - _RUN_KEYS
    if unknown:
        raise ValueError(
            f"unknown run setting(s) {sorted(unknown)}; a run sets {sorted(_RUN_KEYS)}"
        )
    mask = run.get("train_mask")
    available = np.ones(batch.n_queries, bool) if mask is None else np.asarray(mask, bool)
    if available.shape != (batch.n_queries,):
        raise ValueError(
            f"train_mask must have shape ({batch.n_queries},), got {available.shape}"
        )
    return float(run.get("l2", 0.01)), float(run.get("temperature", 0.05)), available


@eqx.filter_jit
def _scores(u: dict[str, Any], p: _Problem) -> jax.Array:
    return _per_query(u, p)[1]


def _split(
    batch: RecallBatch, available: np.ndarray, val_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    scen = np.asarray(batch.scenario)
    train_scen = np.unique(scen[available])
    n_val = round(val_fraction * len(train_scen))
    if 0 < n_val >= len(train_scen):
        n_val = len(train_scen) - 1
    rng = np.random.default_rng(seed)
    val_scen = rng.choice(train_scen, size=n_val, replace=False) if n_val else np.array([])
    val_mask = available & np.isin(scen, val_scen)
    return available & ~val_mask, val_mask


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
    adapter_rank: int = 16,
    adapter_l2: float = 0.1,
) -> FitResult:
    """Fit the selected parameter groups to the batch.

    Args:
        batch: labelled recall batch (from :func:`build_recall_batch`).
        info: its metadata.
        config: starting configuration (default: SPEC defaults); also the prior.
        trainable: groups from :data:`emotional_memory.learn.params.GROUPS`.
        temperature: softmax temperature of the listwise loss.
        l2: weight of the L2 pull towards the starting parameters.
        learning_rate: Adam peak learning rate (:func:`lr_schedule` over ``steps``).
        steps: maximum optimisation steps.
        patience: early-stopping patience (steps without validation improvement).
        val_fraction: share of the training scenarios held out for early stopping
            (0 disables early stopping: the last step is kept).
        train_mask: (Q,) queries available for fitting (default: all).
        seed: split seed (and of the adapter's random starting factor).
        progress: draw a progress bar.
        adapter_rank: rank of a new query adapter (``adapter`` group; capped at D;
            a config that has an adapter starts from it).
        adapter_l2: weight of the adapter factors' L2 pull to their start (the
            identity map).

    Returns:
        :class:`FitResult` (with the ``adapter`` group, ``config.retrieval.
        query_adapter`` holds the fitted factors).
    """
    cfg = config if config is not None else EmotionalMemoryConfig()
    _check_fit_args(temperature, l2, steps, val_fraction)
    _check_adapter_args(adapter_rank, adapter_l2)
    available = (
        np.ones(batch.n_queries, bool) if train_mask is None else np.asarray(train_mask, bool)
    )
    fit_mask, val_mask = _split(batch, available, val_fraction, seed)
    trainable = tuple(trainable)
    batch = batch_for(batch, cfg, trainable)
    reparam = _reparam(cfg, trainable, batch, adapter_rank, seed)
    with float64():
        batched = _problem(reparam, batch, cfg, [(fit_mask, val_mask)], [temperature], [l2],
                           adapter_l2)
        (trained,) = _train(reparam, batched, np.asarray([val_mask.any()]), learning_rate,
                            steps, patience, progress)
        exported = reparam.export(trained.u)
        problem = eqx.tree_at(  # the one run, without the run axis
            lambda q: (q.fit_weight, q.val_weight, q.temperature, q.l2), batched,
            (batched.fit_weight[0], batched.val_weight[0], batched.temperature[0],
             batched.l2[0]),
        )
        u0 = {k: jnp.asarray(v) for k, v in reparam.init().items()}
        best_u = {k: jnp.asarray(v) for k, v in trained.u.items()}
        initial_totals = np.asarray(_scores(u0, problem))
        final_totals = np.asarray(_scores(best_u, problem))
    lab, val = np.asarray(batch.labels), np.asarray(batch.columns.valid)
    per_final = ranking_metrics(final_totals, lab, val, info.top_k)
    per_init = ranking_metrics(initial_totals, lab, val, info.top_k)
    return FitResult(
        config=_export_config(cfg, exported, trained.u),
        params=exported,
        history=trained.history,
        best_step=trained.best_step,
        train_metrics=summarize_metrics(per_final, fit_mask, batch, info),
        val_metrics=summarize_metrics(per_final, val_mask, batch, info),
        initial_metrics=summarize_metrics(per_init, available, batch, info),
    )


def fit_many(
    batch: RecallBatch,
    config: EmotionalMemoryConfig | None,
    runs: Sequence[dict[str, Any]],
    *,
    trainable: Iterable[str] = ("base_weights", "gates"),
    learning_rate: float = 0.05,
    steps: int = 400,
    patience: int = 60,
    val_fraction: float = 0.2,
    seed: int = 0,
    progress: bool = False,
    adapter_rank: int = 16,
    adapter_l2: float = 0.1,
) -> list[ScoringParams]:
    """Several :func:`fit` runs of one batch trained together, vmapped into one program.

    Each run has its own ``l2``, ``temperature`` and ``train_mask`` (so its own
    validation split and early stopping); they share the data, the starting point, the
    trainable groups and the schedule. One compiled step serves them all, which is
    what a hyperparameter grid over cross-validation folds needs.

    Args:
        batch: labelled recall batch.
        config: starting configuration (default: SPEC defaults); also the prior.
        runs: per run a dict with any of ``l2``, ``temperature`` and ``train_mask``
            (as :func:`fit`'s arguments; defaults as there).
        trainable, learning_rate, steps, patience, val_fraction, seed, progress,
            adapter_rank, adapter_l2: as :func:`fit`, for every run.

    Returns:
        Per run, the fitted float64 parameters (what :func:`fit` returns as
        ``params`` for the same arguments, up to floating-point rounding); the
        adapter, when trained, is in :func:`fit_many_configs`' configs.

    Raises:
        ValueError: on an invalid or unknown setting of any run, or no run (nothing
            is trained then).
        TypeError: when a run is not a dict.
    """
    return [params for params, _ in _fit_many(
        batch, config, runs, trainable=trainable, learning_rate=learning_rate, steps=steps,
        patience=patience, val_fraction=val_fraction, seed=seed, progress=progress,
        adapter_rank=adapter_rank, adapter_l2=adapter_l2,
    )]


def fit_many_configs(
    batch: RecallBatch,
    config: EmotionalMemoryConfig | None,
    runs: Sequence[dict[str, Any]],
    **kwargs: Any,
) -> list[EmotionalMemoryConfig]:
    """:func:`fit_many`, returning each run's fitted configuration (with its adapter).

    Args:
        batch, config, runs: as :func:`fit_many`.
        **kwargs: :func:`fit_many`'s keyword arguments.

    Returns:
        Per run, the fitted :class:`EmotionalMemoryConfig`.
    """
    return [cfg for _, cfg in _fit_many(batch, config, runs, **kwargs)]


def _fit_many(
    batch: RecallBatch,
    config: EmotionalMemoryConfig | None,
    runs: Sequence[dict[str, Any]],
    *,
    trainable: Iterable[str] = ("base_weights", "gates"),
    learning_rate: float = 0.05,
    steps: int = 400,
    patience: int = 60,
    val_fraction: float = 0.2,
    seed: int = 0,
    progress: bool = False,
    adapter_rank: int = 16,
    adapter_l2: float = 0.1,
) -> list[tuple[ScoringParams, EmotionalMemoryConfig]]:
    cfg = config if config is not None else EmotionalMemoryConfig()
    if not len(runs):
        raise ValueError("runs must hold at least one run")
    settings = [_run_settings(batch, run) for run in runs]
    for l2, temperature, _ in settings:
        _check_fit_args(temperature, l2, steps, val_fraction)
    _check_adapter_args(adapter_rank, adapter_l2)
    splits = [_split(batch, available, val_fraction, seed) for _, _, available in settings]
    trainable = tuple(trainable)
    batch = batch_for(batch, cfg, trainable)
    reparam = _reparam(cfg, trainable, batch, adapter_rank, seed)
    with float64():
        problem = _problem(
            reparam, batch, cfg, splits, [t for _, t, _ in settings], [l2 for l2, _, _ in settings],
            adapter_l2,
        )
        has_val = np.asarray([val.any() for _, val in splits])
        trained = _train(reparam, problem, has_val, learning_rate, steps, patience, progress)
        out = []
        for t in trained:
            params = reparam.export(t.u)
            out.append((params, _export_config(cfg, params, t.u)))
        return out


def _check_adapter_args(rank: int, l2: float) -> None:
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer) or rank < 1:
        raise ValueError(f"adapter_rank must be an int >= 1, got {rank!r}")
    if l2 < 0 or not math.isfinite(l2):
        raise ValueError(f"adapter_l2 must be >= 0, got {l2}")


def _reparam(
    cfg: EmotionalMemoryConfig, trainable: Iterable[str], batch: RecallBatch, rank: int,
    seed: int,
) -> Reparam:
    """The parametrisation of a fit: the config's parameters and, with the ``adapter``
    group, the config's adapter or a new identity one of ``rank`` (capped at D)."""
    groups = tuple(trainable)
    start = None
    if "adapter" in groups:
        dim = int(np.shape(batch.query.embedding)[-1])
        if dim == 0:
            raise ValueError(
                "the adapter group needs the batch's embeddings: build_recall_batch(..., "
                "embeddings=True)"
            )
        spec = cfg.retrieval.query_adapter
        if spec is not None:
            if spec.dim != dim:
                raise ValueError(
                    f"retrieval.query_adapter.dim is {spec.dim}, the batch's embeddings "
                    f"have {dim}"
                )
            start = spec.factors()
        else:
            start = initial_adapter(dim, min(rank, dim), seed)
    return Reparam(params_from_config(cfg.retrieval, cfg.decay), groups, adapter=start)


def _export_config(
    cfg: EmotionalMemoryConfig, params: ScoringParams, u: Mapping[str, Any]
) -> EmotionalMemoryConfig:
    """The fitted config: ``cfg`` with ``params`` and, when trained, the adapter."""
    out = config_with_params(cfg, params)
    adapter = adapter_of(dict(u))
    if adapter is None:
        return out
    spec = QueryAdapterConfig.from_factors(np.asarray(adapter.left), np.asarray(adapter.right))
    return out.model_copy(update={
        "retrieval": out.retrieval.model_copy(update={"query_adapter": spec})
    })


DEFAULT_GRID: dict[str, tuple[float, ...]] = {
    "l2": (0.001, 0.01, 0.1),
    "temperature": (0.05, 0.2),
}
"""Hyperparameter grid searched by :func:`fit_auto` (inner scenario-grouped CV)."""


def _inner_folds(
    batch: RecallBatch, train_mask: np.ndarray | None, folds: int, seed: int
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Inner CV groups: the available queries' scenarios split into ``folds`` parts.

    Returns:
        ``(available, scenario, parts)``: (Q,) available mask, (Q,) scenario index,
        and the sorted scenario indices of each part.
    """
    available = (
        np.ones(batch.n_queries, bool) if train_mask is None else np.asarray(train_mask, bool)
    )
    scen = np.asarray(batch.scenario)
    pool = np.unique(scen[available])
    perm = np.random.default_rng(seed).permutation(pool)
    return available, scen, [np.sort(p) for p in np.array_split(perm, min(folds, len(pool)))]


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
        **fit_kwargs: other :func:`fit` arguments (``trainable``, ``steps``, ...).

    Returns:
        ``(best, table)``: the chosen values and one row per grid point.
    """
    g = {**DEFAULT_GRID, **(grid or {})}
    available, scen, parts = _inner_folds(batch, train_mask, folds, seed + 1)
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
    """
    if "adapter" not in tuple(fit_kwargs.get("trainable", ())):
        raise ValueError("select_adapter needs trainable groups that hold 'adapter'")
    g = {**ADAPTER_GRID, **(grid or {})}
    available, scen, parts = _inner_folds(batch, train_mask, folds, seed + 3)
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
        config: Starting configuration (default: SPEC defaults).
        grid: ``{"l2": [...], "temperature": [...]}`` (default :data:`DEFAULT_GRID`).
        inner_folds: Inner cross-validation folds (>= 2).
        train_mask: (Q,) queries available (default: all).
        seed: Fold and split seed.
        **fit_kwargs: Other :func:`fit` arguments (``trainable``, ``steps``, ...).

    Returns:
        The :class:`FitResult`; ``result.selection`` holds the chosen values and table.
    """
    best, table = select_hyperparameters(
        batch, info, config, grid=grid, folds=inner_folds, train_mask=train_mask, seed=seed,
        **fit_kwargs,
    )
    result = fit(batch, info, config, train_mask=train_mask, seed=seed, l2=best["l2"],
                 temperature=best["temperature"], **fit_kwargs)
    result.selection = {"chosen": best, "table": table}
    return result


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


def semantic_only_config(config: EmotionalMemoryConfig) -> EmotionalMemoryConfig:
    """``config`` ranking by cosine alone: weights (1, 0, ..., 0), no mood gates, no s7.

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
        "lexical_weight": 0.0, "query_classifier": None,
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
    are kept fixed).

    Args:
        batch: the recall batch (with lexical statistics, the lexical models compete).
        info: its metadata.
        config: the starting configuration (default: SPEC defaults).
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
        **fit_kwargs: other :func:`fit` arguments (``steps``, ``l2``, ...).

    Returns:
        The :class:`FitResult` of the chosen model; ``result.selection`` holds
        ``{"chosen": name, "table": [...]}`` (and ``"hyperparameters"`` when tuned,
        ``"adapter"`` when the adapter's rank and pull were chosen).
    """
    cfg = config if config is not None else EmotionalMemoryConfig()
    if folds < 2:
        raise ValueError(f"folds must be >= 2, got {folds}")
    if select_by not in ("mrr", "top1"):
        raise ValueError(f"select_by must be 'mrr' or 'top1', got {select_by!r}")
    extra = dict(analysis_batches or {})
    for name, other in extra.items():
        if other.n_queries != batch.n_queries or not np.array_equal(
            np.asarray(other.scenario), np.asarray(batch.scenario)
        ):
            raise ValueError(
                f"analysis_batches[{name!r}] must hold the batch's queries in its order"
            )
    chosen_hyper: dict[str, Any] | None = None
    available, scen, parts = _inner_folds(batch, train_mask, folds, seed + 7)
    models = candidate_models(cfg, batch.lexical is not None, analyses=tuple(extra),
                              adapter=adapter, context=batch.context is not None)

    def batch_of(name: str) -> RecallBatch:
        analysis = _analysis_of(name)
        return batch if analysis is None else extra[analysis]

    table: list[dict[str, Any]] = []
    for name, (start, trainable) in progress_iter(list(models.items()), "select",
                                                 enabled=progress):
        data = batch_of(name)
        lab, val = np.asarray(data.labels), np.asarray(data.columns.valid)
        top1 = np.zeros(batch.n_queries)
        rr = np.zeros(batch.n_queries)
        hit = np.zeros(batch.n_queries)
        for held in parts:
            held_mask = available & np.isin(scen, held)
            scored = start
            if trainable is not None and len(parts) >= 2:
                scored = fit(data, info, start, trainable=trainable, seed=seed,
                             train_mask=available & ~held_mask, **fit_kwargs).config
            params = params_from_config(scored.retrieval, scored.decay)
            per = ranking_metrics(evaluate_batch(params, data, scored), lab, val, info.top_k)
            top1[held_mask] = per["top1"][held_mask]
            rr[held_mask] = per["rr"][held_mask]
            hit[held_mask] = per["hit_at_k"][held_mask]
        table.append({"model": name, "top1": float(top1[available].mean()),
                      "mrr": float(rr[available].mean()),
                      "hit_at_k": float(hit[available].mean())})
    first, second = ("top1", "mrr") if select_by == "top1" else ("mrr", "top1")
    best = max(enumerate(table), key=lambda it: (round(it[1][first], 9),
                                                 round(it[1][second], 9), -it[0]))[1]
    start, trainable = models[best["model"]]
    data = batch_of(best["model"])
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
    result.selection = {"chosen": best["model"], "table": table}
    if adapter_choice is not None:
        result.selection["adapter"] = adapter_choice
    if chosen_hyper is not None:
        result.selection["hyperparameters"] = chosen_hyper
    return result
