"""Drop-in compatibility with the original library 0.18.1 (SPEC 11): opening and migrating
the original's SQLite memory and state files.

The expectations are written from SPEC 11 (the facts checked against the original's
code), with plain-Python oracles where a number is involved; nothing here imports or
needs the original.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emotional_memory import (
    AffectiveState,
    CoreAffect,
    Memory,
    SQLiteAffectiveStateStore,
    SQLiteStore,
)
from emotional_memory.replay import TickClock
from support.compat_original import (
    START,
    _seeded_memories,
    engine,
)


def test_sqlite_defaults_to_memory() -> None:
    with SQLiteStore() as store, SQLiteAffectiveStateStore() as states:
        assert store.path == ":memory:"
        assert len(store) == 0 and states.load() is None


# --------------------------------------------------------------------------- files


def _original_layout_db(path: Path, memories: list[Memory]) -> None:
    """A memory database in the original's layout, written by hand (SPEC 11)."""
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE memories (id TEXT PRIMARY KEY, content TEXT NOT NULL, data TEXT NOT NULL)"
    )
    for m in memories:
        conn.execute(
            "INSERT INTO memories (id, content, data) VALUES (?, ?, ?)",
            (m.id, m.content, m.model_dump_json()),
        )
    # The original's sqlite-vec table (a vec0 virtual table this library cannot load)
    # and one of its shadow tables: both must survive untouched.
    conn.execute("CREATE TABLE memory_vec_rowids (id TEXT, x INTEGER)")
    conn.execute("INSERT INTO memory_vec_rowids VALUES ('x', 1)")
    conn.commit()
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute(
        "INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) VALUES "
        "('table', 'memory_vec', 'memory_vec', 0, "
        "'CREATE VIRTUAL TABLE memory_vec USING vec0(id TEXT PRIMARY KEY, embedding float[8])')"
    )
    conn.execute("PRAGMA writable_schema=OFF")
    conn.commit()
    conn.close()


def _original_tables(path: Path) -> dict[str, Any]:
    """Every table of the file that is not this library's, with its SQL and rows."""
    conn = sqlite3.connect(path)
    try:
        out: dict[str, Any] = {}
        for name, sql in conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name"
        ).fetchall():
            if name in {"meta", "changes", "em_memories", "em_affective_state"}:
                continue
            if name.startswith("sqlite_"):
                continue
            rows = (
                None if sql.startswith("CREATE VIRTUAL")
                else conn.execute(f'SELECT rowid, * FROM "{name}" ORDER BY rowid').fetchall()
            )
            out[name] = (sql, rows)
        return out
    finally:
        conn.close()


def test_sqlite_opens_the_originals_memory_file(tmp_path: Path) -> None:
    memories, state = _seeded_memories()
    # float64 values that are not float32 numbers: they must come back exactly
    memories = [
        m.model_copy(update={"embedding": [v + 1e-12 for v in m.embedding or []]})
        for m in memories
    ]
    path = tmp_path / "original.db"
    _original_layout_db(path, memories)
    before = _original_tables(path)
    assert set(before) == {"memories", "memory_vec", "memory_vec_rowids"}
    with SQLiteStore(path) as store:
        got = store.list_all()
        assert got == memories  # the original's order; embeddings float64, exactly
        engine(store=store).encode("a new memory")  # writes go to our table only
    with SQLiteStore(path) as store:
        reread = store.list_all()
        assert [(m.id, m.embedding) for m in reread[: len(memories)]] == [
            (m.id, m.embedding) for m in memories
        ]
        assert len(reread) == len(memories) + 1
    # The original's tables are exactly as they were: its store still finds them.
    assert _original_tables(path) == before
    conn = sqlite3.connect(path)
    try:
        count = conn.execute("SELECT COUNT(*) FROM em_memories").fetchone()[0]
        assert count == len(memories) + 1
        rows = conn.execute("SELECT data FROM memories ORDER BY rowid").fetchall()
        assert [Memory.model_validate_json(data) for (data,) in rows] == memories
    finally:
        conn.close()
    # Reopening does not migrate again; rankings equal an in-memory twin's.
    clock_a, clock_b = TickClock(START + timedelta(hours=1)), TickClock(START + timedelta(hours=1))
    with SQLiteStore(path) as store:
        a = engine(store=store, clock=clock_a)
        b = engine(clock=clock_b)
        b.import_memories([m.model_dump(mode="json") for m in store.list_all()])
        a.load_state(state)
        b.load_state(state)
        for q in ["prize party", "dog", "walk in the rain"]:
            ra = a.retrieve_with_explanations(q, top_k=3)
            rb = b.retrieve_with_explanations(q, top_k=3)
            assert [r.memory.id for r in ra] == [r.memory.id for r in rb]
            assert [r.score for r in ra] == pytest.approx([r.score for r in rb], abs=1e-12)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_interrupted_first_open_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    memories, _ = _seeded_memories()
    path = tmp_path / "original.db"
    _original_layout_db(path, memories)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE memories SET data = '{not json' WHERE rowid = 5")
    conn.commit()
    conn.close()
    before = _digest(path)
    with pytest.raises(ValueError, match="row 5"):
        SQLiteStore(path)
    assert _digest(path) == before
    assert not (tmp_path / "original.db-wal").exists() or (
        (tmp_path / "original.db-wal").stat().st_size == 0
    )
    conn = sqlite3.connect(path)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(memories)")]
    assert cols == ["id", "content", "data"]
    conn.close()


