"""A fresh table name for each PostgresStore test (tests/stores/postgres/test_postgres_store_*.py):
one counter for the whole session, so no two tests of a module's database share a table."""

from __future__ import annotations

_tables = iter(range(10**9))


def _new_table() -> str:
    return f"t{next(_tables)}"
