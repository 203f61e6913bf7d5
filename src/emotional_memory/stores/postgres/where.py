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
reference by code point), metadata comparisons with a number of magnitude 2**53 or
more (see below), metadata paths of more keys than metadata can nest
(``MAX_METADATA_DEPTH``: their SQL would grow with the square of the path), and
filters binding more than ``MAX_BOUND_VALUES`` values (a statement binds at most
65,535, and a view's filter may appear in it more than once). Every
leaf is wrapped in ``COALESCE(..., false)`` so SQL's NULL never leaks into ``NOT``.

Every value of the filter is a bound parameter (named placeholders, see
:class:`Bind`), never text of the statement: no quoting to get wrong, whatever the
server's ``standard_conforming_strings``. Numbers are bound as their shortest text
and cast to ``numeric`` (what a literal of them would be).

The reference compares an int with a float exactly (``10**23 != 1e23``, whose value
is 99999999999999991611392), but the ``jsonb`` column holds a stored float as the
decimal of its shortest text (``1e+23`` reads as 10**23) and cannot tell it from an
int. Below 2**53 this never changes an answer (every integer there is a float, so
no integer lies between a float and its shortest text); from 2**53 on it does, in
both directions (a stored float against an int operand, a stored int against a float
operand). A metadata comparison with such an operand is therefore not rendered (the
generic path compares the Python values); the built-in columns are typed and exact.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from emotional_memory._validation import MAX_METADATA_DEPTH
from emotional_memory.filters import And, Clause, Compare, Or

__all__ = ["MAX_BOUND_VALUES", "Bind", "positional", "where_sql"]

_NUMERIC_COLUMNS = {
    "valence": "valence",
    "arousal": "arousal",
    "dominance": "dominance",
    "retrieval_count": "retrieval_count",
    "timestamp": "created_us",
}
_RANGE_SQL = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
MAX_BOUND_VALUES = 4096
"""The most values one rendered filter binds (a ``$in`` of thousands of values is
answered by the generic path instead: PostgreSQL takes 65,535 parameters a statement)."""
_EXACT_BELOW = 2**53
"""Metadata numbers compare exactly in SQL below this magnitude (see the module docs)."""


class _Unrenderable(Exception):
    """A clause without an exact SQL form."""


class Bind:
    """The values a statement binds, collected as it is rendered.

    Calling it with a value records it and returns its named placeholder
    (``%(<prefix><n>)s``); :attr:`values` maps the names to the values.

    Args:
        prefix: the names' prefix (distinct from the statement's own parameters).
    """

    def __init__(self, prefix: str = "w") -> None:
        self.prefix = prefix
        self.values: dict[str, Any] = {}

    def __call__(self, value: Any) -> str:
        name = f"{self.prefix}{len(self.values)}"
        self.values[name] = value
        return f"%({name})s"


_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def positional(sql: str, values: dict[str, Any]) -> tuple[str, list[Any]]:
    """A fragment with named placeholders for a statement with positional ones.

    Args:
        sql: the fragment (``%(name)s`` placeholders, no other ``%``).
        values: the values of its names.

    Returns:
        ``(sql with %s placeholders, the values in order of appearance)``.
    """
    out: list[Any] = []

    def one(match: re.Match[str]) -> str:
        out.append(values[match.group(1)])
        return "%s"

    return _PLACEHOLDER.sub(one, sql), out


def _text(bind: Bind, value: str) -> str:
    """A bound text value (NUL refused like PostgreSQL does)."""
    if "\x00" in value:
        raise _Unrenderable
    return f"{bind(value)}::text"


def _number(bind: Bind, value: Any) -> str:
    """A bound exact number: an int or a finite float as its shortest text, cast to
    ``numeric`` (the type a literal of it would have)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Unrenderable
    if isinstance(value, float) and not math.isfinite(value):
        raise _Unrenderable
    return f"{bind(repr(value) if isinstance(value, float) else str(value))}::numeric"


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


def _builtin(c: Compare, bind: Bind) -> str:
    # a built-in is never missing: $exists is always true
    if c.field == "emotion":

        def eq(v: Any) -> str:
            return "label IS NULL" if v is None else (
                f"COALESCE(label[1] = {_text(bind, v)}, false)"
            )

        rendered = _equality(c.op, c.value, eq, "true")
        if rendered is None:
            raise _Unrenderable  # a range over text
        return rendered
    col = _NUMERIC_COLUMNS[c.field]

    def eq_num(v: Any) -> str:
        # a built-in number is never null: only a number can equal it
        return "false" if v is None else f"{col} = {_number(bind, v)}"

    rendered = _equality(c.op, c.value, eq_num, "true")
    return rendered if rendered is not None else (
        f"{col} {_RANGE_SQL[c.op]} {_number(bind, c.value)}"
    )


def _path(bind: Bind, keys: tuple[str, ...]) -> str:
    """A bound ``text[]`` metadata path."""
    if any("\x00" in k for k in keys):
        raise _Unrenderable
    return f"{bind(list(keys))}::text[]"


def _metadata(c: Compare, bind: Bind) -> str:
    path = c.path
    if len(path) > MAX_METADATA_DEPTH:
        # one guard per proper prefix, each binding that prefix: SQL and parameters
        # grow with the square of the path (a 10,000-key path bound 50M array items
        # and ran for minutes). No stored metadata nests that deep; the generic path
        # walks the keys in Python, stopping at the first missing one.
        raise _Unrenderable
    value = f"(metadata #> {_path(bind, path)})"
    guards = [
        f"jsonb_typeof(metadata #> {_path(bind, path[:i])}) = 'object'"
        for i in range(1, len(path))
    ]
    present = " AND ".join([*guards, f"{value} IS NOT NULL"])

    def number_test(sql_op: str, operand: Any) -> str:
        if abs(operand) >= _EXACT_BELOW:
            raise _Unrenderable  # int-or-float is lost in jsonb (see the module docs)
        return (
            f"COALESCE({present} AND CASE WHEN jsonb_typeof({value}) = 'number' "
            f"THEN ({value})::numeric {sql_op} {_number(bind, operand)} ELSE false END, false)"
        )

    def eq(v: Any) -> str:
        if v is None:
            return f"(NOT COALESCE({present}, false) OR {value} = 'null'::jsonb)"
        if isinstance(v, bool):
            return f"COALESCE({present} AND {value} = '{str(v).lower()}'::jsonb, false)"
        if isinstance(v, str):
            return f"COALESCE({present} AND {value} = to_jsonb({_text(bind, v)}), false)"
        return number_test("=", v)

    rendered = _equality(c.op, c.value, eq, f"COALESCE({present}, false)")
    if rendered is not None:
        return rendered
    if isinstance(c.value, str):
        raise _Unrenderable  # string ranges: collation order is not code-point order
    return number_test(_RANGE_SQL[c.op], c.value)


def _render(node: Clause, bind: Bind) -> str:
    if isinstance(node, Compare):
        return f"({_metadata(node, bind) if node.path else _builtin(node, bind)})"
    joiner = " AND " if isinstance(node, And) else " OR "
    assert isinstance(node, And | Or)
    return "(" + joiner.join(_render(c, bind) for c in node.clauses) + ")"


def where_sql(clause: Clause, prefix: str = "w") -> tuple[str, dict[str, Any]] | None:
    """The filter as one SQL boolean expression over the store's table, or None.

    Args:
        clause: a parsed filter's clause tree (``Where.clause``).
        prefix: the prefix of its parameters' names.

    Returns:
        ``(expression, parameters)``: the expression with a named placeholder for
        every value (``%(w0)s``...) and the values to bind; or None when some part
        has no exact SQL form (see the module docs).
    """
    bind = Bind(prefix)
    try:
        sql = _render(clause, bind)
    except _Unrenderable:
        return None
    return (sql, bind.values) if len(bind.values) <= MAX_BOUND_VALUES else None