def test_interrupt_mid_migration_rolls_back(tmp_path: Path, monkeypatch: Any) -> None:
    memories, _ = _seeded_memories()
    path = tmp_path / "original.db"
    _original_layout_db(path, memories)
    before = _digest(path)
    calls = {"n": 0}
    real = Memory.model_validate_json.__func__  # type: ignore[attr-defined]

    def flaky(cls: Any, data: Any, *a: Any, **kw: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return real(cls, data, *a, **kw)

    monkeypatch.setattr(Memory, "model_validate_json", classmethod(flaky))
    with pytest.raises(KeyboardInterrupt):
        SQLiteStore(path)
    monkeypatch.undo()
    assert _digest(path) == before
    with SQLiteStore(path) as store:  # the next open migrates fully
        assert [m.id for m in store.list_all()] == [m.id for m in memories]


@pytest.mark.parametrize(
    ("data", "message"),
    [("[" * 10_000 + "]" * 10_000, "is not JSON: nested too deeply"),
     ("{not json", "is not JSON"), ("[1]", "is not a JSON object")],
)
def test_an_originals_state_slot_that_is_no_snapshot_is_named(
    tmp_path: Path, data: str, message: str
) -> None:
    # a slot nested past the parser was a raw RecursionError
    path = tmp_path / "state.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE affective_state (slot TEXT PRIMARY KEY, data TEXT NOT NULL)")
    conn.execute("INSERT INTO affective_state VALUES ('current', ?)", (data,))
    conn.commit()
    conn.close()
    with pytest.raises(ValueError, match=f"affective_state slot 'current' {message}"):
        SQLiteAffectiveStateStore(path)


def test_sqlite_state_store_opens_the_originals_state_file(tmp_path: Path) -> None:
    state = AffectiveState.initial(START)
    for i in range(3):
        state = state.update(
            CoreAffect(valence=-0.2 * i, arousal=0.7), now=START + timedelta(seconds=i)
        )
    snap = state.snapshot()
    path = tmp_path / "state.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE affective_state (slot TEXT PRIMARY KEY, data TEXT NOT NULL)")
    conn.execute("INSERT INTO affective_state VALUES ('current', ?)", (json.dumps(snap),))
    conn.commit()
    conn.close()
    with SQLiteAffectiveStateStore(path) as store:
        loaded = store.load()
        assert loaded is not None and loaded.snapshot() == snap
    with SQLiteAffectiveStateStore(path) as store:  # second open: no re-migration
        assert store.load_snapshot() == snap
    conn = sqlite3.connect(path)  # the original's table is untouched
    assert conn.execute("SELECT slot, data FROM affective_state").fetchall() == [
        ("current", json.dumps(snap))
    ]
    assert [r[1] for r in conn.execute("PRAGMA table_info(affective_state)")] == ["slot", "data"]
    conn.close()
    eng = engine(state_store=SQLiteAffectiveStateStore(path))
    assert eng.save_state() == snap


def test_sqlite_rebuild_vector_index(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "m.db") as store:
        eng = engine(store=store)
        eng.encode("one")
        eng.encode("two")
        assert store.rebuild_vector_index() == 2
        assert [m.content for m in store.list_all()] == ["one", "two"]


