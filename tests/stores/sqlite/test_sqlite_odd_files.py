"""SQLite files a store should refuse without changing them: a schema version that is
not this library's (newer, or no number), whichever store opens the file; a file
another connection holds locked at the first open; values past SQLite's length
limit; a file whose writes fail; ``sqlite:///`` URLs with the scheme in capitals."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from emotional_memory.state import AffectiveState
from emotional_memory.state_stores import SQLiteAffectiveStateStore
from emotional_memory.stores import SQLiteStore
from emotional_memory.stores.sqlite.schema import SQLiteBusyError
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


def _held_exclusively(path: Path, seconds: float) -> threading.Thread:
    """A thread holding ``path``'s exclusive lock (a rollback-journal writer, as the
    original library writes its file) for ``seconds``; started, lock taken."""
    taken = threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("BEGIN EXCLUSIVE")
        taken.set()
        time.sleep(seconds)
        conn.execute("ROLLBACK")
        conn.close()

    thread = threading.Thread(target=hold)
    thread.start()
    assert taken.wait(30)
    return thread


@pytest.mark.parametrize("opener", ["store", "states"])
def test_opening_a_busy_file_waits_its_timeout_and_skips_no_migration(
    tmp_path: Path, opener: str
) -> None:
    """The first open's look for the original library's tables waited sqlite3's
    default 5 s per try (10 s, whatever ``timeout``), then took the busy file as
    needing nothing: the open went on without copying the original's memories, or
    failed with a bare "database is locked". Now the look waits ``timeout`` and a
    busy file is :class:`SQLiteBusyError` naming it, nothing written; once free,
    the open migrates."""
    memory = mem("original", [1.0, 0.0])
    path = tmp_path / "original.db"
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE memories (id TEXT PRIMARY KEY, content TEXT NOT NULL, "
                     "data TEXT NOT NULL)")
        conn.execute("CREATE TABLE affective_state (slot TEXT PRIMARY KEY, data TEXT NOT NULL)")
        conn.execute("INSERT INTO memories VALUES (?, ?, ?)",
                     (memory.id, memory.content, memory.model_dump_json()))
        conn.execute("INSERT INTO affective_state VALUES ('current', ?)",
                     (json.dumps(AffectiveState.initial().snapshot()),))
    conn.close()
    before = path.read_bytes()
    open_file = SQLiteStore if opener == "store" else SQLiteAffectiveStateStore
    holder = _held_exclusively(path, 3.0)
    try:
        started = time.monotonic()
        with pytest.raises(SQLiteBusyError, match=r"original\.db.*busy timeout of 0\.3 s"):
            open_file(path, timeout=0.3)
        assert time.monotonic() - started < 2.5
    finally:
        holder.join(30)
    assert path.read_bytes() == before
    if opener == "store":
        with SQLiteStore(path, timeout=5) as store:
            assert [m.id for m in store.list_all()] == [memory.id]
    else:
        with SQLiteAffectiveStateStore(path, timeout=5) as states:
            assert states.load() is not None


@pytest.mark.parametrize("field", ["content", "metadata"])
def test_a_value_larger_than_sqlites_length_limit_is_named(tmp_path: Path, field: str) -> None:
    """A row past SQLite's length limit (1e9 bytes by default; lowered here so the
    test stays small, as a build or ``setlimit`` may) was sqlite3's bare DataError
    "string or blob too big", naming neither the field nor the memory."""
    from emotional_memory import EmotionalMemory
    from emotional_memory.embedders import HashingEmbedder
    from emotional_memory.interfaces import UnstorableValueError

    store = SQLiteStore(tmp_path / "m.db")
    engine = EmotionalMemory(store, HashingEmbedder(dim=8))
    kept = engine.encode("kept")
    store._connection().setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 20_000)
    big = "x" * 30_000
    content, metadata = (big, None) if field == "content" else ("small", {"note": big})
    with pytest.raises(UnstorableValueError, match=rf"{field}.*SQLite's length limit") as one:
        store.save(mem(content, [1.0] * 8, metadata=metadata))
    assert one.value.field == field
    with pytest.raises(UnstorableValueError, match=rf"{field}.*SQLite's length limit") as batch:
        engine.encode_batch(["fine", content], metadata=[None, metadata])
    assert batch.value.field == field
    assert [m.id for m in store.list_all()] == [kept.id]  # nothing written, cache too
    engine.close()
    with SQLiteStore(tmp_path / "m.db") as reopened:
        assert [m.id for m in reopened.list_all()] == [kept.id]


@pytest.mark.parametrize("opener", ["store", "states"])
def test_a_file_that_fails_its_first_write_is_named_with_sqlites_reason(opener: str) -> None:
    """A file whose writes fail at the first open (``/dev/null`` here, as a full or
    failing disk): SQLite rolled the transaction back itself, and the store's own
    ROLLBACK then raised "cannot rollback - no transaction is active", hiding the
    reason; the state store's error did not name the file."""
    open_file = SQLiteStore if opener == "store" else SQLiteAffectiveStateStore
    with pytest.raises(sqlite3.DatabaseError, match=r"^'/dev/null': ") as info:
        open_file("/dev/null")
    assert "cannot rollback" not in str(info.value)


@pytest.mark.parametrize("scheme", ["SQLITE", "SQLite"])
def test_a_sqlite_url_scheme_in_capitals_opens_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scheme: str
) -> None:
    """URL schemes are case-insensitive (RFC 3986), and the registry picked the SQLite
    backend for ``SQLITE:///...``, which then refused it, quoting as the right form
    the very one given."""
    from emotional_memory.stores.registry import open_state_store, open_store

    monkeypatch.chdir(tmp_path)
    opened = open_store(f"{scheme}:///caps.db")
    assert opened.store.path == "caps.db"
    opened.close()
    states = open_state_store(f"{scheme}:///caps.db")
    states.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["caps.db"]
