"""``redis://HOST:PORT/DB[?key=NAME]`` (``rediss://`` for TLS): affective states in
Redis, under key ``NAME`` (default :data:`DEFAULT_REDIS_KEY`) and its scopes' keys."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

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


def _split_key(url: str) -> tuple[str, str | None]:
    """The URL without its ``key`` query parameter, and that key (None: not given).

    Raises:
        StoreURLError: ``key`` given empty or more than once.
    """
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        return url, None  # the client's own check names the malformed URL
    keys = [v for k, v in query if k == "key"]
    if not keys:
        return url, None
    if len(keys) > 1 or not keys[0]:
        raise StoreURLError(
            "a Redis state URL's ?key= names one non-empty key (the states' key "
            f"prefix), got {len(keys)} value(s) in {redact_address(url)!r}"
        )
    rest = urlencode([(k, v) for k, v in query if k != "key"])
    return urlunsplit(parts._replace(query=rest)), keys[0]


def open_redis_state(url: str) -> Any:
    """A :class:`RedisAffectiveStateStore` (extra ``redis``), checked at once: an
    unreachable server or refused password is a :class:`StoreURLError` (no secret).
    ``?key=NAME`` sets its key, so that deployments sharing one Redis database keep
    their moods apart."""
    require_module("redis", "redis", "the Redis state store")
    from emotional_memory.stores.redis.state import RedisAffectiveStateStore

    _check_database(url)
    url, key = _split_key(url)
    try:
        store = RedisAffectiveStateStore(url, strict=True, **({} if key is None else
                                                              {"key": key}))
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