_V1_MEMORIES = """CREATE TABLE memories (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, content TEXT NOT NULL,
    embedding BLOB, dim INTEGER, tag TEXT NOT NULL, metadata TEXT NOT NULL)"""


def test_a_file_migrated_by_version_1_gets_the_originals_tables_back(tmp_path: Path) -> None:
    """Schema 1 renamed the original's tables and kept its own rows in ``memories`` /
    ``affective_state``; opening restores the original's names (a roll-back works again)
    and moves ours to ``em_*``, rows and order kept."""
    memories, state = _seeded_memories()
    path = tmp_path / "v1.db"
    _original_layout_db(path, memories)
    original = _original_tables(path)
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE memories RENAME TO memories_v0_18")
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    conn.execute(_V1_MEMORIES)
    conn.execute(
        "CREATE TABLE changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL, "
        "deleted INTEGER NOT NULL)"
    )
    for m in reversed(memories):  # schema 1 ordered by seq, not by the original's rowid
        blob = np.asarray(m.embedding, dtype="<f4").tobytes()
        conn.execute(
            "INSERT INTO memories (id, content, embedding, dim, tag, metadata) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (m.id, m.content, blob, len(m.embedding or []), m.tag.model_dump_json(),
             json.dumps(m.metadata)),
        )
    conn.execute("CREATE TABLE affective_state_v0_18 (slot TEXT PRIMARY KEY, data TEXT)")
    conn.execute("INSERT INTO affective_state_v0_18 VALUES ('current', '{}')")
    conn.execute(
        "CREATE TABLE affective_state (key TEXT PRIMARY KEY, snapshot TEXT NOT NULL, "
        "updated_at TEXT NOT NULL)"
    )
    conn.execute(
        "INSERT INTO affective_state VALUES ('default', ?, '2026-01-01')", (json.dumps(state),)
    )
    conn.commit()
    conn.close()
    with SQLiteStore(path) as store:
        assert store.schema_version == 3
        assert [m.id for m in store.list_all()] == [m.id for m in reversed(memories)]
        for got, want in zip(store.list_all(), reversed(memories), strict=True):
            assert got.embedding == np.asarray(want.embedding, "<f4").astype(float).tolist()
    with SQLiteAffectiveStateStore(path) as states:
        assert states.load_snapshot() == state
    after = _original_tables(path)
    # same rows (SQLite quotes a renamed table's name in its CREATE statement)
    assert after["memories"][1] == original["memories"][1]
    assert after["memories"][0].replace('"memories"', "memories") == original["memories"][0]
    assert after["memory_vec_rowids"] == original["memory_vec_rowids"]
    assert after["affective_state"][1] == [(1, "current", "{}")]
    assert not {"memories_v0_18", "affective_state_v0_18"} & set(after)


def test_sqlite_embeddings_stored_exactly(tmp_path: Path) -> None:
    """float32 numbers go in 4-byte blobs, other float64 values in 8-byte ones; both
    come back exactly (and NaN / -0.0 / huge values too)."""
    path = tmp_path / "e.db"
    tag = _seeded_memories()[0][0].tag
    vecs = [[0.5, -0.25, 1.0, 0.0], [0.1, 0.2, 0.3, 1e300], [float("nan"), -0.0, 3.0, 1e-320]]
    with SQLiteStore(path) as store:
        for i, v in enumerate(vecs):
            store.save(Memory(id=f"m{i}", content=str(i), embedding=v, tag=tag))
    conn = sqlite3.connect(path)
    sizes = [len(b) for (b,) in conn.execute("SELECT embedding FROM em_memories ORDER BY seq")]
    conn.close()
    assert sizes == [16, 32, 32]
    with SQLiteStore(path) as store:
        for i, v in enumerate(vecs):
            got = store.get(f"m{i}")
            assert got is not None and got.embedding is not None
            assert np.asarray(got.embedding).tobytes() == np.asarray(v).tobytes()


def test_sqlite_opens_an_original_file_in_wal_mode(tmp_path: Path) -> None:
    memories, _ = _seeded_memories()
    path = tmp_path / "wal.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")  # the original's stores run in WAL mode
    conn.commit()
    conn.close()
    _original_layout_db(path, memories)
    held = sqlite3.connect(path)  # another connection keeps the -wal/-shm files alive
    held.execute("SELECT COUNT(*) FROM memories").fetchone()
    try:
        with SQLiteStore(path) as store:
            assert [m.id for m in store.list_all()] == [m.id for m in memories]
    finally:
        held.close()


