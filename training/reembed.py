"""``python -m training reembed``: embed every memory of a store again.

    python -m training reembed --store sqlite:///memories.db --embedder minilm
                               [--batch-size 256] [--quiet]
    python -m training reembed --store sqlite:///memories.db --config fitted.json

``--config`` names a config written by ``fit --tune-embedder``: the store is
re-embedded with its fitted MiniLM (and records that embedder's identity, which
``serve --config fitted.json`` then finds).

Changing the embedder of a store that recorded another one (the service refuses to
start then) needs this once: see :func:`emotional_memory.reembed.reembed_store`
(batches in one transaction each, a progress bar, resumable: run the same command
again after an interruption). Stop every server and engine on the store first.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "run"]


def _fitted(config: str) -> Any:
    """The fitted MiniLM a ``fit --tune-embedder`` config names.

    Raises:
        ValueError: the config cannot be read, is invalid, names no fitted embedder,
            or its weights cannot be loaded (the message names the config).
    """
    from pydantic import ValidationError

    from emotional_memory._validation import validation_summary
    from emotional_memory.embedders.fitted import FittedMiniLMEmbedder, read_fitted_config

    try:
        _, weights = read_fitted_config(config)
        if weights is None:
            raise ValueError("it names no fitted embedder (use --embedder minilm or hashing)")
        return FittedMiniLMEmbedder(weights)
    except OSError as exc:  # the config or the weights file missing or unreadable
        raise ValueError(f"--config {config}: {exc.strerror or exc}") from None
    except ValidationError as exc:  # one line per field, not pydantic's dump
        raise ValueError(f"--config {config}: {validation_summary(exc)}") from None
    except ValueError as exc:
        raise ValueError(f"--config {config}: {exc}") from None


def _embedder(name: str) -> Any:
    if name == "hashing":
        from emotional_memory.embedders import HashingEmbedder

        return HashingEmbedder()
    from emotional_memory.embedders import MiniLMEmbedder

    return MiniLMEmbedder()


def _check_exists(url: str) -> None:
    """Refuse a store that would be made new and empty by opening it: a SQLite file
    that does not exist (a mistyped path), ``memory://``.

    Raises:
        ValueError: naming ``--store``.
    """
    from emotional_memory.stores._shared.urls import StoreURLError, sqlite_path

    scheme = url.partition("://")[0].lower()
    if scheme == "memory":
        raise ValueError("--store: memory:// is a new, empty store: nothing to re-embed")
    if scheme == "sqlite":
        try:
            path = Path(sqlite_path(url))
        except StoreURLError as exc:
            raise ValueError(f"--store: {exc}") from None
        if not path.is_file():
            raise ValueError(f"--store: no SQLite store at {str(path)!r} (nothing is "
                             "created: check the path)")


def run(args: argparse.Namespace) -> int:
    """Re-embed ``--store`` with ``--embedder``; print the report as JSON.

    Args:
        args: the parsed command line.

    Returns:
        0.

    Raises:
        ValueError: a bad URL, a store that does not exist, a bad batch size,
            embedder or config (printed by the CLI).
    """
    from emotional_memory.reembed import reembed_store
    from emotional_memory.stores.registry import StoreURLError, open_store

    _check_exists(args.store)
    try:
        opened = open_store(args.store)
    except (StoreURLError, sqlite3.Error) as exc:  # also a file that is no database
        raise ValueError(f"--store: {exc}") from None
    try:
        embedder = _fitted(args.config) if args.config else _embedder(args.embedder)
        report = reembed_store(opened.store, embedder,
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
                   help="the URL of an existing store (sqlite:///PATH, postgresql://..., ...)")
    new = p.add_mutually_exclusive_group(required=True)
    new.add_argument("--embedder", choices=("minilm", "hashing"), help="the new embedder")
    new.add_argument("--config", metavar="FITTED.json",
                     help="a config from fit --tune-embedder: its fitted MiniLM is the new "
                     "embedder")
    from training.cli import int_at_least

    p.add_argument("--batch-size", type=int_at_least(1), default=256,
                   help="memories per batch (one transaction each)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
