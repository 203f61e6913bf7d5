"""Deterministic, dependency-free text embeddings by signed feature hashing.

:class:`HashingEmbedder` hashes word unigrams, word bigrams and character n-grams of
the casefolded text into a fixed-size vector with ``blake2b`` (never Python's salted
``hash``), so the same text gives bit-identical vectors in every process. No weights,
vocabulary or network. Features, weighting and the zero-vector rule are described in
``embedders/README.md``.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import operator
import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from emotional_memory._validation import check_texts

__all__ = ["DEFAULT_STOPWORDS", "HashingEmbedder"]

_TOKEN_RE = re.compile(r"\w+")

# Group indices of the three feature channels (rows of the accumulation tensor).
_WORD, _BIGRAM, _CHAR = 0, 1, 2
_N_GROUPS = 3

# Namespace prefixes keep e.g. the word "abc" and the char n-gram "abc" apart.
_PREFIXES = ("w\x1f", "b\x1f", "c\x1f")

_SIGN_BIT = 1 << 63
_LOW_BITS = _SIGN_BIT - 1
_MAX_SEED = 1 << 64
MAX_DIM = 1 << 16
"""Largest ``dim`` (an embedding row is ``dim`` float64s while it is built)."""
MAX_NGRAM = 64
"""Largest character n-gram length (a token costs ``len(token) * max_n**2`` work)."""
MAX_CACHED_FEATURE_CHARS = 256
"""Longer feature strings are hashed without the LRU (it would keep them alive)."""
_CHUNK_VALUES = 1 << 17
"""A batch is embedded in chunks of about this many output values (rows x ``dim``):
the float64 channels and temporaries of a chunk stay a few MB, whatever the batch."""

_STOPWORD_TEXT = """
    a about above after again against all am an and any are as at be because been
    being below between both but by can could did do does doing down during each few
    for from further had has have having he her here hers herself him himself his how
    i if in into is it its itself just me more most my myself no nor not now of off
    on once only or other our ours ourselves out over own same she should so some such
    than that the their theirs them themselves then there these they this those
    through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves s t d ll m re ve
"""

#: English function words that are down-weighted (not dropped) by default.
DEFAULT_STOPWORDS: frozenset[str] = frozenset(_STOPWORD_TEXT.split())


@lru_cache(maxsize=1 << 16)
def _hash_feature(feature: str, dim: int, seed: int) -> tuple[int, float]:
    """Hash one feature string to a column index and a sign.

    Args:
        feature: the (namespaced) feature string.
        dim: number of columns; the index lies in ``[0, dim)``.
        seed: non-negative integer below ``2**64`` used as the blake2b key.

    Returns:
        ``(index, sign)`` with ``sign`` in ``{-1.0, +1.0}``; the top bit of the 64-bit
        digest gives the sign and the remaining 63 bits the index.
    """
    digest = hashlib.blake2b(
        feature.encode("utf-8", "surrogatepass"),
        digest_size=8,
        key=seed.to_bytes(8, "little"),
    ).digest()
    h = int.from_bytes(digest, "little")
    sign = -1.0 if h & _SIGN_BIT else 1.0
    return (h & _LOW_BITS) % dim, sign


def _tokenize(text: str) -> list[str]:
    """Split ``text`` into casefolded, NFKC-normalised ``\\w+`` tokens.

    Args:
        text: any string.

    Returns:
        The tokens in order (empty when the text has no word characters).
    """
    return _TOKEN_RE.findall(unicodedata.normalize("NFKC", text).casefold())


def _check_dim(dim: object) -> int:
    """Validate the embedding dimension.

    Args:
        dim: candidate dimension.

    Returns:
        ``dim`` as an ``int``.

    Raises:
        ValueError: when ``dim`` is not an integer (bools excluded) or is below 8.
    """
    if isinstance(dim, bool):
        raise ValueError(f"dim must be an int >= 8, got {dim!r}")
    try:
        value = operator.index(dim)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"dim must be an int >= 8, got {type(dim).__name__}") from None
    if value < 8:
        raise ValueError(f"dim must be an int >= 8, got {value}")
    if value > MAX_DIM:
        raise ValueError(f"dim must be <= MAX_DIM = {MAX_DIM}, got a larger int")
    return value


def _feature_hash(feature: str, dim: int, seed: int) -> tuple[int, float]:
    """:func:`_hash_feature`, through its cache only for short features."""
    if len(feature) > MAX_CACHED_FEATURE_CHARS:
        return _hash_feature.__wrapped__(feature, dim, seed)
    return _hash_feature(feature, dim, seed)


def _check_weight(name: str, value: object) -> float:
    """Validate a non-negative finite weight.

    Args:
        name: parameter name used in the error message.
        value: candidate weight.

    Returns:
        ``value`` as a ``float``.

    Raises:
        ValueError: when ``value`` is not a finite real number >= 0.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    out = float(value)
    if not math.isfinite(out) or out < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return out + 0.0  # -0.0 -> 0.0: the same vectors, so the same identity


