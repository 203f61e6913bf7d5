"""Fitting the scoring model to labelled recall data with optax.

The loss is listwise (:func:`~emotional_memory.learn.losses.listwise_loss`) plus an L2
pull of the unconstrained parameters towards their starting point (a prior). Several
runs of one batch train together, vmapped into one compiled Adam step, each with early
stopping on a scenario-grouped validation split.
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
from emotional_memory._validation import instance, non_negative_int, strict_finite
from emotional_memory.engine import EmotionalMemoryConfig
from emotional_memory.kernel import ScoringParams
from emotional_memory.learn.losses import (
    CompactRows,
    batch_for,
    batch_scores,
    batch_signal_mask,
    checked_inputs,
    checked_shapes,
    compact_rows,
    listwise_loss,
    scored_groups,
    unrouted,
)
from emotional_memory.learn.metrics import ranking_metrics, summarize_metrics
from emotional_memory.learn.params import (
    ADAPTER_LEAVES,
    Reparam,
    adapter_of,
    constrained_params,
    initial_adapter,
    l2_penalty,
)
from emotional_memory.learn.recall_batch import RecallBatch, RecallInfo
from emotional_memory.retrieval import QueryAdapterConfig
from emotional_memory.scoring_config import params_from_config, params_to_config


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


def config_with_params(
    base: EmotionalMemoryConfig, params: ScoringParams
) -> EmotionalMemoryConfig:
    """``base`` with the scoring parameters replaced (retrieval + decay configs).

    ``base``'s relevance calibration is left out: it maps ``base``'s scores, not
    these parameters' (:func:`~emotional_memory.learn.select_model` with
    ``calibrate=True`` fits one for them).

    Args:
        base: Configuration providing every non-scoring field.
        params: Fitted scoring parameters.

    Returns:
        A copy of ``base`` with validated ``retrieval`` and ``decay`` configs.
    """
    retrieval, decay = params_to_config(params, base.retrieval, base.decay)
    retrieval = retrieval.model_copy(update={"relevance_calibration": None})
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
    compact: CompactRows | None = None


def _per_query(u: dict[str, Any], p: _Problem) -> tuple[jax.Array, jax.Array]:
    totals = batch_scores(constrained_params(p.base, p.kinds, u), p.data, p.signal_mask,
                          adapter_of(u), p.compact)
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
    "compact": None,
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


@eqx.filter_jit
def _run_losses(u: dict[str, Any], p: _Problem) -> jax.Array:
    """(G,) training objective of each run at ``u`` (leading axis G)."""
    return jax.vmap(lambda u, p: _objective(u, p)[0], in_axes=(0, _RUN_AXES))(u, p)


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
    stepped = np.asarray([len(h["train_loss"]) > 0 for h in histories])
    last, fell_back = _last_checked(runs, problem, has_val, stepped)
    out = []
    for r in range(g):
        kept = runs.best_u if has_val[r] else last  # no validation: the last step
        n = len(histories[r]["train_loss"])
        out.append(_Trained(
            u={k: np.asarray(v[r]) for k, v in kept.items()},
            best_step=int(best_step[r]) if has_val[r] else max(n - int(fell_back[r]), 0),
            history=histories[r],
        ))
    return out


def _last_checked(
    runs: _Runs, problem: _Problem, has_val: np.ndarray, stepped: np.ndarray
) -> tuple[dict[str, Any], np.ndarray]:
    """The parameters a run without validation queries keeps: its last ones, unless
    their loss is not finite (the last update overflowed, or a NaN gradient made them
    NaN: nothing evaluated them yet), then the last ones whose loss was.

    Returns:
        ``(u, fell_back)``: the (G, ...) parameters, and (G,) the runs that fell back
        (at the last step or earlier, when they diverged).
    """
    stopped = ~np.asarray(runs.active)  # a run without validation stops only diverging
    check = ~has_val & ~stopped & stepped
    if not check.any():
        return runs.u, stopped
    bad = check & ~np.isfinite(np.asarray(_run_losses(runs.u, problem)))
    return _where(jnp.asarray(bad), runs.last_good, runs.u), stopped | bad


def _problem(
    reparam: Reparam, batch: RecallBatch, cfg: EmotionalMemoryConfig,
    splits: Sequence[tuple[np.ndarray, np.ndarray]], temperature: Sequence[float],
    l2: Sequence[float], adapter_l2: float = 0.0,
) -> _Problem:
    """The problem of G runs: per run a (fit, validation) query split, a temperature and
    an L2 weight (leading axis G). Call inside ``float64()``.

    With the adapter the candidates' embeddings travel as :class:`CompactRows` (each
    distinct row once) and the (Q, C, D) rows are dropped from the data."""
    compact = None
    if ADAPTER_LEAVES[0] in reparam.leaves:
        compact = jax.tree_util.tree_map(jnp.asarray, compact_rows(batch))
        q, c = batch.labels.shape
        batch = dataclasses.replace(batch, columns=dataclasses.replace(
            batch.columns, embedding=np.zeros((q, c, 0))
        ))
    return _Problem(
        compact=compact,
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


def _check_started(trained: Sequence[_Trained], steps: int) -> None:
    """Raise ``ValueError`` when a run could not take its first step: the loss at the
    starting parameters is not finite, so it would return them silently unfitted."""
    for r, t in enumerate(trained):
        if steps > 0 and not t.history["train_loss"]:
            run = f" (run {r})" if len(trained) > 1 else ""
            raise ValueError(
                f"the loss at the starting parameters is not finite{run}: the batch's "
                f"scores overflow (an input too large to square, e.g. a velocity or an "
                f"embedding near 1e155) or the starting config scales them to inf; "
                f"nothing was fitted"
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


def _check_fit_args(temperature: float, l2: float, steps: int, val_fraction: float,
                    learning_rate: float) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int | np.integer):
        raise TypeError(f"steps must be an int, got {steps!r}")
    if strict_finite("learning_rate", learning_rate) <= 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate}")
    if strict_finite("temperature", temperature) <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if strict_finite("l2", l2) < 0:
        raise ValueError(f"l2 must be >= 0, got {l2}")
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if not 0 <= strict_finite("val_fraction", val_fraction) < 1:
        raise ValueError(f"val_fraction must lie in [0, 1), got {val_fraction}")


def _check_run_args(patience: float, seed: int, progress: bool) -> None:
    """The arguments every run of a fit shares besides the numbers of
    :func:`_check_fit_args`: each named when it is not what :func:`fit` takes."""
    if isinstance(patience, bool | str | bytes) or not isinstance(
            patience, int | float | np.integer | np.floating):
        raise TypeError(f"patience must be a number, got {type(patience).__name__}")
    if math.isnan(patience):
        raise ValueError("patience must be a number of steps, got nan")
    non_negative_int("seed", seed)
    if not isinstance(progress, bool | np.bool_):
        raise TypeError(f"progress must be a bool, got {type(progress).__name__}")


def trainable_groups(trainable: Iterable[str]) -> tuple[str, ...]:
    """``trainable`` as a tuple of group names, checked to be names (a single string
    would be split into its letters).

    Raises:
        TypeError: a string, or a name that is not a string.
    """
    if isinstance(trainable, str | bytes):
        raise TypeError(f"trainable must be a sequence of group names, got the string "
                        f"{trainable!r} (write ({trainable!r},))")
    groups = tuple(trainable)
    for g in groups:
        if not isinstance(g, str):
            raise TypeError(f"trainable must hold group names (str), got {g!r}")
    return groups


def _checked_start(config: Any, info: Any = None, *, with_info: bool = False
                   ) -> EmotionalMemoryConfig:
    """The starting config (defaults for None); ``config`` and ``info`` named when
    they are not a config and a :class:`RecallInfo`, and a routing config refused."""
    instance("config", config, EmotionalMemoryConfig, optional=True)
    if with_info:
        instance("info", info, RecallInfo)
    return unrouted(config if config is not None else EmotionalMemoryConfig())


def available_queries(batch: RecallBatch, train_mask: Any) -> np.ndarray:
    """The (Q,) bool mask of the queries a fit may use, checked.

    Args:
        batch: the recall batch (Q queries).
        train_mask: a (Q,) bool mask, or None (all).

    Returns:
        The mask.

    Raises:
        TypeError: when it is not a bool mask (integer indices would read as a mask).
        ValueError: when its shape is not (Q,).
    """
    if train_mask is None:
        return np.ones(batch.n_queries, bool)
    mask = np.asarray(train_mask)
    if mask.dtype != bool:
        raise TypeError(f"train_mask must be a ({batch.n_queries},) bool mask, got dtype "
                        f"{mask.dtype}")
    if mask.shape != (batch.n_queries,):
        raise ValueError(f"train_mask must have shape ({batch.n_queries},), got {mask.shape}")
    return mask


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
    available = available_queries(batch, run.get("train_mask"))
    return (strict_finite("l2", run.get("l2", 0.01)),
            strict_finite("temperature", run.get("temperature", 0.05)), available)


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


def _has_val(batch: RecallBatch, val_masks: Sequence[np.ndarray]) -> np.ndarray:
    """(G,) runs whose validation queries can stop them early: some query with a
    relevant real candidate (without one the loss is 0 at every step, so the run
    would stop at once and keep its start)."""
    positive = (np.asarray(batch.labels) & np.asarray(batch.columns.valid)).any(axis=-1)
    return np.asarray([(val & positive).any() for val in val_masks])


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
        config: starting configuration (default: the defaults of docs/behaviour.md); also the prior.
        trainable: groups from :data:`emotional_memory.learn.params.GROUPS`.
        temperature: softmax temperature of the listwise loss.
        l2: weight of the L2 pull towards the starting parameters.
        learning_rate: Adam peak learning rate (:func:`lr_schedule` over ``steps``).
        steps: maximum optimisation steps.
        patience: early-stopping patience (steps without validation improvement).
        val_fraction: share of the training scenarios held out for early stopping
            (0, or held-out queries none of which has a relevant memory, disables
            early stopping: the last step is kept).
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

    Raises:
        TypeError, ValueError: an argument of the wrong type or out of range, named,
            before anything is trained (``trainable`` must be a sequence of names, not
            one string); a config that routes its base weights per query type
            (:func:`~emotional_memory.learn.losses.unrouted`); a malformed batch; a
            ``lexical`` or ``context`` group the batch does not score (no lexical
            statistics or neighbours), or ``adapter`` without its embeddings.
    """
    cfg = _checked_start(config, info, with_info=True)
    _check_fit_args(temperature, l2, steps, val_fraction, learning_rate)
    _check_run_args(patience, seed, progress)
    _check_adapter_args(adapter_rank, adapter_l2)
    trainable = trainable_groups(trainable)
    checked_shapes(batch)
    available = available_queries(batch, train_mask)
    if not available.any():
        raise ValueError("train_mask selects no query to fit")
    fit_mask, val_mask = _split(batch, available, val_fraction, seed)
    batch = checked_inputs(batch_for(batch, cfg, trainable))
    reparam = _reparam(cfg, trainable, batch, adapter_rank, seed)
    with float64():
        batched = _problem(reparam, batch, cfg, [(fit_mask, val_mask)], [temperature], [l2],
                           adapter_l2)
        (trained,) = _train(reparam, batched, _has_val(batch, [val_mask]), learning_rate,
                            steps, patience, progress)
        _check_started([trained], steps)
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
        config: starting configuration (default: the defaults of docs/behaviour.md); also the prior.
        runs: per run a dict with any of ``l2``, ``temperature`` and ``train_mask``
            (as :func:`fit`'s arguments; defaults as there).
        trainable, learning_rate, steps, patience, val_fraction, seed, progress,
            adapter_rank, adapter_l2: as :func:`fit`, for every run.

    Returns:
        Per run, the fitted float64 parameters (what :func:`fit` returns as
        ``params`` for the same arguments, up to floating-point rounding); the
        adapter, when trained, is in :func:`fit_many_configs`' configs.

    Raises:
        ValueError: on an invalid or unknown setting of any run, no run, or a group
            the batch does not score (as :func:`fit`; nothing is trained then).
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
    cfg = _checked_start(config)
    if not len(runs):
        raise ValueError("runs must hold at least one run")
    _check_run_args(patience, seed, progress)
    trainable = trainable_groups(trainable)
    checked_shapes(batch)
    settings = [_run_settings(batch, run) for run in runs]
    for i, (_, _, available) in enumerate(settings):
        if not available.any():  # fit refuses it; the run would return its start
            raise ValueError(f"runs[{i}]: train_mask selects no query to fit")
    for l2, temperature, _ in settings:
        _check_fit_args(temperature, l2, steps, val_fraction, learning_rate)
    _check_adapter_args(adapter_rank, adapter_l2)
    splits = [_split(batch, available, val_fraction, seed) for _, _, available in settings]
    batch = checked_inputs(batch_for(batch, cfg, trainable))
    reparam = _reparam(cfg, trainable, batch, adapter_rank, seed)
    with float64():
        problem = _problem(
            reparam, batch, cfg, splits, [t for _, t, _ in settings], [l2 for l2, _, _ in settings],
            adapter_l2,
        )
        has_val = _has_val(batch, [val for _, val in splits])
        trained = _train(reparam, problem, has_val, learning_rate, steps, patience, progress)
        _check_started(trained, steps)
        out = []
        for t in trained:
            params = reparam.export(t.u)
            out.append((params, _export_config(cfg, params, t.u)))
        return out


def _check_adapter_args(rank: int, l2: float) -> None:
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer) or rank < 1:
        raise ValueError(f"adapter_rank must be an int >= 1, got {rank!r}")
    if strict_finite("adapter_l2", l2) < 0:
        raise ValueError(f"adapter_l2 must be >= 0, got {l2}")


def _reparam(
    cfg: EmotionalMemoryConfig, trainable: Iterable[str], batch: RecallBatch, rank: int,
    seed: int,
) -> Reparam:
    """The parametrisation of a fit: the config's parameters and, with the ``adapter``
    group, the config's adapter or a new identity one of ``rank`` (capped at D)."""
    groups = tuple(trainable)
    scored_groups(groups, batch, cfg)
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
