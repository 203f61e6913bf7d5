"""PostgreSQL backend: reading memories back"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from emotional_memory._validation import check_after, check_page
from emotional_memory.models import Memory
from emotional_memory.stores._shared import records as _records
from emotional_memory.stores._shared.records import load_memory, storable_id
from emotional_memory.stores.postgres.common import (
    _MEMORY_COLUMNS,
    MOST_ROWS,
    _embedding_of,
    _prepared,
    _search_row_memory_columns,
)
from emotional_memory.stores.postgres.write import _Writer

# list_page walks at most max(MIN, FACTOR * (offset + limit)) rows in insertion order
# before reading a sparse view's page through its indexes.
_PAGE_WALK_MIN = 256
_PAGE_WALK_FACTOR = 4

def _checked_columns(
    tagf: Sequence[float], ints: list[int], metadata_json: str, expires_us: int | None,
    scope: Sequence[Any],
) -> dict[str, Any]:
    """The metadata of a row whose record columns a memory can be decoded from.

    Raises:
        ValueError: a column (named) holds what the store never writes.
    """
    if len(tagf) != _records.TAG_F:
        raise ValueError(f"tagf holds {len(tagf)} values, not {_records.TAG_F}")
    if len(ints) != _records.TAG_I:
        raise ValueError(f"tagi holds {len(ints)} values, not {_records.TAG_I}")
    if not _records.row_times_valid(ints):
        raise ValueError(f"tagi holds a time outside {_records.TIME_RANGE}")
    if any(not isinstance(part, str) or not part for part in scope):
        raise ValueError(f"scope {list(scope)!r} is not a list of non-empty strings")
    if expires_us is not None and expires_us not in _records.TIME_US:
        raise ValueError(f"expires_at {expires_us} is out of range {_records.TIME_RANGE}")
    try:
        metadata = json.loads(metadata_json)
    except RecursionError:
        raise ValueError("metadata nests too deeply") from None
    except ValueError as exc:
        raise ValueError(f"metadata is not JSON: {exc}") from None
    if not isinstance(metadata, dict):
        raise ValueError(f"metadata is a {type(metadata).__name__}, not a JSON object")
    return metadata


class _Reader(_Writer):
    """PostgreSQL backend of :class:`~emotional_memory.stores.postgres.PostgresStore`."""

    # ------------------------------------------------------------------ reading

    def _memory(self, row: Sequence[Any]) -> Memory:
        (_, mid, content, exact, tagf, tagi, label, targets, strengths, types,
         metadata_json, whole, vector, scope, expires_us) = row
        if whole is not None:
            try:
                return load_memory(whole)
            except ValueError as exc:
                raise ValueError(f"memory {mid!r} has an invalid row: whole: {exc}") from None
        ints = list(tagi)
        try:
            metadata = _checked_columns(tagf, ints, metadata_json, expires_us, scope)
        except ValueError as exc:  # a hand-edited row: name the memory and the field
            raise ValueError(f"memory {mid!r} has an invalid row: {exc}") from None
        if label is not None:
            with self._labels_lock:
                ints[_records.I_LABEL] = self._labels.intern(label)
        values = _embedding_of(exact, vector)
        embedding = None if values is None else values.tolist()
        links = None
        if targets:
            links = _records.pack_link_columns(
                tuple(targets), tuple(strengths), bytes(int(c) for c in types)
            )
        return _records.decode_memory(
            mid, content, embedding, list(tagf), ints, links, metadata or None, self._labels,
            tuple(scope), expires_us,
        )

    _TAG_COLUMNS = ("tagf", "tagi", "label", "link_targets", "link_strengths", "link_types")
    _TAG_TYPES = ("float8[]", "int8[]", "text[]", "text[]", "float8[]", "int2[]")

    def modify_memories(
        self, memory_ids: Sequence[str], change: Any
    ) -> list[Memory]:
        """A read-modify-write: ``change(current memories)`` written back atomically.

        Outside a transaction, when every id was among the rows this thread's last
        :meth:`candidate_bank` read (a retrieve's winners), the memories are rebuilt
        from those rows and, when ``change`` altered their tags only, the new tags
        are written in ONE round trip: a transaction (under the store's write lock)
        whose statement updates each row only if it is still the version that was
        read (its ``xmin``) and fails as a whole otherwise. Then, or in any other
        case, the memories are read again under row locks (``FOR UPDATE``) in a write
        transaction, changed again, and written (what a plain read-modify-write does).

        Args:
            memory_ids: the ids (missing ones skipped).
            change: maps the current memories (in ``memory_ids`` order) to their new
                versions (same ids, same order); pure: it may run twice.

        Returns:
            What ``change`` returned for the memories written.
        """
        ids = list(memory_ids)
        found = getattr(self._local, "found", None)
        self._local.found = None  # once: the rows are stale after any write
        if (
            found is not None and ids and self._current() is None
            and all(mid in found for mid in ids) and len(set(ids)) == len(ids)
        ):
            rows = [found[mid] for mid in ids]
            old = [self._memory(_search_row_memory_columns(r)) for r in rows]
            new: list[Memory] = change(old)
            if self._write_tags_if_unchanged(rows, old, new):
                return new
        with self.transaction():
            new = change(self.memories(ids))
            for memory in new:
                self.update(memory)
        return new

    def _write_tags_if_unchanged(
        self, rows: list[Any], old: list[Memory], new: list[Memory]
    ) -> bool:
        """Write ``new``'s tags over rows still as read, in one round trip (see
        :meth:`modify_memories`); False (nothing written) when some row changed since,
        or when ``new`` differs from ``old`` in more than tags."""
        if len(new) != len(old):
            return False
        fields = [f for f in Memory.model_fields if f != "tag"]
        for r, o, n in zip(rows, old, new, strict=True):
            if not isinstance(n, Memory) or n.id != o.id or r[14] is not None:
                return False
            if any(
                getattr(n, f) is not getattr(o, f) and getattr(n, f) != getattr(o, f)
                for f in fields
            ) or not _records.fits(n):
                return False
        params: list[Any] = []
        for r, n in zip(rows, new, strict=True):
            values = self._tag_values(n.tag)
            params += [n.id, r[17], *(values[c] for c in self._TAG_COLUMNS)]
        typed = ", ".join(f"%s::{ty}" for ty in self._TAG_TYPES)
        row = f"(%s, %s, {typed})"
        sets = ", ".join(f"{c} = v.{c}" for c in self._TAG_COLUMNS)
        # One statement, so one transaction of its own: the store's write lock (joined
        # in, so taken before any row is written), the update of the rows still at the
        # version read, and the check that fails it whole when some row was not.
        sql = (
            "WITH l AS MATERIALIZED (SELECT pg_advisory_xact_lock(%s) AS locked), "
            f"v (id, version, {', '.join(self._TAG_COLUMNS)}) AS (VALUES "
            + ", ".join([row] * len(new))
            + f"), u AS (UPDATE {self._t} AS m SET {sets} FROM v, l "
            "WHERE m.id = v.id AND m.xmin::text = v.version RETURNING 1) "
            f"SELECT {self._t}_unchanged((SELECT count(*) FROM u), %s)"
        )
        params = [self._lock_key, *params, len(new)]
        psycopg = self._psycopg
        with self._connection() as conn:
            try:
                with _prepared(conn, True), conn.cursor(binary=True) as cur:
                    cur.execute(sql, params, prepare=True).fetchone()
            except psycopg.errors.SerializationFailure:
                return False  # rolled back whole by the server
            except psycopg.OperationalError as exc:
                raise self._error("a transaction", exc) from None
        return True

    def get(self, memory_id: str) -> Memory | None:
        """A memory by id (None when absent).

        Args:
            memory_id: the id.

        Returns:
            The memory.
        """
        found = self.memories([memory_id])
        return found[0] if found else None

    def memories(self, memory_ids: Sequence[str]) -> list[Memory]:
        """The stored memories of ``memory_ids``, in that order (missing ones skipped).

        Inside a write transaction the rows are locked (in insertion order, so two
        writers never deadlock) until it ends.

        Args:
            memory_ids: the ids.

        Returns:
            The memories.
        """
        # no stored id holds NUL or a lone surrogate (the driver would refuse the
        # parameter): such an id is simply unknown
        ids = [mid for mid in memory_ids if storable_id(mid)]
        if not ids:
            return []
        lock = self._lock_rows()
        tx = self._current()
        by_id: dict[str, Any] = {}
        if lock and tx is not None:  # rows this transaction holds already
            for mid in ids:
                row = self._cached_row(tx, mid)
                if row is not None:
                    by_id[mid] = row
        missing = [mid for mid in dict.fromkeys(ids) if mid not in by_id]
        if missing:
            with self._read(single=True) as cur:
                f, args = self._filter_args(missing)
                rows = cur.execute(
                    f"SELECT {_MEMORY_COLUMNS} FROM {self._t} WHERE id = ANY(%s){f} "
                    f"ORDER BY seq{lock}",
                    args,
                ).fetchall()
            self._locked_rows(rows, lock)
            by_id.update((r[1], r) for r in rows)
            if lock and tx is not None and not self._f:  # the whole table: no such row
                tx.absent.update(mid for mid in missing if mid not in by_id)
        return [self._memory(by_id[i]) for i in ids if i in by_id]

    def _locked_rows(self, rows: Sequence[Any], lock: str) -> None:
        """Note rows (``_MEMORY_COLUMNS``) a write transaction read and locked."""
        if lock:
            tx = self._current()
            if tx is not None:
                for r in rows:
                    tx.known.add(r[1])
                    tx.rows[r[1]] = tuple(r)

    def list_all(self) -> list[Memory]:
        """Every memory, in insertion order.

        Returns:
            A new list.
        """
        lock = self._lock_rows()
        with self._read(single=True) as cur:
            f, args = self._filter_args()
            rows = cur.execute(
                f"SELECT {_MEMORY_COLUMNS} FROM {self._t} WHERE true{f} "
                f"ORDER BY seq{lock}",
                args,
            ).fetchall()
        self._locked_rows(rows, lock)
        return [self._memory(r) for r in rows]

    def list_page(self, offset: int, limit: int) -> list[Memory]:
        """``list_all()[offset:offset + limit]``, reading about ``offset + limit`` rows.

        First the rows in insertion order are walked through the primary key, at
        most a few times ``offset + limit`` of them, keeping the ones the view sees:
        when they hold the page (a scope that is not rare in the table), that is
        the answer. Otherwise (a sparse scope) the page is read through the view's
        indexes (the scope's GIN index), sorted: O(the scope's size).

        Args:
            offset: memories skipped first (>= 0).
            limit: most memories returned (>= 0).

        Returns:
            The page, in insertion order.
        """
        offset, limit = check_page(offset, limit)
        if limit <= 0 or offset >= MOST_ROWS:
            return []
        limit = min(limit, MOST_ROWS)
        lock = self._lock_rows()
        wanted = offset + limit
        with self._read() as cur:  # one snapshot for the walk and the page's rows
            f, args = self._filter_args()
            seqs: list[int] = []
            if not lock:  # (a locking read cannot walk a subquery)
                budget = max(_PAGE_WALK_MIN, _PAGE_WALK_FACTOR * wanted)
                seqs = [r[0] for r in cur.execute(
                    f"SELECT seq FROM (SELECT * FROM {self._t} ORDER BY seq LIMIT %s) "
                    f"AS walked WHERE true{f} ORDER BY seq LIMIT %s",
                    (budget, *args, wanted),
                ).fetchall()]
            if len(seqs) == wanted:  # the walk held the page: read just its rows
                rows = cur.execute(
                    f"SELECT {_MEMORY_COLUMNS} FROM {self._t} WHERE seq = ANY(%s) ORDER BY seq",
                    (seqs[offset:],),
                ).fetchall()
            else:
                rows = cur.execute(
                    f"SELECT {_MEMORY_COLUMNS} FROM {self._t} WHERE true{f} "
                    f"ORDER BY seq LIMIT %s OFFSET %s{lock}",
                    (*args, limit, offset),
                ).fetchall()
        self._locked_rows(rows, lock)
        return [self._memory(r) for r in rows]

    def list_after(self, position: int | None, limit: int) -> tuple[list[Memory], int | None]:
        """The next memories in insertion order after ``position`` (see
        :class:`~emotional_memory.stores.base.KeysetPagingStore`).

        The cursor is the row's ``seq`` (kept by updates): the page is read from the
        primary key onwards, O(log N + the rows walked), however far it lies.

        Args:
            position: None (from the start) or a cursor this store returned.
            limit: most memories returned (>= 1).

        Returns:
            ``(page, cursor)``; the cursor is ``position`` when the page is empty.
        """
        cursor, limit = check_after(position, limit)
        limit = min(limit, MOST_ROWS)
        lock = self._lock_rows()
        with self._read(single=True) as cur:
            f, args = self._filter_args(cursor)
            rows = cur.execute(
                f"SELECT {_MEMORY_COLUMNS} FROM {self._t} WHERE seq > %s{f} "
                f"ORDER BY seq LIMIT %s{lock}",
                (*args, limit),
            ).fetchall()
        self._locked_rows(rows, lock)
        if not rows:
            return [], position
        return [self._memory(r) for r in rows], int(rows[-1][0])

    def __len__(self) -> int:
        """Number of memories stored."""
        with self._read(single=True) as cur:
            if self._expiry_us is not None:
                _, count = self._count_exprs(0, 0)
                row = cur.execute(f"SELECT {count}", self._view_filter()[1]).fetchone()
            elif self._f:
                f, args = self._filter_args()
                row = cur.execute(f"SELECT count(*) FROM {self._t} WHERE true{f}", args).fetchone()
            else:
                row = cur.execute(
                    f"SELECT value::bigint FROM {self._meta} WHERE key = 'count'"
                ).fetchone()
        return int(row[0])

    def count(self) -> int:
        """Number of memories stored (same as ``len(store)``)."""
        return len(self)

    def __contains__(self, memory_id: object) -> bool:
        """Whether a memory with this id is stored."""
        if not isinstance(memory_id, str) or not storable_id(memory_id):
            return False
        with self._read(single=True) as cur:
            f, args = self._filter_args(memory_id)
            row = cur.execute(f"SELECT 1 FROM {self._t} WHERE id = %s{f}", args).fetchone()
        return row is not None
