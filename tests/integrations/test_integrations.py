"""integrations.langchain (real langchain-core) and integrations.mem0."""

from __future__ import annotations

from pathlib import Path

import pytest

from emotional_memory import EmotionalMemory, InMemoryStore, SQLiteStore
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.integrations.mem0 import EmotionalMemoryMem0Backend, messages_to_content
from support.clocks import SecondClock


def engine(store: object | None = None) -> EmotionalMemory:
    return EmotionalMemory(
        store if store is not None else InMemoryStore(),  # type: ignore[arg-type]
        HashingEmbedder(),
        clock=SecondClock(),
    )


EVENTS = [
    "My sister's wedding was the happiest day of the year",
    "The car broke down on the highway in the rain",
    "I finally finished the marathon, exhausted but proud",
    "Our dog got sick and we spent the night at the vet",
    "Dinner with old friends, lots of laughter",
]


# ----------------------------------------------------------------------- mem0


def test_messages_to_content() -> None:
    assert messages_to_content("plain") == "plain"
    msgs = [
        {"role": "user", "content": "I love hiking"},
        {"role": "assistant", "content": ""},
        {"content": "no role"},
        {"role": "assistant", "content": "Noted!"},
    ]
    assert messages_to_content(msgs) == "user: I love hiking\nno role\nassistant: Noted!"
    assert messages_to_content([]) == ""
    with pytest.raises(TypeError):
        messages_to_content(["not a dict"])  # type: ignore[list-item]


def test_mem0_add_get_search_delete_shapes() -> None:
    m = EmotionalMemoryMem0Backend(engine())
    out = m.add([{"role": "user", "content": EVENTS[0]}], user_id="alice", metadata={"k": 1})
    (added,) = out["results"]
    assert added["event"] == "ADD" and added["memory"] == f"user: {EVENTS[0]}"
    got = m.get(added["id"])
    assert got == {
        "id": added["id"],
        "memory": added["memory"],
        "metadata": {"k": 1, "role": "user", "user_id": "alice"},
    }
    for text in EVENTS[1:]:
        m.add(text, user_id="bob")
    m.add(EVENTS[2], user_id="alice", metadata={"user_id": "mallory"})  # user_id wins
    found = m.search("wedding day", user_id="alice", limit=5)["results"]
    assert found[0]["memory"] == f"user: {EVENTS[0]}"
    assert {r["metadata"]["user_id"] for r in found} == {"alice"} and len(found) == 2
    assert all(set(r) == {"id", "memory", "score", "metadata"} for r in found)
    assert found[0]["score"] >= found[1]["score"]
    assert len(m.search("wedding", user_id="bob", limit=2)["results"]) == 2
    assert m.search("wedding", user_id="alice", filters={"k": 1})["results"][0]["id"] == added["id"]
    assert m.search("anything", user_id="nobody")["results"] == []
    assert [r["memory"] for r in m.get_all(user_id="bob")["results"]] == EVENTS[1:]
    assert len(m.get_all(user_id="bob", limit=2)["results"]) == 2
    assert m.update(added["id"], "user: a quiet wedding") == {
        "message": "Memory updated successfully!"
    }
    updated = m.get(added["id"])
    assert updated is not None and updated["memory"] == "user: a quiet wedding"
    assert updated["metadata"]["user_id"] == "alice"
    with pytest.raises(KeyError):
        m.update("no-such-id", "x")
    assert m.delete(added["id"]) == {"message": "Memory deleted successfully!"}
    assert m.get(added["id"]) is None
    assert m.delete_all(user_id="bob") == {"message": "Memory deleted successfully!"}
    assert m.get_all(user_id="bob")["results"] == []
    assert len(m.get_all(user_id="alice")["results"]) == 1
    with pytest.raises(ValueError):
        m.search("x", limit=0)
    m.reset()
    assert m.em.list_all() == [] and "memories=0" in repr(m)


def test_mem0_default_user_and_scopes() -> None:
    m = EmotionalMemoryMem0Backend(engine(), default_user_id="me")
    m.add("first", agent_id="a1")
    m.add("second", agent_id="a2", run_id="r")
    assert [r["memory"] for r in m.get_all()["results"]] == ["first", "second"]
    assert [r["memory"] for r in m.get_all(agent_id="a2")["results"]] == ["second"]
    assert m.add([{"role": "user", "content": ""}])["results"] == []
    m.delete_all(agent_id="a1")
    assert [r["memory"] for r in m.get_all()["results"]] == ["second"]


# ------------------------------------------------------------------ langchain

lc = pytest.importorskip("langchain_core", reason="the langchain extra is not installed")

from langchain_core.chat_history import BaseChatMessageHistory  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402

from emotional_memory.integrations.langchain import (  # noqa: E402
    EmotionalMemoryChatHistory,
    EmotionalMemoryRetriever,
    recommended_conversation_policy,
    store_all_messages,
)


