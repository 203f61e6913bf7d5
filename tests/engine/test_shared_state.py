"""Shared affective state: engines in several processes over one database behave as one.

With ``shared_state=True`` every operation runs on the state as last saved by any
process, operations on one scope are serialised by the database, and each saves a
new version. Checked with engines in one process on separate connections, and with
real worker processes on SQLite and PostgreSQL: every ``set_affect`` must start from
the state the previous one (in some serial order) left, so the predecessors of all
updates form one chain with no two updates starting from the same state (no lost
update), and the final stored state is the chain's last.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from emotional_memory import CoreAffect, EmotionalMemory, InMemoryStore
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.state import AffectiveState
from emotional_memory.state_stores import InMemoryAffectiveStateStore
from emotional_memory.stores.sqlite import SQLiteStore
from emotional_memory.stores.sqlite.state import SQLiteAffectiveStateStore
from support.async_parts import WordHeldEmbedder
from support.paths import SUPPORT
from support.shared_state_worker import engine_for


def _sqlite_engine(path: Path, **kwargs: Any) -> EmotionalMemory:
    store = SQLiteStore(path)
    return EmotionalMemory(store, HashingEmbedder(dim=32),
                           state_store=SQLiteAffectiveStateStore.from_store(store), **kwargs)


def test_a_mood_set_through_one_engine_is_what_the_other_answers(tmp_path: Path) -> None:
    a = _sqlite_engine(tmp_path / "m.db", shared_state=True)
    b = _sqlite_engine(tmp_path / "m.db", shared_state=True)
    for _ in range(3):
        a.set_affect(CoreAffect(valence=-0.8, arousal=0.7))
    assert b.get_state().core_affect == a.get_state().core_affect
    assert b.get_current_mood() == a.get_current_mood()
    memory = b.encode("written through b")  # starts from a's state
    assert memory.tag.mood_snapshot.valence == pytest.approx(a.get_current_mood().valence)
    b.set_affect(CoreAffect(valence=0.9, arousal=0.1))
    assert a.get_state().history[-2:] == b.get_state().history[-2:]
    a.close()
    b.close()


def test_without_shared_state_each_engine_keeps_its_copy(tmp_path: Path) -> None:
    a = _sqlite_engine(tmp_path / "m.db")
    b = _sqlite_engine(tmp_path / "m.db")
    a.set_affect(CoreAffect(valence=-0.8, arousal=0.7))
    assert b.get_state().core_affect.valence == 0.0  # the original's behaviour
    a.close()
    b.close()


def test_scopes_keep_their_own_shared_state(tmp_path: Path) -> None:
    a = _sqlite_engine(tmp_path / "m.db", shared_state=True)
    b = _sqlite_engine(tmp_path / "m.db", shared_state=True)
    a.scoped("x").set_affect(CoreAffect(valence=-0.9, arousal=0.5))
    a.scoped("y").set_affect(CoreAffect(valence=0.9, arousal=0.5))
    assert b.scoped("x").get_state().core_affect.valence == pytest.approx(-0.9)
    assert b.scoped("y").get_state().core_affect.valence == pytest.approx(0.9)
    assert b.get_state().core_affect.valence == 0.0
    a.close()
    b.close()


def test_shared_state_needs_a_state_store_in_the_same_database(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="shared_state needs a state store"):
        EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=32),
                        state_store=InMemoryAffectiveStateStore(), shared_state=True)
    other = SQLiteAffectiveStateStore(tmp_path / "other.db")
    with pytest.raises(ValueError, match="shared_state needs a state store"):
        EmotionalMemory(SQLiteStore(tmp_path / "m.db"), HashingEmbedder(dim=32),
                        state_store=other, shared_state=True)


def check_one_chain(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The updates' predecessors form one chain; returns the chain's last update."""
    lasts = [json.dumps(line["last"]) for line in lines]
    assert len(set(lasts)) == len(lasts)
    prevs = [json.dumps(line["prev"]) for line in lines]
    starts = [p for p in prevs if p not in set(lasts)]
    assert len(starts) == 1, f"{len(starts)} updates started from a state no update made"
    assert len(set(prevs)) == len(prevs), "two updates started from the same state"
    successor = dict(zip(prevs, lasts, strict=True))
    node, seen = starts[0], 0
    while node in successor:
        node, seen = successor[node], seen + 1
    assert seen == len(lines)
    return json.loads(node)  # type: ignore[no-any-return]


