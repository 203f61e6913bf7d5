"""Smoke tests of the training command line (``python -m training fit/cv/evaluate``).

Everything runs on the project's own data (``--dataset builtin``) with the default
hashing embedder, or with an ``.npz`` table written here, so no external file is
needed. Fixed ``--l2``/``--temperature`` skip hyperparameter selection except in
one ``fit`` call, which also draws the plots.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emotional_memory import EmotionalMemoryConfig
from emotional_memory.data import load_builtin_dataset
from emotional_memory.embedders import HashingEmbedder
from support.paths import ROOT

METRIC_KEYS = {"top1", "hit_at_k", "mrr", "ndcg_at_k", "recall_at_k", "n_queries",
               "by_challenge"}
FIXED = ["--l2", "0.01", "--temperature", "0.05"]


def run_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    # ``-m`` puts the working directory (the repository root) on sys.path.
    proc = subprocess.run(
        [sys.executable, "-m", "training", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def one_json(stdout: str) -> dict[str, Any]:
    """stdout holds exactly one JSON object (one line) and nothing else."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert len(lines) == 1, stdout
    obj = json.loads(lines[0])
    assert isinstance(obj, dict)
    return obj


def check_metrics(obj: dict[str, Any]) -> None:
    for key in ("top1", "hit_at_k", "mrr"):
        assert 0.0 <= obj[key] <= 1.0, key
    assert obj["top1"] <= obj["mrr"] <= obj["hit_at_k"]


@pytest.fixture(scope="module")
def default_eval() -> dict[str, Any]:
    # without --quiet: progress bars must stay on stderr
    proc = run_cli("evaluate", "--dataset", "builtin", "--json")
    return one_json(proc.stdout)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    """``fit`` with hyperparameter selection (no --l2/--temperature) and plots."""
    tmp = tmp_path_factory.mktemp("fit")
    out, plots = tmp / "fitted.json", tmp / "plots"
    proc = run_cli("fit", "--dataset", "builtin", "--out", str(out), "--json",
                   "--plot", str(plots), "--steps", "60", "--quiet")
    return out, plots, one_json(proc.stdout)


