"""A scoped retrieve among many scopes, next to a store holding only that scope.

The scoped-retrieve yardstick: 50,000 memories in 500 scopes of 100. The script builds, in one
process:

- ``shared``: one ``InMemoryStore`` (or ``SQLiteStore`` with ``--sqlite``) holding every
  scope's memories, each saved with its scope path;
- ``alone``: a store holding only the measured scope's 100 memories (the same
  memories);
- ``flat``: the shared memories saved without scopes (what an unscoped store of the
  same size costs, to check that an unscoped retrieve is not slower than before);

then times, interleaved round-robin (median of ``--repeats``):

- ``scoped``: ``engine.scoped(scope).retrieve(q, top_k)`` on the shared store;
- ``alone``: ``engine.retrieve(q, top_k)`` on the store of the scope alone;
- ``scoped+where``: the scoped retrieve with a metadata filter (half the scope);
- ``root``: the unscoped ``retrieve`` on ``flat`` (every memory a candidate of the search);
- ``root+where``: the same with a filter on built-in fields (valence, retrieval count),
  which the in-memory rows evaluate column by column.

It prints the ratio ``scoped / alone`` (goal <= 2) and checks that the scoped view
answers exactly as the store of the scope alone.

With ``--qdrant`` (embedded local mode) or ``--chroma`` (in-process client) it times
the vector-database stores, whose views confine in the database's filter, and adds
``generic``: the same scoped retrieve through the generic filtered path (the store
behind a plain wrapper without ``selected``: ``list_all`` and a filter per operation),
the cost the native path replaces, and ``root-before``: the unscoped retrieve on
``flat`` through that generic path (how an unscoped store was served before).

Timings on a shared 2-core machine are noisy: compare ratios of one run, never absolute times.

Usage:
    python benchmarks/scoped_retrieve.py [--scopes 500] [--per-scope 100] [--dim 384]
        [--top-k 5] [--repeats 40] [--sqlite | --qdrant | --chroma]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from retrieve_latency import RandomEmbedder, random_memories
from tqdm import tqdm

from emotional_memory import EmotionalMemory
from emotional_memory.interfaces import store_transaction
from emotional_memory.models import Memory
from emotional_memory.stores import InMemoryStore, SQLiteStore

NOW = datetime(2026, 1, 2, tzinfo=UTC)
# A filter on built-in fields, evaluated over every row of the flat store.
BUILTIN_WHERE = {"$or": [{"valence": {"$gt": 0.2}}, {"retrieval_count": {"$gte": 1}}]}


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median seconds of each function, timed round-robin (fair under noisy load)."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def fill(store: Any, memories: list[Memory]) -> None:
    """Save ``memories`` in one transaction (with a progress bar)."""
    with store_transaction(store):
        for m in tqdm(memories, desc=f"fill {type(store).__name__}", leave=False):
            store.save(m)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scopes", type=int, default=500)
    parser.add_argument("--per-scope", type=int, default=100)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=40)
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--sqlite", action="store_true", help="SQLiteStore instead")
    kind.add_argument("--qdrant", action="store_true", help="QdrantStore (local mode)")
    kind.add_argument("--chroma", action="store_true", help="ChromaStore (in process)")
    args = parser.parse_args(argv)
    for name in ("scopes", "per_scope", "dim", "top_k", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    n = args.scopes * args.per_scope
    memories, _ = random_memories(n, args.dim)
    scoped = [
        m.model_copy(update={
            "scope": (f"user{i % args.scopes}",),
            "metadata": {"half": (i // args.scopes) % 2},
        })
        for i, m in enumerate(memories)
    ]
    target = (f"user{7 % args.scopes}",)  # user7 at the default 500 scopes
    own = [m for m in scoped if m.scope == target]
    assert len(own) == args.per_scope, (target, len(own))
    alone_memories = [m.model_copy(update={"scope": ()}) for m in own]
    tmp = Path(tempfile.mkdtemp())

    def new_store(name: str) -> Any:
        if args.qdrant:
            from emotional_memory.stores.qdrant import QdrantStore

            return QdrantStore()
        if args.chroma:
            from emotional_memory.stores.chroma import ChromaStore

            return ChromaStore(collection_name=f"{name}{uuid.uuid4().hex}")
        return SQLiteStore(tmp / f"{name}.db") if args.sqlite else InMemoryStore()

    shared_store, alone_store, flat_store = new_store("s"), new_store("a"), new_store("f")
    fill(shared_store, scoped)
    fill(alone_store, alone_memories)
    fill(flat_store, memories)
    embedder = RandomEmbedder(args.dim)
    clock = lambda: NOW  # noqa: E731  (side effects must not move the clock)
    shared = EmotionalMemory(shared_store, embedder, clock=clock)
    view = shared.scoped(*target)
    alone = EmotionalMemory(alone_store, embedder, clock=clock)
    flat = EmotionalMemory(flat_store, embedder, clock=clock)
    queries = [f"query {i}" for i in range(8)]
    for q in queries:  # exactness first (ids are equal: the same memories)
        got = [(m.id, m.tag.retrieval_count) for m in view.retrieve(q, args.top_k)]
        want = [(m.id, m.tag.retrieval_count) for m in alone.retrieve(q, args.top_k)]
        assert got == want, (q, got, want)
    counter = iter(range(10**9))

    def query() -> str:
        return queries[next(counter) % len(queries)]

    fns = {
        "scoped": lambda: view.retrieve(query(), args.top_k),
        "alone": lambda: alone.retrieve(query(), args.top_k),
        "scoped+where": lambda: view.retrieve(query(), args.top_k, where={"half": 1}),
        "root": lambda: flat.retrieve(query(), args.top_k),
        "root+where": lambda: flat.retrieve(query(), args.top_k, where=BUILTIN_WHERE),
    }
    vdb = args.qdrant or args.chroma
    if vdb:  # the generic path over the same store, for comparison
        generic = EmotionalMemory(_Plain(shared_store), embedder, clock=clock).scoped(*target)
        for q in queries[:2]:
            assert [m.id for m in generic.retrieve(q, args.top_k)] == [
                m.id for m in view.retrieve(q, args.top_k)
            ]
        fns["generic"] = lambda: generic.retrieve(query(), args.top_k)
        # the root over the generic path: how an unscoped store was served before
        before = EmotionalMemory(_Plain(flat_store), embedder, clock=clock)
        fns["root-before"] = lambda: before.retrieve(query(), args.top_k)
    times = interleaved(fns, args.repeats)
    kind = type(shared_store).__name__
    print(f"{kind}: {n:,} memories in {args.scopes} scopes of {args.per_scope}, "
          f"D={args.dim}, top_k={args.top_k}, median of {args.repeats}")
    for name, seconds in times.items():
        print(f"  {name:>13}: {seconds * 1e3:8.3f} ms")
    print(f"  scoped / alone       = {times['scoped'] / times['alone']:.2f}x  (goal <= 2)")
    print(f"  scoped+where / alone = {times['scoped+where'] / times['alone']:.2f}x")
    print(f"  root+where / root    = {times['root+where'] / times['root']:.2f}x"
          "  (built-in fields, every row)")
    print(f"  root ({n:,} unscoped) / alone = {times['root'] / times['alone']:.2f}x")
    if vdb:
        print(f"  generic (list_all + filter) / scoped = "
              f"{times['generic'] / times['scoped']:.2f}x")
        print(f"  root / root-before (generic path) = "
              f"{times['root'] / times['root-before']:.2f}x")


class _Plain:
    """A store behind the bare protocol (no ``selected``): the generic path."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def save(self, memory: Memory) -> None:
        self.store.save(memory)

    def get(self, memory_id: str) -> Memory | None:
        return self.store.get(memory_id)  # type: ignore[no-any-return]

    def update(self, memory: Memory) -> None:
        self.store.update(memory)

    def delete(self, memory_id: str) -> bool:
        return self.store.delete(memory_id)  # type: ignore[no-any-return]

    def list_all(self) -> list[Memory]:
        return self.store.list_all()  # type: ignore[no-any-return]

    def search_by_embedding(self, embedding: Any, top_k: int) -> list[Memory]:
        return self.store.search_by_embedding(embedding, top_k)  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return len(self.store)


if __name__ == "__main__":
    main()
