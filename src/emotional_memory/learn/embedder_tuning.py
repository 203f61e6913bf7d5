"""Fine-tuning the MiniLM embedder jointly with the scoring model (``--tune-embedder``).

The recall batch of a fit (:func:`~emotional_memory.learn.build_recall_batch`) holds,
per labelled query, the candidates the engine ranked and their scoring inputs. Here
the cosine ``s1`` of those candidates is recomputed by a MiniLM whose top ``k`` layers
(``last-layers``) or low-rank adapters on them (``lora``) train, jointly with the base
weights of the chosen scoring model, on:

* the fit's listwise recall loss (:func:`~emotional_memory.learn.losses.listwise_loss`)
  of the scoring model over each query's positives and its hardest same-conversation
  negatives (the candidates the starting model ranks highest among the wrong ones),
  every other scoring input as captured; and
* an in-batch contrastive loss: each query's cosine to every candidate text of the
  step (the other queries' positives and hard negatives are its in-batch negatives).

Lower layers are frozen and run once per text (:func:`~emotional_memory.embedders.
tunable.lower_states`); a step runs only the top layers, jit-compiled (one program per
padded length). :func:`tune_embedder` decides by inner scenario-grouped CV whether the
tuned embedder ranks the held-out queries' candidates better than the untuned model
(mean reciprocal rank, ties: top-1), and only then fits it on every query.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from emotional_memory._progress import progress_iter
from emotional_memory.embedders.minilm import MiniLMEmbedder, MiniLMModel, _Layer
from emotional_memory.embedders.tunable import (
    MODES,
    LoRA,
    fitted_model,
    init_lora,
    lower_states,
    pad_states,
    top_embeddings,
    top_of,
)
from emotional_memory.engine import EmotionalMemoryConfig
from emotional_memory.kernel import ContextInputs, LexicalInputs, MemoryColumns, QueryFeatures
from emotional_memory.kernel.adapter import QueryAdapter, adapt_query
from emotional_memory.learn.losses import (
    batch_for,
    batch_scores,
    batch_signal_mask,
    evaluate_batch,
    listwise_loss,
)
from emotional_memory.learn.metrics import ranking_metrics
from emotional_memory.learn.params import Reparam, l2_penalty
from emotional_memory.learn.recall_batch import RecallBatch, RecallInfo
from emotional_memory.learn.training import config_with_params
from emotional_memory.learn.tuning import inner_folds
from emotional_memory.scoring_config import params_from_config

__all__ = [
    "EmbedderTuning",
    "TuningResult",
    "TuningTexts",
    "evaluate_tuned",
    "train_embedder",
    "tune_embedder",
    "tuning_texts",
]


@dataclass(frozen=True)
class EmbedderTuning:
    """Options of an embedder fine-tuning.

    Attributes:
        mode: ``"last-layers"`` (train the top ``layers`` layers) or ``"lora"``
            (rank-``rank`` adapters on them).
        layers: how many top encoder layers run (and train) per step.
        rank: LoRA rank.
        alpha: LoRA scale numerator (``scale = alpha / rank``).
        steps: optimiser steps.
        queries_per_step: queries of one step.
        list_size: candidates per query in a step (its positives first, then its
            hardest negatives).
        learning_rate: peak Adam rate of the embedder's parameters (cosine decay);
            None: 2e-5 for ``last-layers``, 1e-3 for ``lora``.
        weights_learning_rate: Adam rate of the scoring model's base weights.
        temperature: softmax temperature of the recall loss (the fit's).
        contrast_temperature: temperature of the in-batch cosine loss.
        contrast_weight: weight of the in-batch loss.
        l2: pull of the base weights to their start (the fit's prior).
        seed: sampling and initialisation seed.
    """

    mode: str = "last-layers"
    layers: int = 1
    rank: int = 8
    alpha: float = 16.0
    steps: int = 100
    queries_per_step: int = 8
    list_size: int = 8
    learning_rate: float | None = None
    weights_learning_rate: float = 0.01
    temperature: float = 0.05
    contrast_temperature: float = 0.05
    contrast_weight: float = 1.0
    l2: float = 0.01
    seed: int = 0

    def __post_init__(self) -> None:
        """Validate the options."""
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        for name in ("layers", "rank", "queries_per_step", "list_size"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")

    @property
    def peak_rate(self) -> float:
        """The embedder's peak learning rate."""
        if self.learning_rate is not None:
            return float(self.learning_rate)
        return 2e-5 if self.mode == "last-layers" else 1e-3


@dataclass
class TuningTexts:
    """The texts of a recall batch, tokenised, with the frozen layers' states cached.

    Attributes:
        texts: distinct texts.
        query_text: (Q,) index of each query's text.
        candidate_text: (Q, C) index of each candidate's text (-1: padding).
        start: the first layer not cached (the tuned top starts here).
        states: per text, its ``(len, H)`` token states at layer ``start``'s input.
    """

    texts: list[str]
    query_text: np.ndarray
    candidate_text: np.ndarray
    start: int
    states: list[np.ndarray]


@dataclass
class TuningResult:
    """Outcome of :func:`tune_embedder`.

    Attributes:
        model: the fitted MiniLM (None when tuning did not win the inner CV).
        config: the config to use with it (base weights fitted jointly); the input
            config when not selected.
        selected: whether the tuned embedder won.
        table: inner-CV rows ``{"model", "top1", "mrr", "hit_at_k"}`` (untuned, tuned).
        seconds: wall time.
    """

    model: MiniLMModel | None
    config: EmotionalMemoryConfig
    selected: bool
    table: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


def _text_maps(data: dict[str, Any]) -> tuple[dict[tuple[str, str], str],
                                              dict[str, list[tuple[str, str]]]]:
    """(scenario, memory id) -> event text, and scenario -> its queries' (id, text) in
    dataset order (``query_id`` is optional and need not be unique: a batch's query is
    found by its place in its scenario)."""
    events: dict[tuple[str, str], str] = {}
    queries: dict[str, list[tuple[str, str]]] = {}
    for scenario in data["scenarios"]:
        sid = str(scenario.get("scenario_id", ""))
        for session in scenario.get("sessions", []):
            for event in session.get("events", []):
                events[(sid, str(event["memory_id"]))] = str(event["content"])
            for query in session.get("queries", []):
                queries.setdefault(sid, []).append(
                    (str(query.get("query_id", "")), str(query["query"])))
    return events, queries


def tuning_texts(
    data: dict[str, Any], batch: RecallBatch, info: RecallInfo, embedder: MiniLMEmbedder,
    layers: int, *, progress: bool = False,
) -> TuningTexts:
    """Tokenise the batch's query and candidate texts and cache the frozen layers.

    Args:
        data: the dataset the batch was built from.
        batch: the recall batch.
        info: its metadata (query and candidate ids).
        embedder: the base MiniLM.
        layers: how many top layers the tuning runs (the rest are cached).
        progress: print the caching time to stderr.

    Returns:
        The texts and caches.

    Raises:
        ValueError: when a candidate or query of the batch is not in ``data``.
    """
    n_layers = len(embedder.model.layers)
    if not 1 <= layers <= n_layers:
        raise ValueError(f"layers must lie in [1, {n_layers}], got {layers}")
    events, queries = _text_maps(data)
    index: dict[str, int] = {}

    def at(text: str) -> int:
        return index.setdefault(text, len(index))

    scen = np.asarray(batch.scenario)
    q_text = np.zeros(batch.n_queries, np.int64)
    c_text = np.full((batch.n_queries, batch.n_candidates), -1, np.int64)
    placed: dict[str, int] = {}  # per scenario, its queries seen so far (batch order)
    for q in range(batch.n_queries):
        sid = info.scenario_ids[int(scen[q])]
        place = placed[sid] = placed.get(sid, -1) + 1
        listed = queries.get(sid, [])
        if place >= len(listed) or listed[place][0] != info.query_ids[q]:
            raise ValueError(f"query {info.query_ids[q]!r} of scenario {sid!r} is not in "
                             "the dataset (the batch must be built from it)")
        q_text[q] = at(listed[place][1])
        for c, mid in enumerate(info.candidate_ids[q]):
            if (sid, mid) not in events:
                raise ValueError(f"memory {mid!r} of scenario {sid!r} is not in the dataset")
            c_text[q, c] = at(events[(sid, mid)])
    texts = list(index)
    t0 = time.perf_counter()
    token_ids = embedder.tokenize(texts)
    start = n_layers - layers
    states = lower_states(embedder.model, token_ids, start)
    if progress:
        import sys

        print(f"embedder tuning: cached layers 0..{start - 1} of {len(texts)} texts in "
              f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return TuningTexts(texts, q_text, c_text, start, states)


# --------------------------------------------------------------------------- the step


class _Sub(eqx.Module):
    """One step's inputs (fixed shapes but the padded length)."""

    states: jax.Array  # (B + B*S, L, H)
    mask: jax.Array  # (B + B*S, L)
    queries: jax.Array  # (B,) query rows of the batch
    cands: jax.Array  # (B, S) candidate columns (any valid index for padding)
    valid: jax.Array  # (B, S)
    contrast_labels: jax.Array  # (B, B*S)


def _f32(tree: Any) -> Any:
    """Floating leaves to float32 device arrays (others as device arrays)."""
    def conv(x: Any) -> Any:
        arr = np.asarray(x)
        return jnp.asarray(arr, jnp.float32) if arr.dtype.kind == "f" else jnp.asarray(arr)
    return jax.tree_util.tree_map(conv, tree)


def _gather(x: Any, q: jax.Array, c: jax.Array) -> jax.Array:
    """``x[q[b], c[b, s]]`` for a (Q, C, ...) leaf: (B, S, ...)."""
    return x[q[:, None], c]


def _sub_batch(batch: RecallBatch, sub: _Sub, semantic: jax.Array) -> RecallBatch:
    """The step's queries over their sub-lists as a RecallBatch (differentiable in s1)."""
    q, c = sub.queries, sub.cands
    cols = batch.columns
    b, s = c.shape
    columns = MemoryColumns(
        embedding=jnp.zeros((b, s, 0), jnp.float32),
        affect=_gather(cols.affect, q, c), mood=_gather(cols.mood, q, c),
        velocity=_gather(cols.velocity, q, c), age_seconds=_gather(cols.age_seconds, q, c),
        consolidation=_gather(cols.consolidation, q, c),
        retrieval_count=_gather(cols.retrieval_count, q, c),
        activation=_gather(cols.activation, q, c),
        valid=sub.valid,
    )
    query = QueryFeatures(embedding=jnp.zeros((b, 0), jnp.float32),
                          affect=batch.query.affect[q], mood=batch.query.mood[q],
                          velocity=batch.query.velocity[q])
    lexical = None
    if batch.lexical is not None:
        lx = batch.lexical
        lexical = LexicalInputs(tf=_gather(lx.tf, q, c), length=_gather(lx.length, q, c),
                                df=lx.df[q], n_docs=lx.n_docs[q], avg_length=lx.avg_length[q])
    context = None
    if batch.context is not None:  # neighbour columns renumbered into the sub-list
        nb = _gather(batch.context.neighbours, q, c)  # (B, S, 2) columns of the full list
        hit = (nb[..., None] == c[:, None, None, :]) & sub.valid[:, None, None, :]
        context = ContextInputs(
            neighbours=jnp.where(jnp.any(hit, -1), jnp.argmax(hit, -1), -1).astype(jnp.int32)
        )
    return RecallBatch(semantic=semantic, columns=columns, query=query,
                       labels=_gather(batch.labels, q, c) & sub.valid,
                       challenge=batch.challenge[q], scenario=batch.scenario[q],
                       lexical=lexical, context=context)


class _Frozen(eqx.Module):
    """What a step needs but does not train."""

    batch: RecallBatch
    top: tuple[_Layer, ...]
    base: Any
    kinds: dict[str, Any]
    initial: dict[str, Any]
    mask: jax.Array
    adapter: QueryAdapter | None
    num_heads: int = eqx.field(static=True)
    eps: float = eqx.field(static=True)
    temperature: float = eqx.field(static=True)
    contrast_temperature: float = eqx.field(static=True)
    contrast_weight: float = eqx.field(static=True)
    l2: float = eqx.field(static=True)


def _loss(trainable: tuple[Any, dict[str, Any]], fz: _Frozen, sub: _Sub) -> jax.Array:
    """Recall loss of the scoring model + in-batch contrastive loss + weights prior."""
    from emotional_memory.learn.params import constrained_params

    top, u = trainable
    emb = top_embeddings(top_of(top, fz.top), sub.states, sub.mask, fz.num_heads, fz.eps)
    b, s = sub.cands.shape
    q, c = emb[:b], emb[b:].reshape(b, s, -1)
    qa = q if fz.adapter is None else adapt_query(fz.adapter, q)
    qa = qa / jnp.maximum(jnp.linalg.norm(qa, axis=-1, keepdims=True), 1e-12)
    semantic = jnp.einsum("bh,bsh->bs", qa, c)
    data = _sub_batch(fz.batch, sub, semantic)
    totals = batch_scores(constrained_params(fz.base, fz.kinds, u), data, fz.mask)
    recall = listwise_loss(totals, data.labels, data.columns.valid, fz.temperature)
    has = jnp.any(data.labels, -1)
    recall = jnp.sum(recall) / jnp.maximum(jnp.sum(has), 1.0)
    sims = qa @ c.reshape(b * s, -1).T
    flat_valid = jnp.broadcast_to(sub.valid.reshape(1, b * s), (b, b * s))
    contrast = listwise_loss(sims, sub.contrast_labels, flat_valid, fz.contrast_temperature)
    contrast = jnp.sum(contrast) / jnp.maximum(jnp.sum(jnp.any(sub.contrast_labels, -1)), 1.0)
    return recall + fz.contrast_weight * contrast + fz.l2 * l2_penalty(u, fz.initial)


def _make_step(emb_opt: optax.GradientTransformation,
               w_opt: optax.GradientTransformation) -> Any:
    """The compiled training step for these optimisers."""

    @eqx.filter_jit
    def step(trainable: Any, states: Any, fz: _Frozen, sub: _Sub) -> tuple[Any, Any, Any]:
        value, grads = eqx.filter_value_and_grad(_loss)(trainable, fz, sub)
        (top, u), (g_top, g_u) = trainable, grads
        e_state, w_state = states
        up_top, e_state = emb_opt.update(g_top, e_state, eqx.filter(top, eqx.is_array))
        up_u, w_state = w_opt.update(g_u, w_state, u)
        new = (eqx.apply_updates(top, up_top), optax.apply_updates(u, up_u))
        return new, (e_state, w_state), value

    return step


def _step_inputs(
    rng: np.random.Generator, texts: TuningTexts, labels: np.ndarray, valid: np.ndarray,
    hardness: np.ndarray, pool: np.ndarray, opts: EmbedderTuning,
) -> _Sub:
    """Sample a step: queries, their positives and hardest negatives, padded states."""
    b, s = opts.queries_per_step, opts.list_size
    queries = rng.choice(pool, size=b, replace=len(pool) < b)
    cands = np.zeros((b, s), np.int64)
    ok = np.zeros((b, s), bool)
    for i, q in enumerate(queries):
        pos = np.flatnonzero(labels[q] & valid[q])
        pos = rng.permutation(pos)[: max(1, s // 2)]
        neg = np.flatnonzero(valid[q] & ~labels[q])
        need = s - len(pos)
        hard = neg[np.argsort(-hardness[q, neg], kind="stable")][: 2 * need]
        neg = rng.permutation(hard)[:need]
        chosen = np.concatenate([pos, neg])
        cands[i, : len(chosen)] = chosen
        ok[i, : len(chosen)] = True
    cand_text = texts.candidate_text[queries[:, None], cands]
    rows = list(texts.query_text[queries]) + list(np.where(ok, cand_text, 0).reshape(-1))
    # padding rows embed a real text (an all-padding row has no gradient: the norm of
    # a zero mean is not differentiable); they are masked out of both losses
    x, mask = pad_states(texts.states, rows)
    positive_text = [set(texts.candidate_text[q][labels[q] & valid[q]].tolist()) for q in queries]
    flat = np.where(ok, cand_text, -1).reshape(-1)
    contrast = np.asarray([[t in pt for t in flat] for pt in positive_text], bool)
    return _Sub(states=jnp.asarray(x), mask=jnp.asarray(mask), queries=jnp.asarray(queries),
                cands=jnp.asarray(cands), valid=jnp.asarray(ok),
                contrast_labels=jnp.asarray(contrast))


@dataclass
class _Setup:
    """A tuning's fixed inputs, starting point and sampling tables."""

    fz: _Frozen
    top: Any
    u: dict[str, Any]
    reparam: Reparam
    labels: np.ndarray
    valid: np.ndarray
    hardness: np.ndarray
    pool: np.ndarray


def _setup(
    model: MiniLMModel, texts: TuningTexts, batch: RecallBatch,
    config: EmotionalMemoryConfig, options: EmbedderTuning, train_mask: np.ndarray | None,
) -> _Setup:
    """The frozen inputs, the trainable start (top and base weights) and the tables."""
    k = len(model.layers) - texts.start
    if k != options.layers:
        raise ValueError(f"the texts cache {k} top layers, the options tune {options.layers}")
    scored = batch_for(batch, config)
    labels = np.asarray(scored.labels, bool)
    valid = np.asarray(scored.columns.valid, bool)
    mask = np.ones(batch.n_queries, bool) if train_mask is None else np.asarray(train_mask)
    pool = np.flatnonzero(mask & (labels & valid).any(-1))
    if len(pool) == 0:
        raise ValueError("no training query has a positive candidate")
    params = params_from_config(config.retrieval, config.decay)
    hardness = evaluate_batch(params, scored, config)
    reparam = Reparam(params, ("base_weights",))
    spec = config.retrieval.query_adapter
    frozen_top = tuple(model.layers[texts.start:])
    fz = _Frozen(
        batch=_f32(dataclasses.replace(scored, columns=dataclasses.replace(
            scored.columns, embedding=np.zeros((*np.shape(scored.columns.valid), 0))),
            query=dataclasses.replace(scored.query, embedding=np.zeros((batch.n_queries, 0))))),
        top=frozen_top, base=_f32(reparam.base), kinds=_f32(reparam.kinds),
        initial=_f32(reparam.initial), mask=jnp.asarray(batch_signal_mask(config, scored),
                                                        jnp.float32),
        adapter=None if spec is None else QueryAdapter(*(jnp.asarray(f, jnp.float32)
                                                         for f in spec.factors())),
        num_heads=model.num_heads, eps=model.eps, temperature=options.temperature,
        contrast_temperature=options.contrast_temperature,
        contrast_weight=options.contrast_weight, l2=options.l2,
    )
    top: tuple[_Layer, ...] | LoRA = (
        frozen_top if options.mode == "last-layers"
        else init_lora(frozen_top, options.rank, options.alpha, options.seed)
    )
    return _Setup(fz=fz, top=top, u=_f32(reparam.init()), reparam=reparam, labels=labels,
                  valid=valid, hardness=hardness, pool=pool)


def train_embedder(
    embedder: MiniLMEmbedder, texts: TuningTexts, batch: RecallBatch,
    config: EmotionalMemoryConfig, options: EmbedderTuning, *,
    train_mask: np.ndarray | None = None, progress: bool = False,
) -> tuple[MiniLMModel, EmotionalMemoryConfig]:
    """Fine-tune the embedder's top and the config's base weights on the batch.

    Args:
        embedder: the base MiniLM (its weights are not changed).
        texts: :func:`tuning_texts` of the batch (its ``start`` = layers - options.layers).
        batch: the recall batch.
        config: the scoring model (its query adapter, if any, is applied and kept).
        options: the tuning options.
        train_mask: (Q,) queries to train on (default: all).
        progress: progress bar.

    Returns:
        ``(model, config)``: the fitted MiniLM and the config with fitted base weights.

    Raises:
        ValueError: when no training query has a positive candidate.
    """
    model = embedder.model
    st = _setup(model, texts, batch, config, options, train_mask)
    fz, top, u, reparam = st.fz, st.top, st.u, st.reparam
    emb_opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(
        optax.cosine_decay_schedule(options.peak_rate, max(options.steps, 1), alpha=0.1)))
    w_opt = optax.adam(options.weights_learning_rate)
    states = (emb_opt.init(eqx.filter(top, eqx.is_array)), w_opt.init(u))
    step = _make_step(emb_opt, w_opt)
    rng = np.random.default_rng(options.seed)
    trainable: Any = (top, u)
    for _ in progress_iter(range(options.steps), f"tune embedder ({options.mode})",
                           enabled=progress):
        sub = _step_inputs(rng, texts, st.labels, st.valid, st.hardness, st.pool, options)
        trainable, states, _value = step(trainable, states, fz, sub)
    top, u = trainable
    fitted = fitted_model(model, top)
    u_host = {key: np.asarray(v, np.float64) for key, v in u.items()}
    return fitted, config_with_params(config, reparam.export(u_host))


# --------------------------------------------------------------------------- evaluation


@eqx.filter_jit
def _top_jit(layers: tuple[_Layer, ...], states: jax.Array, mask: jax.Array, num_heads: int,
             eps: float) -> jax.Array:
    return top_embeddings(layers, states, mask, num_heads, eps)


def embed_cached(model: MiniLMModel, texts: TuningTexts, rows: Sequence[int],
                 chunk: int = 64) -> np.ndarray:
    """Embeddings of some cached texts under ``model``'s top layers.

    Args:
        model: a model whose lower layers equal the cached ones.
        texts: the cache.
        rows: text indices.
        chunk: texts per pass.

    Returns:
        ``(len(rows), H)`` float32 unit rows.
    """
    top = tuple(model.layers[texts.start:])
    order = sorted(rows, key=lambda i: texts.states[i].shape[0])
    out: dict[int, np.ndarray] = {}
    for pos in range(0, len(order), chunk):
        part = order[pos:pos + chunk]
        padded = part + [part[0]] * (chunk - len(part))
        x, mask = pad_states(texts.states, padded)
        emb = np.asarray(_top_jit(top, jnp.asarray(x), jnp.asarray(mask), model.num_heads,
                                  model.eps))
        out.update({i: emb[r] for r, i in enumerate(part)})
    hidden = model.hidden_size
    return np.stack([out[i] for i in rows]) if rows else np.zeros((0, hidden), np.float32)


def evaluate_tuned(
    model: MiniLMModel | None, texts: TuningTexts, batch: RecallBatch,
    config: EmotionalMemoryConfig, mask: np.ndarray, embedder: MiniLMEmbedder,
    top_k: int = 1,
) -> dict[str, np.ndarray]:
    """Per-query ranking metrics of the masked queries over their captured candidates.

    The cosine of each query and candidate is recomputed with ``model`` (or the base
    embedder's when None), everything else as captured.

    Args:
        model: the tuned MiniLM, or None for the base.
        texts: the cache.
        batch: the recall batch.
        config: the scoring model.
        mask: (Q,) queries to score.
        embedder: the base embedder.
        top_k: the cut-off of ``hit_at_k``.

    Returns:
        ``ranking_metrics`` of every query (only the masked ones are meaningful).
    """
    use = model if model is not None else embedder.model
    qs = np.flatnonzero(mask)
    needed = sorted(set(texts.query_text[qs].tolist())
                    | set(texts.candidate_text[qs][texts.candidate_text[qs] >= 0].tolist()))
    emb = embed_cached(use, texts, needed)
    where = {t: r for r, t in enumerate(needed)}
    q_emb = np.zeros((batch.n_queries, emb.shape[1]), np.float64)
    c_emb = np.zeros((batch.n_queries, batch.n_candidates, emb.shape[1]), np.float64)
    for q in qs:
        q_emb[q] = emb[where[int(texts.query_text[q])]]
        for c, t in enumerate(texts.candidate_text[q]):
            if t >= 0:
                c_emb[q, c] = emb[where[int(t)]]
    semantic = np.einsum("qh,qch->qc", q_emb, c_emb)
    tuned = dataclasses.replace(batch, semantic=semantic)
    if np.shape(batch.query.embedding)[-1]:
        tuned = dataclasses.replace(
            tuned, query=dataclasses.replace(batch.query, embedding=q_emb),
            columns=dataclasses.replace(batch.columns, embedding=c_emb))
    params = params_from_config(config.retrieval, config.decay)
    return ranking_metrics(evaluate_batch(params, tuned, config), np.asarray(batch.labels),
                           np.asarray(batch.columns.valid), top_k)


def tune_embedder(
    data: dict[str, Any], batch: RecallBatch, info: RecallInfo,
    config: EmotionalMemoryConfig, embedder: MiniLMEmbedder, options: EmbedderTuning, *,
    folds: int = 2, select_by: str = "mrr", progress: bool = False,
    texts: TuningTexts | None = None, train_mask: np.ndarray | None = None,
) -> TuningResult:
    """Fine-tune the embedder if it pays on held-out scenarios (inner grouped CV).

    The scenarios are split into ``folds`` parts; for each, the embedder and base
    weights are tuned on the others and the held-out queries' captured candidates are
    ranked with the tuned and the untuned model. The tuned one is selected only when its
    out-of-fold ``select_by`` (``"mrr"``, ties by top-1; or ``"top1"``, ties by MRR) is
    higher; it is then tuned on every query.

    Args:
        data: the dataset the batch was built from.
        batch: the recall batch of the chosen scoring model.
        info: its metadata.
        config: the chosen scoring model.
        embedder: the base MiniLM.
        options: the tuning options.
        folds: inner folds (>= 2; fewer when there are fewer scenarios; with one
            scenario the tuned model is never selected).
        select_by: the criterion, ``"mrr"`` or ``"top1"``.
        progress: progress bars.
        texts: a prepared cache (default: built here).
        train_mask: ``(Q,)`` bool, the queries it may learn from and decide on (None:
            all), e.g. an outer CV fold's training queries.

    Returns:
        The :class:`TuningResult`.

    Raises:
        ValueError: for ``folds < 2`` or an unknown ``select_by``.
    """
    if folds < 2:
        raise ValueError(f"folds must be >= 2, got {folds}")
    if select_by not in ("mrr", "top1"):
        raise ValueError(f"select_by must be 'mrr' or 'top1', got {select_by!r}")
    t0 = time.perf_counter()
    if texts is None:
        texts = tuning_texts(data, batch, info, embedder, options.layers, progress=progress)
    available, scen, parts = inner_folds(batch, train_mask, folds, options.seed + 11)
    names = ("untuned", "tuned")
    per = {n: {m: np.zeros(batch.n_queries) for m in ("top1", "rr", "hit_at_k")}
           for n in names}
    for held in parts if len(parts) >= 2 else []:
        held_mask = available & np.isin(scen, held)
        model, tuned_cfg = train_embedder(embedder, texts, batch, config, options,
                                          train_mask=available & ~held_mask,
                                          progress=progress)
        for name, (m, c) in zip(names, ((None, config), (model, tuned_cfg)), strict=True):
            got = evaluate_tuned(m, texts, batch, c, held_mask, embedder, info.top_k)
            for key in per[name]:
                per[name][key][held_mask] = got[key][held_mask]
    table: list[dict[str, Any]] = [{"model": n, "top1": float(per[n]["top1"][available].mean()),
              "mrr": float(per[n]["rr"][available].mean()),
              "hit_at_k": float(per[n]["hit_at_k"][available].mean())} for n in names]
    first, second = ("top1", "mrr") if select_by == "top1" else ("mrr", "top1")
    ranks = [(round(float(r[first]), 9), round(float(r[second]), 9)) for r in table]
    selected = len(parts) >= 2 and ranks[1] > ranks[0]
    if not selected:
        return TuningResult(None, config, False, table, time.perf_counter() - t0)
    model, tuned_cfg = train_embedder(embedder, texts, batch, config, options,
                                      train_mask=available, progress=progress)
    return TuningResult(model, tuned_cfg, True, table, time.perf_counter() - t0)
