"""The store contract, part 5: ``where`` filters.

* ``list_all(where=F)`` equals a plain-Python evaluation of the dialect
  (``support/where_oracle.py``); ``retrieve(q, where=F)`` answers, and changes its
  winners, exactly as the in-memory engine after deleting every memory that does not
  match ``F``: random filter trees, including ranges no database can express.
* Values that trip SQL and vector-database filters up (null against missing,
  booleans against numbers, arrays on the path, quotes, integers beyond float
  precision, a dotted key) select what the dialect selects, and ``retrieve`` with
  them answers as the in-memory engine.
* Numbers compare as Python compares them (exactly, ints with floats): every operator
  with ints and floats on both sides of 2**53 and 2**63 and floats whose shortest
  text is not their value (``1e+23``), alone and in random ``$and`` / ``$or`` trees.
* A filter of tens of thousands of values (``$in``, ``$nin``, ``$or``, ``$and``) answers
  as the dialect: past a database's limits (PostgreSQL's 65,535 parameters, the
  depth of Chroma's SQLite expressions) it is narrowed in Python.
"""

from __future__ import annotations

import operator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emotional_memory import CoreAffect, EmotionalMemory, EmotionalMemoryConfig
from emotional_memory.embedders import HashingEmbedder
from support.backends import ENGINES, Backend, oracle_store
from support.scopes import T0, WORDS, Clock, explained, fill_bank, lexical_config, tags
from support.where_oracle import (
    NUMBER_METAS,
    TRICKY_METAS,
    TRICKY_WHERES,
    more_wheres,
    number_sweep,
    number_wheres,
    oracle_matches,
)

pytestmark = pytest.mark.parametrize("backend", ENGINES, indirect=True)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(where=more_wheres, words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
       top_k=st.integers(1, 5), lexical=st.booleans())
def test_retrieve_where_answers_as_the_engine_without_the_other_memories(
    backend: Backend, where: dict[str, Any], words: list[str], top_k: int, lexical: bool,
) -> None:
    clock = Clock()
    config = lexical_config(lexical)
    embedder = HashingEmbedder(dim=32)
    filtered = EmotionalMemory(backend.new(), embedder, config=config, clock=clock)
    pruned = EmotionalMemory(oracle_store(), embedder, config=config, clock=clock)
    for engine in (filtered, pruned):
        fill_bank(engine, clock, n=15)
    matching = [m for m in pruned.list_all() if oracle_matches(m, where)]
    assert [m.content for m in filtered.list_all(where=where)] == [
        m.content for m in matching]
    keep = {m.id for m in matching}
    for m in pruned.list_all():
        if m.id not in keep:
            pruned.delete(m.id)
    clock.now = T0 + timedelta(hours=9)
    query = " ".join(words)
    got = filtered.retrieve_with_explanations(query, top_k, where=where)
    assert explained(got) == explained(pruned.retrieve_with_explanations(query, top_k))
    # the same side effects on the same winners, nothing else touched (the matching
    # memories' links to the others are what the deletes dropped)
    after = {m.content: m for m in filtered.list_all()}
    changed = [m.content for m in filtered.list_all() if m.tag.retrieval_count]
    assert changed == [m.content for m in pruned.list_all() if m.tag.retrieval_count]
    assert tags([after[m.content] for m in pruned.list_all()], inside=True) == tags(
        pruned.list_all())


def test_tricky_values_select_what_the_dialect_selects(backend: Backend) -> None:
    config = EmotionalMemoryConfig(auto_categorize=True)  # emotion labels to filter on
    clock_at = [datetime(2025, 3, 1, 9, 0, tzinfo=UTC)]
    engine, oracle = (
        EmotionalMemory(store, HashingEmbedder(dim=16), config=config,
                        clock=lambda: clock_at[0])
        for store in (backend.new(), oracle_store())
    )
    for i, meta in enumerate(TRICKY_METAS):
        clock_at[0] = datetime(2025, 3, 1, 8 + i, 30, tzinfo=UTC)
        for e in (engine, oracle):
            e.encode(f"memory {i}", metadata=meta,
                     affect=CoreAffect(valence=0.5 - 0.4 * i, arousal=0.6))
    for where in TRICKY_WHERES:
        want = [m.content for m in oracle.list_all() if oracle_matches(m, where)]
        assert [m.content for m in oracle.list_all(where=where)] == want, where
        assert [m.content for m in engine.list_all(where=where)] == want, where
    for where in TRICKY_WHERES[::3]:  # each retrieve changes the winners' tags
        assert [m.content for m in engine.retrieve("memory", 4, where=where)] == [
            m.content for m in oracle.retrieve("memory", 4, where=where)], where
    assert tags(engine.list_all()) == tags(oracle.list_all())


