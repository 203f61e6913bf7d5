"""Appraisal schemas: which dimensions an event is rated on, and how they map to affect.

Appraisal theories disagree on the dimensions of evaluation. Scherer's component
process model uses five stimulus-evaluation checks; dimensional accounts (Russell,
Mehrabian) rate pleasure, arousal and dominance directly. An :class:`AppraisalSchema`
names a set of :class:`AppraisalDimension` (each with a range and a neutral value)
and a projection from rated values to :class:`~emotional_memory.affect.CoreAffect`.
A :class:`GenericAppraisalVector` is one rating in a given schema.

Two schemas ship with the library:

* :data:`SCHERER_CPM_SCHEMA` -- the five checks of :class:`AppraisalVector`, projected
  with the same coefficients (docs/behaviour.md §8), so both give identical affect.
* :data:`DIRECT_VAD_SCHEMA` -- valence [-1, 1], arousal [0, 1], dominance [0, 1] rated
  directly; the projection is the identity.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator, model_validator

from emotional_memory.affect import CoreAffect

__all__ = [
    "DIRECT_VAD_SCHEMA",
    "SCHERER_CPM_SCHEMA",
    "AppraisalDimension",
    "AppraisalSchema",
    "GenericAppraisalVector",
    "coerce_appraisal_dimensions",
    "scherer_core_affect",
]


class AppraisalDimension(BaseModel):
    """One rated dimension of an appraisal schema.

    Attributes:
        name: Identifier used as the JSON key (non-empty).
        range: ``(low, high)`` with ``low < high``, both finite.
        neutral: Value meaning "no information"; must lie inside ``range``.
        description: What the ends of the scale mean (shown to raters and LLMs).
    """

    model_config = ConfigDict(frozen=True)

    name: str
    range: tuple[float, float]
    neutral: float
    description: str = ""

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("name must not be empty")
        return v

    @field_validator("range", "neutral", mode="before")
    @classmethod
    def _no_bools(cls, v: object, info: ValidationInfo) -> object:
        items = v if isinstance(v, tuple | list) else (v,)
        if any(isinstance(item, bool) for item in items):
            raise TypeError(f"{info.field_name} must hold numbers, got a bool")
        return v

    @field_validator("range")
    @classmethod
    def _check_range(cls, v: tuple[float, float]) -> tuple[float, float]:
        low, high = v
        if not (math.isfinite(low) and math.isfinite(high)):
            raise ValueError(f"range must be finite, got {v}")
        if not low < high:
            raise ValueError(f"range must have low < high, got {v}")
        return (float(low), float(high))

    @model_validator(mode="after")
    def _check_neutral(self) -> AppraisalDimension:
        low, high = self.range
        if not (math.isfinite(self.neutral) and low <= self.neutral <= high):
            raise ValueError(f"neutral must lie in {self.range}, got {self.neutral}")
        return self

    def clamp(self, value: float) -> float:
        """Clamp ``value`` into this dimension's range.

        Args:
            value: A finite number.

        Returns:
            ``min(high, max(low, value))``.
        """
        low, high = self.range
        return min(high, max(low, value))


Projection = Callable[[Mapping[str, float]], CoreAffect]
"""A schema's projection: complete, in-range dimension values -> core affect."""


@dataclass(frozen=True)
class AppraisalSchema:
    """A named set of appraisal dimensions with a projection to core affect.

    Attributes:
        name: Schema identifier (e.g. ``"scherer_cpm"``), reported as
            :attr:`GenericAppraisalVector.schema_name`.
        dimensions: The dimensions, in order (a sequence, stored as a tuple); names
            must be unique and there must be at least one.
        system_prompt: Instructions for an LLM rater of this schema.
        project_to_core_affect: Maps a complete mapping ``name -> value`` (every
            dimension present, values inside their ranges) to a ``CoreAffect``.
    """

    name: str
    dimensions: Sequence[AppraisalDimension]  # stored as a tuple
    system_prompt: str
    project_to_core_affect: Projection

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError("name must be a non-empty str")
        dims = self.dimensions
        if isinstance(dims, str | bytes) or not isinstance(dims, Sequence):
            raise TypeError(
                f"dimensions must be a sequence of AppraisalDimension, got {type(dims).__name__}"
            )
        dims = tuple(dims)
        if not dims:
            raise ValueError("dimensions must not be empty")
        for i, dim in enumerate(dims):
            if not isinstance(dim, AppraisalDimension):
                raise TypeError(
                    f"dimensions[{i}] must be an AppraisalDimension, got {type(dim).__name__}"
                )
        names = [d.name for d in dims]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"dimensions has duplicate names {dupes}")
        if not isinstance(self.system_prompt, str):
            raise TypeError(f"system_prompt must be a str, got {type(self.system_prompt).__name__}")
        if not callable(self.project_to_core_affect):
            raise TypeError("project_to_core_affect must be callable")
        object.__setattr__(self, "dimensions", dims)

    @property
    def dimension_names(self) -> tuple[str, ...]:
        """The dimension names, in schema order."""
        return tuple(d.name for d in self.dimensions)

    def dimension(self, name: str) -> AppraisalDimension:
        """Look up one dimension.

        Args:
            name: A dimension name.

        Returns:
            The dimension.

        Raises:
            KeyError: If the schema has no such dimension.
        """
        for dim in self.dimensions:
            if dim.name == name:
                return dim
        raise KeyError(f"schema {self.name!r} has no dimension {name!r}")

    def neutral_values(self) -> dict[str, float]:
        """Every dimension at its neutral value.

        Returns:
            ``{name: neutral}`` in schema order.
        """
        return {d.name: d.neutral for d in self.dimensions}

    def to_json_schema(self) -> dict[str, Any]:
        """JSON schema of one rating: an object with every dimension as a bounded number.

        Returns:
            A fresh dict (``type``, ``properties``, ``required``,
            ``additionalProperties: False``).
        """
        return {
            "type": "object",
            "properties": {
                d.name: {
                    "type": "number",
                    "minimum": d.range[0],
                    "maximum": d.range[1],
                    "description": d.description,
                }
                for d in self.dimensions
            },
            "required": list(self.dimension_names),
            "additionalProperties": False,
        }

    def __repr__(self) -> str:
        return f"AppraisalSchema(name={self.name!r}, dimensions={list(self.dimension_names)})"


