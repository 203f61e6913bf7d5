"""Affective-state store in Redis (extra ``redis``: ``pip install 'emotional-memory-jax[redis]'``).

The state is kept as one JSON string under one key, so several processes (or hosts)
can share one agent's mood: any of them can :meth:`~RedisAffectiveStateStore.load`
what another saved. Saves are plain ``SET`` commands: two writers on one key are
last-write-wins; give each agent its own ``key``.

``redis`` is imported when a client is built, so importing this module never needs
the extra.
"""

from __future__ import annotations

import copy
import importlib
import logging
from types import TracebackType
from typing import Any

from emotional_memory._extras import install_hint
from emotional_memory.interfaces import StoredStateError
from emotional_memory.redact import redact_address
from emotional_memory.state import AffectiveState
from emotional_memory.stores._shared.state import (
    check_key,
    loads_snapshot,
    restore_stored,
    scoped_key,
    snapshot_text,
)

__all__ = ["DEFAULT_REDIS_KEY", "DEFAULT_REDIS_URL", "RedisAffectiveStateStore"]

_log = logging.getLogger(__name__)

DEFAULT_REDIS_URL = "redis://localhost:6379/0"
"""Where :class:`RedisAffectiveStateStore` connects when no URL or client is given."""

DEFAULT_REDIS_KEY = "emotional_memory:affective_state"
"""The Redis key the state is stored under by default."""


class RedisAffectiveStateStore:
    """An :class:`~emotional_memory.interfaces.AffectiveStateStore` in Redis.

    By default errors from Redis are logged and swallowed (a lost connection must not
    stop the agent: ``load`` then returns None); ``strict=True`` re-raises them.
    """

    __slots__ = ("_client", "_key", "_strict", "_url")

    def __init__(
        self,
        url: str = DEFAULT_REDIS_URL,
        *,
        key: str = DEFAULT_REDIS_KEY,
        client: Any | None = None,
        strict: bool = False,
    ) -> None:
        """Connect to Redis (lazily: the first command opens the connection).

        Args:
            url: A ``redis://`` (or ``rediss://``, ``unix://``) URL; ignored when
                ``client`` is given.
            key: The key the state is stored under.
            client: A ready ``redis.Redis`` (or compatible) client to use instead of
                building one from ``url``; it must return ``str`` or ``bytes``.
            strict: Re-raise Redis errors instead of logging them.

        Raises:
            ImportError: When ``client`` is None and ``redis`` is not installed.
            TypeError: When ``client`` is None and ``url`` is not a string, or
                ``strict`` is neither a bool nor an int.
            ValueError: When ``key`` is empty.
        """
        check_key(key)
        if client is None and not isinstance(url, str):
            raise TypeError(f"url must be a str (a redis:// URL), got {type(url).__name__}")
        self._url = url if client is None else None  # ignored with a client: not shown
        self._key = key
        if not isinstance(strict, bool | int):  # bool("no") is True; 0 and 1 are fine
            raise TypeError(f"strict must be a bool, got {type(strict).__name__}")
        self._strict = bool(strict)
        self._client = client if client is not None else self._create_client(url)

    @staticmethod
    def _create_client(url: str) -> Any:
        """A ``redis.Redis`` client for ``url`` that decodes replies to ``str``."""
        try:
            redis_module = importlib.import_module("redis")
        except ImportError as exc:
            raise ImportError(
                f"RedisAffectiveStateStore needs the redis package: {install_hint('redis')}"
            ) from exc
        try:
            return redis_module.Redis.from_url(url, decode_responses=True)
        except ValueError:  # urllib's words may quote a piece of the password
            pass
        raise ValueError(  # outside the except: urllib's error is not its __context__
            f"malformed Redis URL {redact_address(url)!r} (percent-encode any '/', "
            "'?', '#', '@' or ':' in the user name or password)"
        )

    def scoped(self, path: tuple[str, ...]) -> RedisAffectiveStateStore:
        """The state store of scope ``path`` (an engine view's): the same client,
        key :func:`~emotional_memory.stores._shared.state.scoped_key` of this key.

        Args:
            path: the view's full scope path.

        Returns:
            The twin.
        """
        twin = copy.copy(self)
        twin._key = scoped_key(self._key, path)
        return twin

    @property
    def key(self) -> str:
        """The Redis key the state is stored under."""
        return self._key

    @property
    def client(self) -> Any:
        """The underlying Redis client."""
        return self._client

    def _failed(self, operation: str, exc: Exception) -> None:
        _log.warning("RedisAffectiveStateStore.%s failed: %s", operation, exc)
        if self._strict:
            raise exc

    def save(self, state: AffectiveState | dict[str, Any]) -> None:
        """Store ``state`` under the key, replacing what was there.

        Args:
            state: The state to store, or a snapshot dict from
                :meth:`AffectiveState.snapshot`.

        Raises:
            TypeError: When ``state`` is neither (always raised, even when not strict).
            ValueError: When the snapshot holds NaN or infinite numbers.
        """
        text = snapshot_text(state)
        try:
            self._client.set(self._key, text)
        except Exception as exc:
            self._failed("save", exc)

    def load(self) -> AffectiveState | None:
        """The stored state.

        Returns:
            A new :class:`AffectiveState`, or None when nothing is stored (or, when not
            strict, when Redis could not be reached).
        """
        return restore_stored(self._key, self.load_snapshot())

    def load_snapshot(self) -> dict[str, Any] | None:
        """The stored snapshot dict, as :meth:`AffectiveState.snapshot` wrote it.

        Returns:
            A new dict, or None when nothing is stored (or, when not strict, when Redis
            could not be reached).

        Raises:
            StoredStateError: the key holds something else: not UTF-8, not JSON or
                not an object (either mode), or a list, hash or other non-string Redis value
                (strict; leniently logged and read as nothing stored, as in the
                original); a ValueError naming the key.
        """
        try:
            raw = self._client.get(self._key)
        except UnicodeDecodeError as exc:  # a client decoding replies read no UTF-8 text:
            # the stored value (cut inside a character, another program's bytes), not
            # an outage: named in either mode, as a value that is no JSON
            raise StoredStateError(self._key, f"not UTF-8 text: {exc}") from None
        except Exception as exc:
            if self._strict and str(exc).startswith("WRONGTYPE"):  # another program's
                # data, not an outage (leniently, as the original: logged, read as none)
                raise StoredStateError(
                    self._key, "a Redis value of another type than string") from None
            self._failed("load", exc)
            return None
        if raw is None:
            return None
        return loads_snapshot(self._key, raw)

    def clear(self) -> None:
        """Delete the key (nothing happens when it is absent)."""
        try:
            self._client.delete(self._key)
        except Exception as exc:
            self._failed("clear", exc)

    def close(self) -> None:
        """Close the client's connections (idempotent)."""
        close = getattr(self._client, "close", None)
        if callable(close):
            try:
                close()
            except Exception as exc:
                self._failed("close", exc)

    def __enter__(self) -> RedisAffectiveStateStore:
        """Context-manager entry: the store itself."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Context-manager exit: :meth:`close`."""
        self.close()

    def __repr__(self) -> str:
        if self._url is None:  # a given client, whose address it does not show
            where = f"client={type(self._client).__name__}"
        else:
            where = f"url={redact_address(self._url)!r}"
        return f"{type(self).__name__}({where}, key={self._key!r}, strict={self._strict})"
