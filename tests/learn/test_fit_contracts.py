"""The fitting API's contracts with the researcher calling it directly.

* Query routing (``retrieval.query_classifier``) replaces the base weights per query
  type in the engine; the batch forward and the fits score with ``base_weights``
  alone. A routed config was fitted and scored silently: the batch forward reported
  top-1 0.62 where the engine ranked 0.09 on the built-in data, and the fitted base
  weights were never the ones the engine used. Fits, batch scoring and CV refuse it,
  naming the field.
* ``fit``'s arguments are checked, by name, before anything is trained: a string
  ``trainable`` was split into letters (``got 'g'``), a NaN ``patience`` was
  ``cannot convert float NaN to integer``, text numbers and None failed in a
  comparison naming nothing, a negative or fractional ``seed`` was numpy's error, and
  ``info=None`` crashed after the whole fit had run.
* ``fit_auto`` / ``select_hyperparameters`` take every :func:`fit` argument, as
  documented: a given ``l2`` or ``temperature`` is kept fixed (the grid searches the
  other) instead of failing inside a private function.
* Labels and the valid mask of ``ranking_metrics`` are booleans: a NaN label
  counted as relevant, 0.5 as relevant; ``listwise_loss`` with integer labels read a
  graded label 2 as irrelevant (``2 & True == 0``).
* ``subset_dataset`` with one id as a string kept the scenarios named by its letters.
* ``select_model`` names a bad ``folds`` (a string failed in a comparison, 2.5 was
  accepted) and ``info`` (an AttributeError).
* ``fit`` / ``fit_many`` refuse a ``lexical`` group on a batch without lexical
  statistics and a ``context`` group on one without neighbours: the signal was not
  scored, its gradient was 0, and the starting values came back as fitted.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

from emotional_memory import EmotionalMemoryConfig
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.learn import (
    RecallBatch,
    RecallInfo,
    build_recall_batch,
    cross_validate,
    evaluate_batch,
    fit,
    fit_auto,
    fit_many,
    listwise_loss,
    ranking_metrics,
    select_hyperparameters,
    select_model,
    subset_dataset,
)
from emotional_memory.retrieval.config import QueryClassifierConfig
from emotional_memory.scoring_config import params_from_config
from support.recall_data import unlabelled_dataset

_EMBEDDER = HashingEmbedder(dim=64)


@pytest.fixture(scope="module")
def small() -> tuple[dict[str, Any], RecallBatch, RecallInfo]:
    data = unlabelled_dataset(3)
    batch, info = build_recall_batch(data, _EMBEDDER)
    return data, batch, info


def _routed(mode: str = "heuristic", routes: bool = True) -> EmotionalMemoryConfig:
    base = EmotionalMemoryConfig()
    weights = {t: [0.0, 0.0, 0.0, 0.0, 0.0, 1.0] for t in (
        "single_hop", "multi_hop", "temporal", "open_domain", "default")} if routes else {}
    qc = QueryClassifierConfig(mode=mode, routed_weights=weights)  # type: ignore[arg-type]
    return base.model_copy(update={"retrieval": base.retrieval.model_copy(
        update={"query_classifier": qc})})


_ROUTED_CALLS: dict[str, Any] = {
    "fit": lambda b, i, c: fit(b, i, c, steps=2),
    "fit_many": lambda b, i, c: fit_many(b, c, [{}], steps=2),
    "evaluate_batch": lambda b, i, c: evaluate_batch(
        params_from_config(c.retrieval, c.decay), b, c),
    "fit_auto": lambda b, i, c: fit_auto(b, i, c, steps=2),
    "select_model": lambda b, i, c: select_model(b, i, c, steps=2, tune=False),
}


@pytest.mark.parametrize("mode", ["heuristic", "llm"])
@pytest.mark.parametrize("call", list(_ROUTED_CALLS), ids=list(_ROUTED_CALLS))
def test_a_routed_config_is_refused_naming_the_router(
    small: tuple[dict[str, Any], RecallBatch, RecallInfo], call: str, mode: str,
) -> None:
    _, batch, info = small
    with pytest.raises(ValueError, match=r"retrieval\.query_classifier"):
        _ROUTED_CALLS[call](batch, info, _routed(mode))


def test_cross_validate_refuses_a_routed_config_before_replaying(
    small: tuple[dict[str, Any], RecallBatch, RecallInfo],
) -> None:
    data, _, _ = small

    class Untouchable(HashingEmbedder):
        def embed(self, text: str) -> Any:
            raise AssertionError("the data was replayed")

        def embed_batch(self, texts: Any) -> Any:
            raise AssertionError("the data was replayed")

    with pytest.raises(ValueError, match=r"retrieval\.query_classifier"):
        cross_validate(data, Untouchable(dim=64), _routed(), folds=2, select=False, steps=2)


@pytest.mark.parametrize("config", [_routed("disabled"), _routed(routes=False)],
                         ids=["disabled", "no-routes"])
def test_routing_that_never_routes_is_fitted(
    small: tuple[dict[str, Any], RecallBatch, RecallInfo], config: EmotionalMemoryConfig,
) -> None:
    _, batch, info = small
    result = fit(batch, info, config, steps=3)
    assert result.config.retrieval.query_classifier == config.retrieval.query_classifier


_BAD_FIT_ARGS: list[tuple[dict[str, Any], type, str]] = [
    ({"trainable": "gates"}, TypeError, "trainable"),
    ({"trainable": ["gates", 3]}, TypeError, "trainable"),
    ({"patience": float("nan")}, ValueError, "patience"),
    ({"patience": "60"}, TypeError, "patience"),
    ({"patience": True}, TypeError, "patience"),
    ({"temperature": "0.1"}, TypeError, "temperature"),
    ({"temperature": None}, TypeError, "temperature"),
    ({"l2": "x"}, TypeError, "l2"),
    ({"learning_rate": None}, TypeError, "learning_rate"),
    ({"val_fraction": "0.2"}, TypeError, "val_fraction"),
    ({"adapter_l2": "0.1"}, TypeError, "adapter_l2"),
    ({"seed": -1}, ValueError, "seed"),
    ({"seed": 1.5}, TypeError, "seed"),
    ({"progress": "no"}, TypeError, "progress"),
]


@pytest.mark.parametrize(("kwargs", "error", "field"), _BAD_FIT_ARGS,
                         ids=[f"{next(iter(k))}={next(iter(k.values()))!r}"
                              for k, _, _ in _BAD_FIT_ARGS])
def test_fit_names_a_bad_argument(
    small: tuple[dict[str, Any], RecallBatch, RecallInfo], kwargs: dict[str, Any],
    error: type, field: str,
) -> None:
    _, batch, info = small
    with pytest.raises(error, match=field):
        fit(batch, info, **kwargs)


@pytest.mark.parametrize(("run", "error", "field"), [
    ({"l2": "x"}, TypeError, "l2"),
    ({"temperature": None}, TypeError, "temperature"),
    ({"l2": float("nan")}, ValueError, "l2"),
])
def test_fit_many_names_a_bad_run_setting(
    small: tuple[dict[str, Any], RecallBatch, RecallInfo], run: dict[str, Any],
    error: type, field: str,
) -> None:
    _, batch, _ = small
    with pytest.raises(error, match=field):
        fit_many(batch, None, [run], steps=2)


def test_fit_checks_info_and_config_before_training(
    small: tuple[dict[str, Any], RecallBatch, RecallInfo], monkeypatch: pytest.MonkeyPatch,
) -> None:
    from emotional_memory.learn import training

    _, batch, info = small

    def untouchable(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("trained before checking its arguments")

    monkeypatch.setattr(training, "_train", untouchable)
    with pytest.raises(TypeError, match="info"):
        fit(batch, None, steps=2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="config"):
        fit(batch, info, {}, steps=2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="config"):
        fit_many(batch, {}, [{}], steps=2)  # type: ignore[arg-type]


def test_fit_auto_keeps_a_given_l2_fixed(
    small: tuple[dict[str, Any], RecallBatch, RecallInfo],
) -> None:
    _, batch, info = small
    best, table = select_hyperparameters(batch, info, l2=0.5, steps=2)
    assert best["l2"] == 0.5 and {row["l2"] for row in table} == {0.5}
    assert {row["temperature"] for row in table} == {0.05, 0.2}
    result = fit_auto(batch, info, temperature=0.3, steps=2)
    assert result.selection["chosen"]["temperature"] == 0.3
    assert {row["temperature"] for row in result.selection["table"]} == {0.3}
    with pytest.raises(ValueError, match="l2"):
        fit_auto(batch, info, l2=0.5, grid={"l2": [0.1]}, steps=2)


_T = np.asarray([[0.5, 0.9, 0.1], [0.2, 0.3, 0.4]])
_V = np.ones((2, 3), bool)


@pytest.mark.parametrize(("labels", "valid", "field"), [
    (np.asarray([[0.0, np.nan, 0.0], [1.0, 0.0, 0.0]]), _V, "labels"),  # NaN: relevant
    (np.asarray([[0.0, 0.5, 0.0], [1.0, 0.0, 0.0]]), _V, "labels"),
    (np.asarray([[0, 2, 0], [1, 0, 0]]), _V, "labels"),
    (np.eye(2, 3, dtype=bool), np.where(_V, np.nan, 0.0), "valid"),
])
def test_ranking_metrics_labels_and_valid_are_booleans(
    labels: np.ndarray, valid: np.ndarray, field: str,
) -> None:
    with pytest.raises(ValueError, match=field):
        ranking_metrics(_T, labels, valid, 1)


def test_ranking_metrics_take_zero_one_numbers() -> None:
    as_bool = ranking_metrics(_T, np.eye(2, 3, dtype=bool), _V, 1)
    as_int = ranking_metrics(_T, np.eye(2, 3, dtype=int), _V.astype(float), 1)
    for name in as_bool:
        assert as_bool[name].tolist() == as_int[name].tolist()


@pytest.mark.parametrize(("labels", "valid", "field"), [
    (jnp.asarray([[0, 2, 0]]), jnp.ones((1, 3), bool), "labels"),  # read as irrelevant
    (jnp.asarray([[0.0, 1.0, 0.0]]), jnp.ones((1, 3), bool), "labels"),
    (jnp.asarray([[False, True, False]]), jnp.ones((1, 3)), "valid"),
])
def test_listwise_loss_needs_boolean_labels(labels: Any, valid: Any, field: str) -> None:
    with pytest.raises(TypeError, match=field):
        listwise_loss(jnp.asarray([[0.1, 0.2, 0.3]]), labels, valid, 0.05)


def test_subset_dataset_refuses_one_id_as_a_string() -> None:
    data = {"scenarios": [{"scenario_id": "a"}, {"scenario_id": "b"},
                          {"scenario_id": "ab"}]}
    with pytest.raises(TypeError, match="scenario_ids"):
        subset_dataset(data, "ab")
    assert subset_dataset(data, ["ab"])["scenarios"] == [{"scenario_id": "ab"}]


@pytest.mark.parametrize(("kwargs", "error", "field"), [
    ({"folds": "3"}, TypeError, "folds"),  # was a comparison naming nothing
    ({"folds": 2.5}, TypeError, "folds"),  # was accepted (numpy split it in 2 parts)
    ({"info": None}, TypeError, "info"),  # was an AttributeError
])
def test_select_model_names_a_bad_argument(
    small: tuple[dict[str, Any], RecallBatch, RecallInfo], kwargs: dict[str, Any],
    error: type, field: str,
) -> None:
    _, batch, info = small
    args = {"info": info, **kwargs}
    with pytest.raises(error, match=field):
        select_model(batch, steps=2, tune=False, **args)


_LEXICAL_START = EmotionalMemoryConfig().model_copy(update={
    "retrieval": EmotionalMemoryConfig().retrieval.model_copy(update={
        "lexical_weight": 0.3, "context_weight": 0.3})})


@pytest.fixture(scope="module")
def lexical_batch(small: tuple[dict[str, Any], RecallBatch, RecallInfo]
                  ) -> tuple[RecallBatch, RecallInfo]:
    return build_recall_batch(small[0], _EMBEDDER, _LEXICAL_START, lexical=True)


@pytest.mark.parametrize(("lexical", "trainable", "field"), [
    (False, ("lexical",), "lexical"),  # s7 is not scored: the group never moved
    (False, ("base_weights", "context"), "context"),
    (True, ("base_weights", "context"), "context"),  # no neighbours: s8 is not scored
])
@pytest.mark.parametrize("call", ["fit", "fit_many"])
def test_a_group_the_batch_does_not_score_is_refused(
    small: tuple[dict[str, Any], RecallBatch, RecallInfo],
    lexical_batch: tuple[RecallBatch, RecallInfo],
    lexical: bool, trainable: tuple[str, ...], field: str, call: str,
) -> None:
    """Training ``lexical`` on a batch without lexical statistics (or ``context``
    without neighbours) returned the starting values as "fitted": the gradient of a
    signal that is not scored is exactly 0."""
    batch, info = lexical_batch if lexical else small[1:]
    with pytest.raises(ValueError, match=f"{field}.*build_recall_batch"):
        if call == "fit":
            fit(batch, info, _LEXICAL_START, trainable=trainable, steps=2)
        else:
            fit_many(batch, _LEXICAL_START, [{}], trainable=trainable, steps=2)


def test_the_lexical_group_on_a_lexical_batch_is_fitted(
    lexical_batch: tuple[RecallBatch, RecallInfo],
) -> None:
    batch, info = lexical_batch
    result = fit(batch, info, _LEXICAL_START, trainable=("lexical",), steps=3,
                 val_fraction=0, learning_rate=0.5)
    assert result.config.retrieval.lexical_weight != 0.3


def test_the_lexical_group_under_a_switched_off_s7_is_refused(
    lexical_batch: tuple[RecallBatch, RecallInfo], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``enable_lexical=False`` s7 is masked out: the lexical group had a zero
    gradient and came back unchanged."""
    batch, info = lexical_batch
    off = _LEXICAL_START.model_copy(update={"enable_lexical": False})
    with pytest.raises(ValueError, match="enable_lexical"):
        fit(batch, info, off, trainable=("base_weights", "lexical"), steps=2)
    with pytest.raises(ValueError, match="enable_lexical"):
        fit_many(batch, off, [{}], trainable=("lexical",), steps=2)
    # select_model's lexical models train the group: refused, naming the switch,
    # before any candidate is fitted (it was after the non-lexical ones)
    import emotional_memory.learn.selection as selection

    def no_fit(*args: object, **kwargs: object) -> None:
        raise AssertionError("a candidate was fitted before the refusal")

    monkeypatch.setattr(selection, "_inner_cv_table", no_fit)
    with pytest.raises(ValueError, match="enable_lexical"):
        select_model(batch, info, off, steps=2, tune=False)
