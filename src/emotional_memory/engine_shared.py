"""Small helpers shared by the sync and async engines, at the original's module path.

Code written for the original library imports these from
``emotional_memory.engine_shared``; the engines here use the same rules.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "DEFAULT_QUERY_AFFECT_GATE_TAU",
    "check_content_length",
    "is_query_affect_neutral",
    "semantic_only_weights",
    "validate_prune_threshold",
]

#: Default ``query_affect_gate_tau``: |valence| below it counts as affect-neutral.
DEFAULT_QUERY_AFFECT_GATE_TAU: float = 0.2


def semantic_only_weights() -> NDArray[np.float64]:
    """Weights ranking by semantic similarity alone.

    Returns:
        A fresh ``[1, 0, 0, 0, 0, 0]`` float64 array (docs/behaviour.md §4 signal order).
    """
    return np.array([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])


def is_query_affect_neutral(valence: float, tau: float) -> bool:
    """Whether a query's valence is too weak to steer retrieval.

    Args:
        valence: The query's appraised valence.
        tau: The gate (``query_affect_gate_tau``).

    Returns:
        ``abs(valence) < tau``.
    """
    return abs(valence) < tau


def check_content_length(content: str, max_length: int | None, *, label: str = "content") -> None:
    """Raise when ``content`` is longer than ``max_length`` characters.

    Args:
        content: The text to check.
        max_length: The limit, or None for no limit.
        label: The field named in the error.

    Raises:
        ValueError: ``len(content) > max_length``.
    """
    if max_length is not None and len(content) > max_length:
        raise ValueError(
            f"{label} length {len(content)} exceeds max_content_length={max_length}"
        )


def validate_prune_threshold(threshold: float) -> None:
    """Check a ``prune`` threshold.

    Args:
        threshold: The effective-strength cut-off.

    Raises:
        ValueError: ``threshold`` is NaN or outside [0, 1].
    """
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise ValueError(f"prune threshold must be a number in [0.0, 1.0], got {threshold!r}")
    if math.isnan(threshold) or not 0.0 <= threshold <= 1.0:
        raise ValueError(f"prune threshold must be in [0.0, 1.0], got {threshold}")
