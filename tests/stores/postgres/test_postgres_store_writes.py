"""PostgresStore writes against a real PostgreSQL + pgvector: transactions, modify_memories,
prepared statements, refused inputs and rollbacks.

The server is started by the ``pg_server`` fixture (tests/conftest.py,
tests/support/pg_server.py) on a free 127.0.0.1 port; each module gets its own database.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")

from emotional_memory import EmotionalMemory, InMemoryStore  # noqa: E402
from emotional_memory.embedders import HashingEmbedder  # noqa: E402
from emotional_memory.interfaces import UnstorableValueError  # noqa: E402
from emotional_memory.models import Memory, ResonanceLink  # noqa: E402
from emotional_memory.stores.columnar import ColumnarStore, columnar  # noqa: E402
from emotional_memory.stores.in_memory import EmbeddingDimensionError  # noqa: E402
from emotional_memory.stores.postgres import PostgresStore  # noqa: E402
from support.banks import (  # noqa: E402
    T0,
    random_memories,
)
from support.engine_ops import op_engine  # noqa: E402
from support.pg_store import _new_table  # noqa: E402


@pytest.fixture
def store(pg_dsn: str) -> Iterator[PostgresStore]:
    s = PostgresStore(pg_dsn, table=_new_table())
    yield s
    s.close()


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
    # the in-memory store's error (a ValueError) naming the memory, on every path
    for write in (store.save, lambda m: store.row_linker(16).save([m])):
        with pytest.raises(EmbeddingDimensionError, match=f"{bad.id!r} has 5.*dimension 6"):
            write(bad)
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


def test_a_nul_in_a_scope_part_or_a_link_id_is_refused_naming_the_field(
    store: PostgresStore,
) -> None:
    """A NUL in a scope part or in a link's ids (``text[]`` columns) is refused as one
    in the content is: an ``UnstorableValueError`` naming the field, nothing queued, so
    the transaction goes on and commits the rest (not the driver's ``DataError``)."""
    m, other = random_memories(4, 2, 0)
    link = ResonanceLink(source_id=m.id, target_id="t\x00", strength=0.5,
                         link_type="semantic")
    _refused_in_a_transaction_that_goes_on(store, m, other, (
        ({"scope": ("a", "b\x00")}, "scope"),
        ({"tag": m.tag.model_copy(update={"resonance_links": [link]})}, "tag"),
    ))


def _refused_in_a_transaction_that_goes_on(
    store: PostgresStore, m: Memory, other: Memory,
    cases: tuple[tuple[dict[str, Any], str], ...],
) -> None:
    """Each ``m`` updated by a case is refused naming its field inside a transaction
    that then saves ``other`` and commits it alone."""
    for update, field in cases:
        with store.transaction():
            with pytest.raises(UnstorableValueError, match=field) as info:
                store.save(m.model_copy(update=update))
            assert info.value.field == field
            store.save(other)
        assert store.list_all() == [other]
        assert store.delete(other.id)


def test_lone_surrogates_are_refused_when_saved_naming_the_field(store: PostgresStore) -> None:
    """A lone surrogate (not UTF-8 text) is refused by ``save`` itself, as a NUL is:
    an ``UnstorableValueError`` naming the field, nothing queued, so the transaction
    goes on and commits the rest."""
    m, other = random_memories(4, 2, 0)
    _refused_in_a_transaction_that_goes_on(store, m, other, (
        ({"content": "a\ud800b"}, "content"),
        ({"metadata": {"k": ["\udfff"]}}, "metadata"),
        ({"metadata": {"\ud800": 1}}, "metadata"),
        ({"id": "x\udc00"}, "id"),
    ))


def test_a_nul_in_a_batch_names_the_memory_and_keeps_nothing(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``encode_batch`` over several link blocks (4 memories each here): the error
    names the memory's position in the whole batch and its field; nothing of the
    batch is stored and the engine's state is as before."""
    import emotional_memory._engine.encoding as encoding

    monkeypatch.setattr(encoding, "_LINK_SEARCH_BLOCK", 4)
    engine = EmotionalMemory(store=store, embedder=HashingEmbedder(dim=16))
    engine.encode("already there")
    state = engine.get_state()
    texts = [f"memory {i}" for i in range(11)]
    for at, field, contents, metadata in (
        (9, "content", [*texts[:9], "a\x00b", texts[10]], None),
        (2, "metadata", texts, [{"k": "\x00"} if i == 2 else {} for i in range(11)]),
        (0, "content", ["\x00", *texts[1:]], None),
    ):
        with pytest.raises(UnstorableValueError, match=f"memory {at} of the batch") as info:
            engine.encode_batch(contents, metadata)
        assert (info.value.index, info.value.field) == (at, field)
        assert [m.content for m in store.list_all()] == ["already there"]
        assert engine.get_state() == state
    with pytest.raises(UnstorableValueError) as single:
        engine.encode("a\x00b")
    assert (single.value.index, single.value.field) == (None, "content")
    assert "of the batch" not in str(single.value)
    assert len(engine.encode_batch(texts)) == 11
    dumped = engine.export_memories()[:3]
    fresh = [{**d, "id": f"imported-{i}", "tag": {**d["tag"], "resonance_links": []}}
             for i, d in enumerate(dumped)]
    fresh[1] = {**fresh[1], "content": "a\x00b"}
    with pytest.raises(UnstorableValueError, match=r"data\[1\]") as imported:
        engine.import_memories(fresh)
    assert (imported.value.index, imported.value.field) == (1, "content")
    assert not any(m.id.startswith("imported-") for m in store.list_all())


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


def test_a_utc_offset_of_seconds_is_kept_exactly(pg_dsn: str) -> None:
    """A datetime whose UTC offset has seconds (``timezone(timedelta(seconds=1))``, a
    zone's local mean time) is read back at the same instant with the same offset,
    by another store on the table (not the writer's cache); pydantic's JSON form
    would drop the offset's seconds and move the instant."""
    from datetime import datetime, timedelta, timezone
    from zoneinfo import ZoneInfo

    m, other = random_memories(4, 2, 0)
    zones = [timezone(timedelta(seconds=1)),
             timezone(-timedelta(hours=23, minutes=59, seconds=59, microseconds=1))]
    tag = m.tag.model_copy(update={
        "timestamp": m.tag.timestamp.astimezone(zones[0]),
        "last_retrieved": m.tag.timestamp.astimezone(zones[1]),
        "mood_snapshot": m.tag.mood_snapshot.model_copy(update={
            "timestamp": datetime(1900, 6, 1, 12, tzinfo=ZoneInfo("Europe/Amsterdam"))}),
    })
    odd = m.model_copy(update={"tag": tag, "expires_at": datetime(
        2999, 1, 1, tzinfo=zones[0])})
    table = _new_table()
    with PostgresStore(pg_dsn, table=table) as pg:
        pg.save(odd)
        pg.save(other)
    with PostgresStore(pg_dsn, table=table) as pg:
        got = pg.get(odd.id)
        assert got is not None
        for a, b in ((got.tag.timestamp, odd.tag.timestamp),
                     (got.tag.last_retrieved, odd.tag.last_retrieved),
                     (got.tag.mood_snapshot.timestamp, odd.tag.mood_snapshot.timestamp),
                     (got.expires_at, odd.expires_at)):
            assert a == b and a is not None and b is not None
            assert a.utcoffset() == b.utcoffset()
        assert pg.list_all() == [odd, other]
