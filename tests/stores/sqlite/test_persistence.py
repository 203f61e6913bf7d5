"""Durability of the SQLite stores (SPEC 8-9).

* Answers do not change across a restart: the same queries give bit-identical
  rankings, scores, signal breakdowns and post-retrieval tags in the live engine, in
  an engine closed and reopened in this process, and in two fresh processes (with
  different hash seeds). The affective state is restored at construction.
* ``encode_batch`` is one transaction: a process killed (SIGKILL) in the middle of a
  batch leaves an intact database holding only whole batches.
* A batch that fails with an exception leaves nothing behind, in memory or on disk.
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from emotional_memory import (
    CoreAffect,
    EmotionalMemory,
    SQLiteAffectiveStateStore,
    SQLiteStore,
)
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.replay import TickClock

DIM = 64
BUILD_START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
QUERY_START = datetime(2026, 3, 2, 18, 30, tzinfo=UTC)
SUBPROCESS_TIMEOUT = 120

# --------------------------------------------------------------------------- helpers

# The query runner, shared verbatim by this process and the child processes.
RUNNER = textwrap.dedent(
    '''
    import json
    from datetime import datetime, timedelta

    from emotional_memory import (
        CoreAffect, EmotionalMemory, SQLiteAffectiveStateStore, SQLiteStore,
    )
    from emotional_memory.embedders import HashingEmbedder
    from emotional_memory.replay import TickClock


    def affect(pair):
        return None if pair is None else CoreAffect(valence=pair[0], arousal=pair[1])


    def run_queries(engine, clock, start_iso, queries):
        """Run ``queries`` on ``engine``; a JSON-able record of everything observable.

        The clock restarts at ``start_iso`` (1 ms per reading) so that every run sees
        the same times whatever was read before (e.g. at construction).
        """
        clock.now = datetime.fromisoformat(start_iso)
        clock.step = timedelta(milliseconds=1)
        out = {"state_at_start": engine.save_state(), "results": []}
        for q in queries:
            if q.get("set") is not None:
                engine.set_affect(affect(q["set"]))
            exps = engine.retrieve_with_explanations(
                q["query"], top_k=q["top_k"], query_affect=affect(q.get("affect"))
            )
            out["results"].append([
                {
                    "id": e.memory.id,
                    "content": e.memory.content,
                    "score": e.score,
                    "raw": list(e.breakdown.raw_signals.as_tuple()),
                    "weights": list(e.breakdown.weights.as_tuple()),
                    "total": e.breakdown.total_score,
                    "activation": e.activation_level,
                    "pass1_rank": e.pass1_rank,
                    "pass2_rank": e.pass2_rank,
                    "seed": e.selected_as_seed,
                    "candidates": e.candidate_count,
                    "tag": e.memory.tag.model_dump(mode="json"),
                }
                for e in exps
            ])
        out["state_at_end"] = engine.save_state()
        out["memories"] = [m.model_dump(mode="json") for m in engine.list_all()]
        return json.loads(json.dumps(out))


    def reopen(store_path, state_path, start_iso):
        clock = TickClock(datetime.fromisoformat(start_iso))
        engine = EmotionalMemory(
            SQLiteStore(store_path),
            HashingEmbedder(dim=64),
            state_store=SQLiteAffectiveStateStore(state_path),
            clock=clock,
        )
        return engine, clock


    def run_reopened(store_path, state_path, start_iso, queries):
        engine, clock = reopen(store_path, state_path, start_iso)
        try:
            return run_queries(engine, clock, start_iso, queries)
        finally:
            engine.close()
    '''
)

_NS: dict[str, Any] = {}
exec(compile(RUNNER, "<persistence-runner>", "exec"), _NS)
run_queries = _NS["run_queries"]
run_reopened = _NS["run_reopened"]
reopen = _NS["reopen"]

# Few distinct top_k values: each new candidate-bank shape costs a JIT compile per process.
QUERIES: list[dict[str, Any]] = [
    {"query": "the production server crashed during the launch", "top_k": 3},
    {"query": "a calm walk in the garden with friends", "top_k": 5, "affect": [0.7, 0.2]},
    {"query": "budget meeting", "top_k": 2},
    {"query": "deadline panic at night", "top_k": 4, "set": [-0.8, 0.9]},
    {"query": "music and coffee on a rainy morning", "top_k": 5},
    {"query": "the production server crashed during the launch", "top_k": 3},
    {"query": "a surprise party", "top_k": 2, "set": [0.9, 0.8], "affect": [-0.2, 0.4]},
    {"query": "totally unrelated zebra quantum", "top_k": 4},
]

TOPICS = [
    "the production server crashed minutes before the launch demo",
    "we walked through the botanical garden with old friends",
    "the quarterly budget meeting ran two hours over",
    "a deadline slipped and the team panicked late at night",
    "coffee and quiet music while the rain kept falling",
    "my sister organised a surprise birthday party",
    "the flight was cancelled and we slept at the airport",
    "a code review found a subtle race condition",
    "the dog learned to open the garden gate",
    "an investor call went surprisingly well",
]


def _clone(src: Path, dst: Path) -> None:
    """Consistent copy of an SQLite database (WAL content included)."""
    s = sqlite3.connect(src)
    d = sqlite3.connect(dst)
    try:
        s.backup(d)
    finally:
        d.close()
        s.close()


def _paths(root: Path, layout: str) -> tuple[Path, Path]:
    store = root / "memories.db"
    state = store if layout == "same_file" else root / "state.db"
    return store, state


def _build(engine: EmotionalMemory, clock: TickClock) -> None:
    """30 memories with varied affect and times, then a few retrievals (side effects)."""
    for i in range(30):
        text = f"{TOPICS[i % len(TOPICS)]} (episode {i})"
        v = math.sin(i * 0.9)
        a = 0.5 + 0.45 * math.cos(i * 1.3)
        mode = i % 3
        if mode == 0:
            engine.set_affect(CoreAffect(valence=v, arousal=a))
            engine.encode(text, metadata={"i": i, "mode": "set_affect"})
        elif mode == 1:
            engine.encode(text, metadata={"i": i, "mode": "affect"},
                          affect=CoreAffect(valence=v, arousal=a, dominance=0.3))
        else:
            engine.encode(text)
        clock.advance(timedelta(minutes=7 * (i % 4)))
    for q, k in (("server crash", 3), ("garden friends", 2), ("panic deadline", 4)):
        engine.retrieve(q, top_k=k)
        clock.advance(timedelta(minutes=3))
    engine.retrieve_with_explanations("surprise", top_k=2,
                                      query_affect=CoreAffect(valence=0.8, arousal=0.7))


def _run_children(*runs: tuple[Path, Path, str]) -> list[dict[str, Any]]:
    """Run the queries in fresh processes (concurrently), one per ``(store, state, seed)``."""
    script = RUNNER + textwrap.dedent(
        """
        import sys
        args = json.loads(sys.argv[1])
        print(json.dumps(run_reopened(*args)))
        """
    )
    procs = []
    for store, state, hash_seed in runs:
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        args = json.dumps([str(store), str(state), QUERY_START.isoformat(), QUERIES])
        procs.append(subprocess.Popen(
            [sys.executable, "-c", script, args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        ))
    outputs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT)
            assert proc.returncode == 0, err
            outputs.append(json.loads(out))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    return outputs


# ------------------------------------------------------------ 1. restart determinism


@pytest.mark.parametrize("layout", ["same_file", "two_files"])
def test_answers_identical_across_restart_and_processes(tmp_path: Path, layout: str) -> None:
    base = tmp_path / "base"
    base.mkdir()
    store_path, state_path = _paths(base, layout)
    clock = TickClock(BUILD_START, step=timedelta(milliseconds=3))
    live = EmotionalMemory(
        SQLiteStore(store_path), HashingEmbedder(dim=DIM),
        state_store=SQLiteAffectiveStateStore(state_path), clock=clock,
    )
    _build(live, clock)
    assert len(live) == 30
    assert any(m.tag.retrieval_count > 0 for m in live.list_all())
    state_before = live.save_state()

    # Freeze the database as it is now; each run below gets its own copy, because
    # retrieval writes (reconsolidation, Hebbian links) and set_affect persists.
    snap = tmp_path / "snap"
    snap.mkdir()
    snap_store, snap_state = _paths(snap, layout)
    _clone(store_path, snap_store)
    if layout == "two_files":
        _clone(state_path, snap_state)

    def copy(name: str) -> tuple[Path, Path]:
        d = tmp_path / name
        d.mkdir()
        s, st = _paths(d, layout)
        _clone(snap_store, s)
        if layout == "two_files":
            _clone(snap_state, st)
        return s, st

    runs = {name: copy(name) for name in ("inproc", "child1", "child2", "check")}

    # The live engine (never closed), its clock moved to the common query start.
    live_out = run_queries(live, clock, QUERY_START.isoformat(), QUERIES)
    live.close()

    # Closed and reopened in this process: the state is restored at construction.
    s, st = runs["check"]
    reopened, _ = reopen(str(s), str(st), QUERY_START.isoformat())
    try:
        assert reopened.save_state() == state_before
        assert len(reopened) == 30
    finally:
        reopened.close()

    inproc = run_reopened(str(runs["inproc"][0]), str(runs["inproc"][1]),
                          QUERY_START.isoformat(), QUERIES)
    child1, child2 = _run_children((*runs["child1"], "1"), (*runs["child2"], "4242"))

    assert inproc["state_at_start"] == json.loads(json.dumps(state_before))
    assert [len(r) for r in inproc["results"]] == [q["top_k"] for q in QUERIES]
    assert child1 == child2
    assert inproc == child1
    assert live_out == inproc


@pytest.mark.parametrize("layout", ["same_file", "two_files"])
def test_state_store_tracks_every_state_change(tmp_path: Path, layout: str) -> None:
    store_path, state_path = _paths(tmp_path, layout)
    clock = TickClock(BUILD_START)
    engine = EmotionalMemory(
        SQLiteStore(store_path), HashingEmbedder(dim=DIM),
        state_store=SQLiteAffectiveStateStore(state_path), clock=clock,
    )
    engine.set_affect(CoreAffect(valence=-0.6, arousal=0.9))
    engine.encode("first", affect=CoreAffect(valence=0.4, arousal=0.2))
    engine.encode_batch(["second", "third"])
    engine.observe("fourth", affect=CoreAffect(valence=0.1, arousal=0.5))
    expected = engine.save_state()
    engine.close()
    again, _ = reopen(str(store_path), str(state_path), QUERY_START.isoformat())
    try:
        assert again.save_state() == expected
        assert [m.content for m in again.list_all()] == ["first", "second", "third"]
        again.reset_state()
        neutral = again.save_state()
    finally:
        again.close()
    third, _ = reopen(str(store_path), str(state_path), QUERY_START.isoformat())
    try:
        assert third.save_state() == neutral
    finally:
        third.close()


# ------------------------------------------------------------------- 2. kill test

BATCH = 400
N_BATCHES = 8

CHILD = textwrap.dedent(
    '''
    import os, sys, time
    from contextlib import contextmanager
    from datetime import datetime, timedelta, timezone
    from emotional_memory import EmotionalMemory, SQLiteStore
    from emotional_memory.embedders import HashingEmbedder

    path, batch, n_batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    # With a 4th argument k: in batch k (1-based), once the batch's uncommitted pages
    # reached the WAL, print "spilled" and stall there (the parent kills it then).
    stall_in = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    watch = {"batch": 0, "wal_at_begin": None, "told": False}
    T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    ticks = [0]

    def slow_clock():
        # One reading per memory inside the batch's transaction.
        ticks[0] += 1
        return T0 + timedelta(milliseconds=ticks[0])

    class LoudStore(SQLiteStore):
        """Reports when the outermost transaction begins and after it committed."""

        loud_depth = 0

        @contextmanager
        def transaction(self):
            self.loud_depth += 1
            if self.loud_depth == 1:
                watch["batch"] += 1
                wal = path + "-wal"
                watch["wal_at_begin"] = os.path.getsize(wal) if os.path.exists(wal) else 0
                print("begin", flush=True)
            try:
                with super().transaction():
                    yield
            finally:
                self.loud_depth -= 1
            if self.loud_depth == 0:
                print("end", flush=True)

    store = LoudStore(path)
    conn = getattr(store, "_conn", None)
    if conn is not None:
        # A tiny page cache spills uncommitted pages into the WAL mid-transaction,
        # so recovery has uncommitted frames to ignore.
        conn.execute("PRAGMA cache_size=8")
        def stall_once_spilled():
            # Called by SQLite every 1,000 VM instructions, so also in the middle of
            # the batch's writes (one burst per block of memories).
            if watch["batch"] == stall_in and store.loud_depth and not watch["told"]:
                wal = path + "-wal"
                if os.path.exists(wal) and os.path.getsize(wal) > watch["wal_at_begin"]:
                    watch["told"] = True
                    print("spilled", flush=True)
                    time.sleep(60)
            return 0

        conn.set_progress_handler(stall_once_spilled, 1000)
        print("spill", flush=True)
    engine = EmotionalMemory(store, HashingEmbedder(dim=64), clock=slow_clock)
    texts = __TEXTS__
    for b in range(n_batches):
        engine.encode_batch(texts(b, batch), [{"batch": b, "i": i} for i in range(batch)])
        print(f"committed {b + 1}", flush=True)
    print("done", flush=True)
    '''
)

TEXTS_SRC = (
    "lambda b, n: [f'batch {b} item {i} ' + ' '.join("
    "['server', 'garden', 'coffee', 'launch', 'rain', 'budget', 'party', 'flight',"
    " 'review', 'music', 'deadline'][(i * k + b) % 11] for k in (1, 3, 7)) for i in range(n)]"
)
TEXTS = eval(TEXTS_SRC)


def _read_line(proc: subprocess.Popen[str], deadline: float) -> str | None:
    assert proc.stdout is not None
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return None
    ready, _, _ = select.select([proc.stdout], [], [], remaining)
    if not ready:
        return None
    return proc.stdout.readline()


def _check_db(path: Path) -> int:
    """Open, integrity-check and verify every memory; return the number of memories."""
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()
    store = SQLiteStore(path)
    try:
        memories = store.list_all()
        n = len(memories)
        ids = {m.id for m in memories}
        assert len(ids) == n
        expected = [t for b in range(n // BATCH + 1) for t in TEXTS(b, BATCH)][:n]
        assert [m.content for m in memories] == expected
        emb = HashingEmbedder(dim=DIM)
        n_links = 0
        for k, m in enumerate(memories):
            assert m.metadata == {"batch": k // BATCH, "i": k % BATCH}
            assert m.embedding is not None and len(m.embedding) == DIM
            assert all(math.isfinite(x) for x in m.embedding)
            ref = emb.embed(m.content)
            assert max(abs(x - y) for x, y in zip(m.embedding, ref, strict=True)) < 1e-6
            assert m.tag.timestamp is not None
            for link in m.tag.resonance_links:
                assert link.source_id == m.id
                assert link.target_id in ids, "link to a memory of a rolled-back batch"
                n_links += 1
        if n:
            assert n_links > 0
        assert store.dim in (None, DIM)
    finally:
        store.close()
    return n


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")
@pytest.mark.parametrize(("after_batches", "delay"), [(1, 0.02), (1, 0.3), (2, 0.5)])
def test_sigkill_mid_batch_leaves_only_whole_batches(
    tmp_path: Path, after_batches: int, delay: float
) -> None:
    db = tmp_path / "kill.db"
    script = CHILD.replace("__TEXTS__", TEXTS_SRC)
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(db), str(BATCH), str(N_BATCHES)]
        + ([str(after_batches + 1)] if delay >= 0.3 else []),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    seen: list[str] = []
    try:
        deadline = time.monotonic() + SUBPROCESS_TIMEOUT
        # Wait for `after_batches` committed batches, then for the next batch's
        # transaction to begin; kill inside it (early, or stalled after its first
        # uncommitted pages reached the WAL).
        while seen.count("begin") <= after_batches:
            line = _read_line(proc, deadline)
            if not line:
                err = proc.stderr.read() if proc.stderr and proc.poll() is not None else ""
                pytest.fail(f"child stalled or died after {seen}; stderr: {err}")
            seen.append(line.strip())
        wal = Path(f"{db}-wal")
        wal_at_begin = wal.stat().st_size if wal.exists() else 0
        if delay >= 0.3:  # kill once the batch's uncommitted pages reached the WAL
            while (line := _read_line(proc, deadline)) and line.strip() != "spilled":
                seen.append(line.strip())
            assert line, f"the child never spilled: {seen}"
        time.sleep(delay)
        wal_at_kill = wal.stat().st_size if wal.exists() else 0
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout is not None
    seen += [ln.strip() for ln in proc.stdout.read().splitlines()]
    assert seen.count("end") == after_batches, f"the kill missed the transaction: {seen}"
    assert seen[-1] == "begin", seen
    reported = sum(1 for ln in seen if ln.startswith("committed"))
    assert reported == after_batches
    if "spill" in seen and delay >= 0.3:
        # Uncommitted pages of the killed batch reached the WAL: recovery must skip them.
        assert wal_at_kill > wal_at_begin

    n = _check_db(db)
    assert n % BATCH == 0, f"{n} memories: a partial batch survived the kill"
    assert n == reported * BATCH  # every reported batch survived, the killed one vanished

    # The database stays writable after recovery.
    engine = EmotionalMemory(SQLiteStore(db), HashingEmbedder(dim=DIM), clock=TickClock())
    try:
        engine.encode_batch(TEXTS(n // BATCH, BATCH),
                            [{"batch": n // BATCH, "i": i} for i in range(BATCH)])
    finally:
        engine.close()
    assert _check_db(db) == n + BATCH


# ------------------------------------------------ 3. failed batch leaves no trace


class _FailingClock:
    """A TickClock that raises on a chosen reading."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.inner = TickClock(BUILD_START)
        self.calls = 0
        self.fail_at = fail_at

    def __call__(self) -> datetime:
        self.calls += 1
        if self.fail_at is not None and self.calls == self.fail_at:
            raise RuntimeError("clock failure")
        return self.inner()


