"""The engine over PostgresStore and PostgresAffectiveStateStore: answers as over the
in-memory store, reopening, several processes, scoped views.

The server is started by the ``pg_server`` fixture (tests/conftest.py,
tests/support/pg_server.py) on a free 127.0.0.1 port; each module gets its own database.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")

from emotional_memory import EmotionalMemory, InMemoryStore  # noqa: E402
from emotional_memory.affect import CoreAffect  # noqa: E402
from emotional_memory.embedders import HashingEmbedder  # noqa: E402
from emotional_memory.replay import TickClock  # noqa: E402
from emotional_memory.stores.postgres import PostgresStore  # noqa: E402
from emotional_memory.stores.postgres.state import PostgresAffectiveStateStore  # noqa: E402
from support.banks import (  # noqa: E402
    T0,
    assert_same_bank,
    random_memories,
    random_query,
)
from support.engine_ops import TEXTS, dump, engine_op, op_engine, run_engine_ops  # noqa: E402
from support.paths import SRC, SUPPORT, TESTS  # noqa: E402
from support.pg_store import _new_table, indexed_with_oracle  # noqa: E402
from support.where_oracle import TRICKY_METAS, TRICKY_WHERES  # noqa: E402

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


def test_a_fitted_lexical_config_answers_as_over_the_in_memory_store(pg_dsn: str) -> None:
    """What ``training fit`` chooses on real conversations (``NAME@stem``): the stemmed
    analysis with query-term counts. On PostgreSQL (the rows keep their stems) every
    answer, explanation and side effect equals the in-memory engine's, for the root
    and for a scoped view."""
    from emotional_memory import EmotionalMemoryConfig
    from emotional_memory.retrieval import RetrievalConfig

    config = EmotionalMemoryConfig(retrieval=RetrievalConfig(
        lexical_weight=0.6, lexical_stemmer="english", lexical_query_counts=True))
    texts = ["she went running by the rivers", "the meetings ran late again",
             "runners meet at the river", "quiet evening at home", "a meeting about running"]
    queries = ["runs and runs by the river", "meeting runners", "evenings"]

    def make(store: Any) -> EmotionalMemory:
        clock = TickClock(T0, timedelta(seconds=30))
        return EmotionalMemory(store, HashingEmbedder(dim=32), config=config, clock=clock)

    with PostgresStore(pg_dsn, table=_new_table()) as pg:
        for oracle, other in ((make(InMemoryStore()), make(pg)),):
            for root in (False, True):
                a, b = (oracle, other) if root else (oracle.scoped("u"), other.scoped("u"))
                for text in texts:
                    a.encode(text)
                    b.encode(text)
                for q in queries:
                    got = b.retrieve_with_explanations(q, top_k=3)
                    want = a.retrieve_with_explanations(q, top_k=3)
                    assert [(r.memory.content, r.score, r.breakdown) for r in got] == [
                        (r.memory.content, r.score, r.breakdown) for r in want]
                    assert any(r.breakdown.lexical_signal > 0 for r in got)
            assert dump(other) == dump(oracle)


# ----------------------------------------------------------------- scopes


def test_a_scoped_view_over_the_hnsw_path_equals_the_in_memory_view(pg_dsn: str) -> None:
    """Above ``exact_rows`` a view's search runs on the index with the scope in its
    WHERE clause (iterative scan): the answers equal the in-memory store's view, and
    a view neither reads nor writes another scope's memories."""
    from emotional_memory.stores.selection import Now, Selection

    memories = [m.model_copy(update={"scope": (("alice",), ("bob",), ("alice", "w"))[i % 3]})
                for i, m in enumerate(random_memories(21, 120, 0))]
    with indexed_with_oracle(pg_dsn, memories, margin=4) as (pg, oracle):
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


def test_two_processes_batching_into_one_scope_equal_a_serial_replay(pg_dsn: str) -> None:
    """Two processes ``encode_batch`` into one scope of one table at once: no row is
    lost, and the table equals the same batches replayed one after another (in the
    order they were stored) by two engines over one ``InMemoryStore``: the same
    memories, the same links both ways (each batch linked against everything
    committed before it)."""
    from support.pg_workers import _engine, batch_text

    table = _new_table()
    PostgresStore(pg_dsn, table=table).close()  # the schema, before the race
    k, b = 4, 15
    procs = [_worker("scoped", pg_dsn, table, name, str(k), str(b)) for name in ("a", "b")]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
        assert out.split() == [str(i) for i in range(k)]
    with PostgresStore(pg_dsn, table=table) as store:
        stored = store.list_all()
    assert len(stored) == 2 * k * b
    order = []  # (worker, batch) in the order the batches were stored
    for m in stored:
        name, _, batch = m.content.split()[:3]
        if (name, int(batch)) not in order:
            order.append((name, int(batch)))
    oracle = InMemoryStore()
    engines = {name: _engine(pg_dsn, table) for name in ("a", "b")}
    for name, e in engines.items():  # the same clocks and embedder, over the oracle
        engines[name] = EmotionalMemory(oracle, e.embedder, clock=e._clock).scoped("team")
        e.store.close()
    for name, batch in order:
        engines[name].encode_batch([batch_text(name, batch, j) for j in range(b)])

    def shape(memories: list[Any]) -> list[Any]:
        content = {m.id: m.content for m in memories}
        return [(m.content, m.scope, m.tag.core_affect,  # not the time: how often a
                 # store reads its engine's tick clock differs between backends
                 [(content.get(lk.target_id), lk.strength, lk.link_type)
                  for lk in m.tag.resonance_links]) for m in memories]

    assert shape(stored) == shape(oracle.list_all())
