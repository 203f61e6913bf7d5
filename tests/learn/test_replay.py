"""The replay harness (emotional_memory.replay) and the published v2 figures.

* The labelled v2 data set replayed with the MiniLM lookup table gives exactly the
  published figures (top-1 112/200, hit@2 165/200); plain cosine over the same
  embeddings gives the published pure-cosine figures (82/200, 131/200), which checks
  the embeddings and the protocol independently of the engine.
* The protocol pieces on a small synthetic data set: id mapping, per-scenario fresh
  engines, state set per query and restored after it, top_k, summary metrics,
  dataset validation and the lookup embedder's errors.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emotional_memory import CoreAffect, EmotionalMemory, InMemoryStore, SQLiteStore
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.replay import (
    LookupEmbedder,
    QueryResult,
    TickClock,
    default_engine_factory,
    load_dataset,
    replay_dataset,
    replay_scenario,
    summarize,
)
from support.paths import SHARED_DATA

DATA_DIR = SHARED_DATA
V2_JSON = DATA_DIR / "realistic_recall_v2.json"
V2_NPZ = DATA_DIR / "realistic_recall_v2.minilm.npz"

# ------------------------------------------------------------------ v2 (real data)


@pytest.fixture(scope="module")
def v2() -> tuple[dict[str, Any], LookupEmbedder]:
    if not DATA_DIR.is_dir():
        pytest.skip("../shared/data not present (CI always has it)")
    return load_dataset(V2_JSON), LookupEmbedder.from_npz(V2_NPZ)


@pytest.fixture(scope="module")
def v2_results(v2: tuple[dict[str, Any], LookupEmbedder]) -> list[QueryResult]:
    data, embedder = v2
    return replay_dataset(data, embedder)


def test_v2_replay_reproduces_published_figures(v2_results: list[QueryResult]) -> None:
    summary = summarize(v2_results)
    assert summary["n_queries"] == 200
    assert sum(r.top1 for r in v2_results) == 112
    assert sum(r.hit for r in v2_results) == 165
    assert summary["top1"] == 112 / 200 == 0.560
    assert summary["hit_at_k"] == 165 / 200 == 0.825
    assert set(summary["by_challenge"]) == {
        "affective_arc", "momentum_alignment", "same_topic_distractor",
        "semantic_confound", "recency_confound",
    }
    # by_challenge is the top-1 rate per challenge (40 queries each).
    for challenge, rate in summary["by_challenge"].items():
        group = [r for r in v2_results if r.challenge_type == challenge]
        assert len(group) == 40
        assert rate == sum(r.top1 for r in group) / 40
    assert summary["mrr"] == pytest.approx(
        sum(r.reciprocal_rank for r in v2_results) / 200, abs=1e-12
    )
    # top-1 <= MRR <= hit@2 for k = 2
    assert summary["top1"] <= summary["mrr"] <= summary["hit_at_k"]


def test_v2_results_use_dataset_ids(
    v2: tuple[dict[str, Any], LookupEmbedder], v2_results: list[QueryResult]
) -> None:
    data, _ = v2
    ids_by_scenario = {
        s["scenario_id"]: {e["memory_id"] for ses in s["sessions"] for e in ses["events"]}
        for s in data["scenarios"]
    }
    queries = [
        (s["scenario_id"], q) for s in data["scenarios"] for ses in s["sessions"]
        for q in ses["queries"]
    ]
    assert [(r.scenario_id, r.query_id) for r in v2_results] == [
        (sid, q["query_id"]) for sid, q in queries
    ]
    for r, (_, q) in zip(v2_results, queries, strict=True):
        assert len(r.retrieved) == data["default_top_k"] == 2
        assert set(r.retrieved) <= ids_by_scenario[r.scenario_id]
        assert r.expected == q["expected_memory_ids"]
        assert r.challenge_type == q["challenge_type"]
        assert [e.pass2_rank for e in r.explanations] == [1, 2]


def test_v2_replay_on_sqlite_store_gives_same_rankings(
    v2: tuple[dict[str, Any], LookupEmbedder], v2_results: list[QueryResult]
) -> None:
    """MiniLM vectors are float32 already: the durable store's float32 blobs lose nothing."""
    data, embedder = v2

    def factory(emb: Any, clock: TickClock) -> EmotionalMemory:
        return EmotionalMemory(SQLiteStore(":memory:"), emb, clock=clock)

    results = replay_dataset(data, embedder, engine_factory=factory)
    assert [r.retrieved for r in results] == [r.retrieved for r in v2_results]
    assert [[e.score for e in r.explanations] for r in results] == [
        [e.score for e in r.explanations] for r in v2_results
    ]


