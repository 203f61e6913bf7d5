"""The ``where`` filter dialect evaluated directly on a memory, in plain Python
(independent of :mod:`emotional_memory.filters`), and hypothesis strategies of filters."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from emotional_memory.models import Memory
from support.scopes import T0

MISSING = object()
"""The value of a metadata path that does not exist."""


def value_of(memory: Memory, field: str) -> Any:
    """A field's value: a built-in field of the tag, else a dotted metadata path
    (``metadata.`` first names the metadata key itself; ``MISSING`` where the path
    does not exist)."""
    missing = MISSING
    builtins: dict[str, Callable[[Memory], Any]] = {
        "valence": lambda m: m.tag.core_affect.valence,
        "arousal": lambda m: m.tag.core_affect.arousal,
        "dominance": lambda m: m.tag.core_affect.dominance,
        "retrieval_count": lambda m: m.tag.retrieval_count,
        "timestamp": lambda m: m.tag.timestamp,
        "emotion": lambda m: m.tag.emotion_label.primary if m.tag.emotion_label else None,
    }
    if field in builtins:
        return builtins[field](memory)
    node: Any = memory.metadata
    if field.startswith("metadata."):  # names the metadata key itself, never a built-in
        field = field[len("metadata."):]
    for key in field.split("."):
        if not isinstance(node, dict) or key not in node:
            return missing
        node = node[key]
    return node


def _kind(x: Any) -> str:
    """The comparison class: booleans, numbers (int and float alike), else the type."""
    if isinstance(x, bool):
        return "bool"
    if isinstance(x, int | float):
        return "num"
    return type(x).__name__


def _compare(value: Any, op: str, operand: Any) -> bool:
    """One operator: equality only within a comparison class, null equals missing,
    ranges only between values of one class (datetimes with datetimes)."""
    def eq(v: Any, o: Any) -> bool:
        if o is None:
            return v is None or v is MISSING
        return v is not MISSING and _kind(v) == _kind(o) and v == o

    if op == "$exists":
        return (value is not MISSING) is operand
    if op == "$eq":
        return eq(value, operand)
    if op == "$ne":
        return not eq(value, operand)
    if op == "$in":
        return any(eq(value, o) for o in operand)
    if op == "$nin":
        return not any(eq(value, o) for o in operand)
    if isinstance(operand, datetime):
        if not isinstance(value, datetime):
            return False
    elif value is MISSING or value is None or _kind(value) != _kind(operand):
        return False
    return {"$gt": value > operand, "$gte": value >= operand, "$lt": value < operand,
            "$lte": value <= operand}[op]


def oracle_matches(memory: Memory, where: dict[str, Any]) -> bool:
    """The dialect, evaluated directly on a memory (independent of the library)."""
    results = []
    for key, value in where.items():
        if key == "$and":
            results.append(all(oracle_matches(memory, c) for c in value))
        elif key == "$or":
            results.append(any(oracle_matches(memory, c) for c in value))
        elif isinstance(value, dict):
            for op, operand in value.items():
                if key == "timestamp" and isinstance(operand, str):
                    operand = datetime.fromisoformat(operand)
                results.append(_compare(value_of(memory, key), op, operand))
        else:
            results.append(_compare(value_of(memory, key), "$eq", value))
    return all(results)


leaf = st.one_of(  # one condition on the fields fill_bank writes
    st.builds(lambda op, v: {"valence": {op: v}}, st.sampled_from(["$gt", "$lte", "$lt"]),
              st.floats(-1, 1)),
    st.builds(lambda op, v: {"arousal": {op: v}}, st.sampled_from(["$gte", "$lt"]),
              st.floats(0, 1)),
    st.builds(lambda v: {"topic": v}, st.sampled_from(["work", "home", "travel"])),
    st.builds(lambda vs: {"topic": {"$in": vs}},
              st.lists(st.sampled_from(["work", "home", "travel"]), min_size=1, max_size=2)),
    st.builds(lambda vs: {"topic": {"$nin": vs}},
              st.lists(st.sampled_from(["work", "home"]), min_size=1, max_size=2)),
    st.builds(lambda v: {"tags.priority": {"$gte": v}}, st.integers(0, 3)),
    st.builds(lambda v: {"tags.priority": {"$ne": v}}, st.integers(0, 3)),
    st.builds(lambda b: {"tags": {"$exists": b}}, st.booleans()),
    st.builds(lambda m: {"timestamp": {"$lt": (T0 + timedelta(minutes=m)).isoformat()}},
              st.integers(0, 200)),
    st.builds(lambda e: {"emotion": e}, st.sampled_from(["joy", "sadness", "anger", "fear"])),
    st.builds(lambda n: {"retrieval_count": {"$gte": n}}, st.integers(0, 2)),
)

where_dicts = st.recursive(  # $and / $or trees of up to 5 conditions
    leaf,
    lambda inner: st.one_of(
        st.builds(lambda cs: {"$and": cs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda cs: {"$or": cs}, st.lists(inner, min_size=1, max_size=3)),
    ),
    max_leaves=5,
)

more_wheres = st.one_of(
    where_dicts,
    # ranges no vector database can express: answered from a narrowed superset
    st.builds(lambda v: {"topic": {"$gt": v}}, st.sampled_from(["home", "t", "a"])),
    st.builds(lambda v: {"tags.priority": {"$lt": v}}, st.just(2**60)),
    # nulls, booleans, mixed $in, $exists on leaves
    st.builds(lambda v: {"tags.priority": v}, st.sampled_from([None, 1, 1.0, True])),
    st.builds(lambda vs: {"topic": {"$in": vs}},
              st.lists(st.sampled_from(["work", 1, None, True]), min_size=1, max_size=3)),
    st.builds(lambda b: {"tags.priority": {"$exists": b}}, st.booleans()),
)
"""``where_dicts`` and filters that trip translations up (string ranges, huge numbers,
null against missing, booleans against numbers)."""

TRICKY_METAS: list[dict[str, Any]] = [
    {"n": 1, "s": "x", "b": True, "z": None, "arr": [5], "deep": {"k": 3},
     "big": 2**60 + 1, "quote": "it's \\ fine", "d": {"k": "v"}},
    {"n": 2.5, "s": "y", "deep": {"k": "3"}, "big": 2**60, "l": ["x", 1], "huge": 10**400},
    {"n": 1e308, "s": "", "dotted.key": 1, "b": False, "huge": -(10**400)},
    {"b": 1, "deep": [1], "s": 3},
    {},
]
"""Metadata that trips SQL and vector-database filters up: null against missing,
booleans against numbers, arrays and objects on the path, quotes and backslashes,
integers beyond float precision and beyond float's range, a key holding a dot."""

