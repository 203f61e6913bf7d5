"""Open SQLite files written by the original library (0.18.1), and keep them its.

The original keeps memories as ``memories(id TEXT PRIMARY KEY, content TEXT, data
TEXT)`` with the whole memory as JSON in ``data`` (plus a ``memory_vec`` sqlite-vec
table for its nearest-neighbour search), and the affective state as
``affective_state(slot TEXT PRIMARY KEY, data TEXT)`` under slot ``'current'``.

This library's tables have names of their own (``em_memories``,
``em_affective_state``; see :mod:`emotional_memory.stores.sqlite.store` and
:mod:`emotional_memory.stores.sqlite.state`), so the original's tables are never
changed. :func:`prepare_memory_file` and :func:`prepare_state_file` run before a
store opens a file, and write only when there is something to do:

- a file in the original's layout without this library's table: the table is created
  and filled with the original's rows (its ``SELECT`` order, i.e. rowid, so the
  candidates - and the rankings - are the original's; embeddings exact, float64 kept),
  the original's slot ``'current'`` becoming key ``'default'``. The original's tables
  (``memories``, ``memory_vec`` and its shadow tables, ``affective_state``) stay
  exactly as they were: the original still opens the file and finds what it had.
  The copy is made once: rows the original writes later are not read (its export
  and ``import_memories`` bring them over);
- a file written by an earlier version of this library, which kept its rows in
  ``memories`` / ``affective_state`` and renamed the original's tables to
  ``memories_v0_18`` / ``affective_state_v0_18``: this library's tables take their new
  names and the original's get their names back (a roll-back to the original works
  again).

Each runs in one ``BEGIN IMMEDIATE`` ... ``COMMIT`` transaction on a connection of its
own, before the store switches the file to WAL: an interrupted or failing run rolls
back and leaves the file byte for byte as it was. The probe is read-only, so files
that need nothing are never written. This module imports no store: the stores pass
in how to create and fill their tables.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

from emotional_memory.models import Memory

__all__ = [
    "MEMORY_TABLE",
    "ORIGINAL_MEMORIES_BACKUP",
    "ORIGINAL_STATE_BACKUP",
    "STATE_TABLE",
    "original_memories",
    "original_states",
    "prepare_memory_file",
    "prepare_state_file",
    "prepare_state_tables",
]

#: This library's memory table.
MEMORY_TABLE = "em_memories"
#: This library's affective-state table.
STATE_TABLE = "em_affective_state"
#: Where earlier versions of this library moved the original's ``memories`` table.
ORIGINAL_MEMORIES_BACKUP = "memories_v0_18"
#: Where earlier versions of this library moved the original's ``affective_state``.
ORIGINAL_STATE_BACKUP = "affective_state_v0_18"
#: The original's state slot, and the key this library's state store reads by default.
_ORIGINAL_SLOT = "current"
_DEFAULT_KEY = "default"
#: The columns of the original's ``memories`` and of an earlier version's own table.
_ORIGINAL_COLUMNS = frozenset({"id", "content", "data"})
_EARLIER_COLUMNS = frozenset({"seq", "id", "content", "embedding", "dim", "tag", "metadata"})


def _quoted(table: str) -> str:
    """An SQL identifier for ``table``: double-quoted, inner quotes doubled."""
    if not isinstance(table, str) or not table or "\x00" in table:
        raise ValueError(f"table must be a non-empty str without NUL, got {table!r}")
    return '"' + table.replace('"', '""') + '"'


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({_quoted(table)})")}


def _memory_steps(conn: sqlite3.Connection) -> list[str]:
    """What the memory tables of an open file need, in order (empty: nothing)."""
    steps: list[str] = []
    cols = _columns(conn, "memories")
    has_ours = bool(_columns(conn, MEMORY_TABLE))
    # only tables of these layouts: another application's same-named table stays as
    # it is (the store's open then refuses the file, unchanged)
    if cols >= _EARLIER_COLUMNS and not has_ours:  # an earlier version's own table
        steps.append("rename_ours")
        has_ours, cols = True, set()
    if not cols and _columns(conn, ORIGINAL_MEMORIES_BACKUP) >= _ORIGINAL_COLUMNS:
        steps.append("restore_original")
        cols = _columns(conn, ORIGINAL_MEMORIES_BACKUP)
    if cols >= _ORIGINAL_COLUMNS and not has_ours:
        steps.append("copy_original")
    return steps


def _state_steps(conn: sqlite3.Connection) -> list[str]:
    """What the state tables of an open file need, in order (empty: nothing)."""
    steps: list[str] = []
    cols = _columns(conn, "affective_state")
    has_ours = bool(_columns(conn, STATE_TABLE))
    if cols >= {"key", "snapshot"} and not has_ours:  # an earlier version's own table
        steps.append("rename_ours")
        has_ours, cols = True, set()
    if not cols and _columns(conn, ORIGINAL_STATE_BACKUP) >= {"slot", "data"}:
        steps.append("restore_original")
        cols = _columns(conn, ORIGINAL_STATE_BACKUP)
    if {"slot", "data"} <= cols and not has_ours:
        steps.append("copy_original")
    return steps


def _probe(
    path: str | os.PathLike[str], steps: Callable[[sqlite3.Connection], list[str]],
    timeout: float,
) -> bool:
    """Whether the file at ``path`` needs any step (a read-only look, waiting at most
    ``timeout`` seconds for another connection's lock).

    Raises:
        sqlite3.OperationalError: SQLite's "database is locked" (the file stayed
            locked past ``timeout``: whether it needs a step is not known).
    """
    target = os.fspath(path)
    if target == ":memory:" or target.startswith("file:") or not os.path.isfile(target):
        return False
    uri = "file:" + quote(str(Path(target).resolve())) + "?mode=ro"
    # Read-only first; a WAL file may need a writable connection for its index.
    for connect in (lambda: sqlite3.connect(uri, uri=True, timeout=timeout),
                    lambda: sqlite3.connect(target, timeout=timeout)):
        try:
            conn = connect()
        except sqlite3.Error:
            continue
        try:
            return bool(steps(conn))
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorname", "").startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
                raise  # locked: taking it as "nothing to do" would skip the migration
            continue
        except sqlite3.DatabaseError:
            return False  # not a database: the store's own open reports it
        finally:
            conn.close()
    return False


def _run(
    path: str | os.PathLike[str],
    timeout: float,
    steps: Callable[[sqlite3.Connection], list[str]],
    apply: Callable[[sqlite3.Connection, list[str]], None],
) -> bool:
    if not _probe(path, steps, timeout):
        return False
    conn = sqlite3.connect(os.fspath(path), timeout=timeout, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            todo = steps(conn)  # again under the write lock: another process may be done
            if todo:
                apply(conn, todo)
            conn.execute("COMMIT")
            return bool(todo)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()


def original_memories(conn: sqlite3.Connection, table: str = "memories") -> list[Memory]:
    """The memories of an original-layout table, in the original's (rowid) order.

    Args:
        conn: an open connection.
        table: the table in the original's layout.

    Returns:
        The validated memories (embeddings exactly as the JSON holds them; a memory
        whose JSON has no id takes its row's).

    Raises:
        ValueError: a row whose ``data`` is not a valid memory (the rowid and id named),
            or two rows holding one memory id (both rowids named).
    """
    rows = conn.execute(f"SELECT rowid, id, data FROM {_quoted(table)} ORDER BY rowid").fetchall()
    out: list[Memory] = []
    seen: dict[str, int] = {}  # memory id -> the rowid holding it
    for rowid, memory_id, data in rows:
        try:
            memory = Memory.model_validate_json(data)
        except ValueError as exc:
            raise ValueError(
                f"memories row {rowid} (id {memory_id!r}) is not a valid memory: {exc}"
            ) from exc
        if "id" not in memory.model_fields_set and isinstance(memory_id, str) and memory_id:
            # no id in the JSON: the row's (the one the original's get/delete use), not
            # a fresh random one
            memory = memory.model_copy(update={"id": memory_id})
        first = seen.setdefault(memory.id, rowid)
        if first != rowid:  # keeping one of them would lose the other silently
            raise ValueError(
                f"memories rows {first} and {rowid} both hold memory id {memory.id!r}"
            )
        out.append(memory)
    return out


def original_states(
    conn: sqlite3.Connection, table: str = "affective_state"
) -> list[tuple[str, str]]:
    """The snapshots of an original-layout state table as ``(key, JSON text)`` pairs.

    Slot ``'current'`` becomes key ``'default'`` (the key
    :class:`~emotional_memory.state_stores.SQLiteAffectiveStateStore` reads by default)
    unless a slot of that name exists; other slots keep their names.

    Args:
        conn: an open connection.
        table: the table in the original's layout.

    Returns:
        The pairs, in rowid order.

    Raises:
        ValueError: a row whose ``data`` is not a JSON object (the slot named).
    """
    rows = conn.execute(f"SELECT slot, data FROM {_quoted(table)} ORDER BY rowid").fetchall()
    slots = {slot for slot, _ in rows}
    out: list[tuple[str, str]] = []
    for slot, data in rows:
        try:
            snapshot = json.loads(data)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"affective_state slot {slot!r} is not JSON: {exc}") from exc
        except RecursionError:
            raise ValueError(
                f"affective_state slot {slot!r} is not JSON: nested too deeply"
            ) from None
        if not isinstance(snapshot, dict):
            raise ValueError(f"affective_state slot {slot!r} is not a JSON object")
        key = _DEFAULT_KEY if slot == _ORIGINAL_SLOT and _DEFAULT_KEY not in slots else slot
        out.append((key, json.dumps(snapshot, ensure_ascii=False)))
    return out


def prepare_memory_file(
    path: str | os.PathLike[str],
    create: Callable[[sqlite3.Connection], None],
    fill: Callable[[sqlite3.Connection, list[Memory]], None],
    *,
    timeout: float = 30.0,
) -> bool:
    """Bring a memory file's tables to this library's names (see the module docs).

    Args:
        path: the database file (``":memory:"`` and missing files are left alone).
        create: creates this library's memory tables on a connection (in the open
            transaction).
        fill: writes memories, in order, to this library's memory table.
        timeout: seconds to wait for another connection's write lock.

    Returns:
        True when the file was changed; False when it needed nothing (not written).

    Raises:
        ValueError: a row of the original's table is not a valid memory, or two rows
            hold one memory id (the file is left exactly as it was).
    """

    def apply(conn: sqlite3.Connection, todo: list[str]) -> None:
        if "rename_ours" in todo:
            conn.execute(f"ALTER TABLE memories RENAME TO {MEMORY_TABLE}")
        if "restore_original" in todo:
            conn.execute(f"ALTER TABLE {ORIGINAL_MEMORIES_BACKUP} RENAME TO memories")
        if "copy_original" in todo:
            memories = original_memories(conn)
            create(conn)
            fill(conn, memories)

    return _run(path, timeout, _memory_steps, apply)


def prepare_state_file(
    path: str | os.PathLike[str],
    create: Callable[[sqlite3.Connection], None],
    fill: Callable[[sqlite3.Connection, list[tuple[str, str]]], None],
    *,
    timeout: float = 30.0,
) -> bool:
    """Bring a state file's tables to this library's names (see the module docs).

    Args:
        path: the database file (``":memory:"`` and missing files are left alone).
        create: creates this library's state table on a connection.
        fill: writes ``(key, snapshot JSON)`` pairs to it.
        timeout: seconds to wait for another connection's write lock.

    Returns:
        True when the file was changed; False when it needed nothing (not written).

    Raises:
        ValueError: a row of the original's table is not a JSON object (file unchanged).
    """

    return _run(
        path, timeout, _state_steps, lambda conn, todo: _apply_state(conn, todo, create, fill)
    )


def prepare_state_tables(
    conn: sqlite3.Connection,
    create: Callable[[sqlite3.Connection], None],
    fill: Callable[[sqlite3.Connection, list[tuple[str, str]]], None],
) -> None:
    """:func:`prepare_state_file` on an open connection, inside the caller's transaction
    (a state store sharing a memory store's connection), then ``create``.

    Args:
        conn: the connection, in a transaction.
        create: creates this library's state table.
        fill: writes ``(key, snapshot JSON)`` pairs to it.
    """
    _apply_state(conn, _state_steps(conn), create, fill)
    create(conn)


def _apply_state(
    conn: sqlite3.Connection,
    todo: list[str],
    create: Callable[[sqlite3.Connection], None],
    fill: Callable[[sqlite3.Connection, list[tuple[str, str]]], None],
) -> None:
    if "rename_ours" in todo:
        conn.execute(f"ALTER TABLE affective_state RENAME TO {STATE_TABLE}")
    if "restore_original" in todo:
        conn.execute(f"ALTER TABLE {ORIGINAL_STATE_BACKUP} RENAME TO affective_state")
    if "copy_original" in todo:
        states = original_states(conn)
        create(conn)
        fill(conn, states)
