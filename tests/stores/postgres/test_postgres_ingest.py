"""Bulk ingest on PostgreSQL (``stores/postgres/ingest.py``): a replay of the same
``encode`` / ``encode_batch`` / ``import_memories`` calls on an ``InMemoryStore`` and
on a ``PostgresStore`` stores the same memories with the same links and answers the
same retrieves; and a block costs a bounded number of statements, not some per
memory."""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")

from emotional_memory import CoreAffect, EmotionalMemory, InMemoryStore  # noqa: E402
from emotional_memory._engine import encoding  # noqa: E402
from emotional_memory.stores.postgres import PostgresStore  # noqa: E402
from emotional_memory.stores.postgres.schema import SCHEMA_VERSION  # noqa: E402
from support.engine_ops import dump  # noqa: E402
from support.scopes import T0, Clock  # noqa: E402

_tables = itertools.count()
DIM = 12


class ClusterEmbedder:
    """Texts ``"<cluster> <n> ..."`` near one of a few directions (deterministic);
    ``zero ...`` has no direction, ``dup<k> ...`` shares ``dup<k>``'s vector."""

    dim = DIM

    def __init__(self) -> None:
        self._centres = np.random.default_rng(7).standard_normal((5, DIM))

    def embed(self, text: str) -> list[float]:
        head = text.split()[0]
        if head == "zero":
            return [0.0] * DIM
        seed = zlib.crc32((head if head.startswith("dup") else text).encode())
        rng = np.random.default_rng(seed)
        centre = self._centres[len(head) % 5]
        vec = centre + 0.6 * rng.standard_normal(DIM)
        # float32 values for some texts (stored as they are), float64 for others
        return (vec.astype(np.float32).astype(np.float64) if seed % 2 else vec).tolist()

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed(t) for t in texts]


