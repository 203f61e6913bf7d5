"""What a backend declares to be opened by URL, and the helpers its ``from_url`` uses.

A backend package offers ``url.py`` with ``BACKEND = Backend(...)``: the URL schemes
it serves and how to open a store (and the state store beside it) or a state store
alone. :mod:`emotional_memory.stores.registry` finds them; nothing lists backends by
hand.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from emotional_memory.redact import redact_address

__all__ = [
    "QDRANT_API_KEY_ENV",
    "Backend",
    "OpenedStore",
    "StoreURLError",
    "import_extra",
    "require_module",
    "server_parts",
    "sqlite_path",
]


QDRANT_API_KEY_ENV = "EMOTIONAL_MEMORY_QDRANT_API_KEY"
"""Environment variable holding the Qdrant API key (kept out of URLs and logs)."""


class StoreURLError(ValueError):
    """A store URL that cannot be opened (unknown scheme, malformed, missing extra)."""


@dataclass(frozen=True)
class OpenedStore:
    """A memory store and its state store, opened from one URL.

    Attributes:
        store: the memory store.
        state_store: where the affective state of every scope is persisted (a backend
            may answer None: the registry then keeps the states in process memory).
        description: the URL with every secret masked (safe to log).
        durable: whether memories survive the process.
        durable_state: whether the affective states survive the process.
    """

    store: Any
    state_store: Any
    description: str
    durable: bool
    durable_state: bool

    def close(self) -> None:
        """Close the state store, then the store (each when it has ``close``)."""
        for obj in (self.state_store, self.store):
            close = getattr(obj, "close", None)
            if callable(close):
                close()


@dataclass(frozen=True)
class Backend:
    """A backend's URL declaration.

    Attributes:
        name: the backend's name (its package).
        schemes: URL schemes of its memory stores.
        state_schemes: URL schemes of its state stores.
        open: ``(url, description, options) -> OpenedStore`` for ``schemes``
            (``options``: ``statement_timeout``; a backend ignores what it has no use for).
        open_state: ``url -> state store`` for ``state_schemes``.
    """

    name: str
    schemes: tuple[str, ...] = ()
    state_schemes: tuple[str, ...] = ()
    open: Callable[[str, str, dict[str, Any]], OpenedStore] | None = None
    open_state: Callable[[str], Any] | None = None


def import_extra(module: str, extra: str, what: str) -> Any:
    """Import ``module``, or raise :class:`StoreURLError` naming the extra to install.

    Args:
        module: the module's dotted name.
        extra: the package extra that brings its dependencies.
        what: the thing, for the message ("the Qdrant store").

    Returns:
        The module.
    """
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


def require_module(name: str, extra: str, what: str) -> None:
    """Raise :class:`StoreURLError` unless module ``name`` can be imported."""
    try:
        missing = name in sys.modules and sys.modules[name] is None
        missing = missing or importlib.util.find_spec(name) is None
    except (ImportError, ValueError):  # a parent package missing, or a broken entry
        missing = True
    if missing:
        raise StoreURLError(
            f"{what} needs the [{extra}] extra: pip install 'emotional-memory-jax[{extra}]'"
        )


def sqlite_path(url: str) -> str:
    """The file path of ``sqlite:///RELATIVE`` or ``sqlite:////ABSOLUTE``, as written:
    no ``~`` expansion and no percent-decoding (``sqlite:///a%20b.db`` is the file
    ``a%20b.db``); a relative path (``..`` included) is taken from the working folder.
    The scheme's case does not matter (RFC 3986)."""
    prefix = "sqlite:///"
    if url[:len(prefix)].lower() != prefix or len(url) == len(prefix):
        raise StoreURLError(
            "a SQLite store URL is sqlite:///RELATIVE/PATH or sqlite:////ABSOLUTE/PATH"
        )
    path = url[len(prefix):]
    if "?" in path or "#" in path:
        raise StoreURLError("a SQLite store URL takes no query or fragment")
    return path


def server_parts(url: str, default_port: int) -> tuple[str, int, str | None]:
    """``(host, port, collection or None)`` of ``scheme://HOST[:PORT][/COLLECTION]``."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise StoreURLError(f"malformed store URL {redact_address(url)!r}") from None
    # any user-info, a password alone included (``qdrant://:KEY@host``: its username
    # is "", and the key would be dropped without a word)
    if not parts.hostname or parts.query or parts.fragment or "@" in parts.netloc:
        raise StoreURLError(
            f"a {parts.scheme} store URL is {parts.scheme}://HOST[:PORT][/COLLECTION] "
            "(no user, query or fragment)"
        )
    collection = parts.path.strip("/") or None
    if collection is not None and "/" in collection:
        raise StoreURLError(f"a {parts.scheme} collection name has no '/': {collection!r}")
    return parts.hostname, port if port is not None else default_port, collection
