"""Fairness between tenants: one tenant's worst requests against another's searches.

Starts the real server (``python -m emotional_memory.server serve``, hashing
embedder, default limits) over SQLite or PostgreSQL, with two tenant keys. The
attacker's scope holds ``--attacker-memories`` memories, the victim's
``--victim-memories``. The victim sends ordinary searches one after another
(``top_k`` 5, no filter), first while the server is otherwise idle, then while the
attacker sends the heaviest searches the limits allow back to back from two
connections: a query of ``max_content_bytes``, a filter of ``max_filter_clauses``
clauses, and a ``top_k`` drawn from 1..``max_top_k`` (a new ``top_k`` must not
compile a new program). With ``--writes``, the attacker's second connection sends
the largest batches the limits allow instead.

With ``--rate R`` the victim sends R searches per second on a schedule (open loop,
``--samples / R`` seconds, latency from each request's due time), so a stall of the
server counts for every request due during it; without it, one search after another.
With ``--workers N`` the server runs N worker processes on one port (the kernel hands
each connection to one of them, so the victim may or may not share the attackers').

Printed: the victim's p50 / p99 idle and under attack, and their ratios (the target:
p50 <= 2x, p99 <= 5x), and the longest single request of each phase (one request at
a time: a stall of a few seconds is one sample, which p99 hides), all from this run.

Usage:
    python benchmarks/tenant_fairness.py [--store sqlite|postgres] [--attacker-memories 2000]
        [--victim-memories 200] [--samples 200] [--writes] [--workers 1] [--rate 0]
        [--max-batch-items N] [--min-batches 0]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from emotional_memory.server.limits import Limits
from support.service_process import start

ROOT = "fair-root-key-0123456789ab"
ATTACKER = "fair-attacker-key-0123456789"
VICTIM = "fair-victim-key-0123456789ab"
WORDS = ["rain", "bridge", "coffee", "storm", "harbour", "exam", "garden", "train", "dog",
         "music", "river", "lamp", "window", "letter", "market", "winter"]


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def _seed(client: httpx.Client, scope: list[str], n: int, rng: random.Random,
          batch: int) -> None:
    for start_at in range(0, n, batch):
        items = [{"content": _text(rng, 12), "metadata": {"topic": f"t{i % 50}", "n": i}}
                 for i in range(start_at, min(n, start_at + batch))]
        r = client.post("/v1/memories/batch", json={"items": items, "scope": scope},
                        headers={"Authorization": f"Bearer {ROOT}"})
        r.raise_for_status()


def heaviest_search(limits: Limits, rng: random.Random) -> dict[str, Any]:
    """The heaviest search the limits accept, with a random ``top_k``."""
    query = _text(rng, limits.max_content_bytes // 8)
    while len(query.encode()) > limits.max_content_bytes:
        query = query.rsplit(" ", 1)[0]
    clauses = [{"topic": f"t{i}"} for i in range(limits.max_filter_clauses - 1)]
    where = {"$or": [*clauses, {"n": {"$gte": 0}}]}
    return {"query": query, "top_k": rng.randint(1, limits.max_top_k), "where": where}


def heaviest_batch(limits: Limits, rng: random.Random, body_limit: int) -> dict[str, Any]:
    """The largest batch the limits and the body limit accept."""
    words = max(1, min(limits.max_content_bytes, body_limit // limits.max_batch_items - 64) // 8)
    return {"items": [{"content": _text(rng, words)} for _ in range(limits.max_batch_items)]}


def victim_latencies(client: httpx.Client, samples: int) -> np.ndarray:
    """``samples`` victim searches one after another (closed loop): each latency."""
    out = []
    for i in range(samples):
        t0 = time.perf_counter()
        r = client.post("/v1/search", json={"query": f"{WORDS[i % len(WORDS)]} harbour",
                                            "top_k": 5},
                        headers={"Authorization": f"Bearer {VICTIM}"})
        out.append(time.perf_counter() - t0)
        r.raise_for_status()
    return np.asarray(out)


def victim_open_loop(url: str, rate: float, seconds: float, threads: int = 8,
                     more: Callable[[], bool] | None = None,
                     dues: list[float] | None = None) -> np.ndarray:
    """Victim searches at a fixed ``rate`` per second for ``seconds`` (open loop): each
    latency counts from the moment its request was due, so a stall delays every
    request due meanwhile (no coordinated omission: a closed-loop client that waits
    out a 2 s stall records one slow sample, not the 2 s of requests it did not send).
    ``more``: called once ``seconds`` have passed, the schedule goes on while it says
    True (a window that must hold some event, such as a batch's write). ``dues``: when
    given, receives each latency's due time (``time.perf_counter`` clock), in order."""
    planned = int(rate * seconds)
    out: dict[int, float] = {}
    lock = threading.Lock()
    nxt = [0]
    start_at = time.perf_counter() + 0.1
    ended = [False]

    def worker() -> None:
        with httpx.Client(base_url=url, timeout=600.0,
                          headers={"Authorization": f"Bearer {VICTIM}"}) as client:
            while True:
                with lock:
                    i = nxt[0]
                    nxt[0] += 1
                    if i >= planned and (ended[0] or more is None or not more()):
                        ended[0] = True
                        return
                when = start_at + i / rate
                time.sleep(max(0.0, when - time.perf_counter()))
                r = client.post("/v1/search", json={
                    "query": f"{WORDS[i % len(WORDS)]} harbour", "top_k": 5})
                latency = time.perf_counter() - when
                r.raise_for_status()
                with lock:
                    out[i] = latency

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if dues is not None:
        dues.extend(start_at + i / rate for i in sorted(out))
    return np.asarray([out[i] for i in sorted(out)])


def attack(url: str, stop: threading.Event, make: Any, path: str,
           counts: list[tuple[str, float, float]]) -> None:
    """Send ``make(rng)`` to ``path`` back to back until ``stop``; each request's
    (path, start, end) goes to ``counts``."""
    rng = random.Random(threading.get_ident())
    with httpx.Client(base_url=url, timeout=600.0,
                      headers={"Authorization": f"Bearer {ATTACKER}"}) as client:
        while not stop.is_set():
            t0 = time.perf_counter()
            r = client.post(path, json=make(rng))
            r.raise_for_status()
            counts.append((path, t0, time.perf_counter()))


def warm_up(client: httpx.Client, heavy: dict[str, Any], limits: Limits) -> None:
    """Compile what the timed phases run, in the worker behind ``client``'s connection:
    every top_k bucket of the attacker's heaviest search, and the victim's search."""
    for k in (1, 8, 9, 16, 17, 32, 33, 64, 65, limits.max_top_k):
        client.post("/v1/search", json={**heavy, "top_k": min(k, limits.max_top_k)},
                    headers={"Authorization": f"Bearer {ATTACKER}"}).raise_for_status()
    for i in range(3):
        client.post("/v1/search", json={"query": f"{WORDS[i]} harbour", "top_k": 5},
                    headers={"Authorization": f"Bearer {VICTIM}"}).raise_for_status()


def run(store: str, attacker_n: int, victim_n: int, samples: int, writes: bool,
        workers: int = 1, rate: float = 0.0, max_batch_items: int | None = None,
        min_batches: int = 0) -> dict[str, Any]:
    limits = Limits() if max_batch_items is None else Limits(max_batch_items=max_batch_items)
    work = Path(tempfile.mkdtemp(prefix="em-fair-"))
    keys = work / "keys.json"
    keys.write_text(json.dumps({ROOT: {"scope": []}, ATTACKER: {"scope": ["attacker"]},
                                VICTIM: {"scope": ["victim"]}}))
    pg = None
    if store == "sqlite":
        url = f"sqlite:///{work / 'fair.db'}"
    else:
        from support import pg_server

        pg = pg_server.start(Path(tempfile.mkdtemp(prefix="em-fair-pg-")))
        url = pg.create_database("fair")
    extra = ["--workers", str(workers)] if workers > 1 else []
    if max_batch_items is not None:
        extra += ["--max-batch-items", str(max_batch_items)]
    srv = start(["--keys", str(keys), "--store", url, *extra], work / "server.log")
    body_limit = 32 * 1024 * 1024
    try:
        rng = random.Random(0)
        with httpx.Client(base_url=srv.url, timeout=600.0) as client:
            _seed(client, ["attacker"], attacker_n, rng, limits.max_batch_items)
            _seed(client, ["victim"], victim_n, rng, limits.max_batch_items)
            heavy = heaviest_search(limits, rng)
            if workers == 1:
                warm_up(client, heavy, limits)
            else:  # the kernel hands each connection to a worker: warm every one of them
                for _ in range(4 * workers):
                    with httpx.Client(base_url=srv.url, timeout=600.0) as fresh:
                        warm_up(fresh, heavy, limits)
            t0 = time.perf_counter()
            client.post("/v1/search", json=heavy,
                        headers={"Authorization": f"Bearer {ATTACKER}"}).raise_for_status()
            heavy_s = time.perf_counter() - t0
            victim_latencies(client, 20)
            idle = (victim_open_loop(srv.url, rate, samples / rate) if rate
                    else victim_latencies(client, samples))
            stop = threading.Event()
            counts: list[tuple[str, float, float]] = []
            makers = [(lambda r: heaviest_search(limits, r), "/v1/search")] * 2
            if writes:
                makers[1] = (lambda r: heaviest_batch(limits, r, body_limit),
                             "/v1/memories/batch")
            threads = [threading.Thread(target=attack, args=(srv.url, stop, make, path, counts))
                       for make, path in makers]
            for t in threads:
                t.start()
            time.sleep(1.0)  # both attackers busy
            window = time.perf_counter()

            def more() -> bool:  # fewer than min_batches batches ended in the window
                return sum(1 for p, _, end in list(counts)
                           if p.endswith("batch") and end >= window) < min_batches

            dues: list[float] = []
            loaded = (victim_open_loop(srv.url, rate, samples / rate, more=more, dues=dues)
                      if rate else victim_latencies(client, samples))
            window_end = time.perf_counter()
            stop.set()
            for t in threads:
                t.join()
    finally:
        srv.stop()
        if pg is not None:
            pg.stop()

    def ms(a: np.ndarray, q: float) -> float:
        return round(float(np.percentile(a, q)) * 1000, 2)

    # open loop: the searches due in the last 1.5 s of a batch that ended in the window
    # (its store transaction and response) against all the others (its embedding)
    ends = [end for p, _, end in counts if p.endswith("batch") and window <= end <= window_end]
    near = np.asarray([any(end - 1.5 <= due <= end for end in ends) for due in dues], bool)
    split = {}
    if rate and near.any():
        split = {"near_batch_end_max_ms": ms(loaded[near], 100),
                 "elsewhere_p99_ms": ms(loaded[~near], 99),
                 "elsewhere_max_ms": ms(loaded[~near], 100)}

    return {
        **split,
        "store": store, "attacker_memories": attacker_n, "victim_memories": victim_n,
        "samples": samples, "loaded_samples": int(loaded.shape[0]),
        "window_s": round(window_end - window, 1),
        "attack": "search+batch" if writes else "2x heaviest search",
        "workers": workers, "max_batch_items": limits.max_batch_items,
        "victim": f"open loop, {rate:g}/s" if rate else "closed loop",
        "heaviest_search_ms": round(heavy_s * 1000, 1), "attacker_requests": len(counts),
        # batches that ended while the victim was measured (their store write ran then)
        "batches_ended_in_window": sum(1 for p, _, end in counts
                                       if p.endswith("batch") and window <= end <= window_end),
        "batch_seconds": [round(end - t0, 1) for p, t0, end in counts if p.endswith("batch")],
        "idle_p50_ms": ms(idle, 50), "idle_p99_ms": ms(idle, 99),
        "loaded_p50_ms": ms(loaded, 50), "loaded_p99_ms": ms(loaded, 99),
        # the victim asks one request at a time, so a single long stall is one sample:
        # p99 can hide it, the maximum cannot
        "idle_max_ms": ms(idle, 100), "loaded_max_ms": ms(loaded, 100),
        "p50_ratio": round(ms(loaded, 50) / ms(idle, 50), 2),
        "p99_ratio": round(ms(loaded, 99) / ms(idle, 99), 2),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--attacker-memories", type=int, default=2000)
    parser.add_argument("--victim-memories", type=int, default=200)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--writes", action="store_true",
                        help="the attacker's second connection sends the largest batches")
    parser.add_argument("--workers", type=int, default=1,
                        help="serve --workers N (worker processes sharing the port; the "
                        "kernel decides which worker takes each connection)")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="victim requests per second, open loop (0: one after another)")
    parser.add_argument("--max-batch-items", type=int, default=None,
                        help="serve --max-batch-items N (default: the server's default); "
                        "the attacker's batches are then of N items")
    parser.add_argument("--min-batches", type=int, default=0,
                        help="with --rate and --writes: the victim goes on past --samples "
                        "until this many batches have ended (been written) in its window")
    args = parser.parse_args(argv)
    if args.samples < 1 or args.workers < 1 or args.rate < 0:
        parser.error("--samples and --workers must be at least 1, --rate at least 0")
    if min(args.attacker_memories, args.victim_memories) < 0:
        parser.error("--attacker-memories and --victim-memories must be at least 0")
    if args.min_batches and not (args.rate and args.writes):
        parser.error("--min-batches needs --rate and --writes (the open-loop victim's "
                     "window is what it extends)")
    print(json.dumps(run(args.store, args.attacker_memories, args.victim_memories,
                         args.samples, args.writes, args.workers, args.rate,
                         args.max_batch_items, args.min_batches), indent=2))


if __name__ == "__main__":
    main()