def test_v2_pure_cosine_reproduces_published_figures(
    v2: tuple[dict[str, Any], LookupEmbedder],
) -> None:
    data, embedder = v2
    k = data["default_top_k"]
    top1 = hit = n = 0
    for scenario in data["scenarios"]:
        ids: list[str] = []
        rows: list[list[float]] = []
        for session in scenario["sessions"]:
            for event in session["events"]:
                ids.append(event["memory_id"])
                rows.append(embedder.embed(event["content"]))
            for query in session["queries"]:
                bank = np.asarray(rows)
                q = np.asarray(embedder.embed(query["query"]))
                cos = bank @ q / (np.linalg.norm(bank, axis=1) * np.linalg.norm(q))
                ranked = [ids[i] for i in np.argsort(-cos, kind="stable")[:k]]
                expected = set(query["expected_memory_ids"])
                top1 += ranked[0] in expected
                hit += any(r in expected for r in ranked)
                n += 1
    assert n == 200
    assert (top1, hit) == (82, 131)
    assert top1 / n == 0.410
    assert hit / n == 0.655


def test_v2_lookup_table_covers_dataset(v2: tuple[dict[str, Any], LookupEmbedder]) -> None:
    data, embedder = v2
    assert embedder.dim == 384
    texts = [e["content"] for s in data["scenarios"] for ses in s["sessions"]
             for e in ses["events"]]
    texts += [q["query"] for s in data["scenarios"] for ses in s["sessions"]
              for q in ses["queries"]]
    assert len(texts) == 500
    assert all(t in embedder for t in texts)
    vecs = np.asarray(embedder.embed_batch(texts[:20]))
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)


# ----------------------------------------------------------- synthetic data set


def _event(mid: str, content: str, v: float, a: float, **extra: Any) -> dict[str, Any]:
    return {"memory_id": mid, "content": content, "valence": v, "arousal": a, **extra}


def _query(qid: str, text: str, expected: list[str], challenge: str,
           state: tuple[float, float] | None = None) -> dict[str, Any]:
    q: dict[str, Any] = {"query_id": qid, "query": text, "expected_memory_ids": expected,
                         "challenge_type": challenge}
    if state is not None:
        q["state"] = {"valence": state[0], "arousal": state[1]}
    return q


def synthetic() -> dict[str, Any]:
    return {
        "name": "synthetic",
        "default_top_k": 3,
        "scenarios": [
            {
                "scenario_id": "s1",
                "sessions": [
                    {
                        "session_id": "s1a",
                        "events": [
                            _event("crash", "The production server crashed before the launch "
                                   "demo", -0.9, 0.95, metadata={"phase": "crisis"}),
                            _event("coffee", "A quiet coffee with an old friend in the garden",
                                   0.6, 0.2),
                            _event("budget", "The budget meeting ran two hours over", -0.2,
                                   0.3),
                            _event("rollback", "We rolled back the server release at 2am",
                                   0.2, 0.6),
                        ],
                        "queries": [
                            _query("q1", "server crashed before the launch", ["crash"],
                                   "semantic", state=(-0.8, 0.9)),
                            _query("q2", "coffee with a friend in the garden", ["coffee"],
                                   "affective"),
                        ],
                    },
                    {
                        "session_id": "s1b",
                        "events": [
                            _event("fixed", "The launch finally went well and the server "
                                   "held", 0.85, 0.7),
                        ],
                        "queries": [
                            _query("q3", "the launch went well", ["fixed", "crash"],
                                   "semantic", state=(0.7, 0.5)),
                            _query("q4", "zebra quantum accordion", ["never_encoded"],
                                   "affective"),
                        ],
                    },
                ],
            },
            {
                "scenario_id": "s2",
                "sessions": [
                    {
                        "session_id": "s2a",
                        "events": [
                            _event("flight", "The flight was cancelled and we slept at the "
                                   "airport", -0.7, 0.8),
                            _event("party", "My sister threw a surprise birthday party", 0.9,
                                   0.85),
                        ],
                        "queries": [
                            _query("q5", "surprise birthday party", ["party"], "recency"),
                        ],
                    },
                    {
                        "session_id": "s2b",
                        "events": [],
                        "queries": [
                            _query("q6", "cancelled flight at the airport", ["flight"],
                                   "semantic", state=(-0.5, 0.7)),
                        ],
                    },
                ],
            },
        ],
    }


