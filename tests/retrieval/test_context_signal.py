"""The opt-in conversational context signal s8.

* the kernel signal against a plain-Python oracle (hypothesis): neighbours lend
  ``mix * s1 + (1 - mix) * s7``, a memory takes the best of its present neighbours;
  the eight weights and the totals against plain-Python normalisation and sums;
* gradients of the weight and the mix against central finite differences;
* encode-order neighbours (timestamps, ties in store order, the time window) against a
  plain-Python sort;
* the engine: weight 0 is today's ranking bit for bit; with s8 on, the neighbours of
  the shortlist join the candidates, so a memory lifted only by its neighbour is found
  and the answer equals scoring the whole bank (the engine with every memory as a
  candidate, and ``score_queries``); neighbours stay inside the retrieving scope;
* fitting: the batch forward with neighbours equals the engine's scores, the
  ``context`` group trains and is written to the config, and model selection offers
  the context models.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory import EmotionalMemory, EmotionalMemoryConfig, InMemoryStore
from emotional_memory._context import encode_neighbours, missing_neighbours, neighbour_rows
from emotional_memory._precision import float64
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.kernel import (
    ContextInputs,
    ContextParams,
    DecayParams,
    GateParams,
    LexicalInputs,
    LexicalParams,
    MemoryColumns,
    QueryFeatures,
    ScoringParams,
    context_signal,
    score_given_semantic,
)
from emotional_memory.replay import TickClock
from emotional_memory.retrieval import RetrievalConfig
from support.lexical import (
    capture_pass2_scores,
    oracle_gated,
    oracle_normalise,
    tiny_dataset,
)

FEW = settings(max_examples=40, deadline=None)


# ------------------------------------------------------------------ 1. the signal


def oracle_context(
    lent: Sequence[float], neighbours: Sequence[Sequence[int]], valid: Sequence[bool]
) -> list[float]:
    """s8 in plain Python: the best value a present, valid neighbour lends (else 0)."""
    n = len(lent)
    out = []
    for i in range(n):
        values = [lent[j] for j in neighbours[i] if 0 <= j < n and valid[j] and valid[i]]
        out.append(max(values) if values else 0.0)
    return out


@st.composite
def context_case(draw: Any) -> Any:
    n = draw(st.integers(1, 10))
    lent = draw(st.lists(st.floats(-2, 2), min_size=n, max_size=n))
    pairs = draw(st.lists(st.tuples(st.integers(-1, n + 1), st.integers(-1, n + 1)),
                          min_size=n, max_size=n))
    valid = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return lent, pairs, valid


@FEW
@given(context_case())
def test_context_signal_matches_oracle(case: Any) -> None:
    lent, pairs, valid = case
    with float64():
        got = np.asarray(context_signal(
            jnp.asarray(lent, jnp.float64),
            ContextInputs(neighbours=np.asarray(pairs, np.int32).reshape(-1, 2)),
            np.asarray(valid),
        )).tolist()
    assert got == oracle_context(lent, pairs, valid)


def _vector(*values: Any) -> Any:
    """Host float64 values, or a JAX vector when one of them is traced (a gradient)."""
    if any(isinstance(v, jax.core.Tracer) for v in values):
        return jnp.stack([jnp.asarray(v) for v in values])
    return np.asarray(values, np.float64)


def make_params(base: Sequence[float], gates: Sequence[float], lex_w: float, ctx_w: float,
                mix: float) -> ScoringParams:
    return ScoringParams(
        base_weights=np.asarray(base, np.float64),
        gates=GateParams.from_vector(np.asarray(gates, np.float64)),
        decay=DecayParams.from_vector(np.asarray([0.3, 0.5, 0.1, 0.7, 0.3, 1.0, 1.0])),
        distance_scale=np.asarray(math.sqrt(6.0)),
        signal_scale=np.ones(6), signal_shift=np.zeros(6),
        lexical=LexicalParams.from_vector(_vector(lex_w, 1.2, 0.75)),
        context=ContextParams.from_vector(_vector(ctx_w, mix)),
    )


def random_bank(rng: np.random.Generator, n: int, terms: int = 3) -> tuple[Any, ...]:
    valid = np.ones(n, bool)
    valid[n - 1] = n < 3  # a padding row when the bank is big enough
    columns = MemoryColumns(
        embedding=np.zeros((n, 0)), affect=rng.uniform(-1, 1, (n, 3)),
        mood=rng.uniform(-1, 1, (n, 3)), velocity=rng.normal(size=(n, 3)),
        age_seconds=rng.uniform(1, 1e5, n), consolidation=rng.uniform(0, 1, n),
        retrieval_count=rng.integers(0, 4, n).astype(float), activation=rng.uniform(0, 1, n),
        valid=valid,
    )
    query = QueryFeatures(embedding=np.zeros(0), affect=rng.uniform(-1, 1, 3),
                          mood=rng.uniform(-1, 1, 3), velocity=rng.normal(size=3))
    lexical = LexicalInputs(
        tf=rng.integers(0, 3, (n, terms)).astype(float), length=rng.integers(1, 9, n) * 1.0,
        df=rng.integers(1, n + 1, terms) * 1.0, n_docs=np.asarray(float(n + 2)),
        avg_length=np.asarray(4.0),
    )
    neighbours = rng.integers(-1, n, (n, 2)).astype(np.int32)
    semantic = rng.uniform(-1, 1, n)
    return columns, query, lexical, ContextInputs(neighbours=neighbours), semantic


GATES = st.tuples(
    st.floats(-0.5, 0.5), st.floats(-1, 1), st.floats(0.1, 10),
    st.floats(-0.5, 0.5), st.floats(0, 1), st.floats(0.1, 10),
    st.floats(-0.5, 0.5), st.floats(0.05, 2), st.floats(0, 1), st.floats(0.1, 10),
)


@FEW
@given(st.lists(st.floats(0, 1), min_size=6, max_size=6), GATES, st.floats(0, 2),
       st.floats(0, 2), st.floats(0, 1), st.integers(1, 9), st.integers(0, 10_000))
def test_eight_signal_score_matches_oracle(
    base: list[float], gates: tuple[float, ...], lex_w: float, ctx_w: float, mix: float,
    n: int, seed: int,
) -> None:
    columns, query, lexical, context, semantic = random_bank(np.random.default_rng(seed), n)
    params = make_params(base, gates, lex_w, ctx_w, mix)
    with float64():
        seven = score_given_semantic(params, query, columns, semantic, None, lexical)
        eight = score_given_semantic(params, query, columns, semantic, None, lexical, context)
        raw7, raw8 = np.asarray(seven.raw), np.asarray(eight.raw)
        w8, totals = np.asarray(eight.weights).tolist(), np.asarray(eight.totals)
    # s1..s7 are the seven-signal path's, bit for bit; s8 from them (oracle)
    assert raw8[:, :7].tobytes() == raw7.tobytes()
    valid = np.asarray(columns.valid).tolist()
    lent = [mix * raw7[i, 0] + (1 - mix) * raw7[i, 6] for i in range(n)]
    want_s8 = oracle_context(lent, np.asarray(context.neighbours).tolist(), valid)
    assert raw8[:, 7].tolist() == pytest.approx(want_s8, abs=1e-12)
    v, a = (float(x) for x in query.mood[:2])
    want_w = oracle_normalise([*oracle_gated(base, gates, v, a), lex_w, ctx_w])
    assert w8 == pytest.approx(want_w, abs=1e-12)
    for i in range(n):
        if valid[i]:
            want = sum(w * s for w, s in zip(want_w, [*raw7[i], want_s8[i]], strict=True))
            assert totals[i] == pytest.approx(want, abs=1e-10)
        else:
            assert totals[i] == -np.inf


def test_context_needs_lexical_inputs() -> None:
    columns, query, _, context, semantic = random_bank(np.random.default_rng(0), 4)
    with pytest.raises(ValueError, match="lexical"):
        score_given_semantic(make_params([0.5] * 6, [0.0] * 10, 0.1, 0.2, 0.5), query,
                             columns, semantic, None, None, context)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gradients_match_finite_differences(seed: int) -> None:
    columns, query, lexical, context, semantic = random_bank(np.random.default_rng(seed), 7)
    gates = [0.1, -0.2, 2.0, 0.1, 0.5, 3.0, 0.1, 0.5, 0.4, 2.0]

    def loss(x: Any) -> Any:  # x = (lexical weight, context weight, mix)
        params = make_params([0.4, 0.2, 0.1, 0.1, 0.1, 0.1], gates, x[0], x[1], x[2])
        out = score_given_semantic(params, query, columns, semantic, None, lexical, context)
        z = jnp.where(columns.valid, out.totals / 0.1, -1e30)
        return jax.nn.logsumexp(z) - z[0]

    x0 = np.asarray([0.3, 0.4, 0.35])
    with float64():
        grad = np.asarray(jax.grad(loss)(jnp.asarray(x0)))
        eps = 1e-6
        fd = np.asarray([
            (float(loss(jnp.asarray(x0 + eps * e))) - float(loss(jnp.asarray(x0 - eps * e))))
            / (2 * eps) for e in np.eye(3)
        ])
    assert np.all(np.isfinite(grad))
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-7)
    assert abs(grad[1]) > 0 and abs(grad[2]) > 0  # both parameters reach the loss


def test_gradient_finite_without_neighbours() -> None:
    columns, query, lexical, _, semantic = random_bank(np.random.default_rng(3), 5)
    none = ContextInputs(neighbours=np.full((5, 2), -1, np.int32))

    def total(mix: Any) -> Any:
        params = make_params([0.5] * 6, [0.0] * 10, 0.2, 0.3, mix)
        out = score_given_semantic(params, query, columns, semantic, None, lexical, none)
        return jnp.sum(jnp.where(columns.valid, out.totals, 0.0))

    with float64():
        g = float(jax.grad(total)(jnp.float64(0.5)))
    assert g == 0.0


# ------------------------------------------------------------------ 2. neighbours


def oracle_neighbours(ids: list[str], ages: list[float], window: float | None
                      ) -> dict[str, tuple[str | None, str | None]]:
    order = sorted(range(len(ids)), key=lambda i: (-ages[i], i))
    out = {}
    for pos, i in enumerate(order):
        prev = order[pos - 1] if pos else None
        nxt = order[pos + 1] if pos + 1 < len(order) else None
        if window is not None:
            prev = prev if prev is not None and abs(ages[prev] - ages[i]) <= window else None
            nxt = nxt if nxt is not None and abs(ages[nxt] - ages[i]) <= window else None
        out[ids[i]] = (None if prev is None else ids[prev], None if nxt is None else ids[nxt])
    return out


@FEW
@given(st.lists(st.integers(0, 6), min_size=0, max_size=12),
       st.one_of(st.none(), st.floats(0.5, 4)))
def test_encode_neighbours_matches_oracle(ages: list[int], window: float | None) -> None:
    ids = [f"m{i}" for i in range(len(ages))]
    fages = [float(a) for a in ages]
    links = encode_neighbours(ids, fages, window)
    assert links == oracle_neighbours(ids, fages, window)
    rows = neighbour_rows(ids[::-1], links)  # rows follow the bank's order
    for r, mid in enumerate(ids[::-1]):
        for k in range(2):
            other = links[mid][k]
            assert rows[r, k] == (-1 if other is None else ids[::-1].index(other))
    extra = missing_neighbours(ids[:2], links)
    assert set(extra) == {x for m in ids[:2] for x in links[m] if x} - set(ids[:2])


# ------------------------------------------------------------------ 3. the engine

QUERY = "quokka zanzibar ferry"


def conversation() -> list[str]:
    """Filler turns; one turn carries the query's words, the answer comes right after
    it and shares nothing with the query."""
    out = [f"we talked about the garden and the weather number {i}" for i in range(20)]
    out[11] = "did you ever take the quokka zanzibar ferry"
    out[12] = "yes last summer with my sister, it took four hours"
    return out


def make_engine(clock: TickClock | None = None, **retrieval: Any) -> EmotionalMemory:
    cfg = EmotionalMemoryConfig(enable_resonance=False,
                                retrieval=RetrievalConfig(**retrieval))
    return EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=64), config=cfg,
                           clock=clock or TickClock())


def filled(texts: Sequence[str], **retrieval: Any) -> EmotionalMemory:
    engine = make_engine(**retrieval)
    for text in texts:
        engine.encode(text)
    return engine


def ranking(engine: EmotionalMemory, query: str, k: int) -> list[tuple[str, float]]:
    return [(e.memory.content, e.score) for e in engine.plan_retrieval(query, k).pass2[:k]]


def test_weight_zero_is_todays_ranking_bit_for_bit() -> None:
    texts = conversation()
    for lexical in (0.0, 0.4):
        today = filled(texts, lexical_weight=lexical)
        off = filled(texts, lexical_weight=lexical, context_weight=0.0, context_mix=0.9,
                     context_window_seconds=5.0)
        for query, k in [(QUERY, 2), ("garden weather", 3), ("", 1)]:
            a = [(e.memory.content, e.score, e.candidate_count, e.breakdown.model_dump())
                 for e in today.retrieve_with_explanations(query, top_k=k)]
            b = [(e.memory.content, e.score, e.candidate_count, e.breakdown.model_dump())
                 for e in off.retrieve_with_explanations(query, top_k=k)]
            assert a == b
            assert all("context_weight" not in row[3] for row in a)


CONTEXT = {"lexical_weight": 0.3, "context_weight": 3.0, "context_mix": 0.2,
           "candidate_multiplier": 1}


def test_neighbours_join_the_candidates_and_equal_the_whole_bank() -> None:
    from emotional_memory.batch_retrieval import score_queries

    texts = conversation()
    engine = filled(texts, **CONTEXT)
    answer = texts[12]
    # test setup: the answer is in neither shortlist of top_k memories
    k = 2
    q = engine.embedder.embed(QUERY)
    semantic = [m.content for m in engine.store.search_by_embedding(q, k)]
    assert answer not in semantic
    no_context = filled(texts, **{**CONTEXT, "context_weight": 0.0})
    plain_plan = no_context.plan_retrieval(QUERY, k)
    assert answer not in [m.content for m in plain_plan.candidates]
    plan = engine.plan_retrieval(QUERY, k)
    assert answer in [m.content for m in plan.candidates]  # joined as a neighbour
    assert plan.pass2[0].memory.content == answer  # lifted by the turn before it
    assert plan.pass2[0].breakdown.context_signal is not None
    assert plan.pass2[0].breakdown.context_signal > 0.5
    # the same answer as scoring every memory: the engine with the whole bank as its
    # candidates, and the batch scorer (which reads the whole bank)
    whole = filled(texts, **CONTEXT, full_bank_candidates=True)
    assert [c for c, _ in ranking(engine, QUERY, k)] == [c for c, _ in ranking(whole, QUERY, k)]
    for a, b in zip(ranking(engine, QUERY, k), ranking(whole, QUERY, k), strict=True):
        assert a[1] == pytest.approx(b[1], rel=1e-12, abs=1e-12)
    batch = score_queries(whole, [QUERY, "garden weather"], top_k=k)
    assert [m.content for m, _ in batch[0]] == [c for c, _ in ranking(whole, QUERY, k)]
    for (_, s), (_, want) in zip(batch[0], ranking(whole, QUERY, k), strict=True):
        assert s == pytest.approx(want, rel=1e-12, abs=1e-12)
    garden = [c for c, _ in ranking(whole, "garden weather", k)]
    assert [m.content for m, _ in batch[1]] == garden


def test_neighbours_stay_in_the_scope_and_the_window() -> None:
    texts = conversation()
    root = make_engine(**CONTEXT)
    alice, bob = root.scoped("alice"), root.scoped("bob")
    for i, text in enumerate(texts):
        alice.encode(text)
        if i == 11:  # another scope's memory encoded in between
            bob.encode("unrelated note about taxes")
    plan = alice.plan_retrieval(QUERY, 2)
    assert plan.pass2[0].memory.content == texts[12]
    assert all(m.scope == ("alice",) for m in plan.candidates)
    # a window shorter than the clock's tick: nobody is anybody's neighbour
    clock = TickClock(step=timedelta(seconds=10))
    narrow = make_engine(clock, **CONTEXT, context_window_seconds=1.0)
    for text in texts:
        narrow.encode(text)
    plan = narrow.plan_retrieval(QUERY, 2)
    assert all(r.breakdown.context_signal == 0.0 for r in plan.pass2)
    assert plan.pass2[0].memory.content == texts[11]


def test_bad_context_config_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="context_weight"):
        RetrievalConfig(context_weight=-0.1)
    with pytest.raises(ValueError, match="context_mix"):
        RetrievalConfig(context_mix=1.5)
    with pytest.raises(ValueError, match="context_window_seconds"):
        RetrievalConfig(context_window_seconds=0.0)


# ------------------------------------------------------------------ 4. fitting


def context_dataset() -> dict[str, Any]:
    data = tiny_dataset()
    data["scenarios"][0]["sessions"][0]["queries"].append(
        {"query_id": "q4", "query": "walked the dog", "expected_memory_ids": ["b"]}
    )
    return data


def test_batch_forward_with_neighbours_equals_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    from emotional_memory.learn import build_recall_batch, evaluate_batch
    from emotional_memory.scoring_config import params_from_config

    cfg = EmotionalMemoryConfig(retrieval=RetrievalConfig(
        lexical_weight=0.3, context_weight=0.5, context_mix=0.3, candidate_multiplier=1))
    captured = capture_pass2_scores(monkeypatch)
    batch, _ = build_recall_batch(context_dataset(), HashingEmbedder(dim=8), cfg,
                                  lexical=True, context=True)
    assert batch.context is not None
    assert np.asarray(batch.context.neighbours).shape[:2] == batch.labels.shape
    totals = evaluate_batch(params_from_config(cfg.retrieval, cfg.decay), batch, cfg)
    for q, want in enumerate(captured):
        assert totals[q, : len(want)].tolist() == pytest.approx(want, rel=1e-12, abs=1e-12)
    # a model without s8 scores the same batch with seven signals (the neighbours unused)
    seven = cfg.model_copy(update={"retrieval": cfg.retrieval.model_copy(
        update={"context_weight": 0.0})})
    batch7, _ = build_recall_batch(context_dataset(), HashingEmbedder(dim=8), seven,
                                   lexical=True)
    params7 = params_from_config(seven.retrieval, seven.decay)
    got = evaluate_batch(params7, batch, seven)
    assert batch.labels.shape[1] >= batch7.labels.shape[1]
    assert np.all(np.isfinite(got[np.asarray(batch.columns.valid)]))


def test_fit_trains_the_context_group_and_selection_offers_it() -> None:
    from emotional_memory.learn import build_recall_batch, fit
    from emotional_memory.learn.fitting import candidate_models

    cfg = EmotionalMemoryConfig(retrieval=RetrievalConfig(
        lexical_weight=0.3, context_weight=0.3))
    batch, info = build_recall_batch(context_dataset(), HashingEmbedder(dim=8), cfg,
                                     lexical=True, context=True)
    result = fit(batch, info, cfg, trainable=("base_weights", "lexical", "context"),
                 steps=40, val_fraction=0.0, l2=0.001)
    r = result.config.retrieval
    assert (r.context_weight, r.context_mix) != (0.3, 0.5)  # both moved
    assert r.context_weight > 0
    loss = result.history["train_loss"]
    assert loss[-1] < loss[0]
    again = EmotionalMemoryConfig.model_validate_json(result.config.model_dump_json())
    assert again.retrieval.context_weight == r.context_weight
    names = candidate_models(cfg, True, analyses=("stem",), adapter=True, context=True)
    assert {"lexical_context", "lexical_context_adapter", "lexical_context@stem"} <= set(names)
    assert "context" in names["lexical_context"][1]
    assert "lexical_context" not in candidate_models(cfg, True)


def test_cli_fits_the_context_signal(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    from training.cli import main

    from support.recall_data import unlabelled_dataset

    path = tmp_path / "unlabelled.json"
    path.write_text(json.dumps(unlabelled_dataset(2)), encoding="utf-8")
    out = tmp_path / "fitted.json"
    assert main(["fit", "--dataset", str(path), "--affect", "neutral", "--quiet", "--json",
                 "--trainable", "base_weights,lexical,context", "--l2", "0.01",
                 "--temperature", "0.05", "--steps", "20", "--out", str(out)]) == 0
    capsys.readouterr()
    config = EmotionalMemoryConfig.model_validate_json(out.read_text(encoding="utf-8"))
    assert config.retrieval.context_weight > 0  # started at 0.3, fitted
    assert main(["evaluate", "--dataset", str(path), "--affect", "neutral", "--json",
                 "--quiet", "--config", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["n_queries"] == 12
