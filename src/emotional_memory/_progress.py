"""A dependency-free progress bar for long loops (fits, replays, encodes)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator, Sized
from typing import TypeVar

T = TypeVar("T")


def progress_iter(
    items: Iterable[T], label: str, *, enabled: bool = True, total: int | None = None,
    width: int = 28,
) -> Iterator[T]:
    """Yield ``items`` while drawing a one-line bar on stderr.

    Args:
        items: the iterable.
        label: text before the bar.
        enabled: False makes this a plain pass-through.
        total: number of items (default ``len(items)`` when available).
        width: bar width in characters.

    Yields:
        The items, unchanged.
    """
    if not enabled:
        yield from items
        return
    n = total if total is not None else (len(items) if isinstance(items, Sized) else None)
    start = time.perf_counter()
    last = 0.0
    done = 0

    def draw(final: bool = False) -> None:
        elapsed = time.perf_counter() - start
        if n:
            filled = int(width * done / n)
            bar = "#" * filled + "-" * (width - filled)
            text = f"\r{label} [{bar}] {done}/{n} {elapsed:5.1f}s"
        else:
            text = f"\r{label} {done} {elapsed:5.1f}s"
        sys.stderr.write(text + ("\n" if final else ""))
        sys.stderr.flush()

    for item in items:
        yield item
        done += 1
        now = time.perf_counter()
        if now - last > 0.1:
            draw()
            last = now
    draw(final=True)
