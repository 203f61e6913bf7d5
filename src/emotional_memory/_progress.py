"""Progress bars for long loops (fits, replays, encodes), drawn by tqdm on stderr."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

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


class _NoBar:
    """A bar that draws nothing (``update`` does nothing)."""

    def update(self, n: int = 1) -> None:
        """Nothing."""

    def close(self) -> None:
        """Nothing."""


def progress_counter(
    label: str, total: int, *, initial: int = 0, unit: str = "it", enabled: bool = True,
    width: int = 28,
) -> Any:
    """A tqdm bar on stderr counting ``unit`` up to ``total``, advanced by ``update(n)``.

    Args:
        label: text before the bar.
        total: the count at the end.
        initial: the count already done (a resumed job's).
        unit: what is counted (tqdm's ``unit``).
        enabled: False, or nothing left to count (``initial >= total``): a bar that
            draws nothing.
        width: bar width in characters.

    Returns:
        An object with ``update(n)`` and ``close()`` (a tqdm bar, or a silent one).
    """
    if not enabled or initial >= total:
        return _NoBar()
    return tqdm(
        desc=label, total=total, initial=initial, unit=unit, file=sys.stderr,
        ncols=len(label) + width + 40, mininterval=0.1, ascii=" #",
    )
