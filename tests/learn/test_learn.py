"""The learning module (emotional_memory.learn): gradients, fits, capture, CV.

* Gradients of the fit objective are finite for every trainable leaf, on the v2
  capture and on a hand-built batch full of edge cases; autodiff matches finite
  differences at a smooth point.
* Fits on synthetic batches whose answer is known recover it; untrained parameters
  reproduce the SPEC defaults exactly; fitted configs round-trip through JSON and
  drive the real engine exactly as the batch forward predicts.
* The batch forward with default parameters reproduces the engine's replay metrics
  (this validates the capture); the train step compiles once per problem shape.
* Cross-validation by scenario, fold partitions and argument validation; the v2
  out-of-fold top-1 target (>= 0.72).
"""

from __future__ import annotations

import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from emotional_memory import EmotionalMemoryConfig
from emotional_memory.data import load_builtin_dataset
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.kernel import GateParams, MemoryColumns, QueryFeatures, ScoringParams
from emotional_memory.learn import (
    GROUPS,
    RecallBatch,
    RecallInfo,
    Reparam,
    batch_scores,
    build_recall_batch,
    config_with_params,
    cross_validate,
    evaluate_batch,
    fit,
    fit_many,
    listwise_loss,
    ranking_metrics,
    scenario_folds,
)
from emotional_memory.learn.cross_validation import default_jobs
from emotional_memory.learn.params import constrained_params, leaf_vector
from emotional_memory.replay import LookupEmbedder, load_dataset, replay_dataset, summarize
from emotional_memory.scoring_config import params_from_config
from support.paths import SHARED_DATA
from support.recall_data import synthetic_recall_info

DATA_DIR = SHARED_DATA
V2_JSON = DATA_DIR / "realistic_recall_v2.json"
V2_NPZ = DATA_DIR / "realistic_recall_v2.minilm.npz"
SQRT6 = math.sqrt(6.0)
AFFECT = 2  # index of affect_proximity in SIGNAL_NAMES
SEMANTIC = 0

# ------------------------------------------------------------------ helpers


def default_params() -> ScoringParams:
    cfg = EmotionalMemoryConfig()
    return params_from_config(cfg.retrieval, cfg.decay)


def metrics_of(totals: np.ndarray, batch: RecallBatch, k: int = 2) -> dict[str, float]:
    per = ranking_metrics(totals, np.asarray(batch.labels), np.asarray(batch.columns.valid), k)
    return {name: float(np.mean(v)) for name, v in per.items()}


def objective_grad(
    batch: RecallBatch, groups: tuple[str, ...] = GROUPS, temperature: float = 0.05
) -> tuple[Any, Any, Any]:
    """The fit objective (mean listwise loss, no prior) over unconstrained leaves.

    Returns:
        ``(loss, u0, value_and_grad)``: ``loss(u)`` is a scalar; the compiled
        ``value_and_grad(u)`` returns ``((loss, (per_query, totals)), grads)``.
    """
    reparam = Reparam(default_params(), groups)
    with jax.enable_x64(True):
        base = jax.tree_util.tree_map(jnp.asarray, reparam.base)
        kinds = {k: jnp.asarray(v) for k, v in reparam.kinds.items()}
        data = jax.tree_util.tree_map(jnp.asarray, batch)
        u0 = {k: jnp.asarray(v) for k, v in reparam.init().items()}

    def with_aux(u: dict[str, Any]) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        totals = batch_scores(constrained_params(base, kinds, u), data)
        per_query = listwise_loss(totals, data.labels, data.columns.valid, temperature)
        return jnp.mean(per_query), (per_query, totals)

    def loss(u: dict[str, Any]) -> jax.Array:
        return with_aux(u)[0]

    return loss, u0, jax.jit(jax.value_and_grad(with_aux, has_aux=True))


def assert_finite_grads(value: Any, grads: dict[str, Any], groups: tuple[str, ...]) -> None:
    assert np.isfinite(float(value))
    if set(groups) == set(GROUPS):
        assert set(grads) == {"base_weights", "gates", "decay", "signal_scale", "signal_shift",
                              "lexical", "context"}
    for name, g in grads.items():
        g = np.asarray(g)
        bad = np.flatnonzero(~np.isfinite(g)).tolist()
        assert not bad, f"non-finite gradient in {name} at {bad}: {g}"


