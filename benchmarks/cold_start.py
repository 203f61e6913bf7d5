"""Cold start: ``import emotional_memory`` and the first ``retrieve`` of a fresh process.

Each measurement runs in a new interpreter (so nothing is compiled or imported yet)
with the compilation cache in a temporary directory:

- ``import``: ``import emotional_memory`` alone (lazy: no JAX, no pydantic) and
  ``from emotional_memory import EmotionalMemory`` (the engine and its dependencies);
- ``first retrieve, cold cache``: the first process, which compiles and writes the
  persistent compilation cache (what a user sees once);
- ``first retrieve, warm cache``: a second process after the first one ran (target
  <= 0.25 s);
- ``first retrieve, cache off``: ``EMOTIONAL_MEMORY_JAX_CACHE=0``, every process
  compiles (the baseline the cache is measured against);
- ``second retrieve``: the next retrieve of the same process, for scale.

Usage:
    python benchmarks/cold_start.py [--memories 100] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _args import positive_int

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import time
t0 = time.perf_counter()
import emotional_memory
t1 = time.perf_counter()
from emotional_memory import EmotionalMemory, InMemoryStore
from emotional_memory.embedders import HashingEmbedder
t2 = time.perf_counter()
engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=64))
engine.encode_batch([f"memory {{i}} about coffee rain and the server" for i in range({n})])
t3 = time.perf_counter()
engine.retrieve("coffee with a friend", top_k=5)
t4 = time.perf_counter()
engine.retrieve("the server crashed", top_k=5)
t5 = time.perf_counter()
import json
print(json.dumps({{"import": t1 - t0, "import_engine": t2 - t0, "encode": t3 - t2,
                  "first_retrieve": t4 - t3, "second_retrieve": t5 - t4}}))
"""


def child(n: int, cache_dir: Path, enabled: bool) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION")}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env["EMOTIONAL_MEMORY_JAX_CACHE_DIR"] = str(cache_dir)
    env["EMOTIONAL_MEMORY_JAX_CACHE"] = "1" if enabled else "0"
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(n=n)], capture_output=True, text=True, env=env,
        check=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=positive_int, default=100)
    parser.add_argument("--repeats", type=positive_int, default=3)
    args = parser.parse_args()
    cold, warm, off = [], [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            cache = Path(tmp) / "jax"
            cold.append(child(args.memories, cache, True))
            warm.append(child(args.memories, cache, True))
            off.append(child(args.memories, cache, False))

    def med(runs: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    print(f"{args.memories} memories, median of {args.repeats} fresh processes each")
    print(f"  import emotional_memory            {med(warm, 'import') * 1e3:8.1f} ms")
    print(f"  from emotional_memory import EmotionalMemory "
          f"{med(warm, 'import_engine') * 1e3:8.1f} ms")
    print(f"  first retrieve, cold cache         {med(cold, 'first_retrieve') * 1e3:8.1f} ms")
    print(f"  first retrieve, warm cache         {med(warm, 'first_retrieve') * 1e3:8.1f} ms"
          "   (target <= 250 ms)")
    print(f"  first retrieve, cache off          {med(off, 'first_retrieve') * 1e3:8.1f} ms")
    print(f"  second retrieve (same process)     {med(warm, 'second_retrieve') * 1e3:8.1f} ms")
    print(f"  encode_batch of the store, warm    {med(warm, 'encode') * 1e3:8.1f} ms")
    print(f"  ratio cache off / warm cache       "
          f"{med(off, 'first_retrieve') / med(warm, 'first_retrieve'):8.2f}x")


if __name__ == "__main__":
    main()
