"""The store contract: a nested view answers as a separate engine whatever its
parent, the root and a sibling do around it, over every backend.

``test_contract_scopes`` interleaves sibling scopes. Here one engine holds a child
``("a", "x")`` with a grandchild ``("a", "x", "y")``, its parent ``("a",)``, the root
and a sibling ``("b",)``; the parent and the root encode (and link to the child's
memories, which they see), delete their own memories and retrieve among them. The
child and the grandchild answer exactly as a separate engine holding only the
child's subtree (the grandchild's operations on its ``scoped("y")``): results,
scores, breakdowns, stored tags and links. A memory never holds a link to one its
own scope's view cannot see (a parent's backward twin would, and would evict the
child's own links).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emotional_memory import CoreAffect, EmotionalMemory, EmotionalMemoryConfig, ResonanceConfig
from emotional_memory.embedders import HashingEmbedder
from support.backends import ENGINES, Backend, oracle_store
from support.scopes import T0, WORDS, Clock, explained, tags, text_of

PLACES: tuple[tuple[str, ...], ...] = (("a", "x"), ("a", "x", "y"), ("a",), (), ("b",))
"""Where an operation runs: the child, its grandchild (both compared with the
oracle), the parent, the root and a sibling."""
CHILD = PLACES[0]

# small link budget: a twin from outside would evict the child's own links
CONFIG = EmotionalMemoryConfig(resonance=ResonanceConfig(max_links=2, candidate_multiplier=3))

words = st.lists(st.integers(0, len(WORDS) - 1), min_size=1, max_size=3)
nested_operation = st.one_of(
    st.tuples(st.just("encode"), st.integers(0, 4), words, st.floats(-1, 1)),
    st.tuples(st.just("encode_batch"), st.integers(0, 4), st.lists(words, min_size=1,
                                                                   max_size=4)),
    st.tuples(st.just("retrieve"), st.integers(0, 4), words, st.integers(1, 4)),
    st.tuples(st.just("delete"), st.integers(0, 4), st.integers(0, 20)),
)
"""``("encode", place, words, valence)``, ``("encode_batch", place, [words])``,
``("retrieve", place, words, top_k)`` or ``("delete", place, which)``."""


def run_nested(engine: EmotionalMemory, oracle: EmotionalMemory, clock: Clock,
               ops: list[tuple[Any, ...]]) -> None:
    """Apply ``ops``; the child's and grandchild's steps also to ``oracle`` (its root
    and its ``scoped("y")``), asserting after each that both answered the same."""
    views = [engine.scoped(*p) if p else engine for p in PLACES]
    twins: dict[int, EmotionalMemory] = {0: oracle, 1: oracle.scoped("y")}
    made: list[list[tuple[str, str | None]]] = [[] for _ in PLACES]
    for step, op in enumerate(ops):
        clock.now = T0 + timedelta(minutes=7 * step)
        what, place = op[0], op[1]
        view, twin = views[place], twins.get(place)
        meta = {"place": place, "step": step}
        if what == "encode":
            text = text_of(op[2], step)
            affect = CoreAffect(valence=op[3], arousal=0.5)
            a = view.encode(text, metadata=meta, affect=affect)
            b = None if twin is None else twin.encode(text, metadata=meta, affect=affect)
            made[place].append((a.id, None if b is None else b.id))
        elif what == "encode_batch":
            texts = [text_of(w, 100 * step + i) for i, w in enumerate(op[2])]
            a_all = view.encode_batch(texts, metadata=[meta] * len(texts))
            b_all = (None if twin is None
                     else twin.encode_batch(texts, metadata=[meta] * len(texts)))
            made[place] += [(a.id, None if b_all is None else b_all[i].id)
                            for i, a in enumerate(a_all)]
        elif what == "retrieve":
            query = " ".join(WORDS[w] for w in op[2])
            if twin is None:  # among its own memories only: no side effect on the child
                view.retrieve(query, op[3], where={"place": place})
            else:
                assert explained(view.retrieve_with_explanations(query, op[3])) == \
                    explained(twin.retrieve_with_explanations(query, op[3]))
        elif made[place]:
            a_id, b_id = made[place].pop(op[2] % len(made[place]))
            assert view.delete(a_id) is True
            if twin is not None:
                assert b_id is not None and twin.delete(b_id) is True


@pytest.mark.parametrize("backend", ENGINES, indirect=True)
@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=st.lists(nested_operation, min_size=4, max_size=16))
def test_a_nested_view_answers_as_a_separate_engine_whatever_its_parent_does(
    backend: Backend, ops: list[tuple[Any, ...]]
) -> None:
    clock = Clock()
    embedder = HashingEmbedder(dim=32)
    engine = EmotionalMemory(backend.new(), embedder, config=CONFIG, clock=clock)
    oracle = EmotionalMemory(oracle_store(), embedder, config=CONFIG, clock=clock)
    run_nested(engine, oracle, clock, ops)
    child = engine.scoped(*CHILD)
    assert tags(child.list_all()) == tags(oracle.list_all())
    assert tags(child.scoped("y").list_all()) == tags(oracle.scoped("y").list_all())
    assert len(child) == len(oracle)
    # no memory holds a link to one its own scope's view cannot see
    for m in engine.list_all():
        seen = {s.id for s in (engine.scoped(*m.scope) if m.scope else engine).list_all()}
        assert {lk.target_id for lk in m.tag.resonance_links} <= seen, m.scope


ODD_PARTS = ["%", "_", "\\", "/", "a/b", "a", "a%", "a_", "A", "[", '"', ",", " ", "*",
             ".", "NULL", "{}", "\u2028", "\U0001f600", "\u00e9", "e\u0301", "'", "ß", "SS",
             "\t", '"a","b"', '["a"]', 'a","b']
ODD_PATHS = [(p,) for p in ODD_PARTS] + [("a", "b"), ("a", "%"), ("%", "a"), ("a/b", "c")]


@pytest.mark.parametrize("backend", ENGINES, indirect=True)
def test_scope_parts_with_odd_characters_confine_by_exact_prefix(backend: Backend) -> None:
    """Parts that are wildcards, separators, escapes, JSON or unicode look-alikes in
    some database: a view sees exactly the memories whose path starts with its own."""
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=16), clock=Clock())
    made = {p: engine.scoped(*p).encode(f"rain bridge {i}").id for i, p in enumerate(ODD_PATHS)}
    for p in ODD_PATHS:
        want = sorted(made[q] for q in ODD_PATHS if q[: len(p)] == p)
        view = engine.scoped(*p)
        assert sorted(m.id for m in view.list_all()) == want, p
        assert len(view) == len(want), p
        assert sorted(m.id for m in view.retrieve("rain bridge", 50)) == want, p