def run_workers(
    kind: str, target: str, workers: int, ops: int, mode: str
) -> list[dict[str, Any]]:
    procs = [
        subprocess.Popen(
            [sys.executable, str(SUPPORT / "shared_state_worker.py"), kind, target, str(w),
             str(ops), mode],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for w in range(workers)
    ]
    lines: list[dict[str, Any]] = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        lines += [json.loads(x) for x in out.splitlines() if x.strip()]
    assert len(lines) == workers * ops
    return lines


def _final_and_count(engine: EmotionalMemory) -> tuple[list[Any], int]:
    view = engine.scoped("team")
    last = view.get_state().history[-1]
    return [last[0].isoformat(), *last[1:]], len(view.store)


def test_processes_on_one_sqlite_file_lose_no_update(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    _sqlite_engine(path).close()  # create the file once
    last = check_one_chain(run_workers("sqlite", str(path), workers=3, ops=6, mode="affect"))
    engine = _sqlite_engine(path, shared_state=True)
    final, _ = _final_and_count(engine)
    assert final == last
    before = engine.scoped("team").get_state().history
    run_workers("sqlite", str(path), workers=3, ops=5, mode="encode")
    assert len(engine.store.list_all()) == 15
    # every encode fed the shared state once: 15 more points, the latest ones kept
    after = engine.scoped("team").get_state().history
    assert after != before and after[-1][0] > before[-1][0]
    engine.close()


def test_processes_on_one_postgres_database_lose_no_update(pg_dsn: str) -> None:
    from emotional_memory.stores.postgres import PostgresStore
    from emotional_memory.stores.postgres.state import PostgresAffectiveStateStore

    store = PostgresStore(pg_dsn, table="shared")
    store.clear()
    last = check_one_chain(run_workers("postgres", pg_dsn, workers=3, ops=6, mode="affect"))
    engine = EmotionalMemory(store, HashingEmbedder(dim=32),
                             state_store=PostgresAffectiveStateStore.from_store(store),
                             shared_state=True)
    final, _ = _final_and_count(engine)
    assert final == last
    run_workers("postgres", pg_dsn, workers=3, ops=5, mode="encode")
    assert len(store) == 15
    engine.close()


@pytest.fixture(params=["sqlite", "postgres"])
def shared_target(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """``(kind, target)`` of ``support/shared_state_worker.py``: an SQLite file, or the
    module's PostgreSQL database (table ``shared``, its memories and states cleared)."""
    if request.param == "sqlite":
        path = tmp_path / "shared.db"
        _sqlite_engine(path).close()  # create the file once
        return "sqlite", str(path)
    dsn: str = request.getfixturevalue("pg_dsn")
    engine = engine_for("postgres", dsn)  # the tables created
    engine.store.clear()  # type: ignore[attr-defined]
    engine.close()
    _delete_states("postgres", dsn)
    return "postgres", dsn


def _delete_states(kind: str, target: str) -> None:
    """Delete every stored affective state by hand (SQL on a connection of its own)."""
    if kind == "sqlite":
        import sqlite3

        conn = sqlite3.connect(target)
        with conn:
            conn.execute("DELETE FROM em_affective_state")
        conn.close()
        return
    import psycopg

    with psycopg.connect(target, autocommit=True) as pg:
        pg.execute("DELETE FROM shared_state")


def test_every_read_of_the_state_answers_what_another_process_saved(
    shared_target: tuple[str, str],
) -> None:
    """``save_state()`` (like ``get_state()``) answers the state as last saved by any
    process, not the copy this engine held before another process changed it."""
    kind, target = shared_target
    engine = engine_for(kind, target)
    view = engine.scoped("team")
    held = view.get_state()
    run_workers(kind, target, workers=1, ops=1, mode="affect")  # another process's update
    stored = view.get_state()
    assert stored.history != held.history
    assert view.save_state() == stored.snapshot()
    assert view.get_current_mood() == stored.mood
    engine.close()


@pytest.mark.parametrize("how", ["clear_persisted_state", "deleted by hand"])
def test_a_cleared_state_is_the_initial_state_for_every_engine(
    shared_target: tuple[str, str], how: str
) -> None:
    """Once the stored state is gone, every engine sharing it answers the initial
    state, and that is the state the next operation (of any of them) starts from."""
    kind, target = shared_target
    first, second = engine_for(kind, target), engine_for(kind, target)
    a, b = first.scoped("team"), second.scoped("team")
    a.set_affect(CoreAffect(valence=-0.8, arousal=0.7))
    assert b.get_state().history == a.get_state().history != []
    if how == "clear_persisted_state":
        a.clear_persisted_state()
    else:
        _delete_states(kind, target)
    neutral = AffectiveState.initial()
    for view in (a, b):
        state = view.get_state()
        assert state.history == []
        assert state.core_affect == neutral.core_affect
        assert (state.mood.valence, state.mood.arousal) == (
            neutral.mood.valence, neutral.mood.arousal)
        assert view.save_state()["_history"] == []
    after = b.set_affect(CoreAffect(valence=0.5, arousal=0.2))  # starts from the initial
    assert len(after.history) == 1
    assert a.get_state().history == after.history
    first.close()
    second.close()


def test_a_views_state_change_on_the_event_loop_starts_from_the_stored_state(
    tmp_path: Path,
) -> None:
    """``AsyncEmotionalMemory.set_affect`` (synchronous, on the event loop) of a view
    while an operation of its parent runs in a worker thread does not wait for its
    turn (as in the original); with shared states it still starts from the view's
    state as last saved by any process, so another process's update is not lost."""
    import asyncio
    import threading

    from emotional_memory.async_engine import AsyncEmotionalMemory

    path = tmp_path / "shared.db"
    _sqlite_engine(path).close()
    store = SQLiteStore(path)
    embedder = HashingEmbedder(dim=32)
    root = AsyncEmotionalMemory(store, embedder,
                                state_store=SQLiteAffectiveStateStore.from_store(store),
                                shared_state=True)
    view = root.scoped("team")
    other = run_workers("sqlite", str(path), workers=1, ops=1, mode="affect")[0]
    embed, entered, go = embedder.embed, threading.Event(), threading.Event()

    def held_embed(text: str) -> Any:  # the root's encode holds its turn meanwhile
        entered.set()
        go.wait(timeout=60)
        return embed(text)

    embedder.embed = held_embed  # type: ignore[method-assign]

    async def run() -> AffectiveState:
        encoding = asyncio.ensure_future(root.encode("a note of the root"))
        await asyncio.to_thread(entered.wait, 60)
        try:
            return view.set_affect(CoreAffect(valence=0.7, arousal=0.2))
        finally:
            go.set()
            await encoding

    state = asyncio.run(run())
    assert [state.history[-2][0].isoformat(), *state.history[-2][1:]] == other["last"]
    assert view.get_state().history == state.history
    store.close()


def _overwrite_states(kind: str, target: str, text: str) -> None:
    """Overwrite every stored affective state's JSON by hand."""
    if kind == "sqlite":
        import sqlite3

        conn = sqlite3.connect(target)
        with conn:
            conn.execute("UPDATE em_affective_state SET snapshot = ?", (text,))
        conn.close()
        return
    import psycopg

    with psycopg.connect(target, autocommit=True) as pg:
        pg.execute("UPDATE shared_state SET snapshot_json = %s", (text,))


@pytest.mark.parametrize("replace", ["reset_state", "load_state", "clear_persisted_state"])
@pytest.mark.parametrize("garbage", ["not json", "[]", '{"core_affect": {"valence": 5}}',
                                     "[" * 10_000 + "]" * 10_000])  # nested past the parser
def test_a_stored_state_edited_into_garbage_is_named_and_can_be_replaced(
    shared_target: tuple[str, str], garbage: str, replace: str
) -> None:
    """A stored state edited by hand into something that is no state snapshot: every
    operation needing it fails naming the state's key (nothing stored meanwhile), and
    the operations that replace the state (reset, load, clear) still work."""
    import re

    from emotional_memory.stores._shared.state import StoredStateError

    kind, target = shared_target
    first, second = engine_for(kind, target), engine_for(kind, target)
    view, other = first.scoped("team"), second.scoped("team")
    view.set_affect(CoreAffect(valence=-0.8, arousal=0.7))
    _overwrite_states(kind, target, garbage)
    key = re.escape(view.state_store.key)  # type: ignore[union-attr]
    for operation in (view.get_state, lambda: view.encode("a note"),
                      lambda: other.set_affect(CoreAffect(valence=0.2, arousal=0.2))):
        with pytest.raises(StoredStateError, match=key):
            operation()
    assert first.list_all() == []
    third = engine_for(kind, target)  # a new engine or view opens, to replace it
    fresh = third.scoped("team")
    if replace == "load_state":
        snapshot = AffectiveState.initial().update(CoreAffect(valence=0.3, arousal=0.1)).snapshot()
        fresh.load_state(snapshot)
        expected = AffectiveState.restore(snapshot).history
    else:
        getattr(fresh, replace)()
        expected = []
    assert other.get_state().history == view.get_state().history == expected
    after = other.set_affect(CoreAffect(valence=0.5, arousal=0.2))
    assert len(after.history) == len(expected) + 1
    assert fresh.get_state().history == after.history
    for engine in (first, second, third):
        engine.close()


def test_a_stored_sqlite_state_that_is_no_utf8_is_named_and_can_be_replaced(
    tmp_path: Path,
) -> None:
    """A state row whose TEXT is no UTF-8 (cut inside a character, or written by a C
    program): every read names the state's key (it was sqlite3's bare
    OperationalError "Could not decode to UTF-8 column 'snapshot'", quoting the
    value, which even reset_state could not get past), and reset_state replaces it."""
    import re
    import sqlite3

    from emotional_memory.stores._shared.state import StoredStateError

    target = str(tmp_path / "shared.db")
    first, second = engine_for("sqlite", target), engine_for("sqlite", target)
    view, other = first.scoped("team"), second.scoped("team")
    view.set_affect(CoreAffect(valence=-0.8, arousal=0.7))
    conn = sqlite3.connect(target)
    with conn:
        conn.execute("UPDATE em_affective_state SET snapshot = CAST(x'7b22c3' AS TEXT), "
                     "updated_at = CAST(x'c3' AS TEXT)")
    conn.close()
    states = view.state_store
    key = re.escape(repr(states.key))  # type: ignore[union-attr]
    for operation in (view.get_state, lambda: view.encode("a note"),
                      lambda: other.set_affect(CoreAffect(valence=0.2, arousal=0.2)),
                      states.load, states.load_snapshot, states.load_versioned):  # type: ignore[union-attr]
        with pytest.raises(StoredStateError, match=key):
            operation()
    with pytest.raises(ValueError, match=key + ".*updated_at"):
        states.updated_at()  # type: ignore[union-attr]
    assert first.list_all() == []
    view.reset_state()
    assert other.get_state().history == []
    assert len(other.set_affect(CoreAffect(valence=0.5, arousal=0.2)).history) == 1
    for engine in (first, second):
        engine.close()


def test_as_async_of_a_shared_engine_shares_the_state(tmp_path: Path) -> None:
    """``as_async`` of an engine with ``shared_state`` shares the state through the
    database as another engine would (a private copy would write the shared row
    without versions or scope holds): a change through either is what the other
    answers, and interleaved updates from threads on both lose none."""
    import asyncio
    import threading

    from emotional_memory import as_async

    engine = _sqlite_engine(tmp_path / "m.db", shared_state=True)
    engine.set_affect(CoreAffect(valence=-0.5, arousal=0.5))
    copy = as_async(engine)
    assert copy.get_state() == engine.get_state()
    asyncio.run(copy.encode("through the async copy", affect=CoreAffect(valence=0.9, arousal=0.9)))
    assert engine.get_state() == copy.get_state()
    assert engine.get_state().history == copy.get_state().history

    lines: list[dict[str, Any]] = []

    def updates(target: Any, sign: float) -> None:
        for i in range(12):
            state = target.set_affect(CoreAffect(valence=sign * (i + 1) / 13, arousal=0.4))
            history = [[p[0].isoformat(), *p[1:]] for p in state.history]
            lines.append({"last": history[-1], "prev": history[-2]})

    threads = [threading.Thread(target=updates, args=(engine, 1.0)),
               threading.Thread(target=updates, args=(copy, -1.0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    last = check_one_chain(lines)
    got = copy.get_state().history[-1]
    assert [got[0].isoformat(), *got[1:]] == last
    engine.close()


def test_an_operation_whose_scope_lock_was_lost_rolls_back(pg_dsn: str) -> None:
    """The connection holding an operation's scope lock is cut mid-operation (the
    server frees its locks), another engine's operation on the scope commits: the first
    operation's save finds the state's version moved and rolls back (StateConflictError,
    a retryable StoreBusyError), so no update is lost and the store holds one write."""
    import threading

    import psycopg

    from emotional_memory.interfaces import StateConflictError, StoreBusyError
    from emotional_memory.stores.postgres import PostgresStore
    from emotional_memory.stores.postgres.state import PostgresAffectiveStateStore

    def engine(embedder: HashingEmbedder) -> EmotionalMemory:
        store = PostgresStore(pg_dsn, table="lostlock")
        return EmotionalMemory(store, embedder, shared_state=True,
                               state_store=PostgresAffectiveStateStore.from_store(store))

    gated = WordHeldEmbedder("gated", dim=32)
    a, b = engine(gated), engine(HashingEmbedder(dim=32))
    a.store.clear()  # type: ignore[attr-defined]
    a_team, b_team = a.scoped("team"), b.scoped("team")
    b_team.set_affect(CoreAffect(valence=0.1, arousal=0.2))  # a stored state to move
    failure: list[BaseException] = []

    def encode_through_a() -> None:
        try:
            a_team.encode("gated event", affect=CoreAffect(valence=-0.9, arousal=0.9))
        except BaseException as exc:  # checked below
            failure.append(exc)

    worker = threading.Thread(target=encode_through_a)
    worker.start()
    assert gated.entered.wait(60)
    with psycopg.connect(pg_dsn, autocommit=True) as admin:  # cut a's lock connection
        holders = admin.execute(
            "SELECT DISTINCT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
        ).fetchall()
        assert len(holders) == 1
        admin.execute("SELECT pg_terminate_backend(%s)", (holders[0][0],))
    b_team.encode("b's event", affect=CoreAffect(valence=0.8, arousal=0.3))
    after_b = b_team.get_state().snapshot()
    gated.release.set()
    worker.join(60)
    assert len(failure) == 1 and isinstance(failure[0], StateConflictError), failure
    assert isinstance(failure[0], StoreBusyError)
    assert [m.content for m in b.list_all()] == ["b's event"]
    assert b_team.get_state().snapshot() == after_b
    assert a_team.get_state().snapshot() == after_b
    a_team.encode("a retries", affect=CoreAffect(valence=-0.9, arousal=0.9))
    assert [m.content for m in b.list_all()] == ["b's event", "a retries"]
    a.close()
    b.close()


def _engine_on(kind: str, target: str, embedder: HashingEmbedder, **kwargs: Any) -> Any:
    """An engine (``EmotionalMemory``, or another class taking its arguments) with
    shared states on the SQLite file or PostgreSQL database ``target``."""
    cls = kwargs.pop("cls", EmotionalMemory)
    if kind == "sqlite":
        store: Any = SQLiteStore(target)
        states: Any = SQLiteAffectiveStateStore.from_store(store)
    else:
        from emotional_memory.stores.postgres import PostgresStore
        from emotional_memory.stores.postgres.state import PostgresAffectiveStateStore

        store = PostgresStore(target, table="loopwrite")
        states = PostgresAffectiveStateStore.from_store(store)
    return cls(store, embedder, state_store=states, shared_state=True, **kwargs)


def _encoder_thread(other: Any) -> tuple[threading.Thread, list[BaseException]]:
    """A thread (not started) encoding one event into ``other``'s scope "team".

    Args:
        other: the engine standing for another process.

    Returns:
        The thread and the list its failure (if any) is appended to.
    """
    failure: list[BaseException] = []

    def other_encodes() -> None:
        try:
            other.scoped("team").encode("gated event", affect=CoreAffect(valence=-0.9,
                                                                          arousal=0.9))
        except BaseException as exc:  # checked by the caller
            failure.append(exc)

    return threading.Thread(target=other_encodes, daemon=True), failure


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_state_change_on_the_event_loop_waits_for_no_one_yet_writes_no_held_scope(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    """``AsyncEmotionalMemory.set_affect`` on the event loop, while this process's
    root operation waits for its database locks (another process holds scope
    ``team``): the view's state change may not write ``team``'s state under the other
    process's operation (which would then fail its save, or lose its update). It
    raises a retryable error at once (it may not wait: the loop must go on), and the
    other process's operation commits."""
    import asyncio

    from emotional_memory.async_engine import AsyncEmotionalMemory
    from emotional_memory.interfaces import StoreTimeoutError

    target = str(tmp_path / "shared.db")
    if kind == "postgres":
        target = request.getfixturevalue("pg_dsn")
    gated = WordHeldEmbedder("gated", dim=32)
    other = _engine_on(kind, target, gated)  # the other process: its connections, locks
    if kind == "postgres":
        other.store.clear()  # the module's database: no earlier test's rows
    worker, failure = _encoder_thread(other)

    root = _engine_on(kind, target, HashingEmbedder(dim=32), cls=AsyncEmotionalMemory)
    view = root.scoped("team")
    worker.start()
    assert gated.entered.wait(60)  # the other process holds team (and the root shared)

    async def run() -> BaseException | None:
        encoding = asyncio.ensure_future(root.encode("a note of the root"))
        while not root.engine._scope_locks._held:  # its turn taken, the database's awaited
            await asyncio.sleep(0.01)
        try:
            view.set_affect(CoreAffect(valence=0.7, arousal=0.2))
        except StoreTimeoutError as exc:
            return exc
        finally:
            gated.release.set()
            await encoding
        return None

    refused = asyncio.run(run())
    worker.join(60)
    assert not worker.is_alive()
    assert failure == []  # the other process's operation held its scope: it commits
    assert isinstance(refused, StoreTimeoutError)
    stored = other.scoped("team").get_state()
    assert stored.core_affect == CoreAffect(valence=-0.9, arousal=0.9)
    assert view.get_state() == stored
    view.set_affect(CoreAffect(valence=0.7, arousal=0.2))  # nothing held now: it runs
    assert other.scoped("team").get_state().history[-2] == stored.history[-1]
    root.engine.close()
    other.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_the_event_loops_state_calls_never_wait_for_a_scope_held_elsewhere(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    """On the event loop, with no operation of its own running: constructing an
    ``AsyncEmotionalMemory``, ``scoped`` and ``set_affect``, while another engine
    holds scope ``team`` (here one whose operation goes on only once the loop has
    gone on, as an async engine of the same process waiting for its embedder on this
    loop would). They waited for the holder's database locks, blocking the loop
    that holder was waiting for (a deadlock). Now the construction and ``scoped``
    read the stored state without locks, and ``set_affect`` raises the retryable
    ``ScopeHoldTimeout`` at once (as it does while an operation of its own waits
    for its locks); the holder's operation commits."""
    import asyncio

    from emotional_memory.async_engine import AsyncEmotionalMemory
    from emotional_memory.interfaces import StoreTimeoutError

    target = str(tmp_path / "shared.db")
    if kind == "postgres":
        target = request.getfixturevalue("pg_dsn")
    gated = WordHeldEmbedder("gated", dim=32)
    other = _engine_on(kind, target, gated)
    if kind == "postgres":
        other.store.clear()  # the module's database: no earlier test's rows
    other.scoped("team").set_affect(CoreAffect(valence=0.25, arousal=0.5))
    worker, failure = _encoder_thread(other)

    worker.start()
    assert gated.entered.wait(60)  # the other engine holds team (and the root shared)

    async def run() -> tuple[Any, Any, BaseException | None]:
        try:
            root = _engine_on(kind, target, HashingEmbedder(dim=32), cls=AsyncEmotionalMemory)
            view = root.scoped("team")
            try:
                view.set_affect(CoreAffect(valence=0.7, arousal=0.2))
            except StoreTimeoutError as exc:
                return root, view, exc
            return root, view, None
        finally:
            gated.release.set()  # the holder goes on only now

    root, view, refused = asyncio.run(run())
    worker.join(60)
    assert not worker.is_alive()
    assert failure == []  # the holder's operation went on and committed
    assert isinstance(refused, StoreTimeoutError)
    assert view.engine.save_state()["core_affect"]["valence"] == -0.9  # as last saved
    view.set_affect(CoreAffect(valence=0.7, arousal=0.2))  # nothing held now: it runs
    assert other.scoped("team").get_state().core_affect.valence == pytest.approx(
        view.get_state().core_affect.valence
    )
    root.engine.close()
    other.close()


def test_an_engine_whose_clock_is_behind_never_moves_the_shared_state_back(
    tmp_path: Path,
) -> None:
    """Workers on hosts whose clocks disagree: an update through the engine whose
    clock is an hour behind is stamped at the stored state's latest time, not an hour
    before it, so the next reader's mood decay counts no hour that never passed (and
    the history stays in time order); a reset still starts at the engine's clock."""
    from datetime import UTC, datetime, timedelta

    from emotional_memory import EmotionalMemoryConfig
    from emotional_memory.mood import MoodDecayConfig

    t = datetime(2026, 1, 1, 12, tzinfo=UTC)
    config = EmotionalMemoryConfig(mood_decay=MoodDecayConfig())
    ahead = _sqlite_engine(tmp_path / "m.db", shared_state=True, config=config,
                           clock=lambda: t)
    behind = _sqlite_engine(tmp_path / "m.db", shared_state=True, config=config,
                            clock=lambda: t - timedelta(hours=1))
    for _ in range(3):
        ahead.set_affect(CoreAffect(valence=-0.9, arousal=0.9))
    before = ahead.get_current_mood().valence
    state = behind.set_affect(CoreAffect(valence=-0.9, arousal=0.9))
    assert state.mood.timestamp == t
    stamps = [point[0] for point in ahead.get_state().history]
    assert stamps == sorted(stamps) and stamps[-1] == t
    # one more update towards -0.9, read at once: further from baseline, not decayed
    assert ahead.get_current_mood().valence < before
    behind.encode("an event through the late clock")
    assert ahead.get_state().mood.timestamp == t
    behind.reset_state()
    assert ahead.get_state().mood.timestamp == t - timedelta(hours=1)
    ahead.close()
    behind.close()


class _CallingEmbedder(HashingEmbedder):
    """Runs ``calls[text]`` (a nested engine call) when asked to embed ``text``."""

    def __init__(self) -> None:
        super().__init__(dim=32)
        self.calls: dict[str, Any] = {}

    def embed(self, text: str) -> Any:
        call = self.calls.get(text)
        if call is not None:
            call()
        return super().embed(text)


def test_a_nested_call_inside_an_operation_never_waits_for_its_own_locks(
    tmp_path: Path,
) -> None:
    """A call made inside an operation on the same thread (an embedder calling the
    engine): on the scope or a sub-scope it runs under the operation's cross-process
    locks (taking them again waited for itself: flock and advisory locks of another
    file or session exclude their own process); on a parent, whose locks cannot be
    taken while the operation holds its own, it fails at once, naming both scopes."""
    store = SQLiteStore(tmp_path / "m.db")
    embedder = _CallingEmbedder()
    engine = EmotionalMemory(
        store, embedder, shared_state=True,
        state_store=SQLiteAffectiveStateStore.from_store(store, hold_timeout=2),
    )
    team = engine.scoped("team")
    sub = team.scoped("sub")
    embedder.calls["outer"] = lambda: sub.set_affect(CoreAffect(valence=0.7, arousal=0.2))
    team.encode("outer")
    other = _sqlite_engine(tmp_path / "m.db", shared_state=True)
    assert other.scoped("team").scoped("sub").get_state().core_affect.valence == 0.7
    assert len(other.scoped("team").list_all()) == 1
    errors: list[BaseException] = []

    def parent_call() -> None:
        try:
            engine.list_all()
        except RuntimeError as exc:
            errors.append(exc)

    embedder.calls["second"] = parent_call
    team.encode("second")
    assert len(errors) == 1 and "['team']" in str(errors[0]) and "[]" in str(errors[0])
    other.close()
    engine.close()


def test_a_view_made_inside_an_operation_keeps_its_own_clock(tmp_path: Path) -> None:
    """The time floor of an operation on a shared state (the stored state's latest
    time, ahead of this engine's clock) belongs to that operation: a view made by a
    call inside it reads its own clock."""
    from datetime import UTC, datetime, timedelta

    t = datetime(2026, 1, 1, 12, tzinfo=UTC)
    ahead = _sqlite_engine(tmp_path / "m.db", shared_state=True, clock=lambda: t)
    ahead.scoped("team").set_affect(CoreAffect(valence=0.4, arousal=0.4))
    store = SQLiteStore(tmp_path / "m.db")
    embedder = _CallingEmbedder()
    behind = EmotionalMemory(store, embedder, shared_state=True,
                             state_store=SQLiteAffectiveStateStore.from_store(store),
                             clock=lambda: t - timedelta(hours=1))
    team = behind.scoped("team")
    views: list[EmotionalMemory] = []
    embedder.calls["outer"] = lambda: views.append(team.scoped("fresh"))
    team.encode("outer")
    assert views[0].get_state().mood.timestamp == t - timedelta(hours=1)
    ahead.close()
    behind.close()
