"""SQLite backend: the file's tables, opening a connection, checks and embedding blobs."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from emotional_memory.interfaces import UnstorableValueError
from emotional_memory.models import Memory
from emotional_memory.stores._shared.rows.store import EmbeddingDimensionError
from emotional_memory.stores.sqlite.original_layout import MEMORY_TABLE
from emotional_memory.stores.sqlite.records import (
    REC_AT,
    RECORD_COLUMNS,
    ROW_COLUMNS,
    memory_params,
    row_memory,
)

# ------------------------------------------------------------------ schema
# The whole table layout and its migrations are here, in records.py (a row's
# columns) and in original_layout.py.
#
# Version 3 (this one): ``meta(key, value)``; ``em_memories(seq, id, content,
# embedding, dim, tag, metadata, scope, expires_at, rec, label, link_ids, link_data)``;
# ``changes(seq, id, deleted)``. A memory of the compact shape keeps its tag in ``rec``
# (the tag's numbers and the embedding norm), ``label`` and ``link_ids`` /
# ``link_data`` (its links) with ``tag = ''``; any other keeps the tag's JSON in
# ``tag`` and NULL in the four (see records.py), so a reopen decodes the
# table in bulk.
# Version 2 had no ``rec`` .. ``link_data``: the opening transaction adds them and
# rewrites every row whose memory fits the compact shape.
# ``embedding`` is the little-endian float32 blob of the embedding when every value is
# a float32 number, else its float64 blob (``len(blob) == 4 * dim`` or ``8 * dim``):
# stored exactly. ``scope`` is the memory's scope path as a JSON array of strings
# (``'[]'``: the root) and ``expires_at`` its expiry in integer microseconds since the
# epoch (NULL: never), both indexed.
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

# The scope and expiry columns added to a table of version 1 (renamed to
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


class SQLiteBusyError(sqlite3.OperationalError):
    """SQLite's "database is locked": another connection held the file's write lock
    for the whole busy timeout (nothing was written). The message names the file and
    the wait; ``sqlite_errorcode`` / ``sqlite_errorname`` are SQLite's, as on the
    :class:`sqlite3.OperationalError` it replaces."""


def begin_immediate(conn: sqlite3.Connection, path: str, timeout: float) -> None:
    """``BEGIN IMMEDIATE`` on ``conn``; a busy timeout -> :class:`SQLiteBusyError`.

    Args:
        conn: an open connection in autocommit mode, outside any transaction.
        path: the database file (for the message).
        timeout: the connection's busy timeout in seconds (for the message).

    Raises:
        SQLiteBusyError: another connection kept the write lock past ``timeout``.
    """
    with busy_named(path, timeout):
        conn.execute("BEGIN IMMEDIATE")


@contextmanager
def busy_named(path: str, timeout: float) -> Iterator[None]:
    """Around statements on ``path``: SQLite's "database is locked" becomes
    :class:`SQLiteBusyError` (:func:`busy_error`)."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        busy = busy_error(exc, path, timeout)
        if busy is None:
            raise
        raise busy from exc


@contextmanager
def too_big_named(conn: sqlite3.Connection, rows: Sequence[Sequence[Any]]) -> Iterator[None]:
    """Around writing ``rows``: SQLite's "string or blob too big" becomes
    :class:`UnstorableValueError` (:func:`too_big_error`)."""
    try:
        yield
    except sqlite3.DataError as exc:
        big = too_big_error(conn, exc, rows)
        if big is None:
            raise
        raise big from None


def busy_error(exc: BaseException, path: str, timeout: float) -> SQLiteBusyError | None:
    """The :class:`SQLiteBusyError` of SQLite's "database is locked" ``exc``.

    Args:
        exc: an exception raised by a statement on ``path``.
        path: the database file (for the message).
        timeout: the connection's busy timeout in seconds (for the message).

    Returns:
        The error to raise instead (``exc`` as its cause), or None when ``exc`` is
        something else (or already one).
    """
    name = getattr(exc, "sqlite_errorname", "")
    if not isinstance(exc, sqlite3.OperationalError) or isinstance(exc, SQLiteBusyError) \
            or not name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return None
    busy = SQLiteBusyError(
        f"{exc}: {path!r} (another connection held its write lock for the whole "
        f"busy timeout of {timeout:g} s; nothing was written)"
    )
    busy.sqlite_errorname = name
    busy.sqlite_errorcode = exc.sqlite_errorcode
    return busy


_ROW_WIDTH = len(ROW_COLUMNS.split(","))
# fields of an _UPSERT row that SQLite's length limit may refuse, by parameter index
_SIZED_FIELDS = ((0, "id"), (1, "content"), (2, "embedding"), (4, "tag"), (5, "metadata"),
                 (6, "scope"))


def too_big_error(
    conn: sqlite3.Connection, exc: BaseException, rows: Sequence[Sequence[Any]]
) -> UnstorableValueError | None:
    """The :class:`UnstorableValueError` of sqlite3's "string or blob too big" ``exc``
    raised writing ``rows`` (:data:`_UPSERT` parameters), naming the memory and the
    largest field of the first row past SQLite's length limit.

    Returns:
        The error to raise instead, or None when ``exc`` is something else.
    """
    if not isinstance(exc, sqlite3.DataError) or "too big" not in str(exc):
        return None
    limit = conn.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)

    def size(value: Any) -> int:
        if isinstance(value, str):
            return len(value.encode("utf-8", "surrogatepass"))
        return len(value) if isinstance(value, bytes) else 0

    fitting = [row for row in rows if len(row) == _ROW_WIDTH]
    if not fitting:
        return None
    sizes = [{name: size(row[i]) for i, name in _SIZED_FIELDS} for row in fitting]
    at = next((k for k, each in enumerate(sizes) if sum(each.values()) >= limit),
              max(range(len(sizes)), key=lambda k: max(sizes[k].values())))
    field = max(sizes[at], key=lambda name: sizes[at][name])
    return UnstorableValueError(
        field, f"{field} of memory {str(fitting[at][0])[:80]!r} ({sizes[at][field]} bytes) "
        f"makes a row past SQLite's length limit of {limit} bytes; nothing was written",
    )


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