def _random_affect(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return np.stack(
        [rng.uniform(-1, 1, shape), rng.uniform(0, 1, shape), rng.uniform(0, 1, shape)], -1
    )


def synthetic_batch(
    rng: np.random.Generator, n_queries: int = 48, n_candidates: int = 8
) -> tuple[RecallBatch, RecallInfo]:
    """A generic batch (smooth point: no ties, kinks or boundary values), no labels yet.

    Every third query has two padding candidates. Query mood sits away from the gate
    centres, so the adaptive weights are close to the normalised base weights.
    """
    q, c = n_queries, n_candidates
    valid = np.ones((q, c), bool)
    valid[::3, -2:] = False

    def masked(x: np.ndarray) -> np.ndarray:
        return np.where(valid.reshape(valid.shape + (1,) * (x.ndim - 2)), x, 0.0)

    columns = MemoryColumns(
        embedding=np.zeros((q, c, 0)),
        affect=masked(_random_affect(rng, (q, c))),
        mood=masked(_random_affect(rng, (q, c))),
        velocity=masked(rng.normal(0.0, 0.1, (q, c, 3))),
        age_seconds=masked(rng.uniform(5.0, 5000.0, (q, c))),
        consolidation=masked(rng.uniform(0.5, 1.0, (q, c))),
        retrieval_count=masked(rng.integers(0, 3, (q, c)).astype(float)),
        activation=masked(rng.uniform(0.0, 0.3, (q, c))),
        valid=valid,
    )
    query = QueryFeatures(
        embedding=np.zeros((q, 0)),
        affect=_random_affect(rng, (q,)),
        mood=np.tile([0.3, 0.5, 0.5], (q, 1)),
        velocity=rng.normal(0.0, 0.1, (q, 3)),
    )
    batch = RecallBatch(
        semantic=masked(rng.uniform(0.0, 1.0, (q, c))),
        columns=columns,
        query=query,
        labels=np.zeros((q, c), bool),
        challenge=np.zeros(q, np.int32),
        scenario=np.arange(q, dtype=np.int32),
    )
    return batch, synthetic_recall_info(q, c, q)


def labelled_by(
    batch: RecallBatch, score: np.ndarray, n_keep: int, margin: float
) -> RecallBatch:
    """Label each query's argmax of ``score``; keep ``n_keep`` queries with a clear winner."""
    s = np.where(np.asarray(batch.columns.valid), score, -np.inf)
    top2 = -np.sort(-s, axis=-1)[:, :2]
    keep = np.flatnonzero(top2[:, 0] - top2[:, 1] >= margin)[:n_keep]
    assert len(keep) == n_keep, "not enough clear queries; draw more"
    sub = jax.tree_util.tree_map(lambda x: np.asarray(x)[keep], batch)
    labels = s[keep] == top2[keep, :1]
    return eqx.tree_at(
        lambda b: (b.labels, b.scenario), sub, (labels, np.arange(n_keep, dtype=np.int32))
    )


def edge_case_batch() -> tuple[RecallBatch, RecallInfo]:
    """Six queries x five candidates at every branch point of the kernel and loss.

    zero velocities (momentum's 0.5 branch), ages below / at ``min_seconds`` and
    negative, arousal exactly at the floor threshold, zero consolidation, identical
    affect (distance 0, ``sqrt`` at 0) and distance exactly ``sqrt(6)`` (``max(0, .)``
    at 0), mood at the gate centres, padding candidates (one labelled), a query
    without any positive, ties with two positives.
    """
    q, c = 6, 5
    rng = np.random.default_rng(7)
    affect = _random_affect(rng, (q, c))
    mood = _random_affect(rng, (q, c))
    velocity = rng.normal(0.0, 0.1, (q, c, 3))
    age = rng.uniform(5.0, 500.0, (q, c))
    consolidation = np.ones((q, c))
    retrieval = np.zeros((q, c))
    activation = rng.uniform(0.0, 0.3, (q, c))
    semantic = rng.uniform(-0.2, 1.0, (q, c))
    valid = np.ones((q, c), bool)
    labels = np.zeros((q, c), bool)
    q_affect = _random_affect(rng, (q,))
    q_mood = _random_affect(rng, (q,))
    q_velocity = rng.normal(0.0, 0.1, (q, 3))

    # q0: zero velocities everywhere; ages below, at and far above min_seconds (1 s);
    # tag arousal exactly at the floor threshold (0.7) and the floor itself.
    velocity[0] = 0.0
    q_velocity[0] = 0.0
    age[0] = [0.0, 0.5, 1.0, -5.0, 1e6]
    affect[0, :, 1] = [0.7, 0.7, 0.7, 0.2, 0.7]
    retrieval[0] = [0, 1, 2, 0, 5]
    labels[0, 1] = True
    # q1: no positive at all (zero loss), zero consolidation, zero semantic.
    consolidation[1, :2] = 0.0
    semantic[1, 0] = 0.0
    # q2: two padding candidates (zeros), the only label on a padding row (no positive).
    valid[2, 3:] = False
    for arr in (affect, mood, velocity):
        arr[2, 3:] = 0.0
    age[2, 3:] = 0.0
    consolidation[2, 3:] = 0.0
    activation[2, 3:] = 0.0
    semantic[2, 3:] = 0.0
    labels[2, 4] = True
    # q3: memory affect == query affect (distance 0) and a memory at distance exactly
    # sqrt(6) (proximity at the max(0, .) kink); same for mood.
    q_affect[3] = [-1.0, 0.0, 0.0]
    q_mood[3] = [1.0, 1.0, 1.0]
    affect[3, 0] = q_affect[3]
    affect[3, 1] = [1.0, 1.0, 1.0]
    mood[3, 0] = q_mood[3]
    mood[3, 1] = [-1.0, 0.0, 0.0]
    labels[3, 0] = True
    # q4: mood exactly at the gate centres (negative -0.5, arousal 0.7) and a memory
    # whose velocity is zero while the query's is not.
    q_mood[4] = [-0.5, 0.7, 0.5]
    velocity[4, 2] = 0.0
    labels[4, 2] = True
    # q5: calm mood (valence 0, arousal at the calm centre 0.3); all candidates
    # identical (exact ties), two positives.
    q_mood[5] = [0.0, 0.3, 0.5]
    for arr in (affect, mood, velocity, age, activation, semantic, consolidation):
        arr[5] = arr[5, :1]
    labels[5, [1, 3]] = True

    batch = RecallBatch(
        semantic=semantic,
        columns=MemoryColumns(
            embedding=np.zeros((q, c, 0)), affect=affect, mood=mood, velocity=velocity,
            age_seconds=age, consolidation=consolidation, retrieval_count=retrieval,
            activation=activation, valid=valid,
        ),
        query=QueryFeatures(
            embedding=np.zeros((q, 0)), affect=q_affect, mood=q_mood, velocity=q_velocity
        ),
        labels=labels,
        challenge=np.zeros(q, np.int32),
        scenario=np.arange(q, dtype=np.int32),
    )
    info = RecallInfo(
        query_ids=tuple(f"e{i}" for i in range(q)),
        scenario_ids=tuple(f"s{i}" for i in range(q)),
        challenge_names=("edge",),
        candidate_ids=tuple(tuple(f"e{i}m{j}" for j in range(c)) for i in range(q)),
        top_k=2,
    )
    return batch, info


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def v2() -> tuple[dict[str, Any], LookupEmbedder]:
    if not DATA_DIR.is_dir():
        pytest.skip("../shared/data not present (CI always has it)")
    return load_dataset(V2_JSON), LookupEmbedder.from_npz(V2_NPZ)


@pytest.fixture(scope="module")
def v2_batch(v2: tuple[dict[str, Any], LookupEmbedder]) -> tuple[RecallBatch, RecallInfo]:
    data, embedder = v2
    return build_recall_batch(data, embedder)


@pytest.fixture(scope="module")
def builtin() -> tuple[dict[str, Any], HashingEmbedder]:
    return load_builtin_dataset(), HashingEmbedder(dim=384)


@pytest.fixture(scope="module")
def builtin_batch(
    builtin: tuple[dict[str, Any], HashingEmbedder],
) -> tuple[RecallBatch, RecallInfo]:
    data, embedder = builtin
    return build_recall_batch(data, embedder)


@pytest.fixture(scope="module")
def affect_task() -> tuple[RecallBatch, RecallInfo]:
    """Positives are the candidates closest in affect; semantics and the rest are noise."""
    batch, info = synthetic_batch(np.random.default_rng(0), n_queries=400)
    diff = np.asarray(batch.query.affect)[:, None, :] - np.asarray(batch.columns.affect)
    proximity = np.clip(1.0 - np.linalg.norm(diff, axis=-1) / SQRT6, 0.0, None)
    return labelled_by(batch, proximity, n_keep=48, margin=0.06), first_queries(info, 48)


def first_queries(info: RecallInfo, n: int) -> RecallInfo:
    return RecallInfo(
        query_ids=info.query_ids[:n], scenario_ids=info.scenario_ids[:n],
        challenge_names=info.challenge_names, candidate_ids=info.candidate_ids[:n],
        top_k=info.top_k,
    )


@pytest.fixture(scope="module")
def edge() -> tuple[RecallBatch, Any, Any]:
    """The edge-case batch, the starting point and the compiled objective gradient."""
    batch, _ = edge_case_batch()
    _, u0, value_and_grad = objective_grad(batch)
    return batch, u0, value_and_grad


# ------------------------------------------------------------------ gradients


def test_grads_finite_on_edge_cases(edge: tuple[RecallBatch, Any, Any]) -> None:
    batch, u0, value_and_grad = edge
    with jax.enable_x64(True):
        (value, (per_query, totals)), grads = value_and_grad(u0)
        assert_finite_grads(value, grads, GROUPS)
        # Away from the defaults too (random offsets in the unconstrained space).
        rng = np.random.default_rng(1)
        for _ in range(3):
            u = {k: v + rng.normal(0.0, 1.0, v.shape) for k, v in u0.items()}
            (value_u, _), grads_u = value_and_grad(u)
            assert_finite_grads(value_u, grads_u, GROUPS)
    # The loss at the edge cases means what it should.
    totals, per_query = np.asarray(totals), np.asarray(per_query)
    valid = np.asarray(batch.columns.valid)
    assert np.all(totals[~valid] <= -1e29)  # padding can never be ranked
    assert np.isfinite(totals[valid]).all()
    # no positive (q1), or only a padding row labelled (q2): zero loss
    assert per_query[1] == 0.0 and per_query[2] == 0.0
    # q5: five tied candidates, two positive: -log(2/5)
    assert per_query[5] == pytest.approx(-math.log(2 / 5), abs=1e-12)
    assert np.all(per_query >= 0.0) and np.isfinite(per_query).all()
    assert float(value) == pytest.approx(float(np.mean(per_query)), abs=1e-15)


def test_grads_finite_at_a_vanishing_calm_width(edge: tuple[RecallBatch, Any, Any]) -> None:
    # A large optimiser step drives the unconstrained calm_valence_width to about -356,
    # i.e. width = softplus(-356.5) ~ 1e-155 (still > 0): the gradient must stay finite.
    _, u0, value_and_grad = edge
    with jax.enable_x64(True):
        width = GateParams.names().index("calm_valence_width")
        u = {**u0, "gates": u0["gates"].at[width].set(-356.5)}
        (value, _), grads = value_and_grad(u)
    assert_finite_grads(value, grads, GROUPS)


def test_grads_finite_on_v2(v2_batch: tuple[RecallBatch, RecallInfo]) -> None:
    batch, _ = v2_batch
    _, u0, value_and_grad = objective_grad(batch)
    with jax.enable_x64(True):
        (value, _), grads = value_and_grad(u0)
    assert_finite_grads(value, grads, GROUPS)
    # The data inform the weights, gates and scales ...
    for name in ("base_weights", "gates", "signal_scale"):
        assert np.abs(np.asarray(grads[name])).max() > 1e-6, name
    # ... but a per-signal shift adds the same constant to every candidate of a query
    # (the weights depend only on the query's mood): a listwise loss is blind to it.
    assert np.abs(np.asarray(grads["signal_shift"])).max() < 1e-9


def test_check_grads_at_smooth_point(affect_task: tuple[RecallBatch, RecallInfo]) -> None:
    batch, _ = affect_task
    loss, u0, _ = objective_grad(batch, ("base_weights", "gates"), temperature=0.2)
    with jax.enable_x64(True):
        rng = np.random.default_rng(3)
        u = {k: v + rng.normal(0.0, 0.3, v.shape) for k, v in u0.items()}
        check_grads(jax.jit(loss), (u,), order=1, modes=("rev",), eps=1e-6, atol=1e-6,
                    rtol=1e-5)


# ------------------------------------------------------------------ known answers


def test_fit_recovers_the_informative_signal(
    affect_task: tuple[RecallBatch, RecallInfo],
) -> None:
    batch, info = affect_task
    result = fit(batch, info, trainable=("base_weights",), l2=0.0, val_fraction=0, steps=300)
    weights = np.asarray(result.params.base_weights)
    assert int(np.argmax(weights)) == AFFECT
    assert weights[AFFECT] > 0.8 * weights.sum()
    assert result.initial_metrics["top1"] < 0.5
    assert result.train_metrics["top1"] == 1.0
    # Only the base weights moved.
    default = default_params()
    for name in ("gates", "decay", "signal_scale", "signal_shift"):
        np.testing.assert_array_equal(getattr(result.params, name), getattr(default, name))
    # The engine-facing config carries the weights.
    assert result.config.retrieval.base_weights == weights.tolist()
    # evaluate_batch agrees with the fit's own metrics.
    assert metrics_of(evaluate_batch(result.params, batch), batch)["top1"] == 1.0


def test_fit_recovers_calibration_direction() -> None:
    batch, info = synthetic_batch(np.random.default_rng(5), n_queries=400)
    true_scale = np.array([-0.5, 1.0, 3.0, 1.0, 1.0, 1.0])
    truth = eqx.tree_at(lambda p: p.signal_scale, default_params(), true_scale)
    batch = labelled_by(batch, evaluate_batch(truth, batch), n_keep=48, margin=0.01)
    info = first_queries(info, 48)
    result = fit(batch, info, trainable=("calibration",), l2=0.0, val_fraction=0, steps=200)
    scale = np.asarray(result.params.signal_scale)
    assert scale[SEMANTIC] < 1.0 < scale[AFFECT]
    assert scale[AFFECT] - scale[SEMANTIC] > 1.0
    assert result.train_metrics["top1"] > result.initial_metrics["top1"]
    assert result.train_metrics["top1"] >= 0.9
    # The shift is unidentifiable from rankings; it stays at its start.
    np.testing.assert_allclose(result.params.signal_shift, 0.0, atol=1e-6)
    # The calibration reaches the config only now that it is not the identity.
    assert result.config.retrieval.signal_scale == pytest.approx(scale.tolist(), abs=0)


# ------------------------------------------------------------------ defaults, export, JSON


def test_untrained_fit_is_the_spec_default(
    affect_task: tuple[RecallBatch, RecallInfo],
) -> None:
    batch, info = affect_task
    result = fit(batch, info, trainable=("base_weights",), steps=0)
    assert result.config == EmotionalMemoryConfig()
    again = EmotionalMemoryConfig.model_validate_json(result.config.model_dump_json())
    assert again == EmotionalMemoryConfig()
    assert result.config.retrieval.signal_scale is None
    assert result.config.retrieval.signal_shift is None
    default = default_params()
    for name in ("base_weights", "gates", "decay", "distance_scale", "signal_scale",
                 "signal_shift"):
        np.testing.assert_array_equal(leaf_vector(result.params, name),
                                      leaf_vector(default, name))
    assert result.history == {"train_loss": [], "val_loss": []}


def test_reparam_export_is_bit_identical_where_untouched() -> None:
    # a lexical weight inside (0, inf): 0 sits on the softplus boundary (nudged to 1e-6)
    # (and so is the context weight's)
    base = eqx.tree_at(lambda p: (p.lexical.weight, p.context.weight), default_params(),
                       (np.float64(0.35), np.float64(0.3)))
    reparam = Reparam(base, GROUPS)
    assert reparam.leaves == ("base_weights", "gates", "decay", "signal_scale", "signal_shift",
                              "lexical", "context")
    exported = reparam.export(reparam.init())
    for name in ("base_weights", "gates", "decay", "distance_scale", "signal_scale",
                 "signal_shift", "lexical", "context"):
        a, b = np.asarray(leaf_vector(exported, name)), np.asarray(leaf_vector(base, name))
        assert a.tobytes() == b.tobytes(), name
    # Move one element of each leaf: only that element changes.
    u = reparam.init()
    for name in reparam.leaves:
        u[name][1] += 0.25
    exported = reparam.export(u)
    for name in reparam.leaves:
        a, b = np.asarray(leaf_vector(exported, name)), np.asarray(leaf_vector(base, name))
        assert a[1] != b[1], name
        np.testing.assert_array_equal(np.delete(a, 1), np.delete(b, 1))
    # Round trip of the constrained values (up to float rounding).
    with jax.enable_x64(True):
        again = reparam.params(reparam.init())
    for name in reparam.leaves:
        np.testing.assert_allclose(np.asarray(leaf_vector(again, name)),
                                   np.asarray(leaf_vector(base, name)), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError):
        Reparam(base, ())
    with pytest.raises(ValueError):
        Reparam(base, ("weights",))


@pytest.mark.parametrize(
    "learning_rate",
    [
        20.0,
        100.0,
        1000.0,
    ],
)
def test_constraints_hold_with_a_huge_learning_rate(
    affect_task: tuple[RecallBatch, RecallInfo], learning_rate: float
) -> None:
    batch, info = affect_task
    # every group the batch scores (it has no lexical statistics: s7, s8 are not scored)
    result = fit(batch, info, trainable=GROUPS[:4], l2=0.0, val_fraction=0,
                 learning_rate=learning_rate, steps=40)
    p = result.params
    for name in ("base_weights", "gates", "decay", "signal_scale", "signal_shift"):
        assert np.isfinite(np.asarray(leaf_vector(p, name))).all(), name
    assert np.all(np.asarray(p.base_weights) >= 0.0)
    g = p.gates
    for value in (g.negative_mood_strength, g.high_arousal_strength, g.calm_strength,
                  g.high_arousal_center, g.calm_arousal_center):
        assert 0.0 <= value <= 1.0
    assert -1.0 <= g.negative_mood_center <= 1.0
    for value in (g.negative_mood_sharpness, g.high_arousal_sharpness, g.calm_sharpness,
                  g.calm_valence_width):
        assert value > 0.0
    d = p.decay
    assert d.base_decay >= 0 and d.retrieval_boost >= 0 and d.power >= 0
    assert 0.0 <= d.arousal_modulation <= 1.0 and 0.0 <= d.floor_arousal_threshold <= 1.0
    assert 0.0 <= d.floor_value <= 1.0
    assert d.min_seconds > 0.0
    # and the engine accepts it
    EmotionalMemoryConfig.model_validate_json(result.config.model_dump_json())


# ------------------------------------------------------------------ capture == engine


def test_v2_batch_forward_reproduces_engine_replay(
    v2_batch: tuple[RecallBatch, RecallInfo],
) -> None:
    batch, info = v2_batch
    assert batch.n_queries == 200 and info.top_k == 2
    assert len(info.scenario_ids) == len(set(info.scenario_ids))
    m = metrics_of(evaluate_batch(default_params(), batch), batch, info.top_k)
    assert m["top1"] == 112 / 200 == 0.56
    assert m["hit_at_k"] == 165 / 200 == 0.825


def test_fitted_config_round_trips_and_drives_the_engine(
    builtin: tuple[dict[str, Any], HashingEmbedder],
    builtin_batch: tuple[RecallBatch, RecallInfo],
) -> None:
    data, embedder = builtin
    batch, info = builtin_batch
    # default parameters: the batch forward is the engine's ranking
    default = summarize(replay_dataset(data, embedder))
    m = metrics_of(evaluate_batch(default_params(), batch), batch, info.top_k)
    assert m["top1"] == default["top1"] and m["hit_at_k"] == default["hit_at_k"]

    result = fit(batch, info, steps=80)
    assert result.config != EmotionalMemoryConfig()
    text = result.config.model_dump_json()
    loaded = EmotionalMemoryConfig.model_validate_json(text)
    assert loaded == result.config
    assert loaded.model_dump_json() == text
    params = params_from_config(loaded.retrieval, loaded.decay)
    for name in ("base_weights", "gates", "decay"):
        assert np.asarray(leaf_vector(params, name)).tobytes() == np.asarray(
            leaf_vector(result.params, name)).tobytes()
    assert config_with_params(EmotionalMemoryConfig(), params) == loaded
    # Replayed through a real engine with the fitted config, the ranking is the batch
    # forward's at the activation that config computes.
    fitted = summarize(replay_dataset(data, embedder, loaded))
    batch2, _ = build_recall_batch(data, embedder, loaded)
    m2 = metrics_of(evaluate_batch(params, batch2), batch2, info.top_k)
    assert m2["top1"] == fitted["top1"]
    assert m2["hit_at_k"] == fitted["hit_at_k"]
    assert m2["rr"] == pytest.approx(fitted["mrr"], abs=1e-12)


# ------------------------------------------------------------------ compilation


def test_train_step_compiles_once_per_problem(
    builtin_batch: tuple[RecallBatch, RecallInfo],
) -> None:
    batch, info = builtin_batch
    fit(batch, info, steps=3)
    traces: list[str] = []

    def listener(event: str, duration: float, **kwargs: Any) -> None:
        if event == "/jax/core/compile/jaxpr_trace_duration":
            traces.append(str(kwargs.get("fun_name")))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        fit(batch, info, steps=3)  # the listener sees a trace if one happens
        mask = np.asarray(batch.scenario) % 2 == 0
        fit(batch, info, steps=25, l2=0.5, temperature=0.3, learning_rate=0.01, seed=3)
        fit(batch, info, steps=25, val_fraction=0, train_mask=mask, patience=2)
        fit(batch, info, config=EmotionalMemoryConfig(enable_momentum=False), steps=10)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert "_train_step" not in traces
    # the probe works: a new problem shape does trace the step
    traces.clear()
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        fit(batch, info, steps=2, trainable=("base_weights", "decay"))
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert "_train_step" in traces


# ------------------------------------------------------------------ CV, folds, validation


def test_scenario_folds_partition() -> None:
    for n, k in ((30, 3), (40, 5), (7, 7), (5, 2)):
        parts = scenario_folds(n, k, seed=1)
        assert len(parts) == k
        flat = np.concatenate(parts)
        assert sorted(flat.tolist()) == list(range(n))
        assert all(len(p) > 0 for p in parts)
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
    np.testing.assert_array_equal(np.concatenate(scenario_folds(30, 3, 0)),
                                  np.concatenate(scenario_folds(30, 3, 0)))
    for bad in (1, 0, 31):
        with pytest.raises(ValueError):
            scenario_folds(30, bad)


def test_cross_validate_builtin(
    builtin: tuple[dict[str, Any], HashingEmbedder],
    builtin_batch: tuple[RecallBatch, RecallInfo],
) -> None:
    data, embedder = builtin
    batch, info = builtin_batch
    cv = cross_validate(data, embedder, folds=3, batch=(batch, info), select=False, steps=60)
    for metrics in (cv.metrics, cv.default_metrics, *cv.fold_metrics):
        for key in ("top1", "hit_at_k", "mrr"):
            assert 0.0 <= metrics[key] <= 1.0
        assert all(0.0 <= v <= 1.0 for v in metrics["by_challenge"].values())
    assert cv.metrics["n_queries"] == batch.n_queries == cv.default_metrics["n_queries"]
    assert sum(f["n_queries"] for f in cv.fold_metrics) == batch.n_queries
    # out-of-fold: every query once, no scenario in two folds
    assert sorted(r.query_id for r in cv.results) == sorted(info.query_ids)
    fold_of: dict[str, int] = {}
    start = 0
    for i, f in enumerate(cv.fold_metrics):
        for r in cv.results[start:start + f["n_queries"]]:
            assert fold_of.setdefault(r.scenario_id, i) == i
        start += f["n_queries"]
    assert len(set(fold_of.values())) == 3


def test_cross_validate_in_processes_gives_the_same_answer(
    builtin: tuple[dict[str, Any], HashingEmbedder],
    builtin_batch: tuple[RecallBatch, RecallInfo],
) -> None:
    data, embedder = builtin
    batch, info = builtin_batch
    here = cross_validate(data, embedder, folds=3, batch=(batch, info), select=False,
                          steps=40, jobs=1)
    pooled = cross_validate(data, embedder, folds=3, batch=(batch, info), select=False,
                            steps=40, jobs=2)
    assert [r.query_id for r in pooled.results] == [r.query_id for r in here.results]
    assert [r.retrieved for r in pooled.results] == [r.retrieved for r in here.results]
    assert pooled.fold_metrics == here.fold_metrics
    assert pooled.metrics == here.metrics
    assert pooled.chosen == here.chosen
    assert 1 <= default_jobs(5) <= 5


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": 0.0},
        {"temperature": -1.0},
        {"temperature": math.nan},
        {"l2": -0.1},
        {"l2": math.inf},
        {"steps": -1},
        {"val_fraction": -0.1},
        {"val_fraction": 1.0},
        {"trainable": ("base_weights", "everything")},
        {"trainable": ()},
    ],
)
def test_fit_rejects_bad_arguments(
    affect_task: tuple[RecallBatch, RecallInfo], kwargs: dict[str, Any]
) -> None:
    batch, info = affect_task
    with pytest.raises(ValueError):
        fit(batch, info, **kwargs)


