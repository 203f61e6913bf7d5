"""``postgresql://`` (or ``postgres://``): the PostgreSQL store and its state store."""

from __future__ import annotations

from typing import Any

from emotional_memory.stores._shared.urls import (
    Backend,
    OpenedStore,
    StoreURLError,
    require_module,
)


def open_postgres(url: str, description: str, options: dict[str, Any]) -> OpenedStore:
    """``PostgresStore(url)`` and a state store in the same database (extra ``postgres``).

    Raises:
        StoreURLError: the extra is missing or the server refused (no secret shown).
    """
    for module in ("psycopg", "psycopg_pool", "pgvector"):
        require_module(module, "postgres", "the PostgreSQL store")
    from emotional_memory.redact import address_secrets, redact
    from emotional_memory.stores.postgres.common import PostgresStoreError
    from emotional_memory.stores.postgres.state import PostgresAffectiveStateStore
    from emotional_memory.stores.postgres.store import PostgresStore

    try:
        store = PostgresStore(url, statement_timeout=options.get("statement_timeout"))
    except Exception as exc:  # the driver's message may quote the DSN
        reason = type(exc).__name__
        if isinstance(exc, PostgresStoreError):  # the store's message, secrets masked
            reason = " ".join(redact(str(exc), address_secrets(url)).split())
        raise StoreURLError(
            f"could not open the PostgreSQL store at {description}: {reason}"
        ) from None
    return OpenedStore(store, PostgresAffectiveStateStore.from_store(store), description,
                       True, True)


BACKEND = Backend("postgres", ("postgres", "postgresql"), (), open_postgres)
