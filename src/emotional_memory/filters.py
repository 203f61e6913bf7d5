"""``where=`` filters: one small JSON dialect, parsed once into a predicate.

The dialect is the one Chroma and mem0 users know::

    {"field": value}                                  equality
    {"field": {"$eq" | "$ne" | "$gt" | "$gte" | "$lt" | "$lte": value}}
    {"field": {"$in" | "$nin": [value, ...]}}
    {"field": {"$exists": true | false}}
    {"$and": [clause, ...]}, {"$or": [clause, ...]}

A dict with several keys is the ``$and`` of one clause per key; a field dict with
several operators is the ``$and`` of its operators.

Fields are metadata keys, with dotted paths into nested dicts (``"tags.priority"``;
``"metadata.valence"`` names the metadata key ``valence`` itself), and the built-ins
``timestamp`` (compared as an instant: operands are aware datetimes or RFC 3339
strings with an offset, as ``expires_at`` takes them: see
:data:`~emotional_memory._validation.INSTANT_PATTERN`), ``valence``, ``arousal``,
``dominance``, ``emotion`` (the Plutchik primary of the memory's label, None when it
has none) and ``retrieval_count``.

Semantics (MongoDB's, which mem0 and Chroma follow where they agree):

- a comparison on a field the memory lacks (or whose value is of another type) does
  not match, except ``$ne`` and ``$nin``, which then match;
- ``{"field": None}`` (or ``$eq: None``) matches a missing field or a JSON null;
- numbers compare with numbers (``1 == 1.0``), strings with strings; booleans only
  equal booleans; ``$gt``/``$gte``/``$lt``/``$lte`` take a number or a string (a
  datetime for ``timestamp``).

:func:`parse_where` checks everything it can before anything runs (an unknown
operator, a malformed clause, an operand that cannot be compared: ``ValueError``
naming it), so a bad filter never reaches a store. The parsed :class:`Where` is
immutable and hashable; :meth:`Where.matches` is the reference semantics (the
oracle), and stores translate :attr:`Where.clause` into their own index (row masks,
SQL, the vector databases' filters).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from emotional_memory._validation import parse_instant

__all__ = [
    "BUILTIN_FIELDS",
    "And",
    "Compare",
    "Or",
    "Where",
    "parse_where",
]

BUILTIN_FIELDS: frozenset[str] = frozenset(
    {"timestamp", "valence", "arousal", "dominance", "emotion", "retrieval_count"}
)
"""Field names that read the memory itself rather than its metadata."""

_NUMERIC_BUILTINS = frozenset({"valence", "arousal", "dominance", "retrieval_count"})
_RANGE_OPS = frozenset({"$gt", "$gte", "$lt", "$lte"})
_OPS = frozenset({"$eq", "$ne", *_RANGE_OPS, "$in", "$nin", "$exists"})
_MISSING: Any = object()
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FLOAT_MAX = int(sys.float_info.max)  # a larger integer overflows a float comparison

Op = Literal["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists"]
Scalar = str | int | float | bool | None


@dataclass(frozen=True)
class Compare:
    """One comparison: ``field op value``.

    Attributes:
        field: a built-in name or a metadata path.
        path: the metadata path as its keys (empty for a built-in).
        op: the operator.
        value: the operand: a scalar, a tuple of scalars (``$in``/``$nin``), a bool
            (``$exists``); ``timestamp`` operands are integer microseconds since the
            epoch.
    """

    field: str
    path: tuple[str, ...]
    op: Op
    value: Any

    @property
    def builtin(self) -> bool:
        """Whether the field is a built-in (not metadata)."""
        return not self.path


@dataclass(frozen=True)
class And:
    """All of ``clauses`` (``$and``)."""

    clauses: tuple[Clause, ...]


@dataclass(frozen=True)
class Or:
    """Any of ``clauses`` (``$or``)."""

    clauses: tuple[Clause, ...]


Clause = Compare | And | Or


def _microseconds(moment: datetime) -> int:
    """Integer microseconds since the epoch of an aware datetime (exact)."""
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same_kind(a: object, b: object) -> bool:
    """Whether ``a`` and ``b`` may be compared (numbers, strings, booleans)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    if _is_number(a):
        return _is_number(b)
    return isinstance(a, str) and isinstance(b, str)


