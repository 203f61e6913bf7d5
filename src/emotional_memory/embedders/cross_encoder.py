"""A cross-encoder re-ranker built from the JAX MiniLM encoder.

:class:`CrossEncoder` reads a (query, memory text) pair as one input,
``[CLS] query [SEP] memory [SEP]`` with token type 0 on the query segment (its
``[CLS]`` and ``[SEP]`` included) and 1 on the memory segment, runs the BERT encoder of
:mod:`emotional_memory.embedders.minilm_model` over it (initialised from
all-MiniLM-L6-v2) and maps the last hidden states to one relevance score:

``score = exp(log_scale) * cos(mean_q, mean_m) + w . h_CLS + b``

where ``mean_q`` / ``mean_m`` are the means of the query / memory segment's token states
(after the joint self-attention, so each already depends on the other segment) and
``h_CLS`` the first token's state. ``w`` starts at 0, so the untrained model scores a
pair by the cosine of its two segments' contextual states (a sensible start for a model
whose encoder was trained as a bi-encoder); training moves the encoder's top layers and
the head.

For training on CPUs the lower layers are frozen: :func:`pair_lower_states` runs the
embedding layer and the lower layers once per pair and keeps the token states;
:func:`top_scores` runs the top layers and the head from them (equal to the full model).
:class:`PairScorer` scores pairs at inference time, jitted at bucketed shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt

from emotional_memory._validation import (
    _check_text,
    check_texts,
    integer,
    positive,
    positive_int,
    strict_finite,
)
from emotional_memory.embedders.minilm import _bucket, _buckets, _plan_passes, _seq_buckets
from emotional_memory.embedders.minilm_model import (
    MiniLMModel,
    _embed_tokens,
    _key_bias,
    _Layer,
    _layer_forward,
)
from emotional_memory.embedders.tunable import _checked_row, _layer_index

__all__ = [
    "CrossEncoder",
    "PairScorer",
    "ScoreHead",
    "embed_pairs",
    "head_scores",
    "init_cross_encoder",
    "pair_lower_states",
    "pair_tokens",
    "top_scores",
]


class ScoreHead(eqx.Module):
    """The scalar head: a scaled segment cosine plus a linear map of the CLS state.

    Attributes:
        w: ``(H,)`` weights on the ``[CLS]`` state.
        b: ``()`` bias.
        log_scale: ``()`` log of the cosine's scale.
    """

    w: jax.Array
    b: jax.Array
    log_scale: jax.Array


class CrossEncoder(eqx.Module):
    """A BERT encoder over (query, memory) pairs and a :class:`ScoreHead`.

    Attributes:
        encoder: the MiniLM encoder (its mean-pooling ``__call__`` is not used).
        head: the score head.
    """

    encoder: MiniLMModel
    head: ScoreHead

    def __call__(
        self, input_ids: jax.Array, token_types: jax.Array, attention_mask: jax.Array
    ) -> jax.Array:
        """Score a padded batch of pairs.

        Args:
            input_ids: ``(B, L)`` token ids of ``[CLS] q [SEP] m [SEP]``.
            token_types: ``(B, L)`` 0 on the query segment, 1 on the memory segment.
            attention_mask: ``(B, L)`` 1 for real tokens, 0 for padding.

        Returns:
            ``(B,)`` float32 scores (higher: more relevant).
        """
        x = embed_pairs(self.encoder, input_ids, token_types)
        return top_scores(self.encoder.layers, self.head, x, attention_mask, token_types,
                          self.encoder.num_heads, self.encoder.eps)


def init_cross_encoder(encoder: MiniLMModel, scale: float = 20.0) -> CrossEncoder:
    """A cross-encoder over ``encoder`` whose head starts as the scaled segment cosine.

    Args:
        encoder: the BERT encoder (e.g. ``MiniLMEmbedder().model``).
        scale: the starting cosine scale (``log_scale = log(scale)``).

    Returns:
        The cross-encoder (head in float32).

    Raises:
        TypeError, ValueError: ``scale`` is not a finite number > 0.
    """
    scale = positive("scale", strict_finite("scale", scale))
    head = ScoreHead(
        w=jnp.zeros((encoder.hidden_size,), jnp.float32),
        b=jnp.zeros((), jnp.float32),
        log_scale=jnp.asarray(np.log(scale), jnp.float32),
    )
    return CrossEncoder(encoder=encoder, head=head)


def embed_pairs(model: MiniLMModel, input_ids: jax.Array, token_types: jax.Array) -> jax.Array:
    """The embedding layer over two-segment input: word + position + token type, normed.

    Args:
        model: the encoder (its embedding tables).
        input_ids: ``(B, L)`` token ids.
        token_types: ``(B, L)`` segment ids (0 or 1).

    Returns:
        ``(B, L, H)`` input of the first encoder layer.
    """
    return _embed_tokens(model, input_ids, token_types)


def _segment_mean(x: jax.Array, keep: jax.Array) -> jax.Array:
    """``(B, H)`` mean of the states where ``keep`` (``(B, L)`` bool) holds."""
    weights = keep.astype(jnp.float32)[:, :, None]
    return jnp.sum(x * weights, axis=1) / jnp.maximum(jnp.sum(weights, axis=1), 1e-9)


def head_scores(
    head: ScoreHead, x: jax.Array, attention_mask: jax.Array, token_types: jax.Array
) -> jax.Array:
    """The head over the last hidden states.

    Args:
        head: the score head.
        x: ``(B, L, H)`` last hidden states.
        attention_mask: ``(B, L)`` 1 for real tokens.
        token_types: ``(B, L)`` segment ids.

    Returns:
        ``(B,)`` scores, float32 (float64 for float64 states and head).
    """
    x = x.astype(jnp.promote_types(x.dtype, jnp.float32))
    real = attention_mask.astype(bool)
    q = _segment_mean(x, real & (token_types == 0))
    m = _segment_mean(x, real & (token_types == 1))
    cos = jnp.sum(q * m, axis=-1) / jnp.maximum(
        jnp.sqrt(jnp.sum(q * q, axis=-1) * jnp.sum(m * m, axis=-1)), 1e-12)
    return jnp.exp(head.log_scale) * cos + x[:, 0, :] @ head.w + head.b


def top_scores(
    layers: Sequence[_Layer], head: ScoreHead, states: jax.Array, attention_mask: jax.Array,
    token_types: jax.Array, num_heads: int, eps: float,
) -> jax.Array:
    """Scores from token states through some encoder layers and the head (pure).

    Args:
        layers: the encoder layers to run (all of them from :func:`embed_pairs`, or the
            top ones from :func:`pair_lower_states`).
        head: the score head.
        states: ``(B, L, H)`` states at the input of ``layers[0]``.
        attention_mask: ``(B, L)`` 1 for real tokens.
        token_types: ``(B, L)`` segment ids.
        num_heads: attention heads.
        eps: LayerNorm epsilon.

    Returns:
        ``(B,)`` float32 scores.
    """
    x = states
    bias = _key_bias(attention_mask)
    for w in layers:
        x = _layer_forward(w, x, bias, num_heads, eps)
    return head_scores(head, x, attention_mask, token_types)


class Tokenizer(Protocol):
    """What pairing needs of an embedder: ``tokenize`` (``[CLS] ... [SEP]`` per text)."""

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]: ...


def pair_tokens(
    query_ids: Sequence[int], text_ids: Sequence[int], max_length: int
) -> tuple[list[int], list[int]]:
    """Join a tokenised query and memory text into one pair input.

    Args:
        query_ids: ``[CLS] q [SEP]`` (truncated to half of ``max_length`` if longer).
        text_ids: ``[CLS] m [SEP]`` (its ``[CLS]`` is dropped; the memory is cut so the
            pair fits ``max_length``, its final ``[SEP]`` kept).
        max_length: most tokens of the pair.

    Returns:
        ``(ids, token_types)`` of ``[CLS] q [SEP] m [SEP]``.
    """
    q = list(query_ids)
    half = max_length // 2
    if len(q) > half:
        q = [*q[:half - 1], q[-1]]
    m = list(text_ids[1:])
    room = max_length - len(q)
    if len(m) > room:
        m = [*m[:room - 1], m[-1]]
    return q + m, [0] * len(q) + [1] * len(m)


def _pad_pairs(
    pairs: Sequence[tuple[Sequence[int] | npt.NDArray[np.int32],
                          Sequence[int] | npt.NDArray[np.int32]]],
    rows: int, length: int, pad_id: int,
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int32]]:
    """``(ids, types, mask)`` arrays ``(rows, length)`` of some pairs (zero rows after)."""
    ids = np.full((rows, length), pad_id, np.int32)
    types = np.zeros((rows, length), np.int32)
    mask = np.zeros((rows, length), np.int32)
    for r, (p_ids, p_types) in enumerate(pairs):
        ids[r, : len(p_ids)] = p_ids
        types[r, : len(p_types)] = p_types
        mask[r, : len(p_ids)] = 1
    return ids, types, mask


def _checked_pairs(model: MiniLMModel, pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
                   limit: int | None = None,
                   ) -> list[tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]]:
    """Each pair's ids and token types as int32 arrays, refused unless the encoder can
    embed them (ids in its vocabulary, types in its segments, as many types as ids, at
    most ``limit`` or else its positions).

    Raises:
        TypeError: an entry that is no ``(ids, token_types)`` pair of int sequences.
        ValueError: an id or type out of range, a length mismatch or a pair longer than
            the positions (``pairs[i]`` named).
    """
    vocab = int(model.word_embeddings.shape[0])
    limit = model.max_positions if limit is None else limit
    segments = int(model.token_type_embeddings.shape[0])
    out = []
    for i, pair in enumerate(pairs):
        if isinstance(pair, str | bytes) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise TypeError(f"pairs[{i}] must be an (ids, token_types) pair")
        ids = _checked_row(pair[0], f"pairs[{i}] ids", vocab, limit)
        types = _checked_row(pair[1], f"pairs[{i}] token_types", segments, limit)
        if len(types) != len(ids):
            raise ValueError(f"pairs[{i}] has {len(ids)} ids but {len(types)} token_types")
        out.append((ids, types))
    return out


@eqx.filter_jit
def _lower_pairs(model: MiniLMModel, ids: jax.Array, types: jax.Array, mask: jax.Array,
                 start: int) -> jax.Array:
    """Token states at the input of layer ``start`` (static via filter_jit)."""
    x = embed_pairs(model, ids, types)
    bias = _key_bias(mask)
    for w in model.layers[:start]:
        x = _layer_forward(w, x, bias, model.num_heads, model.eps)
    return x


def pair_lower_states(
    model: MiniLMModel, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], start: int,
    *, rows: int = 32, pad_id: int = 0, dtype: Any = np.float32,
) -> list[npt.NDArray[Any]]:
    """Token states of each pair at the input of encoder layer ``start`` (frozen layers).

    Args:
        model: the encoder.
        pairs: ``(ids, token_types)`` per pair (:func:`pair_tokens`).
        start: the first layer not run (0: the embedding layer's output).
        rows: pairs per forward pass.
        pad_id: padding token id.
        dtype: numpy dtype the states are kept in (``np.float16`` halves the cache).

    Returns:
        Per pair a ``(len, H)`` array.

    Raises:
        TypeError: ``start``, ``rows`` or ``pad_id`` is not an int (or is a bool), or a
            pair is no ``(ids, token_types)`` of ints (``pairs[i]`` named).
        ValueError: ``start`` outside [0, number of layers], ``rows`` < 1, ``pad_id``,
            an id or a type out of range, or a pair longer than the positions (named).
    """
    rows = positive_int("rows", rows)
    start = _layer_index("start", start, len(model.layers))
    vocab = int(model.word_embeddings.shape[0])
    if not 0 <= integer("pad_id", pad_id) < vocab:  # its NaN row would reach every state
        raise ValueError(f"pad_id must be in [0, {vocab}) (the vocabulary), got {pad_id}")
    checked = _checked_pairs(model, pairs)
    order = sorted(range(len(checked)), key=lambda i: len(checked[i][0]))
    out: list[npt.NDArray[Any]] = [np.zeros((0, 0), dtype)] * len(checked)
    buckets = _seq_buckets(model.max_positions)
    for pos in range(0, len(order), rows):
        chunk = order[pos:pos + rows]
        length = _bucket(max(len(checked[i][0]) for i in chunk), buckets)
        ids, types, mask = _pad_pairs([checked[i] for i in chunk], rows, length, pad_id)
        states = np.asarray(_lower_pairs(model, jnp.asarray(ids), jnp.asarray(types),
                                         jnp.asarray(mask), start))
        for r, i in enumerate(chunk):
            out[i] = states[r, : len(checked[i][0])].astype(dtype)
    return out


@eqx.filter_jit
def _score_jit(model: CrossEncoder, ids: jax.Array, types: jax.Array,
               mask: jax.Array) -> jax.Array:
    """Jitted :meth:`CrossEncoder.__call__`."""
    return model(ids, types, mask)


class PairScorer:
    """Scores (query, memory text) pairs with a :class:`CrossEncoder` (inference).

    Pairs are sorted by length and split into forward passes as the MiniLM embedder
    splits texts (at most ``tokens_per_pass`` padded positions unless a pass holds one
    pair), each padded to bucketed shapes (rows: powers of two up to ``batch_size``;
    length: the MiniLM length buckets), so a new query compiles nothing once its shapes
    were seen.

    Args:
        model: the cross-encoder.
        tokenizer: gives ``[CLS] ... [SEP]`` ids per text (e.g. a ``MiniLMEmbedder``).
        max_length: most tokens of a pair.
        batch_size: most pairs per forward pass.
        tokens_per_pass: most padded positions of a pass of several pairs.
        pad_id: padding token id.

    Raises:
        TypeError: an option that is not an int (bools refused).
        ValueError: ``max_length`` outside [4, the encoder's positions] (a pair needs
            ``[CLS] q [SEP] m [SEP]``), ``batch_size`` / ``tokens_per_pass`` < 1 or
            ``pad_id`` < 0.
    """

    def __init__(self, model: CrossEncoder, tokenizer: Tokenizer, *, max_length: int = 256,
                 batch_size: int = 32, tokens_per_pass: int = 512, pad_id: int = 0) -> None:
        max_length = positive_int("max_length", max_length)
        limit = int(model.encoder.max_positions)
        if not 4 <= max_length <= limit:
            raise ValueError(f"max_length must be in [4, {limit}] (the encoder's positions), "
                             f"got {max_length}")
        if integer("pad_id", pad_id) < 0:
            raise ValueError(f"pad_id must be >= 0, got {pad_id}")
        self.model = model
        self._tokenizer = tokenizer
        self._max_length = max_length
        self._row_buckets = _buckets(positive_int("batch_size", batch_size), 1)
        self._seq_buckets = _seq_buckets(self._max_length)
        self._tokens_per_pass = positive_int("tokens_per_pass", tokens_per_pass)
        self._pad_id = int(pad_id)

    def pairs(self, query: str, texts: Sequence[str]) -> list[tuple[list[int], list[int]]]:
        """The pair inputs of one query and several memory texts.

        Args:
            query: the query.
            texts: memory texts.

        Returns:
            ``(ids, token_types)`` per text.
        """
        tokens = self._tokenizer.tokenize([query, *texts])
        return [pair_tokens(tokens[0], t, self._max_length) for t in tokens[1:]]

    def score_pairs(
        self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]
    ) -> npt.NDArray[np.float32]:
        """Scores of tokenised pairs.

        Args:
            pairs: ``(ids, token_types)`` per pair.

        Returns:
            ``(len(pairs),)`` float32 scores, in the order given.

        Raises:
            TypeError: a pair that is no ``(ids, token_types)`` of ints (named).
            ValueError: an id or type out of range, or a pair longer than ``max_length``.
        """
        checked = _checked_pairs(self.model.encoder, pairs, self._max_length)
        out = np.zeros(len(checked), np.float32)
        passes = _plan_passes([len(p[0]) for p in checked], self._row_buckets,
                              self._seq_buckets, self._tokens_per_pass)
        for chunk in passes:
            rows = _bucket(len(chunk), self._row_buckets)
            length = _bucket(max(len(checked[i][0]) for i in chunk), self._seq_buckets)
            ids, types, mask = _pad_pairs([checked[i] for i in chunk], rows, length,
                                          self._pad_id)
            scores = np.asarray(_score_jit(self.model, jnp.asarray(ids), jnp.asarray(types),
                                           jnp.asarray(mask)))
            out[chunk] = scores[: len(chunk)]
        return out

    def score(self, query: str, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Scores of one query against several memory texts.

        Args:
            query: the query.
            texts: memory texts.

        Returns:
            ``(len(texts),)`` float32 scores.

        Raises:
            TypeError: ``query`` is not a str, or ``texts`` is a single str (its
                characters would be scored one by one), no iterable or holds a non-str
                (``texts[i]`` named).
            ValueError: ``query`` or a text is not valid Unicode (a lone surrogate).
        """
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, got {type(query).__name__}")
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of str, not a single str")
        items = check_texts(texts)
        _check_text("query", query)
        for i, text in enumerate(items):
            _check_text(f"text (texts[{i}])", text)
        return self.score_pairs(self.pairs(query, items)) if items else np.zeros(0, np.float32)