def engine(store: Any) -> EmotionalMemory:
    """An engine whose clock moves only when the test moves it (``clock.now``): how
    often a store reads the time (a view's expiry) never changes a timestamp."""
    return EmotionalMemory(store, ClusterEmbedder(), clock=Clock())


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 16 memories, so one batch spans several blocks."""
    monkeypatch.setattr(encoding, "_LINK_SEARCH_BLOCK", 16)


def texts(prefix: str, n: int, *, odd: bool) -> list[str]:
    words = ["rain", "harbour", "coffee", "exam", "music"]
    out = []
    for i in range(n):
        if odd and i % 11 == 3:
            out.append(f"zero {prefix} {i}")
        elif odd and i % 13 == 5:
            out.append(f"dup{i % 2} {prefix} {i}")
        else:
            out.append(f"{words[i % 5]} {prefix} {i}")
    return out


def replay(e: EmotionalMemory, *, odd: bool) -> list[Any]:
    """The same calls on any engine; what they returned, with ids as contents."""
    out: list[Any] = []
    clock = e._clock  # the Clock given to engine()

    def record(memories: list[Any]) -> None:
        clock.now += timedelta(minutes=7)
        content = {m.id: m.content for m in e.list_all()}
        out.append([(m.content, m.embedding, m.tag.model_dump(mode="json",
                     exclude={"resonance_links"}),
                     [(content.get(lk.target_id), lk.strength, lk.link_type)
                      for lk in m.tag.resonance_links]) for m in memories])

    if odd:  # memories kept whole (a timestamp not in UTC) among the link targets
        source = EmotionalMemory(InMemoryStore(), ClusterEmbedder(), clock=Clock())
        source.encode_batch(["rain whole 1", "harbour whole 2"])
        whole = source.export_memories()
        for d in whole:
            when = datetime.fromisoformat(d["tag"]["timestamp"])
            d["tag"]["timestamp"] = when.astimezone(timezone(timedelta(hours=2))).isoformat()
        assert e.import_memories(whole) == 2
    record(e.encode_batch(texts("a", 3, odd=odd)))
    record([e.encode("rain alone")])
    record(e.encode_batch(texts("b", 40, odd=odd),
                          affect=[CoreAffect(valence=(i % 5 - 2) / 2, arousal=0.3)
                                  if i % 3 else None for i in range(40)]))
    past, future = T0 - timedelta(days=1), T0 + timedelta(days=365)
    record(e.encode_batch(texts("c", 30, odd=odd),
                          expires_at=[past if i % 7 == 1 else future if i % 5 == 0 else None
                                      for i in range(30)]))
    scoped = e.scoped("team", "x")
    record(scoped.encode_batch(texts("d", 25, odd=odd)))
    record(scoped.encode_batch(texts("e", 90, odd=odd)))
    record(e.encode_batch(texts("f", 70, odd=odd)))
    record([e.encode("harbour alone")])
    for q in ("rain a 1", "harbour b 7", "zero q", "music f 3"):
        for who in (e, scoped):
            out.append([(x.memory.content, x.score, x.pass1_rank, x.activation_level)
                        for x in who.retrieve_with_explanations(q, top_k=4)])
    return out


@pytest.mark.parametrize("mode", ["exact", "index"])
def test_encode_batch_replays_as_on_the_in_memory_store(
    pg_dsn: str, small_blocks: None, mode: str
) -> None:
    """Exact mode (below ``exact_rows``): every candidate ranked exactly, ties and
    vectors without a direction included. Index mode (``exact_rows=0``, the HNSW
    index supplies the older rows' candidates, ``ef_search`` at its maximum so the
    small graph is searched whole): the same answers on vectors without ties."""
    options = {} if mode == "exact" else {"exact_rows": 0, "ef_search": 1000}
    odd = mode == "exact"
    store = PostgresStore(pg_dsn, table=f"ingest{next(_tables)}", **options)
    try:
        pg, mem = engine(store), engine(InMemoryStore())
        assert replay(pg, odd=odd) == replay(mem, odd=odd)
        assert dump(pg) == dump(mem)
        assert dump(pg.scoped("team", "x")) == dump(mem.scoped("team", "x"))
        assert sum(len(m.tag.resonance_links) for m in pg.list_all()) > 200
        assert pg.get_state().snapshot() == mem.get_state().snapshot()
        # the links index (kept by triggers) agrees with the links written in bulk
        memories = pg.list_all()
        some = [m.id for m in memories[:5]]
        held = store.list_all()  # the expired memories too: their links are indexed
        assert store.linking_to(some) == [
            m.id for m in held if any(lk.target_id in some for lk in m.tag.resonance_links)
        ]
        assert len(store) == len(held) == len(memories) + 5  # five expired when written
    finally:
        store.close()


class TiedEmbedder:
    """Texts ``"<d> <n>"``: one of four directions ``d`` at norm ``1 + n``, so many
    memories tie exactly on cosine with any query."""

    dim = 3
    _directions = ([1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0], [1.0, 0.0, 1.0])

    def embed(self, text: str) -> list[float]:
        d, n = (int(x) for x in text.split()[:2])
        return [x * (1 + n) for x in self._directions[d]]

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed(t) for t in texts]


def test_index_mode_link_candidates_among_exact_ties_are_the_latest(
    pg_dsn: str, small_blocks: None
) -> None:
    """Above ``exact_rows`` a block's older candidates come from the HNSW index: among
    many memories of one direction its ``limit`` + margin picks are an arbitrary
    choice of equals, while the rule takes the latest (ties: the later-inserted first).
    The ingest widens them as a search does, so the links are the in-memory store's."""
    store = PostgresStore(pg_dsn, table=f"ingest{next(_tables)}", exact_rows=0, margin=2)
    try:
        pg = EmotionalMemory(store, TiedEmbedder(), clock=Clock())
        mem = EmotionalMemory(InMemoryStore(), TiedEmbedder(), clock=Clock())
        for e in (pg, mem):
            e.encode_batch([f"{i % 4} {i}" for i in range(160)])
            e.encode_batch([f"{i % 4} {200 + i}" for i in range(24)])
            e.encode(f"2 {300}")
        assert dump(pg) == dump(mem)
    finally:
        store.close()


