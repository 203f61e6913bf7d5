"""Durable memory store on the standard library's sqlite3 (SPEC 2, 5, 8).

The table is the source of truth; an :class:`~emotional_memory.stores.in_memory.
InMemoryStore` rebuilt from it on open serves every read, so lookups and
:meth:`SQLiteStore.search_by_embedding` run on in-memory numpy columns. A memory's
tag is stored as the numbers the cache keeps (see
:mod:`~emotional_memory.stores._sqlite_records`), so the rebuild decodes the table
column by column, without a ``Memory`` per row.

Embeddings are stored exactly: as little-endian float32 blobs when every value is a
float32 number (what embedders produce; half the space of float64), else as float64
blobs. The memory kept in the cache - and returned by :meth:`SQLiteStore.get` - carries
the JSON round-tripped metadata, exactly what a reopen would read back. The tables have
names of their own (``em_memories``, ...), so a file written by the original library
keeps the original's tables untouched (see
:mod:`emotional_memory.stores.original_layout`).

The database runs in WAL mode with ``synchronous=NORMAL``: readers never block the
writer, and other connections (another store, an
:class:`~emotional_memory.state_stores.sqlite.SQLiteAffectiveStateStore`, another
process) may open the same file. Every operation first picks up what other
connections committed: ``PRAGMA data_version`` tells (at the cost of one pragma)
whether anyone else committed since this connection last looked, and the ``changes``
table, to which every transaction that writes memories appends their ids, tells
which memories changed (a state saved by another connection reloads nothing); only
those rows are read again. Writes run inside ``BEGIN
IMMEDIATE`` on a cache brought up to date after the write lock is taken, so a
read-modify-write always starts from the file's current rows and no update of
another connection is lost.
"""

from __future__ import annotations

import gc
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime
from types import TracebackType
from typing import Any

import numpy as np

from emotional_memory._bank import CandidateBank, LexicalQuery
from emotional_memory._validation import memory_id as check_id
from emotional_memory.kernel.columns import MemoryColumns
from emotional_memory.kernel.lexical import LexicalInputs
from emotional_memory.lexical import LexicalIndex
from emotional_memory.models import Memory
from emotional_memory.stores._bulk_load import fill_rows
from emotional_memory.stores._linking import ForwardLink, LinkCandidates, Linker
from emotional_memory.stores._selected import SelectedRows
from emotional_memory.stores._sqlite_records import (
    REC_AT,
    RECORD_COLUMNS,
    ROW_COLUMNS,
    decode_rows,
    encode_link_ids,
    memory_params,
    row_memory,
    row_params,
)
from emotional_memory.stores.in_memory import EmbeddingDimensionError, InMemoryStore
from emotional_memory.stores.original_layout import MEMORY_TABLE, prepare_memory_file
from emotional_memory.stores.selection import Selection

