"""Store URLs for the service: ``--store URL`` / ``--state URL``.

The service opens stores through :mod:`emotional_memory.stores.registry`, where each
backend declares its schemes (``memory://``, ``sqlite:///PATH``, ``postgresql://...``,
``qdrant://HOST[:PORT]/COLLECTION``, ``chroma://HOST[:PORT]/COLLECTION``; states also
``redis://...``). The affective states live beside the memories where the store can
hold them (SQLite, PostgreSQL), else in process memory, unless ``--state`` says where.
Messages never contain a secret (:func:`emotional_memory.redact.redact`).
"""

from __future__ import annotations

from emotional_memory.redact import redact_address
from emotional_memory.stores._shared.urls import QDRANT_API_KEY_ENV
from emotional_memory.stores.registry import (
    OpenedStore,
    StoreURLError,
    backends,
    open_state_store,
    open_store,
)

__all__ = [
    "QDRANT_API_KEY_ENV",
    "SCHEMES",  # noqa: F822  (module __getattr__)
    "STATE_SCHEMES",  # noqa: F822  (module __getattr__)
    "OpenedStore",
    "StoreURLError",
    "open_state_store",
    "open_store",
    "redact_url",
]



def __getattr__(name: str) -> tuple[str, ...]:
    """``SCHEMES`` / ``STATE_SCHEMES``: the URL schemes :func:`open_store` and
    :func:`open_state_store` understand (read from the backends on first use, so
    importing this module loads no backend)."""
    if name == "SCHEMES":
        return backends()[0]
    if name == "STATE_SCHEMES":
        return backends()[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def redact_url(url: str) -> str:
    """``url`` with every secret masked (:func:`emotional_memory.redact.redact_address`).

    Args:
        url: a store or state-store URL.

    Returns:
        The URL safe to print.
    """
    return redact_address(url)
