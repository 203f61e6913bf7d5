"""SQLiteStore and SQLiteAffectiveStateStore beyond the contract suite: the file's
layout and pragmas, exact float64 blobs, other connections and processes, failed
statements, closing, one file for memories and states, joined transactions."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emotional_memory.state import AffectiveState
from emotional_memory.state_stores import SQLiteAffectiveStateStore
from emotional_memory.stores import SQLiteStore
from emotional_memory.stores._shared.records import F_CONSOLIDATION, TAG_F
from support.memories import basic_memory as mem
from support.rows import QUERIES, assert_same_state, ids, populate, state_of
from support.states import moved_state


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "memories.db"


def test_sqlite_pragmas_schema_and_blob_format(db: Path) -> None:
    with SQLiteStore(db) as store:
        a = mem("a", [0.5, 0.25, -3.0])  # float32 numbers: a 4-byte blob
        store.save(a)
        store.save(mem("b"))
        store.save(mem("c", [0.1, 0.2, 0.3]))  # not float32 numbers: an 8-byte blob
        assert store.schema_version == 3
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        rows = raw.execute(
            "SELECT seq, id, embedding, dim, tag, rec FROM em_memories ORDER BY seq"
        ).fetchall()
        assert rows[0][1] == a.id and rows[0][3] == 3
        assert np.frombuffer(rows[0][2], dtype="<f4").tolist() == [0.5, 0.25, -3.0]
        assert rows[1][2] is None and rows[1][3] is None
        assert rows[2][3] == 3
        assert np.frombuffer(rows[2][2], dtype="<f8").tolist() == [0.1, 0.2, 0.3]
        # a compact memory: the tag's numbers in the record, no JSON tag
        assert rows[0][4] == ""
        floats = np.frombuffer(rows[0][5][: 8 * (TAG_F + 1)], dtype="<f8")
        assert floats[F_CONSOLIDATION] == 0.5
        assert floats[TAG_F] == np.linalg.norm([0.5, 0.25, -3.0])  # the embedding norm
        version = raw.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        assert version == ("3",)
    finally:
        raw.close()


def test_sqlite_rejects_newer_schema(db: Path) -> None:
    SQLiteStore(db).close()
    raw = sqlite3.connect(db)
    with raw:
        raw.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    raw.close()
    with pytest.raises(ValueError, match="schema version"):
        SQLiteStore(db)


def test_a_newer_schema_file_is_refused_byte_for_byte_unchanged(db: Path) -> None:
    # A newer library may keep its file out of WAL mode: refusing it must not switch
    # it (nor create tables), as for a foreign database.
    with SQLiteStore(db) as store:
        store.save(mem("a", [1, 0]))
    raw = sqlite3.connect(db, isolation_level=None)
    raw.execute("PRAGMA journal_mode=DELETE")
    raw.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    raw.close()
    before = db.read_bytes()
    with pytest.raises(ValueError, match=r"memories\.db.*schema version 99"):
        SQLiteStore(db)
    assert db.read_bytes() == before
    assert sorted(p.name for p in db.parent.iterdir()) == [db.name]


@pytest.mark.parametrize(
    "ddl",
    [
        "CREATE TABLE memories (seq INTEGER PRIMARY KEY, title TEXT)",
        "CREATE TABLE memories_v0_18 (x INTEGER); CREATE TABLE notes (y TEXT)",
    ],
    ids=["memories-with-seq", "memories_v0_18"],
)
def test_a_foreign_table_named_like_an_earlier_layout_is_refused_unchanged(
    tmp_path: Path, ddl: str
) -> None:
    # Another application's table that merely has the name (and a `seq` column) of an
    # earlier version's layout is not renamed before the file is refused.
    path = tmp_path / "app.db"
    raw = sqlite3.connect(path)
    raw.executescript(ddl)
    raw.close()
    before = path.read_bytes()
    with pytest.raises(ValueError, match=r"app\.db.*not an emotional_memory database"):
        SQLiteStore(path)
    assert path.read_bytes() == before


def test_sqlite_embeddings_kept_exactly(db: Path) -> None:
    vec = [0.1, 1 / 3, 2.0**-30 + 1.0]
    a = mem("a", vec)
    with SQLiteStore(db) as store:
        store.save(a)
        got = store.get(a.id)
        assert got is not None
        assert got.embedding == vec  # float64 values that are not float32 numbers
        live = got
    with SQLiteStore(db) as reopened:
        assert reopened.get(a.id) == live


def test_sqlite_reopen_gives_identical_results(db: Path) -> None:
    rng = np.random.default_rng(3)
    queries = [rng.normal(size=6).tolist() for _ in range(4)] + [[0.0] * 6]
    store = SQLiteStore(db)
    ms = [
        mem(
            f"m{i}",
            None if i % 7 == 0 else rng.normal(size=6).tolist(),
            valence=float(rng.uniform(-1, 1)),
            metadata={"i": i},
        )
        for i in range(300)
    ]
    for m in ms:
        store.save(m)
    for m in ms[::5]:
        store.delete(m.id)
    store.save(ms[1].model_copy(update={"content": "re-saved"}))
    store.save(ms[0])  # deleted above: goes to the end

    def observe(s: SQLiteStore) -> dict[str, Any]:
        out = state_of(s, queries)
        out["wide"] = [ids(s.search_by_embedding(q, 100)) for q in queries]
        return out

    before = observe(store)
    before_memories = store.list_all()
    store.close()
    with SQLiteStore(db) as reopened:
        assert_same_state(before, observe(reopened))
        assert reopened.list_all() == before_memories
        assert reopened.list_all()[-1].id == ms[0].id


def test_sqlite_new_process_reads_same_data(db: Path) -> None:
    rng = np.random.default_rng(5)
    with SQLiteStore(db) as store:
        for i in range(40):
            store.save(mem(f"m{i}", rng.normal(size=5).tolist(), metadata={"i": i}))
        store.save(mem("plain"))
        query = rng.normal(size=5).tolist()
        expected = {
            "memories": [
                [m.id, m.content, m.embedding, m.metadata, m.tag.model_dump(mode="json")]
                for m in store.list_all()
            ],
            "search": ids(store.search_by_embedding(query, 10)),
        }
    script = (
        "import json, sys\n"
        "from emotional_memory.stores import SQLiteStore\n"
        "with SQLiteStore(sys.argv[1]) as s:\n"
        "    out = {'memories': [[m.id, m.content, m.embedding, m.metadata,\n"
        "                         m.tag.model_dump(mode='json')] for m in s.list_all()],\n"
        "           'search': [m.id for m in s.search_by_embedding(json.loads(sys.argv[2]), 10)]}\n"
        "print(json.dumps(out))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(db), json.dumps(query)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert json.loads(result.stdout) == json.loads(json.dumps(expected))


def test_sqlite_sees_other_connection(db: Path) -> None:
    # Every operation picks up other connections' commits (no refresh() needed).
    with SQLiteStore(db) as first, SQLiteStore(db) as second:
        a = mem("a", [1, 0])
        first.save(a)
        assert a.id in second
        assert second.get(a.id) == first.get(a.id)
        second.refresh()
        assert second.get(a.id) == first.get(a.id)


def test_sqlite_metadata_must_be_json(db: Path) -> None:
    with SQLiteStore(db) as store:
        store.save(mem("ok"))
        before = state_of(store)
        with pytest.raises(TypeError, match="metadata"):
            store.save(mem("bad", metadata={"when": object()}))
        assert_same_state(before, state_of(store))


class _FailingConnection:
    """Wraps a connection and fails the first INSERT (a disk error stand-in)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql.lstrip().startswith("INSERT INTO em_memories"):
            raise sqlite3.OperationalError("disk I/O error")
        return self.conn.execute(sql, *args)

    def close(self) -> None:
        self.conn.close()


