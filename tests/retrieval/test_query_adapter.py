"""The opt-in query adapter: ``q -> q + left @ (right.T @ q)``.

* the kernel map against numpy; zero ``left`` is the identity bit for bit; the
  gradient of the adapted query's cosines against finite differences;
* the config: JSON round trip, checksum and size checks with clear errors;
* the engine: the adapted query is what the store searches and s1 scores (oracle:
  numpy cosines of the adapted query), batch scoring too, a wrong dimension is a clear
  error, no adapter = today's ranking;
* fitting: the batch forward with an adapter equals the engine's pass 2 under the
  fitted config; a fit starts at the identity and writes the adapter into the config.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.test_util import check_grads

from emotional_memory import EmotionalMemory, EmotionalMemoryConfig, InMemoryStore
from emotional_memory._precision import float64
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.kernel import bank_cosine
from emotional_memory.kernel.adapter import QueryAdapter, adapt_query
from emotional_memory.learn import semantic_only_config
from emotional_memory.replay import TickClock
from emotional_memory.retrieval import QueryAdapterConfig, RetrievalConfig
from support.lexical import capture_pass2_scores, tiny_dataset

DIM = 16


def factors(rank: int, seed: int, scale: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (scale * rng.standard_normal((DIM, rank)), rng.standard_normal((DIM, rank)))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, DIM), st.integers(0, 10_000))
def test_kernel_map_matches_numpy(rank: int, seed: int) -> None:
    left, right = factors(rank, seed)
    q = np.random.default_rng(seed + 1).standard_normal((3, DIM))
    with float64():
        got = np.asarray(adapt_query(QueryAdapter(jnp.asarray(left), jnp.asarray(right)),
                                     jnp.asarray(q)))
    want = np.stack([x + left @ (right.T @ x) for x in q])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_adapted_cosines_have_the_finite_difference_gradient() -> None:
    """What fitting differentiates: s1 of the adapted query against a bank, w.r.t. both
    factors and the query (check_grads, float64), and at the identity (``left`` = 0)
    the gradient w.r.t. ``left`` is the closed form ``d s1 / d q`` times ``(right.T q)``."""
    left, right = factors(3, 5)
    rng = np.random.default_rng(6)
    q, bank = rng.standard_normal(DIM), rng.standard_normal((7, DIM))
    coeffs = np.linspace(-1.0, 2.0, 7)

    def s1(left: jnp.ndarray, right: jnp.ndarray, q: jnp.ndarray) -> jnp.ndarray:
        adapted = adapt_query(QueryAdapter(left, right), q)
        return jnp.sum(jnp.asarray(coeffs) * bank_cosine(adapted, jnp.asarray(bank)))

    with float64():
        args = tuple(jnp.asarray(x) for x in (left, right, q))
        check_grads(jax.jit(s1), args, order=1, modes=["fwd", "rev"])
        zero = jnp.zeros_like(args[0])
        g_left = np.asarray(jax.grad(s1)(zero, args[1], args[2]))
        g_q = np.asarray(jax.grad(s1, argnums=2)(zero, args[1], args[2]))
    np.testing.assert_allclose(g_left, np.outer(g_q, right.T @ q), rtol=1e-10, atol=1e-12)


def test_zero_left_is_the_identity_bit_for_bit() -> None:
    _, right = factors(4, 3)
    q = np.random.default_rng(0).standard_normal(DIM)
    with float64():
        got = np.asarray(adapt_query(QueryAdapter(np.zeros((DIM, 4)), right), jnp.asarray(q)))
    assert got.tobytes() == q.tobytes()


def test_config_round_trip_and_checks() -> None:
    left, right = factors(3, 1)
    spec = QueryAdapterConfig.from_factors(left, right)
    assert (spec.dim, spec.rank) == (DIM, 3)
    cfg = RetrievalConfig(query_adapter=spec)
    again = RetrievalConfig.model_validate_json(cfg.model_dump_json())
    assert again == cfg
    got_left, got_right = again.query_adapter.factors()  # type: ignore[union-attr]
    assert got_left.tobytes() == left.tobytes() and got_right.tobytes() == right.tobytes()
    raw = json.loads(cfg.model_dump_json())
    edited = json.loads(json.dumps(raw))
    edited["query_adapter"]["left"][5] += 1e-9
    with pytest.raises(ValueError, match=r"query_adapter.sha256"):
        RetrievalConfig.model_validate(edited)
    short = json.loads(json.dumps(raw))
    short["query_adapter"]["right"] = short["query_adapter"]["right"][:-1]
    with pytest.raises(ValueError, match=r"query_adapter.right"):
        RetrievalConfig.model_validate(short)
    bad = json.loads(json.dumps(raw))
    bad["query_adapter"]["left"][0] = float("nan")
    with pytest.raises(ValueError, match=r"query_adapter.left"):
        RetrievalConfig.model_validate(bad)
    with pytest.raises(ValueError, match=r"query_adapter.rank"):
        QueryAdapterConfig.from_factors(np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"query_adapter.dim"):
        RetrievalConfig.model_validate({"query_adapter": {**raw["query_adapter"], "dim": 0}})
    assert RetrievalConfig().query_adapter is None


TEXTS = [f"{w} note {i}" for i, w in enumerate(
    ["river walk", "bread recipe", "train delay", "garden roses", "piano lesson",
     "tax forms", "beach trip", "birthday cake", "job interview", "rainy day",
     "coffee shop", "old friend"])]


def engine_with(cfg: EmotionalMemoryConfig) -> EmotionalMemory:
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=DIM), config=cfg,
                             clock=TickClock())
    for text in TEXTS:
        engine.encode(text)
    return engine


def cosine_order(query: np.ndarray, engine: EmotionalMemory) -> list[str]:
    mems = engine.list_all()
    emb = np.asarray([m.embedding for m in mems], np.float64)
    cos = emb @ query / (np.linalg.norm(emb, axis=1) * np.linalg.norm(query))
    order = np.argsort(-cos, kind="stable")
    return [mems[i].content for i in order]


@pytest.mark.parametrize("multiplier", [1, 100])
def test_engine_searches_and_scores_the_adapted_query(multiplier: int) -> None:
    left, right = factors(4, 7, scale=2.0)
    base = semantic_only_config(EmotionalMemoryConfig())
    cfg = base.model_copy(update={"retrieval": base.retrieval.model_copy(update={
        "query_adapter": QueryAdapterConfig.from_factors(left, right),
        "candidate_multiplier": multiplier,
    })})
    adapted, plain = engine_with(cfg), engine_with(base)
    query = "a walk by the river with an old friend"
    q = np.asarray(HashingEmbedder(dim=DIM).embed(query), np.float64)
    want = cosine_order(q + left @ (right.T @ q), adapted)
    assert want != cosine_order(q, adapted), "test setup: the adapter must reorder"
    ex = adapted.retrieve_with_explanations(query, top_k=3)
    assert [e.memory.content for e in ex] == want[:3]
    # with a shortlist of top_k rows, the store searched with the adapted query
    if multiplier == 1:
        assert ex[0].candidate_count == 3
    plain_ex = plain.retrieve_with_explanations(query, top_k=3)
    assert [e.memory.content for e in plain_ex] == cosine_order(q, plain)[:3]


def test_batch_scoring_uses_the_adapter() -> None:
    from emotional_memory.batch_retrieval import score_queries

    left, right = factors(4, 7, scale=2.0)
    base = semantic_only_config(EmotionalMemoryConfig())
    cfg = base.model_copy(update={"retrieval": base.retrieval.model_copy(update={
        "query_adapter": QueryAdapterConfig.from_factors(left, right)})})
    engine = engine_with(cfg)
    query = "a walk by the river with an old friend"
    q = np.asarray(HashingEmbedder(dim=DIM).embed(query), np.float64)
    got = score_queries(engine, [query], top_k=3)[0]
    assert [m.content for m, _ in got] == cosine_order(q + left @ (right.T @ q), engine)[:3]


def test_wrong_dimension_is_a_clear_error() -> None:
    left, right = factors(2, 0)
    cfg = EmotionalMemoryConfig(retrieval=RetrievalConfig(
        query_adapter=QueryAdapterConfig.from_factors(left, right)))
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=DIM * 2), config=cfg)
    engine.encode("something")
    before = [m.model_dump() for m in engine.list_all()]
    with pytest.raises(ValueError, match=r"query_adapter.dim"):
        engine.retrieve("something")
    assert [m.model_dump() for m in engine.list_all()] == before


def test_batch_forward_with_adapter_equals_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    from emotional_memory.learn import build_recall_batch, evaluate_batch
    from emotional_memory.scoring_config import params_from_config

    left, right = factors(3, 11, scale=1.0)
    left, right = left[:8], right[:8]
    cfg = EmotionalMemoryConfig(retrieval=RetrievalConfig(
        lexical_weight=0.3, full_bank_candidates=True,
        query_adapter=QueryAdapterConfig.from_factors(left, right)))
    captured = capture_pass2_scores(monkeypatch)
    batch, _ = build_recall_batch(tiny_dataset(), HashingEmbedder(dim=8), cfg, lexical=True,
                                  embeddings=True)
    assert batch.query.embedding.shape == (3, 8)
    totals = evaluate_batch(params_from_config(cfg.retrieval, cfg.decay), batch, cfg)
    for q, want in enumerate(captured):
        assert totals[q, : len(want)].tolist() == pytest.approx(want, rel=1e-12, abs=1e-12)
    # the batch's own semantic column is the adapted one (what the replay saw) ...
    plain = cfg.model_copy(update={"retrieval": cfg.retrieval.model_copy(
        update={"query_adapter": None})})
    same = evaluate_batch(params_from_config(cfg.retrieval, cfg.decay), batch, plain)
    np.testing.assert_allclose(same, totals, rtol=1e-12, atol=1e-12)


def test_fit_trains_the_adapter_from_the_identity() -> None:
    from emotional_memory.learn import build_recall_batch, fit

    cfg = EmotionalMemoryConfig(retrieval=RetrievalConfig(lexical_weight=0.3))
    batch, info = build_recall_batch(tiny_dataset(), HashingEmbedder(dim=8), cfg,
                                     lexical=True, embeddings=True)
    result = fit(batch, info, cfg, trainable=("base_weights", "adapter"), steps=30,
                 adapter_rank=3, val_fraction=0.0, l2=0.01, adapter_l2=0.01)
    spec = result.config.retrieval.query_adapter
    assert spec is not None and (spec.dim, spec.rank) == (8, 3)
    left, _ = spec.factors()
    assert np.abs(left).max() > 0  # moved from the identity
    loss = result.history["train_loss"]
    assert loss[-1] < loss[0]
    # the identity start scores as the plain model (initial metrics = no adapter)
    plain = fit(batch, info, cfg, trainable=("base_weights",), steps=0)
    assert result.initial_metrics == plain.initial_metrics
    with pytest.raises(ValueError, match=r"embeddings=True"):
        fit(*build_recall_batch(tiny_dataset(), HashingEmbedder(dim=8), cfg, lexical=True),
            cfg, trainable=("adapter",), steps=1)
    with pytest.raises(ValueError, match="adapter_rank"):
        fit(batch, info, cfg, trainable=("adapter",), adapter_rank=0)


def test_select_adapter_chooses_rank_and_pull_by_inner_cv() -> None:
    from emotional_memory.learn import build_recall_batch, select_adapter
    from emotional_memory.learn.fitting import evaluate_batch, fit, ranking_metrics
    from emotional_memory.scoring_config import params_from_config

    cfg = EmotionalMemoryConfig(retrieval=RetrievalConfig(lexical_weight=0.3))
    data = tiny_dataset()
    data["scenarios"].append({**data["scenarios"][0], "scenario_id": "s3"})
    batch, info = build_recall_batch(data, HashingEmbedder(dim=8), cfg, lexical=True,
                                     embeddings=True)
    trainable = ("base_weights", "adapter")
    grid = {"adapter_rank": (1, 2), "adapter_l2": (0.01, 1.0)}
    best, table = select_adapter(batch, info, cfg, grid=grid, folds=2, trainable=trainable,
                                 steps=5, val_fraction=0.0)
    assert {(r["adapter_rank"], r["adapter_l2"]) for r in table} == {
        (1, 0.01), (1, 1.0), (2, 0.01), (2, 1.0)}
    top = max(r["top1"] for r in table)
    row = next(r for r in table if (r["adapter_rank"], r["adapter_l2"]) ==
               (best["adapter_rank"], best["adapter_l2"]))
    assert row["top1"] == top
    # the table's number is the out-of-fold top-1 of plain fits with those settings
    scen = np.asarray(batch.scenario)
    perm = np.random.default_rng(3).permutation(np.unique(scen))
    parts = [np.sort(p) for p in np.array_split(perm, 2)]
    hits: list[float] = []
    for held in parts:
        held_mask = np.isin(scen, held)
        fitted = fit(batch, info, cfg, trainable=trainable, steps=5, val_fraction=0.0,
                     train_mask=~held_mask, adapter_rank=best["adapter_rank"],
                     adapter_l2=best["adapter_l2"]).config
        per = ranking_metrics(
            evaluate_batch(params_from_config(fitted.retrieval, fitted.decay), batch, fitted),
            np.asarray(batch.labels), np.asarray(batch.columns.valid), info.top_k)
        hits.extend(per["top1"][held_mask].tolist())
    assert row["top1"] == pytest.approx(float(np.mean(hits)), abs=1e-9)
    with pytest.raises(ValueError, match="adapter"):
        select_adapter(batch, info, cfg, trainable=("base_weights",))
