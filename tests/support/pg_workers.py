"""Worker processes of tests/stores/postgres/test_postgres_store_engine.py (run as a script).

``retrieve DSN TABLE NAME N R``: encode N memories, then R retrieves of the shared
query, printing the ids each retrieve returned as one JSON line per retrieve.
``batches DSN TABLE B``: encode_batch blocks of B memories forever (metadata marks
the block), printing each committed block's number (the parent kills it).
``scoped DSN TABLE NAME K B``: K ``encode_batch`` calls of B memories each through
the engine's ``scoped("team")`` view, printing each batch's number once committed.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta

from emotional_memory import EmotionalMemory
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.replay import TickClock
from emotional_memory.stores.postgres import PostgresStore


def _engine(dsn: str, table: str) -> EmotionalMemory:
    store = PostgresStore(dsn, table=table)
    clock = TickClock(datetime(2025, 3, 1, tzinfo=UTC), timedelta(seconds=7))
    return EmotionalMemory(store, HashingEmbedder(dim=32), clock=clock)


def batch_text(name: str, batch: int, item: int) -> str:
    """The text of a ``scoped`` worker's memory (words shared across workers)."""
    return f"{name} batch {batch} item {item} rain coffee {'harbour' * (item % 3)}"


def main(argv: list[str]) -> None:
    kind, dsn, table = argv[0], argv[1], argv[2]
    engine = _engine(dsn, table)
    if kind == "retrieve":
        name, n, r = argv[3], int(argv[4]), int(argv[5])
        for i in range(n):
            engine.encode(f"harbour storm memory {name} {i}")
            if i % 2:
                engine.retrieve("harbour storm memory", top_k=3)  # reads others' writes
        for _ in range(r):
            got = engine.retrieve("harbour storm memory", top_k=3)
            print(json.dumps([m.id for m in got]), flush=True)
    elif kind == "batches":
        size = int(argv[3])
        block = 0
        while True:
            engine.encode_batch(
                [f"block {block} item {j} rain coffee" for j in range(size)],
                metadata=[{"block": block}] * size,
            )
            print(block, flush=True)
            block += 1
    elif kind == "scoped":
        name, k, b = argv[3], int(argv[4]), int(argv[5])
        team = engine.scoped("team")
        for batch in range(k):
            team.encode_batch([batch_text(name, batch, j) for j in range(b)])
            print(batch, flush=True)
    else:
        raise SystemExit(f"unknown worker {kind!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
