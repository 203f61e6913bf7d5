"""Words for the opt-in lexical signal s7: tokens, stop words and an inverted index.

The kernel scores BM25 from term statistics (:class:`~emotional_memory.kernel.LexicalInputs`);
this module produces them. Tokens are the runs of Unicode letters and digits of the
case-folded NFC text, each with the combining marks inside it (the vowel signs of
Devanagari, Arabic harakat: ``"हिन्दी"`` is one token, not four letters); every token of a
memory is indexed and counts towards its length, while stop words are dropped from
the *query* only, so the stop-word list can change without re-indexing. An
*analysis* maps tokens to terms: ``"none"`` (default) or the Snowball ``"english"``
stemmer (extra ``stem``), applied to memories and queries alike.

:class:`LexicalIndex` is incremental (add, replace, remove one memory in O(its
tokens)), keeps one index per analysis in use, and answers both retrieval questions:
the lexical shortlist (:meth:`~LexicalIndex.search`) and the statistics of given
candidates (:meth:`~LexicalIndex.inputs`). The row engine keeps one beside its rows;
the engine builds one from ``list_all()`` for a store without one.
"""

from __future__ import annotations

import functools
import math
import numbers
import re
import sys
import threading
import unicodedata
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from typing import Any

import numpy as np

from emotional_memory.kernel.lexical import LexicalInputs

__all__ = [
    "ANALYSES",
    "ENGLISH_STOP_WORDS",
    "LexicalIndex",
    "analyze",
    "check_analysis",
    "fold",
    "query_terms",
    "stop_word_set",
    "tokenize",
]

ANALYSES: tuple[str, ...] = ("none", "english")
"""The analyses (``RetrievalConfig.lexical_stemmer``): ``"none"`` keeps the tokens,
``"english"`` stems them with the Snowball English stemmer."""

_ASCII_TOKEN = re.compile(r"[^\W_]+")
"""A token of ASCII text: a run of letters and digits."""


def _char_class(codes: list[int]) -> str:
    """A regex character class of the sorted code points ``codes``, as ranges."""
    spans: list[list[int]] = []
    for c in codes:
        if spans and spans[-1][1] == c - 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    return "[" + "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in spans) + "]"


@functools.cache
def _token() -> re.Pattern[str]:
    """A token of any text: a run of letters and digits, then any runs of combining
    marks (Unicode categories Mn, Mc, Me, which ``\\w`` leaves out) each followed by
    letters and digits. Built on first use from the interpreter's Unicode database
    (~0.1 s, once); the marks beyond the BMP are tried only for such a character
    (a large class of astral ranges is slow to test on every space)."""
    marks = [c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c))[0] == "M"]
    bmp = _char_class([c for c in marks if c < 0x10000])
    astral = _char_class([c for c in marks if c >= 0x10000])
    return re.compile(
        rf"[^\W_]+(?:(?:{bmp}|(?=[\U00010000-\U0010ffff]){astral})+[^\W_]*)*"
    )


ENGLISH_STOP_WORDS: frozenset[str] = frozenset((
    "a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any",
    "are", "as", "at", "be", "because", "been", "before", "being", "below", "between",
    "both", "but", "by", "can", "could", "did", "do", "does", "doing", "down", "during",
    "each", "few", "for", "from", "further", "had", "has", "have", "having", "he", "her",
    "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into",
    "is", "it", "its", "itself", "just", "me", "more", "most", "my", "myself", "no", "nor",
    "not", "now", "of", "off", "on", "once", "only", "or", "other", "our", "ours",
    "ourselves", "out", "over", "own", "same", "she", "should", "so", "some", "such",
    "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there",
    "these", "they", "this", "those", "through", "to", "too", "under", "until", "up",
    "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom",
    "why", "will", "with", "would", "you", "your", "yours", "yourself", "yourselves", "s",
    "t", "d", "ll", "m", "re", "ve",
))
"""A short English stop-word list (function words; the default of ``lexical_stop_words``)."""


def fold(text: str) -> str:
    """``text`` as the tokenizer reads it: case-folded, in Unicode normal form C.

    Canonically equivalent spellings ("é" as one code point or as "e" and a combining
    accent) and case variants ("Straße" / "STRASSE") fold alike.

    Args:
        text: any string.

    Returns:
        ``NFC(casefold(NFC(text)))`` (``text.lower()`` for ASCII text, the same).
    """
    if text.isascii():
        return text.lower()
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", text).casefold())


def tokenize(text: str) -> list[str]:
    """The tokens of ``text`` after :func:`fold`: runs of Unicode letters and digits,
    with the combining marks inside them.

    Args:
        text: any string.

    Returns:
        The tokens in order (repeats kept).
    """
    folded = fold(text)
    return (_ASCII_TOKEN if folded.isascii() else _token()).findall(folded)


