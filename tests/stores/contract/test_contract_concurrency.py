"""The store contract, part 8: threads.

The guarantee tested, on every backend: a store may be shared by threads.

* Threads saving distinct memories (while others search and read) lose none: every
  memory is stored whole, each thread's memories keep its order in ``list_all``, and
  the store's search then answers as the oracle holding ``list_all`` in that order.
* Threads rewriting the SAME memories leave, for each id, exactly one of the versions
  written for it (never a mix of two), each id once; which version wins is open.
* An engine shared by threads serialises its operations: concurrent retrieves lose no
  side effect (the retrieval counts add up to the winners returned), concurrent
  encodes all land, and no link points at a missing memory.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from emotional_memory.models import Memory
from support.backends import ENGINES, Backend, oracle_store
from support.engine_ops import TEXTS, op_engine
from support.memories import basic_memory as mem

THREADS = 4


def run_threads(work: Callable[[int], None], n: int = THREADS) -> None:
    """Run ``work(t)`` for t in range(n) in n threads started together; re-raise the
    first error any of them met."""
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def body(t: int) -> None:
        try:
            start.wait()
            work(t)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]


def _vector(t: int, j: int) -> list[float]:
    """A distinct 6-d embedding naming its writer and round."""
    return [float(t + 1), float(j + 1), 1.0, float((t * 7 + j) % 5), 0.5, -1.0]


def test_threads_saving_distinct_memories_lose_none(backend: Backend) -> None:
    store = backend.new()
    made: list[list[Memory]] = [[] for _ in range(THREADS)]

    def work(t: int) -> None:
        for j in range(15):
            m = mem(f"t{t} m{j}", _vector(t, j), metadata={"t": t, "j": j})
            store.save(m)
            made[t].append(m)
            store.search_by_embedding(_vector(j % THREADS, t), 3)
            assert store.get(made[t][j // 2].id) == made[t][j // 2]

    run_threads(work)
    listed = store.list_all()
    assert len(store) == len(listed) == 15 * THREADS
    by_id = {m.id: m for m in listed}
    for t in range(THREADS):
        assert [by_id[m.id] for m in made[t]] == made[t]  # stored whole
        mine = [m.id for m in listed if m.metadata["t"] == t]
        assert mine == [m.id for m in made[t]]  # in the thread's order
    oracle = oracle_store()
    for m in listed:
        oracle.save(m)
    rng = np.random.default_rng(1)
    for _ in range(4):
        query = rng.normal(size=6).tolist()
        assert [m.id for m in store.search_by_embedding(query, 10)] == [
            m.id for m in oracle.search_by_embedding(query, 10)]


def test_threads_rewriting_the_same_memories_leave_one_whole_version(
    backend: Backend,
) -> None:
    store = backend.new()
    base = [mem(f"m{i}", [1.0, float(i), 0.0, 0.0, 0.0, 0.0], metadata={"v": None})
            for i in range(5)]
    written: dict[str, list[Memory]] = {m.id: [m] for m in base}
    for m in base:
        store.save(m)

    def work(t: int) -> None:
        for j in range(5):
            for i, m in enumerate(base):
                version = m.model_copy(update={
                    "content": f"m{i} by {t} round {j}", "embedding": _vector(t, j),
                    "metadata": {"v": [t, j]}})
                written[m.id].append(version)  # list.append is atomic
                if (i + j) % 2:
                    store.update(version)
                else:
                    store.save(version)

    run_threads(work)
    listed = store.list_all()
    assert sorted(m.id for m in listed) == sorted(written) and len(store) == len(base)
    for m in listed:
        assert m in written[m.id]  # one version whole: content, embedding, metadata agree
        assert store.get(m.id) == m


@pytest.mark.parametrize("backend", ENGINES, indirect=True)
def test_an_engine_shared_by_threads_loses_no_update(backend: Backend) -> None:
    engine = op_engine(backend.new())
    engine.encode_batch(TEXTS[:10])
    returned: list[int] = []

    def retrieve(t: int) -> None:
        for j in range(3):
            returned.append(len(engine.retrieve(TEXTS[(t + j) % 10], top_k=3)))

    run_threads(retrieve)
    assert sum(m.tag.retrieval_count for m in engine.list_all()) == sum(returned) > 0

    def encode(t: int) -> None:
        for j in range(3):
            if j % 2:
                engine.encode_batch([f"{TEXTS[10 + t]} batch {j}", f"{TEXTS[t]} {j}"])
            else:
                engine.encode(f"{TEXTS[10 + t]} single {j}")

    run_threads(encode)
    memories: list[Any] = engine.list_all()
    assert len(memories) == len(engine) == 10 + THREADS * 4
    stored = {m.id for m in memories}
    assert all(lk.target_id in stored for m in memories for lk in m.tag.resonance_links)
