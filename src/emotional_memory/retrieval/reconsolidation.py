"""Retrieval side effects on a memory's tag: prediction error, reconsolidation."""

from __future__ import annotations

from typing import Any

from emotional_memory._validation import (
    finite,
)
from emotional_memory.affect import MAX_PAD_DISTANCE as MAX_PAD_DISTANCE
from emotional_memory.affect import CoreAffect
from emotional_memory.models import EmotionalTag, with_fields


def affective_prediction_error(expected: CoreAffect, observed: CoreAffect) -> float:
    """Euclidean distance in PAD space between expected and observed affect.

    Args:
        expected: The predicted affect.
        observed: The affect actually observed.

    Returns:
        The distance, in [0, sqrt(6)].
    """
    return expected.distance(observed)


def compute_ape(tag: EmotionalTag, observed: CoreAffect) -> float:
    """Affective prediction error of a tag (Pearce & Hall 1980; docs/behaviour.md §6).

    Uses ``tag.expected_affect`` when set, else the encoding ``core_affect``.

    Args:
        tag: The retrieved memory's tag.
        observed: The engine's current core affect.

    Returns:
        The PAD distance between the tag's reference affect and ``observed``.
    """
    reference = tag.expected_affect if tag.expected_affect is not None else tag.core_affect
    return affective_prediction_error(reference, observed)


def reconsolidation_fields(
    tag: EmotionalTag, current_affect: CoreAffect, ape: float, learning_rate: float
) -> dict[str, Any]:
    """The fields :func:`reconsolidate` changes, with their new values.

    Args:
        tag, current_affect, ape, learning_rate: as :func:`reconsolidate`.

    Returns:
        ``{"core_affect": ..., "reconsolidation_count": ...}``.

    Raises:
        ValueError: If ``ape`` or ``learning_rate`` is NaN or infinite.
    """
    alpha = min(finite("ape", ape) * finite("learning_rate", learning_rate), 0.5)
    return {
        "core_affect": tag.core_affect.lerp(current_affect, alpha),
        "reconsolidation_count": tag.reconsolidation_count + 1,
    }


def reconsolidate(
    tag: EmotionalTag, current_affect: CoreAffect, ape: float, learning_rate: float
) -> EmotionalTag:
    """Pull the tag's core affect towards ``current_affect`` (Nader et al. 2000).

    ``alpha = min(ape * learning_rate, 0.5)``; ``reconsolidation_count`` += 1; nothing
    else changes (docs/behaviour.md §6).

    Args:
        tag: The tag to update.
        current_affect: The affect to move towards.
        ape: Affective prediction error (from :func:`compute_ape`); must be finite.
        learning_rate: Reconsolidation learning rate; must be finite.

    Returns:
        The updated tag (a copy).

    Raises:
        ValueError: If ``ape`` or ``learning_rate`` is NaN or infinite.
    """
    return with_fields(tag, reconsolidation_fields(tag, current_affect, ape, learning_rate))


_LR_MIN = 0.05
_LR_MAX = 0.80
_LR_ADAPT_RATE = 0.2


def prediction_fields(
    tag: EmotionalTag, observed: CoreAffect, ape: float, core_affect: CoreAffect | None = None
) -> dict[str, Any]:
    """The fields :func:`update_prediction` changes, with their new values.

    Args:
        tag, observed, ape: as :func:`update_prediction`.
        core_affect: the tag's core affect as it is now, when it has just changed
            (reconsolidated) and ``tag`` still holds the old one; None: the tag's.

    Returns:
        ``{"expected_affect": ..., "prediction_learning_rate": ...}``.
    """
    ape = finite("ape", ape)
    target = max(_LR_MIN, min(_LR_MAX, ape))
    lr = tag.prediction_learning_rate + _LR_ADAPT_RATE * (target - tag.prediction_learning_rate)
    lr = max(_LR_MIN, min(_LR_MAX, lr))
    base = tag.expected_affect
    if base is None:
        base = core_affect if core_affect is not None else tag.core_affect
    return {"expected_affect": base.lerp(observed, lr), "prediction_learning_rate": lr}


def update_prediction(tag: EmotionalTag, observed: CoreAffect, ape: float) -> EmotionalTag:
    """Pearce-Hall update of the tag's expected affect and associability.

    ``target = clamp(ape, 0.05, 0.8)``; ``lr += 0.2 * (target - lr)`` (clamped);
    ``expected = (expected or core_affect).lerp(observed, lr)``.

    Args:
        tag: the tag to update.
        observed: affect observed at retrieval.
        ape: prediction error (from :func:`compute_ape`).

    Returns:
        The tag with new ``expected_affect`` and ``prediction_learning_rate``.
    """
    return with_fields(tag, prediction_fields(tag, observed, ape))
