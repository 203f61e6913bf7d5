"""Affective-state stores (compatibility path): each now lives with its backend in
:mod:`emotional_memory.stores` (``memory/state.py``, ``sqlite/state.py``,
``postgres/state.py``, ``redis/state.py``). Client libraries are imported only when a
store is constructed (extras ``redis`` / ``postgres``).
"""

from emotional_memory.stores.memory.state import InMemoryAffectiveStateStore
from emotional_memory.stores.postgres.state import PostgresAffectiveStateStore
from emotional_memory.stores.redis.state import RedisAffectiveStateStore
from emotional_memory.stores.sqlite.state import SQLiteAffectiveStateStore

__all__ = [
    "InMemoryAffectiveStateStore",
    "PostgresAffectiveStateStore",
    "RedisAffectiveStateStore",
    "SQLiteAffectiveStateStore",
]
