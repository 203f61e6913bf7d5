"""``retrieve`` of this library next to the original ``emotional_memory`` 0.18.1.

Part 1 (target: >= 2.2x faster than the original): the same script body runs in two
interpreters, this library's (``src/``) and the original's (a separate venv,
``--original-python``, default ``/work/venv-orig/bin/python``; install it there with
``pip install emotional-memory==0.18.1``). Each encodes the same 100 texts with the
same deterministic embedder (random unit vectors keyed by the text), so the stores
hold the same embeddings, then times ``retrieve(query, top_k=5)`` over the same
queries. Both runs include the retrieval side effects (reconsolidation, Hebbian
links), as a user sees them.

The two interpreters stay up and take turns: a round runs ``--burst`` retrieves in
one, then in the other (then in the others asked for, ``--before-src`` and
``--sync-dispatch``), so load on a shared machine falls on both alike instead of on
whichever ran in a busy minute. Each side's time is the median per call over all its
rounds; the ratio is also given per round (median and quartiles over rounds).
``--runs`` repeats the whole comparison with fresh interpreters (the best run of each
side is printed too).

Part 2 (target: <= 1.3x): ``retrieve`` at N = 100,000 next to a bare jitted
``lax.top_k(E @ q)`` on the same float32 matrix, timed interleaved in one process by
:func:`retrieve_latency.bench_size` (``--large 0`` skips it).

``--sync-dispatch`` also times this library with JAX's CPU async dispatch off (a
process-wide JAX setting: the compiled plan then runs on the calling thread, with no
hand-off to JAX's dispatch thread and back).

Usage:
    python benchmarks/retrieve_vs_original.py [--memories 100] [--rounds 40]
        [--burst 25] [--large 100000] [--original-python PATH] [--runs 1]
        [--sync-dispatch] [--before-src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import hashlib, json, os, statistics, sys, time
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
print(json.dumps({{"ready": len(engine.list_all())}}), flush=True)
done = 0
for line in sys.stdin:  # "K": run K retrieves and report their times
    k = int(line)
    if k <= 0:
        break
    times = []
    for _ in range(k):
        q = queries[done % len(queries)]
        done += 1
        t = time.perf_counter()
        engine.retrieve(q, top_k=5)
        times.append(time.perf_counter() - t)
    print(json.dumps(times), flush=True)
"""


class Child:
    """One interpreter holding an engine of ``n`` memories, timing retrieves on demand."""

    def __init__(
        self, python: str, n: int, ours: bool, src: Path | None = None,
        sync_dispatch: bool = False,
    ) -> None:
        env = dict(os.environ)
        env.pop("EM_BENCH_SYNC_DISPATCH", None)
        if ours:
            env["PYTHONPATH"] = str(src if src is not None else ROOT / "src")
            if sync_dispatch:
                env["EM_BENCH_SYNC_DISPATCH"] = "1"
        else:
            env.pop("PYTHONPATH", None)
        self.proc = subprocess.Popen(
            [python, "-c", CHILD.format(n=n)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=env, cwd="/" if not ours else str(ROOT),
        )
        ready = json.loads(self._line())
        self.memories = int(ready["ready"])
        self.times: list[float] = []

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"benchmark child exited (code {self.proc.wait()})")
        return line

    def burst(self, k: int) -> float:
        """Run ``k`` retrieves; keep their times and return their median (ms)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{k}\n")
        self.proc.stdin.flush()
        times = [t * 1e3 for t in json.loads(self._line())]
        self.times += times
        return statistics.median(times)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("0\n")
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def compare(args: argparse.Namespace) -> dict[str, Any]:
    """One comparison: the interpreters take turns for ``args.rounds`` rounds.

    Returns:
        ``{"median": {side: ms}, "round_ratios": [original / ours per round]}``.
    """
    sides = {"ours": Child(sys.executable, args.memories, True)}
    sides["original"] = Child(args.original_python, args.memories, False)
    if args.before_src is not None:
        sides["before"] = Child(sys.executable, args.memories, True, args.before_src)
    if args.sync_dispatch:
        sides["sync"] = Child(sys.executable, args.memories, True, sync_dispatch=True)
    ratios = []
    try:
        for _ in range(args.rounds):
            medians = {name: child.burst(args.burst) for name, child in sides.items()}
            ratios.append(medians["original"] / medians["ours"])
    finally:
        for child in sides.values():
            child.close()
    return {
        "median": {name: statistics.median(c.times) for name, c in sides.items()},
        "p10": {name: statistics.quantiles(c.times, n=10)[0] for name, c in sides.items()},
        "round_ratios": ratios,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=40, help="turns of each side")
    parser.add_argument("--burst", type=int, default=25, help="retrieves per turn")
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--original-python", default="/work/venv-orig/bin/python")
    parser.add_argument(
        "--before-src", type=Path, default=None,
        help="also time this library from another src/ folder (e.g. an earlier commit "
        "exported with `git archive REV src | tar -x -C DIR`), in the same turns",
    )
    parser.add_argument("--runs", type=int, default=1, help="comparisons, fresh interpreters")
    parser.add_argument(
        "--sync-dispatch", action="store_true",
        help="also time this library with JAX's CPU async dispatch off "
        "(jax.config.update('jax_cpu_enable_async_dispatch', False), a process-wide "
        "JAX setting a latency-bound service may choose; not a library default)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 2:  # the per-turn quartiles need two turns
        parser.error("--rounds must be at least 2")
    if min(args.memories, args.burst, args.runs) < 1 or args.large < 0:
        parser.error("--memories, --burst and --runs must be at least 1, --large at least 0")
    if not os.access(args.original_python, os.X_OK):
        parser.error(f"--original-python {args.original_python}: no such executable "
                     "(a venv with pip install emotional-memory==0.18.1)")
    if args.before_src is not None and not args.before_src.is_dir():
        parser.error(f"--before-src {args.before_src}: no such folder")

    results = [compare(args) for _ in range(args.runs)]
    print(f"retrieve, {args.memories} memories, top_k 5: median per call over "
          f"{args.rounds} alternating turns of {args.burst} calls")
    for i, res in enumerate(results):
        med = res["median"]
        q = statistics.quantiles(res["round_ratios"], n=4)
        line = (f"  run {i + 1}: this library {med['ours']:.3f} ms, original "
                f"{med['original']:.3f} ms, speed-up {med['original'] / med['ours']:.2f}x "
                f"(per turn: median {q[1]:.2f}x, quartiles {q[0]:.2f}-{q[2]:.2f}x)")
        p10 = res["p10"]
        line += (f"; fastest tenth: {p10['ours']:.3f} vs {p10['original']:.3f} ms "
                 f"({p10['original'] / p10['ours']:.2f}x)")
        if "before" in med:
            line += (f"; before {med['before']:.3f} ms ({med['before'] / med['ours']:.2f}x, "
                     f"fastest tenth {p10['before'] / p10['ours']:.2f}x)")
        if "sync" in med:
            line += f"; async dispatch off {med['sync']:.3f} ms"
        print(line)
    mine = min(r["median"]["ours"] for r in results)
    theirs = min(r["median"]["original"] for r in results)
    print(f"  best run of each: this library {mine:.3f} ms, original {theirs:.3f} ms, "
          f"speed-up {theirs / mine:.2f}x   (target >= 2.2x)")

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
