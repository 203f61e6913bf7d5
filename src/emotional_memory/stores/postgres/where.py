"""A parsed ``where`` filter as one PostgreSQL boolean expression, exactly.

:func:`where_sql` renders a :class:`~emotional_memory.filters.Where` clause tree over
``PostgresStore``'s table (typed columns for the built-ins, ``metadata jsonb``) with
exactly the semantics of :meth:`Where.matches`, or returns None when some part has
no exact SQL form, and the store then serves the operation through the generic
filtered path. What is rendered:

- built-ins: ``valence`` / ``arousal`` / ``dominance`` (float8 columns),
  ``retrieval_count`` (bigint), ``timestamp`` (``created_us``, integer microseconds),
  ``emotion`` (``label[1]``, the label's primary; NULL without a label): equality,
  ``$ne``, ``$in``, ``$nin``, ``$exists``, and the numeric ranges;
- metadata paths (``metadata #> path``, every proper prefix required to be a JSON
  object, as the reference walks only dicts): equality with strings, booleans,
  numbers (``jsonb_typeof = 'number'`` then an exact ``numeric`` comparison) and null
  (missing or JSON null), ``$ne``, ``$in``, ``$nin``, ``$exists`` and numeric ranges.

Not rendered (None): ranges with a string operand (SQL orders text by collation, the
reference by code point). Every leaf is wrapped in ``COALESCE(..., false)`` so SQL's
NULL never leaks into ``NOT``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from emotional_memory.filters import And, Clause, Compare, Or

__all__ = ["where_sql"]

_NUMERIC_COLUMNS = {
    "valence": "valence",
    "arousal": "arousal",
    "dominance": "dominance",
    "retrieval_count": "retrieval_count",
    "timestamp": "created_us",
}
_RANGE_SQL = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


class _Unrenderable(Exception):
    """A clause without an exact SQL form."""


def _text(value: str) -> str:
    """A SQL string literal (standard quoting; NUL refused like PostgreSQL does)."""
    if "\x00" in value:
        raise _Unrenderable
    return "'" + value.replace("'", "''") + "'"


def _number(value: Any) -> str:
    """A SQL numeric literal of an int or a finite float (its shortest repr)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Unrenderable
    if isinstance(value, float) and not math.isfinite(value):
        raise _Unrenderable
    return repr(value) if isinstance(value, float) else str(value)


def _equality(
    op: str, operand: Any, eq: Callable[[Any], str], exists: str
) -> str | None:
    """``$exists`` / ``$eq`` / ``$ne`` / ``$in`` / ``$nin`` from a field's equality
    test ``eq`` and presence test ``exists``; None for a range operator."""
    if op == "$exists":
        return exists if operand else f"NOT {exists}"
    if op == "$eq":
        return eq(operand)
    if op == "$ne":
        return f"NOT ({eq(operand)})"
    if op in ("$in", "$nin"):
        any_of = " OR ".join(eq(v) for v in operand) or "false"
        return f"({any_of})" if op == "$in" else f"NOT ({any_of})"
    return None


def _builtin(c: Compare) -> str:
    # a built-in is never missing: $exists is always true
    if c.field == "emotion":

        def eq(v: Any) -> str:
            return "label IS NULL" if v is None else f"COALESCE(label[1] = {_text(v)}, false)"

        rendered = _equality(c.op, c.value, eq, "true")
        if rendered is None:
            raise _Unrenderable  # a range over text
        return rendered
    col = _NUMERIC_COLUMNS[c.field]

    def eq_num(v: Any) -> str:
        # a built-in number is never null: only a number can equal it
        return "false" if v is None else f"{col} = {_number(v)}"

    rendered = _equality(c.op, c.value, eq_num, "true")
    return rendered if rendered is not None else f"{col} {_RANGE_SQL[c.op]} {_number(c.value)}"


def _metadata(c: Compare) -> str:
    path = c.path
    keys = ", ".join(_text(k) for k in path)
    value = f"(metadata #> ARRAY[{keys}]::text[])"
    guards = [
        "jsonb_typeof(metadata #> ARRAY["
        + ", ".join(_text(k) for k in path[:i])
        + "]::text[]) = 'object'"
        for i in range(1, len(path))
    ]
    present = " AND ".join([*guards, f"{value} IS NOT NULL"])

    def number_test(sql_op: str, operand: Any) -> str:
        return (
            f"COALESCE({present} AND CASE WHEN jsonb_typeof({value}) = 'number' "
            f"THEN ({value})::numeric {sql_op} {_number(operand)} ELSE false END, false)"
        )

    def eq(v: Any) -> str:
        if v is None:
            return f"(NOT COALESCE({present}, false) OR {value} = 'null'::jsonb)"
        if isinstance(v, bool):
            return f"COALESCE({present} AND {value} = '{str(v).lower()}'::jsonb, false)"
        if isinstance(v, str):
            return f"COALESCE({present} AND {value} = to_jsonb({_text(v)}::text), false)"
        return number_test("=", v)

    rendered = _equality(c.op, c.value, eq, f"COALESCE({present}, false)")
    if rendered is not None:
        return rendered
    if isinstance(c.value, str):
        raise _Unrenderable  # string ranges: collation order is not code-point order
    return number_test(_RANGE_SQL[c.op], c.value)


def _render(node: Clause) -> str:
    if isinstance(node, Compare):
        return f"({_metadata(node) if node.path else _builtin(node)})"
    joiner = " AND " if isinstance(node, And) else " OR "
    assert isinstance(node, And | Or)
    return "(" + joiner.join(_render(c) for c in node.clauses) + ")"


def where_sql(clause: Clause) -> str | None:
    """The filter as one SQL boolean expression over the store's table, or None.

    Args:
        clause: a parsed filter's clause tree (``Where.clause``).

    Returns:
        The expression (literals inlined, quoted), or None when some part has no
        exact SQL form (see the module docs).
    """
    try:
        return _render(clause)
    except _Unrenderable:
        return None
