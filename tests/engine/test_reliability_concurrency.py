"""Reliability under concurrency: one engine shared by threads, cancelled async calls, event
loops, state methods from a loop, and nothing a caller holds aliasing the store.

Every case uses the real thing (threads, processes, SQLite files in ``tmp_path``) and
is bounded in count; nothing asserts wall-clock time.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from emotional_memory import (
    AsyncEmotionalMemory,
    CoreAffect,
    EmotionalMemory,
    InMemoryStore,
    SQLiteStore,
)
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.state_stores import InMemoryAffectiveStateStore, SQLiteAffectiveStateStore
from support.reliability import (
    WORDS,
    _check_consistent,
    _text,
)

# ---------------------------------------------------------------- 1. threads


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_sync_engine_shared_by_eight_threads(kind: str, tmp_path: Path) -> None:
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "m.db")
    engine = EmotionalMemory(store, HashingEmbedder(dim=32))
    for i in range(8):
        engine.encode(f"seed {i} " + WORDS[i])
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            start.wait()
            for _ in range(12):
                op = rng.random()
                if op < 0.4:
                    engine.encode(_text(rng))
                elif op < 0.8:
                    engine.retrieve(_text(rng), top_k=3)
                else:
                    ids = [m.id for m in engine.list_all()]
                    if ids:
                        engine.delete(rng.choice(ids))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    _check_consistent(engine)
    if kind == "sqlite":
        # The file holds exactly what the engine saw.
        seen = {m.id: m for m in engine.list_all()}
        engine.close()
        with SQLiteStore(tmp_path / "m.db") as reopened:
            again = {m.id: m for m in reopened.list_all()}
        assert again.keys() == seen.keys()
        for mid, m in again.items():
            assert m.tag == seen[mid].tag


# ---------------------------------------------------------------- 2. async


class _GatedEmbedder:
    """A hashing embedder that records how many embed calls run at once and can be
    held inside ``embed`` until released (no sleeps: events decide the order)."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(dim=16)
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self.active = 0
        self.max_active = 0
        self.calls: list[str] = []
        self._guard = threading.Lock()

    def embed(self, text: str) -> list[float]:
        with self._guard:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.calls.append(text)
        self.entered.set()
        try:
            assert self.release.wait(timeout=60)
            return self.inner.embed(text)
        finally:
            with self._guard:
                self.active -= 1

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [self.embed(t) for t in texts]


def test_cancelled_async_call_completes_whole_and_never_overlaps_the_next() -> None:
    embedder = _GatedEmbedder()
    engine = AsyncEmotionalMemory(InMemoryStore(), embedder)

    async def scenario() -> None:
        embedder.release.clear()
        embedder.entered.clear()
        first = asyncio.ensure_future(asyncio.wait_for(engine.encode("first event"), 30))
        await asyncio.to_thread(embedder.entered.wait, 30)
        first.cancel()  # the worker is inside embed: the caller stops waiting
        with pytest.raises(asyncio.CancelledError):
            await first
        second = asyncio.ensure_future(engine.encode("second event"))
        for _ in range(50):  # give the second call every chance to start early
            await asyncio.sleep(0.01)
            if len(embedder.calls) > 1:
                break
        assert embedder.calls == ["first event"]  # it has not started
        embedder.release.set()
        stored = await second
        assert stored.content == "second event"

    asyncio.run(scenario())
    assert embedder.max_active == 1
    contents = [m.content for m in engine.engine.list_all()]
    assert contents == ["first event", "second event"]  # the first completed entirely


def test_async_call_cancelled_before_its_turn_never_runs() -> None:
    embedder = _GatedEmbedder()
    engine = AsyncEmotionalMemory(InMemoryStore(), embedder)

    async def scenario() -> None:
        embedder.release.clear()
        embedder.entered.clear()
        first = asyncio.ensure_future(engine.encode("first"))
        await asyncio.to_thread(embedder.entered.wait, 30)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(engine.encode("never"), 0.01)
        embedder.release.set()
        await first

    asyncio.run(scenario())
    assert [m.content for m in engine.engine.list_all()] == ["first"]
    assert embedder.calls == ["first"]


