"""Small recall datasets for the replay, selection and training tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)


def unlabelled_dataset(n_scenarios: int = 2) -> dict[str, Any]:
    """Timestamped conversations without affect labels, queries without states."""
    topics = [
        ("garden", "planted tomatoes and basil in the garden"),
        ("piano", "practised the piano sonata for two hours"),
        ("marathon", "ran the city marathon in four hours"),
        ("bakery", "opened a small bakery on the corner"),
        ("violin", "bought an old violin at the flea market"),
        ("kayak", "paddled a kayak across the lake at dawn"),
    ]
    scenarios = []
    for s in range(n_scenarios):
        events = []
        queries = []
        for i, (word, text) in enumerate(topics):
            ts = T0 + timedelta(days=s, minutes=7 * i)
            events.append({
                "memory_id": f"s{s}e{i}", "content": f"Speaker{s}: I {text}.",
                "timestamp": ts.isoformat(),
            })
            queries.append({
                "query_id": f"s{s}q{i}", "query": f"When did speaker{s} mention the {word}?",
                "expected_memory_ids": [f"s{s}e{i}"], "challenge_type": f"cat{1 + i % 2}",
            })
        scenarios.append({
            "scenario_id": f"conv{s}",
            "sessions": [{"session_id": "one", "events": events[:3]},
                         {"session_id": "two", "events": events[3:], "queries": queries}],
        })
    return {"name": "tiny", "default_top_k": 2, "scenarios": scenarios}


def synthetic_recall_info(
    q: int, c: int, n_scenarios: int, challenge: str = "synthetic", top_k: int = 2
) -> Any:
    """The :class:`~emotional_memory.learn.RecallInfo` of a synthetic (q, c) batch:
    queries ``q{i}``, scenarios ``s{i}``, candidates ``q{i}m{j}``, one challenge."""
    from emotional_memory.learn.recall_batch import RecallInfo

    return RecallInfo(
        query_ids=tuple(f"q{i}" for i in range(q)),
        scenario_ids=tuple(f"s{i}" for i in range(n_scenarios)),
        challenge_names=(challenge,),
        candidate_ids=tuple(tuple(f"q{i}m{j}" for j in range(c)) for i in range(q)),
        top_k=top_k,
    )
