"""The built-in labelled recall dataset: format, invariants, determinism, replay."""

from __future__ import annotations

import importlib.util
import json
from types import ModuleType
from typing import Any

import pytest

from emotional_memory.data import builtin_dataset_path, load_builtin_dataset
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.replay import load_dataset, replay_dataset, summarize
from support.paths import ROOT

GENERATOR = ROOT / "training" / "make_builtin_dataset.py"
CHALLENGE_TYPES = {
    "affective_arc",
    "momentum_alignment",
    "same_topic_distractor",
    "semantic_confound",
    "recency_confound",
}


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    return load_dataset(builtin_dataset_path())


def _queries(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [q for sc in data["scenarios"] for s in sc["sessions"] for q in s["queries"]]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_builtin_dataset", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_file_ships_inside_the_package() -> None:
    path = builtin_dataset_path()
    assert path.is_file()
    assert path.parent.name == "data"
    assert load_builtin_dataset() == json.loads(path.read_text(encoding="utf-8"))


def test_header(data: dict[str, Any]) -> None:
    assert data["name"] == "builtin_recall"
    assert data["version"] == "1.0"
    assert "training/make_builtin_dataset.py" in data["description"]
    assert data["default_top_k"] == 2


def test_shape(data: dict[str, Any]) -> None:
    scenarios = data["scenarios"]
    assert len(scenarios) == 30
    assert len({sc["scenario_id"] for sc in scenarios}) == len(scenarios)
    for sc in scenarios:
        assert sc["description"]
        assert len(sc["sessions"]) == 2
        assert len({s["session_id"] for s in sc["sessions"]}) == 2
        for s in sc["sessions"]:
            assert s["description"]
            assert len(s["events"]) == 3
        assert sc["sessions"][0]["queries"] == []
        assert 1 <= len(sc["sessions"][1]["queries"]) <= 3
    assert 70 <= len(_queries(data)) <= 90


def test_ids_unique_and_expected_ids_already_encoded(data: dict[str, Any]) -> None:
    for sc in data["scenarios"]:
        seen: set[str] = set()
        query_ids: set[str] = set()
        for s in sc["sessions"]:
            for e in s["events"]:
                assert e["memory_id"] not in seen, (sc["scenario_id"], e["memory_id"])
                assert e["memory_id"].isidentifier() and e["memory_id"].islower()
                seen.add(e["memory_id"])
            for q in s["queries"]:
                assert q["query_id"] not in query_ids
                query_ids.add(q["query_id"])
                assert q["expected_memory_ids"]
                # Only memories of this or an earlier session can be expected.
                assert set(q["expected_memory_ids"]) <= seen, (sc["scenario_id"], q)


def test_affect_in_range(data: dict[str, Any]) -> None:
    for sc in data["scenarios"]:
        for s in sc["sessions"]:
            for e in s["events"]:
                assert -1.0 <= e["valence"] <= 1.0
                assert 0.0 <= e["arousal"] <= 1.0
                assert isinstance(e["metadata"], dict)
            for q in s["queries"]:
                assert -1.0 <= q["state"]["valence"] <= 1.0
                assert 0.0 <= q["state"]["arousal"] <= 1.0
    valences = [e["valence"] for sc in data["scenarios"] for s in sc["sessions"]
                for e in s["events"]]
    # Real arcs: both clearly negative and clearly positive memories occur.
    assert min(valences) < -0.7 and max(valences) > 0.7


def test_event_texts_are_short_sentences(data: dict[str, Any]) -> None:
    contents = [e["content"] for sc in data["scenarios"] for s in sc["sessions"]
                for e in s["events"]]
    assert len(set(contents)) == len(contents)
    for text in contents:
        assert 10 <= len(text.split()) <= 25, text
    for q in _queries(data):
        assert q["query"].strip()


def test_all_challenge_types_present_and_balanced(data: dict[str, Any]) -> None:
    counts: dict[str, int] = {}
    for q in _queries(data):
        counts[q["challenge_type"]] = counts.get(q["challenge_type"], 0) + 1
    assert set(counts) == CHALLENGE_TYPES
    assert max(counts.values()) - min(counts.values()) <= 3


def test_generator_is_deterministic_and_file_is_current(data: dict[str, Any]) -> None:
    gen = _generator()
    built = gen.build()
    assert built == gen.build()
    assert built == data
    assert gen.dumps(built) == builtin_dataset_path().read_text(encoding="utf-8")


def test_generator_seed_changes_only_affect(data: dict[str, Any]) -> None:
    other = _generator().build(seed=1)
    assert other != data
    assert [q["query"] for q in _queries(other)] == [q["query"] for q in _queries(data)]


def test_replay_with_hashing_embedder(data: dict[str, Any]) -> None:
    results = replay_dataset(data, HashingEmbedder(dim=384))
    assert len(results) == len(_queries(data))
    metrics = summarize(results)
    for key in ("top1", "hit_at_k", "mrr"):
        assert 0.0 <= metrics[key] <= 1.0
    assert metrics["top1"] <= metrics["hit_at_k"]
    assert set(metrics["by_challenge"]) == CHALLENGE_TYPES
    assert all(0.0 <= v <= 1.0 for v in metrics["by_challenge"].values())
    assert all(len(r.retrieved) <= data["default_top_k"] for r in results)


@pytest.mark.parametrize("check", [False, True])
def test_generator_output_that_is_a_folder_is_a_usage_error(
    check: bool, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # IsADirectoryError's traceback was printed instead
    argv = ["--output", str(tmp_path), *(["--check"] if check else [])]
    with pytest.raises(SystemExit) as info:
        _generator().main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--output" in err and str(tmp_path) in err and "Traceback" not in err
