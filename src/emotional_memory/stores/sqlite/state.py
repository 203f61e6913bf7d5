"""Durable affective-state store on sqlite3 (docs/behaviour.md §8).

One row per ``key`` in the ``em_affective_state`` table (``key TEXT PRIMARY KEY,
snapshot TEXT, updated_at TEXT``; named apart from the original library's
``affective_state``, which a file written by it keeps untouched - see
:mod:`emotional_memory.stores.sqlite.original_layout`), so several engines can keep
their states in one file. The file may also hold a
:class:`~emotional_memory.stores.SQLiteStore`'s tables:

- ``SQLiteAffectiveStateStore(path)`` opens its own connection (WAL mode, so both
  connections work side by side). Its writes are separate transactions: do not save
  the state from inside an open ``SQLiteStore.transaction()`` on the same file, or it
  waits for that transaction's write lock (and times out).
- ``SQLiteAffectiveStateStore.from_store(store)`` shares the store's connection and
  lock instead; its saves join an open ``store.transaction()``, so memories and
  state commit (or roll back) together.

Another application's database or a file of a schema version :class:`SQLiteStore`
refuses (newer, or no number), or an ``em_affective_state`` table of another layout,
is refused with a ValueError naming
the file before anything is written.
"""

from __future__ import annotations

import copy
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from emotional_memory.state import AffectiveState
from emotional_memory.stores._shared.state import (
    StoredStateError,
    check_key,
    loads_snapshot,
    restore_stored,
    scoped_key,
    snapshot_text,
    state_conflict,
)
from emotional_memory.stores.sqlite.original_layout import prepare_state_file, prepare_state_tables
from emotional_memory.stores.sqlite.schema import (
    SQLiteBusyError,
    _check_foreign,
    begin_immediate,
    busy_named,
    check_schema_version,
    check_timeout,
    database_file,
    open_connection,
)
from emotional_memory.stores.sqlite.scope_locks import hold_scope
from emotional_memory.stores.sqlite.store import SQLiteStore

_CREATE = """CREATE TABLE IF NOT EXISTS em_affective_state (
    key        TEXT PRIMARY KEY,
    snapshot   TEXT NOT NULL,
    updated_at TEXT NOT NULL
)"""

_UPSERT = """INSERT INTO em_affective_state (key, snapshot, updated_at) VALUES (?, ?, ?)
ON CONFLICT(key) DO UPDATE SET snapshot = excluded.snapshot, updated_at = excluded.updated_at"""


def _check_hold_timeout(value: float | None) -> float | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                              or not 0 < value < float("inf")):
        raise ValueError(f"hold_timeout must be None or positive seconds, got {value!r}")
    return value


# (name, pk) of the table's columns, as ``PRAGMA table_info`` lists them
_LAYOUT = (("key", 1), ("snapshot", 0), ("updated_at", 0))


def _check_layout(conn: sqlite3.Connection, name: str) -> None:
    """Refuse an ``em_affective_state`` table this class did not make (nothing written).

    Raises:
        ValueError: the table exists with other columns, or without ``key`` as its
            primary key (an upsert would fail, or add rows), naming the file.
    """
    rows = conn.execute("PRAGMA table_info(em_affective_state)").fetchall()
    layout = tuple((str(row[1]).lower(), int(row[5])) for row in rows)
    if rows and layout != _LAYOUT:
        raise ValueError(
            f"{name!r}: its table em_affective_state (columns {[c for c, _ in layout]}) "
            "was not made by emotional_memory's SQLiteAffectiveStateStore; refusing to "
            "change it (use another file)"
        )


def _check_file(name: str) -> Callable[[sqlite3.Connection], None]:
    """The check :func:`open_connection` runs before it writes anything: another
    application's database or a schema version (as :class:`SQLiteStore` refuses
    them) or a foreign ``em_affective_state`` table is a ValueError naming the file."""

    def check(conn: sqlite3.Connection) -> None:
        _check_foreign(conn, name)
        check_schema_version(conn, name)  # a version the memory store refuses
        _check_layout(conn, name)

    return check


