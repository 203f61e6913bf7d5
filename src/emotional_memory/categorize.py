"""Plutchik emotion labels from a point of the valence/arousal plane (docs/behaviour.md §8).

The plane ``(valence, 2*(arousal-0.5))`` is cut into eight 45-degree sectors centred
on Plutchik's (1980) primary emotions; the radius sets the intensity tier.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from emotional_memory._validation import strict_finite
from emotional_memory.affect import CoreAffect

Intensity = Literal["low", "moderate", "high"]

#: Plutchik's eight primary emotions (the original's ``PrimaryEmotion``).
PrimaryEmotion = Literal[
    "joy", "trust", "fear", "surprise", "sadness", "disgust", "anger", "anticipation"
]

# Sector k is centred at angle 45*k degrees of (valence, a').
_SECTORS: tuple[PrimaryEmotion, ...] = (
    "joy", "anticipation", "surprise", "fear", "disgust", "sadness", "disgust", "trust",
)
_TIERS: dict[PrimaryEmotion, tuple[str, str, str]] = {
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
        primary: Plutchik primary emotion (:data:`PrimaryEmotion`).
        intensity: ``low``, ``moderate`` or ``high``.
        name: tiered name (e.g. ``serenity``/``joy``/``ecstasy``).
        confidence: 1 at the sector centre, 0 at its edge.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    primary: PrimaryEmotion
    intensity: Intensity
    name: str
    confidence: float


def categorize_affect(core_affect: CoreAffect, dominance: float | None = None) -> EmotionLabel:
    """Label a core affect with a Plutchik emotion.

    Args:
        core_affect: the affect to label.
        dominance: when given, splits the fear sector: anger at dominance >= 0.5.

    Returns:
        The label. There is no "neutral" label: a point near the origin of the plane
        (radius < 0.05, or |valence| < 0.05 with arousal < 0.05) keeps its sector's
        emotion at low intensity with confidence 0.

    Raises:
        TypeError: If ``core_affect`` is not a ``CoreAffect``, or ``dominance`` is not
            a number (a bool or a str included).
        ValueError: If ``dominance`` is NaN, infinite or too large for a float.
    """
    if not isinstance(core_affect, CoreAffect):
        raise TypeError(f"core_affect must be a CoreAffect, got {type(core_affect).__name__}")
    if dominance is not None:
        dominance = strict_finite("dominance", dominance)
    valence = core_affect.valence
    arousal = core_affect.arousal
    a_prime = 2.0 * (arousal - 0.5)
    # sqrt of the sum of squares, as the original (hypot rounds differently, which
    # flips the intensity tier of points a last bit away from 0.3 or 0.7)
    radius = math.sqrt(valence**2 + a_prime**2)
    near_origin = radius < 0.05 or (abs(valence) < 0.05 and arousal < 0.05)
    angle = math.degrees(math.atan2(a_prime, valence)) % 360.0
    sector = int((angle + 22.5) / 45.0) % 8
    primary = _SECTORS[sector]
    # The fear/anger split needs an explicit dominance: CoreAffect's default of 0.5
    # would otherwise turn every fear-sector affect into anger.
    if primary == "fear" and dominance is not None and dominance >= 0.5:
        primary = "anger"
    tiers: tuple[Intensity, Intensity, Intensity] = ("low", "moderate", "high")
    if near_origin:
        return EmotionLabel(
            primary=primary, intensity="low", name=_TIERS[primary][0], confidence=0.0
        )
    tier = 0 if radius < 0.3 else (1 if radius < 0.7 else 2)
    diff = (angle - 45.0 * sector + 180.0) % 360.0 - 180.0
    confidence = max(0.0, 1.0 - abs(diff) / 22.5)
    return EmotionLabel(
        primary=primary, intensity=tiers[tier], name=_TIERS[primary][tier], confidence=confidence
    )


class _Labelable(Protocol):
    """What :func:`label_tag` reads of an :class:`~emotional_memory.models.EmotionalTag`
    (structural, so this module need not import ``models``, which imports it)."""

    @property
    def core_affect(self) -> CoreAffect: ...

    @property
    def mood_snapshot(self) -> Any: ...

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Any: ...


_Tag = TypeVar("_Tag", bound=_Labelable)


def label_tag(tag: _Tag, dominance: float | None = None) -> _Tag:
    """A copy of ``tag`` with ``emotion_label`` set from its core affect.

    Args:
        tag: The tag whose ``core_affect`` is labelled.
        dominance: Dominance used for the fear/anger split; ``None`` takes the tag's
            mood-snapshot dominance (so an angry mood can label anger).

    Returns:
        The labelled copy (``tag`` itself is unchanged).

    Raises:
        TypeError: If ``tag`` has no ``CoreAffect`` ``core_affect`` to label (e.g. a
            bare ``CoreAffect``: use :func:`categorize_affect`).
    """
    if not isinstance(getattr(tag, "core_affect", None), CoreAffect) or not hasattr(
        tag, "model_copy"
    ):
        raise TypeError(f"tag must be an EmotionalTag, got {type(tag).__name__}")
    if dominance is None and tag.mood_snapshot is not None:
        dominance = tag.mood_snapshot.dominance
    label = categorize_affect(tag.core_affect, dominance=dominance)
    labelled: _Tag = tag.model_copy(update={"emotion_label": label})
    return labelled
