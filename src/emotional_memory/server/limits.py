"""The service's bounds on one request's work, checked before any work is done.

A tenant may send the largest request the limits allow, back to back; the limits
keep that within what the service can do without slowing other tenants down (see
the README's "Limits"). Each limit has a ``serve`` flag; a request over one is
answered 413 (a size: content, metadata, batch) or 422 (a count: ``top_k``, list
``limit``, filter clauses and depth), naming the field and the limit.

Filters are measured on the JSON as sent, before they are parsed: clauses are the
field comparisons plus the values of every ``$in`` / ``$nin`` list; depth is the
nesting of ``$and`` / ``$or``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["LIMIT_FLAGS", "LimitExceeded", "Limits", "filter_size"]


class LimitExceeded(ValueError):
    """A request over one of the service's limits.

    Attributes:
        limit: the limit's name (a :class:`Limits` field).
        status: the HTTP status: 413 for a size, 422 for a count.
        loc: where in the request, relative to the body or the query
            (``("items", 3, "content")``).
    """

    def __init__(self, limit: str, status: int, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.limit = limit
        self.status = status
        self.loc = loc


@dataclass(frozen=True)
class Limits:
    """The bounds on one request (each >= 1).

    Attributes:
        max_content_bytes: UTF-8 bytes of one memory's ``content`` (and of a query).
        max_metadata_bytes: bytes of one memory's ``metadata`` as compact JSON.
        max_batch_items: memories in one batch.
        max_top_k: ``top_k`` of a search.
        max_list_limit: ``limit`` of a list page.
        max_filter_clauses: comparisons (and ``$in`` / ``$nin`` values) in a filter.
        max_filter_depth: nesting of ``$and`` / ``$or`` in a filter.
    """

    max_content_bytes: int = 32 * 1024
    max_metadata_bytes: int = 16 * 1024
    max_batch_items: int = 1000
    max_top_k: int = 100
    max_list_limit: int = 1000
    max_filter_clauses: int = 64
    max_filter_depth: int = 6

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{f.name} must be an integer >= 1, got {value!r}")

    def _over(self, name: str, status: int, loc: tuple[str | int, ...], what: str,
              value: int) -> LimitExceeded:
        limit = getattr(self, name)
        return LimitExceeded(
            name, status, loc,
            f"{what} is {value}, over the limit {name}={limit} (--{LIMIT_FLAGS[name]})",
        )

    def check_text(self, text: str, loc: tuple[str | int, ...]) -> None:
        """Refuse a content or query over ``max_content_bytes``.

        Args:
            text: the text.
            loc: its place in the request.

        Raises:
            LimitExceeded: 413.
        """
        # a str of n characters is at most 4n UTF-8 bytes: encode only when it may be over
        if len(text) * 4 > self.max_content_bytes:
            size = len(text.encode("utf-8", "surrogatepass"))
            if size > self.max_content_bytes:
                raise self._over("max_content_bytes", 413, loc, f"{loc[-1]} (UTF-8 bytes)",
                                 size)

    def check_metadata(self, metadata: Mapping[str, Any] | None,
                       loc: tuple[str | int, ...]) -> None:
        """Refuse metadata over ``max_metadata_bytes`` (as compact JSON).

        Args:
            metadata: the memory's metadata (None: nothing to check).
            loc: its place in the request.

        Raises:
            LimitExceeded: 413.
        """
        if metadata is None:
            return
        size = len(json.dumps(metadata, separators=(",", ":"), ensure_ascii=False,
                              allow_nan=True).encode("utf-8", "surrogatepass"))
        if size > self.max_metadata_bytes:
            raise self._over("max_metadata_bytes", 413, loc, "metadata (JSON bytes)", size)

    def check_batch(self, count: int, loc: tuple[str | int, ...]) -> None:
        """Refuse a batch of more than ``max_batch_items`` memories.

        Args:
            count: the number of memories in the batch.
            loc: its place in the request.

        Raises:
            LimitExceeded: 413.
        """
        if count > self.max_batch_items:
            raise self._over("max_batch_items", 413, loc, "the number of items", count)

    def check_top_k(self, top_k: int, loc: tuple[str | int, ...]) -> None:
        """Refuse a ``top_k`` over ``max_top_k``.

        Args:
            top_k: the requested ``top_k``.
            loc: its place in the request.

        Raises:
            LimitExceeded: 422.
        """
        if top_k > self.max_top_k:
            raise self._over("max_top_k", 422, loc, "top_k", top_k)

    def check_list_limit(self, limit: int, loc: tuple[str | int, ...]) -> None:
        """Refuse a list ``limit`` over ``max_list_limit``.

        Args:
            limit: the requested page size.
            loc: its place in the request.

        Raises:
            LimitExceeded: 422.
        """
        if limit > self.max_list_limit:
            raise self._over("max_list_limit", 422, loc, "limit", limit)

    def check_filter(self, where: object, loc: tuple[str | int, ...]) -> None:
        """Refuse a filter over ``max_filter_clauses`` or ``max_filter_depth``.

        Measured on the JSON before parsing, stopping as soon as it is over.

        Args:
            where: the filter as sent (JSON data, not yet parsed).
            loc: its place in the request.

        Raises:
            LimitExceeded: 422.
        """
        clauses, depth = filter_size(where, self.max_filter_clauses, self.max_filter_depth)
        if depth > self.max_filter_depth:
            raise self._over("max_filter_depth", 422, loc, "the filter's $and/$or nesting",
                             depth)
        if clauses > self.max_filter_clauses:
            raise self._over("max_filter_clauses", 422, loc, "the filter's clause count",
                             clauses)


def filter_size(where: object, max_clauses: int, max_depth: int) -> tuple[int, int]:
    """Clauses and ``$and``/``$or`` depth of a JSON filter, counted until over a bound.

    Args:
        where: the filter as sent (anything: malformed parts count as one clause,
            parsing refuses them later).
        max_clauses: stop counting once past this many clauses.
        max_depth: stop descending once past this depth.

    Returns:
        ``(clauses, depth)``; either is just over its bound when the count stopped.
    """
    clauses = 0
    deepest = 0

    def walk(node: object, depth: int) -> None:
        nonlocal clauses, deepest
        deepest = max(deepest, depth)
        if not isinstance(node, Mapping):
            clauses += 1
            return
        for key, value in node.items():
            if clauses > max_clauses or deepest > max_depth:
                return
            if key in ("$and", "$or") and isinstance(value, list):
                if depth + 1 > max_depth:
                    deepest = depth + 1
                    return
                for sub in value:
                    walk(sub, depth + 1)
                    if clauses > max_clauses or deepest > max_depth:
                        return
            elif isinstance(value, Mapping):
                for op, operand in value.items():
                    clauses += len(operand) if op in ("$in", "$nin") and isinstance(
                        operand, list) else 1
            else:
                clauses += 1

    walk(where, 0)
    return clauses, deepest


LIMIT_FLAGS: dict[str, str] = {f.name: f.name.replace("_", "-") for f in fields(Limits)}
"""Each limit's ``serve`` flag (without the leading ``--``)."""
