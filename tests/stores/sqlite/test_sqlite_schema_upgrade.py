"""SQLiteStore opens a file written by an older schema and upgrades it in place."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from emotional_memory import CoreAffect, EmotionalMemory, SQLiteStore
from emotional_memory.embedders import HashingEmbedder
from support.scopes import T0, Clock


def test_a_schema_1_file_gains_scope_and_expiry_columns_in_one_open(tmp_path: Path) -> None:
    import json
    import sqlite3

    from emotional_memory.models import make_emotional_tag
    from emotional_memory.mood import MoodField

    path = tmp_path / "v1.db"
    tag = make_emotional_tag(CoreAffect.neutral(), __import__(
        "emotional_memory.affect", fromlist=["AffectiveMomentum"]).AffectiveMomentum.zero(),
        MoodField.neutral(T0), 0.5, now=T0)
    raw = sqlite3.connect(path)
    with raw:  # the layout main's schema 1 wrote
        raw.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        raw.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        raw.execute("""CREATE TABLE memories (seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL UNIQUE, content TEXT NOT NULL, embedding BLOB, dim INTEGER,
            tag TEXT NOT NULL, metadata TEXT NOT NULL)""")
        raw.execute("CREATE TABLE changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                    "id TEXT NOT NULL, deleted INTEGER NOT NULL)")
        raw.execute("INSERT INTO memories (id, content, embedding, dim, tag, metadata) "
                    "VALUES ('old', 'an old memory', NULL, NULL, ?, ?)",
                    (tag.model_dump_json(), json.dumps({"k": 1})))
    raw.close()
    store = SQLiteStore(path)
    engine = EmotionalMemory(store, HashingEmbedder(dim=16), clock=Clock())
    assert [(m.id, m.scope, m.expires_at) for m in engine.list_all()] == [("old", (), None)]
    engine.scoped("alice").encode("new", expires_at=T0 + timedelta(days=1))
    engine.close()
    raw = sqlite3.connect(path)
    cols = {row[1] for row in raw.execute("PRAGMA table_info(em_memories)")}
    assert {"scope", "expires_at"} <= cols
    rows = raw.execute("SELECT id, scope, expires_at FROM em_memories ORDER BY seq").fetchall()
    raw.close()
    assert rows[0] == ("old", "[]", None) and rows[1][1] == '["alice"]'
    assert rows[1][2] == int((T0 + timedelta(days=1)).timestamp() * 1_000_000)