# ------------------------------------------------------------------ v2 target


def test_v2_cross_validated_top1_meets_target(
    v2: tuple[dict[str, Any], LookupEmbedder], v2_batch: tuple[RecallBatch, RecallInfo]
) -> None:
    data, embedder = v2
    cv = cross_validate(data, embedder, folds=5, batch=v2_batch, select=False)
    assert cv.default_metrics["top1"] == 0.56
    assert cv.metrics["n_queries"] == 200
    assert cv.metrics["top1"] >= 0.72


# ------------------------------------------------------------------ runs trained together


def _assert_params_close(
    a: ScoringParams, b: ScoringParams, what: str, rtol: float = 1e-9
) -> None:
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=1e-12,
                                   err_msg=what)


def test_fit_many_equals_one_fit_per_run(affect_task: tuple[RecallBatch, RecallInfo]) -> None:
    """Runs trained together (vmapped) stop and end where each would alone: their own
    splits, temperatures, L2 weights and early stopping, one run diverging."""
    batch, info = affect_task
    half = np.asarray(batch.scenario) % 2 == 0
    runs: list[dict[str, Any]] = [
        {"l2": 0.001, "temperature": 0.05},
        {"l2": 0.5, "temperature": 0.3, "train_mask": half},
        {"l2": 0.0, "temperature": 0.2, "train_mask": ~half},
    ]
    kwargs: dict[str, Any] = {"trainable": ("base_weights", "gates", "decay"), "steps": 60,
                              "patience": 3, "learning_rate": 0.08, "seed": 2}
    together = fit_many(batch, None, runs, **kwargs)
    alone = [fit(batch, info, **run, **kwargs) for run in runs]
    steps = {len(r.history["train_loss"]) for r in alone}
    assert len(steps) > 1, "the runs should stop early at different steps"
    for i, (got, want) in enumerate(zip(together, alone, strict=True)):
        _assert_params_close(got, want.params, f"run {i}")
    # without validation queries every run keeps its last step
    no_val = fit_many(batch, None, runs[:2], val_fraction=0.0, steps=15)
    for i, run in enumerate(runs[:2]):
        want = fit(batch, info, **run, val_fraction=0.0, steps=15)
        _assert_params_close(no_val[i], want.params, f"no-val run {i}")


