"""The store contract: a scope's resonance links, over every backend.

Batches encoded into sibling and nested scopes of one engine (some memories already
expired, blocks of several sizes, views past the link budget so candidates are
searched) give each scope exactly the memories and links of a separate engine
holding only that scope's memories, encoded one at a time through the protocol
linker (``MemoryLinker``: one ``search_by_embedding`` and whole-memory updates per
memory) over the in-memory store. Expired memories are never link targets.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emotional_memory import InMemoryStore
from emotional_memory._engine import encoding as engine_module
from emotional_memory.stores._shared.linking import MemoryLinker
from support.backends import ENGINES, Backend
from support.scoped_links import START, by_content, clustered_vectors, small_link_engine

PAST = START - timedelta(days=1)
SCOPES: tuple[tuple[str, ...], ...] = (("a",), ("b",), ("a", "x"))

# (scope index, number of memories, which of them are already expired)
operations = st.lists(
    st.tuples(st.integers(0, 2), st.integers(1, 12), st.sets(st.integers(0, 11), max_size=3)),
    min_size=1, max_size=6,
)


def _protocol_linker(target: Any, block: int, owner: Any = None) -> MemoryLinker:
    return MemoryLinker(target, None, 1, owner)


@pytest.mark.parametrize("backend", ENGINES, indirect=True)
@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=operations, block=st.sampled_from([1, 3, 64]))
def test_scoped_batches_link_as_a_separate_engine_one_at_a_time(
    backend: Backend, ops: list[tuple[int, int, set[int]]], block: int,
) -> None:
    vectors = clustered_vectors(sum(n for _, n, _ in ops) + 1, seed=len(ops))
    plan: list[tuple[tuple[str, ...], list[str], list[datetime | None]]] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine_module, "_LINK_SEARCH_BLOCK", block)
        engine = small_link_engine(backend.new(), vectors)
        engine.encode("t0")  # a root memory no scope sees
        views = {scope: engine.scoped(*scope) for scope in SCOPES}
        i = 1
        for which, n, expired in ops:
            texts = [f"t{j}" for j in range(i, i + n)]
            expiry = [PAST if k in expired else None for k in range(n)]
            i += n
            plan.append((SCOPES[which], texts, expiry))
            views[SCOPES[which]].encode_batch(texts, expires_at=expiry)
        got = {top: views[(top,)].list_all() for top in ("a", "b")}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine_module, "linker_for", _protocol_linker)
        for top in ("a", "b"):
            oracle = small_link_engine(InMemoryStore(), vectors)
            for scope, texts, expiry in plan:
                if scope[0] == top:
                    view = oracle.scoped(*scope)
                    for text, when in zip(texts, expiry, strict=True):
                        view.encode(text, expires_at=when)
            assert by_content(got[top]) == by_content(oracle.scoped(top).list_all())
