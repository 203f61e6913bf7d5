"""Scope holds across processes: a path exclusive, its prefixes shared.

The plan is checked against the in-process rule (:func:`overlap`) for all pairs of
paths, then the real locks of each backend (``flock`` beside an SQLite file,
PostgreSQL advisory locks) from separate threads, each with its own file or
connection, as separate processes would hold them: an overlapping hold waits, a
sibling scope's does not.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emotional_memory._scope_locks import overlap
from emotional_memory.stores._shared.scope_hold import lock_plan
from emotional_memory.stores.postgres import PostgresStore
from emotional_memory.stores.postgres.state import PostgresAffectiveStateStore
from emotional_memory.stores.sqlite.scope_locks import hold_scope

paths = st.lists(st.sampled_from(["a", "b", "50%", "ü", '"']), max_size=3).map(tuple)


def _conflict(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether two holders' plans can never be held at once (plain rule: same lock
    name, at least one of the two exclusive)."""
    held = dict(lock_plan("ns", a))
    return any(name in held and (exclusive or held[name]) for name, exclusive in lock_plan("ns", b))


@given(paths, paths)
def test_two_plans_conflict_exactly_when_the_paths_overlap(a: tuple[str, ...],
                                                           b: tuple[str, ...]) -> None:
    assert _conflict(a, b) == overlap(a, b)


@given(paths)
def test_a_plan_goes_from_the_root_down(path: tuple[str, ...]) -> None:
    plan = lock_plan("ns", path)
    assert len(plan) == len(path) + 1
    assert [exclusive for _, exclusive in plan] == [False] * len(path) + [True]
    assert plan[0][0] == lock_plan("ns", ())[0][0]
    assert lock_plan("other", path)[-1][0] != plan[-1][0]


Hold = Callable[[tuple[str, ...]], AbstractContextManager[None]]


def _check_holds(hold: Hold) -> None:
    """With ``("a",)`` held: a sibling and its sub-scope are taken at once; the same
    scope, a sub-scope and the root wait until it is released."""
    release = threading.Event()
    held = threading.Event()

    def holder() -> None:
        with hold(("a",)):
            held.set()
            release.wait(60)

    first = threading.Thread(target=holder)
    first.start()
    assert held.wait(30)
    for sibling in [("b",), ("b", "x")]:
        done = threading.Event()
        t = threading.Thread(target=lambda p=sibling, d=done: _take(hold, p, d))
        t.start()
        assert done.wait(30), f"{sibling} waited for ('a',)"
        t.join()
    waiting = []
    for path in [("a",), ("a", "x"), ()]:
        done = threading.Event()
        t = threading.Thread(target=lambda p=path, d=done: _take(hold, p, d))
        t.start()
        waiting.append((path, t, done))
    for path, _, done in waiting:
        assert not done.wait(0.3), f"{path} did not wait for ('a',)"
    release.set()
    first.join(30)
    for path, t, done in waiting:
        assert done.wait(30), f"{path} never got its turn"
        t.join(30)


def _take(hold: Hold, path: tuple[str, ...], done: threading.Event) -> None:
    with hold(path):
        done.set()


def test_sqlite_holds_exclude_overlapping_scopes_only(tmp_path: Path) -> None:
    database = str(tmp_path / "m.db")
    _check_holds(lambda path: hold_scope(database, path))
    assert (tmp_path / "m.db.scope-locks").is_dir()


def test_a_private_sqlite_database_holds_nothing() -> None:
    with hold_scope(":memory:", ("a",)), hold_scope(":memory:", ("a",)):
        pass


def test_postgres_holds_exclude_overlapping_scopes_only(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn, table="holds")
    states = PostgresAffectiveStateStore.from_store(store)
    try:
        _check_holds(states.hold_scope)
    finally:
        store.close()
    with pytest.raises(ValueError, match="closed"), states.hold_scope(("a",)):
        pass


def test_postgres_hold_needs_a_state_store_of_the_memory_store(pg_dsn: str) -> None:
    with PostgresAffectiveStateStore(pg_dsn) as own, pytest.raises(ValueError, match="from_store"):
        own.hold_scope(("a",))


def test_sqlite_holds_leave_a_bounded_number_of_lock_files(tmp_path: Path) -> None:
    """Every scope a client names (a read of one never written included) used to
    leave its own lock file beside the database, without bound; the paths now share
    the root's file and ``STRIPES`` others, each operation taking each of its files
    once, in one order, exclusive where the path itself falls."""
    from emotional_memory.stores.sqlite.scope_locks import STRIPES, stripe_plan

    database = str(tmp_path / "m.db")
    for i in range(3 * STRIPES):
        with hold_scope(database, ("tenant", f"scope-{i}")):
            pass
    assert len(list((tmp_path / "m.db.scope-locks").iterdir())) <= STRIPES + 1
    for path in [(), ("a",), ("a", "b"), tuple("abcdefgh")]:
        plan = stripe_plan(path)
        names = [name for name, _ in plan]
        assert names[0] == "root" and plan[0][1] == (path == ())
        assert names[1:] == sorted(set(names[1:]))  # each stripe once, in order
        assert sum(exclusive for _, exclusive in plan) == 1


def test_a_bounded_sqlite_hold_gives_up_and_keeps_nothing(tmp_path: Path) -> None:
    """A hold with a timeout whose scope stays held elsewhere raises ScopeHoldTimeout
    (a StoreTimeoutError: the service's 503) and releases what it took: the root,
    which it holds shared, is free for the root's exclusive hold afterwards."""
    from emotional_memory.interfaces import StoreTimeoutError
    from emotional_memory.stores.sqlite.scope_locks import ScopeHoldTimeout

    database = str(tmp_path / "m.db")
    with hold_scope(database, ("a",)):
        with (pytest.raises(ScopeHoldTimeout, match="stayed held") as caught,
              hold_scope(database, ("a", "x"), 0.05)):
            pytest.fail("entered a held scope")
        assert isinstance(caught.value, StoreTimeoutError)
        with hold_scope(database, ("b",), 0.05):  # a sibling: no wait
            pass
    with hold_scope(database, (), 5.0):
        pass


