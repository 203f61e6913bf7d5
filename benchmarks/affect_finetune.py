"""Does fine-tuning MiniLM itself on EmoBank give a better affect rater than the head?

The shipped rater (``TextAffectRater``) is a small MLP ensemble over the frozen
MiniLM's mean-pooled layer states. This benchmark trains the alternative: LoRA
adapters on the encoder's top ``--layers`` layers (``embedders/tunable.py``) jointly with
one MLP head of the same shape on the same features (the lower layers' pooled states
stay frozen, the top layers' are recomputed with the adapters), on EmoBank's train
split, minibatch AdamW with dropout, standardised targets. It prints, after every
epoch, the Pearson r on EmoBank dev per dimension and the valence of a few probe
sentences, next to the shipped head's.

It answers a question from the emotional-service work: can the text rater learn that
"I adopted a cat named Miso" is clearly pleasant (valence > 0.3) from EmoBank? (EmoBank
itself rates its "adopted" sentences 3.02 on average, i.e. +0.01 on our scale.)

Usage: python benchmarks/affect_finetune.py [--emobank CSV] [--layers 2] [--rank 8]
       [--epochs 2] [--lr 1e-3] [--dropout 0.3] [--seed 0] [--json OUT]
Takes about 6 minutes on two CPU cores with the defaults.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _args import positive_int  # noqa: E402
from training.affect import load_emobank, pearson  # noqa: E402

from emotional_memory._progress import progress_iter  # noqa: E402
from emotional_memory.affect_rater import TextAffectRater  # noqa: E402
from emotional_memory.appraisal_embedding import emobank_to_affect  # noqa: E402
from emotional_memory.embedders import MiniLMEmbedder  # noqa: E402
from emotional_memory.embedders.minilm_model import _key_bias, _layer_forward  # noqa: E402
from emotional_memory.embedders.tunable import (  # noqa: E402
    LoRA,
    apply_lora,
    init_lora,
    lower_states,
    pad_states,
)

PROBES = (
    "I adopted a cat named Miso",
    "My grandfather died last night",
    "I got the job I wanted!",
    "We had pasta for dinner",
    "The meeting is at 3pm",
)


class _Head(eqx.Module):
    """One MLP member: standardised features -> hidden GELU -> 3 standardised targets."""

    w1: jax.Array
    b1: jax.Array
    w2: jax.Array
    b2: jax.Array

    @classmethod
    def init(cls, key: jax.Array, n_in: int, hidden: int) -> _Head:
        k1, k2 = jax.random.split(key)
        return cls(jax.random.normal(k1, (n_in, hidden)) / np.sqrt(n_in), jnp.zeros(hidden),
                   jax.random.normal(k2, (hidden, 3)) * 0.1 / np.sqrt(hidden), jnp.zeros(3))


class _Tuned(eqx.Module):
    """Adapters of the top layers and the head, trained together."""

    lora: LoRA
    head: _Head


def _top_pooled(model: Any, layers: Any, x: jax.Array, mask: jax.Array) -> jax.Array:
    """``(N, k * H)``: mean-pooled output of each of the top ``k`` layers."""
    bias = _key_bias(mask)
    keep = mask.astype(jnp.float32)[:, :, None]
    pooled = []
    for w in layers:
        x = _layer_forward(w, x, bias, model.num_heads, model.eps)
        pooled.append((x * keep).sum(1) / jnp.maximum(keep.sum(1), 1.0))
    return jnp.concatenate(pooled, axis=1)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Train and evaluate; returns the report (also printed)."""
    texts, splits, vad = load_emobank(args.emobank)
    y = emobank_to_affect(vad).astype(np.float32)
    train = np.where(splits == "train")[0]
    dev = np.where(splits == "dev")[0]
    emb = MiniLMEmbedder()
    model = emb.model
    shipped = TextAffectRater(emb)
    shipped_dev = np.array([[a.valence, a.arousal, a.dominance]
                            for a in shipped.rate_affect([texts[i] for i in dev])])
    shipped_probe = [a.valence for a in shipped.rate_affect(list(PROBES))]
    all_texts = list(texts) + list(PROBES)
    t0 = time.perf_counter()
    token_ids = emb.tokenize(all_texts)
    pooled = emb.pooled_layers(all_texts)[:, :, 0, :]  # (N, layers, H) mean-pooled
    start = pooled.shape[1] - args.layers
    states = lower_states(model, token_ids, start)
    feature_seconds = time.perf_counter() - t0
    frozen = pooled[:, :start].reshape(len(all_texts), -1)
    full = pooled.reshape(len(all_texts), -1)
    x_mean, x_scale = full[train].mean(0), full[train].std(0) + 1e-6
    y_mean, y_scale = y[train].mean(0), y[train].std(0)
    top = tuple(model.layers[start:])

    def predict(p: _Tuned, fz: jax.Array, x: jax.Array, mask: jax.Array,
                key: jax.Array | None = None) -> jax.Array:
        feats = jnp.concatenate([fz, _top_pooled(model, apply_lora(top, p.lora), x, mask)], 1)
        z = (feats - x_mean) / x_scale
        keep = 1.0 - args.dropout
        if key is not None:
            k1, key = jax.random.split(key)
            z = z * jax.random.bernoulli(k1, keep, z.shape) / keep
        h = jax.nn.gelu(z @ p.head.w1 + p.head.b1, approximate=True)
        if key is not None:
            h = h * jax.random.bernoulli(key, keep, h.shape) / keep
        return h @ p.head.w2 + p.head.b2

    params = _Tuned(init_lora(top, args.rank, 2.0 * args.rank, seed=args.seed),
                    _Head.init(jax.random.PRNGKey(args.seed), full.shape[1], 64))
    batch = 32
    steps = args.epochs * (len(train) // batch)
    schedule = optax.warmup_cosine_decay_schedule(0.0, args.lr, max(1, steps // 20), steps,
                                                  args.lr * 0.01)
    optimizer = optax.adamw(schedule, weight_decay=0.05)
    opt_state = optimizer.init(eqx.filter(params, eqx.is_array))
    y_std = (y - y_mean) / y_scale

    @eqx.filter_jit
    def step(p: _Tuned, s: Any, fz: jax.Array, x: jax.Array, mask: jax.Array, yb: jax.Array,
             key: jax.Array) -> tuple[_Tuned, Any, jax.Array]:
        def loss(q: _Tuned) -> jax.Array:
            return jnp.mean((predict(q, fz, x, mask, key) - yb) ** 2)
        value, grads = eqx.filter_value_and_grad(loss)(p)
        updates, s = optimizer.update(grads, s, eqx.filter(p, eqx.is_array))
        return eqx.apply_updates(p, updates), s, value

    @eqx.filter_jit
    def infer(p: _Tuned, fz: jax.Array, x: jax.Array, mask: jax.Array) -> jax.Array:
        return predict(p, fz, x, mask) * y_scale + y_mean

    def rate(p: _Tuned, rows: np.ndarray) -> np.ndarray:
        out = np.zeros((len(rows), 3), np.float32)
        order = np.argsort([states[i].shape[0] for i in rows])
        for pos in range(0, len(rows), 64):
            chunk = rows[order[pos:pos + 64]]
            x, m = pad_states(states, chunk)
            out[order[pos:pos + 64]] = np.asarray(infer(p, jnp.asarray(frozen[chunk]),
                                                        jnp.asarray(x), jnp.asarray(m)))
        return np.clip(out, [-1.0, 0.0, 0.0], [1.0, 1.0, 1.0])

    probe_rows = np.arange(len(texts), len(all_texts))
    rng = np.random.default_rng(args.seed)
    key = jax.random.PRNGKey(args.seed + 1)
    epochs: list[dict[str, Any]] = []
    t1 = time.perf_counter()
    for epoch in progress_iter(range(args.epochs), "epochs", total=args.epochs):
        order = rng.permutation(train)
        for pos in range(0, len(order) - batch + 1, batch):
            chunk = order[pos:pos + batch]
            x, m = pad_states(states, chunk)
            key, sub = jax.random.split(key)
            params, opt_state, _ = step(params, opt_state, jnp.asarray(frozen[chunk]),
                                        jnp.asarray(x), jnp.asarray(m),
                                        jnp.asarray(y_std[chunk]), sub)
        epochs.append({"epoch": epoch + 1, "dev_r": pearson(rate(params, dev), y[dev]),
                       "probe_valence": rate(params, probe_rows)[:, 0].tolist()})
    report = {
        "layers": args.layers, "rank": args.rank, "epochs": args.epochs,
        "feature_seconds": round(feature_seconds, 1),
        "train_seconds": round(time.perf_counter() - t1, 1),
        "shipped": {"dev_r": pearson(shipped_dev, y[dev]), "probe_valence": shipped_probe},
        "tuned": epochs, "probes": list(PROBES),
    }
    _print(report)
    return report


def _print(report: dict[str, Any]) -> None:
    dims = ("valence", "arousal", "dominance")

    def row(name: str, entry: dict[str, Any]) -> None:
        r = " ".join(f"{d[:3]} {v:.3f}" for d, v in zip(dims, entry["dev_r"], strict=True))
        probes = " ".join(f"{v:+.2f}" for v in entry["probe_valence"])
        print(f"{name:<26} dev r: {r} | probe valence: {probes}")

    print(f"LoRA rank {report['rank']} on the top {report['layers']} layers; features "
          f"{report['feature_seconds']} s, training {report['train_seconds']} s")
    print("probes: " + " | ".join(report["probes"]))
    row("shipped head", report["shipped"])
    for entry in report["tuned"]:
        row(f"tuned, epoch {entry['epoch']}", entry)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--emobank", default=str(ROOT.parent / "shared/data/emobank_traindev.csv"))
    p.add_argument("--layers", type=positive_int, default=2, help="top encoder layers adapted")
    p.add_argument("--rank", type=positive_int, default=8, help="LoRA rank")
    p.add_argument("--epochs", type=positive_int, default=2)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--dropout", type=float, default=0.3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="also write the report here")
    args = p.parse_args(argv)
    report = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
