"""Open SQLite files written by the original library (0.18.1): a one-time migration.

The original keeps memories as ``memories(id TEXT PRIMARY KEY, content TEXT, data
TEXT)`` with the whole memory as JSON in ``data`` (plus a ``memory_vec`` sqlite-vec
table for its nearest-neighbour search), and the affective state as
``affective_state(slot TEXT PRIMARY KEY, data TEXT)`` under slot ``'current'``.

:func:`migrate_memories` and :func:`migrate_state` convert such a file to this
library's layout the first time a store opens it:

- one ``BEGIN IMMEDIATE`` ... ``COMMIT`` transaction: an interrupted or failing
  migration rolls back and leaves the file exactly as it was;
- nothing is lost: the original table is kept, renamed ``memories_v0_18`` /
  ``affective_state_v0_18``; the ``memory_vec`` table is left untouched (this
  library does not need sqlite-vec);
- memories keep the original's order (its ``SELECT`` order, i.e. rowid), so the
  candidates - and the rankings - are the original's.

The probe is read-only, so files already in this library's layout (or new files)
are never written by it.
"""

from __future__ import annotations

import json
import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from emotional_memory.models import Memory

__all__ = ["ORIGINAL_MEMORIES_BACKUP", "ORIGINAL_STATE_BACKUP", "migrate_memories", "migrate_state"]

#: Name the original's ``memories`` table is kept under after the migration.
ORIGINAL_MEMORIES_BACKUP = "memories_v0_18"
#: Name the original's ``affective_state`` table is kept under after the migration.
ORIGINAL_STATE_BACKUP = "affective_state_v0_18"
#: The original's state slot, and the key this library's state store reads by default.
_ORIGINAL_SLOT = "current"
_DEFAULT_KEY = "default"


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _is_original_memories(conn: sqlite3.Connection) -> bool:
    cols = _columns(conn, "memories")
    return {"id", "content", "data"} <= cols and "seq" not in cols


def _is_original_state(conn: sqlite3.Connection) -> bool:
    cols = _columns(conn, "affective_state")
    return {"slot", "data"} <= cols and "key" not in cols


def _probe(path: str | os.PathLike[str], check: str) -> bool:
    """Whether the file at ``path`` holds the original's table (read-only look)."""
    target = os.fspath(path)
    if target == ":memory:" or target.startswith("file:") or not os.path.isfile(target):
        return False
    uri = "file:" + quote(str(Path(target).resolve())) + "?mode=ro"
    is_original = _is_original_memories if check == "memories" else _is_original_state
    # Read-only first; a WAL file may need a writable connection for its index.
    for connect in (lambda: sqlite3.connect(uri, uri=True), lambda: sqlite3.connect(target)):
        try:
            conn = connect()
        except sqlite3.Error:
            continue
        try:
            return is_original(conn)
        except sqlite3.OperationalError:
            continue
        except sqlite3.DatabaseError:
            return False  # not a database: the store's own open reports it
        finally:
            conn.close()
    return False


def _migrate(path: str | os.PathLike[str], check: str, body: str, timeout: float) -> bool:
    if not _probe(path, check):
        return False
    conn = sqlite3.connect(os.fspath(path), timeout=timeout, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Re-check under the write lock: another process may have migrated it.
            done = False
            if (_is_original_memories if check == "memories" else _is_original_state)(conn):
                (_copy_memories if body == "memories" else _copy_state)(conn)
                done = True
            conn.execute("COMMIT")
            return done
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()


def migrate_memories(path: str | os.PathLike[str], *, timeout: float = 30.0) -> bool:
    """Convert an original-layout memory database to this library's layout.

    Args:
        path: The database file (``":memory:"`` and missing files are left alone).
        timeout: Seconds to wait for another connection's write lock.

    Returns:
        True when a migration ran; False when the file is not in the original's
        layout (nothing written).

    Raises:
        ValueError: When a row's ``data`` is not a valid memory (the file is left
            exactly as it was).
    """
    return _migrate(path, "memories", "memories", timeout)


def migrate_state(path: str | os.PathLike[str], *, timeout: float = 30.0) -> bool:
    """Convert an original-layout affective-state table to this library's layout.

    The original's slot ``'current'`` becomes key ``'default'`` (the key
    :class:`~emotional_memory.state_stores.SQLiteAffectiveStateStore` reads by
    default); other slots keep their names.

    Args:
        path: The database file (``":memory:"`` and missing files are left alone).
        timeout: Seconds to wait for another connection's write lock.

    Returns:
        True when a migration ran; False otherwise (nothing written).

    Raises:
        ValueError: When a row's ``data`` is not a JSON object (file unchanged).
    """
    return _migrate(path, "state", "state", timeout)


def _copy_memories(conn: sqlite3.Connection) -> None:
    # Imported here: stores.sqlite imports this module.
    from emotional_memory.stores.sqlite import _SCHEMA, SCHEMA_VERSION, SQLiteStore

    conn.execute(f"ALTER TABLE memories RENAME TO {ORIGINAL_MEMORIES_BACKUP}")
    for statement in _SCHEMA:
        conn.execute(statement)
    conn.execute(
        "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
        (str(SCHEMA_VERSION),),
    )
    rows = conn.execute(
        f"SELECT rowid, id, data FROM {ORIGINAL_MEMORIES_BACKUP} ORDER BY rowid"
    ).fetchall()
    dims: set[int] = set()
    for rowid, memory_id, data in rows:
        try:
            memory = Memory.model_validate_json(data)
        except ValueError as exc:
            raise ValueError(
                f"memories row {rowid} (id {memory_id!r}) is not a valid memory: {exc}"
            ) from exc
        _, params = SQLiteStore._prepare(memory)
        if params[3]:
            dims.add(params[3])
        conn.execute(
            "INSERT INTO memories (id, content, embedding, dim, tag, metadata) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            params[:6],  # the original's memories live at the root and never expire
        )
    if len(dims) > 1:
        raise ValueError(f"memories hold embeddings of several dimensions {sorted(dims)}")


def _copy_state(conn: sqlite3.Connection) -> None:
    from emotional_memory.state_stores.sqlite import _CREATE

    conn.execute(f"ALTER TABLE affective_state RENAME TO {ORIGINAL_STATE_BACKUP}")
    conn.execute(_CREATE)
    now = datetime.now(UTC).isoformat()
    rows = conn.execute(
        f"SELECT slot, data FROM {ORIGINAL_STATE_BACKUP} ORDER BY rowid"
    ).fetchall()
    slots = {slot for slot, _ in rows}
    for slot, data in rows:
        try:
            snapshot = json.loads(data)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"affective_state slot {slot!r} is not JSON: {exc}") from exc
        if not isinstance(snapshot, dict):
            raise ValueError(f"affective_state slot {slot!r} is not a JSON object")
        key = slot
        if slot == _ORIGINAL_SLOT and _DEFAULT_KEY not in slots:
            key = _DEFAULT_KEY
        conn.execute(
            "INSERT INTO affective_state (key, snapshot, updated_at) VALUES (?, ?, ?)",
            (key, json.dumps(snapshot, ensure_ascii=False), now),
        )
