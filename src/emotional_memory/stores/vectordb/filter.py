"""Scopes, expiry and ``where`` filters in the vector databases' own filters.

Every record a :class:`~emotional_memory.stores.vectordb.base.VectorDBStore` writes
carries flat *filter fields* next to its JSON (Qdrant payload keys, Chroma metadata
keys), built by :func:`filter_fields`:

- ``fv``: 1 (the record carries these fields; records written before are given them
  once, when the collection is opened);
- ``sp``: every non-empty prefix of the scope path, each as JSON text (a list of
  strings; absent at the root), so a view's path is one "contains" condition;
- ``x_exp``: the expiry as float microseconds since the epoch (:data:`NEVER` when
  the memory never expires);
- ``lk``: the ids its resonance links point to (absent when none), so the memories
  linking to a deleted one are found without listing the store;
- built-ins: ``b_val``, ``b_aro``, ``b_dom``, ``b_rc`` (retrieval count), ``b_ts``
  (timestamp, float microseconds), all floats; ``b_emo`` (the label's primary) and
  ``b_lab`` (True) when the memory has a label;
- metadata, per path reachable through nested dicts (keys holding ``.``, which no
  ``where`` field can name, are skipped; lists are leaves): ``me`` lists every
  path, ``mnn`` the paths whose value is not null, and the value itself sits in a key
  of its kind: ``ms_<path>`` (string), ``mn_<path>`` (number, as a float) or
  ``mb_<path>`` (boolean), ``<path>`` being the hex of the path's JSON text. Keeping
  one key per kind makes the databases' comparisons respect the dialect's kinds
  (strings never equal numbers, booleans only booleans), and their "not equal"
  operators match a missing key, as the dialect's ``$ne`` does.

Numbers are compared as float64 in both databases. That is exact for operands of
magnitude below 2**53 (stored values are rounded monotonically, so a stored integer
beyond it still compares correctly with such an operand; infinities are stored as
±2**60, NaN not at all since it compares with nothing).

:func:`translate` turns a :class:`~emotional_memory.stores.selection.Selection` into a
small condition tree over these fields, and says whether it is *exact*. It is not
exact (the tree is then a superset, each untranslatable comparison replaced by
"true") for:

- ``$gt`` / ``$gte`` / ``$lt`` / ``$lte`` with a string operand (neither database
  orders strings in its filters);
- a numeric operand (a ``timestamp`` in microseconds included) of magnitude 2**53 or
  more, and an operation time outside the years 1685..2255 (the expiry comparison).

For an inexact selection the stores read the superset the tree selects and keep the
memories :meth:`Selection.matches` accepts (the exact answer, at the cost of reading
that superset rather than only the matching memories).
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
    """A stored number as a float (infinities clamped, NaN: not stored)."""
    x = float(value)
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


def translate(selection: Selection) -> tuple[Cond, bool]:
    """``selection`` as a condition tree over the filter fields.

    Args:
        selection: what an operation sees.

    Returns:
        ``(tree, exact)``: the tree (:data:`TRUE` for no condition, :data:`FALSE`
        for nothing) and whether it selects exactly the memories
        :meth:`Selection.matches` accepts (else it selects a superset).
    """
    t = _Translator()
    parts: list[Cond] = []
    if selection.scope:
        parts.append(Cond("has", "sp", scope_key(selection.scope)))
    now = _now_microseconds(selection.now())
    if now is None:
        t.exact = False
    elif selection.expired:
        parts.append(Cond("range", "x_exp", now, "lte"))
    else:
        parts.append(Cond("range", "x_exp", now, "gt"))
    if selection.where is not None:
        parts.append(t.clause(selection.where.clause))
    return _all(parts), t.exact


def _now_microseconds(now: datetime) -> float | None:
    x = float(to_microseconds(now))
    return x if abs(x) < _SAFE else None
