"""Words for the opt-in lexical signal s7: tokens, stop words and an inverted index.

The kernel scores BM25 from term statistics (:class:`~emotional_memory.kernel.LexicalInputs`);
this module produces them. A memory's tokens are the lowercased runs of Unicode
letters and digits of its content (``re.findall(r"[^\\W_]+", content.lower())``: an
underscore or any punctuation separates words). Every token of a memory is indexed
and counts towards its length; stop words are dropped from the *query* only, so a
stop-word list can change per configuration without re-indexing.

:class:`LexicalIndex` is incremental (add, replace and remove one memory in
O(its tokens)) and answers both questions of a retrieval: the lexical shortlist
(:meth:`LexicalIndex.search`) and the statistics of given candidates
(:meth:`LexicalIndex.inputs`). Both stores keep one: the in-memory store beside its
rows (rolled back with them), the SQLite store in its cache, rebuilt from the durable
content column when the file is opened; the engine builds one from ``list_all()`` for a
store that has none.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from typing import Any

import numpy as np

from emotional_memory.kernel.lexical import LexicalInputs

__all__ = [
    "ENGLISH_STOP_WORDS",
    "LexicalIndex",
    "query_terms",
    "stop_word_set",
    "tokenize",
]

_TOKEN = re.compile(r"[^\W_]+")

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


def tokenize(text: str) -> list[str]:
    """The tokens of ``text``: lowercased runs of Unicode letters and digits.

    Args:
        text: any string.

    Returns:
        The tokens in order (repeats kept).
    """
    return _TOKEN.findall(text.lower())


def stop_word_set(stop_words: str | Iterable[str] | None) -> frozenset[str]:
    """Resolve a ``lexical_stop_words`` setting.

    Args:
        stop_words: ``"english"``, ``"none"``/None, or an iterable of words (each is
            lowercased).

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
    return frozenset(str(w).lower() for w in stop_words)


def query_terms(query: str, stop_words: frozenset[str] = ENGLISH_STOP_WORDS) -> list[str]:
    """The distinct non-stop-word tokens of a query, in first-occurrence order.

    Args:
        query: query text.
        stop_words: words to drop.

    Returns:
        Distinct terms (BM25 counts each query term once).
    """
    return list(dict.fromkeys(t for t in tokenize(query) if t not in stop_words))


