"""Names every retrieval module shares."""

from __future__ import annotations

import jax
import numpy as np

from emotional_memory.affect import MAX_PAD_DISTANCE as MAX_PAD_DISTANCE
from emotional_memory.kernel import (
    SIGNAL_NAMES,
    ScoringParams,
)

ParamsLike = ScoringParams | np.ndarray | jax.Array
"""Scoring parameters, or their :func:`~emotional_memory.kernel.params.pack_params`
vector (the engine caches the packed form per config: one operand per program)."""

SIGNAL_FIELDS: tuple[str, ...] = SIGNAL_NAMES
"""Signal names in weight order (the kernel's :data:`SIGNAL_NAMES`)."""
