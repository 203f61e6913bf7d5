"""``GET /v1/memories`` paged by ``offset`` while other requests insert (in process).

Memories list in insertion order, and a list waits for the earlier operations on
its scope and sub-scopes: paging through a scope while writers insert into its
sub-scopes never repeats a memory and never skips one that existed before the
first page (new ones only ever append after the last).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")

import httpx

from emotional_memory import EmotionalMemory, InMemoryStore
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.server.app import build_app
from emotional_memory.server.service import MemoryService
from emotional_memory.stores import SQLiteStore

PAGE = 3


def _pages(store: Any) -> tuple[list[str], list[str], list[str]]:
    """(ids before paging, ids paged through, ids inserted while paging)."""
    app = build_app(MemoryService(EmotionalMemory(store, HashingEmbedder(dim=16))), None)

    async def run() -> tuple[list[str], list[str], list[str]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            async def post(part: str, content: str) -> str:
                r = await http.post("/v1/memories",
                                    json={"content": content, "scope": ["t", part]})
                assert r.status_code == 201, r.text
                return str(r.json()["id"])

            before = [await post(str(i % 3), f"before {i}") for i in range(20)]
            added: list[str] = []
            done = asyncio.Event()

            async def writer(part: str) -> None:
                n = 0
                while not done.is_set():
                    added.append(await post(part, f"during {part} {n}"))
                    n += 1

            writers = [asyncio.create_task(writer(str(k))) for k in range(3)]
            paged: list[str] = []
            while True:
                r = await http.get("/v1/memories", params={
                    "scope": "t", "limit": PAGE, "offset": len(paged)})
                page = [m["id"] for m in r.json()["memories"]]
                paged += page
                if len(page) < PAGE or len(paged) >= 120:
                    break
            done.set()
            await asyncio.gather(*writers)
            return before, paged, added

    return asyncio.run(run())


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_paging_under_concurrent_inserts_neither_repeats_nor_skips(
    kind: str, tmp_path: Path
) -> None:
    store = InMemoryStore() if kind == "memory" else SQLiteStore(str(tmp_path / "m.db"))
    before, paged, added = _pages(store)
    assert len(paged) == len(set(paged)), "a memory listed on two pages"
    assert paged[: len(before)] == before, "a memory present before paging was skipped"
    assert set(paged[len(before):]) <= set(added)
    assert added, "no insert ran while paging"