class LexicalIndex:
    """An incremental inverted index of memory contents (term -> id -> count).

    Not thread-safe on its own: the owning store serialises access.
    """

    def __init__(self) -> None:
        self._postings: dict[str, dict[str, int]] = {}
        self._lengths: dict[str, int] = {}
        self._content: dict[str, str] = {}
        self._order: dict[str, int] = {}  # insertion sequence: ties keep it
        self._next = 0
        self._total = 0

    def __len__(self) -> int:
        """Number of indexed memories."""
        return len(self._lengths)

    def __contains__(self, memory_id: object) -> bool:
        """Whether ``memory_id`` is indexed."""
        return memory_id in self._lengths

    @property
    def total_length(self) -> int:
        """Sum of the token counts of every indexed memory."""
        return self._total

    def set(self, memory_id: str, content: str) -> None:
        """Index ``content`` under ``memory_id`` (replacing what the id held).

        A replacement keeps the memory's insertion position. Unchanged content is a
        no-op.

        Args:
            memory_id: the memory's id.
            content: its text.
        """
        old = self._content.get(memory_id)
        if old == content:
            return
        if old is not None:
            self._drop_terms(memory_id, old)
        else:
            self._order[memory_id] = self._next
            self._next += 1
        tokens = tokenize(content)
        for term, count in Counter(tokens).items():
            self._postings.setdefault(term, {})[memory_id] = count
        self._lengths[memory_id] = len(tokens)
        self._content[memory_id] = content
        self._total += len(tokens)

    def discard(self, memory_id: str) -> None:
        """Remove ``memory_id`` (no-op when absent).

        Args:
            memory_id: the memory's id.
        """
        old = self._content.pop(memory_id, None)
        if old is None:
            return
        self._drop_terms(memory_id, old)
        del self._lengths[memory_id]
        del self._order[memory_id]

    def _drop_terms(self, memory_id: str, content: str) -> None:
        for term in set(tokenize(content)):
            posting = self._postings.get(term)
            if posting is not None:
                posting.pop(memory_id, None)
                if not posting:
                    del self._postings[term]
        self._total -= self._lengths.get(memory_id, 0)

    def df(self, term: str) -> int:
        """Number of indexed memories containing ``term``."""
        return len(self._postings.get(term, ()))

    def _within_stats(self, within: Collection[str]) -> tuple[int, float]:
        """``(n_docs, avg_length)`` of the indexed memories among ``within``."""
        lengths = self._lengths
        n_docs = 0
        total = 0
        for mid in within:
            length = lengths.get(mid)
            if length is not None:
                n_docs += 1
                total += length
        return n_docs, (total / n_docs if n_docs else 0.0)

    def _df(self, posting: dict[str, int], within: Collection[str] | None) -> int:
        if within is None:
            return len(posting)
        if len(posting) <= len(within):
            return sum(1 for mid in posting if mid in within)
        return sum(1 for mid in within if mid in posting)

    def inputs(
        self, terms: Sequence[str], memory_ids: Sequence[str], *, rows: int | None = None,
        width: int | None = None, dtype: Any = np.float64,
        within: Collection[str] | None = None,
    ) -> LexicalInputs:
        """Term statistics of ``terms`` over the given memories, for the kernel.

        Args:
            terms: distinct query terms (:func:`query_terms`).
            memory_ids: the candidates, in candidate order (unknown ids: no words).
            rows: pad the row axis to this many rows (default: ``len(memory_ids)``).
            width: pad the term axis to this many terms (default: ``len(terms)``, at
                least 1).
            dtype: numpy float dtype of the arrays.
            within: the ids of the memories the statistics are of (a scope or filter:
                N, df and the mean length are those of these memories alone, as in an
                index holding only them); None: every indexed memory.

        Returns:
            :class:`LexicalInputs` with numpy leaves: tf (rows, width), length (rows,),
            df (width,), n_docs (), avg_length ().
        """
        n = len(memory_ids) if rows is None else int(rows)
        t = max(len(terms), 1) if width is None else int(width)
        if n < len(memory_ids) or t < len(terms):
            raise ValueError("rows/width must not be smaller than the inputs")
        tf = np.zeros((n, t), dtype=dtype)
        df = np.zeros((t,), dtype=dtype)
        row_of = {mid: i for i, mid in enumerate(memory_ids)}
        for j, term in enumerate(terms):
            posting = self._postings.get(term)
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
        length = np.zeros((n,), dtype=dtype)
        length[: len(memory_ids)] = [self._lengths.get(mid, 0) for mid in memory_ids]
        if within is None:
            n_docs = len(self._lengths)
            avg = self._total / n_docs if n_docs else 0.0
        else:
            n_docs, avg = self._within_stats(within)
        return LexicalInputs(
            tf=tf, length=length, df=df, n_docs=np.asarray(n_docs, dtype),
            avg_length=np.asarray(avg, dtype),
        )

    def scores(
        self, terms: Sequence[str], k1: float = 1.2, b: float = 0.75, *,
        within: Collection[str] | None = None,
    ) -> dict[str, float]:
        """BM25 of every memory sharing at least one term (plain Python, float64).

        Args:
            terms: distinct query terms.
            k1: BM25 k1.
            b: BM25 b.
            within: score only these memories, with their own statistics (see
                :meth:`inputs`); None: every indexed memory.

        Returns:
            id -> BM25 score (> 0 only; memories without a query term are absent).
        """
        if within is None:
            n_docs = len(self._lengths)
            avg = self._total / n_docs if n_docs else 0.0
        else:
            n_docs, avg = self._within_stats(within)
        out: dict[str, float] = {}
        for term in terms:
            posting = self._postings.get(term)
            if not posting:
                continue
            df = self._df(posting, within)
            if df == 0:
                continue
            idf = math.log1p((n_docs - df + 0.5) / (df + 0.5))
            for mid, tf in posting.items():
                if within is not None and mid not in within:
                    continue
                rel = self._lengths[mid] / avg if avg > 0 else 1.0
                part = idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * rel))
                out[mid] = out.get(mid, 0.0) + part
        return out

    def search(
        self, terms: Sequence[str], k: int, k1: float = 1.2, b: float = 0.75, *,
        within: Collection[str] | None = None,
    ) -> list[str]:
        """The lexical shortlist: ids of the ``k`` best BM25 scores.

        Ties keep insertion order; memories sharing no term are never returned.

        Args:
            terms: distinct query terms.
            k: shortlist size (<= 0 gives []).
            k1: BM25 k1.
            b: BM25 b.
            within: search only these memories, with their own statistics.

        Returns:
            Up to ``k`` ids, best first.
        """
        if k <= 0:
            return []
        scored = self.scores(terms, k1, b, within=within)
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
