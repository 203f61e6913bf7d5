"""The store contract, part 7: persistence, on the durable backends.

* A store closed and opened again holds the same memories in the same order, with
  the same dimension, scopes and expiry, and numbers new memories after the old ones.
* An engine over the reopened store answers (scores, breakdowns, side effects) and
  stores exactly as an in-memory engine that kept running through the same steps.

The SQLite-only checks (fresh processes, SIGKILL in a batch, a failed batch) are in
``tests/stores/sqlite/``; PostgreSQL's (two processes, kill -9) in
``tests/stores/postgres/``. The affective state's persistence is in
``test_contract_state_stores.py``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from emotional_memory import CoreAffect, EmotionalMemory
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.replay import TickClock
from support.backends import DURABLE, Backend, oracle_store
from support.engine_ops import TEXTS, dump
from support.memories import indexed_memory
from support.scopes import T0

pytestmark = pytest.mark.parametrize("backend", DURABLE, indirect=True)


def test_a_reopened_store_holds_the_same_memories(backend: Backend) -> None:
    store = backend.new()
    memories = [indexed_memory(i, [float(i), 1.0, 0.0]) for i in range(5)]
    memories.append(indexed_memory(5, None))
    memories[2] = memories[2].model_copy(update={
        "scope": ("alice", "s1"), "expires_at": T0 + timedelta(days=3)})
    for m in memories:
        store.save(m)
    store.delete(memories[1].id)
    kept = [m for i, m in enumerate(memories) if i != 1]
    again = backend.reopen(store)
    assert again.list_all() == kept
    assert len(again) == 5 and again.dim == 3
    assert [m.id for m in again.search_by_embedding([1.0, 0.0, 0.0], 2)] == [
        kept[-2].id, kept[-3].id]
    later = indexed_memory(6, [0.0, 0.0, 1.0])
    again.save(later)  # numbered after the stored ones
    assert again.list_all() == [*kept, later]



@pytest.mark.parametrize("offset", [
    timedelta(hours=5, minutes=30),
    timedelta(seconds=1),  # JSON forms drop an offset's seconds (a local mean time)
    timedelta(hours=-4, minutes=-56, seconds=-2),
])
def test_a_reopened_store_gives_the_json_it_gave_before(
    backend: Backend, offset: timedelta
) -> None:
    # datetimes at a non-zero offset: the store may keep the offset or move them to
    # UTC (the same instant), but what it answers before and after a reopen agrees,
    # so an export does not change with a restart, and the instants are kept
    store = backend.new()
    east = timezone(offset)
    memory = indexed_memory(0, [1.0, 0.0, 0.0])
    stamp = memory.tag.timestamp.astimezone(east)
    tag = memory.tag.model_copy(update={"timestamp": stamp, "last_retrieved": stamp})
    memory = memory.model_copy(update={
        "tag": tag, "expires_at": datetime(2099, 1, 1, 12, tzinfo=east)})
    store.save(memory)
    before = [m.model_dump(mode="json") for m in store.list_all()]
    assert store.list_all() == [memory]
    again = backend.reopen(store)
    assert [m.model_dump(mode="json") for m in again.list_all()] == before
    assert again.list_all() == [memory]  # the same instants


def test_an_engine_over_the_reopened_store_answers_as_one_that_kept_running(
    backend: Backend,
) -> None:
    clock = TickClock(T0, timedelta(0))  # one instant: engines may read it unequally often
    store = backend.new()
    live = EmotionalMemory(store, HashingEmbedder(dim=32), clock=clock)
    oracle = EmotionalMemory(oracle_store(), HashingEmbedder(dim=32), clock=clock)
    for e in (live, oracle):
        for i, t in enumerate(TEXTS[:10]):
            e.set_affect(CoreAffect(valence=(i % 5) / 2 - 1, arousal=(i % 4) / 4))
            e.encode(t, metadata={"i": i})
        e.scoped("alice").encode_batch(TEXTS[10:14])
        e.encode(TEXTS[14], expires_at=T0 + timedelta(days=1))
        e.retrieve("rain calm", top_k=3)
        e.delete(e.list_all()[3].id)
    memories = live.list_all()
    reopened = EmotionalMemory(backend.reopen(store), HashingEmbedder(dim=32), clock=clock)
    reopened.load_state(live.save_state())  # the state store's part: its own contract
    assert reopened.list_all() == memories
    assert dump(reopened) == dump(oracle)
    for q in ("exam mad", "rain calm", "party"):
        a = reopened.retrieve_with_explanations(q, top_k=3)
        b = oracle.retrieve_with_explanations(q, top_k=3)
        assert [(x.memory.content, x.score, tuple(x.breakdown.raw_signals)) for x in a] == [
            (x.memory.content, x.score, tuple(x.breakdown.raw_signals)) for x in b]
    assert [m.content for m in reopened.scoped("alice").list_all()] == TEXTS[10:14]
    assert dump(reopened) == dump(oracle)


def test_a_closed_store_says_so_on_every_operation(backend: Backend) -> None:
    # a closed ChromaStore answered KeyError: True
    store = backend.new()
    memory = indexed_memory(0, [1.0, 0.0, 0.0])
    store.save(memory)
    store.close()
    for operation in (
        lambda: store.get(memory.id), store.list_all, lambda: len(store),
        lambda: store.save(indexed_memory(1, [0.0, 1.0, 0.0])),
        lambda: store.update(memory), lambda: store.delete(memory.id),
        lambda: store.search_by_embedding([1.0, 0.0, 0.0], 1),
    ):
        with pytest.raises((ValueError, RuntimeError), match=r"(?i)closed"):
            operation()
