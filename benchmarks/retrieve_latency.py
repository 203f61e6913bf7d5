"""Latency of ``EmotionalMemory.retrieve`` next to a bare ``E @ q`` + ``lax.top_k``.

For each store size N the script fills an ``InMemoryStore`` with N random memories
(D-dimensional embeddings, random tags spread over 30 days), then times, in the same
process and interleaved:

- ``retrieve``: ``engine.retrieve(query, top_k)`` end to end (embedding the query,
  the candidate search over all N, the two-pass plan over ``top_k * 3`` candidates,
  and the side effects on the winners);
- ``bare``: a jitted ``lax.top_k(E @ q, top_k)`` over the same float32 matrix
  already on the device (the limit to measure against, DESIGN "Scale");
- ``bare numpy``: ``E @ q`` + ``argpartition`` in numpy, for reference;

and breaks the engine path down into its parts: ``embed`` (the embedder),
``search`` (``store.search_by_embedding``), ``plan`` (the rest of the engine's
ranking as ``retrieve`` runs it: weights, columns, the jitted passes and activation)
and ``after`` (reconsolidation, prediction, Hebbian links, store writes).

``--links L`` links every candidate of the benchmark queries to L random other
candidates of the same query (default 0: no links, so activation never spreads and
pass 2 equals pass 1; with links it spreads, as in an engine-built store where similar
memories are linked).

Usage:
    python benchmarks/retrieve_latency.py [--n 1000 10000 100000] [--million]
        [--dim 384] [--top-k 5] [--repeats 30] [--dtype float32] [--links 0]
        [--json OUT]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from _args import positive_int

from emotional_memory import EmotionalMemory
from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.interfaces import store_transaction
from emotional_memory.models import Memory, ResonanceLink, make_emotional_tag
from emotional_memory.mood import MoodField
from emotional_memory.stores import InMemoryStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class RandomEmbedder:
    """Deterministic random unit vectors keyed by the text (cheap, no model)."""

    def __init__(self, dim: int) -> None:
        self.dim = dim

    def _vector(self, text: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
        vec = np.random.default_rng(seed).standard_normal(self.dim)
        return vec / np.linalg.norm(vec)

    def embed(self, text: str) -> list[float]:
        return self._vector(text).tolist()

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed(t) for t in texts]


def random_memories(n: int, dim: int, seed: int = 0) -> tuple[list[Memory], np.ndarray]:
    """N memories with random unit embeddings and random tags; also the float32 matrix."""
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((n, dim))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    affect = rng.uniform(0, 1, (n, 3))
    affect[:, 0] = affect[:, 0] * 2 - 1
    velocity = rng.normal(0, 0.1, (n, 3))
    ages = rng.uniform(0, 30 * 86400, n)
    memories = []
    for i in range(n):
        v, a, d = affect[i].tolist()
        tag = make_emotional_tag(
            CoreAffect(valence=v, arousal=a, dominance=d),
            AffectiveMomentum(
                d_valence=velocity[i, 0], d_arousal=velocity[i, 1], d_dominance=velocity[i, 2]
            ),
            MoodField(valence=v * 0.5, arousal=a * 0.5, dominance=0.5, inertia=0.5, timestamp=T0),
            float(rng.uniform(0.1, 1.0)),
            now=T0 - timedelta(seconds=float(ages[i])),
        )
        memories.append(Memory.create(f"memory {i}", tag, embedding=emb[i].tolist()))
    return memories, emb.astype(np.float32)


def link_neighbourhoods(
    store: InMemoryStore, queries: list[list[float]], limit: int, links: int, seed: int = 0
) -> None:
    """Link each query's candidates to ``links`` random others of the same candidates.

    Random links across N memories almost never join two candidates of one query, so
    activation would never spread; engine-built links join similar memories, which
    are candidates together. Strengths are uniform in [0.3, 1].
    """
    rng = np.random.default_rng(seed)
    for query in queries:
        candidates = store.search_by_embedding(query, limit)
        ids = [m.id for m in candidates]
        for m in candidates:
            others = [i for i in ids if i != m.id]
            chosen = rng.choice(len(others), size=min(links, len(others)), replace=False)
            out = [
                ResonanceLink(source_id=m.id, target_id=others[int(j)],
                              strength=float(rng.uniform(0.3, 1.0)), link_type="semantic")
                for j in chosen
            ]
            current = store.get(m.id)
            assert current is not None
            store.update(current.model_copy(
                update={"tag": current.tag.model_copy(update={"resonance_links": out})}
            ))


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


def bench_size(
    n: int, dim: int, top_k: int, repeats: int, dtype: str, links: int = 0
) -> dict[str, Any]:
    t_build = time.perf_counter()
    memories, matrix = random_memories(n, dim)
    store = InMemoryStore(embedding_dtype=dtype)  # type: ignore[arg-type]
    with store_transaction(store):
        for m in memories:
            store.save(m)
    build_s = time.perf_counter() - t_build
    clock_state = [T0]

    def clock() -> datetime:
        clock_state[0] += timedelta(milliseconds=10)
        return clock_state[0]

    engine = EmotionalMemory(store, RandomEmbedder(dim), clock=clock)
    queries = [f"query {i}" for i in range(64)]
    counter = [0]

    def next_query() -> str:
        counter[0] += 1
        return queries[counter[0] % len(queries)]

    e_dev = jax.device_put(jnp.asarray(matrix))
    bare = jax.jit(lambda e, q: jax.lax.top_k(e @ q, top_k))
    q_vecs = [jnp.asarray(np.asarray(engine.embedder.embed(q), np.float32)) for q in queries]
    q_np = [np.asarray(q) for q in q_vecs]
    limit = top_k * engine.config.retrieval.candidate_multiplier
    emb_cache = {q: engine.embedder.embed(q) for q in queries}
    if links:
        link_neighbourhoods(store, list(emb_cache.values()), limit, links)

    def run_retrieve() -> None:
        engine.retrieve(next_query(), top_k)

    def run_bare() -> None:
        jax.block_until_ready(bare(e_dev, q_vecs[counter[0] % len(q_vecs)]))

    def run_numpy() -> None:
        scores = matrix @ q_np[counter[0] % len(q_np)]
        np.argpartition(-scores, top_k)[:top_k]

    def run_embed() -> None:
        engine.embedder.embed(next_query())

    def run_search() -> None:  # what retrieve asks the store: the candidates as columns
        store.candidate_bank(emb_cache[next_query()], limit, clock_state[0])

    # What retrieve runs: the array-level ranking (``_rank``); engines without it
    # (older versions, to compare against) build their full plan (``_plan``).
    rank = getattr(engine, "_rank", None)

    def ranking(query: str) -> tuple[list[str], datetime]:
        if rank is not None:
            r = rank(query, top_k, None)
            return r.winners(top_k), r.now
        plan, now = engine._plan(query, top_k, None)
        return [r.memory.id for r in plan.pass2[:top_k]], now

    def run_plan() -> None:
        ranking(next_query())

    first = ranking(queries[0])

    def run_after() -> None:
        engine._after_retrieval(first[0], first[1])

    medians = interleaved(
        {
            "retrieve": run_retrieve, "bare": run_bare, "embed": run_embed,
            "search": run_search, "plan_total": run_plan, "after": run_after,
        },
        repeats,
    )
    # Timed on its own: OpenBLAS worker threads keep spinning after a call and would
    # slow down whatever JAX program runs next on the same cores.
    medians.update(interleaved({"bare_numpy": run_numpy}, repeats))
    ms = {k: v * 1e3 for k, v in medians.items()}
    # plan_total = embed + search + the rest of the plan.
    ms["plan_rest"] = max(ms["plan_total"] - ms["embed"] - ms["search"], 0.0)
    return {
        "n": n, "dim": dim, "top_k": top_k, "dtype": dtype, "links": links,
        "build_seconds": build_s,
        "ms": ms, "ratio_retrieve_vs_bare": ms["retrieve"] / ms["bare"],
        "ratio_search_vs_bare": ms["search"] / ms["bare"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=positive_int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--million", action="store_true", help="also N = 1,000,000 (slow)")
    parser.add_argument("--dim", type=positive_int, default=384)
    parser.add_argument("--top-k", type=positive_int, default=5)
    parser.add_argument("--repeats", type=positive_int, default=30)
    parser.add_argument("--dtype", default="float32",
                        choices=["float64", "float32", "float16", "bfloat16"])
    parser.add_argument("--links", type=int, default=0,
                        help="links per candidate among each query's candidates (0: none)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.top_k > min(args.n):
        parser.error(f"--top-k {args.top_k} exceeds the smallest --n {min(args.n)}")
    if args.links < 0:
        parser.error("--links must be at least 0")
    sizes = list(args.n) + ([1_000_000] if args.million else [])
    rows = []
    header = (f"{'N':>9} {'retrieve':>9} {'bare':>7} {'ratio':>6} | {'embed':>6} "
              f"{'search':>7} {'plan':>6} {'after':>6} {'np bare':>8}  (ms, median)")
    print(f"dim {args.dim}  top_k {args.top_k}  store embedding_dtype {args.dtype}  "
          f"links/memory {args.links}")
    print(header)
    for n in sizes:
        r = bench_size(n, args.dim, args.top_k, args.repeats, args.dtype, args.links)
        ms = r["ms"]
        print(f"{n:>9} {ms['retrieve']:>9.2f} {ms['bare']:>7.2f} "
              f"{r['ratio_retrieve_vs_bare']:>6.2f} | {ms['embed']:>6.2f} {ms['search']:>7.2f} "
              f"{ms['plan_rest']:>6.2f} {ms['after']:>6.2f} {ms['bare_numpy']:>8.2f}",
              flush=True)
        rows.append(r)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
