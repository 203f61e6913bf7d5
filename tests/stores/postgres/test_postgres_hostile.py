"""PostgresStore against a hostile tenant, on a real PostgreSQL + pgvector.

The database runs with ``standard_conforming_strings = off`` (backslashes escape in
ordinary string literals), where hand-quoted SQL strings can be broken out of: a
filter value built to close the quote must find nothing, and every scope path made
of SQL's special characters (``%``, ``_``, ``\\``, ``'``) must answer exactly as the
in-memory store (the oracle) answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")

from emotional_memory import EmotionalMemory, EmotionalMemoryConfig, InMemoryStore  # noqa: E402
from emotional_memory.embedders import HashingEmbedder  # noqa: E402
from emotional_memory.interfaces import StoreTimeoutError  # noqa: E402
from emotional_memory.retrieval import RetrievalConfig  # noqa: E402
from emotional_memory.stores.postgres import PostgresStore  # noqa: E402

_tables = iter(range(10**9))


@pytest.fixture(scope="module")
def old_strings_dsn(pg_dsn: str) -> str:
    """The module's database with ``standard_conforming_strings = off`` for every
    new connection (the store's pool opens its connections after this)."""
    dbname = pg_dsn.rsplit("/", 1)[1]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{dbname}" SET standard_conforming_strings = off')
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SHOW standard_conforming_strings").fetchone()[0] == "off"
    return pg_dsn


@pytest.fixture
def engines(old_strings_dsn: str) -> Iterator[tuple[EmotionalMemory, EmotionalMemory]]:
    store = PostgresStore(old_strings_dsn, table=f"h{next(_tables)}")
    pg = EmotionalMemory(store, HashingEmbedder(dim=16))
    oracle = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16))
    yield pg, oracle
    pg.close()


INJECTIONS = [
    "\\'::text), false)) OR true --",
    "\\') OR true --",
    "x\\'; DROP TABLE pg_class; --",
    "'' OR ''1''=''1",
    "\\",
    "%",
    "_",
]


def _contents(memories: list[Any]) -> list[str]:
    return sorted(m.content for m in memories)


@pytest.mark.parametrize("value", INJECTIONS)
def test_a_filter_value_never_escapes_its_quotes(
    engines: tuple[EmotionalMemory, EmotionalMemory], value: str
) -> None:
    for engine in engines:
        engine.scoped("alice").encode("alice's note", metadata={"topic": "work"})
        engine.scoped("alice").encode("alice's odd note", metadata={"topic": value})
        engine.scoped("bob").encode("bob's secret", metadata={"topic": "private"})
        engine.encode("the root's secret", metadata={"topic": "root"})
    for where in ({"topic": value}, {"topic": {"$in": ["nothing", value]}},
                  {"topic": {"$ne": value}}, {"emotion": value},
                  {f"a{value}.b": {"$exists": False}}):
        answers = [_contents(e.scoped("alice").list_all(where=where)) for e in engines]
        assert answers[0] == answers[1], where
        assert all("secret" not in c for c in answers[0])
        found = [_contents(e.scoped("alice").retrieve("note secret", 10, where=where))
                 for e in engines]
        assert found[0] == found[1], where


@pytest.mark.parametrize("part", ["50%", "5_", "a\\b", "it's", "%", "_", "\\", "a'\\'b"])
def test_scope_parts_of_sql_special_characters_answer_as_in_memory(
    engines: tuple[EmotionalMemory, EmotionalMemory], part: str
) -> None:
    # siblings a pattern match would confuse with the part: "50x" for "50%", "5a"
    # for "5_", a prefix of the part
    siblings = [part, part.replace("%", "x").replace("_", "a") + "z", part[:-1] or "q",
                part + "tail"]
    for engine in engines:
        for s in siblings:
            engine.scoped(s).encode(f"note in {s!r}", metadata={"scope": s})
            engine.scoped(s, "inner").encode(f"inner note in {s!r}")
    for engine_pair in [engines]:
        pg, oracle = engine_pair
        for s in siblings:
            for path in ((s,), (s, "inner")):
                assert _contents(pg.scoped(*path).list_all()) == \
                    _contents(oracle.scoped(*path).list_all()), path
                assert _contents(pg.scoped(*path).retrieve("note", 10)) == \
                    _contents(oracle.scoped(*path).retrieve("note", 10)), path
                assert len(pg.scoped(*path)) == len(oracle.scoped(*path))
        view = pg.scoped(part)
        [mine] = [m for m in view.list_all() if m.scope == (part,)]
        assert view.get(mine.id) is not None
        assert pg.scoped(siblings[1]).get(mine.id) is None
        assert view.delete(mine.id) and view.get(mine.id) is None


