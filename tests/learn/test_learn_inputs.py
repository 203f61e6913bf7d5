"""Researchers' own data and arguments reaching the learning API.

* cross-validation replays every held-out scenario, whatever the JSON type of its
  ``scenario_id``;
* a malformed dataset (a missing or mistyped field, an expected id naming no memory,
  no queries) is refused with one line naming the place and the field, by
  ``load_dataset``, by the learning API given the dict and by the command line;
* an embeddings table (``.npz``) with other arrays, shapes or dtypes, NaN rows, or no
  archive at all is refused naming the file and the array;
* ``fit`` / ``select_model`` refuse a train_mask of the wrong shape or dtype, one that
  selects nothing, and a learning rate <= 0;
* the command line refuses nonsense numbers as usage errors naming the option, and an
  ``--out`` / ``--plot`` / ``--folds`` / ``--config`` it cannot use before any fit, in
  one line.
"""

from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emotional_memory.data import load_builtin_dataset
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.learn import (
    RecallBatch,
    RecallInfo,
    build_recall_batch,
    cross_validate,
    fit,
    select_model,
    subset_dataset,
)
from emotional_memory.replay import LookupEmbedder, load_dataset
from support.paths import ROOT


@pytest.fixture(scope="module")
def small() -> dict[str, Any]:
    """Six scenarios of the built-in dataset (labelled affect: no text model needed)."""
    data = load_builtin_dataset()
    return {**data, "scenarios": copy.deepcopy(data["scenarios"][:6])}


def test_subset_dataset_matches_integer_scenario_ids(small: dict[str, Any]) -> None:
    data = copy.deepcopy(small)
    for i, scenario in enumerate(data["scenarios"]):
        scenario["scenario_id"] = i + 1
    # the batch's info holds the ids as strings
    kept = subset_dataset(data, ["2", "5"])
    assert [s["scenario_id"] for s in kept["scenarios"]] == [2, 5]


def test_cross_validation_with_integer_scenario_ids(small: dict[str, Any]) -> None:
    data = copy.deepcopy(small)
    for i, scenario in enumerate(data["scenarios"]):
        scenario["scenario_id"] = i + 1
    n_queries = sum(len(s["queries"]) for sc in data["scenarios"] for s in sc["sessions"])
    cv = cross_validate(data, HashingEmbedder(dim=384), folds=3, select=False, steps=5)
    assert cv.metrics["n_queries"] == n_queries == cv.default_metrics["n_queries"]
    assert sum(f["n_queries"] for f in cv.fold_metrics) == n_queries


Edit = Callable[[dict[str, Any]], None]


def _event(data: dict[str, Any]) -> dict[str, Any]:
    return dict(data["scenarios"][0]["sessions"][0]["events"][0])


def _set_event(key: str, value: Any) -> Edit:
    def edit(data: dict[str, Any]) -> None:
        data["scenarios"][0]["sessions"][0]["events"][0][key] = value
    return edit


def _drop_event_key(key: str) -> Edit:
    def edit(data: dict[str, Any]) -> None:
        del data["scenarios"][0]["sessions"][0]["events"][0][key]
    return edit


def _set_query(key: str, value: Any) -> Edit:
    def edit(data: dict[str, Any]) -> None:
        data["scenarios"][0]["sessions"][-1]["queries"][0][key] = value
    return edit


def _set_scenario(key: str, value: Any) -> Edit:
    def edit(data: dict[str, Any]) -> None:
        data["scenarios"][0][key] = value
    return edit


def _ask_too_early(data: dict[str, Any]) -> None:
    """A query in the first session expecting an event of the second."""
    sessions = data["scenarios"][0]["sessions"]
    sessions[0]["queries"] = [dict(sessions[1]["queries"][0],
                                   expected_memory_ids=["fix_confirmed"])]


def _no_queries(data: dict[str, Any]) -> None:
    for scenario in data["scenarios"]:
        for session in scenario["sessions"]:
            session["queries"] = []


def _duplicate_scenario(data: dict[str, Any]) -> None:
    data["scenarios"][1]["scenario_id"] = data["scenarios"][0]["scenario_id"]


