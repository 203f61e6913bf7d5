"""Store URLs: ``--store URL`` -> a memory store and the state store beside it.

One small function, :func:`open_store`, maps the service's ``--store`` URL onto the
library's stores:

* ``memory://`` (the default): :class:`~emotional_memory.stores.InMemoryStore` and
  :class:`~emotional_memory.state_stores.InMemoryAffectiveStateStore` (nothing
  survives the process);
* ``sqlite:///PATH`` (relative path) or ``sqlite:////ABSOLUTE/PATH``:
  :class:`~emotional_memory.stores.SQLiteStore` and a
  :class:`~emotional_memory.state_stores.SQLiteAffectiveStateStore` in the same
  file, sharing its transactions (memories and mood commit together);
* ``postgresql://...`` (or ``postgres://``): ``emotional_memory.stores.postgres.
  PostgresStore(dsn)`` (extra ``[postgres]``), with the state store it offers.

Unknown schemes and missing extras raise :class:`StoreURLError` with a message that
says what to do. Messages never contain the URL's password: :func:`redact_url`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["SCHEMES", "OpenedStore", "StoreURLError", "open_store", "redact_url"]

SCHEMES: tuple[str, ...] = ("memory", "sqlite", "postgresql", "postgres")
"""The URL schemes :func:`open_store` understands."""


class StoreURLError(ValueError):
    """A ``--store`` URL that cannot be opened (unknown scheme, malformed, missing extra)."""


@dataclass(frozen=True)
class OpenedStore:
    """A memory store and its state store, opened from one URL.

    Attributes:
        store: the memory store (a ``MemoryStore``).
        state_store: where the affective state of every scope is persisted.
        description: the URL with any password replaced by ``***`` (safe to log).
        durable: whether memories survive the process.
    """

    store: Any
    state_store: Any
    description: str
    durable: bool

    def close(self) -> None:
        """Close the state store, then the store (each when it can be closed)."""
        for obj in (self.state_store, self.store):
            close = getattr(obj, "close", None)
            if callable(close):
                close()


def redact_url(url: str) -> str:
    """``url`` with the password of its user-info replaced by ``***``.

    Args:
        url: any URL (a DSN such as ``postgresql://user:secret@host/db``).

    Returns:
        The URL safe to print: ``postgresql://user:***@host/db``. A string that does
        not parse as a URL is returned as ``<unparsable URL>``.
    """
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "<unparsable URL>"
    if password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    netloc = f"{parts.username or ''}:***@{host}"
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is not None:
        netloc += f":{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _import_extra(module: str, extra: str, what: str) -> Any:
    """Import ``module``; a missing module or dependency -> :class:`StoreURLError`."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module or (exc.name and module.startswith(exc.name + ".")):
            raise StoreURLError(
                f"{what} is not available in this version of emotional-memory-jax "
                f"(no module {module})"
            ) from None
        raise StoreURLError(
            f"{what} needs the [{extra}] extra: pip install 'emotional-memory-jax[{extra}]' "
            f"(missing module {exc.name})"
        ) from None


def _sqlite_path(url: str) -> str:
    prefix = "sqlite:///"
    if not url.startswith(prefix) or len(url) == len(prefix):
        raise StoreURLError(
            "a SQLite store URL is sqlite:///RELATIVE/PATH or sqlite:////ABSOLUTE/PATH"
        )
    path = url[len(prefix):]
    if "?" in path or "#" in path:
        raise StoreURLError("a SQLite store URL takes no query or fragment")
    return path


def open_store(url: str = "memory://") -> OpenedStore:
    """Open the memory store and state store a ``--store`` URL names.

    Args:
        url: ``memory://``, ``sqlite:///PATH`` or ``postgresql://...`` (see the
            module docstring).

    Returns:
        The opened stores.

    Raises:
        TypeError: ``url`` is not a string.
        StoreURLError: unknown scheme, malformed URL, or an extra that is not
            installed (the message never holds a password).
    """
    if not isinstance(url, str):
        raise TypeError(f"store URL must be a str, got {type(url).__name__}")
    scheme, sep, _ = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in SCHEMES:
        shown = scheme if sep else redact_url(url)
        raise StoreURLError(
            f"unknown store URL scheme {shown!r}: use memory://, sqlite:///PATH or "
            "postgresql://USER@HOST/DB"
        )
    description = redact_url(url)
    if scheme == "memory":
        if url.lower() != "memory://":
            raise StoreURLError("the in-memory store URL is exactly memory://")
        from emotional_memory.state_stores.in_memory import InMemoryAffectiveStateStore
        from emotional_memory.stores.in_memory import InMemoryStore

        return OpenedStore(InMemoryStore(), InMemoryAffectiveStateStore(), description, False)
    if scheme == "sqlite":
        from emotional_memory.state_stores.sqlite import SQLiteAffectiveStateStore
        from emotional_memory.stores.sqlite import SQLiteStore

        store = SQLiteStore(_sqlite_path(url))
        try:
            states = SQLiteAffectiveStateStore.from_store(store)
        except BaseException:
            store.close()
            raise
        return OpenedStore(store, states, description, True)
    return _open_postgres(url, description)


def _open_postgres(url: str, description: str) -> OpenedStore:
    """``PostgresStore(dsn)`` and its state store (errors never show the password)."""
    module = _import_extra("emotional_memory.stores.postgres", "postgres", "the PostgreSQL store")
    try:
        store = module.PostgresStore(url)
    except Exception as exc:  # the driver's message may quote the DSN
        raise StoreURLError(
            f"could not open the PostgreSQL store at {description}: {type(exc).__name__}"
        ) from None
    state_store = _postgres_state_store(store)
    return OpenedStore(store, state_store, description, True)


def _postgres_state_store(store: Any) -> Any:
    """The state store of a PostgreSQL store: its own when it offers one, else in memory."""
    try:
        module = importlib.import_module("emotional_memory.state_stores.postgres")
    except ModuleNotFoundError:
        module = None
    factory = getattr(module, "PostgresAffectiveStateStore", None)
    from_store = getattr(factory, "from_store", None)
    if callable(from_store):
        return from_store(store)
    from emotional_memory.state_stores.in_memory import InMemoryAffectiveStateStore

    return InMemoryAffectiveStateStore()
