"""PostgreSQL backend: candidate columns and lexical statistics"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import jax
import numpy as np

from emotional_memory._bank import (
    COLUMNS_TREEDEF,
    CandidateBank,
    LexicalQuery,
    device_columns,
    padded_adjacency,
)
from emotional_memory.kernel.columns import MemoryColumns, bucket_size, pad_columns
from emotional_memory.kernel.lexical import LexicalInputs
from emotional_memory.lexical import check_analysis
from emotional_memory.stores._shared import records as _records
from emotional_memory.stores.postgres.common import (
    _BANK_COLUMNS,
    _SEARCH_COLUMNS,
    _embedding_of,
    _search_row_memory_columns,
    analysis_term,
)
from emotional_memory.stores.postgres.ingest import _Ingesting


class _Columns(_Ingesting):
    """PostgreSQL backend of :class:`~emotional_memory.stores.postgres.PostgresStore`."""

    # ------------------------------------------------------------------ columns

    def candidate_bank(
        self,
        embedding: Sequence[float] | np.ndarray | None,
        limit: int | None,
        now: datetime,
        *,
        also: Sequence[str] = (),
        lexical: LexicalQuery | None = None,
        with_memories: bool = False,
        everything_upto: int | None = None,
    ) -> CandidateBank:
        """The retrieval candidates of a query as columns, in one snapshot (see
        :meth:`~emotional_memory.stores.columnar.ColumnarStore.candidate_bank`).

        The store counts its memories in the same round trip (a
        :class:`~emotional_memory.stores.base.CountingStore`): with
        ``everything_upto``, a store (view) holding at most that many memories answers
        as with ``limit=None``, and the bank's ``total`` is the number of memories it
        holds.

        Args:
            embedding: the query embedding, shape (D,), or None.
            limit: the semantic shortlist size, or None for every memory.
            now: aware datetime for the ages.
            also: ids appended when not already candidates (unknown ids skipped).
            lexical: the BM25 shortlist and statistics, read in the same snapshot.
            with_memories: also rebuild the candidates' memories.
            everything_upto: see above (None: ``limit`` decides, ``total`` is None).

        Returns:
            The :class:`CandidateBank`.

        Raises:
            ValueError: a query whose length differs from the stored embeddings, or an
                unknown lexical analysis.
        """
        if lexical is not None:
            check_analysis(lexical.analysis)
        # A plain semantic shortlist is one search (its row count only picks exact or
        # index search): no snapshot needed. Anything read besides needs one.
        plain = limit is not None and not also and lexical is None and not with_memories
        total: int | None = None
        with self._read(single=plain) as cur:
            t = self._t
            f, f_args = self._filter_args()
            everything = f"SELECT {_SEARCH_COLUMNS} FROM {t} WHERE true{f} ORDER BY seq"
            if limit is None:
                ordered: list[Any] = list(cur.execute(everything, f_args).fetchall())
                if everything_upto is not None:
                    total = len(ordered)
            else:
                query = self._check_query(cur, embedding)
                ordered, total = self._search_rows(cur, query, int(limit), everything_upto)
                if total is not None and total <= int(everything_upto or 0):
                    ordered = list(cur.execute(everything, f_args).fetchall())
                    total = len(ordered)
            extra = list(also)
            if lexical is not None and lexical.shortlist and lexical.terms:
                extra += self._lexical_search(
                    cur, lexical.terms, lexical.shortlist, lexical.k1, lexical.b,
                    lexical.analysis,
                )
            have = {r[1] for r in ordered}
            wanted = [mid for mid in dict.fromkeys(extra) if mid not in have]
            if wanted:
                found = {r[1]: r for r in cur.execute(
                    f"SELECT {_SEARCH_COLUMNS} FROM {t} WHERE id = ANY(%s){f}", (wanted, *f_args)
                ).fetchall()}
                ordered += [found[mid] for mid in wanted if mid in found]
            bank = self._bank(ordered, embedding, now, self._stored_dim(cur))
            if with_memories:
                bank = replace(bank, memories=[
                    self._memory(_search_row_memory_columns(r)) for r in ordered
                ])
            if lexical is not None and lexical.statistics:
                bank = replace(bank, lexical=self._lexical_inputs(
                    cur, lexical.terms, bank.ids, lexical.analysis))
        if total is not None:
            bank = replace(bank, total=total)
        if self._current() is None:  # what modify_memories may start from
            self._local.found = {r[1]: r for r in ordered}
        return bank

    def counted_candidate_bank(
        self,
        embedding: Sequence[float] | np.ndarray | None,
        limit: int | None,
        now: datetime,
        *,
        everything_upto: int,
        with_memories: bool = False,
    ) -> CandidateBank:
        """:meth:`candidate_bank` counting the memories in the same round trip (the
        engine then asks no ``len`` first); see
        :class:`~emotional_memory.stores.base.CountingStore`."""
        return self.candidate_bank(
            embedding, limit, now, with_memories=with_memories, everything_upto=everything_upto
        )

    def _bank(
        self,
        rows: list[Any],
        embedding: Sequence[float] | np.ndarray | None,
        now: datetime,
        store_dim: int | None,
    ) -> CandidateBank:
        """The bank of ``rows`` (``_BANK_COLUMNS``, candidate order)."""
        n = len(rows)
        ids: list[str] = [r[1] for r in rows]
        has = [bool(r[9]) for r in rows]
        query_dim = len(embedding) if embedding is not None else 0
        if query_dim and any(has) and store_dim is not None and store_dim != query_dim:
            raise ValueError(
                f"embedding length mismatch: memory {ids[has.index(True)]!r} has "
                f"{store_dim}, expected {query_dim}"
            )
        dim = max(query_dim or ((store_dim or 0) if any(has) else 0), 1)
        size = bucket_size(n)
        emb = np.zeros((size, dim), dtype=np.float64)
        for i, r in enumerate(rows):
            if has[i]:
                emb[i] = _embedding_of(r[2], r[8])
        tagf = np.asarray([r[3] for r in rows], dtype=np.float64).reshape(n, _records.TAG_F)
        stamps = np.asarray([r[4][0] for r in rows], dtype=np.int64)
        leaves: list[np.ndarray] = [emb]
        for cols in (_records.F_AFFECT, _records.F_MOOD, _records.F_VELOCITY):
            col = np.zeros((size, 3), dtype=np.float64)
            col[:n] = tagf[:, cols]
            leaves.append(col)
        for values in (
            (_records.to_microseconds(now) - stamps) / 1e6,
            tagf[:, _records.F_CONSOLIDATION],
            tagf[:, _records.F_RETRIEVAL],
        ):
            col = np.zeros((size,), dtype=np.float64)
            col[:n] = values
            leaves.append(col)
        valid = np.zeros((size,), dtype=bool)
        valid[:n] = True
        leaves += [np.zeros((size,), dtype=np.float64), valid]
        columns: MemoryColumns = jax.tree_util.tree_unflatten(
            COLUMNS_TREEDEF, leaves
        )
        adjacency = padded_adjacency(((r[5], r[6]) for r in rows), ids, size)
        return CandidateBank(ids=ids, columns=columns, adjacency=adjacency, dim=dim)

    def columns(self, now: datetime) -> tuple[list[str], MemoryColumns]:
        """Every memory as float64 columns, in insertion order (unpadded).

        Args:
            now: aware datetime for the ages.

        Returns:
            ``(ids, columns)``.
        """
        with self._read() as cur:
            f, args = self._filter_args()
            rows = cur.execute(
                f"SELECT {_BANK_COLUMNS} FROM {self._t} WHERE true{f} ORDER BY seq", args
            ).fetchall()
            dim = self._stored_dim(cur)
        bank = self._bank(rows, None, now, dim)
        n = len(rows)
        cols = jax.tree_util.tree_map(lambda x: x[:n], bank.columns)
        return bank.ids, cols

    def scoring_bank(
        self, now: datetime, dtype: Any = np.float32
    ) -> tuple[list[str | None], MemoryColumns, int | None]:
        """Every memory as padded JAX columns for batch scoring, from one snapshot.

        Args:
            now: aware datetime for the ages.
            dtype: dtype of the float columns other than the embedding.

        Returns:
            ``(row_ids, columns, dim)`` (see ``ColumnarStore.scoring_bank``).
        """

        ids, cols = self.columns(now)
        size = bucket_size(len(ids))
        padded = pad_columns(cols, size)
        row_ids: list[str | None] = [*ids, *([None] * (size - len(ids)))]
        with self._read() as cur:
            f, args = self._filter_args()
            any_embedded = cur.execute(
                f"SELECT EXISTS (SELECT 1 FROM {self._t} WHERE embedded{f})", args
            ).fetchone()[0]
        dim = padded.embedding.shape[1]
        return row_ids, device_columns(padded, dtype), dim if any_embedded else None

    # ------------------------------------------------------------------ lexical

    def _lexical_search(
        self, cur: Any, terms: Sequence[str], k: int, k1: float, b: float, analysis: str
    ) -> list[str]:
        if k <= 0 or not terms:
            return []
        terms = [analysis_term(term, analysis) for term in terms]  # as the rows hold them
        f, f_args = self._filter_args()
        n_docs, total = cur.execute(
            f"SELECT count(*), coalesce(sum(doc_len), 0) FROM {self._t} WHERE true{f}", f_args
        ).fetchone()
        rows = cur.execute(
            f"SELECT seq, id, doc_len, terms, tfs FROM {self._t} WHERE terms && %s{f}",
            (terms, *f_args),
        ).fetchall()
        if not rows:
            return []
        avg = int(total) / int(n_docs) if n_docs else 0.0
        postings: dict[str, list[tuple[str, int, int]]] = {}
        seq_of: dict[str, int] = {}
        wanted = set(terms)
        for seq, mid, doc_len, row_terms, tfs in rows:
            seq_of[mid] = seq
            for term, tf in zip(row_terms, tfs, strict=True):
                if term in wanted:
                    postings.setdefault(term, []).append((mid, tf, doc_len))
        out: dict[str, float] = {}
        for term in terms:  # LexicalIndex.scores' sums, in the same order
            posting = postings.get(term)
            if not posting:
                continue
            df = len(posting)
            idf = math.log1p((n_docs - df + 0.5) / (df + 0.5))
            for mid, tf, doc_len in posting:
                rel = doc_len / avg if avg > 0 else 1.0
                part = idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * rel))
                out[mid] = out.get(mid, 0.0) + part
        ids = list(out)
        values = np.fromiter((out[i] for i in ids), np.float64, len(ids))
        seq = np.fromiter((seq_of[i] for i in ids), np.int64, len(ids))
        order = np.lexsort((seq, -values))[:k]
        return [ids[i] for i in order.tolist()]

    def _lexical_inputs(
        self, cur: Any, terms: Sequence[str], memory_ids: Sequence[str], analysis: str
    ) -> LexicalInputs:
        terms = [analysis_term(term, analysis) for term in terms]  # as the rows hold them
        n = len(memory_ids)
        width = max(len(terms), 1)
        tf = np.zeros((n, width), dtype=np.float64)
        df = np.zeros((width,), dtype=np.float64)
        length = np.zeros((n,), dtype=np.float64)
        f, f_args = self._filter_args()
        n_docs, total = cur.execute(
            f"SELECT count(*), coalesce(sum(doc_len), 0) FROM {self._t} WHERE true{f}", f_args
        ).fetchone()
        if terms:
            counts = dict(cur.execute(
                f"SELECT term, count(*) FROM {self._t}, unnest(terms) AS term "
                f"WHERE terms && %s AND term = ANY(%s){f} GROUP BY term",
                (terms, terms, *f_args),
            ).fetchall())
            for j, term in enumerate(terms):
                df[j] = counts.get(term, 0)
        rows_of: dict[str, list[int]] = {}  # a repeated id: its statistics on each row
        for i, mid in enumerate(memory_ids):
            rows_of.setdefault(mid, []).append(i)
        if memory_ids:
            columns: dict[str, list[int]] = {}  # a repeated term is a column of its own
            for j, term in enumerate(terms):
                columns.setdefault(term, []).append(j)
            for mid, doc_len, row_terms, tfs in cur.execute(
                f"SELECT id, doc_len, terms, tfs FROM {self._t} WHERE id = ANY(%s){f}",
                (list(memory_ids), *f_args),
            ).fetchall():
                rows = rows_of[mid]
                length[rows] = doc_len
                for term, count in zip(row_terms, tfs, strict=True):
                    for at in columns.get(term, ()):
                        tf[rows, at] = count
        docs = int(n_docs)
        avg = int(total) / docs if docs else 0.0
        return LexicalInputs(
            tf=tf, length=length, df=df, n_docs=np.asarray(docs, np.float64),
            avg_length=np.asarray(avg, np.float64),
        )

    def lexical_search(
        self, terms: Sequence[str], k: int, k1: float, b: float, analysis: str = "none"
    ) -> list[str]:
        """Up to ``k`` memory ids by BM25 of ``terms``, best first (lexical signal s7).

        Args:
            terms: distinct query terms.
            k: shortlist size.
            k1: BM25 k1.
            b: BM25 b.
            analysis: the analysis of ``terms`` (``"none"`` or ``"english"``).

        Returns:
            Memory ids (ties in insertion order).
        """
        check_analysis(analysis)
        with self._read() as cur:
            return self._lexical_search(cur, terms, k, k1, b, analysis)

    def lexical_inputs(
        self, terms: Sequence[str], memory_ids: Sequence[str], analysis: str = "none"
    ) -> LexicalInputs:
        """Term statistics of candidates, in candidate order (lexical signal s7).

        Args:
            terms: query terms (a repeated term is a column of its own).
            memory_ids: the candidates.
            analysis: the analysis of ``terms`` (``"none"`` or ``"english"``).

        Returns:
            Unpadded :class:`~emotional_memory.kernel.LexicalInputs`.
        """
        check_analysis(analysis)
        with self._read() as cur:
            return self._lexical_inputs(cur, terms, memory_ids, analysis)
