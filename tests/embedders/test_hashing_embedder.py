"""Tests for the deterministic signed-feature-hashing embedder."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory.embedders import HashingEmbedder, hashing
from emotional_memory.embedders.hashing import DEFAULT_STOPWORDS, _hash_feature

SAMPLE_TEXTS = [
    "The server crashed right before the demo.",
    "Right before the demo, the server went down.",
    "Überraschung! Die Straße war gesperrt — café, naïve, 東京タワー.",
    "emoji 🎉 and numbers 12345 and under_scores",
    "",
    "   ?!  ",
]


def _cos(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b))


def norm(v: list[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


# --------------------------------------------------------------------------- determinism

# The child loads hashing.py straight from its file: that skips the (slow, JAX-heavy)
# package import and also proves the module needs nothing beyond stdlib + numpy.
_CHILD = textwrap.dedent(
    """
    import importlib.util, json, sys
    spec = importlib.util.spec_from_file_location("hashing_standalone", sys.argv[1])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    texts = json.loads(sys.argv[2])
    print(json.dumps({
        "default": mod.HashingEmbedder().embed_batch(texts),
        "single": mod.HashingEmbedder(dim=64, seed=7).embed(texts[0]),
    }))
    """
)


def _start_child(hashseed: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONHASHSEED=hashseed)
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, hashing.__file__, json.dumps(SAMPLE_TEXTS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_deterministic_across_processes_and_hash_seeds() -> None:
    # Separate interpreters, two sharing a hash seed and the others with different or
    # random PYTHONHASHSEED values; all must also match this process.
    children = [_start_child(seed) for seed in ("0", "0", "12345", "random")]
    outputs = []
    for child in children:
        out, err = child.communicate(timeout=180)
        assert child.returncode == 0, err
        outputs.append(out)
    # json serialises floats with repr(), so string equality means bit-identical vectors.
    assert outputs[0].strip()
    assert all(out == outputs[0] for out in outputs)
    data = json.loads(outputs[0])
    assert data["default"] == HashingEmbedder().embed_batch(SAMPLE_TEXTS)
    assert data["single"] == HashingEmbedder(dim=64, seed=7).embed(SAMPLE_TEXTS[0])


@pytest.mark.parametrize(
    ("feature", "dim", "seed", "expected"),
    [
        ("w\x1fhello", 384, 0, (130, -1.0)),
        ("w\x1fhello", 384, 1, (171, 1.0)),
        ("w\x1fhello", 1000, 0, (770, -1.0)),
        ("c\x1f<he", 384, 0, (167, 1.0)),
        ("b\x1fhello world", 384, 0, (87, -1.0)),
        ("w\x1fcafé", 384, 0, (221, 1.0)),
    ],
)
def test_hash_feature_is_pinned(
    feature: str, dim: int, seed: int, expected: tuple[int, float]
) -> None:
    # Golden values: the feature -> (column, sign) map must never change across
    # platforms, Python versions or releases, or stored embeddings become stale.
    assert _hash_feature(feature, dim, seed) == expected


def test_same_config_gives_same_vectors_and_seed_changes_them() -> None:
    text = "I lost my wallet on the crowded train this morning."
    assert HashingEmbedder(seed=3).embed(text) == HashingEmbedder(seed=3).embed(text)
    assert HashingEmbedder(seed=3).embed(text) != HashingEmbedder(seed=4).embed(text)


def test_hash_cache_is_used() -> None:
    emb = HashingEmbedder(dim=96, seed=11)
    emb.embed("cache warming sentence")
    before = _hash_feature.cache_info().hits
    emb.embed("cache warming sentence")
    assert _hash_feature.cache_info().hits > before


def test_long_features_are_hashed_but_not_kept_in_the_cache() -> None:
    # the LRU kept every feature string, so 65536 long unique tokens (1 MB each) stayed
    # in memory for the process's life
    emb = HashingEmbedder(dim=96, seed=12)
    text = "Z" * 5000 + " " + "Y" * 3000
    want = emb.embed(text)
    feats = {p + f for p, group in zip(hashing._PREFIXES, emb._features(text), strict=True)
             for f in group}
    short = [f for f in feats if len(f) <= hashing.MAX_CACHED_FEATURE_CHARS]
    assert len(short) < len(feats)  # the word and bigram features are long
    _hash_feature.cache_clear()
    assert emb.embed(text) == want
    assert _hash_feature.cache_info().currsize == len(short)


# --------------------------------------------------------------------------- shape & norm


@pytest.mark.parametrize("text", [t for t in SAMPLE_TEXTS if t.strip(" ?!")])
def test_unit_norm_and_shape(text: str) -> None:
    for dim in (8, 64, 384):
        v = HashingEmbedder(dim=dim).embed(text)
        assert len(v) == dim
        assert all(type(x) is float for x in v)
        assert norm(v) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("text", ["", " ", "\n\t", "?!...", "—", "🎉🎉"])
def test_text_without_tokens_gives_zero_vector(text: str) -> None:
    emb = HashingEmbedder(dim=32)
    assert emb.embed(text) == [0.0] * 32
    arr = emb.embed_array([text, "hello"])
    assert not arr[0].any()
    assert float(np.linalg.norm(arr[1])) == pytest.approx(1.0, abs=1e-6)


def test_exact_signed_cancellation_falls_back_to_unsigned_hashing() -> None:
    # With dim=8 and seed 0, the unigram "x" and the n-gram "<x>" share a column with
    # opposite signs, so the signed vector cancels to zero.  A text with tokens must
    # still get a unit vector.
    word, char = _hash_feature("w\x1fx", 8, 0), _hash_feature("c\x1f<x>", 8, 0)
    assert word[0] == char[0]
    assert word[1] == -char[1]
    emb = HashingEmbedder(dim=8)
    v = emb.embed("X")
    assert norm(v) == pytest.approx(1.0, abs=1e-6)
    assert v[word[0]] == pytest.approx(1.0)
    assert emb.embed_batch(["hello", "x", ""])[1] == v


def test_tiny_weights_do_not_underflow() -> None:
    emb = HashingEmbedder(stopword_weight=1e-300)
    assert norm(emb.embed("the")) == pytest.approx(1.0, abs=1e-6)
    assert emb.embed("the") == HashingEmbedder().embed("the")  # per-channel scale cancels


def test_batch_equals_single() -> None:
    emb = HashingEmbedder()
    batch = emb.embed_batch(SAMPLE_TEXTS)
    assert batch == [emb.embed(t) for t in SAMPLE_TEXTS]
    # Batch composition must not matter either.
    assert emb.embed_batch(SAMPLE_TEXTS[::-1]) == batch[::-1]
    assert emb.embed_batch(SAMPLE_TEXTS + SAMPLE_TEXTS) == batch + batch


def test_embed_array() -> None:
    emb = HashingEmbedder(dim=48)
    arr = emb.embed_array(SAMPLE_TEXTS)
    assert arr.shape == (len(SAMPLE_TEXTS), 48)
    assert arr.dtype == np.float32
    np.testing.assert_allclose(arr, np.asarray(emb.embed_batch(SAMPLE_TEXTS)), atol=1e-7)
    assert emb.embed_array(tuple(SAMPLE_TEXTS)).tolist() == arr.tolist()


def test_empty_batch() -> None:
    emb = HashingEmbedder(dim=16)
    assert emb.embed_batch([]) == []
    arr = emb.embed_array([])
    assert arr.shape == (0, 16)
    assert arr.dtype == np.float32


def test_dim_property_and_repr() -> None:
    emb = HashingEmbedder(dim=128, seed=5)
    assert emb.dim == 128
    assert emb.seed == 5
    assert "dim=128" in repr(emb)
    assert "seed=5" in repr(emb)
    assert HashingEmbedder().dim == 384


def test_satisfies_embedder_protocol() -> None:
    from emotional_memory.interfaces import Embedder

    assert isinstance(HashingEmbedder(), Embedder)


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("dim", [0, 1, 7, -384, 7.0, 384.0, "384", None, True, [384],
                                 2**40, 10**400])
def test_invalid_dim(dim: object) -> None:
    with pytest.raises(ValueError, match="dim"):
        HashingEmbedder(dim=dim)  # type: ignore[arg-type]


def test_numpy_int_dim_accepted() -> None:
    assert HashingEmbedder(dim=np.int64(8)).dim == 8  # type: ignore[arg-type]


@pytest.mark.parametrize("text", [None, 3, 1.5, b"bytes", ["a list"]])
def test_non_str_text_raises_type_error(text: object) -> None:
    emb = HashingEmbedder(dim=16)
    with pytest.raises(TypeError, match="text"):
        emb.embed(text)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="text"):
        emb.embed_batch(["fine", text])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="text"):
        emb.embed_array(["fine", text])  # type: ignore[list-item]


def test_single_str_batch_rejected() -> None:
    with pytest.raises(TypeError, match="texts"):
        HashingEmbedder(dim=16).embed_batch("not a list")


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"ngram_range": (0, 3)}, "ngram_range"),
        ({"ngram_range": (4, 3)}, "ngram_range"),
        ({"ngram_range": (3,)}, "ngram_range"),
        ({"ngram_range": (2.5, 4)}, "ngram_range"),
        ({"ngram_range": (True, 4)}, "ngram_range"),
        ({"ngram_range": (3, 10**9)}, "ngram_range"),  # O(len(token) * max_n**2) work
        ({"word_weight": -1.0}, "word_weight"),
        ({"char_weight": float("nan")}, "char_weight"),
        ({"bigram_weight": float("inf")}, "bigram_weight"),
        ({"bigram_weight": "0.5"}, "bigram_weight"),
        ({"stopword_weight": -0.1}, "stopword_weight"),
        ({"word_weight": 0.0, "char_weight": 0.0, "bigram_weight": 0.0}, "weight"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**64}, "seed"),
        ({"seed": 1.0}, "seed"),
        ({"stopwords": "the"}, "stopwords"),
    ],
)
def test_invalid_options(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        HashingEmbedder(dim=16, **kwargs)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- behaviour


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("The Server Crashed", "the server crashed"),
        ("HELLO WORLD", "hello world"),
        ("ÉCOLE Normale", "école normale"),
        ("STRASSE", "straße"),
        ("ΣΟΦΙΑ", "σοφια"),
    ],
)
def test_case_insensitive(a: str, b: str) -> None:
    emb = HashingEmbedder()
    assert emb.embed(a) == emb.embed(b)


def test_punctuation_and_whitespace_do_not_matter() -> None:
    emb = HashingEmbedder()
    assert emb.embed("hello,   world!") == emb.embed("hello world")


def test_word_order_matters_only_a_little() -> None:
    emb = HashingEmbedder()
    a, b = emb.embed("dog bites man"), emb.embed("man bites dog")
    assert a != b  # bigrams see the order...
    assert _cos(a, b) > 0.8  # ...but the bag of words dominates


def test_char_ngrams_link_morphological_variants() -> None:
    emb = HashingEmbedder()
    base = emb.embed("crashed")
    assert _cos(base, emb.embed("crash")) > 0.3
    assert _cos(base, emb.embed("crashing")) > 0.2
    assert abs(_cos(base, emb.embed("banana"))) < 0.2
    words_only = HashingEmbedder(char_weight=0.0, bigram_weight=0.0)
    assert words_only.embed("crashed") != words_only.embed("crash")
    assert abs(_cos(words_only.embed("crashed"), words_only.embed("crash"))) < 0.2


def test_stopwords_are_down_weighted() -> None:
    assert "the" in DEFAULT_STOPWORDS
    emb = HashingEmbedder(bigram_weight=0.0)
    flat = HashingEmbedder(bigram_weight=0.0, stopword_weight=1.0)
    a, b = "the cat sat on the mat", "the dog ran to the park"
    # Sharing only function words should matter less with down-weighting.
    assert _cos(emb.embed(a), emb.embed(b)) < _cos(flat.embed(a), flat.embed(b))
    custom = HashingEmbedder(stopwords=["CAT"], stopword_weight=0.0, bigram_weight=0.0)
    assert custom.embed("cat") == [0.0] * 384  # no feature left -> zero vector


def test_sublinear_tf_option() -> None:
    text = "alarm alarm alarm alarm quiet"
    sub = HashingEmbedder(char_weight=0.0, bigram_weight=0.0, seed=1)
    raw = HashingEmbedder(char_weight=0.0, bigram_weight=0.0, seed=1, sublinear_tf=False)
    alarm = sub.embed("alarm")
    # Repetition counts 1 + ln(4) ~ 2.39 instead of 4, so "alarm" dominates less.
    assert _cos(sub.embed(text), alarm) < _cos(raw.embed(text), raw.embed("alarm"))
    assert _cos(sub.embed(text), alarm) == pytest.approx(
        (1 + math.log(4)) / math.hypot(1 + math.log(4), 1), abs=1e-6
    )


# --------------------------------------------------------------------------- paraphrases

# Natural paraphrases that share some content words (or word stems) but differ in
# order, function words and phrasing.  A hashing embedder knows no synonyms, so pairs
# whose only link is a synonym ("kids" / "children") are out of scope by design.
PARAPHRASES = [
    (
        "The server crashed right before the demo.",
        "Right before the demo, the server went down.",
    ),
    (
        "I am really anxious about my job interview tomorrow.",
        "Tomorrow's job interview is making me very anxious.",
    ),
    (
        "She adopted a small puppy from the animal shelter.",
        "She brought home a puppy she had adopted from the local shelter.",
    ),
    (
        "My flight to Berlin was cancelled because of the storm.",
        "The storm got my Berlin flight cancelled.",
    ),
    (
        "We celebrated my sister's graduation with a big dinner.",
        "For my sister's graduation we had a big celebratory dinner.",
    ),
    (
        "I lost my wallet on the crowded train this morning.",
        "This morning my wallet went missing on a packed train.",
    ),
    (
        "The doctor said my blood test results look normal.",
        "According to the doctor, my blood test came back normal.",
    ),
    (
        "He finally finished writing his thesis after three years.",
        "After three years of work he finally completed his thesis.",
    ),
    (
        "The children were laughing at the clown's jokes.",
        "The clown joked around and made the kids laugh.",
    ),
    (
        "I'm worried that my presentation will go badly.",
        "I worry my presentation is going to go badly.",
    ),
]

UNRELATED = [
    "We baked bread at grandma's house on Sunday.",
    "The cat knocked a glass of water off the kitchen table.",
    "Stock prices fell sharply after the quarterly announcement.",
    "I love hiking in the mountains during autumn.",
    "The orchestra played a beautiful symphony last night.",
]


def _paraphrase_margins(emb: HashingEmbedder) -> list[float]:
    """For each pair: cos(paraphrase) minus the best cos to any unrelated sentence.

    "Unrelated" means the fixed distractors plus both sentences of every other pair,
    compared against both members of the pair.
    """
    margins = []
    for i, (a, p) in enumerate(PARAPHRASES):
        others = UNRELATED + [s for j, pair in enumerate(PARAPHRASES) if j != i for s in pair]
        x = emb.embed_array([a, p, *others]).astype(np.float64)
        para = float(x[0] @ x[1])
        worst = float(max((x[2:] @ x[0]).max(), (x[2:] @ x[1]).max()))
        margins.append(para - worst)
    return margins


@pytest.mark.parametrize("index", range(len(PARAPHRASES)))
def test_paraphrase_beats_every_unrelated_sentence(index: int) -> None:
    emb = HashingEmbedder()
    a, p = PARAPHRASES[index]
    others = UNRELATED + [s for j, pair in enumerate(PARAPHRASES) if j != index for s in pair]
    va, vp = emb.embed(a), emb.embed(p)
    para = _cos(va, vp)
    for other in others:
        vo = emb.embed(other)
        assert para > _cos(va, vo), (a, p, other)
        assert para > _cos(vp, vo), (a, p, other)


def test_paraphrase_ranking_is_robust_to_seed_and_dim() -> None:
    # Not a lucky hash function: the ordering holds for many seeds and for larger dims.
    for seed in range(10):
        assert min(_paraphrase_margins(HashingEmbedder(seed=seed))) > 0.0, seed
    for dim in (512, 1024):
        assert min(_paraphrase_margins(HashingEmbedder(dim=dim))) > 0.0, dim


# --------------------------------------------------------------------------- properties


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.integers(min_value=8, max_value=64))
def test_any_text_gives_finite_vector_of_norm_one_or_zero(text: str, dim: int) -> None:
    v = np.asarray(HashingEmbedder(dim=dim).embed(text))
    assert v.shape == (dim,)
    assert np.isfinite(v).all()
    norm = float(np.linalg.norm(v))
    if norm == 0.0:
        assert not v.any()
    else:
        assert norm == pytest.approx(1.0, abs=1e-6)
    if any(c.isascii() and c.isalnum() for c in text):
        assert norm == pytest.approx(1.0, abs=1e-6)


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCXYZ .,'-\n", max_size=80))
def test_ascii_case_insensitivity_property(text: str) -> None:
    emb = HashingEmbedder(dim=64)
    assert emb.embed(text.upper()) == emb.embed(text.lower()) == emb.embed(text)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=6))
def test_batch_equals_single_property(texts: list[str]) -> None:
    emb = HashingEmbedder(dim=32)
    assert emb.embed_batch(texts) == [emb.embed(t) for t in texts]


def test_stopwords_are_normalised_like_the_text() -> None:
    """Tokens are NFKC-normalised before casefolding, stopwords were only casefolded: a
    stopword written with a combining accent ("cafe\\u0301") or a compatibility form
    ("\\ufb01le", the fi ligature) never matched its token, and was not down-weighted."""
    plain = HashingEmbedder(dim=64, stopwords=["café", "file"], stopword_weight=0.0)
    other = HashingEmbedder(dim=64, stopwords=["cafe\u0301", "\ufb01le"], stopword_weight=0.0)
    for text in ("café open", "file open", "cafe\u0301 open"):
        assert other.embed(text) == plain.embed(text)
    assert other.identity == plain.identity


def test_a_negative_zero_weight_is_the_same_embedder() -> None:
    """``-0.0`` gives the vectors of ``0.0`` but had another identity (a store refused
    the very same embedder)."""
    assert (HashingEmbedder(bigram_weight=-0.0).identity
            == HashingEmbedder(bigram_weight=0.0).identity)
    assert (HashingEmbedder(stopword_weight=-0.0).identity
            == HashingEmbedder(stopword_weight=0.0).identity)
