"""Cross-process exclusion by scope path, as intention locks (README, "Concurrency and
durability guarantees").

An operation on scope ``path`` holds its own path exclusively and every proper prefix
(the root ``()`` included) shared, acquired from the root down. Two operations then
exclude each other exactly when one path is a prefix of the other (equal paths
included), as :func:`emotional_memory._scope_locks.overlap` decides in one process,
while sibling scopes share only their common prefixes' shared locks and proceed at
once. Acquiring in order of depth is one global order, so no two holders deadlock.

The backends turn each ``(name, exclusive)`` step into their own lock: a PostgreSQL
advisory lock (:mod:`emotional_memory.stores.postgres.scope_locks`) or an ``flock``
on a file beside an SQLite database (:mod:`emotional_memory.stores.sqlite.scope_locks`).
"""

from __future__ import annotations

import hashlib
import json

from emotional_memory.interfaces import StoreTimeoutError

__all__ = ["ScopeHoldTimeout", "lock_name", "lock_plan"]


class ScopeHoldTimeout(StoreTimeoutError):
    """An overlapping scope stayed held by another operation (of this or another
    process) past the wait's bound, or was held at once where no wait was allowed;
    nothing was held, nothing changed."""


def lock_name(namespace: str, prefix: tuple[str, ...]) -> bytes:
    """A stable 32-byte name of scope ``prefix``'s lock in ``namespace``.

    Args:
        namespace: what the locks protect (a table or a database file).
        prefix: a scope path.

    Returns:
        SHA-256 of the namespace and the path as a JSON array (unambiguous whatever
        characters the parts hold).
    """
    text = json.dumps([namespace, list(prefix)], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).digest()


def lock_plan(namespace: str, path: tuple[str, ...]) -> list[tuple[bytes, bool]]:
    """The locks an operation on ``path`` takes, in acquisition order.

    Args:
        namespace: what the locks protect.
        path: the operation's scope path (``()``: the root).

    Returns:
        ``(name, exclusive)`` pairs: each proper prefix shared (root first), then
        ``path`` itself exclusive.
    """
    steps = [(lock_name(namespace, tuple(path[:i])), False) for i in range(len(path))]
    steps.append((lock_name(namespace, tuple(path)), True))
    return steps
