"""Cases found by differential fuzzing against the original library 0.18.1 (SPEC 11).

Each expectation here is what the original returns for the same input (pinned from a
run of the original, or a plain-Python oracle written the way the original computes
it); nothing here imports or needs the original.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory import (
    CoreAffect,
    categorize_affect,
)

_TIERS = {
    "joy": ("serenity", "joy", "ecstasy"),
    "anticipation": ("interest", "anticipation", "vigilance"),
    "surprise": ("distraction", "surprise", "amazement"),
    "fear": ("apprehension", "fear", "terror"),
    "anger": ("annoyance", "anger", "rage"),
    "disgust": ("boredom", "disgust", "loathing"),
    "sadness": ("pensiveness", "sadness", "grief"),
    "trust": ("acceptance", "trust", "admiration"),
}
_SECTORS = ("joy", "anticipation", "surprise", "fear", "disgust", "sadness", "disgust", "trust")


def _original_label(valence: float, arousal: float, dominance: float | None) -> tuple[str, str]:
    """(primary, name) the way the original computes them: the radius is
    ``sqrt(v**2 + a**2)`` (not ``hypot``, which rounds differently at the tier edges)."""
    a = (arousal - 0.5) * 2.0
    r = math.sqrt(valence**2 + a**2)
    angle = math.degrees(math.atan2(a, valence)) % 360.0
    sector = int((angle + 22.5) / 45.0) % 8
    primary = _SECTORS[sector]
    if sector == 3 and dominance is not None:
        primary = "anger" if dominance >= 0.5 else "fear"
    flat = r < 0.05 or (abs(valence) < 0.05 and arousal < 0.05)
    tier = 0 if flat or r < 0.3 else (1 if r < 0.7 else 2)
    return primary, _TIERS[primary][tier]


def test_categorize_radius_rounds_as_the_original_at_the_high_tier_edge() -> None:
    # r = 0.7 to the last bit: hypot gives 0.69999..., the original's sqrt gives 0.7
    label = categorize_affect(CoreAffect(valence=0.6467156727579007, arousal=0.6339392013277814))
    assert (label.primary, label.intensity, label.name) == ("joy", "high", "ecstasy")


_EDGE = st.sampled_from([0.05, 0.3, 0.7])


@settings(max_examples=400, deadline=None)
@given(
    radius=st.one_of(_EDGE, st.floats(0.0, 1.5)),
    nudge=st.integers(-3, 3),
    angle=st.floats(0.0, 360.0),
    dominance=st.one_of(st.none(), st.floats(0.0, 1.0)),
)
def test_categorize_matches_the_original_near_tier_edges(
    radius: float, nudge: int, angle: float, dominance: float | None
) -> None:
    r = radius
    for _ in range(abs(nudge)):
        r = math.nextafter(r, math.inf if nudge > 0 else -math.inf)
    valence = r * math.cos(math.radians(angle))
    arousal = r * math.sin(math.radians(angle)) / 2.0 + 0.5
    affect = CoreAffect(valence=valence, arousal=arousal)
    label = categorize_affect(affect, dominance)
    assert (label.primary, label.name) == _original_label(
        affect.valence, affect.arousal, dominance
    )
