"""``redis://HOST:PORT/DB`` (``rediss://`` for TLS): affective states in Redis."""

from __future__ import annotations

from typing import Any

from emotional_memory.stores._shared.urls import Backend, StoreURLError, require_module


def open_redis_state(url: str) -> Any:
    """A :class:`RedisAffectiveStateStore` (extra ``redis``), checked at once."""
    require_module("redis", "redis", "the Redis state store")
    from emotional_memory.stores.redis.state import RedisAffectiveStateStore

    try:
        return RedisAffectiveStateStore(url, strict=True)
    except ImportError:
        raise StoreURLError(
            "the Redis state store needs the [redis] extra: "
            "pip install 'emotional-memory-jax[redis]'"
        ) from None


BACKEND = Backend("redis", (), ("redis", "rediss"), None, open_redis_state)
