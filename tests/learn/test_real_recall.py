"""Recall on unlabelled, timestamped data: replay settings, metrics, selection.

* :class:`ReplayAffect`: labelled events keep their labels; unlabelled events get the
  estimator's affect (estimated once per distinct text) or the neutral point; queries
  keep the state or take their estimated affect; a missing estimate is a clear error.
* Event timestamps drive the replay clock; queries are asked at the latest event time.
* nDCG@k and recall@k against hand-computed values.
* :func:`select_model` never chooses worse than the better of the default config and
  plain cosine on its own inner folds, and its result drives the engine.
* The training CLI runs on data without affect labels (it used to stop with
  ``error: 'valence'``) and reports the new metrics.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emotional_memory import CoreAffect, EmotionalMemory, EmotionalMemoryConfig, InMemoryStore
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.learn import build_recall_batch, select_model, semantic_only_config
from emotional_memory.replay import (
    QueryResult,
    ReplayAffect,
    TickClock,
    replay_dataset,
    replay_scenario,
    summarize,
)
from support.recall_data import unlabelled_dataset


class CountingEstimator:
    """Affect from the text length (deterministic), counting its calls."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        n = np.asarray([len(t) for t in texts], np.float64)
        return np.stack([np.tanh(n / 50.0 - 1.0), (n % 7) / 7.0, (n % 5) / 5.0], axis=1)


# ------------------------------------------------------------------ ReplayAffect


def test_prepare_estimates_each_distinct_text_once() -> None:
    data = unlabelled_dataset()
    est = CountingEstimator()
    settings = ReplayAffect.prepare(data, "estimate", "estimate", estimator=est)
    assert len(est.calls) == 1
    texts = est.calls[0]
    assert len(texts) == len(set(texts)) == 12 + 12  # 12 events and 12 queries
    first = data["scenarios"][0]["sessions"][0]["events"][0]
    expected = est([first["content"]])[0]
    got = settings.event_affect(first)
    assert (got.valence, got.arousal, got.dominance) == pytest.approx(tuple(expected))


def test_labelled_data_needs_no_estimator() -> None:
    data = unlabelled_dataset()
    for scenario in data["scenarios"]:
        for session in scenario["sessions"]:
            for event in session["events"]:
                event.update(valence=0.3, arousal=0.6)

    def refuse(texts: list[str]) -> np.ndarray:
        raise AssertionError("the estimator must not run on labelled data")

    settings = ReplayAffect.prepare(data, estimator=refuse)
    assert settings.table == {}
    event = data["scenarios"][0]["sessions"][0]["events"][0]
    assert settings.event_affect(event) == CoreAffect(valence=0.3, arousal=0.6)


def test_neutral_and_keep_modes() -> None:
    data = unlabelled_dataset()
    settings = ReplayAffect.prepare(data, "neutral", "keep", estimator=CountingEstimator())
    assert settings.table == {}
    event = data["scenarios"][0]["sessions"][0]["events"][0]
    query = data["scenarios"][0]["sessions"][1]["queries"][0]
    assert settings.event_affect(event) == CoreAffect.neutral()
    assert settings.query_affect(query) is None
    assert settings.query_affect({**query, "state": {"valence": -0.5, "arousal": 0.8}}) == (
        CoreAffect(valence=-0.5, arousal=0.8)
    )


def test_missing_estimate_and_bad_modes_are_clear_errors() -> None:
    event = {"memory_id": "x", "content": "never estimated"}
    with pytest.raises(ValueError, match="no affect estimate"):
        ReplayAffect().event_affect(event)
    with pytest.raises(ValueError, match="events"):
        ReplayAffect(events="guess")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="queries"):
        ReplayAffect(queries="always")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        ReplayAffect.prepare({"scenarios": [{"sessions": [{"events": [
            {"memory_id": "a", "content": "one"}, {"memory_id": "b", "content": "two"}]}]}]},
            estimator=lambda texts: np.zeros((len(texts), 2)))


