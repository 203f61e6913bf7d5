"""One AsyncEmotionalMemory used from several event loops, and its async components.

Events decide every order; timeouts are hang guards only."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from emotional_memory import (
    AsyncEmotionalMemory,
    EmotionalMemory,
    InMemoryStore,
    KeywordAppraisalEngine,
    LLMQueryClassifier,
    SyncToAsyncAppraisalEngine,
    SyncToAsyncEmbedder,
    SyncToAsyncStore,
)
from emotional_memory.embedders import HashingEmbedder
from support.async_parts import HeldEmbedder, LoopRecordingStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_each_operation_calls_its_async_components_on_its_own_loop() -> None:
    # the bridge kept one loop per engine, the last caller's: an operation of loop A
    # whose store call came after loop B's operation began called the store on loop
    # B, and once B's ``asyncio.run`` ended, failed ("the event loop ... is closed")
    store = LoopRecordingStore()
    embedder = HeldEmbedder()
    aengine = AsyncEmotionalMemory(store, embedder, clock=lambda: NOW)
    outcome: dict[str, Any] = {}

    async def on_loop_a() -> None:
        outcome["loop"] = asyncio.get_running_loop()
        try:
            outcome["memory"] = await aengine.scoped("a").encode("hello from A")
        except Exception as exc:  # reported below, with its message
            outcome["memory"] = exc

    embedder.hold()
    runner = threading.Thread(target=asyncio.run, args=(on_loop_a(),), daemon=True)
    runner.start()
    assert embedder.entered.wait(30)  # A's encode is embedding; its save comes next
    assert asyncio.run(aengine.scoped("b").count()) == 0  # loop B runs, then closes
    after_b = len(store.loops)
    embedder.release.set()
    runner.join(60)  # a guard against a hang, not a timing
    assert not runner.is_alive()
    got = outcome["memory"]
    assert not isinstance(got, Exception), got
    assert got.content == "hello from A" and got.scope == ("a",)
    a_calls = store.loops[after_b:]
    assert a_calls and all(loop is outcome["loop"] for loop in a_calls)
    assert [m.content for m in store.inner.list_all()] == ["hello from A"]


class _AsyncEmbedder:
    def __init__(self) -> None:
        self.inner = HashingEmbedder(dim=16)

    async def embed(self, text: str) -> list[float]:
        return self.inner.embed(text)

    async def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [self.inner.embed(t) for t in texts]


class _AsyncAppraiser:
    async def appraise(self, text: str, context: Any = None) -> Any:
        return KeywordAppraisalEngine().appraise(text, context)


def _with_blocking(obj: Any, name: str) -> Any:
    """``obj`` with its method ``name`` replaced by a blocking one (same answers)."""
    inner = getattr(type(obj), name)

    def blocking(*args: Any) -> Any:
        coro = inner(obj, *args)
        try:
            coro.send(None)
        except StopIteration as done:
            return done.value
        raise AssertionError("the test's async method awaited something")

    setattr(obj, name, blocking)
    return obj


@pytest.mark.parametrize(
    "method", ["get", "update", "delete", "list_all", "search_by_embedding", "count"]
)
def test_an_async_store_with_a_blocking_method_is_refused_naming_it(method: str) -> None:
    # it was taken, and failed on first use with "A coroutine object is required"
    # (naming neither the store nor the method), after part of an encode had run
    store = _with_blocking(LoopRecordingStore(), method)
    with pytest.raises(TypeError, match=rf"LoopRecordingStore.*\b{method}\b"):
        AsyncEmotionalMemory(store, HashingEmbedder(dim=16), clock=lambda: NOW)


def test_an_async_store_without_a_required_method_is_refused_like_the_sync_engine() -> None:
    # the sync engine refuses a store without update at construction; the async one
    # took it (its bridge has every method) and failed with AttributeError on use
    class NoUpdate:
        async def save(self, memory: Any) -> None: ...
        async def get(self, memory_id: str) -> Any: ...
        async def delete(self, memory_id: str) -> bool: ...

    with pytest.raises(TypeError, match=r"store must provide.*without update"):
        AsyncEmotionalMemory(NoUpdate(), HashingEmbedder(dim=16), clock=lambda: NOW)


def test_mixed_embedders_are_refused_naming_the_method() -> None:
    with pytest.raises(TypeError, match=r"_AsyncEmbedder.*\bembed_batch\b"):
        AsyncEmotionalMemory(
            InMemoryStore(), _with_blocking(_AsyncEmbedder(), "embed_batch"), clock=lambda: NOW
        )
    with pytest.raises(TypeError, match=r"_AsyncEmbedder.*\bembed\b"):
        AsyncEmotionalMemory(
            InMemoryStore(), _with_blocking(_AsyncEmbedder(), "embed"), clock=lambda: NOW
        )


def test_the_sync_adapters_refuse_async_components() -> None:
    # ``SyncToAsyncStore(async_store).get(id)`` returned the un-awaited coroutine
    # (a "never awaited" warning), and an engine given the adapter failed with
    # "object of type ... has no len()"
    with pytest.raises(TypeError, match=r"SyncToAsyncStore.*LoopRecordingStore\.save"):
        SyncToAsyncStore(LoopRecordingStore())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"SyncToAsyncEmbedder.*_AsyncEmbedder\.embed"):
        SyncToAsyncEmbedder(_AsyncEmbedder())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"SyncToAsyncAppraisalEngine.*_AsyncAppraiser\.appraise"):
        SyncToAsyncAppraisalEngine(_AsyncAppraiser())  # type: ignore[arg-type]


@pytest.mark.parametrize("part", ["store", "embedder", "appraisal_engine"])
def test_the_sync_engine_refuses_async_components_naming_them(part: str) -> None:
    # it took them and failed on use: "object of type ... has no len()" (store),
    # "non 1-D embedding" (embedder), "'coroutine' object has no attribute" (appraiser)
    parts: dict[str, Any] = {
        "store": InMemoryStore(), "embedder": HashingEmbedder(dim=16), "appraisal_engine": None,
    }
    parts[part] = {
        "store": LoopRecordingStore, "embedder": _AsyncEmbedder,
        "appraisal_engine": _AsyncAppraiser,
    }[part]()
    with pytest.raises(TypeError, match=rf"{part}.*AsyncEmotionalMemory"):
        EmotionalMemory(**parts, clock=lambda: NOW)
    AsyncEmotionalMemory(**parts, clock=lambda: NOW)  # where they belong


def test_an_async_text_rater_is_refused_at_construction() -> None:
    # it was taken, and each encode failed ("must return a sequence of CoreAffect,
    # got coroutine") leaving a coroutine never awaited
    class AsyncRater:
        async def rate_affect(self, texts: list[str]) -> list[Any]:
            return []

    for engine_class in (EmotionalMemory, AsyncEmotionalMemory):
        with pytest.raises(TypeError, match=r"affect_from_text AsyncRater\.rate_affect"):
            engine_class(
                InMemoryStore(), HashingEmbedder(dim=16), clock=lambda: NOW,
                affect_from_text=AsyncRater(),
            )


@pytest.mark.parametrize("engine_class", [EmotionalMemory, AsyncEmotionalMemory])
def test_a_query_classifier_or_appraiser_the_engine_cannot_call_is_refused(
    engine_class: type,
) -> None:
    # both were taken: an ``async def classify`` (natural next to an async appraiser)
    # returned a coroutine never awaited and llm routing fell back to the default
    # weights without a word; a classifier or appraiser without its method failed
    # at the first retrieval or encode with "'str' object has no attribute ..."
    class AsyncClassifier:
        async def classify(self, query: str) -> str:
            return "temporal"

    def make(**parts: Any) -> Any:
        return engine_class(InMemoryStore(), HashingEmbedder(dim=16), clock=lambda: NOW, **parts)

    with pytest.raises(TypeError, match=r"query_classifier AsyncClassifier\.classify is async"):
        make(query_classifier=AsyncClassifier())
    with pytest.raises(TypeError, match=r"query_classifier must provide classify.*got str"):
        make(query_classifier="llm")
    with pytest.raises(TypeError, match=r"appraisal_engine must provide appraise.*got str"):
        make(appraisal_engine="keyword")
    make(query_classifier=LLMQueryClassifier(lambda prompt, schema: "temporal"))


def test_subclassed_sync_to_async_adapters_have_their_overrides_called() -> None:
    # the engine unwrapped any SyncToAsync* instance and called the wrapped blocking
    # component directly: a subclass overriding ``save`` / ``embed`` / ``appraise`` /
    # ``close`` (auditing, metrics, a cache) was silently bypassed, where the original
    # awaits the adapter's own methods
    calls: list[str] = []

    class AuditedStore(SyncToAsyncStore):
        async def save(self, memory: Any) -> None:
            calls.append(f"save {memory.content}")
            await super().save(memory)

        async def close(self) -> None:
            calls.append("close store")
            await super().close()

    class AuditedEmbedder(SyncToAsyncEmbedder):
        async def embed(self, text: str) -> list[float]:
            calls.append(f"embed {text}")
            return await super().embed(text)

    class AuditedAppraiser(SyncToAsyncAppraisalEngine):
        async def appraise(self, event_text: str, context: dict[str, Any] | None = None) -> Any:
            calls.append(f"appraise {event_text}")
            return await super().appraise(event_text, context)

    class Unchanged(SyncToAsyncStore):
        """A subclass overriding no protocol method: still the blocking store itself."""

    async def run() -> None:
        aengine = AsyncEmotionalMemory(
            AuditedStore(InMemoryStore()), AuditedEmbedder(HashingEmbedder(dim=16)),
            AuditedAppraiser(KeywordAppraisalEngine()), clock=lambda: NOW,
        )
        await aengine.encode("hello")
        assert [m.content for m in await aengine.retrieve("hello", 1)] == ["hello"]
        await aengine.close()

    asyncio.run(run())
    for call in ("appraise hello", "embed hello", "save hello"):
        assert call in calls
    assert calls[-1] == "close store"
    inner = InMemoryStore()
    assert AsyncEmotionalMemory(Unchanged(inner), HashingEmbedder(dim=16)).engine.store is inner


_STOPPED_LOOP_SCRIPT = """
import asyncio
from datetime import UTC, datetime
from emotional_memory import AsyncEmotionalMemory
from support.async_parts import HeldEmbedder, LoopRecordingStore

embedder = HeldEmbedder()
aengine = AsyncEmotionalMemory(
    LoopRecordingStore(), embedder, clock=lambda: datetime(2026, 1, 1, tzinfo=UTC)
)

async def start() -> None:
    embedder.hold()
    task = asyncio.ensure_future(aengine.encode("cancelled while embedding"))
    await asyncio.to_thread(embedder.entered.wait, 30)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass

loop = asyncio.new_event_loop()
loop.run_until_complete(start())  # the loop is stopped now, never closed
embedder.release.set()  # the encode goes on, and asks the stopped loop for its store
print("main thread done", flush=True)
"""


def test_an_operation_waiting_on_a_stopped_loop_does_not_hang_the_interpreters_exit() -> None:
    # an operation cancelled with ``run_until_complete`` went on in the background
    # and asked its loop, stopped but never closed, for the async store: its worker
    # waited forever, and the interpreter, which joins the engine's worker threads
    # at exit, never exited
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _STOPPED_LOOP_SCRIPT], capture_output=True, text=True,
            timeout=120, env=env, check=False,  # a guard against the hang, not a timing
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the interpreter did not exit: a worker waits on a stopped loop")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "main thread done" in proc.stdout
