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
