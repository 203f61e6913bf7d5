"""The checks of an event's arguments and of the appraisal engine's answers."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from emotional_memory._validation import in_utc
from emotional_memory.affect import CoreAffect
from emotional_memory.appraisal import AppraisalVector, GenericAppraisalVector


def _check_expiry(value: object, field: str) -> datetime | None:
    """An ``expires_at`` argument: None, or an aware datetime (as UTC).

    Raises:
        TypeError: not a datetime. ValueError: naive, or outside the years 1..9999
            once in UTC (``9999-12-31T23:59:59-14:00``), named by ``field``.
    """
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise TypeError(f"{field} must be an aware datetime or None, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{field} must be timezone-aware")
    return in_utc(field, value)


def _per_item_affects(affect: object, count: int) -> list[CoreAffect | None]:
    """``encode_batch``'s ``affect`` argument as one affect (or None) per content.

    Args:
        affect: None, one :class:`CoreAffect` for every content, or a sequence of
            ``count`` affects or Nones.
        count: the number of contents.

    Returns:
        ``count`` entries.

    Raises:
        TypeError: a value that is none of these (the entry is named).
        ValueError: a sequence of another length.
    """
    if affect is None or isinstance(affect, CoreAffect):
        return [affect] * count
    if isinstance(affect, str | dict) or not isinstance(affect, Sequence):
        raise TypeError(
            "affect must be a CoreAffect, one (or None) per content, or None; got "
            f"{type(affect).__name__}"
        )
    if len(affect) != count:
        raise ValueError(f"affect must have one entry per content ({count}), got {len(affect)}")
    for i, a in enumerate(affect):
        if a is not None and not isinstance(a, CoreAffect):
            raise TypeError(f"affect[{i}] must be a CoreAffect or None, got {type(a).__name__}")
    return list(affect)


NOT_APPRAISED: Any = object()
"""No appraisal made beforehand: the event is appraised when it is prepared."""


def checked_appraisal(result: Any) -> Any:
    """The appraisal engine's answer, refused unless it can give a core affect.

    Raises:
        TypeError: naming ``appraisal_engine.appraise`` and the type it returned.
    """
    if not callable(getattr(result, "to_core_affect", None)):
        raise TypeError(
            "appraisal_engine.appraise must return an AppraisalVector or "
            f"GenericAppraisalVector, got {type(result).__name__}"
        )
    return result


def appraisal_affect(appraisal: Any) -> CoreAffect:
    """``appraisal.to_core_affect()``, refused unless it is a :class:`CoreAffect`
    (None would read as "no event affect" and the state's own would be stored).

    Raises:
        TypeError: naming the appraisal's type and what its projection returned.
    """
    affect = appraisal.to_core_affect()
    if not isinstance(affect, CoreAffect):
        raise TypeError(
            f"{type(appraisal).__name__}.to_core_affect must return a CoreAffect, "
            f"got {type(affect).__name__}"
        )
    return affect


def _check_event_args(appraisal: object, affect: object) -> None:
    """Refuse an event's ``appraisal`` or ``affect`` of the wrong type (named)."""
    if appraisal is not None and not isinstance(
        appraisal, AppraisalVector | GenericAppraisalVector
    ):
        raise TypeError("appraisal must be an AppraisalVector, a GenericAppraisalVector or None")
    if affect is not None and not isinstance(affect, CoreAffect):
        raise TypeError("affect must be a CoreAffect or None")
