"""The BERT encoder of all-MiniLM-L6-v2 as an equinox module (the maths only).

:class:`MiniLMModel` holds the weights (dense matrices stored ``(in, out)``, the
query/key/value projections fused) and computes mean-pooled, L2-normalised sentence
embeddings or pooled per-layer states for padded token batches. Loading weights from
files, tokenising and bucketing live in :mod:`emotional_memory.embedders.minilm`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt

__all__ = ["MiniLMModel", "mean_pool_normalize"]

_PRECISION = jax.lax.Precision.HIGHEST

# --------------------------------------------------------------------------- model


def _layer_norm(x: jax.Array, weight: jax.Array, bias: jax.Array, eps: float) -> jax.Array:
    """LayerNorm over the last axis, computed in float32, returned in ``x.dtype``."""
    x32 = x.astype(jnp.float32)
    mean = jnp.mean(x32, axis=-1, keepdims=True)
    centred = x32 - mean
    var = jnp.mean(centred * centred, axis=-1, keepdims=True)
    out = centred * jax.lax.rsqrt(var + eps)
    return (out * weight.astype(jnp.float32) + bias.astype(jnp.float32)).astype(x.dtype)


def _dense(x: jax.Array, weight: jax.Array, bias: jax.Array) -> jax.Array:
    """``x @ weight + bias`` with ``weight`` stored as ``(in, out)``.

    ``x`` is cast to the weight's dtype (a no-op unless the model was built with a
    narrower ``matmul_dtype``); products are accumulated in float32 and the result is
    returned in ``x.dtype``.
    """
    y = jax.lax.dot_general(
        x.astype(weight.dtype),
        weight,
        (((x.ndim - 1,), (0,)), ((), ())),
        precision=_PRECISION,
        preferred_element_type=jnp.float32,
    )
    return (y + bias.astype(jnp.float32)).astype(x.dtype)


class _Layer(eqx.Module):
    """Weights of one BERT encoder layer, dense weights stored transposed as ``(in, out)``.

    The query, key and value projections are fused into one ``(H, 3H)`` matrix (columns
    ``[:H]`` query, ``[H:2H]`` key, ``[2H:]`` value), so each layer starts with one
    matrix product instead of three.
    """

    qkv_w: jax.Array  # (H, 3H)
    qkv_b: jax.Array  # (3H,)
    attn_out_w: jax.Array  # (H, H)
    attn_out_b: jax.Array  # (H,)
    attn_ln_w: jax.Array  # (H,)
    attn_ln_b: jax.Array
    ffn_in_w: jax.Array  # (H, I)
    ffn_in_b: jax.Array  # (I,)
    ffn_out_w: jax.Array  # (I, H)
    ffn_out_b: jax.Array  # (H,)
    ffn_ln_w: jax.Array
    ffn_ln_b: jax.Array


def _embed_tokens(
    model: MiniLMModel, input_ids: jax.Array, token_types: jax.Array | None = None
) -> jax.Array:
    """The embedding layer: word + position + token-type embeddings, layer-normed.

    Args:
        model: the model (its embedding tables).
        input_ids: ``(B, L)`` integer token ids.
        token_types: ``(B, L)`` segment ids (0 or 1), or None: one segment (type 0).

    Returns:
        ``(B, L, H)`` input of the first encoder layer.
    """
    length = input_ids.shape[1]
    x = (
        jnp.take(model.word_embeddings, input_ids, axis=0)
        + model.position_embeddings[:length][None, :, :]
        + (model.token_type_embeddings[0][None, None, :] if token_types is None
           else jnp.take(model.token_type_embeddings, token_types, axis=0))
    )
    return _layer_norm(x, model.emb_ln_w, model.emb_ln_b, model.eps)


def _key_bias(attention_mask: jax.Array) -> jax.Array:
    """Additive attention bias ``(B, 1, 1, L)``: 0 on real tokens, a large negative on padding.

    A large finite negative (not -inf), so that a row without any real token (batch
    padding) gives a uniform softmax instead of NaNs; exp() of it underflows to exactly
    0 next to any real token.
    """
    keep = attention_mask.astype(bool)
    neg = jnp.finfo(jnp.float32).min
    return jnp.where(keep, 0.0, neg).astype(jnp.float32)[:, None, None, :]


def _layer_forward(
    w: _Layer, x: jax.Array, key_bias: jax.Array, num_heads: int, eps: float
) -> jax.Array:
    """One BERT encoder layer (self-attention, then feed-forward, each post-LayerNorm).

    Args:
        w: the layer's weights.
        x: ``(B, L, H)`` hidden states.
        key_bias: ``(B, 1, 1, L)`` additive attention bias (:func:`_key_bias`).
        num_heads: attention heads.
        eps: LayerNorm epsilon.

    Returns:
        ``(B, L, H)`` the layer's output, in ``x.dtype``.
    """
    batch, length, hidden = x.shape
    head_dim = hidden // num_heads
    dtype = x.dtype
    scale = 1.0 / math.sqrt(head_dim)
    qkv = _dense(x, w.qkv_w, w.qkv_b).reshape(batch, length, 3, num_heads, head_dim)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, precision=_PRECISION)
    scores = scores.astype(jnp.float32) * scale + key_bias
    probs = jax.nn.softmax(scores, axis=-1).astype(dtype)
    ctx = jnp.einsum("bhqk,bkhd->bqhd", probs, v, precision=_PRECISION)
    ctx = ctx.reshape(batch, length, hidden)
    x = _layer_norm(_dense(ctx, w.attn_out_w, w.attn_out_b) + x, w.attn_ln_w, w.attn_ln_b, eps)
    ff = jax.nn.gelu(_dense(x, w.ffn_in_w, w.ffn_in_b), approximate=False)
    return _layer_norm(_dense(ff, w.ffn_out_w, w.ffn_out_b) + x, w.ffn_ln_w, w.ffn_ln_b, eps)


def mean_pool_normalize(x: jax.Array, attention_mask: jax.Array) -> jax.Array:
    """Mean of the real tokens' states, L2-normalised (the sentence embedding).

    Args:
        x: ``(B, L, H)`` last hidden states.
        attention_mask: ``(B, L)`` with 1 for real tokens and 0 for padding.

    Returns:
        ``(B, H)`` float32 embeddings of unit L2 norm (all-zero for a row without any
        real token).
    """
    keep = attention_mask.astype(bool)
    weights = keep.astype(jnp.float32)[:, :, None]
    summed = jnp.sum(x.astype(jnp.float32) * weights, axis=1)
    counts = jnp.maximum(jnp.sum(weights, axis=1), 1e-9)
    pooled = summed / counts
    norm = jnp.sqrt(jnp.sum(pooled * pooled, axis=-1, keepdims=True))
    return pooled / jnp.maximum(norm, 1e-12)


class MiniLMModel(eqx.Module):
    """BERT encoder + mean pooling + L2 normalisation (a sentence-transformers model).

    Build it with :meth:`from_state_dict`; call it on padded token ids and their
    attention mask to get unit-norm sentence embeddings.
    """

    word_embeddings: jax.Array  # (V, H)
    position_embeddings: jax.Array  # (P, H)
    token_type_embeddings: jax.Array  # (T, H)
    emb_ln_w: jax.Array
    emb_ln_b: jax.Array
    layers: tuple[_Layer, ...]
    num_heads: int = eqx.field(static=True)
    eps: float = eqx.field(static=True)

    @property
    def hidden_size(self) -> int:
        """Width of the hidden states (384 for all-MiniLM-L6-v2)."""
        return int(self.word_embeddings.shape[1])

    @property
    def max_positions(self) -> int:
        """Number of learned positions (512)."""
        return int(self.position_embeddings.shape[0])

    @classmethod
    def from_state_dict(
        cls,
        tensors: Mapping[str, npt.NDArray[Any]],
        config: Mapping[str, Any],
        dtype: Any = jnp.float32,
        matmul_dtype: Any = None,
    ) -> MiniLMModel:
        """Build the model from Hugging Face ``BertModel`` tensor names.

        Args:
            tensors: name -> array, e.g. from ``safetensors.numpy.load_file``; a
                ``"bert."`` prefix on every name (masked-LM checkpoints) is accepted.
            config: hyper-parameters (``num_hidden_layers``, ``num_attention_heads``,
                ``layer_norm_eps``, ...).
            dtype: floating dtype of the weights and activations.
            matmul_dtype: dtype the four dense weight matrices of each layer are
                stored in, and their inputs rounded to, for the matrix products
                (accumulated in float32); ``None`` for ``dtype``.

        Returns:
            The model.

        Raises:
            KeyError: when a required tensor is missing.
            ValueError: when a tensor has an unexpected shape, is not floating point
                or holds NaN / infinities.
        """
        if not any(k.startswith("embeddings.") for k in tensors) and any(
            k.startswith("bert.embeddings.") for k in tensors
        ):
            tensors = {k[5:]: v for k, v in tensors.items() if k.startswith("bert.")}
        hidden = int(config["hidden_size"])
        inter = int(config["intermediate_size"])
        n_layers = int(config["num_hidden_layers"])

        def get(name: str, shape: tuple[int, ...]) -> npt.NDArray[Any]:
            try:
                arr = np.asarray(tensors[name])
            except KeyError:
                raise KeyError(f"tensor {name!r} missing from the MiniLM weights") from None
            if arr.shape != shape:
                raise ValueError(f"tensor {name!r} has shape {arr.shape}, expected {shape}")
            if not np.issubdtype(arr.dtype, np.floating):
                raise ValueError(f"tensor {name!r} is {arr.dtype}, not floating point")
            if not np.isfinite(arr).all():  # NaN vectors for every text
                raise ValueError(f"tensor {name!r} holds non-finite values")
            return arr

        def arr(x: npt.NDArray[Any]) -> jax.Array:
            return jnp.asarray(x, dtype=dtype)

        def mat(x: npt.NDArray[Any]) -> jax.Array:
            return jnp.asarray(x, dtype=dtype if matmul_dtype is None else matmul_dtype)

        def layer(i: int) -> _Layer:
            def part(suffix: str, shape: tuple[int, ...]) -> npt.NDArray[Any]:
                return get(f"encoder.layer.{i}.{suffix}", shape)

            def dense_w(suffix: str, shape: tuple[int, ...]) -> npt.NDArray[Any]:
                return part(f"{suffix}.weight", shape).T  # (out, in) -> (in, out)

            qkv = ("attention.self.query", "attention.self.key", "attention.self.value")
            return _Layer(
                qkv_w=mat(np.concatenate([dense_w(n, (hidden, hidden)) for n in qkv], axis=1)),
                qkv_b=arr(np.concatenate([part(f"{n}.bias", (hidden,)) for n in qkv])),
                attn_out_w=mat(dense_w("attention.output.dense", (hidden, hidden))),
                attn_out_b=arr(part("attention.output.dense.bias", (hidden,))),
                attn_ln_w=arr(part("attention.output.LayerNorm.weight", (hidden,))),
                attn_ln_b=arr(part("attention.output.LayerNorm.bias", (hidden,))),
                ffn_in_w=mat(dense_w("intermediate.dense", (inter, hidden))),
                ffn_in_b=arr(part("intermediate.dense.bias", (inter,))),
                ffn_out_w=mat(dense_w("output.dense", (hidden, inter))),
                ffn_out_b=arr(part("output.dense.bias", (hidden,))),
                ffn_ln_w=arr(part("output.LayerNorm.weight", (hidden,))),
                ffn_ln_b=arr(part("output.LayerNorm.bias", (hidden,))),
            )

        return cls(
            word_embeddings=arr(
                get("embeddings.word_embeddings.weight", (int(config["vocab_size"]), hidden))
            ),
            position_embeddings=arr(
                get(
                    "embeddings.position_embeddings.weight",
                    (int(config["max_position_embeddings"]), hidden),
                )
            ),
            token_type_embeddings=arr(
                get(
                    "embeddings.token_type_embeddings.weight",
                    (int(config["type_vocab_size"]), hidden),
                )
            ),
            emb_ln_w=arr(get("embeddings.LayerNorm.weight", (hidden,))),
            emb_ln_b=arr(get("embeddings.LayerNorm.bias", (hidden,))),
            layers=tuple(layer(i) for i in range(n_layers)),
            num_heads=int(config["num_attention_heads"]),
            eps=float(config["layer_norm_eps"]),
        )

    def _encode(
        self, input_ids: jax.Array, attention_mask: jax.Array, keep_layers: bool
    ) -> tuple[jax.Array, jax.Array | None]:
        """Run the encoder; the final hidden states and, optionally, every layer's.

        Args:
            input_ids: ``(B, L)`` integer token ids.
            attention_mask: ``(B, L)`` with 1 for real tokens and 0 for padding.
            keep_layers: whether to also return the stacked per-layer outputs.

        Returns:
            ``(x, layers)``: ``x`` the ``(B, L, H)`` last hidden states; ``layers`` the
            ``(n_layers, B, L, H)`` outputs of every encoder layer, or ``None``.
        """
        x = _embed_tokens(self, input_ids)
        key_bias = _key_bias(attention_mask)
        # The layers are unrolled in the trace (a Python loop over separate per-layer
        # weights): a lax.scan over stacked weights makes XLA copy each layer's
        # weights out of the stack on every call, which costs more than the matrix
        # products themselves for a short text.
        outputs: list[jax.Array] = []
        for w in self.layers:
            x = _layer_forward(w, x, key_bias, self.num_heads, self.eps)
            if keep_layers:
                outputs.append(x)
        return x, (jnp.stack(outputs) if keep_layers else None)

    def __call__(self, input_ids: jax.Array, attention_mask: jax.Array) -> jax.Array:
        """Embed a padded batch.

        Args:
            input_ids: ``(B, L)`` integer token ids (single-segment input).
            attention_mask: ``(B, L)`` with 1 for real tokens and 0 for padding.

        Returns:
            ``(B, H)`` float32 embeddings of unit L2 norm (all-zero for a row without
            any real token).
        """
        x, _ = self._encode(input_ids, attention_mask, keep_layers=False)
        return mean_pool_normalize(x, attention_mask)

    def pooled_layers(self, input_ids: jax.Array, attention_mask: jax.Array) -> jax.Array:
        """Mean- and max-pooled hidden states of every encoder layer (not normalised).

        Args:
            input_ids: ``(B, L)`` integer token ids (single-segment input).
            attention_mask: ``(B, L)`` with 1 for real tokens and 0 for padding.

        Returns:
            ``(B, n_layers, 2, H)`` float32: ``[:, i, 0]`` the mean over the real tokens
            of layer ``i``'s output, ``[:, i, 1]`` their element-wise maximum (zeros for
            a row without any real token).  ``[:, -1, 0]`` L2-normalised is
            :meth:`__call__`.
        """
        _, layers = self._encode(input_ids, attention_mask, keep_layers=True)
        assert layers is not None
        states = jnp.moveaxis(layers, 0, 1).astype(jnp.float32)  # (B, N, L, H)
        keep = attention_mask.astype(bool)[:, None, :, None]
        weights = keep.astype(jnp.float32)
        counts = jnp.maximum(jnp.sum(weights, axis=2), 1e-9)
        mean = jnp.sum(states * weights, axis=2) / counts
        any_real = jnp.any(keep, axis=2)
        top = jnp.max(jnp.where(keep, states, -jnp.inf), axis=2)
        top = jnp.where(any_real, top, 0.0)
        return jnp.stack([mean, top], axis=2)
