"""Drop-in compatibility with the original 0.18.1's mem0 facade: memories it wrote.

The original's ``EmotionalMemoryMem0Backend`` kept every user's memories at the root
of one engine, each tagged ``metadata["user_id"]`` (``"default"`` without a user).
This library gives each user a scope; a store the original filled (e.g. its SQLite
file, SPEC 11) must still answer each user's calls with that user's memories, and
with no one else's. Nothing here imports or needs the original.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from emotional_memory import EmotionalMemory, InMemoryStore, Memory, SQLiteStore
from emotional_memory.integrations.mem0 import EmotionalMemoryMem0Backend
from support.compat_original import HashEmbedder

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

WRITTEN = [  # (user, text) in the order the original's facade stored them
    ("alice", "I love hiking in the Alps"),
    ("bob", "My car broke down in the rain"),
    ("alice", "The hiking trip ended in a storm"),
    ("default", "A quiet day at home"),
    ("bob", "Hiking with my dog in the hills"),
]


def _engine(store: Any = None) -> EmotionalMemory:
    return EmotionalMemory(
        store if store is not None else InMemoryStore(), HashEmbedder(), clock=lambda: NOW
    )


def _as_the_original_wrote(em: EmotionalMemory) -> list[Memory]:
    """What the original's ``add(text, user_id=u)`` stored: one root memory each,
    ``metadata={"user_id": u}``."""
    return [em.encode(text, metadata={"user_id": user}) for user, text in WRITTEN]


def _records(memories: list[Memory], user: str) -> list[tuple[str, str, dict[str, Any]]]:
    return [(m.id, m.content, dict(m.metadata)) for m in memories
            if m.metadata["user_id"] == user]


def _oracle_search(memories: list[Memory], user: str, query: str) -> list[tuple[str, float]]:
    """A separate engine holding only ``user``'s memories, in that user's scope."""
    ids = {m.id for m in memories if m.metadata["user_id"] == user}
    oracle = _engine()
    records = []
    for m in memories:
        if m.id in ids:
            links = [lk for lk in m.tag.resonance_links if lk.target_id in ids]
            tag = m.tag.model_copy(update={"resonance_links": links})
            records.append(m.model_copy(update={"tag": tag}).model_dump(mode="json"))
    oracle.scoped(user).import_memories(records)
    found = oracle.scoped(user).retrieve_with_explanations(query, top_k=10)
    return [(e.memory.id, float(e.score)) for e in found]


def test_the_originals_memories_are_each_users_own() -> None:
    em = _engine()
    written = _as_the_original_wrote(em)
    m = EmotionalMemoryMem0Backend(em)
    for user in ("alice", "bob", "default"):
        got = m.get_all(user_id=user)["results"]
        assert [(r["id"], r["memory"], r["metadata"]) for r in got] == _records(written, user)
    assert [r["memory"] for r in m.get_all()["results"]] == ["A quiet day at home"]
    assert m.get_all(user_id="carol")["results"] == []
    assert sorted(x.id for x in em.list_all()) == sorted(x.id for x in written)  # all kept


def test_search_ranks_a_users_original_memories_as_an_engine_of_theirs_alone() -> None:
    written = _as_the_original_wrote(_engine())
    em = _engine()
    em.import_memories([x.model_dump(mode="json") for x in written])
    m = EmotionalMemoryMem0Backend(em)
    for user in ("alice", "bob"):
        found = m.search("hiking", user_id=user)["results"]
        assert [(r["id"], r["score"]) for r in found] == _oracle_search(written, user, "hiking")
        assert {r["metadata"]["user_id"] for r in found} == {user}


def test_delete_all_reaches_a_users_original_memories_only() -> None:
    em = _engine()
    written = _as_the_original_wrote(em)
    m = EmotionalMemoryMem0Backend(em)
    m.delete_all(user_id="alice")
    assert m.get_all(user_id="alice")["results"] == []
    left = [x for x in written if x.metadata["user_id"] != "alice"]
    assert sorted(x.id for x in em.list_all()) == sorted(x.id for x in left)


def test_an_original_sqlite_file_answers_through_the_facade(tmp_path: Path) -> None:
    """The original's memory table (``memories(id, content, data)``), opened twice."""
    written = _as_the_original_wrote(_engine())
    path = tmp_path / "original.db"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE memories (id TEXT PRIMARY KEY, content TEXT NOT NULL, data TEXT NOT NULL)"
    )
    for x in written:
        row = (x.id, x.content, x.model_dump_json())
        conn.execute("INSERT INTO memories VALUES (?, ?, ?)", row)
    conn.commit()
    conn.close()
    for _ in range(2):
        with SQLiteStore(path) as store:
            m = EmotionalMemoryMem0Backend(_engine(store))
            got = m.get_all(user_id="bob")["results"]
            assert [(r["id"], r["memory"], r["metadata"]) for r in got] == _records(written, "bob")
            found = m.search("hiking", user_id="alice")["results"]
            assert {r["id"] for r in found} == {x.id for x in written
                                                if x.metadata["user_id"] == "alice"}


def test_a_facade_over_a_scoped_engine_takes_that_scopes_original_memories() -> None:
    em = _engine()
    tenant = em.scoped("tenant")
    written = _as_the_original_wrote(tenant)
    m = EmotionalMemoryMem0Backend(tenant)
    got = m.get_all(user_id="alice")["results"]
    assert [(r["id"], r["memory"], r["metadata"]) for r in got] == _records(written, "alice")
    assert EmotionalMemoryMem0Backend(em.scoped("other")).get_all(user_id="alice")["results"] == []


def test_a_users_adopted_memories_link_only_to_that_users_memories() -> None:
    """As the oracle's engine of one user: the original's links between users' memories
    are not carried into a user's scope, whose view would otherwise show the other
    users' memory ids (the import refuses such a link)."""
    em = _engine()
    _as_the_original_wrote(em)
    written = em.list_all()  # backward links included
    owner = {x.id: x.metadata["user_id"] for x in written}
    assert any(owner[lk.target_id] != owner[x.id]
               for x in written for lk in x.tag.resonance_links)  # the original's
    m = EmotionalMemoryMem0Backend(em)
    for user in ("alice", "bob", "default"):
        m.get_all(user_id=user)
        for x in written:
            if owner[x.id] == user:
                got = em.scoped(user).get(x.id)
                assert got is not None
                assert [lk.target_id for lk in got.tag.resonance_links] == [
                    lk.target_id for lk in x.tag.resonance_links if owner[lk.target_id] == user
                ]