# ------------------------------------------------------------------ schema
# The whole table layout and its migrations are here, in _sqlite_records.py (a row's
# columns) and in original_layout.py.
#
# Version 3 (this one): ``meta(key, value)``; ``em_memories(seq, id, content,
# embedding, dim, tag, metadata, scope, expires_at, rec, label, link_ids, link_data)``;
# ``changes(seq, id, deleted)``. A memory of the compact shape keeps its tag in ``rec``
# (the tag's numbers and the embedding norm), ``label`` and ``link_ids`` /
# ``link_data`` (its links) with ``tag = ''``; any other keeps the tag's JSON in
# ``tag`` and NULL in the four (see _sqlite_records.py), so a reopen decodes the
# table in bulk.
# Version 2 had no ``rec`` .. ``link_data``: the opening transaction adds them and
# rewrites every row whose memory fits the compact shape (issue 27).
# ``embedding`` is the little-endian float32 blob of the embedding when every value is
# a float32 number, else its float64 blob (``len(blob) == 4 * dim`` or ``8 * dim``):
# stored exactly. ``scope`` is the memory's scope path as a JSON array of strings
# (``'[]'``: the root) and ``expires_at`` its expiry in integer microseconds since the
# epoch (NULL: never), both indexed (issue 23).
# Version 1 named the memory table ``memories`` (and renamed a file's original
# ``memories`` to ``memories_v0_18``); original_layout.prepare_memory_file renames both
# back on the first open, so the original library's ``memories`` table is never ours;
# _create_tables then adds the scope and expiry columns (existing rows: root, never).
SCHEMA_VERSION = 3

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS em_memories (
        seq       INTEGER PRIMARY KEY AUTOINCREMENT,
        id        TEXT NOT NULL UNIQUE,
        content   TEXT NOT NULL,
        embedding BLOB,
        dim       INTEGER,
        tag       TEXT NOT NULL,
        metadata  TEXT NOT NULL,
        scope     TEXT NOT NULL DEFAULT '[]',
        expires_at INTEGER,
        rec       BLOB,
        label     TEXT,
        link_ids  TEXT,
        link_data BLOB
    )""",
    # One row per memory written (or deleted) by a committed transaction, so other
    # connections refresh only those memories. Only the last _CHANGE_LOG rows are kept;
    # a connection further behind rebuilds its whole cache.
    """CREATE TABLE IF NOT EXISTS changes (
        seq     INTEGER PRIMARY KEY AUTOINCREMENT,
        id      TEXT NOT NULL,
        deleted INTEGER NOT NULL
    )""",
)

_CHANGE_LOG = 4096
_LOG_CHANGE = "INSERT INTO changes (id, deleted) VALUES (?, ?)"
_PRUNE_CHANGES = "DELETE FROM changes WHERE seq <= (SELECT MAX(seq) FROM changes) - ?"

_UPSERT = f"""INSERT INTO em_memories ({ROW_COLUMNS})
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT(id) DO UPDATE SET
    content = excluded.content,
    embedding = excluded.embedding,
    dim = excluded.dim,
    tag = excluded.tag,
    metadata = excluded.metadata,
    scope = excluded.scope,
    expires_at = excluded.expires_at,
    rec = excluded.rec,
    label = excluded.label,
    link_ids = excluded.link_ids,
    link_data = excluded.link_data"""
# A compact row whose links alone changed (the backward links of encode_batch).
_UPDATE_LINKS = (
    "UPDATE em_memories SET link_ids = ?, link_data = ? WHERE id = ? AND rec IS NOT NULL"
)

# The scope and expiry columns (issue 23), added to a table of version 1 (renamed to
# em_memories) in the opening transaction, and their indexes.
_PLACE_COLUMNS = (
    ("scope", "ALTER TABLE em_memories ADD COLUMN scope TEXT NOT NULL DEFAULT '[]'"),
    ("expires_at", "ALTER TABLE em_memories ADD COLUMN expires_at INTEGER"),
)
_PLACE_INDEXES = (
    "CREATE INDEX IF NOT EXISTS em_memories_scope ON em_memories (scope)",
    "CREATE INDEX IF NOT EXISTS em_memories_expires_at ON em_memories (expires_at)",
)
_ROW_COLUMNS = ROW_COLUMNS


class SQLiteDimensionError(EmbeddingDimensionError, sqlite3.OperationalError):
    """An embedding dimension mismatch on a :class:`SQLiteStore` (store unchanged).

    A :class:`ValueError` like on every store, and also the
    :class:`sqlite3.OperationalError` the original's SQLite store raised here, so code
    written for the original that catches that keeps working.
    """


class SQLiteClosedError(ValueError, sqlite3.ProgrammingError):
    """An operation on a closed :class:`SQLiteStore`.

    A :class:`ValueError`, and also the :class:`sqlite3.ProgrammingError` the original
    raised for a closed store's connection.
    """


def _create_tables(conn: sqlite3.Connection) -> None:
    """This version's tables (if missing) and its schema version, on an open
    transaction; refuses a file of a newer version."""
    for statement in _SCHEMA:
        conn.execute(statement)
    conn.execute(
        "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
        (str(SCHEMA_VERSION),),
    )
    version = int(conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise ValueError(f"schema version {version}; this library reads up to {SCHEMA_VERSION}")
    have = {row[1] for row in conn.execute(f'PRAGMA table_info("{MEMORY_TABLE}")')}
    for column, statement in _PLACE_COLUMNS:
        if column not in have:
            conn.execute(statement)
    for column, kind in RECORD_COLUMNS:
        if column not in have:
            conn.execute(f"ALTER TABLE em_memories ADD COLUMN {column} {kind}")
    for statement in _PLACE_INDEXES:
        conn.execute(statement)
    if version < 3:
        _upgrade_records(conn)
    if version < SCHEMA_VERSION:  # prepare_memory_file already renamed the tables
        conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
        )


def _upgrade_records(conn: sqlite3.Connection) -> None:
    """Rewrite the rows of an older version whose memory fits the compact shape as
    records (in the opening transaction; the memories themselves do not change, so
    other connections' caches stay valid and nothing is logged)."""
    rows = conn.execute(f"SELECT {_ROW_COLUMNS} FROM em_memories WHERE rec IS NULL").fetchall()
    updates = []
    for row in rows:
        params = memory_params(row_memory(row))[1]
        if params[REC_AT] is not None:
            updates.append((*params[1:], params[0]))
    conn.executemany(
        "UPDATE em_memories SET content = ?, embedding = ?, dim = ?, tag = ?, metadata = ?, "
        "scope = ?, expires_at = ?, rec = ?, label = ?, link_ids = ?, link_data = ? "
        "WHERE id = ?",
        updates,
    )


def _fill_memories(conn: sqlite3.Connection, memories: list[Memory]) -> None:
    """Write memories, in order, to an empty ``em_memories`` (a migration's copy)."""
    dims = {len(m.embedding) for m in memories if m.embedding}
    if len(dims) > 1:
        raise ValueError(f"memories hold embeddings of several dimensions {sorted(dims)}")
    conn.executemany(_UPSERT, [memory_params(m)[1] for m in memories])


# ------------------------------------------------------------- end of schema


def open_connection(
    path: str | os.PathLike[str],
    *,
    timeout: float = 30.0,
    check_same_thread: bool = False,
    check: Callable[[sqlite3.Connection], None] | None = None,
) -> sqlite3.Connection:
    """Open a sqlite3 connection set up the way the stores expect.

    Autocommit mode (transactions are explicit ``BEGIN IMMEDIATE``), WAL journal,
    ``synchronous=NORMAL``, and a busy timeout so concurrent connections wait for the
    write lock instead of failing at once.

    Args:
        path: database file (``":memory:"`` for a private in-memory database).
        timeout: seconds to wait for another connection's write lock.
        check_same_thread: sqlite3's thread check (callers guard with a lock).
        check: called with the connection before anything is written (before the
            switch to WAL); raising there leaves the file untouched.

    Returns:
        The open connection.

    Raises:
        ValueError: for ``""`` (a temporary database that keeps nothing) or a
            ``file:`` URI (taken as a literal file name by sqlite3).
        sqlite3.DatabaseError: the file is not a usable database (the path named).
    """
    name = check_path(path)
    try:
        conn = sqlite3.connect(
            name,
            timeout=timeout,
            isolation_level=None,
            check_same_thread=check_same_thread,
        )
    except sqlite3.Error as exc:
        raise type(exc)(f"cannot open {name!r}: {exc}") from exc
    try:
        if check is not None:
            check(conn)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise type(exc)(f"{name!r}: {exc}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def check_path(path: str | os.PathLike[str]) -> str:
    """The database path as a string, refusing paths that would silently keep nothing.

    Args:
        path: a file path or ``":memory:"``.

    Returns:
        ``os.fspath(path)``.

    Raises:
        TypeError: not a str or path-like.
        ValueError: ``""``, a ``file:`` URI, or a directory.
        FileNotFoundError: the directory the file would live in does not exist.
    """
    try:
        name = os.fspath(path)
    except TypeError:
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}") from None
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    if name == "":
        raise ValueError(
            "path is '': sqlite3 would open a temporary database that keeps nothing; "
            "pass a file path, or ':memory:' for a private in-memory database"
        )
    if name.startswith("file:"):
        raise ValueError(
            f"path {name!r} is a URI; pass a file path (or ':memory:'): URIs are not "
            "supported"
        )
    if name != ":memory:":
        if os.path.isdir(name):
            raise ValueError(f"path {name!r} is a directory; pass the path of a database file")
        parent = os.path.dirname(os.path.abspath(name))
        if not os.path.isdir(parent):
            raise FileNotFoundError(
                f"path {name!r}: the directory {parent!r} does not exist (create it first)"
            )
    return name


# Columns of a ``memories`` table this store reads, and of the original library's
# (``id, content, data``), which open as well.
_OUR_COLUMNS = frozenset({"seq", "id", "content", "embedding", "dim", "tag", "metadata"})
_ORIGINAL_COLUMNS = frozenset({"id", "content", "data"})
_KNOWN_TABLES = frozenset(
    {"meta", "memories", "affective_state", "em_memories", "em_affective_state"}
)


def _check_foreign(conn: sqlite3.Connection, name: str) -> None:
    """Refuse, before anything is written, a database that belongs to something else.

    A database with tables but none of this library's (``meta``, ``memories``,
    ``affective_state``), or whose ``memories`` / ``meta`` tables have other columns,
    is another application's: opening it would add tables and switch it to WAL.
    """
    tables = [row[0] for row in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    )]
    if not tables:
        return

    def columns(table: str) -> set[str]:
        return {row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')}

    ours = [t for t in tables if t in _KNOWN_TABLES]
    if "memories" in ours and not columns("memories") >= _ORIGINAL_COLUMNS:
        ours.remove("memories")
    if MEMORY_TABLE in ours and not columns(MEMORY_TABLE) >= _OUR_COLUMNS:
        ours.remove(MEMORY_TABLE)
    if "meta" in ours and not {"key", "value"} <= columns("meta"):
        ours.remove("meta")
    if not ours or any(t in tables and t not in ours for t in ("memories", "meta", MEMORY_TABLE)):
        raise ValueError(
            f"{name!r} is not an emotional_memory database (tables: {sorted(tables)}); "
            "refusing to change it"
        )


def _pack_embedding(embedding: Sequence[float]) -> bytes:
    """Pack a vector as little-endian float32 bytes (the original's vector-index blob).

    Kept under the original's name so code written for the original 0.18.1 that packs
    vectors for its ``memory_vec`` index keeps working; this store's own rows use
    :func:`_encode_embedding`, which keeps float64 values exactly.

    Args:
        embedding: the vector, shape ``(dim,)``.

    Returns:
        ``4 * dim`` bytes.
    """
    return np.asarray(embedding, dtype="<f4").reshape(-1).tobytes()


def _unpack_embedding(blob: bytes) -> list[float]:
    """Inverse of :func:`_pack_embedding`: little-endian float32 bytes to a float list.

    Args:
        blob: ``4 * dim`` bytes.

    Returns:
        The ``dim`` values as Python floats.

    Raises:
        ValueError: the blob's length is not a multiple of 4.
    """
    if len(blob) % 4:
        raise ValueError(f"a float32 vector blob has a multiple of 4 bytes, got {len(blob)}")
    return np.frombuffer(blob, dtype="<f4").astype(np.float64).tolist()


class SQLiteStore:
    """A durable :class:`~emotional_memory.interfaces.MemoryStore` in one SQLite file.

    Every write outside :meth:`transaction` commits on its own; inside, all writes
    commit together or not at all. Reads come from an in-memory column cache, so
    the column-cache API of :class:`InMemoryStore` is available too
    (:meth:`embedding_matrix`, :attr:`dim`, :attr:`capacity`, :attr:`reallocations`).
    Thread-safe: a re-entrant lock guards the connection and the cache.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        check_same_thread: bool = False,
        timeout: float = 30.0,
    ) -> None:
        """Open (creating if needed) the store at ``path``.

        A file written by the original library (0.18.1) gets this library's tables,
        filled from the original's, which stay as they were (the original still opens
        the file); see :mod:`emotional_memory.stores.original_layout`.

        Args:
            path: database file; ``":memory:"`` (the default, as in the original)
                gives a private, non-durable database.
            check_same_thread: passed to :func:`sqlite3.connect`.
            timeout: seconds to wait for another connection's write lock.

        Raises:
            ValueError: when the file holds a newer schema version than this library.
        """
        self._path = check_path(path)
        self._lock = threading.RLock()
        prepare_memory_file(path, _create_tables, _fill_memories, timeout=timeout)
        self._conn: sqlite3.Connection | None = open_connection(
            path, timeout=timeout, check_same_thread=check_same_thread,
            check=lambda conn: _check_foreign(conn, self._path),
        )
        self._depth = 0
        self._dirty = False  # the open transaction wrote memories
        self._tx_changes: list[tuple[str, int]] = []  # (id, deleted) written by it
        self._data_version: int | None = None  # PRAGMA data_version last seen
        self._changes = 0  # the file's memory change counter the cache reflects
        self._cache = InMemoryStore()
        try:
            self._create_schema()
            self._load()
            self._data_version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            self._conn = None
            raise type(exc)(f"{self._path!r}: {exc}") from exc
        except BaseException:
            self._conn.close()
            self._conn = None
            raise

    # ---------------------------------------------------------------- lifecycle

    @property
    def path(self) -> str:
        """The database path this store was opened with."""
        return self._path

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._conn is None

    def close(self) -> None:
        """Close the connection (idempotent). Later calls raise ``ValueError``."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __repr__(self) -> str:
        """``SQLiteStore('<path>', count=<n>)`` (``count=closed`` once closed)."""
        if self._conn is None:
            return f"SQLiteStore({self._path!r}, count=closed)"
        return f"SQLiteStore({self._path!r}, count={len(self)})"

    def __enter__(self) -> SQLiteStore:
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

    def refresh(self) -> None:
        """Rebuild the in-memory cache from the database (after another process wrote).

        Raises:
            RuntimeError: inside a transaction.
        """
        with self._lock:
            self._connection()
            if self._depth:
                raise RuntimeError("cannot refresh inside a transaction")
            self._data_version = None
            self._load()

    def rebuild_vector_index(self) -> int:
        """Rebuild the search index from the table (the original's sqlite-vec method).

        The index here is the in-memory column cache, so this is :meth:`refresh`.

        Returns:
            The number of memories with an embedding now indexed.

        Raises:
            RuntimeError: inside a transaction.
        """
        with self._lock:
            self.refresh()
            return sum(1 for m in self._cache.list_all() if m.embedding)

    # ------------------------------------------------------------- transactions

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All-or-nothing block: ``BEGIN IMMEDIATE`` ... ``COMMIT``, ``ROLLBACK`` on error.

        Re-entrant: nested blocks join the outer transaction through a SAVEPOINT,
        so a failing inner block undoes only its own writes. On rollback the cache is
        reverted too. The store's lock is held for the whole block.

        Yields:
            None.
        """
        with self._lock:
            conn = self._connection()
            depth = self._depth
            savepoint = f"emotional_memory_sp{depth}"
            conn.execute("BEGIN IMMEDIATE" if depth == 0 else f"SAVEPOINT {savepoint}")
            if depth == 0:
                self._dirty = False
                self._tx_changes = []
                try:  # the write lock is held: the cache now meets the current rows
                    self._sync()
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            changes_before = self._changes
            mark = self._cache._tx_begin()
            self._depth = depth + 1
            try:
                yield
                if depth == 0:
                    if self._dirty:
                        conn.executemany(_LOG_CHANGE, self._tx_changes)
                        conn.execute(_PRUNE_CHANGES, (_CHANGE_LOG,))
                        self._changes = self._read_changes()
                        self._tx_changes = []
                    conn.execute("COMMIT")
                else:
                    conn.execute(f"RELEASE SAVEPOINT {savepoint}")
            except BaseException:
                self._depth = depth
                self._cache._tx_rollback(mark)
                if depth == 0:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    self._changes = changes_before  # the file's counter was not bumped
                else:
                    conn.execute(f"ROLLBACK TO SAVEPOINT {savepoint}")
                    conn.execute(f"RELEASE SAVEPOINT {savepoint}")
                raise
            self._depth = depth
            self._cache._tx_commit()

    # ------------------------------------------------------------------ protocol

    def save(self, memory: Memory) -> None:
        """Insert a memory, or replace the one with the same id (keeping its position).

        The embedding is stored exactly (float32 or float64 blob, see the module).

        Args:
            memory: the memory to store.

        Raises:
            TypeError: when ``memory`` is not a :class:`Memory` or its metadata is not
                JSON-serialisable.
            ValueError: on an embedding dimension mismatch (store unchanged).
        """
        if not isinstance(memory, Memory):
            raise TypeError(f"memory must be a Memory, got {type(memory).__name__}")
        stored, params = self._prepare(memory)
        try:
            self._write(lambda: self._cache.save(stored), _UPSERT, params)
        except EmbeddingDimensionError as exc:
            raise SQLiteDimensionError(str(exc)) from None

    def get(self, memory_id: str) -> Memory | None:
        """Look a memory up by id.

        Args:
            memory_id: the id.

        Returns:
            The memory, or None when absent.
        """
        check_id(memory_id)
        with self._lock:
            self._sync()
            return self._cache.get(memory_id)

    def update(self, memory: Memory) -> None:
        """Replace an existing memory in place.

        Args:
            memory: the new version; its id must already be stored.

        Raises:
            KeyError: when no memory has this id.
            ValueError: on an embedding dimension mismatch (store unchanged).
        """
        if not isinstance(memory, Memory):
            raise TypeError(f"memory must be a Memory, got {type(memory).__name__}")
        stored, params = self._prepare(memory)
        with self._lock, self._joined():
            if memory.id not in self._cache:
                raise KeyError(memory.id)
            try:
                self._write(lambda: self._cache.update(stored), _UPSERT, params)
            except EmbeddingDimensionError as exc:
                raise SQLiteDimensionError(str(exc)) from None

    def delete(self, memory_id: str) -> bool:
        """Remove a memory.

        Args:
            memory_id: the id.

        Returns:
            True when the memory existed.
        """
        check_id(memory_id)
        with self._lock:
            self._sync()
            if memory_id not in self._cache:
                return False
        with self._lock, self._joined():
            if memory_id not in self._cache:  # deleted by another connection meanwhile
                return False
            self._write(
                lambda: self._cache.delete(memory_id),
                "DELETE FROM em_memories WHERE id = ?",
                (memory_id,),
            )
            return True

    def list_all(self) -> list[Memory]:
        """All memories, in insertion order."""
        with self._lock:
            self._sync()
            return self._cache.list_all()

    def list_page(self, offset: int, limit: int) -> list[Memory]:
        """``list_all()[offset:offset + limit]`` (from the cache: O(limit) memories)."""
        with self._lock:
            self._sync()
            return self._cache.list_page(offset, limit)

    def lexical_index(self) -> LexicalIndex:
        """The inverted index of memory contents (lexical signal s7).

        Kept by the in-memory cache, built from the durable ``content`` column when
        first needed after the file is opened (or refreshed) and updated with every
        write, in step with the transaction (a rollback reverts it). Values are those
        of :class:`~emotional_memory.stores.in_memory.InMemoryStore` for the same
        memories.

        Returns:
            The :class:`~emotional_memory.lexical.LexicalIndex`.
        """
        with self._lock:
            self._sync()  # other connections' commits first, like every read
            return self._cache.lexical_index()

    def lexical_search(
        self, terms: Sequence[str], k: int, k1: float = 1.2, b: float = 0.75,
        analysis: str = "none",
    ) -> list[str]:
        """:meth:`InMemoryStore.lexical_search` over the current rows (other
        connections' commits included), under the store's lock."""
        with self._lock:
            self._sync()
            return self._cache.lexical_search(terms, k, k1, b, analysis)

    def lexical_inputs(
        self, terms: Sequence[str], memory_ids: Sequence[str], analysis: str = "none"
    ) -> LexicalInputs:
        """:meth:`InMemoryStore.lexical_inputs` over the current rows (other
        connections' commits included), under the store's lock."""
        with self._lock:
            self._sync()
            return self._cache.lexical_inputs(terms, memory_ids, analysis)

    def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        """Nearest embedded memories by cosine similarity (SPEC 5).

        Same contract as :meth:`InMemoryStore.search_by_embedding`, computed on the
        cache's float64 copy of the stored embeddings.

        Args:
            embedding: the (D,) query vector.
            top_k: how many memories to return at most.

        Returns:
            Up to ``top_k`` memories, best first.
        """
        with self._lock:
            self._sync()
            return self._cache.search_by_embedding(embedding, top_k)

    def candidate_bank(
        self,
        embedding: Sequence[float] | np.ndarray | None,
        limit: int | None,
        now: datetime,
        *,
        also: Sequence[str] = (),
        lexical: LexicalQuery | None = None,
        with_memories: bool = False,
    ) -> CandidateBank:
        """The retrieval candidates of a query as columns, from the cache's rows
        (other connections' commits included); see
        :meth:`~emotional_memory.stores.columnar.ColumnarStore.candidate_bank`."""
        with self._lock:
            self._sync()
            return self._cache.candidate_bank(
                embedding, limit, now, also=also, lexical=lexical,
                with_memories=with_memories,
            )

    def columns(self, now: datetime) -> tuple[list[str], MemoryColumns]:
        """Every memory as float64 columns, in insertion order (see
        :meth:`InMemoryStore.columns`), from the cache's rows."""
        with self._lock:
            self._sync()
            ids, cols = self._cache.columns(now)
            return ids, cols  # type: ignore[return-value]  # every row is live

    def scoring_bank(
        self, now: datetime, dtype: Any = np.float32
    ) -> tuple[list[str | None], MemoryColumns, int | None]:
        """Every memory as padded JAX columns for batch scoring, from the cache's rows
        (see :meth:`~emotional_memory.stores.columnar.ColumnarStore.scoring_bank`)."""
        with self._lock:
            self._sync()
            return self._cache.scoring_bank(now, dtype)

    def selected(self, selection: Selection) -> Any:
        """This store confined to ``selection`` (see :meth:`InMemoryStore.selected`):
        reads answer from the cache's selected rows (other connections' commits
        first), writes go through this store.

        Args:
            selection: what an operation sees.

        Returns:
            A :class:`~emotional_memory.stores._selected.SelectedRows` view, or the
            store itself when nothing is confined.
        """
        with self._lock:
            self._sync()
            if selection.unconfined and not self._cache._any_expiry:
                return self
        return SelectedRows(lambda: self._cache, self, selection, sync=self._sync_if_open)

    def _sync_if_open(self) -> None:
        with self._lock:
            self._sync()

    def memories(self, memory_ids: Sequence[str]) -> list[Memory]:
        """The stored memories of ``memory_ids``, in order (missing ones skipped)."""
        with self._lock:
            self._sync()
            return self._cache.memories(memory_ids)

    def count(self) -> int:
        """Number of memories stored (same as ``len(store)``)."""
        return len(self)

    def __len__(self) -> int:
        """Number of memories stored."""
        with self._lock:
            self._sync()
            return len(self._cache)

    def __contains__(self, memory_id: object) -> bool:
        """Whether a memory with this id is stored."""
        with self._lock:
            self._sync()
            return memory_id in self._cache

    def linking_to(self, memory_ids: Iterable[str]) -> list[str]:
        """See :meth:`InMemoryStore.linking_to` (answered from the cache)."""
        with self._lock:
            self._sync()
            return self._cache.linking_to(memory_ids)

    def pending_ids(self) -> list[str]:
        """See :meth:`InMemoryStore.pending_ids` (answered from the cache)."""
        with self._lock:
            self._sync()
            return self._cache.pending_ids()

    def row_linker(self, block_size: int) -> Linker | None:
        """The cache's batched row linker, each block's rows then written in one go.

        ``encode_batch`` saves and links a block of new memories on the in-memory
        cache (one batched search, no ``Memory`` per candidate) inside the engine's
        transaction; the rows it changed (the new memories, and the old ones given
        backward links) are then upserted with one ``executemany``. The transaction
        makes both all-or-nothing, as for one write at a time.

        Args:
            block_size: memories saved and searched together.

        Returns:
            The linker, or None for a subclass overriding a protocol method (it is
            then linked through those methods).
        """
        from emotional_memory.stores.columnar import overrides_any

        if overrides_any(self, ("get", "list_all", "search_by_embedding", "save", "update")):
            return None
        inner = self._cache.row_linker(block_size)
        return None if inner is None else _SQLiteLinker(self, inner)

    def _write_rows_since(self, mark: int) -> int:
        """Upsert every row the cache changed since undo-log ``mark`` (in a transaction,
        lock held); returns the new mark."""
        cache = self._cache
        undo = cache._undo
        kinds: dict[str, set[str]] = {}
        for entry in undo[mark:]:
            kinds.setdefault(entry[1], set()).add(entry[0])
        rows: list[tuple[Any, ...]] = []
        links: list[tuple[str | None, bytes | None, str]] = []
        for memory_id, kind in kinds.items():
            row = cache._row_of.get(memory_id)
            if row is None:
                continue
            if kind == {"links"}:  # a compact row's links alone changed
                record = cache._links[row]
                if record is None:
                    links.append((None, None, memory_id))
                else:
                    links.append((encode_link_ids(record[0]), record[1], memory_id))
                continue
            rows.append(self._full_row(memory_id))
        conn = self._connection()
        if links and conn.executemany(_UPDATE_LINKS, links).rowcount != len(links):
            # some row is not a record in the file: write those rows whole
            rows += [self._full_row(memory_id) for _, _, memory_id in links]
        if rows:
            conn.executemany(_UPSERT, rows)
        if rows or links:
            self._dirty = True
            self._tx_changes.extend((memory_id, 0) for memory_id in kinds if memory_id in cache)
        return len(undo)

    def _full_row(self, memory_id: str) -> tuple[Any, ...]:
        """The SQL parameters of the cached memory ``memory_id`` (from its columns)."""
        cache = self._cache
        row = cache._row_of[memory_id]
        params = row_params(cache, row)
        if params is None:  # kept whole
            params = memory_params(cache._memory_at(row))[1]
        return params

    # ------------------------------------------------------------- column cache

    @property
    def dim(self) -> int | None:
        """The common embedding dimension, or None while no memory has an embedding."""
        return self._cache.dim

    @property
    def capacity(self) -> int:
        """Rows allocated in the cache's column arrays."""
        return self._cache.capacity

    @property
    def reallocations(self) -> int:
        """How many times the cache's column arrays were reallocated."""
        return self._cache.reallocations

    def embedding_matrix(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        """The embedding columns, as :meth:`InMemoryStore.embedding_matrix`.

        Returns:
            ``(ids, matrix, has_embedding)`` in insertion order (read-only arrays,
            valid until the next write).
        """
        with self._lock:
            self._sync()
            return self._cache.embedding_matrix()

    @property
    def schema_version(self) -> int:
        """The schema version recorded in the database's ``meta`` table."""
        with self._lock:
            row = (
                self._connection()
                .execute("SELECT value FROM meta WHERE key = 'schema_version'")
                .fetchone()
            )
            return int(row[0])

    # ---------------------------------------------------------------- internals

    def _write(self, cache_op: Callable[[], object], sql: str, params: tuple[Any, ...]) -> None:
        """Apply one cache change and its one SQL statement, both or neither.

        Outside a transaction this opens (and commits) its own. Inside one, a single
        statement is already atomic, so no savepoint is needed: a failure only has to
        undo the cache change.
        """
        with self._lock:
            if self._depth == 0:
                with self.transaction():
                    self._write(cache_op, sql, params)
                return
            conn = self._connection()
            mark = self._cache._tx_begin()
            try:
                cache_op()
                conn.execute(sql, params)
            except BaseException:
                self._cache._tx_rollback(mark)
                raise
            self._cache._tx_commit()
            self._dirty = True
            self._tx_changes.append((params[0], int(sql.startswith("DELETE"))))

    def _joined(self) -> AbstractContextManager[None]:
        """The open transaction (lock held), or a new one: a check and the write it
        guards then see the same rows."""
        return nullcontext() if self._depth else self.transaction()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise SQLiteClosedError("the SQLiteStore is closed")
        return self._conn

    def _sync(self) -> None:
        """Bring the cache up to what other connections committed (lock held).

        One ``PRAGMA data_version`` when nobody else committed; when someone did, the
        ``changes`` log says which memories changed, and only those rows are read
        again (the whole cache is rebuilt when the log no longer reaches back far
        enough, or when a memory was deleted and saved again, which moves it to the
        end of the insertion order). Inside a transaction nothing is done: its ``BEGIN
        IMMEDIATE`` synced, and no other connection can commit while it holds the
        write lock.
        """
        conn = self._connection()
        if self._depth:
            return
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        if version == self._data_version:
            return
        self._data_version = version
        if self._read_changes() != self._changes:
            self._refresh_changed()

    def _read_changes(self) -> int:
        """The newest change sequence number of the file (0 when none)."""
        row = self._connection().execute("SELECT MAX(seq) FROM changes").fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    def _refresh_changed(self) -> None:
        """Re-read the memories other connections changed since the cache's state."""
        conn = self._connection()
        log = conn.execute(
            "SELECT seq, id, deleted FROM changes WHERE seq > ? ORDER BY seq", (self._changes,)
        ).fetchall()
        oldest = conn.execute("SELECT MIN(seq) FROM changes").fetchone()[0]
        if not log or oldest is None or oldest > self._changes + 1:
            self._load()  # the log was pruned past this cache's state
            return
        changed = list(dict.fromkeys(memory_id for _, memory_id, _ in log))
        deleted = {memory_id for _, memory_id, gone in log if gone}
        rows: list[Any] = []
        for start in range(0, len(changed), 500):
            chunk = changed[start:start + 500]
            marks = ",".join("?" * len(chunk))
            rows += conn.execute(
                f"SELECT seq, {_ROW_COLUMNS} FROM em_memories "
                f"WHERE id IN ({marks})", chunk,
            ).fetchall()
        rows.sort(key=lambda row: row[0])
        present = {row[1] for row in rows}
        if present & deleted & set(self._cache._row_of):
            self._load()  # deleted and saved again: its insertion position moved
            return
        cache = self._cache
        for memory_id in changed:
            if memory_id not in present:
                cache.delete(memory_id)
        for row in rows:
            cache.save(row_memory(row[1:]))
        self._changes = max(seq for seq, _, _ in log)

    def _create_schema(self) -> None:
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            try:
                _create_tables(conn)
            except ValueError as exc:
                raise ValueError(f"{self._path!r} has {exc}") from None
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _load(self) -> None:
        """Rebuild the cache from the table, in insertion (``seq``) order."""
        self._changes = self._read_changes()
        # Loading builds many small containers (embedding lists, models) that all
        # survive; the cyclic GC would rescan them repeatedly, roughly doubling the
        # load time of a large store. Pause it for the load.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._load_rows()
        finally:
            if gc_was_enabled:
                gc.enable()

    def _load_rows(self) -> None:
        rows = (
            self._connection()
            .execute(f"SELECT {_ROW_COLUMNS} FROM em_memories ORDER BY seq")
            .fetchall()
        )
        cache = InMemoryStore()
        block = decode_rows(rows)
        if block is not None:  # every row a record: decoded column by column
            fill_rows(cache, block)
        else:  # a tag kept as JSON, or a malformed row: one memory per row (errors named)
            cache._load_bulk([row_memory(row) for row in rows], None)
        self._cache = cache

    @staticmethod
    def _prepare(memory: Memory) -> tuple[Memory, tuple[Any, ...]]:
        """The memory as a reopen would read it back, and the row's SQL parameters
        (:func:`~emotional_memory.stores._sqlite_records.memory_params`)."""
        return memory_params(memory)


class _SQLiteLinker(Linker):
    """:meth:`SQLiteStore.row_linker`: the cache's row linker, then the block's rows."""

    overlaps = False  # each block's rows are written when it is linked

    def __init__(self, store: SQLiteStore, inner: Linker) -> None:
        self._store = store
        self._inner = inner
        self.block_size = inner.block_size
        self._mark = 0

    def _begin(self) -> None:
        if self._store._depth == 0:
            raise RuntimeError("SQLiteStore.row_linker runs inside store.transaction()")
        self._mark = len(self._store._cache._undo)

    def settle(self) -> None:
        """See :meth:`Linker.settle`."""
        self._inner.settle()

    def save(
        self, memories: Sequence[Memory], vectors: Sequence[np.ndarray | None] | None = None
    ) -> None:
        """See :meth:`Linker.save`: the block's rows are written at once."""
        self._begin()
        self._inner.save(memories, vectors)
        self._inner.settle()
        self._mark = self._store._write_rows_since(self._mark)

    def save_and_find(
        self,
        memories: Sequence[Memory],
        limit: int,
        vectors: Sequence[np.ndarray | None] | None = None,
    ) -> Iterator[LinkCandidates]:
        """See :meth:`Linker.save_and_find` (rows written by :meth:`flush`)."""
        self._begin()
        return self._inner.save_and_find(memories, limit, vectors)

    def link(
        self,
        memory: Memory,
        candidates: LinkCandidates,
        links: list[ForwardLink],
        max_links: int,
    ) -> None:
        """See :meth:`Linker.link`."""
        self._inner.link(memory, candidates, links, max_links)

    def flush(self) -> None:
        """See :meth:`Linker.flush`, then upsert the rows the block changed."""
        self._inner.flush()
        self._inner.settle()
        self._mark = self._store._write_rows_since(self._mark)

    def stored(self, memory: Memory) -> Memory:
        """See :meth:`Linker.stored`."""
        return self._inner.stored(memory)
