"""LangChain adapters: scopes follow the retriever's fields; bad input changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

pytest.importorskip("langchain_core", reason="the langchain extra is not installed")

from emotional_memory import EmotionalMemory, InMemoryStore
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.integrations.langchain import EmotionalMemoryRetriever

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ALICE = ["My sister's wedding was wonderful", "I finished the marathon, proud"]
BOB = ["The car broke down in the rain", "Our dog got sick at night"]


def _engine() -> EmotionalMemory:
    return EmotionalMemory(InMemoryStore(), HashingEmbedder(), clock=lambda: NOW)


def _shared() -> EmotionalMemory:
    em = _engine()
    for a, b in zip(ALICE, BOB, strict=True):
        em.scoped("alice").encode(a)
        em.scoped("bob").encode(b)
    return em


def _alone(user: str, texts: list[str]) -> EmotionalMemory:
    em = _engine()
    for text in texts:
        em.scoped(user).encode(text)
    return em


def _ranked(retriever: EmotionalMemoryRetriever, query: str) -> list[tuple[str, float]]:
    return [(d.page_content, d.metadata["score"]) for d in retriever.invoke(query)]


def test_retriever_follows_an_assigned_scope() -> None:
    retriever = EmotionalMemoryRetriever(memory=_shared(), scope=("alice",), top_k=4)
    assert {c for c, _ in _ranked(retriever, "rain")} == set(ALICE)
    retriever.scope = ("bob",)
    only_bob = EmotionalMemoryRetriever(memory=_alone("bob", BOB), scope=("bob",), top_k=4)
    assert _ranked(retriever, "rain") == _ranked(only_bob, "rain")


def test_retriever_model_copy_with_another_scope_uses_it() -> None:
    retriever = EmotionalMemoryRetriever(memory=_shared(), scope=("alice",), top_k=4)
    retriever.invoke("wedding")  # the alice view is built
    copy = retriever.model_copy(update={"scope": ("bob",)})
    assert {c for c, _ in _ranked(copy, "wedding")} == set(BOB)
    assert {c for c, _ in _ranked(retriever, "wedding")} == set(ALICE)


def test_retriever_follows_an_assigned_engine() -> None:
    other = _engine()
    other.encode("A different engine's memory")
    retriever = EmotionalMemoryRetriever(memory=_shared(), top_k=4)
    retriever.memory = other
    assert [c for c, _ in _ranked(retriever, "memory")] == ["A different engine's memory"]


def test_retriever_scope_string_is_one_part() -> None:
    retriever = EmotionalMemoryRetriever(memory=_shared(), scope="alice", top_k=4)
    assert retriever.scope == ("alice",)
    only_alice = EmotionalMemoryRetriever(memory=_alone("alice", ALICE), scope="alice", top_k=4)
    assert _ranked(retriever, "wedding") == _ranked(only_alice, "wedding")
    retriever.scope = "bob"  # type: ignore[assignment]
    assert retriever.scope == ("bob",)
    assert {c for c, _ in _ranked(retriever, "wedding")} == set(BOB)


def test_retriever_rejects_a_bad_assignment_and_keeps_its_fields() -> None:
    retriever = EmotionalMemoryRetriever(memory=_shared(), scope=("alice",), where=None)
    with pytest.raises(ValueError, match="where"):
        retriever.where = {"$bad": 1}
    with pytest.raises(ValueError, match="scope"):
        retriever.scope = 5  # type: ignore[assignment]
    with pytest.raises(ValueError, match="top_k"):
        retriever.top_k = 0
    assert (retriever.where, retriever.scope, retriever.top_k) == (None, ("alice",), 4)
    with pytest.raises(ValueError, match="scope path part 0"):
        EmotionalMemoryRetriever(memory=_shared(), scope=("",))
