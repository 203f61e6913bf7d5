"""Durable affective-state store in PostgreSQL (extra ``postgres``).

One row per ``key`` in ``{table}_state``, next to a
:class:`~emotional_memory.stores.postgres.PostgresStore`'s tables:

- ``PostgresAffectiveStateStore(dsn, key=...)`` opens its own connection; each save is
  its own transaction.
- ``PostgresAffectiveStateStore.from_store(store, key=...)`` writes through the
  store's transactions instead: the engine saves the state inside the memory
  operation's transaction, so memories and state commit (or roll back) together.
"""

from __future__ import annotations

import copy
import hashlib
import math
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, cast

from emotional_memory.redact import redact, redact_address
from emotional_memory.state import AffectiveState
from emotional_memory.stores._shared.state import (
    check_key,
    loads_snapshot,
    restore_stored,
    scoped_key,
    snapshot_text,
    state_conflict,
)
from emotional_memory.stores.postgres.common import table_lock_key
from emotional_memory.stores.postgres.scope_locks import AdvisoryScopeLocks
from emotional_memory.stores.postgres.store import PostgresStore, PostgresStoreError

__all__ = ["PostgresAffectiveStateStore"]



MAX_ROW_KEY_BYTES = 2000
"""Longest key kept as it is in the ``key`` column (UTF-8 bytes); a longer one (a
deep scope of long parts: 32 x 1,024 bytes) is kept as ``sha256:`` + its digest,
since a btree index entry holds at most about 2,700 bytes."""


_LAYOUT = ["key text key", "snapshot jsonb", "snapshot_json text",
           "updated_at timestamp with time zone"]
"""The state table's columns as ``_prepare`` reads them (``key``: the primary key)."""


def _row_key(key: str) -> str:
    """The ``key`` column's value for state key ``key`` (see :data:`MAX_ROW_KEY_BYTES`)."""
    raw = key.encode("utf-8")
    return key if len(raw) <= MAX_ROW_KEY_BYTES else "sha256:" + hashlib.sha256(raw).hexdigest()


