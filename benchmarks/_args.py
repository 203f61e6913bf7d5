"""Argument types shared by the benchmark scripts (``from _args import positive_int``:
a script's own folder is first on ``sys.path``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def int_at_least(low: int) -> Callable[[str], int]:
    """An ``argparse`` type: an integer >= ``low``, else a usage error.

    Args:
        low: the smallest value accepted.

    Returns:
        The parser of one argument.
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


positive_int = int_at_least(1)
"""An integer >= 1 (sizes, repeats, rounds)."""
non_negative_int = int_at_least(0)
"""An integer >= 0 (a size where 0 skips a part)."""