def test_estimated_query_affect_becomes_the_state_and_is_restored() -> None:
    data = unlabelled_dataset(1)
    est = CountingEstimator()
    settings = ReplayAffect.prepare(data, "estimate", "estimate", estimator=est)
    clock = TickClock()
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=64), clock=clock)
    seen: list[tuple[str, CoreAffect]] = []

    def hook(eng: EmotionalMemory, query: dict[str, Any], ids: Any, plan: Any) -> None:
        seen.append((query["query"], eng.get_state().core_affect))

    before: list[CoreAffect] = []
    scenario = data["scenarios"][0]
    replay_scenario(scenario, engine, 2, on_query=hook, affect=settings, clock=clock)
    before.append(engine.get_state().core_affect)
    for text, affect in seen:
        v, a, d = settings.table[text]
        assert (affect.valence, affect.arousal, affect.dominance) == pytest.approx((v, a, d))
    # the state after the replay is the events' state, not the last query's
    last_event = scenario["sessions"][1]["events"][-1]["content"]
    assert before[0] != CoreAffect(valence=settings.table[seen[-1][0]][0],
                                   arousal=settings.table[seen[-1][0]][1])
    assert last_event in settings.table


def test_timestamps_drive_the_clock() -> None:
    data = unlabelled_dataset(1)
    settings = ReplayAffect.prepare(data, "neutral")
    clock = TickClock()
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=64), clock=clock)
    asked: list[datetime] = []

    def hook(eng: EmotionalMemory, query: dict[str, Any], ids: Any, plan: Any) -> None:
        asked.append(plan.now)

    scenario = data["scenarios"][0]
    replay_scenario(scenario, engine, 2, on_query=hook, affect=settings, clock=clock)
    events = [e for s in scenario["sessions"] for e in s["events"]]
    by_content = {m.content: m for m in engine.list_all()}
    for event in events:
        stamp = by_content[event["content"]].tag.timestamp
        assert abs(stamp - datetime.fromisoformat(event["timestamp"])) < timedelta(seconds=1)
    last = datetime.fromisoformat(events[-1]["timestamp"])
    assert asked and all(timedelta(0) <= t - last < timedelta(seconds=1) for t in asked)


def test_unsorted_timestamps_ask_queries_after_every_event() -> None:
    # queries were asked at the timestamp of the last event in file order: with an
    # earlier one last, they were asked before some memories existed (those then
    # read as encoded in the future, at full strength)
    data = unlabelled_dataset(1)
    scenario = data["scenarios"][0]
    events = [e for s in scenario["sessions"] for e in s["events"]]
    stamps = [e["timestamp"] for e in events]
    for event, stamp in zip(events, reversed(stamps), strict=True):
        event["timestamp"] = stamp  # newest first
    clock = TickClock()
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=64), clock=clock)
    asked: list[datetime] = []

    def hook(eng: EmotionalMemory, query: dict[str, Any], ids: Any, plan: Any) -> None:
        asked.append(plan.now)

    replay_scenario(scenario, engine, 2, on_query=hook,
                    affect=ReplayAffect.prepare(data, "neutral"), clock=clock)
    latest = datetime.fromisoformat(max(stamps))
    newest_memory = max(m.tag.timestamp for m in engine.list_all())
    assert timedelta(0) <= newest_memory - latest < timedelta(seconds=1)
    assert asked and all(timedelta(0) <= t - latest < timedelta(seconds=1) for t in asked)


def test_naive_timestamp_is_rejected() -> None:
    data = unlabelled_dataset(1)
    event = data["scenarios"][0]["sessions"][0]["events"][0]
    event["timestamp"] = "2024-03-01T09:00:00"
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=64), clock=TickClock())
    with pytest.raises(ValueError, match="timezone"):
        replay_scenario(data["scenarios"][0], engine, 2, affect=ReplayAffect(events="neutral"),
                        clock=TickClock())


# ------------------------------------------------------------------ metrics


