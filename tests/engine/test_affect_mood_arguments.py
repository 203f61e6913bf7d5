"""The methods of the affect value objects name a wrong argument (SPEC 9).

Passing something that is not a ``CoreAffect`` / ``MoodField`` / ``MoodDecayConfig``
used to fail deep inside with ``AttributeError: 'NoneType' object has no attribute
'valence'``; a huge velocity overflowed ``magnitude()``; a NaN or text dominance was
compared silently (NaN labelled fear) or with an unnamed ``TypeError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.categorize import categorize_affect
from emotional_memory.mood import MoodDecayConfig, MoodField

T0 = datetime(2024, 1, 1, tzinfo=UTC)
AFFECT = CoreAffect(valence=0.2, arousal=0.6)
MOOD = MoodField.neutral(T0)
BAD = [None, (0.1, 0.2, 0.5), {"valence": 0.1, "arousal": 0.2}]

CALLS: list[tuple[str, Callable[[Any], Any], str]] = [
    ("lerp", lambda x: AFFECT.lerp(x, 0.5), "other"),
    ("affect.distance", lambda x: AFFECT.distance(x), "other"),
    ("mood.distance", lambda x: MOOD.distance(x), "other"),
    ("mood.update", lambda x: MOOD.update(x, now=T0), "core_affect"),
    ("mood.update decay_config", lambda x: MOOD.update(AFFECT, now=T0, decay_config=x)
     if x is not None else MOOD.update(AFFECT, now=T0, decay_config="x"), "decay_config"),
    ("mood.regress", lambda x: MOOD.regress(T0, x), "config"),
]


@pytest.mark.parametrize("value", BAD, ids=["None", "tuple", "dict"])
@pytest.mark.parametrize(("call", "name"), [(c, n) for _, c, n in CALLS],
                         ids=[i for i, _, _ in CALLS])
def test_wrong_argument_type_is_named(call: Callable[[Any], Any], name: str,
                                      value: Any) -> None:
    with pytest.raises(TypeError, match=name):
        call(value)


def test_valid_arguments_still_work() -> None:
    other = CoreAffect(valence=-0.4, arousal=0.1, dominance=0.9)
    assert AFFECT.lerp(other, 0.5).as_tuple() == pytest.approx((-0.1, 0.35, 0.7))
    assert AFFECT.distance(AFFECT) == 0.0
    later = MOOD.update(AFFECT, now=T0, decay_config=MoodDecayConfig())
    assert later.timestamp == T0 and MOOD.distance(later) > 0
    assert MOOD.regress(T0, MoodDecayConfig()) == MOOD


def test_momentum_magnitude_of_huge_velocity_is_finite() -> None:
    m = AffectiveMomentum(d_valence=1e308, d_arousal=1e308, d_dominance=-1e308)
    assert m.magnitude() == pytest.approx(math.sqrt(3.0) * 1e308)
    # the ordinary path is unchanged (the exact sqrt of the sum of squares)
    small = AffectiveMomentum(d_valence=0.1, d_arousal=-0.2, d_dominance=0.3)
    assert small.magnitude() == math.sqrt(0.1**2 + 0.2**2 + 0.3**2)


FEAR = CoreAffect(valence=-0.5, arousal=1.0)


@pytest.mark.parametrize(("dominance", "error"), [
    (float("nan"), ValueError), (float("inf"), ValueError), (10**400, ValueError),
    ("high", TypeError), (True, TypeError), ([0.7], TypeError),
], ids=["nan", "inf", "10**400", "str", "bool", "list"])
def test_categorize_bad_dominance_is_named(dominance: Any, error: type) -> None:
    with pytest.raises(error, match="dominance"):
        categorize_affect(FEAR, dominance=dominance)


def test_categorize_dominance_still_splits_fear_and_anger() -> None:
    assert categorize_affect(FEAR).primary == "fear"
    assert categorize_affect(FEAR, dominance=0.49).primary == "fear"
    assert categorize_affect(FEAR, dominance=0.5).primary == "anger"
    assert categorize_affect(FEAR, dominance=3).primary == "anger"


@pytest.mark.parametrize("tag", [None, AFFECT, "tag"], ids=["None", "CoreAffect", "str"])
def test_label_tag_names_an_argument_that_is_not_a_tag(tag: Any) -> None:
    """AttributeError: 'CoreAffect' object has no attribute 'mood_snapshot'."""
    from emotional_memory.categorize import label_tag

    with pytest.raises(TypeError, match=r"tag must be an EmotionalTag, got "):
        label_tag(tag)


def test_label_tag_still_labels_a_tag() -> None:
    from emotional_memory.categorize import label_tag
    from emotional_memory.models import make_emotional_tag

    tag = make_emotional_tag(FEAR, AffectiveMomentum.zero(), MOOD, 0.5, now=T0)
    assert label_tag(tag).emotion_label == categorize_affect(FEAR, dominance=0.5)
    assert label_tag(tag, dominance=0.0).emotion_label == categorize_affect(FEAR)
    assert tag.emotion_label is None
