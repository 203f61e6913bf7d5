"""How long a full garbage collection stops a ``serve`` process, with and without
its start-up heap frozen.

Builds the service and its app as ``emotional-memory serve`` does (MiniLM and the
affect rater when installed, a SQLite store), serves a few requests through the library so that
JAX has compiled its programs, keeps one batch's memories alive (what a request
holds while it runs), then times full collections (``gc.collect()``: the
pause every thread of the process, other tenants' requests included, takes when
the collector reaches its oldest generation) before and after :func:`gc.freeze`,
which ``serve`` calls once the app is built. The ratio is timed in this process.

    .venv/bin/python benchmarks/gc_pauses.py [--repeats 7] [--requests 20] [--items 1000]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _args import positive_int

from emotional_memory.server.app import build_app
from emotional_memory.server.cli import build_service, resolve_choices
from emotional_memory.server.service import MemoryService


def _full_collections(repeats: int) -> list[float]:
    """Milliseconds of ``repeats`` full collections."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        gc.collect()
        times.append((time.perf_counter() - started) * 1000)
    return times


def _warm(service: MemoryService, requests: int) -> None:
    """Store and search a little in one scope, so JAX compiles what requests use."""
    scope = service.engine.scoped("warm")
    scope.encode_batch([f"memory number {i} about the harbour" for i in range(32)])
    for i in range(requests):
        scope.retrieve(f"harbour {i}", top_k=5)


def _request_objects(service: MemoryService, items: int) -> list[Any]:
    """What one batch request holds while it runs: its stored memories (alive)."""
    scope = service.engine.scoped("batch")
    return scope.encode_batch([f"batch memory {i} about the river" for i in range(items)])


def main() -> None:
    """Print the pauses (milliseconds) and their ratio as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=positive_int, default=7,
                        help="collections timed per side")
    parser.add_argument("--requests", type=positive_int, default=20, help="warm-up retrieves")
    parser.add_argument("--items", type=positive_int, default=1000,
                        help="memories of a batch alive while collections are timed")
    args = parser.parse_args()
    embedder, affect, _ = resolve_choices(None, None)
    store = f"sqlite:///{Path(tempfile.mkdtemp()) / 'm.db'}"
    service = build_service(store, embedder, None, None, affect)
    build_app(service, None)  # FastAPI, the MCP server and their routes, as serve has
    _warm(service, args.requests)
    live = _request_objects(service, args.items)
    gc.collect()
    tracked = len(gc.get_objects())
    before = _full_collections(args.repeats)
    del live
    gc.collect()
    gc.freeze()
    live = _request_objects(service, args.items)
    after = _full_collections(args.repeats)
    del live
    frozen = gc.get_freeze_count()
    gc.unfreeze()
    b, a = statistics.median(before), statistics.median(after)
    print(json.dumps({
        "embedder": embedder, "affect": affect,
        "tracked_objects": tracked, "frozen_objects": frozen, "batch_items_alive": args.items,
        "full_collection_ms_median": {"unfrozen": round(b, 3), "frozen": round(a, 3)},
        "full_collection_ms_max": {"unfrozen": round(max(before), 3),
                                   "frozen": round(max(after), 3)},
        "ratio_frozen_vs_unfrozen": round(a / b, 4),
    }, indent=2))


if __name__ == "__main__":
    main()
