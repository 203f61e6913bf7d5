"""Compatibility path: see :mod:`emotional_memory.stores.postgres.state`."""

from emotional_memory.stores.postgres.state import PostgresAffectiveStateStore

__all__ = ["PostgresAffectiveStateStore"]
