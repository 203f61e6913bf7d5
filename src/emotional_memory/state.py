"""AffectiveState: core affect, its momentum and the mood, evolving over time.

Momentum is estimated from the last three timestamped affect points by finite
differences, so the state knows whether feelings are rising or falling (docs/behaviour.md §1).
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr

from emotional_memory._unvalidated import unvalidated
from emotional_memory._validation import aware, finite, in_utc, utc_now
from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.mood import MoodDecayConfig, MoodField

_HISTORY_LEN = 3
_SNAPSHOT_KEYS = frozenset({"core_affect", "momentum", "mood", "history", "_history"})
"""Keys of a state snapshot of this library or of the original (history as ``_history``)."""
_MIN_DT_SECONDS = 0.001

HistoryPoint = tuple[datetime, float, float, float]


def _velocity(p0: HistoryPoint, p1: HistoryPoint) -> tuple[float, float, float]:
    dt = max((p1[0] - p0[0]).total_seconds(), _MIN_DT_SECONDS)
    return ((p1[1] - p0[1]) / dt, (p1[2] - p0[2]) / dt, (p1[3] - p0[3]) / dt)


def momentum_from_history(history: list[HistoryPoint]) -> AffectiveMomentum:
    """Finite-difference momentum from up to three ``(t, v, a, d)`` points.

    Args:
        history: oldest first.

    Returns:
        Zero momentum for fewer than two points; velocity from the last two points
        (dt floored at 1 ms); with three points, acceleration = velocity minus the
        previous velocity (not divided by time).
    """
    if len(history) < 2:
        return AffectiveMomentum.zero()
    vel = _velocity(history[-2], history[-1])
    acc = (0.0, 0.0, 0.0)
    if len(history) >= 3:
        prev = _velocity(history[-3], history[-2])
        acc = (vel[0] - prev[0], vel[1] - prev[1], vel[2] - prev[2])
    (dv, da, dd), (ddv, dda, ddd) = vel, acc
    values = {
        "d_valence": dv, "d_arousal": da, "d_dominance": dd,
        "dd_valence": ddv, "dd_arousal": dda, "dd_dominance": ddd,
    }
    # A finite sum: every term finite (any other case is validated, and rejected).
    if type(dv) is type(da) is type(dd) is type(ddv) is type(dda) is type(ddd) is float and (
        math.isfinite(dv + da + dd + ddv + dda + ddd)
    ):
        # What validation gives finite floats (it only checks them), without its cost.
        return unvalidated(AffectiveMomentum, values)
    return AffectiveMomentum(**values)


def _timestamp(field: str, value: object) -> datetime:
    """A history point's datetime, or an ISO 8601 string of one; errors name ``field``."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        raise TypeError(f"{field} must be an ISO 8601 str, got {type(value).__name__}")
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{field} is not an ISO 8601 timestamp: {value[:64]!r}") from None