def test_fit_many_lets_a_diverging_run_fall_back_alone(
    affect_task: tuple[RecallBatch, RecallInfo],
) -> None:
    """A step of ~1e150 on the free calibration leaves: the L2 pull of the run weighted
    1e10 overflows to inf at the second step (that run falls back to its last finite
    parameters and stops), the other run's stays finite and it goes on."""
    batch, info = affect_task
    runs = [{"l2": 0.01, "temperature": 0.05}, {"l2": 1e10, "temperature": 0.05}]
    kwargs: dict[str, Any] = {"steps": 6, "val_fraction": 0.0, "learning_rate": 1e150,
                              "trainable": ("calibration",)}
    together = fit_many(batch, None, runs, **kwargs)
    alone = [fit(batch, info, **run, **kwargs) for run in runs]
    assert len(alone[0].history["train_loss"]) == 6  # finite all along
    assert len(alone[1].history["train_loss"]) == 1  # diverged at the second step
    np.testing.assert_array_equal(alone[1].params.signal_scale, np.ones(6))  # its start
    assert np.abs(np.asarray(alone[0].params.signal_scale)).max() > 1e100  # it moved on
    # run 1 is back at its start exactly; run 0's values near 1e149 amplify the
    # rounding of a batched step (a few ulp of each Adam update) to ~1e-8 relative
    _assert_params_close(together[1], alone[1].params, "diverged run", rtol=0.0)
    _assert_params_close(together[0], alone[0].params, "finite run", rtol=1e-6)


