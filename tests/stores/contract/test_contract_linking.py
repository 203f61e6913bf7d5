"""The store contract, part 4: resonance links.

* An engine over any backend (and over a plain protocol-only store) stores exactly
  the memories, tags and links the engine over the in-memory store stores, and
  answers the same, through random encode / encode_batch / retrieve / delete steps.
* After deletes no link points at a missing memory, and a store's back-link index
  (``linking_to``: who links to these memories) equals a scan of its memories.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emotional_memory.stores.base import LinkIndexStore
from support.backends import ENGINES, Backend, oracle_store
from support.engine_ops import TEXTS, dump, engine_op, op_engine, run_engine_ops


@pytest.mark.parametrize("backend", ENGINES, indirect=True)
@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=st.lists(engine_op, min_size=1, max_size=12))
def test_an_engine_stores_and_answers_as_over_the_in_memory_store(
    backend: Backend, ops: list[tuple[str, int, int]]
) -> None:
    run_engine_ops(op_engine(oracle_store()), op_engine(backend.new()), ops)


@pytest.mark.parametrize("backend", ENGINES, indirect=True)
def test_deletes_leave_no_dangling_link_and_the_back_link_index_matches(
    backend: Backend,
) -> None:
    store = backend.new()
    engine, oracle = op_engine(store), op_engine(oracle_store())
    for e in (engine, oracle):
        e.encode_batch(TEXTS[:8])
        for text in TEXTS[8:12]:
            e.encode(text)
        e.encode_batch(TEXTS[12:])
    assert sum(len(m.tag.resonance_links) for m in engine.list_all()) > 0
    for round_ in range(3):
        for e in (engine, oracle):
            victims = e.list_all()[round_ * 3 :: 5]
            for victim in victims:
                assert e.delete(victim.id)
        assert dump(engine) == dump(oracle)
        stored = {m.id for m in engine.list_all()}
        assert all(lk.target_id in stored for m in engine.list_all()
                   for lk in m.tag.resonance_links)
        if isinstance(store, LinkIndexStore):
            memories = engine.list_all()
            for targets in ([m.id for m in memories[:3]], [memories[-1].id], ["gone"]):
                assert store.linking_to(targets) == [
                    m.id for m in memories
                    if any(lk.target_id in targets for lk in m.tag.resonance_links)]
