"""Plutchik emotion labels from a point of the valence/arousal plane (SPEC 8).

The plane ``(valence, 2*(arousal-0.5))`` is cut into eight 45-degree sectors centred
on Plutchik's (1980) primary emotions; the radius sets the intensity tier.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from emotional_memory.affect import CoreAffect

if TYPE_CHECKING:
    from emotional_memory.models import EmotionalTag

Intensity = Literal["low", "moderate", "high"]

# Sector k is centred at angle 45*k degrees of (valence, a').
_SECTORS: tuple[str, ...] = (
    "joy", "anticipation", "surprise", "fear", "disgust", "sadness", "disgust", "trust",
)
_TIERS: dict[str, tuple[str, str, str]] = {
    "joy": ("serenity", "joy", "ecstasy"),
    "trust": ("acceptance", "trust", "admiration"),
    "fear": ("apprehension", "fear", "terror"),
    "surprise": ("distraction", "surprise", "amazement"),
    "sadness": ("pensiveness", "sadness", "grief"),
    "disgust": ("boredom", "disgust", "loathing"),
    "anger": ("annoyance", "anger", "rage"),
    "anticipation": ("interest", "anticipation", "vigilance"),
}


class EmotionLabel(BaseModel):
    """A categorical reading of core affect.

    Attributes:
        primary: Plutchik primary emotion, or ``"neutral"``.
        intensity: ``low``, ``moderate`` or ``high``.
        name: tiered name (e.g. ``serenity``/``joy``/``ecstasy``).
        confidence: 1 at the sector centre, 0 at its edge.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    primary: str
    intensity: Intensity
    name: str
    confidence: float


def categorize_affect(affect: CoreAffect, dominance: float | None = None) -> EmotionLabel:
    """Label a core affect with a Plutchik emotion.

    Args:
        affect: the affect to label.
        dominance: when given, splits the fear sector: anger at dominance >= 0.5.

    Returns:
        The label; ``neutral`` (low intensity, confidence 0) near the origin.
    """
    valence = affect.valence
    arousal = affect.arousal
    a_prime = 2.0 * (arousal - 0.5)
    radius = math.hypot(valence, a_prime)
    if radius < 0.05 or (abs(valence) < 0.05 and arousal < 0.05):
        return EmotionLabel(primary="neutral", intensity="low", name="neutral", confidence=0.0)
    angle = math.degrees(math.atan2(a_prime, valence)) % 360.0
    sector = int((angle + 22.5) / 45.0) % 8
    primary = _SECTORS[sector]
    # The fear/anger split needs an explicit dominance: CoreAffect's default of 0.5
    # would otherwise turn every fear-sector affect into anger.
    if primary == "fear" and dominance is not None and dominance >= 0.5:
        primary = "anger"
    tier = 0 if radius < 0.3 else (1 if radius < 0.7 else 2)
    tiers: tuple[Intensity, Intensity, Intensity] = ("low", "moderate", "high")
    intensity = tiers[tier]
    diff = (angle - 45.0 * sector + 180.0) % 360.0 - 180.0
    confidence = max(0.0, 1.0 - abs(diff) / 22.5)
    return EmotionLabel(
        primary=primary, intensity=intensity, name=_TIERS[primary][tier], confidence=confidence
    )


def label_tag(tag: EmotionalTag) -> EmotionLabel:
    """Label a tag by its core affect (as :func:`categorize_affect` without dominance).

    Args:
        tag: The tag whose ``core_affect`` is labelled.

    Returns:
        The Plutchik ``EmotionLabel`` (SPEC 8); fear is never turned into anger here.
    """
    return categorize_affect(tag.core_affect)
