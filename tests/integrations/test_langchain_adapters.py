"""LangChain adapters: scopes follow the retriever's fields; bad input changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

pytest.importorskip("langchain_core", reason="the langchain extra is not installed")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from emotional_memory import AsyncEmotionalMemory, EmotionalMemory, InMemoryStore
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.integrations.langchain import (
    EmotionalMemoryChatHistory,
    EmotionalMemoryRetriever,
)

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
    with pytest.raises(ValueError, match=r"scope\[0\] must be a non-empty"):
        EmotionalMemoryRetriever(memory=_shared(), scope=("",))


def _keep_ai(message: BaseMessage) -> Any:
    """A policy with an unknown mode (``"keep"``) for assistant messages."""
    return "keep" if isinstance(message, AIMessage) else "store"


def _history_with_one_turn(policy: Any = None) -> EmotionalMemoryChatHistory:
    history = EmotionalMemoryChatHistory(_engine(), message_policy=policy)
    history.add_user_message("We adopted a kitten today")
    return history


def _snapshot(history: EmotionalMemoryChatHistory) -> tuple[object, ...]:
    memories = [(m.id, m.content, m.metadata) for m in history.em.list_all()]
    return (history.messages, memories, history.em.get_state().snapshot())


@pytest.mark.parametrize("bad", ["hello", {"role": "user", "content": "x"}, None, 3])
def test_add_message_refuses_a_non_message_by_name(bad: object) -> None:
    history = _history_with_one_turn()
    before = _snapshot(history)
    with pytest.raises(TypeError, match="message must be a LangChain BaseMessage"):
        history.add_message(bad)  # type: ignore[arg-type]
    assert _snapshot(history) == before


@pytest.mark.parametrize(
    ("value", "error", "named"),
    [
        ([HumanMessage("new"), "bad"], TypeError, r"messages\[1\] must be a LangChain"),
        ([AIMessage("ok"), HumanMessage("fine")], ValueError, r"'keep' for messages\[0\]"),
        (HumanMessage("one message, not a list"), TypeError, "messages must be a sequence"),
        ("text", TypeError, "messages must be a sequence"),
    ],
)
def test_bad_messages_leave_the_history_as_it_was(value: object, error: type, named: str) -> None:
    history = _history_with_one_turn(_keep_ai if error is ValueError else None)
    before = _snapshot(history)
    with pytest.raises(error, match=named):
        history.messages = value  # type: ignore[assignment]
    assert _snapshot(history) == before
    with pytest.raises(error, match=named):
        history.add_messages(value)  # type: ignore[arg-type]
    assert _snapshot(history) == before


def test_chat_history_scope_of_the_wrong_type_is_named() -> None:
    with pytest.raises(TypeError, match="scope must be a str or a sequence of str, got int"):
        EmotionalMemoryChatHistory(_engine(), scope=5)  # type: ignore[arg-type]


def test_retriever_refuses_a_bool_top_k() -> None:
    """``top_k=True`` was accepted as one document (pydantic's lax int); a wrongly
    typed field of this pydantic model is a ValidationError naming it, as the
    original's models answer a wrongly typed field."""
    with pytest.raises(ValidationError, match="top_k"):
        EmotionalMemoryRetriever(memory=_shared(), top_k=True)
    retriever = EmotionalMemoryRetriever(memory=_shared(), top_k=2)
    with pytest.raises(ValidationError, match="top_k"):
        retriever.top_k = False
    assert retriever.top_k == 2


def test_chat_history_refuses_something_that_is_no_engine() -> None:
    """Was an AttributeError ("'str' object has no attribute 'observe'")."""
    with pytest.raises(TypeError, match="em must be"):
        EmotionalMemoryChatHistory("not an engine")  # type: ignore[arg-type]


def test_chat_history_refuses_an_async_engine_by_name() -> None:
    """An AsyncEmotionalMemory has every method by name, as coroutines: the history
    failed with "'coroutine' object is not iterable" and a never-awaited warning."""
    aengine = AsyncEmotionalMemory(InMemoryStore(), HashingEmbedder())
    with pytest.raises(TypeError, match=r"AsyncEmotionalMemory.*\.engine"):
        EmotionalMemoryChatHistory(aengine)  # type: ignore[arg-type]
    history = EmotionalMemoryChatHistory(aengine.engine)  # its sync engine works
    history.add_user_message("I love hiking")
    assert [m.content for m in aengine.engine.list_all()] == ["I love hiking"]


@pytest.mark.parametrize("top_k", ["3", 2.0, 2.5])
def test_retriever_refuses_a_top_k_the_engine_refuses(top_k: object) -> None:
    """``top_k="3"`` and ``2.0`` were coerced (pydantic's lax int) where the engine's
    ``retrieve`` refuses them; numpy integers stay accepted, as there."""
    with pytest.raises(ValidationError, match="top_k"):
        EmotionalMemoryRetriever(memory=_shared(), top_k=top_k)
    assert EmotionalMemoryRetriever(memory=_shared(), top_k=np.int64(3)).top_k == 3


def test_retriever_refuses_an_empty_scope() -> None:
    """``scope=()`` silently meant the whole engine (every tenant), where the chat
    history and ``scoped()`` refuse an empty path; None is the whole engine."""
    with pytest.raises(ValueError, match="scope"):
        EmotionalMemoryRetriever(memory=_shared(), scope=())
    retriever = EmotionalMemoryRetriever(memory=_shared(), scope="alice")
    with pytest.raises(ValueError, match="scope"):
        retriever.scope = ()
    assert retriever.scope == ("alice",)


def _original_command(text: str) -> bool:
    """The original 0.18.1's rule: after strip + lower, exactly the word or the word
    followed by one ASCII space."""
    t = text.strip().lower()
    return any(t == w or t.startswith(w + " ") for w in ("recall", "remember"))


@pytest.mark.parametrize(
    "text",
    [
        "remember\nI like cats",
        "Recall\tmy trip to Rome",
        "recall\u00a0the lake",
        "Recall my promotion",
        "  REMEMBER  ",
        "recall",
        "recalling the lake",
        "recall: the lake",
    ],
)
def test_recommended_policy_treats_commands_as_the_original_does(text: str) -> None:
    """A message such as "Remember\\nI like cats" was taken for a command (split on
    any whitespace) and never stored, where the original stores it."""
    from emotional_memory.integrations.langchain import recommended_conversation_policy

    expected = "ignore" if _original_command(text) else "store"
    assert recommended_conversation_policy(HumanMessage(text)) == expected
    h = EmotionalMemoryChatHistory(_engine(), message_policy=recommended_conversation_policy)
    h.add_user_message(text)
    assert [m.content for m in h.em.list_all()] == ([] if expected == "ignore" else [text])


@pytest.mark.parametrize("part", ["", "a\x00b", "x" * 1025])
def test_retriever_refuses_an_assigned_scope_part_scoped_refuses(part: str) -> None:
    """``retriever.scope = ("",)`` was accepted: the retriever kept the bad path and
    every later query failed; a bad part is refused as at construction, the field kept."""
    retriever = EmotionalMemoryRetriever(memory=_shared(), scope="alice", top_k=4)
    with pytest.raises(ValidationError, match=r"scope"):
        retriever.scope = (part,)
    assert retriever.scope == ("alice",)
    assert {c for c, _ in _ranked(retriever, "wedding")} == set(ALICE)
    with pytest.raises(ValidationError, match=r"scope"):
        EmotionalMemoryRetriever(memory=_shared(), scope=("alice", part))


@pytest.mark.parametrize("bad", ["x" * 50, "bad \ud800 text"])
def test_a_message_the_engine_refuses_leaves_the_history_as_it_was(bad: str) -> None:
    """Content over ``max_content_length`` (or not valid Unicode) was found only when
    its turn came: ``messages = [...]`` had already cleared the transcript and every
    memory, and ``add_messages`` had added the messages before it."""
    from emotional_memory import EmotionalMemoryConfig

    em = EmotionalMemory(InMemoryStore(), HashingEmbedder(), clock=lambda: NOW,
                         config=EmotionalMemoryConfig(max_content_length=20))
    history = EmotionalMemoryChatHistory(em, message_policy=lambda m: "store")
    history.add_user_message("We adopted a kitten")
    before = _snapshot(history)
    with pytest.raises(ValueError, match=r"messages\[1\]\.content"):
        history.messages = [HumanMessage("short"), HumanMessage(bad)]
    assert _snapshot(history) == before
    with pytest.raises(ValueError, match=r"messages\[1\]\.content"):
        history.add_messages([HumanMessage("short"), AIMessage(bad)])
    assert _snapshot(history) == before
    ignoring = EmotionalMemoryChatHistory(em, message_policy=lambda m: "ignore")
    ignoring.add_messages([HumanMessage(bad)])  # never encoded: not refused
    assert ignoring.messages[-1].content == bad


class _PublicProxy:
    """An engine wrapper forwarding only public names (as a caller's proxy would)."""

    def __init__(self, inner: EmotionalMemory) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def test_the_history_checks_content_through_the_engines_public_check() -> None:
    """The history probed the engine's private ``_check_content``: behind a wrapper
    forwarding public names, content the engine refuses was found only after
    ``messages = [...]`` had cleared every memory."""
    from emotional_memory import EmotionalMemoryConfig

    em = EmotionalMemory(InMemoryStore(), HashingEmbedder(), clock=lambda: NOW,
                         config=EmotionalMemoryConfig(max_content_length=20))
    assert em.check_content("fine", "x") == "fine"
    with pytest.raises(ValueError, match=r"^x is 50 characters, over max_content_length 20"):
        em.check_content("y" * 50, "x")
    with pytest.raises(TypeError, match=r"^content must be a str"):
        em.check_content(b"bytes")
    history = EmotionalMemoryChatHistory(_PublicProxy(em))  # type: ignore[arg-type]
    history.add_user_message("We adopted a kitten")
    stored = [m.content for m in em.list_all()]
    with pytest.raises(ValueError, match=r"messages\[1\]\.content"):
        history.messages = [HumanMessage("short"), HumanMessage("z" * 50)]
    assert [m.content for m in em.list_all()] == stored == ["We adopted a kitten"]


class _EngineWithoutScopes:
    """The engine methods the history calls, but no ``scoped`` (an engine-like
    wrapper of the caller's)."""

    def __init__(self) -> None:
        self.inner = _engine()

    def __getattr__(self, name: str) -> Any:
        if name == "scoped":
            raise AttributeError(name)
        return getattr(self.inner, name)


def test_chat_history_scope_over_an_engine_without_scopes_is_named() -> None:
    """Was "AttributeError: scoped" from deep in the constructor."""
    with pytest.raises(TypeError, match=r"em must be .* without scoped\(\)"):
        EmotionalMemoryChatHistory(_EngineWithoutScopes(), scope="alice")  # type: ignore[arg-type]
    history = EmotionalMemoryChatHistory(_EngineWithoutScopes())  # type: ignore[arg-type]
    history.add_user_message("no scope needed")
    assert [m.content for m in history.em.list_all()] == ["no scope needed"]


def test_retriever_threads_after_a_scope_change_share_one_view() -> None:
    """batch() runs queries in threads: after a scope change they must all query one
    view of the new scope (its mood moved by every query), not each build its own."""
    import threading
    import time

    em = _shared()
    retriever = EmotionalMemoryRetriever(memory=em, scope=("alice",), top_k=2)
    built: list[EmotionalMemory] = []
    real_scoped = em.scoped

    def slow_scoped(*parts: str) -> EmotionalMemory:
        time.sleep(0.05)  # opening a scope reads its stored state: not instant
        view = real_scoped(*parts)
        built.append(view)
        return view

    em.scoped = slow_scoped  # type: ignore[method-assign]
    retriever.scope = ("bob",)
    seen: list[EmotionalMemory] = []
    threads = [threading.Thread(target=lambda: seen.append(retriever._view()))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(built) == 1 and all(view is built[0] for view in seen)
    assert len(retriever.batch(["rain", "dog", "car"])) == 3 and len(built) == 1
