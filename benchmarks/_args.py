"""Argument types shared by the benchmark scripts (``from _args import positive_int``:
a script's own folder is first on ``sys.path``)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An ``argparse`` type: an integer >= 1 (sizes, repeats, rounds), else a usage error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An ``argparse`` type: an integer >= 0 (a size where 0 skips a part)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value
