"""The PostgreSQL store (extra ``postgres``); design and measurements in ``README.md``
beside this file."""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from emotional_memory.redact import redact_address
from emotional_memory.stores.base import BackendStore
from emotional_memory.stores.postgres.columns import _Columns
from emotional_memory.stores.postgres.common import (
    RECONNECT_WINDOW_S,
    DatabaseUnreachable,
    PoolBusy,
    PostgresStoreError,
    StatementTimeout,
    _Labels,
    _Shared,
    check_options,
    redact_dsn,
    table_lock_key,
)
from emotional_memory.stores.postgres.schema import SCHEMA_VERSION

__all__ = [
    "SCHEMA_VERSION",
    "DatabaseUnreachable",
    "PoolBusy",
    "PostgresStore",
    "PostgresStoreError",
    "StatementTimeout",
    "redact_dsn",
]


class PostgresStore(BackendStore, _Columns):
    """A :class:`~emotional_memory.stores.columnar.ColumnarStore` in PostgreSQL (module docs).

    Thread-safe: each thread's transaction has its own pooled connection.
    """

    def __init__(
        self,
        dsn: str,
        *,
        table: str = "emotional_memory",
        min_connections: int = 1,
        max_connections: int = 4,
        connect_timeout: float = 10.0,
        exact_rows: int = 2048,
        ef_search: int = 64,
        margin: int = 4,
        hnsw_m: int = 16,
        hnsw_ef_construction: int = 128,
        fillfactor: int = 70,
        statement_timeout: float | None = None,
    ) -> None:
        """Connect, and create (or check) the schema.

        Args:
            dsn: libpq connection string or URL (``postgresql://user:pw@host/db``).
            table: prefix of the store's tables (``{table}_memories``, ``{table}_meta``);
                lowercase letters, digits and ``_``.
            min_connections: connections the pool keeps open.
            max_connections: connections the pool opens at most (one per thread in
                a transaction).
            connect_timeout: seconds to wait for the server.
            statement_timeout: seconds any one statement of the store's may run
                before the server cancels it (PostgreSQL's ``statement_timeout`` on
                every pooled connection); the operation then fails with
                :class:`StatementTimeout`, its transaction rolled back. None: no limit
                (the server's own setting).
            exact_rows: up to this many embedded memories, search ranks every row
                exactly; above it the HNSW index supplies the candidates.
            ef_search: pgvector's ``hnsw.ef_search`` for the store's searches (raised
                to ``top_k + margin`` when that is larger).
            margin: extra HNSW candidates fetched beyond ``top_k`` for the exact re-rank.
            hnsw_m: the HNSW index's ``m``.
            hnsw_ef_construction: the HNSW index's ``ef_construction`` (read when the
                first embedding creates the index).
            fillfactor: the memories table's ``fillfactor`` (10..100, read when the
                store creates its tables): room kept on each page for HOT updates.

        The defaults' measured trade-offs, and how to change them on an existing
        database, are in ``stores/postgres/README.md``.

        Raises:
            ImportError: psycopg / psycopg-pool / pgvector / PyStemmer are not installed.
            ValueError: a bad option (named).
            PostgresStoreError: the server cannot be reached, the DSN is invalid, or
                the database holds a foreign or newer schema (nothing written).
        """
        try:
            import psycopg
            import Stemmer  # noqa: F401  (every row keeps its stems: terms column)
        except ImportError as exc:
            raise ImportError(
                "PostgresStore needs psycopg, psycopg-pool, pgvector and PyStemmer: "
                "pip install 'emotional-memory-jax[postgres]'"
            ) from exc
        check_options(
            dsn, table, connect_timeout, statement_timeout,
            min_connections=min_connections, max_connections=max_connections,
            exact_rows=exact_rows, ef_search=ef_search, margin=margin, hnsw_m=hnsw_m,
            hnsw_ef_construction=hnsw_ef_construction, fillfactor=fillfactor,
        )
        self._timeout_ms = 0 if statement_timeout is None else round(statement_timeout * 1000)
        self._psycopg = psycopg
        self._redacted = redact_address(dsn)
        self._secrets = self._find_secrets(dsn)
        self._table = table
        self._t = f"{table}_memories"
        self._meta = f"{table}_meta"
        self._links = f"{table}_links"
        self._lock_key = table_lock_key(table)
        self._exact_rows = exact_rows
        self._ef_search = ef_search
        self._margin = margin
        self._hnsw = (hnsw_m, hnsw_ef_construction)
        self._fillfactor = fillfactor
        self._upsert_sql, self._update_sql = self._statements()
        self._tag_sql = (
            f"UPDATE {self._t} SET "
            + ", ".join(f"{c} = %({c})s" for c in self._TAG_COLUMNS)
            + " WHERE id = %(id)s"
        )
        self._local = threading.local()
        self._selection = None
        self._f = ""
        self._fv = {}
        self._expiry_us = None
        self._last_use: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        self._session_ef: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._labels = _Labels()
        self._labels_lock = threading.Lock()
        self._shared = _Shared()
        self._connect(dsn, table, min_connections, max_connections, connect_timeout)

    def _connect(
        self, dsn: str, table: str, min_size: int, max_size: int, connect_timeout: float
    ) -> None:
        """Check the DSN, create or check the schema on a first connection, open the pool."""
        psycopg = self._psycopg
        from psycopg_pool import ConnectionPool

        # each error is raised outside its except block: the driver's exception, whose
        # words may quote the DSN as written, is not kept as the error's __context__
        failed: str | None = None
        try:
            psycopg.conninfo.conninfo_to_dict(dsn)
        except psycopg.Error as exc:
            failed = f"invalid PostgreSQL DSN {self._redacted!r}: {self._clean(exc)}"
        if failed is not None:
            raise PostgresStoreError(failed)
        seconds = max(1, math.ceil(connect_timeout))
        try:
            conn = psycopg.connect(dsn, autocommit=True, connect_timeout=seconds)
        except psycopg.Error as exc:
            failed = f"cannot connect to PostgreSQL at {self._redacted!r}: {self._clean(exc)}"
        if failed is not None:
            raise PostgresStoreError(failed)
        try:
            self._ensure_schema(conn)
        finally:
            conn.close()
        self._pool = ConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            # no prepared statements but a retrieve's read and write (see _prepared):
            # psycopg's do not mix reliably with pipeline mode (and a pooler in
            # transaction mode forbids them)
            kwargs={"autocommit": True, "connect_timeout": seconds, "prepare_threshold": None},
            configure=self._configure,
            check=self._check_connection,
            reconnect_timeout=RECONNECT_WINDOW_S,
            reconnect_failed=self._reconnect_failed,
            open=False,
            name=f"emotional_memory.{table}",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except Exception as exc:
            self._pool.close(timeout=0)
            raise PostgresStoreError(
                f"cannot connect to PostgreSQL at {self._redacted!r}: {self._clean(exc)}"
            ) from None

    # ------------------------------------------------------------------ the rest

    def linking_to(self, memory_ids: Iterable[str]) -> list[str]:
        """Ids of the memories holding a link to any of ``memory_ids``, in insertion order.

        Args:
            memory_ids: the link targets.

        Returns:
            The linking memories' ids.
        """
        targets = list(memory_ids)
        if not targets:
            return []
        lock = self._lock_rows()
        with self._read(single=True) as cur:
            rows = cur.execute(  # through the links table's index
                f"SELECT id FROM {self._t} WHERE seq IN (SELECT source FROM {self._links} "
                f"WHERE target = ANY(%s)) ORDER BY seq{lock}",
                (targets,),
            ).fetchall()
        self._locked([r[0] for r in rows], lock)
        return [r[0] for r in rows]

    def pending_ids(self) -> list[str]:
        """Ids of the memories pending appraisal, in insertion order.

        Returns:
            The ids.
        """
        with self._read(single=True) as cur:
            f, args = self._filter_args()
            rows = cur.execute(
                f"SELECT id FROM {self._t} WHERE pending{f} ORDER BY seq", args
            ).fetchall()
        return [r[0] for r in rows]

    def clear(self) -> None:
        """Delete every memory (one transaction; the schema stays).

        Raises:
            RuntimeError: called on a view (see :meth:`selected`).
        """
        if self._selection is not None:
            raise RuntimeError("clear() empties the whole table: call it on the store")
        with self._write() as cur:
            cur.execute(f"DELETE FROM {self._t}")
            cur.execute(
                f"UPDATE {self._meta} SET value = '0' "
                "WHERE key IN ('count', 'embedded', 'expiring')"
            )
        tx = self._current()
        if tx is not None:
            tx.known.clear()
            tx.rows.clear()

    def close(self) -> None:
        """Close the connection pool (idempotent; the views made from the store are
        closed with it)."""
        if not self._shared.closed:
            self._shared.closed = True
            self._pool.close()
            if self._shared.scope_locks is not None:
                self._shared.scope_locks.close()

    def __enter__(self) -> PostgresStore:
        """Context-manager entry: the store itself."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Context-manager exit: :meth:`close`."""
        self.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self._redacted!r}, table={self._table!r})"
