"""PostgresStore and PostgresAffectiveStateStore against a real PostgreSQL + pgvector.

The server is started by the ``pg_server`` fixture (tests/conftest.py,
tests/support/pg_server.py) on a free 127.0.0.1 port; this module gets its own database.
The in-memory store is the oracle: the PostgreSQL store must give its answers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")

from emotional_memory import EmotionalMemory, InMemoryStore  # noqa: E402
from emotional_memory._bank import LexicalQuery  # noqa: E402
from emotional_memory.affect import CoreAffect  # noqa: E402
from emotional_memory.embedders import HashingEmbedder  # noqa: E402
from emotional_memory.models import Memory  # noqa: E402
from emotional_memory.replay import TickClock  # noqa: E402
from emotional_memory.stores.columnar import ColumnarStore, StoreAdapter, columnar  # noqa: E402
from emotional_memory.stores.postgres import (  # noqa: E402
    SCHEMA_VERSION,
    PostgresStore,
    PostgresStoreError,
    redact_dsn,
)
from emotional_memory.stores.postgres.state import PostgresAffectiveStateStore  # noqa: E402
from support.banks import (  # noqa: E402
    T0,
    WORDS,
    assert_same_bank,
    random_memories,
    random_query,
)
from support.engine_ops import TEXTS, dump, engine_op, op_engine, run_engine_ops  # noqa: E402
from support.paths import README, SRC, SUPPORT, TESTS  # noqa: E402
from support.where_oracle import TRICKY_METAS, TRICKY_WHERES  # noqa: E402

_tables = iter(range(10**9))


def _new_table() -> str:
    return f"t{next(_tables)}"


@pytest.fixture
def store(pg_dsn: str) -> Iterator[PostgresStore]:
    s = PostgresStore(pg_dsn, table=_new_table())
    yield s
    s.close()


# ----------------------------------------------------------------- store answers


@settings(max_examples=25, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 30),
    odd_every=st.sampled_from([0, 3]),
    limit=st.one_of(st.none(), st.integers(1, 35)),
    query_kind=st.integers(0, 5),
    deletes=st.integers(0, 4),
    extra=st.integers(0, 5),
    lexical=st.one_of(st.none(), st.builds(
        LexicalQuery, terms=st.lists(st.sampled_from([*WORDS, "text", "7", "zzz"]),
                                     unique=True, max_size=3),
        shortlist=st.integers(0, 6), k1=st.just(1.2), b=st.just(0.75),
        statistics=st.booleans(),
    )),
)
def test_every_read_equals_the_in_memory_stores(
    pg_dsn: str, seed: int, n: int, odd_every: int, limit: int | None, query_kind: int,
    deletes: int, extra: int, lexical: LexicalQuery | None,
) -> None:
    """Same memories saved and deleted in both stores: every read is identical (the
    candidate bank byte for byte, memories ``==`` and as JSON, search, lexical)."""
    rng = np.random.default_rng(seed + 1)
    memories = [  # some in scopes, some expiring (kept and rebuilt exactly)
        m.model_copy(update={"scope": ("alice", "work")[: i % 3],
                             "expires_at": T0 + timedelta(days=i) if i % 4 == 1 else None})
        for i, m in enumerate(random_memories(seed, n, odd_every))
    ]
    oracle = InMemoryStore()
    with PostgresStore(pg_dsn, table=_new_table()) as pg:
        for m in memories:
            oracle.save(m)
            pg.save(m)
        for i in rng.choice(n, size=min(3, n), replace=False):  # replaced in place
            other = memories[(int(i) + 1) % n].embedding
            again = memories[int(i)].model_copy(update={"embedding": other, "content": "new"})
            oracle.save(again)
            pg.update(again)
        for mid in rng.choice([m.id for m in memories], size=min(deletes, n - 1),
                              replace=False):
            assert oracle.delete(str(mid)) is pg.delete(str(mid)) is True
        assert pg.delete("nope") is False
        assert len(pg) == len(oracle)
        with psycopg.connect(pg_dsn) as conn:  # the kept counts equal the rows
            t = pg.table
            kept = conn.execute(
                f"SELECT (SELECT value::bigint FROM {t}_meta WHERE key = 'count'), "
                f"(SELECT value::bigint FROM {t}_meta WHERE key = 'embedded'), "
                f"(SELECT value::bigint FROM {t}_meta WHERE key = 'expiring')"
            ).fetchone()
            live = oracle.list_all()
            assert kept == (len(live), sum(bool(m.embedding) for m in live),
                            sum(m.expires_at is not None for m in live))
            # the links table the triggers keep equals the link arrays
            assert set(conn.execute(f"SELECT target, source FROM {t}_links").fetchall()) == {
                (target, seq) for seq, targets in conn.execute(
                    f"SELECT seq, link_targets FROM {t}_memories").fetchall()
                for target in targets
            }
        assert pg.list_all() == oracle.list_all()
        assert [m.model_dump_json() for m in pg.list_all()] == [
            m.model_dump_json() for m in oracle.list_all()]
        now = T0 + timedelta(days=200, microseconds=int(rng.integers(0, 10**6)))
        query = random_query(query_kind, rng)
        also = [str(x) for x in rng.choice([m.id for m in memories] + ["nope"], size=extra)]
        got = pg.candidate_bank(query, limit, now, also=also, lexical=lexical,
                                with_memories=True)
        want = oracle.candidate_bank(query, limit, now, also=also, lexical=lexical,
                                     with_memories=True)
        assert_same_bank(got, want)
        assert got.memories == want.memories
        # a count read with the candidates: a store holding at most ``upto`` memories
        # answers as with limit=None
        upto = int(rng.integers(0, 35))
        counted = pg.candidate_bank(query, limit, now, also=also, lexical=lexical,
                                    everything_upto=upto)
        assert counted.total == len(oracle)
        assert_same_bank(counted, oracle.candidate_bank(
            query, None if len(oracle) <= upto else limit, now, also=also, lexical=lexical))
        if query:
            for k in (0, 1, 3, 50):
                assert pg.search_by_embedding(query, k) == oracle.search_by_embedding(query, k)
        assert pg.memories([*got.ids[::-1], "nope"]) == oracle.memories([*got.ids[::-1], "nope"])
        ids_a, cols_a = pg.columns(now)
        ids_b, cols_b = StoreAdapter(oracle).columns(now)  # the protocol's reference
        assert ids_a == ids_b
        for a, b in zip(jax.tree_util.tree_leaves(cols_a), jax.tree_util.tree_leaves(cols_b),
                        strict=True):
            a, b = np.asarray(a), np.asarray(b)
            assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
        assert pg.pending_ids() == oracle.pending_ids()
        targets = [m.id for m in memories[:3]] + ["gone"]
        assert pg.linking_to(targets) == oracle.linking_to(targets)
        if lexical is not None and lexical.terms:
            assert pg.lexical_search(lexical.terms, 5, 1.2, 0.75) == oracle.lexical_search(
                lexical.terms, 5, 1.2, 0.75)


def test_the_hnsw_path_reranks_to_the_exact_answer(pg_dsn: str) -> None:
    """Above ``exact_rows`` the HNSW index supplies top_k + margin candidates (with the
    zero-norm rows); on a small table its candidates hold the true best, so the exact
    re-rank gives the in-memory store's answer (zero and duplicate rows included)."""
    memories = random_memories(11, 90, 3)
    oracle = InMemoryStore()
    with PostgresStore(pg_dsn, table=_new_table(), exact_rows=0, margin=8) as pg:
        with pg.transaction():
            for m in memories:
                oracle.save(m)
                pg.save(m)
        rng = np.random.default_rng(5)
        now = T0 + timedelta(days=100)
        for _ in range(8):
            query = random_query(5, rng)
            for k in (1, 3, 6):
                assert pg.search_by_embedding(query, k) == oracle.search_by_embedding(query, k)
            assert_same_bank(pg.candidate_bank(query, 6, now), oracle.candidate_bank(query, 6, now))
            counted = pg.candidate_bank(query, 6, now, everything_upto=6)
            assert counted.total == 90
            assert_same_bank(counted, oracle.candidate_bank(query, 6, now))
            # far from every stored direction: the rows without one (similarity 0,
            # not in the index) rank among the candidates
            far = [-x for x in query] if query else query
            assert pg.search_by_embedding(far, 40) == oracle.search_by_embedding(far, 40)
        with pg.transaction():  # the batched search of encode_batch, inside a write
            queries = [random_query(5, rng) for _ in range(4)]
            assert pg.search_by_embedding_batch(queries, 7) == [
                oracle.search_by_embedding(q, 7) for q in queries]