def _check_text(text: object, where: str = "text") -> str:
    """Ensure ``text`` is a ``str``.

    Args:
        text: candidate text.
        where: how to refer to it in the error message.

    Returns:
        ``text`` unchanged.

    Raises:
        TypeError: when ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"{where} must be str, got {type(text).__name__}")
    return text


class HashingEmbedder:
    """Deterministic bag-of-features text embedder using signed feature hashing.

    No training, no downloads, no dependencies beyond numpy.  Similar wording gives
    similar vectors (shared words, shared word stems via character n-grams); it does
    not know synonyms.  Use it as an offline default or a test double for a neural
    embedder.  Text is NFKC-normalised and casefolded before tokenising with ``\\w+``.
    Vectors have unit L2 norm, except that a text without any word token (``""``,
    whitespace, punctuation only) embeds to the all-zero vector.

    Example:
        >>> emb = HashingEmbedder(dim=64)
        >>> v = emb.embed("The server crashed before the demo")
        >>> len(v)
        64
        >>> emb.embed("") == [0.0] * 64
        True

    Args:
        dim: output dimension, an ``int`` in ``[8, MAX_DIM]``.
        ngram_range: inclusive ``(min_n, max_n)`` lengths of character n-grams, taken
            from each token padded as ``"<token>"``.  A padded token shorter than
            ``min_n`` contributes itself as a single n-gram. ``max_n <= MAX_NGRAM``.
        word_weight: weight of the word-unigram channel.
        char_weight: weight of the character-n-gram channel.
        bigram_weight: weight of the word-bigram channel.
        stopword_weight: multiplier for unigrams and character n-grams of stopwords
            (``1.0`` disables down-weighting, ``0.0`` ignores their unigram/char
            features; bigrams are never down-weighted).
        stopwords: words to down-weight (NFKC-normalised and casefolded, as the text's
            tokens); defaults to
            :data:`DEFAULT_STOPWORDS`.
        sublinear_tf: use ``1 + ln(count)`` instead of the raw count of a feature.
        seed: non-negative integer below ``2**64``; different seeds give different,
            independent hash functions.

    Raises:
        ValueError: for an invalid ``dim``, ``ngram_range``, weight or ``seed``, or when
            all channel weights are zero.
    """

    def __init__(
        self,
        dim: int = 384,
        *,
        ngram_range: tuple[int, int] = (3, 5),
        word_weight: float = 1.0,
        char_weight: float = 1.0,
        bigram_weight: float = 0.25,
        stopword_weight: float = 0.25,
        stopwords: Iterable[str] | None = None,
        sublinear_tf: bool = True,
        seed: int = 0,
    ) -> None:
        self._dim = _check_dim(dim)
        try:
            if any(isinstance(n, bool) for n in ngram_range):
                raise TypeError
            lo, hi = (operator.index(n) for n in ngram_range)
        except (TypeError, ValueError):
            raise ValueError(f"ngram_range must be a pair of ints, got {ngram_range!r}") from None
        if not 1 <= lo <= hi <= MAX_NGRAM:
            raise ValueError(
                f"ngram_range must satisfy 1 <= min_n <= max_n <= MAX_NGRAM = {MAX_NGRAM}, "
                f"got {ngram_range!r:.80}"
            )
        self._ngram_range = (lo, hi)
        self._weights = np.array(
            [
                _check_weight("word_weight", word_weight),
                _check_weight("bigram_weight", bigram_weight),
                _check_weight("char_weight", char_weight),
            ],
            dtype=np.float64,
        )
        if not self._weights.any():
            raise ValueError("at least one of word_weight, bigram_weight, char_weight must be > 0")
        self._stopword_weight = _check_weight("stopword_weight", stopword_weight)
        if stopwords is None:
            self._stopwords = DEFAULT_STOPWORDS
        else:
            if isinstance(stopwords, str):
                raise ValueError("stopwords must be an iterable of words, not a single str")
            self._stopwords = frozenset(
                unicodedata.normalize("NFKC", _check_text(w, "stopwords item")).casefold()
                for w in stopwords
            )
        self._sublinear_tf = bool(sublinear_tf)
        if isinstance(seed, bool):
            raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")
        try:
            seed_value = operator.index(seed)
        except TypeError:
            raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}") from None
        if not 0 <= seed_value < _MAX_SEED:
            raise ValueError(f"seed must be an int in [0, 2**64), got {seed_value}")
        self._seed = seed_value

    @property
    def dim(self) -> int:
        """Output dimension of every embedding."""
        return self._dim

    @property
    def seed(self) -> int:
        """Seed of the hash function."""
        return self._seed

    @property
    def identity(self) -> str:
        """``"hashing/<dim>"``; with other settings than the defaults,
        ``"hashing:<digest of the settings>/<dim>"`` (they give other vectors).

        What a store records of its embedder
        (:mod:`emotional_memory.embedder_identity`).
        """
        settings = (self._ngram_range, tuple(self._weights.tolist()), self._stopword_weight,
                    self._stopwords == DEFAULT_STOPWORDS, self._sublinear_tf, self._seed)
        if settings == ((3, 5), (1.0, 0.25, 1.0), 0.25, True, True, 0):
            return f"hashing/{self._dim}"
        text = repr((*settings[:3], sorted(self._stopwords), *settings[4:]))
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
        return f"hashing:{digest}/{self._dim}"

    def __repr__(self) -> str:
        """Readable constructor-style representation."""
        w, b, c = (float(x) for x in self._weights)
        return (
            f"HashingEmbedder(dim={self._dim}, ngram_range={self._ngram_range}, "
            f"word_weight={w}, char_weight={c}, bigram_weight={b}, "
            f"stopword_weight={self._stopword_weight}, sublinear_tf={self._sublinear_tf}, "
            f"seed={self._seed})"
        )

    # ------------------------------------------------------------------ features

    def _features(self, text: str) -> list[defaultdict[str, float]]:
        """Weighted feature counts of one text, one dict per channel.

        Args:
            text: the text to featurise.

        Returns:
            ``[word, bigram, char]`` dicts mapping feature strings (not yet
            namespaced) to their stopword-weighted counts.
        """
        tokens = _tokenize(text)
        groups: list[defaultdict[str, float]] = [defaultdict(float) for _ in range(_N_GROUPS)]
        if not tokens:
            return groups
        lo, hi = self._ngram_range
        sw = self._stopword_weight
        words, bigrams, chars = groups
        for tok in tokens:
            weight = sw if tok in self._stopwords else 1.0
            if weight == 0.0:
                continue
            words[tok] += weight
            padded = f"<{tok}>"
            size = len(padded)
            if size < lo:
                chars[padded] += weight
                continue
            for n in range(lo, min(hi, size) + 1):
                for i in range(size - n + 1):
                    chars[padded[i : i + n]] += weight
        for first, second in itertools.pairwise(tokens):
            bigrams[f"{first} {second}"] += 1.0
        return groups

    def _tf(self, count: float) -> float:
        """Term-frequency transform of a (possibly fractional) feature count.

        Args:
            count: positive weighted count.

        Returns:
            ``count`` itself, or ``1 + ln(count)`` for counts above 1 when sublinear tf
            is on (counts <= 1, e.g. a single down-weighted stopword, stay unchanged).
        """
        if self._sublinear_tf and count > 1.0:
            return 1.0 + math.log(count)
        return count

    def _matrix(self, texts: Sequence[str]) -> npt.NDArray[np.float64]:
        """Embed validated texts into an ``(n, dim)`` float64 matrix of unit/zero rows.

        Args:
            texts: the texts (already checked to be ``str``).

        Returns:
            The row-normalised embedding matrix.
        """
        n = len(texts)
        groups_idx: list[int] = []
        rows: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        dim, seed = self._dim, self._seed
        active = [g for g in range(_N_GROUPS) if self._weights[g] > 0.0]
        for row, text in enumerate(texts):
            feats = self._features(text)
            for g in active:
                prefix = _PREFIXES[g]
                for feature, count in feats[g].items():
                    col, sign = _feature_hash(prefix + feature, dim, seed)
                    groups_idx.append(g)
                    rows.append(row)
                    cols.append(col)
                    vals.append(sign * self._tf(count))
        g_arr = np.asarray(groups_idx, dtype=np.intp)
        r_arr = np.asarray(rows, dtype=np.intp)
        c_arr = np.asarray(cols, dtype=np.intp)
        v_arr = np.asarray(vals, dtype=np.float64)
        out = self._combine(g_arr, r_arr, c_arr, v_arr, n)
        # Signed hashing can, very rarely, cancel a text's features exactly (e.g. a
        # one-letter word whose unigram and "<x>" n-gram share a column with opposite
        # signs).  Such rows fall back to unsigned hashing, so that a text with at least
        # one feature never maps to the zero vector.
        has_features = np.zeros(n, dtype=bool)
        has_features[r_arr] = True
        dead = has_features & ~out.any(axis=1)
        if dead.any():
            keep = dead[r_arr]
            unsigned = self._combine(g_arr[keep], r_arr[keep], c_arr[keep], np.abs(v_arr[keep]), n)
            out[dead] = unsigned[dead]
        return _normalise_rows(out)

    def _combine(
        self,
        groups: npt.NDArray[np.intp],
        rows: npt.NDArray[np.intp],
        cols: npt.NDArray[np.intp],
        vals: npt.NDArray[np.float64],
        n: int,
    ) -> npt.NDArray[np.float64]:
        """Scatter hashed feature values and mix the per-channel unit vectors.

        Args:
            groups: channel index of each value (``0`` word, ``1`` bigram, ``2`` char).
            rows: text (row) index of each value.
            cols: hashed column of each value.
            vals: signed, tf-weighted value of each feature.
            n: number of texts.

        Returns:
            The un-normalised ``(n, dim)`` weighted sum of the L2-normalised channels.
        """
        acc = np.zeros((_N_GROUPS, n, self._dim), dtype=np.float64)
        np.add.at(acc, (groups, rows, cols), vals)
        acc = _normalise_rows(acc)
        # Explicit, fixed-order weighted sum (no BLAS) so results are bit-reproducible
        # and independent of the batch composition.
        w = self._weights
        return w[_WORD] * acc[_WORD] + w[_BIGRAM] * acc[_BIGRAM] + w[_CHAR] * acc[_CHAR]

    # ------------------------------------------------------------------ public API

    def embed(self, text: str) -> list[float]:
        """Embed one text.

        Args:
            text: the text to embed.

        Returns:
            ``dim`` float32 numbers with L2 norm 1 (to float32 rounding), or all
            zeros when ``text`` yields no feature (no ``\\w+`` token: empty,
            whitespace or punctuation only).

        Raises:
            TypeError: when ``text`` is not a ``str``.
        """
        _check_text(text)
        return self._matrix([text])[0].astype(np.float32).tolist()

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed several texts at once (vectorised accumulations over chunks of the batch).

        Args:
            texts: the texts to embed; ``embed_batch(ts)[i] == embed(ts[i])``.

        Returns:
            One ``dim``-float list per text (unit norm, or zeros for token-less text).

        Raises:
            TypeError: when ``texts`` is a single ``str`` or any item is not a ``str``.
        """
        return self._embed_rows(self._check_texts(texts)).tolist()

    def embed_array(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed several texts into a numpy array.

        Args:
            texts: the texts to embed.

        Returns:
            A ``(len(texts), dim)`` float32 array whose rows are unit-norm (or zero).

        Raises:
            TypeError: when ``texts`` is a single ``str`` or any item is not a ``str``.
        """
        return self._embed_rows(self._check_texts(texts))

    def _embed_rows(self, texts: list[str]) -> npt.NDArray[np.float32]:
        """Embed validated texts chunk by chunk (:data:`_CHUNK_VALUES`); each row is
        independent of the batch, so the result equals one :meth:`_matrix` call.

        Args:
            texts: the texts (already checked to be ``str``).

        Returns:
            The ``(len(texts), dim)`` float32 array.
        """
        out = np.empty((len(texts), self._dim), dtype=np.float32)
        step = max(1, _CHUNK_VALUES // self._dim)
        for start in range(0, len(texts), step):
            out[start : start + step] = self._matrix(texts[start : start + step])
        return out

    @staticmethod
    def _check_texts(texts: Sequence[str]) -> list[str]:
        """Validate a batch of texts.

        Args:
            texts: candidate batch.

        Returns:
            The texts as a list.

        Raises:
            TypeError: when ``texts`` is a single ``str``, bytes or no iterable, or any
                item is not a ``str``.
        """
        return check_texts(texts)


def _normalise_rows(arr: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """L2-normalise the last axis, leaving all-zero rows at zero.

    Args:
        arr: array whose last axis holds vectors.

    Returns:
        A new array of unit-norm (or zero) vectors.
    """
    # Scale by the largest magnitude first so tiny or huge values cannot under/overflow.
    scale = np.max(np.abs(arr), axis=-1, keepdims=True)
    scaled = arr / np.where(scale > 0.0, scale, 1.0)
    norms = np.sqrt(np.sum(scaled * scaled, axis=-1, keepdims=True))
    return scaled / np.where(norms > 0.0, norms, 1.0)
