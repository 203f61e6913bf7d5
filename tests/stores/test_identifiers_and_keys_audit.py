"""SQL identifiers are checked whole (a final newline passed ``$``), quoted where a
caller names them; a keys file others may read is warned about at start-up."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from emotional_memory.stores.postgres.common import check_options
from emotional_memory.stores.postgres.state import _table
from emotional_memory.stores.sqlite.original_layout import original_memories, original_states

_INTS = {"min_connections": 1, "max_connections": 4, "exact_rows": 1, "ef_search": 1,
         "margin": 1, "hnsw_m": 16, "hnsw_ef_construction": 64, "fillfactor": 70}


@pytest.mark.parametrize("table", ["mem\n", "mem\n_x", "Mem", "mem;drop", ""])
def test_postgres_table_names_are_checked_whole(table: str) -> None:
    with pytest.raises(ValueError, match="table"):
        check_options("postgresql://h/db", table, 10.0, None, **_INTS)
    with pytest.raises(ValueError, match="table"):
        _table(table)


def test_original_layout_table_names_are_quoted() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE memories (id TEXT, data TEXT)")
    conn.execute('CREATE TABLE "odd""name" (slot TEXT, data TEXT)')
    conn.execute("""INSERT INTO "odd""name" VALUES ('s', '{"a": 1}')""")
    hostile = 'memories" WHERE 0 UNION SELECT 1, 2, 3 --'
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        original_memories(conn, hostile)
    assert original_states(conn, 'odd"name') == [("s", '{"a": 1}')]
    with pytest.raises(ValueError, match="table"):
        original_memories(conn, "")


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_a_keys_file_others_may_read_is_warned_about(tmp_path: Path) -> None:
    from emotional_memory.server.cli import keys_file_warning

    path = tmp_path / "KEYS.json"
    path.write_text("{}")
    path.chmod(0o600)
    assert keys_file_warning(path) is None
    path.chmod(0o640)
    assert "its group" in (keys_file_warning(path) or "")
    path.chmod(0o644)
    warning = keys_file_warning(path) or ""
    assert "every user" in warning and "chmod 600" in warning
    assert keys_file_warning(tmp_path / "missing.json") is None