class StatementCounter:
    """Counts the statements psycopg sends (``Cursor.execute`` / ``executemany``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        for cls in (psycopg.Cursor,):
            for name in ("execute", "executemany"):
                original = getattr(cls, name)

                def counted(self_: Any, *a: Any, __o: Any = original, **k: Any) -> Any:
                    self.count += 1
                    return __o(self_, *a, **k)

                monkeypatch.setattr(cls, name, counted)


@pytest.mark.parametrize("exact_rows", [2048, 0])
def test_a_batch_costs_statements_per_block_not_per_memory(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch, exact_rows: int
) -> None:
    store = PostgresStore(pg_dsn, table=f"ingest{next(_tables)}", exact_rows=exact_rows)
    try:
        e = engine(store)
        e.encode_batch(texts("warm", 60, odd=False))
        counter = StatementCounter(monkeypatch)
        e.encode_batch(texts("big", 300, odd=False))  # one block
        assert counter.count <= 20, counter.count
        assert len(store) == 360
        assert sum(len(m.tag.resonance_links) for m in e.list_all()) > 300
    finally:
        store.close()


def exported(n: int) -> Iterator[list[dict[str, Any]]]:
    """An export of a linked bank of ``n`` memories, and one of a second bank."""
    src = engine(InMemoryStore())
    src.encode_batch(texts("x", n, odd=True))
    first = src.export_memories()
    src.encode_batch(texts("y", n // 2, odd=True))
    yield first
    yield src.export_memories()


def test_import_memories_replays_as_on_the_in_memory_store(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = exported(80)
    store = PostgresStore(pg_dsn, table=f"ingest{next(_tables)}")
    try:
        pg, mem = engine(store), engine(InMemoryStore())
        changed = [dict(d, content=d["content"] + " changed") for d in second[:10]]
        for data, overwrite in ((first, False), (second, False), (changed, False),
                                (changed, True)):
            assert pg.import_memories(data, overwrite) == mem.import_memories(data, overwrite)
            assert dump(pg) == dump(mem)
        assert pg.export_memories() == mem.export_memories()
        scoped_pg, scoped_mem = pg.scoped("s"), mem.scoped("s")
        fresh = [dict(d, id="s-" + d["id"], tag=dict(d["tag"], resonance_links=[]))
                 for d in first[:20]]
        counter = StatementCounter(monkeypatch)
        assert scoped_pg.import_memories(fresh) == 20  # statements per call, not per memory
        assert counter.count <= 12, counter.count
        assert scoped_mem.import_memories(fresh) == 20
        assert dump(scoped_pg) == dump(scoped_mem)
        for q in ("rain x 1", "zero"):
            assert [m.content for m in pg.retrieve(q, top_k=5)] == [
                m.content for m in mem.retrieve(q, top_k=5)]
    finally:
        store.close()


_V2_TRACK_LINKS = """CREATE OR REPLACE FUNCTION {t}_track_links() RETURNS trigger
LANGUAGE plpgsql AS $body$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM {links} WHERE source = OLD.seq;
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        DELETE FROM {links} WHERE source = OLD.seq AND NOT (target = ANY (NEW.link_targets));
    END IF;
    INSERT INTO {links} (target, source)
        SELECT DISTINCT x, NEW.seq FROM unnest(NEW.link_targets) AS x
        ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$body$"""


def test_a_version_2_table_gets_the_indexed_links_trigger(pg_dsn: str) -> None:
    """Version 2's trigger found a row's pairs by ``source`` alone (a scan of the links
    table per written row); opening a version-2 table replaces it (version 3), and
    the links table still equals the link arrays after bulk writes and deletes."""
    table = f"ingest{next(_tables)}"
    with PostgresStore(pg_dsn, table=table) as store:
        engine(store).encode_batch(texts("v", 30, odd=False))
    t = f"{table}_memories"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(_V2_TRACK_LINKS.replace("{t}", t).replace("{links}", f"{table}_links"))
        conn.execute(f"UPDATE {table}_meta SET value = '2' WHERE key = 'version'")
    with PostgresStore(pg_dsn, table=table) as store:
        e = engine(store)
        e.encode_batch(texts("w", 30, odd=False))
        for victim in e.list_all()[::7]:
            assert e.delete(victim.id)
        with psycopg.connect(pg_dsn) as conn:
            assert conn.execute(
                f"SELECT value FROM {table}_meta WHERE key = 'version'"
            ).fetchone() == (str(SCHEMA_VERSION),)
            body = conn.execute("SELECT prosrc FROM pg_proc WHERE proname = %s",
                                (f"{t}_track_links",)).fetchone()[0]
            assert "target = ANY (OLD.link_targets) AND source = OLD.seq" in body
            pairs = set(conn.execute(f"SELECT target, source FROM {table}_links").fetchall())
            assert pairs == {
                (target, seq) for seq, targets in conn.execute(
                    f"SELECT seq, link_targets FROM {t}").fetchall()
                for target in targets
            }
            assert len(pairs) > 50