def test_a_top_k_past_pgvectors_ef_search_maximum_is_served_exactly(
    old_strings_dsn: str,
) -> None:
    """``hnsw.ef_search`` tops out at 1000 in pgvector: a search wanting more
    candidates (top_k 500 or 1000 with the engine's multiplier) keeps it there and
    lets the iterative scan bring the rest; the engine answers as over a store that
    ranks every row exactly (the same table kind, so the same float32 vectors)."""
    texts = [f"note {i} about {'rain' if i % 3 else 'the harbour'} and {i % 7}"
             for i in range(1200)]
    stores = [PostgresStore(old_strings_dsn, table=f"h{next(_tables)}", exact_rows=rows)
              for rows in (100, 100_000)]  # the index path, the exact path
    at = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
    # one candidate per result: top_k 1000 asks the index for 1000 + margin rows of
    # the 1200, past the cap, rather than for every row (the exact path)
    config = EmotionalMemoryConfig(retrieval=RetrievalConfig(candidate_multiplier=1))
    engines = [EmotionalMemory(store, HashingEmbedder(dim=16), config=config, clock=lambda: at)
               for store in stores]
    try:
        for engine in engines:
            engine.encode_batch(texts)
        for k in (300, 1000):
            indexed, exact = (e.retrieve_with_explanations("rain harbour", k) for e in engines)
            assert len(indexed) == len(exact) == k
            assert [(r.memory.content, r.score) for r in indexed] == \
                [(r.memory.content, r.score) for r in exact]
        with pytest.raises(ValueError, match="ef_search"):
            PostgresStore(old_strings_dsn, table=f"h{next(_tables)}", ef_search=1001)
    finally:
        for engine in engines:
            engine.close()


def test_long_words_are_indexed_and_answer_as_in_memory(old_strings_dsn: str) -> None:
    """A term is a key of the GIN index on ``terms``, whose entries hold at most 2712
    bytes: one long word (a base64 blob, a URL; random hex does not compress) used to
    fail the insert. Long terms are indexed by a digest, on writes and queries alike,
    so the lexical signal answers exactly as over the in-memory store."""
    import random

    rng = random.Random(4)
    blob = "".join(rng.choice("0123456789abcdef") for _ in range(8000))
    other = "".join(rng.choice("0123456789abcdef") for _ in range(3000))
    texts = [blob, f"the payload was {blob} again", "a" * 9000, f"short note {other}",
             "rain on the harbour", f"{blob} {blob} rain"]
    config = EmotionalMemoryConfig(
        retrieval=RetrievalConfig(lexical_weight=0.3, hybrid_candidates=True)
    )
    at = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
    engines = [
        EmotionalMemory(store, HashingEmbedder(dim=16), config=config, clock=lambda: at)
        for store in (PostgresStore(old_strings_dsn, table=f"h{next(_tables)}", exact_rows=2),
                      InMemoryStore())
    ]
    try:
        for engine in engines:
            for text in texts:
                engine.encode(text)
        for query in (blob, f"where is {blob}", other, "a" * 9000, "rain " + other):
            pg, oracle = (e.retrieve_with_explanations(query, 3) for e in engines)
            assert [(r.memory.content, r.score, tuple(r.breakdown.raw_signals)) for r in pg] \
                == [(r.memory.content, r.score, tuple(r.breakdown.raw_signals))
                    for r in oracle]
    finally:
        for engine in engines:
            engine.close()


