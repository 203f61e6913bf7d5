"""Async components that call the AsyncEmotionalMemory back while it waits for them.

The sync engine lets a component call it back (its scope lock is re-entrant; the
original takes no lock at all); the async engine must too, with the sync engine's
results. Timeouts are hang guards only."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from emotional_memory import (
    AsyncEmotionalMemory,
    EmotionalMemory,
    EmotionalMemoryConfig,
    InMemoryStore,
    KeywordAppraisalEngine,
    SyncToAsyncStore,
)
from emotional_memory.embedders import HashingEmbedder

NOW = datetime(2026, 1, 1, tzinfo=UTC)
HANG_GUARD_S = 60
SEED = ["the dog barked at the storm", "a calm day by the river", "we lost the final match"]


class _Recalling:
    """An appraiser that first recalls the closest memory of the event (a callback into
    the engine, with retrieval side effects), then appraises by keywords."""

    def __init__(self) -> None:
        self.engine: Any = None
        self.recalled: list[list[str]] = []

    def _appraise(self, text: str, context: Any) -> Any:
        return KeywordAppraisalEngine().appraise(text, context)


class _SyncRecalling(_Recalling):
    def appraise(self, text: str, context: Any = None) -> Any:
        self.recalled.append([m.content for m in self.engine.retrieve(text, 1)])
        return self._appraise(text, context)


class _AsyncRecalling(_Recalling):
    async def appraise(self, text: str, context: Any = None) -> Any:
        assert await self.engine.count() >= len(SEED)
        self.recalled.append([m.content for m in await self.engine.retrieve(text, 1)])
        return self._appraise(text, context)


def _config() -> EmotionalMemoryConfig:
    return EmotionalMemoryConfig(appraisal_max_concurrency=1)


def _rows(memories: list[Any]) -> list[Any]:
    content = {m.id: m.content for m in memories}
    return sorted(
        (m.content, m.tag.retrieval_count, round(m.tag.consolidation_strength, 12),
         m.tag.pending_appraisal,
         sorted(content.get(link.target_id, "?") for link in m.tag.resonance_links))
        for m in memories
    )


async def _call(engine: Any, op: str) -> Any:
    calls = {
        "encode": lambda: engine.encode("the dog ran to the river"),
        "encode_batch": lambda: engine.encode_batch(["a storm again", "the match was won"]),
        "observe": lambda: engine.observe("a quiet storm"),
        "retrieve_with_query_appraisal": lambda: engine.retrieve_with_query_appraisal("dog", 2),
        "retrieve_query_gated": lambda: engine.retrieve_query_gated("lost match", 2),
    }
    out = calls[op]()
    return await out if asyncio.iscoroutine(out) else out


@pytest.mark.parametrize(
    "op", ["encode", "encode_batch", "observe", "retrieve_with_query_appraisal",
           "retrieve_query_gated"],
)
def test_an_async_appraiser_calling_the_engine_back_gets_the_sync_engines_results(
    op: str,
) -> None:
    # the operation held its scope's turn while it waited for the appraiser, and the
    # appraiser's call back waited for that turn: a deadlock, which also wedged every
    # later operation of the scope (the waiting appraisal was never cancelled)
    sync_appraiser = _SyncRecalling()
    sync = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=32), sync_appraiser,
                           _config(), clock=lambda: NOW)
    sync_appraiser.engine = sync
    async_appraiser = _AsyncRecalling()
    aengine = AsyncEmotionalMemory(InMemoryStore(), HashingEmbedder(dim=32), async_appraiser,
                                   _config(), clock=lambda: NOW)
    async_appraiser.engine = aengine
    for text in SEED:
        sync.encode(text, affect=sync.get_state().core_affect)
    sync_result = asyncio.run(_call(sync, op))

    async def run() -> Any:
        for text in SEED:
            await aengine.encode(text, affect=aengine.get_state().core_affect)
        got = await asyncio.wait_for(_call(aengine, op), HANG_GUARD_S)
        # the scope is free again: a later operation runs
        await asyncio.wait_for(aengine.encode("after"), HANG_GUARD_S)
        return got

    try:
        async_result = asyncio.run(run())
    except TimeoutError:
        pytest.fail(f"{op}: the appraiser's call back into the engine deadlocked")
    sync.encode("after")
    assert async_appraiser.recalled == sync_appraiser.recalled
    assert async_appraiser.recalled  # the appraiser did call back
    assert _rows(asyncio.run(aengine.list_all())) == _rows(sync.list_all())
    assert aengine.get_state().snapshot() == sync.get_state().snapshot()
    if isinstance(sync_result, list):
        assert [getattr(m, "content", None) for m in async_result] == [
            getattr(m, "content", None) for m in sync_result
        ]


def test_a_batch_with_some_given_affects_lets_concurrent_appraisers_call_back() -> None:
    # with some affects given, the batch went to the sync engine, whose pool threads
    # appraised the other events: their calls back could reach neither the scope's
    # turn nor the worker holding its lock (a deadlock); now it is appraised on the
    # loop as a batch without affects is, the given events not appraised
    appraiser = _AsyncRecalling()
    config = EmotionalMemoryConfig(appraisal_max_concurrency=4)
    aengine = AsyncEmotionalMemory(InMemoryStore(), HashingEmbedder(dim=32), appraiser,
                                   config, clock=lambda: NOW)
    appraiser.engine = aengine

    async def run() -> list[Any]:
        for text in SEED:
            await aengine.encode(text, affect=aengine.get_state().core_affect)
        given = aengine.get_state().core_affect
        batch = aengine.encode_batch(["storm", "river", "match"], affect=[None, given, None])
        return list(await asyncio.wait_for(batch, HANG_GUARD_S))

    try:
        stored = asyncio.run(run())
    except TimeoutError:
        pytest.fail("the appraisers' calls back into the engine deadlocked")
    assert [m.content for m in stored] == ["storm", "river", "match"]
    assert len(appraiser.recalled) == 2  # "river" had its affect: not appraised


class _SlowStore(SyncToAsyncStore):
    """An async store (its overrides are bridged) whose reads take a while."""

    async def list_all(self) -> Any:
        await asyncio.sleep(0.05)
        return self.sync.list_all()

    async def search_by_embedding(self, embedding: Any, top_k: int) -> Any:
        await asyncio.sleep(0.05)
        return self.sync.search_by_embedding(embedding, top_k)

    async def count(self) -> int:
        await asyncio.sleep(0.05)
        return len(self.sync)


class _BackgroundRecalling(_Recalling):
    """Recalls in a task of its own, answering before the recall does."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks: list[Any] = []

    async def appraise(self, text: str, context: Any = None) -> Any:
        self.tasks.append(asyncio.ensure_future(self.engine.retrieve(text, 1)))
        return self._appraise(text, context)


