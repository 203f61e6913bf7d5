"""``retrieve`` of this library next to the original ``emotional_memory`` 0.18.1.

Part 1 (target: >= 2x faster than the original): the same script body runs in two
fresh interpreters, this library's (``src/``) and the original's (a separate venv,
``--original-python``, default ``/work/venv-orig/bin/python``; install it there with
``pip install emotional-memory==0.18.1``). Each encodes the same 100 texts with the
same deterministic embedder (random unit vectors keyed by the text), so the stores
hold the same embeddings, then times ``retrieve(query, top_k=5)`` over the same
queries, interleaving nothing else; the median per call is reported for both and
their ratio. Both runs include the retrieval side effects (reconsolidation, Hebbian
links), as a user sees them.

Part 2 (target: <= 1.3x): ``retrieve`` at N = 100,000 next to a bare jitted
``lax.top_k(E @ q)`` on the same float32 matrix, timed interleaved in one process by
:func:`retrieve_latency.bench_size` (``--large 0`` skips it).

``--sync-dispatch`` also times this library with JAX's CPU async dispatch off (a
process-wide JAX setting: the compiled plan then runs on the calling thread, with no
hand-off to JAX's dispatch thread and back).

Usage:
    python benchmarks/retrieve_vs_original.py [--memories 100] [--repeats 200]
        [--large 100000] [--original-python PATH] [--runs 2] [--sync-dispatch]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import hashlib, json, os, statistics, time
if os.environ.get("EM_BENCH_SYNC_DISPATCH"):  # JAX's own switch, before any computation
    import jax
    jax.config.update("jax_cpu_enable_async_dispatch", False)
import numpy as np
from emotional_memory import EmotionalMemory, InMemoryStore
from emotional_memory.affect import CoreAffect

DIM = 384
class RandomEmbedder:
    def _vector(self, text):
        seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
        v = np.random.default_rng(seed).standard_normal(DIM)
        return (v / np.linalg.norm(v)).tolist()
    def embed(self, text):
        return self._vector(text)
    def embed_batch(self, texts):
        return [self._vector(t) for t in texts]

WORDS = ["server", "crashed", "demo", "coffee", "friend", "rain", "launch", "budget",
         "party", "furious", "happy", "calm", "sad", "review", "garden", "night"]
rng = np.random.default_rng(0)
engine = EmotionalMemory(InMemoryStore(), RandomEmbedder())
for i in range({n}):
    if i % 10 == 0:
        engine.set_affect(CoreAffect(valence=float(rng.uniform(-1, 1)),
                                     arousal=float(rng.uniform(0, 1))))
    engine.encode(" ".join(WORDS[j] for j in rng.integers(0, len(WORDS), 5)) + f" {{i}}")
queries = [" ".join(WORDS[j] for j in rng.integers(0, len(WORDS), 3)) for _ in range(50)]
for q in queries[:10]:
    engine.retrieve(q, top_k=5)  # warm up (compiles)
times = []
for r in range({repeats}):
    q = queries[r % len(queries)]
    t = time.perf_counter()
    engine.retrieve(q, top_k=5)
    times.append(time.perf_counter() - t)
print(json.dumps({{"median_ms": statistics.median(times) * 1e3, "n": len(engine.list_all())}}))
"""


def child(
    python: str, n: int, repeats: int, ours: bool, src: Path | None = None,
    sync_dispatch: bool = False,
) -> dict[str, float]:
    env = dict(os.environ)
    env.pop("EM_BENCH_SYNC_DISPATCH", None)
    if ours:
        env["PYTHONPATH"] = str(src if src is not None else ROOT / "src")
        if sync_dispatch:
            env["EM_BENCH_SYNC_DISPATCH"] = "1"
    else:
        env.pop("PYTHONPATH", None)
    out = subprocess.run(
        [python, "-c", CHILD.format(n=n, repeats=repeats)], capture_output=True, text=True,
        env=env, check=True, cwd="/" if not ours else str(ROOT),
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--original-python", default="/work/venv-orig/bin/python")
    parser.add_argument(
        "--before-src", type=Path, default=None,
        help="also time this library from another src/ folder (e.g. an earlier commit "
        "exported with `git archive REV src | tar -x -C DIR`), alternated with the others",
    )
    parser.add_argument("--runs", type=int, default=2, help="alternated runs of each")
    parser.add_argument(
        "--sync-dispatch", action="store_true",
        help="also time this library with JAX's CPU async dispatch off "
        "(jax.config.update('jax_cpu_enable_async_dispatch', False), a process-wide "
        "JAX setting a latency-bound service may choose; not a library default)",
    )
    args = parser.parse_args()

    # alternate the libraries so background load hits them alike
    ours: list[float] = []
    orig: list[float] = []
    before: list[float] = []
    synced: list[float] = []
    for _ in range(args.runs):
        ours.append(child(sys.executable, args.memories, args.repeats, True)["median_ms"])
        if args.sync_dispatch:
            synced.append(child(
                sys.executable, args.memories, args.repeats, True, sync_dispatch=True
            )["median_ms"])
        orig.append(child(args.original_python, args.memories, args.repeats, False)["median_ms"])
        if args.before_src is not None:
            before.append(child(
                sys.executable, args.memories, args.repeats, True, args.before_src
            )["median_ms"])
    mine, theirs = min(ours), min(orig)
    print(f"retrieve, {args.memories} memories, top_k 5 "
          f"(median per call, best of {args.runs} runs)")
    print(f"  this library        {mine:8.3f} ms")
    if before:
        print(f"  before ({args.before_src})  {min(before):8.3f} ms   "
              f"(speed-up over it {min(before) / mine:.2f}x; original / before "
              f"{theirs / min(before):.2f}x)")
    print(f"  original 0.18.1     {theirs:8.3f} ms")
    print(f"  speed-up            {theirs / mine:8.2f}x   (target >= 2x)")
    if synced:
        print(f"  this library, JAX CPU async dispatch off  {min(synced):8.3f} ms   "
              f"(speed-up {theirs / min(synced):.2f}x)")

    if args.large:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from retrieve_latency import bench_size

        res = bench_size(args.large, 384, 5, 30, "float32")
        ms = res["ms"]
        print(f"retrieve at N = {args.large:,} vs bare jitted lax.top_k(E @ q)")
        print(f"  retrieve            {ms['retrieve']:8.3f} ms")
        print(f"  bare top_k(E @ q)   {ms['bare']:8.3f} ms")
        print(f"  ratio               {res['ratio_retrieve_vs_bare']:8.2f}x   (target <= 1.3x)")


if __name__ == "__main__":
    main()
