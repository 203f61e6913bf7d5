"""PostgresStore reads against a real PostgreSQL + pgvector: every read equals the in-memory
store's (the oracle), the HNSW path and its index options.

The server is started by the ``pg_server`` fixture (tests/conftest.py,
tests/support/pg_server.py) on a free 127.0.0.1 port; each module gets its own database.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")

from emotional_memory import InMemoryStore  # noqa: E402
from emotional_memory._bank import LexicalQuery  # noqa: E402
from emotional_memory.stores.columnar import StoreAdapter  # noqa: E402
from emotional_memory.stores.postgres import PostgresStore  # noqa: E402
from support.banks import (  # noqa: E402
    T0,
    WORDS,
    assert_same_bank,
    random_memories,
    random_query,
)
from support.pg_store import _new_table, indexed_with_oracle  # noqa: E402

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
        LexicalQuery,  # repeated terms: lexical_query_counts; stems: lexical_stemmer
        terms=st.lists(st.sampled_from([*WORDS, "text", "7", "zzz", "bridg", "coffe"]),
                       max_size=4),
        shortlist=st.integers(0, 6), k1=st.just(1.2), b=st.just(0.75),
        statistics=st.booleans(), analysis=st.sampled_from(["none", "english"]),
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
            assert pg.lexical_search(
                lexical.terms, 5, 1.2, 0.75, lexical.analysis
            ) == oracle.lexical_search(lexical.terms, 5, 1.2, 0.75, lexical.analysis)
            assert_same_bank(  # statistics of every candidate, repeated terms included
                pg.candidate_bank(None, None, now, lexical=lexical),
                oracle.candidate_bank(None, None, now, lexical=lexical))


def test_the_hnsw_path_reranks_to_the_exact_answer(pg_dsn: str) -> None:
    """Above ``exact_rows`` the HNSW index supplies top_k + margin candidates (with the
    zero-norm rows); on a small table its candidates hold the true best, so the exact
    re-rank gives the in-memory store's answer (zero and duplicate rows included)."""
    memories = random_memories(11, 90, 3)
    with indexed_with_oracle(pg_dsn, memories, margin=8) as (pg, oracle):
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


def test_a_repeated_query_term_fills_each_of_its_columns(pg_dsn: str) -> None:
    """``lexical_query_counts=True`` repeats a term: each repeat is a column of its own,
    with the candidates' counts in every one of them, as in the in-memory index."""
    memories = random_memories(5, 6, 0)
    memories = [m.model_copy(update={"content": f"storm storm rain {i}"})
                for i, m in enumerate(memories)]
    oracle = InMemoryStore()
    with PostgresStore(pg_dsn, table=_new_table()) as pg:
        for m in memories:
            oracle.save(m)
            pg.save(m)
        terms = ["storm", "rain", "storm"]
        ids = [m.id for m in memories]
        got, want = pg.lexical_inputs(terms, ids), oracle.lexical_inputs(terms, ids)
        assert np.asarray(want.tf)[:, 0].tolist() == [2.0] * 6  # the oracle's reading
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want),
                        strict=True):
            assert np.asarray(a).tolist() == np.asarray(b).tolist()


def test_a_repeated_candidate_has_its_statistics_on_each_of_its_rows(pg_dsn: str) -> None:
    """A candidate id listed twice had its length and counts on its last row only (the
    first row read as an empty memory)."""
    memories = [m.model_copy(update={"content": f"storm storm rain {i}"})
                for i, m in enumerate(random_memories(3, 6, 1))]
    with PostgresStore(pg_dsn, table=_new_table()) as pg:
        for m in memories:
            pg.save(m)
        ids = [memories[0].id, memories[1].id, memories[0].id, memories[0].id]
        got = pg.lexical_inputs(["storm", "rain"], ids)
        assert np.asarray(got.tf).tolist() == [[2.0, 1.0]] * 4
        assert np.asarray(got.length).tolist() == [4.0] * 4


def test_embeddings_past_the_hnsw_limit_are_stored_and_searched_exactly(pg_dsn: str) -> None:
    """pgvector indexes at most 2,000 dimensions with HNSW: a store of 3,072-d
    embeddings (a common embedder's size) has no index and answers every search, on
    the path taken above ``exact_rows`` too, as the in-memory store does; past the
    vector type's 16,000 dimensions an embedding is refused naming the field, before
    anything is written."""
    rng = np.random.default_rng(7)
    base = random_memories(13, 12, 0)
    memories = [  # float32 values (kept as they are) and float64 ones (kept exactly)
        m.model_copy(update={"embedding": (
            rng.standard_normal(3072).astype(np.float32) if i % 2 else
            rng.standard_normal(3072)).tolist()})
        for i, m in enumerate(base)
    ]
    oracle = InMemoryStore()
    with PostgresStore(pg_dsn, table=_new_table(), exact_rows=0) as pg:
        for m in memories:
            oracle.save(m)
            pg.save(m)
        assert pg.list_all() == oracle.list_all()
        for _ in range(3):
            query = rng.standard_normal(3072).tolist()
            for k in (1, 5, 20):
                assert pg.search_by_embedding(query, k) == oracle.search_by_embedding(query, k)
            now = T0 + timedelta(days=100)
            assert_same_bank(pg.candidate_bank(query, 4, now), oracle.candidate_bank(query, 4, now))
    with PostgresStore(pg_dsn, table=_new_table()) as pg:
        huge = base[0].model_copy(update={"embedding": [0.5] * 16_001})
        with pytest.raises(ValueError, match="embedding"):
            pg.save(huge)
        assert len(pg) == 0 and pg.dim is None
        pg.save(base[1])
        assert pg.list_all() == [base[1]]


def test_exact_ties_above_exact_rows_go_to_the_latest_memories(pg_dsn: str) -> None:
    """Above ``exact_rows`` the index's ``top_k`` + margin candidates among memories of
    one direction (the same text stored again, an embedding at several norms) are an
    arbitrary pick of equals: the store returned other memories than the rule's
    latest (exact ties: the later-inserted memory first). It now widens the candidates while the
    ``top_k``-th exact score does not beat the worst candidate's by more than float32
    rounding; the batched search of ``encode_batch`` likewise."""
    from support.memories import basic_memory

    directions = ([1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0], [1.0, 0.0, 1.0])
    memories = [basic_memory(f"m{i}", [x * (1 + i) for x in directions[i % 4]])
                for i in range(120)]
    with indexed_with_oracle(pg_dsn, memories, margin=4) as (pg, oracle):
        queries = ([1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.3, 0.2, 0.1])
        for query in queries:
            for k in (1, 5, 30):
                got = [m.id for m in pg.search_by_embedding(query, k)]
                assert got == [m.id for m in oracle.search_by_embedding(query, k)], (query, k)
        with pg.transaction():
            batch = pg.search_by_embedding_batch(list(queries), 5)
        assert [[m.id for m in found] for found in batch] == [
            [m.id for m in oracle.search_by_embedding(q, 5)] for q in queries]
