"""The store contract, part 3: scopes.

* ``engine.scoped(s)`` views of ONE engine answer, for random interleavings of
  encode / retrieve / delete / set_affect in sibling scopes, exactly as separate
  in-memory engines each holding only that scope's memories (the oracle): results,
  scores, breakdowns, stored tags and links, state, lengths; with the lexical signal
  on and off, over every backend and over a plain protocol-only store.
* Another scope's id behaves as an unknown id; nested views see their sub-scopes;
  links stay inside the encoding view; a view's delete drops the root's links to it.
* A store's own confined view (``selected``) lists, counts and searches exactly as
  the in-memory store's, for scopes, filters and expiry.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emotional_memory import EmotionalMemory
from emotional_memory.embedders import HashingEmbedder
from support.backends import ENGINES, Backend, oracle_store
from support.scopes import SCOPES, Clock, lexical_config, operation, run_scoped_operations, tags
from support.selections import check_selections, fill_selection_bank


@pytest.mark.parametrize("lexical", [False, True])
@pytest.mark.parametrize("backend", ENGINES, indirect=True)
@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=st.lists(operation, min_size=4, max_size=20))
def test_a_view_answers_as_a_separate_engine_of_its_scope(
    backend: Backend, lexical: bool, ops: list[tuple[Any, ...]]
) -> None:
    clock = Clock()
    config = lexical_config(lexical)
    embedder = HashingEmbedder(dim=32)
    shared = EmotionalMemory(backend.new(), embedder, config=config, clock=clock)
    views = [shared.scoped(s) for s in SCOPES]
    alone = [EmotionalMemory(oracle_store(), embedder, config=config, clock=clock)
             for _ in SCOPES]
    made = run_scoped_operations(views, alone, clock, ops)
    for s, (view, oracle) in enumerate(zip(views, alone, strict=True)):
        assert tags(view.list_all()) == tags(oracle.list_all())
        assert view.get_state().snapshot() == oracle.get_state().snapshot()
        assert len(view) == len(oracle) == len(made[s])
    assert len(shared) == sum(len(m) for m in made)


@pytest.mark.parametrize("backend", ENGINES, indirect=True)
def test_another_scopes_id_behaves_as_an_unknown_id(backend: Backend) -> None:
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=16), clock=Clock())
    alice, bob = engine.scoped("alice"), engine.scoped("bob")
    secret = alice.encode("alice's secret")
    before = tags(engine.list_all())
    assert bob.get(secret.id) is None
    assert bob.delete(secret.id) is False
    with pytest.raises(KeyError):
        bob.update_memory(secret.id, content="mine now")
    assert bob.list_all() == [] and len(bob) == 0 and bob.export_memories() == []
    assert bob.retrieve("secret") == []
    with pytest.raises(ValueError, match="cannot write"):
        bob.import_memories([secret.model_dump(mode="json") | {"scope": []}], overwrite=True)
    assert tags(engine.list_all()) == before
    assert engine.get(secret.id) == alice.get(secret.id) == secret  # the root sees all


@pytest.mark.parametrize("backend", ENGINES, indirect=True)
def test_nested_views_see_their_sub_scopes_and_links_stay_inside(backend: Backend) -> None:
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=16), clock=Clock())
    alice = engine.scoped("alice")
    session = alice.scoped("s1")
    assert session.scope == ("alice", "s1") == engine.scoped("alice", "s1").scope
    top = alice.encode("rain on the bridge")
    inner = session.encode("rain on the bridge again")
    other = engine.scoped("bob").encode("rain on the bridge too")
    assert [m.id for m in alice.list_all()] == [top.id, inner.id]
    assert [m.id for m in session.list_all()] == [inner.id]
    assert len(alice) == 2 and len(session) == 1 and len(engine) == 3
    # links only to memories the encoding view saw
    assert {lk.target_id for lk in inner.tag.resonance_links} <= {inner.id}
    assert other.tag.resonance_links == []
    assert {lk.target_id for lk in engine.get(top.id).tag.resonance_links} <= {top.id}
    # the root sees everything and may link across scopes
    root = engine.encode("rain on the bridge, from the root")
    assert {lk.target_id for lk in root.tag.resonance_links} & {top.id, inner.id, other.id}
    # deleting from a view drops the root's link to it (no link dangles)
    assert session.delete(inner.id)
    assert all(lk.target_id != inner.id for m in engine.list_all()
               for lk in m.tag.resonance_links)


def test_a_stores_own_selection_answers_as_the_in_memory_one(backend: Backend) -> None:
    store, oracle = backend.new(), oracle_store()
    fill_selection_bank([store, oracle])
    check_selections(store, oracle)