def test_scope_parts_up_to_the_limit_are_indexed_and_longer_ones_refused(
    engines: tuple[EmotionalMemory, EmotionalMemory],
) -> None:
    import random

    from emotional_memory.models import MAX_SCOPE_PART_BYTES

    rng = random.Random(9)
    widest = "".join(rng.choice("0123456789abcdef") for _ in range(MAX_SCOPE_PART_BYTES))
    wide_unicode = "é" * (MAX_SCOPE_PART_BYTES // 2)  # 2 bytes each: exactly the limit
    for engine in engines:
        for part in (widest, wide_unicode):
            engine.scoped(part).encode(f"kept under a part of {len(part)} characters")
            assert len(engine.scoped(part)) == 1
            assert engine.scoped(part).retrieve("kept", 3)[0].scope == (part,)
        for too_long in (widest + "0", wide_unicode + "e"):
            with pytest.raises(ValueError, match="scope part may hold"):
                engine.scoped(too_long)
        assert len(engine) == 2


def test_a_statement_past_the_timeout_is_cancelled_and_the_store_goes_on(
    old_strings_dsn: str,
) -> None:
    from emotional_memory.stores.postgres import StatementTimeout

    with pytest.raises(ValueError, match="statement_timeout"):
        PostgresStore(old_strings_dsn, table=f"h{next(_tables)}", statement_timeout=0)
    store = PostgresStore(old_strings_dsn, table=f"h{next(_tables)}", statement_timeout=0.2,
                          max_connections=2)
    engine = EmotionalMemory(store, HashingEmbedder(dim=16))
    try:
        engine.encode("still here")
        for _ in range(3):  # every pooled connection carries the timeout
            with pytest.raises(StatementTimeout, match="statement timeout"), \
                    store._read() as cur:
                cur.execute("SELECT pg_sleep(5)")
            with pytest.raises(StatementTimeout), store.transaction():
                engine.encode("rolled back")
                with store._write() as cur:
                    cur.execute("SELECT pg_sleep(5)")
        assert [m.content for m in engine.list_all()] == ["still here"]
        with store._read() as cur:
            assert cur.execute("SHOW statement_timeout").fetchone()[0] == "200ms"
    finally:
        engine.close()


def test_the_service_answers_503_when_a_statement_times_out(old_strings_dsn: str) -> None:
    import asyncio

    import httpx

    from emotional_memory.server.app import build_app
    from emotional_memory.server.service import MemoryService

    table = f"h{next(_tables)}"
    with PostgresStore(old_strings_dsn, table=table) as seeding:
        EmotionalMemory(seeding, HashingEmbedder(dim=16)).scoped("t").encode_batch(
            [f"note {i}" for i in range(2000)], [{"topic": f"t{i % 50}"} for i in range(2000)]
        )
    store = PostgresStore(old_strings_dsn, table=table, statement_timeout=0.001)
    # the engine's opening reads (embedder identity, settings) are trivial, yet a busy
    # machine can take a millisecond over one: opened again until one attempt fits
    for attempt in range(50):
        try:
            engine = EmotionalMemory(store, HashingEmbedder(dim=16))
            break
        except StoreTimeoutError:
            if attempt == 49:
                raise
    app = build_app(MemoryService(engine), None)
    heavy = {"query": "note", "scope": ["t"], "top_k": 50,
             "where": {"$or": [{"topic": f"x{i}"} for i in range(60)]}}

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            return await c.post("/v1/search", json=heavy)

    try:
        r = asyncio.run(run())
        assert r.status_code == 503, r.text
        assert "statement timeout" in r.json()["detail"]
    finally:
        store.close()


def test_a_page_is_read_in_sql_and_is_the_slice_of_the_whole_list(
    engines: tuple[EmotionalMemory, EmotionalMemory], monkeypatch: pytest.MonkeyPatch
) -> None:
    pg, oracle = engines
    for engine in engines:
        for i in range(60):
            path = ("a",) if i % 3 else ("a", "x")
            engine.scoped(*path).encode(f"memory {i}", metadata={"n": i})
    whole_list = PostgresStore.list_all

    def no_whole_list(self: Any) -> Any:
        raise AssertionError("a page listed every memory")

    monkeypatch.setattr(PostgresStore, "list_all", no_whole_list)
    for path in ((), ("a",), ("a", "x")):
        for where in (None, {"n": {"$gte": 10}}):
            for limit, offset in ((10, 0), (10, 35), (7, 58), (0, 3), (100, 0)):
                got = [m.content for m in
                       (pg.scoped(*path) if path else pg).list_all(
                           where=where, limit=limit, offset=offset)]
                want = [m.content for m in
                        (oracle.scoped(*path) if path else oracle).list_all(
                            where=where)][offset:offset + limit]
                assert got == want, (path, where, limit, offset)
    monkeypatch.setattr(PostgresStore, "list_all", whole_list)


def test_a_metadata_path_deeper_than_metadata_nests_is_answered_without_sql(
    engines: tuple[EmotionalMemory, EmotionalMemory],
) -> None:
    """Its SQL would bind every proper prefix (quadratic): no SQL is built for it, and
    the generic path answers it as the in-memory store does."""
    from emotional_memory._validation import MAX_METADATA_DEPTH
    from emotional_memory.filters import parse_where
    from emotional_memory.stores.postgres.where import where_sql

    pg, oracle = engines
    deepest = ".".join(["a"] * MAX_METADATA_DEPTH)
    assert where_sql(parse_where({deepest: 1}).clause) is not None
    assert where_sql(parse_where({deepest + ".a": 1}).clause) is None
    nested: Any = 1
    for _ in range(MAX_METADATA_DEPTH - 1):
        nested = {"a": nested}
    for engine in (pg, oracle):
        engine.encode("deep", metadata={"a": nested})  # the deepest metadata there is
        engine.encode("flat", metadata={"a": 1})
    huge = ".".join(["a"] * 20_000)
    huge_wheres = ({huge: {"$exists": False}}, {huge: None}, {huge: {"$ne": 1}},
                   {huge: {"$in": [1, "a"]}})
    for where in huge_wheres:  # no SQL path expression is built from a path this deep
        assert where_sql(parse_where(where).clause) is None
    for where in ({deepest: 1}, {deepest + ".a": 1}, *huge_wheres):
        assert _contents(pg.list_all(where=where)) == _contents(oracle.list_all(where=where))
    assert _contents(pg.list_all(where={deepest: 1})) == ["deep"]


def test_a_metadata_number_from_2_to_the_53_on_is_compared_without_sql() -> None:
    """jsonb keeps ``1e+23`` as 10**23, not the float's value 99999999999999991611392,
    and cannot tell a stored float from an int: from 2**53 on, where an integer can lie
    between a float and its shortest text, a metadata comparison is left to the
    generic path (the contract suite checks the answers); built-in columns stay SQL."""
    from emotional_memory.filters import parse_where
    from emotional_memory.stores.postgres.where import where_sql

    def in_sql(where: dict[str, Any]) -> bool:
        parsed = parse_where(where)
        assert parsed is not None
        return where_sql(parsed.clause) is not None

    for small in (2**53 - 1, -(2**53 - 1), 0.1, 1e15, -0.0):
        assert in_sql({"v": small}) and in_sql({"v": {"$gt": small}})
    for big in (2**53, -(2**53), 1e23, 10**23, float(2**64), 2**64 + 1):
        assert not in_sql({"v": big})
        assert not in_sql({"v": {"$lte": big}})
        assert not in_sql({"v": {"$nin": [1, big]}})
        assert in_sql({"retrieval_count": {"$lt": big}})


def test_a_state_row_an_earlier_version_kept_under_a_long_raw_key_is_found(
    pg_dsn: str,
) -> None:
    """Keys of 2,001..~2,700 bytes were stored as they are before long keys moved to
    ``sha256:<digest>``: opening the store moves such rows, so their scopes keep their
    mood (and a raw row whose hashed twin already exists is left alone, not an error)."""
    import hashlib
    import json

    from emotional_memory.state import AffectiveState
    from emotional_memory.stores.postgres.state import (
        MAX_ROW_KEY_BYTES,
        PostgresAffectiveStateStore,
    )

    table = f"em_state_upgrade_{next(_tables)}"
    key = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(33))[:2100]
    assert MAX_ROW_KEY_BYTES < len(key.encode()) < 2700
    with PostgresAffectiveStateStore(pg_dsn, key="default", table=table) as first:
        full = first._table
    base = AffectiveState.initial()
    state = base.model_copy(update={"core_affect": base.core_affect.model_copy(
        update={"valence": -0.6})})
    text = json.dumps(state.snapshot())
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # as the earlier version wrote
        conn.execute(f"INSERT INTO {full} VALUES (%s, %s::jsonb, %s, now())", (key, text, text))
    with PostgresAffectiveStateStore(pg_dsn, key=key, table=table) as store:
        assert store.load_snapshot() == state.snapshot()
        with psycopg.connect(pg_dsn) as conn:
            keys = [r[0] for r in conn.execute(f"SELECT key FROM {full}").fetchall()]
        digest = "sha256:" + hashlib.sha256(key.encode()).hexdigest()
        assert sorted(keys) == [digest]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # a stale raw twin
        conn.execute(f"INSERT INTO {full} VALUES (%s, %s::jsonb, %s, now())", (key, text, text))
    with PostgresAffectiveStateStore(pg_dsn, key=key, table=table) as store:
        assert store.load_snapshot() == state.snapshot()


