"""Progress bars for long loops (fits, replays, encodes), drawn by tqdm on stderr."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")


def progress_iter(
    items: Iterable[T], label: str, *, enabled: bool = True, total: int | None = None,
    width: int = 28,
) -> Iterator[T]:
    """Yield ``items`` while tqdm draws a one-line bar on stderr.

    Args:
        items: the iterable.
        label: text before the bar.
        enabled: False makes this a plain pass-through (no tqdm object at all).
        total: number of items (default ``len(items)`` when available).
        width: bar width in characters.

    Yields:
        The items, unchanged.
    """
    if not enabled:
        yield from items
        return
    with tqdm(
        items,
        desc=label,
        total=total,
        file=sys.stderr,
        ncols=len(label) + width + 40,
        mininterval=0.1,
        ascii=" #",
    ) as bar:
        yield from bar
