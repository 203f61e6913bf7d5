"""The PostgreSQL backend: :class:`PostgresStore` (pgvector HNSW, psycopg pool)."""

from emotional_memory.stores.postgres.store import (
    SCHEMA_VERSION,
    DatabaseUnreachable,
    PoolBusy,
    PostgresStore,
    PostgresStoreError,
    StatementTimeout,
    redact_dsn,
)

__all__ = [
    "SCHEMA_VERSION",
    "DatabaseUnreachable",
    "PoolBusy",
    "PostgresStore",
    "PostgresStoreError",
    "StatementTimeout",
    "redact_dsn",
]
