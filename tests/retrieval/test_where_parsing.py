"""The parsed ``where=`` filter as a value (emotional_memory.filters): immutable and
hashable as its docs promise, so callers can cache per filter."""

from __future__ import annotations

from typing import Any

import pytest

from emotional_memory.filters import parse_where

WHERES: list[dict[str, Any]] = [
    {"topic": "work"},
    {"a": {"$in": [1, 2.5, None, True]}, "b": {"$exists": False}},
    {"$or": [{"valence": {"$gt": 0.2}}, {"tags.priority": {"$lte": 3}}]},
    {"timestamp": {"$gte": "2025-03-01T09:00:00+00:00"}},
]


@pytest.mark.parametrize("where", WHERES)
def test_a_parsed_filter_is_hashable_and_equal_filters_hash_equal(where: dict[str, Any]) -> None:
    first, again = parse_where(where), parse_where(dict(where))
    assert first is not None and again is not None
    assert first == again and hash(first) == hash(again)
    assert {first: "cached"}[again] == "cached"


@pytest.mark.parametrize(("where", "named"), [
    ({"timestamp": {"$in": ["2030-01-01T00:00:00Z", "garbage"]}}, r"'timestamp' \$in\[1\]"),
    ({"timestamp": {"$nin": ["2030-01-01T00:00:00"]}}, r"'timestamp' \$nin\[0\]"),
    ({"v": {"$in": [1, float("nan")]}}, r"'v' \$in\[1\]"),
])
def test_a_bad_list_element_is_named_by_its_operator_and_position(
    where: dict[str, Any], named: str
) -> None:
    """An element of ``$in`` / ``$nin`` that is refused is named as such (it was
    named ``$eq``, an operator the filter does not hold)."""
    with pytest.raises(ValueError, match=named):
        parse_where(where)