def _write(tmp_path: Path, data: object, name: str = "data.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


class RecordingEngine(EmotionalMemory):
    """Logs the state around every protocol step."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.log: list[tuple[str, Any, dict[str, Any]]] = []
        self.closed = False

    def set_affect(self, affect: CoreAffect) -> Any:
        out = super().set_affect(affect)
        self.log.append(("set_affect", (affect.valence, affect.arousal), self.save_state()))
        return out

    def encode(self, content: str, *args: Any, **kwargs: Any) -> Any:
        memory = super().encode(content, *args, **kwargs)
        self.log.append(("encode", memory, self.save_state()))
        return memory

    def retrieve_with_explanations(self, query: str, top_k: int = 5, **kw: Any) -> Any:
        self.log.append(("retrieve", (query, top_k), self.save_state()))
        return super().retrieve_with_explanations(query, top_k, **kw)

    def close(self) -> None:
        self.closed = True
        super().close()


def _recording_factory(made: list[RecordingEngine]) -> Any:
    def factory(embedder: Any, clock: TickClock) -> EmotionalMemory:
        assert clock() == datetime(2026, 1, 1, tzinfo=UTC)  # a fresh clock per scenario
        engine = RecordingEngine(InMemoryStore(), embedder, clock=clock)
        made.append(engine)
        return engine

    return factory


def loadable() -> dict[str, Any]:
    """:func:`synthetic` without q4, whose expected memory is never encoded (replayed
    as a miss, refused by ``load_dataset``)."""
    data = synthetic()
    del data["scenarios"][0]["sessions"][1]["queries"][1]
    return data


def test_load_dataset_roundtrip(tmp_path: Path) -> None:
    data = loadable()
    assert load_dataset(_write(tmp_path, data)) == data
    assert load_dataset(str(_write(tmp_path, data, "b.json"))) == data


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"name": "x"},
        {"scenarios": {"s1": {}}},
        {"scenarios": "none"},
    ],
)
def test_load_dataset_requires_scenarios(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ValueError, match="scenarios"):
        load_dataset(_write(tmp_path, bad))


def test_load_dataset_rejects_an_expected_id_never_encoded(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="never_encoded"):
        load_dataset(_write(tmp_path, synthetic()))


@pytest.mark.parametrize(("edit", "field"), [
    (lambda d: d["scenarios"][0]["sessions"][0]["events"][1].update(valence=2.0), "valence"),
    (lambda d: d["scenarios"][0]["sessions"][0]["events"][1].pop("memory_id"), "memory_id"),
    (lambda d: d["scenarios"][0]["sessions"][0]["events"][1].pop("content"), "content"),
    (lambda d: d["scenarios"][0]["sessions"][0]["queries"][0].pop("expected_memory_ids"),
     "expected_memory_ids"),
    (lambda d: d["scenarios"][0]["sessions"][0]["queries"][0].update(state={"valence": 0.1}),
     "arousal"),
    (lambda d: d.update(scenarios="none"), "scenarios"),
])
def test_replay_refuses_a_malformed_dataset_naming_the_field(
    edit: Callable[[dict[str, Any]], Any], field: str
) -> None:
    # replay_dataset / replay_scenario take data not read by load_dataset: a valence
    # of 2 was silently clamped, a missing id a KeyError, a bad list an AttributeError
    data = synthetic()  # an expected id no event has is allowed here (ablations)
    edit(data)
    with pytest.raises(ValueError, match=field):
        replay_dataset(data, HashingEmbedder(dim=16))
    if isinstance(data["scenarios"], list):
        with pytest.raises(ValueError, match=field):
            replay_scenario(data["scenarios"][0], default_engine_factory()(
                HashingEmbedder(dim=16), TickClock()), 2)


@pytest.mark.parametrize(("edit", "typo", "meant"), [
    (lambda d: d["scenarios"][0]["sessions"][0]["events"][1].update(
        valance=d["scenarios"][0]["sessions"][0]["events"][1].pop("valence")),
     "valance", "valence"),
    (lambda d: d["scenarios"][0]["sessions"][0]["events"][0].update(
        timestamps="2026-01-01T00:00:00Z"), "timestamps", "timestamp"),
    (lambda d: d["scenarios"][0]["sessions"][0]["queries"][0].update(
        expected_memory_id=d["scenarios"][0]["sessions"][0]["queries"][0][
            "expected_memory_ids"]), "expected_memory_id", "expected_memory_ids"),
    (lambda d: d["scenarios"][0]["sessions"][0]["queries"][0].update(
        state={"valence": 0.2, "arousal": 0.3, "arousl": 0.4}), "arousl", "arousal"),
    (lambda d: d["scenarios"][0]["sessions"][0].update(querys=[]), "querys", "queries"),
    (lambda d: d.update(default_topk=3), "default_topk", "default_top_k"),
])
def test_load_dataset_warns_of_a_misspelt_field_naming_the_one_meant(
    tmp_path: Path, edit: Callable[[dict[str, Any]], Any], typo: str, meant: str
) -> None:
    # a misspelt field was silently ignored: "valance" left the event without an
    # affect (estimated from its text instead), "timestamps" without its time
    data = loadable()
    edit(data)
    with pytest.warns(UserWarning, match=rf"field '{typo}' is not read.*'{meant}'"):
        try:
            loaded = load_dataset(_write(tmp_path, data))
        except ValueError as exc:  # "valance" beside "arousal": valence is missing
            assert f"'{meant}' is missing" in str(exc)
        else:
            assert loaded == data


def test_a_misspelling_repeated_in_every_event_is_one_warning(tmp_path: Path) -> None:
    data = loadable()
    events = [e for sc in data["scenarios"] for se in sc["sessions"] for e in se["events"]]
    for event in events:
        event["timestamps"] = "2026-01-01T00:00:00Z"
    with pytest.warns(UserWarning) as caught:
        load_dataset(_write(tmp_path, data))
    messages = [str(w.message) for w in caught if "timestamps" in str(w.message)]
    assert len(messages) == 1 and f"({len(events)} places have it)" in messages[0]


def test_load_dataset_keeps_extra_fields_that_are_no_misspelling(tmp_path: Path) -> None:
    import warnings

    data = loadable()
    data.update(default_top_k_note="x", source="LoCoMo")
    data["scenarios"][0].update(topic="travel", arc="loss", scenario_name="a",
                                scenario_title="b")
    session = data["scenarios"][0]["sessions"][0]
    session.update(session_date="2023-05-08", session_time="1:56 pm")
    session["events"][0].update(speaker="Ana", dia_id="D1:3", valence_std=0.1,
                                arousal_sd=0.2, timestamp_utc="x", img_url=["u"])
    session["queries"][0].update(category=2, evidence=["D1:3"], query_time="t",
                                 query_date="d")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_dataset(_write(tmp_path, data)) == data


@pytest.mark.parametrize("expected", [None, []])
def test_load_dataset_rejects_query_without_expected_ids(
    tmp_path: Path, expected: list[str] | None
) -> None:
    data = loadable()
    query = data["scenarios"][1]["sessions"][1]["queries"][0]
    if expected is None:
        del query["expected_memory_ids"]
    else:
        query["expected_memory_ids"] = expected
    with pytest.raises(ValueError, match="q6") as info:
        load_dataset(_write(tmp_path, data))
    assert "expected_memory_ids" in str(info.value)


def test_replay_maps_ids_and_uses_fresh_engines() -> None:
    data = synthetic()
    made: list[RecordingEngine] = []
    results = replay_dataset(data, HashingEmbedder(dim=64),
                             engine_factory=_recording_factory(made))
    assert [(r.scenario_id, r.query_id) for r in results] == [
        ("s1", "q1"), ("s1", "q2"), ("s1", "q3"), ("s1", "q4"), ("s2", "q5"), ("s2", "q6"),
    ]
    assert [r.challenge_type for r in results] == [
        "semantic", "affective", "semantic", "affective", "recency", "semantic",
    ]
    # one fresh engine per scenario, closed afterwards, holding only its own events
    assert len(made) == 2 and all(e.closed for e in made)
    assert len(made[0].store) == 5 and len(made[1].store) == 2
    so_far = {
        "q1": {"crash", "coffee", "budget", "rollback"},
        "q2": {"crash", "coffee", "budget", "rollback"},
        "q3": {"crash", "coffee", "budget", "rollback", "fixed"},
        "q4": {"crash", "coffee", "budget", "rollback", "fixed"},
        "q5": {"flight", "party"},
        "q6": {"flight", "party"},
    }
    for r in results:
        # dataset ids, not engine uuids; default_top_k (3) capped by the events so far
        assert set(r.retrieved) <= so_far[r.query_id]
        assert len(r.retrieved) == len(set(r.retrieved)) == min(3, len(so_far[r.query_id]))
        assert [e.pass2_rank for e in r.explanations] == list(range(1, len(r.retrieved) + 1))
        engine = made[0] if r.scenario_id == "s1" else made[1]
        id_of = {m.id: m.content for m in engine.store.list_all()}
        contents = {e["memory_id"]: e["content"] for s in data["scenarios"]
                    for ses in s["sessions"] for e in ses["events"]}
        assert [id_of[e.memory.id] for e in r.explanations] == [
            contents[x] for x in r.retrieved
        ]
    by_id = {r.query_id: r for r in results}
    # lexical overlap is strong enough for the hashing embedder on these
    assert by_id["q1"].retrieved[0] == "crash"
    assert by_id["q2"].retrieved[0] == "coffee"
    assert by_id["q5"].retrieved[0] == "party"
    assert by_id["q6"].retrieved[0] == "flight"
    assert not by_id["q4"].hit and by_id["q4"].reciprocal_rank == 0.0
    # metadata travels with the memory
    crash = next(m for m in made[0].store.list_all() if m.content.startswith("The production"))
    assert crash.metadata == {"phase": "crisis"}


def test_replay_sets_event_affect_and_restores_state_after_each_query() -> None:
    data = synthetic()
    made: list[RecordingEngine] = []
    replay_dataset(data, HashingEmbedder(dim=64), engine_factory=_recording_factory(made))
    engine = made[0]
    events = [e for ses in data["scenarios"][0]["sessions"] for e in ses["events"]]
    queries = [q for ses in data["scenarios"][0]["sessions"] for q in ses["queries"]]
    log = engine.log

    # before each event: set_affect(valence, arousal), then encode; the tag shows it
    encodes = [i for i, entry in enumerate(log) if entry[0] == "encode"]
    assert len(encodes) == len(events)
    for i, event in zip(encodes, events, strict=True):
        kind, pair, _ = log[i - 1]
        assert kind == "set_affect"
        assert pair == (event["valence"], event["arousal"])
        tag = log[i][1].tag
        assert (tag.core_affect.valence, tag.core_affect.arousal) == pair

    # per query: the retrieval sees the query state (when given), and afterwards the
    # state is exactly what it was before the query
    retrieves = [i for i, entry in enumerate(log) if entry[0] == "retrieve"]
    assert [log[i][1] for i in retrieves] == [(q["query"], 3) for q in queries]
    for i, query in zip(retrieves, queries, strict=True):
        before = next(entry[2] for entry in reversed(log[:i]) if entry[0] == "encode")
        at_retrieval = log[i][2]
        if "state" in query:
            kind, pair, _ = log[i - 1]
            assert kind == "set_affect"
            assert pair == (query["state"]["valence"], query["state"]["arousal"])
            assert at_retrieval["core_affect"]["valence"] == query["state"]["valence"]
            assert at_retrieval["core_affect"]["arousal"] == query["state"]["arousal"]
            assert at_retrieval != before
        else:
            assert at_retrieval == before  # the previous query's state was undone
    last_encode_state = next(e[2] for e in reversed(log) if e[0] == "encode")
    assert engine.save_state() == last_encode_state


def test_replay_scenario_hook_and_state_restoration_direct() -> None:
    scenario = synthetic()["scenarios"][0]
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=64), clock=TickClock())
    seen: list[tuple[str, dict[str, str], dict[str, Any]]] = []

    def on_query(
        eng: EmotionalMemory, query: dict[str, Any], id_map: dict[str, str], *rest: Any
    ) -> None:
        assert eng is engine
        seen.append((query["query_id"], dict(id_map), eng.save_state()))

    results = replay_scenario(scenario, engine, 2, on_query=on_query)
    assert [r.query_id for r in results] == ["q1", "q2", "q3", "q4"]
    assert all(len(r.retrieved) == 2 for r in results)
    assert sorted(seen[0][1].values()) == ["budget", "coffee", "crash", "rollback"]
    assert sorted(seen[2][1].values()) == ["budget", "coffee", "crash", "fixed", "rollback"]
    assert set(seen[2][1]) == {m.id for m in engine.list_all()}
    # the hook sees the query state already set
    assert seen[0][2]["core_affect"]["valence"] == -0.8
    assert seen[2][2]["core_affect"]["valence"] == 0.7
    # q2 / q4 carry no state: the hook sees the state restored after q1 / q3
    assert seen[1][2]["core_affect"]["valence"] == 0.2  # the last event's (rollback)
    assert seen[3][2]["core_affect"]["valence"] == 0.85  # fixed

    # the hook only observes: same rankings and scores as a replay without it
    plain = replay_scenario(
        scenario, EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=64), clock=TickClock()), 2
    )
    assert [r.retrieved for r in plain] == [r.retrieved for r in results]
    assert [[e.score for e in r.explanations] for r in plain] == [
        [e.score for e in r.explanations] for r in results
    ]

    def tags(rs: list[QueryResult]) -> list[list[Any]]:
        # link ids are uuids that differ between engines: keep only their strengths
        return [
            [
                (e.memory.tag.model_dump(exclude={"resonance_links"}),
                 [link.strength for link in e.memory.tag.resonance_links])
                for e in r.explanations
            ]
            for r in rs
        ]

    assert tags(plain) == tags(results)


def test_replay_top_k_and_determinism() -> None:
    data = synthetic()
    emb = HashingEmbedder(dim=64)
    a = replay_dataset(data, emb)
    b = replay_dataset(data, emb)
    assert [r.retrieved for r in a] == [r.retrieved for r in b]
    assert [[e.score for e in r.explanations] for r in a] == [
        [e.score for e in r.explanations] for r in b
    ]
    assert all(len(r.retrieved) == 1 for r in replay_dataset(data, emb, top_k=1))
    del data["default_top_k"]
    assert all(len(r.retrieved) == 2 for r in replay_dataset(data, emb))
    # a config is honoured through the default factory
    factory = default_engine_factory()
    engine = factory(emb, TickClock())
    assert isinstance(engine.store, InMemoryStore) and len(engine) == 0


def test_summarize_metrics_and_per_challenge() -> None:
    def qr(challenge: str, expected: list[str], retrieved: list[str]) -> QueryResult:
        return QueryResult("s", "q", challenge, expected, retrieved)

    results = [
        qr("a", ["x"], ["x", "y"]),       # top1, hit, rr 1
        qr("a", ["y"], ["x", "y"]),       # hit, rr 1/2
        qr("b", ["z"], ["x", "y"]),       # miss, rr 0
        qr("b", ["x", "z"], ["z", "x"]),  # top1, hit, rr 1
        qr("c", ["x"], []),               # nothing retrieved
    ]
    assert [r.top1 for r in results] == [True, False, False, True, False]
    assert [r.hit for r in results] == [True, True, False, True, False]
    assert [r.reciprocal_rank for r in results] == [1.0, 0.5, 0.0, 1.0, 0.0]
    s = summarize(results)
    assert s["n_queries"] == 5
    assert s["top1"] == pytest.approx(2 / 5)
    assert s["hit_at_k"] == pytest.approx(3 / 5)
    assert s["mrr"] == pytest.approx(2.5 / 5)
    assert s["by_challenge"] == {"a": 0.5, "b": 0.5, "c": 0.0}
    assert list(s["by_challenge"]) == ["a", "b", "c"]
    empty = summarize([])
    assert empty["n_queries"] == 0
    assert empty["top1"] == empty["hit_at_k"] == empty["mrr"] == 0.0
    assert empty["by_challenge"] == {}


def test_summarize_on_synthetic_replay_matches_results() -> None:
    results = replay_dataset(synthetic(), HashingEmbedder(dim=64))
    s = summarize(results)
    n = len(results)
    assert s["n_queries"] == n == 6
    assert s["top1"] == pytest.approx(sum(r.top1 for r in results) / n)
    assert s["hit_at_k"] == pytest.approx(sum(r.hit for r in results) / n)
    assert s["mrr"] == pytest.approx(sum(r.reciprocal_rank for r in results) / n)
    assert set(s["by_challenge"]) == {"semantic", "affective", "recency"}
    sem = [r for r in results if r.challenge_type == "semantic"]
    assert s["by_challenge"]["semantic"] == pytest.approx(sum(r.top1 for r in sem) / len(sem))


# ------------------------------------------------------------------ LookupEmbedder


def test_lookup_embedder_lookup_and_unknown_text(tmp_path: Path) -> None:
    texts = ["alpha", "beta", "gamma"]
    emb = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    e = LookupEmbedder(texts, emb)
    assert e.dim == 4
    assert "beta" in e and "delta" not in e and 3 not in e
    assert e.embed("beta") == emb[1].astype(np.float64).tolist()
    assert e.embed_batch(["gamma", "alpha"]) == [e.embed("gamma"), e.embed("alpha")]
    with pytest.raises(KeyError, match="not in the table at all"):
        e.embed("not in the table at all")
    with pytest.raises(KeyError, match="omega"):
        e.embed_batch(["alpha", "omega"])

    path = tmp_path / "table.npz"
    np.savez(path, texts=np.array(texts), embeddings=emb)
    loaded = LookupEmbedder.from_npz(path)
    assert loaded.dim == 4
    assert [loaded.embed(t) for t in texts] == [e.embed(t) for t in texts]


@pytest.mark.parametrize(
    ("n_texts", "shape"),
    [(3, (3,)), (3, (2, 4)), (3, (4, 4)), (2, (2, 2, 2)), (1, ())],
)
def test_lookup_embedder_validates_shape(n_texts: int, shape: tuple[int, ...]) -> None:
    texts = [f"t{i}" for i in range(n_texts)]
    with pytest.raises(ValueError, match="shape"):
        LookupEmbedder(texts, np.zeros(shape, dtype=np.float32))


def test_lookup_embedder_drives_a_replay(tmp_path: Path) -> None:
    """A table built from another embedder replays exactly like that embedder."""
    data = synthetic()
    texts = sorted(
        {e["content"] for s in data["scenarios"] for ses in s["sessions"] for e in ses["events"]}
        | {q["query"] for s in data["scenarios"] for ses in s["sessions"]
           for q in ses["queries"]}
    )
    hashing = HashingEmbedder(dim=64)
    table = np.asarray(hashing.embed_batch(texts), dtype=np.float32)
    path = tmp_path / "synthetic.npz"
    np.savez(path, texts=np.array(texts), embeddings=table)
    lookup = LookupEmbedder.from_npz(path)
    via_table = replay_dataset(data, lookup)
    assert summarize(via_table)["n_queries"] == 6
    # Same rankings as the float32-rounded hashing vectors.

    class F32:
        def embed(self, text: str) -> list[float]:
            row: list[float] = np.asarray(hashing.embed(text), np.float32).astype(
                np.float64).tolist()
            return row

        def embed_batch(self, ts: list[str]) -> list[list[float]]:
            return [self.embed(t) for t in ts]

    direct = replay_dataset(data, F32())
    assert [r.retrieved for r in via_table] == [r.retrieved for r in direct]
    missing = json.loads(json.dumps(data))
    missing["scenarios"][0]["sessions"][0]["queries"][0]["query"] = "an unseen query"
    with pytest.raises(KeyError, match="an unseen query"):
        replay_dataset(missing, lookup)


def test_replay_top_k_that_is_no_int_is_refused_naming_it() -> None:
    """``int(top_k)`` turned True into 1, 2.7 into 2 and "3" into 3."""
    emb = HashingEmbedder(dim=64)
    for bad in (True, 2.7, "3"):
        with pytest.raises(TypeError, match="top_k"):
            replay_dataset(synthetic(), emb, top_k=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top_k"):
        replay_dataset(synthetic(), emb, top_k=0)
    assert all(len(r.retrieved) == 1 for r in replay_dataset(synthetic(), emb,
                                                             top_k=np.int64(1)))  # type: ignore[arg-type]


def test_load_dataset_undecodable_or_too_deep_names_the_file(tmp_path: Path) -> None:
    """Latin-1 bytes raised a bare UnicodeDecodeError and deep nesting a RecursionError."""
    latin = tmp_path / "latin.json"
    latin.write_bytes('{"scenarios": [], "name": "caf\u00e9"}'.encode("latin-1"))
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    for path in (latin, deep):
        with pytest.raises(ValueError, match=f"{path.name}: not valid"):
            load_dataset(path)
