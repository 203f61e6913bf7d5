"""Ranking metrics and the relevance calibration's inputs at their edges.

* ``ranking_metrics`` equals a plain-Python oracle (stable descending order: ties
  keep candidate order, padding never ranked, ``k`` beyond the candidates, all-zero
  scores, queries without a positive).
* A cut-off ``k`` that is no positive int, arrays of different shapes and a NaN
  total of a real candidate are refused by name: ``k=0`` gave hit@0 = 0 under
  top-1 = 1, ``k=-1`` counted all but the last candidate, labels of one row were
  broadcast to every query, and a NaN total was ranked last silently.
* The calibration's ``rows`` is a (Q,) bool mask: integer indices were read as a
  mask (``[0, 1]`` kept query 1 only) and a wrong length was numpy's IndexError.
* The calibration's labels and valid flags are booleans (or 0/1), as
  ``ranking_metrics``' are: a NaN label made ``fit_platt``'s intercept NaN silently,
  and ``top_candidates`` / ``suggested_threshold`` read it as relevant (a 0.5 valid
  flag as a real candidate).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory.learn import ranking_metrics
from emotional_memory.learn.calibration import (
    expected_calibration_error,
    fit_platt,
    fit_relevance_calibration,
    suggested_threshold,
    top_candidates,
)
from emotional_memory.retrieval.config import RelevanceCalibration


def _oracle(totals: list[list[float]], labels: list[list[bool]], valid: list[list[bool]],
            k: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"top1": [], "hit_at_k": [], "rr": []}
    for t, lab, v in zip(totals, labels, valid, strict=True):
        real = [j for j in range(len(t)) if v[j]]
        ranked = sorted(real, key=lambda j: -t[j])  # sorted() is stable
        hits = [lab[j] for j in ranked]
        out["top1"].append(float(bool(hits) and hits[0]))
        out["hit_at_k"].append(float(any(hits[:k])))
        out["rr"].append(next((1.0 / (i + 1) for i, h in enumerate(hits) if h), 0.0))
    return out


@st.composite
def _rankings(draw: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    q = draw(st.integers(1, 4))
    c = draw(st.integers(1, 6))
    # few distinct values: ties are common; zeros everywhere included
    totals = np.asarray(draw(st.lists(st.sampled_from([0.0, 0.0, 0.5, 1.0, -2.0]),
                                      min_size=q * c, max_size=q * c))).reshape(q, c)
    labels = np.asarray(draw(st.lists(st.booleans(), min_size=q * c,
                                      max_size=q * c))).reshape(q, c)
    valid = np.asarray(draw(st.lists(st.booleans(), min_size=q * c,
                                     max_size=q * c))).reshape(q, c)
    return totals, labels, valid, draw(st.integers(1, c + 3))


@settings(max_examples=60, deadline=None)
@given(_rankings())
def test_ranking_metrics_match_a_plain_oracle(
    case: tuple[np.ndarray, np.ndarray, np.ndarray, int],
) -> None:
    totals, labels, valid, k = case
    got = ranking_metrics(totals, labels, valid, k)
    want = _oracle(totals.tolist(), labels.tolist(), valid.tolist(), k)
    for name in ("top1", "hit_at_k", "rr"):
        assert got[name].tolist() == pytest.approx(want[name]), name


_T = np.asarray([[0.5, 0.9, 0.1], [0.2, 0.3, 0.4]])
_L = np.asarray([[False, True, False], [True, False, False]])
_V = np.ones((2, 3), bool)


@pytest.mark.parametrize(("args", "error", "field"), [
    ((_T, _L, _V, 0), ValueError, "k"),  # hit@0 = 0 below top-1 = 1
    ((_T, _L, _V, -1), ValueError, "k"),  # all but the last candidate counted
    ((_T, _L, _V, True), TypeError, "k"),
    ((_T, _L, _V, 2.5), TypeError, "k"),
    ((_T, _L[:1], _V, 1), ValueError, "shape"),  # one row of labels for every query
    ((_T[0], _L[0], _V[0], 1), ValueError, "shape"),
    ((np.where(_L, np.nan, _T), _L, _V, 1), ValueError, "NaN"),  # was ranked last
])
def test_ranking_metrics_refuse_bad_input(args: tuple[Any, ...], error: type,
                                          field: str) -> None:
    with pytest.raises(error, match=field):
        ranking_metrics(*args)


def test_a_nan_total_on_padding_is_ignored() -> None:
    valid = _V.copy()
    valid[0, 2] = False
    totals = _T.copy()
    totals[0, 2] = np.nan
    assert ranking_metrics(totals, _L, valid, 1)["top1"].tolist() == [1.0, 0.0]


_CAL = RelevanceCalibration(slope=1.0, intercept=0.0)


@pytest.mark.parametrize("call", [
    lambda rows: top_candidates(_T, _L, _V, 2, rows),
    lambda rows: suggested_threshold(_CAL, _T, _L, _V, 1, rows),
    lambda rows: fit_relevance_calibration(_T, _L, _V, 1, rows=rows),
])
@pytest.mark.parametrize(("rows", "error"), [
    (np.asarray([0, 1]), TypeError),  # read as the mask [False, True]
    (np.asarray([True]), ValueError),  # numpy's IndexError
    (np.asarray([True, False, True]), ValueError),
])
def test_calibration_rows_must_be_a_bool_mask(call: Any, rows: np.ndarray,
                                              error: type) -> None:
    with pytest.raises(error, match="rows"):
        call(rows)


def test_calibration_rows_select_queries() -> None:
    scores, relevant = top_candidates(_T, _L, _V, 1, np.asarray([False, True]))
    assert scores.tolist() == [0.4] and relevant.tolist() == [False]


_CT = np.asarray([[3.0, 2.0, 1.0], [1.0, 2.0, 3.0]])
_CL = np.asarray([[1, 0, 0], [0, 0, 1]], float)
_CV = np.ones((2, 3), bool)


@pytest.mark.parametrize(("call", "field"), [
    # a NaN label returned the intercept NaN, silently (no error until the config)
    (lambda: fit_platt(np.asarray([0.0, 1.0, 2.0]), np.asarray([np.nan, 1.0, 0.0])),
     "relevant"),
    (lambda: fit_platt(np.asarray([0.0, 1.0, 2.0]), np.asarray([0.5, 1.0, 0.0])),
     "relevant"),
    (lambda: expected_calibration_error(np.asarray([0.2, 0.8]), np.asarray([np.nan, 1.0])),
     "relevant"),
    # a NaN label was read as relevant, a 0.5 valid as a real candidate
    (lambda: top_candidates(_CT, np.where(_CL == 1, np.nan, 0.0), _CV, 2), "labels"),
    (lambda: top_candidates(_CT, _CL, np.full((2, 3), 0.5), 2), "valid"),
    (lambda: fit_relevance_calibration(_CT, np.where(_CL == 1, np.nan, 0.0), _CV, 1),
     "labels"),
    (lambda: suggested_threshold(RelevanceCalibration(slope=1.0, intercept=0.0), _CT,
                                 np.full((2, 3), 2.0), _CV, 1), "labels"),
])
def test_calibration_labels_are_booleans_as_in_ranking_metrics(call: Any, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        call()


def test_calibration_takes_zero_one_labels_as_booleans() -> None:
    as_bool = fit_relevance_calibration(_CT, _CL.astype(bool), _CV, 1)
    assert fit_relevance_calibration(_CT, _CL, _CV.astype(int), 1) == as_bool
    assert fit_platt(np.asarray([0.0, 1.0, 2.0]), np.asarray([0, 1, 1])) == fit_platt(
        np.asarray([0.0, 1.0, 2.0]), np.asarray([False, True, True]))
