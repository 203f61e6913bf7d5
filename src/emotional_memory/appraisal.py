"""Cognitive appraisal (Scherer's component process model) mapped onto core affect.

An :class:`AppraisalVector` scores an event on five stimulus-evaluation checks;
:meth:`AppraisalVector.to_core_affect` projects it to valence/arousal/dominance with
fixed linear coefficients (SPEC 8).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, field_validator

from emotional_memory._validation import finite
from emotional_memory.affect import CoreAffect


class AppraisalVector(BaseModel):
    """Five appraisal dimensions of an event.

    Attributes:
        novelty: [-1, 1] expected..surprising.
        goal_relevance: [-1, 1] obstructive..conducive.
        coping_potential: [0, 1] helpless..in control.
        norm_congruence: [-1, 1] violates..fits norms and values.
        self_relevance: [0, 1] how much it concerns oneself.

    Values outside their range raise ``ValueError`` naming the field.
    """

    model_config = ConfigDict(frozen=True)

    novelty: float = 0.0
    goal_relevance: float = 0.0
    coping_potential: float = 0.5
    norm_congruence: float = 0.0
    self_relevance: float = 0.5

    @field_validator("novelty", "goal_relevance", "norm_congruence", mode="before")
    @classmethod
    def _signed(cls, v: float, info: object) -> float:
        name = str(getattr(info, "field_name", "value"))
        v = finite(name, v)
        if not -1.0 <= v <= 1.0:
            raise ValueError(f"{name} must lie in [-1, 1], got {v}")
        return v

    @field_validator("coping_potential", "self_relevance", mode="before")
    @classmethod
    def _unit(cls, v: float, info: object) -> float:
        name = str(getattr(info, "field_name", "value"))
        v = finite(name, v)
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"{name} must lie in [0, 1], got {v}")
        return v

    def to_core_affect(self) -> CoreAffect:
        """Project onto PAD space (coefficients of SPEC 8; CoreAffect clamps)."""
        c = 2.0 * self.coping_potential - 1.0
        valence = (
            0.4805 * self.goal_relevance
            + 0.1862 * self.norm_congruence
            + 0.1643 * c
            + 0.0179 * self.novelty
        )
        arousal = (
            0.3694 * abs(self.novelty)
            + 0.1357 * (1.0 - self.coping_potential)
            + 0.2208 * self.self_relevance
            + 0.1399
        )
        return CoreAffect(valence=valence, arousal=arousal, dominance=self.coping_potential)
