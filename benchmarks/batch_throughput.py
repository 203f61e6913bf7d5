"""Batch scoring throughput: ``score_batch`` next to a bare ``Q @ E.T`` + ``lax.top_k``.

A random bank of N memories (D-dimensional float32 embeddings, random tags) and Q
queries live on the device; the script times, interleaved in the same process:

- ``bare``: jitted ``lax.top_k(Q @ E.T, k)`` (cosine-free, signal-free: the limit);
- ``score_batch``: the full pass-1 score (six signals, per-query mood weights) with
  the chunked top-k, for each ``--chunk`` size;

and prints throughput (queries/s) and score_batch as a percentage of the bare
throughput (target: >= 60%). ``--agreement`` also measures how often the top-5 set
of each query stays identical when the bank's embeddings are stored in float16 or
bfloat16 instead of float32. ``--sharded`` adds the sharded scorer over all devices.

Usage:
    python benchmarks/batch_throughput.py [--n 100000] [--dim 384] [--q 256] [--k 10]
        [--chunk 16384 65536] [--repeats 5] [--agreement] [--sharded] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from _args import positive_int

from emotional_memory.decay import DecayConfig
from emotional_memory.kernel import MemoryColumns, QueryFeatures
from emotional_memory.kernel.chunked_topk import score_batch
from emotional_memory.retrieval import RetrievalConfig
from emotional_memory.scoring_config import params_from_config


def random_bank(n: int, dim: int, seed: int = 0) -> MemoryColumns:
    rng = np.random.default_rng(seed)
    f32 = np.float32
    affect = np.column_stack([rng.uniform(-1, 1, n), rng.uniform(0, 1, n), rng.uniform(0, 1, n)])
    mood = np.column_stack([rng.uniform(-1, 1, n), rng.uniform(0, 1, n), rng.uniform(0, 1, n)])
    return MemoryColumns(
        embedding=rng.standard_normal((n, dim)).astype(f32),
        affect=affect.astype(f32), mood=mood.astype(f32),
        velocity=rng.normal(0, 0.1, (n, 3)).astype(f32),
        age_seconds=rng.uniform(0, 30 * 86400, n).astype(f32),
        consolidation=rng.uniform(0.1, 1, n).astype(f32),
        retrieval_count=rng.integers(0, 5, n).astype(f32),
        activation=np.zeros(n, f32), valid=np.ones(n, bool),
    )


def random_queries(q: int, dim: int, seed: int = 1) -> QueryFeatures:
    rng = np.random.default_rng(seed)
    f32 = np.float32
    return QueryFeatures(
        embedding=rng.standard_normal((q, dim)).astype(f32),
        affect=rng.uniform(0, 1, (q, 3)).astype(f32),
        mood=np.column_stack([rng.uniform(-1, 1, q), rng.uniform(0, 1, (q, 2))]).astype(f32),
        velocity=rng.normal(0, 0.1, (q, 3)).astype(f32),
    )


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median seconds per function, timed round-robin after one warm-up call each."""
    for fn in fns.values():
        jax.block_until_ready(fn())
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            jax.block_until_ready(fn())
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def with_embedding(cols: MemoryColumns, embedding: Any) -> MemoryColumns:
    return MemoryColumns(
        embedding=embedding, affect=cols.affect, mood=cols.mood, velocity=cols.velocity,
        age_seconds=cols.age_seconds, consolidation=cols.consolidation,
        retrieval_count=cols.retrieval_count, activation=cols.activation, valid=cols.valid,
    )


def agreement(params: Any, queries: Any, cols: MemoryColumns, chunk: int) -> dict[str, float]:
    """Share of queries whose top-5 set is unchanged with half-precision embeddings."""
    base = np.asarray(score_batch(params, queries, cols, 5, chunk_size=chunk)[0])
    bare = jax.jit(lambda e, q: jax.lax.top_k(q @ e.astype(jnp.float32).T, 5)[1])
    bare_base = np.asarray(bare(cols.embedding, queries.embedding))
    out = {}
    for name, dtype in (("float16", jnp.float16), ("bfloat16", jnp.bfloat16)):
        half = jnp.asarray(cols.embedding, dtype)
        got = np.asarray(score_batch(params, queries, with_embedding(cols, half), 5,
                                     chunk_size=chunk)[0])
        out[name] = float(np.mean([set(a) == set(b) for a, b in zip(base, got, strict=True)]))
        got_bare = np.asarray(bare(half, queries.embedding))
        out[name + "_semantic_only"] = float(
            np.mean([set(a) == set(b) for a, b in zip(bare_base, got_bare, strict=True)])
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=positive_int, default=100_000)
    parser.add_argument("--dim", type=positive_int, default=384)
    parser.add_argument("--q", type=positive_int, default=256)
    parser.add_argument("--k", type=positive_int, default=10)
    parser.add_argument("--chunk", type=positive_int, nargs="+", default=[16384, 65536])
    parser.add_argument("--repeats", type=positive_int, default=5)
    parser.add_argument("--agreement", action="store_true")
    parser.add_argument("--sharded", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.k > args.n:
        parser.error(f"--k {args.k} exceeds the bank's --n {args.n}")

    cols = jax.device_put(random_bank(args.n, args.dim))
    queries = jax.device_put(random_queries(args.q, args.dim))
    params = jax.device_put(
        params_from_config(RetrievalConfig(), DecayConfig()).astype(jnp.float32)
    )
    k = args.k
    bare = jax.jit(lambda e, q: jax.lax.top_k(q @ e.T, k))
    fns: dict[str, Callable[[], Any]] = {"bare": lambda: bare(cols.embedding, queries.embedding)}
    def scorer(chunk: int) -> Callable[[], Any]:
        return lambda: score_batch(params, queries, cols, k, chunk_size=chunk)

    for chunk in args.chunk:
        fns[f"score_batch chunk={chunk}"] = scorer(chunk)
    if args.sharded:
        from emotional_memory.kernel.sharding import (
            memory_mesh,
            score_batch_sharded,
            shard_columns,
        )

        mesh = memory_mesh()
        placed = shard_columns(cols, mesh)
        fns[f"sharded x{len(jax.devices())} chunk={args.chunk[0]}"] = (
            lambda: score_batch_sharded(params, queries, placed, k, mesh=mesh,
                                        chunk_size=args.chunk[0])
        )
    medians = interleaved(fns, args.repeats)
    base = medians["bare"]
    print(f"N {args.n}  D {args.dim}  Q {args.q}  k {args.k}  devices {len(jax.devices())}")
    print(f"{'':32} {'ms':>9} {'queries/s':>11} {'% of bare':>10}")
    rows = {}
    for name, seconds in medians.items():
        pct = 100.0 * base / seconds
        print(f"{name:32} {seconds * 1e3:9.1f} {args.q / seconds:11.0f} {pct:9.1f}%")
        rows[name] = {"ms": seconds * 1e3, "queries_per_s": args.q / seconds,
                      "percent_of_bare": pct}
    report: dict[str, Any] = {"n": args.n, "dim": args.dim, "q": args.q, "k": args.k,
                              "timings": rows}
    if args.agreement:
        agree = agreement(params, queries, cols, args.chunk[0])
        report["top5_agreement"] = agree
        print("identical top-5 sets vs float32 embeddings: " + ", ".join(
            f"{name} {value:.1%}" for name, value in agree.items()))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