def test_sqlite_failed_statement_leaves_cache_unchanged(db: Path) -> None:
    store = SQLiteStore(db)
    ms = populate(store)
    before = state_of(store, QUERIES)
    store._conn = _FailingConnection(store._conn)  # type: ignore[arg-type, assignment]
    with pytest.raises(sqlite3.OperationalError):
        store.save(mem("new", [1, 1, 1, 1]))
    with pytest.raises(sqlite3.OperationalError):
        store.save(ms[0].model_copy(update={"content": "changed"}))
    with pytest.raises(sqlite3.OperationalError), store.transaction():
        store.delete(ms[1].id)
        store.save(mem("new", [1, 1, 1, 1]))
    assert_same_state(before, state_of(store, QUERIES))
    store.close()
    with SQLiteStore(db) as reopened:
        assert_same_state(before, state_of(reopened, QUERIES))


class _FailingReadConnection(_FailingConnection):
    """Fails the first read of memory rows (a transient disk error stand-in)."""

    failed = False

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if not self.failed and "FROM em_memories" in sql and sql.lstrip().startswith("SELECT"):
            self.failed = True
            raise sqlite3.OperationalError("disk I/O error")
        return self.conn.execute(sql, *args)


@pytest.mark.parametrize("how", ["sync", "refresh"])
def test_a_failed_read_of_other_commits_is_retried_not_forgotten(db: Path, how: str) -> None:
    # A read that fails while picking up another connection's commit must not mark
    # the cache current: the next read retries, and never serves the old rows.
    with SQLiteStore(db) as reader, SQLiteStore(db) as writer:
        writer.save(mem("a", [1, 0]))
        assert len(reader) == 1
        writer.save(mem("b", [0, 1]))
        reader._conn = _FailingReadConnection(reader._conn)  # type: ignore[arg-type, assignment]
        with pytest.raises(sqlite3.OperationalError):
            reader.refresh() if how == "refresh" else len(reader)
        assert ids(reader.list_all()) == ids(writer.list_all())
        queries = [[1, 0], [1, 1]]
        assert_same_state(state_of(writer, queries), state_of(reader, queries))