def test_ndcg_and_recall_by_hand() -> None:
    r = QueryResult("s", "q", "c", expected=["a", "b"], retrieved=["x", "a", "y", "b"], k=4)
    ideal = 1.0 + 1.0 / math.log2(3)
    assert r.ndcg == pytest.approx((1.0 / math.log2(3) + 1.0 / math.log2(5)) / ideal)
    assert r.recall == 1.0
    single = QueryResult("s", "q", "c", expected=["a", "b", "c"], retrieved=["c", "z"], k=2)
    assert single.ndcg == pytest.approx(1.0 / (1.0 + 1.0 / math.log2(3)))
    assert single.recall == pytest.approx(1 / 3)
    miss = QueryResult("s", "q", "c", expected=["a"], retrieved=["b"], k=1)
    assert miss.ndcg == 0.0 and miss.recall == 0.0
    summary = summarize([r, single, miss])
    assert summary["ndcg_at_k"] == pytest.approx((r.ndcg + single.ndcg) / 3)
    assert summary["recall_at_k"] == pytest.approx((1.0 + 1 / 3) / 3)


# ------------------------------------------------------------------ selection


@pytest.fixture(scope="module")
def tiny_batch() -> tuple[Any, Any, dict[str, Any], Any]:
    data = unlabelled_dataset(4)
    settings = ReplayAffect.prepare(data, "neutral")
    embedder = HashingEmbedder(dim=64)
    batch, info = build_recall_batch(data, embedder, lexical=True, affect=settings)
    return batch, info, data, settings


def test_select_model_never_loses_to_default_or_cosine(
    tiny_batch: tuple[Any, Any, dict[str, Any], Any],
) -> None:
    batch, info, data, settings = tiny_batch
    for criterion in ("top1", "mrr"):  # never loses by the criterion it chooses by
        by_criterion = select_model(batch, info, steps=40, folds=2, select_by=criterion)
        table = {row["model"]: row for row in by_criterion.selection["table"]}
        chosen = table[by_criterion.selection["chosen"]]
        assert chosen[criterion] >= max(table["default"][criterion],
                                        table["semantic"][criterion])
        assert chosen[criterion] == max(row[criterion] for row in table.values())
    with pytest.raises(ValueError, match="select_by"):
        select_model(batch, info, steps=1, folds=2, select_by="hit")
    result = by_criterion  # the default criterion: MRR
    table = {row["model"]: row for row in result.selection["table"]}
    assert {"default", "semantic", "fitted", "lexical", "lexical_full"} <= set(table)
    # the chosen config is an ordinary config the engine loads and replays with
    config = EmotionalMemoryConfig.model_validate_json(result.config.model_dump_json())
    replayed = summarize(replay_dataset(data, HashingEmbedder(dim=64), config, affect=settings))
    assert replayed["n_queries"] == 24


def test_semantic_only_config_ranks_by_cosine() -> None:
    config = semantic_only_config(EmotionalMemoryConfig())
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=64), config=config)
    for text in ("red apples in autumn", "a blue bicycle", "green apples and pears",
                 "quiet autumn evening"):
        engine.set_affect(CoreAffect(valence=-0.9, arousal=0.95))
        engine.encode(text)
    q = engine.embedder.embed("apples in autumn")

    def cos(a: list[float], b: list[float]) -> float:
        return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))

    oracle = sorted(engine.list_all(), key=lambda m: -cos(q, m.embedding or []))
    got = engine.retrieve("apples in autumn", top_k=4)
    assert [m.id for m in got] == [m.id for m in oracle]


# ------------------------------------------------------------------ CLI


def test_cli_evaluates_unlabelled_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from training.cli import main

    path = tmp_path / "unlabelled.json"
    path.write_text(json.dumps(unlabelled_dataset(2)), encoding="utf-8")
    assert main(["evaluate", "--dataset", str(path), "--affect", "neutral", "--json",
                 "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_queries"] == 12
    assert {"top1", "hit_at_k", "mrr", "ndcg_at_k", "recall_at_k"} <= set(out)


def test_cli_fit_checks_the_output_directory_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from training.cli import main

    missing = tmp_path / "missing" / "fitted.json"
    assert main(["fit", "--out", str(missing), "--quiet", "--json"]) == 2
    assert "does not exist" in capsys.readouterr().err