def _no_scenario_ids(data: dict[str, Any]) -> None:
    for scenario in data["scenarios"]:
        del scenario["scenario_id"]


# (edit, words the one-line message must hold)
BAD_DATA: list[tuple[Edit, tuple[str, ...]]] = [
    (_drop_event_key("content"), ("events[0]", "'content'")),
    (_set_event("content", 5), ("events[0]", "'content'")),
    (_drop_event_key("memory_id"), ("events[0]", "'memory_id'")),
    (_set_event("valence", "high"), ("events[0]", "'valence'")),
    (_set_event("valence", 4.0), ("events[0]", "'valence'", "[-1, 1]")),
    (_drop_event_key("arousal"), ("events[0]", "'arousal'")),
    (_set_event("timestamp", "yesterday"), ("events[0]", "'timestamp'")),
    (_set_query("query", None), ("queries[0]", "'query'")),
    # a string is not a list: it used to be read as one id per character
    (_set_query("expected_memory_ids", "demo_crash"), ("queries[0]", "expected_memory_ids")),
    # a typo, or an event of a later session: a query no ranking could answer
    (_set_query("expected_memory_ids", ["demo_crsh"]), ("queries[0]", "demo_crsh")),
    (_ask_too_early, ("sessions[0] queries[0]", "fix_confirmed")),
    (_set_query("state", {"valence": 0.2}), ("queries[0]", "'arousal'")),
    (_set_scenario("sessions", {}), ("scenarios[0]", "'sessions'")),
    (_no_scenario_ids, ("scenarios[0]", "'scenario_id'")),
    (_duplicate_scenario, ("scenarios[1]", "duplicate scenario_id")),
    (_no_queries, ("no queries",)),
    (lambda data: data.update(scenarios=[]), ("no queries",)),
    (lambda data: data["scenarios"].__setitem__(0, "oops"), ("scenarios[0]",)),
    (lambda data: data.update(default_top_k="2"), ("'default_top_k'",)),
]
IDS = [f"bad{i}" for i in range(len(BAD_DATA))]


def _bad(small: dict[str, Any], edit: Edit) -> dict[str, Any]:
    data = copy.deepcopy(small)
    edit(data)
    return data


def test_the_edited_places_exist(small: dict[str, Any]) -> None:
    # what the cases above edit: the ids they name exist, in these places
    first = small["scenarios"][0]["sessions"]
    assert len(first) == 2 and first[0]["queries"] == []
    assert _event(small)["memory_id"] == "launch_kickoff"
    assert "demo_crash" in {e["memory_id"] for e in first[0]["events"]}
    assert "fix_confirmed" in {e["memory_id"] for e in first[1]["events"]}
    assert first[-1]["queries"][0]["expected_memory_ids"] == ["demo_crash"]


@pytest.mark.parametrize(("edit", "words"), BAD_DATA, ids=IDS)
def test_load_dataset_names_the_bad_field(
    small: dict[str, Any], edit: Edit, words: tuple[str, ...], tmp_path: Path
) -> None:
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(_bad(small, edit)), encoding="utf-8")
    with pytest.raises(ValueError) as info:
        load_dataset(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path))
    for word in words:
        assert word in message


@pytest.mark.parametrize(("edit", "words"), BAD_DATA[:12:3], ids=IDS[:12:3])
def test_the_learning_api_refuses_a_bad_dict(
    small: dict[str, Any], edit: Edit, words: tuple[str, ...]
) -> None:
    data = _bad(small, edit)
    for call in (lambda: build_recall_batch(data, HashingEmbedder(dim=64)),
                 lambda: cross_validate(data, HashingEmbedder(dim=64), folds=2, select=False,
                                        steps=1)):
        with pytest.raises(ValueError) as info:
            call()
        assert all(word in str(info.value) for word in words)


