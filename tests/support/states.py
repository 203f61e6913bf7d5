"""Affective states for the state-store tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from emotional_memory.affect import CoreAffect
from emotional_memory.state import AffectiveState

STATE_T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def moved_state(shift: float = 0.0) -> AffectiveState:
    """A state moved three times from ``STATE_T0`` (momentum, mood and history all
    non-trivial); ``shift`` changes the last valence, giving distinct states."""
    state = AffectiveState.initial(now=STATE_T0)
    for i, (v, a) in enumerate([(0.3, 0.6), (-0.2, 0.8), (0.5 - shift, 0.4)]):
        state = state.update(CoreAffect(valence=v, arousal=a, dominance=0.5 + 0.1 * i),
                             now=STATE_T0 + timedelta(seconds=10 * (i + 1)))
    return state
