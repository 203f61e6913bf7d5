"""Re-embedding pages through the store by cursor (``list_after``), not by offset.

With ``list_page(offset, limit)`` every page of a PostgreSQL store read the rows
before its offset too: a whole-store re-embedding read about N^2 / (2 * batch) rows
(100k memories, batches of 256: ~20M). Counted here on a real PostgreSQL table by
the server's own counters (``pg_stat_user_tables``: rows fetched by index and by
sequential scans, flushed by the one backend the store uses), not by time.

A progress record of the version that counted memories only (no ``after`` cursor)
is still resumed where it stopped, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from emotional_memory.embedder_identity import REEMBED_SETTING, recorded_embedder
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.reembed import reembed_store
from emotional_memory.stores.postgres import PostgresStore
from emotional_memory.stores.sqlite import SQLiteStore
from support.memories import basic_memory as mem

OLD = HashingEmbedder(dim=32)
NEW = HashingEmbedder(dim=32, seed=7)
_TABLES = itertools.count()


def _rows_read(store: PostgresStore, table: str) -> int:
    """Rows of ``table``'s memories the server fetched so far (sequential and index scans), the
    store's backend's pending counts flushed first (it has one connection)."""
    with store._read(single=True) as cur:
        cur.execute("SELECT pg_stat_force_next_flush()")  # flushed as the backend idles
    with store._read(single=True) as cur:
        row = cur.execute(
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
            "FROM pg_stat_user_tables WHERE relname = %s", (f"{table}_memories",)).fetchone()
    assert row is not None
    return int(row[0])


def test_postgres_reembedding_reads_each_row_a_few_times_not_once_per_page(
    pg_dsn: str,
) -> None:
    n, batch = 480, 8
    table = f"walk{next(_TABLES)}"
    with PostgresStore(pg_dsn, table=table, min_connections=1, max_connections=1) as store:
        for i in range(n):
            store.save(mem(f"memory {i}", OLD.embed(f"memory {i}")))
        start = _rows_read(store, table)
        report = reembed_store(store, NEW, batch_size=batch, progress=False)
        read = _rows_read(store, table) - start
        assert report.reembedded == n
        assert all(m.embedding == pytest.approx(NEW.embed(m.content), abs=1e-6)
                   for m in store.list_all())
    # by offset: the pages alone read the rows before them too (~n^2 / (2 * batch) = 14400)
    assert read <= 5 * n, read  # one row fetch per memory for its page, ~3 for its update


class _Counting:
    """NEW, noting the texts it embeds."""

    identity = NEW.identity

    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        self.texts += texts
        return NEW.embed_batch(texts)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_count_only_progress_record_of_the_previous_version_is_resumed(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The previous version recorded ``{"from", "to", "done", "of"}``: the run resumes
    after the first ``done`` memories (and records its cursor from then on)."""
    if kind == "sqlite":
        store: Any = SQLiteStore(tmp_path / "m.db")
    else:
        store = PostgresStore(request.getfixturevalue("pg_dsn"), table=f"old{next(_TABLES)}")
    try:
        texts = [f"memory {i}" for i in range(13)]
        for text in texts:
            store.save(mem(text, OLD.embed(text)))
        store.replace_setting("embedder", OLD.identity)
        with store.transaction():  # what the previous version's first 2 batches left
            for memory in store.list_all()[:6]:
                store.update(memory.model_copy(update={"embedding": NEW.embed(memory.content)}))
            store.replace_setting(REEMBED_SETTING, json.dumps(
                {"from": OLD.identity, "to": NEW.identity, "done": 6, "of": 13}))
        counting = _Counting()
        report = reembed_store(store, counting, batch_size=3, progress=False)
        assert (report.resumed_from, report.reembedded, report.memories) == (6, 7, 13)
        assert counting.texts == texts[6:]
        assert all(m.embedding == pytest.approx(NEW.embed(m.content), abs=1e-6)
                   for m in store.list_all())
        assert recorded_embedder(store) == NEW.identity
        assert store.setting(REEMBED_SETTING) is None
    finally:
        store.close()
