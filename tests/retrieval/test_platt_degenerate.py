"""Platt scaling on degenerate score sets, against plain oracles.

* Scores that are all equal carry no information: the fit is the base rate (slope 0,
  intercept the logit of the clipped share relevant). Scores equal up to rounding
  (their standard deviation a rounding residue, e.g. twenty copies of 0.3) used to be
  "standardised" by that residue into a slope near 1e17.
* All-relevant or all-irrelevant labels give the clipped base rate (slope 0; it was a
  rounding residue of either sign), probabilities near 1 or 0.
* The fit is equivariant under scaling the scores, even by 1e300 (it used to overflow
  squaring them and return a meaningless fit with RuntimeWarnings).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory.learn.calibration import fit_platt
from emotional_memory.retrieval.config import RelevanceCalibration


def _base_rate_logit(relevant: list[bool]) -> float:
    rate = min(max(sum(relevant) / len(relevant), 1e-6), 1 - 1e-6)
    return math.log(rate / (1 - rate))


@settings(max_examples=40, deadline=None)
@given(value=st.floats(-1e6, 1e6), relevant=st.lists(st.booleans(), min_size=1, max_size=40))
def test_equal_scores_give_the_base_rate(value: float, relevant: list[bool]) -> None:
    scores = np.full(len(relevant), value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        slope, intercept = fit_platt(scores, np.asarray(relevant))
    assert slope == 0.0
    assert intercept == pytest.approx(_base_rate_logit(relevant), abs=1e-9)


def test_twenty_copies_of_a_score_are_equal_scores() -> None:
    slope, intercept = fit_platt(np.full(20, 0.3), np.ones(20, bool))
    assert slope == 0.0 and intercept == pytest.approx(_base_rate_logit([True]), abs=1e-9)


@pytest.mark.parametrize("label", [True, False])
def test_one_label_everywhere(label: bool) -> None:
    scores = np.linspace(-1.0, 1.0, 30)
    slope, intercept = fit_platt(scores, np.full(30, label))
    p = RelevanceCalibration(slope=slope, intercept=intercept).probability(scores)
    assert slope == 0.0 and intercept == pytest.approx(_base_rate_logit([label]), abs=1e-9)
    assert np.all(p > 1 - 1e-5) if label else np.all(p < 1e-5)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 1000), exponent=st.sampled_from([-300, -100, 0, 100, 300]))
def test_the_fit_is_equivariant_under_scaling(seed: int, exponent: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 1.0, 30)
    y = rng.random(30) < 1 / (1 + np.exp(-3 * x))
    y[:2] = [True, False]
    k = 10.0 ** exponent
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        want = fit_platt(x, y)
        slope, intercept = fit_platt(x * k, y)
    assert slope * k == pytest.approx(want[0], rel=1e-6, abs=1e-12)
    assert intercept == pytest.approx(want[1], rel=1e-6, abs=1e-9)


def test_separable_scores_stay_finite_without_warnings() -> None:
    x = np.linspace(-1.0, 1.0, 100_000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        slope, intercept = fit_platt(x, x > 0)
    assert math.isfinite(slope) and slope > 0 and math.isfinite(intercept)
