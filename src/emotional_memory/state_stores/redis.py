"""Compatibility path: see :mod:`emotional_memory.stores.redis.state`."""

from emotional_memory.stores.redis.state import RedisAffectiveStateStore

__all__ = ["RedisAffectiveStateStore"]
