"""The cross-encoder re-ranker on a tiny randomly initialised BERT.

Same code as the real model (the MiniLM layers over Hugging Face tensor names) at widths
a test can differentiate numerically: the token types reach the scores, cached lower
layers plus the top equal the full forward, gradients match central finite differences
(the head and loss in float64, in a local ``jax.enable_x64`` context only; the encoder
layers, which compute in float32, in float32), scores are deterministic and independent
of the batch they are padded into, and re-ranking reorders only the top ``N``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from emotional_memory._precision import float64
from emotional_memory.embedders.cross_encoder import (
    CrossEncoder,
    PairScorer,
    embed_pairs,
    head_scores,
    init_cross_encoder,
    pair_lower_states,
    pair_tokens,
    top_scores,
)
from emotional_memory.embedders.minilm_model import _key_bias, _layer_forward
from emotional_memory.learn.rerank import (
    CandidateList,
    RerankTraining,
    build_pair_cache,
    cached_scores,
    listwise_loss,
    rerank_order,
    train_cross_encoder,
)
from support.tiny_bert import TinyEmbedder, tiny_model


def _model(seed: int = 0) -> CrossEncoder:
    ce = init_cross_encoder(tiny_model(seed), scale=5.0)
    rng = np.random.default_rng(seed + 100)  # a non-zero CLS weight, so both terms count
    head = type(ce.head)(w=jnp.asarray(rng.standard_normal(8) * 0.5, jnp.float32),
                         b=ce.head.b, log_scale=ce.head.log_scale)
    return CrossEncoder(encoder=ce.encoder, head=head)


def _pairs(seed: int = 1, n: int = 5) -> list[tuple[list[int], list[int]]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        q = [1, *rng.integers(5, 40, size=int(rng.integers(1, 6))).tolist(), 2]
        m = [1, *rng.integers(5, 40, size=int(rng.integers(1, 12))).tolist(), 2]
        out.append(pair_tokens(q, m, 64))
    return out


def _padded(pairs: list[tuple[list[int], list[int]]]) -> tuple[jax.Array, ...]:
    length = max(len(p[0]) for p in pairs)
    ids = np.zeros((len(pairs), length), np.int32)
    types = np.zeros((len(pairs), length), np.int32)
    mask = np.zeros((len(pairs), length), np.int32)
    for r, (i, t) in enumerate(pairs):
        ids[r, : len(i)], types[r, : len(t)], mask[r, : len(i)] = i, t, 1
    return jnp.asarray(ids), jnp.asarray(types), jnp.asarray(mask)


def test_pair_tokens_segments_and_truncation() -> None:
    ids, types = pair_tokens([1, 7, 8, 2], [1, 9, 10, 11, 2], 64)
    assert ids == [1, 7, 8, 2, 9, 10, 11, 2]
    assert types == [0, 0, 0, 0, 1, 1, 1, 1]
    ids, types = pair_tokens([1, *range(5, 25), 2], [1, *range(5, 40), 2], 16)
    assert len(ids) == 16 and ids[7] == 2 and ids[-1] == 2  # both segments end in [SEP]
    assert types == [0] * 8 + [1] * 8


def test_token_types_reach_the_scores() -> None:
    model = _model()
    ids, types, mask = _padded(_pairs())
    flipped = model(ids, jnp.zeros_like(types), mask)
    # with every type 0 the memory segment is empty: the cosine term has no memory mean
    assert not np.allclose(np.asarray(model(ids, types, mask)), np.asarray(flipped), atol=1e-4)


@pytest.mark.parametrize("start", [0, 1, 2])
def test_cached_lower_layers_plus_top_equal_the_full_model(start: int) -> None:
    model = _model()
    pairs = _pairs()
    full = np.asarray(model(*_padded(pairs)))
    states = pair_lower_states(model.encoder, pairs, start, rows=2)
    assert [s.shape for s in states] == [(len(p[0]), 8) for p in pairs]
    length = max(len(p[0]) for p in pairs) + 3  # extra padding changes nothing
    x = np.zeros((len(pairs), length, 8), np.float32)
    mask = np.zeros((len(pairs), length), np.int32)
    types = np.zeros((len(pairs), length), np.int32)
    for r, (s, (_, t)) in enumerate(zip(states, pairs, strict=True)):
        x[r, : len(s)], mask[r, : len(s)], types[r, : len(t)] = s, 1, t
    top = top_scores(model.encoder.layers[start:], model.head, jnp.asarray(x),
                     jnp.asarray(mask), jnp.asarray(types), model.encoder.num_heads,
                     model.encoder.eps)
    np.testing.assert_allclose(np.asarray(top), full, atol=2e-5)


def _directional_check(f: Any, params: Any, seed: int, eps: float, tol: float) -> None:
    """grad . v against the central difference (f(p + eps v) - f(p - eps v)) / 2 eps."""
    grads = jax.tree_util.tree_leaves(jax.grad(f)(params))
    leaves, tree = jax.tree_util.tree_flatten(params)
    rng = np.random.default_rng(seed)
    for _ in range(3):
        v = [jnp.asarray(rng.standard_normal(np.shape(a)), a.dtype) for a in leaves]
        norm = float(np.sqrt(sum(float(jnp.sum(d * d)) for d in v)))
        v = [d / norm for d in v]
        plus = jax.tree_util.tree_unflatten(tree, [a + eps * d for a, d in
                                                   zip(leaves, v, strict=True)])
        minus = jax.tree_util.tree_unflatten(tree, [a - eps * d for a, d in
                                                    zip(leaves, v, strict=True)])
        numeric = (float(f(plus)) - float(f(minus))) / (2 * eps)
        analytic = sum(float(jnp.sum(g * d)) for g, d in zip(grads, v, strict=True))
        assert abs(numeric) > 1e-3  # the direction moves the loss: the check is not vacuous
        assert abs(analytic - numeric) <= tol * max(1.0, abs(numeric)), (analytic, numeric)


LABELS = jnp.asarray([[True, False, False], [False, True, True]])
VALID = jnp.asarray([[True, True, True], [True, True, False]])


def test_head_and_loss_gradients_match_finite_differences_in_float64() -> None:
    with float64():  # a local x64 context (jax.enable_x64), never the global flag
        model = _model()
        ids, types, mask = _padded(_pairs(seed=3, n=6))
        states = jnp.asarray(np.random.default_rng(4).standard_normal((6, ids.shape[1], 8)))
        head = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), model.head)

        def loss(p: Any) -> jax.Array:
            return listwise_loss(head_scores(p[1], p[0], mask, types).reshape(2, 3), LABELS,
                                 VALID)

        assert loss((states, head)).dtype == jnp.float64
        _directional_check(loss, (states, head), seed=5, eps=1e-5, tol=1e-7)


def test_top_layer_gradients_match_finite_differences() -> None:
    # the encoder layers compute in float32 whatever the input dtype (LayerNorm and
    # matrix products accumulate in float32), so this check runs in float32
    model = _model()
    enc = model.encoder
    ids, types, mask = _padded(_pairs(seed=3, n=6))
    frozen = _layer_forward(enc.layers[0], embed_pairs(enc, ids, types), _key_bias(mask),
                            enc.num_heads, enc.eps)

    def loss(p: Any) -> jax.Array:
        s = top_scores(p[0], p[1], frozen, mask, types, enc.num_heads, enc.eps)
        return listwise_loss(s.reshape(2, 3), LABELS, VALID)

    _directional_check(loss, (tuple(enc.layers[1:]), model.head), seed=6, eps=1e-2, tol=2e-2)


def test_scores_are_deterministic_and_independent_of_the_batch() -> None:
    scorer = PairScorer(_model(), TinyEmbedder(), max_length=32, batch_size=4)
    texts = ["alpha beta", "gamma delta epsilon", "beta", "zeta eta theta iota kappa", "mu"]
    first = scorer.score("alpha gamma", texts)
    again = scorer.score("alpha gamma", texts)
    np.testing.assert_array_equal(first, again)
    alone = np.asarray([scorer.score("alpha gamma", [t])[0] for t in texts])
    np.testing.assert_allclose(first, alone, atol=1e-5)
    ids, types, mask = _padded(scorer.pairs("alpha gamma", texts))
    np.testing.assert_allclose(first, np.asarray(scorer.model(ids, types, mask)), atol=1e-5)
    assert len(set(np.round(first, 5).tolist())) == len(texts)
    assert scorer.score("alpha", []).shape == (0,)


def test_rerank_reorders_only_the_top_n() -> None:
    rng = np.random.default_rng(0)
    base = np.sort(rng.standard_normal(12))[::-1]
    ce = rng.standard_normal(5)
    order = rerank_order(base, ce, top_n=5)
    assert sorted(order.tolist()) == list(range(12))  # the same candidates
    np.testing.assert_array_equal(order[5:], np.arange(5, 12))  # the rest untouched
    np.testing.assert_array_equal(order[:5], np.argsort(-ce, kind="stable"))
    np.testing.assert_array_equal(rerank_order(base, ce, top_n=5, mix=0.0), np.arange(12))
    short = rerank_order(base[:3], ce[:3], top_n=5)  # fewer candidates than N
    np.testing.assert_array_equal(short, np.argsort(-ce[:3], kind="stable"))
    with pytest.raises(ValueError):
        rerank_order(base, ce[:4], top_n=5)
    with pytest.raises(ValueError):
        rerank_order(base, ce, top_n=5, mix=1.5)


def _lists() -> list[CandidateList]:
    rng = np.random.default_rng(7)
    words = ["red", "blue", "cat", "dog", "tree", "lake", "moon", "song", "car", "book"]
    out = []
    for q in range(6):
        key = words[q]
        texts = [" ".join(rng.choice(words[5:], size=3)) for _ in range(8)]
        hit = int(rng.integers(0, 8))
        texts[hit] = f"{key} {texts[hit]}"
        ids = [f"m{q}_{i}" for i in range(8)]
        out.append(CandidateList(scenario_id="s", query_id=str(q), query=f"{key} please",
                                 expected={ids[hit]}, ids=ids, texts=texts,
                                 scores=np.linspace(1.0, 0.0, 8)))
    return out


def test_training_lowers_the_loss_and_cached_scores_match_the_scorer() -> None:
    model = _model()
    embedder = TinyEmbedder()
    lists = _lists()
    cache = build_pair_cache(model, embedder, lists, start=2, hard_pool=6, max_length=32)
    assert all(len(ix) == 7 for ix in cache.pair_index)  # 1 evidence + 6 hard negatives
    opts = RerankTraining(layers=1, steps=40, queries_per_step=4, list_size=5,
                          max_positives=1, hard_pool=6, learning_rate=3e-3,
                          head_learning_rate=3e-2)
    trained, losses = train_cross_encoder(model, cache, opts)
    assert np.mean(losses[-10:]) < np.mean(losses[:10])
    # only the top layer and the head moved
    for a, b in zip(jax.tree_util.tree_leaves(trained.encoder.layers[:2]),
                    jax.tree_util.tree_leaves(model.encoder.layers[:2]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.allclose(np.asarray(trained.encoder.layers[2].qkv_w),
                           np.asarray(model.encoder.layers[2].qkv_w))
    scorer = PairScorer(trained, embedder, max_length=32)
    for qi in (0, 3):
        via_cache = cached_scores(trained, cache, qi, top_n=5)
        direct = scorer.score(lists[qi].query, lists[qi].texts[:5])
        np.testing.assert_allclose(via_cache, direct, atol=2e-2)  # float16 cache
    with pytest.raises(ValueError):
        train_cross_encoder(model, cache, RerankTraining(layers=2, steps=1))


@pytest.mark.parametrize(("option", "value", "error"), [
    ("batch_size", 0, ValueError),  # scoring looped forever on an empty pass
    ("batch_size", True, TypeError),
    ("batch_size", 2.5, TypeError),
    ("max_length", 1, ValueError),  # no room for [CLS] q [SEP] m [SEP]
    ("max_length", 10**6, ValueError),  # beyond the position table: silently clamped
    ("tokens_per_pass", 0, ValueError),
    ("pad_id", -1, ValueError),
])
def test_pair_scorer_refuses_bad_options(option: str, value: Any, error: type) -> None:
    with pytest.raises(error, match=option):
        PairScorer(_model(), TinyEmbedder(), **{"max_length": 32, option: value})


def test_pair_scorer_refuses_a_single_string_of_texts() -> None:
    scorer = PairScorer(_model(), TinyEmbedder(), max_length=32)
    with pytest.raises(TypeError, match="texts"):
        scorer.score("alpha", "beta")  # would score "b", "e", "t", "a"
    with pytest.raises(TypeError, match="query"):
        scorer.score(5, ["beta"])  # type: ignore[arg-type]


@pytest.mark.parametrize("scale", [0.0, -1.0, float("nan"), float("inf"), True])
def test_init_cross_encoder_refuses_a_bad_scale(scale: float) -> None:
    with pytest.raises((TypeError, ValueError), match="scale"):
        init_cross_encoder(tiny_model(0), scale=scale)


@pytest.mark.parametrize(("kwargs", "error", "field"), [
    ({"top_n": True}, TypeError, "top_n"),
    ({"top_n": 2.5}, TypeError, "top_n"),
    ({"mix": True}, TypeError, "mix"),
    ({"base": [3.0, float("nan"), 1.0]}, ValueError, "finite"),
    ({"ce": [float("nan"), 1.0]}, ValueError, "finite"),
    ({"base": [[3.0, 2.0, 1.0]]}, ValueError, "1-D"),
])
def test_rerank_order_refuses_bad_input(kwargs: dict[str, Any], error: type,
                                        field: str) -> None:
    args: dict[str, Any] = {"base": [3.0, 2.0, 1.0], "ce": [1.0, 2.0], "top_n": 2, "mix": 1.0}
    args.update(kwargs)
    with pytest.raises(error, match=field):
        rerank_order(args["base"], args["ce"], args["top_n"], args["mix"])


@pytest.mark.parametrize(("option", "value", "error"), [
    ("layers", True, TypeError), ("layers", 1.5, TypeError),
    ("queries_per_step", "3", TypeError), ("steps", 2.5, TypeError),
    ("steps", float("nan"), TypeError), ("steps", -1, ValueError),
    ("seed", 0.5, TypeError), ("learning_rate", float("nan"), ValueError),
    ("head_learning_rate", -1.0, ValueError), ("warmup", 1.5, ValueError),
])
def test_rerank_training_refuses_bad_options(option: str, value: Any, error: type) -> None:
    with pytest.raises(error, match=option):
        RerankTraining(**{option: value})


def test_cached_scores_refuses_bad_arguments() -> None:
    model = _model()
    cache = build_pair_cache(model, TinyEmbedder(), _lists()[:2], start=2, hard_pool=6,
                             max_length=32)
    for kwargs, field in (({"rows": 0}, "rows"), ({"top_n": True}, "top_n"),
                          ({"query": -1}, "query"), ({"query": 2}, "query")):
        args: dict[str, Any] = {"query": 0, "top_n": 3, **kwargs}
        with pytest.raises((TypeError, ValueError), match=field):
            cached_scores(model, cache, **args)


@pytest.mark.parametrize(("kwargs", "error", "field"), [
    ({"rows": 0}, ValueError, "rows"),  # was range()'s "arg 3 must not be zero"
    ({"rows": True}, TypeError, "rows"),
    ({"start": -1}, ValueError, "start"),  # silently ran all layers but the last
    ({"start": 99}, ValueError, "start"),  # silently ran every layer
    ({"start": 1.5}, TypeError, "start"),  # silently int(1.5) = 1
])
def test_pair_lower_states_refuses_bad_arguments(kwargs: dict[str, Any], error: type,
                                                 field: str) -> None:
    """As :func:`lower_states` does (the same arguments)."""
    args: dict[str, Any] = {"start": 1, **kwargs}
    with pytest.raises(error, match=field):
        pair_lower_states(tiny_model(), _pairs(), **args)


@pytest.mark.parametrize(("pair", "error", "words"), [
    (([1, 40, 2], [0, 0, 0]), ValueError, r"pairs\[1\] ids"),  # NaN states, silently
    (([1, -2, 2], [0, 0, 0]), ValueError, r"pairs\[1\] ids"),  # another token's row
    (([1, 5, 2], [0, 2, 1]), ValueError, r"pairs\[1\] token_types"),
    (([1, 5, 2], [0, 0]), ValueError, r"pairs\[1\] has 3 ids but 2"),
    (([1, *[5] * 70, 2], [0] * 72), ValueError, r"pairs\[1\] ids.*64"),  # a broadcasting error
    (([1, 5.5, 2], [0, 0, 0]), TypeError, r"pairs\[1\] ids"),
    ("ab", TypeError, r"pairs\[1\]"),
])
def test_pair_inputs_the_encoder_cannot_embed_are_refused(
    pair: Any, error: type, words: str
) -> None:
    good = pair_tokens([1, 5, 2], [1, 6, 2], 64)
    with pytest.raises(error, match=words):
        pair_lower_states(tiny_model(), [good, pair], 1)
    with pytest.raises(error, match=words):
        PairScorer(_model(), TinyEmbedder(), max_length=64).score_pairs([good, pair])


def test_pair_lower_states_refuses_a_pad_id_outside_the_vocabulary() -> None:
    with pytest.raises(ValueError, match="pad_id"):
        pair_lower_states(tiny_model(), _pairs(), 1, pad_id=40)