def _index_options(dsn: str, table: str) -> dict[str, str]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT c.reloptions FROM pg_class c WHERE c.relname = %s",
            (f"{table}_memories_hnsw",),
        ).fetchone()
    assert row is not None, "no HNSW index"
    return dict(opt.split("=", 1) for opt in row[0] or [])


def _table_options(dsn: str, table: str) -> dict[str, str]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT reloptions FROM pg_class WHERE relname = %s", (f"{table}_memories",)
        ).fetchone()
    assert row is not None, "no memories table"
    return dict(opt.split("=", 1) for opt in row[0] or [])


def test_the_hnsw_index_is_built_with_the_stores_options(pg_dsn: str) -> None:
    """The index appears with the first embedding, with ``m`` / ``ef_construction``
    as given (default 16 / 128), the table with the ``fillfactor`` given (default 70);
    the docstring's rebuild of an existing index with another ``ef_construction``
    works and keeps every answer."""
    memories = random_memories(3, 40, 3)
    default, custom = _new_table(), _new_table()
    with PostgresStore(pg_dsn, table=default, exact_rows=0) as pg:
        pg.save(memories[0])
        assert _index_options(pg_dsn, default) == {"m": "16", "ef_construction": "128"}
        assert _table_options(pg_dsn, default)["fillfactor"] == "70"
    with PostgresStore(pg_dsn, table=custom, exact_rows=0, hnsw_m=8,
                       hnsw_ef_construction=40, fillfactor=50) as pg:
        with pg.transaction():
            for m in memories:
                pg.save(m)
        assert _index_options(pg_dsn, custom) == {"m": "8", "ef_construction": "40"}
        assert _table_options(pg_dsn, custom)["fillfactor"] == "50"
        query = random_query(5, np.random.default_rng(1))
        before = pg.search_by_embedding(query, 6)
        import psycopg

        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"ALTER INDEX {custom}_memories_hnsw SET (ef_construction = 128)")
            conn.execute(f"REINDEX INDEX {custom}_memories_hnsw")
        assert _index_options(pg_dsn, custom) == {"m": "8", "ef_construction": "128"}
        assert pg.search_by_embedding(query, 6) == before