TRICKY_WHERES: list[dict[str, Any]] = [
    {"n": 1.0}, {"b": 1}, {"b": True}, {"b": False}, {"b": {"$ne": True}},
    {"n": {"$gt": "0"}}, {"n": {"$ne": 1}}, {"n": {"$nin": [1, 2.5]}}, {"n": {"$lte": 2.5}},
    {"n": {"$gt": 1e300}}, {"z": None}, {"z": {"$exists": True}}, {"z": {"$ne": None}},
    {"metadata.n": 2.5}, {"arr.0": 5}, {"deep.k": {"$gte": 2}}, {"deep": {"$exists": True}},
    {"d.k": "v"}, {"d": {"$exists": True}}, {"d": None}, {"l": "x"}, {"l": {"$exists": True}},
    {"s": {"$in": ["x", 3]}}, {"s": {"$gte": "x"}}, {"s": ""},
    {"$or": [{"n": 1}, {"s": "y"}], "s": {"$ne": "x"}},
    {"emotion": None}, {"emotion": {"$ne": "joy"}}, {"emotion": {"$exists": False}},
    {"valence": None}, {"valence": {"$ne": None}}, {"valence": {"$gt": 0.0}},
    {"retrieval_count": 0}, {"timestamp": {"$gte": "2025-03-01T09:00:00+00:00"}},
    {"big": 2**60 + 1}, {"big": {"$gt": 2**60}}, {"big": {"$gt": 10}},
    {"quote": "it's \\ fine"}, {"dotted.key": 1},
    {"huge": {"$gt": 10}}, {"huge": {"$lt": -1e308}}, {"huge": {"$gte": 1e308}},
    {"huge": {"$ne": 3}},
]
"""Filters over ``TRICKY_METAS`` whose answers stores have got wrong."""

NUMBER_VALUES: list[Any] = [
    0, -0.0, 1, 1.0, True, False, 0.1, 0.30000000000000004, 5e-324,
    2**53 - 1, 2**53, 2**53 + 1, float(2**53), 2**53 + 2.0,
    1e16, 10**16, 10**16 + 1,
    1e23, 10**23, 99999999999999991611392, 99999999999999991611393, -1e23, -(10**23),
    2**63 - 1, 2**63, float(2**63), 2**64, float(2**64), 2**64 + 1,
    -(2**63), -(2**63) - 1, float(-(2**63)),
    2.0**70, 2**70, 2**70 + 1, 1e300, 10**300,
]
"""Numbers whose order and equality a translation gets wrong when it compares them in
another form than Python's exact int/float comparison: ints and floats on both sides
of 2**53 and 2**63, and floats whose shortest decimal text (``1e+23``) is not their
value (99999999999999991611392): each one is a stored value and an operand."""

NUMBER_METAS: list[Any] = [*NUMBER_VALUES, 10**400, "1", None, [1], {"a": 1}]
"""The ``v`` of each memory of a numbers bank: ``NUMBER_VALUES`` and what a number
must not match (an int beyond float's range, a string, null, a list, an object)."""

_RANGES = ["$gt", "$gte", "$lt", "$lte"]

_NON_BOOL = [v for v in NUMBER_VALUES if not isinstance(v, bool)]

number_leaf = st.one_of(
    st.builds(lambda op, v: {"v": {op: v}}, st.sampled_from(["$eq", "$ne"]),
              st.sampled_from(NUMBER_VALUES)),
    st.builds(lambda op, v: {"v": {op: v}}, st.sampled_from(_RANGES), st.sampled_from(_NON_BOOL)),
    st.builds(lambda op, vs: {"v": {op: vs}}, st.sampled_from(["$in", "$nin"]),
              st.lists(st.sampled_from(NUMBER_VALUES), min_size=0, max_size=3)),
)
number_wheres = st.recursive(  # $and / $or trees of number conditions on ``v``
    number_leaf,
    lambda inner: st.one_of(
        st.builds(lambda cs: {"$and": cs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda cs: {"$or": cs}, st.lists(inner, min_size=1, max_size=3)),
    ),
    max_leaves=4,
)
"""Filters over a numbers bank (``NUMBER_METAS``): comparisons with ``NUMBER_VALUES``."""


def number_sweep() -> list[dict[str, Any]]:
    """Every operator with every one of ``NUMBER_VALUES`` (ranges with numbers only)."""
    out: list[dict[str, Any]] = []
    for value in NUMBER_VALUES:
        for op in ["$eq", "$ne", *_RANGES, "$in", "$nin"]:
            if op in _RANGES and isinstance(value, bool):
                continue
            out.append({"v": {op: [value] if op in ("$in", "$nin") else value}})
    return out
