"""Two engines driven through the same random operations (encode, encode_batch,
retrieve, delete), compared after every step by what they store and answer."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import strategies as st

from emotional_memory import CoreAffect, EmotionalMemory
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.replay import TickClock
from support.scopes import T0

TEXTS = [f"{w} {v} day" for w in ("rain", "launch", "coffee", "exam", "party", "storm")
         for v in ("calm", "mad", "glad")]

engine_op = st.one_of(
    st.tuples(st.just("encode"), st.integers(0, len(TEXTS) - 1), st.integers(-2, 2)),
    st.tuples(st.just("batch"), st.integers(0, len(TEXTS) - 1), st.integers(1, 4)),
    st.tuples(st.just("retrieve"), st.integers(0, len(TEXTS) - 1), st.integers(1, 4)),
    st.tuples(st.just("delete"), st.integers(0, 50), st.just(0)),
)
"""``("encode", text, affect)``, ``("batch", first text, size)``,
``("retrieve", query text, top_k)`` or ``("delete", which, 0)``."""


def op_engine(store: Any, state_store: Any = None) -> EmotionalMemory:
    """An engine over ``store``: 32-d hashing embeddings, a clock 30 s per reading."""
    clock = TickClock(T0, timedelta(seconds=30))
    return EmotionalMemory(store, HashingEmbedder(dim=32), clock=clock,
                           state_store=state_store)


def dump(engine: EmotionalMemory) -> list[Any]:
    """Every stored memory (content, metadata, embedding, tag), links by content."""
    content = {m.id: m.content for m in engine.list_all()}
    return [
        (m.content, m.metadata, m.embedding,
         m.tag.model_dump(mode="json", exclude={"resonance_links"}),
         [(content.get(lk.target_id), lk.strength, lk.link_type)
          for lk in m.tag.resonance_links])
        for m in engine.list_all()
    ]


def run_engine_ops(oracle: EmotionalMemory, other: EmotionalMemory,
                   ops: list[tuple[str, int, int]]) -> None:
    """Apply ``ops`` to both engines; after each, both answered and store the same.

    Args:
        oracle: the engine over the in-memory store.
        other: the engine under test.
        ops: steps drawn from ``engine_op``.
    """
    for kind, i, j in ops:
        for e in (oracle, other):
            if kind == "encode":
                e.set_affect(CoreAffect(valence=j / 2, arousal=abs(j) / 2))
                e.encode(TEXTS[i], metadata={"i": i, "tags": ["x", j]})
            elif kind == "batch":
                e.encode_batch([TEXTS[(i + k) % len(TEXTS)] for k in range(j)])
        if kind == "retrieve":
            a = oracle.retrieve_with_explanations(TEXTS[i], top_k=j)
            b = other.retrieve_with_explanations(TEXTS[i], top_k=j)
            assert [(x.memory.content, x.score, x.pass1_rank, x.activation_level)
                    for x in a] == [
                (x.memory.content, x.score, x.pass1_rank, x.activation_level) for x in b]
        elif kind == "delete":
            mine = oracle.list_all()
            if mine:
                victim = mine[i % len(mine)]
                theirs = other.list_all()[i % len(mine)]
                assert theirs.content == victim.content
                assert oracle.delete(victim.id) and other.delete(theirs.id)
        assert dump(oracle) == dump(other)
    assert oracle.get_state().snapshot() == other.get_state().snapshot()
