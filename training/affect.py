"""Train and select the text-to-affect head on EmoBank (``python -m training affect``).

    python -m training affect --emobank emobank_traindev.csv [--out affect_head.npz]
                              [--memory-events realistic_recall_v2.json]
                              [--cache /tmp/emobank_features.npz] [--json]

EmoBank (Buechel & Hahn 2017, EACL; github.com/JULIELab/EmoBank, CC-BY-SA 4.0) rates
sentences on valence, arousal and dominance (1-5).  The CSV needs the columns
``split`` (``train`` / ``dev``; other splits are ignored), ``V``, ``A``, ``D`` and
``text``.  Protocol:

1. Every sentence is encoded once by the frozen :class:`MiniLMEmbedder`
   (:meth:`~MiniLMEmbedder.pooled_layers`; optionally cached in ``--cache``).
2. Baseline: ridge regression on the mean-pooled sentence embedding, its ridge
   strength chosen on dev (reported only).
3. Each candidate of the grid (feature set, hidden width, weight decay, dropout,
   epochs) trains one member on the TRAIN split; it is scored by the mean over the
   three dimensions of the dev Pearson r.  Dev is used for this choice only.
4. With ``--memory-events``, labelled first-person events join TRAIN, repeated by a
   weight chosen by scenario-grouped CV (training/affect_memory.py); the events'
   out-of-fold predictions also fit the output scale of valence and arousal on the
   memory register, kept per axis where it lowers held-out error
   (training/affect_calibration.py).
5. The chosen candidate is retrained with ``--members`` seeds on TRAIN (plus the
   weighted events); the average of the members is the head, written to ``--out``.

Training: minibatch AdamW (:func:`optax.adamw`) on a warm-up + cosine schedule
(:func:`optax.warmup_cosine_decay_schedule`), mean squared error on standardised
targets, dropout on the standardised inputs and on the hidden layer.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import sys
import time
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
import optax

from emotional_memory._files import replaced_whole
from emotional_memory._progress import progress_iter
from emotional_memory.appraisal_embedding import (
    AffectHead,
    emobank_to_affect,
    pooled_feature_matrix,
    save_affect_head,
)
from training.affect_calibration import calibrated_head, fit_register_calibration

__all__ = [
    "HeadConfig",
    "Member",
    "add_parser",
    "default_grid",
    "fit_head",
    "fit_member",
    "load_emobank",
    "pearson",
    "ridge_baseline",
]

FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True)
class HeadConfig:
    """Hyper-parameters of one head candidate.

    Attributes:
        layers: MiniLM encoder layers whose pooled states are features (0-based).
        poolings: which poolings (``"mean"``, ``"max"``) of those layers.
        hidden: hidden width.
        weight_decay: AdamW decoupled weight decay.
        dropout: dropout rate on the standardised inputs and the hidden layer.
        epochs: passes over the training split.
        lr: peak learning rate.
        batch_size: minibatch size.
    """

    layers: tuple[int, ...] = (0, 1, 2, 3, 4, 5)
    poolings: tuple[str, ...] = ("mean",)
    hidden: int = 64
    weight_decay: float = 0.05
    dropout: float = 0.2
    epochs: int = 40
    lr: float = 1e-3
    batch_size: int = 128


class Member(eqx.Module):
    """One ensemble member: ``gelu(z @ w1 + b1) @ w2 + b2`` on standardised ``z``."""

    w1: jax.Array
    b1: jax.Array
    w2: jax.Array
    b2: jax.Array

    @classmethod
    def init(cls, key: jax.Array, n_in: int, hidden: int) -> Member:
        """He-style initialisation (output layer scaled down).

        Args:
            key: PRNG key.
            n_in: input width.
            hidden: hidden width.

        Returns:
            A fresh member.
        """
        k1, k2 = jax.random.split(key)
        return cls(
            w1=jax.random.normal(k1, (n_in, hidden)) * jnp.sqrt(1.0 / n_in),
            b1=jnp.zeros((hidden,)),
            w2=jax.random.normal(k2, (hidden, 3)) * jnp.sqrt(0.1 / hidden),
            b2=jnp.zeros((3,)),
        )

    def __call__(self, z: jax.Array, key: jax.Array | None = None, rate: float = 0.0) -> jax.Array:
        """Forward pass, with dropout when ``key`` is given.

        Args:
            z: ``(B, F)`` standardised features.
            key: PRNG key for dropout (``None``: no dropout).
            rate: dropout rate.

        Returns:
            ``(B, 3)`` standardised predictions.
        """
        if key is not None and rate > 0.0:
            k1, k2 = jax.random.split(key)
            z = z * jax.random.bernoulli(k1, 1.0 - rate, z.shape) / (1.0 - rate)
        h = jax.nn.gelu(z @ self.w1 + self.b1, approximate=True)
        if key is not None and rate > 0.0:
            h = h * jax.random.bernoulli(k2, 1.0 - rate, h.shape) / (1.0 - rate)
        return h @ self.w2 + self.b2


def _loss(member: Member, z: jax.Array, y: jax.Array, key: jax.Array, rate: float) -> jax.Array:
    """Mean squared error of one minibatch (standardised targets)."""
    return jnp.mean((member(z, key, rate) - y) ** 2)


def pearson(pred: npt.ArrayLike, target: npt.ArrayLike) -> list[float]:
    """Pearson r per column.

    Args:
        pred: ``(N, K)`` predictions.
        target: ``(N, K)`` targets.

    Returns:
        ``K`` correlations (0.0 for a constant column).
    """
    p = np.asarray(pred, dtype=np.float64)
    t = np.asarray(target, dtype=np.float64)
    p = p - p.mean(axis=0)
    t = t - t.mean(axis=0)
    denom = np.sqrt((p * p).sum(axis=0) * (t * t).sum(axis=0))
    safe = np.where(denom > 0, denom, 1.0)
    return [float(v) for v in np.where(denom > 0, (p * t).sum(axis=0) / safe, 0.0)]


def fit_member(
    z: FloatArray,
    y: FloatArray,
    config: HeadConfig,
    seed: int,
    *,
    z_val: FloatArray | None = None,
    y_val: FloatArray | None = None,
    progress: bool = False,
) -> tuple[Member, dict[str, list[float]]]:
    """Train one member on standardised features and targets.

    Args:
        z: ``(N, F)`` standardised training features.
        y: ``(N, 3)`` standardised training targets.
        config: hyper-parameters (``epochs``, ``batch_size``, ``lr``, ...).
        seed: seeds the initialisation, the minibatch order and dropout.
        z_val, y_val: optional validation data; when given, the history records its
            loss after every epoch (it never affects training).
        progress: draw a progress bar over epochs.

    Returns:
        The trained member and its history: ``train_loss`` (mean minibatch loss per
        epoch) and, with validation data, ``val_loss``.
    """
    n = len(z)
    batch = min(config.batch_size, n)
    steps_per_epoch = max(1, n // batch)
    total = steps_per_epoch * config.epochs
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=config.lr, warmup_steps=max(1, total // 20),
        decay_steps=max(2, total), end_value=config.lr * 0.01,
    )
    optimizer = optax.adamw(schedule, weight_decay=config.weight_decay)
    key = jax.random.PRNGKey(seed)
    init_key, drop_key = jax.random.split(key)
    member = Member.init(init_key, z.shape[1], config.hidden)
    opt_state = optimizer.init(member)
    zj, yj = jnp.asarray(z, jnp.float32), jnp.asarray(y, jnp.float32)
    rate = float(config.dropout)

    @eqx.filter_jit
    def step(
        member: Member, opt_state: Any, idx: jax.Array, key: jax.Array
    ) -> tuple[Member, Any, jax.Array]:
        loss, grads = eqx.filter_value_and_grad(_loss)(member, zj[idx], yj[idx], key, rate)
        updates, opt_state = optimizer.update(grads, opt_state, member)
        return optax.apply_updates(member, updates), opt_state, loss

    @eqx.filter_jit
    def evaluate(member: Member, zv: jax.Array, yv: jax.Array) -> jax.Array:
        return jnp.mean((member(zv) - yv) ** 2)

    rng = np.random.default_rng(seed)
    history: dict[str, list[float]] = {"train_loss": []}
    if z_val is not None and y_val is not None:
        history["val_loss"] = []
    epochs: Iterable[int] = range(config.epochs)
    if progress:
        epochs = progress_iter(epochs, "affect head", total=config.epochs)
    for epoch in epochs:
        order = rng.permutation(n)
        losses = []
        for b in range(steps_per_epoch):
            idx = jnp.asarray(order[b * batch : (b + 1) * batch])
            member, opt_state, loss = step(
                member, opt_state, idx, jax.random.fold_in(drop_key, epoch * steps_per_epoch + b)
            )
            losses.append(loss)
        history["train_loss"].append(float(jnp.mean(jnp.stack(losses))))
        if "val_loss" in history:
            history["val_loss"].append(
                float(evaluate(member, jnp.asarray(z_val), jnp.asarray(y_val)))
            )
    return member, history


def _stats(x: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Column mean and (floored) standard deviation."""
    mean = x.mean(axis=0).astype(np.float32)
    scale = np.maximum(x.std(axis=0), 1e-6).astype(np.float32)
    return mean, scale


