"""The original 0.18.1 LangChain chat history's answers to the same calls (SPEC 11).

Each expectation was pinned from a run of the original's ``EmotionalMemoryChatHistory``
(same embedder, same appraisal); nothing here imports or needs the original.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from emotional_memory import AppraisalVector, EmotionalMemory, InMemoryStore
from emotional_memory.integrations.langchain import (
    EmotionalMemoryChatHistory,
    recommended_conversation_policy,
)
from support.compat_original import HashEmbedder

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class HashAppraisal:
    """A fixed appraisal per text (from its hash), so each message moves the mood."""

    def appraise(self, text: str, context: dict[str, Any] | None = None) -> AppraisalVector:
        h = hashlib.sha256(text.encode()).digest()

        def f(i: int, lo: float) -> float:
            return lo + (1 - lo) * h[i] / 255

        return AppraisalVector(novelty=f(0, -1), goal_relevance=f(1, -1),
                               coping_potential=f(2, 0), norm_congruence=f(3, -1),
                               self_relevance=f(4, 0))


def _engine() -> EmotionalMemory:
    return EmotionalMemory(InMemoryStore(), HashEmbedder(), HashAppraisal(), clock=lambda: NOW)


def _mood(em: EmotionalMemory) -> tuple[float, float]:
    affect = em.get_state().core_affect
    return affect.valence, affect.arousal


def _memories(em: EmotionalMemory) -> list[tuple[str, dict[str, Any]]]:
    return [(m.content, dict(m.metadata)) for m in em.list_all()]


def _transcript(messages: list[BaseMessage]) -> list[tuple[str, Any]]:
    return [(type(m).__name__, m.content) for m in messages]


def test_recommended_policy_stores_moves_and_ignores_as_the_original() -> None:
    em = _engine()
    h = EmotionalMemoryChatHistory(em, message_policy=recommended_conversation_policy)
    h.add_user_message("I passed my test")
    h.add_ai_message("Great news, well done!")
    h.add_user_message("recall exams")
    h.add_message(SystemMessage("be nice"))
    h.add_message(ToolMessage("x", tool_call_id="1"))
    h.add_messages([HumanMessage("a"), AIMessage("b")])
    assert _memories(em) == [("I passed my test", {"role": "user"}), ("a", {"role": "user"})]
    assert _transcript(h.messages) == [
        ("HumanMessage", "I passed my test"), ("AIMessage", "Great news, well done!"),
        ("HumanMessage", "recall exams"), ("SystemMessage", "be nice"),
        ("ToolMessage", "x"), ("HumanMessage", "a"), ("AIMessage", "b"),
    ]
    assert _mood(em) == pytest.approx((-0.3772, 0.3419), abs=1e-3)
    assert repr(h) == "EmotionalMemoryChatHistory(messages=7)"


def test_a_state_only_message_moves_the_mood_and_clear_resets_it_as_the_original() -> None:
    em = _engine()
    h = EmotionalMemoryChatHistory(em, message_policy=recommended_conversation_policy)
    h.add_ai_message("terrible awful disaster")
    assert em.list_all() == []
    assert _mood(em) == pytest.approx((-0.3233, 0.4228), abs=1e-3)
    h.clear()
    assert (_mood(em), h.messages, em.list_all()) == ((0.0, 0.0), [], [])


def test_store_all_roles_and_reload_as_the_original() -> None:
    em = _engine()
    h = EmotionalMemoryChatHistory(em)
    h.add_user_message("hi")
    h.add_ai_message("hello")
    h.add_message(SystemMessage("sys"))
    h.add_message(ChatMessage(content="c", role="assistant"))
    h.add_message(ToolMessage("t", tool_call_id="1"))
    h.add_message(HumanMessage(content=["block", {"type": "text", "text": "x"}]))
    blocks = "['block', {'type': 'text', 'text': 'x'}]"
    assert _memories(em) == [
        ("hi", {"role": "user"}), ("hello", {"role": "assistant"}), ("sys", {"role": "system"}),
        ("c", {"role": "chat"}), ("t", {"role": "tool"}), (blocks, {"role": "user"}),
    ]
    assert _mood(em) == pytest.approx((0.2195, 0.474), abs=1e-3)
    assert _transcript(EmotionalMemoryChatHistory(em).messages) == [
        ("HumanMessage", "hi"), ("AIMessage", "hello"), ("SystemMessage", "sys"),
        ("HumanMessage", "c"), ("HumanMessage", "t"), ("HumanMessage", blocks),
    ]


def test_messages_setter_replaces_as_the_original() -> None:
    em = _engine()
    h = EmotionalMemoryChatHistory(em)
    h.add_user_message("one")
    h.messages = [HumanMessage("two"), AIMessage("three")]
    assert _memories(em) == [("two", {"role": "user"}), ("three", {"role": "assistant"})]
    assert _transcript(h.messages) == [("HumanMessage", "two"), ("AIMessage", "three")]
