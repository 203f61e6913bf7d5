"""AsyncEmotionalMemory under hostile use (views made while a batch runs, ...).

Events decide every order; nothing asserts wall-clock time."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from emotional_memory import (
    AsyncEmotionalMemory,
    EmotionalMemory,
    EmotionalMemoryConfig,
    InMemoryStore,
    KeywordAppraisalEngine,
    SyncToAsyncEmbedder,
)
from emotional_memory.embedders import HashingEmbedder
from support.async_parts import HeldEmbedder

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class _AsyncKeywords:
    """An async appraisal engine (keyword appraisal, one loop step per call)."""

    async def appraise(self, text: str, context: Any = None) -> Any:
        await asyncio.sleep(0)
        return KeywordAppraisalEngine().appraise(text, context)


def test_a_view_made_while_a_batch_runs_appraises_its_own_events() -> None:
    # encode_batch with an async appraiser swapped the engine's appraisal engine for
    # a replay of the batch's appraisals while it ran: scoped() (synchronous, on the
    # loop) copied the replay into the new view, whose next encode then failed
    # (IndexError: pop from empty list) or took another event's appraisal
    embedder = HeldEmbedder()
    engine = AsyncEmotionalMemory(
        InMemoryStore(), embedder, _AsyncKeywords(), clock=lambda: NOW
    )
    reference = AsyncEmotionalMemory(
        InMemoryStore(), HashingEmbedder(dim=16), _AsyncKeywords(), clock=lambda: NOW
    )

    async def scenario() -> tuple[Any, Any, AsyncEmotionalMemory]:
        embedder.release.clear()
        embedder.entered.clear()
        batch = asyncio.ensure_future(engine.encode_batch(["I was furious", "a happy day"]))
        await asyncio.to_thread(embedder.entered.wait, 30)  # the batch is storing now
        view = engine.scoped("alice")
        embedder.release.set()
        await batch
        got = await view.encode("I was furious about the broken build")
        want = await reference.scoped("alice").encode("I was furious about the broken build")
        return got, want, view

    got, want, view = asyncio.run(scenario())
    assert got.tag.appraisal == want.tag.appraisal
    assert got.tag.core_affect == want.tag.core_affect
    assert view.engine.appraisal_engine is engine.engine.appraisal_engine


class _AsyncStore:
    """An async memory store over an in-memory one."""

    def __init__(self) -> None:
        self.inner = InMemoryStore()

    async def save(self, memory: Any) -> None:
        self.inner.save(memory)

    async def get(self, memory_id: str) -> Any:
        return self.inner.get(memory_id)

    async def update(self, memory: Any) -> None:
        self.inner.update(memory)

    async def delete(self, memory_id: str) -> bool:
        return self.inner.delete(memory_id)

    async def list_all(self) -> list[Any]:
        return self.inner.list_all()

    async def search_by_embedding(self, embedding: Any, top_k: int) -> list[Any]:
        return self.inner.search_by_embedding(embedding, top_k)

    async def count(self) -> int:
        return len(self.inner)


def test_the_sync_engine_called_on_the_loop_thread_raises_instead_of_hanging() -> None:
    # the bridge waited on the loop for a coroutine that only that (now blocked) loop
    # could run: ``aengine.engine.list_all()`` or ``repr(aengine.engine)`` in a
    # coroutine hung forever
    aengine = AsyncEmotionalMemory(_AsyncStore(), HashingEmbedder(dim=16), clock=lambda: NOW)
    outcome: list[BaseException | None] = []

    async def on_the_loop() -> None:
        await aengine.encode("hello")
        try:
            aengine.engine.list_all()
        except RuntimeError as exc:
            outcome.append(exc)
        else:
            outcome.append(None)
        assert [m.content for m in await aengine.list_all()] == ["hello"]  # still works

    runner = threading.Thread(target=asyncio.run, args=(on_the_loop(),), daemon=True)
    runner.start()
    runner.join(60)  # a guard against the hang, not a timing
    assert not runner.is_alive(), "the sync engine call hung the event loop"
    assert len(outcome) == 1 and outcome[0] is not None
    assert "event loop" in str(outcome[0]) and "await" in str(outcome[0])
    with pytest.raises(RuntimeError, match="closed"):  # the loop is gone now
        aengine.engine.list_all()


class _AsyncEmbedOnly:
    """An async embedder with ``embed`` alone (the sync engine accepts such ones)."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(dim=16)

    async def embed(self, text: str) -> list[float]:
        return self.inner.embed(text)


