"""``python -m training reembed``: embed every memory of a store again.

    python -m training reembed --store sqlite:///memories.db --embedder minilm
                               [--batch-size 256] [--quiet]

Changing the embedder of a store that recorded another one (the service refuses to
start then) needs this once: see :func:`emotional_memory.reembed.reembed_store`
(batches in one transaction each, a progress bar, resumable: run the same command
again after an interruption). Stop every server and engine on the store first.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["add_parser", "run"]


def _embedder(name: str) -> Any:
    if name == "hashing":
        from emotional_memory.embedders import HashingEmbedder

        return HashingEmbedder()
    from emotional_memory.embedders import MiniLMEmbedder

    return MiniLMEmbedder()


def run(args: argparse.Namespace) -> int:
    """Re-embed ``--store`` with ``--embedder``; print the report as JSON.

    Args:
        args: the parsed command line.

    Returns:
        0.

    Raises:
        ValueError: a bad URL, batch size or embedder (printed by the CLI).
    """
    from emotional_memory.reembed import reembed_store
    from emotional_memory.stores.registry import StoreURLError, open_store

    try:
        opened = open_store(args.store)
    except StoreURLError as exc:
        raise ValueError(f"--store: {exc}") from None
    try:
        report = reembed_store(opened.store, _embedder(args.embedder),
                               batch_size=args.batch_size, progress=not args.quiet)
    finally:
        opened.close()
    print(json.dumps(report.__dict__))
    return 0


def add_parser(sub: Any) -> None:
    """Register the ``reembed`` sub-command.

    Args:
        sub: the object returned by ``ArgumentParser.add_subparsers``.
    """
    p = sub.add_parser("reembed", help="embed every memory of a store again (resumable)")
    p.add_argument("--store", required=True,
                   help="the store's URL (sqlite:///PATH, postgresql://..., memory://, ...)")
    p.add_argument("--embedder", choices=("minilm", "hashing"), required=True,
                   help="the new embedder")
    from training.cli import int_at_least

    p.add_argument("--batch-size", type=int_at_least(1), default=256,
                   help="memories per batch (one transaction each)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