class AffectiveState(BaseModel):
    """The agent's affective state: ``core_affect``, ``momentum`` and ``mood``.

    Immutable: :meth:`update` returns a new state. A private history of the last
    three points drives momentum and survives :meth:`snapshot`/:meth:`restore`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    core_affect: CoreAffect
    momentum: AffectiveMomentum
    mood: MoodField
    _history: list[HistoryPoint] = PrivateAttr(default_factory=list)

    @classmethod
    def initial(cls, now: datetime | None = None) -> AffectiveState:
        """Neutral affect, zero momentum, neutral mood, empty history (docs/behaviour.md §1).

        Args:
            now: Timestamp for the neutral mood (aware; default UTC now).

        Returns:
            A fresh ``AffectiveState``.
        """
        return cls(
            core_affect=CoreAffect.neutral(),
            momentum=AffectiveMomentum.zero(),
            mood=MoodField.neutral(now),
        )

    @property
    def history(self) -> list[HistoryPoint]:
        """A copy of the private ``(timestamp, v, a, d)`` history, oldest first."""
        return list(self._history)

    def update(
        self,
        new_affect: CoreAffect,
        now: datetime | None = None,
        mood_alpha: float = 0.1,
        mood_decay: MoodDecayConfig | None = None,
    ) -> AffectiveState:
        """Feed one new affect observation.

        Args:
            new_affect: the observed core affect.
            now: observation time (aware; default UTC now).
            mood_alpha: mood blending rate.
            mood_decay: optional mood regression applied before blending.

        Returns:
            The new state (this one is unchanged).
        """
        if not isinstance(new_affect, CoreAffect):
            raise TypeError("new_affect must be a CoreAffect")
        now = utc_now() if now is None else aware("now", now)
        mood = self.mood.update(new_affect, alpha=mood_alpha, now=now, decay_config=mood_decay)
        history = [*self._history, (now, *new_affect.as_tuple())][-_HISTORY_LEN:]
        out = AffectiveState(
            core_affect=new_affect, momentum=momentum_from_history(history), mood=mood
        )
        out._history = history
        return out

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able dict of the whole state, private history included.

        Returns:
            A dict with keys ``core_affect``, ``momentum``, ``mood`` (pydantic JSON
            dumps) and ``_history`` (list of ``[iso_timestamp, v, a, d]``, oldest
            first; the original library's key, so either library reads the other's).
        """
        return {
            "core_affect": self.core_affect.model_dump(mode="json"),
            "momentum": self.momentum.model_dump(mode="json"),
            "mood": self.mood.model_dump(mode="json"),
            "_history": [[t.isoformat(), v, a, d] for (t, v, a, d) in self._history],
        }

    @classmethod
    def restore(cls, data: dict[str, Any]) -> AffectiveState:
        """Rebuild a state from :meth:`snapshot` output; momentum continues correctly.

        Args:
            data: A dict as produced by :meth:`snapshot` of this library or of the
                original one. The history (key ``_history``, or ``history`` as older
                versions of this library wrote it) is optional; entries with fewer
                than four items are skipped, extra items are ignored, values are
                clamped as a ``CoreAffect``'s, and only the last three points are kept.

        Returns:
            The restored ``AffectiveState``, private history included.

        Raises:
            TypeError: when ``data`` is not a dict.
            ValueError: when ``data`` lacks a field or holds invalid values (a time
                outside the years 1 to 9999 in UTC included).
        """
        if not isinstance(data, dict):
            raise TypeError("state snapshot must be a dict")
        unknown = sorted(str(k) for k in data if k not in _SNAPSHOT_KEYS)
        if unknown:
            raise ValueError(
                f"state snapshot has unknown field(s) {unknown}; expected "
                f"{sorted(_SNAPSHOT_KEYS)}"
            )
        for key in ("core_affect", "momentum", "mood"):
            if key not in data:
                raise ValueError(f"state snapshot lacks field {key!r}")
        out = cls(
            core_affect=CoreAffect.model_validate(data["core_affect"]),
            momentum=AffectiveMomentum.model_validate(data["momentum"]),
            mood=MoodField.model_validate(data["mood"]),
        )
        # an instant no store keeps (past 9999 in UTC): the engine's clock floor and
        # the stores read times in UTC
        in_utc("mood.timestamp", out.mood.timestamp)
        history: list[HistoryPoint] = []
        raw_history = data.get("_history", data.get("history"))
        if raw_history is None:
            raw_history = []
        if isinstance(raw_history, str | bytes | dict) or not isinstance(raw_history, list | tuple):
            raise ValueError("state snapshot field '_history' must be a list")
        for i, point in enumerate(raw_history):
            if not isinstance(point, list | tuple) or len(point) < 4:
                continue  # the original library skips malformed points too
            point = point[:4]
            t = _timestamp(f"history[{i}].timestamp", point[0])
            v, a, d = (finite(f"history[{i}][{j}]", x) for j, x in enumerate(point[1:], 1))
            # clamped as a CoreAffect (so the snapshot's core_affect and mood): a point
            # out of range (hand-edited) would give momentum without bound, or infinite
            v, a, d = CoreAffect(valence=v, arousal=a, dominance=d).as_tuple()
            t = aware(f"history[{i}].timestamp", t)
            in_utc(f"history[{i}].timestamp", t)
            history.append((t, v, a, d))
        out._history = history[-_HISTORY_LEN:]
        return out
