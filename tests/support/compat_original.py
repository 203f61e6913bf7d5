"""Embedders, appraisal spies and engine builders shared by the drop-in compatibility tests
(tests/compat/test_compat_*.py)."""

from __future__ import annotations

import hashlib
import inspect
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from emotional_memory import (
    DIRECT_VAD_SCHEMA,
    AppraisalVector,
    CoreAffect,
    EmotionalMemory,
    EmotionalMemoryConfig,
    GenericAppraisalVector,
    InMemoryStore,
    Memory,
)
from emotional_memory.replay import TickClock

START = datetime(2026, 1, 1, tzinfo=UTC)

SQRT6 = math.sqrt(6.0)


class HashEmbedder:
    """Deterministic 8-d embedder (the same text always gives the same vector)."""

    def embed(self, text: str) -> list[float]:
        digest = hashlib.sha256(text.encode()).digest()
        return [b / 255 - 0.5 for b in digest[:8]]

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [self.embed(t) for t in texts]


class ContextSpy:
    """Appraisal engine recording ``(event_text, context)`` of every call."""

    def __init__(self, vector: AppraisalVector | GenericAppraisalVector) -> None:
        self.vector = vector
        self.calls: list[tuple[str, Any]] = []
        self.closed = 0

    def appraise(self, event_text: str, context: dict[str, Any] | None = None) -> Any:
        self.calls.append((event_text, context))
        return self.vector

    def close(self) -> None:
        self.closed += 1


def vad(v: float, a: float, d: float) -> GenericAppraisalVector:
    return GenericAppraisalVector({"valence": v, "arousal": a, "dominance": d}, DIRECT_VAD_SCHEMA)


def engine(**kw: Any) -> EmotionalMemory:
    appraiser = kw.pop("appraisal_engine", None)
    store = kw.pop("store", None)
    state_store = kw.pop("state_store", None)
    clock = kw.pop("clock", None) or TickClock(START)
    return EmotionalMemory(
        store if store is not None else InMemoryStore(),
        HashEmbedder(),
        appraiser,
        EmotionalMemoryConfig(**kw),
        state_store,
        clock=clock,
    )


def _params(fn: Any) -> list[str]:
    return list(inspect.signature(fn).parameters)


def _seeded_memories() -> tuple[list[Memory], dict[str, Any]]:
    src = engine(clock=TickClock(START, timedelta(seconds=5)))
    for i, text in enumerate(
        [
            "won the prize",
            "my dog died",
            "boring meeting",
            "surprise party",
            "loud argument",
            "calm walk",
            "rainy day",
        ]
    ):
        src.set_affect(CoreAffect(valence=math.sin(i), arousal=0.5 + 0.4 * math.cos(i)))
        src.encode(text, metadata={"i": i})
    return src.list_all(), src.save_state()