def test_fit_accepts_an_infinite_patience(affect_task: tuple[RecallBatch, RecallInfo]) -> None:
    """A patience beyond int32 (or infinite) never stops a run early, as a huge one
    within int32 does not either."""
    batch, info = affect_task
    kwargs: dict[str, Any] = {"steps": 12, "learning_rate": 0.5, "seed": 1}
    want = fit(batch, info, patience=10**9, **kwargs)
    assert len(want.history["train_loss"]) == 12
    for patience in (float("inf"), 10**12):
        got = fit(batch, info, patience=patience, **kwargs)
        assert got.history == want.history and got.best_step == want.best_step


def test_fit_many_rejects_bad_runs(affect_task: tuple[RecallBatch, RecallInfo]) -> None:
    batch, _ = affect_task
    with pytest.raises(ValueError, match="runs"):
        fit_many(batch, None, [])
    with pytest.raises(ValueError, match="temperature"):
        fit_many(batch, None, [{"l2": 0.1, "temperature": 0.05}, {"l2": 0.1, "temperature": 0}])
    with pytest.raises(ValueError, match="l2"):
        fit_many(batch, None, [{"l2": -1.0, "temperature": 0.05}])
    with pytest.raises(ValueError, match="temprature"):  # a misspelt setting is not ignored
        fit_many(batch, None, [{"l2": 0.1, "temprature": 0.2}])
    with pytest.raises(ValueError, match="steps"):  # shared settings are arguments
        fit_many(batch, None, [{"l2": 0.1, "steps": 3}])
    with pytest.raises(TypeError, match="dict"):
        fit_many(batch, None, [(0.1, 0.05)])
    with pytest.raises(ValueError, match="train_mask"):
        fit_many(batch, None, [{"train_mask": np.ones(batch.n_queries + 1, bool)}])


def test_reparam_export_is_float64_outside_x64_mode() -> None:
    """Exported parameters are computed in float64 even when JAX's x64 mode is off."""
    base = default_params()
    reparam = Reparam(base, ("base_weights",))
    u = reparam.init()
    u["base_weights"] = u["base_weights"] + 0.123456789
    assert not jax.config.read("jax_enable_x64")
    got = np.asarray(reparam.export(u).base_weights)
    with jax.enable_x64(True):
        want = np.asarray(jax.nn.softplus(jnp.asarray(u["base_weights"], jnp.float64)))
    np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)
