"""The SQLite store's write-ahead log is checkpointed after its lock is released.

SQLite's own automatic checkpoint would copy the log inside the ``COMMIT`` that
pushes it past 1,000 pages, under the store's lock; the store turns it off and
checkpoints from a connection of its own once the lock is free. Checked here: the
lock is free while a checkpoint runs (after a transaction and after single writes),
the log stays bounded, every write survives a reopen (and a crash-like exit with the
log left behind), a reader holding an old snapshot neither breaks nor loses anything,
a log another connection restarted is not checkpointed at every commit, and
``":memory:"`` is left alone.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from emotional_memory.stores import SQLiteStore
from emotional_memory.stores.sqlite.checkpoint import WAL_CHECKPOINT_BYTES, WalCheckpointer
from support.memories import basic_memory as mem

BIG = "x" * 30_000  # ~8 pages: a few hundred memories pass the threshold


def _wal(path: Path) -> int:
    try:
        return os.stat(str(path) + "-wal").st_size
    except FileNotFoundError:
        return 0


def test_checkpoints_run_with_the_store_lock_free(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    assert store._checkpointer is not None
    ran = _lock_free_spy(store, monkeypatch)
    with store.transaction():
        for i in range(300):
            store.save(mem(f"{i} {BIG}"))
    assert ran == [True]  # one checkpoint, and another thread could take the lock
    assert _wal(tmp_path / "m.db") >= WAL_CHECKPOINT_BYTES  # not restarted yet
    store.save(mem("small"))  # the next write restarts the log from its start
    assert _wal(tmp_path / "m.db") < 64 * 1024
    store.close()


def _lock_free_spy(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record, for every checkpoint, whether another thread could take the lock."""
    ran: list[bool] = []
    original = WalCheckpointer._checkpoint

    def spy(self: WalCheckpointer) -> bool:
        got: list[bool] = []

        def take() -> None:
            got.append(store._lock.acquire(timeout=5))
            if got[0]:
                store._lock.release()

        probe = threading.Thread(target=take)
        probe.start()
        probe.join()
        ran.append(got[0])
        return original(self)

    monkeypatch.setattr(WalCheckpointer, "_checkpoint", spy)
    return ran


@pytest.mark.parametrize("write", ["save", "update", "record_setting"])
def test_writes_outside_a_transaction_checkpoint_with_the_lock_free(
    write: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    memories = [mem(f"{i} {BIG}") for i in range(200)]
    if write == "update":
        with store.transaction():
            for memory in memories:
                store.save(memory)
        store.save(mem("restart"))  # a checkpoint ran above: start from a fresh log
    ran = _lock_free_spy(store, monkeypatch)
    for i, memory in enumerate(memories):
        if write == "save":
            store.save(memory)
        elif write == "update":
            store.update(memory.model_copy(update={"content": f"{i} {BIG}!"}))
        else:
            store.record_setting(f"k{i}", BIG)
    assert ran and all(ran)
    store.close()


def test_a_log_another_connection_restarted_is_not_checkpointed_at_every_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another connection (no truncation) restarts the log after the store's complete
    checkpoint and leaves the file at its size: the store does not checkpoint again
    until the log outgrows it."""
    path = tmp_path / "m.db"
    store = SQLiteStore(path)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("CREATE TABLE notes (n TEXT)")
    ran = _lock_free_spy(store, monkeypatch)
    with store.transaction():
        for i in range(200):
            store.save(mem(f"{i} {BIG}"))
    assert len(ran) == 1
    for i in range(10):
        other.execute("INSERT INTO notes VALUES (?)", (f"note {i}",))  # restarts the log
        store.save(mem(f"small {i}"))
    assert len(ran) == 1  # (11 before: one per commit once the file passed 4 MiB)
    assert len(store) == 210
    other.close()
    store.close()


def test_the_log_stays_bounded_and_every_write_survives(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    store = SQLiteStore(path)
    conn = store._connection()
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    largest = 0
    ids = []
    for round_ in range(6):
        with store.transaction():
            for i in range(150):
                memory = mem(f"{round_}-{i} {BIG}")
                store.save(memory)
                ids.append(memory.id)
        largest = max(largest, _wal(path))
    # without checkpoints the log would hold all ~27 MB written
    assert largest < WAL_CHECKPOINT_BYTES + 150 * 40_000
    store.close()
    reopened = SQLiteStore(path)
    assert [m.id for m in reopened.list_all()] == ids
    reopened.close()


def test_a_log_left_behind_by_a_killed_process_is_recovered(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    script = (
        "import os, sys\n"
        "from emotional_memory.stores import SQLiteStore\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "from support.memories import basic_memory as mem\n"
        "s = SQLiteStore(sys.argv[1])\n"
        "for i in range(40): s.save(mem(f'{i} ' + 'y' * 30000))\n"
        "os._exit(0)  # no close: the log is not checkpointed\n"
    )
    tests = str(Path(__file__).resolve().parents[2])
    subprocess.run([sys.executable, "-c", script, str(path), tests], check=True)
    assert _wal(path) > 0
    store = SQLiteStore(path)
    assert sorted(int(m.content.split()[0]) for m in store.list_all()) == list(range(40))
    store.close()


def test_a_reader_holding_an_old_snapshot_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    store = SQLiteStore(path)
    store.save(mem("first"))
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM em_memories").fetchone()[0] == 1
    for _ in range(3):
        with store.transaction():
            for i in range(200):
                store.save(mem(f"{i} {BIG}"))
    assert reader.execute("SELECT count(*) FROM em_memories").fetchone()[0] == 1
    reader.execute("COMMIT")
    assert reader.execute("SELECT count(*) FROM em_memories").fetchone()[0] == 601
    reader.close()
    store.save(mem("after"))  # a later commit checkpoints what the reader held back
    store.save(mem("again"))
    assert _wal(path) < 64 * 1024
    assert len(store) == 603
    store.close()


def test_an_in_memory_store_has_no_checkpointer() -> None:
    store = SQLiteStore(":memory:")
    assert store._checkpointer is None
    store.save(mem("kept"))
    assert len(store) == 1
    store.close()


def test_close_closes_the_checkpoint_connection(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    with store.transaction():
        for i in range(200):
            store.save(mem(f"{i} {BIG}"))
    checkpointer = store._checkpointer
    assert checkpointer is not None and checkpointer._conn is not None
    store.close()
    assert checkpointer._conn is None and not checkpointer.after_commit()
