"""Mood: a slow-moving affective background that regresses towards a baseline.

Mood differs from core affect in time scale (Russell 2003): it integrates recent
feelings with an inertia-dependent exponential moving average, and between updates
it relaxes back towards a resting baseline with a half-life that grows with inertia.
"""

from __future__ import annotations

import math
from datetime import datetime

from pydantic import BaseModel, ConfigDict, field_validator

from emotional_memory._unvalidated import unvalidated
from emotional_memory._validation import (
    aware,
    clamp,
    finite,
    instance,
    non_negative,
    positive,
    utc_now,
)
from emotional_memory.affect import CoreAffect


class MoodDecayConfig(BaseModel):
    """How mood relaxes towards its baseline between updates.

    Attributes:
        base_half_life_seconds: Half-life at zero inertia (must be > 0).
        inertia_scale: Half-life multiplier per unit of inertia.
        baseline_valence, baseline_arousal, baseline_dominance: The resting mood.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_half_life_seconds: float = 3600.0
    inertia_scale: float = 2.0
    baseline_valence: float = 0.0
    baseline_arousal: float = 0.3
    baseline_dominance: float = 0.5

    @field_validator("base_half_life_seconds", mode="before")
    @classmethod
    def _positive(cls, v: float) -> float:
        return positive("base_half_life_seconds", v)

    @field_validator("inertia_scale", mode="before")
    @classmethod
    def _non_negative(cls, v: float) -> float:
        return non_negative("inertia_scale", v)

    @field_validator("baseline_valence", "baseline_arousal", "baseline_dominance",
                     mode="before")
    @classmethod
    def _finite(cls, v: float, info: object) -> float:
        return finite(str(getattr(info, "field_name", "value")), v)


class MoodField(BaseModel):
    """The current mood: a PAD point with inertia and the time it was last set.

    Attributes:
        valence: clamped to [-1, 1].
        arousal, dominance, inertia: clamped to [0, 1].
        timestamp: timezone-aware time of the last update.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    valence: float
    arousal: float
    dominance: float
    inertia: float
    timestamp: datetime

    @field_validator("valence", mode="before")
    @classmethod
    def _clamp_valence(cls, v: float) -> float:
        return clamp(finite("valence", v), -1.0, 1.0)

    @field_validator("arousal", "dominance", "inertia", mode="before")
    @classmethod
    def _clamp_unit(cls, v: float, info: object) -> float:
        return clamp(finite(str(getattr(info, "field_name", "value")), v), 0.0, 1.0)

    @field_validator("timestamp", mode="after")
    @classmethod
    def _aware(cls, v: datetime) -> datetime:
        return aware("timestamp", v)

    @classmethod
    def neutral(cls, now: datetime | None = None) -> MoodField:
        """Neutral mood (0, 0, 0.5) with inertia 0.5 (docs/behaviour.md §1).

        Args:
            now: Timezone-aware timestamp for the mood (default: UTC now).

        Returns:
            A neutral ``MoodField`` stamped ``now``.
        """
        return cls(
            valence=0.0, arousal=0.0, dominance=0.5, inertia=0.5,
            timestamp=now if now is not None else utc_now(),
        )

    def as_tuple(self) -> tuple[float, float, float]:
        """Return the mood's PAD point as a plain tuple (inertia excluded).

        Returns:
            ``(valence, arousal, dominance)``.
        """
        return (self.valence, self.arousal, self.dominance)

    def distance(self, other: MoodField) -> float:
        """Euclidean distance to ``other`` over (valence, arousal, dominance).

        Args:
            other: The mood to measure against (inertia and timestamp are ignored).

        Returns:
            The distance, in [0, sqrt(6)].

        Raises:
            TypeError: If ``other`` is not a ``MoodField``.
        """
        instance("other", other, MoodField)
        return math.sqrt(
            (self.valence - other.valence) ** 2
            + (self.arousal - other.arousal) ** 2
            + (self.dominance - other.dominance) ** 2
        )

    def regress(self, now: datetime, config: MoodDecayConfig) -> MoodField:
        """Relax towards the baseline for the time elapsed since ``timestamp``.

        Args:
            now: aware datetime; times before ``timestamp`` count as no elapsed time.
            config: decay parameters (the original's keyword name).

        Returns:
            A new MoodField stamped ``now`` (inertia unchanged).

        Raises:
            TypeError: ``config`` is not a ``MoodDecayConfig``, ``now`` not a datetime.
            ValueError: ``now`` is naive.
        """
        cfg = instance("config", config, MoodDecayConfig)
        elapsed = max(0.0, (aware("now", now) - self.timestamp).total_seconds())
        half_life = cfg.base_half_life_seconds * (1.0 + self.inertia * cfg.inertia_scale)
        f = math.exp(-elapsed * math.log(2.0) / half_life)
        return MoodField(
            valence=cfg.baseline_valence + (self.valence - cfg.baseline_valence) * f,
            arousal=cfg.baseline_arousal + (self.arousal - cfg.baseline_arousal) * f,
            dominance=cfg.baseline_dominance + (self.dominance - cfg.baseline_dominance) * f,
            inertia=self.inertia,
            timestamp=now,
        )

    def update(
        self,
        core_affect: CoreAffect,
        alpha: float = 0.1,
        now: datetime | None = None,
        decay_config: MoodDecayConfig | None = None,
    ) -> MoodField:
        """Blend ``core_affect`` into the mood with effective rate ``alpha*(1-inertia)``.

        Args:
            core_affect: the new feeling.
            alpha: base blending rate.
            now: update time (default: UTC now).
            decay_config: when given, regress to ``now`` before blending.

        Returns:
            A new MoodField stamped ``now``.

        Raises:
            TypeError: ``core_affect`` is not a ``CoreAffect``, ``decay_config`` not a
                ``MoodDecayConfig`` (or None), ``alpha`` not a number.
            ValueError: ``alpha`` is not finite, ``now`` is naive.
        """
        instance("core_affect", core_affect, CoreAffect)
        instance("decay_config", decay_config, MoodDecayConfig, optional=True)
        alpha = finite("alpha", alpha)
        now = utc_now() if now is None else aware("now", now)
        base = self.regress(now, decay_config) if decay_config is not None else self
        e = alpha * (1.0 - base.inertia)
        valence = (1.0 - e) * base.valence + e * core_affect.valence
        arousal = (1.0 - e) * base.arousal + e * core_affect.arousal
        dominance = (1.0 - e) * base.dominance + e * core_affect.dominance
        inertia = base.inertia
        if (
            type(valence) is float and type(arousal) is float and type(dominance) is float
            and type(inertia) is float and type(now) is datetime
            and math.isfinite(valence) and math.isfinite(arousal)
            and math.isfinite(dominance) and math.isfinite(inertia)
        ):
            # What validation gives finite floats and a checked aware datetime (the
            # validators clamp), without its cost (as CoreAffect.lerp does).
            return unvalidated(MoodField, {
                "valence": clamp(valence, -1.0, 1.0),
                "arousal": clamp(arousal, 0.0, 1.0),
                "dominance": clamp(dominance, 0.0, 1.0),
                "inertia": clamp(inertia, 0.0, 1.0),
                "timestamp": now,
            })
        return MoodField(
            valence=valence, arousal=arousal, dominance=dominance, inertia=inertia,
            timestamp=now,
        )
