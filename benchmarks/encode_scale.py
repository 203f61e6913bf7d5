"""Encoding at scale: ``encode_batch`` throughput and bytes per memory.

**Yardstick**: ``encode_batch`` of ``--yardstick-n`` random unit
embeddings (default 20,000, D 384) in calls of ``--block`` texts (default 1,000) on one
engine over ``InMemoryStore()``, resonance on, default config, against the *bare
batched search* of the same embeddings in the same process: per block one jitted
``(block, D) @ (D, N)`` float32 product + ``lax.top_k(15)`` with N = every row stored
so far, the block included (compiled for every N before timing). The engine is timed
twice on fresh stores: the first run includes its XLA compilations, the second finds
them compiled. Target: engine <= 5x bare.

Then encodes N texts (default 100,000) into an ``InMemoryStore`` with resonance links
on, two ways, in the same process:

- ``engine``: ``EmotionalMemory.encode_batch`` as it is. The store saves each block
  of new memories as rows, finds all their resonance candidates with one batched
  search (each memory sees the store up to itself; matrix-matrix products,
  compute-bound) and then links them memory by memory in place;
- ``per-memory``: the same engine over :class:`PerMemoryStore`, a wrapper hiding
  ``search_by_embedding_batch`` and the store's row linker, so every new memory is
  saved, searched and linked through the store protocol, its candidates from one
  ``search_by_embedding`` over everything stored so far (N matrix-vector products over
  a growing matrix: quadratic, memory-bound). This is the path of stores without the
  batch method, and the baseline. ``--check N`` verifies on N memories that both build
  identical stores.

At size N it also times single ``encode()`` calls (``--single``, median; each memory
embedded, searched, linked and saved) next to the bare single search
``lax.top_k(E @ q, 15)`` over the same rows, interleaved.

Memory is measured with ``tracemalloc`` (numpy buffers included) around an engine run:
total traced bytes per memory, minus the embedding storage
(``store.embedding_nbytes()``), with the store's own breakdown (``store.nbytes()``:
row arrays, Python objects) and the deep size of a rebuilt ``Memory`` (what ``get``
hands out; transient).

Usage:
    python benchmarks/encode_scale.py [--yardstick-n 20000] [--block 1000]
        [--n 100000] [--mem-n N] [--dim 384] [--engine-n 20000] [--tail 2000] [--single 20]
        [--embedder hashing|random] [--check 3000] [--json OUT]
"""

from __future__ import annotations

import argparse
import gc
import json
import time
import tracemalloc
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from _args import non_negative_int, positive_int

from emotional_memory import EmotionalMemory
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.stores import InMemoryStore
from emotional_memory.stores.in_memory import deep_size

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WORDS = [
    "coffee", "rain", "server", "launch", "budget", "party", "flight", "review", "music",
    "deadline", "garden", "office", "cat", "dog", "train", "river", "night", "morning",
    "friend", "meeting", "storm", "email", "doctor", "bakery",
]


class RandomEmbedder:
    """Random unit vectors (cheap; isolates the engine from the embedder)."""

    def __init__(self, dim: int, seed: int = 0) -> None:
        self.dim = dim
        self.rng = np.random.default_rng(seed)

    def embed(self, text: str) -> list[float]:
        return self.embed_batch([text])[0]

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        vecs = self.rng.standard_normal((len(texts), self.dim))
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        return vecs.tolist()


class TableEmbedder:
    """Row ``i`` of a fixed matrix for the text ending in ``#i`` (the yardstick's
    embeddings, shared with the bare search)."""

    def __init__(self, vectors: np.ndarray) -> None:
        self.vectors = vectors

    def embed(self, text: str) -> list[float]:
        return self.embed_batch([text])[0]

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        rows = [int(t.rsplit("#", 1)[1]) for t in texts]
        return self.vectors[rows].tolist()


def random_unit(n: int, dim: int, seed: int = 0) -> np.ndarray:
    """``n`` random unit vectors (float64, as :class:`RandomEmbedder` makes them)."""
    vecs = np.random.default_rng(seed).standard_normal((n, dim))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs


