"""mem0 facade: mem0's argument forms, and bad input refused by name with nothing stored."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from emotional_memory import EmotionalMemory, InMemoryStore
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.integrations.mem0 import EmotionalMemoryMem0Backend, messages_to_content

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _backend() -> EmotionalMemoryMem0Backend:
    return EmotionalMemoryMem0Backend(
        EmotionalMemory(InMemoryStore(), HashingEmbedder(), clock=lambda: NOW)
    )


def _untouched(m: EmotionalMemoryMem0Backend, before: dict[str, Any]) -> None:
    assert m.em.list_all() == [] and m.em.get_state().snapshot() == before


def test_add_takes_one_message_dict_as_mem0_does() -> None:
    one, listed = _backend(), _backend()
    message = {"role": "user", "content": "I love hiking in the Alps"}
    (a,) = one.add(message, user_id="alice", metadata={"k": 1})["results"]
    (b,) = listed.add([message], user_id="alice", metadata={"k": 1})["results"]
    assert a["memory"] == b["memory"] == "user: I love hiking in the Alps"
    got_one, got_listed = one.get(a["id"]), listed.get(b["id"])
    assert got_one is not None and got_listed is not None
    assert (
        got_one["metadata"]
        == got_listed["metadata"]
        == {"k": 1, "role": "user", "user_id": "alice"}
    )
    assert messages_to_content(message) == "user: I love hiking in the Alps"


@pytest.mark.parametrize(
    ("messages", "named"),
    [
        (None, "messages must be"),
        (42, "messages must be"),
        (b"hi", "messages must be"),
        ([{"content": "ok"}, "text"], r"messages\[1\] must be a dict"),
    ],
)
def test_add_refuses_bad_messages_by_name(messages: Any, named: str) -> None:
    m = _backend()
    before = m.em.get_state().snapshot()
    with pytest.raises(TypeError, match=named):
        m.add(messages, user_id="alice")
    _untouched(m, before)


@pytest.mark.parametrize("metadata", ["abc", [("k", 1)], 3])
def test_add_refuses_metadata_that_is_not_a_dict(metadata: Any) -> None:
    m = _backend()
    before = m.em.get_state().snapshot()
    with pytest.raises(TypeError, match="metadata must be a dict"):
        m.add("I got the job", user_id="alice", metadata=metadata)
    _untouched(m, before)