def test_a_top_k_limit_or_offset_past_sqls_bigint_answers_as_in_memory(
    engines: tuple[EmotionalMemory, EmotionalMemory],
) -> None:
    """``top_k``, ``limit`` and ``offset`` of 2**63 and more (past SQL's bigint ``LIMIT``)
    answer as over the in-memory store: every memory, or none past the end."""
    pg, oracle = engines
    texts = [f"rain over the harbour {i}" for i in range(5)]
    for engine in (pg, oracle):
        engine.encode_batch(texts)
        engine.scoped("alice").encode_batch(texts[:2], metadata=[{"n": 1}, {"n": 2}])
    for huge in (2**63 - 1, 2**63, 2**80):
        for page in ({"limit": huge}, {"offset": 1, "limit": huge}, {"offset": huge},
                     {"offset": huge, "limit": 1}):
            assert [m.content for m in pg.list_all(**page)] == \
                [m.content for m in oracle.list_all(**page)]
        for view in (lambda e: e, lambda e: e.scoped("alice")):
            for where in (None, {"n": {"$gte": 1}}):
                got, want = (view(e).retrieve("rain harbour", top_k=huge, where=where)
                             for e in (pg, oracle))
                assert _contents(got) == _contents(want) and len(got) in (2, 7)
        store = pg.store
        assert len(store.search_by_embedding([1.0] * 16, huge)) == 7
        assert [len(r) for r in store.search_by_embedding_batch([[1.0] * 16, None], huge)] \
            == [7, 7]
        assert store.list_page(huge, 1) == [] and len(store.list_page(2, huge)) == 5


