"""One exact ranking rule: every backend returns the same ids in the same order.

The rule (``stores/_shared/ranking.py``): float64 cosine from a row-wise
multiply-and-sum, a NaN cosine or a zero norm scores 0, exact ties to the
later-inserted memory (as the original's stores), a query with no direction gives the
first embedded memories. Checked three ways:

- the shared function against a plain-Python oracle of the rule (``math.fsum``
  cosines, correctly rounded), on hypothesis-generated rows with zero, NaN, infinite,
  tiny and huge norms and exact duplicates;
- the in-process backends (every in-memory dtype that is lossless, SQLite) on the
  same generated rows: identical answers;
- all five backends (in-memory, SQLite, PostgreSQL, Qdrant, Chroma) on fixed
  adversarial banks: identical answers, including rows placed where a BLAS matrix
  product would round them differently.
"""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.models import Memory, make_emotional_tag
from emotional_memory.mood import MoodField
from emotional_memory.stores import InMemoryStore, SQLiteStore
from emotional_memory.stores._shared import ranking
from support.backends import Backend

T0 = datetime(2026, 5, 1, tzinfo=UTC)
D = 6


def _memory(i: int, vector: list[float] | None) -> Memory:
    tag = make_emotional_tag(
        CoreAffect(valence=0.1, arousal=0.2),
        AffectiveMomentum(),
        MoodField(valence=0.0, arousal=0.3, dominance=0.5, inertia=0.5, timestamp=T0),
        0.5,
        now=T0,
    )
    return Memory(id=f"m{i:03d}", content=f"memory {i}", embedding=vector, tag=tag)


# ---------------------------------------------------------------- the oracle


def oracle_cosine(row: list[float], query: list[float]) -> float:
    """The rule in plain Python: NaN or zero norm -> 0 (correctly rounded sums)."""
    with np.errstate(all="ignore"):
        try:
            dot = math.fsum(a * b for a, b in zip(row, query, strict=True))
            nr = math.sqrt(math.fsum(a * a for a in row))
            nq = math.sqrt(math.fsum(b * b for b in query))
        except (OverflowError, ValueError):
            return 0.0
    if math.isnan(dot) or math.isnan(nr) or nr == 0.0 or nq == 0.0:
        return 0.0
    if math.isinf(nr) or math.isinf(dot):
        value = dot / (nr * nq) if not (math.isinf(dot) and math.isinf(nr)) else math.nan
        return 0.0 if math.isnan(value) else value
    value = dot / (nr * nq)
    return 0.0 if math.isnan(value) else value


def check_against_oracle(
    rows: list[list[float] | None], query: list[float], got: list[str]
) -> None:
    """``got`` (ids, best first) is a ranking the oracle accepts.

    Scores computed by two correct float64 methods may differ in the last bits, so
    the oracle checks the order up to 1e-9 and exact ties strictly: of equal rows the
    later-inserted comes first, and a better row (by more than 1e-9) is never ranked
    below.
    """
    embedded = [(i, r) for i, r in enumerate(rows) if r]
    qn = math.sqrt(math.fsum(b * b for b in query)) if query else 0.0
    k = len(got)
    if not query or qn == 0.0 or not math.isfinite(qn):
        assert got == [f"m{i:03d}" for i, _ in embedded[:k]]
        return
    score = {f"m{i:03d}": oracle_cosine(r, query) for i, r in embedded}
    vector = {f"m{i:03d}": r for i, r in embedded}
    for a, b in itertools.pairwise(got):
        assert score[a] >= score[b] - 1e-9, (a, b, score[a], score[b])
        if vector[a] == vector[b]:
            assert a > b  # equal rows: the later-inserted first
    chosen = set(got)
    worst = min((score[g] for g in got), default=math.inf)
    for mid, s in score.items():
        if mid not in chosen:
            assert s <= worst + 1e-9, (mid, s, worst)


# ---------------------------------------------------------------- generated rows

_special = st.sampled_from([0.0, -0.0, math.nan, math.inf, -math.inf, 1e-200, 1e200, 0.1, 1 / 3])
_value = st.one_of(st.floats(-10, 10, allow_nan=False), _special)
_row = st.one_of(
    st.none(),
    st.just([0.0] * D),
    st.lists(_value, min_size=D, max_size=D),
    st.lists(st.floats(-1, 1, allow_nan=False, width=32), min_size=D, max_size=D),
)


