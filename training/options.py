"""Options of ``python -m training fit`` / ``cv`` that only apply in some modes:
refused, naming them, where the chosen mode would silently ignore them."""

from __future__ import annotations

import argparse

__all__ = ["check_options", "wants_adapter"]


def wants_adapter(args: argparse.Namespace) -> bool:
    """Whether the batch keeps its embeddings: the adapter is trained or competes."""
    if args.trainable is None:
        return bool(args.lexical and args.adapter)
    return "adapter" in args.trainable


_SELECTION_ONLY = (  # dest, its default, the flag that changes it
    ("lexical", True, "--no-lexical"), ("adapter", True, "--no-adapter"),
    ("context", True, "--no-context"), ("calibrate", True, "--no-calibration"),
    ("select_by", "mrr", "--select-by"), ("tune", False, "--tune"),
    ("full_selection", False, "--full-selection"), ("tune_adapter", False, "--tune-adapter"),
)
_TUNING_ONLY = (("tune_layers", 1, "--tune-layers"), ("tune_steps", 100, "--tune-steps"),
                ("tune_rank", 8, "--tune-rank"), ("tune_folds", 2, "--tune-folds"))


def check_options(args: argparse.Namespace) -> None:
    """Refuse an option that the chosen mode would silently ignore: a selection option
    with ``--trainable``, an embedder-tuning one without ``--tune-embedder`` (or
    ``--tune-rank`` with ``last-layers``), an adapter one when no adapter is fitted.

    Args:
        args: parsed ``fit`` or ``cv`` arguments.

    Raises:
        ValueError: naming the option and what it needs.
    """
    if args.trainable is not None:
        given = [flag for dest, default, flag in _SELECTION_ONLY
                 if getattr(args, dest) != default]
        if given:
            raise ValueError(f"{given[0]} applies to the model selection, which "
                             "--trainable replaces: leave one of them out")
    tuning = [flag for dest, default, flag in _TUNING_ONLY if getattr(args, dest) != default]
    if tuning and not args.tune_embedder:
        raise ValueError(f"{tuning[0]} applies to --tune-embedder, which is not given")
    if args.tune_embedder == "last-layers" and args.tune_rank != 8:
        raise ValueError("--tune-rank is the LoRA rank: it applies to --tune-embedder lora, "
                         "not last-layers")
    adapter = [flag for dest, flag in (("adapter_rank", "--adapter-rank"),
                                       ("adapter_l2", "--adapter-l2"))
               if getattr(args, dest) is not None]
    if adapter and not wants_adapter(args):
        why = ("--trainable lacks adapter" if args.trainable is not None
               else "--no-adapter or --no-lexical leaves the adapter models out")
        raise ValueError(f"{adapter[0]} applies to a fitted query adapter, but {why}")