@pytest.mark.parametrize("shared_state", [False, True])
def test_a_state_save_past_the_statement_timeout_is_a_statement_timeout(
    old_strings_dsn: str, shared_state: bool
) -> None:
    """The state's save, inside the memory operation's transaction, waits past the
    store's statement timeout (its row locked by another session): a StatementTimeout
    (a StoreTimeoutError: a 503 on the service) as for any of the store's statements;
    with ``shared_state`` (the versioned save reads its result back) it was a plain
    PostgresStoreError (a 500). The operation rolls back."""
    import psycopg

    from emotional_memory import CoreAffect
    from emotional_memory.interfaces import StoreTimeoutError
    from emotional_memory.stores.postgres.state import PostgresAffectiveStateStore

    table = f"h{next(_tables)}"
    store = PostgresStore(old_strings_dsn, table=table, statement_timeout=0.3)
    states = PostgresAffectiveStateStore.from_store(store)
    engine = EmotionalMemory(store, HashingEmbedder(dim=16), state_store=states,
                             shared_state=shared_state)
    engine.persist_state()
    before = engine.save_state()
    try:
        with psycopg.connect(old_strings_dsn) as other:  # a transaction holding the row
            other.execute(f"SELECT 1 FROM {table}_state WHERE key = 'default' FOR UPDATE")
            with pytest.raises(StoreTimeoutError, match="statement timeout"):
                engine.encode("rolled back", affect=CoreAffect(valence=0.9, arousal=0.9))
            with pytest.raises(StoreTimeoutError, match="statement timeout"):
                engine.set_affect(CoreAffect(valence=0.9, arousal=0.9))
            other.rollback()
        assert engine.list_all() == [] and engine.save_state() == before
        assert states.load_snapshot() == before
    finally:
        engine.close()