@pytest.mark.parametrize(("option", "value"), [
    ("min_connections", -1), ("max_connections", 0), ("exact_rows", -1), ("ef_search", 0),
    ("margin", -1), ("hnsw_m", 1), ("hnsw_ef_construction", 3), ("fillfactor", 9),
    ("fillfactor", 101), ("fillfactor", 70.0), ("hnsw_m", True),
])
def test_a_bad_option_is_refused_naming_it_before_anything_is_created(
    pg_dsn: str, option: str, value: Any
) -> None:
    import psycopg

    table = _new_table()
    with pytest.raises(ValueError, match=option):
        PostgresStore(pg_dsn, table=table, **{option: value})
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_class WHERE relname LIKE %s", (f"{table}\\_%",)
        ).fetchone() == (0,)


def _seeded(pg_dsn: str, n: int = 8) -> tuple[PostgresStore, EmotionalMemory]:
    store = PostgresStore(pg_dsn, table=_new_table(), exact_rows=0)
    engine = op_engine(store)
    engine.encode_batch([f"harbour storm memory {i}" for i in range(n)])
    return store, engine


def _bump(memory: Memory, by: int = 1) -> Memory:
    tag = memory.tag.model_copy(update={"retrieval_count": memory.tag.retrieval_count + by})
    return memory.model_copy(update={"tag": tag})


def test_retrieves_before_and_after_the_first_embedding(pg_dsn: str) -> None:
    """The vector column gets its dimension with the first embedding (a schema change
    under the statements already run): retrieves before and after it, from this and
    from another process's store, answer as over the in-memory store."""
    table = _new_table()
    with PostgresStore(pg_dsn, table=table, exact_rows=0) as pg, \
            PostgresStore(pg_dsn, table=table, exact_rows=0) as other:
        engines = [op_engine(pg), op_engine(other), op_engine(InMemoryStore())]
        for e in engines:
            assert e.retrieve("anything at all", top_k=2) == []
        engines[0].encode("the first memory, from this process")
        engines[2].encode("the first memory, from this process")
        for _ in range(2):
            a = engines[0].retrieve("first memory", top_k=2)
            b = engines[1].retrieve("first memory", top_k=2)
            assert [m.id for m in a] == [m.id for m in b]
            assert len(a) == 1


