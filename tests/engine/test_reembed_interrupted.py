"""A re-embedding killed (SIGKILL, a real process) half-way through a batch, then
resumed: on an SQLite file and on a real PostgreSQL table.

The oracle: the killed batch left nothing (its transaction never committed), the
store is refused to engines of either embedder until the run is resumed, the resumed
run finishes at the killed batch's start, and afterwards every memory's vector is
exactly the new embedder's vector of its content (none lost, none duplicated,
nothing else changed) and the store records the new embedder.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from emotional_memory import EmotionalMemory
from emotional_memory.embedder_identity import (
    REEMBED_SETTING,
    ReembedInProgressError,
    record_embedder,
    recorded_embedder,
)
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.reembed import reembed_store
from emotional_memory.stores.postgres import PostgresStore
from emotional_memory.stores.sqlite import SQLiteStore
from support.paths import SRC, SUPPORT, TESTS

OLD = HashingEmbedder(dim=32)
NEW = HashingEmbedder(dim=32, seed=7)
TEXTS = [f"memory {i}: {['rain', 'storm', 'harbour', 'coffee'][i % 4]} {i * 5 % 11}"
         for i in range(17)]
_TABLES = itertools.count()


def _kill_half_way(kind: str, target: str, table: str) -> None:
    """Run the worker (batches of 4) and SIGKILL it once 2 memories of the third
    batch were written inside its transaction."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)]),
           "JAX_PLATFORMS": "cpu"}
    proc = subprocess.Popen(
        [sys.executable, str(SUPPORT / "reembed_worker.py"), kind, target, table, "4", "10"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line == "hanging\n", proc.stderr.read() if proc.stderr else ""
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL


def _check(store: Any, before: list[dict[str, Any]]) -> None:
    with pytest.raises(ReembedInProgressError):
        EmotionalMemory(store, OLD)
    with pytest.raises(ReembedInProgressError):
        EmotionalMemory(store, NEW)
    assert recorded_embedder(store) == OLD.identity  # not the new one yet
    mid = [m.model_dump() for m in store.list_all()]
    assert len(mid) == len(before)
    renewed = [m["embedding"] == pytest.approx(NEW.embed(m["content"]), abs=1e-6)
               for m in mid]
    assert renewed == [True] * 8 + [False] * (len(TEXTS) - 8)  # two whole batches
    report = reembed_store(store, NEW, batch_size=4, progress=False)
    assert (report.memories, report.resumed_from, report.reembedded) == (17, 8, 9)
    assert (report.previous, report.current) == (OLD.identity, NEW.identity)
    after = [m.model_dump() for m in store.list_all()]
    assert [m["id"] for m in after] == [m["id"] for m in before]
    for old, new in zip(before, after, strict=True):
        assert new["embedding"] == pytest.approx(NEW.embed(old["content"]), abs=1e-6)
        assert {k: v for k, v in new.items() if k != "embedding"} == {
            k: v for k, v in old.items() if k != "embedding"}
    assert recorded_embedder(store) == NEW.identity
    assert store.setting(REEMBED_SETTING) is None
    hits = EmotionalMemory(store, NEW).retrieve(TEXTS[5], top_k=1)
    assert hits[0].content == TEXTS[5]


def _fill(store: Any) -> list[dict[str, Any]]:
    record_embedder(store, OLD)
    engine = EmotionalMemory(store, OLD)
    engine.encode_batch(TEXTS[:9])
    for text in TEXTS[9:]:
        engine.encode(text)
    return [m.model_dump() for m in store.list_all()]


def test_sqlite_killed_mid_batch_resumes(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with SQLiteStore(path) as store:
        before = _fill(store)
    _kill_half_way("sqlite", str(path), "-")
    with SQLiteStore(path) as store:
        _check(store, before)


def test_postgres_killed_mid_batch_resumes(pg_dsn: str) -> None:
    table = f"crash{next(_TABLES)}"
    with PostgresStore(pg_dsn, table=table) as store:
        before = _fill(store)
    _kill_half_way("postgres", pg_dsn, table)
    with PostgresStore(pg_dsn, table=table) as store:
        _check(store, before)


class _Gated:
    """An embedder (``identity``, ``embed_batch``) calling ``before(call)`` before it
    embeds its ``call``-th batch (1-based)."""

    def __init__(self, embedder: HashingEmbedder, before: Any) -> None:
        self.identity = embedder.identity
        self.inner = embedder
        self.before = before
        self.calls = 0

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        self.before(self.calls)
        return self.inner.embed_batch(texts)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_two_runs_at_once_never_leave_vectors_of_two_embedders(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two re-embeddings of one store, to two embedders, started together (both read
    "no run in progress"): the second wrote its batches and recorded its embedder, then
    the first went on over them and recorded its own, so the first batch's vectors
    were of the embedder the store did not record. The later batch is refused now."""
    import threading

    def opened() -> Any:
        if kind == "sqlite":
            return SQLiteStore(tmp_path / "m.db")
        return PostgresStore(request.getfixturevalue("pg_dsn"), table=table)

    table = f"race{next(_TABLES)}"
    first, second = opened(), opened()
    try:
        before = _fill(first)
        other = HashingEmbedder(dim=32, seed=11)
        b_read, a_wrote_one, b_done = threading.Event(), threading.Event(), threading.Event()
        errors: list[BaseException] = []

        def gate_a(call: int) -> None:
            if call == 1:  # once the second run found no run in progress
                assert b_read.wait(120)
            if call == 2:  # the first batch committed
                a_wrote_one.set()
                assert b_done.wait(120)

        def gate_b(call: int) -> None:
            if call == 1:
                b_read.set()
                assert a_wrote_one.wait(120)

        def run_b() -> None:
            try:
                reembed_store(second, _Gated(other, gate_b), batch_size=4, progress=False)
            except BaseException as exc:  # checked below
                errors.append(exc)
            finally:
                b_done.set()

        thread = threading.Thread(target=run_b)
        thread.start()
        reembed_store(first, _Gated(NEW, gate_a), batch_size=4, progress=False)
        thread.join(120)
        recorded = recorded_embedder(first)
        stored = [m.model_dump() for m in first.list_all()]
        mixed = {e.identity for old, new in zip(before, stored, strict=True) for e in (NEW, other)
                 if new["embedding"] == pytest.approx(e.embed(old["content"]), abs=1e-6)}
        assert mixed == {recorded}, (mixed, recorded)
        assert len(errors) == 1 and isinstance(errors[0], ValueError)
        assert "another re-embedding" in str(errors[0])
        assert recorded == NEW.identity and first.setting(REEMBED_SETTING) is None
    finally:
        first.close()
        second.close()


def test_the_bar_counts_memories_and_a_resumed_run_starts_where_it_stopped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bar counted batches and began at 0 of the batches left on a resumed run
    (0/3 for a run resumed at 8 of 17 memories); a store with nothing to re-embed drew
    an empty 0/0 bar."""
    with SQLiteStore(tmp_path / "m.db") as store:
        _fill(store)
        with pytest.raises(RuntimeError):
            reembed_store(store, _Gated(NEW, _fail_at(3)), batch_size=4, progress=False)
        capsys.readouterr()
        reembed_store(store, NEW, batch_size=4, progress=True)
        frames = [f for f in re.split(r"[\r\n]", capsys.readouterr().err) if f.strip()]
        assert frames and all(f.startswith("re-embedding:") for f in frames)
        assert " 8/17 [" in frames[0] and " 17/17 [" in frames[-1], frames
        assert "memory/s" in frames[-1] or "s/memory" in frames[-1], frames
    with SQLiteStore(tmp_path / "empty.db") as empty:
        assert reembed_store(empty, NEW, progress=True).memories == 0
    assert capsys.readouterr().err == ""


def _fail_at(batch: int) -> Any:
    def before(call: int) -> None:
        if call == batch:
            raise RuntimeError("the embedding server went away")
    return before
