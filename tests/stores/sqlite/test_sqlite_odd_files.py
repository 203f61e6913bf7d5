"""SQLite files a store should refuse without changing them: a schema version that is
not this library's (newer, or no number), whichever store opens the file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from emotional_memory.state_stores import SQLiteAffectiveStateStore
from emotional_memory.stores import SQLiteStore
from support.memories import basic_memory as mem


def _file_of_version(path: Path, version: str) -> bytes:
    """A store's file (one memory, rollback journal) recorded as schema ``version``."""
    with SQLiteStore(path) as store:
        store.save(mem("a", [1, 0]))
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA journal_mode=DELETE")
    raw.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (version,))
    raw.close()
    return path.read_bytes()


@pytest.mark.parametrize("version", ["99", "abc", "", "-1", "3.5"])
def test_a_state_store_refuses_a_file_of_another_schema_version_unchanged(
    tmp_path: Path, version: str
) -> None:
    """The state store opened a file whose version the memory store refuses, and
    wrote to it (WAL switch, its table): a newer library's file changed by an older."""
    path = tmp_path / "memories.db"
    before = _file_of_version(path, version)
    with pytest.raises(ValueError, match=r"memories\.db.*schema version"):
        SQLiteAffectiveStateStore(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


@pytest.mark.parametrize("version", ["abc", "", "-1", "3.5"])
def test_a_schema_version_that_is_no_number_is_refused_unchanged(
    tmp_path: Path, version: str
) -> None:
    """It was int()'s "invalid literal for int() with base 10" after the file had been
    switched to WAL (``-1`` was even taken as an old version and 'upgraded')."""
    path = tmp_path / "memories.db"
    before = _file_of_version(path, version)
    with pytest.raises(ValueError, match=rf"memories\.db.*schema version {version!r}"):
        SQLiteStore(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
