"""AsyncEmotionalMemory over truly async components agrees with the sync engine.

``test_async_engine`` compares set-ups whose components are blocking (the async
engine then calls them directly); here the store, embedder and appraisal engine are
coroutine-based, so every call crosses the loop bridge and ``encode_batch`` takes the
concurrent-appraisal path. The same script runs on both engines with the same
clock; answers, stored rows and state must agree (ids mapped by content).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from emotional_memory import (
    AsyncEmotionalMemory,
    EmotionalMemory,
    EmotionalMemoryConfig,
    InMemoryAffectiveStateStore,
    InMemoryStore,
    KeywordAppraisalEngine,
    SyncToAsyncAppraisalEngine,
    SyncToAsyncEmbedder,
    SyncToAsyncStore,
)
from emotional_memory.embedders import HashingEmbedder
from support.engine_cases import canon

START = datetime(2026, 1, 1, tzinfo=UTC)


class StepClock:
    """A clock that moves only when told (a view's construction reads it too)."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


class AsyncStore:
    """An async memory store over an :class:`InMemoryStore` (one loop step per call)."""

    def __init__(self) -> None:
        self.inner = InMemoryStore()

    async def save(self, memory: Any) -> None:
        await asyncio.sleep(0)
        self.inner.save(memory)

    async def get(self, memory_id: str) -> Any:
        await asyncio.sleep(0)
        return self.inner.get(memory_id)

    async def update(self, memory: Any) -> None:
        await asyncio.sleep(0)
        self.inner.update(memory)

    async def delete(self, memory_id: str) -> bool:
        await asyncio.sleep(0)
        return self.inner.delete(memory_id)

    async def list_all(self) -> list[Any]:
        await asyncio.sleep(0)
        return self.inner.list_all()

    async def search_by_embedding(self, embedding: Any, top_k: int) -> list[Any]:
        await asyncio.sleep(0)
        return self.inner.search_by_embedding(embedding, top_k)

    async def count(self) -> int:
        return len(self.inner)


class AsyncEmbedder:
    """The hashing embedder behind coroutines; records every call."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(dim=64)
        self.calls: list[tuple[str, Any]] = []

    async def embed(self, text: str) -> list[float]:
        self.calls.append(("embed", text))
        await asyncio.sleep(0)
        return self.inner.embed(text)

    async def embed_batch(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(("embed_batch", list(texts)))
        await asyncio.sleep(0)
        return self.inner.embed_batch(texts)


class AsyncKeywords:
    """Keyword appraisal behind a coroutine."""

    async def appraise(self, text: str, context: Any = None) -> Any:
        await asyncio.sleep(0)
        return KeywordAppraisalEngine().appraise(text, context)


class CountingStates:
    """An in-memory state store counting its writes (its views' included)."""

    def __init__(self, inner: Any = None, writes: list[int] | None = None) -> None:
        self.inner = inner if inner is not None else InMemoryAffectiveStateStore()
        self.writes = writes if writes is not None else [0]

    @property
    def saves(self) -> int:
        return self.writes[0]

    def scoped(self, path: tuple[str, ...]) -> CountingStates:
        return CountingStates(self.inner.scoped(path), self.writes)

    def save(self, state: Any) -> None:
        self.writes[0] += 1
        self.inner.save(state)

    def load(self) -> Any:
        return self.inner.load()

    def clear(self) -> None:
        self.inner.clear()


def key(m: Any) -> Any:
    if m is None:
        return None
    tag = m.tag.model_copy(update={"resonance_links": []})
    return (m.content, m.embedding, m.metadata, m.scope, tag.model_dump(mode="json"))


async def script(engine: Any, clock: StepClock) -> dict[str, Any]:
    """Every mirrored method once; ``engine`` is sync or async."""

    async def call(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "count" and isinstance(engine, EmotionalMemory):
            return len(engine)
        out = getattr(engine, name)(*args, **kwargs)
        return await out if asyncio.iscoroutine(out) else out

    out: dict[str, Any] = {}
    m1 = await call("encode", "I was furious at the broken build", metadata={"a": 1})
    m2 = await call("encode", "we celebrated the release")
    batch = await call("encode_batch", ["the demo went well", "a sad rainy day",
                                        "I feared the outage"], [{"i": 0}, None, {"i": 2}])
    out["batch"] = [key(m) for m in batch]
    out["empty_batch"] = await call("encode_batch", [])
    clock.now += timedelta(seconds=30)
    out["observe"] = (await call("observe", "a calm moment")).model_dump(mode="json")
    out["pending"] = [key(m) for m in await call("elaborate_pending")]
    out["gated"] = [key(m) for m in await call("retrieve_query_gated", "release demo", 3)]
    out["appraised"] = [
        key(m) for m in await call("retrieve_with_query_appraisal", "furious outage", 3)
    ]
    out["weights"] = [float(w) for w in await call("current_weights", "what happened")]
    out["explained"] = [
        (key(r.memory), r.score, r.breakdown.model_dump())
        for r in await call("retrieve_with_explanations", "sad outage", 3)
    ]
    updated = await call("update_memory", m2.id, content="we celebrated the big release",
                         metadata={"z": 1})
    out["updated"] = key(updated)
    out["where"] = [key(m) for m in await call("list_all", where={"i": 2})]
    out["page"] = [key(m) for m in await call("list_all", limit=2, offset=1)]
    exported = await call("export_memories")
    known = {d["id"]: d["content"] for d in exported}
    out["deleted"] = await call("delete", m1.id)
    out["imported"] = await call("import_memories", exported, False)
    out["get"] = key(await call("get", m1.id))
    out["count"] = await call("count")
    plan = await call("plan_retrieval", "release", 2)
    out["plan"] = [key(m) for m in plan.candidates]
    clock.now += timedelta(days=40)
    out["pruned"] = await call("prune", 0.3)
    out["rows"] = canon(await call("export_memories"), known)
    out["mood"] = (await call("get_current_mood")).model_dump(mode="json")
    out["persisted"] = await call("persist_state")
    out["state"] = await call("save_state")
    return out


def engines(dual: bool) -> tuple[EmotionalMemory, AsyncEmotionalMemory, StepClock, StepClock]:
    cfg = EmotionalMemoryConfig(auto_categorize=True, dual_path_encoding=dual)
    sync_clock, async_clock = StepClock(), StepClock()
    sync = EmotionalMemory(
        InMemoryStore(), HashingEmbedder(dim=64), KeywordAppraisalEngine(), cfg,
        CountingStates(), clock=sync_clock,
    )
    aengine = AsyncEmotionalMemory(
        AsyncStore(), AsyncEmbedder(), AsyncKeywords(), cfg, CountingStates(),
        clock=async_clock,
    )
    return sync, aengine, sync_clock, async_clock


@pytest.mark.parametrize("dual", [False, True], ids=["appraised", "dual_path"])
@pytest.mark.parametrize("scope", [(), ("alice",)], ids=["root", "view"])
def test_async_components_give_the_sync_engines_answers_rows_and_state(
    dual: bool, scope: tuple[str, ...]
) -> None:
    sync, aengine, sync_clock, async_clock = engines(dual)
    sync_view: Any = sync.scoped(*scope) if scope else sync
    async_view: Any = aengine.scoped(*scope) if scope else aengine
    want = asyncio.run(script(sync_view, sync_clock))
    got = asyncio.run(script(async_view, async_clock))
    assert want["count"] == 5 and want["pruned"] > 0  # the script is not trivial
    assert set(got) == set(want)
    for name in want:
        assert got[name] == want[name], name
    # the same state-store writes (one per state change), root and view alike
    assert isinstance(sync.state_store, CountingStates)
    assert isinstance(aengine.engine.state_store, CountingStates)
    assert aengine.engine.state_store.saves == sync.state_store.saves > 0


def test_an_empty_batch_with_an_async_appraiser_calls_nothing_and_writes_nothing() -> None:
    # the concurrent-appraisal path sent [] to the embedder (an embedding API may
    # refuse an empty input) and rewrote the unchanged state, where the sync engine
    # (and the async engine with a blocking appraiser) returns [] at once
    states = CountingStates()
    embedder = AsyncEmbedder()
    aengine = AsyncEmotionalMemory(AsyncStore(), embedder, AsyncKeywords(), state_store=states)
    saves = states.saves
    assert asyncio.run(aengine.encode_batch([])) == []
    assert embedder.calls == [] and states.saves == saves
    assert asyncio.run(aengine.encode_batch([], [])) == []
    assert embedder.calls == [] and states.saves == saves


class ExhaustedEmbedder:
    """A blocking embedder replaying canned vectors: past the last one, ``next`` raises
    StopIteration."""

    def __init__(self) -> None:
        self.vectors = iter([[1.0, 0.0, 0.0, 0.0]])

    def embed(self, text: str) -> list[float]:
        return next(self.vectors)


def test_a_component_raising_stop_iteration_fails_the_call_and_frees_the_engine() -> None:
    # a StopIteration cannot be set on an asyncio future: the worker's result was
    # lost, the call never returned and the engine's turn stayed held forever
    aengine = AsyncEmotionalMemory(InMemoryStore(), ExhaustedEmbedder(), clock=lambda: START)

    async def run() -> None:
        await asyncio.wait_for(aengine.encode("first"), 60)
        before = aengine.save_state()
        with pytest.raises(RuntimeError, match="StopIteration") as info:
            await asyncio.wait_for(aengine.encode("second"), 60)
        assert isinstance(info.value.__cause__, StopIteration)
        assert aengine.save_state() == before
        assert await asyncio.wait_for(aengine.count(), 60) == 1  # the turn was handed on

    asyncio.run(run())


@pytest.mark.parametrize("adapter", ["embedder", "store", "appraisal"])
def test_the_sync_to_async_adapters_turn_stop_iteration_into_an_error(adapter: str) -> None:
    class Raising:
        def embed(self, text: str) -> list[float]:
            raise StopIteration

        def get(self, memory_id: str) -> Any:
            raise StopIteration

        def appraise(self, text: str, context: Any = None) -> Any:
            raise StopIteration

    calls = {
        "embedder": lambda: SyncToAsyncEmbedder(Raising()).embed("x"),  # type: ignore[arg-type]
        "store": lambda: SyncToAsyncStore(Raising()).get("x"),  # type: ignore[arg-type]
        "appraisal": lambda: SyncToAsyncAppraisalEngine(Raising()).appraise("x"),  # type: ignore[arg-type]
    }

    async def run() -> None:
        with pytest.raises(RuntimeError, match="StopIteration"):
            await asyncio.wait_for(calls[adapter](), 60)

    asyncio.run(run())


CANCELLED_OPS: dict[str, tuple[str, tuple[Any, ...], dict[str, Any]]] = {
    # each embeds (held there); FIRST stands for the first memory's id
    "encode": ("encode", ("a cancelled sad event",), {}),
    "encode_batch": ("encode_batch", (["cancelled one", "cancelled two"],), {}),
    "retrieve": ("retrieve", ("event", 2), {}),
    "explained": ("retrieve_with_explanations", ("happy event", 2), {}),
    "update_memory": ("update_memory", ("FIRST",), {"content": "rewritten event"}),
}


@pytest.mark.parametrize("name", sorted(CANCELLED_OPS))
def test_a_call_cancelled_while_its_worker_runs_completes_whole_on_sqlite(
    name: str, tmp_path: Any
) -> None:
    """Cancelled inside the embedder (its worker running), the call completes in the
    background: the SQLite rows and the state then equal the sync engine's after the
    same call, and the next call gets the turn."""
    from emotional_memory import SQLiteStore
    from support.async_parts import HeldEmbedder

    method, args, kwargs = CANCELLED_OPS[name]
    clock = StepClock()
    embedder = HeldEmbedder(dim=64)
    aengine = AsyncEmotionalMemory(
        SQLiteStore(tmp_path / "async.db"), embedder, KeywordAppraisalEngine(), clock=clock
    )
    oracle = EmotionalMemory(
        SQLiteStore(tmp_path / "sync.db"), HashingEmbedder(dim=64), KeywordAppraisalEngine(),
        clock=StepClock(),
    )

    def resolved(first_id: str) -> tuple[Any, ...]:
        return tuple(first_id if a == "FIRST" else a for a in args)

    async def scenario() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        first = await aengine.encode("the first event was happy")
        await aengine.encode("the second event was sad")
        embedder.hold()
        task = asyncio.ensure_future(
            getattr(aengine, method)(*resolved(first.id), **kwargs)
        )
        await asyncio.to_thread(embedder.entered.wait, 60)
        task.cancel()  # the worker is inside embed
        with pytest.raises(asyncio.CancelledError):
            await task
        embedder.release.set()
        count = await asyncio.wait_for(aengine.count(), 60)  # waits for the worker
        assert count == len(aengine.engine)
        return await aengine.export_memories(), aengine.save_state()

    got_rows, got_state = asyncio.run(scenario())
    first = oracle.encode("the first event was happy")
    oracle.encode("the second event was sad")
    getattr(oracle, method)(*resolved(first.id), **kwargs)
    want_rows = oracle.export_memories()
    assert canon(got_rows) == canon(want_rows)
    assert got_state == oracle.save_state()
    asyncio.run(aengine.close())
    oracle.close()