_STEMMERS = threading.local()  # PyStemmer objects are not thread-safe: one per thread


def check_analysis(analysis: str) -> str:
    """Validate an analysis name and that its stemmer can be loaded.

    Args:
        analysis: one of :data:`ANALYSES`.

    Returns:
        ``analysis``.

    Raises:
        ValueError: an unknown name.
        ImportError: a stemmer whose package (PyStemmer) is not installed.
    """
    if analysis not in ANALYSES:
        raise ValueError(f"lexical_stemmer must be one of {ANALYSES}, got {analysis!r}")
    if analysis != "none":
        _stemmer(analysis)
    return analysis


def _stemmer(analysis: str) -> Any:
    cache: dict[str, Any] | None = getattr(_STEMMERS, "cache", None)
    if cache is None:
        cache = _STEMMERS.cache = {}
    stemmer = cache.get(analysis)
    if stemmer is None:
        try:
            import Stemmer
        except ImportError as exc:  # pragma: no cover - the stem extra is installed in CI
            raise ImportError(
                f"lexical_stemmer={analysis!r} needs PyStemmer: "
                "pip install 'emotional-memory-jax[stem]'"
            ) from exc
        stemmer = cache[analysis] = Stemmer.Stemmer(analysis)
    return stemmer


def analyze(tokens: list[str], analysis: str = "none") -> list[str]:
    """Index terms of ``tokens`` under an analysis (see the module docstring).

    Args:
        tokens: tokens (:func:`tokenize`).
        analysis: one of :data:`ANALYSES`.

    Returns:
        ``tokens`` itself for ``"none"``, else their stems, in order.

    Raises:
        ValueError: an unknown analysis.
    """
    if analysis == "none":
        return tokens
    if analysis not in ANALYSES:
        raise ValueError(f"lexical_stemmer must be one of {ANALYSES}, got {analysis!r}")
    out: list[str] = _stemmer(analysis).stemWords(tokens)
    return out


def stop_word_set(stop_words: str | Iterable[str] | None) -> frozenset[str]:
    """Resolve a ``lexical_stop_words`` setting.

    Args:
        stop_words: ``"english"``, ``"none"``/None, or an iterable of words (each is
            read as the tokenizer reads text, :func:`fold`: case-folded and NFC, so
            ``"Straße"`` drops the token ``"strasse"`` and a decomposed ``"café"`` the
            composed one).

    Returns:
        The set of words to drop from queries.
    """
    if stop_words is None or stop_words == "none":
        return frozenset()
    if stop_words == "english":
        return ENGLISH_STOP_WORDS
    if isinstance(stop_words, str):
        raise ValueError(
            f"lexical_stop_words must be 'english', 'none' or a list, got {stop_words!r}"
        )
    return frozenset(fold(str(w)) for w in stop_words)


def query_terms(
    query: str, stop_words: frozenset[str] = ENGLISH_STOP_WORDS, analysis: str = "none",
    counts: bool = False,
) -> list[str]:
    """The query's terms: its non-stop-word tokens under an analysis.

    Stop words are matched against the tokens before the analysis.

    Args:
        query: query text.
        stop_words: words to drop.
        analysis: one of :data:`ANALYSES` (the index's analysis).
        counts: keep every occurrence, so BM25 (a sum over the terms) weighs each
            term by its count in the query; False: distinct terms only.

    Returns:
        The terms in first-occurrence order (distinct unless ``counts``).
    """
    terms = analyze([t for t in tokenize(query) if t not in stop_words], analysis)
    return terms if counts else list(dict.fromkeys(terms))


class _View:
    """The postings of one analysis: term -> id -> count, token counts, their sum."""

    __slots__ = ("analysis", "lengths", "postings", "total")

    def __init__(self, analysis: str) -> None:
        self.analysis = analysis
        self.postings: dict[str, dict[str, int]] = {}
        self.lengths: dict[str, int] = {}
        self.total = 0

    def add(self, memory_id: str, tokens: list[str]) -> None:
        terms = analyze(tokens, self.analysis)
        for term, count in Counter(terms).items():
            self.postings.setdefault(term, {})[memory_id] = count
        self.lengths[memory_id] = len(terms)
        self.total += len(terms)

    def drop(self, memory_id: str, tokens: list[str]) -> None:
        for term in set(analyze(tokens, self.analysis)):
            posting = self.postings.get(term)
            if posting is not None:
                posting.pop(memory_id, None)
                if not posting:
                    del self.postings[term]
        self.total -= self.lengths.pop(memory_id, 0)