def test_a_memory_of_another_dimension_in_the_originals_file_is_named(tmp_path: Path) -> None:
    # the error named the dimensions only: which of thousands of rows was odd?
    memories, _ = _seeded_memories()
    odd = memories[3].model_copy(update={"embedding": (memories[3].embedding or [])[:4]})
    memories[3] = odd
    path = tmp_path / "original.db"
    _original_layout_db(path, memories)
    before = _digest(path)
    message = f"memory {odd.id!r} has an embedding of 4 dimensions, .* of 8"
    with pytest.raises(ValueError, match=message):
        SQLiteStore(path)
    assert _digest(path) == before


def test_an_originals_row_whose_data_has_no_id_keeps_the_rows_id(tmp_path: Path) -> None:
    # the original's get/delete find a row by its id column; the copy gave the memory a
    # fresh random id instead, so get(row id) found nothing
    memories, _ = _seeded_memories()
    path = tmp_path / "original.db"
    _original_layout_db(path, memories)
    data = memories[2].model_dump(mode="json")
    del data["id"]
    conn = sqlite3.connect(path)
    conn.execute("UPDATE memories SET data = ? WHERE id = ?", (json.dumps(data), memories[2].id))
    conn.commit()
    conn.close()
    with SQLiteStore(path) as store:
        assert store.get(memories[2].id) == memories[2]
        assert [m.id for m in store.list_all()] == [m.id for m in memories]


# Pinned from the original 0.18.1: its SQLiteStore opened a file holding exactly these
# rows (_seeded_memories in its layout), load_state(state), then these retrievals in
# order at a frozen clock (START + 1 h): (content, score) of the top 4.
_ORIGINAL_RANKINGS = {
    "prize party": [("rainy day", 0.6524248860031384), ("won the prize", 0.5047313231276689),
                    ("calm walk", 0.48836643121798506), ("loud argument", 0.42459163900521985)],
    "dog": [("rainy day", 0.6599452691392976), ("calm walk", 0.5422378567798487),
            ("loud argument", 0.3317290068902841), ("won the prize", 0.2648045487760125)],
    "walk in the rain": [("won the prize", 0.41741532398590364),
                         ("my dog died", 0.36772934546146524), ("rainy day", 0.33137944192509783),
                         ("calm walk", 0.3088940823038736)],
    "argument": [("rainy day", 0.6666159194435693), ("won the prize", 0.5746711529588305),
                 ("loud argument", 0.4799640293375794), ("calm walk", 0.41730338895026253)],
}


def test_rankings_on_an_originals_file_equal_the_originals(tmp_path: Path) -> None:
    memories, state = _seeded_memories()
    path = tmp_path / "original.db"
    _original_layout_db(path, memories)
    with SQLiteStore(path) as store:
        eng = engine(store=store, clock=TickClock(START + timedelta(hours=1), timedelta(0)))
        eng.load_state(state)
        for query, expected in _ORIGINAL_RANKINGS.items():
            got = eng.retrieve_with_explanations(query, top_k=4)
            assert [r.memory.content for r in got] == [c for c, _ in expected], query
            assert [r.score for r in got] == pytest.approx([s for _, s in expected], abs=1e-12)
        mood = eng.save_state()["mood"]
    assert (mood["valence"], mood["arousal"], mood["timestamp"]) == (
        -0.05367010272195545, 0.27737156303270805, "2026-01-01T00:01:10Z"
    )


def test_two_original_rows_holding_one_memory_id_are_named(tmp_path: Path) -> None:
    # the original lists both rows; the copy kept the last one only, silently
    memories, _ = _seeded_memories()
    path = tmp_path / "original.db"
    _original_layout_db(path, memories)
    twin = memories[4].model_copy(update={"id": memories[1].id})
    conn = sqlite3.connect(path)
    conn.execute(
        "UPDATE memories SET data = ? WHERE id = ?", (twin.model_dump_json(), memories[4].id)
    )
    conn.commit()
    conn.close()
    before = _digest(path)
    message = f"memories rows 2 and 5 both hold memory id {memories[1].id!r}"
    with pytest.raises(ValueError, match=message):
        SQLiteStore(path)
    assert _digest(path) == before
