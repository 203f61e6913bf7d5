"""Fits on degenerate data: the numbers a fit returns are finite, or it says why not.

* A batch holding a NaN or infinite input of a real candidate (affect, mood,
  velocity, age, ...) is refused up front, the field named: it used to fit nothing
  (the loss was NaN from the first step) and return the starting config silently, or
  leave NaN parameters behind.
* A start whose loss is not finite (finite inputs that overflow) is an error naming
  the cause, not a silent no-op fit.
* The last update of a run without validation queries is checked too: a step that
  overflows the parameters (a huge learning rate) falls back to the last parameters
  with a finite loss, so the saved config scores finite totals.
* Degenerate but legal data (one query, one memory, no positive, every label on one
  memory, identical embeddings, zero-norm and NaN embeddings, ages at and far beyond
  the decay floor) fits to finite parameters whose saved config scores exactly as
  the in-memory model.
* An inner CV that cannot hold out anything (folds < 2, one scenario) is an error
  (``fit_auto`` on one scenario warns and fits at the given values instead), as
  is a ``fit_many`` run selecting no query and a grid key that is unknown or empty:
  they used to "tune" on fits that saw no query and report the tie-break as chosen.
* Validation queries none of which has a relevant memory do not stop a fit early
  (their loss is 0 at every step: the fit kept its start, best step 0).
* A hand-built batch whose fields disagree in shape or dtype is refused naming the
  field (was a JAX broadcasting error, numpy's IndexError, or float labels failing
  in ``&``).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory import EmotionalMemoryConfig
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.kernel import MemoryColumns, QueryFeatures
from emotional_memory.learn import (
    GROUPS,
    RecallBatch,
    RecallInfo,
    build_recall_batch,
    evaluate_batch,
    fit,
    fit_auto,
    fit_many,
    select_adapter,
    select_hyperparameters,
    select_model,
)
from emotional_memory.learn.cross_validation import cross_validate
from emotional_memory.scoring_config import params_from_config
from support.recall_data import synthetic_recall_info, unlabelled_dataset


def _affect(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return np.stack([rng.uniform(-1, 1, shape), rng.uniform(0, 1, shape),
                     rng.uniform(0, 1, shape)], -1)


def tiny_batch(q: int = 4, c: int = 5, dim: int = 0, seed: int = 0,
               **override: Any) -> tuple[RecallBatch, RecallInfo]:
    """Q queries x C candidates (one scenario per query), fields overridable by name."""
    rng = np.random.default_rng(seed)
    f: dict[str, Any] = {
        "semantic": rng.uniform(0, 1, (q, c)), "affect": _affect(rng, (q, c)),
        "mood": _affect(rng, (q, c)), "velocity": rng.normal(0, 0.1, (q, c, 3)),
        "age_seconds": rng.uniform(5, 5000, (q, c)),
        "consolidation": rng.uniform(0.5, 1, (q, c)),
        "retrieval_count": rng.integers(0, 3, (q, c)).astype(float),
        "activation": rng.uniform(0, 0.3, (q, c)), "valid": np.ones((q, c), bool),
        "embedding": rng.normal(size=(q, c, dim)), "q_embedding": rng.normal(size=(q, dim)),
        "q_affect": _affect(rng, (q,)), "q_mood": _affect(rng, (q,)),
        "q_velocity": rng.normal(0, 0.1, (q, 3)),
        "labels": np.eye(q, c, dtype=bool), "scenario": np.arange(q, dtype=np.int32),
    }
    unknown = set(override) - set(f)
    assert not unknown, unknown
    f.update(override)
    columns = MemoryColumns(**{name: f[name] for name in (
        "embedding", "affect", "mood", "velocity", "age_seconds", "consolidation",
        "retrieval_count", "activation", "valid")})
    query = QueryFeatures(embedding=f["q_embedding"], affect=f["q_affect"], mood=f["q_mood"],
                          velocity=f["q_velocity"])
    batch = RecallBatch(semantic=f["semantic"], columns=columns, query=query,
                        labels=f["labels"], challenge=np.zeros(q, np.int32),
                        scenario=f["scenario"])
    n_scenarios = int(np.max(f["scenario"])) + 1
    return batch, synthetic_recall_info(q, c, n_scenarios, challenge="x")


def _all_finite(tree: Any) -> bool:
    return all(np.isfinite(np.asarray(x)).all() for x in jax.tree_util.tree_leaves(tree))


def _reloaded_scores(config: EmotionalMemoryConfig, batch: RecallBatch) -> np.ndarray:
    loaded = EmotionalMemoryConfig.model_validate_json(config.model_dump_json())
    assert loaded == config
    return evaluate_batch(params_from_config(loaded.retrieval, loaded.decay), batch, loaded)


Q, C = 4, 5
_NAN_INPUTS: list[tuple[str, dict[str, Any]]] = [
    ("semantic", {"semantic": np.where(np.eye(Q, C, dtype=bool), np.nan, 0.3)}),
    ("columns.affect", {"affect": np.full((Q, C, 3), np.inf)}),
    ("columns.mood", {"mood": np.full((Q, C, 3), np.nan)}),
    ("columns.velocity", {"velocity": np.full((Q, C, 3), -np.inf)}),
    ("columns.age_seconds", {"age_seconds": np.full((Q, C), np.inf)}),
    ("columns.consolidation", {"consolidation": np.full((Q, C), np.nan)}),
    ("columns.retrieval_count", {"retrieval_count": np.full((Q, C), np.nan)}),
    ("columns.activation", {"activation": np.full((Q, C), np.nan)}),
    ("query.affect", {"q_affect": np.full((Q, 3), np.nan)}),
    ("query.mood", {"q_mood": np.full((Q, 3), np.nan)}),
    ("query.velocity", {"q_velocity": np.full((Q, 3), np.inf)}),
]


@pytest.mark.parametrize(("field", "override"), _NAN_INPUTS, ids=[f for f, _ in _NAN_INPUTS])
def test_a_non_finite_input_is_refused_naming_its_field(
    field: str, override: dict[str, Any]
) -> None:
    batch, info = tiny_batch(**override)
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        fit(batch, info, steps=2, val_fraction=0)
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        fit_many(batch, None, [{}], steps=2, val_fraction=0)


def test_a_non_finite_padding_row_is_no_error() -> None:
    # padding rows are never scored: what they hold does not matter
    valid = np.ones((Q, C), bool)
    valid[:, -1] = False
    affect = _affect(np.random.default_rng(3), (Q, C))
    affect[:, -1] = np.nan
    batch, info = tiny_batch(valid=valid, affect=affect)
    result = fit(batch, info, steps=3, val_fraction=0)
    assert len(result.history["train_loss"]) == 3 and _all_finite(result.params)


def test_a_start_whose_loss_overflows_is_an_error() -> None:
    # finite velocities whose squares overflow: the start scores NaN (was: a silent no-op)
    batch, info = tiny_batch(velocity=np.full((Q, C, 3), 1e300),
                             q_velocity=np.full((Q, 3), 1e300))
    with pytest.raises(ValueError, match="starting parameters"):
        fit(batch, info, steps=2, val_fraction=0)
    with pytest.raises(ValueError, match="starting parameters"):
        fit_many(batch, None, [{}], steps=2, val_fraction=0)


@pytest.mark.parametrize("steps", [1, 2, 3])
def test_an_overflowing_last_step_falls_back(steps: int) -> None:
    """An Adam step of ~1.5e308 on the free calibration leaves: the scales stay finite,
    but the totals overflow. The last step's parameters used to be kept unchecked
    (the saved config then scored NaN); now a run keeps only parameters whose loss
    was finite."""
    batch, info = tiny_batch(q=6)
    kwargs: dict[str, Any] = {"steps": steps, "trainable": ("calibration",),
                              "val_fraction": 0, "learning_rate": 1.5e308}
    result = fit(batch, info, **kwargs)
    np.testing.assert_array_equal(result.params.signal_scale, np.ones(6))  # the start
    assert result.best_step == 0
    valid = np.asarray(batch.columns.valid)
    assert np.isfinite(evaluate_batch(result.params, batch, result.config)[valid]).all()
    (together,) = fit_many(batch, None, [{}], **kwargs)
    np.testing.assert_array_equal(together.signal_scale, np.ones(6))


def test_best_step_names_the_kept_parameters_after_a_fall_back() -> None:
    """Without validation queries ``best_step`` counts the updates in the kept
    parameters: a run that fell back at step k kept those of step k - 1."""
    batch, info = tiny_batch(q=6)
    result = fit(batch, info, steps=6, val_fraction=0, learning_rate=1e150,
                 trainable=("calibration",), l2=1e10)
    assert len(result.history["train_loss"]) == 1  # the second step overflowed
    assert result.best_step == 0
    np.testing.assert_array_equal(result.params.signal_scale, np.ones(6))
    fine = fit(batch, info, steps=4, val_fraction=0)
    assert fine.best_step == 4 == len(fine.history["train_loss"])


_DEGENERATE: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("one query", {"q": 1}, {}),
    ("one memory", {"c": 1, "labels": np.ones((Q, 1), bool)}, {}),
    ("no positive", {"labels": np.zeros((Q, C), bool)}, {}),
    ("every label one memory", {"labels": np.tile(np.arange(C) == 0, (Q, 1))}, {}),
    ("identical candidates", {"semantic": np.full((Q, C), 0.5),
                              "affect": np.full((Q, C, 3), 0.5),
                              "age_seconds": np.full((Q, C), 60.0)}, {}),
    ("ages below the floor and in the future", {"age_seconds": np.tile(
        [0.0, -1e300, 1e-300, -5.0, 0.5], (Q, 1))}, {}),
    ("ages far in the past", {"age_seconds": np.full((Q, C), 1e300)}, {}),
    ("identical embeddings", {"dim": 3, "embedding": np.ones((Q, C, 3)),
                              "q_embedding": np.ones((Q, 3))}, {"adapter": True}),
    ("zero embeddings", {"dim": 3, "embedding": np.zeros((Q, C, 3)),
                         "q_embedding": np.zeros((Q, 3))}, {"adapter": True}),
    ("NaN embeddings", {"dim": 3, "embedding": np.where(
        np.eye(Q, C, dtype=bool)[..., None], np.nan, 1.0) + np.arange(3),
                        "q_embedding": np.full((Q, 3), np.nan)}, {"adapter": True}),
]


@pytest.mark.parametrize(("name", "override", "how"), _DEGENERATE,
                         ids=[n for n, _, _ in _DEGENERATE])
def test_degenerate_data_fits_finite_and_round_trips(
    name: str, override: dict[str, Any], how: dict[str, Any]
) -> None:
    batch, info = tiny_batch(**override)
    trainable = (*GROUPS[:4], "adapter") if how.get("adapter") else GROUPS[:4]
    result = fit(batch, info, steps=4, val_fraction=0, learning_rate=0.5,
                 trainable=trainable, adapter_rank=2)
    assert _all_finite(result.params), name
    valid = np.asarray(batch.columns.valid)
    here = evaluate_batch(result.params, batch, result.config)
    assert np.isfinite(here[valid]).all(), name
    np.testing.assert_array_equal(_reloaded_scores(result.config, batch), here)


@settings(max_examples=15)
@given(lr=st.floats(1e-3, 1e308), steps=st.integers(1, 4), seed=st.integers(0, 3),
       val=st.sampled_from([0.0, 0.5]))
def test_any_learning_rate_leaves_a_config_that_scores_finite(
    lr: float, steps: int, seed: int, val: float
) -> None:
    batch, info = tiny_batch(q=4, seed=seed)
    result = fit(batch, info, steps=steps, val_fraction=val, learning_rate=lr,
                 trainable=("base_weights", "calibration"))
    assert _all_finite(result.params)
    valid = np.asarray(batch.columns.valid)
    scores = _reloaded_scores(result.config, batch)
    assert np.isfinite(scores[valid]).all()
    np.testing.assert_array_equal(scores, evaluate_batch(result.params, batch, result.config))


def test_inner_cv_with_no_query_names_the_mask() -> None:
    # fit refused this already; fit_auto failed in numpy ("number sections ...")
    batch, info = tiny_batch()
    with pytest.raises(ValueError, match="train_mask selects no query"):
        fit_auto(batch, info, steps=1, train_mask=np.zeros(Q, bool))


# ------------------------------------------------------------------ inner CV


def test_fit_many_refuses_a_run_that_selects_no_query() -> None:
    # fit refuses it; fit_many returned the starting parameters as if fitted
    batch, _ = tiny_batch()
    runs = [{"l2": 0.01}, {"train_mask": np.zeros(Q, bool)}]
    with pytest.raises(ValueError, match=r"runs\[1\].*no query"):
        fit_many(batch, None, runs, steps=1)


@pytest.mark.parametrize(("folds", "error"), [(1, ValueError), (0, ValueError),
                                              (True, TypeError), (2.5, TypeError)])
def test_inner_cv_folds_are_checked(folds: Any, error: type) -> None:
    # folds=1 "tuned" on fits that saw no query, folds=0 was numpy's "number sections"
    batch, info = tiny_batch()
    with pytest.raises(error, match="folds"):
        select_hyperparameters(batch, info, folds=folds, steps=1)
    with pytest.raises(error, match="inner_folds"):
        fit_auto(batch, info, inner_folds=folds, steps=1)
    embedded, info = tiny_batch(dim=3)
    with pytest.raises(error, match="folds"):
        select_adapter(embedded, info, folds=folds, steps=1, trainable=("adapter",))


def test_inner_cv_on_one_scenario_is_named() -> None:
    # every grid point was "fitted" on no query and the tie-break won, silently: the
    # search itself refuses; fit_auto warns and fits at the given (or fit's) values,
    # as select_model does, so cross_validate with folds = scenarios still runs
    batch, info = tiny_batch(dim=3)
    one = np.arange(Q) == 0
    with pytest.raises(ValueError, match="at least 2 scenarios"):
        select_hyperparameters(batch, info, train_mask=one, steps=1)
    with pytest.raises(ValueError, match="at least 2 scenarios"):
        select_adapter(batch, info, train_mask=one, steps=1, trainable=("adapter",))
    with pytest.warns(UserWarning, match="one scenario"):
        auto = fit_auto(batch, info, train_mask=one, steps=2)
    plain = fit(batch, info, train_mask=one, steps=2)
    assert auto.selection["chosen"] is None and auto.selection["table"] == []
    assert "one scenario" in auto.selection["untuned"]
    np.testing.assert_array_equal(np.asarray(auto.params.base_weights),
                                  np.asarray(plain.params.base_weights))
    with pytest.warns(UserWarning, match="one scenario"):
        given = fit_auto(batch, info, train_mask=one, steps=2, l2=0.5)
    np.testing.assert_array_equal(
        np.asarray(given.params.base_weights),
        np.asarray(fit(batch, info, train_mask=one, steps=2, l2=0.5).params.base_weights))


def test_cross_validate_with_as_many_folds_as_scenarios() -> None:
    # each outer fold trains on one scenario: fit_auto raised (after the batches were
    # built) where the docs allow folds up to the number of scenarios
    with pytest.warns(UserWarning, match="one scenario"):
        result = cross_validate(unlabelled_dataset(2), HashingEmbedder(dim=64), folds=2,
                                steps=2)
    assert len(result.chosen) == 2


def test_select_model_on_one_scenario_does_not_report_tuned_values() -> None:
    # the lexical model wins here; its l2/temperature were "chosen" by an inner CV whose
    # fits saw no query: the tie-break (0.1, 0.2) was reported as tuned
    batch, info = build_recall_batch(unlabelled_dataset(2), HashingEmbedder(dim=64),
                                     lexical=True)
    one = np.asarray(batch.scenario) == 0
    with pytest.warns(UserWarning, match="one scenario"):
        result = select_model(batch, info, train_mask=one, steps=2)
    assert result.selection["chosen"].startswith("lexical")
    assert "hyperparameters" not in result.selection
    assert _all_finite(result.params)


@pytest.mark.parametrize(("grid", "error", "field"), [
    ({"L2": [0.5]}, ValueError, "L2"),  # a typo searched the default grid silently
    ({"l2": []}, ValueError, "l2"),  # was "runs must hold at least one run"
    ({"temperature": 0.1}, TypeError, "temperature"),  # 'float' object is not iterable
    ({"l2": np.array(0.1)}, TypeError, "l2"),  # len() of unsized object
])
def test_a_bad_grid_is_named(grid: dict[str, Any], error: type, field: str) -> None:
    batch, info = tiny_batch()
    with pytest.raises(error, match=field):
        select_hyperparameters(batch, info, grid=grid, steps=1)


# ------------------------------------------------------------------ batch shapes

_BAD_SHAPES: list[tuple[str, type, dict[str, Any]]] = [
    # each was a JAX broadcasting TypeError, numpy's ValueError or an IndexError
    ("labels", ValueError, {"labels": np.eye(Q, C + 1, dtype=bool)}),
    ("semantic", ValueError, {"semantic": np.zeros((Q, C - 1))}),
    ("scenario", ValueError, {"scenario": np.arange(Q - 1, dtype=np.int32)}),
    ("columns.affect", ValueError, {"affect": np.zeros((Q, C, 2))}),
    ("columns.age_seconds", ValueError, {"age_seconds": np.ones((Q, C + 1))}),
    ("query.affect", ValueError, {"q_affect": np.zeros((Q, 2))}),
    ("query.embedding", ValueError, {"q_embedding": np.zeros((Q, 4))}),
    ("labels", TypeError, {"labels": np.eye(Q, C)}),  # float labels
    ("columns.valid", TypeError, {"valid": np.ones((Q, C), int)}),
    ("scenario", TypeError, {"scenario": np.arange(Q) + 0.5}),
]


@pytest.mark.parametrize(("field", "error", "override"), _BAD_SHAPES,
                         ids=[f"{f}-{e.__name__}" for f, e, _ in _BAD_SHAPES])
def test_a_batch_of_mismatched_shapes_is_named(field: str, error: type,
                                               override: dict[str, Any]) -> None:
    batch, info = tiny_batch(dim=3, **override)
    with pytest.raises(error, match=rf"batch\.{field}\b"):
        fit(batch, info, steps=1)
    with pytest.raises(error, match=rf"batch\.{field}\b"):
        evaluate_batch(params_from_config(EmotionalMemoryConfig().retrieval,
                                          EmotionalMemoryConfig().decay), batch)


def test_validation_queries_without_a_positive_do_not_stop_the_fit() -> None:
    """Validation queries with no relevant memory have a loss of 0 at every step: the
    fit 'never improved' on them, stopped early and returned its start as fitted."""
    labels = np.zeros((6, 5), bool)
    labels[:3, 0] = True  # the last three queries have no relevant memory
    batch, info = tiny_batch(q=6, labels=labels)
    kwargs: dict[str, Any] = {"steps": 30, "val_fraction": 0.5, "seed": 0, "patience": 5}
    result = fit(batch, info, **kwargs)
    # the split held out exactly the queries without a positive
    assert result.val_metrics["n_queries"] == 3 and result.val_metrics["mrr"] == 0.0
    assert result.best_step == 30 == len(result.history["train_loss"])
    start = fit(batch, info, steps=0).config.retrieval.base_weights
    assert result.config.retrieval.base_weights != start
    (many,) = fit_many(batch, None, [{}], **kwargs)
    np.testing.assert_allclose(many.base_weights, result.params.base_weights, rtol=1e-9)