def fit_head(
    x: FloatArray, y: FloatArray, config: HeadConfig, seeds: Sequence[int], *,
    feature: str = "minilm_pooled", progress: bool = False,
) -> AffectHead:
    """Train an ensemble head on raw features and affect-range targets.

    Args:
        x: ``(N, F)`` features (as :func:`pooled_feature_matrix` builds them for
            ``config.layers`` / ``config.poolings``, or sentence embeddings).
        y: ``(N, 3)`` targets in affect ranges (see :func:`emobank_to_affect`).
        config: hyper-parameters.
        seeds: one member per seed.
        feature: the head's feature kind (``"minilm_pooled"`` or ``"embedding"``).
        progress: progress bars.

    Returns:
        The :class:`AffectHead` averaging the members.
    """
    x_mean, x_scale = _stats(x)
    y_mean, y_scale = _stats(y)
    z = (x - x_mean) / x_scale
    t = (y - y_mean) / y_scale
    members = [fit_member(z, t, config, s, progress=progress)[0] for s in seeds]
    pooled = feature == "minilm_pooled"
    return AffectHead(
        x_mean=jnp.asarray(x_mean), x_scale=jnp.asarray(x_scale),
        w1=jnp.stack([m.w1 for m in members]), b1=jnp.stack([m.b1 for m in members]),
        w2=jnp.stack([m.w2 for m in members]), b2=jnp.stack([m.b2 for m in members]),
        y_mean=jnp.asarray(y_mean), y_scale=jnp.asarray(y_scale),
        feature=feature,
        layers=tuple(config.layers) if pooled else (),
        poolings=tuple(config.poolings) if pooled else (),
    )