def _number_bank(store: Any) -> EmotionalMemory:
    engine = EmotionalMemory(store, HashingEmbedder(dim=16), clock=Clock())
    for i, v in enumerate(NUMBER_METAS):
        engine.encode(f"number {i}", metadata={"v": v},
                      affect=CoreAffect(valence=0.1, arousal=0.5))
    return engine


def test_numbers_compare_exactly_as_python_compares_them(backend: Backend) -> None:
    engine = _number_bank(backend.new())
    memories = engine.list_all()
    for where in number_sweep():
        want = [m.content for m in memories if oracle_matches(m, where)]
        assert [m.content for m in engine.list_all(where=where)] == want, where


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(where=number_wheres)
def test_number_filter_trees_select_what_the_dialect_selects(
    backend: Backend, where: dict[str, Any]
) -> None:
    engine, oracle = _number_bank(backend.new()), _number_bank(oracle_store())
    want = [m.content for m in oracle.list_all() if oracle_matches(m, where)]
    assert [m.content for m in engine.list_all(where=where)] == want
    assert [m.content for m in engine.retrieve("number", 3, where=where)] == [
        m.content for m in oracle.retrieve("number", 3, where=where)]


def test_filters_of_many_values_select_what_the_dialect_selects(backend: Backend) -> None:
    n = 5_000  # a few thousand comparisons crashed a Chroma server
    engine, oracle = (EmotionalMemory(store, HashingEmbedder(dim=16), clock=Clock())
                      for store in (backend.new(), oracle_store()))
    for i in range(4):
        for e in (engine, oracle):
            e.encode(f"memory {i}", metadata={"s": f"v{i}", "n": i},
                     affect=CoreAffect(valence=0.1, arousal=0.5))
    wheres: list[dict[str, Any]] = [
        {"s": {"$in": [f"v{i}" for i in range(2, 70_000)]}},  # > 65,535 SQL parameters
        {"n": {"$nin": list(range(2, n))}},
        {"$or": [{"s": f"v{i}"} for i in range(2, n)]},
        {"$and": [{"n": {"$ne": i}} for i in range(2, n)]},
    ]
    for where in wheres:
        want = [m.content for m in oracle.list_all() if oracle_matches(m, where)]
        assert [m.content for m in engine.list_all(where=where)] == want
        assert engine.scoped("elsewhere").list_all(where=where) == []
        assert [m.content for m in engine.retrieve("memory", 3, where=where)] == [
            m.content for m in oracle.retrieve("memory", 3, where=where)]


_TIMES = [T0, T0 + timedelta(microseconds=1), datetime(1, 1, 2, tzinfo=UTC),
          datetime(9000, 6, 1, 12, tzinfo=UTC), datetime.max.replace(tzinfo=UTC)]


def _time_operands() -> list[Any]:
    """Operands around each stored time, in several forms, and beyond the years."""
    east, west = timezone(timedelta(hours=14)), timezone(timedelta(hours=-12))
    out: list[Any] = [datetime.min.replace(tzinfo=east),
                      "9999-12-31T23:59:59.999999-12:00", "0001-01-01T00:00:00+14:00"]
    for t in _TIMES:
        for d in (-1, 0, 1):
            try:
                moment = t + timedelta(microseconds=d)
                out += [moment, moment.astimezone(west if d else east)]
            except OverflowError:  # past datetime.max (or its in another zone)
                continue
            out.append(moment.isoformat().replace("+00:00", "Z"))
    return out


def test_timestamps_compare_as_instants_as_python_compares_them(backend: Backend) -> None:
    clock = Clock()
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=16), clock=clock)
    for i, t in enumerate(_TIMES):
        clock.now = t
        engine.encode(f"moment {i}")
    clock.now = T0
    memories = engine.list_all()
    assert len(memories) == len(_TIMES)
    for value in _time_operands():
        moment = datetime.fromisoformat(value) if isinstance(value, str) else value
        for op, holds in _TIME_OPS.items():
            where = {"timestamp": {op: [value] if op in ("$in", "$nin") else value}}
            want = [m.content for m in memories if holds(_us(m.tag.timestamp), _us(moment))]
            assert [m.content for m in engine.list_all(where=where)] == want, where


def _us(moment: datetime) -> int:
    """Microseconds since 1970 (exact, for any aware datetime)."""
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


_TIME_OPS: dict[str, Any] = {
    "$eq": operator.eq, "$ne": operator.ne, "$gt": operator.gt, "$gte": operator.ge,
    "$lt": operator.lt, "$lte": operator.le, "$in": operator.eq, "$nin": operator.ne,
}
