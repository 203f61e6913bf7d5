"""Throughput of ``emotional-memory serve`` under concurrent clients, next to the engine.

Starts the real server (``python -m emotional_memory.server serve``, hashing embedder)
on a free 127.0.0.1 port over the in-memory store, an SQLite file or a PostgreSQL
database (a real server started for the run), with ``--workers`` processes, and drives
it with C concurrent httpx clients, each sending R requests (three ``POST
/v1/memories`` for every ``GET`` and ``POST /v1/search``, each client in its own
scope). The baseline, timed in this process: the same operations, in the same order,
made directly on an in-process service over the same kind of store (same config,
same scopes) with the same concurrency (``asyncio.gather``). The ratio is what HTTP,
JSON, auth, the service layer and (with several workers) the shared state cost.
Printed per round: requests/s, the p50 / p99 of every request and of the searches
alone, against the in-process engine's.

Usage:
    python benchmarks/service_throughput.py [--store memory|sqlite|postgres]
        [--workers 1,2] [--clients 16] [--requests 25] [--rounds 2] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from emotional_memory.server.cli import build_service
from emotional_memory.server.service import BatchItem, MemoryService
from support.service_process import start

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


Timings = dict[str, list[float]]


async def over_http(url: str, ops: list[list[tuple[str, int]]], round_: int,
                    times: Timings | None = None) -> float:
    async def client_run(i: int, client: httpx.AsyncClient) -> None:
        scope = [f"r{round_}", f"c{i}"]
        last = None
        for kind, j in ops[i]:
            t0 = time.perf_counter()
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
            if times is not None:
                times[kind].append(time.perf_counter() - t0)

    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"},
                                 timeout=300.0,
                                 limits=httpx.Limits(max_connections=len(ops))) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(client_run(i, client) for i in range(len(ops))))
        return time.perf_counter() - t0


async def in_process(service: MemoryService, ops: list[list[tuple[str, int]]],
                     round_: int, times: Timings | None = None) -> float:
    async def client_run(i: int) -> None:
        scope = (f"r{round_}", f"c{i}")
        last = ""
        for kind, j in ops[i]:
            t0 = time.perf_counter()
            if kind == "encode":
                m = await service.remember(scope, BatchItem(f"note {i}-{j} about the weekly "
                                                            "review"))
                last = m.id
            elif kind == "get":
                assert await service.get(scope, last) is not None
            else:
                await service.search(scope, "weekly review", 3)
            if times is not None:
                times[kind].append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(client_run(i) for i in range(len(ops))))
    return time.perf_counter() - t0


def _percentiles(times: Timings) -> dict[str, float]:
    every = [t for ts in times.values() for t in ts]
    return {"p50_ms": 1e3 * float(np.percentile(every, 50)),
            "p99_ms": 1e3 * float(np.percentile(every, 99)),
            "search_p50_ms": 1e3 * float(np.percentile(times["search"], 50)),
            "search_p99_ms": 1e3 * float(np.percentile(times["search"], 99))}


def _store_urls(kind: str, work: Path) -> tuple[str, str, Any]:
    """The server's store URL, the in-process baseline's, and a PostgreSQL server
    to stop (or None)."""
    if kind == "memory":
        return "memory://", "memory://", None
    if kind == "sqlite":
        return f"sqlite:///{work / 'served.db'}", f"sqlite:///{work / 'direct.db'}", None
    from support import pg_server

    pg = pg_server.start(Path(tempfile.mkdtemp(prefix="em-throughput-pg-")))
    return pg.create_database("served"), pg.create_database("direct"), pg


def run(kind: str, workers: int, clients: int, requests: int, rounds: int) -> list[dict[str, Any]]:
    """Time ``rounds`` rounds of the plan over HTTP and in process; one row per round."""
    ops = plan(clients, requests)
    total = clients * requests
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        keys = work / "keys.json"
        keys.write_text(json.dumps({KEY: {"scope": ["bench"]}}))
        served, direct, pg = _store_urls(kind, work)
        server = start(["--keys", str(keys), "--log-level", "warning", "--embedder", "hashing",
                        "--store", served, "--workers", str(workers)], work / "log")
        service = build_service(direct, "hashing", None)
        rows: list[dict[str, Any]] = []
        try:
            # warm both (JIT compilation in every worker) before timing
            for w in range(2 * workers):
                asyncio.run(over_http(server.url, plan(4, 5), -1 - w))
            asyncio.run(in_process(service, plan(4, 5), -1))
            for r in range(rounds):
                http_t: Timings = defaultdict(list)
                direct_t: Timings = defaultdict(list)
                http_s = asyncio.run(over_http(server.url, ops, r, http_t))
                direct_s = asyncio.run(in_process(service, ops, r, direct_t))
                row = {"store": kind, "workers": workers, "clients": clients, "round": r,
                       "requests_per_s": total / http_s, "engine_ops_per_s": total / direct_s,
                       "time_ratio": http_s / direct_s,
                       "service": _percentiles(http_t), "engine": _percentiles(direct_t)}
                row["search_p50_ratio"] = (row["service"]["search_p50_ms"]
                                           / row["engine"]["search_p50_ms"])
                rows.append(row)
                print(f"{kind}, {workers} worker(s), round {r}: {total} requests, {clients} "
                      f"clients: service {total / http_s:7.1f} req/s, engine "
                      f"{total / direct_s:7.1f} ops/s ({http_s / direct_s:.2f}x the time); "
                      f"service p50/p99 {row['service']['p50_ms']:.1f}/"
                      f"{row['service']['p99_ms']:.1f} ms, search p50 "
                      f"{row['service']['search_p50_ms']:.1f} ms against the engine's "
                      f"{row['engine']['search_p50_ms']:.1f} ms "
                      f"({row['search_p50_ratio']:.2f}x)", flush=True)
        finally:
            server.stop()
            asyncio.run(service.close())
            if pg is not None:
                pg.stop()
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("memory", "sqlite", "postgres"), default="memory")
    parser.add_argument("--workers", default="1",
                        help="comma-separated worker counts, e.g. 1,2 (memory: 1 only)")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    try:
        worker_counts = [int(w) for w in args.workers.split(",")]
    except ValueError:
        parser.error(f"--workers must be comma-separated integers, not {args.workers!r}")
    if min(worker_counts) < 1 or (args.store == "memory" and max(worker_counts) > 1):
        parser.error("--workers: counts >= 1, and 1 only with --store memory "
                     "(worker processes share a SQLite or PostgreSQL store)")
    if args.requests < 5:  # every fifth request of a client is its search
        parser.error("--requests must be at least 5 (each client's fifth is a search)")
    if args.clients < 1 or args.rounds < 1:
        parser.error("--clients and --rounds must be at least 1")
    rows: list[dict[str, Any]] = []
    for workers in worker_counts:
        rows += run(args.store, workers, args.clients, args.requests, args.rounds)
    print("best per worker count (fastest round):")
    for workers in sorted({r["workers"] for r in rows}):
        best = max((r for r in rows if r["workers"] == workers),
                   key=lambda r: r["requests_per_s"])
        print(json.dumps({k: v for k, v in best.items() if k != "round"}, default=float))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=float))


if __name__ == "__main__":
    main()
