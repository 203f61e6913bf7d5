"""Throughput of ``emotional-memory serve`` under concurrent clients, next to the engine.

Starts the real server (``python -m emotional_memory.server serve``, in-memory store,
hashing embedder) on a free 127.0.0.1 port and drives it with C concurrent httpx
clients, each sending R requests (three ``POST /v1/memories`` for every ``GET`` and
``POST /v1/search``, each client in its own scope). The baseline, timed in this
process: the same operations, in the same order, made directly on an in-process
``AsyncEmotionalMemory`` (same config, same scopes) with the same concurrency
(``asyncio.gather``). The ratio is what HTTP, JSON, auth and the service layer cost.

Usage:
    python benchmarks/service_throughput.py [--clients 16] [--requests 25] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from emotional_memory.server.cli import build_service
from emotional_memory.server.service import BatchItem, MemoryService
from service_process import start

KEY = "bench-key-0123456789abcdef"


def plan(clients: int, requests: int) -> list[list[tuple[str, int]]]:
    """Each client's operations: ("encode" | "get" | "search", j)."""
    out = []
    for _ in range(clients):
        ops: list[tuple[str, int]] = []
        for j in range(requests):
            kind = "search" if j % 5 == 4 else "get" if j % 5 == 3 else "encode"
            ops.append((kind, j))
        out.append(ops)
    return out


async def over_http(url: str, ops: list[list[tuple[str, int]]], round_: int) -> float:
    async def client_run(i: int, client: httpx.AsyncClient) -> None:
        scope = [f"r{round_}", f"c{i}"]
        last = None
        for kind, j in ops[i]:
            if kind == "encode":
                r = await client.post("/v1/memories", json={
                    "content": f"note {i}-{j} about the weekly review", "scope": scope})
                last = r.json()["id"]
            elif kind == "get":
                r = await client.get(f"/v1/memories/{last}", params={"scope": scope})
            else:
                r = await client.post("/v1/search", json={"query": "weekly review", "top_k": 3,
                                                          "scope": scope})
            r.raise_for_status()

    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"},
                                 timeout=300.0,
                                 limits=httpx.Limits(max_connections=len(ops))) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(client_run(i, client) for i in range(len(ops))))
        return time.perf_counter() - t0


async def in_process(service: MemoryService, ops: list[list[tuple[str, int]]],
                     round_: int) -> float:
    async def client_run(i: int) -> None:
        scope = (f"r{round_}", f"c{i}")
        last = ""
        for kind, j in ops[i]:
            if kind == "encode":
                m = await service.remember(scope, BatchItem(f"note {i}-{j} about the weekly "
                                                            "review"))
                last = m.id
            elif kind == "get":
                assert await service.get(scope, last) is not None
            else:
                await service.search(scope, "weekly review", 3)

    t0 = time.perf_counter()
    await asyncio.gather(*(client_run(i) for i in range(len(ops))))
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    ops = plan(args.clients, args.requests)
    total = args.clients * args.requests
    with tempfile.TemporaryDirectory() as tmp:
        keys = Path(tmp) / "keys.json"
        keys.write_text(json.dumps({KEY: {"scope": ["bench"]}}))
        server = start(["--keys", str(keys), "--log-level", "warning", "--embedder", "hashing"],
                       Path(tmp) / "log")
        service = build_service("memory://", "hashing", None)
        try:
            # warm both (JIT compilation) before timing
            asyncio.run(over_http(server.url, plan(2, 5), -1))
            asyncio.run(in_process(service, plan(2, 5), -1))
            rows: list[dict[str, Any]] = []
            for r in range(args.rounds):
                http_s = asyncio.run(over_http(server.url, ops, r))
                direct_s = asyncio.run(in_process(service, ops, r))
                rows.append({"round": r, "http_s": http_s, "direct_s": direct_s})
                print(f"round {r}: {total} requests, {args.clients} clients: service "
                      f"{total / http_s:7.1f} req/s ({http_s:.2f} s), in-process engine "
                      f"{total / direct_s:7.1f} ops/s ({direct_s:.2f} s), service / engine "
                      f"time {http_s / direct_s:.2f}x")
        finally:
            server.stop()
    best_http = min(r["http_s"] for r in rows)
    best_direct = min(r["direct_s"] for r in rows)
    print(f"best: service {total / best_http:.1f} req/s, engine {total / best_direct:.1f} ops/s, "
          f"ratio {best_http / best_direct:.2f}x")


if __name__ == "__main__":
    main()
