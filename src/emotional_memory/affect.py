"""Core affect: the instantaneous feeling, and its momentum.

Core affect follows Russell's (1980) circumplex with Mehrabian's dominance axis (the
PAD model): valence in [-1, 1], arousal and dominance in [0, 1]. Momentum carries the
first and second differences of that trajectory, so a memory remembers not only how
it felt but where the feeling was heading (docs/behaviour.md §1).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, field_validator

from emotional_memory._validation import clamp, finite, instance

MAX_PAD_DISTANCE: float = math.sqrt(6.0)
"""Largest Euclidean distance between two points of the PAD box (2^2 + 1 + 1 = 6)."""


class CoreAffect(BaseModel):
    """A point in valence/arousal/dominance space; out-of-range inputs are clamped.

    Attributes:
        valence: Pleasantness, clamped to [-1, 1].
        arousal: Activation, clamped to [0, 1].
        dominance: Sense of control, clamped to [0, 1] (default 0.5).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    valence: float
    arousal: float
    dominance: float = 0.5

    @field_validator("valence", mode="before")
    @classmethod
    def _clamp_valence(cls, v: float) -> float:
        return clamp(finite("valence", v), -1.0, 1.0)

    @field_validator("arousal", "dominance", mode="before")
    @classmethod
    def _clamp_unit(cls, v: float, info: object) -> float:
        name = getattr(info, "field_name", "value")
        return clamp(finite(str(name), v), 0.0, 1.0)

    @classmethod
    def neutral(cls) -> CoreAffect:
        """The neutral point (0, 0, 0.5) (docs/behaviour.md §1).

        Returns:
            A ``CoreAffect`` with valence 0, arousal 0 and dominance 0.5.
        """
        return cls(valence=0.0, arousal=0.0, dominance=0.5)

    def as_tuple(self) -> tuple[float, float, float]:
        """Return the affect as a plain tuple.

        Returns:
            ``(valence, arousal, dominance)``.
        """
        return (self.valence, self.arousal, self.dominance)

    def distance(self, other: CoreAffect) -> float:
        """Euclidean distance to ``other`` over (valence, arousal, dominance).

        Args:
            other: The affect to measure against.

        Returns:
            The distance, in [0, sqrt(6)] (``MAX_PAD_DISTANCE``).

        Raises:
            TypeError: If ``other`` is not a ``CoreAffect``.
        """
        instance("other", other, CoreAffect)
        return math.sqrt(
            (self.valence - other.valence) ** 2
            + (self.arousal - other.arousal) ** 2
            + (self.dominance - other.dominance) ** 2
        )

    def lerp(self, other: CoreAffect, alpha: float) -> CoreAffect:
        """Move towards ``other`` by ``alpha`` (clamped to [0, 1]), componentwise.

        Args:
            other: The target affect.
            alpha: Interpolation fraction; clamped to [0, 1], must be finite.

        Returns:
            A new ``CoreAffect`` equal to ``self + alpha * (other - self)``.

        Raises:
            ValueError: If ``alpha`` is NaN or infinite.
            TypeError: If ``other`` is not a ``CoreAffect``.
        """
        instance("other", other, CoreAffect)
        a = clamp(finite("alpha", alpha), 0.0, 1.0)
        valence = self.valence + a * (other.valence - self.valence)
        arousal = self.arousal + a * (other.arousal - self.arousal)
        dominance = self.dominance + a * (other.dominance - self.dominance)
        if (
            type(valence) is float and type(arousal) is float and type(dominance) is float
            and math.isfinite(valence) and math.isfinite(arousal) and math.isfinite(dominance)
        ):
            # what validation gives finite floats (the validators clamp), without its
            # cost: the object ``CoreAffect.model_construct`` builds, built directly
            out = object.__new__(CoreAffect)
            _set_attr(out, "__dict__", {
                "valence": clamp(valence, -1.0, 1.0),
                "arousal": clamp(arousal, 0.0, 1.0),
                "dominance": clamp(dominance, 0.0, 1.0),
            })
            _set_attr(out, "__pydantic_fields_set__", {"valence", "arousal", "dominance"})
            _set_attr(out, "__pydantic_extra__", None)
            _set_attr(out, "__pydantic_private__", None)
            return out
        return CoreAffect(valence=valence, arousal=arousal, dominance=dominance)


_set_attr = object.__setattr__


class AffectiveMomentum(BaseModel):
    """Velocity (``d_*``) and acceleration (``dd_*``) of core affect.

    Acceleration is the change of velocity between consecutive updates (it is not
    divided by time; docs/behaviour.md §1).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    d_valence: float = 0.0
    d_arousal: float = 0.0
    d_dominance: float = 0.0
    dd_valence: float = 0.0
    dd_arousal: float = 0.0
    dd_dominance: float = 0.0

    @field_validator(
        "d_valence", "d_arousal", "d_dominance", "dd_valence", "dd_arousal", "dd_dominance",
        mode="before",
    )
    @classmethod
    def _finite(cls, v: float, info: object) -> float:
        return finite(str(getattr(info, "field_name", "value")), v)

    @classmethod
    def zero(cls) -> AffectiveMomentum:
        """Momentum with every component 0.

        Returns:
            A zero ``AffectiveMomentum``.
        """
        return cls()

    def velocity(self) -> tuple[float, float, float]:
        """Return the 3-D velocity.

        Returns:
            ``(d_valence, d_arousal, d_dominance)``.
        """
        return (self.d_valence, self.d_arousal, self.d_dominance)

    def magnitude(self) -> float:
        """Euclidean norm of the velocity only (acceleration is ignored; docs/behaviour.md §1).

        Returns:
            The non-negative velocity norm (finite even where the squares overflow).
        """
        try:
            return math.sqrt(self.d_valence**2 + self.d_arousal**2 + self.d_dominance**2)
        except OverflowError:  # a component beyond ~1.3e154: squaring overflows
            return math.hypot(self.d_valence, self.d_arousal, self.d_dominance)