def _as_float(name: str, value: object) -> float:
    """Convert one rated value to a finite float, raising with the dimension's name."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError(f"dimension {name!r} must be a number, got {type(value).__name__}")
    try:
        num = float(value)
    except ValueError as exc:
        raise ValueError(f"dimension {name!r} must be a number, got {value!r}") from exc
    except OverflowError:  # an int beyond the float range (10**400)
        raise ValueError(
            f"dimension {name!r} must be finite, got an int too large for a float"
        ) from None
    if not math.isfinite(num):
        raise ValueError(f"dimension {name!r} must be finite, got {value!r}")
    return num


def coerce_appraisal_dimensions(
    raw: Mapping[str, object], schema: AppraisalSchema
) -> dict[str, float]:
    """Turn raw ratings (e.g. decoded LLM JSON) into complete, clamped schema values.

    Dimensions missing from ``raw`` take their neutral value; keys the schema does not
    know are ignored; numbers (and numeric strings) are clamped into range.

    Args:
        raw: Mapping of dimension name to a number or numeric string.
        schema: The schema the ratings belong to.

    Returns:
        ``{name: value}`` for every dimension, in schema order.

    Raises:
        TypeError: If ``raw`` is not a mapping, ``schema`` is not an
            :class:`AppraisalSchema`, or a value is not a number (bool included).
        ValueError: If a value is non-finite or a non-numeric string.
    """
    if not isinstance(schema, AppraisalSchema):
        raise TypeError(f"schema must be an AppraisalSchema, got {type(schema).__name__}")
    if not isinstance(raw, Mapping):
        raise TypeError(f"dimensions must be a mapping, got {type(raw).__name__}")
    out: dict[str, float] = {}
    for dim in schema.dimensions:
        if dim.name in raw:
            out[dim.name] = dim.clamp(_as_float(dim.name, raw[dim.name]))
        else:
            out[dim.name] = dim.neutral
    return out


class GenericAppraisalVector:
    """One appraisal in an arbitrary :class:`AppraisalSchema`.

    Immutable: :attr:`dimensions` is a read-only mapping in schema order. Equal when the
    schema name and every value are equal; hashable.
    """

    __slots__ = ("_dimensions", "_schema")
    _dimensions: Mapping[str, float]
    _schema: AppraisalSchema

    def __init__(self, dimensions: Mapping[str, object], schema: AppraisalSchema) -> None:
        """Create the vector.

        Args:
            dimensions: Ratings by dimension name; missing ones take the neutral value,
                unknown keys are ignored, values are clamped into range.
            schema: The schema the ratings belong to.

        Raises:
            TypeError: If ``schema`` is not an :class:`AppraisalSchema`, ``dimensions``
                not a mapping, or a value not a number.
            ValueError: If a value is non-finite.
        """
        values = coerce_appraisal_dimensions(dimensions, schema)
        object.__setattr__(self, "_schema", schema)
        object.__setattr__(self, "_dimensions", MappingProxyType(values))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"GenericAppraisalVector is immutable (cannot set {name!r})")

    @property
    def dimensions(self) -> Mapping[str, float]:
        """Read-only ``{name: value}`` in schema order."""
        return self._dimensions

    @property
    def schema(self) -> AppraisalSchema:
        """The schema this vector belongs to."""
        return self._schema

    @property
    def schema_name(self) -> str:
        """Name of the schema (e.g. ``"direct_vad"``)."""
        return self._schema.name

    def to_core_affect(self) -> CoreAffect:
        """Project onto core affect with the schema's projection.

        Returns:
            The projected ``CoreAffect``.

        Raises:
            TypeError: The projection returned something else (None read as "no
                event affect" and stored the current state's affect instead).
        """
        affect = self._schema.project_to_core_affect(dict(self._dimensions))
        if not isinstance(affect, CoreAffect):
            raise TypeError(
                f"schema {self.schema_name!r}: project_to_core_affect must return a "
                f"CoreAffect, got {type(affect).__name__}"
            )
        return affect

    def __getitem__(self, name: str) -> float:
        return self._dimensions[name]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GenericAppraisalVector):
            return NotImplemented
        return self.schema_name == other.schema_name and dict(self._dimensions) == dict(
            other._dimensions
        )

    def __hash__(self) -> int:
        return hash((self.schema_name, tuple(self._dimensions.items())))

    def __repr__(self) -> str:
        return (
            f"GenericAppraisalVector(schema={self.schema_name!r}, "
            f"dimensions={dict(self._dimensions)!r})"
        )


def scherer_core_affect(values: Mapping[str, float]) -> CoreAffect:
    """Project the five Scherer checks onto core affect (docs/behaviour.md §8 coefficients).

    Args:
        values: ``novelty``, ``goal_relevance``, ``coping_potential``,
            ``norm_congruence`` and ``self_relevance``.

    Returns:
        The ``CoreAffect`` (which clamps).
    """
    novelty = values["novelty"]
    goal = values["goal_relevance"]
    coping = values["coping_potential"]
    norm = values["norm_congruence"]
    self_rel = values["self_relevance"]
    c = 2.0 * coping - 1.0
    valence = 0.4805 * goal + 0.1862 * norm + 0.1643 * c + 0.0179 * novelty
    arousal = 0.3694 * abs(novelty) + 0.1357 * (1.0 - coping) + 0.2208 * self_rel + 0.1399
    return CoreAffect(valence=valence, arousal=arousal, dominance=coping)


def _direct_vad(values: Mapping[str, float]) -> CoreAffect:
    return CoreAffect(
        valence=values["valence"], arousal=values["arousal"], dominance=values["dominance"]
    )


_SCHERER_PROMPT = (
    "You rate events the way a person's emotional appraisal system would, following "
    "Scherer's component process model. Judge the event from the point of view of the "
    "person who experienced it and give one number per dimension:\n"
    "- novelty [-1, 1]: -1 entirely expected, 1 completely new or surprising\n"
    "- goal_relevance [-1, 1]: -1 blocks the person's goals, 1 strongly serves them\n"
    "- coping_potential [0, 1]: 0 helpless, 1 fully able to deal with it\n"
    "- norm_congruence [-1, 1]: -1 violates social or moral norms, 1 fully fits them\n"
    "- self_relevance [0, 1]: 0 of no personal concern, 1 deeply personal\n"
    "Answer with one JSON object holding exactly these five numbers and nothing else."
)

_VAD_PROMPT = (
    "You rate the emotion an event expresses on three dimensions and give one number "
    "per dimension:\n"
    "- valence [-1, 1]: -1 very unpleasant, 0 neutral, 1 very pleasant\n"
    "- arousal [0, 1]: 0 calm or subdued, 1 highly excited or activated\n"
    "- dominance [0, 1]: 0 controlled or powerless, 1 in control\n"
    "Answer with one JSON object holding exactly these three numbers and nothing else."
)

#: Scherer's five stimulus-evaluation checks; projection identical to ``AppraisalVector``.
SCHERER_CPM_SCHEMA = AppraisalSchema(
    name="scherer_cpm",
    dimensions=(
        AppraisalDimension(
            name="novelty",
            range=(-1.0, 1.0),
            neutral=0.0,
            description="-1 = entirely expected or routine, 1 = completely new or surprising",
        ),
        AppraisalDimension(
            name="goal_relevance",
            range=(-1.0, 1.0),
            neutral=0.0,
            description="-1 = blocks the person's goals, 0 = irrelevant, 1 = strongly serves them",
        ),
        AppraisalDimension(
            name="coping_potential",
            range=(0.0, 1.0),
            neutral=0.5,
            description="0 = helpless, 1 = fully able to deal with it",
        ),
        AppraisalDimension(
            name="norm_congruence",
            range=(-1.0, 1.0),
            neutral=0.0,
            description="-1 = violates social or moral norms, 1 = fully fits them",
        ),
        AppraisalDimension(
            name="self_relevance",
            range=(0.0, 1.0),
            neutral=0.0,
            description="0 = of no personal concern, 1 = deeply personal",
        ),
    ),
    system_prompt=_SCHERER_PROMPT,
    project_to_core_affect=scherer_core_affect,
)

#: Valence / arousal / dominance rated directly; the projection is the identity.
DIRECT_VAD_SCHEMA = AppraisalSchema(
    name="direct_vad",
    dimensions=(
        AppraisalDimension(
            name="valence",
            range=(-1.0, 1.0),
            neutral=0.0,
            description="-1 = very unpleasant, 0 = neutral, 1 = very pleasant",
        ),
        AppraisalDimension(
            name="arousal",
            range=(0.0, 1.0),
            neutral=0.5,
            description="0 = calm or subdued, 1 = highly excited or activated",
        ),
        AppraisalDimension(
            name="dominance",
            range=(0.0, 1.0),
            neutral=0.5,
            description="0 = controlled or powerless, 1 = in control",
        ),
    ),
    system_prompt=_VAD_PROMPT,
    project_to_core_affect=_direct_vad,
)