def test_policies() -> None:
    assert store_all_messages(SystemMessage("x")) == "store"
    assert recommended_conversation_policy(HumanMessage("I got the job!")) == "store"
    assert recommended_conversation_policy(HumanMessage("  Recall my trip")) == "ignore"
    assert recommended_conversation_policy(HumanMessage("remember")) == "ignore"
    assert recommended_conversation_policy(HumanMessage("Remembering is hard")) == "store"
    assert recommended_conversation_policy(AIMessage("Congrats!")) == "state_only"
    assert recommended_conversation_policy(SystemMessage("be nice")) == "ignore"


def test_chat_history_with_recommended_policy() -> None:
    em = engine()
    h = EmotionalMemoryChatHistory(em, message_policy=recommended_conversation_policy)
    assert isinstance(h, BaseChatMessageHistory)
    h.add_user_message("I just got promoted at work, I am thrilled!")
    state_before = em.get_state().snapshot()
    h.add_ai_message("That's wonderful news, congratulations!")
    assert em.get_state().snapshot() != state_before  # state_only moved the state
    h.add_messages([HumanMessage("recall my promotion"), SystemMessage("system note")])
    assert [type(m) for m in h.messages] == [HumanMessage, AIMessage, HumanMessage, SystemMessage]
    stored = em.list_all()
    assert [(m.content, m.metadata) for m in stored] == [
        ("I just got promoted at work, I am thrilled!", {"role": "user"})
    ]
    h.messages.append(HumanMessage("not added"))  # a copy
    assert len(h.messages) == 4 and "messages=4" in repr(h)


def test_chat_history_store_all_reloads_from_durable_store(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    em = engine(SQLiteStore(path))
    h = EmotionalMemoryChatHistory(em)
    h.add_user_message("We adopted a kitten today")
    h.add_ai_message("How lovely!")
    h.add_message(SystemMessage("system"))
    em.close()
    h2 = EmotionalMemoryChatHistory(engine(SQLiteStore(path)))
    assert [(type(m), m.content) for m in h2.messages] == [
        (HumanMessage, "We adopted a kitten today"),
        (AIMessage, "How lovely!"),
        (SystemMessage, "system"),
    ]
    h2.clear()
    assert h2.messages == [] and h2.em.list_all() == []
    h2.messages = [HumanMessage("again"), AIMessage("yes")]
    assert [m.content for m in h2.em.list_all()] == ["again", "yes"]
    h2.em.close()


def test_chat_history_rejects_bad_policy() -> None:
    h = EmotionalMemoryChatHistory(engine(), message_policy=lambda m: "keep")  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="keep"):
        h.add_user_message("x")
    assert h.messages == []
    with pytest.raises(TypeError):
        EmotionalMemoryChatHistory(engine(), message_policy="store")  # type: ignore[arg-type]


def test_retriever_documents_carry_score_and_breakdown() -> None:
    a, b = engine(), engine()
    for text in EVENTS:
        a.encode(text)
        b.encode(text)
    retriever = EmotionalMemoryRetriever(memory=a, top_k=3)
    assert isinstance(retriever, BaseRetriever)
    docs = retriever.invoke("a happy wedding with friends")
    expected = b.retrieve_with_explanations("a happy wedding with friends", top_k=3)
    assert len(docs) == 3 and all(isinstance(d, Document) for d in docs)
    assert [d.page_content for d in docs] == [e.memory.content for e in expected]
    for doc, exp in zip(docs, expected, strict=True):
        assert doc.metadata["score"] == pytest.approx(exp.score, abs=0)
        assert doc.id == doc.metadata["memory_id"]
        bd = doc.metadata["breakdown"]
        assert set(bd) == {"weights", "raw_signals", "weighted_signals", "total_score"}
        assert bd["total_score"] == pytest.approx(exp.breakdown.total_score, abs=0)
        assert bd["raw_signals"] == exp.breakdown.raw_signals.model_dump(mode="json")
        assert doc.metadata["pass2_rank"] == exp.pass2_rank
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True)
    with pytest.raises(ValueError):
        EmotionalMemoryRetriever(memory=a, top_k=0)


def test_lazy_package_exports() -> None:
    import emotional_memory.integrations as integ

    assert integ.EmotionalMemoryChatHistory is EmotionalMemoryChatHistory
    assert integ.EmotionalMemoryMem0Backend is EmotionalMemoryMem0Backend
    assert "EmotionalMemoryRetriever" in dir(integ)
    with pytest.raises(AttributeError):
        integ.Nope  # noqa: B018


def test_retriever_breakdown_carries_the_lexical_signal_when_on() -> None:
    from emotional_memory.engine import EmotionalMemoryConfig

    config = EmotionalMemoryConfig.model_validate({"retrieval": {"lexical_weight": 0.3}})
    em = EmotionalMemory(InMemoryStore(), HashingEmbedder(), config=config, clock=SecondClock())
    for text in EVENTS:
        em.encode(text)
    (doc,) = EmotionalMemoryRetriever(memory=em, top_k=1).invoke("marathon proud")
    bd = doc.metadata["breakdown"]
    assert bd["lexical_weight"] == pytest.approx(
        em.retrieve_with_explanations("marathon proud", top_k=1)[0].breakdown.lexical_weight
    )
    assert 0.0 <= bd["lexical_signal"] <= 1.0
