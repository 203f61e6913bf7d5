"""Encoding at scale: ``encode_batch`` throughput and bytes per memory.

Encodes N texts (default 100,000) into an ``InMemoryStore`` with resonance links on,
two ways, in the same process:

- ``engine``: ``EmotionalMemory.encode_batch`` as it is. Each new memory's resonance
  candidates come from one ``search_by_embedding`` over everything stored so far, so
  the whole batch costs N matrix-vector products over a growing matrix (quadratic,
  memory-bound);
- ``batched links``: the same semantics with the candidate searches of the whole
  batch done by ``InMemoryStore.search_by_embedding_batch(..., visible_until=ids)``
  (matrix-matrix products, compute-bound) after saving the new memories, then the
  usual link building memory by memory. This is the change proposed for the engine;
  ``--check N`` verifies on N memories that both give identical stores.

Memory is measured with ``tracemalloc`` (numpy buffers included) around the
batched-links run: total traced bytes per memory, minus the embedding (search)
matrix, with a breakdown by a deep ``sys.getsizeof`` of a sample of memories.

Usage:
    python benchmarks/encode_scale.py [--n 100000] [--mem-n N] [--dim 384]
        [--engine-n 20000] [--tail 2000] [--embedder hashing|random] [--check 3000]
        [--json OUT]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import tracemalloc
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from emotional_memory import EmotionalMemory
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.interfaces import store_transaction
from emotional_memory.models import Memory, ResonanceLink
from emotional_memory.resonance import build_resonance_links
from emotional_memory.stores import InMemoryStore

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


class BatchLinkingEngine(EmotionalMemory):
    """``encode_batch`` with all resonance-candidate searches done in one batch.

    Same result as :meth:`EmotionalMemory.encode_batch` (checked by ``--check``):
    candidates only depend on embeddings and insertion order, so saving the batch
    first and searching each memory among the memories stored up to it
    (``visible_until``) finds the very same candidates.
    """

    def encode_batch(
        self,
        contents: Sequence[str],
        metadata: Sequence[dict[str, Any] | None] | None = None,
    ) -> list[Memory]:
        texts = [self._check_content(c, f"contents[{i}]") for i, c in enumerate(contents)]
        if not texts:
            return []
        metas = list(metadata) if metadata is not None else [None] * len(texts)
        raw = self.embedder.embed_batch(texts)
        embeddings = [self._clean_embedding(e, f"contents[{i}]") for i, e in enumerate(raw)]
        state = self._state
        out: list[Memory] = []
        with store_transaction(self.store):
            prepared = []
            for text, emb, meta in zip(texts, embeddings, metas, strict=True):
                memory, state = self._prepare(state, text, emb, None, meta, None, self._now())
                prepared.append(memory)
            base = len(self.store)
            for memory in prepared:
                self.store.save(memory)
            cfg = self.config.resonance
            limit = cfg.max_links * cfg.candidate_multiplier
            searched = [j for j in range(len(prepared)) if base + j + 1 > limit]
            found = self.store.search_by_embedding_batch(  # type: ignore[attr-defined]
                [prepared[j].embedding or [] for j in searched], limit,
                visible_until=[prepared[j].id for j in searched],
            ) if self.config.enable_resonance and searched else []
            candidates = dict(zip(searched, found, strict=True))
            for j, memory in enumerate(prepared):
                if not self.config.enable_resonance:
                    out.append(memory)
                    continue
                cands = candidates.get(j)
                if cands is None:
                    cands = self.store.list_all()[: base + j + 1]
                out.append(self._link(memory, cands))
        adopt = getattr(self, "_adopt", None)  # the engine's "take this new state"
        if callable(adopt):
            adopt(state)
        else:
            self._state = state
            getattr(self, "_persist", lambda: None)()
        return [self._stored(m) for m in out]

    def _link(self, memory: Memory, candidates: list[Memory]) -> Memory:
        """The linking half of ``EmotionalMemory._store_and_link`` (copied verbatim)."""
        cfg = self.config.resonance
        links = build_resonance_links(memory, candidates, cfg)
        if not links:
            return memory
        memory = memory.model_copy(
            update={"tag": memory.tag.model_copy(update={"resonance_links": links})}
        )
        self.store.update(memory)
        for link in links:
            target = self.store.get(link.target_id)
            if target is None:
                continue
            back = ResonanceLink(
                source_id=target.id, target_id=memory.id, strength=link.strength,
                link_type=link.link_type,
            )
            existing = list(target.tag.resonance_links)
            if len(existing) < cfg.max_links:
                existing.append(back)
            else:
                weakest = min(range(len(existing)), key=lambda i: existing[i].strength)
                if back.strength > existing[weakest].strength:
                    existing[weakest] = back
                else:
                    continue
            self.store.update(
                target.model_copy(
                    update={"tag": target.tag.model_copy(update={"resonance_links": existing})}
                )
            )
        return memory


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


def make_engine(cls: type[EmotionalMemory], embedder: Any) -> EmotionalMemory:
    tick = [T0]

    def clock() -> datetime:
        tick[0] += timedelta(seconds=3)
        return tick[0]

    return cls(InMemoryStore(), embedder, clock=clock)


def deep_size(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes reachable from ``obj`` (pydantic models, containers, scalars), once each."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, list | tuple | set | frozenset):
        size += sum(deep_size(x, seen) for x in obj)
    elif hasattr(obj, "__dict__"):
        size += deep_size(vars(obj), seen)
        for extra in ("__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__"):
            value = getattr(obj, extra, None)
            if value is not None:
                size += deep_size(value, seen)
    return size


def breakdown(store: InMemoryStore, sample: int = 2000) -> dict[str, float]:
    """Average bytes per memory of its parts (deep sizes of a sample)."""
    memories = store.list_all()
    step = max(1, len(memories) // sample)
    chosen = memories[::step]
    emb = float(np.mean([deep_size(m.embedding) for m in chosen]))
    whole = float(np.mean([deep_size(m) for m in chosen]))
    links = float(np.mean([deep_size(m.tag.resonance_links) for m in chosen]))
    n = len(memories)
    return {
        "memory_object_total": whole,
        "embedding_list": emb,
        "memory_without_embedding_list": whole - emb,
        "resonance_links": links,
        "store_columns_besides_matrix": (store.column_nbytes() - store.embedding_nbytes()) / n,
        "search_matrix_allocated": store.embedding_nbytes() / n,
    }


def run(cls: type[EmotionalMemory], texts: list[str], embedder: Any,
        trace: bool = False) -> dict[str, Any]:
    engine = make_engine(cls, embedder)
    gc.collect()
    if trace:
        tracemalloc.start()
    start = time.perf_counter()
    engine.encode_batch(texts)
    seconds = time.perf_counter() - start
    result: dict[str, Any] = {"n": len(texts), "seconds": seconds,
                              "ms_per_memory": seconds / len(texts) * 1e3}
    store = engine.store
    assert isinstance(store, InMemoryStore)
    if trace:
        traced, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        n = len(texts)
        result.update({
            "traced_bytes_per_memory": traced / n,
            "traced_peak_bytes_per_memory": peak / n,
            "search_matrix_bytes_per_memory": store.embedding_nbytes() / n,
            "bytes_per_memory_beyond_matrix": (traced - store.embedding_nbytes()) / n,
        })
        result["breakdown"] = breakdown(store)
    result["engine"] = engine
    return result


def check_identical(n: int, embedder_factory: Any) -> bool:
    texts = texts_for(n, seed=1)
    a = make_engine(EmotionalMemory, embedder_factory())
    b = make_engine(BatchLinkingEngine, embedder_factory())
    a.encode_batch(texts[: n // 2])
    b.encode_batch(texts[: n // 2])
    a.encode_batch(texts[n // 2 :])
    b.encode_batch(texts[n // 2 :])
    strip = lambda rows: [{**r, "id": None} for r in rows]  # noqa: E731
    ids_a = [m.id for m in a.list_all()]
    ids_b = [m.id for m in b.list_all()]
    rename = dict(zip(ids_b, ids_a, strict=True))

    def canon(engine: EmotionalMemory, mapping: dict[str, str] | None) -> str:
        text = json.dumps(strip(engine.export_memories()), sort_keys=True)
        for old, new in (mapping or {}).items():
            text = text.replace(old, new)
        return text

    return canon(a, None) == canon(b, rename)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--engine-n", type=int, default=20_000,
                        help="memories for the current engine path (quadratic; 0 skips)")
    parser.add_argument("--mem-n", type=int, default=None,
                        help="memories for the tracemalloc run (default: --n; 0 skips)")
    parser.add_argument("--tail", type=int, default=2000,
                        help="memories added at size N by both paths (marginal cost; 0 skips)")
    parser.add_argument("--embedder", choices=["hashing", "random"], default="hashing")
    parser.add_argument("--check", type=int, default=3000,
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
        report["identical_to_engine"] = check_identical(args.check, embedder)
        print(f"batched links == engine on {args.check} memories: "
              f"{report['identical_to_engine']}")
    if args.engine_n:
        texts = texts_for(args.engine_n)
        cur = run(EmotionalMemory, texts, embedder())
        cur.pop("engine")
        report["engine"] = cur
        fast = run(BatchLinkingEngine, texts, embedder())
        fast.pop("engine")
        report["batched_links_same_n"] = fast
        print(f"N={args.engine_n}: engine {cur['seconds']:.1f}s "
              f"({cur['ms_per_memory']:.3f} ms/memory) | batched links {fast['seconds']:.1f}s "
              f"({fast['ms_per_memory']:.3f} ms/memory) | speed-up "
              f"{cur['seconds'] / fast['seconds']:.1f}x")
    texts = texts_for(args.n)
    timed = run(BatchLinkingEngine, texts, embedder())
    engine = timed.pop("engine")
    report["batched_links"] = timed
    print(f"N={args.n}: batched links {timed['seconds']:.1f}s "
          f"({timed['ms_per_memory']:.3f} ms/memory)", flush=True)
    if args.tail:
        # Marginal cost per memory at this size: the current engine path (one search
        # over all N per memory) vs batched links, each adding --tail memories.
        tail: dict[str, Any] = {}
        for i, cls in enumerate((EmotionalMemory, BatchLinkingEngine)):
            more = cls(engine.store, embedder(), clock=_clock_from(T0 + timedelta(days=30 + i)))
            batch = texts_for(args.tail, seed=10 + i)
            start = time.perf_counter()
            more.encode_batch(batch)
            tail[cls.__name__] = (time.perf_counter() - start) / args.tail * 1e3
        report["marginal_ms_per_memory_at_n"] = tail
        print(f"  adding {args.tail} more at N={args.n}: engine "
              f"{tail['EmotionalMemory']:.2f} ms/memory, batched links "
              f"{tail['BatchLinkingEngine']:.2f} ms/memory", flush=True)
    del engine
    if args.mem_n:
        big = run(BatchLinkingEngine, texts_for(args.mem_n), embedder(), trace=True)
        big.pop("engine")
        report["memory"] = big
        print(f"N={args.mem_n} under tracemalloc ({big['seconds']:.1f}s): traced "
              f"{big['traced_bytes_per_memory']:.0f} B/memory (peak "
              f"{big['traced_peak_bytes_per_memory']:.0f}); search matrix "
              f"{big['search_matrix_bytes_per_memory']:.0f}; beyond the matrix "
              f"{big['bytes_per_memory_beyond_matrix']:.0f}")
        for key, value in big["breakdown"].items():
            print(f"    {key:32s} {value:10.0f} B/memory")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
