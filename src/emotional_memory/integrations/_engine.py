"""The engine an integration wraps: checked once, alike for every integration."""

from __future__ import annotations

import inspect
from collections.abc import Sequence


def check_sync_engine(em: object, methods: Sequence[str]) -> None:
    """``em`` is a synchronous engine (or engine view) with ``methods``.

    Args:
        em: what the integration was given.
        methods: the engine methods the integration calls.

    Raises:
        TypeError: a method missing, or coroutine methods (an ``AsyncEmotionalMemory``:
            the message says to pass its ``.engine``).
    """
    missing = [n for n in methods if not callable(getattr(em, n, None))]
    if missing:
        raise TypeError(f"em must be an EmotionalMemory (or engine view), got "
                        f"{type(em).__name__} without {missing[0]}()")
    if any(inspect.iscoroutinefunction(getattr(em, n)) for n in methods):
        raise TypeError(f"em must be an EmotionalMemory (or engine view), got "
                        f"{type(em).__name__} with coroutine methods (for an "
                        "AsyncEmotionalMemory, pass its .engine)")
