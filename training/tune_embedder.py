"""``fit --tune-embedder``: fine-tune the MiniLM after the scoring model is chosen.

    python -m training fit --dataset D.json --embeddings D.minilm.npz --out fit.json \\
        --tune-embedder            # = lora; or --tune-embedder last-layers

After the usual model choice, the MiniLM's top layers (``last-layers``) or low-rank
adapters on them (``lora``) are trained jointly with the chosen model's base weights
(:mod:`emotional_memory.learn.embedder_tuning`); inner scenario-grouped CV keeps them
only when they rank held-out queries better. The weights then go beside the config
(``fit.embedder.<digest>.safetensors``: a refit never overwrites the weights an
existing config names), which names them; ``evaluate`` and ``cv`` with that
config embed with them (:class:`~emotional_memory.embedders.fitted.FittedMiniLMEmbedder`).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from emotional_memory.engine import EmotionalMemoryConfig
from emotional_memory.interfaces import Embedder
from emotional_memory.learn.recall_batch import RecallBatch, RecallInfo

__all__ = [
    "add_arguments",
    "fitted_embedder",
    "tune_after_fit",
    "tuning_options",
    "weights_path",
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``--tune-embedder`` options of ``fit`` and ``cv``.

    Args:
        p: the ``fit`` or ``cv`` parser.
    """
    where = ("weights beside --out" if p.prog.endswith(" fit")
             else "in each fold, nothing written")
    p.add_argument("--tune-embedder", choices=("last-layers", "lora"), default=None,
                   nargs="?", const="lora",
                   help="also fine-tune the MiniLM (LoRA adapters on its top layers, the "
                        "default, or the top layers themselves) when inner CV says it "
                        f"pays; {where}")
    from training.cli import int_at_least

    p.add_argument("--tune-layers", type=int_at_least(1), default=1,
                   help="top encoder layers tuned (default 1; the rest are cached)")
    p.add_argument("--tune-steps", type=int_at_least(0), default=100,
                   help="optimiser steps of each embedder tuning (default 100)")
    p.add_argument("--tune-rank", type=int_at_least(1), default=8,
                   help="LoRA rank (default 8)")
    p.add_argument("--tune-folds", type=int_at_least(2), default=2,
                   help="inner folds deciding whether tuning pays (default 2)")


def tuning_options(args: argparse.Namespace) -> Any:
    """The :class:`~emotional_memory.learn.embedder_tuning.EmbedderTuning` the
    ``--tune-*`` options ask for, or None without ``--tune-embedder``.

    Args:
        args: parsed ``fit`` or ``cv`` arguments.

    Returns:
        The options, or None.
    """
    if not args.tune_embedder:
        return None
    from emotional_memory.learn.embedder_tuning import EmbedderTuning

    return EmbedderTuning(mode=args.tune_embedder, layers=args.tune_layers,
                          steps=args.tune_steps, rank=args.tune_rank)


def check_tuned_width(args: argparse.Namespace, embedder: Embedder) -> None:
    """Refuse ``--tune-embedder`` over an ``--embeddings`` table whose vectors are not
    the MiniLM's width (before any replay): the tuned MiniLM replaces those vectors,
    and a query adapter fitted on them could not take its.

    Args:
        args: parsed ``fit`` or ``cv`` arguments.
        embedder: the embedder the fit replays with.

    Raises:
        ValueError: naming both options and both widths.
    """
    if not args.tune_embedder or args.embeddings is None:
        return
    from emotional_memory.embedders.minilm import MiniLMEmbedder

    width, tuned = getattr(embedder, "dim", None), MiniLMEmbedder().dim
    if width is not None and width != tuned:
        raise ValueError(f"--tune-embedder tunes the MiniLM ({tuned}-d), but --embeddings "
                         f"{args.embeddings} holds {width}-d vectors: give the MiniLM's "
                         "embeddings of the texts, or leave --embeddings out")


def weights_path(out: str | Path, digest: str) -> Path:
    """Where the fitted weights of config ``out`` go: ``<stem>.embedder.<digest>.safetensors``.

    Named by their digest, so the weights an earlier config names are never replaced
    (the weights are written before the config, which may then fail to be written).

    Args:
        out: the config path.
        digest: the digest :func:`~emotional_memory.embedders.fitted.save_fitted_weights`
            returned.

    Returns:
        The weights path, in the config's folder.
    """
    path = Path(out)
    return path.with_name(f"{path.stem}.embedder.{digest}.safetensors")


def fitted_embedder(config_path: str | None) -> Embedder | None:
    """The fitted embedder a config names, or None (no config, or a plain one).

    Args:
        config_path: the ``--config`` argument.

    Returns:
        A :class:`~emotional_memory.embedders.fitted.FittedMiniLMEmbedder`, or None.
    """
    if config_path is None:
        return None
    from emotional_memory.embedders.fitted import FittedMiniLMEmbedder, read_fitted_config

    _, weights = read_fitted_config(config_path)
    return None if weights is None else FittedMiniLMEmbedder(weights)


def tune_after_fit(
    args: argparse.Namespace, data: dict[str, Any], batch: RecallBatch, info: RecallInfo,
    config: EmotionalMemoryConfig, embedder: Embedder,
) -> tuple[EmotionalMemoryConfig, Embedder, Path | None, dict[str, Any]]:
    """Tune the embedder for the chosen model and save it when it wins.

    Args:
        args: the ``fit`` arguments (``tune_*``, ``out``, ``quiet``, ``select_by``).
        data: the dataset.
        batch: the chosen model's recall batch.
        info: its metadata.
        config: the chosen (fitted) config.
        embedder: the embedder of the fit (a MiniLM; otherwise the installed one is used
            as the base).

    Returns:
        ``(config, embedder, weights, report)``: the config and embedder to use, the
        weights written (None when tuning did not win) and a report.
    """
    from emotional_memory.embedders.fitted import FittedMiniLMEmbedder, save_fitted_weights
    from emotional_memory.embedders.minilm import MiniLMEmbedder
    from emotional_memory.learn.embedder_tuning import tune_embedder

    base = embedder if isinstance(embedder, MiniLMEmbedder) else MiniLMEmbedder()
    options = tuning_options(args)
    result = tune_embedder(data, batch, info, config, base, options, folds=args.tune_folds,
                           select_by=getattr(args, "select_by", "mrr"),
                           progress=not args.quiet)
    report: dict[str, Any] = {"mode": options.mode, "layers": options.layers,
                              "steps": options.steps, "selected": result.selected,
                              "table": result.table, "seconds": result.seconds}
    if result.model is None:
        return config, embedder, None, report
    folder = Path(args.out).parent
    with tempfile.TemporaryDirectory(dir=folder, prefix=".weights-") as staging:
        staged = Path(staging) / "weights.safetensors"
        digest = save_fitted_weights(result.model, base.model, staged,
                                     base_name=base.identity.rsplit("/", 1)[0])
        target = weights_path(args.out, digest)
        os.replace(staged, target)  # same folder: whole or not at all
    fitted = FittedMiniLMEmbedder(target, base.model_dir)
    report.update(weights=str(target), identity=fitted.identity, digest=digest)
    if not args.quiet:
        print(f"embedder tuning selected: weights in {target} ({fitted.identity})",
              file=sys.stderr)
    return result.config, fitted, target, report
