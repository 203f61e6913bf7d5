"""Many AsyncEmotionalMemory engines under one gather never deadlock.

Before the fix each engine call held a default-executor thread while it waited for a
coroutine (a ``SyncToAsync*`` adapter's ``asyncio.to_thread``) that needed another
default-executor thread: with the pool smaller than the number of engines, every
thread waited and nothing ran. The loop's default executor is made deliberately tiny
here (2 threads) so the old code hangs on any machine; a timeout turns a hang into a
failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from emotional_memory import (
    AsyncEmotionalMemory,
    CoreAffect,
    InMemoryStore,
    StaticAppraisalEngine,
    SyncToAsyncAppraisalEngine,
    SyncToAsyncEmbedder,
    SyncToAsyncStore,
)
from emotional_memory.embedders import HashingEmbedder

TIMEOUT_S = 180.0


class ThreadedAsyncStore:
    """A genuinely async store (not an adapter) whose every call needs a worker thread."""

    def __init__(self) -> None:
        self.inner = InMemoryStore()

    async def save(self, memory: Any) -> None:
        await asyncio.to_thread(self.inner.save, memory)

    async def get(self, memory_id: str) -> Any:
        return await asyncio.to_thread(self.inner.get, memory_id)

    async def update(self, memory: Any) -> None:
        await asyncio.to_thread(self.inner.update, memory)

    async def delete(self, memory_id: str) -> bool:
        return await asyncio.to_thread(self.inner.delete, memory_id)

    async def list_all(self) -> list[Any]:
        return await asyncio.to_thread(self.inner.list_all)

    async def search_by_embedding(self, embedding: Any, top_k: int) -> list[Any]:
        return await asyncio.to_thread(self.inner.search_by_embedding, embedding, top_k)

    async def count(self) -> int:
        return await asyncio.to_thread(len, self.inner)


def _adapted(i: int) -> AsyncEmotionalMemory:
    return AsyncEmotionalMemory(
        SyncToAsyncStore(sync_store=InMemoryStore()),
        SyncToAsyncEmbedder(sync_embedder=HashingEmbedder(dim=32)),
        SyncToAsyncAppraisalEngine(sync_engine=StaticAppraisalEngine()),
    )


def _threaded(i: int) -> AsyncEmotionalMemory:
    return AsyncEmotionalMemory(
        ThreadedAsyncStore(), SyncToAsyncEmbedder(HashingEmbedder(dim=32))
    )


async def _workload(engine: AsyncEmotionalMemory, i: int) -> tuple[int, int]:
    engine.set_affect(CoreAffect(valence=(i % 5) / 5 - 0.4, arousal=0.5))
    await engine.encode(f"engine {i} first event")
    await engine.encode_batch([f"engine {i} event {j}" for j in range(3)])
    found = await engine.retrieve(f"engine {i} event", top_k=2)
    return await engine.count(), len(found)


async def _gather_all(factory: Any, n: int) -> list[tuple[int, int]]:
    loop = asyncio.get_running_loop()
    tiny = ThreadPoolExecutor(max_workers=2)  # far fewer threads than engines
    loop.set_default_executor(tiny)
    engines = [factory(i) for i in range(n)]
    try:
        return await asyncio.wait_for(
            asyncio.gather(*(_workload(e, i) for i, e in enumerate(engines))), TIMEOUT_S
        )
    finally:
        for e in engines:
            await e.close()


FACTORIES = {"adapters": _adapted, "async_store": _threaded}


def _run_in_subprocess(kind: str, n: int) -> list[list[int]]:
    """Run the gather in a fresh interpreter, killed after ``TIMEOUT_S``.

    A deadlocked run cannot be stopped from inside: its executor threads block the
    event loop's shutdown and the interpreter's exit. A subprocess with a timeout
    turns the hang into a test failure.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        proc = subprocess.run(
            [sys.executable, __file__, kind, str(n)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{n} engines ({kind}) under one gather did not finish in {TIMEOUT_S} s")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out: list[list[int]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_64_engines_under_one_gather_finish(kind: str) -> None:
    assert _run_in_subprocess(kind, 64) == [[4, 2]] * 64


def test_six_adapter_engines_finish() -> None:
    """The issue's report: six engines over the adapters (on a 2-core machine)."""
    assert _run_in_subprocess("adapters", 6) == [[4, 2]] * 6


if __name__ == "__main__":
    results = asyncio.run(_gather_all(FACTORIES[sys.argv[1]], int(sys.argv[2])))
    print(json.dumps([list(r) for r in results]))
