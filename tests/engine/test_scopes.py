"""Scopes, filters and expiry at the engine, independent of the store.

The store contract (separate engines per scope, ``where``, expiry, links, over every
backend) is ``tests/stores/contract/``. Here, on the in-memory store: bad filters,
scope paths and expiry refused before anything changes, the dialect's semantics of
missing fields, nulls and types written out by hand, state stores without scopes,
expiry through export / import, async views under ``asyncio.gather``, the README
example, and the mem0 and LangChain integrations' scopes.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from emotional_memory import (
    AsyncEmotionalMemory,
    EmotionalMemory,
    InMemoryStore,
    SQLiteStore,
)
from emotional_memory.embedders import HashingEmbedder
from support.paths import README
from support.scopes import SCOPES, T0, WORDS, Clock, tags

# ---------------------------------------------------------------- where filters


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ({"valence": {"$gtt": 1}}, "unknown operator '\\$gtt'"),
        ({"$nor": [{"a": 1}]}, "unknown operator '\\$nor'"),
        ({"valence": {"$gt": "high"}}, "valence"),
        ({"timestamp": {"$lt": "yesterday"}}, "timestamp"),
        ({"timestamp": {"$lt": "2025-01-01T00:00:00"}}, "timezone-aware"),
        ({"a": {"$in": 3}}, "\\$in takes a list"),
        ({"a": {"$exists": "yes"}}, "\\$exists"),
        ({"$and": []}, "\\$and takes a non-empty list"),
        ({"$or": {"a": 1}}, "\\$or takes a non-empty list"),
        ({"a": {"$gt": None}}, "number or a string"),
        ({"a": {"$gt": float("nan")}}, "finite"),
        ({"a": [1, 2]}, "string, number, boolean or null"),
        ({"": 1}, "non-empty string"),
        ({"a..b": 1}, "empty path segment"),
        ({"a": "\ud800"}, "'a' \\$eq is not valid Unicode text"),
        ({"emotion": {"$in": ["joy", "\udfff"]}}, "not valid Unicode text"),
        ({"\ud800.b": 1}, "field .* is not valid Unicode text"),
        ({}, "empty clause"),
        (["a"], "where must be a dict"),
    ],
)
def test_bad_where_is_refused_before_anything_changes(where: Any, message: str) -> None:
    clock = Clock()
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), clock=clock)
    engine.encode("a rainy bridge", metadata={"a": 1})
    before = tags(engine.list_all())
    for call in (
        lambda: engine.retrieve("rain", where=where),
        lambda: engine.retrieve_with_explanations("rain", where=where),
        lambda: engine.list_all(where=where),
        lambda: engine.export_memories(where=where),
        lambda: engine.prune(0.99, where=where),
    ):
        with pytest.raises(ValueError, match=message):
            call()
    assert tags(engine.list_all()) == before


def test_where_semantics_of_missing_fields_null_and_types() -> None:
    clock = Clock()
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), clock=clock)
    a = engine.encode("one", metadata={"n": 1, "s": "x", "b": True, "z": None})
    b = engine.encode("two", metadata={"n": 2.5, "s": "y"})
    c = engine.encode("three", metadata={})

    def ids(where: dict[str, Any]) -> list[str]:
        return [m.id for m in engine.list_all(where=where)]

    assert ids({"n": 1.0}) == [a.id]  # 1 == 1.0
    assert ids({"b": 1}) == []  # booleans only equal booleans
    assert ids({"n": {"$gt": "0"}}) == []  # strings never compare with numbers
    assert ids({"n": {"$ne": 1}}) == [b.id, c.id]  # missing counts as not equal
    assert ids({"n": {"$nin": [1, 2.5]}}) == [c.id]
    assert ids({"z": None}) == [a.id, b.id, c.id]  # null or missing
    assert ids({"z": {"$exists": True}}) == [a.id]
    assert ids({"s": {"$gte": "x"}}) == [a.id, b.id]
    assert ids({"metadata.n": 2.5}) == [b.id]
    assert ids({"$or": [{"n": 1}, {"s": "y"}], "s": {"$ne": "x"}}) == [b.id]


# ---------------------------------------------------------------- ids, nesting, state


@pytest.mark.parametrize("bad", [(), ("",), ("alice", 3), (None,), ("a\x00b",), ("ok", "\ud800")])
def test_bad_scope_paths_are_refused(bad: tuple[Any, ...]) -> None:
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16))
    with pytest.raises(ValueError, match=r"scope|path"):
        engine.scoped(*bad)


def test_a_state_store_without_scopes_is_refused() -> None:
    class Plain:
        def save(self, state: Any) -> None: ...
        def load(self) -> Any: return None
        def clear(self) -> None: ...

    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), state_store=Plain())
    with pytest.raises(TypeError, match="one state per scope"):
        engine.scoped("alice")


# ---------------------------------------------------------------- expiry


def test_expiry_travels_through_export_and_import_and_a_reopen(tmp_path: Path) -> None:
    clock = Clock()
    soon = T0 + timedelta(days=1)
    first = EmotionalMemory(SQLiteStore(tmp_path / "a.db"), HashingEmbedder(dim=16),
                            clock=clock)
    m = first.scoped("alice").encode("exam tomorrow", expires_at=soon)
    data = first.export_memories()
    first.close()
    reopened = EmotionalMemory(SQLiteStore(tmp_path / "a.db"), HashingEmbedder(dim=16),
                               clock=clock)
    assert reopened.get(m.id) == m
    other = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), clock=clock)
    assert other.import_memories(data) == 1
    assert other.get(m.id).expires_at == soon
    assert other.get(m.id).scope == ("alice",)  # a record keeps its scope ...
    assert other.scoped("alice").import_memories([data[0] | {"id": "z"}]) == 1
    with pytest.raises(ValueError, match="outside this view"):  # ... unless it is outside
        other.scoped("bob").import_memories([data[0] | {"id": "x"}])
    assert other.scoped("carol").import_memories([data[0] | {"id": "y", "scope": []}]) == 1
    assert other.get("y").scope == ("carol",)
    reopened.close()


def test_bad_expiry_is_refused() -> None:
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16))
    with pytest.raises(ValueError, match="expires_at must be timezone-aware"):
        engine.encode("x", expires_at=datetime(2030, 1, 1))
    with pytest.raises(TypeError, match="expires_at"):
        engine.encode("x", expires_at="2030-01-01")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="one entry per content"):
        engine.encode_batch(["a", "b"], expires_at=[None])
    late = datetime(9999, 12, 31, 23, 59, tzinfo=timezone(timedelta(hours=-14)))
    early = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14)))
    for moment in (late, early):  # aware, but not a UTC datetime
        with pytest.raises(ValueError, match="expires_at is outside the years 1 to 9999"):
            engine.encode("x", expires_at=moment)
        with pytest.raises(ValueError, match=r"expires_at\[1\] is outside"):
            engine.encode_batch(["a", "b"], expires_at=[None, moment])
    assert len(engine) == 0


# ---------------------------------------------------------------- async


def test_async_views_under_gather_answer_as_sync_separate_engines() -> None:
    clock = Clock()
    embedder = HashingEmbedder(dim=32)
    shared = AsyncEmotionalMemory(InMemoryStore(), embedder, clock=clock)
    views = [shared.scoped(s) for s in SCOPES]
    alone = [EmotionalMemory(InMemoryStore(), embedder, clock=clock) for _ in SCOPES]
    texts = {s: [f"{WORDS[(i + k) % 10]} {WORDS[(2 * i + k) % 10]} day {i}" for i in range(8)]
             for k, s in enumerate(SCOPES)}

    async def run() -> list[list[list[str]]]:
        await asyncio.gather(*(v.encode_batch(texts[s]) for v, s in zip(views, SCOPES,
                                                                          strict=True)))
        return list(await asyncio.gather(*(
            asyncio.gather(*(v.retrieve(q, 3) for q in ("rain bridge", "dog music")))
            for v in views
        )))

    got = asyncio.run(run())
    for s, oracle in enumerate(alone):
        oracle.encode_batch(texts[SCOPES[s]])
        want = [[m.content for m in oracle.retrieve(q, 3)] for q in ("rain bridge", "dog music")]
        assert [[m.content for m in r] for r in got[s]] == want
    assert views[0].scope == ("alice",)


def test_the_readme_example_runs_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    import re

    readme = README
    section = readme.read_text(encoding="utf-8").split("## Many users in one store", 1)[1]
    code = re.findall(r"```python\n(.*?)```", section.split("\n## ", 1)[0], flags=re.S)[0]
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "['The exam went fine.']"
    assert out[2] == "Lunch with Sam was lovely."


def test_mem0_users_are_hard_partitions() -> None:
    from emotional_memory.integrations.mem0 import EmotionalMemoryMem0Backend

    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=32), clock=Clock())
    m = EmotionalMemoryMem0Backend(engine)
    for i in range(200):
        m.add(f"wedding day plans {i} with the family", user_id="alice")
    m.add("a quiet walk in the garden", user_id="bob", agent_id="coach")
    m.add("wedding music for the garden party", user_id="bob", agent_id="planner")
    before = tags(engine.scoped("alice").list_all())
    # bob's memories rank below alice's for this query: bob still gets his own
    found = m.search("wedding day plans with the family", user_id="bob", limit=5)["results"]
    assert [r["memory"] for r in found] == [
        "wedding music for the garden party", "a quiet walk in the garden"
    ]
    assert tags(engine.scoped("alice").list_all()) == before  # no side effect on alice
    only = m.search("garden", user_id="bob", agent_id="coach")["results"]
    assert [r["memory"] for r in only] == ["a quiet walk in the garden"]
    filtered = m.search("garden", user_id="bob", filters={"agent_id": {"$ne": "coach"}})
    assert [r["memory"] for r in filtered["results"]] == ["wedding music for the garden party"]
    assert [r["memory"] for r in m.get_all(user_id="bob", agent_id="planner")["results"]] == [
        "wedding music for the garden party"
    ]
    with pytest.raises(ValueError, match="unknown operator"):
        m.search("garden", user_id="bob", filters={"agent_id": {"$like": "c%"}})
    m.delete_all(user_id="bob", agent_id="coach")
    assert len(engine.scoped("bob")) == 1 and len(engine.scoped("alice")) == 200


def test_langchain_retriever_and_history_take_a_scope_and_where() -> None:
    from emotional_memory.integrations.langchain import (
        EmotionalMemoryChatHistory,
        EmotionalMemoryRetriever,
    )

    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=32), clock=Clock())
    alice = EmotionalMemoryChatHistory(engine, scope=("alice",))
    bob = EmotionalMemoryChatHistory(engine, scope="bob")
    alice.add_user_message("my dog loves the harbour")
    bob.add_user_message("my dog hates the rain")
    alice.add_ai_message("the harbour is lovely in spring")
    assert [m.content for m in alice.messages] == [
        "my dog loves the harbour", "the harbour is lovely in spring"
    ]
    assert [m.content for m in EmotionalMemoryChatHistory(engine, scope="bob").messages] == [
        "my dog hates the rain"
    ]
    retriever = EmotionalMemoryRetriever(memory=engine, scope=("alice",), top_k=5,
                                         where={"role": "user"})
    docs = retriever.invoke("dog")
    assert [d.page_content for d in docs] == ["my dog loves the harbour"]
    with pytest.raises(ValueError, match="unknown operator"):
        EmotionalMemoryRetriever(memory=engine, where={"role": {"$regex": "u"}})
    bob.clear()
    assert len(engine.scoped("alice")) == 2 and len(engine.scoped("bob")) == 0


# -- the column-wise where mask against the reference semantics ------------------------


