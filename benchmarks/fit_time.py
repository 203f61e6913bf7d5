"""Fit time on realistic_recall_v2 and the number of compilations of the train step.

Prints: time to build the RecallBatch (engine replay capture), time of a plain fit
(first call, with compilation; second call, compiled), time of the default fit with
nested hyperparameter selection (first call, then compiled), and the train-step trace
count: one per number of runs trained together, so 2 (a fit's single run; the
selection's 18 runs, six grid points by three inner folds, vmapped into one step); more
would mean a recompilation per step or per fit. The baseline timed in the same process
is one engine replay of the dataset (what an evaluation costs).

The last rows time one gradient of the scores with respect to a rank-16 query adapter
(what every step of an adapter fit takes) on the LoCoMo dev half's batch: through the
candidates' (Q, C, D) embeddings (the old path, the baseline of that ratio) and
through the compact rows (each distinct candidate row once, the fit's path).

Usage: python benchmarks/fit_time.py [--data DIR] [--json OUT] [--no-adapter]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from emotional_memory import EmotionalMemoryConfig
from emotional_memory._precision import float64
from emotional_memory.kernel.adapter import QueryAdapter
from emotional_memory.learn import build_recall_batch, fit, fit_auto
from emotional_memory.learn.losses import batch_scores, compact_rows
from emotional_memory.replay import LookupEmbedder, load_dataset, replay_dataset

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _count_traces(store: list[str]) -> object:
    """Register a JAX monitoring listener appending each traced function's name."""

    def listener(event: str, duration: float, **kwargs: object) -> None:
        if event == "/jax/core/compile/jaxpr_trace_duration":
            store.append(str(kwargs.get("fun_name")))

    jax.monitoring.register_event_duration_secs_listener(listener)
    return listener


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--no-adapter", dest="adapter", action="store_false",
                        help="leave out the adapter-gradient rows (LoCoMo batch)")
    args = parser.parse_args()
    data = load_dataset(args.data / "realistic_recall_v2.json")
    embedder = LookupEmbedder.from_npz(args.data / "realistic_recall_v2.minilm.npz")

    replay_dataset(data, embedder)  # warm the engine's compiled kernels
    t0 = time.perf_counter()
    replay_dataset(data, embedder)
    t_replay = time.perf_counter() - t0

    t0 = time.perf_counter()
    batch, info = build_recall_batch(data, embedder)
    t_batch = time.perf_counter() - t0
    traced: list[str] = []
    _count_traces(traced)
    t0 = time.perf_counter()
    first = fit(batch, info)
    t_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    fit(batch, info)
    t_second = time.perf_counter() - t0
    t0 = time.perf_counter()
    auto = fit_auto(batch, info)
    t_auto = time.perf_counter() - t0
    t0 = time.perf_counter()
    fit_auto(batch, info)
    t_auto_again = time.perf_counter() - t0
    traces = traced.count("_train_step")
    total = t_batch + t_auto

    rows = [
        ("engine replay (baseline)", t_replay),
        ("build RecallBatch", t_batch),
        ("fit, first call (compiles)", t_first),
        ("fit, compiled", t_second),
        ("fit_auto (nested selection)", t_auto),
        ("fit_auto, compiled", t_auto_again),
        ("total default fit (batch+auto)", total),
    ]
    print(f"{'step':34}{'seconds':>9}{'x replay':>10}")
    for name, sec in rows:
        print(f"{name:34}{sec:9.2f}{sec / t_replay:10.1f}")
    print(f"train-step compilations: {traces}  (steps run in one fit: "
          f"{len(first.history['train_loss'])})")
    print(f"target <= 60 s: {'met' if total <= 60 else 'MISSED'}; selection "
          f"{auto.selection['chosen']}")
    out = {k: v for k, v in rows} | {"traces": traces}
    if args.adapter:
        out |= _adapter_gradient(args.data)
    if args.json:
        args.json.write_text(json.dumps(out))


def _adapter_gradient(data_dir: Path, repeats: int = 10) -> dict[str, float]:
    """Seconds per adapter gradient on the LoCoMo dev batch, dense vs compact rows."""
    data = load_dataset(data_dir / "locomo10_dev.json")
    embedder = LookupEmbedder.from_npz(data_dir / "locomo10_dev.minilm.npz")
    batch, _ = build_recall_batch(data, embedder, EmotionalMemoryConfig(), lexical=True,
                                  embeddings=True)
    params = jax.tree_util.tree_map(jnp.asarray, _params())
    rng = np.random.default_rng(0)
    dim = int(np.shape(batch.query.embedding)[-1])
    times = {}
    with float64():
        left = jnp.asarray(1e-3 * rng.standard_normal((dim, 16)))
        right = jnp.asarray(rng.standard_normal((dim, 16)) / np.sqrt(dim))
        device_batch = jax.tree_util.tree_map(jnp.asarray, batch)
        compact = jax.tree_util.tree_map(jnp.asarray, compact_rows(batch))
        for name, rows in (("dense (Q, C, D)", None), ("compact rows", compact)):
            # the data are arguments, as in the fit (not constants XLA could fold)
            def loss(lr: tuple[jax.Array, jax.Array], b: object, c: object) -> jax.Array:
                scores = batch_scores(params, b, None, QueryAdapter(*lr), c)  # type: ignore[arg-type]
                return jnp.sum(jnp.where(b.columns.valid, jnp.tanh(scores), 0.0))  # type: ignore[attr-defined]

            grad = jax.jit(jax.grad(loss))
            jax.block_until_ready(grad((left, right), device_batch, rows))
            t0 = time.perf_counter()
            for _ in range(repeats):
                jax.block_until_ready(grad((left, right), device_batch, rows))
            times[name] = (time.perf_counter() - t0) / repeats
    base = times["dense (Q, C, D)"]
    for name, sec in times.items():
        print(f"adapter gradient, {name:18}{sec * 1e3:9.1f} ms{base / sec:8.2f}x")
    return {f"adapter_grad_{k}": v for k, v in times.items()}


def _params() -> object:
    from emotional_memory.scoring_config import params_from_config

    cfg = EmotionalMemoryConfig()
    return params_from_config(cfg.retrieval, cfg.decay)


if __name__ == "__main__":
    main()