class _CommitBeforeRowsConnection(_FailingConnection):
    """Runs ``commit`` (another connection's transaction) just before the first read of
    the changed rows, i.e. after the change log was read."""

    def __init__(self, conn: sqlite3.Connection, commit: Any) -> None:
        super().__init__(conn)
        self.commit = commit

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if self.commit is not None and "FROM em_memories WHERE id IN" in sql:
            commit, self.commit = self.commit, None
            commit()
        return self.conn.execute(sql, *args)


def test_picking_up_commits_never_shows_half_of_another_transaction(db: Path) -> None:
    # The change log and the rows it names are read in one snapshot: a transaction
    # another connection commits meanwhile shows whole on the next read, not half now.
    with SQLiteStore(db) as reader, SQLiteStore(db) as writer:
        a, b = mem("a", [1, 0]), mem("b", [0, 1])
        writer.save(a)
        writer.save(b)
        assert len(reader) == 2
        writer.update(a.model_copy(update={"content": "a1"}))

        def both() -> None:
            with writer.transaction():
                writer.update(a.model_copy(update={"content": "a2"}))
                writer.update(b.model_copy(update={"content": "b2"}))

        inner = reader._conn
        reader._conn = _CommitBeforeRowsConnection(inner, both)  # type: ignore[arg-type, assignment]
        assert [m.content for m in reader.list_all()] in (["a1", "b"], ["a2", "b2"])
        reader._conn = inner
        assert [m.content for m in reader.list_all()] == ["a2", "b2"]


def test_sqlite_closed_store_raises(db: Path) -> None:
    store = SQLiteStore(db)
    a = mem("a")
    store.save(a)
    store.close()
    store.close()
    assert store.closed
    with pytest.raises(ValueError, match="closed"):
        store.get(a.id)
    with pytest.raises(ValueError, match="closed"):
        store.save(mem("b"))
    with pytest.raises(ValueError, match="closed"):
        store.dim  # noqa: B018 (a read like any other, not the last known answer)


def test_sqlite_state_store_rejects_non_json(tmp_path: Path) -> None:
    with SQLiteAffectiveStateStore(tmp_path / "s.db") as s:
        s.save({"ok": True})
        with pytest.raises(TypeError, match="snapshot"):
            s.save({"x": object()})
        with pytest.raises(ValueError, match="snapshot"):
            s.save({"x": float("nan")})
        assert s.load_snapshot() == {"ok": True}


def test_a_state_snapshot_nested_past_the_parser_names_its_key(tmp_path: Path) -> None:
    from emotional_memory.interfaces import StoredStateError

    # a hand-edited row: it was a raw RecursionError
    path = tmp_path / "s.db"
    with SQLiteAffectiveStateStore(path, key="k1") as s:
        s.save({"ok": True})
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE em_affective_state SET snapshot = ?", ("[" * 10_000 + "]" * 10_000,))
    conn.close()
    with SQLiteAffectiveStateStore(path, key="k1") as s:
        for read in (s.load_snapshot, s.load, s.load_versioned):
            with pytest.raises(StoredStateError, match=r"'k1'.*JSON nested too deeply"):
                read()


