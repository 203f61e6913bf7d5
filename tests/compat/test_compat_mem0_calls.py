"""The original 0.18.1 mem0 facade's answers to the same calls (SPEC 11).

Each expectation is what the original's ``EmotionalMemoryMem0Backend`` returns for the
same calls (pinned from a run of the original, or an oracle computing it the way the
original does); nothing here imports or needs the original.
"""

from __future__ import annotations

from typing import Any

import pytest

from emotional_memory import EmotionalMemory, EmotionalMemoryConfig, InMemoryStore
from emotional_memory.integrations.mem0 import EmotionalMemoryMem0Backend
from support.clocks import SecondClock
from support.compat_original import HashEmbedder

TEXTS = [f"event number {i} about hiking and rain {i * 7}" for i in range(15)]


def _engine() -> EmotionalMemory:
    return EmotionalMemory(InMemoryStore(), HashEmbedder(), clock=SecondClock())


def _metadata(messages: Any) -> dict[str, Any]:
    m = EmotionalMemoryMem0Backend(_engine())
    m.add(messages)
    return dict(m.get_all()["results"][0]["metadata"])


def test_add_takes_the_role_of_the_first_message_as_the_original() -> None:
    """The original: ``metadata["role"]`` is the first message's role (pinned)."""
    assert _metadata([{"content": "plain"}, {"role": "user", "content": "u"}]) == {
        "user_id": "default"
    }
    assert _metadata([{"role": "system", "content": ""}, {"role": "user", "content": "u2"}]) == {
        "role": "system",
        "user_id": "default",
    }
    assert _metadata([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]) == {
        "role": "user",
        "user_id": "default",
    }
    assert _metadata("just text") == {"user_id": "default"}
    # a tuple of messages: the original takes a role from a list only
    assert _metadata(({"role": "user", "content": "t"},)) == {"user_id": "default"}


def _oracle(queries: list[tuple[str, int]]) -> list[list[tuple[str, float]]]:
    """The original's search of a user's memories: ``retrieve_with_explanations`` with
    ``top_k=max(limit * 4, 40)`` (its over-fetch, with its side effects on all of them),
    the first ``limit`` kept."""
    em = _engine()
    for text in TEXTS:
        em.encode(text, metadata={"user_id": "default"})
    answers = []
    for query, limit in queries:
        found = em.retrieve_with_explanations(query, top_k=max(limit * 4, 40))[:limit]
        answers.append([(e.memory.content, float(e.score)) for e in found])
    return answers


QUERIES = [("hiking", 3), ("rain", 5), ("event", 1), ("hiking", 3), ("x", 20)]


def test_search_ranks_as_the_originals_over_fetching_search() -> None:
    m = EmotionalMemoryMem0Backend(_engine())
    for text in TEXTS:
        m.add(text)
    got = [[(r["memory"], r["score"]) for r in m.search(q, limit=n)["results"]]
           for q, n in QUERIES]
    assert got == _oracle(QUERIES)
    # the case tells the two apart: the engine's top 3 of 3 is not its top 3 of 40
    em = _engine()
    for text in TEXTS:
        em.encode(text)
    assert [e.memory.id for e in em.retrieve_with_explanations("hiking", top_k=3)] != [
        e.memory.id for e in em.retrieve_with_explanations("hiking", top_k=40)[:3]
    ]


def test_search_ranks_as_the_original_for_the_original_engine_ranking() -> None:
    """Pinned from a run of the original (its real clock): ``search("hiking", limit=3)``
    over TEXTS answers events 0, 1 and 13 (the top 3 of 3 ends with event 3)."""
    m = EmotionalMemoryMem0Backend(_engine())
    for text in TEXTS:
        m.add(text)
    assert [r["memory"][13:15] for r in m.search("hiking", limit=3)["results"]] == [
        "0 ", "1 ", "13",
    ]


def test_a_malformed_filters_argument_is_named_filters() -> None:
    """The original ignored ``filters``; here it narrows the candidates, so a malformed
    one raises: the error names the argument the caller passed (``filters``), not the
    engine's ``where`` (was "where: unknown operator '$bad' ..."), and stores nothing."""
    m = EmotionalMemoryMem0Backend(_engine())
    m.add("kept")
    calls = [lambda: m.search("q", filters={"$bad": 1}),
             lambda: m.get_all(filters={"$bad": 1}),
             lambda: m.search("q", filters={"k": {"$gt": [1]}}, agent_id="a")]
    for call in calls:
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value).startswith("filters: "), str(info.value)
        assert "where" not in str(info.value)
    assert [r["memory"] for r in m.get_all()["results"]] == ["kept"]


def test_content_the_engine_refuses_is_named_by_the_messages_argument() -> None:
    """The original (and, before, this facade) named the engine's ``content``, with an
    index into the joined ``"role: content"`` text (``"content is not valid Unicode
    text at index 7"`` for ``[{"role": "user", "content": "a\\ud800"}]``): the caller
    passed ``messages``. Still a ValueError, as in the original; nothing is stored."""
    em = EmotionalMemory(InMemoryStore(), HashEmbedder(), clock=SecondClock(),
                         config=EmotionalMemoryConfig(max_content_length=10))
    m = EmotionalMemoryMem0Backend(em)
    cases = [
        ([{"role": "user", "content": "ok"}, {"role": "user", "content": "a\ud800"}],
         r"^messages\[1\]\.content is not valid Unicode text at index 1"),
        ([{"role": "user", "content": "abcdefghijk"}], r"^messages\[0\]\.content is 11 char"),
        ([{"role": "user", "content": "abcdefgh"}], r"^messages is 14 characters"),  # joined
        ("abcdefghijk", r"^messages is 11 characters"),
        ("x\udfff", r"^messages is not valid Unicode text at index 1"),
    ]
    for messages, named in cases:
        with pytest.raises(ValueError, match=named):
            m.add(messages)
    assert em.list_all() == []
