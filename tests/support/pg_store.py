"""A fresh table name for each PostgresStore test (tests/stores/postgres/test_postgres_store_*.py):
one counter for the whole session, so no two tests of a module's database share a table;
and an index-mode store holding the same memories as an in-memory oracle."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

_tables = iter(range(10**9))


def _new_table() -> str:
    return f"t{next(_tables)}"


@contextlib.contextmanager
def indexed_with_oracle(
    dsn: str, memories: Sequence[Any], margin: int
) -> Iterator[tuple[Any, Any]]:
    """A ``PostgresStore`` on a fresh table searching by its HNSW index at every size
    (``exact_rows=0``, ``margin``) and an ``InMemoryStore``, both holding ``memories``
    (saved in one transaction); the PostgreSQL store is closed afterwards.

    Yields:
        ``(pg, oracle)``.
    """
    from emotional_memory import InMemoryStore
    from emotional_memory.stores.postgres import PostgresStore

    oracle = InMemoryStore()
    with PostgresStore(dsn, table=_new_table(), exact_rows=0, margin=margin) as pg:
        with pg.transaction():
            for m in memories:
                oracle.save(m)
                pg.save(m)
        yield pg, oracle