def test_one_async_engine_across_two_event_loops() -> None:
    engine = AsyncEmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16))

    async def burst(tag: str) -> None:
        # Concurrent calls contend for the turn lock (binding it to this loop).
        await asyncio.gather(*(engine.encode(f"{tag} {i}") for i in range(4)))
        await asyncio.gather(*(engine.retrieve(tag, top_k=2) for _ in range(3)))

    asyncio.run(burst("first loop"))
    asyncio.run(burst("second loop"))
    assert len(engine.engine) == 8


# ---------------------------------------------------------------- 5. aliasing


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_nothing_a_caller_holds_aliases_the_store(kind: str, tmp_path: Path) -> None:
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "m.db")
    engine = EmotionalMemory(store, HashingEmbedder(dim=8))
    meta = {"tags": ["a"], "nested": {"k": [1, 2]}}
    memory = engine.encode("rain", metadata=meta)
    engine.encode("rain again")  # links back to the first memory
    expected = engine.get(memory.id)
    assert expected is not None
    # The caller's dict, the returned memory and a fetched one are all private.
    meta["tags"].append("caller")
    meta["nested"]["k"].append(3)
    memory.metadata["tags"].append("returned")
    assert memory.embedding is not None
    memory.embedding[0] = 123.0
    fetched = engine.get(memory.id)
    assert fetched is not None and fetched.embedding is not None
    fetched.metadata["nested"]["k"].clear()
    fetched.embedding[1] = -5.0
    fetched.tag.resonance_links.clear()
    for listed in [*engine.list_all(), *store.search_by_embedding([1.0] * 8, 2)]:
        listed.metadata.clear()
        assert listed.embedding is not None
        listed.embedding.clear()
    again = engine.get(memory.id)
    assert again == expected
    assert again.metadata == {"tags": ["a"], "nested": {"k": [1, 2]}}


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_tag_only_updates_keep_the_store_private(kind: str, tmp_path: Path) -> None:
    """A retrieve's tag-only writes and an update with an equal embedding list share no
    list with the caller: mutating what was returned or passed changes nothing stored."""
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "m.db")
    engine = EmotionalMemory(store, HashingEmbedder(dim=8))
    first = engine.encode("rain on the bridge")
    engine.encode("rain again")
    before = engine.get(first.id)
    assert before is not None and before.embedding is not None
    for returned in engine.retrieve("rain", top_k=2):  # tag-only updates inside
        assert returned.embedding is not None
        returned.embedding[0] = 77.0
    fetched = engine.get(first.id)
    assert fetched is not None and fetched.embedding == before.embedding
    assert fetched.tag.retrieval_count == before.tag.retrieval_count + 1
    # an explicit update whose embedding list equals the stored one, then mutated
    changed = fetched.model_copy(update={"content": "rain on the old bridge"})
    store.update(changed)
    assert changed.embedding is not None
    changed.embedding[1] = -9.0
    again = engine.get(first.id)
    assert again is not None
    assert again.embedding == before.embedding and again.content == "rain on the old bridge"


def test_store_save_copies_the_callers_lists() -> None:
    store = InMemoryStore()
    engine = EmotionalMemory(store, HashingEmbedder(dim=8))
    template = engine.encode("x", metadata={"a": [1]})
    mine = template.model_copy(update={"id": "mine", "embedding": [1.0, 2.0, 3.0, 4.0] * 2,
                                       "metadata": {"a": [1]}})
    store.save(mine)
    mine.metadata["a"].append(2)
    assert mine.embedding is not None
    mine.embedding[0] = 9.0
    kept = store.get("mine")
    assert kept is not None
    assert kept.metadata == {"a": [1]} and kept.embedding == [1.0, 2.0, 3.0, 4.0] * 2


def test_state_methods_never_block_an_event_loop_but_wait_elsewhere() -> None:
    embedder = _GatedEmbedder()
    engine = EmotionalMemory(InMemoryStore(), embedder)
    embedder.release.clear()
    embedder.entered.clear()
    worker = threading.Thread(target=engine.encode, args=("held inside embed",))
    worker.start()
    assert embedder.entered.wait(30)  # the encode holds the engine lock now

    async def on_the_loop() -> None:
        # Returns at once: blocking here could deadlock a worker waiting for the loop.
        engine.set_affect(CoreAffect(valence=0.5, arousal=0.5))
        engine.reset_state()

    asyncio.run(on_the_loop())
    done = threading.Event()

    def off_the_loop() -> None:
        engine.set_affect(CoreAffect(valence=-0.5, arousal=0.5))
        done.set()

    other = threading.Thread(target=off_the_loop)
    other.start()
    assert not done.wait(0.2)  # a plain thread waits for the running operation
    embedder.release.set()
    worker.join(30)
    other.join(30)
    assert done.is_set() and len(engine) == 1
    assert engine.get_state().core_affect.valence == -0.5