class PerMemoryStore:
    """An ``InMemoryStore`` seen without ``search_by_embedding_batch``, its row linker
    and ``candidate_bank`` (so the engine reads it through the store protocol, as a
    store of another library's).

    Everything else (save, search, transaction, byte counts, ...) is the wrapped
    store's, so the engine takes its per-memory path over the very same data.
    """

    def __init__(self, inner: InMemoryStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in ("search_by_embedding_batch", "row_linker", "candidate_bank"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __len__(self) -> int:
        return len(self.inner)


PATHS = ("engine", "per_memory")


def _clock_from(start: datetime) -> Any:
    tick = [start]

    def clock() -> datetime:
        tick[0] += timedelta(seconds=3)
        return tick[0]

    return clock


def texts_for(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(WORDS), size=(n, 6))
    return [" ".join(WORDS[w] for w in row) + f" #{i}" for i, row in enumerate(picks)]


def make_engine(path: str, embedder: Any, store: InMemoryStore | None = None,
                start: datetime = T0) -> EmotionalMemory:
    """An engine on ``store`` (default a new one) taking the ``path`` encode path."""
    store = store if store is not None else InMemoryStore()
    return EmotionalMemory(
        store if path == "engine" else PerMemoryStore(store),  # type: ignore[arg-type]
        embedder, clock=_clock_from(start),
    )


def inner_store(engine: EmotionalMemory) -> InMemoryStore:
    store = engine.store
    store = store.inner if isinstance(store, PerMemoryStore) else store
    assert isinstance(store, InMemoryStore)
    return store


def breakdown(store: InMemoryStore, sample: int = 2000) -> dict[str, float]:
    """Average bytes per memory of the store's resident parts, and of one rebuilt
    ``Memory`` object (what ``get`` hands out; transient, not resident)."""
    n = len(store)
    row_ids = [mid for mid in store.search_matrix()[0] if mid is not None]
    chosen = [store.get(mid) for mid in row_ids[:: max(1, n // sample)]]
    memories = [m for m in chosen if m is not None]
    out = {
        "rebuilt_memory_object": float(np.mean([deep_size(m) for m in memories])),
        "rebuilt_embedding_list": float(np.mean([deep_size(m.embedding) for m in memories])),
        "embedding_storage": store.embedding_nbytes() / n,
    }
    nbytes = getattr(store, "nbytes", None)
    if callable(nbytes):
        parts = nbytes()
        out["store_row_arrays_besides_embeddings"] = parts["columns"] / n
        out["store_python_objects"] = parts["objects"] / n
    return out


def run(path: str, texts: list[str], embedder: Any, trace: bool = False) -> dict[str, Any]:
    """Encode ``texts`` in one ``encode_batch`` on a new store along ``path``."""
    engine = make_engine(path, embedder)
    gc.collect()
    if trace:
        tracemalloc.start()
    start = time.perf_counter()
    engine.encode_batch(texts)
    seconds = time.perf_counter() - start
    result: dict[str, Any] = {"n": len(texts), "seconds": seconds,
                              "ms_per_memory": seconds / len(texts) * 1e3}
    store = inner_store(engine)
    if trace:
        traced, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        n = len(texts)
        result.update({
            "traced_bytes_per_memory": traced / n,
            "traced_peak_bytes_per_memory": peak / n,
            "embedding_bytes_per_memory": store.embedding_nbytes() / n,
            "bytes_per_memory_beyond_embeddings": (traced - store.embedding_nbytes()) / n,
        })
        result["breakdown"] = breakdown(store)
    result["engine"] = engine
    return result


def bare_batched_search(
    embeddings: np.ndarray, block: int, k: int = 15, *, host: bool = False
) -> float:
    """Seconds of the yardstick's bare batched search (see the module docs).

    Default: the bank is put on the device once and the row count ``N`` is a static
    argument, so every block is one compiled program (``q @ bank[:N].T`` +
    ``lax.top_k``) with no copy of the bank. ``host``: the block and ``bank[:N]`` are
    passed as host (numpy) arrays, so each call also copies the bank to the device
    (how the issue's figures were taken). Every ``N`` is compiled (and run once)
    before timing.
    """
    import jax
    import jax.numpy as jnp

    def search(queries: Any, bank: Any, n: int) -> Any:
        return jax.lax.top_k(queries @ bank[:n].T, k)

    jitted = jax.jit(search, static_argnums=2)
    host_bank = np.asarray(embeddings, dtype=np.float32)
    bank = host_bank if host else jnp.asarray(host_bank)
    spans = [(s, min(s + block, len(embeddings))) for s in range(0, len(embeddings), block)]

    def one(s: int, e: int) -> Any:
        if host:
            return jitted(host_bank[s:e], host_bank[:e], e)
        return jitted(bank[s:e], bank, e)

    for s, e in spans:
        jax.block_until_ready(one(s, e))
    start = time.perf_counter()
    for s, e in spans:
        jax.block_until_ready(one(s, e))
    return time.perf_counter() - start


def yardstick(n: int, dim: int, block: int) -> dict[str, float]:
    """The issue's yardstick: engine vs bare batched search, ms per memory."""
    vectors = random_unit(n, dim)
    texts = texts_for(n)

    def engine_seconds() -> float:
        engine = EmotionalMemory(InMemoryStore(), TableEmbedder(vectors),
                                 clock=_clock_from(T0))
        gc.collect()
        start = time.perf_counter()
        for s in range(0, n, block):
            engine.encode_batch(texts[s : s + block])
        return time.perf_counter() - start

    first = engine_seconds()
    second = engine_seconds()
    bare = bare_batched_search(vectors, block)
    bare_host = bare_batched_search(vectors, block, host=True)
    return {
        "n": n,
        "block": block,
        "engine_ms_per_memory_first_run": first / n * 1e3,
        "engine_ms_per_memory_second_run": second / n * 1e3,
        "bare_ms_per_memory": bare / n * 1e3,
        "bare_host_operands_ms_per_memory": bare_host / n * 1e3,
        "ratio_first_run": first / bare,
        "ratio_second_run": second / bare,
        "ratio_second_run_host_operands": second / bare_host,
    }


def single_encode(store: InMemoryStore, embedder: Any, count: int) -> dict[str, float]:
    """Median ms of one ``encode()`` into ``store`` (its memory searched, linked and
    saved) next to the bare single search ``lax.top_k(E @ q, 15)`` over the store's
    float32 rows, the two timed interleaved (compiled before timing)."""
    import jax
    import jax.numpy as jnp

    engine = make_engine("engine", embedder, store=store, start=T0 + timedelta(days=60))
    with store.locked():
        _, matrix, _, valid = store.search_matrix()
        # nothing was deleted: the live rows are the first ones
        bank = jnp.asarray(np.asarray(matrix[: int(valid.sum())], dtype=np.float32))
    bare = jax.jit(lambda q: jax.lax.top_k(bank @ q, 15))
    texts = texts_for(count + 3, seed=20)
    queries = [jnp.asarray(np.asarray(embedder.embed(t), np.float32)) for t in texts]
    for text, query in zip(texts[:3], queries[:3], strict=True):  # compile both
        engine.encode(text)
        jax.block_until_ready(bare(query))
    encode_ms, bare_ms = [], []
    for text, query in zip(texts[3:], queries[3:], strict=True):
        start = time.perf_counter()
        engine.encode(text)
        encode_ms.append((time.perf_counter() - start) * 1e3)
        start = time.perf_counter()
        jax.block_until_ready(bare(query))
        bare_ms.append((time.perf_counter() - start) * 1e3)
    encode, base = float(np.median(encode_ms)), float(np.median(bare_ms))
    return {"encode_ms": encode, "bare_ms": base, "ratio": encode / base}


def check_identical(n: int, embedder_factory: Any) -> bool:
    """Whether both paths build the same store (ids mapped by insertion order)."""
    texts = texts_for(n, seed=1)
    engines = [make_engine(path, embedder_factory()) for path in PATHS]
    for engine in engines:
        engine.encode_batch(texts[: n // 2])
        engine.encode_batch(texts[n // 2 :])

    def canon(engine: EmotionalMemory) -> str:
        text = json.dumps({"memories": engine.export_memories(), "state": engine.save_state()})
        for i, memory in enumerate(engine.list_all()):
            text = text.replace(memory.id, f"#{i}")
        return text

    return canon(engines[0]) == canon(engines[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--yardstick-n", type=non_negative_int, default=20_000,
                        help="memories of the engine vs bare batched search yardstick (0 skips)")
    parser.add_argument("--block", type=positive_int, default=1000,
                        help="texts per encode_batch call in the yardstick")
    parser.add_argument("--n", type=non_negative_int, default=100_000,
                        help="memories of one encode_batch call (0 skips it, --tail and "
                             "--mem-n's default)")
    parser.add_argument("--dim", type=positive_int, default=384)
    parser.add_argument("--engine-n", type=non_negative_int, default=20_000,
                        help="memories encoded by both paths (per-memory is quadratic; 0 skips)")
    parser.add_argument("--mem-n", type=non_negative_int, default=None,
                        help="memories for the tracemalloc run (default: --n; 0 skips)")
    parser.add_argument("--tail", type=non_negative_int, default=2000,
                        help="memories added at size N by both paths (marginal cost; 0 skips)")
    parser.add_argument("--single", type=non_negative_int, default=20,
                        help="single encode() calls timed at size N (0 skips)")
    parser.add_argument("--embedder", choices=["hashing", "random"], default="hashing")
    parser.add_argument("--check", type=non_negative_int, default=3000,
                        help="verify identical stores on this many memories (0 skips)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.mem_n is None:
        args.mem_n = args.n

    def embedder() -> Any:
        return HashingEmbedder(dim=args.dim) if args.embedder == "hashing" else RandomEmbedder(
            args.dim
        )

    report: dict[str, Any] = {"dim": args.dim, "embedder": args.embedder}
    if args.check:
        report["identical_paths"] = check_identical(args.check, embedder)
        print(f"engine == per-memory path on {args.check} memories: "
              f"{report['identical_paths']}")
    if args.yardstick_n:
        yard = yardstick(args.yardstick_n, args.dim, args.block)
        report["yardstick"] = yard
        print(f"yardstick N={args.yardstick_n}, encode_batch calls of {args.block} "
              f"(random unit {args.dim}-d embeddings, resonance on, default config):\n"
              f"  engine ms/memory {yard['engine_ms_per_memory_first_run']:.3f} (first run, "
              f"XLA compilations included), {yard['engine_ms_per_memory_second_run']:.3f} "
              f"(second run)\n"
              f"  bare ms/memory   {yard['bare_ms_per_memory']:.3f} (jitted (B,D)@(D,N) "
              f"float32 + lax.top_k(15) per block, compiled before timing); "
              f"{yard['bare_host_operands_ms_per_memory']:.3f} with host operands\n"
              f"  ratio            {yard['ratio_first_run']:.1f}x (first run), "
              f"{yard['ratio_second_run']:.1f}x (second run); target <= 5x "
              f"({yard['ratio_second_run_host_operands']:.1f}x against host operands)",
              flush=True)
    if args.engine_n:
        texts = texts_for(args.engine_n)
        same_n = {}
        for path in PATHS:
            timed = run(path, texts, embedder())
            timed.pop("engine")
            same_n[path] = timed
        report["same_n"] = same_n
        eng, per = same_n["engine"], same_n["per_memory"]
        print(f"N={args.engine_n}: engine {eng['seconds']:.1f}s "
              f"({eng['ms_per_memory']:.3f} ms/memory) | per-memory path {per['seconds']:.1f}s "
              f"({per['ms_per_memory']:.3f} ms/memory) | speed-up "
              f"{per['seconds'] / eng['seconds']:.1f}x", flush=True)
    if not args.n:
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))
        return
    texts = texts_for(args.n)
    timed = run("engine", texts, embedder())
    engine = timed.pop("engine")
    report["engine"] = timed
    print(f"N={args.n}: engine {timed['seconds']:.1f}s "
          f"({timed['ms_per_memory']:.3f} ms/memory)", flush=True)
    store_parts = breakdown(inner_store(engine))
    report["store_bytes_per_memory"] = store_parts
    print(f"  resident store bytes per memory at N={args.n} (store.nbytes()):")
    for key, value in store_parts.items():
        print(f"    {key:36s} {value:10.0f}")
    if args.tail:
        # Marginal cost per memory at this size, both paths adding --tail memories to
        # the same store (the per-memory path: one search over all N per memory).
        tail: dict[str, Any] = {}
        for i, path in enumerate(("per_memory", "engine")):
            more = make_engine(path, embedder(), store=inner_store(engine),
                               start=T0 + timedelta(days=30 + i))
            # an untimed batch of the same size first: the timed one then runs on
            # programs compiled for its shapes (the store grows by 2 x --tail per path)
            more.encode_batch(texts_for(args.tail, seed=20 + i))
            batch = texts_for(args.tail, seed=10 + i)
            start = time.perf_counter()
            more.encode_batch(batch)
            tail[path] = (time.perf_counter() - start) / args.tail * 1e3
        report["marginal_ms_per_memory_at_n"] = tail
        print(f"  adding {args.tail} more at N={args.n}: per-memory path "
              f"{tail['per_memory']:.2f} ms/memory, engine {tail['engine']:.2f} ms/memory",
              flush=True)
    if args.single:
        single = single_encode(inner_store(engine), embedder(), args.single)
        report["single_encode_at_n"] = single
        print(f"  one encode() at N={args.n} (median of {args.single}): "
              f"{single['encode_ms']:.2f} ms; bare jitted lax.top_k(E @ q, 15) on the "
              f"store's rows {single['bare_ms']:.2f} ms; ratio {single['ratio']:.2f}x",
              flush=True)
    del engine
    if args.mem_n:
        big = run("engine", texts_for(args.mem_n), embedder(), trace=True)
        big.pop("engine")
        report["memory"] = big
        print(f"N={args.mem_n} under tracemalloc ({big['seconds']:.1f}s): traced "
              f"{big['traced_bytes_per_memory']:.0f} B/memory (peak "
              f"{big['traced_peak_bytes_per_memory']:.0f}); embeddings "
              f"{big['embedding_bytes_per_memory']:.0f}; beyond the embeddings "
              f"{big['bytes_per_memory_beyond_embeddings']:.0f}")
        for key, value in big["breakdown"].items():
            print(f"    {key:32s} {value:10.0f} B/memory")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
