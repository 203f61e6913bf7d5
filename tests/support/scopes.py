"""Engines compared through what they answer: a hand-moved clock, the operations of the
separate-engine contract, a bank for ``where`` filters, and views of results and
stored tags that map ids to contents (ids are uuid4s: two engines never share them)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from emotional_memory import CoreAffect, EmotionalMemory, EmotionalMemoryConfig
from emotional_memory.models import Memory
from emotional_memory.retrieval import RetrievalConfig

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
WORDS = ["rain", "bridge", "coffee", "storm", "harbour", "exam", "garden", "train", "dog",
         "music"]
SCOPES = ["alice", "bob", "carol"]


class Clock:
    """A clock the test moves by hand (every engine reads the same value)."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def lexical_config(lexical: bool) -> EmotionalMemoryConfig:
    """The default config, or one with the lexical signal and hybrid candidates on."""
    if not lexical:
        return EmotionalMemoryConfig()
    return EmotionalMemoryConfig(
        retrieval=RetrievalConfig(lexical_weight=0.3, hybrid_candidates=True)
    )


def text_of(words: list[int], i: int) -> str:
    """The content made of ``WORDS[w]`` for ``w`` in ``words``, numbered ``i``."""
    return " ".join(WORDS[w] for w in words) + f" note {i}"


def explained(results: list[Any]) -> list[tuple[Any, ...]]:
    """What ``retrieve_with_explanations`` answered, by content (ids left out)."""
    return [
        (r.memory.content, r.score, tuple(r.breakdown.raw_signals), r.pass1_rank,
         r.pass2_rank, r.selected_as_seed, r.candidate_count)
        for r in results
    ]


def tags(memories: list[Memory], inside: bool = False) -> list[tuple[Any, ...]]:
    """What each memory holds, links mapped from ids to contents; with ``inside``, only
    the links among ``memories``."""
    content_of = {m.id: m.content for m in memories}
    out = []
    for m in memories:
        tag = m.tag.model_dump(mode="json", exclude={"resonance_links"})
        links = [(content_of.get(lk.target_id, "?"), lk.strength, lk.link_type)
                 for lk in m.tag.resonance_links
                 if not inside or lk.target_id in content_of]
        out.append((m.content, m.embedding, m.metadata, repr(tag), links))
    return out


operation = st.one_of(
    st.tuples(st.just("encode"), st.integers(0, 2),
              st.lists(st.integers(0, len(WORDS) - 1), min_size=1, max_size=4),
              st.floats(-1, 1), st.floats(0, 1)),
    st.tuples(st.just("retrieve"), st.integers(0, 2),
              st.lists(st.integers(0, len(WORDS) - 1), min_size=1, max_size=3),
              st.integers(1, 4)),
    st.tuples(st.just("delete"), st.integers(0, 2), st.integers(0, 20)),
    st.tuples(st.just("affect"), st.integers(0, 2), st.floats(-1, 1), st.floats(0, 1)),
)
"""One step in one of the three scopes: ``("encode", scope, words, valence, arousal)``,
``("retrieve", scope, words, top_k)``, ``("delete", scope, which)`` or
``("affect", scope, valence, arousal)``."""


def run_scoped_operations(
    views: list[EmotionalMemory], alone: list[EmotionalMemory], clock: Clock,
    ops: list[tuple[Any, ...]],
) -> list[list[tuple[str, str]]]:
    """Apply ``ops`` to the view of each scope and to the engine standing alone for it,
    asserting after each step that both answered the same.

    Args:
        views: ``engine.scoped(s)`` for each of ``SCOPES``.
        alone: an engine per scope holding only that scope's memories (the oracle).
        clock: the clock of every engine, moved 7 minutes per step.
        ops: steps drawn from ``operation``.

    Returns:
        Per scope, the ``(view id, alone id)`` pairs of the memories still stored.
    """
    made: list[list[tuple[str, str]]] = [[] for _ in views]
    for step, op in enumerate(ops):
        clock.now = T0 + timedelta(minutes=7 * step)
        what, s = op[0], op[1]
        view, oracle = views[s], alone[s]
        if what == "encode":
            text = text_of(op[2], step)
            affect = CoreAffect(valence=op[3], arousal=op[4])
            a = view.encode(text, metadata={"step": step}, affect=affect)
            b = oracle.encode(text, metadata={"step": step}, affect=affect)
            assert a.scope == view.scope and b.scope == oracle.scope
            made[s].append((a.id, b.id))
        elif what == "retrieve":
            query = " ".join(WORDS[w] for w in op[2])
            assert explained(view.retrieve_with_explanations(query, op[3])) == \
                explained(oracle.retrieve_with_explanations(query, op[3]))
        elif what == "delete":
            if made[s]:
                a_id, b_id = made[s].pop(op[2] % len(made[s]))
                assert view.delete(a_id) is oracle.delete(b_id) is True
        else:
            affect = CoreAffect(valence=op[2], arousal=op[3])
            assert view.set_affect(affect).snapshot() == oracle.set_affect(affect).snapshot()
    return made


def fill_bank(engine: EmotionalMemory, clock: Clock, n: int = 24) -> None:
    """Encode ``n`` memories 9 minutes apart with the metadata ``where_oracle.leaf``
    filters on (``topic``, ``tags.priority`` on three in four) and varied affect."""
    topics = ["work", "home", "travel"]
    for i in range(n):
        clock.now = T0 + timedelta(minutes=9 * i)
        meta: dict[str, Any] = {"topic": topics[i % 3]}
        if i % 4:
            meta["tags"] = {"priority": i % 4}
        words = [WORDS[(i * 3) % 10], WORDS[(i * 7 + 1) % 10], WORDS[i % 10]]
        engine.encode(" ".join(words) + f" n{i}", metadata=meta,
                      affect=CoreAffect(valence=math.sin(i), arousal=(i % 5) / 4))