def test_async_scoped_never_waits_on_the_loop_for_a_running_operation() -> None:
    """``AsyncEmotionalMemory.scoped`` (synchronous, on the loop) restores the new
    view's persisted state without waiting for an overlapping operation in flight:
    that operation may be waiting for the very loop (async stores and embedders), so
    waiting deadlocked. Here the running encode is held until the test releases it
    after ``scoped`` returned; on a build that waits, the embedder gives up after 10 s
    and the check below fails instead of hanging."""
    states = InMemoryAffectiveStateStore()
    seeded = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), state_store=states)
    seeded.scoped("alice").set_affect(CoreAffect(valence=0.75, arousal=0.25))
    held = threading.Event()
    released_by_test = threading.Event()
    waits: list[bool] = []  # True: the test released the embed, False: it gave up

    class HeldEmbedder:
        inner = HashingEmbedder(dim=16)

        def embed(self, text: str) -> list[float]:
            held.set()
            waits.append(released_by_test.wait(timeout=10))
            return self.inner.embed(text)

        def embed_batch(self, texts: list[str]) -> list[list[float]]:
            return [self.embed(t) for t in texts]

    engine = AsyncEmotionalMemory(InMemoryStore(), HeldEmbedder(), state_store=states)

    async def scenario() -> None:
        root_encode = asyncio.ensure_future(engine.encode("root event"))
        await asyncio.to_thread(held.wait, 30)  # the root's turn is taken now
        view = engine.scoped("alice")
        released_by_test.set()
        await root_encode
        assert view.get_state().core_affect.valence == pytest.approx(0.75)
        assert await view.count() == 0

    asyncio.run(scenario())
    assert waits == [True]  # scoped() returned while the root encode was held


# ------------------------------------------- 6. the loop and the store's lock

_LOOP_AND_STORE_LOCK_SCRIPT = """
import asyncio, faulthandler, os, sys, tempfile
from emotional_memory import AsyncEmotionalMemory, CoreAffect, SQLiteStore
from emotional_memory.appraisal import AppraisalVector
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.state_stores import SQLiteAffectiveStateStore

faulthandler.dump_traceback_later(60, exit=True)  # a hang is a failure, not a stall
operation, action = sys.argv[1], sys.argv[2]
store = SQLiteStore(os.path.join(tempfile.mkdtemp(), "m.db"))
states = SQLiteAffectiveStateStore.from_store(store)  # shares the store's lock
plain = HashingEmbedder(dim=16)

class Held:
    # an async component that answers only once the loop has run ``action``
    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.go = asyncio.Event()

    async def wait(self) -> None:
        self.entered.set()
        await self.go.wait()

class Appraiser(Held):
    async def appraise(self, text, context=None):
        await self.wait()
        return AppraisalVector(novelty=0.5, goal_relevance=0.5, coping_potential=0.5,
                               norm_congruence=0.2, self_relevance=0.4)

class Embedder(Held):
    armed = False
    async def embed(self, text):
        if self.armed:
            await self.wait()
        return plain.embed(text)
    async def embed_batch(self, texts):
        return [await self.embed(t) for t in texts]

async def main() -> None:
    held = Appraiser() if operation == "encode_batch" else Embedder()
    if operation == "encode_batch":
        engine = AsyncEmotionalMemory(store, plain, held, state_store=states)
        # given affects for some events: the others are appraised in the batch's turn
        task = asyncio.ensure_future(engine.encode_batch(
            ["calm sea", "storm"], affect=[CoreAffect(valence=0.2, arousal=0.1), None]))
    else:
        engine = AsyncEmotionalMemory(store, held, state_store=states)
        first = await engine.encode("calm sea")
        held.armed = True
        task = asyncio.ensure_future(engine.update_memory(first.id, content="storm"))
    await held.entered.wait()  # the worker waits for the loop now
    if action == "set_affect":
        engine.set_affect(CoreAffect(valence=0.5, arousal=0.5))
    else:
        engine.scoped("alice")
    held.go.set()
    await task
    print("done", len(store), flush=True)

asyncio.run(main())
"""


