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
  PostgresStore(dsn)`` (extra ``[postgres]``), with the state store it offers;
* ``qdrant://HOST[:PORT]/COLLECTION`` (``qdrant+https://`` for TLS; the API key, if
  any, from ``EMOTIONAL_MEMORY_QDRANT_API_KEY``) and ``chroma://HOST[:PORT]/COLLECTION``:
  :class:`~emotional_memory.stores.QdrantStore` / :class:`~emotional_memory.stores.
  ChromaStore` on a server (extras ``[qdrant]`` / ``[chroma]``).

The affective states (one per scope) live beside the memories where the store can
hold them (SQLite, PostgreSQL); otherwise in process memory, unless a state URL says
where (:func:`open_state_store`: ``memory://``, ``sqlite:///PATH``, ``redis://...``).

Unknown schemes and missing extras raise :class:`StoreURLError` with a message that
says what to do. Messages never contain the URL's password: :func:`redact_url`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "QDRANT_API_KEY_ENV",
    "SCHEMES",
    "STATE_SCHEMES",
    "OpenedStore",
    "StoreURLError",
    "open_state_store",
    "open_store",
    "redact_url",
]

SCHEMES: tuple[str, ...] = (
    "memory", "sqlite", "postgresql", "postgres", "qdrant", "qdrant+https", "chroma",
)
"""The URL schemes :func:`open_store` understands."""
STATE_SCHEMES: tuple[str, ...] = ("memory", "sqlite", "redis", "rediss")
"""The URL schemes :func:`open_state_store` understands."""
QDRANT_API_KEY_ENV = "EMOTIONAL_MEMORY_QDRANT_API_KEY"
"""Environment variable holding the Qdrant API key (kept out of URLs and logs)."""


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
        durable_state: whether the affective states survive the process.
    """

    store: Any
    state_store: Any
    description: str
    durable: bool
    durable_state: bool

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


def _scheme(url: object, schemes: tuple[str, ...], what: str) -> str:
    if not isinstance(url, str):
        raise TypeError(f"{what} URL must be a str, got {type(url).__name__}")
    scheme, sep, _ = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in schemes:
        shown = scheme if sep else redact_url(url)
        listed = ", ".join(f"{s}://" for s in schemes)
        raise StoreURLError(f"unknown {what} URL scheme {shown!r}: use one of {listed}")
    return scheme


def open_store(
    url: str = "memory://", state: str | None = None, statement_timeout: float | None = None
) -> OpenedStore:
    """Open the memory store and state store a ``--store`` URL names.

    Args:
        url: ``memory://``, ``sqlite:///PATH``, ``postgresql://...``,
            ``qdrant://HOST:PORT/COLLECTION`` or ``chroma://HOST:PORT/COLLECTION``
            (see the module docstring).
        state: where the affective states live instead of the store's default
            (:func:`open_state_store`); None: beside the memories when the store can
            hold them, else in process memory.
        statement_timeout: seconds any one database statement may run (the
            PostgreSQL store's ``statement_timeout``); None: no limit.

    Returns:
        The opened stores.

    Raises:
        TypeError: ``url`` is not a string.
        StoreURLError: unknown scheme, malformed URL, an extra that is not
            installed, or a server that cannot be reached (the message never holds
            a password).
    """
    scheme = _scheme(url, SCHEMES, "store")
    description = redact_url(url)
    states = open_state_store(state) if state is not None else None
    try:
        opened = _open(scheme, url, description, statement_timeout)
    except BaseException:
        if states is not None:
            states.close()
        raise
    if states is None:
        return opened
    close = getattr(opened.state_store, "close", None)
    if callable(close) and opened.state_store is not None:
        close()
    return OpenedStore(
        opened.store, states, f"{description} (states: {redact_url(state or '')})",
        opened.durable, not isinstance(states, _in_memory_state_type()),
    )


def _in_memory_state_type() -> type:
    from emotional_memory.state_stores.in_memory import InMemoryAffectiveStateStore

    return InMemoryAffectiveStateStore


def open_state_store(url: str) -> Any:
    """The state store a ``--state`` URL names.

    Args:
        url: ``memory://``, ``sqlite:///PATH`` (a file of its own or the store's) or
            ``redis://HOST:PORT/DB`` (extra ``[redis]``).

    Returns:
        The state store (it keeps one state per scope).

    Raises:
        StoreURLError: unknown scheme, malformed URL, or a missing extra.
    """
    scheme = _scheme(url, STATE_SCHEMES, "state store")
    if scheme == "memory":
        if url.lower() != "memory://":
            raise StoreURLError("the in-memory state store URL is exactly memory://")
        return _in_memory_state_type()()
    if scheme == "sqlite":
        from emotional_memory.state_stores.sqlite import SQLiteAffectiveStateStore

        return SQLiteAffectiveStateStore(_sqlite_path(url))
    module = _import_extra("emotional_memory.state_stores.redis", "redis", "the Redis state store")
    try:
        return module.RedisAffectiveStateStore(url, strict=True)
    except ImportError:
        raise StoreURLError(
            "the Redis state store needs the [redis] extra: "
            "pip install 'emotional-memory-jax[redis]'"
        ) from None


def _open(
    scheme: str, url: str, description: str, statement_timeout: float | None = None
) -> OpenedStore:
    """The store of ``url`` with its default state store."""
    if scheme == "memory":
        if url.lower() != "memory://":
            raise StoreURLError("the in-memory store URL is exactly memory://")
        from emotional_memory.stores.in_memory import InMemoryStore

        return OpenedStore(
            InMemoryStore(), _in_memory_state_type()(), description, False, False
        )
    if scheme == "sqlite":
        from emotional_memory.state_stores.sqlite import SQLiteAffectiveStateStore
        from emotional_memory.stores.sqlite import SQLiteStore

        store = SQLiteStore(_sqlite_path(url))
        try:
            states = SQLiteAffectiveStateStore.from_store(store)
        except BaseException:
            store.close()
            raise
        return OpenedStore(store, states, description, True, True)
    if scheme in ("qdrant", "qdrant+https", "chroma"):
        return _open_vector_db(scheme, url, description)
    return _open_postgres(url, description, statement_timeout)


def _server_parts(url: str, default_port: int) -> tuple[str, int, str | None]:
    """``(host, port, collection or None)`` of ``scheme://HOST[:PORT][/COLLECTION]``."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise StoreURLError(f"malformed store URL {redact_url(url)!r}") from None
    if not parts.hostname or parts.query or parts.fragment or parts.username:
        raise StoreURLError(
            f"a {parts.scheme} store URL is {parts.scheme}://HOST[:PORT][/COLLECTION] "
            "(no user, query or fragment)"
        )
    collection = parts.path.strip("/") or None
    if collection is not None and "/" in collection:
        raise StoreURLError(f"a {parts.scheme} collection name has no '/': {collection!r}")
    return parts.hostname, port if port is not None else default_port, collection


def _open_vector_db(scheme: str, url: str, description: str) -> OpenedStore:
    """A Qdrant or Chroma server's store; the states in process memory by default."""
    kwargs: dict[str, Any] = {}
    if scheme == "chroma":
        host, port, collection = _server_parts(url, 8000)
        module = _import_extra("emotional_memory.stores.chroma", "chroma", "the Chroma store")
        factory, kwargs = module.ChromaStore, {"host": host, "port": port}
        if importlib.util.find_spec("chromadb") is None:
            raise StoreURLError(
                "the Chroma store needs the [chroma] extra: "
                "pip install 'emotional-memory-jax[chroma]'"
            )
    else:
        host, port, collection = _server_parts(url, 6333)
        module = _import_extra("emotional_memory.stores.qdrant", "qdrant", "the Qdrant store")
        http = "https" if scheme == "qdrant+https" else "http"
        shown_host = f"[{host}]" if ":" in host else host
        factory = module.QdrantStore
        kwargs = {"url": f"{http}://{shown_host}:{port}",
                  "api_key": os.environ.get(QDRANT_API_KEY_ENV) or None}
        if importlib.util.find_spec("qdrant_client") is None:
            raise StoreURLError(
                "the Qdrant store needs the [qdrant] extra: "
                "pip install 'emotional-memory-jax[qdrant]'"
            )
    if collection is not None:
        kwargs["collection_name"] = collection
    try:
        store = factory(**kwargs)
    except Exception as exc:  # unreachable server, refused key, ...
        raise StoreURLError(
            f"could not open the store at {description}: {type(exc).__name__}"
        ) from None
    return OpenedStore(store, _in_memory_state_type()(), description, True, False)


def _open_postgres(
    url: str, description: str, statement_timeout: float | None = None
) -> OpenedStore:
    """``PostgresStore(dsn)`` and its state store (errors never show the password)."""
    module = _import_extra("emotional_memory.stores.postgres", "postgres", "the PostgreSQL store")
    try:
        store = module.PostgresStore(url, statement_timeout=statement_timeout)
    except Exception as exc:  # the driver's message may quote the DSN
        raise StoreURLError(
            f"could not open the PostgreSQL store at {description}: {type(exc).__name__}"
        ) from None
    state_store = _postgres_state_store(store)
    durable_state = not isinstance(state_store, _in_memory_state_type())
    return OpenedStore(store, state_store, description, True, durable_state)


def _postgres_state_store(store: Any) -> Any:
    """The state store of a PostgreSQL store: its own when it offers one that keeps a
    state per scope (``scoped``), else in memory."""
    try:
        module = importlib.import_module("emotional_memory.state_stores.postgres")
    except ModuleNotFoundError:
        module = None
    factory = getattr(module, "PostgresAffectiveStateStore", None)
    from_store = getattr(factory, "from_store", None)
    # the service keeps one state per scope: only a state store that can (scoped)
    if callable(from_store) and callable(getattr(factory, "scoped", None)):
        return from_store(store)
    return _in_memory_state_type()()
