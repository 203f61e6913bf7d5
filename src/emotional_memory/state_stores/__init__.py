"""Affective-state stores: persistence for :meth:`AffectiveState.snapshot` dicts.

:class:`InMemoryAffectiveStateStore` keeps a deep copy in process memory;
:class:`SQLiteAffectiveStateStore` keeps it in an SQLite file, which may be the same
file a :class:`~emotional_memory.stores.SQLiteStore` uses.
"""

from emotional_memory.state_stores.in_memory import InMemoryAffectiveStateStore
from emotional_memory.state_stores.redis import RedisAffectiveStateStore
from emotional_memory.state_stores.sqlite import SQLiteAffectiveStateStore

# RedisAffectiveStateStore imports redis only when it builds a client (extra ``redis``).
__all__ = ["InMemoryAffectiveStateStore", "RedisAffectiveStateStore", "SQLiteAffectiveStateStore"]
