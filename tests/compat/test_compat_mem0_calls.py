"""The original 0.18.1 mem0 facade's answers to the same calls (SPEC 11).

Each expectation is what the original's ``EmotionalMemoryMem0Backend`` returns for the
same calls (pinned from a run of the original, or an oracle computing it the way the
original does); nothing here imports or needs the original.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from emotional_memory import EmotionalMemory, InMemoryStore
from emotional_memory.integrations.mem0 import EmotionalMemoryMem0Backend
from support.compat_original import HashEmbedder

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

TEXTS = [f"event number {i} about hiking and rain {i * 7}" for i in range(15)]


class Clock:
    """One second per call: both engines see the same times."""

    def __init__(self) -> None:
        self.t = START

    def __call__(self) -> datetime:
        self.t += timedelta(seconds=1)
        return self.t


def _engine() -> EmotionalMemory:
    return EmotionalMemory(InMemoryStore(), HashEmbedder(), clock=Clock())


def _metadata(messages: Any) -> dict[str, Any]:
    m = EmotionalMemoryMem0Backend(_engine())
    m.add(messages)
    return dict(m.get_all()["results"][0]["metadata"])


def test_add_takes_the_role_of_the_first_message_as_the_original() -> None:
    """The original: ``metadata["role"]`` is the first message's role (pinned)."""
    assert _metadata([{"content": "plain"}, {"role": "user", "content": "u"}]) == {
        "user_id": "default"
    }
    assert _metadata([{"role": "system", "content": ""}, {"role": "user", "content": "u2"}]) == {
        "role": "system",
        "user_id": "default",
    }
    assert _metadata([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]) == {
        "role": "user",
        "user_id": "default",
    }
    assert _metadata("just text") == {"user_id": "default"}