def ridge_baseline(
    x_train: FloatArray, y_train: FloatArray, x_dev: FloatArray, y_dev: FloatArray,
    alphas: Sequence[float] = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0),
) -> dict[str, Any]:
    """Ridge regression (standardised inputs), its strength chosen on dev.

    Args:
        x_train, y_train: training features and targets.
        x_dev, y_dev: dev features and targets.
        alphas: candidate ridge strengths.

    Returns:
        ``{"alpha": best, "dev_r": [r_v, r_a, r_d]}`` for the alpha with the best mean r.
    """
    mean, scale = _stats(x_train)
    zt = ((x_train - mean) / scale).astype(np.float64)
    zd = ((x_dev - mean) / scale).astype(np.float64)
    yc = y_train - y_train.mean(axis=0)
    gram, rhs = zt.T @ zt, zt.T @ yc
    best: dict[str, Any] = {}
    for alpha in alphas:
        w = np.linalg.solve(gram + alpha * np.eye(len(gram)), rhs)
        r = pearson(zd @ w, y_dev)
        if not best or np.mean(r) > np.mean(best["dev_r"]):
            best = {"alpha": float(alpha), "dev_r": r}
    return best


# --------------------------------------------------------------------------- data


def load_emobank(path: str | Path) -> tuple[list[str], npt.NDArray[np.str_], FloatArray]:
    """Read an EmoBank CSV (``split, V, A, D, text``; other columns ignored).

    Args:
        path: the CSV.

    Returns:
        ``(texts, splits, vad)`` with ``vad`` ``(N, 3)`` on EmoBank's 1-5 scale.

    Raises:
        FileNotFoundError: when the file does not exist.
        IsADirectoryError: when ``path`` is a folder.
        ValueError: a required column is missing or the file is not UTF-8 (the file
            named), or a rating is no number in [1, 5] (the row named).
    """
    p = Path(path)
    if p.is_dir():
        raise IsADirectoryError(f"EmoBank CSV {str(p)!r} is a directory, not a CSV file")
    if not p.is_file():
        raise FileNotFoundError(f"EmoBank CSV {str(p)!r} does not exist")
    try:
        with p.open(encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            missing = {"split", "V", "A", "D", "text"} - set(reader.fieldnames or ())
            if missing:
                raise ValueError(f"EmoBank CSV {str(p)!r} lacks the column(s) "
                                 f"{sorted(missing)} (needs split, V, A, D, text)")
            rows = list(reader)
    except UnicodeDecodeError as exc:
        raise ValueError(f"EmoBank CSV {str(p)!r} is not UTF-8 ({exc.reason} at byte "
                         f"{exc.start})") from None
    texts = [r["text"] or "" for r in rows]
    splits = np.array([r["split"] or "" for r in rows])
    # row 1 is the header: a data row's number is its line's in a spreadsheet
    vad = np.array([[_rating(p, i + 2, r, k) for k in "VAD"] for i, r in enumerate(rows)],
                   np.float32).reshape(len(rows), 3)
    return texts, splits, vad


def _rating(path: Path, row: int, record: dict[str, Any], key: str) -> float:
    """One EmoBank rating: a finite number on the 1-5 scale (ValueError naming the
    file, row and column otherwise)."""
    raw = record.get(key)
    try:
        value = float(raw) if raw is not None else math.nan
    except ValueError:
        value = math.nan
    if not 1.0 <= value <= 5.0:  # NaN fails too
        raise ValueError(f"EmoBank CSV {str(path)!r} row {row}: {key!r} must be a number "
                         f"in [1, 5], got {raw!r}")
    return value


def _cached_features(cache: str, texts: list[str]) -> FloatArray | None:
    """The pooled states ``cache`` holds for exactly ``texts``, or None (a cache of
    other texts, or one that cannot be read: said on stderr)."""
    try:
        with np.load(cache, allow_pickle=False) as z:
            cached_texts, pooled = list(z["texts"]), np.asarray(z["pooled"], np.float32)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        print(f"cache {cache} cannot be read ({type(exc).__name__}); recomputing",
              file=sys.stderr)
        return None
    if cached_texts == texts and pooled.ndim == 4 and pooled.shape[0] == len(texts):
        return pooled
    print(f"cache {cache} holds other texts; recomputing", file=sys.stderr)
    return None


def _features(texts: list[str], cache: str | None, progress: bool) -> FloatArray:
    """``(N, n_layers, 2, H)`` pooled MiniLM states, read from / written to ``cache``
    (that very file, written whole; one that cannot be read is recomputed)."""
    if cache is not None and Path(cache).is_file():
        cached = _cached_features(cache, texts)
        if cached is not None:
            return cached
    from emotional_memory.embedders.minilm import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    chunk = 512
    parts = [
        embedder.pooled_layers(texts[i : i + chunk])
        for i in progress_iter(range(0, len(texts), chunk), "MiniLM", enabled=progress)
    ]
    pooled = np.concatenate(parts) if parts else np.zeros((0, 6, 2, embedder.dim), np.float32)
    if cache is not None:  # a file object: np.savez adds no ".npz" to the name
        with replaced_whole(cache) as temporary, temporary.open("wb") as file:
            np.savez(file, texts=np.array(texts), pooled=pooled)
    return pooled


def default_grid() -> list[HeadConfig]:
    """The candidates searched by ``python -m training affect`` (16 configurations).

    Hidden widths stop at 64 so that five members stay under 2 MB in float16.
    """
    return [
        HeadConfig(layers=layers, hidden=hidden, dropout=dropout, epochs=epochs)
        for layers, hidden, dropout, epochs in itertools.product(
            ((0, 1, 2, 3, 4, 5), (1, 2, 3, 4, 5)), (32, 64), (0.3, 0.5), (10, 20)
        )
    ]


def run(args: argparse.Namespace) -> int:
    """Train, select on dev and write the head (the ``affect`` sub-command).

    Args:
        args: parsed arguments (``emobank``, ``out``, ``cache``, ``members``, ``json``,
            ``quiet``, ``quick``, ``memory_events``, ``memory_weights``).

    Returns:
        Exit status 0; a report is printed (one JSON object with ``--json``).
    """
    from training.cli import check_not_an_input, check_out_file

    # before minutes of features and training; no output may replace an input
    inputs = {"--emobank": args.emobank, "--memory-events": args.memory_events}
    check_not_an_input("--out", check_out_file("--out", args.out), inputs)
    if args.cache is not None:
        # a matching cache is only read: it may lie in a read-only place
        check_not_an_input("--cache", check_out_file("--cache", args.cache, probe=False),
                           {**inputs, "--out": args.out})
    progress = not args.quiet
    t0 = time.perf_counter()
    texts, splits, vad = load_emobank(args.emobank)
    train, dev = splits == "train", splits == "dev"
    if not train.any() or not dev.any():
        raise ValueError(f"{args.emobank}: the EmoBank CSV needs rows of split 'train' "
                         "and of split 'dev'")
    y = emobank_to_affect(vad).astype(np.float32)
    memory = None
    if args.memory_weights is not None and args.memory_events is None:
        raise ValueError("--memory-weights needs --memory-events")
    if args.memory_events is not None:
        from training.affect_memory import load_memory_events

        memory = load_memory_events(args.memory_events)
    all_pooled = _features(texts + (memory.texts if memory else []), args.cache, progress)
    pooled, memory_pooled = all_pooled[: len(texts)], all_pooled[len(texts):]

    sentence = pooled[:, -1, 0, :]
    sentence = sentence / np.maximum(np.linalg.norm(sentence, axis=1, keepdims=True), 1e-12)
    ridge = ridge_baseline(sentence[train], y[train], sentence[dev], y[dev])

    grid = default_grid()
    if args.quick:
        grid = [replace(grid[0], epochs=2)]
    results: list[dict[str, Any]] = []
    scores: list[float] = []
    heads: list[AffectHead] = []
    for config in progress_iter(grid, "selection", enabled=progress):
        x = pooled_feature_matrix(pooled, config.layers, config.poolings)
        heads.append(fit_head(x[train], y[train], config, seeds=(0,)))
        r = pearson(np.asarray(heads[-1](jnp.asarray(x[dev]))), y[dev])
        scores.append(float(np.mean(r)))
        results.append({"config": asdict(config), "dev_r": r, "mean_r": scores[-1]})
    best = int(np.argmax(scores))
    chosen = grid[best]
    x = pooled_feature_matrix(pooled, chosen.layers, chosen.poolings)
    x_train, y_train = x[train], y[train]
    memory_report: dict[str, Any] = {}
    calibration = None
    if memory is not None:
        from training.affect_memory import select_memory_weight, with_memory_rows

        xm = pooled_feature_matrix(memory_pooled, chosen.layers, chosen.poolings)
        dominance = np.asarray(heads[best](jnp.asarray(xm)))[:, 2:]
        ym = np.concatenate([memory.va, dominance], axis=1).astype(np.float32)
        choice = select_memory_weight(
            (x_train, y_train), (x[dev], y[dev]), (xm, ym), memory.groups, chosen,
            args.memory_weights or (0, 1, 2, 3), progress=progress,
        )
        x_train, y_train = with_memory_rows(x_train, y_train, xm, ym, choice.weight)
        calibration = fit_register_calibration(choice.oof, memory.va, memory.groups)
        memory_report = {"memory_events": len(memory), "memory_weight": choice.weight,
                         "memory_candidates": choice.reports,
                         "register_calibration": calibration.report}
    seeds = tuple(range(args.members))
    head = fit_head(x_train, y_train, chosen, seeds=seeds, progress=progress)
    if calibration is not None:
        head = calibrated_head(head, calibration)
    dev_r = pearson(np.asarray(head(jnp.asarray(x[dev]))), y[dev])
    report = {
        "out": str(args.out),
        "n_train": int(train.sum()),
        "n_dev": int(dev.sum()),
        "chosen": asdict(chosen),
        "members": len(seeds),
        "dev_r": dict(zip(("valence", "arousal", "dominance"), dev_r, strict=True)),
        "ridge_dev_r": dict(zip(("valence", "arousal", "dominance"), ridge["dev_r"],
                                strict=True)),
        "ridge_alpha": ridge["alpha"],
        **memory_report,
        "candidates": results,
        "seconds": time.perf_counter() - t0,
    }
    keys = ("chosen", "members", "dev_r", "ridge_dev_r", "memory_events", "memory_weight",
            "memory_candidates", "register_calibration")
    metadata = json.dumps({k: report[k] for k in keys if k in report})
    out = save_affect_head(head, args.out, metadata=metadata)
    report["bytes"] = out.stat().st_size
    if args.json:
        print(json.dumps(report))
    else:
        for key in ("out", "bytes", "chosen", "members", "dev_r", "ridge_dev_r",
                    "memory_events", "memory_weight", "memory_candidates",
                    "register_calibration", "seconds"):
            if key in report:
                print(f"{key:12} {report[key]}")
    return 0


def _weights(text: str) -> tuple[int, ...]:
    """Parse ``--memory-weights`` (comma-separated integers >= 0)."""
    try:
        out = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 0,1,2, got {text!r}") from None
    if any(w < 0 or w > 100 for w in out):
        raise argparse.ArgumentTypeError(f"weights must be in 0..100, got {text!r}")
    return out


def add_parser(sub: Any) -> None:
    """Register the ``affect`` sub-command on an ``argparse`` sub-parser collection.

    Args:
        sub: the object returned by ``ArgumentParser.add_subparsers``.
    """
    p = sub.add_parser("affect", help="train the text-to-affect head on EmoBank")
    p.add_argument("--emobank", required=True, help="EmoBank CSV (split, V, A, D, text)")
    p.add_argument("--out", default="affect_head.npz",
                   help="where to write the head (default affect_head.npz)")
    p.add_argument("--cache", default=None,
                   help=".npz to cache the MiniLM features in (reused when it matches)")
    from training.cli import int_at_least

    p.add_argument("--members", type=int_at_least(1), default=5,
                   help="ensemble size (seeds; default 5)")
    p.add_argument("--memory-events", default=None, metavar="DATASET.json",
                   help="realistic-recall-format events with valence/arousal, added to the "
                        "training rows (training/affect_memory.py)")
    p.add_argument("--memory-weights", type=_weights, default=None,
                   help="comma-separated repetitions of the memory rows to choose among "
                        "by scenario-grouped CV (default 0,1,2,3)")
    p.add_argument("--quick", action="store_true",
                   help="one 2-epoch candidate (smoke test; not for shipping)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)
