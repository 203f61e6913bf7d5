"""Scopes, expiry and ``where`` filters in the vector databases' own filters.

:func:`filter_fields` builds the flat fields every record carries (scope prefixes,
expiry, link targets, built-ins, metadata by kind); :func:`translate` turns a
:class:`~emotional_memory.stores.selection.Selection` into a condition tree over them
and says whether it is exact (else a superset, which the stores narrow with
:meth:`Selection.matches`). The fields and the exactness limits are listed in
``stores/vectordb/README.md``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from emotional_memory.filters import And, Clause, Compare
from emotional_memory.models import Memory
from emotional_memory.stores._shared.records import to_microseconds
from emotional_memory.stores.base import Selection

__all__ = [
    "FIELD_VERSION",
    "NEVER",
    "Cond",
    "filter_fields",
    "metadata_key_kinds",
    "metadata_paths",
    "translate",
]

FIELD_VERSION = 1
NEVER = float(2**62)
"""``x_exp`` of a memory that never expires (beyond every representable instant)."""
_SAFE = float(2**53)
_CLAMP = float(2**60)

BUILTIN_KEYS = {
    "valence": "b_val",
    "arousal": "b_aro",
    "dominance": "b_dom",
    "retrieval_count": "b_rc",
    "timestamp": "b_ts",
}


def path_key(path: tuple[str, ...]) -> str:
    """The hex name of a metadata path (safe as a payload or metadata key)."""
    return json.dumps(list(path), ensure_ascii=False).encode("utf-8").hex()


def scope_key(prefix: tuple[str, ...]) -> str:
    """One scope prefix as the text stored in ``sp``."""
    return json.dumps(list(prefix), ensure_ascii=False)


def _number(value: float) -> float | None:
    """A stored number as a float (infinities and integers beyond float's range
    clamped, NaN: not stored)."""
    try:
        x = float(value)
    except OverflowError:  # an int of 309+ digits: JSON holds it, float cannot
        return _CLAMP if value > 0 else -_CLAMP
    if math.isnan(x):
        return None
    if math.isinf(x):
        return _CLAMP if x > 0 else -_CLAMP
    return x


def _leaves(
    node: Mapping[str, Any], prefix: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every (path, value) reachable through nested dicts (see the module docs)."""
    for key, value in node.items():
        if not isinstance(key, str) or not key or "." in key:
            continue  # no where field can name it
        path = (*prefix, key)
        yield path, value
        if isinstance(value, Mapping):
            yield from _leaves(value, path)


def metadata_paths(metadata: Mapping[str, Any]) -> int:
    """The metadata paths :func:`filter_fields` lists in ``me`` (see the module docs)."""
    return sum(1 for _ in _leaves(metadata, ()))


def filter_fields(memory: Memory) -> dict[str, Any]:
    """The filter fields of ``memory`` (see the module docs).

    Args:
        memory: the memory.

    Returns:
        A flat dict of scalars and non-empty lists of strings.
    """
    tag = memory.tag
    affect = tag.core_affect
    out: dict[str, Any] = {
        "fv": FIELD_VERSION,
        "x_exp": NEVER if memory.expires_at is None
        else float(to_microseconds(memory.expires_at)),
        "b_val": float(affect.valence),
        "b_aro": float(affect.arousal),
        "b_dom": float(affect.dominance),
        "b_rc": float(tag.retrieval_count),
        "b_ts": float(to_microseconds(tag.timestamp)),
    }
    targets = sorted({link.target_id for link in tag.resonance_links})
    if targets:
        out["lk"] = targets
    if memory.scope:
        out["sp"] = [scope_key(memory.scope[: i + 1]) for i in range(len(memory.scope))]
    label = tag.emotion_label
    if label is not None:
        out["b_emo"] = label if isinstance(label, str) else str(label.primary)
        out["b_lab"] = True
    every: list[str] = []
    non_null: list[str] = []
    for path, value in _leaves(memory.metadata or {}, ()):
        name = path_key(path)
        every.append(name)
        if value is None:
            continue
        non_null.append(name)
        if isinstance(value, bool):
            out[f"mb_{name}"] = value
        elif isinstance(value, int | float):
            number = _number(value)
            if number is not None:
                out[f"mn_{name}"] = number
        elif isinstance(value, str):
            out[f"ms_{name}"] = value
    if every:
        out["me"] = every
    if non_null:
        out["mnn"] = non_null
    return out


def metadata_key_kinds(fields: Mapping[str, Any]) -> dict[str, str]:
    """The typed metadata keys among ``fields`` and their kinds (``keyword``,
    ``float``, ``bool``), for payload indexes."""
    kinds = {"ms_": "keyword", "mn_": "float", "mb_": "bool"}
    return {k: kinds[k[:3]] for k in fields if k[:3] in kinds}


# ------------------------------------------------------------------ conditions


@dataclass(frozen=True)
class Cond:
    """One node of a condition tree over the filter fields.

    Attributes:
        kind: ``and`` / ``or`` (``items`` are the children), ``eq`` / ``ne`` (``key``
            equals / does not equal ``value``, a string, bool or float; a missing key
            is not equal), ``range`` (``op`` one of gt/gte/lt/lte against a float),
            ``has`` / ``hasnot`` (the list ``key`` contains / lacks the string
            ``value``; a missing list lacks it).
        key: the field.
        value: the operand.
        op: the range operator.
        items: the children.
    """

    kind: str
    key: str = ""
    value: Any = None
    op: str = ""
    items: tuple[Cond, ...] = ()