@pytest.fixture(scope="module")
def npz_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An embedding table of every text of the built-in dataset (hashing embedder)."""
    data = load_builtin_dataset()
    texts: list[str] = []
    for scenario in data["scenarios"]:
        for session in scenario["sessions"]:
            texts += [event["content"] for event in session["events"]]
            texts += [query["query"] for query in session["queries"]]
    texts = list(dict.fromkeys(texts))
    embeddings = np.asarray(HashingEmbedder(dim=384).embed_batch(texts), np.float32)
    path = tmp_path_factory.mktemp("npz") / "builtin.hashing.npz"
    np.savez(path, texts=np.asarray(texts), embeddings=embeddings)
    return path


def test_evaluate_prints_one_json_object(default_eval: dict[str, Any]) -> None:
    assert set(default_eval) == METRIC_KEYS
    check_metrics(default_eval)
    assert default_eval["n_queries"] > 0
    assert default_eval["by_challenge"]
    assert all(0.0 <= v <= 1.0 for v in default_eval["by_challenge"].values())


def test_fit_writes_a_loadable_config_and_plots(
    fitted: tuple[Path, Path, dict[str, Any]], default_eval: dict[str, Any]
) -> None:
    out, plots, report = fitted
    config = EmotionalMemoryConfig.model_validate_json(out.read_text(encoding="utf-8"))
    # without --trainable the model is chosen by inner CV (never below default/cosine)
    # (the CLI's default: the lexical models also under the stemmed analysis, with a
    # query adapter and with the context signal)
    from emotional_memory.learn import candidate_models

    names = set(candidate_models(EmotionalMemoryConfig(), True, analyses=("stem",),
                                 adapter=True, context=True))
    assert report["selection"] in names
    assert (config.retrieval.lexical_stemmer == "english") == report["selection"].endswith(
        "@stem")
    assert (config == EmotionalMemoryConfig()) == (report["selection"] == "default")
    assert report["out"] == str(out)
    assert report["default_top1"] == default_eval["top1"]
    assert 0.0 <= report["fitted_top1"] <= 1.0
    names = {"learning.png", "weights_vs_mood.png", "by_challenge.png"}
    assert {Path(p).name for p in report["plots"]} == names
    for name in names:
        png = plots / name
        assert png.is_file() and png.stat().st_size > 1000, name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evaluate_with_the_fitted_config(fitted: tuple[Path, Path, dict[str, Any]]) -> None:
    out, _, report = fitted
    result = one_json(run_cli("evaluate", "--config", str(out), "--json", "--quiet").stdout)
    assert set(result) == METRIC_KEYS
    check_metrics(result)
    # the engine replay with the written config is the one the fit reported
    assert result["top1"] == report["fitted_top1"]
    assert result["hit_at_k"] == report["fitted_hit_at_k"]
    assert result["by_challenge"] == report["fitted_by_challenge"]


def test_npz_embeddings_evaluate(npz_path: Path, default_eval: dict[str, Any]) -> None:
    result = one_json(run_cli("evaluate", "--embeddings", str(npz_path), "--json",
                              "--quiet").stdout)
    assert set(result) == METRIC_KEYS
    check_metrics(result)
    assert result["n_queries"] == default_eval["n_queries"]
    # the same hashing embeddings, stored as float32: at most a near-tie may flip
    assert result["top1"] == pytest.approx(default_eval["top1"], abs=0.05)


def test_cv_prints_out_of_fold_metrics(npz_path: Path, default_eval: dict[str, Any]) -> None:
    proc = run_cli("cv", "--dataset", "builtin", "--embeddings", str(npz_path), "--folds", "3",
                   "--json", "--steps", "40", "--trainable", "base_weights,gates", "--quiet",
                   *FIXED)
    result = one_json(proc.stdout)
    assert {"top1", "hit_at_k", "mrr", "default_top1"} <= set(result)
    check_metrics(result)
    assert 0.0 <= result["default_top1"] <= 1.0
    assert result["folds"] == 3
    assert result["n_queries"] == default_eval["n_queries"]
    assert set(result["by_challenge"]) == set(default_eval["by_challenge"])


def test_missing_files_fail_with_a_message(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    proc = run_cli("evaluate", "--dataset", str(missing), "--json", check=False)
    assert proc.returncode != 0
    assert proc.stdout.strip() == ""
    assert "missing.json" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["evaluate", "--embeddings", "{tmp}/missing.npz"],
        ["evaluate", "--config", "{tmp}/missing_config.json"],
        ["cv", "--dataset", "{tmp}/missing.json", "--folds", "3"],
        ["evaluate", "--dataset", "{tmp}/bad.json"],
    ],
)
def test_errors_in_process(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from training.cli import main

    (tmp_path / "bad.json").write_text('{"no_scenarios": []}', encoding="utf-8")
    argv = [a.format(tmp=tmp_path) for a in args] + ["--quiet", "--json"]
    assert main(argv) != 0
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ")
    assert captured.out == ""
    assert not (tmp_path / "x.json").exists()


def test_cv_on_one_scenario_says_it_needs_two(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """cv over a dataset whose queries all lie in one scenario said "--folds must lie in
    [2, 1]", an empty range no --folds value meets."""
    monkeypatch.syspath_prepend(str(ROOT))
    from training.cli import main

    data = load_builtin_dataset()
    path = tmp_path / "one.json"
    path.write_text(json.dumps({**data, "scenarios": data["scenarios"][:1]}),
                    encoding="utf-8")
    assert main(["cv", "--dataset", str(path), "--folds", "2", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cv needs queries from at least 2 scenarios"), err
    assert "has 1" in err and "[2, 1]" not in err


def test_cv_fits_the_query_adapter_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``cv --trainable adapter`` (a group its --help lists) failed at once: the batch
    was built without the embeddings the adapter is fitted on."""
    monkeypatch.syspath_prepend(str(ROOT))
    from training.cli import main

    data = load_builtin_dataset()
    path = tmp_path / "small.json"
    path.write_text(json.dumps({**data, "scenarios": data["scenarios"][:3]}),
                    encoding="utf-8")
    argv = ["cv", "--dataset", str(path), "--folds", "2", "--jobs", "1", "--trainable",
            "base_weights,adapter", *FIXED, "--steps", "3", "--affect", "neutral",
            "--quiet", "--json"]
    assert main(argv) == 0, capsys.readouterr().err
    report = one_json(capsys.readouterr().out)
    check_metrics(report)
    assert report["n_queries"] == sum(len(s.get("queries", [])) for sc in
                                      data["scenarios"][:3] for s in sc["sessions"])


@pytest.mark.parametrize("command", [["fit", "--out", "{tmp}/x.json"], ["cv", "--folds", "3"]])
def test_default_selection_without_pystemmer_is_refused_up_front(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The default model selection also scores the stemmed analysis: without PyStemmer
    (a wheel installed without ``[stem]``) that is one line naming the extra and
    ``--analyses none``, before any replay, not an ImportError traceback mid-fit."""
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.setitem(sys.modules, "Stemmer", None)  # `import Stemmer` fails
    _forget_stemmers(monkeypatch)
    from training.cli import main

    argv = [a.format(tmp=tmp_path) for a in command] + ["--quiet", "--json"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and captured.out == ""
    assert "pip install 'emotional-memory-jax[stem]'" in captured.err
    assert "--analyses none" in captured.err
    assert not (tmp_path / "x.json").exists()


def _forget_stemmers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Empty this thread's stemmer cache: a stemmer an earlier test of the same worker
    built would be used without importing PyStemmer again."""
    from emotional_memory import lexical

    monkeypatch.setattr(lexical._STEMMERS, "cache", {}, raising=False)


def test_an_extra_missing_mid_command_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A config that stems its lexical terms, evaluated without PyStemmer."""
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.setitem(sys.modules, "Stemmer", None)
    _forget_stemmers(monkeypatch)
    from training.cli import main

    config = EmotionalMemoryConfig()
    config = config.model_copy(update={"retrieval": config.retrieval.model_copy(
        update={"lexical_weight": 0.1, "lexical_stemmer": "english"})})
    path = tmp_path / "stemmed.json"
    path.write_text(config.model_dump_json(), encoding="utf-8")
    assert main(["evaluate", "--config", str(path), "--quiet", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and "emotional-memory-jax[stem]" in captured.err
    assert captured.out == ""


def test_bad_trainable_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from training.cli import main

    with pytest.raises(SystemExit) as info:
        main(["fit", "--out", "x.json", "--trainable", "weights"])
    assert info.value.code == 2
    assert "--trainable" in capsys.readouterr().err


def test_the_readme_fit_section_runs_as_written(
    fitted: tuple[Path, Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's "Fit the ranking to your data" blocks that load ``fitted.json`` and
    abstain with its calibration run as written, on the CLI's fitted config."""
    section = (ROOT / "README.md").read_text(encoding="utf-8").split(
        "## Fit the ranking to your data", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    load = next(b for b in blocks if "model_validate_json" in b)
    abstain = next(b for b in blocks if "min_relevance=threshold" in b)
    monkeypatch.chdir(fitted[0].parent)
    namespace: dict[str, Any] = {}
    exec(compile(load, "README:load", "exec"), namespace)
    namespace["engine"].encode("We sailed the boat to the island")
    exec(compile(abstain, "README:abstain", "exec"), namespace)
    threshold = namespace["threshold"]
    assert 0.0 < threshold < 1.0
    for result in namespace["found"]:
        assert result.relevance >= threshold


def test_every_training_flag_the_readme_names_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ``--flag`` of the README's fitting sections ("Affect from text" through
    "Recall on real conversations") is a ``python -m training`` flag, or one of
    ``benchmarks/real_recall.py``'s where the README names that script."""
    monkeypatch.syspath_prepend(str(ROOT))
    from training.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a.choices, dict)).choices
    flags = {o for p in sub.values() for a in p._actions for o in a.option_strings}
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    sections = (text.split("\n### Affect from text, no LLM\n", 1)[1].split("\n## ", 1)[0]
                + text.split("\n## Fit the ranking to your data\n", 1)[1].split("\n## Scale\n")[0])
    sections = re.sub(r"pip install[^`\n]*", "", sections)  # pip's own flags
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]", sections))
    bench = (ROOT / "benchmarks" / "real_recall.py").read_text(encoding="utf-8")
    unknown = {f for f in named - flags if f'"{f}"' not in bench}
    assert "--tune-embedder" in named and not unknown, sorted(unknown)


def test_every_flag_a_subcommands_help_names_is_one_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``cv --help`` said the tuned weights go "beside --out" (cv has no --out);
    ``evaluate``'s --config was the "starting" config (it is the one evaluated)."""
    monkeypatch.syspath_prepend(str(ROOT))
    from training.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a.choices, dict)).choices
    for name, parser in sub.items():
        own = {o for a in parser._actions for o in a.option_strings}
        helps = " ".join(str(a.help) for a in parser._actions)
        helps = re.sub(r"\bfit --[a-z-]+", "", helps)  # another subcommand's, named so
        named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]", helps))
        assert named <= own, (name, sorted(named - own))
    evaluate = next(a for a in sub["evaluate"]._actions if "--config" in a.option_strings)
    assert "starting" not in str(evaluate.help)
