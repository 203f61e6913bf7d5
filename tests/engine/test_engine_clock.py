"""The engine clock read in any zone: its readings are instants.

Python subtracts and compares two datetimes sharing one ``tzinfo`` by wall time,
ignoring ``fold``: with a clock in a DST zone, the second 01:10 of the night the
clocks go back came out 20 minutes *before* the first 01:30 (it is 40 minutes
after). The engine's columnar paths (microseconds since the epoch) had it right and
the generic ones (a plain store's, the decay of one tag) wrong, so one memory's
recency depended on the backend.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from emotional_memory import DecayConfig, EmotionalMemory, InMemoryStore
from emotional_memory.decay import compute_effective_strength
from emotional_memory.embedders import HashingEmbedder
from support.plain_store import PerMemoryStore

_ST_JOHNS = ZoneInfo("America/St_Johns")
_FIRST = datetime(2026, 11, 1, 1, 30, tzinfo=_ST_JOHNS)  # 04:00 UTC
_LATER = datetime(2026, 11, 1, 1, 10, tzinfo=_ST_JOHNS, fold=1)  # 04:40 UTC


class _Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.mark.parametrize("store", [InMemoryStore, PerMemoryStore], ids=["columnar", "plain"])
def test_recency_across_a_dst_fold_is_the_elapsed_instant(store: Any) -> None:
    clock = _Clock(_FIRST)
    engine = EmotionalMemory(store(), HashingEmbedder(dim=16), clock=clock)
    memory = engine.encode("rain on the harbour")
    assert memory.tag.timestamp.astimezone(UTC) == _FIRST.astimezone(UTC)
    clock.now = _LATER
    (found,) = engine.retrieve_with_explanations("rain", 1)
    oracle = compute_effective_strength(
        memory.tag.model_copy(update={"timestamp": _FIRST.astimezone(UTC)}),
        _LATER.astimezone(UTC), DecayConfig(),
    )
    assert oracle < memory.tag.consolidation_strength  # 2400 s of decay, not none
    assert found.breakdown.raw_signals.recency == pytest.approx(oracle, rel=1e-6)


def test_the_clocks_reading_is_stored_as_utc() -> None:
    east = timezone(timedelta(hours=14))
    clock = _Clock(datetime(2026, 1, 1, 9, tzinfo=east))
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), clock=clock)
    tag = engine.encode("rain").tag
    assert tag.timestamp == clock.now and tag.timestamp.tzinfo is UTC
    assert tag.mood_snapshot.timestamp.tzinfo is UTC


@pytest.mark.parametrize("reading", [datetime.max.replace(tzinfo=timezone(timedelta(hours=-12))),
                                     datetime.min.replace(tzinfo=timezone(timedelta(hours=14)))],
                         ids=["past 9999", "before year 1"])
def test_a_reading_outside_the_utc_years_is_a_value_error_naming_the_clock(
    reading: datetime,
) -> None:
    clock = _Clock(datetime(2026, 1, 1, tzinfo=UTC))
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), clock=clock)
    engine.encode("rain")
    clock.now = reading
    with pytest.raises(ValueError, match=r"clock\(\)"):
        engine.encode("more rain")
    with pytest.raises(ValueError, match=r"clock\(\)"):
        engine.retrieve("rain", 1)
    clock.now = datetime(2026, 1, 1, tzinfo=UTC)
    assert [m.content for m in engine.list_all()] == ["rain"]