class LexicalIndex:
    """An incremental inverted index of memory contents (term -> id -> count).

    Holds the plain analysis always and every other analysis asked for since (see the
    module docstring); the methods that read statistics take the ``analysis`` whose
    terms they are given.

    Not thread-safe on its own: the owning store serialises access.
    """

    def __init__(self) -> None:
        self._content: dict[str, str] = {}
        self._order: dict[str, int] = {}  # insertion sequence: ties keep it
        self._next = 0
        self._views: dict[str, _View] = {"none": _View("none")}

    def __len__(self) -> int:
        """Number of indexed memories."""
        return len(self._content)

    def __contains__(self, memory_id: object) -> bool:
        """Whether ``memory_id`` is indexed."""
        return memory_id in self._content

    @property
    def total_length(self) -> int:
        """Sum of the token counts of every indexed memory."""
        return self._views["none"].total

    @property
    def analyses(self) -> tuple[str, ...]:
        """The analyses this index keeps (``"none"`` first, then in order of first use)."""
        return tuple(self._views)

    def _view(self, analysis: str) -> _View:
        view = self._views.get(analysis)
        if view is None:  # first use: built from the contents, in insertion order
            check_analysis(analysis)
            view = _View(analysis)
            for memory_id, content in self._content.items():
                view.add(memory_id, tokenize(content))
            self._views[analysis] = view
        return view

    def set(self, memory_id: str, content: str) -> None:
        """Index ``content`` under ``memory_id`` (replacing what the id held).

        A replacement keeps the memory's insertion position. Unchanged content is a
        no-op. Every analysis the index keeps is updated.

        Args:
            memory_id: the memory's id.
            content: its text.
        """
        old = self._content.get(memory_id)
        if old == content:
            return
        if old is not None:
            old_tokens = tokenize(old)
            for view in self._views.values():
                view.drop(memory_id, old_tokens)
        else:
            self._order[memory_id] = self._next
            self._next += 1
        tokens = tokenize(content)
        for view in self._views.values():
            view.add(memory_id, tokens)
        self._content[memory_id] = content

    def discard(self, memory_id: str) -> None:
        """Remove ``memory_id`` (no-op when absent).

        Args:
            memory_id: the memory's id.
        """
        old = self._content.pop(memory_id, None)
        if old is None:
            return
        tokens = tokenize(old)
        for view in self._views.values():
            view.drop(memory_id, tokens)
        del self._order[memory_id]

    @staticmethod
    def _scope(within: Collection[str] | None) -> Collection[str] | None:
        """``within`` as a set (each id once, O(1) membership); None stays None."""
        if within is None or isinstance(within, set | frozenset):
            return within
        return set(within)

    @staticmethod
    def _within_stats(view: _View, within: Collection[str]) -> tuple[int, float]:
        """``(n_docs, avg_length)`` of the indexed memories among ``within``."""
        lengths = view.lengths
        n_docs = 0
        total = 0
        for mid in within:
            length = lengths.get(mid)
            if length is not None:
                n_docs += 1
                total += length
        return n_docs, (total / n_docs if n_docs else 0.0)

    @staticmethod
    def _df(posting: dict[str, int], within: Collection[str] | None) -> int:
        if within is None:
            return len(posting)
        if len(posting) <= len(within):
            return sum(1 for mid in posting if mid in within)
        return sum(1 for mid in within if mid in posting)

    def df(self, term: str, analysis: str = "none") -> int:
        """Number of indexed memories containing ``term`` (a term of ``analysis``)."""
        return len(self._view(analysis).postings.get(term, ()))

    def inputs(
        self, terms: Sequence[str], memory_ids: Sequence[str], *, rows: int | None = None,
        width: int | None = None, dtype: Any = np.float64, analysis: str = "none",
        within: Collection[str] | None = None,
    ) -> LexicalInputs:
        """Term statistics of ``terms`` over the given memories, for the kernel.

        Args:
            terms: query terms (:func:`query_terms`; a repeated term is a column of its own).
            memory_ids: the candidates, in candidate order (unknown ids: no words; a
                repeated id: its statistics on each of its rows).
            rows: pad the row axis to this many rows (default: ``len(memory_ids)``).
            width: pad the term axis to this many terms (default: ``len(terms)``, at
                least 1).
            dtype: numpy float dtype of the arrays.
            analysis: the analysis that produced ``terms`` (:data:`ANALYSES`).
            within: the ids of the memories the statistics are of (a scope or filter:
                N, df and the mean length are those of these memories alone, as in an
                index holding only them; a repeated id counts once); None: every
                indexed memory.

        Returns:
            :class:`LexicalInputs` with numpy leaves: tf (rows, width), length (rows,),
            df (width,), n_docs (), avg_length ().

        Raises:
            ValueError: ``rows``/``width`` below the inputs.
        """
        n = len(memory_ids) if rows is None else int(rows)
        t = max(len(terms), 1) if width is None else int(width)
        if n < len(memory_ids) or t < len(terms):
            raise ValueError("rows/width must not be smaller than the inputs")
        row_of = {mid: i for i, mid in enumerate(memory_ids)}
        within = self._scope(within)
        view = self._view(analysis)
        tf = np.zeros((n, t), dtype=dtype)
        df = np.zeros((t,), dtype=dtype)
        for j, term in enumerate(terms):
            posting = view.postings.get(term)
            if not posting:
                continue
            df[j] = self._df(posting, within)
            if len(posting) < len(row_of):
                for mid, count in posting.items():
                    i = row_of.get(mid)
                    if i is not None:
                        tf[i, j] = count
            else:
                for mid, row in row_of.items():
                    hits = posting.get(mid)
                    if hits:
                        tf[row, j] = hits
        if len(row_of) < len(memory_ids):  # a repeated id: each of its rows holds its counts
            for i, mid in enumerate(memory_ids):
                if row_of[mid] != i:
                    tf[i] = tf[row_of[mid]]
        length = np.zeros((n,), dtype=dtype)
        length[: len(memory_ids)] = [view.lengths.get(mid, 0) for mid in memory_ids]
        if within is None:
            n_docs = len(view.lengths)
            avg = view.total / n_docs if n_docs else 0.0
        else:
            n_docs, avg = self._within_stats(view, within)
        return LexicalInputs(
            tf=tf, length=length, df=df, n_docs=np.asarray(n_docs, dtype),
            avg_length=np.asarray(avg, dtype),
        )

    def scores(
        self, terms: Sequence[str], k1: float = 1.2, b: float = 0.75, analysis: str = "none",
        *, within: Collection[str] | None = None,
    ) -> dict[str, float]:
        """BM25 of every memory sharing at least one term (plain Python, float64).

        Args:
            terms: query terms (a repeated term counts each time).
            k1: BM25 k1.
            b: BM25 b.
            analysis: the analysis that produced ``terms``.
            within: score only these memories, with their own statistics (see
                :meth:`inputs`); None: every indexed memory.

        Returns:
            id -> BM25 score (> 0 only; memories without a query term are absent).
        """
        view = self._view(analysis)
        within = self._scope(within)
        if within is None:
            n_docs = len(view.lengths)
            avg = view.total / n_docs if n_docs else 0.0
        else:
            n_docs, avg = self._within_stats(view, within)
        out: dict[str, float] = {}
        for term in terms:
            posting = view.postings.get(term)
            if not posting:
                continue
            df = self._df(posting, within)
            if df == 0:
                continue
            idf = math.log1p((n_docs - df + 0.5) / (df + 0.5))
            for mid, tf in posting.items():
                if within is not None and mid not in within:
                    continue
                rel = view.lengths[mid] / avg if avg > 0 else 1.0
                part = idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * rel))
                out[mid] = out.get(mid, 0.0) + part
        return out

    def search(
        self, terms: Sequence[str], k: int, k1: float = 1.2, b: float = 0.75,
        analysis: str = "none", *, within: Collection[str] | None = None,
    ) -> list[str]:
        """The lexical shortlist: ids of the ``k`` best BM25 scores.

        Ties keep insertion order; memories sharing no term are never returned.

        Args:
            terms: query terms (a repeated term counts each time).
            k: shortlist size (<= 0 gives []).
            k1: BM25 k1.
            b: BM25 b.
            analysis: the analysis that produced ``terms``.
            within: search only these memories, with their own statistics.

        Returns:
            Up to ``k`` ids, best first.

        Raises:
            TypeError: a ``k`` that is not an int.
        """
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            raise TypeError(f"k must be an int, got {type(k).__name__}")
        if k <= 0:
            return []
        scored = self.scores(terms, k1, b, analysis, within=within)
        if not scored:
            return []
        ids = list(scored)
        values = np.fromiter((scored[i] for i in ids), np.float64, len(ids))
        seq = np.fromiter((self._order[i] for i in ids), np.int64, len(ids))
        order = np.lexsort((seq, -values))[:k]
        return [ids[i] for i in order.tolist()]

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, str]]) -> LexicalIndex:
        """Build an index from ``(memory_id, content)`` pairs, in order.

        Args:
            pairs: ids and contents.

        Returns:
            The index.
        """
        index = cls()
        for memory_id, content in pairs:
            index.set(memory_id, content)
        return index