TRUE = Cond("and")
FALSE = Cond("or")


def _all(items: list[Cond]) -> Cond:
    kept: list[Cond] = []
    for c in items:
        if c == FALSE:
            return FALSE
        if c == TRUE:
            continue
        kept.extend(c.items if c.kind == "and" else (c,))
    return kept[0] if len(kept) == 1 else Cond("and", items=tuple(kept))


def _any(items: list[Cond]) -> Cond:
    kept: list[Cond] = []
    for c in items:
        if c == TRUE:
            return TRUE
        if c == FALSE:
            continue
        kept.extend(c.items if c.kind == "or" else (c,))
    return kept[0] if len(kept) == 1 else Cond("or", items=tuple(kept))


class _Translator:
    def __init__(self) -> None:
        self.exact = True

    def loose(self) -> Cond:
        """An untranslatable comparison: "true" (a superset), inexact."""
        self.exact = False
        return TRUE

    def number(self, value: Any) -> float | None:
        x = float(value)
        if not abs(x) < _SAFE:
            return None
        return x

    def clause(self, node: Clause) -> Cond:
        if isinstance(node, Compare):
            return self.compare(node)
        parts = [self.clause(c) for c in node.clauses]
        return _all(parts) if isinstance(node, And) else _any(parts)

    def equal(self, c: Compare, operand: Any) -> Cond:
        """The dialect's ``$eq operand`` on ``c``'s field."""
        if c.path:
            name = path_key(c.path)
            if operand is None:
                return Cond("hasnot", "mnn", name)
            if isinstance(operand, bool):
                return Cond("eq", f"mb_{name}", operand)
            if isinstance(operand, str):
                return Cond("eq", f"ms_{name}", operand)
            x = self.number(operand)
            return self.loose() if x is None else Cond("eq", f"mn_{name}", x)
        if c.field == "emotion":
            if operand is None:
                return Cond("ne", "b_lab", True)
            return Cond("eq", "b_emo", operand)
        if operand is None:
            return FALSE  # a built-in number is never null
        x = self.number(operand)
        return self.loose() if x is None else Cond("eq", BUILTIN_KEYS[c.field], x)

    def not_equal(self, c: Compare, operand: Any) -> Cond:
        """The dialect's ``$ne operand`` (the negation of :meth:`equal`)."""
        eq = self.equal(c, operand)
        if eq == TRUE:
            return TRUE  # a loose equality stays loose (and so inexact)
        if eq == FALSE:
            return TRUE
        flip = {"eq": "ne", "has": "hasnot", "hasnot": "has", "ne": "eq"}
        return Cond(flip[eq.kind], eq.key, eq.value)

    def compare(self, c: Compare) -> Cond:
        op, value = c.op, c.value
        if op == "$eq":
            return self.equal(c, value)
        if op == "$ne":
            return self.not_equal(c, value)
        if op == "$in":
            return _any([self.equal(c, v) for v in value])
        if op == "$nin":
            return _all([self.not_equal(c, v) for v in value])
        if op == "$exists":
            if not c.path:
                return TRUE if value else FALSE  # a built-in always exists
            return Cond("has" if value else "hasnot", "me", path_key(c.path))
        # ranges: a number (or microseconds), or a string
        if isinstance(value, str):
            return self.loose()
        x = self.number(value)
        if x is None:
            return self.loose()
        if c.path:
            key = f"mn_{path_key(c.path)}"
        elif c.field == "emotion":  # parse_where lets only strings through here
            return self.loose()
        else:
            key = BUILTIN_KEYS[c.field]
        return Cond("range", key, x, op[1:])


def _size(cond: Cond) -> int:
    """The comparisons in a condition tree."""
    if cond.kind in ("and", "or"):
        return sum(_size(c) for c in cond.items)
    return 1


def translate(
    selection: Selection, max_size: int | None = None, expiry: bool = True
) -> tuple[Cond, bool]:
    """``selection`` as a condition tree over the filter fields.

    Args:
        selection: what an operation sees.
        max_size: the most comparisons the database takes in one filter (None: no
            limit); a ``where`` filter translating to more becomes "true" (a
            superset, inexact), which the store narrows in Python.
        expiry: whether some stored memory may have an expiry; False: no expiry
            condition (the operation's time is not read), and nothing for an
            ``expired`` selection.

    Returns:
        ``(tree, exact)``: the tree (:data:`TRUE` for no condition, :data:`FALSE`
        for nothing) and whether it selects exactly the memories
        :meth:`Selection.matches` accepts (else it selects a superset).
    """
    t = _Translator()
    parts: list[Cond] = []
    if selection.scope:
        parts.append(Cond("has", "sp", scope_key(selection.scope)))
    now = _now_microseconds(selection.now()) if expiry else None
    if not expiry:  # nothing expires: no condition (nothing has expired)
        if selection.expired:
            return FALSE, True
    elif now is None:
        t.exact = False
    elif selection.expired:
        parts.append(Cond("range", "x_exp", now, "lte"))
    else:
        parts.append(Cond("range", "x_exp", now, "gt"))
    if selection.where is not None:
        where = t.clause(selection.where.clause)
        if max_size is not None and _size(where) > max_size:
            where = t.loose()  # e.g. a $in of thousands of values
        parts.append(where)
    return _all(parts), t.exact


def _now_microseconds(now: datetime) -> float | None:
    x = float(to_microseconds(now))
    return x if abs(x) < _SAFE else None
