"""Half-precision embedding storage: resident bytes and identical top-5 sets.

Fills one ``InMemoryStore`` per ``embedding_dtype`` with the same random bank (N
random Gaussian float32 embeddings, D 384) and reports, in the same process:

- embedding bytes per memory (``store.embedding_nbytes()``; capacity rows included)
  and the ratio to the float32 default;
- the share of random queries whose ``search_by_embedding(q, 5)`` set equals the
  float64 store's (half precision stores rounded unit rows, so its answer is the exact
  search over the rounded embeddings; float32 is lossless, so 100% is expected);
- the same share for the six-signal ``score_batch`` with the bank's embeddings cast to
  float16 / bfloat16 vs float32 (random affect columns too), and for the bare
  semantic-only ``top_k(Q @ E.T)``;
- median search latency per mode next to the bare jitted ``lax.top_k(E @ q)`` over the
  float32 matrix.

Usage:
    python benchmarks/half_precision.py [--n 100000] [--dim 384] [--queries 400]
        [--repeats 15] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import UTC, datetime
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from _args import positive_int
from batch_throughput import agreement, random_bank, random_queries

from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.decay import DecayConfig
from emotional_memory.kernel.chunked_topk import DEFAULT_CHUNK_SIZE
from emotional_memory.models import Memory, make_emotional_tag
from emotional_memory.mood import MoodField
from emotional_memory.retrieval import RetrievalConfig
from emotional_memory.scoring_config import params_from_config
from emotional_memory.stores import InMemoryStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MODES = ("float64", "float32", "float16", "bfloat16")


def fill(mode: str, bank: np.ndarray) -> InMemoryStore:
    tag = make_emotional_tag(
        CoreAffect(valence=0.0, arousal=0.5), AffectiveMomentum(),
        MoodField(valence=0.0, arousal=0.3, dominance=0.5, inertia=0.5, timestamp=T0),
        0.5, now=T0,
    )
    store = InMemoryStore(embedding_dtype=mode)  # type: ignore[arg-type]
    with store.transaction():
        for i, row in enumerate(bank.tolist()):
            store.save(Memory(id=f"m{i}", content="", embedding=row, tag=tag))
    return store


def share_identical(a: list[list[str]], b: list[list[str]]) -> float:
    return float(np.mean([set(x) == set(y) for x, y in zip(a, b, strict=True)]))


def kernel_agreement(bank: np.ndarray, queries: np.ndarray) -> dict[str, float]:
    """Identical top-5 shares of score_batch (six signals, random affect columns) and
    of the bare product, with ``bank`` cast to float16 / bfloat16 (the measurement of
    ``batch_throughput.py --agreement`` on this bank and these queries)."""
    n, dim = bank.shape
    cols = eqx.tree_at(lambda c: c.embedding, random_bank(n, dim), bank)
    feats = eqx.tree_at(
        lambda f: f.embedding, random_queries(queries.shape[0], dim), queries.astype(np.float32)
    )
    params = params_from_config(RetrievalConfig(), DecayConfig()).astype(jnp.float32)
    return agreement(params, feats, cols, DEFAULT_CHUNK_SIZE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=positive_int, default=100_000)
    parser.add_argument("--dim", type=positive_int, default=384)
    parser.add_argument("--queries", type=positive_int, default=400)
    parser.add_argument("--repeats", type=positive_int, default=15)
    parser.add_argument("--json", type=str, default=None)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    bank = rng.standard_normal((args.n, args.dim)).astype(np.float32)
    queries = rng.standard_normal((args.queries, args.dim)).astype(np.float32)
    qlists = queries.astype(np.float64).tolist()

    bare = jax.jit(lambda e, x: jax.lax.top_k(e @ x, 5))
    bank_j = jnp.asarray(bank)
    report: dict[str, Any] = {"n": args.n, "dim": args.dim, "queries": args.queries,
                              "modes": {}}
    answers: dict[str, list[list[str]]] = {}
    for mode in MODES:
        start = time.perf_counter()
        store = fill(mode, bank)
        filled = time.perf_counter() - start
        answers[mode] = [[m.id for m in store.search_by_embedding(q, 5)] for q in qlists]
        times: dict[str, list[float]] = {"search": [], "bare": []}
        for r in range(args.repeats):
            q, qj = qlists[r], jnp.asarray(queries[r])
            jax.block_until_ready(bare(bank_j, qj))
            t = time.perf_counter()
            store.search_by_embedding(q, 5)
            times["search"].append(time.perf_counter() - t)
            t = time.perf_counter()
            jax.block_until_ready(bare(bank_j, qj))
            times["bare"].append(time.perf_counter() - t)
        med = {k: statistics.median(v) for k, v in times.items()}
        report["modes"][mode] = {
            "embedding_bytes_per_memory": store.embedding_nbytes() / args.n,
            "fill_seconds": filled,
            "search_ms": med["search"] * 1e3,
            "bare_ms": med["bare"] * 1e3,
        }
        del store
    for mode in MODES:
        entry = report["modes"][mode]
        entry["bytes_vs_float32"] = (
            entry["embedding_bytes_per_memory"]
            / report["modes"]["float32"]["embedding_bytes_per_memory"]
        )
        entry["search_top5_identical_vs_float64"] = share_identical(
            answers[mode], answers["float64"]
        )
    report["score_batch_top5_identical_vs_float32"] = kernel_agreement(bank, queries)

    print(f"N={args.n} D={args.dim}, {args.queries} random queries (random Gaussian bank)")
    print(f"{'mode':>9} {'emb B/mem':>10} {'vs f32':>7} {'top-5 same':>11} "
          f"{'search ms':>10} {'bare ms':>8} {'ratio':>6}")
    for mode, e in report["modes"].items():
        print(f"{mode:>9} {e['embedding_bytes_per_memory']:>10.0f} "
              f"{e['bytes_vs_float32']:>7.2f} {e['search_top5_identical_vs_float64']:>11.1%} "
              f"{e['search_ms']:>10.2f} {e['bare_ms']:>8.2f} "
              f"{e['search_ms'] / e['bare_ms']:>6.2f}")
    agree = report["score_batch_top5_identical_vs_float32"]
    print("score_batch identical top-5 vs float32 embeddings: " + ", ".join(
        f"{k} {v:.1%}" for k, v in agree.items()))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)


if __name__ == "__main__":
    main()
