"""Throughput of the JAX all-MiniLM-L6-v2 embedder (sentences per second).

For batch sizes 1, 32 and 256 it times ``MiniLMEmbedder.embed_array`` after a warm-up
call (so compilation is excluded) and, in the same process, two baselines:

* ``hashing`` -- :class:`~emotional_memory.embedders.HashingEmbedder` on the same texts
  (a dependency-free embedder: the floor a neural model is compared with);
* ``matmul`` -- a jitted chain of float32 ``jnp`` matmuls with the same FLOP count as
  the MiniLM forward for that batch (an estimate of what the hardware can do; the
  ``matmul_fraction`` column is MiniLM speed / matmul speed).

Texts are the event and query strings of ``../shared/data/realistic_recall_v2.minilm.npz``
when present, otherwise synthetic sentences.  Needs ``make minilm``.

``--st-python PATH`` also runs sentence-transformers on torch with the
same weights folder in that interpreter (a separate venv: ``python3 -m venv /tmp/st &&
/tmp/st/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu &&
/tmp/st/bin/pip install sentence-transformers``) as one child process, and alternates
its timings with this library's for ``--rounds`` rounds.  It prints two ratios per
variant of this library (``float32``, the default; ``bf16-matmul``, the opt-in
``matmul_dtype=jnp.bfloat16``): one text embedded alone (median over ``--single`` texts
of each ``embed(text)`` / ``encode([text])`` call, tokenisation included; target this
library <= 0.25x sentence-transformers' time) and batch-256 throughput
(``embed_batch`` / ``encode(..., batch_size=256)`` of 256 texts; target >= 1.5x), with
the parity of the two (min cosine over every text, batch and alone; target >= 0.9999).
``--no-table`` skips the batch-size table above.  The warm-up embeds every timed text
once, which also compiles the program of each single text's padded length (9..64
tokens: multiples of 4).
Each round also times, per variant, the floor of a text alone under XLA: the
model's own 24 dense matrix products (its weights, dtypes and ``_dense``; the padded
shape of the median single text) in one jitted program, nothing else (no attention,
norms, tokeniser or pooling); ``products alone`` is printed as a fraction of
sentence-transformers' time too: a one-text ratio below it needs faster products than
XLA's CPU kernels give, whatever the rest of the forward costs.
On an oversubscribed machine sentence-transformers' OpenMP threads stall now and then,
so the per-round ratios swing with the load; the fastest-of-the-rounds figure is the
steadier one.

Usage: python benchmarks/minilm_throughput.py [--data DIR] [--repeats N]
    [--batch-sizes 1 32 256] [--json OUT]
    [--st-python PATH [--rounds 5] [--single 64] [--variants ...] [--no-table]]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from emotional_memory.embedders import HashingEmbedder, MiniLMEmbedder

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
BATCH_SIZES = (1, 32, 256)


def load_texts(data_dir: Path, n: int) -> list[str]:
    """``n`` texts: the dataset strings (cycled) or synthetic sentences."""
    path = data_dir / "realistic_recall_v2.minilm.npz"
    if path.is_file():
        base = [str(t) for t in np.load(path)["texts"]]
    else:
        base = [
            f"Memory {i}: the meeting on day {i % 7} went {'well' if i % 2 else 'badly'} "
            f"and I felt {'proud' if i % 3 else 'anxious'} afterwards."
            for i in range(500)
        ]
    return [base[i % len(base)] for i in range(n)]


def best_time(fn: Callable[[], Any], repeats: int, min_seconds: float = 0.3) -> float:
    """Fastest wall time of ``fn`` over ``repeats`` runs (each at least one call)."""
    best = float("inf")
    for _ in range(repeats):
        calls = 0
        t0 = time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= min_seconds or calls >= 1000:
                break
        best = min(best, elapsed / calls)
    return best


def forward_flops(batch: int, length: int, hidden: int = 384, inter: int = 1536) -> float:
    """FLOPs of the 6-layer encoder on a padded ``(batch, length)`` input."""
    per_token_layer = 2 * (4 * hidden * hidden + 2 * hidden * inter) + 2 * 2 * length * hidden
    return 6.0 * batch * length * per_token_layer


def matmul_baseline(flops: float, batch: int, length: int, repeats: int) -> float:
    """Seconds for a jitted float32 matmul chain of about ``flops`` FLOPs.

    The chain multiplies a ``(batch * length, 384)`` matrix (the widest pass's
    activations) by a ``384 x 384`` one, as many times as ``flops`` takes.
    """
    rows = batch * length
    width = 384
    steps = max(1, round(flops / (2.0 * rows * width * width)))
    key_x, key_w = jax.random.split(jax.random.PRNGKey(0))
    x = jax.random.normal(key_x, (rows, width), jnp.float32)
    w = jax.random.normal(key_w, (width, width), jnp.float32) / np.sqrt(width)

    @jax.jit
    def chain(x: jax.Array, w: jax.Array) -> jax.Array:
        def body(_: int, h: jax.Array) -> jax.Array:
            return jnp.tanh(jnp.matmul(h, w, precision=jax.lax.Precision.HIGHEST))

        return jax.lax.fori_loop(0, steps, body, x)

    chain(x, w).block_until_ready()
    return best_time(lambda: chain(x, w).block_until_ready(), repeats)


def bench(batch_sizes: Sequence[int], repeats: int, data_dir: Path) -> dict[str, Any]:
    """Run all measurements; returns a JSON-ready dict."""
    results: dict[str, Any] = {
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "machine": platform.processor() or platform.machine(),
        "batches": [],
    }
    hashing = HashingEmbedder()
    for batch in batch_sizes:
        texts = load_texts(data_dir, batch)
        emb = MiniLMEmbedder(batch_size=batch)
        tokens = emb.tokenize(texts)
        # The padded (rows, length) of each forward pass embed_array makes.
        shapes = [emb._pass_shape([len(tokens[i]) for i in chunk]) for chunk in emb._chunks(tokens)]
        emb.embed_array(texts)  # warm-up: compile these buckets
        t_minilm = best_time(partial(emb.embed_array, texts), repeats)
        hashing.embed_array(texts)
        t_hash = best_time(partial(hashing.embed_array, texts), repeats)
        flops = sum(forward_flops(rows, length) for rows, length in shapes)
        rows, length = max(shapes, key=lambda shape: shape[0] * shape[1])
        t_mm = matmul_baseline(flops, rows, length, repeats)
        row = {
            "batch_size": batch,
            "passes": [list(shape) for shape in shapes],
            "minilm_sentences_per_s": batch / t_minilm,
            "hashing_sentences_per_s": batch / t_hash,
            "matmul_equiv_sentences_per_s": batch / t_mm,
            "matmul_fraction": t_mm / t_minilm,
            "minilm_gflops_per_s": flops / t_minilm / 1e9,
        }
        results["batches"].append(row)
        print(
            f"batch {batch:4d} ({len(shapes)} passes, widest {rows}x{length}): "
            f"MiniLM {row['minilm_sentences_per_s']:9.1f} sent/s | "
            f"hashing {row['hashing_sentences_per_s']:9.1f} sent/s | "
            f"same-FLOP matmul {row['matmul_equiv_sentences_per_s']:9.1f} sent/s "
            f"(MiniLM at {row['matmul_fraction']:.0%}, {row['minilm_gflops_per_s']:.1f} GFLOP/s)",
            flush=True,
        )
    return results


ST_CHILD = r"""
import json, sys, time
import torch
from sentence_transformers import SentenceTransformer

