"""Affective-state stores: persistence for :meth:`AffectiveState.snapshot` dicts.

:class:`InMemoryAffectiveStateStore` keeps a deep copy in process memory;
:class:`SQLiteAffectiveStateStore` keeps it in an SQLite file, which may be the same
file a :class:`~emotional_memory.stores.SQLiteStore` uses.
"""

from emotional_memory.state_stores.in_memory import InMemoryAffectiveStateStore
from emotional_memory.state_stores.postgres import PostgresAffectiveStateStore
from emotional_memory.state_stores.redis import RedisAffectiveStateStore
from emotional_memory.state_stores.sqlite import SQLiteAffectiveStateStore

# RedisAffectiveStateStore / PostgresAffectiveStateStore import their client library
# only when constructed (extras ``redis`` / ``postgres``).
__all__ = [
    "InMemoryAffectiveStateStore",
    "PostgresAffectiveStateStore",
    "RedisAffectiveStateStore",
    "SQLiteAffectiveStateStore",
]
