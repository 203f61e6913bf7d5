"""Calibrated relevance and abstention.

* the calibration math against plain-Python oracles: the sigmoid, Platt scaling (the
  logistic log-loss minimised by a plain coordinate search), the expected calibration
  error, the suggested threshold;
* properties: the probability lies in [0, 1] and never falls as the score rises;
* a synthetic set with known relevance: the fit recovers it, calibrated;
* the engine: ``min_relevance`` None changes nothing; results below it are dropped
  (possibly all); explanations carry each result's probability; bad input is a
  ValueError naming the field;
* the REST ``search`` and the service take ``min_relevance`` (422 naming it when bad).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import httpx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory import EmotionalMemory, EmotionalMemoryConfig, InMemoryStore
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.learn.calibration import (
    expected_calibration_error,
    fit_platt,
    fit_relevance_calibration,
    suggested_threshold,
    top_candidates,
)
from emotional_memory.retrieval import RelevanceCalibration, RetrievalConfig


def _sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-z)) if z >= 0 else math.exp(z) / (1 + math.exp(z))


def _log_loss(a: float, b: float, xs: list[float], ys: list[bool]) -> float:
    total = 0.0
    for x, y in zip(xs, ys, strict=True):
        p = min(max(_sigmoid(a * x + b), 1e-300), 1 - 1e-16)
        total -= math.log(p) if y else math.log(1 - p)
    return total


def _oracle_platt(xs: list[float], ys: list[bool]) -> tuple[float, float]:
    """Minimise the log-loss by a shrinking coordinate search (plain Python)."""
    a, b, step = 0.0, 0.0, 4.0
    best = _log_loss(a, b, xs, ys)
    while step > 1e-7:
        moved = False
        for da, db in ((step, 0), (-step, 0), (0, step), (0, -step)):
            if a + da < 0:
                continue
            loss = _log_loss(a + da, b + db, xs, ys)
            if loss < best - 1e-15:
                a, b, best, moved = a + da, b + db, loss, True
                break
        if not moved:
            step /= 2
    return a, b


def _oracle_ece(ps: list[float], ys: list[bool], bins: int = 10) -> float:
    groups: dict[int, list[tuple[float, bool]]] = {}
    for p, y in zip(ps, ys, strict=True):
        groups.setdefault(min(int(p * bins), bins - 1), []).append((p, y))
    return sum(
        abs(sum(p for p, _ in g) / len(g) - sum(y for _, y in g) / len(g)) * len(g)
        for g in groups.values()
    ) / len(ps)


def test_probability_is_the_sigmoid() -> None:
    cal = RelevanceCalibration(slope=3.0, intercept=-1.5)
    scores = [-1e6, -2.0, 0.0, 0.5, 2.0, 1e6]
    got = cal.probability(np.asarray(scores)).tolist()
    assert got == pytest.approx([_sigmoid(3.0 * s - 1.5) for s in scores], abs=1e-15)
    assert cal.probability(np.asarray([np.nan]))[0] == 0.0


@settings(max_examples=60, deadline=None)
@given(st.floats(0, 50), st.floats(-50, 50),
       st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=20))
def test_probability_in_unit_interval_and_monotone(
    slope: float, intercept: float, scores: list[float]
) -> None:
    cal = RelevanceCalibration(slope=slope, intercept=intercept)
    ordered = np.sort(np.asarray(scores))
    p = cal.probability(ordered)
    assert np.all((p >= 0) & (p <= 1))
    assert np.all(np.diff(p) >= 0)


@pytest.mark.parametrize(("slope", "intercept", "scores"), [
    (1e308, 0.0, [-2.0, 0.1, 1.0, 2.0]),
    (1e300, 0.0, [1e-300, 1e8, 1e9]),
    (1e308, 1e308, [0.5, 1.0, 2.0]),
    (1e308, -1e308, [-1.0, 0.5, 1.0, 3.0]),
])
def test_probability_of_an_overflowing_score_is_its_limit(
    slope: float, intercept: float, scores: list[float]
) -> None:
    # slope * score may overflow float64: the probability is then its limit (1 for
    # +inf), never the 0 of a non-finite score, so the order of the scores is kept
    cal = RelevanceCalibration(slope=slope, intercept=intercept)
    got = cal.probability(np.asarray(scores)).tolist()
    assert got == [_sigmoid(slope * s + intercept) for s in scores]
    assert got == sorted(got)


@settings(max_examples=60, deadline=None)
@given(st.floats(0, 1.7e308), st.floats(-1.7e308, 1.7e308),
       st.lists(st.floats(-1e300, 1e300), min_size=1, max_size=20))
def test_probability_monotone_for_every_accepted_calibration(
    slope: float, intercept: float, scores: list[float]
) -> None:
    cal = RelevanceCalibration(slope=slope, intercept=intercept)
    p = cal.probability(np.sort(np.asarray(scores)))
    assert np.all((p >= 0) & (p <= 1))
    assert np.all(np.diff(p) >= 0)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000))
def test_platt_matches_a_plain_log_loss_minimiser(seed: int) -> None:
    rng = np.random.default_rng(seed)
    xs = rng.normal(0.3, 0.2, 40).tolist()
    ys = [bool(rng.random() < _sigmoid(6 * x - 2)) for x in xs]
    if all(ys) or not any(ys):
        ys[0] = not ys[0]
    slope, intercept = fit_platt(np.asarray(xs), np.asarray(ys))
    want = _oracle_platt(xs, ys)
    # the same minimum: equal loss, and (the loss being strictly convex) close coefficients
    assert _log_loss(slope, intercept, xs, ys) == pytest.approx(
        _log_loss(*want, xs, ys), rel=1e-6, abs=1e-9)
    assert (slope, intercept) == pytest.approx(want, rel=1e-3, abs=1e-3)


def test_platt_keeps_the_slope_non_negative() -> None:
    xs = np.asarray([0.0, 0.1, 0.9, 1.0])
    slope, intercept = fit_platt(xs, np.asarray([True, True, False, False]))
    assert slope == 0.0 and intercept == pytest.approx(0.0, abs=1e-9)  # base rate 1/2
    with pytest.raises(ValueError, match="at least one"):
        fit_platt(np.zeros(0), np.zeros(0, bool))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.booleans()), min_size=1, max_size=40))
def test_ece_matches_the_oracle(pairs: list[tuple[float, bool]]) -> None:
    ps, ys = [p for p, _ in pairs], [y for _, y in pairs]
    got = expected_calibration_error(np.asarray(ps), np.asarray(ys))
    assert got == pytest.approx(_oracle_ece(ps, ys), abs=1e-12)


def test_synthetic_set_with_known_relevance_is_calibrated() -> None:
    rng = np.random.default_rng(3)
    q, c = 600, 12
    totals = rng.normal(0.0, 1.0, (q, c))
    true = RelevanceCalibration(slope=2.5, intercept=-3.0)
    labels = rng.random((q, c)) < true.probability(totals)
    valid = np.ones((q, c), bool)
    cal = fit_relevance_calibration(totals, labels, valid, top_k=3, top_n=c)
    assert cal.slope == pytest.approx(2.5, rel=0.1)
    assert cal.intercept == pytest.approx(-3.0, rel=0.1)
    # held out: a fresh draw from the same process is calibrated
    fresh = rng.normal(0.0, 1.0, (q, c))
    fresh_labels = rng.random((q, c)) < true.probability(fresh)
    scores, relevant = top_candidates(fresh, fresh_labels, valid, c)
    assert expected_calibration_error(cal.probability(scores), relevant) < 0.03


def test_suggested_threshold_keeps_the_share_of_hits() -> None:
    # 4 queries; query i's only relevant candidate scores i (rank 1); query 3 misses
    totals = np.asarray([[0.0, -5], [1.0, -5], [2.0, -5], [-9.0, 3.0]])
    labels = np.asarray([[True, False], [True, False], [True, False], [True, False]])
    valid = np.ones_like(labels)
    cal = RelevanceCalibration(slope=1.0, intercept=0.0)
    # hits: queries 0, 1, 2 (query 3's relevant one ranks 2nd; top_k 1): keep 2 of 3
    t = suggested_threshold(cal, totals, labels, valid, top_k=1, keep=0.6)
    assert t == math.floor(_sigmoid(1.0) * 1000) / 1000
    assert suggested_threshold(cal, totals, labels, valid, top_k=1, keep=1.0) == 0.5
    assert suggested_threshold(cal, totals, labels & False, valid, top_k=1) == 0.0


def test_calibration_config_checks_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"relevance_calibration\.slope"):
        RelevanceCalibration(slope=-1.0, intercept=0.0)
    with pytest.raises(ValueError, match=r"relevance_calibration\.intercept"):
        RelevanceCalibration(slope=1.0, intercept=float("nan"))
    with pytest.raises(ValueError, match=r"default_min_relevance"):
        RelevanceCalibration(slope=1.0, intercept=0.0, default_min_relevance=2)


# ------------------------------------------------------------------ the engine

CAL = RelevanceCalibration(slope=8.0, intercept=-3.0)
TEXTS = ["the cat sat on the mat", "a dog in the park", "stock prices fell today",
         "my cat likes fish", "rain in the forecast"]


def _engine(calibration: RelevanceCalibration | None) -> EmotionalMemory:
    cfg = EmotionalMemoryConfig(retrieval=RetrievalConfig(relevance_calibration=calibration))
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=32), config=cfg)
    for text in TEXTS:
        engine.encode(text)
    return engine


def test_default_changes_nothing_and_explanations_carry_relevance() -> None:
    plain, calibrated = _engine(None), _engine(CAL)
    a = plain.retrieve_with_explanations("cat", top_k=4)
    b = calibrated.retrieve_with_explanations("cat", top_k=4)
    assert [(e.memory.content, e.score) for e in a] == [(e.memory.content, e.score) for e in b]
    assert all(e.relevance is None for e in a)
    assert "relevance" not in a[0].model_dump()
    for e in b:
        assert e.relevance == pytest.approx(_sigmoid(8.0 * e.score - 3.0), abs=1e-9)
    assert [m.content for m in plain.retrieve("cat", top_k=4)] == [
        m.content for m in calibrated.retrieve("cat", top_k=4)]


def test_min_relevance_drops_results_below_it() -> None:
    engine, probe = _engine(CAL), _engine(CAL)
    ranked = probe.retrieve_with_explanations("cat", top_k=5)
    probs = [e.relevance for e in ranked]
    assert probs == sorted(probs, reverse=True)  # type: ignore[type-var]
    cut = (probs[1] + probs[2]) / 2  # type: ignore[operator]
    kept = engine.retrieve_with_explanations("cat", top_k=5, min_relevance=cut)
    assert [e.memory.content for e in kept] == [e.memory.content for e in ranked[:2]]
    assert all(e.relevance is not None and e.relevance >= cut for e in kept)
    memories = _engine(CAL).retrieve("cat", top_k=5, min_relevance=cut)
    assert [m.content for m in memories] == [e.memory.content for e in ranked[:2]]
    # above every probability: nothing, and no retrieval side effects
    before = {m.id: m.tag.retrieval_count for m in engine.list_all()}
    assert engine.retrieve("cat", top_k=5, min_relevance=1.0) == []
    assert {m.id: m.tag.retrieval_count for m in engine.list_all()} == before
    assert len(engine.retrieve("cat", top_k=5, min_relevance=0)) == 5


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), float("inf"), "0.5", True, [0.5]])
def test_bad_min_relevance_is_a_value_error_naming_it(bad: Any) -> None:
    engine = _engine(CAL)
    with pytest.raises(ValueError, match="min_relevance"):
        engine.retrieve("cat", min_relevance=bad)
    with pytest.raises(ValueError, match="min_relevance"):
        engine.retrieve_with_explanations("cat", min_relevance=bad)


def test_min_relevance_needs_a_calibration() -> None:
    with pytest.raises(ValueError, match=r"min_relevance.*relevance_calibration"):
        _engine(None).retrieve("cat", min_relevance=0.5)


# ------------------------------------------------------------------ the service

def test_rest_search_takes_min_relevance() -> None:
    pytest.importorskip("fastapi", reason="the server extra is not installed")
    from emotional_memory.server.app import build_app
    from emotional_memory.server.service import MemoryService

    calibrated = build_app(MemoryService(_engine(CAL)), None)
    plain = build_app(MemoryService(_engine(None)), None)

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=calibrated),
                                     base_url="http://127.0.0.1") as client:
            everything = (await client.post("/v1/search", json={"query": "cat", "top_k": 5}))
            assert everything.status_code == 200, everything.text
            results = everything.json()["results"]
            assert len(results) == 5 and all(0 <= r["relevance"] <= 1 for r in results)
            cut = (results[0]["relevance"] + results[1]["relevance"]) / 2
            some = await client.post("/v1/search",
                                     json={"query": "cat", "top_k": 5, "min_relevance": cut})
            assert [r["id"] for r in some.json()["results"]] == [results[0]["id"]]
            none = await client.post("/v1/search",
                                     json={"query": "cat", "min_relevance": 1})
            assert none.status_code == 200 and none.json()["results"] == []
            for bad in (1.5, -1, "x"):
                r = await client.post("/v1/search", json={"query": "cat", "min_relevance": bad})
                assert r.status_code == 422
                assert r.json()["detail"][0]["loc"][-1] == "min_relevance"
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=plain),
                                     base_url="http://127.0.0.1") as client:
            r = await client.post("/v1/search", json={"query": "cat", "top_k": 2})
            assert r.status_code == 200 and "relevance" not in r.json()["results"][0]
            r = await client.post("/v1/search", json={"query": "cat", "min_relevance": 0.5})
            assert r.status_code == 422
            assert r.json()["detail"][0]["loc"] == ["body", "min_relevance"]

    asyncio.run(run())


_T = np.asarray([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])
_L = np.asarray([[True, False, False], [False, True, False]])
_V = np.ones((2, 3), bool)


@pytest.mark.parametrize(("kwargs", "error", "field"), [
    ({"top_n": 0}, ValueError, "top_n"),  # was silently replaced by 2 * top_k
    ({"top_n": True}, TypeError, "top_n"),
    ({"top_k": 0}, ValueError, "top_k"),  # was reported as top_n
    ({"top_k": 1.5}, TypeError, "top_k"),
    ({"keep": 2.0}, ValueError, "keep"),  # accepted: an index past the hits
    ({"keep": 0.0}, ValueError, "keep"),
    ({"keep": float("nan")}, ValueError, "keep"),
    ({"labels": _L[:, :2]}, ValueError, "labels"),  # was an IndexError
    ({"totals": np.where(_V, np.nan, 0.0)}, ValueError, "totals"),  # NaN silently dropped
])
def test_fit_relevance_calibration_refuses_bad_input(
    kwargs: dict[str, Any], error: type, field: str
) -> None:
    args: dict[str, Any] = {"totals": _T, "labels": _L, "valid": _V, "top_k": 1, **kwargs}
    with pytest.raises(error, match=field):
        fit_relevance_calibration(args.pop("totals"), args.pop("labels"), args.pop("valid"),
                                  **args)


def test_a_nan_total_of_an_unused_query_or_padding_is_ignored() -> None:
    totals = _T.copy()
    totals[1, 2] = np.nan
    valid = _V.copy()
    valid[1, 2] = False  # padding: its total is never read
    scores, relevant = top_candidates(totals, _L, valid, 2)
    assert np.isfinite(scores).all() and len(scores) == len(relevant) == 4
    kept = top_candidates(np.where(_V, np.nan, 0.0), _L, _V, 2, rows=np.zeros(2, bool))
    assert kept[0].size == 0


@pytest.mark.parametrize(("scores", "relevant", "kwargs", "field"), [
    ([1.0, np.nan, 2.0], [1, 0, 1], {}, "scores"),  # was the base rate, silently
    ([1.0, np.inf, 2.0], [1, 0, 1], {}, "scores"),
    ([1.0, 2.0, 3.0], [1], {}, "relevant"),  # was broadcast: one label for all
    ([1.0, 2.0, 3.0], [1, 0, 1], {"ridge": -1.0}, "ridge"),
    ([1.0, 2.0, 3.0], [1, 0, 1], {"iterations": 0}, "iterations"),
    ([1.0, 2.0, 3.0], [1, 0, 1], {"iterations": True}, "iterations"),
])
def test_fit_platt_refuses_bad_input(scores: list[float], relevant: list[int],
                                     kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises((TypeError, ValueError), match=field):
        fit_platt(np.asarray(scores), np.asarray(relevant), **kwargs)


def test_fit_platt_degenerate_but_valid_inputs() -> None:
    slope, intercept = fit_platt(np.asarray([1.0, 1.0, 1.0]), np.asarray([1, 0, 1]))
    assert slope == 0.0 and math.isclose(intercept, math.log(2), abs_tol=1e-5)
    slope, intercept = fit_platt(np.asarray([1.0, 2.0, 3.0]), np.asarray([1, 1, 1]))
    assert slope == 0.0 and math.isfinite(intercept)


@pytest.mark.parametrize(("probs", "relevant", "bins", "field"), [
    ([0.5, 0.2], [1, 0], 0, "bins"),  # was 0.0, silently
    ([0.5, 0.2], [1, 0], True, "bins"),
    ([np.nan, 0.2], [1, 0], 10, "probs"),
    ([-3.0, 0.2], [1, 0], 10, "probs"),
    ([0.3, 0.2], [1], 10, "relevant"),
])
def test_expected_calibration_error_refuses_bad_input(
    probs: list[float], relevant: list[int], bins: Any, field: str
) -> None:
    with pytest.raises((TypeError, ValueError), match=field):
        expected_calibration_error(np.asarray(probs), np.asarray(relevant), bins=bins)