def create_schema(conn: sqlite3.Connection, path: str, timeout: float) -> None:
    """:func:`_create_tables` in one write transaction on ``conn`` (a refused version
    names ``path``; ``timeout``: the busy timeout, for a busy error's message)."""
    begin_immediate(conn, path, timeout)
    try:
        try:
            _create_tables(conn)
        except ValueError as exc:
            raise ValueError(f"{path!r} has {exc}") from None
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # an I/O error may have rolled it back: its reason
            conn.execute("ROLLBACK")
        raise


def check_memory_file(conn: sqlite3.Connection, name: str) -> None:
    """Refuse a foreign database (:func:`_check_foreign`) or a file of a newer schema
    version before anything is written (the open's switch to WAL included), as
    :func:`_create_tables` would in its transaction."""
    _check_foreign(conn, name)
    check_schema_version(conn, name)


def check_schema_version(conn: sqlite3.Connection, name: str) -> None:
    """Refuse a file whose recorded schema version is newer than this library's, or
    no whole number (written by something else), before anything is written.

    Args:
        conn: a connection to the file, outside any write.
        name: the file's path (for the message).

    Raises:
        ValueError: naming the file and the version.
    """
    if conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    ).fetchone() is None:
        return
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        return
    value = str(row[0])
    if not (value.isascii() and value.isdigit()):
        raise ValueError(
            f"{name!r} has schema version {value!r}, which is not a whole number; "
            "refusing to change it"
        )
    if int(value) > SCHEMA_VERSION:
        raise ValueError(
            f"{name!r} has schema version {value}; this library reads up to {SCHEMA_VERSION}"
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
    first: Memory | None = None
    for m in memories:
        if not m.embedding:
            continue
        if first is None:
            first = m
        elif len(m.embedding) != len(first.embedding or ()):
            raise ValueError(
                f"memory {m.id!r} has an embedding of {len(m.embedding)} dimensions, "
                f"memory {first.id!r} (the first with one) of {len(first.embedding or ())}: "
                "a store holds embeddings of one dimension"
            )
    conn.executemany(_UPSERT, [memory_params(m)[1] for m in memories])



@contextmanager
def read_snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """One read transaction around the block (none when one is open already): its
    statements see one committed state of the file, not parts of several."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")


def read_changed(
    conn: sqlite3.Connection, since: int
) -> tuple[list[tuple[int, str, int]], list[str], set[str], list[Any]] | None:
    """The change log after sequence number ``since`` and the rows it names.

    Returns:
        ``(log, changed ids in log order, deleted ids, their present rows as
        (seq, *ROW_COLUMNS) in seq order)``, or None when the log no longer reaches
        back to ``since`` (or holds nothing after it).
    """
    log = conn.execute(
        "SELECT seq, id, deleted FROM changes WHERE seq > ? ORDER BY seq", (since,)
    ).fetchall()
    oldest = conn.execute("SELECT MIN(seq) FROM changes").fetchone()[0]
    if not log or oldest is None or oldest > since + 1:
        return None
    changed = list(dict.fromkeys(memory_id for _, memory_id, _ in log))
    deleted = {memory_id for _, memory_id, gone in log if gone}
    rows: list[Any] = []
    for start in range(0, len(changed), 500):
        chunk = changed[start:start + 500]
        marks = ",".join("?" * len(chunk))
        rows += conn.execute(
            f"SELECT seq, {_ROW_COLUMNS} FROM em_memories WHERE id IN ({marks})", chunk
        ).fetchall()
    rows.sort(key=lambda row: row[0])
    return log, changed, deleted, rows

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
        SQLiteBusyError: another connection kept the file locked past ``timeout``.
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
        busy = busy_error(exc, name, timeout)
        if busy is not None:
            raise busy from exc
        raise type(exc)(f"{name!r}: {exc}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def database_file(conn: sqlite3.Connection) -> str:
    """The absolute path of ``conn``'s main database file, as SQLite resolved it when
    the connection opened (``""``: a private in-memory database); a later change of
    the working folder does not move it.

    Args:
        conn: an open connection.

    Returns:
        The path, or ``""``.
    """
    return next((str(row[2]) for row in conn.execute("PRAGMA database_list")
                 if row[1] == "main"), "")


def check_timeout(value: float) -> float:
    """``timeout``: seconds >= 0 (finite) to wait for another connection's write lock.

    Raises:
        ValueError: anything else (a bool, str, None, negative, NaN or infinite).
    """
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not 0 <= value < float("inf"):
        raise ValueError(f"timeout must be seconds >= 0 (finite), got {value!r}")
    return value


def check_path(path: str | os.PathLike[str]) -> str:
    """The database path as a string, refusing paths that would silently keep nothing.

    Args:
        path: a file path or ``":memory:"``.

    Returns:
        ``os.fspath(path)``.

    Raises:
        TypeError: not a str or path-like.
        ValueError: ``""``, a NUL character, a ``file:`` URI, or a directory.
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
    if "\x00" in name:
        raise ValueError(f"path {name!r} holds a NUL character, which no file name can")
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