def test_a_write_transaction_reads_its_own_rows_without_asking_again(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside a write transaction, rows it locked or wrote are read back from what it
    holds (no statement), tag-only updates and whole updates alike; an in-place change
    of a memory's embedding list is still written whole; a rolled-back savepoint
    forgets what it held; the commit stores it all."""
    a, b = random_memories(4, 2, 0)
    store.save(a)
    store.save(b)
    with store.transaction():
        got_a, got_b = store.memories([a.id, b.id])  # read and locked
        reads: list[Any] = []
        read = store._read

        def counted(**kwargs: Any) -> Any:
            reads.append(kwargs)
            return read(**kwargs)

        monkeypatch.setattr(store, "_read", counted)
        a2 = _bump(got_a)
        store.update(a2)
        assert store.get(a.id) == a2
        b2 = got_b.model_copy(update={"content": "changed", "metadata": {"k": [1, 2]}})
        store.update(b2)
        assert store.memories([b.id, a.id]) == [b2, a2]
        assert reads == []
        b3 = store.get(b.id)
        assert b3 is not None and b3.embedding is not None
        b3.embedding[0] += 1.0  # changed in place: not a tag-only update
        store.update(b3)
        assert store.get(b.id) == b3 and reads == []
        with pytest.raises(RuntimeError, match="undo"), store.transaction():
            store.update(_bump(a2))
            raise RuntimeError("undo")
        assert store.get(a.id) == a2
        assert reads  # asked the server again after the rollback
    monkeypatch.undo()
    assert store.memories([a.id, b.id]) == [a2, b3]


def test_modify_memories_writes_tags_in_one_statement_from_the_rows_read(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a candidate read, a tag-only change of some candidates is written without
    reading them again (no locked read: ``memories`` is never called)."""
    store, _ = _seeded(pg_dsn)
    with store:
        query = HashingEmbedder(dim=32).embed("harbour storm")
        bank = store.candidate_bank(query, 4, T0, everything_upto=4)
        assert bank.total == 8 and len(bank) == 4
        before = {m.id: m for m in store.list_all()}

        def no_locked_read(ids: Any) -> Any:
            raise AssertionError("the rows were read again")

        monkeypatch.setattr(store, "memories", no_locked_read)
        calls: list[list[str]] = []

        def change(current: list[Memory]) -> list[Memory]:
            calls.append([m.id for m in current])
            return [_bump(m) for m in current]

        out = store.modify_memories(bank.ids[:3], change)
        assert calls == [bank.ids[:3]]
        assert [m.id for m in out] == bank.ids[:3]
        assert out == [_bump(before[mid]) for mid in bank.ids[:3]]
        monkeypatch.undo()
        after = {m.id: m for m in store.list_all()}
        assert after == {mid: (_bump(m) if mid in bank.ids[:3] else m)
                         for mid, m in before.items()}


def test_modify_memories_starts_again_from_rows_changed_since_they_were_read(
    pg_dsn: str,
) -> None:
    """A row another process changed between the candidate read and the write: the
    one-statement write fails whole (nothing written), and the change runs again on
    the current rows, read under lock: no update is lost."""
    store, _ = _seeded(pg_dsn)
    with store, PostgresStore(pg_dsn, table=store.table) as other:
        query = HashingEmbedder(dim=32).embed("harbour storm")
        bank = store.candidate_bank(query, 4, T0)
        first, second = bank.ids[:2]
        untouched = store.get(second)
        assert untouched is not None
        changed = other.get(first)
        assert changed is not None
        other.update(_bump(changed, 10))  # meanwhile, elsewhere
        seen: list[list[int]] = []

        def change(current: list[Memory]) -> list[Memory]:
            seen.append([m.tag.retrieval_count for m in current])
            return [_bump(m) for m in current]

        out = store.modify_memories([first, second], change)
        base = changed.tag.retrieval_count
        assert seen == [[base, untouched.tag.retrieval_count],  # the rows read
                        [base + 10, untouched.tag.retrieval_count]]  # the current rows
        assert [m.tag.retrieval_count for m in out] == [
            base + 11, untouched.tag.retrieval_count + 1]
        assert store.get(first) == out[0] and store.get(second) == out[1]


def test_modify_memories_of_more_than_tags_or_unread_ids_reads_under_lock(
    pg_dsn: str,
) -> None:
    """A change to more than the tags, or ids the last candidate read did not return,
    take the locked read-modify-write (the answer is the same)."""
    store, _ = _seeded(pg_dsn)
    with store:
        query = HashingEmbedder(dim=32).embed("harbour storm")
        bank = store.candidate_bank(query, 3, T0)
        mid = bank.ids[0]
        out = store.modify_memories(
            [mid], lambda ms: [m.model_copy(update={"content": "rewritten"}) for m in ms]
        )
        assert out[0].content == "rewritten" and store.get(mid) == out[0]
        ids = [m.id for m in store.list_all()]
        unread = next(i for i in ids if i not in bank.ids)
        out = store.modify_memories([unread, "gone"], lambda ms: [_bump(m) for m in ms])
        assert [m.id for m in out] == [unread] and store.get(unread) == out[0]


def test_a_retrieve_is_two_prepared_statements(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once warm, a retrieve over the index asks the server two things: the candidate
    read (with the counts) and the side-effect write, each a server-side prepared
    statement (no planning per call); nothing else (the embedding dimension is known
    to every view of the store after the first read)."""
    table = _new_table()
    store = PostgresStore(pg_dsn, table=table, exact_rows=0, min_connections=1,
                          max_connections=1)
    engine = op_engine(store)
    engine.encode_batch([f"harbour storm memory {i}" for i in range(30)])
    engine.retrieve("harbour storm", top_k=2)
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def counting(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(query if isinstance(query, str) else repr(query))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counting)
    # no idle-connection check (one more statement) however slow the machine
    monkeypatch.setattr(PostgresStore, "_IDLE_CHECK_S", 3600.0)
    before = {m.id: m.tag.retrieval_count for m in store.list_all()}
    sent.clear()
    for query in ("harbour storm", "storm memory"):
        got = engine.retrieve(query, top_k=2)
        assert len(got) == 2
    monkeypatch.undo()
    assert len(sent) == 4, [q[:60] for q in sent]
    assert [q.split()[0] for q in sent] == ["SELECT", "WITH", "SELECT", "WITH"]
    with store._connection() as conn:  # the pool's only connection
        prepared = {r[0] for r in conn.execute("SELECT statement FROM pg_prepared_statements")}
    assert len(prepared) == 2  # these two, with $n placeholders; nothing else
    read = next(q for q in prepared if q.startswith("SELECT"))
    write = next(q for q in prepared if q.startswith("WITH"))
    assert read.split(" WHERE ")[0] == sent[0].split(" WHERE ")[0] and "<=> $" in read
    assert write.split(" v (")[1].split(")")[0] == sent[1].split(" v (")[1].split(")")[0]
    after = {m.id: m.tag.retrieval_count for m in store.list_all()}
    assert sum(after.values()) == sum(before.values()) + 4
    store.close()


def test_it_is_a_native_columnar_store(store: PostgresStore) -> None:
    assert isinstance(store, ColumnarStore)
    assert columnar(store) is store


def test_an_embedding_of_another_dimension_is_refused_and_nothing_written(
    store: PostgresStore,
) -> None:
    first, second = random_memories(3, 2, 0)
    first = first.model_copy(update={"embedding": [0.5] * 6})
    store.save(first)
    bad = second.model_copy(update={"embedding": [0.5] * 5})
    with pytest.raises(ValueError, match="dimension 6"):
        store.save(bad)
    with pytest.raises(ValueError, match="length mismatch"):
        store.search_by_embedding([1.0] * 5, 3)
    assert store.list_all() == [first]
    with pytest.raises(KeyError):
        store.update(second)


def test_a_first_embedding_rolled_back_fixes_no_dimension(pg_dsn: str) -> None:
    """The first embedding fixes the dimension (and types the vector column) only when
    its transaction commits: after a rollback, whole or of a savepoint, the store and
    its views take another dimension, and search it over the index."""
    store = PostgresStore(pg_dsn, table=_new_table(), exact_rows=0)
    engine = op_engine(store)
    memories = random_memories(5, 4, 0)
    with pytest.raises(RuntimeError), store.transaction():
        store.save(memories[0].model_copy(update={"embedding": [0.5] * 6}))
        raise RuntimeError("undo")
    with store.transaction():
        with pytest.raises(RuntimeError), store.transaction():
            store.save(memories[1].model_copy(update={"embedding": [0.25] * 7}))
            raise RuntimeError("undo the savepoint")
        store.save(memories[2].model_copy(update={"embedding": None}))
    assert [m.id for m in store.list_all()] == [memories[2].id]
    engine.encode_batch(["harbour storm", "storm at sea", "quiet harbour"])  # 32-d
    got = engine.retrieve("harbour storm", top_k=2)
    assert got[0].content == "harbour storm"
    with pytest.raises(ValueError, match="dimension 32"):
        store.save(memories[3].model_copy(update={"embedding": [0.5] * 6}))
    store.close()


def test_nul_characters_are_refused_before_anything_is_written(store: PostgresStore) -> None:
    (m,) = random_memories(4, 1, 0)
    for update, field in (({"content": "a\x00b"}, "content"),
                          ({"metadata": {"k": "a\x00b"}}, "metadata"),
                          ({"id": "x\x00"}, "id")):
        with pytest.raises(ValueError, match=field):
            store.save(m.model_copy(update=update))
    assert len(store) == 0
    store.save(m)
    assert store.list_all() == [m]


def test_a_failed_transaction_leaves_nothing(store: PostgresStore) -> None:
    a, b, c = random_memories(5, 3, 0)
    store.save(a)
    with pytest.raises(RuntimeError, match="boom"), store.transaction():
        store.save(b)
        with store.transaction():  # nested: a savepoint
            store.save(c)
        raise RuntimeError("boom")
    assert store.list_all() == [a]
    with store.transaction():
        store.save(b)
        with pytest.raises(RuntimeError), store.transaction():
            store.save(c)
            raise RuntimeError("inner only")
    assert store.list_all() == [a, b]


# ----------------------------------------------------------------- the engine


@settings(max_examples=10, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(ops=st.lists(engine_op, min_size=1, max_size=14))
def test_an_engine_on_the_hnsw_path_answers_as_over_the_in_memory_store(
    pg_dsn: str, ops: list[tuple[str, int, int]],
) -> None:
    """The contract suite's engine comparison with the HNSW path on from the first
    row (``exact_rows=0``): on tables this small the index's candidates hold the
    true best, so every answer and every stored memory stays the in-memory engine's."""
    with PostgresStore(pg_dsn, table=_new_table(), exact_rows=0) as pg_store:
        run_engine_ops(op_engine(InMemoryStore()), op_engine(pg_store), ops)


def test_reopen_keeps_memories_and_state(pg_dsn: str) -> None:
    """Memories and the affective state (saved in the operations' transactions)
    survive closing; the reopened engine answers as an in-memory engine that kept
    running through the same operations."""
    table = _new_table()
    store = PostgresStore(pg_dsn, table=table)
    clock = TickClock(T0, timedelta(0))  # one instant: engines may read it unequally often
    live = EmotionalMemory(store, HashingEmbedder(dim=32), clock=clock,
                           state_store=PostgresAffectiveStateStore.from_store(store, key="a"))
    oracle = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=32), clock=clock)
    for e in (live, oracle):
        for i, t in enumerate(TEXTS[:10]):
            e.set_affect(CoreAffect(valence=(i % 5) / 2 - 1, arousal=(i % 4) / 4))
            e.encode(t)
        e.retrieve("rain calm", top_k=3)
    before = live.get_state().snapshot()
    memories = live.list_all()
    store.close()

    again = PostgresStore(pg_dsn, table=table)
    states = PostgresAffectiveStateStore(pg_dsn, key="a", table=table)
    reopened = EmotionalMemory(again, HashingEmbedder(dim=32), clock=clock, state_store=states)
    assert reopened.restore_persisted_state()
    assert reopened.get_state().snapshot() == before == oracle.get_state().snapshot()
    assert reopened.list_all() == memories
    for q in ("exam mad", "rain calm", "party"):
        a = reopened.retrieve_with_explanations(q, top_k=3)
        b = oracle.retrieve_with_explanations(q, top_k=3)
        assert [(x.memory.content, x.score) for x in a] == [
            (x.memory.content, x.score) for x in b]
    assert dump(reopened) == dump(oracle)
    password = pg_dsn.split(":")[2].split("@")[0]
    assert password not in repr(states) + repr(again) and "***" in repr(states)
    states.close()
    again.close()