def _dump(engine: EmotionalMemory) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json") for m in engine.list_all()]


@pytest.mark.parametrize("failure", ["clock", "metadata"])
@pytest.mark.parametrize("layout", ["same_file", "two_files"])
def test_failed_encode_batch_persists_nothing(tmp_path: Path, failure: str, layout: str) -> None:
    store_path, state_path = _paths(tmp_path, layout)
    clock = _FailingClock()
    engine = EmotionalMemory(
        SQLiteStore(store_path), HashingEmbedder(dim=DIM),
        state_store=SQLiteAffectiveStateStore(state_path), clock=clock,
    )
    engine.set_affect(CoreAffect(valence=0.3, arousal=0.6))
    engine.encode_batch([f"{t} (kept)" for t in TOPICS])
    engine.retrieve("server launch", top_k=3)
    before = _dump(engine)
    state_before = engine.save_state()
    assert any(m["tag"]["resonance_links"] for m in before)

    texts = [f"{t} (doomed)" for t in TOPICS]  # similar texts: they would link back
    metadata: list[dict[str, Any] | None] = [{"k": i} for i in range(len(texts))]
    if failure == "clock":
        clock.fail_at = clock.calls + 6  # the 6th memory of the batch
        with pytest.raises(RuntimeError, match="clock failure"):
            engine.encode_batch(texts, metadata)
        clock.fail_at = None
    else:
        metadata[5] = {"bad": object()}  # not JSON-serialisable: fails at save
        with pytest.raises(TypeError):
            engine.encode_batch(texts, metadata)

    assert _dump(engine) == before
    assert engine.save_state() == state_before
    engine.close()

    again = EmotionalMemory(
        SQLiteStore(store_path), HashingEmbedder(dim=DIM),
        state_store=SQLiteAffectiveStateStore(state_path), clock=TickClock(QUERY_START),
    )
    try:
        assert _dump(again) == before
        assert again.save_state() == state_before
        assert not any("doomed" in m.content for m in again.list_all())
        # Still usable: the same batch, now valid, goes through.
        again.encode_batch(texts)
        assert len(again) == 2 * len(TOPICS)
    finally:
        again.close()
    conn = sqlite3.connect(store_path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("SELECT COUNT(*) FROM em_memories").fetchone() == (2 * len(TOPICS),)
    finally:
        conn.close()