def test_an_appraiser_answering_before_its_call_back_does_not_hang_the_operation() -> None:
    # the worker ran the call back while it waited for the appraisal; the call back's
    # own store wait took the appraisal's wake-up (the appraisal had answered) and the
    # worker then waited for it for good, holding the scope
    appraiser = _BackgroundRecalling()
    aengine = AsyncEmotionalMemory(_SlowStore(InMemoryStore()), HashingEmbedder(dim=32),
                                   appraiser, _config(), clock=lambda: NOW)
    appraiser.engine = aengine

    async def run() -> list[Any]:
        await aengine.encode(SEED[0], affect=aengine.get_state().core_affect)
        await asyncio.wait_for(aengine.encode("the dog ran"), HANG_GUARD_S)
        return list(await asyncio.wait_for(asyncio.gather(*appraiser.tasks), HANG_GUARD_S))

    try:
        recalled = asyncio.run(run())
    except TimeoutError:
        pytest.fail("the operation waited for good for an appraisal that had answered")
    assert [[m.content for m in found] for found in recalled] == [[SEED[0]]]


class _NoteTaking(_Recalling):
    """Keeps two notes of an event, encoded as a batch (appraised too) from appraise."""

    async def appraise(self, text: str, context: Any = None) -> Any:
        if text.startswith("event"):
            await self.engine.encode_batch([f"note a of {text}", f"note b of {text}"])
        return self._appraise(text, context)


@pytest.mark.parametrize("op", ["encode", "encode_batch"])
def test_an_async_appraiser_may_encode_a_batch_back(op: str) -> None:
    # encode_batch took the scope's turn, held by the operation waiting for the
    # appraiser: a deadlock that wedged the scope
    appraiser = _NoteTaking()
    aengine = AsyncEmotionalMemory(InMemoryStore(), HashingEmbedder(dim=32), appraiser,
                                   EmotionalMemoryConfig(appraisal_max_concurrency=2),
                                   clock=lambda: NOW)
    appraiser.engine = aengine

    async def run() -> list[str]:
        outer = (aengine.encode("event 1") if op == "encode"
                 else aengine.encode_batch(["event 1", "event 2"]))
        await asyncio.wait_for(outer, HANG_GUARD_S)
        await asyncio.wait_for(aengine.encode("after"), HANG_GUARD_S)
        return sorted(m.content for m in await aengine.list_all())

    try:
        contents = asyncio.run(run())
    except TimeoutError:
        pytest.fail(f"{op}: an appraiser's encode_batch back into the engine deadlocked")
    events = ["event 1"] if op == "encode" else ["event 1", "event 2"]
    notes = [f"note {n} of {e}" for e in events for n in "ab"]
    assert contents == sorted(["after", *events, *notes])


class _SlowSaveStore(InMemoryStore):
    def save(self, memory: Any) -> None:
        time.sleep(0.3)  # the note's call arrives while the operation saves
        super().save(memory)


class _BackgroundNoting(_Recalling):
    """Recalls (a call back), and keeps a note of the event in a task of its own that
    calls the engine while the operation still runs (its note is appraised too)."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks: list[Any] = []

    async def appraise(self, text: str, context: Any = None) -> Any:
        await self.engine.count()
        if text == "event":
            async def note() -> None:
                await asyncio.sleep(0.1)
                await self.engine.encode("note of event")

            self.tasks.append(asyncio.ensure_future(note()))
        return self._appraise(text, context)


def test_a_call_back_queued_as_the_operation_ends_still_nests_its_own_calls() -> None:
    # the operation closed its nest before running the calls queued meanwhile: the
    # note's appraiser then called back outside it, waited for the scope's turn, which
    # the operation (running the note) held: a deadlock
    appraiser = _BackgroundNoting()
    aengine = AsyncEmotionalMemory(_SlowSaveStore(), HashingEmbedder(dim=32), appraiser,
                                   _config(), clock=lambda: NOW)
    appraiser.engine = aengine

    async def run() -> list[str]:
        await asyncio.wait_for(aengine.encode("event"), HANG_GUARD_S)
        await asyncio.wait_for(asyncio.gather(*appraiser.tasks), HANG_GUARD_S)
        return sorted(m.content for m in await aengine.list_all())

    try:
        contents = asyncio.run(run())
    except TimeoutError:
        pytest.fail("a call back queued as the operation ended deadlocked")
    assert contents == ["event", "note of event"]