def test_the_state_rolls_back_with_a_failed_operation(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn, table=_new_table())
    states = PostgresAffectiveStateStore.from_store(store)
    assert states.joined_with(store) is states
    states.save({"v": 1})
    with pytest.raises(RuntimeError), store.transaction():
        states.save({"v": 2})
        store.save(random_memories(1, 1, 0)[0])
        raise RuntimeError("rollback")
    assert states.load_snapshot() == {"v": 1}
    assert len(store) == 0
    with pytest.raises(ValueError, match="finite"):
        states.save({"v": float("nan")})
    store.close()


# ----------------------------------------------------------------- processes


def _worker(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)]),
           "JAX_PLATFORMS": "cpu"}
    return subprocess.Popen(
        [sys.executable, str(SUPPORT / "pg_workers.py"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )


def test_two_processes_lose_no_update_and_leave_no_dangling_link(pg_dsn: str) -> None:
    """Two engines in two processes encode and retrieve on one table at once: every
    retrieval's increment is kept, and every link points at a stored memory."""
    table = _new_table()
    PostgresStore(pg_dsn, table=table).close()  # the schema, before the race
    procs = [_worker("retrieve", pg_dsn, table, name, "12", "10") for name in ("a", "b")]
    returned: list[str] = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        lines = out.splitlines()
        assert len(lines) == 10
        for line in lines:
            returned += json.loads(line)
    with PostgresStore(pg_dsn, table=table) as store:
        memories = store.list_all()
        assert len(memories) == 24
        ids = {m.id for m in memories}
        # the final retrieves' winners are counted; the encode-time retrieves too
        total = sum(m.tag.retrieval_count for m in memories)
        assert total >= len(returned)
        counted = {mid: returned.count(mid) for mid in set(returned)}
        for m in memories:
            assert m.tag.retrieval_count >= counted.get(m.id, 0)
        for m in memories:
            for link in m.tag.resonance_links:
                assert link.target_id in ids


def test_two_processes_retrieval_counts_add_up_exactly(pg_dsn: str) -> None:
    """Retrieves only (the memories written first): the stored counts equal the number
    of times each memory was returned, across both processes."""
    table = _new_table()
    with PostgresStore(pg_dsn, table=table) as store:
        seed = op_engine(store)
        for i in range(6):
            seed.encode(f"harbour storm memory seed {i}")
        for m in store.list_all():
            assert m.tag.retrieval_count == 0
    procs = [_worker("retrieve", pg_dsn, table, name, "0", "15") for name in ("a", "b")]
    returned: list[str] = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        for line in out.splitlines():
            returned += json.loads(line)
    assert len(returned) == 2 * 15 * 3
    with PostgresStore(pg_dsn, table=table) as store:
        counts = {m.id: m.tag.retrieval_count for m in store.list_all()}
    assert counts == {mid: returned.count(mid) for mid in counts}


def test_kill_9_during_encode_batch_keeps_whole_batches(pg_dsn: str) -> None:
    """SIGKILL a process in the middle of encode_batch calls: what is stored is whole
    batches (every block complete, nothing half-written), links all resolve."""
    table = _new_table()
    PostgresStore(pg_dsn, table=table).close()
    size = 7
    proc = _worker("batches", pg_dsn, table, str(size))
    assert proc.stdout is not None
    seen = 0
    deadline = time.monotonic() + 240
    while seen < 3 and time.monotonic() < deadline:  # a few committed, then mid-batch
        line = proc.stdout.readline()
        if not line:
            break
        seen += 1
    time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert seen == 3, proc.stderr.read() if proc.stderr else ""
    with PostgresStore(pg_dsn, table=table) as store:
        memories = store.list_all()
        blocks: dict[int, int] = {}
        for m in memories:
            blocks[m.metadata["block"]] = blocks.get(m.metadata["block"], 0) + 1
        assert len(blocks) >= 3
        assert set(blocks.values()) == {size}
        assert sorted(blocks) == list(range(len(blocks)))
        ids = {m.id for m in memories}
        assert all(lk.target_id in ids for m in memories for lk in m.tag.resonance_links)


# ----------------------------------------------------------------- errors


def _with_password(dsn: str, password: str) -> str:
    scheme, rest = dsn.split("://", 1)
    user = rest.split(":", 1)[0]
    return f"{scheme}://{user}:{password}@{rest.split('@', 1)[1]}"


def test_redact_dsn() -> None:
    assert redact_dsn("postgresql://u:s3cr3t@h:5432/d") == "postgresql://u:***@h:5432/d"
    assert redact_dsn("host=h password=s3cr3t dbname=d") == "host=h password=*** dbname=d"
    assert redact_dsn("host=h password='a b' user=u") == "host=h password=*** user=u"
    assert redact_dsn("postgresql://h/d?password=s3cr3t&x=1") == "postgresql://h/d?password=***&x=1"
    assert redact_dsn("postgresql://u@h/d") == "postgresql://u@h/d"


def test_an_unreachable_server_names_the_redacted_dsn() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dsn = f"postgresql://someone:hunter2hunter2@127.0.0.1:{port}/nodb"
    with pytest.raises(PostgresStoreError) as info:
        PostgresStore(dsn, connect_timeout=2)
    text = str(info.value)
    assert "hunter2" not in text and "someone:***@127.0.0.1" in text
    assert "hunter2" not in repr(info.value.__cause__) if info.value.__cause__ else True


def test_a_bad_dsn_and_a_wrong_password_name_the_redacted_dsn(pg_dsn: str) -> None:
    with pytest.raises(PostgresStoreError) as info:
        PostgresStore("host=127.0.0.1 password=hunter2hunter2 nonsense_option=1")
    assert "hunter2" not in str(info.value) and "password=***" in str(info.value)
    wrong = _with_password(pg_dsn, "hunter2hunter2")
    with pytest.raises(PostgresStoreError) as info:
        PostgresStore(wrong, connect_timeout=5)
    assert "hunter2" not in str(info.value) and ":***@" in str(info.value)
    with pytest.raises(PostgresStoreError):
        PostgresAffectiveStateStore(wrong)


def test_a_foreign_or_newer_schema_is_refused_before_anything_is_written(pg_dsn: str) -> None:
    table = _new_table()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table}_memories (id int, other text)")
    with pytest.raises(PostgresStoreError, match="not written by"):
        PostgresStore(pg_dsn, table=table)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        tables = {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_name LIKE %s",
            (f"{table}%",))}
        assert tables == {f"{table}_memories"}  # no meta table was added
        newer = _new_table()
        PostgresStore(pg_dsn, table=newer).close()
        conn.execute(f"UPDATE {newer}_meta SET value = '99' WHERE key = 'version'")
    with pytest.raises(PostgresStoreError, match="version '99'"):
        PostgresStore(pg_dsn, table=newer)