def test_sqlite_state_persists_across_reopen_and_keys(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    snap = moved_state().snapshot()
    with SQLiteAffectiveStateStore(path) as s, SQLiteAffectiveStateStore(path, key="b") as other:
        s.save(snap)
        other.save({"other": 1})
        stamp = s.updated_at()
        assert stamp is not None and stamp.tzinfo is not None
    with SQLiteAffectiveStateStore(path) as s:
        loaded = s.load_snapshot()
        assert loaded == snap
        assert AffectiveState.restore(loaded).momentum == moved_state().momentum
    with SQLiteAffectiveStateStore(path, key="b") as other:
        assert other.load_snapshot() == {"other": 1}
    with pytest.raises(ValueError, match="key"):
        SQLiteAffectiveStateStore(path, key="")


@pytest.mark.parametrize(
    ("timeout", "error"),
    [(-1, ValueError), (float("nan"), ValueError), (float("inf"), ValueError),
     (True, ValueError), ("3", ValueError), (None, ValueError)],
)
def test_a_state_store_refuses_a_bad_timeout_by_name_and_makes_no_file(
    tmp_path: Path, timeout: object, error: type[Exception]
) -> None:
    """``timeout`` is checked as ``hold_timeout`` is: a negative or NaN one was kept
    (SQLite then waits for no lock: every contended save failed at once, "busy
    timeout of -1 s"), inf overflowed inside sqlite3, a str or None raised sqlite3's
    words naming nothing; no file is made."""
    path = tmp_path / "s.db"
    with pytest.raises(error, match="timeout"):
        SQLiteAffectiveStateStore(path, timeout=timeout)  # type: ignore[arg-type]
    assert not path.exists()
    with SQLiteAffectiveStateStore(path, timeout=0) as s:  # 0: never wait, allowed
        s.save(moved_state())


@pytest.mark.parametrize(
    "timeout", [-1, float("nan"), float("inf"), True, "3", None])
def test_a_store_refuses_a_bad_timeout_by_name_and_makes_no_file(
    tmp_path: Path, timeout: object
) -> None:
    """``SQLiteStore(timeout=)`` is checked as the state store's: a negative or NaN
    one was kept (every contended write failed at once), inf overflowed inside
    sqlite3, a str or None raised sqlite3's words naming nothing; no file is made."""
    path = tmp_path / "m.db"
    with pytest.raises(ValueError, match="timeout"):
        SQLiteStore(path, timeout=timeout)  # type: ignore[arg-type]
    assert not path.exists()
    with SQLiteStore(path, timeout=0) as s:  # 0: never wait, allowed
        s.save(mem("a", [1, 0]))
        assert len(s) == 1


def test_state_and_memories_share_one_file(db: Path) -> None:
    snap = moved_state().snapshot()
    store = SQLiteStore(db)
    states = SQLiteAffectiveStateStore(db)
    a = mem("a", [1, 0])
    store.save(a)
    states.save(snap)
    store.save(mem("b", [0, 1]))
    states.save({**snap, "extra": 1})
    store.close()
    states.close()
    with SQLiteStore(db) as store2, SQLiteAffectiveStateStore(db) as states2:
        assert len(store2) == 2 and store2.list_all()[0].id == a.id
        assert states2.load_snapshot() == {**snap, "extra": 1}


def test_state_store_from_store_joins_transactions(db: Path) -> None:
    store = SQLiteStore(db)
    states = SQLiteAffectiveStateStore.from_store(store)
    states.save({"v": 0})
    with pytest.raises(RuntimeError), store.transaction():
        store.save(mem("a", [1, 0]))
        states.save({"v": 1})
        raise RuntimeError
    assert len(store) == 0 and states.load_snapshot() == {"v": 0}
    with store.transaction():
        store.save(mem("a", [1, 0]))
        states.save({"v": 2})
    states.close()  # leaves the store open
    assert len(store) == 1
    store.close()
    with SQLiteStore(db) as s2, SQLiteAffectiveStateStore(db) as st2:
        assert len(s2) == 1 and st2.load_snapshot() == {"v": 2}


@pytest.mark.parametrize(
    "foreign",
    ["CREATE TABLE em_affective_state (a TEXT, b TEXT)",
     "CREATE TABLE em_affective_state (key TEXT, snapshot TEXT, updated_at TEXT)",
     "CREATE TABLE users (name TEXT PRIMARY KEY)",
     "CREATE TABLE affective_state_v0_18 (x INTEGER)"],
)
def test_a_state_store_refuses_a_foreign_table_or_database(tmp_path: Path, foreign: str) -> None:
    """A table of that name with another layout (no ``key`` primary key: upserts
    would add rows) or another application's database: a ValueError naming the file
    when the store opens (it opened, then failed at the first save with a raw
    OperationalError or kept duplicate rows), the file untouched (no WAL switch)."""
    path = tmp_path / "foreign.db"
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(foreign)
    conn.close()
    before = path.read_bytes()
    with pytest.raises(ValueError, match=r"foreign\.db"):
        SQLiteAffectiveStateStore(path)
    assert path.read_bytes() == before
    assert not (tmp_path / "foreign.db-wal").exists()
    if "em_affective_state" in foreign:  # a store's file: the shared connection checks
        with SQLiteStore(tmp_path / "mine.db") as store:
            store._connection().execute(foreign)
            with pytest.raises(ValueError, match=r"mine\.db.*em_affective_state"):
                SQLiteAffectiveStateStore.from_store(store)


def test_a_state_store_never_renames_another_applications_affective_state(
    tmp_path: Path,
) -> None:
    # A table named like an earlier version's (with a `key` column) but of another
    # layout is not moved to em_affective_state: it stays the application's.
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE affective_state (key TEXT, mood TEXT)")
        conn.execute("INSERT INTO affective_state VALUES ('k', 'calm')")
    conn.close()
    with contextlib.suppress(ValueError):  # refusing the file is fine too
        SQLiteAffectiveStateStore(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT key, mood FROM affective_state").fetchall() == [("k", "calm")]
    conn.close()


@pytest.mark.parametrize(("stored", "expected"), [
    ("not a time", None),
    ("2026-12-07T03:00:00", datetime(2026, 12, 7, 3, tzinfo=UTC)),  # written without a zone
    ("2026-12-07T04:00:00+01:00", datetime(2026, 12, 7, 3, tzinfo=UTC)),
])
def test_a_hand_edited_updated_at_names_the_key_or_reads_as_utc(
    tmp_path: Path, stored: str, expected: datetime | None
) -> None:
    # an unreadable stamp was fromisoformat's "Invalid isoformat string" naming nothing,
    # one without a zone came back naive (the docstring promises aware UTC)
    path = tmp_path / "s.db"
    with SQLiteAffectiveStateStore(path, key="k1") as s:
        s.save({"a": 1})
        conn = sqlite3.connect(path)
        with conn:
            conn.execute("UPDATE em_affective_state SET updated_at = ?", (stored,))
        conn.close()
        if expected is None:
            with pytest.raises(ValueError, match=r"'k1'.*updated_at"):
                s.updated_at()
        else:
            got = s.updated_at()
            assert got == expected and got is not None and got.utcoffset() is not None
            assert got.tzinfo == UTC


def test_a_write_blocked_past_the_timeout_names_the_file_and_changes_nothing(
    tmp_path: Path,
) -> None:
    # Another connection holds the write lock past the busy timeout: the error names
    # the file and the wait (a bare "database is locked" does not say which of a
    # service's files), stays an SQLite busy error, and nothing is written.
    db = tmp_path / "busy memories.db"
    with SQLiteStore(db, timeout=0.05) as store, SQLiteAffectiveStateStore(
        tmp_path / "busy state.db", timeout=0.05
    ) as states:
        store.save(mem("kept", [1, 0]))
        states.save({"kept": True})
        for path in (db, tmp_path / "busy state.db"):
            holder = sqlite3.connect(path, isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")
            try:
                with pytest.raises(sqlite3.OperationalError) as caught:
                    if path == db:
                        store.save(mem("blocked", [0, 1]))
                    else:
                        states.save({"blocked": True})
            finally:
                holder.execute("ROLLBACK")
                holder.close()
            message = str(caught.value)
            assert str(path) in message and "locked" in message
            assert "0.05 s" in message
            assert caught.value.sqlite_errorname.startswith("SQLITE_BUSY")
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:  # opening the file while it is held says the same
            with pytest.raises(sqlite3.OperationalError, match=r"timeout of 0\.05 s") as caught:
                SQLiteStore(db, timeout=0.05)
            assert str(caught.value).count(str(db)) == 1
            assert caught.value.sqlite_errorname.startswith("SQLITE_BUSY")
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert [m.content for m in store.list_all()] == ["kept"]
        assert states.load_snapshot() == {"kept": True}
        store.save(mem("after", [0, 1]))  # the store is usable once the lock is gone
        assert len(store) == 2