@st.composite
def banks(draw: st.DrawFn) -> tuple[list[list[float] | None], list[float], int]:
    rows = draw(st.lists(_row, min_size=1, max_size=24))
    # exact duplicates of earlier rows (ties)
    for _ in range(draw(st.integers(0, 4))):
        pick = draw(st.integers(0, len(rows) - 1))
        rows.append(None if rows[pick] is None else list(rows[pick]))  # type: ignore[arg-type]
    query = draw(st.one_of(st.lists(st.floats(-5, 5, allow_nan=False), min_size=D, max_size=D),
                           st.just([0.0] * D)))
    return rows, query, draw(st.integers(1, 30))


def _fill(store: Any, rows: list[list[float] | None]) -> Any:
    for i, r in enumerate(rows):
        store.save(_memory(i, r))
    return store


def _ids(store: Any, query: list[float], k: int) -> list[str]:
    return [m.id for m in store.search_by_embedding(query, k)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(banks())
def test_shared_exact_search_follows_the_oracle(bank: tuple[Any, list[float], int]) -> None:
    rows, query, k = bank
    memories = [_memory(i, r) for i, r in enumerate(rows)]
    got = [m.id for m in ranking.exact_search(memories, query, k)]
    check_against_oracle(rows, query, got)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(banks())
def test_in_process_backends_agree(tmp_path_factory: pytest.TempPathFactory,
                                   bank: tuple[Any, list[float], int]) -> None:
    rows, query, k = bank
    reference = [m.id for m in ranking.exact_search(
        [_memory(i, r) for i, r in enumerate(rows)], query, k)]
    for dtype in ("float64", "float32"):
        store = _fill(InMemoryStore(embedding_dtype=dtype), rows)  # type: ignore[arg-type]
        assert _ids(store, query, k) == reference, dtype
    path = tmp_path_factory.mktemp("sqlite") / "m.db"
    with SQLiteStore(path) as sqlite_store:
        _fill(sqlite_store, rows)
        assert _ids(sqlite_store, query, k) == reference


# ---------------------------------------------------------------- every backend


def _adversarial_banks() -> dict[str, tuple[list[list[float] | None], list[list[float]]]]:
    rng = np.random.default_rng(7)
    d = 48
    base = rng.normal(size=(5, d))
    mixed: list[list[float] | None] = []
    for i in range(60):
        kind = i % 10
        if kind == 0:
            mixed.append(base[i % 5].tolist())  # exact duplicates across positions
        elif kind == 1:
            mixed.append((base[i % 5] * (1 + 1e-15)).tolist())  # last-bit neighbours
        elif kind == 2:
            mixed.append([0.0] * d)
        elif kind == 3:
            mixed.append([math.nan] + [0.5] * (d - 1))
        elif kind == 4:
            mixed.append([math.inf] + [0.5] * (d - 1))
        elif kind == 5:
            mixed.append((rng.normal(size=d) * 1e-200).tolist())
        elif kind == 6:
            mixed.append((rng.normal(size=d) * 1e155).tolist())
        elif kind == 7:
            mixed.append(None)
        else:
            # magnitudes spread over 12 orders: sums whose rounding depends on order
            mixed.append((rng.normal(size=d) * 10.0 ** rng.integers(-6, 6, size=d)).tolist())
    queries = [base[0].tolist(), rng.normal(size=d).tolist(), [0.0] * d,
               (base[2] * 10.0 ** rng.integers(-6, 6, size=d)).tolist()]
    ties = [base[1].tolist() for _ in range(7)] + [base[2].tolist() for _ in range(7)]
    return {
        "mixed": (mixed, queries),
        "ties": (ties, [base[1].tolist(), base[2].tolist(), (-base[1]).tolist()]),
    }


BANKS = _adversarial_banks()


@pytest.mark.parametrize("bank", sorted(BANKS))
def test_every_backend_ranks_like_the_shared_rule(backend: Backend, bank: str) -> None:
    rows, queries = BANKS[bank]
    store = _fill(backend.new(), rows)
    memories = [_memory(i, r) for i, r in enumerate(rows)]
    for query in queries:
        for k in (1, 5, len(rows)):
            expected = [m.id for m in ranking.exact_search(memories, query, k)]
            assert _ids(store, query, k) == expected, (bank, k)
            check_against_oracle(rows, query, expected)