def test_an_older_schema_is_migrated_in_one_transaction(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package whose schema moved on (here: pretend version 4 adds a column) migrates
    a version-3 table on open, all in one transaction: a failing migration leaves the
    table at version 3, untouched."""
    import emotional_memory.stores.postgres.schema as pg_module

    table = _new_table()
    with PostgresStore(pg_dsn, table=table) as old:
        (m,) = random_memories(2, 1, 0)
        old.save(m)
    monkeypatch.setattr(pg_module, "SCHEMA_VERSION", 4)
    monkeypatch.setattr(pg_module, "_MIGRATIONS", {3: (
        f"ALTER TABLE {table}_memories ADD COLUMN note text",
        "SELECT 1/0",  # fails: nothing of this migration may stay
    )})
    with pytest.raises(PostgresStoreError, match="division by zero"):
        PostgresStore(pg_dsn, table=table)
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(
            f"SELECT value FROM {table}_meta WHERE key = 'version'").fetchone() == ("3",)
        assert conn.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = %s "
            "AND column_name = 'note'", (f"{table}_memories",)).fetchone() == (0,)
    monkeypatch.setattr(pg_module, "_MIGRATIONS", {3: (
        f"ALTER TABLE {table}_memories ADD COLUMN note text",
    )})
    with PostgresStore(pg_dsn, table=table) as migrated:
        assert migrated.list_all() == [m]
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(
            f"SELECT value FROM {table}_meta WHERE key = 'version'").fetchone() == ("4",)


def test_a_version_1_table_is_migrated_to_the_current_version(pg_dsn: str) -> None:
    """Version 1 (the first release of this store) had no ``{t}_unchanged`` check
    function and no links table; opening such a table adds both (version 2, the links
    filled from the link arrays; version 3: the trigger through the links table's
    primary key) in the opening transaction, and a retrieve's side effects then take
    the one-statement path."""
    table = _new_table()
    with PostgresStore(pg_dsn, table=table) as store:
        engine = op_engine(store)
        for i in range(4):
            engine.encode(f"harbour storm memory {i}")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # back to version 1's layout
        conn.execute(f"DROP FUNCTION {table}_memories_unchanged(bigint, bigint)")
        conn.execute(f"DROP TABLE {table}_links")
        conn.execute(f"DROP FUNCTION {table}_memories_track_links() CASCADE")  # triggers
        conn.execute(f"UPDATE {table}_meta SET value = '1' WHERE key = 'version'")
    with PostgresStore(pg_dsn, table=table) as store:
        with psycopg.connect(pg_dsn) as conn:
            assert conn.execute(
                f"SELECT value FROM {table}_meta WHERE key = 'version'"
            ).fetchone() == (str(SCHEMA_VERSION),)
            assert conn.execute(
                "SELECT count(*) FROM pg_proc WHERE proname = %s",
                (f"{table}_memories_unchanged",)).fetchone() == (1,)
            # the links table, filled from the link arrays
            pairs = set(conn.execute(f"SELECT target, source FROM {table}_links").fetchall())
            assert pairs == {
                (target, seq) for seq, targets in conn.execute(
                    f"SELECT seq, link_targets FROM {table}_memories").fetchall()
                for target in targets
            }
            assert pairs
        engine = op_engine(store)
        before = {m.id: m.tag.retrieval_count for m in store.list_all()}
        got = engine.retrieve("harbour storm", top_k=2)
        after = {m.id: m.tag.retrieval_count for m in store.list_all()}
        assert after == {mid: n + (mid in {m.id for m in got}) for mid, n in before.items()}


def test_a_dropped_connection_names_the_dsn_and_half_writes_nothing(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn, table=_new_table(), min_connections=1, max_connections=1)
    a, b, c = random_memories(9, 3, 0)
    store.save(a)
    with pytest.raises(PostgresStoreError) as info, store.transaction():
        store.save(b)
        assert store.get(b.id) == b  # the transaction is open on the server
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend'"  # the store's only connection
            )
        store.save(c)
    password = pg_dsn.split(":")[2].split("@")[0]
    assert password not in str(info.value) and ":***@" in str(info.value)
    assert store.list_all() == [a]  # the pool replaced the dropped connection
    store.close()


def test_the_readme_example_runs(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """README "Production: PostgreSQL": the example runs as written (twice: the second
    run reopens the table and the persisted state)."""
    import re

    text = README.read_text(encoding="utf-8")
    section = text.split("## Production: PostgreSQL", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    monkeypatch.setenv("EMOTIONAL_MEMORY_DSN", pg_dsn)
    for _ in range(2):
        exec(code, {})
    out = capsys.readouterr().out.splitlines()
    assert out == ["['The launch slipped again and the team is exhausted']"] * 2
    with PostgresStore(pg_dsn, table="agent_memory") as store:
        assert len(store) == 2


# ----------------------------------------------------------------- scopes


def test_a_scoped_view_over_the_hnsw_path_equals_the_in_memory_view(pg_dsn: str) -> None:
    """Above ``exact_rows`` a view's search runs on the index with the scope in its
    WHERE clause (iterative scan): the answers equal the in-memory store's view, and
    a view neither reads nor writes another scope's memories."""
    from emotional_memory.stores.selection import Now, Selection

    memories = [m.model_copy(update={"scope": (("alice",), ("bob",), ("alice", "w"))[i % 3]})
                for i, m in enumerate(random_memories(21, 120, 0))]
    oracle = InMemoryStore()
    with PostgresStore(pg_dsn, table=_new_table(), exact_rows=0, margin=4) as pg:
        with pg.transaction():
            for m in memories:
                oracle.save(m)
                pg.save(m)
        now = T0 + timedelta(days=50)
        selection = Selection(scope=("alice",), now=Now(now))
        mine, theirs = pg.selected(selection), oracle.selected(selection)
        assert len(mine) == len(theirs) == 80
        assert mine.list_all() == theirs.list_all()
        rng = np.random.default_rng(2)
        for _ in range(6):
            query = random_query(5, rng)
            assert mine.search_by_embedding(query, 4) == theirs.search_by_embedding(query, 4)
            assert_same_bank(mine.candidate_bank(query, 5, now),
                             theirs.candidate_bank(query, 5, now))
        bob = memories[1]
        assert mine.get(bob.id) is None and bob.id not in mine
        with pytest.raises(KeyError):
            mine.update(bob)
        with pytest.raises(ValueError, match="cannot be written"):
            mine.save(bob)
        assert mine.delete(bob.id) is False and pg.get(bob.id) == bob


def test_where_in_sql_never_lists_the_table(pg_dsn: str) -> None:
    """A ``where=`` that renders into SQL (``stores/postgres/where.py``) is answered by
    the database: ``list_all`` of the whole table is never called, and the answer is
    the in-memory store's (the values of ``TRICKY_METAS`` trip SQL up; the contract
    suite checks the answers of every backend)."""
    from emotional_memory import EmotionalMemoryConfig
    from emotional_memory.filters import parse_where
    from emotional_memory.stores.postgres.where import where_sql

    config = EmotionalMemoryConfig(auto_categorize=True)
    clock_at = [datetime(2025, 3, 1, 9, 0, tzinfo=UTC)]
    oracle, pg = (
        EmotionalMemory(store, HashingEmbedder(dim=16), config=config,
                        clock=lambda: clock_at[0])
        for store in (InMemoryStore(), PostgresStore(pg_dsn, table=_new_table()))
    )
    for i, meta in enumerate(TRICKY_METAS):
        clock_at[0] = datetime(2025, 3, 1, 8 + i, 30, tzinfo=UTC)
        for engine in (oracle, pg):
            engine.encode(f"memory {i}", metadata=meta,
                          affect=CoreAffect(valence=0.5 - 0.4 * i, arousal=0.6))
    whole_list = PostgresStore.list_all
    armed = [False]

    def confined_list_all(self: Any) -> Any:
        assert not (armed[0] and not self._f), "list_all of the whole table: not in SQL"
        return whole_list(self)

    in_sql = 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PostgresStore, "list_all", confined_list_all)
        for where in TRICKY_WHERES:
            armed[0] = where_sql(parse_where(where).clause) is not None
            in_sql += armed[0]
            got = [m.content for m in pg.list_all(where=where)]
            armed[0] = False
            assert got == [m.content for m in oracle.list_all(where=where)], where
    assert in_sql >= len(TRICKY_WHERES) // 2
    pg.close()
    pg.store.close()
