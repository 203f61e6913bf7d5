"""Opening stores by URL through the backends' own declarations.

Each backend package (``memory/``, ``sqlite/``, ``postgres/``, ``vectordb/``,
``redis/``) declares in its ``url.py`` the schemes it serves and how to open them
(:class:`~emotional_memory.stores._shared.urls.Backend`); they are found by listing the
packages of :mod:`emotional_memory.stores`. A backend of your own joins with
:func:`register_backend`.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
import threading
from pathlib import Path
from typing import Any

from emotional_memory.redact import redact_address
from emotional_memory.stores._shared.urls import Backend, OpenedStore, StoreURLError

# a URL scheme (RFC 3986), spaces around it allowed: what an error may quote of an
# address it cannot open
_SCHEME = re.compile(r"(?i)\s*[a-z][a-z0-9+.-]*\s*")

__all__ = [
    "Backend",
    "OpenedStore",
    "StoreURLError",
    "backends",
    "open_state_store",
    "open_store",
    "register_backend",
]

_lock = threading.Lock()
_stores: dict[str, Backend] = {}  # scheme -> backend
_states: dict[str, Backend] = {}
_found = False


def register_backend(backend: Backend) -> None:
    """Make ``backend``'s schemes openable by :func:`open_store` / :func:`open_state_store`.

    Args:
        backend: the declaration.

    Raises:
        ValueError: a scheme is already served by another backend.
    """
    with _lock:
        _register(backend)


def _register(backend: Backend) -> None:
    for scheme, table in [(s, _stores) for s in backend.schemes] + [
        (s, _states) for s in backend.state_schemes
    ]:
        held = table.get(scheme)
        if held is not None and held.name != backend.name:
            raise ValueError(f"URL scheme {scheme!r} is already served by {held.name!r}")
    for scheme in backend.schemes:
        _stores[scheme] = backend
    for scheme in backend.state_schemes:
        _states[scheme] = backend


def _discover() -> None:
    """Register every package of :mod:`emotional_memory.stores` that has a ``url.py``."""
    global _found
    with _lock:
        if _found:
            return
        package = __name__.rpartition(".")[0]  # emotional_memory.stores
        folder = str(Path(__file__).parent)
        for info in sorted(pkgutil.iter_modules([folder]), key=lambda i: i.name):
            if not info.ispkg or info.name.startswith("_"):
                continue
            name = f"{package}.{info.name}.url"
            if importlib.util.find_spec(name) is None:
                continue
            _register(importlib.import_module(name).BACKEND)
        _found = True


def backends() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The schemes :func:`open_store` and :func:`open_state_store` understand.

    Returns:
        ``(store schemes, state-store schemes)``, each sorted.
    """
    _discover()
    return tuple(sorted(_stores)), tuple(sorted(_states))


def _scheme(url: object, table: dict[str, Backend], what: str) -> Backend:
    if not isinstance(url, str):
        raise TypeError(f"{what} URL must be a str, got {type(url).__name__}")
    _discover()
    scheme, sep, _ = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in table:
        listed = ", ".join(f"{s}://" for s in sorted(table))
        # only a scheme is quoted: an address without '://' (a mistyped
        # ``postgresql:/u:pw@h``) or with more before it is no URL that redaction
        # can read, and may hold a password
        if not sep:
            shown = "(the address has no '://'; not shown, it may hold a password)"
        elif _SCHEME.fullmatch(scheme):
            shown = repr(scheme)
        else:
            shown = "(what precedes '://' is no scheme; not shown, it may hold a password)"
        raise StoreURLError(f"unknown {what} URL scheme {shown}: use one of {listed}")
    return table[scheme]


def open_state_store(url: str) -> Any:
    """The state store a URL names (``memory://``, ``sqlite:///PATH``, ``redis://...``,
    or a registered scheme).

    Args:
        url: the state store's URL.

    Returns:
        The state store (it keeps one state per scope).

    Raises:
        TypeError: ``url`` is not a str.
        StoreURLError: unknown scheme, malformed URL, or a missing extra.
    """
    backend = _scheme(url, _states, "state store")
    assert backend.open_state is not None
    return backend.open_state(url)


def open_store(
    url: str = "memory://", state: str | None = None, statement_timeout: float | None = None
) -> OpenedStore:
    """Open the memory store (and the state store beside it) a URL names.

    Args:
        url: ``memory://``, ``sqlite:///PATH``, ``postgresql://...``,
            ``qdrant://HOST[:PORT]/COLLECTION``, ``chroma://HOST[:PORT]/COLLECTION``, or
            a registered scheme.
        state: a state-store URL to use instead of the store's own (None: beside the
            memories when the store can hold them, else in process memory).
        statement_timeout: seconds any one database statement may run (PostgreSQL's
            ``statement_timeout``), and an operation may wait for its scope while
            another process's operation holds it (PostgreSQL, SQLite); None: no
            limit. Other stores ignore it.

    Returns:
        The opened stores.

    Raises:
        TypeError: ``url`` is not a str.
        StoreURLError: unknown scheme, malformed URL, missing extra or unreachable
            server (messages never hold a secret).
    """
    backend = _scheme(url, _stores, "store")
    assert backend.open is not None
    description = redact_address(url)
    states = open_state_store(state) if state is not None else None
    try:
        opened = backend.open(url, description, {"statement_timeout": statement_timeout})
    except BaseException:
        if states is not None and callable(getattr(states, "close", None)):
            states.close()
        raise
    from emotional_memory.stores.memory.state import InMemoryAffectiveStateStore

    if states is None:
        if opened.state_store is not None:
            return opened
        # a backend without a state store of its own: states in process memory
        return OpenedStore(opened.store, InMemoryAffectiveStateStore(), opened.description,
                           opened.durable, False)
    close = getattr(opened.state_store, "close", None)
    if callable(close):
        close()
    return OpenedStore(
        opened.store, states, f"{description} (states: {redact_address(state or '')})",
        opened.durable, not isinstance(states, InMemoryAffectiveStateStore),
    )