class _EmbedOnly:
    def __init__(self) -> None:
        self.inner = HashingEmbedder(dim=16)

    def embed(self, text: str) -> list[float]:
        return self.inner.embed(text)


def test_an_async_embedder_with_embed_alone_encodes_batches_like_a_sync_one() -> None:
    # the bridge always called the inner embedder's embed_batch: AttributeError from
    # encode_batch, where the sync engine embeds such an embedder's texts one by one
    texts = ["the server crashed", "coffee with a friend", "a quiet walk"]
    reference = EmotionalMemory(InMemoryStore(), _EmbedOnly(), clock=lambda: NOW)
    aengine = AsyncEmotionalMemory(InMemoryStore(), _AsyncEmbedOnly(), clock=lambda: NOW)
    want = [m.embedding for m in reference.encode_batch(texts)]
    got = asyncio.run(aengine.encode_batch(texts))
    assert [m.embedding for m in got] == want
    adapted = SyncToAsyncEmbedder(_EmbedOnly())  # the adapter's batch form, too
    assert asyncio.run(adapted.embed_batch(texts)) == want


class _CountingAsyncAppraiser:
    """An async appraisal engine (think: one paid LLM call each) counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def appraise(self, text: str, context: Any = None) -> Any:
        self.calls += 1
        return KeywordAppraisalEngine().appraise(text, context)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"expires_at": "tomorrow"}, TypeError, "expires_at"),
        ({"metadata": [{"ok": 1}, {"bad": object()}]}, TypeError, r"metadata\[1\]"),
        ({"contents": ["fine", "x" * 50]}, ValueError, r"contents\[1\]"),
    ],
)
def test_a_bad_batch_is_refused_before_any_async_appraisal(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    # the batch's appraisals ran (concurrently, before its turn) and only then did
    # the engine check its arguments: every event appraised for nothing
    appraiser = _CountingAsyncAppraiser()
    aengine = AsyncEmotionalMemory(
        InMemoryStore(), HashingEmbedder(dim=16), appraiser,
        EmotionalMemoryConfig(max_content_length=20), clock=lambda: NOW,
    )
    call = {"contents": ["fine", "also fine"], **kwargs}
    with pytest.raises(error, match=match):
        asyncio.run(aengine.encode_batch(**call))
    assert appraiser.calls == 0
    assert asyncio.run(aengine.count()) == 0
    assert len(asyncio.run(aengine.encode_batch(["fine", "also fine"]))) == 2
    assert appraiser.calls == 2


def test_an_operation_whose_loop_closes_under_it_fails_instead_of_holding_the_engine() -> None:
    # a call cancelled while running goes on in the background; when its caller's
    # loop then closed (``asyncio.run`` over) before answering one of its async store
    # calls, the worker waited forever, holding the engine's turn: every later call,
    # from any loop, hung
    scheduled = threading.Event()

    class _Loop(asyncio.SelectorEventLoop):
        def call_soon_threadsafe(self, *args: Any, **kwargs: Any) -> Any:
            handle = super().call_soon_threadsafe(*args, **kwargs)
            scheduled.set()
            return handle

    embedder = HeldEmbedder()
    aengine = AsyncEmotionalMemory(_AsyncStore(), embedder, clock=lambda: NOW)

    async def start() -> None:
        embedder.release.clear()
        embedder.entered.clear()
        task = asyncio.ensure_future(aengine.encode("first"))
        await asyncio.to_thread(embedder.entered.wait, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    loop = _Loop()
    loop.run_until_complete(start())
    scheduled.clear()
    embedder.release.set()
    assert scheduled.wait(30)  # the worker asked the stopped loop for its store ...
    loop.close()  # ... which will never answer
    counted: list[int] = []
    runner = threading.Thread(
        target=lambda: counted.append(asyncio.run(aengine.count())), daemon=True
    )
    runner.start()
    runner.join(60)  # a guard against the hang, not a timing
    assert not runner.is_alive(), "the engine's turn was never given back"
    assert counted == [0]  # the interrupted encode stored nothing


class _NotingAppraiser:
    """Keyword appraisal that notes each context it is given, and writes into it."""

    def __init__(self) -> None:
        self.contexts: list[Any] = []

    def appraise(self, text: str, context: Any = None) -> Any:
        self.contexts.append(repr(context))
        if context is not None:
            context["seen_by_appraiser"] = True
        return KeywordAppraisalEngine().appraise(text, context)


class _AsyncNotingAppraiser(_NotingAppraiser):
    async def appraise(self, text: str, context: Any = None) -> Any:  # type: ignore[override]
        return _NotingAppraiser.appraise(self, text, context)


def test_a_batch_appraised_concurrently_gives_the_appraiser_the_sync_engines_context() -> None:
    # the concurrent path handed the caller's own metadata to the async appraiser
    # (tuples not yet lists) and validated a copy only afterwards, so what the
    # appraiser wrote into its context was stored; the sync engine appraises its
    # validated private copy
    def batch() -> tuple[list[str], list[Any]]:
        return ["I was furious", "a happy day"], [{"tags": ("a", "b")}, None]

    sync_appraiser = _NotingAppraiser()
    reference = EmotionalMemory(
        InMemoryStore(), HashingEmbedder(dim=16), sync_appraiser, clock=lambda: NOW
    )
    want = reference.encode_batch(*batch())
    async_appraiser = _AsyncNotingAppraiser()
    aengine = AsyncEmotionalMemory(
        InMemoryStore(), HashingEmbedder(dim=16), async_appraiser, clock=lambda: NOW
    )
    got = asyncio.run(aengine.encode_batch(*batch()))
    assert async_appraiser.contexts == sync_appraiser.contexts
    assert [m.metadata for m in got] == [m.metadata for m in want]
    assert [m.tag.appraisal for m in got] == [m.tag.appraisal for m in want]


def test_a_failed_concurrent_appraisal_stops_the_batchs_other_appraisals() -> None:
    # the batch raised the first appraisal error while its other appraisals (each
    # maybe a paid LLM call) kept running in the background, the queued ones
    # starting after the call had returned
    calls: list[str] = []

    class FailsOnBad:
        async def appraise(self, text: str, context: Any = None) -> Any:
            calls.append(text)
            await asyncio.sleep(0)
            if text == "bad":
                raise LookupError("appraiser failed on 'bad'")
            return KeywordAppraisalEngine().appraise(text, context)

    aengine = AsyncEmotionalMemory(
        InMemoryStore(), HashingEmbedder(dim=16), FailsOnBad(),
        EmotionalMemoryConfig(appraisal_max_concurrency=2), clock=lambda: NOW,
    )

    async def run() -> set[asyncio.Task[Any]]:
        with pytest.raises(LookupError, match="bad"):  # its own type, as the sync engine's
            await aengine.encode_batch(["fine", "bad", *(f"event {i}" for i in range(8))])
        return asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]

    assert asyncio.run(run()) == set()
    assert "event 7" not in calls and len(calls) <= 4
    assert asyncio.run(aengine.count()) == 0


class _CountingAsyncEmbedder:
    """An async embedder (think: a paid embedding API) counting its calls."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(dim=16)
        self.calls = 0

    async def embed(self, text: str) -> list[float]:
        self.calls += 1
        return self.inner.embed(text)