def test_postgres_hold_waits_at_most_the_statement_timeout(pg_dsn: str) -> None:
    import psycopg

    from emotional_memory.stores.postgres.common import StatementTimeout

    store = PostgresStore(pg_dsn, table="bounded_holds", statement_timeout=0.2)
    states = PostgresAffectiveStateStore.from_store(store)
    try:
        with states.hold_scope(("a",)):
            done = threading.Event()
            failed: list[BaseException] = []

            def other() -> None:  # a thread with its own lock connection
                try:
                    with states.hold_scope(("a",)):
                        pass
                except BaseException as exc:
                    failed.append(exc)
                done.set()

            t = threading.Thread(target=other)
            t.start()
            assert done.wait(60), "the overlapping hold never gave up"
            t.join(60)
            assert len(failed) == 1 and isinstance(failed[0], StatementTimeout), failed
            password = str(psycopg.conninfo.conninfo_to_dict(pg_dsn)["password"])
            assert password and password not in str(failed[0])
        with states.hold_scope(()):  # nothing of the failed hold is left behind
            pass
    finally:
        store.close()


def test_a_killed_idle_lock_connection_is_replaced_not_failed(pg_dsn: str) -> None:
    """The scope-lock pool checks a connection idle past the store's threshold before
    handing it out, as the data pool does (it used to hand out dead ones: after a
    database restart each idle lock connection failed one operation)."""
    import psycopg

    store = PostgresStore(pg_dsn, table="killed_locks")
    store._IDLE_CHECK_S = 0.0  # every pooled connection counts as idle: checked
    states = PostgresAffectiveStateStore.from_store(store)
    try:
        with states.hold_scope(("a",)):
            pass
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                          "datname = current_database() AND pid <> pg_backend_pid()")
        with states.hold_scope(("a",)):
            pass
        assert store.count() == 0  # the data pool recovers too
    finally:
        store.close()


def test_sqlite_holds_of_one_file_named_through_a_symlink_exclude_each_other(
    tmp_path: Path,
) -> None:
    """Two workers configured with different paths to one database (the file, and a
    symlink to it) must share its scope locks: each used the lock directory beside
    the path it was given, so their holds never met."""
    from emotional_memory.stores.sqlite.scope_locks import ScopeHoldTimeout

    database = tmp_path / "data" / "m.db"
    database.parent.mkdir()
    database.write_bytes(b"")
    alias = tmp_path / "alias.db"
    alias.symlink_to(database)
    with (hold_scope(str(database), ("a",)), pytest.raises(ScopeHoldTimeout),
          hold_scope(str(alias), ("a",), 0.05)):
        pytest.fail("entered a scope held through the other path")
    with hold_scope(str(alias), ("a",), 5.0):  # released: free through either path
        pass


@pytest.mark.parametrize("shared", [False, True])
def test_sqlite_holds_follow_the_database_opened_by_a_relative_path_after_chdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared: bool
) -> None:
    """A state store opened as ``m.db`` in one folder resolved the path again at every
    hold: once the process changed folder its locks went to ``<new folder>/m.db.
    scope-locks`` while its connection stayed on the first file, so other processes'
    holds on that file no longer excluded its own (and ``joined_with`` no longer
    found the store's file: memories and state stopped committing together)."""
    from emotional_memory.stores import SQLiteStore
    from emotional_memory.stores.sqlite.scope_locks import ScopeHoldTimeout
    from emotional_memory.stores.sqlite.state import SQLiteAffectiveStateStore

    (tmp_path / "data").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "data")
    store = SQLiteStore("m.db")
    states = (SQLiteAffectiveStateStore.from_store(store) if shared
              else SQLiteAffectiveStateStore("m.db"))
    try:
        monkeypatch.chdir(tmp_path / "elsewhere")
        database = str(tmp_path / "data" / "m.db")
        with (hold_scope(database, ("a",)), pytest.raises(ScopeHoldTimeout),
              states.hold_scope(("a",), wait=False)):
            pytest.fail("entered a scope another process holds on the same file")
        assert not (tmp_path / "elsewhere" / "m.db.scope-locks").exists()
        assert states.joined_with(store) is not None
    finally:
        states.close()
        store.close()


@pytest.mark.parametrize("shared", [False, True])
def test_a_closed_sqlite_state_store_holds_nothing(tmp_path: Path, shared: bool) -> None:
    """A hold through a closed state store (or one whose store closed) went ahead,
    taking the file's locks, where every other use, and PostgreSQL's hold, says it is
    closed."""
    from emotional_memory.stores import SQLiteStore
    from emotional_memory.stores.sqlite.state import SQLiteAffectiveStateStore

    store = SQLiteStore(tmp_path / "m.db")
    states = (SQLiteAffectiveStateStore.from_store(store) if shared
              else SQLiteAffectiveStateStore(tmp_path / "m.db"))
    (store if shared else states).close()
    with pytest.raises(ValueError, match="closed"), states.hold_scope(("a",)):
        pytest.fail("held a scope through a closed store")
    with pytest.raises(ValueError, match="closed"), states.scoped(("a",)).hold_scope(()):
        pytest.fail("held a scope through a closed store's twin")
    assert not (tmp_path / "m.db.scope-locks").exists()
    store.close()
