"""PostgreSQL backend: writing memories and their side effects"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from emotional_memory.interfaces import EmbeddingDimensionError, UnstorableValueError
from emotional_memory.models import Memory
from emotional_memory.stores._shared import records as _records
from emotional_memory.stores._shared.ranking import F32_NORM_MAX, F32_NORM_MIN, row_norm
from emotional_memory.stores._shared.records import (
    check_times,
    check_utf8,
    dump_memory,
    storable_id,
)
from emotional_memory.stores.postgres.common import (
    COLUMN_TYPES,
    LINK_CODE,
    MAX_VECTOR_DIM,
    UPSERT_CHUNK,
    _embedding_of,
    _float_bytes,
    _has_nul,
    _Tx,
    lexical_columns,
)
from emotional_memory.stores.postgres.schema import _Schema


class _Writer(_Schema):
    """PostgreSQL backend of :class:`~emotional_memory.stores.postgres.PostgresStore`."""

    # ------------------------------------------------------------------ writing

    def _tag_values(self, tag: Any) -> dict[str, Any]:
        """The columns of an emotional tag (its numbers, label and links)."""
        with self._labels_lock:
            floats, ints = _records.encode_tag(tag, self._labels)
        lab = tag.emotion_label
        links = tag.resonance_links
        return {
            "tagf": floats,
            "tagi": ints,
            "label": None if lab is None else [lab.primary, lab.intensity, lab.name],
            "link_targets": [lk.target_id for lk in links],
            "link_strengths": [float(lk.strength) for lk in links],
            "link_types": [LINK_CODE[lk.link_type] for lk in links],
        }

    def _row_values(
        self, memory: Memory, given: np.ndarray | None = None
    ) -> dict[str, Any]:
        """A memory's row: the column values of ``_FIELDS``.

        Args:
            memory: the memory.
            given: optionally, its embedding as the float64 vector of its list (when
                the caller has it: not converted again).

        Returns:
            Column name -> value.

        Raises:
            ValueError: metadata that is not JSON.
            UnstorableValueError: a NUL character or a lone surrogate in a text.
        """
        check_times(memory)
        tag = memory.tag
        embedding = memory.embedding
        exact: bytes | None = None
        vector: np.ndarray | None = None
        norm: float | None = None
        if embedding is not None:
            vec = given if given is not None else np.asarray(embedding, dtype=np.float64)
            if not vec.size:
                exact = b""
            else:
                with np.errstate(over="ignore", invalid="ignore"):
                    norm = row_norm(vec)
                    f32 = vec.astype(np.float32)
                if F32_NORM_MIN <= norm <= F32_NORM_MAX and (f32 == vec).all():
                    vector = f32  # the values themselves: the vector column holds them
                else:
                    exact = _float_bytes(vec)  # float64 values kept beside the index
                    if math.isfinite(norm) and norm > 0.0:
                        unit = (vec / norm).astype(np.float32)
                        if np.isfinite(unit).all() and unit.any():
                            vector = unit
        try:
            metadata_json = json.dumps(memory.metadata, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"metadata must be JSON-serialisable finite values: {exc}") from None
        # PostgreSQL text (and JSONB) holds UTF-8 without NUL: refuse the rest up front
        links = [i for lk in tag.resonance_links for i in (lk.source_id, lk.target_id)]
        for name, value in (("id", memory.id), ("content", memory.content),
                            ("metadata", memory.metadata), ("scope", memory.scope),
                            ("tag", links)):
            if _has_nul(value):
                raise UnstorableValueError(
                    name, f"{name} contains a NUL character, which PostgreSQL text cannot store"
                )
        check_utf8(memory, "PostgreSQL text", metadata_json)
        terms, tfs, doc_len = lexical_columns(memory.content)
        scope = memory.scope
        return {
            "id": memory.id,
            "content": memory.content,
            "embedding": vector,
            "exact": exact,
            "norm": norm,
            "embedded": bool(embedding),
            **self._tag_values(tag),
            "metadata": metadata_json,
            "metadata_json": metadata_json,
            "scope": list(scope),
            "expires_at": memory.expires_at,
            "expires_us": None if memory.expires_at is None
            else _records.to_microseconds(memory.expires_at),
            "terms": terms,
            "tfs": tfs,
            "doc_len": doc_len,
            "whole": None if _records.fits(memory) else dump_memory(memory),
        }

    _FIELDS = (
        "id", "content", "embedding", "exact", "norm", "embedded", "tagf", "tagi", "label",
        "link_targets", "link_strengths", "link_types", "metadata", "metadata_json",
        "scope", "expires_at", "expires_us", "terms", "tfs", "doc_len", "whole",
    )

    def _counts_sql(self) -> str:
        """The tail of a writing statement whose CTEs ``old`` (the rows as they were
        before it: one snapshot) and ``up`` (the rows written) give the changes of
        the meta table's counts."""
        meta = self._meta
        return (
            f"UPDATE {meta} SET value = (value::bigint + d.delta)::text FROM ("
            "SELECT 'count' AS key, (SELECT count(*) FROM up) - (SELECT count(*) FROM old) "
            "AS delta UNION ALL SELECT 'embedded', (SELECT count(*) FROM up WHERE embedded) "
            "- (SELECT count(*) FROM old WHERE embedded) UNION ALL SELECT 'expiring', "
            "(SELECT count(*) FROM up WHERE expires_us IS NOT NULL) "
            "- (SELECT count(*) FROM old WHERE expires_us IS NOT NULL)) AS d "
            f"WHERE {meta}.key = d.key AND d.delta <> 0"  # most writes change no count
        )

    def _statements(self) -> tuple[str, str]:
        """The upsert and update statements; both keep the meta table's counts of
        memories and of embedded memories current in the same statement."""
        fields = self._FIELDS
        values = [
            "%(metadata)s::jsonb" if f == "metadata" else f"%({f})s" for f in fields
        ]
        excluded = ", ".join(f"{f} = excluded.{f}" for f in fields[1:])
        t = self._t
        counts = self._counts_sql()
        upsert = (
            f"WITH old AS (SELECT embedded, expires_us FROM {t} WHERE id = %(id)s), "
            f"up AS (INSERT INTO {t} ({', '.join(fields)}) "
            f"VALUES ({', '.join(values)}) ON CONFLICT (id) DO UPDATE SET {excluded} "
            f"RETURNING embedded, expires_us) {counts}"
        )
        sets = ", ".join(f"{f} = {v}" for f, v in zip(fields[1:], values[1:], strict=True))
        update = (
            f"WITH old AS (SELECT embedded, expires_us FROM {t} WHERE id = %(id)s), "
            f"up AS (UPDATE {t} SET {sets} WHERE id = %(id)s RETURNING embedded, expires_us) "
            f"{counts}"
        )
        return upsert, update

    def _upsert_many(self, cur: Any, rows: list[dict[str, Any]]) -> None:
        """Upsert rows (``_row_values``) with multi-row statements of up to
        :data:`UPSERT_CHUNK` distinct ids each, in order, keeping the meta counts as
        ``_upsert_sql`` does (one ``INSERT ... ON CONFLICT`` cannot touch a row twice:
        a repeated id starts a new statement).

        Args:
            cur: a cursor of the open write transaction.
            rows: the rows' values, in the order they were queued.
        """
        chunk: list[dict[str, Any]] = []
        ids: set[str] = set()
        for values in [*rows, None]:
            if values is None or values["id"] in ids or len(chunk) == UPSERT_CHUNK:
                if chunk:
                    cur.execute(
                        self._upsert_rows_sql(len(chunk)),
                        [[v["id"] for v in chunk],
                         *(v[f] for v in chunk for f in self._FIELDS)],
                    )
                chunk, ids = [], set()
            if values is not None:
                chunk.append(values)
                ids.add(values["id"])

    def _upsert_rows_sql(self, n: int) -> str:
        """``_upsert_sql`` for ``n`` rows (positional parameters: the ids as one
        ``text[]``, then each row's ``_FIELDS``)."""
        fields = self._FIELDS
        row = "(" + ", ".join(f"%s::{COLUMN_TYPES[f]}" for f in fields) + ")"
        excluded = ", ".join(f"{f} = excluded.{f}" for f in fields[1:])
        t = self._t
        return (
            f"WITH old AS (SELECT embedded, expires_us FROM {t} WHERE id = ANY(%s::text[])), "
            f"up AS (INSERT INTO {t} ({', '.join(fields)}) VALUES "
            + ", ".join([row] * n)
            + f" ON CONFLICT (id) DO UPDATE SET {excluded} RETURNING embedded, expires_us) "
            + self._counts_sql()
        )

    def _put(self, memory: Memory, *, must_exist: bool) -> None:
        if not isinstance(memory, Memory):
            raise TypeError(f"memory must be a Memory, got {type(memory).__name__}")
        tx = self._current()
        if tx is None:
            with self.transaction():
                self._put(memory, must_exist=must_exist)
            return
        if not tx.write:
            raise RuntimeError("cannot write inside a read")
        cached = self._cached_row(tx, memory.id)
        if must_exist and cached is not None and self._only_tag_differs(cached, memory):
            # links, counters, affect: only the tag's columns are written (the row
            # is known to exist and to be visible here)
            tag = self._tag_values(memory.tag)
            tx.queued.append((self._tag_sql, {"id": memory.id, **tag}))
            tx.rows[memory.id] = (
                *cached[:4], tag["tagf"], tag["tagi"], tag["label"], tag["link_targets"],
                tag["link_strengths"], tag["link_types"], *cached[10:],
            )
            return
        values = self._row_values(memory)
        embedding = memory.embedding
        psycopg = self._psycopg
        try:
            if embedding:
                self._ingest_dim(len(embedding), memory.id)
            if cached is not None:
                pass  # locked or written by this transaction, and visible here
            elif (
                self._expiry_us is not None and not must_exist
                and self._nothing_expires(tx)
            ):
                pass  # an expiry-only view while no memory expires: it sees every row
            elif not must_exist and memory.id in tx.absent:
                pass  # no row has this id (read under the store's write lock)
            elif self._selection is not None:  # a view writes only what it sees
                f, f_values = self._filter_args()  # the predicate's values come first
                with self._write() as cur:
                    row = cur.execute(
                        f"SELECT (true{f}) FROM {self._t} WHERE id = %s FOR UPDATE",
                        (*f_values, memory.id),
                    ).fetchone()
                if (row is None and must_exist) or (row is not None and not row[0]):
                    if must_exist:
                        raise KeyError(memory.id)
                    raise ValueError(f"memory id {memory.id!r} cannot be written from this view")
            elif must_exist and memory.id not in tx.known:
                with self._write() as cur:
                    cur.execute(
                        f"SELECT 1 FROM {self._t} WHERE id = %s FOR UPDATE", (memory.id,)
                    )
                    if cur.fetchone() is None:
                        raise KeyError(memory.id)
            if values["expires_us"] is not None:
                tx.nothing_expires = False
            # queued: sent with the transaction's next read or at its commit
            tx.queued.append((self._update_sql if must_exist else self._upsert_sql, values))
            tx.known.add(memory.id)
            tx.absent.discard(memory.id)
            old = tx.rows.get(memory.id)
            tx.rows[memory.id] = (
                None if old is None else old[0], memory.id, values["content"],
                values["exact"], values["tagf"], values["tagi"], values["label"],
                values["link_targets"], values["link_strengths"], values["link_types"],
                values["metadata_json"], values["whole"], values["embedding"],
                values["scope"], values["expires_us"],
            )
        except psycopg.OperationalError as exc:
            raise self._error("saving a memory", exc) from None

    def _ingest_dim(self, length: int, memory_id: str) -> None:
        """Check a new embedding's length against the store's dimension, fixing the
        dimension (typing the vector column, building the index) on the first one.

        Args:
            length: the embedding's length (> 0).
            memory_id: its memory's id (for the message).

        Raises:
            EmbeddingDimensionError: another length than the store's dimension.
            ValueError: a length past pgvector's :data:`MAX_VECTOR_DIM`.
        """
        dim = self._dim
        if dim is None and length > MAX_VECTOR_DIM:
            raise ValueError(
                f"embedding has {length} dimensions; PostgreSQL's vector type holds at "
                f"most {MAX_VECTOR_DIM}"
            )
        if dim is None:
            with self._write() as cur:
                dim = self._stored_dim(cur)
                if dim is None:
                    self._fix_dim(cur, length)
                    dim = length
        if length != dim:
            raise EmbeddingDimensionError(
                f"embedding dimension mismatch: memory {memory_id!r} has {length}, "
                f"the store holds dimension {dim}"
            )

    def _cached_row(self, tx: _Tx, memory_id: str) -> tuple[Any, ...] | None:
        """The transaction's current row of a memory (``_MEMORY_COLUMNS``) when it has
        it and this store (view) sees it (the whole table or an expiry-only view;
        other views always ask the server)."""
        row = tx.rows.get(memory_id)
        if row is None:
            return None
        if self._expiry_us is not None:
            expires = row[14]
            return row if expires is None or expires > self._expiry_us else None
        return None if self._f else row

    @staticmethod
    def _only_tag_differs(row: tuple[Any, ...], memory: Memory) -> bool:
        """Whether ``memory`` equals the stored ``row`` (``_MEMORY_COLUMNS``) in every
        field but its tag (then only the tag's columns need writing)."""
        if row[11] is not None or not _records.fits(memory) or memory.content != row[2]:
            return False
        if tuple(row[13]) != memory.scope:
            return False
        expires = memory.expires_at
        if (None if expires is None else _records.to_microseconds(expires)) != row[14]:
            return False
        stored = _embedding_of(row[3], row[12])
        if memory.embedding is None or stored is None:
            if (memory.embedding is None) != (stored is None):
                return False
        elif len(memory.embedding) != stored.shape[0] or not np.array_equal(
            np.asarray(memory.embedding, dtype=np.float64), stored
        ):
            return False
        try:
            metadata = json.dumps(memory.metadata, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError):
            return False
        return bool(metadata == row[10])

    def _nothing_expires(self, tx: _Tx) -> bool:
        """Whether no stored memory has an expiry (read once per write transaction,
        which holds the store's write lock: only its own writes change it)."""
        if tx.nothing_expires is None:
            with self._write() as cur:
                tx.nothing_expires = bool(cur.execute(
                    f"SELECT value::bigint = 0 FROM {self._meta} WHERE key = 'expiring'"
                ).fetchone()[0])
        return tx.nothing_expires

    def save(self, memory: Memory) -> None:
        """Insert a memory, or replace the one with the same id (keeping its position).

        Args:
            memory: the memory.

        Raises:
            TypeError: not a :class:`Memory`.
            ValueError: an embedding of another dimension than the store's, or
                metadata that is not JSON.
        """
        self._put(memory, must_exist=False)

    def update(self, memory: Memory) -> None:
        """Replace an existing memory in place.

        Args:
            memory: the new version; its id must be stored.

        Raises:
            KeyError: no memory has this id.
            ValueError: as :meth:`save`.
        """
        self._put(memory, must_exist=True)

    def delete(self, memory_id: str) -> bool:
        """Remove a memory.

        Args:
            memory_id: the id.

        Returns:
            True when it existed (never for an id no row can hold: NUL, a lone
            surrogate).
        """
        if not storable_id(memory_id):
            return False
        f, args = self._filter_args(memory_id)
        with self._write() as cur:
            row = cur.execute(
                f"WITH d AS (DELETE FROM {self._t} WHERE id = %s{f} "
                "RETURNING embedded, expires_us) "
                f"UPDATE {self._meta} SET value = (value::bigint - CASE key "
                "WHEN 'count' THEN (SELECT count(*) FROM d) "
                "WHEN 'embedded' THEN (SELECT count(*) FROM d WHERE embedded) "
                "ELSE (SELECT count(*) FROM d WHERE expires_us IS NOT NULL) END)::text "
                "WHERE key IN ('count', 'embedded', 'expiring') "
                "RETURNING (SELECT count(*) FROM d)",
                args,
            ).fetchone()
        tx = self._current()
        if tx is not None:
            tx.known.discard(memory_id)
            tx.rows.pop(memory_id, None)
        return bool(row[0])
