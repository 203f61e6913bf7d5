"""AsyncEmotionalMemory gives the same results as the sync engine (SPEC 8).

The same script runs on a sync engine and on three async set-ups (sync components,
``SyncToAsync*`` adapters, ``as_async(engine)``), each with an identical ``TickClock``
sequence; memories (ids mapped by content), retrieval scores and state must agree.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from emotional_memory import (
    AsyncEmotionalMemory,
    CoreAffect,
    EmotionalMemory,
    EmotionalMemoryConfig,
    InMemoryStore,
    KeywordAppraisalEngine,
    SQLiteStore,
    SyncToAsyncAppraisalEngine,
    SyncToAsyncEmbedder,
    SyncToAsyncStore,
    as_async,
)
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.replay import TickClock
from support.engine_cases import canon

START = datetime(2026, 1, 1, tzinfo=UTC)
Call = Callable[..., Awaitable[Any]]


def mem_key(m: Any) -> tuple[Any, ...]:
    tag = m.tag.model_copy(update={"resonance_links": []})
    return (m.content, m.embedding, m.metadata, tag.model_dump(mode="json"))


def expl_key(r: Any) -> tuple[Any, ...]:
    return (
        mem_key(r.memory), r.score, r.breakdown.model_dump(), r.activation_level,
        r.pass1_rank, r.pass2_rank, r.selected_as_seed, r.candidate_count,
    )


async def script(call: Call, clock: TickClock) -> dict[str, Any]:
    """The shared workload; ``call(name, *args, **kw)`` runs one engine method."""
    out: dict[str, Any] = {}
    await call("encode", "the server crashed before the demo",
               affect=CoreAffect(valence=-0.8, arousal=0.9))
    await call("set_affect", CoreAffect(valence=0.3, arousal=0.5, dominance=0.6))
    await call("encode", "coffee with an old friend", metadata={"k": 1})
    await call("encode", "I was furious at the broken build")  # keyword appraisal
    batch = await call("encode_batch", ["the demo went well", "we celebrated the release",
                                        "a rainy day, nothing happened"])
    out["batch"] = [mem_key(m) for m in batch]
    await call("observe", "a calm moment", affect=CoreAffect(valence=0.1, arousal=0.2))
    clock.advance(timedelta(seconds=60))
    await call("set_affect", CoreAffect(valence=0.7, arousal=0.8))
    out["r1"] = [mem_key(m) for m in await call("retrieve", "server demo", top_k=3)]
    ex = await call("retrieve_with_explanations", "release party", top_k=3,
                    query_affect=CoreAffect(valence=0.5, arousal=0.5))
    out["ex1"] = [expl_key(r) for r in ex]
    clock.advance(timedelta(minutes=2))
    out["ex2"] = [expl_key(r) for r in await call("retrieve_with_explanations", "server", 2)]
    before_prune = await call("export_memories")
    out["export_before_prune"] = canon(before_prune)
    known = {d["id"]: d["content"] for d in before_prune}
    clock.advance(timedelta(days=30))
    out["pruned"] = await call("prune", 0.05)
    out["count"] = await call("count")
    out["export"] = canon(await call("export_memories"), known)
    out["state"] = await call("save_state")
    return out


def sync_call(engine: EmotionalMemory) -> Call:
    async def call(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "count":
            return len(engine)
        return getattr(engine, name)(*args, **kwargs)

    return call


def async_call(engine: AsyncEmotionalMemory) -> Call:
    async def call(name: str, *args: Any, **kwargs: Any) -> Any:
        out = getattr(engine, name)(*args, **kwargs)
        # SPEC 11: the in-memory state methods are synchronous, as in the original
        if name in SYNC_STATE_METHODS:
            assert not asyncio.iscoroutine(out), name
            return out
        return await out

    return call


SYNC_STATE_METHODS = {
    "get_state", "set_affect", "reset_state", "save_state", "load_state", "get_current_mood",
}


def sync_engine(clock: TickClock, store: Any = None) -> EmotionalMemory:
    return EmotionalMemory(
        store if store is not None else InMemoryStore(), HashingEmbedder(dim=64),
        KeywordAppraisalEngine(), EmotionalMemoryConfig(auto_categorize=True), clock=clock,
    )


def async_plain(clock: TickClock) -> AsyncEmotionalMemory:
    return AsyncEmotionalMemory(
        InMemoryStore(), HashingEmbedder(dim=64), KeywordAppraisalEngine(),
        EmotionalMemoryConfig(auto_categorize=True), clock=clock,
    )


def async_adapted(clock: TickClock) -> AsyncEmotionalMemory:
    return AsyncEmotionalMemory(
        SyncToAsyncStore(InMemoryStore()),
        SyncToAsyncEmbedder(HashingEmbedder(dim=64)),
        SyncToAsyncAppraisalEngine(KeywordAppraisalEngine()),
        EmotionalMemoryConfig(auto_categorize=True),
        clock=clock,
    )


def async_wrapped(clock: TickClock) -> AsyncEmotionalMemory:
    return as_async(sync_engine(clock))


FACTORIES = {"sync_components": async_plain, "adapters": async_adapted, "as_async": async_wrapped}


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    clock = TickClock(START)
    engine = sync_engine(clock)
    return asyncio.run(script(sync_call(engine), clock))


def test_reference_script_is_non_trivial(reference: dict[str, Any]) -> None:
    assert len(reference["batch"]) == 3
    assert len(reference["r1"]) == 3
    assert len(reference["ex1"]) == 3 and len(reference["ex2"]) == 2
    assert reference["pruned"] > 0
    assert reference["count"] == 6 - reference["pruned"]
    assert any(d["tag"]["resonance_links"] for d in reference["export_before_prune"])
    assert any(d["tag"]["retrieval_count"] for d in reference["export"])
    # prune unlinks: no surviving memory keeps a link to a pruned one
    survivors = {d["content"] for d in reference["export"]}
    for d in reference["export"]:
        for link in d["tag"]["resonance_links"]:
            assert link["target_id"] in survivors


@pytest.mark.parametrize("variant", sorted(FACTORIES))
def test_async_matches_sync(reference: dict[str, Any], variant: str) -> None:
    clock = TickClock(START)
    aengine = FACTORIES[variant](clock)
    got = asyncio.run(script(async_call(aengine), clock))
    assert set(got) == set(reference)
    for key in reference:
        assert got[key] == reference[key], key


def test_as_async_shares_the_store_and_copies_the_state() -> None:
    clock = TickClock(START)
    engine = sync_engine(clock)
    engine.set_affect(CoreAffect(valence=-0.4, arousal=0.8))
    engine.set_affect(CoreAffect(valence=-0.2, arousal=0.7))
    aengine = as_async(engine)
    assert aengine.config is engine.config
    # SPEC 11: a copy of the state, history included (momentum continues alike)
    assert aengine.save_state() == engine.save_state()
    assert aengine.get_state() is not engine.get_state()

    async def run() -> None:
        m = await aengine.encode("shared", affect=CoreAffect(valence=0.5, arousal=0.5))
        assert engine.get(m.id) == m  # same store
        assert aengine.get_state().core_affect == CoreAffect(valence=0.5, arousal=0.5)
        assert engine.get_state().core_affect == CoreAffect(valence=-0.2, arousal=0.7)
        assert await aengine.get(m.id) == m
        assert [x.id for x in await aengine.list_all()] == [m.id]
        assert await aengine.delete(m.id) is True

    asyncio.run(run())
    assert len(engine) == 0
    with pytest.raises(TypeError):
        as_async("not an engine")  # type: ignore[arg-type]


@pytest.mark.parametrize("variant", sorted(FACTORIES))
def test_concurrent_encodes_all_stored(variant: str) -> None:
    aengine = FACTORIES[variant](TickClock(START))
    texts = [f"concurrent event number {i}" for i in range(12)]

    async def run() -> tuple[list[Any], int, list[Any]]:
        mems = await asyncio.gather(*(aengine.encode(t) for t in texts))
        count = await aengine.count()
        results = await asyncio.gather(
            *(aengine.retrieve(f"event number {i}", top_k=2) for i in range(4))
        )
        return list(mems), count, list(results)

    mems, count, results = asyncio.run(run())
    assert count == len(texts)
    assert sorted(m.content for m in mems) == sorted(texts)
    assert len({m.id for m in mems}) == len(texts)
    assert all(len(r) == 2 for r in results)
    stored = asyncio.run(aengine.list_all())
    assert {m.id for m in stored} == {m.id for m in mems}
    # operations were serialised: every timestamp distinct
    assert len({m.tag.timestamp for m in stored}) == len(texts)


def test_async_errors_propagate_and_leave_state() -> None:
    aengine = async_adapted(TickClock(START))

    async def run() -> None:
        await aengine.encode("one")
        before = (await aengine.export_memories(), aengine.save_state())
        with pytest.raises(ValueError):
            await aengine.retrieve("one", top_k=0)
        with pytest.raises(TypeError):
            await aengine.encode(5)  # type: ignore[arg-type]
        with pytest.raises(KeyError):
            await aengine.update_memory("missing", content="x")
        assert aengine.check_content("ok") == "ok"  # synchronous, as the engine's
        with pytest.raises(ValueError, match=r"^note is not valid Unicode"):
            aengine.check_content("bad \ud800", "note")
        assert (await aengine.export_memories(), aengine.save_state()) == before

    asyncio.run(run())


def test_async_context_manager_closes_store(tmp_path: Any) -> None:
    store = SQLiteStore(tmp_path / "a.db")

    async def run() -> None:
        async with AsyncEmotionalMemory(store, HashingEmbedder(dim=64),
                                        clock=TickClock(START)) as aengine:
            await aengine.encode("hello")
            assert await aengine.count() == 1

    asyncio.run(run())
    assert store.closed


def test_async_encode_batch_refuses_iterators_like_the_sync_engine() -> None:
    # with an async appraisal engine, a generator was consumed by the fast path's
    # checks and an empty batch encoded: nothing stored, no error
    class AsyncKeywords:
        async def appraise(self, text: str, context: Any = None) -> Any:
            return KeywordAppraisalEngine().appraise(text, context)

    aengine = AsyncEmotionalMemory(
        InMemoryStore(), HashingEmbedder(dim=64), AsyncKeywords(), clock=TickClock(START)
    )

    async def run() -> None:
        with pytest.raises(TypeError, match="contents"):
            await aengine.encode_batch(t for t in ["a", "b"])  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="metadata"):
            await aengine.encode_batch(["a"], (m for m in [None]))  # type: ignore[arg-type]
        assert await aengine.count() == 0
        assert len(await aengine.encode_batch(["a", "b"])) == 2

    asyncio.run(run())


def test_async_plan_retrieval_takes_where_like_the_sync_engine() -> None:
    # the async form had no ``where``: TypeError (unexpected keyword) where the sync
    # engine plans over the filtered candidates
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=64), clock=lambda: START)
    aengine = as_async(engine)
    engine.encode("the server crashed", metadata={"team": "ops"})
    engine.encode("the server rebooted", metadata={"team": "dev"})
    want = engine.plan_retrieval("server", 2, where={"team": "ops"})
    got = asyncio.run(aengine.plan_retrieval("server", 2, where={"team": "ops"}))
    assert [m.content for m in got.candidates] == ["the server crashed"]
    assert [m.id for m in got.candidates] == [m.id for m in want.candidates]
    assert got.model_dump() == want.model_dump()
    with pytest.raises(ValueError):
        asyncio.run(aengine.plan_retrieval("server", 2, where={"team": {"$bad": 1}}))


def test_as_async_of_a_scoped_view_stays_in_its_scope() -> None:
    # as_async built a root engine from the view's parts: it saw every scope's
    # memories (another user's included) and stored its own outside the scope
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=64), clock=lambda: START)
    engine.scoped("bob").encode("bob's private note")
    view = engine.scoped("alice")
    view.encode("alice's first note")
    aview = as_async(view)
    assert aview.scope == view.scope == ("alice",)

    async def run() -> tuple[list[str], Any, list[str]]:
        seen = [m.content for m in await aview.list_all()]
        stored = await aview.encode("alice's second note")
        found = [m.content for m in await aview.retrieve("private note", top_k=5)]
        return seen, stored, found

    seen, stored, found = asyncio.run(run())
    assert seen == ["alice's first note"]
    assert stored.scope == ("alice",)
    assert "bob's private note" not in found
    assert [m.content for m in view.list_all()] == ["alice's first note", "alice's second note"]
    assert asyncio.run(aview.close()) is None and len(engine) == 3  # a view closes nothing