def _check_unicode(where: str, text: str) -> str:
    """``text``, refused when it is not valid Unicode (a lone surrogate such as
    ``"\\ud800"``, which no stored string holds and PostgreSQL cannot take)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"where: {where} is not valid Unicode text: {exc.reason}") from None
    return text


def _check_scalar(where: str, value: object) -> Scalar:
    if isinstance(value, str):
        return _check_unicode(where, value)
    if value is None or isinstance(value, bool):
        return value
    if _is_number(value):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"where: {where} must be a finite number, got {value!r}")
        if isinstance(value, int) and abs(value) > _FLOAT_MAX:
            raise ValueError(
                f"where: {where} is an integer of {value.bit_length()} bits, beyond the "
                "range of a float (about 1.8e308) that filters compare numbers in"
            )
        return value  # type: ignore[return-value]
    raise ValueError(
        f"where: {where} must be a string, number, boolean or null, "
        f"got {type(value).__name__}"
    )


def _timestamp_operand(where: str, value: object) -> int:
    """A ``timestamp`` operand (an aware datetime or an RFC 3339 string) as its
    instant in microseconds since 1970 UTC; a failure names ``where``."""
    if isinstance(value, str):
        value = parse_instant(f"where: {where}", value)
    if not isinstance(value, datetime):
        raise ValueError(
            f"where: {where} must be an aware datetime or an RFC 3339 string, "
            f"got {type(value).__name__}"
        )
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"where: {where} must be timezone-aware (give an offset)")
    return _microseconds(value)


def _operand(field: str, op: str, value: object, label: str | None = None) -> Any:
    """The checked operand of ``field op value`` (see the module docs); a failure
    names ``label`` (default ``op``), e.g. ``$in[2]`` for an element checked as
    ``$eq``."""
    where = f"{field!r} {label or op}"
    if op == "$exists":
        if not isinstance(value, bool):
            raise ValueError(f"where: {where} takes true or false, got {value!r}")
        return value
    if op in ("$in", "$nin"):
        if not isinstance(value, list | tuple):
            raise ValueError(f"where: {where} takes a list, got {type(value).__name__}")
        return tuple(_operand(field, "$eq", v, f"{op}[{i}]") for i, v in enumerate(value))
    if field == "timestamp":
        if value is None and op in ("$eq", "$ne"):
            return None
        return _timestamp_operand(where, value)
    scalar = _check_scalar(where, value)
    if op in _RANGE_OPS and not (_is_number(scalar) or isinstance(scalar, str)):
        raise ValueError(f"where: {where} takes a number or a string, got {scalar!r}")
    if field in _NUMERIC_BUILTINS and scalar is not None and not _is_number(scalar):
        raise ValueError(f"where: {where}: {field} is a number, cannot compare it with {scalar!r}")
    if field == "emotion" and scalar is not None and not isinstance(scalar, str):
        raise ValueError(f"where: {where}: emotion is a label, cannot compare it with {scalar!r}")
    return scalar


def _field_path(field: object) -> tuple[str, ...]:
    if not isinstance(field, str) or not field:
        raise ValueError(f"where: a field name must be a non-empty string, got {field!r}")
    if field.startswith("$"):
        raise ValueError(f"where: unknown operator {field!r} (use $and / $or at this level)")
    _check_unicode(f"field {field!r}", field)
    if field in BUILTIN_FIELDS:
        return ()
    parts = field.split(".")
    if parts[0] == "metadata" and len(parts) > 1:
        parts = parts[1:]
    if any(not p for p in parts):
        raise ValueError(f"where: field {field!r} has an empty path segment")
    return tuple(parts)


def _parse(node: object, depth: int) -> Clause:
    if depth > 32:
        raise ValueError("where: nests more than 32 levels")
    if not isinstance(node, Mapping):
        raise ValueError(f"where: a clause must be a dict, got {type(node).__name__}")
    if not node:
        raise ValueError("where: empty clause {}")
    parts: list[Clause] = []
    for key, value in node.items():
        if key in ("$and", "$or"):
            if not isinstance(value, list | tuple) or not value:
                raise ValueError(f"where: {key} takes a non-empty list of clauses")
            subs = tuple(_parse(v, depth + 1) for v in value)
            parts.append(And(subs) if key == "$and" else Or(subs))
            continue
        path = _field_path(key)
        if isinstance(value, Mapping):
            if not value:
                raise ValueError(f"where: field {key!r} has an empty operator dict")
            for op, operand in value.items():
                if op not in _OPS:
                    raise ValueError(f"where: unknown operator {op!r} on field {key!r}")
                parts.append(Compare(key, path, op, _operand(key, op, operand)))
        else:
            parts.append(Compare(key, path, "$eq", _operand(key, "$eq", value)))
    return parts[0] if len(parts) == 1 else And(tuple(parts))


def _metadata_value(metadata: Mapping[str, Any] | None, path: tuple[str, ...]) -> Any:
    node: Any = metadata
    for key in path:
        if not isinstance(node, Mapping):
            return _MISSING
        node = node.get(key, _MISSING)
        if node is _MISSING:
            return _MISSING
    return node


def _equal(value: Any, operand: Any) -> bool:
    if operand is None:
        return value is None or value is _MISSING
    return value is not _MISSING and _same_kind(value, operand) and value == operand


def compare(value: Any, op: str, operand: Any) -> bool:
    """Whether a field's ``value`` (``_MISSING`` when absent) satisfies ``op operand``.

    Args:
        value: the field's value (the module's missing marker when absent).
        op: the operator.
        operand: the parsed operand.

    Returns:
        The comparison's truth (see the module docs).
    """
    if op == "$exists":
        return (value is not _MISSING) == operand
    if op == "$eq":
        return _equal(value, operand)
    if op == "$ne":
        return not _equal(value, operand)
    if op == "$in":
        return any(_equal(value, o) for o in operand)
    if op == "$nin":
        return not any(_equal(value, o) for o in operand)
    if value is _MISSING or value is None or not _same_kind(value, operand):
        return False
    if op == "$gt":
        return bool(value > operand)
    if op == "$gte":
        return bool(value >= operand)
    if op == "$lt":
        return bool(value < operand)
    return bool(value <= operand)


MISSING: Any = _MISSING
"""The value :func:`compare` takes for a field a memory does not have."""


@dataclass(frozen=True)
class Where:
    """A parsed ``where=`` filter (see the module docs); build it with :func:`parse_where`.

    Attributes:
        clause: the predicate tree (:class:`Compare`, :class:`And`, :class:`Or`).
        source: the dict it was parsed from, as given (for messages and reprs).
    """

    clause: Clause
    source: Any = dataclasses.field(default=None, hash=False)  # a dict: hash the clause

    def evaluate(self, value_of: Callable[[Compare], Any]) -> bool:
        """The predicate over a record whose field values ``value_of`` gives.

        Args:
            value_of: maps a comparison to its field's value in the record
                (:data:`MISSING` when absent; ``timestamp`` as integer microseconds,
                ``emotion`` as the label's primary or None).

        Returns:
            Whether the record matches.
        """

        def walk(node: Clause) -> bool:
            if isinstance(node, Compare):
                return compare(value_of(node), node.op, node.value)
            if isinstance(node, And):
                return all(walk(c) for c in node.clauses)
            return any(walk(c) for c in node.clauses)

        return walk(self.clause)

    def matches(self, memory: Any) -> bool:
        """Whether a :class:`~emotional_memory.models.Memory` matches (the reference
        semantics every store must reproduce).

        Args:
            memory: the memory.

        Returns:
            True when it matches.
        """
        return self.evaluate(lambda c: memory_field(memory, c))

    @property
    def fields(self) -> frozenset[str]:
        """The field names the filter reads."""
        out: set[str] = set()

        def walk(node: Clause) -> None:
            if isinstance(node, Compare):
                out.add(node.field)
            else:
                for c in node.clauses:
                    walk(c)

        walk(self.clause)
        return frozenset(out)


def memory_field(memory: Any, comparison: Compare) -> Any:
    """The value of ``comparison``'s field in ``memory`` (see :meth:`Where.evaluate`).

    Args:
        memory: a :class:`~emotional_memory.models.Memory`.
        comparison: the comparison whose field to read.

    Returns:
        The value, or :data:`MISSING`.
    """
    if comparison.path:
        return _metadata_value(memory.metadata, comparison.path)
    return builtin_value(
        comparison.field,
        memory.tag.core_affect.valence,
        memory.tag.core_affect.arousal,
        memory.tag.core_affect.dominance,
        memory.tag.retrieval_count,
        memory.tag.timestamp,
        memory.tag.emotion_label,
    )


def builtin_value(
    field: str,
    valence: float,
    arousal: float,
    dominance: float,
    retrieval_count: int,
    timestamp: datetime | int,
    label: Any,
) -> Any:
    """A built-in field's value from a memory's parts.

    Args:
        field: the built-in's name.
        valence: core affect valence.
        arousal: core affect arousal.
        dominance: core affect dominance.
        retrieval_count: the tag's retrieval count.
        timestamp: the tag's timestamp (datetime, or integer microseconds).
        label: the emotion label (an object with ``primary``, a primary name, or None).

    Returns:
        The value (timestamps as integer microseconds).
    """
    if field == "valence":
        return valence
    if field == "arousal":
        return arousal
    if field == "dominance":
        return dominance
    if field == "retrieval_count":
        return retrieval_count
    if field == "timestamp":
        return timestamp if isinstance(timestamp, int) else _microseconds(timestamp)
    if label is None or isinstance(label, str):
        return label
    return label.primary


def metadata_value(metadata: Mapping[str, Any] | None, comparison: Compare) -> Any:
    """A metadata field's value (:data:`MISSING` when absent).

    Args:
        metadata: the memory's metadata (None: empty).
        comparison: a comparison on a metadata path.

    Returns:
        The value.
    """
    return _metadata_value(metadata, comparison.path)


def parse_where(where: object) -> Where | None:
    """Parse a ``where=`` argument.

    Args:
        where: None (no filter), a dict in the dialect of the module docs, or an
            already parsed :class:`Where`.

    Returns:
        The parsed filter, or None.

    Raises:
        ValueError: an unknown operator, a malformed clause or an operand that cannot
            be compared, named in the message.
    """
    if where is None or isinstance(where, Where):
        return where
    if not isinstance(where, Mapping):
        raise ValueError(f"where must be a dict (or None), got {type(where).__name__}")
    return Where(_parse(where, 0), where)