def test_the_own_datasets_are_valid(small: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "small.json"
    path.write_text(json.dumps(small), encoding="utf-8")
    assert load_dataset(path) == small


@pytest.mark.parametrize(("edit", "words"), BAD_DATA[9:10], ids=IDS[9:10])
def test_cli_refuses_a_bad_dataset_in_one_line(
    small: dict[str, Any], edit: Edit, words: tuple[str, ...], tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from training.cli import main

    path = tmp_path / "mine.json"
    path.write_text(json.dumps(_bad(small, edit)), encoding="utf-8")
    assert main(["evaluate", "--dataset", str(path), "--quiet", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1
    assert all(word in captured.err for word in words)


TEXTS = np.array(["alpha", "beta", "gamma"])
TABLE = np.arange(12, dtype=np.float32).reshape(3, 4)


def _nan_row() -> np.ndarray:
    table = TABLE.copy()
    table[1, 2] = np.nan
    return table


BAD_NPZ: list[tuple[dict[str, Any], tuple[str, ...]]] = [
    ({"text": TEXTS, "embeddings": TABLE}, ("'texts'", "lacks")),
    ({"texts": TEXTS, "emb": TABLE}, ("'embeddings'", "lacks")),
    ({"texts": TEXTS, "embeddings": TABLE[:2]}, ("'embeddings'", "(2, 4)")),
    ({"texts": TEXTS, "embeddings": TABLE[:, 0]}, ("'embeddings'", "(3,)")),
    ({"texts": TEXTS, "embeddings": np.zeros((3, 0), np.float32)}, ("'embeddings'", "D >= 1")),
    ({"texts": TEXTS, "embeddings": np.full((3, 4), "x")}, ("'embeddings'", "numbers")),
    ({"texts": np.arange(3), "embeddings": TABLE}, ("'texts'", "strings")),
    # a NaN row used to rank its memory with semantic similarity 0, with only a warning
    ({"texts": TEXTS, "embeddings": _nan_row()}, ("NaN", "'beta'")),
    # a text twice with two embeddings: the last one was kept, silently
    ({"texts": np.array(["alpha", "beta", "alpha"]), "embeddings": TABLE},
     ("'alpha'", "twice", "rows 0 and 2")),
]


def test_a_text_repeated_with_the_same_embedding_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "mine.npz"
    np.savez(path, texts=np.array(["alpha", "beta", "alpha"]),
             embeddings=np.stack([TABLE[0], TABLE[1], TABLE[0]]))
    lookup = LookupEmbedder.from_npz(path)
    assert lookup.embed("alpha") == pytest.approx(TABLE[0].tolist())


@pytest.mark.parametrize(("arrays", "words"), BAD_NPZ)
def test_bad_embedding_tables_are_named(
    arrays: dict[str, Any], words: tuple[str, ...], tmp_path: Path
) -> None:
    path = tmp_path / "mine.npz"
    np.savez(path, **arrays)
    with pytest.raises(ValueError) as info:
        LookupEmbedder.from_npz(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    assert all(word in message for word in words), message


@pytest.mark.parametrize("content", ["text", "npy"])
def test_a_file_that_is_no_npz_archive(content: str, tmp_path: Path) -> None:
    path = tmp_path / "mine.npz"
    if content == "npy":
        with path.open("wb") as fh:
            np.save(fh, TABLE)
    else:
        path.write_text('{"texts": []}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"not an \.npz archive"):
        LookupEmbedder.from_npz(path)
    with pytest.raises(FileNotFoundError):
        LookupEmbedder.from_npz(tmp_path / "missing.npz")


FIXED = ["--trainable", "base_weights", "--l2", "0.01", "--temperature", "0.05"]


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["fit", "--out", "x.json", "--steps", "-1"], "--steps"),
        (["fit", "--out", "x.json", "--temperature", "0"], "--temperature"),
        (["fit", "--out", "x.json", "--l2", "nan"], "--l2"),
        (["fit", "--out", "x.json", "--l2", "-1", "--temperature", "0.05"], "--l2"),
        (["fit", "--out", "x.json", "--adapter-rank", "0"], "--adapter-rank"),
        # checked only after the whole fit, and named "steps" as if --steps were wrong
        (["fit", "--out", "x.json", "--tune-embedder", "--tune-steps", "-5"], "--tune-steps"),
        (["fit", "--out", "x.json", "--tune-folds", "1"], "--tune-folds"),
        (["cv", "--folds", "1"], "--folds"),
        (["cv", "--jobs", "0"], "--jobs"),
        (["cv", "--steps", "ten"], "--steps"),
    ],
)
def test_nonsense_numbers_are_usage_errors(
    args: list[str], option: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.chdir(tmp_path)  # x.json, were a fit to run
    from training.cli import main

    with pytest.raises(SystemExit) as info:
        main([*args, "--quiet", "--json"])
    assert info.value.code == 2
    assert f"argument {option}:" in capsys.readouterr().err


def _cli_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    from training.cli import main

    assert main([*argv, "--quiet", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1
    return captured.err


def _small_file(small: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``small`` written as a dataset file, the repository root importable (training)."""
    monkeypatch.syspath_prepend(str(ROOT))
    data = tmp_path / "small.json"
    data.write_text(json.dumps(small), encoding="utf-8")
    return data


def test_unusable_outputs_fail_before_the_fit(
    small: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = _small_file(small, tmp_path, monkeypatch)
    fit = ["fit", "--dataset", str(data), *FIXED, "--steps", "1"]
    # a directory as --out: was a traceback after the whole fit
    assert "--out" in _cli_error([*fit, "--out", str(tmp_path)], capsys)
    # a file as --plot: the config was written, then a traceback
    (tmp_path / "plots").write_text("", encoding="utf-8")
    out = tmp_path / "fitted.json"
    err = _cli_error([*fit, "--out", str(out), "--plot", str(tmp_path / "plots")], capsys)
    assert "--plot" in err and not out.exists()


def test_too_many_folds_and_a_bad_config_in_one_line(
    small: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = _small_file(small, tmp_path, monkeypatch)
    err = _cli_error(["cv", "--dataset", str(data), "--folds", "7", *FIXED], capsys)
    assert "--folds" in err and "[2, 6]" in err
    config = tmp_path / "config.json"
    config.write_text('{"retrieval": {"semantic_wieght": 1}}', encoding="utf-8")
    err = _cli_error(["evaluate", "--dataset", str(data), "--config", str(config)], capsys)
    assert str(config) in err and "retrieval.semantic_wieght" in err
    # a directory given as the config: was a traceback
    assert str(tmp_path) in _cli_error(["evaluate", "--dataset", str(data), "--config",
                                        str(tmp_path)], capsys)


@pytest.fixture(scope="module")
def small_batch(small: dict[str, Any]) -> tuple[RecallBatch, RecallInfo]:
    return build_recall_batch(small, HashingEmbedder(dim=64))


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        # was an IndexError from deep inside the split
        ({"train_mask": np.ones(3, bool)}, ValueError, "shape"),
        # integer indices were read as a mask (index 0 dropped, the rest kept)
        ({"train_mask": np.arange(4)}, TypeError, "bool"),
        # fitted nothing and reported NaN metrics
        ({"train_mask": "none"}, ValueError, "no query"),
        # a negative rate climbed the loss
        ({"learning_rate": -0.05}, ValueError, "learning_rate"),
        ({"learning_rate": 0.0}, ValueError, "learning_rate"),
        ({"steps": 2.5}, TypeError, "steps"),
    ],
)
def test_fit_refuses_bad_arguments(
    small_batch: tuple[RecallBatch, RecallInfo], kwargs: dict[str, Any],
    error: type[Exception], words: str,
) -> None:
    batch, info = small_batch
    if isinstance(kwargs.get("train_mask"), str):
        kwargs = {"train_mask": np.zeros(batch.n_queries, bool)}
    with pytest.raises(error, match=words):
        fit(batch, info, steps=2, **kwargs)


def test_select_model_checks_its_mask(small_batch: tuple[RecallBatch, RecallInfo]) -> None:
    batch, info = small_batch
    with pytest.raises(ValueError, match="shape"):
        select_model(batch, info, train_mask=np.ones(3, bool), steps=2, tune=False)
    with pytest.raises(TypeError, match="bool"):
        select_model(batch, info, train_mask=np.ones(batch.n_queries, int), steps=2,
                     tune=False)


def test_select_model_refuses_what_a_batch_without_lexical_statistics_ignores(
    small_batch: tuple[RecallBatch, RecallInfo],
) -> None:
    """Only the lexical models take the adapter and the analyses: without lexical
    statistics both were silently left out of the selection."""
    batch, info = small_batch
    assert batch.lexical is None
    with pytest.raises(ValueError, match=r"adapter.*lexical"):
        select_model(batch, info, adapter=True, steps=2, tune=False)
    with pytest.raises(ValueError, match=r"analysis_batches.*lexical"):
        select_model(batch, info, analysis_batches={"stem": batch}, steps=2, tune=False)


def test_select_model_warns_when_one_scenario_leaves_no_inner_cv(
    small_batch: tuple[RecallBatch, RecallInfo],
) -> None:
    batch, info = small_batch
    scen = np.asarray(batch.scenario)
    with pytest.warns(UserWarning, match="one scenario.*compared unfitted"):
        select_model(batch, info, train_mask=scen == scen[0], steps=2, tune=False)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="select_model")
        select_model(batch, info, train_mask=np.isin(scen, [scen[0], scen.max()]),
                     steps=2, tune=False)


class _Untouchable:
    """An embedder that must not be reached: bad arguments are refused before any
    replay."""

    dim = 8

    def embed(self, text: str) -> list[float]:
        raise AssertionError("the embedder ran before the arguments were checked")

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        raise AssertionError("the embedder ran before the arguments were checked")


@pytest.mark.parametrize(("kwargs", "error", "field"), [
    ({"select": "Model"}, ValueError, "select"),  # a typo silently ran fit_auto
    ({"select": "none"}, ValueError, "select"),
    ({"folds": True}, TypeError, "folds"),
    ({"folds": 2.5}, TypeError, "folds"),
    ({"folds": 1}, ValueError, "folds"),
    ({"jobs": 0}, ValueError, "jobs"),
    ({"jobs": 2.5}, TypeError, "jobs"),
    ({"tune_folds": True}, TypeError, "tune_folds"),
    # accepted and silently ignored: only the model selection scores analyses and
    # lets the adapter compete; an unknown analysis failed after the first replay
    ({"select": False, "analyses": ("stem",)}, ValueError, "analyses"),
    ({"select": True, "analyses": ("stem",)}, ValueError, "analyses"),
    ({"select": "model", "analyses": ("snowball",)}, ValueError, "analysis"),
    ({"select": "model", "analyses": "stem"}, TypeError, "analyses"),
    ({"select": False, "adapter": True}, ValueError, "adapter"),
    # the lexical models carry the analyses and the adapter: none without lexical=True
    ({"select": "model", "analyses": ("stem",)}, ValueError, "analyses.*lexical"),
    ({"select": "model", "adapter": True}, ValueError, "adapter.*lexical"),
])
def test_cross_validate_refuses_bad_arguments_before_any_work(
    small: dict[str, Any], kwargs: dict[str, Any], error: type, field: str
) -> None:
    with pytest.raises(error, match=field):
        cross_validate(small, _Untouchable(), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("n", "folds", "error"), [
    (5, True, TypeError), (5, 2.5, TypeError), (-1, 2, ValueError), (True, 2, TypeError),
])
def test_scenario_folds_refuses_non_ints(n: Any, folds: Any, error: type) -> None:
    from emotional_memory.learn.cross_validation import scenario_folds

    with pytest.raises(error, match=r"folds|n_scenarios"):
        scenario_folds(n, folds)


@pytest.mark.parametrize(("top_k", "error"), [(True, TypeError), (2.7, TypeError),
                                              (0, ValueError), ("3", TypeError)])
def test_batch_and_capture_refuse_a_bad_top_k(
    small: dict[str, Any], top_k: Any, error: type
) -> None:
    """``int(top_k)`` turned 2.7 into 2 and True into 1, silently."""
    from emotional_memory.learn.rerank import capture_candidates

    with pytest.raises(error, match="top_k"):
        build_recall_batch(small, _Untouchable(), top_k=top_k)  # type: ignore[arg-type]
    with pytest.raises(error, match="top_k"):
        capture_candidates(small, _Untouchable(), None, top_k=top_k)
