"""``redis://HOST:PORT/DB`` (``rediss://`` for TLS): affective states in Redis."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from emotional_memory.redact import address_secrets, redact, redact_address
from emotional_memory.stores._shared.urls import Backend, StoreURLError, require_module


def _check_database(url: str) -> None:
    """Refuse a path that is not a database number (redis-py reads ``/1abc`` as none:
    database 0)."""
    try:
        path = urlsplit(url).path
    except ValueError:
        return  # the client's own check names the malformed URL
    db = path[1:] if path.startswith("/") else path
    if db and not (db.isascii() and db.isdigit()):
        raise StoreURLError(
            f"a Redis state URL's database is a number (redis://HOST:PORT/DB), got "
            f"{redact_address(url)!r}"
        )


def open_redis_state(url: str) -> Any:
    """A :class:`RedisAffectiveStateStore` (extra ``redis``), checked at once: an
    unreachable server or refused password is a :class:`StoreURLError` (no secret)."""
    require_module("redis", "redis", "the Redis state store")
    from emotional_memory.stores.redis.state import RedisAffectiveStateStore

    _check_database(url)
    try:
        store = RedisAffectiveStateStore(url, strict=True)
    except ImportError:
        raise StoreURLError(
            "the Redis state store needs the [redis] extra: "
            "pip install 'emotional-memory-jax[redis]'"
        ) from None
    try:
        store.client.ping()
    except Exception as exc:  # refused connection, wrong password, not a Redis server
        reason = redact(str(exc), address_secrets(url))
        store.client.close()
        raise StoreURLError(
            f"could not open the Redis state store at {redact_address(url)}: {reason}"
        ) from None
    return store


BACKEND = Backend("redis", (), ("redis", "rediss"), None, open_redis_state)
