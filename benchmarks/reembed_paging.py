"""Re-embedding a whole store: paging by offset (``list_page``) against by cursor
(``list_after``), in one process on one store.

Fills an SQLite file (and/or a PostgreSQL table of a throwaway server) with ``--n``
memories (hashing embedder, ``--dim``), times a walk over every page (reads only) by
offset and by cursor, then re-embeds the store with ``reembed_store`` four times, to
four other embedders: by offset through a subclass of the store that withdraws
``list_after`` (as before keyset paging), by cursor through the store itself. Prints
the seconds of each (means) and the ratios offset / cursor.

Usage:
    python benchmarks/reembed_paging.py [--n 20000] [--batch 256] [--dim 32]
        [--stores sqlite,postgres] [--walk-only]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from emotional_memory.embedders import HashingEmbedder
from emotional_memory.reembed import reembed_store
from emotional_memory.stores.postgres import PostgresStore
from emotional_memory.stores.sqlite import SQLiteStore
from support.memories import basic_memory


def _by_offset(cls: type) -> type:
    """A subclass of store class ``cls`` without keyset paging (``list_page`` only)."""
    sub = type(f"{cls.__name__}ByOffset", (cls,), {})
    sub._withdrawn_capabilities = frozenset({"KeysetPagingStore"})  # type: ignore[attr-defined]
    return sub


def _fill(store: Any, n: int, embedder: HashingEmbedder) -> None:
    for first in range(0, n, 1000):
        texts = [f"memory {i} about the harbour" for i in range(first, min(n, first + 1000))]
        with store.transaction():
            for text, vector in zip(texts, embedder.embed_batch(texts), strict=True):
                store.save(basic_memory(text, vector))


def _time(store: Any, embedder: HashingEmbedder, batch: int) -> float:
    t0 = time.perf_counter()
    report = reembed_store(store, embedder, batch_size=batch, progress=False)
    elapsed = time.perf_counter() - t0
    assert report.reembedded == report.memories
    return elapsed


def _walk(store: Any, batch: int, by_offset: bool) -> float:
    """Seconds to read every page (no writes) by offset or by cursor."""
    t0 = time.perf_counter()
    if by_offset:
        offset = 0
        while page := store.list_page(offset, batch):
            offset += len(page)
    else:
        position = None
        while (got := store.list_after(position, batch))[0]:
            position = got[1]
    return time.perf_counter() - t0


def _compare(open_store: Any, n: int, batch: int, dim: int, walk_only: bool) -> dict[str, Any]:
    """Seconds to walk the pages and to re-embed, by offset and by cursor, and the
    ratios (offset / cursor). Runs in the order offset, cursor, cursor, offset (each
    re-embedding leaves dead row versions behind on PostgreSQL); the sums are compared."""
    embedders = [HashingEmbedder(dim=dim, seed=s) for s in range(5)]
    with open_store(None) as store:
        _fill(store, n, embedders[0])
        store.replace_setting("embedder", embedders[0].identity)
        walk = {"offset": 0.0, "cursor": 0.0}
        for way in ("offset", "cursor", "cursor", "offset"):
            walk[way] += _walk(store, batch, way == "offset")
    out = {"walk_offset_s": round(walk["offset"] / 2, 3),
           "walk_cursor_s": round(walk["cursor"] / 2, 3),
           "walk_ratio": round(walk["offset"] / walk["cursor"], 2)}
    if walk_only:
        return out
    spent = {"offset": 0.0, "cursor": 0.0}
    for way, embedder in zip(("offset", "cursor", "cursor", "offset"), embedders[1:],
                             strict=True):
        with open_store(_by_offset if way == "offset" else None) as store:
            spent[way] += _time(store, embedder, batch)
    return {**out, "reembed_offset_s": round(spent["offset"] / 2, 2),
            "reembed_cursor_s": round(spent["cursor"] / 2, 2),
            "reembed_ratio": round(spent["offset"] / spent["cursor"], 2)}


def run(n: int, batch: int, dim: int, stores: list[str], walk_only: bool = False
        ) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="em-reembed-"))
    out: dict[str, Any] = {"n": n, "batch": batch, "dim": dim}

    def sqlite(wrap: Any) -> Any:
        return (wrap(SQLiteStore) if wrap else SQLiteStore)(work / "m.db")

    if "sqlite" in stores:
        out["sqlite"] = _compare(sqlite, n, batch, dim, walk_only)
    if "postgres" in stores:
        from support import pg_server

        server = pg_server.start(Path(tempfile.mkdtemp(prefix="em-reembed-pg-")))
        try:
            dsn = server.create_database("reembed")

            def pg(wrap: Any) -> Any:
                return (wrap(PostgresStore) if wrap else PostgresStore)(dsn, table="bench")

            out["postgres"] = _compare(pg, n, batch, dim, walk_only)
        finally:
            server.stop()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--stores", default="sqlite",
                        help="comma-separated: sqlite, postgres")
    parser.add_argument("--walk-only", action="store_true", help="time the page walks only")
    args = parser.parse_args(argv)
    stores = args.stores.split(",")
    if args.n < 1 or args.batch < 1 or args.dim < 1:
        parser.error("--n, --batch and --dim must be at least 1")
    if not stores or not set(stores) <= {"sqlite", "postgres"}:
        parser.error("--stores: a comma-separated list of sqlite, postgres")
    print(json.dumps(run(args.n, args.batch, args.dim, stores, args.walk_only), indent=2))


if __name__ == "__main__":
    main()
