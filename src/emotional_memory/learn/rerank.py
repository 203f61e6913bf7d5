"""Training and applying a cross-encoder re-ranker over the engine's ranking.

* :func:`capture_candidates` replays labelled scenarios through the engine (the
  replay protocol of :mod:`emotional_memory.replay`, results unchanged) and keeps, per
  query, the whole pass-2 ranking it saw: candidate ids, texts and scores.
* :func:`train_cross_encoder` trains a :class:`~emotional_memory.embedders.
  cross_encoder.CrossEncoder`'s top encoder layers and head on those queries: each
  query's evidence turns against hard negatives (the best-ranked non-evidence
  candidates of the base ranking), a listwise softmax loss, AdamW with warm-up and
  cosine decay. The frozen lower layers run once per pair (:class:`PairCache`).
* :func:`rerank_order` re-scores the top ``N`` of a ranking, optionally mixing the
  base score in; the candidates below ``N`` keep their places.
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
import numpy.typing as npt
import optax

from emotional_memory._progress import progress_iter
from emotional_memory._validation import integer, non_negative, positive_int, strict_finite
from emotional_memory.embedders.cross_encoder import (
    CrossEncoder,
    ScoreHead,
    Tokenizer,
    pair_lower_states,
    pair_tokens,
    top_scores,
)
from emotional_memory.embedders.minilm_model import _Layer

__all__ = [
    "CandidateList",
    "PairCache",
    "RerankTraining",
    "build_pair_cache",
    "cached_scores",
    "capture_candidates",
    "listwise_loss",
    "rerank_order",
    "train_cross_encoder",
]


@dataclass
class CandidateList:
    """One query's base ranking (every pass-2 candidate, best first).

    Attributes:
        scenario_id, query_id: identifiers.
        query: the query text.
        expected: the evidence memory ids.
        ids: dataset memory ids, best first.
        texts: their contents.
        scores: their pass-2 scores (float64).
    """

    scenario_id: str
    query_id: str
    query: str
    expected: set[str]
    ids: list[str]
    texts: list[str]
    scores: npt.NDArray[np.float64]

    def labels(self) -> npt.NDArray[np.bool_]:
        """``(len(ids),)`` whether each candidate is evidence."""
        return np.asarray([i in self.expected for i in self.ids], bool)


def capture_candidates(
    data: dict[str, Any], embedder: Any, config: Any, *, top_k: int | None = None,
    progress: bool = False,
) -> tuple[list[CandidateList], list[Any]]:
    """Replay ``data`` and keep each query's whole pass-2 ranking.

    Args:
        data: a dataset (:func:`emotional_memory.replay.load_dataset`).
        embedder: the engine's embedder.
        config: the engine config.
        top_k: results per query (default: the dataset's ``default_top_k`` or 2).
        progress: progress bar over scenarios.

    Returns:
        ``(lists, results)``: per query its :class:`CandidateList` and the replay's
        :class:`~emotional_memory.replay.QueryResult` (what ``replay_dataset`` returns).
    """
    from emotional_memory.replay import (
        ReplayAffect,
        TickClock,
        default_engine_factory,
        iter_scenarios,
        replay_scenario,
    )

    k = positive_int("top_k", top_k if top_k is not None else data.get("default_top_k", 2))
    affect = ReplayAffect.prepare(data)
    factory = default_engine_factory(config)
    lists: list[CandidateList] = []
    results: list[Any] = []
    for scenario in progress_iter(list(iter_scenarios(data)), "capture", enabled=progress):
        sid = str(scenario.get("scenario_id", ""))

        def hook(engine: Any, query: dict[str, Any], id_map: dict[str, str], plan: Any,
                 sid: str = sid) -> None:
            ranked = plan.pass2
            lists.append(CandidateList(
                scenario_id=sid, query_id=str(query.get("query_id", "")),
                query=str(query["query"]),
                expected={str(x) for x in query["expected_memory_ids"]},
                ids=[id_map.get(r.memory.id, r.memory.id) for r in ranked],
                texts=[r.memory.content for r in ranked],
                scores=np.asarray([r.score for r in ranked], np.float64),
            ))

        clock = TickClock()
        engine = factory(embedder, clock)
        try:
            results.extend(replay_scenario(scenario, engine, k, hook, affect=affect,
                                           clock=clock))
        finally:
            engine.close()
    return lists, results


def _zscore(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``(x - mean) / std`` (zeros when constant)."""
    sd = float(np.std(x))
    return (x - np.mean(x)) / sd if sd > 0 else np.zeros_like(x)


def rerank_order(
    base_scores: npt.ArrayLike, rerank_scores: npt.ArrayLike, top_n: int, mix: float = 1.0
) -> npt.NDArray[np.int64]:
    """The new order of a ranking once its top ``top_n`` are re-scored.

    Args:
        base_scores: ``(C,)`` the base scores, in the base order (best first).
        rerank_scores: ``(min(C, top_n),)`` the re-ranker's scores of the first ones.
        top_n: how many of the first candidates are re-scored.
        mix: weight of the re-ranker in ``(1 - mix) * z(base) + mix * z(rerank)``
            (``z``: standardised over the top ``top_n``); 1 re-ranks by the re-ranker
            alone, 0 keeps the base order.

    Returns:
        ``(C,)`` a permutation of ``range(C)``: the re-ordered top ``top_n`` (ties keep
        the base order), then the rest unchanged.

    Raises:
        TypeError: ``top_n`` is not an int or ``mix`` not a number (bools refused).
        ValueError: for ``top_n < 1``, ``mix`` outside [0, 1], a length mismatch, or
            scores that are not 1-D or not finite.
    """
    base = np.asarray(base_scores, np.float64)
    ce = np.asarray(rerank_scores, np.float64)
    top_n = positive_int("top_n", top_n)
    mix = strict_finite("mix", mix)
    if not 0.0 <= mix <= 1.0:
        raise ValueError(f"mix must be in [0, 1], got {mix}")
    if base.ndim != 1:
        raise ValueError(f"base_scores must be 1-D, got shape {base.shape}")
    if not (np.isfinite(base).all() and np.isfinite(ce).all()):
        raise ValueError("base_scores and rerank_scores must be finite (NaN or inf found)")
    n = min(len(base), top_n)
    if ce.shape != (n,):
        raise ValueError(f"rerank_scores must have shape ({n},), got {ce.shape}")
    blended = (1.0 - mix) * _zscore(base[:n]) + mix * _zscore(ce)
    head = np.argsort(-blended, kind="stable")
    return np.concatenate([head, np.arange(n, len(base))]).astype(np.int64)


# --------------------------------------------------------------------------- training


@dataclass(frozen=True)
class RerankTraining:
    """Options of :func:`train_cross_encoder`.

    Attributes:
        layers: top encoder layers trained (the others are frozen and cached).
        steps: optimiser steps.
        queries_per_step: queries per step.
        list_size: candidates per query in a step (positives first, then negatives).
        max_positives: most positives per query in a step.
        hard_pool: negatives are drawn from this many best-ranked non-evidence
            candidates of the base ranking.
        learning_rate: peak rate of the encoder layers.
        head_learning_rate: peak rate of the head.
        weight_decay: AdamW decay (on the encoder layers and the head's ``w``).
        warmup: share of the steps of linear warm-up.
        seed: sampling seed.
    """

    layers: int = 1
    steps: int = 300
    queries_per_step: int = 8
    list_size: int = 12
    max_positives: int = 3
    hard_pool: int = 20
    learning_rate: float = 5e-5
    head_learning_rate: float = 1e-3
    weight_decay: float = 0.01
    warmup: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        """Validate the options (``TypeError`` / ``ValueError`` naming the option)."""
        for name in ("layers", "queries_per_step", "list_size", "max_positives", "hard_pool"):
            positive_int(name, getattr(self, name))
        if integer("steps", self.steps) < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")
        integer("seed", self.seed)
        for name in ("learning_rate", "head_learning_rate", "weight_decay"):
            non_negative(name, strict_finite(name, getattr(self, name)))
        if not 0.0 <= strict_finite("warmup", self.warmup) <= 1.0:
            raise ValueError(f"warmup must be in [0, 1], got {self.warmup}")
        if self.list_size <= self.max_positives:
            raise ValueError("list_size must exceed max_positives (room for negatives)")


@dataclass
class PairCache:
    """Training pairs of some queries with their frozen lower-layer states.

    Attributes:
        start: the first encoder layer not cached.
        queries: the :class:`CandidateList` of each query.
        pair_index: per query, candidate position -> pair row (only the cached ones:
            every evidence candidate and the first ``hard_pool`` non-evidence ones).
        types: per pair its token types.
        states: per pair its ``(len, H)`` states at layer ``start``'s input.
    """

    start: int
    queries: list[CandidateList]
    pair_index: list[dict[int, int]]
    types: list[npt.NDArray[np.int32]]
    states: list[npt.NDArray[Any]] = field(repr=False)


def build_pair_cache(
    model: CrossEncoder, tokenizer: Tokenizer, queries: Sequence[CandidateList], start: int,
    *, hard_pool: int = 20, max_length: int = 256, progress: bool = False,
) -> PairCache:
    """Tokenise each query's evidence and hardest non-evidence candidates and cache the
    frozen layers' states of every pair.

    Args:
        model: the cross-encoder (its encoder's lower layers are run).
        tokenizer: ``[CLS] ... [SEP]`` ids per text.
        queries: the base rankings.
        start: the first layer not cached (``n_layers - trained layers``).
        hard_pool: non-evidence candidates kept per query (best-ranked first); any
            candidate ranked within the first ``hard_pool`` is therefore cached.
        max_length: most tokens per pair.
        progress: print the caching time.

    Returns:
        The cache (states in float16).
    """
    t0 = time.perf_counter()
    pairs: list[tuple[list[int], list[int]]] = []
    pair_index: list[dict[int, int]] = []
    for q in queries:
        labels = q.labels()
        keep = [i for i in range(len(q.ids)) if labels[i]]
        keep += [int(i) for i in np.flatnonzero(~labels)[:hard_pool]]
        keep.sort()
        tokens = tokenizer.tokenize([q.query, *[q.texts[i] for i in keep]])
        index: dict[int, int] = {}
        for i, t in zip(keep, tokens[1:], strict=True):
            index[i] = len(pairs)
            pairs.append(pair_tokens(tokens[0], t, max_length))
        pair_index.append(index)
    states = pair_lower_states(model.encoder, pairs, start, dtype=np.float16)
    if progress:
        import sys

        print(f"cached {len(pairs)} pairs' layer-{start} states in "
              f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return PairCache(start=start, queries=list(queries), pair_index=pair_index,
                     types=[np.asarray(t, np.int32) for _, t in pairs], states=states)


def _pad_rows(cache: PairCache, rows: Sequence[int]) -> tuple[np.ndarray, np.ndarray,
                                                              np.ndarray]:
    """``(states, mask, types)`` of some cached pairs, padded to a multiple of 32 (each
    new length compiles a training step)."""
    longest = max(cache.states[r].shape[0] for r in rows)
    length = -(-longest // 32) * 32
    hidden = cache.states[rows[0]].shape[1]
    x = np.zeros((len(rows), length, hidden), np.float32)
    mask = np.zeros((len(rows), length), np.int32)
    types = np.zeros((len(rows), length), np.int32)
    for k, r in enumerate(rows):
        n = cache.states[r].shape[0]
        x[k, :n] = cache.states[r]
        mask[k, :n] = 1
        types[k, :n] = cache.types[r]
    return x, mask, types


def listwise_loss(scores: jax.Array, labels: jax.Array, valid: jax.Array) -> jax.Array:
    """Mean over queries of ``-log`` (softmax mass on the positives).

    Args:
        scores: ``(B, S)`` scores.
        labels: ``(B, S)`` bool, positives.
        valid: ``(B, S)`` bool, real candidates.

    Returns:
        The scalar loss (queries without a positive are left out).
    """
    neg = jnp.finfo(scores.dtype).min
    every = jax.nn.logsumexp(jnp.where(valid, scores, neg), axis=-1)
    pos = jax.nn.logsumexp(jnp.where(valid & labels, scores, neg), axis=-1)
    has = jnp.any(valid & labels, axis=-1)
    return jnp.sum(jnp.where(has, every - pos, 0.0)) / jnp.maximum(jnp.sum(has), 1)


class _Step(eqx.Module):
    """One step's padded inputs."""

    states: jax.Array  # (B*S, L, H)
    mask: jax.Array  # (B*S, L)
    types: jax.Array  # (B*S, L)
    labels: jax.Array  # (B, S)
    valid: jax.Array  # (B, S)


def _loss(params: tuple[tuple[_Layer, ...], ScoreHead], batch: _Step, num_heads: int,
          eps: float) -> jax.Array:
    layers, head = params
    scores = top_scores(layers, head, batch.states, batch.mask, batch.types, num_heads, eps)
    return listwise_loss(scores.reshape(batch.labels.shape), batch.labels, batch.valid)


def _sample(rng: np.random.Generator, cache: PairCache, pool: np.ndarray,
            opts: RerankTraining) -> _Step:
    """A step: queries, their positives and negatives from the hard pool, padded."""
    b, s = opts.queries_per_step, opts.list_size
    chosen = rng.choice(pool, size=b, replace=len(pool) < b)
    rows: list[int] = []
    labels = np.zeros((b, s), bool)
    valid = np.zeros((b, s), bool)
    for k, qi in enumerate(chosen):
        index = cache.pair_index[qi]
        lab = cache.queries[qi].labels()
        pos = [i for i in index if lab[i]]
        neg = [i for i in index if not lab[i]]
        pos = list(rng.permutation(pos)[: opts.max_positives])
        neg = list(rng.permutation(neg)[: s - len(pos)])
        picked = [index[int(i)] for i in pos + neg]
        labels[k, : len(pos)] = True
        valid[k, : len(picked)] = True
        # padding slots repeat the query's first pair (masked out of the loss)
        rows += picked + [picked[0]] * (s - len(picked))
    x, mask, types = _pad_rows(cache, rows)
    return _Step(states=jnp.asarray(x), mask=jnp.asarray(mask), types=jnp.asarray(types),
                 labels=jnp.asarray(labels), valid=jnp.asarray(valid))


def _optimizer(opts: RerankTraining) -> optax.GradientTransformation:
    """AdamW with warm-up then cosine decay: one rate for the layers, one for the head."""
    def schedule(peak: float) -> optax.Schedule:
        warm = max(1, int(opts.warmup * opts.steps))
        return optax.warmup_cosine_decay_schedule(0.0, peak, warm, max(opts.steps, warm + 1),
                                                  end_value=0.1 * peak)

    return optax.chain(optax.clip_by_global_norm(1.0), optax.multi_transform(
        {"layers": optax.adamw(schedule(opts.learning_rate), weight_decay=opts.weight_decay),
         "head": optax.adamw(schedule(opts.head_learning_rate),
                             weight_decay=opts.weight_decay)},
        ("layers", "head")))


def train_cross_encoder(
    model: CrossEncoder, cache: PairCache, options: RerankTraining, *,
    train: Sequence[int] | None = None, progress: bool = False,
) -> tuple[CrossEncoder, list[float]]:
    """Train the top ``options.layers`` encoder layers and the head.

    Args:
        model: the starting cross-encoder (not changed).
        cache: :func:`build_pair_cache` with ``start = n_layers - options.layers``.
        options: training options.
        train: indices of the cache's queries to train on (default: all).
        progress: progress bar.

    Returns:
        ``(model, losses)``: the trained cross-encoder and the loss of every step.

    Raises:
        ValueError: when the cache's start does not match the options, or no training
            query has an evidence candidate.
    """
    n = len(model.encoder.layers)
    if cache.start != n - options.layers:
        raise ValueError(f"the cache starts at layer {cache.start}, the options train the "
                         f"top {options.layers} of {n}")
    candidates = range(len(cache.queries)) if train is None else train
    pool = np.asarray([i for i in candidates
                       if any(cache.queries[i].labels()[j] for j in cache.pair_index[i])],
                      np.int64)
    if len(pool) == 0:
        raise ValueError("no training query has an evidence candidate")
    params: Any = (tuple(model.encoder.layers[cache.start:]), model.head)
    opt = _optimizer(options)
    state = opt.init(params)
    heads, eps = model.encoder.num_heads, model.encoder.eps

    @eqx.filter_jit
    def step(params: Any, state: Any, batch: _Step) -> tuple[Any, Any, jax.Array]:
        value, grads = jax.value_and_grad(_loss)(params, batch, heads, eps)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    rng = np.random.default_rng(options.seed)
    losses: list[float] = []
    for _ in progress_iter(range(options.steps), f"train re-ranker (top {options.layers})",
                           enabled=progress):
        params, state, value = step(params, state, _sample(rng, cache, pool, options))
        losses.append(float(value))
    layers, head = params
    encoder = eqx.tree_at(lambda m: m.layers, model.encoder,
                          tuple(model.encoder.layers[: cache.start]) + tuple(layers))
    return dataclasses.replace(model, encoder=encoder, head=head), losses


@eqx.filter_jit
def _top_jit(layers: tuple[_Layer, ...], head: ScoreHead, x: jax.Array, mask: jax.Array,
             types: jax.Array, num_heads: int, eps: float) -> jax.Array:
    return top_scores(layers, head, x, mask, types, num_heads, eps)


def cached_scores(model: CrossEncoder, cache: PairCache, query: int, top_n: int,
                  rows: int = 32) -> npt.NDArray[np.float32]:
    """The cross-encoder's scores of one cached query's first ``top_n`` candidates.

    Args:
        model: the cross-encoder (its lower layers must be the cache's).
        cache: the pair cache.
        query: index of the query in the cache.
        top_n: how many of the base ranking's first candidates (each must be cached:
            ``top_n <= hard_pool``).
        rows: pairs per forward pass.

    Returns:
        ``(min(top_n, C),)`` float32 scores.

    Raises:
        KeyError: when one of them is not cached.
        TypeError, ValueError: ``top_n`` or ``rows`` not an int >= 1, or ``query`` not
            an index of the cache's queries (named).
    """
    top_n = positive_int("top_n", top_n)
    rows = positive_int("rows", rows)
    if not 0 <= integer("query", query) < len(cache.queries):
        raise ValueError(f"query must be in [0, {len(cache.queries)}), got {query}")
    n = min(top_n, len(cache.queries[query].ids))
    pair_rows = [cache.pair_index[query][i] for i in range(n)]
    out = np.zeros(n, np.float32)
    top = tuple(model.encoder.layers[cache.start:])
    for pos in range(0, n, rows):
        chunk = pair_rows[pos:pos + rows]
        x, mask, types = _pad_rows(cache, chunk + [chunk[0]] * (rows - len(chunk)))
        got = _top_jit(top, model.head, jnp.asarray(x), jnp.asarray(mask), jnp.asarray(types),
                       model.encoder.num_heads, model.encoder.eps)
        out[pos:pos + len(chunk)] = np.asarray(got)[: len(chunk)]
    return out
