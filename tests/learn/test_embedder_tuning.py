"""Embedder fine-tuning (``learn/embedder_tuning.py``) on a tiny BERT and the builtin data.

The tuner's step scores each query's sub-list (positives + hard negatives) with the
scoring model; these tests check that sub-list scoring against the full batch's scores
(lexical and context signals on), the training loss' gradient against finite
differences, the held-out evaluation against a plain numpy cosine ranking, and the
inner-CV decision's consistency.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from emotional_memory import EmotionalMemoryConfig
from emotional_memory.data import load_builtin_dataset
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.learn import build_recall_batch
from emotional_memory.learn.embedder_tuning import (
    EmbedderTuning,
    _loss,
    _setup,
    _step_inputs,
    _sub_batch,
    evaluate_tuned,
    tune_embedder,
    tuning_texts,
)
from emotional_memory.learn.losses import batch_scores, evaluate_batch
from emotional_memory.learn.selection import semantic_only_config
from emotional_memory.scoring_config import params_from_config
from support.tiny_bert import TinyEmbedder


def _config() -> EmotionalMemoryConfig:
    cfg = EmotionalMemoryConfig()
    return cfg.model_copy(update={"retrieval": cfg.retrieval.model_copy(update={
        "lexical_weight": 0.35, "context_weight": 0.3, "context_mix": 0.5,
    })})


@pytest.fixture(scope="module")
def setting() -> dict[str, Any]:
    data = load_builtin_dataset()
    cfg = _config()
    batch, info = build_recall_batch(data, HashingEmbedder(dim=32), cfg, lexical=True,
                                     context=True)
    emb = TinyEmbedder()
    texts = tuning_texts(data, batch, info, emb, layers=2)  # type: ignore[arg-type]
    return {"data": data, "cfg": cfg, "batch": batch, "info": info, "emb": emb,
            "texts": texts}


def test_sub_lists_score_as_the_full_batch(setting: dict[str, Any]) -> None:
    batch, cfg = setting["batch"], setting["cfg"]
    assert batch.context is not None and batch.lexical is not None
    opts = EmbedderTuning(layers=2, queries_per_step=6, list_size=2 * batch.n_candidates)
    st = _setup(setting["emb"].model, setting["texts"], batch, cfg, opts, None)
    sub = _step_inputs(np.random.default_rng(0), setting["texts"], st.labels, st.valid,
                       st.hardness, st.pool, opts)
    q, c, ok = np.asarray(sub.queries), np.asarray(sub.cands), np.asarray(sub.valid)
    # every valid candidate of each sampled query is in its sub-list, in another order
    for i in range(len(q)):
        assert sorted(c[i][ok[i]].tolist()) == np.flatnonzero(st.valid[q[i]]).tolist()
    semantic = jnp.asarray(np.asarray(batch.semantic)[q[:, None], c], jnp.float32)
    got = np.asarray(batch_scores(st.reparam.params(st.u), _sub_batch(st.fz.batch, sub,
                                                                      semantic), st.fz.mask))
    full = evaluate_batch(params_from_config(cfg.retrieval, cfg.decay), batch, cfg)
    np.testing.assert_allclose(got[ok], full[q[:, None], c][ok], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["last-layers", "lora"])
def test_training_loss_gradient_matches_finite_differences(
    setting: dict[str, Any], mode: str
) -> None:
    opts = EmbedderTuning(mode=mode, layers=2, rank=2, queries_per_step=4, list_size=4)
    st = _setup(setting["emb"].model, setting["texts"], setting["batch"], setting["cfg"],
                opts, None)
    sub = _step_inputs(np.random.default_rng(1), setting["texts"], st.labels, st.valid,
                       st.hardness, st.pool, opts)
    top = st.top
    if mode == "lora":  # B away from 0, so A has a gradient too
        rng = np.random.default_rng(2)
        top = type(top)(a=top.a, b=jax.tree_util.tree_map(
            lambda b: jnp.asarray(rng.standard_normal(b.shape) * 0.1, jnp.float32), top.b),
            scale=top.scale)
    u = {k: v + 0.1 for k, v in st.u.items()}

    def f(trainable: Any) -> jax.Array:
        return _loss(trainable, st.fz, sub)

    params = (top, u)
    grads = jax.grad(f)(params)
    leaves, tree = jax.tree_util.tree_flatten(params)
    g_leaves = jax.tree_util.tree_leaves(grads)
    rng = np.random.default_rng(3)
    eps = 1e-3  # the loss is sharp (temperature 0.05): a small step, float32 still resolves it
    for _ in range(3):
        v = [rng.standard_normal(np.shape(x)) for x in leaves]
        norm = np.sqrt(sum(float(np.sum(x * x)) for x in v))
        v = [jnp.asarray(x / norm, jnp.float32) for x in v]

        def shifted(sign: float, v: list[Any] = v) -> Any:
            return jax.tree_util.tree_unflatten(
                tree, [x + sign * eps * d for x, d in zip(leaves, v, strict=True)])

        numeric = (float(f(shifted(1.0))) - float(f(shifted(-1.0)))) / (2 * eps)
        analytic = sum(float(jnp.sum(g * d)) for g, d in zip(g_leaves, v, strict=True))
        assert abs(numeric) > 1e-3
        assert abs(analytic - numeric) <= 3e-2 * max(1.0, abs(numeric)), (analytic, numeric)


def test_untuned_evaluation_is_the_cosine_ranking(setting: dict[str, Any]) -> None:
    batch, _info, texts, emb = (setting[k] for k in ("batch", "info", "texts", "emb"))
    cfg = semantic_only_config(EmotionalMemoryConfig())
    plain = dataclasses.replace(batch, lexical=None, context=None)
    mask = np.ones(batch.n_queries, bool)
    got = evaluate_tuned(None, texts, plain, cfg, mask, emb, top_k=2)
    # oracle: the tiny model's full forward, numpy cosines, first best candidate
    ids = emb.tokenize(texts.texts)
    vec = []
    for x in ids:
        arr = jnp.asarray([x], jnp.int32)
        vec.append(np.asarray(emb.model(arr, jnp.ones_like(arr)))[0])
    vec = np.asarray(vec, np.float64)
    labels, valid = np.asarray(batch.labels), np.asarray(batch.columns.valid)
    for q in range(batch.n_queries):
        cands = np.flatnonzero(valid[q])
        cos = vec[texts.candidate_text[q, cands]] @ vec[texts.query_text[q]]
        order = cands[np.argsort(-cos, kind="stable")]
        assert got["top1"][q] == float(labels[q, order[0]])
        assert got["hit_at_k"][q] == float(labels[q, order[:2]].any())


def test_tuning_is_kept_only_when_it_wins(setting: dict[str, Any]) -> None:
    opts = EmbedderTuning(mode="lora", layers=2, rank=2, steps=4, queries_per_step=4,
                          list_size=4, learning_rate=0.05)
    res = tune_embedder(setting["data"], setting["batch"], setting["info"], setting["cfg"],
                        setting["emb"], opts, folds=2, texts=setting["texts"])
    assert [r["model"] for r in res.table] == ["untuned", "tuned"]
    untuned, tuned = res.table
    wins = (round(tuned["mrr"], 9), round(tuned["top1"], 9)) > (
        round(untuned["mrr"], 9), round(untuned["top1"], 9))
    assert res.selected == wins
    assert (res.model is not None) == wins
    if not wins:
        assert res.config == setting["cfg"]
    else:
        assert res.config.retrieval.base_weights != setting["cfg"].retrieval.base_weights


def test_queries_outside_the_train_mask_change_nothing(setting: dict[str, Any]) -> None:
    """What an outer CV fold holds out (here: its labels scrambled) cannot move the
    tuning's decision or its weights."""
    import equinox as eqx

    batch = setting["batch"]
    scen = np.asarray(batch.scenario)
    mask = scen % 2 == 0
    opts = EmbedderTuning(mode="lora", layers=2, rank=2, steps=3, queries_per_step=4,
                          list_size=4, learning_rate=0.05)
    rng = np.random.default_rng(0)
    labels = np.asarray(batch.labels).copy()
    labels[~mask] = rng.permutation(labels[~mask].T).T  # other candidates "expected"
    scrambled = eqx.tree_at(lambda b: b.labels, batch, jnp.asarray(labels))
    assert not np.array_equal(np.asarray(scrambled.labels), np.asarray(batch.labels))
    runs = [tune_embedder(setting["data"], b, setting["info"], setting["cfg"], setting["emb"],
                          opts, folds=2, texts=setting["texts"], train_mask=mask)
            for b in (batch, scrambled)]
    assert runs[0].table == runs[1].table
    assert runs[0].selected == runs[1].selected
    assert runs[0].config == runs[1].config
    if runs[0].model is not None:
        for a, b in zip(jax.tree_util.tree_leaves(runs[0].model),
                        jax.tree_util.tree_leaves(runs[1].model), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="mode"):
        EmbedderTuning(mode="full")
    with pytest.raises(ValueError, match="layers"):
        EmbedderTuning(layers=0)


def test_queries_without_ids_get_their_own_texts() -> None:
    """``query_id`` is optional in the dataset format: queries without one (or with one
    repeated) are told apart by their place in the scenario, each keeping its text."""
    data = copy.deepcopy(load_builtin_dataset())
    asked: list[str] = []
    for i, scenario in enumerate(data["scenarios"]):
        for session in scenario["sessions"]:
            for query in session.get("queries", []):
                asked.append(query["query"])
                if i % 2:
                    del query["query_id"]
                else:
                    query["query_id"] = "same"
    batch, info = build_recall_batch(data, HashingEmbedder(dim=32), _config())
    texts = tuning_texts(data, batch, info, TinyEmbedder(), layers=1)  # type: ignore[arg-type]
    assert [texts.texts[i] for i in texts.query_text] == asked
