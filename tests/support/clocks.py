"""A deterministic engine clock for tests that compare two runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class SecondClock:
    """One second later per call, from ``START``: two engines given one each see the
    same times when they make the same calls."""

    def __init__(self) -> None:
        self.t = START

    def __call__(self) -> datetime:
        self.t += timedelta(seconds=1)
        return self.t
