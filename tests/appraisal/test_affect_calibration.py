"""Output scale of the affect head on the memory register (training/affect_calibration.py)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from training.affect_calibration import calibrated_head, fit_register_calibration

from emotional_memory.appraisal_embedding import AffectHead


def _shrunk(seed: int, n: int = 300, scenarios: int = 30) -> tuple[np.ndarray, ...]:
    """Labels spread widely; predictions that follow them at a third of the scale."""
    rng = np.random.default_rng(seed)
    v = rng.uniform(-0.9, 0.9, n)
    a = rng.uniform(0.2, 0.9, n)
    oof = np.stack([v / 3 + rng.normal(0, 0.05, n), 0.5 + (a - 0.55) / 4
                    + rng.normal(0, 0.02, n)], 1)
    groups = np.array([f"s{i % scenarios}" for i in range(n)])
    return oof, np.stack([v, a], 1), groups


def _oracle_slope_through_zero(p: list[float], y: list[float]) -> float:
    return sum(a * b for a, b in zip(p, y, strict=True)) / sum(a * a for a in p)


def test_shrunk_predictions_are_stretched_back_and_error_falls() -> None:
    oof, labels, groups = _shrunk(0)
    cal = fit_register_calibration(oof, labels, groups)
    assert cal.report["valence"]["calibrated"] and cal.report["arousal"]["calibrated"]
    assert cal.slope[0] == pytest.approx(
        _oracle_slope_through_zero(oof[:, 0].tolist(), labels[:, 0].tolist()), rel=1e-9)
    assert cal.slope[0] == pytest.approx(3.0, rel=0.1) and cal.intercept[0] == 0.0
    assert cal.slope[1] == pytest.approx(4.0, rel=0.15)
    for axis in ("valence", "arousal"):
        r = cal.report[axis]
        assert r["held_out_mae_after"] < r["held_out_mae_before"]
        assert len(r["fold_slopes"]) == 5


def test_an_axis_that_does_not_pay_is_left_alone() -> None:
    """Exact valence everywhere but one scenario, predicted five times too wide.

    A map fitted with that scenario stretches the others' exact predictions; fitted
    without it, it changes nothing: held out, the map only adds error.
    """
    oof, labels, groups = _shrunk(1)
    valence = labels[:, 0].copy()
    valence[groups == "s0"] *= 5.0
    cal = fit_register_calibration(np.stack([valence, oof[:, 1]], 1), labels, groups)
    r = cal.report["valence"]
    assert not r["calibrated"] and r["held_out_mae_after"] > r["held_out_mae_before"]
    assert (cal.slope[0], cal.intercept[0]) == (1.0, 0.0)
    assert cal.report["arousal"]["calibrated"]


def test_well_scaled_predictions_keep_slope_near_one() -> None:
    _, labels, groups = _shrunk(2)
    rng = np.random.default_rng(2)
    oof = labels + rng.normal(0, 0.05, labels.shape)
    cal = fit_register_calibration(oof, labels, groups)
    assert cal.slope[0] == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize(("oof", "labels", "groups", "match"), [
    (np.zeros((4, 3)), np.zeros((4, 3)), np.array(list("abab")), r"\(M, 2\)"),
    (np.zeros((4, 2)), np.zeros((3, 2)), np.array(list("abab")), r"\(M, 2\)"),
    (np.full((4, 2), np.nan), np.zeros((4, 2)), np.array(list("abab")), "finite"),
    (np.ones((4, 2)), np.zeros((4, 2)), np.array(list("aaaa")), "two scenarios"),
])
def test_bad_input_is_refused(oof: np.ndarray, labels: np.ndarray, groups: np.ndarray,
                              match: str) -> None:
    with pytest.raises(ValueError, match=match):
        fit_register_calibration(oof, labels, groups)


def _head(seed: int) -> AffectHead:
    rng = np.random.default_rng(seed)
    f, h, s = 5, 4, 2

    def a(*shape: int) -> jnp.ndarray:
        return jnp.asarray(rng.normal(size=shape), jnp.float32)

    return AffectHead(x_mean=a(f), x_scale=jnp.abs(a(f)) + 0.5, w1=a(s, f, h), b1=a(s, h),
                      w2=a(s, h, 3), b2=a(s, 3), y_mean=a(3) * 0.1,
                      y_scale=jnp.abs(a(3)) * 0.2 + 0.05)


@settings(max_examples=25, deadline=None)
@given(st.floats(0.2, 4.0), st.floats(0.2, 4.0), st.floats(-0.5, 0.5), st.integers(0, 5))
def test_calibrated_head_is_the_affine_map_of_the_raw_output(
    sv: float, sa: float, ia: float, seed: int
) -> None:
    head = _head(seed)
    oof, labels, groups = _shrunk(seed)
    cal = fit_register_calibration(oof, labels, groups)
    cal = type(cal)((sv, sa), (0.0, ia), cal.report)
    x = jnp.asarray(np.random.default_rng(seed).normal(size=(7, 5)), jnp.float32)
    before = np.asarray(head.raw(x), np.float64)
    after = np.asarray(calibrated_head(head, cal).raw(x), np.float64)
    np.testing.assert_allclose(after[:, 0], sv * before[:, 0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(after[:, 1], sa * before[:, 1] + ia, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(after[:, 2], before[:, 2], rtol=1e-6, atol=1e-7)
