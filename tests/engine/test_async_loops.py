"""One AsyncEmotionalMemory used from several event loops, and its async components.

Events decide every order; timeouts are hang guards only."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from typing import Any

from emotional_memory import AsyncEmotionalMemory
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
