"""Generate the package's built-in labelled recall dataset (``builtin_recall.json``).

The dataset is small and written for this project: 30 everyday-life scenarios (work,
health, travel, family, study, sport, moving house, friendships, money, hobbies), each
an emotional arc told in two sessions of three memory events. Queries sit in the second
session and may expect any memory encoded so far. Every query realises one of five
challenge types:

* ``affective_arc`` -- asks for the emotional peak or low point; the query state is
  close to the expected memory's affect.
* ``momentum_alignment`` -- asks when things started turning better or worse; the
  query state points in that direction.
* ``same_topic_distractor`` -- two or more memories share the topic words; the query
  state matches the intended one.
* ``semantic_confound`` -- a lexically similar but wrong memory exists; the query's
  meaning (and its state) matches the right one.
* ``recency_confound`` -- asks for the earlier of two similar events ("before ...").

The texts and base affect values are hand-written in ``builtin_scenarios.json`` beside
this script. A seeded RNG adds a small, reproducible jitter to every valence/arousal
value, so running the script twice gives a byte-identical file.

Usage::

    python training/make_builtin_dataset.py            # (re)write the JSON
    python training/make_builtin_dataset.py --check    # exit 1 when the file is stale
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

SEED = 20260101
JITTER = 0.04
DEFAULT_TOP_K = 2
MIN_WORDS, MAX_WORDS = 10, 25
CHALLENGE_TYPES = (
    "affective_arc",
    "momentum_alignment",
    "same_topic_distractor",
    "semantic_confound",
    "recency_confound",
)
ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "src" / "emotional_memory" / "data" / "builtin_recall.json"


SOURCE = Path(__file__).resolve().with_name("builtin_scenarios.json")
"""The hand-written scenarios (texts, base affect, queries) this script reads."""

# Each scenario: id, topic, arc, description, two sessions (description, events) and
# the queries of session 2. Event: (memory_id, phase, valence, arousal, content).
# Query: (query_id, challenge_type, expected ids, (valence, arousal), text).
Event = tuple[str, str, float, float, str]
Query = tuple[str, str, list[str], tuple[float, float], str]


def load_scenarios(path: Path = SOURCE) -> list[dict[str, Any]]:
    """The scenarios of ``path`` as the tuples :func:`build` reads.

    Args:
        path: the JSON source (``builtin_scenarios.json``).

    Returns:
        One dict per scenario with ``sessions`` as (description, events) pairs and
        ``queries`` as :data:`Query` tuples.
    """
    raw = json.loads(path.read_text(encoding="utf-8"))["scenarios"]
    return [
        {
            **{k: sc[k] for k in ("id", "topic", "arc", "description")},
            "sessions": [
                (s["description"], [
                    (e["memory_id"], e["phase"], e["valence"], e["arousal"], e["content"])
                    for e in s["events"]
                ])
                for s in sc["sessions"]
            ],
            "queries": [
                (q["query_id"], q["challenge_type"], q["expected_memory_ids"],
                 (q["state"]["valence"], q["state"]["arousal"]), q["query"])
                for q in sc["queries"]
            ],
        }
        for sc in raw
    ]


SCENARIOS: list[dict[str, Any]] = load_scenarios()


def _jitter(rng: random.Random, value: float, lo: float, hi: float) -> float:
    """``value`` plus a small seeded perturbation, clipped to ``[lo, hi]``, 2 decimals."""
    noisy = value + rng.uniform(-JITTER, JITTER)
    return round(min(hi, max(lo, noisy)), 2)


def _check_scenario(spec: dict[str, Any]) -> None:
    """Raise ValueError when a hand-written scenario breaks the dataset rules."""
    sid = spec["id"]
    seen: set[str] = set()
    for _, events in spec["sessions"]:
        for mid, _, _, _, text in events:
            if mid in seen:
                raise ValueError(f"{sid}: duplicate memory id {mid!r}")
            seen.add(mid)
            n = len(text.split())
            if not MIN_WORDS <= n <= MAX_WORDS:
                raise ValueError(f"{sid}/{mid}: {n} words, want {MIN_WORDS}-{MAX_WORDS}")
    qids = [q[0] for q in spec["queries"]]
    if len(set(qids)) != len(qids):
        raise ValueError(f"{sid}: duplicate query id")
    if not 1 <= len(qids) <= 3:
        raise ValueError(f"{sid}: want 1-3 queries, got {len(qids)}")
    for qid, ctype, expected, _, _ in spec["queries"]:
        if ctype not in CHALLENGE_TYPES:
            raise ValueError(f"{sid}/{qid}: unknown challenge type {ctype!r}")
        missing = [e for e in expected if e not in seen]
        if missing:
            raise ValueError(f"{sid}/{qid}: unknown expected ids {missing}")


def build(seed: int = SEED) -> dict[str, Any]:
    """Build the dataset dict (deterministic for a given ``seed``)."""
    rng = random.Random(seed)
    scenarios: list[dict[str, Any]] = []
    for spec in SCENARIOS:
        _check_scenario(spec)
        sessions: list[dict[str, Any]] = []
        n_sessions = len(spec["sessions"])
        for index, (description, events) in enumerate(spec["sessions"], start=1):
            session: dict[str, Any] = {
                "session_id": f"{spec['id']}_s{index}",
                "description": description,
                "events": [
                    {
                        "memory_id": mid,
                        "content": text,
                        "valence": _jitter(rng, valence, -1.0, 1.0),
                        "arousal": _jitter(rng, arousal, 0.0, 1.0),
                        "metadata": {"topic": spec["topic"], "phase": phase},
                    }
                    for mid, phase, valence, arousal, text in events
                ],
                "queries": [],
            }
            if index == n_sessions:
                session["queries"] = [
                    {
                        "query_id": qid,
                        "query": text,
                        "expected_memory_ids": list(expected),
                        "challenge_type": ctype,
                        "state": {
                            "valence": _jitter(rng, state[0], -1.0, 1.0),
                            "arousal": _jitter(rng, state[1], 0.0, 1.0),
                        },
                    }
                    for qid, ctype, expected, state, text in spec["queries"]
                ]
            sessions.append(session)
        scenarios.append(
            {
                "scenario_id": spec["id"],
                "description": f"{spec['description']} Arc: {spec['arc']}.",
                "sessions": sessions,
            }
        )
    n_queries = sum(len(spec["queries"]) for spec in SCENARIOS)
    return {
        "name": "builtin_recall",
        "version": "1.0",
        "description": (
            f"Small labelled recall dataset written for emotional_memory: {len(scenarios)} "
            "everyday-life scenarios (two sessions of three events each) with preset "
            f"valence/arousal and {n_queries} queries across five challenge types; "
            "generated by training/make_builtin_dataset.py"
        ),
        "default_top_k": DEFAULT_TOP_K,
        "scenarios": scenarios,
    }


def dumps(data: dict[str, Any]) -> str:
    """The canonical file text of ``data`` (2-space indent, trailing newline)."""
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def stats(data: dict[str, Any]) -> dict[str, Any]:
    """Counts of scenarios, sessions, events and queries (by challenge type)."""
    sessions = [s for sc in data["scenarios"] for s in sc["sessions"]]
    queries = [q for s in sessions for q in s["queries"]]
    by_type: dict[str, int] = {}
    for q in queries:
        by_type[q["challenge_type"]] = by_type.get(q["challenge_type"], 0) + 1
    return {
        "scenarios": len(data["scenarios"]),
        "sessions": len(sessions),
        "events": sum(len(s["events"]) for s in sessions),
        "queries": len(queries),
        "by_challenge": dict(sorted(by_type.items())),
    }


def main(argv: list[str] | None = None) -> int:
    """Write (or ``--check``) the dataset file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT, help="JSON file to write")
    parser.add_argument("--seed", type=int, default=SEED, help="jitter seed")
    parser.add_argument(
        "--check", action="store_true", help="only verify that the file is up to date"
    )
    args = parser.parse_args(argv)
    if args.output.is_dir():
        parser.error(f"--output {args.output} is a directory, not a JSON file")
    data = build(args.seed)
    text = dumps(data)
    try:
        if args.check:
            current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
            if current != text:
                print(f"{args.output} is stale; rerun training/make_builtin_dataset.py")
                return 1
            print(f"{args.output} is up to date")
            return 0
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
    except OSError as exc:  # a file in the way of its folder, no permission, ...
        parser.error(f"--output {args.output}: {exc.strerror or exc}")
    print(f"wrote {args.output}: {json.dumps(stats(data))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
