"""The unvalidated builders (``_unvalidated.py``) build what validation builds.

``make_emotional_tag`` (with exactly typed arguments), ``checked_memory``,
``MoodField.update`` and ``momentum_from_history`` (finite floats) skip pydantic's
validation; the objects must equal the validated ones field for field, with the same
fields set, the same field order and the same serialisation.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.appraisal import AppraisalVector
from emotional_memory.models import (
    EmotionalTag,
    Memory,
    checked_memory,
    make_emotional_tag,
)
from emotional_memory.mood import MoodField
from emotional_memory.state import momentum_from_history

T0 = datetime(2025, 3, 1, tzinfo=UTC)
unit = st.floats(0.0, 1.0, allow_nan=False)
signed = st.floats(-1.0, 1.0, allow_nan=False)
small = st.floats(-5.0, 5.0, allow_nan=False)
zones = st.sampled_from([UTC, timezone(timedelta(hours=2)), timezone(timedelta(0), "Z")])


@st.composite
def moments(draw: Any) -> datetime:
    return (T0 + timedelta(microseconds=draw(st.integers(-10**12, 10**12)))).astimezone(
        draw(zones)
    )


@st.composite
def tag_arguments(draw: Any) -> dict[str, Any]:
    return {
        "core_affect": CoreAffect(valence=draw(signed), arousal=draw(unit),
                                  dominance=draw(unit)),
        "momentum": AffectiveMomentum(
            d_valence=draw(small), d_arousal=draw(small), d_dominance=draw(small),
            dd_valence=draw(small), dd_arousal=draw(small), dd_dominance=draw(small),
        ),
        "mood": MoodField(valence=draw(signed), arousal=draw(unit), dominance=draw(unit),
                          inertia=draw(unit), timestamp=draw(moments())),
        "consolidation_strength": draw(st.floats(-2.0, 2.0, allow_nan=False)),
        "appraisal": draw(st.none() | st.builds(
            AppraisalVector, novelty=signed, goal_relevance=signed, coping_potential=unit,
            norm_congruence=signed, self_relevance=unit,
        )),
        "now": draw(moments()),
    }


def _validated_tag(args: dict[str, Any]) -> EmotionalTag:
    """What make_emotional_tag built before its fast path: the validated tag."""
    return EmotionalTag(
        core_affect=args["core_affect"],
        momentum=args["momentum"],
        mood_snapshot=args["mood"],
        appraisal=args["appraisal"],
        timestamp=args["now"],
        consolidation_strength=max(0.0, min(1.0, float(args["consolidation_strength"]))),
    )


def _same_model(got: Any, want: Any) -> None:
    assert type(got) is type(want)
    assert got == want
    assert list(got.__dict__) == list(want.__dict__)
    assert got.__pydantic_fields_set__ == want.__pydantic_fields_set__
    assert got.__pydantic_extra__ == want.__pydantic_extra__
    assert got.__pydantic_private__ == want.__pydantic_private__
    assert got.model_dump_json() == want.model_dump_json()
    assert repr(got) == repr(want)


@settings(deadline=None, max_examples=60)
@given(args=tag_arguments())
def test_make_emotional_tag_equals_the_validated_tag(args: dict[str, Any]) -> None:
    got = make_emotional_tag(**args)
    want = _validated_tag(args)
    _same_model(got, want)
    # sub-models kept as given (validation keeps instances of the declared class)
    assert got.core_affect is args["core_affect"] and got.mood_snapshot is args["mood"]
    # a fresh default list per tag
    assert got.resonance_links == [] and got.resonance_links is not want.resonance_links


@settings(deadline=None, max_examples=60)
@given(
    args=tag_arguments(),
    content=st.text(max_size=12),
    embedding=st.none() | st.just([]) | st.lists(
        st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=6
    ),
    metadata=st.none() | st.dictionaries(
        st.sampled_from("abc"), st.integers() | st.text(max_size=3) | st.lists(st.integers()),
        max_size=2,
    ),
)
def test_checked_memory_equals_memory_create(
    args: dict[str, Any], content: str, embedding: list[float] | None,
    metadata: dict[str, Any] | None,
) -> None:
    """Field for field, fields set included (the id: a fresh uuid4 from the factory)."""
    tag = make_emotional_tag(**args)
    fresh = uuid.uuid4()
    with mock.patch.object(uuid, "uuid4", return_value=fresh):  # the same id for both
        got = checked_memory(content, tag, embedding, metadata)
        want = Memory.create(content, tag, embedding=embedding, metadata=metadata)
    assert got.id == str(fresh)
    _same_model(got, want)
    assert "id" not in got.__pydantic_fields_set__
    # the list and a non-empty dict are taken over, not copied
    assert got.embedding is embedding
    assert got.metadata is metadata if metadata else got.metadata == {}


def test_unvalidated_models_share_their_fields_set_safely() -> None:
    tag = make_emotional_tag(CoreAffect.neutral(), AffectiveMomentum.zero(),
                             MoodField.neutral(T0), 0.5, now=T0)
    other = make_emotional_tag(CoreAffect.neutral(), AffectiveMomentum.zero(),
                               MoodField.neutral(T0), 0.7, now=T0)
    assert tag.__pydantic_fields_set__ is other.__pydantic_fields_set__
    before = set(tag.__pydantic_fields_set__)
    copied = tag.model_copy(update={"retrieval_count": 3})
    assert "retrieval_count" in copied.__pydantic_fields_set__
    assert tag.__pydantic_fields_set__ == before == other.__pydantic_fields_set__
    with pytest.raises(ValueError, match="frozen"):
        tag.retrieval_count = 2  # type: ignore[misc]
    assert tag.__pydantic_fields_set__ == before


def test_checked_memory_ids_are_fresh() -> None:
    tag = make_emotional_tag(CoreAffect.neutral(), AffectiveMomentum.zero(),
                             MoodField.neutral(T0), 0.5, now=T0)
    ids = {checked_memory("x", tag, None, None).id for _ in range(50)}
    assert len(ids) == 50 and all(uuid.UUID(i).version == 4 for i in ids)


def test_make_emotional_tag_still_validates_other_arguments() -> None:
    args = {
        "core_affect": CoreAffect.neutral(),
        "momentum": AffectiveMomentum.zero(),
        "mood": MoodField.neutral(T0),
        "consolidation_strength": 0.5,
    }
    with pytest.raises(ValueError, match="timestamp"):
        make_emotional_tag(**args, now=datetime(2025, 3, 1))  # naive
    with pytest.raises(ValueError, match="consolidation_strength"):
        make_emotional_tag(**{**args, "consolidation_strength": float("nan")}, now=T0)
    with pytest.raises(ValueError, match="mood_snapshot"):
        make_emotional_tag(**{**args, "mood": "calm"}, now=T0)  # type: ignore[arg-type]
    # a dict for a sub-model is validated into the model, as before
    tag = make_emotional_tag(**{**args, "core_affect": {"valence": 0.5, "arousal": 0.2}}, now=T0)  # type: ignore[arg-type]
    assert tag.core_affect == CoreAffect(valence=0.5, arousal=0.2)


@settings(deadline=None, max_examples=80)
@given(
    mood=st.builds(MoodField, valence=signed, arousal=unit, dominance=unit, inertia=unit,
                   timestamp=moments()),
    affect=st.builds(CoreAffect, valence=signed, arousal=unit, dominance=unit),
    alpha=st.floats(-3.0, 3.0, allow_nan=False),
    now=moments(),
)
def test_mood_update_equals_the_validated_mood(
    mood: MoodField, affect: CoreAffect, alpha: float, now: datetime
) -> None:
    """The blend, clamped (alpha outside [0, 1] leaves the ranges), as validated."""
    e = alpha * (1.0 - mood.inertia)
    want = MoodField(
        valence=(1.0 - e) * mood.valence + e * affect.valence,
        arousal=(1.0 - e) * mood.arousal + e * affect.arousal,
        dominance=(1.0 - e) * mood.dominance + e * affect.dominance,
        inertia=mood.inertia,
        timestamp=now,
    )
    _same_model(mood.update(affect, alpha=alpha, now=now), want)


@settings(deadline=None, max_examples=80)
@given(
    points=st.lists(
        st.tuples(st.integers(0, 10**9), signed, unit, unit), min_size=2, max_size=3
    ),
)
def test_momentum_from_history_equals_the_validated_momentum(
    points: list[tuple[int, float, float, float]],
) -> None:
    history = [(T0 + timedelta(microseconds=us), v, a, d) for us, v, a, d in points]
    got = momentum_from_history(history)

    def velocity(p: Any, q: Any) -> tuple[float, float, float]:
        dt = max((q[0] - p[0]).total_seconds(), 0.001)
        return ((q[1] - p[1]) / dt, (q[2] - p[2]) / dt, (q[3] - p[3]) / dt)

    vel = velocity(history[-2], history[-1])
    acc = (0.0, 0.0, 0.0)
    if len(history) == 3:
        prev = velocity(history[0], history[1])
        acc = (vel[0] - prev[0], vel[1] - prev[1], vel[2] - prev[2])
    want = AffectiveMomentum(d_valence=vel[0], d_arousal=vel[1], d_dominance=vel[2],
                             dd_valence=acc[0], dd_arousal=acc[1], dd_dominance=acc[2])
    _same_model(got, want)


def test_unvalidated_fast_paths_fall_back_to_validation() -> None:
    """Values the fast paths do not take (non-finite, not floats) are validated as
    before: a clear error naming the field."""
    mood = MoodField.neutral(T0)
    with pytest.raises(ValueError, match="alpha"):
        mood.update(CoreAffect.neutral(), alpha=float("inf"), now=T0)
    huge = [(T0, -1.0, 0.0, 0.0), (T0 + timedelta(microseconds=1), 1e308, 0.0, 0.0)]
    with pytest.raises(ValueError, match="d_valence"):
        momentum_from_history(huge)  # type: ignore[arg-type]
