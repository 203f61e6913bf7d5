"""What one request may leave behind in a long-running service: counted objects,
never timings. Many requests on distinct scopes must keep the per-scope state the
process holds within the documented bounds (``MAX_VIEWS`` views, the stored states)."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from emotional_memory.embedders import HashingEmbedder
from emotional_memory.engine import EmotionalMemory
from emotional_memory.server.service import MemoryService
from emotional_memory.state_stores import InMemoryAffectiveStateStore
from emotional_memory.stores import InMemoryStore
from support.async_parts import WordHeldEmbedder


def _live(kind: type) -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if type(obj) is kind)


def test_reading_many_scopes_keeps_no_in_memory_state_per_scope() -> None:
    """A scope only read (state, search, get) stores no state: once its view is
    evicted nothing of it stays, so a client naming new scopes forever cannot grow
    the process (``serve --store memory://`` keeps its states so)."""
    states = InMemoryAffectiveStateStore()
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(), state_store=states)
    service = MemoryService(engine, max_views=2)
    before = _live(InMemoryAffectiveStateStore)

    async def run() -> None:
        for i in range(60):
            await service.state((f"s{i}",))
            await service.search((f"q{i}",), "hello", 3)
            await service.get((f"g{i}",), "no-such-id")

    asyncio.run(run())
    assert len(service._views) == 2
    # the two kept views' stores at most (and none for the 178 evicted scopes)
    assert _live(InMemoryAffectiveStateStore) - before <= 2


def test_a_saved_in_memory_state_outlives_its_evicted_view() -> None:
    from emotional_memory.affect import CoreAffect

    states = InMemoryAffectiveStateStore()
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(), state_store=states)
    service = MemoryService(engine, max_views=1)
    affect = CoreAffect(valence=-0.6, arousal=0.7)

    async def run() -> None:
        saved = await service.set_affect(("kept",), affect)
        for i in range(5):
            await service.state((f"other{i}",))
        assert ("kept",) not in service._views
        again = await service.state(("kept",))
        assert again.snapshot() == saved.snapshot()

    asyncio.run(run())
    assert states.scoped(("kept",)).load_snapshot() is not None
    assert states.scoped(("other0",)).load() is None
    # a nested store's scopes are its own path's sub-scopes
    states.scoped(("a",)).scoped(("b",)).save(states.scoped(("kept",)).load_snapshot())
    assert states.scoped(("a", "b")).load_snapshot() == states.scoped(("kept",)).load_snapshot()
    assert states.scoped(("a",)).load() is None


def test_a_key_has_at_most_max_in_flight_requests_at_once() -> None:
    """Requests of one key past ``max_in_flight`` (running or queued for their scope,
    each holding its parsed body) are refused at once with 429; another key's are not
    held up, and a finished request frees its place (the count is not kept per key
    once none is in flight)."""
    import httpx

    from emotional_memory.server.app import DEFAULT_MAX_IN_FLIGHT, build_app
    from emotional_memory.server.keys import KeyRing

    assert DEFAULT_MAX_IN_FLIGHT >= 1
    alice, bob = "alice-key-0a1b2c3d4e5f6a7b", "bob-key-99887766554433221"
    embedder = WordHeldEmbedder("block")
    engine = EmotionalMemory(InMemoryStore(), embedder,
                             state_store=InMemoryAffectiveStateStore())
    keys = KeyRing.from_mapping({alice: {"scope": ["alice"]}, bob: {"scope": ["bob"]}})
    app = build_app(MemoryService(engine), keys, max_in_flight=2)

    async def run() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            def search(key: str, query: str) -> Any:
                return client.post("/v1/search", json={"query": query},
                                   headers={"Authorization": f"Bearer {key}"})

            seeded = await client.post("/v1/memories", json={"content": "seed"},
                                       headers={"Authorization": f"Bearer {alice}"})
            assert seeded.status_code == 201, seeded.text
            held = [asyncio.ensure_future(search(alice, "block")) for _ in range(2)]
            # the first runs (in the embedder), the second waits for its scope's turn
            for _ in range(3000):
                if embedder.entered.is_set() and sum(app._in_flight.values()) == 2:
                    break
                await asyncio.sleep(0.01)
            assert embedder.entered.is_set() and app._in_flight
            over = await search(alice, "anything")
            assert over.status_code == 429, over.text
            assert "max-in-flight" in over.json()["detail"]
            assert (await search(bob, "anything")).status_code == 200
            embedder.release.set()
            assert [r.status_code for r in await asyncio.gather(*held)] == [200, 200]
            assert (await search(alice, "anything")).status_code == 200
        assert app._in_flight == {}

    asyncio.run(run())


def test_a_cancelled_or_disconnected_request_frees_its_place() -> None:
    """A request whose client goes away frees its place: cancelled (as a server that
    cancels on disconnect does) while its operation runs, or cut off while its body
    is read; the key's next request is served, not refused with 429."""
    import httpx

    from emotional_memory.server.app import build_app

    embedder = WordHeldEmbedder("block")
    engine = EmotionalMemory(InMemoryStore(), embedder,
                             state_store=InMemoryAffectiveStateStore())
    app = build_app(MemoryService(engine), None, max_in_flight=1)

    async def cut_off_body() -> None:
        sent: list[Any] = []

        async def receive() -> Any:
            if not sent:
                sent.append(1)
                return {"type": "http.request", "body": b'{"conte', "more_body": True}
            return {"type": "http.disconnect"}

        async def send(message: Any) -> None:
            return None

        scope = {"type": "http", "method": "POST", "path": "/v1/memories",
                 "raw_path": b"/v1/memories", "query_string": b"", "root_path": "",
                 "scheme": "http", "server": ("t", 80), "http_version": "1.1",
                 "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]}
        await asyncio.gather(app(scope, receive, send), return_exceptions=True)

    async def run() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            seeded = await client.post("/v1/memories", json={"content": "seed"})
            assert seeded.status_code == 201, seeded.text
            held = asyncio.ensure_future(client.post("/v1/search", json={"query": "block"}))
            for _ in range(3000):
                if embedder.entered.is_set():
                    break
                await asyncio.sleep(0.01)
            assert embedder.entered.is_set() and sum(app._in_flight.values()) == 1
            held.cancel()
            await asyncio.gather(held, return_exceptions=True)
            assert app._in_flight == {}
            embedder.release.set()
            await cut_off_body()
            assert app._in_flight == {}
            made = await client.post("/v1/memories", json={"content": "next"})
            assert made.status_code == 201, made.text
        assert app._in_flight == {}

    asyncio.run(run())