def _create_table(conn: sqlite3.Connection) -> None:
    conn.execute(_CREATE)


def _fill_states(conn: sqlite3.Connection, states: list[tuple[str, str]]) -> None:
    """Write ``(key, snapshot JSON)`` pairs (a migration's copy of the original's)."""
    now = datetime.now(UTC).isoformat()
    conn.executemany(_UPSERT, [(key, snapshot, now) for key, snapshot in states])


def _column(conn: sqlite3.Connection, column: str, key: str) -> Any:
    """The row of ``key``'s ``column`` (None: no row).

    Raises:
        StoredStateError: the column holds TEXT that is no UTF-8 (cut inside a
            character, written by another program), naming ``key`` (sqlite3 raised a
            bare OperationalError quoting the value).
    """
    try:
        return conn.execute(
            f"SELECT {column} FROM em_affective_state WHERE key = ?", (key,)
        ).fetchone()
    except sqlite3.OperationalError as exc:
        if not str(exc).startswith("Could not decode to UTF-8"):
            raise
    raise StoredStateError(key, f"its {column} is not UTF-8 text")


class SQLiteAffectiveStateStore:
    """An :class:`~emotional_memory.interfaces.AffectiveStateStore` in an SQLite file.

    Snapshots are stored as JSON text; :meth:`load` returns a fresh dict each time.
    Thread-safe (a lock guards the connection).
    """

    # the store a scoped() twin was made from (None: this is one): closing either
    # closes both, and both then raise the same "closed" error
    _origin: SQLiteAffectiveStateStore | None = None

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        key: str = "default",
        check_same_thread: bool = False,
        timeout: float = 30.0,
        hold_timeout: float | None = None,
    ) -> None:
        """Open (creating if needed) the state table in the database at ``path``.

        A state table written by the original library (0.18.1) is copied once, in one
        transaction, to this library's table (its slot ``'current'`` becomes key
        ``'default'``); the original's table stays as it was.

        Args:
            path: database file; may be the file of a :class:`SQLiteStore`;
                ``":memory:"`` (the default, as in the original) is private.
            key: which state row this store reads and writes.
            check_same_thread: passed to :func:`sqlite3.connect`.
            timeout: seconds to wait for another connection's write lock.
            hold_timeout: seconds :meth:`hold_scope` waits for an overlapping scope
                held elsewhere (None: as long as it is held).

        Raises:
            ValueError: a bad ``key``, ``timeout`` or ``hold_timeout``, named.
            SQLiteBusyError: another connection kept the file locked past ``timeout``.
        """
        self._key = check_key(key)
        self._hold_timeout = _check_hold_timeout(hold_timeout)
        self._shared: SQLiteStore | None = None
        self._path: str | None = os.fspath(path)
        self._timeout = check_timeout(timeout)
        self._lock: AbstractContextManager[Any] = threading.RLock()
        with busy_named(str(self._path), self._timeout):
            prepare_state_file(path, _create_table, _fill_states, timeout=timeout)
        self._conn: sqlite3.Connection | None = open_connection(
            path, timeout=timeout, check_same_thread=check_same_thread,
            check=_check_file(str(self._path)),
        )
        try:
            # the file as opened (a relative path is not resolved again after a chdir)
            self._file = database_file(self._conn)
            with self._transaction():
                self._connection().execute(_CREATE)
        except BaseException as exc:
            self._conn.close()
            self._conn = None
            if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, SQLiteBusyError):
                raise type(exc)(f"{self._path!r}: {exc}") from exc  # the file named
            raise

    @classmethod
    def from_store(
        cls, store: SQLiteStore, *, key: str = "default", hold_timeout: float | None = None
    ) -> SQLiteAffectiveStateStore:
        """A state store sharing ``store``'s connection, lock and transactions.

        Args:
            store: an open :class:`SQLiteStore`.
            key: which state row this store reads and writes.
            hold_timeout: as for the constructor.

        Returns:
            The state store; closing it leaves ``store`` open.
        """
        if not isinstance(store, SQLiteStore):
            raise TypeError(f"store must be a SQLiteStore, got {type(store).__name__}")
        self = cls.__new__(cls)
        self._key = check_key(key)
        self._hold_timeout = _check_hold_timeout(hold_timeout)
        self._shared = store
        self._path = store.path
        self._timeout = store._timeout
        self._lock = store._lock
        self._conn = store._connection()
        self._file = database_file(self._conn)
        with self._transaction():
            conn = self._connection()
            _check_layout(conn, self._path or ":memory:")
            prepare_state_tables(conn, _create_table, _fill_states)
        return self

    def joined_with(self, store: object) -> SQLiteAffectiveStateStore | None:
        """A state store writing this key inside ``store``'s transactions, or None.

        The engine saves the state through it, so that memories and state commit
        together: this store itself when made by ``from_store(store)``; a twin on
        ``store``'s connection when this store has its own connection to the same
        file (saving on that own connection inside the store's open write
        transaction would wait for its lock); None for another file or store.

        Args:
            store: the engine's memory store.

        Returns:
            The state store to save through, or None.
        """
        if self._shared is not None:
            return self if self._shared is store else None
        if not isinstance(store, SQLiteStore) or store.closed or self._closed:
            return None
        if not _same_file(self._file, database_file(store._connection())):
            return None
        return type(self).from_store(store, key=self._key, hold_timeout=self._hold_timeout)

    def scoped(self, path: tuple[str, ...]) -> SQLiteAffectiveStateStore:
        """The state store of scope ``path`` (an engine view's): the same connection,
        lock and transactions, key :func:`~emotional_memory.stores._shared.state.
        scoped_key` of this store's key.

        Args:
            path: the view's full scope path.

        Returns:
            The twin. Closing either closes both (the root's connection is theirs;
            an engine view's ``close`` closes nothing, its root owns the store).
        """
        twin = copy.copy(self)
        twin._key = scoped_key(self._key, path)
        twin._origin = self._origin or self
        return twin

    @property
    def key(self) -> str:
        """The state row this store reads and writes."""
        return self._key

    def save(self, state: AffectiveState | dict[str, Any]) -> None:
        """Store ``state`` (upsert, in its own transaction or the shared store's).

        Args:
            state: an :class:`AffectiveState`, or a JSON-able snapshot dict such as
                :meth:`AffectiveState.snapshot` returns.

        Raises:
            TypeError: when ``state`` is neither, or not JSON-serialisable.
            ValueError: when it holds NaN or infinite numbers.
        """
        self.save_versioned(state)

    def hold_scope(
        self, path: tuple[str, ...], wait: bool = True
    ) -> AbstractContextManager[None]:
        """Hold scope ``path`` of this database for one operation, across processes
        (:func:`~emotional_memory.stores.sqlite.scope_locks.hold_scope`), waiting at
        most ``hold_timeout`` seconds for overlapping holders.

        Args:
            path: the operation's scope path.
            wait: False: one try, no wait (held elsewhere: ``ScopeHoldTimeout``).

        Returns:
            A context manager holding the locks (entering it raises
            :class:`~emotional_memory.stores.sqlite.scope_locks.ScopeHoldTimeout`
            past the bound).

        Raises:
            ValueError: the store (or the store it shares) is closed.
        """
        self._connection()  # closed (or its store closed): that error, nothing held
        timeout = self._hold_timeout if wait else 0.0
        return hold_scope(self._file, tuple(path), timeout)

    def load_versioned(self) -> tuple[dict[str, Any] | None, str]:
        """The stored snapshot (None when none) and its version: the stored JSON text
        itself (``""`` when nothing is stored)."""
        with self._lock:
            row = _column(self._connection(), "snapshot", self._key)
        if row is None:
            return None, ""
        data = loads_snapshot(self._key, row[0])
        return data, str(row[0])

    def save_versioned(
        self, state: AffectiveState | dict[str, Any], expected: str | None = None
    ) -> str:
        """:meth:`save`, returning the new version (see :meth:`load_versioned`).

        Args:
            state: the state or its snapshot.
            expected: the version the caller's operation started from (``""``:
                nothing stored), or None for no check.

        Raises:
            StateConflictError: the stored version is not ``expected`` (nothing saved).
        """
        text = snapshot_text(state)
        # the check and the write in one write transaction (BEGIN IMMEDIATE, or the
        # store's): no other process's save comes between them
        with self._lock, self._transaction():
            conn = self._connection()
            if expected is not None:
                try:
                    row = _column(conn, "snapshot", self._key)
                except StoredStateError:  # no version anyone read: not the expected one
                    raise state_conflict(self._key) from None
                if (str(row[0]) if row is not None else "") != expected:
                    raise state_conflict(self._key)
            conn.execute(_UPSERT, (self._key, text, datetime.now(UTC).isoformat()))
        return text  # the version is the stored text

    def load(self) -> AffectiveState | None:
        """The stored state (the original library's protocol).

        Returns:
            The restored :class:`AffectiveState`, or None when nothing is stored
            under this key.
        """
        return restore_stored(self._key, self.load_snapshot())

    def load_snapshot(self) -> dict[str, Any] | None:
        """The stored snapshot dict.

        Returns:
            A new dict, or None when nothing is stored under this key.
        """
        with self._lock:
            row = _column(self._connection(), "snapshot", self._key)
        if row is None:
            return None
        data: dict[str, Any] = loads_snapshot(self._key, row[0])
        return data

    def updated_at(self) -> datetime | None:
        """When the snapshot was last saved (aware UTC), or None when nothing is stored."""
        try:
            with self._lock:
                row = _column(self._connection(), "updated_at", self._key)
        except StoredStateError:
            row = ("(not UTF-8)",)
        if row is None:
            return None
        try:
            stamp = datetime.fromisoformat(row[0])
        except (TypeError, ValueError):  # a hand-edited row
            raise ValueError(f"the state of key {self._key!r} has an unreadable updated_at "
                             f"{str(row[0])[:40]!r}") from None
        # written as aware UTC; a stamp written without a zone is read as UTC
        return stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC)

    def clear(self) -> None:
        """Forget the stored snapshot."""
        with self._transaction():
            self._connection().execute("DELETE FROM em_affective_state WHERE key = ?", (self._key,))

    def close(self) -> None:
        """Close the connection (idempotent); a shared store's connection stays open."""
        if self._origin is not None:
            self._origin.close()
        with self._lock:
            if self._conn is not None and self._shared is None:
                self._conn.close()
            self._conn = None

    def __repr__(self) -> str:
        """``SQLiteAffectiveStateStore(path=<path>)``, as the original's."""
        return f"{type(self).__name__}(path={self._path!r})"

    def __enter__(self) -> SQLiteAffectiveStateStore:
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

    @property
    def _closed(self) -> bool:
        """Whether this store (or the one its scoped twin was made from) is closed."""
        return self._conn is None or (self._origin is not None and self._origin._conn is None)

    def _connection(self) -> sqlite3.Connection:
        conn = self._conn
        if conn is None or self._closed:
            raise ValueError("the SQLiteAffectiveStateStore is closed")
        if self._shared is not None:
            return self._shared._connection()
        return conn

    def _transaction(self) -> AbstractContextManager[None]:
        if self._shared is not None:
            self._connection()
            return self._shared.transaction()
        return self._own_transaction()

    @contextmanager
    def _own_transaction(self) -> Iterator[None]:
        with self._lock:
            conn = self._connection()
            begin_immediate(conn, str(self._path), self._timeout)
            try:
                yield
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise


def _same_file(a: str | None, b: str | None) -> bool:
    """Whether two database paths name the same existing file (never ``:memory:``)."""
    if not a or not b or ":memory:" in (a, b) or a.startswith("file:") or b.startswith("file:"):
        return False
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