@pytest.mark.parametrize(
    ("method", "args", "kwargs", "error", "match"),
    [
        ("encode", ("x",), {"affect": "happy"}, TypeError, "affect"),
        ("encode", ("x", "not an appraisal"), {}, TypeError, "appraisal"),
        ("retrieve_with_query_appraisal", ("q",), {"top_k": 0}, ValueError, "top_k"),
        ("retrieve_with_query_appraisal", ("q",), {"top_k": "3"}, TypeError, "top_k"),
        ("retrieve_query_gated", ("q",), {"top_k": 0}, ValueError, "top_k"),
    ],
)
def test_bad_arguments_are_refused_before_any_embedding_or_appraisal(
    method: str, args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception],
    match: str,
) -> None:
    # the event was embedded (encode) or the query appraised (the query-appraisal
    # retrievals) - each maybe a paid call - before the argument was checked
    embedder, appraiser = _CountingAsyncEmbedder(), _CountingAsyncAppraiser()
    aengine = AsyncEmotionalMemory(InMemoryStore(), embedder, appraiser, clock=lambda: NOW)
    asyncio.run(aengine.encode("a first memory"))
    before = (embedder.calls, appraiser.calls, asyncio.run(aengine.export_memories()),
              aengine.save_state())
    with pytest.raises(error, match=match):
        asyncio.run(getattr(aengine, method)(*args, **kwargs))
    after = (embedder.calls, appraiser.calls, asyncio.run(aengine.export_memories()),
             aengine.save_state())
    assert after == before


