"""The Redis backend: :class:`RedisAffectiveStateStore` (states only; extra ``redis``)."""

from emotional_memory.stores.redis.state import RedisAffectiveStateStore

__all__ = ["RedisAffectiveStateStore"]
