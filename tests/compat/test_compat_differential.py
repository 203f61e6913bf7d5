"""Cases found by differential fuzzing against the original library 0.18.1 (SPEC 11).

Each expectation here is what the original returns for the same input (pinned from a
run of the original, or a plain-Python oracle written the way the original computes
it); nothing here imports or needs the original.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from emotional_memory import (
    AdaptiveWeightsConfig,
    AppraisalVector,
    CoreAffect,
    DecayConfig,
    EmotionalMemory,
    EmotionalMemoryConfig,
    InMemoryStore,
    Memory,
    MoodDecayConfig,
    ResonanceConfig,
    ResonanceLink,
    RetrievalConfig,
    StaticAppraisalEngine,
    categorize_affect,
    consolidation_strength,
    hebbian_strengthen,
    make_emotional_tag,
)
from emotional_memory.affect import AffectiveMomentum
from emotional_memory.mood import MoodField
from emotional_memory.replay import TickClock
from support.compat_original import START, HashEmbedder
from support.oracle import SECTORS, TIER_NAMES


def _original_label(valence: float, arousal: float, dominance: float | None) -> tuple[str, str]:
    """(primary, name) the way the original computes them: the radius is
    ``sqrt(v**2 + a**2)`` (not ``hypot``, which rounds differently at the tier edges)."""
    a = (arousal - 0.5) * 2.0
    r = math.sqrt(valence**2 + a**2)
    angle = math.degrees(math.atan2(a, valence)) % 360.0
    sector = int((angle + 22.5) / 45.0) % 8
    primary = SECTORS[sector]
    if sector == 3 and dominance is not None:
        primary = "anger" if dominance >= 0.5 else "fear"
    flat = r < 0.05 or (abs(valence) < 0.05 and arousal < 0.05)
    tier = 0 if flat or r < 0.3 else (1 if r < 0.7 else 2)
    return primary, TIER_NAMES[primary][tier]


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


def _memory_with_links(targets: list[tuple[str, float]]) -> Memory:
    tag = make_emotional_tag(
        CoreAffect(valence=0.1, arousal=0.2), AffectiveMomentum(), MoodField.neutral(), 0.5
    )
    links = [
        ResonanceLink(source_id="self", target_id=t, strength=s, link_type="semantic")
        for t, s in targets
    ]
    return Memory(
        id="self", content="x", tag=tag.model_copy(update={"resonance_links": links})
    )


def test_hebbian_strengthen_helper_strengthens_every_listed_target_as_the_original() -> None:
    # The original's helper strengthens each link whose target is in the given ids,
    # a link to the memory itself included (its engine leaves the memory's own id out).
    memory = _memory_with_links([("self", 0.5), ("b", 0.2), ("c", 0.3)])
    links = hebbian_strengthen(memory, {"self", "b"}, 0.25)
    assert [lk.strength for lk in links] == [0.75, 0.45, 0.3]


def test_engine_hebbian_leaves_a_link_to_the_memory_itself_alone() -> None:
    engine = EmotionalMemory(InMemoryStore(), HashEmbedder(), clock=TickClock(START))
    first = engine.encode("rain on the roof")
    engine.encode("rain on the roof again")
    links = [
        *first.tag.resonance_links,
        ResonanceLink(source_id=first.id, target_id=first.id, strength=0.5,
                      link_type="semantic"),
    ]
    engine.update_memory(first.id, tag=first.tag.model_copy(update={"resonance_links": links}))
    engine.retrieve("rain on the roof", top_k=2)
    stored = engine.get(first.id)
    assert stored is not None
    self_links = [lk for lk in stored.tag.resonance_links if lk.target_id == first.id]
    assert [lk.strength for lk in self_links] == [0.5]


def test_elaborate_keeps_the_label_given_at_encode_time() -> None:
    # The original labels a tag once, at encode; elaboration blends the affect but
    # leaves emotion_label as it was.
    appraisal = AppraisalVector(
        novelty=0.9, goal_relevance=-0.9, coping_potential=0.1, norm_congruence=-0.9,
        self_relevance=0.9,
    )
    engine = EmotionalMemory(
        InMemoryStore(), HashEmbedder(), StaticAppraisalEngine(appraisal),
        EmotionalMemoryConfig(dual_path_encoding=True, auto_categorize=True),
        clock=TickClock(START),
    )
    engine.set_affect(CoreAffect(valence=0.8, arousal=0.5))
    memory = engine.encode("a sunny walk")
    assert memory.tag.emotion_label is not None
    assert memory.tag.emotion_label.primary == "joy"
    elaborated = engine.elaborate(memory.id)
    assert elaborated is not None
    assert elaborated.tag.core_affect != memory.tag.core_affect
    assert categorize_affect(elaborated.tag.core_affect).primary != "joy"
    assert elaborated.tag.emotion_label == memory.tag.emotion_label


_WRONG_TYPES = [pytest.param("abc", id="str"), pytest.param(None, id="None"),
                pytest.param([0.5], id="list"), pytest.param(True, id="bool")]
_FIELD_CASES: list[tuple[str, Callable[[Any], Any]]] = [
    ("valence", lambda v: CoreAffect(valence=v, arousal=0.5)),
    ("dominance", lambda v: CoreAffect(valence=0.0, arousal=0.5, dominance=v)),
    ("dd_arousal", lambda v: AffectiveMomentum(dd_arousal=v)),
    ("inertia", lambda v: MoodField(valence=0, arousal=0, dominance=0, inertia=v,
                                    timestamp=START)),
    ("base_half_life_seconds", lambda v: MoodDecayConfig(base_half_life_seconds=v)),
    ("power", lambda v: DecayConfig(power=v)),
    ("threshold", lambda v: ResonanceConfig(threshold=v)),
    ("ape_threshold", lambda v: RetrievalConfig(ape_threshold=v)),
    ("calm_sharpness", lambda v: AdaptiveWeightsConfig(calm_sharpness=v)),
    ("novelty", lambda v: AppraisalVector(novelty=v, goal_relevance=0, coping_potential=0,
                                          norm_congruence=0, self_relevance=0)),
    ("strength", lambda v: ResonanceLink(source_id="a", target_id="b", strength=v,
                                         link_type="semantic")),
    ("mood_alpha", lambda v: EmotionalMemoryConfig(mood_alpha=v)),
    ("base_weights", lambda v: RetrievalConfig(base_weights=[v, 0.2, 0.2, 0.2, 0.1, 0.1])),
]


@pytest.mark.parametrize("value", _WRONG_TYPES)
@pytest.mark.parametrize(("field", "build"), _FIELD_CASES, ids=[f for f, _ in _FIELD_CASES])
def test_a_wrongly_typed_model_field_is_a_validation_error(
    field: str, build: Callable[[Any], Any], value: Any
) -> None:
    # The original's models are plain pydantic: a value that is not a number is a
    # ValidationError (a ValueError), which code written for it catches.
    with pytest.raises(ValidationError, match=field):
        build(value)


@pytest.mark.parametrize("field", ["max_links", "candidate_multiplier", "propagation_hops"])
@pytest.mark.parametrize("value", ["abc", None, True, 1.5], ids=["str", "None", "bool", "float"])
def test_a_wrongly_typed_int_field_is_a_validation_error(field: str, value: Any) -> None:
    with pytest.raises(ValidationError, match=field):
        ResonanceConfig(**{field: value})


def test_a_wrongly_typed_plain_argument_stays_a_type_error() -> None:
    # outside the models the original fails with a TypeError (its arithmetic on a str)
    with pytest.raises(TypeError, match="alpha"):
        CoreAffect.neutral().lerp(CoreAffect.neutral(), None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="arousal"):
        consolidation_strength([0.5], 0.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("metadata", ["m", 5, [1], ("a", 1)])
def test_metadata_that_is_no_dict_is_a_type_and_a_value_error(metadata: Any) -> None:
    # the original's Memory model raises pydantic's ValidationError (a ValueError) for
    # it: code written for the original that catches ValueError keeps working, and it
    # is still the TypeError our other plain arguments raise, naming the field
    engine = EmotionalMemory(InMemoryStore(), HashEmbedder())
    for call in (
        lambda: engine.encode("hi", metadata=metadata),
        lambda: engine.encode_batch(["hi"], metadata=[metadata]),
    ):
        with pytest.raises(ValueError, match="metadata") as caught:
            call()
        assert isinstance(caught.value, TypeError)
    assert len(engine) == 0