def test_a_concurrently_appraised_batch_keeps_its_turn_in_arrival_order() -> None:
    # operations on one scope run in arrival order; a batch appraised concurrently
    # (async appraiser) queued for its turn only after its appraisals, so an encode
    # that arrived after it ran first: another order of memories, links and state
    # than with a sync appraiser
    def run(appraiser: Any) -> list[str]:
        aengine = AsyncEmotionalMemory(
            InMemoryStore(), HashingEmbedder(dim=16), appraiser, clock=lambda: NOW
        )

        async def scenario() -> list[str]:
            await asyncio.gather(
                aengine.encode_batch(["I was furious", "a happy day"]),
                aengine.encode("a calm walk afterwards"),
            )
            return [m.content for m in await aengine.list_all()]

        return asyncio.run(scenario())

    want = run(KeywordAppraisalEngine())
    assert want == ["I was furious", "a happy day", "a calm walk afterwards"]
    assert run(_AsyncKeywords()) == want


def test_import_memories_refuses_an_overwrite_that_is_not_a_bool() -> None:
    # overwrite="false" (say, from a form or a CLI) was truthy: the import replaced
    # the existing memory it was asked to keep
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), clock=lambda: NOW)
    kept = engine.encode("the original text")
    record = {**engine.export_memories()[0], "content": "an imported replacement"}
    aengine = AsyncEmotionalMemory.from_engine(engine)
    with pytest.raises(TypeError, match="overwrite"):
        engine.import_memories([record], "false")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="overwrite"):
        asyncio.run(aengine.import_memories([record], "false"))  # type: ignore[arg-type]
    assert engine.get(kept.id) == kept
    assert engine.import_memories([record], overwrite=True) == 1



@pytest.mark.parametrize("how", ["cancel", "wait_for"])
def test_a_batch_cancelled_while_appraised_concurrently_stores_nothing(how: str) -> None:
    """README ("Async"): a batch cancelled while its appraisals run never runs: no
    memory, no state change, no appraisal left running, and the next call on the
    scope gets its turn."""
    entered = asyncio.Event()

    class Held:
        async def appraise(self, text: str, context: Any = None) -> Any:
            entered.set()
            await asyncio.Event().wait()  # never answers: the batch must be cancelled

    aengine = AsyncEmotionalMemory(
        InMemoryStore(), HashingEmbedder(dim=16), Held(), clock=lambda: NOW
    )
    before = aengine.save_state()

    async def scenario() -> set[asyncio.Task[Any]]:
        if how == "cancel":
            batch = asyncio.ensure_future(aengine.encode_batch(["a", "b", "c"]))
            await asyncio.wait_for(entered.wait(), 60)
            batch.cancel()
            with pytest.raises(asyncio.CancelledError):
                await batch
        else:  # the appraiser never answers: the timeout always ends the batch
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(aengine.encode_batch(["a", "b", "c"]), 0.05)
        assert entered.is_set()
        assert aengine.save_state() == before and await aengine.count() == 0
        # the turn was handed on: an encode with a given affect needs no appraisal
        affect = aengine.get_state().core_affect
        await asyncio.wait_for(aengine.encode("after", affect=affect), 60)
        return asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]

    assert asyncio.run(scenario()) == set()
    assert [m.content for m in aengine.engine.list_all()] == ["after"]


def test_the_sync_engines_repr_on_the_loop_neither_waits_nor_raises() -> None:
    """``repr(aengine.engine)`` (a log line, a debugger, an assertion message) on the
    loop's thread counted the memories in the engine's turn: it waited for a running
    operation (a deadlock when that operation waits for the loop's async components),
    and with async components it raised RuntimeError."""
    embedder = HeldEmbedder()
    held = AsyncEmotionalMemory(InMemoryStore(), embedder, clock=lambda: NOW)
    bridged = AsyncEmotionalMemory(_AsyncStore(), HashingEmbedder(dim=16), clock=lambda: NOW)
    safety = threading.Timer(30, embedder.release.set)  # the old code waits for this

    async def scenario() -> tuple[str, bool, str, str]:
        await held.encode("already stored")
        await bridged.encode("already stored")
        embedder.hold()
        running = asyncio.ensure_future(held.encode("in flight"))
        await asyncio.to_thread(embedder.entered.wait, 30)  # the encode holds the turn
        safety.start()
        shown = repr(held.engine)
        still_held = not embedder.release.is_set()
        embedder.release.set()
        await running
        return shown, still_held, repr(held.engine), repr(bridged.engine)

    try:
        busy, still_held, idle, bridged_shown = asyncio.run(scenario())
    finally:
        safety.cancel()
    assert still_held, "repr waited for the running operation"
    assert busy.endswith("memories=busy)"), busy
    assert idle.endswith("memories=2)"), idle
    assert bridged_shown.endswith("memories=unknown)"), bridged_shown
    assert repr(held.engine).endswith("memories=2)")  # off the loop: counted as before