model = SentenceTransformer(sys.argv[1], device="cpu")
print(json.dumps({"ready": True, "threads": torch.get_num_threads(),
                  "torch": torch.__version__}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    texts = req["texts"]
    if req["cmd"] == "single":
        times = []
        for text in texts:
            t0 = time.perf_counter(); model.encode([text]); times.append(time.perf_counter() - t0)
        out = {"times": times}
    elif req["cmd"] == "batch":
        t0 = time.perf_counter(); model.encode(texts, batch_size=len(texts))
        out = {"time": time.perf_counter() - t0}
    else:
        emb = model.encode(texts, batch_size=64, normalize_embeddings=True)
        out = {"embeddings": emb.tolist()}
    print(json.dumps(out), flush=True)
"""


class _SentenceTransformersChild:
    """sentence-transformers on torch in another interpreter, driven over stdin/stdout.

    One process for the whole comparison, so that its timings and this library's can
    alternate round by round (a shared machine's load then weighs on both alike).
    """

    def __init__(self, python: str, folder: Path) -> None:
        import subprocess

        self._proc = subprocess.Popen(
            [python, "-c", ST_CHILD, str(folder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.info = self._read()

    def _read(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the sentence-transformers process exited ({self._proc.wait()})")
        out: dict[str, Any] = json.loads(line)
        return out

    def ask(self, cmd: str, texts: Sequence[str]) -> dict[str, Any]:
        """Send one request (``single``, ``batch`` or ``embed``) and wait for its answer."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps({"cmd": cmd, "texts": list(texts)}) + "\n")
        self._proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        """End the child process."""
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=60)


#: This library's embedders compared: the default, and the opt-in bfloat16 products.
VARIANTS: dict[str, dict[str, Any]] = {
    "float32": {},
    "bf16-matmul": {"matmul_dtype": jnp.bfloat16},
}


def products_alone(emb: MiniLMEmbedder, length: int) -> Callable[[], Any]:
    """A call running only ``emb``'s 24 dense matrix products on a ``(1, length)`` pass.

    The products of :class:`~emotional_memory.embedders.minilm.MiniLMModel`'s layers,
    each through the model's own ``_dense`` (same weights, dtypes, precision), chained
    as in the forward (query/key/value, attention output, feed-forward in and out),
    with nothing between them: the matrix-product floor of that pass.

    Args:
        emb: the embedder whose weights are used.
        length: padded token positions of the pass.

    Returns:
        A no-argument callable that runs the compiled program and waits for it.
    """
    from emotional_memory.embedders.minilm import _dense

    layers = emb.model.layers
    hidden = emb.dim

    @jax.jit
    def run(x: jax.Array, layers: Any) -> jax.Array:
        for layer in layers:
            qkv = _dense(x, layer.qkv_w, layer.qkv_b)
            attn = _dense(qkv[..., :hidden], layer.attn_out_w, layer.attn_out_b)
            inner = _dense(attn, layer.ffn_in_w, layer.ffn_in_b)
            x = _dense(inner, layer.ffn_out_w, layer.ffn_out_b)
        return x

    x = jnp.asarray(np.random.default_rng(0).standard_normal((1, length, hidden)) * 0.1,
                    dtype=jnp.float32)
    run(x, layers).block_until_ready()
    return lambda: run(x, layers).block_until_ready()


def _variant_summary(
    name: str, emb: MiniLMEmbedder, single: list[str], batch: list[str], ref: np.ndarray,
    rows: list[dict[str, Any]], best: np.ndarray, st_best: np.ndarray, rounds: int,
    padded: int,
) -> dict[str, Any]:
    """One variant's summary over the rounds of :func:`compare_sentence_transformers`
    (printed too); ``best``/``st_best``: per text, the fastest time of all rounds."""
    import statistics

    got = emb.embed_array(single + batch).astype(np.float64)
    alone = np.asarray([emb.embed(t) for t in single], dtype=np.float64)
    both = np.concatenate([got, alone])
    cos = np.sum(both * ref, axis=1) / (
        np.linalg.norm(both, axis=1) * np.linalg.norm(ref, axis=1)
    )
    summary = {
        "single_ratio": statistics.median(r[name]["single_ratio"] for r in rows),
        "batch_ratio": statistics.median(r[name]["batch_ratio"] for r in rows),
        "single_ratio_best": float(np.median(best) / np.median(st_best)),
        "single_ms_best": {
            "ours": 1e3 * float(np.median(best)),
            "sentence_transformers": 1e3 * float(np.median(st_best)),
        },
        "min_cosine": float(cos.min()),
        "products_alone_ratio": statistics.median(
            r[name]["products_alone_ratio"] for r in rows
        ),
    }
    print(
        f"{name}, median over {rounds} rounds: one text alone "
        f"{summary['single_ratio']:.3f}x sentence-transformers' time (target <= 0.25x; "
        f"fastest of the rounds per text: {summary['single_ms_best']['ours']:.2f} vs "
        f"{summary['single_ms_best']['sentence_transformers']:.2f} ms, "
        f"{summary['single_ratio_best']:.3f}x); batch 256 {summary['batch_ratio']:.2f}x "
        f"its throughput (target >= 1.5x); min cosine {summary['min_cosine']:.6f} "
        f"(target >= 0.9999, batch and alone); its 24 matrix products alone "
        f"({padded} positions, the median text's pass) take "
        f"{summary['products_alone_ratio']:.3f}x sentence-transformers' one-text time"
    )
    return summary


def compare_sentence_transformers(
    st_python: str, data_dir: Path, rounds: int, n_single: int, variants: Sequence[str]
) -> dict[str, Any]:
    """Time sentence-transformers in ``st_python`` and this library on the same texts.

    ``rounds`` rounds, each timing, in turn: sentence-transformers' ``encode([text])``
    on each of the ``n_single`` texts, then each variant's ``embed(text)`` on the same
    texts; then one ``encode`` of the 256 batch texts (``batch_size=256``) and each
    variant's ``embed_batch`` of them (a :class:`MiniLMEmbedder` with default
    arguments but the variant's).  Everything is warmed up first (every compiled shape
    of this library included).  Alternating round by round makes a shared machine's
    load weigh on both libraries alike; the load average is recorded per round.

    Returns:
        Per variant: the median over rounds of ``single_ratio`` (its median one-text
        time / sentence-transformers'; target <= 0.25) and ``batch_ratio`` (its
        batch-256 throughput / theirs; target >= 1.5); ``single_ratio_best`` (per text
        the fastest of all rounds, on both sides, then the median over texts: the
        estimate least disturbed by other processes); ``min_cosine`` of its embeddings,
        batch and alone, to sentence-transformers' (target >= 0.9999); and every round.
    """
    import os
    import statistics

    from emotional_memory.embedders.minilm import default_model_dir

    texts = load_texts(data_dir, 256 + n_single)
    single, batch = texts[256:], texts[:256]
    folder = default_model_dir()
    if folder is None:
        raise SystemExit("the MiniLM weights are not installed: run `make minilm`")
    child = _SentenceTransformersChild(st_python, folder)
    ours = {name: MiniLMEmbedder(**VARIANTS[name]) for name in variants}
    first = next(iter(ours.values()))
    median_tokens = int(np.median([len(ids) for ids in first.tokenize(single)]))
    padded = first._pass_shape([median_tokens])[1]
    floors = {name: products_alone(emb, padded) for name, emb in ours.items()}
    floor_times: dict[str, list[float]] = {name: [] for name in ours}
    st_times: list[list[float]] = []
    our_times: dict[str, list[list[float]]] = {name: [] for name in ours}
    rows: list[dict[str, Any]] = []
    try:
        child.ask("single", single[:4])  # warm-up
        child.ask("batch", batch)
        for emb in ours.values():
            for text in single:
                emb.embed(text)  # warm-up: every single-text bucket
            emb.embed_batch(batch)
        for r in range(rounds):
            st_times.append(child.ask("single", single)["times"])
            row: dict[str, Any] = {"load_average": os.getloadavg()[0]}
            st_single = statistics.median(st_times[-1])
            for name, emb in ours.items():
                mine = []
                for text in single:
                    t0 = time.perf_counter()
                    emb.embed(text)
                    mine.append(time.perf_counter() - t0)
                our_times[name].append(mine)
                products = []
                for _ in range(len(single)):
                    t0 = time.perf_counter()
                    floors[name]()
                    products.append(time.perf_counter() - t0)
                floor_times[name].append(statistics.median(products))
            st_batch = child.ask("batch", batch)["time"]
            row["sentence_transformers"] = {
                "single_ms": 1e3 * st_single,
                "batch256_sent_per_s": 256 / st_batch,
            }
            line = (
                f"round {r + 1} (load {row['load_average']:.1f}): sentence-transformers "
                f"{1e3 * st_single:.2f} ms, {256 / st_batch:.0f} sent/s"
            )
            for name, emb in ours.items():
                our_single = statistics.median(our_times[name][-1])
                our_batch = _timed(partial(emb.embed_batch, batch))
                row[name] = {
                    "single_ms": 1e3 * our_single,
                    "batch256_sent_per_s": 256 / our_batch,
                    "single_ratio": our_single / st_single,
                    "batch_ratio": st_batch / our_batch,
                    "products_alone_ms": 1e3 * floor_times[name][-1],
                    "products_alone_ratio": floor_times[name][-1] / st_single,
                }
                line += (
                    f" | {name} {1e3 * our_single:.2f} ms ({our_single / st_single:.3f}x), "
                    f"{256 / our_batch:.0f} sent/s ({st_batch / our_batch:.2f}x), products "
                    f"alone {1e3 * floor_times[name][-1]:.2f} ms "
                    f"({floor_times[name][-1] / st_single:.3f}x)"
                )
            rows.append(row)
            print(line, flush=True)
        ref = np.asarray(child.ask("embed", single + batch)["embeddings"], dtype=np.float64)
    finally:
        child.close()
    ref = np.concatenate([ref, ref[: len(single)]])
    st_best = np.min(np.asarray(st_times), axis=0)
    result: dict[str, Any] = {
        "st_threads": child.info["threads"],
        "torch": child.info["torch"],
        "single_token_counts": [len(ids) for ids in first.tokenize(single)],
        "products_alone_positions": padded,
        "rounds": rows,
    }
    for name, emb in ours.items():
        result[name] = _variant_summary(
            name, emb, single, batch, ref, rows, np.min(np.asarray(our_times[name]), axis=0),
            st_best, rounds, padded,
        )
    return result


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--batch-sizes", type=int, nargs="+", default=list(BATCH_SIZES), help="default 1 32 256"
    )
    parser.add_argument("--json", type=Path, default=None, help="write results here")
    parser.add_argument("--st-python", default=None, help="interpreter with sentence-transformers")
    parser.add_argument("--single", type=int, default=64, help="texts timed one at a time")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the comparison")
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=sorted(VARIANTS),
        default=list(VARIANTS),
        help="this library's embedders compared (default: all)",
    )
    parser.add_argument(
        "--no-table", action="store_true", help="only the sentence-transformers comparison"
    )
    args = parser.parse_args(argv)
    if args.no_table and not args.st_python:
        parser.error("--no-table leaves nothing to measure without --st-python")
    if args.st_python and not os.access(args.st_python, os.X_OK):
        parser.error(f"--st-python {args.st_python}: no such executable")
    if min(args.repeats, args.rounds, args.single, *args.batch_sizes) < 1:
        parser.error("--repeats, --rounds, --single and --batch-sizes must be at least 1")
    print(f"JAX backend: {jax.default_backend()} ({', '.join(str(d) for d in jax.devices())})")
    results: dict[str, Any] = {}
    if not args.no_table:
        results = bench(args.batch_sizes, args.repeats, args.data)
    if args.st_python:
        results["sentence_transformers"] = compare_sentence_transformers(
            args.st_python, args.data, args.rounds, args.single, args.variants
        )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
