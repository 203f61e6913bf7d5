"""The trainable top of a MiniLM: cached lower layers, full top layers or LoRA adapters.

Fine-tuning on two CPU cores is affordable when only the top ``k`` encoder layers run
per training step: :func:`lower_states` runs the embedding layer and the frozen lower
layers once per text and keeps their token states; :func:`top_embeddings` runs the top
layers from those states (the same :func:`~emotional_memory.embedders.minilm.
_layer_forward` and pooling as :class:`~emotional_memory.embedders.minilm.MiniLMModel`),
so ``top_embeddings(model.layers[-k:], lower_states(model, ..., start=n-k))`` equals the
model's embeddings. Two parametrisations of the top:

* ``last-layers``: the top layers' weights themselves are trained;
* ``lora``: low-rank adapters ``W + A @ B * (alpha / r)`` on the fused query/key/value,
  attention-output and both feed-forward matrices of the top layers (``B`` starts at 0,
  so the start is the base model exactly).

:func:`fitted_model` folds either back into a plain :class:`MiniLMModel` (LoRA merged).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt

from emotional_memory._validation import integer, positive_int, strict_finite
from emotional_memory.embedders.minilm_model import (
    MiniLMModel,
    _embed_tokens,
    _key_bias,
    _Layer,
    _layer_forward,
    mean_pool_normalize,
)

__all__ = [
    "LORA_MATRICES",
    "MODES",
    "LoRA",
    "apply_lora",
    "fitted_model",
    "init_lora",
    "lower_states",
    "pad_states",
    "top_embeddings",
    "top_of",
]

#: The tuning modes.
MODES = ("last-layers", "lora")
#: The dense matrices of a layer that LoRA adapts.
LORA_MATRICES = ("qkv_w", "attn_out_w", "ffn_in_w", "ffn_out_w")


class LoRA(eqx.Module):
    """Low-rank adapters of some layers: per layer and matrix ``(A, B)``.

    Attributes:
        a: per adapted layer, per :data:`LORA_MATRICES` entry, ``(in, r)``.
        b: the same, ``(r, out)``.
        scale: ``alpha / r``.
    """

    a: tuple[tuple[jax.Array, ...], ...]
    b: tuple[tuple[jax.Array, ...], ...]
    scale: float = eqx.field(static=True)


def init_lora(layers: Sequence[_Layer], rank: int, alpha: float, seed: int = 0) -> LoRA:
    """Adapters of ``layers`` that start as the identity (``B = 0``).

    Args:
        layers: the adapted layers.
        rank: ``r``, at least 1.
        alpha: the LoRA scale numerator (``scale = alpha / r``).
        seed: random seed of the ``A`` factors (normal, std ``1 / sqrt(in)``).

    Returns:
        The adapters (float32).

    Raises:
        TypeError: a rank that is not an int (or a bool), an alpha that is not a number.
        ValueError: for a rank below 1 or a non-finite alpha.
    """
    rank = positive_int("rank", rank)
    alpha = strict_finite("alpha", alpha)
    rng = np.random.default_rng(seed)
    a_all, b_all = [], []
    for layer in layers:
        a_l, b_l = [], []
        for name in LORA_MATRICES:
            n_in, n_out = getattr(layer, name).shape
            a_l.append(jnp.asarray(rng.standard_normal((n_in, rank)) / math.sqrt(n_in),
                                   jnp.float32))
            b_l.append(jnp.zeros((rank, n_out), jnp.float32))
        a_all.append(tuple(a_l))
        b_all.append(tuple(b_l))
    return LoRA(a=tuple(a_all), b=tuple(b_all), scale=float(alpha) / rank)


def apply_lora(layers: Sequence[_Layer], lora: LoRA) -> tuple[_Layer, ...]:
    """``layers`` with the adapted matrices ``W + A @ B * scale`` (differentiable).

    Args:
        layers: the base layers (as many as the adapters').
        lora: the adapters.

    Returns:
        The adapted layers.
    """
    out = []
    for layer, a_l, b_l in zip(layers, lora.a, lora.b, strict=True):
        updates = {
            name: (getattr(layer, name).astype(jnp.float32) + lora.scale * (a @ b)).astype(
                getattr(layer, name).dtype
            )
            for name, a, b in zip(LORA_MATRICES, a_l, b_l, strict=True)
        }
        out.append(eqx.tree_at(lambda w: tuple(getattr(w, n) for n in LORA_MATRICES), layer,
                               tuple(updates[n] for n in LORA_MATRICES)))
    return tuple(out)


def fitted_model(model: MiniLMModel, top: Sequence[_Layer] | LoRA) -> MiniLMModel:
    """``model`` with its top layers replaced by trained ones, or LoRA merged into them.

    Args:
        model: the base model.
        top: the trained top layers (``last-layers``), or adapters of the top layers
            (``lora``; merged).

    Returns:
        A plain :class:`MiniLMModel`.
    """
    if isinstance(top, LoRA):
        k = len(top.a)
        new_top = apply_lora(model.layers[len(model.layers) - k:], top)
    else:
        new_top = tuple(top)
    k = len(new_top)
    layers = tuple(model.layers[: len(model.layers) - k]) + new_top
    return eqx.tree_at(lambda m: m.layers, model, layers)


@eqx.filter_jit
def _lower(model: MiniLMModel, input_ids: jax.Array, mask: jax.Array, start: int) -> jax.Array:
    """Token states at the input of layer ``start`` (``start`` static via filter_jit)."""
    x = _embed_tokens(model, input_ids)
    bias = _key_bias(mask)
    for w in model.layers[:start]:
        x = _layer_forward(w, x, bias, model.num_heads, model.eps)
    return x


def _length_bucket(n: int) -> int:
    """Padded length: 16, 32, 64, 128, ... (each new length compiles a training step, so
    few lengths: a step's texts pad to the next power of two of the longest)."""
    size = 16
    while size < n:
        size *= 2
    return size


def _layer_index(field: str, value: object, n_layers: int) -> int:
    """``value`` as a layer position in [0, ``n_layers``] (``TypeError`` / ``ValueError``
    naming ``field``)."""
    index = integer(field, value)
    if not 0 <= index <= n_layers:
        raise ValueError(f"{field} must be in [0, {n_layers}] (the model's layers), got {index}")
    return index


def _checked_row(ids: object, field: str, vocab: int, limit: int) -> npt.NDArray[np.int32]:
    """One text's ids as an int32 array, refused unless each is in ``[0, vocab)`` and
    there are at most ``limit``.

    Raises:
        TypeError: no sequence of ints (``field`` named).
        ValueError: an id outside the vocabulary (the model would gather NaN or, for a
            negative one, another token's row) or more ids than positions (named).
    """
    try:
        arr = None if isinstance(ids, str | bytes) else np.asarray(ids)
    except ValueError:  # ragged
        arr = None
    if arr is None or arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise TypeError(f"{field} must be a sequence of int token ids")
    if arr.size > limit:
        raise ValueError(f"{field} has {arr.size} ids, more than the model's {limit} positions")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= vocab):
        raise ValueError(f"{field} holds an id outside [0, {vocab}) (the vocabulary)")
    return arr.astype(np.int32)


def _checked_ids(model: MiniLMModel, token_ids: Sequence[Sequence[int]]
                 ) -> list[npt.NDArray[np.int32]]:
    """Each text's ids as an int32 array (:func:`_checked_row`, ``token_ids[i]`` named)."""
    vocab, limit = int(model.word_embeddings.shape[0]), model.max_positions
    return [_checked_row(ids, f"token_ids[{i}]", vocab, limit) for i, ids in enumerate(token_ids)]


def lower_states(
    model: MiniLMModel, token_ids: Sequence[Sequence[int]], start: int, *,
    rows: int = 32, pad_id: int = 0,
) -> list[npt.NDArray[np.float32]]:
    """Token states at the input of encoder layer ``start``, per text (frozen layers).

    Args:
        model: the model.
        token_ids: per text, its token ids (``[CLS] ... [SEP]``).
        start: the first layer that is not run (0: the embedding layer's output).
        rows: texts per forward pass.
        pad_id: padding token id.

    Returns:
        Per text a ``(len, H)`` float32 array.

    Raises:
        TypeError: ``start``, ``rows`` or ``pad_id`` is not an int (or is a bool), or a
            text's ids are not ints (``token_ids[i]`` named).
        ValueError: ``start`` outside [0, number of layers], ``rows`` < 1, ``pad_id`` or
            a token id outside the vocabulary, or a text longer than the model's positions.
    """
    rows = positive_int("rows", rows)
    start = _layer_index("start", start, len(model.layers))
    vocab = int(model.word_embeddings.shape[0])
    if not 0 <= integer("pad_id", pad_id) < vocab:  # its NaN row would reach every state
        raise ValueError(f"pad_id must be in [0, {vocab}) (the vocabulary), got {pad_id}")
    checked = _checked_ids(model, token_ids)
    order = sorted(range(len(checked)), key=lambda i: len(checked[i]))
    out: list[npt.NDArray[np.float32]] = [np.zeros((0, 0), np.float32)] * len(checked)
    for pos in range(0, len(order), rows):
        chunk = order[pos:pos + rows]
        length = min(_length_bucket(max(len(checked[i]) for i in chunk)), model.max_positions)
        ids = np.full((rows, length), pad_id, np.int32)
        mask = np.zeros((rows, length), np.int32)
        for r, i in enumerate(chunk):
            ids[r, : len(checked[i])] = checked[i]
            mask[r, : len(checked[i])] = 1
        states = np.asarray(_lower(model, jnp.asarray(ids), jnp.asarray(mask), start),
                            np.float32)
        for r, i in enumerate(chunk):
            out[i] = states[r, : len(checked[i])].copy()
    return out


def pad_states(
    states: Sequence[npt.NDArray[np.float32]], rows: Sequence[int], length: int | None = None
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int32]]:
    """Stack some texts' cached token states into a padded ``(N, L, H)`` array.

    Args:
        states: per text, its ``(len, H)`` states (:func:`lower_states`).
        rows: the texts (indices into ``states``; may repeat).
        length: padded length (default: the longest, rounded up to a power of two >= 16).

    Returns:
        ``(x, mask)``: ``(N, L, H)`` float32 states and the ``(N, L)`` attention mask.

    Raises:
        ValueError: no text has states, or ``length`` is shorter than a chosen text.
    """
    longest = max((states[i].shape[0] for i in rows), default=1)
    size = _length_bucket(longest) if length is None else length
    if size < longest:
        raise ValueError(f"length {size} is shorter than the longest chosen text ({longest})")
    hidden = next((s.shape[1] for s in states if s.ndim == 2 and s.shape[0]), None)
    if hidden is None:
        raise ValueError("states holds no text's token states (nothing to pad)")
    x = np.zeros((len(rows), size, hidden), np.float32)
    mask = np.zeros((len(rows), size), np.int32)
    for r, i in enumerate(rows):
        n = states[i].shape[0]
        x[r, :n] = states[i]
        mask[r, :n] = 1
    return x, mask


def top_embeddings(
    layers: Sequence[_Layer], states: jax.Array, mask: jax.Array, num_heads: int, eps: float
) -> jax.Array:
    """Sentence embeddings from cached token states through the top layers (pure).

    Args:
        layers: the top encoder layers to run.
        states: ``(N, L, H)`` states at their input.
        mask: ``(N, L)`` attention mask.
        num_heads: attention heads.
        eps: LayerNorm epsilon.

    Returns:
        ``(N, H)`` unit-norm float32 embeddings.
    """
    x = states
    bias = _key_bias(mask)
    for w in layers:
        x = _layer_forward(w, x, bias, num_heads, eps)
    return mean_pool_normalize(x, mask)


def top_of(top: Sequence[_Layer] | LoRA, frozen: Sequence[_Layer]) -> tuple[_Layer, ...]:
    """The top layers a trainable top stands for: itself, or ``frozen`` adapted.

    Args:
        top: trained layers, or adapters.
        frozen: the base top layers (used with adapters only).

    Returns:
        The layers to run.
    """
    return apply_lora(frozen, top) if isinstance(top, LoRA) else tuple(top)

