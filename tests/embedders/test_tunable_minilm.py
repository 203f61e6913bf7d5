"""The trainable top of the JAX MiniLM on a tiny randomly initialised BERT.

Same code as the real model (``MiniLMModel.from_state_dict`` over Hugging Face tensor
names, the same layer function), at widths a test can differentiate numerically:
cached lower layers + top layers equal the full forward, LoRA starts at the base and
merges exactly, and gradients of both parametrisations match central finite
differences.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from emotional_memory.embedders.tunable import (
    apply_lora,
    fitted_model,
    init_lora,
    lower_states,
    pad_states,
    top_embeddings,
    top_of,
)
from support.tiny_bert import tiny_model


def token_batch(seed: int = 1, n: int = 5) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[1, *rng.integers(5, 40, size=int(k)).tolist(), 2]
            for k in rng.integers(1, 20, size=n)]


def padded(ids: list[list[int]]) -> tuple[jax.Array, jax.Array]:
    length = max(len(x) for x in ids)
    arr = np.zeros((len(ids), length), np.int32)
    mask = np.zeros((len(ids), length), np.int32)
    for r, x in enumerate(ids):
        arr[r, : len(x)] = x
        mask[r, : len(x)] = 1
    return jnp.asarray(arr), jnp.asarray(mask)


@pytest.mark.parametrize("start", [0, 1, 2])
def test_cached_lower_layers_plus_top_equal_the_full_model(start: int) -> None:
    model = tiny_model()
    ids = token_batch()
    full = np.asarray(model(*padded(ids)))
    states = lower_states(model, ids, start, rows=2)
    assert [s.shape for s in states] == [(len(x), 8) for x in ids]
    x, mask = pad_states(states, list(range(len(ids))))
    top = np.asarray(top_embeddings(model.layers[start:], jnp.asarray(x), jnp.asarray(mask),
                                    model.num_heads, model.eps))
    np.testing.assert_allclose(top, full, atol=2e-6)


def test_lora_starts_at_the_base_and_merges_exactly() -> None:
    model = tiny_model()
    top = model.layers[1:]
    lora = init_lora(top, rank=2, alpha=4.0, seed=3)
    same = apply_lora(top, lora)
    for a, b in zip(jax.tree_util.tree_leaves(same), jax.tree_util.tree_leaves(top),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    rng = np.random.default_rng(4)
    moved = jax.tree_util.tree_map(lambda b: b + jnp.asarray(rng.standard_normal(b.shape),
                                                             jnp.float32), lora.b)
    lora = type(lora)(a=lora.a, b=moved, scale=lora.scale)
    # the merged matrix is W + scale * A @ B, checked against numpy
    w = np.asarray(top[0].qkv_w, np.float64)
    expect = w + 2.0 * np.asarray(lora.a[0][0], np.float64) @ np.asarray(lora.b[0][0], np.float64)
    np.testing.assert_allclose(np.asarray(apply_lora(top, lora)[0].qkv_w), expect, atol=1e-5)
    merged = fitted_model(model, lora)
    ids = token_batch(seed=5)
    states = lower_states(model, ids, 1)
    x, mask = pad_states(states, list(range(len(ids))))
    via_adapters = top_embeddings(top_of(lora, top), jnp.asarray(x), jnp.asarray(mask),
                                  model.num_heads, model.eps)
    # float32 both ways, rounded differently: the merged path rounds W + s A B once, the
    # adapter path x W and x A B apart; layer norm and softmax amplify the last bits
    # (seen: 3.8e-6 on values near 0.2), still far inside the 1e-3 gap asserted below
    np.testing.assert_allclose(np.asarray(merged(*padded(ids))), np.asarray(via_adapters),
                               rtol=1e-4, atol=1e-5)
    assert not np.allclose(np.asarray(via_adapters), np.asarray(model(*padded(ids))),
                           atol=1e-3)


def _directional_check(f: Any, params: Any, seed: int, eps: float = 1e-2) -> None:
    """grad . v against the central difference (f(p + eps v) - f(p - eps v)) / 2 eps."""
    grads = jax.grad(f)(params)
    leaves, tree = jax.tree_util.tree_flatten(params)
    rng = np.random.default_rng(seed)
    for _ in range(3):
        v = [jnp.asarray(rng.standard_normal(np.shape(x)), jnp.float32) for x in leaves]
        norm = float(np.sqrt(sum(float(jnp.sum(x * x)) for x in v)))
        v = [x / norm for x in v]
        plus = jax.tree_util.tree_unflatten(tree, [x + eps * d for x, d in zip(leaves, v,
                                                                              strict=True)])
        minus = jax.tree_util.tree_unflatten(tree, [x - eps * d for x, d in zip(leaves, v,
                                                                               strict=True)])
        numeric = (float(f(plus)) - float(f(minus))) / (2 * eps)
        analytic = sum(float(jnp.sum(g * d)) for g, d in
                       zip(jax.tree_util.tree_leaves(grads), v, strict=True))
        assert abs(analytic - numeric) <= 2e-2 * max(1.0, abs(numeric)), (analytic, numeric)
        assert abs(numeric) > 1e-3  # the direction moves the loss: the check is not vacuous


@pytest.mark.parametrize("mode", ["last-layers", "lora"])
def test_embedder_path_gradients_match_finite_differences(mode: str) -> None:
    model = tiny_model()
    ids = token_batch(seed=7, n=6)
    start = 1
    frozen = model.layers[start:]
    x, mask = pad_states(lower_states(model, ids, start), list(range(len(ids))))
    x, mask = jnp.asarray(x), jnp.asarray(mask)
    target = jnp.asarray(np.random.default_rng(8).standard_normal((len(ids), 8)), jnp.float32)

    def loss(top: Any) -> jax.Array:
        emb = top_embeddings(top_of(top, frozen), x, mask, model.num_heads, model.eps)
        sims = emb @ emb.T / 0.5
        return jnp.sum(jax.nn.log_softmax(sims, -1) * jnp.eye(len(ids))) * -1.0 + jnp.sum(
            emb * target)

    if mode == "last-layers":
        params: Any = tuple(frozen)
    else:
        lora = init_lora(frozen, rank=2, alpha=4.0, seed=9)
        rng = np.random.default_rng(10)  # B away from 0 so A has a gradient too
        params = type(lora)(a=lora.a, b=jax.tree_util.tree_map(
            lambda b: jnp.asarray(rng.standard_normal(b.shape) * 0.3, jnp.float32), lora.b),
            scale=lora.scale)
    _directional_check(loss, params, seed=11)


@pytest.mark.parametrize(("kwargs", "error", "field"), [
    ({"rank": True}, TypeError, "rank"),
    ({"rank": 1.5}, TypeError, "rank"),
    ({"rank": 0}, ValueError, "rank"),
    ({"alpha": float("nan")}, ValueError, "alpha"),
    ({"alpha": "4"}, TypeError, "alpha"),
])
def test_init_lora_refuses_bad_arguments(kwargs: dict[str, Any], error: type,
                                         field: str) -> None:
    args: dict[str, Any] = {"rank": 2, "alpha": 4.0, **kwargs}
    with pytest.raises(error, match=field):
        init_lora(tiny_model().layers[-1:], **args)


@pytest.mark.parametrize(("kwargs", "error", "field"), [
    ({"rows": 0}, ValueError, "rows"),  # was range()'s "arg 3 must not be zero"
    ({"rows": True}, TypeError, "rows"),
    ({"start": -1}, ValueError, "start"),  # silently ran all layers but the last
    ({"start": 99}, ValueError, "start"),  # silently ran every layer
    ({"start": 1.0}, TypeError, "start"),
])
def test_lower_states_refuses_bad_arguments(kwargs: dict[str, Any], error: type,
                                            field: str) -> None:
    args: dict[str, Any] = {"start": 1, **kwargs}
    with pytest.raises(error, match=field):
        lower_states(tiny_model(), token_batch(), **args)


def test_pad_states_refuses_nothing_to_pad_and_a_short_length() -> None:
    with pytest.raises(ValueError, match="no text"):  # was a bare StopIteration
        pad_states([], [])
    states = lower_states(tiny_model(), token_batch(), 1)
    with pytest.raises(ValueError, match="length"):
        pad_states(states, [0, 1], length=1)


@pytest.mark.parametrize(("ids", "error", "words"), [
    ([1, 40, 2], ValueError, r"token_ids\[1\]"),  # past the vocabulary: NaN states
    ([1, -3, 2], ValueError, r"token_ids\[1\]"),  # wrapped to another token's row
    ([1, *[5] * 70, 2], ValueError, r"token_ids\[1\].*64"),  # past the positions
    ([1, 2.5, 2], TypeError, r"token_ids\[1\]"),
    ("abc", TypeError, r"token_ids\[1\]"),
])
def test_lower_states_refuses_token_ids_the_model_cannot_embed(
    ids: Any, error: type, words: str
) -> None:
    """Such ids gave NaN or another token's states silently, or a broadcasting error
    naming no input."""
    with pytest.raises(error, match=words):
        lower_states(tiny_model(), [[1, 5, 2], ids], 1)


@pytest.mark.parametrize("pad_id", [40, -1])
def test_lower_states_refuses_a_pad_id_outside_the_vocabulary(pad_id: int) -> None:
    """Its NaN row (or another token's) reached every padded text's states."""
    with pytest.raises(ValueError, match="pad_id"):
        lower_states(tiny_model(), token_batch(), 1, pad_id=pad_id)


def test_lower_states_of_a_model_whose_positions_are_no_power_of_two() -> None:
    """A 40-token text was padded to 64 positions, more than the model's 48: a
    broadcasting TypeError instead of its states."""
    from emotional_memory.embedders.minilm_model import MiniLMModel
    from support.tiny_bert import TINY, tiny_tensors

    tensors = tiny_tensors()
    name = "embeddings.position_embeddings.weight"
    tensors[name] = tensors[name][:48]
    model = MiniLMModel.from_state_dict(tensors, {**TINY, "max_position_embeddings": 48})
    ids = [1, *(5 + k % 35 for k in range(38)), 2]
    (states,) = lower_states(model, [ids], 1)
    assert states.shape == (40, TINY["hidden_size"])
    full = lower_states(tiny_model(), [ids], 1)[0]  # the same weights, 64 positions
    np.testing.assert_allclose(states, full, rtol=0, atol=1e-5)