@pytest.mark.parametrize("operation", ["encode_batch", "update_memory"])
@pytest.mark.parametrize("action", ["set_affect", "scoped"])
def test_a_worker_never_waits_for_the_loop_holding_the_stores_lock(
    operation: str, action: str
) -> None:
    """An operation calls its async components (bridged to the loop) with the SQLite
    store's lock free: the loop's synchronous state methods and ``scoped`` use a
    state store sharing that lock (``from_store``). ``encode_batch`` appraised the
    events without a given affect, and ``update_memory`` embedded a new content,
    inside the store's transaction: the loop then waited for the lock and the worker
    for the loop (a deadlock)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _LOOP_AND_STORE_LOCK_SCRIPT, operation, action],
            capture_output=True, text=True, timeout=180, env=env, check=False,
        )  # the timeout guards against a hang; it measures nothing
    except subprocess.TimeoutExpired:
        pytest.fail(f"{operation} and the loop's {action} deadlocked")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["done", "2" if operation == "encode_batch" else "1"]


# ------------------------------------ 7. two engines on one store, one deleting


class _DeleteBeforeReadBack(InMemoryStore):
    """An in-memory store that, as an encode reads its new memory back, first lets
    another engine on the store delete it from another thread (the interleaving of a
    delete landing right after the encode's commit). The deleting thread is waited
    for a short while only: when the encode still holds the store, it runs after."""

    def __init__(self) -> None:
        super().__init__()
        self.other: EmotionalMemory | None = None
        self.deleters: list[threading.Thread] = []

    def _link_stored(self, memory: Any) -> Any:
        if self.other is not None and not self.deleters:
            deleter = threading.Thread(target=self.other.delete, args=(memory.id,))
            self.deleters.append(deleter)
            deleter.start()
            deleter.join(timeout=1)  # an ordering aid: nothing is asserted on time
        return super()._link_stored(memory)


@pytest.mark.parametrize("batch", [False, True])
def test_an_encode_answers_its_memories_though_another_engine_deletes_them(
    batch: bool,
) -> None:
    """Two engines on one store (``as_async(engine)`` makes such a pair): an encode's
    answer is read inside its own transaction. Read after the commit, a memory the
    other engine deleted meanwhile raised ``KeyError`` from an encode that had
    stored everything."""
    store = _DeleteBeforeReadBack()
    engine = EmotionalMemory(store, HashingEmbedder(dim=16))
    engine.encode("rain on the bridge")
    store.other = EmotionalMemory(store, HashingEmbedder(dim=16))
    if batch:
        got = engine.encode_batch(["rain at night", "rain and storm"])
    else:
        got = [engine.encode("rain at night")]
    assert [m.content for m in got] == (
        ["rain at night", "rain and storm"] if batch else ["rain at night"]
    )
    assert got[0].tag.resonance_links  # linked to the first memory, as encoded
    for deleter in store.deleters:
        deleter.join(timeout=60)
        assert not deleter.is_alive()
    assert got[0].id not in {m.id for m in engine.list_all()}  # the delete ran after
    _check_consistent(engine)


class _ChangeBeforeTransaction(SQLiteStore):
    """A store on which another engine changes a link target (``change``) just before
    the next transaction begins: what a second process does between an import's checks
    and its writes."""

    change: Any = None

    def transaction(self) -> Any:
        change, self.change = self.change, None
        if change is not None:
            change()
        return super().transaction()


@pytest.mark.parametrize("change", ["delete", "move"])
def test_an_import_checks_its_link_targets_again_inside_its_transaction(
    change: str, tmp_path: Path,
) -> None:
    """An import's links were checked before its transaction only: a target another
    engine deleted (or moved out of the record's scope) in between was linked all the
    same, a dangling link (or one another scope's view shows). Checked again inside,
    the import is refused whole."""
    store = _ChangeBeforeTransaction(tmp_path / "m.db")
    engine = EmotionalMemory(store, HashingEmbedder(dim=16))
    view = engine.scoped("a")
    target = view.encode("rain on the bridge")
    holder = view.encode("rain on the bridge again")
    data = [r for r in view.export_memories() if r["id"] == holder.id]
    engine.delete(holder.id)
    other = EmotionalMemory(store, HashingEmbedder(dim=16))
    moved = {**next(r for r in other.export_memories() if r["id"] == target.id),
             "scope": ["b"]}
    store.change = (lambda: other.delete(target.id)) if change == "delete" else (
        lambda: other.import_memories([{**moved, "tag": {**moved["tag"],
                                                         "resonance_links": []}}],
                                      overwrite=True))
    with pytest.raises(ValueError, match=r"data\[0\]\.tag\.resonance_links\[0\]\.target_id"):
        view.import_memories(data)
    assert view.get(holder.id) is None
    _check_consistent(engine)


# ------------------------------- 8. disjoint scopes at once equal a serial replay

_SCOPES = [("a",), ("b",), ("c", "x"), ("c", "y")]


def _scope_ops(seed: int, n: int = 24) -> list[tuple[str, Any]]:
    rng, out, k = random.Random(seed), [], 0
    for _ in range(n):
        r = rng.random()
        if r < 0.3:
            out.append(("encode", f"s{seed} e{k} {_text(rng)}"))
            k += 1
        elif r < 0.45:
            out.append(("batch", [f"s{seed} e{k + j} {_text(rng)}" for j in range(3)]))
            k += 3
        elif r < 0.7:
            out.append(("retrieve", _text(rng)))
        elif r < 0.8:
            out.append(("delete", rng.random()))
        elif r < 0.9:
            out.append(("affect", (rng.uniform(-1, 1), rng.uniform(0, 1))))
        else:
            out.append(("update", rng.random()))
    return out


def _apply(view: EmotionalMemory, ops: list[tuple[str, Any]]) -> None:
    for op, arg in ops:
        if op == "encode":
            view.encode(arg)
        elif op == "batch":
            view.encode_batch(arg)
        elif op == "retrieve":
            view.retrieve(arg, top_k=3)
        elif op == "affect":
            view.set_affect(CoreAffect(valence=arg[0], arousal=arg[1]))
        elif memories := view.list_all():
            target = memories[int(arg * len(memories))]
            if op == "delete":
                view.delete(target.id)
            else:
                view.update_memory(target.id, content=target.content + " again")


def _canon(view: EmotionalMemory) -> tuple[list[Any], dict[str, Any]]:
    """The view's memories and state, ids replaced by contents (unique here)."""
    exported = view.export_memories()
    name = {m["id"]: m["content"] for m in exported}
    out = []
    for m in exported:
        links = sorted(
            (name[lk["source_id"]], name[lk["target_id"]], lk["strength"], lk["link_type"])
            for lk in m["tag"]["resonance_links"]
        )
        out.append({**m, "id": None, "tag": {**m["tag"], "resonance_links": links}})
    return out, view.save_state()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_disjoint_scopes_run_at_once_as_each_alone(kind: str, tmp_path: Path) -> None:
    """README ("Threads"): calls on disjoint scopes run at once and share nothing: each
    scope's memories, links and persisted state after four threads drove four
    disjoint scopes equal those of its operations replayed alone into a fresh engine
    (each thread's clock ticks on its own, so the replay sees the same times)."""
    ticks = threading.local()

    def clock() -> datetime:
        ticks.n = getattr(ticks, "n", 0) + 1
        return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=ticks.n)

    def make(name: str) -> EmotionalMemory:
        if kind == "memory":
            return EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=32),
                                   state_store=InMemoryAffectiveStateStore(), clock=clock)
        store = SQLiteStore(tmp_path / f"{name}.db")
        return EmotionalMemory(store, HashingEmbedder(dim=32), clock=clock,
                               state_store=SQLiteAffectiveStateStore.from_store(store))

    plans = {scope: _scope_ops(seed) for seed, scope in enumerate(_SCOPES)}
    engine = make("shared")
    start = threading.Barrier(len(_SCOPES))
    errors: list[BaseException] = []

    def drive(scope: tuple[str, ...]) -> None:
        try:
            ticks.n = 0
            view = engine.scoped(*scope)
            start.wait(timeout=60)
            _apply(view, plans[scope])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=drive, args=(s,)) for s in _SCOPES]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads) and errors == []
    for scope in _SCOPES:
        alone = make("alone_" + "_".join(scope))
        ticks.n = 0
        replayed = alone.scoped(*scope)
        _apply(replayed, plans[scope])
        assert _canon(engine.scoped(*scope)) == _canon(replayed), scope
    _check_consistent(engine)