class PostgresAffectiveStateStore:
    """An :class:`~emotional_memory.interfaces.AffectiveStateStore` in PostgreSQL.

    Snapshots are JSONB rows keyed by ``key``. Thread-safe.
    """

    def __init__(
        self,
        dsn: str,
        *,
        key: str = "default",
        table: str = "emotional_memory",
        connect_timeout: float = 10.0,
    ) -> None:
        """Open a connection and create the state table when missing.

        Args:
            dsn: libpq connection string or URL.
            key: which state row this store reads and writes.
            table: the tables' prefix (the state lives in ``{table}_state``).
            connect_timeout: seconds to wait for the server.

        Raises:
            TypeError: ``dsn`` is not a str.
            ValueError: ``connect_timeout`` is not a finite number of seconds > 0.
            PostgresStoreError: the server cannot be reached or the DSN is invalid
                (the message names the DSN with its password redacted).
        """
        try:
            import psycopg
        except ImportError as exc:
            raise ImportError(
                "PostgresAffectiveStateStore needs psycopg: "
                "pip install 'emotional-memory-jax[postgres]'"
            ) from exc
        if not isinstance(dsn, str):
            raise TypeError(f"dsn must be a str, got {type(dsn).__name__}")
        if isinstance(connect_timeout, bool) or not isinstance(connect_timeout, int | float) \
                or not 0 < connect_timeout < math.inf:
            raise ValueError(
                f"connect_timeout must be a finite number of seconds > 0, got {connect_timeout!r}"
            )
        self._key = check_key(key)
        self._psycopg = psycopg
        self._redacted = redact_address(dsn)
        self._secrets = PostgresStore._find_secrets(dsn)
        prefix = _table(table)
        self._table = f"{prefix}_state"
        self._shared: PostgresStore | None = None
        self._lock = threading.RLock()
        self._own: _Own | None = _Own(dsn, max(1, math.ceil(connect_timeout)))
        try:
            with self._transaction() as cur:
                # the tables' schema lock (a PostgresStore's and from_store's too):
                # workers creating the table at once take turns
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (table_lock_key(prefix),))
                self._prepare(cur)
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_store(
        cls, store: PostgresStore, *, key: str = "default"
    ) -> PostgresAffectiveStateStore:
        """A state store writing inside ``store``'s transactions.

        Args:
            store: an open :class:`PostgresStore`.
            key: which state row this store reads and writes.

        Returns:
            The state store (closing it leaves ``store`` open).
        """
        if not isinstance(store, PostgresStore):
            raise TypeError(f"store must be a PostgresStore, got {type(store).__name__}")
        self = cls.__new__(cls)
        self._key = check_key(key)
        self._psycopg = store._psycopg
        self._redacted = store.dsn
        self._secrets = store._secrets
        self._table = f"{store.table}_state"
        self._shared = store
        self._lock = threading.RLock()
        self._own = None
        with self._transaction() as cur:
            self._prepare(cur)
        return self

    def joined_with(self, store: object) -> PostgresAffectiveStateStore | None:
        """This store when it writes inside ``store``'s transactions, else None.

        Args:
            store: the engine's memory store.

        Returns:
            Itself (made by ``from_store(store)``), or None.
        """
        return self if self._shared is not None and self._shared is store else None

    def scoped(self, path: tuple[str, ...]) -> PostgresAffectiveStateStore:
        """The state store of scope ``path`` (an engine view's): the same
        connection or memory store and transactions, key
        :func:`~emotional_memory.stores._shared.state.scoped_key` of this key.

        Args:
            path: the view's full scope path.

        Returns:
            The twin (closing the root closes their shared connection).
        """
        twin = copy.copy(self)
        twin._key = scoped_key(self._key, path)
        return twin

    @property
    def key(self) -> str:
        """The state row this store reads and writes."""
        return self._key

    def _prepare(self, cur: Any) -> None:
        """Create the table if needed, and move rows that an earlier version kept under
        a raw key longer than :data:`MAX_ROW_KEY_BYTES` (it could store up to a btree
        entry's ~2,700 bytes) to the ``sha256:`` key this version reads them by.

        Raises:
            PostgresStoreError: a relation of that name has another layout (not made
                by this class): nothing is written to it.
        """
        cur.execute(self._create())
        layout = cur.execute(
            "SELECT array_agg(a.attname::text || ' ' || format_type(a.atttypid, a.atttypmod) "
            "|| CASE WHEN a.attnum = ANY(i.indkey) THEN ' key' ELSE '' END ORDER BY a.attnum) "
            "FROM pg_attribute AS a LEFT JOIN pg_index AS i "
            "ON i.indrelid = a.attrelid AND i.indisprimary "
            "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped",
            (self._table,),
        ).fetchone()[0]
        if layout != _LAYOUT:
            raise PostgresStoreError(
                f"{self._redacted!r}: {self._table!r} exists but was not made by "
                "emotional_memory's PostgresAffectiveStateStore; choose another table= "
                "prefix (nothing was written)"
            )
        digest = "'sha256:' || encode(sha256(convert_to(key, 'UTF8')), 'hex')"
        cur.execute(
            f"UPDATE {self._table} AS o SET key = h.k FROM (SELECT key AS old, {digest} AS k "
            f"FROM {self._table} WHERE octet_length(key) > %s) AS h WHERE o.key = h.old "
            f"AND NOT EXISTS (SELECT 1 FROM {self._table} AS x WHERE x.key = h.k)",
            (MAX_ROW_KEY_BYTES,),
        )

    def _create(self) -> str:
        return (
            f"CREATE TABLE IF NOT EXISTS {self._table} (key text PRIMARY KEY, "
            "snapshot jsonb NOT NULL, snapshot_json text NOT NULL, "
            "updated_at timestamptz NOT NULL)"
        )

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        psycopg = self._psycopg
        if self._shared is not None:
            try:
                with self._shared._write() as cur:
                    yield cur
            except psycopg.OperationalError as exc:
                # classified as the store's own failures (a statement timeout is a
                # StatementTimeout, a StoreTimeoutError), the DSN's secrets removed
                raise self._shared._error("saving the state", exc) from None
            return
        with self._lock:
            own = self._own
            if own is None or own.closed:
                raise ValueError("the PostgresAffectiveStateStore is closed")
            conn = self._connection(own)
            try:
                with conn.transaction(), conn.cursor() as cur:
                    yield cur
            except psycopg.OperationalError as exc:
                raise PostgresStoreError(
                    f"a state transaction failed on {self._redacted!r}: "
                    f"{redact(str(exc), self._secrets).strip()}"
                ) from None

    def _connection(self, own: _Own) -> Any:
        """The own connection, opened again when the last one was dropped or lost."""
        psycopg = self._psycopg
        if own.conn is not None and not own.conn.closed:
            return own.conn
        failed: str | None = None  # raised outside the except: no driver error as its __context__
        try:
            own.conn = psycopg.connect(own.dsn, autocommit=True, connect_timeout=own.timeout)
            # its transactions read committed whatever the server's default (a versioned
            # save compares with the latest committed version, not a snapshot's)
            own.conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
        except psycopg.Error as exc:
            failed = (f"cannot connect to PostgreSQL at {self._redacted!r}: "
                      f"{redact(str(exc), self._secrets).strip()}")
        if failed is not None:
            raise PostgresStoreError(failed)
        return own.conn

    @contextmanager
    def _reading(self) -> Iterator[Any]:
        if self._shared is not None:
            with self._shared._read() as cur:
                yield cur
            return
        with self._transaction() as cur:
            yield cur

    def save(self, state: AffectiveState | dict[str, Any]) -> None:
        """Store ``state`` (upsert).

        Args:
            state: an :class:`AffectiveState` or a JSON-able snapshot dict.

        Raises:
            TypeError: neither, or not JSON-serialisable.
            ValueError: NaN or infinite numbers.
        """
        text = snapshot_text(state)
        with self._transaction() as cur:  # nothing fetched: stays in the store's pipeline
            cur.execute(self._upsert_sql(), (_row_key(self._key), text, text, datetime.now(UTC)))

    def _upsert_sql(self) -> str:
        """The state row's upsert (parameters: key, snapshot, snapshot, updated_at)."""
        return (f"INSERT INTO {self._table} VALUES (%s, %s::jsonb, %s, %s) "
                "ON CONFLICT (key) DO UPDATE SET snapshot = excluded.snapshot, "
                "snapshot_json = excluded.snapshot_json, updated_at = excluded.updated_at")

    def hold_scope(
        self, path: tuple[str, ...], wait: bool = True
    ) -> AbstractContextManager[None]:
        """Hold scope ``path`` of the store's table for one operation, across processes
        (:class:`~emotional_memory.stores.postgres.scope_locks.AdvisoryScopeLocks`).

        Args:
            path: the operation's scope path.

        Returns:
            A context manager holding the locks.

        Raises:
            ValueError: a state store with its own connection (made without
                ``from_store``) shares no locks with a memory store.
        """
        store = self._shared
        if store is None:
            raise ValueError("hold_scope needs a state store made by from_store(store)")
        shared = store._shared
        with self._lock:
            if shared.scope_locks is None:
                shared.scope_locks = AdvisoryScopeLocks(store)
        return cast(AbstractContextManager[None], shared.scope_locks.hold(tuple(path), wait))

    def load_versioned(self) -> tuple[dict[str, Any] | None, str]:
        """The stored snapshot (None when none) and its version (the row's ``xmin``,
        which every save changes; ``""`` when nothing is stored)."""
        with self._reading() as cur:
            row = cur.execute(
                f"SELECT snapshot_json, xmin::text FROM {self._table} WHERE key = %s",
                (_row_key(self._key),),
            ).fetchone()
        if row is None:
            return None, ""
        data = loads_snapshot(self._key, row[0])
        return data, str(row[1])

    def save_versioned(
        self, state: AffectiveState | dict[str, Any], expected: str | None = None
    ) -> str:
        """:meth:`save`, returning the new version (see :meth:`load_versioned`).

        Args:
            state: the state or its snapshot.
            expected: the version the caller's operation started from (``""``:
                nothing stored), or None for no check.

        Raises:
            StateConflictError: the stored version is not ``expected`` (nothing saved;
                the row is locked until the transaction ends, so a concurrent save
                is seen).
        """
        text = snapshot_text(state)
        values: tuple[Any, ...] = (_row_key(self._key), text, text, datetime.now(UTC))
        if expected == "":  # nothing was stored: insert, unless another did meanwhile
            sql = (f"INSERT INTO {self._table} VALUES (%s, %s::jsonb, %s, %s) "
                   "ON CONFLICT (key) DO NOTHING RETURNING xmin::text")
        elif expected is not None:  # the row as read, or nothing (a concurrent save
            # waits for ours, or ours re-reads its row after it and matches no more)
            sql = (f"UPDATE {self._table} SET snapshot = %s::jsonb, snapshot_json = %s, "
                   "updated_at = %s WHERE key = %s AND xmin::text = %s RETURNING xmin::text")
            values = (*values[1:], values[0], expected)
        else:
            sql = self._upsert_sql() + " RETURNING xmin::text"
        with self._transaction() as cur:
            row = cur.execute(sql, values).fetchone()  # one round trip
        if row is None:
            raise state_conflict(self._key)
        return str(row[0])

    def load(self) -> AffectiveState | None:
        """The stored state, or None when nothing is stored under this key."""
        return restore_stored(self._key, self.load_snapshot())

    def load_snapshot(self) -> dict[str, Any] | None:
        """The stored snapshot dict (a new dict), or None."""
        with self._reading() as cur:
            row = cur.execute(
                f"SELECT snapshot_json FROM {self._table} WHERE key = %s", (_row_key(self._key),)
            ).fetchone()
        if row is None:
            return None
        data: dict[str, Any] = loads_snapshot(self._key, row[0])
        return data

    def updated_at(self) -> datetime | None:
        """When the snapshot was last saved (aware), or None."""
        with self._reading() as cur:
            row = cur.execute(
                f"SELECT updated_at FROM {self._table} WHERE key = %s", (_row_key(self._key),)
            ).fetchone()
        return None if row is None else row[0]

    def clear(self) -> None:
        """Forget the stored snapshot."""
        with self._transaction() as cur:
            cur.execute(f"DELETE FROM {self._table} WHERE key = %s", (_row_key(self._key),))

    def close(self) -> None:
        """Close the own connection (idempotent); a shared store stays open."""
        with self._lock:
            own = self._own
            if own is not None and not own.closed:
                own.closed = True
                if own.conn is not None:
                    own.conn.close()
                own.conn = None

    def __enter__(self) -> PostgresAffectiveStateStore:
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
        return f"PostgresAffectiveStateStore({self._redacted!r}, key={self._key!r})"


class _Own:
    """A state store's own connection, shared with its scoped twins: opened on first
    use and again after the server dropped it (a closed connection)."""

    def __init__(self, dsn: str, timeout: int) -> None:
        self.dsn = dsn
        self.timeout = timeout
        self.conn: Any = None
        self.closed = False

    def __repr__(self) -> str:  # never the DSN, whose password it holds
        return f"_Own(closed={self.closed})"


def _table(name: str) -> str:
    from emotional_memory.stores.postgres.common import _IDENT

    if not isinstance(name, str) or not _IDENT.fullmatch(name):
        raise ValueError(f"table must be lowercase letters, digits and '_', got {name!r}")
    return name
