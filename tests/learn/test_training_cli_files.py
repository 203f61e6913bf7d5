"""The training command line against a user's file mistakes: an output that cannot be
written whole, a plot folder under a file, malformed embedding tables. Each is one
``error: ...`` line naming the argument or file, exit status 2, and nothing written or
changed. Runs on three built-in scenarios, a few optimisation steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emotional_memory.data import load_builtin_dataset
from support.paths import ROOT

QUICK = ["--quiet", "--json", "--affect", "neutral", "--trainable", "base_weights",
         "--l2", "0.01", "--temperature", "0.05", "--steps", "3"]


@pytest.fixture
def small(tmp_path: Path) -> Path:
    """Three built-in scenarios as a dataset file."""
    data = load_builtin_dataset()
    path = tmp_path / "small.json"
    path.write_text(json.dumps({**data, "scenarios": data["scenarios"][:3]}), encoding="utf-8")
    return path


def _main(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.syspath_prepend(str(ROOT))
    from training.cli import main

    return main(argv)


# ``python -m training`` under a file-size limit the child sets itself (a preexec_fn
# would fork this multithreaded, JAX-running process); a config is ~2.5 kB. JAX's
# persistent compilation cache is off in that child: a cold cache writes programs
# larger than the limit, and its warning would come before the error line.
_NO_COMPILE_CACHE = {**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "false"}
_LIMITED_TRAINING = [
    sys.executable, "-c",
    "import resource, runpy, sys; "
    "resource.setrlimit(resource.RLIMIT_FSIZE, (1500, 1500)); "
    "sys.argv[0] = 'training'; runpy.run_module('training', run_name='__main__')",
]


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_config_that_cannot_be_written_whole_leaves_the_old_one(
    small: Path, tmp_path: Path
) -> None:
    """A write cut short (disk full, file size limit) truncated the existing --out to a
    half config, and the error named no file."""
    out = tmp_path / "fitted.json"
    out.write_text('{"old": true}', encoding="utf-8")
    proc = subprocess.run(
        [*_LIMITED_TRAINING, "fit", "--dataset", str(small), *QUICK, "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=_NO_COMPILE_CACHE,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("error: --out ") and str(out) in proc.stderr
    assert "Traceback" not in proc.stderr
    assert out.read_text(encoding="utf-8") == '{"old": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fitted.json", "small.json"]


def test_a_plot_folder_under_a_file_is_refused_before_the_fit(
    small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--plot below a file: the config was written and the fit done, then a bare
    "[Errno 20] Not a directory"."""
    (tmp_path / "afile").write_text("x", encoding="utf-8")
    out = tmp_path / "fitted.json"
    argv = ["fit", "--dataset", str(small), *QUICK, "--out", str(out),
            "--plot", str(tmp_path / "afile" / "plots")]
    assert _main(argv, monkeypatch) == 2
    captured: Any = capsys.readouterr()
    assert captured.err.startswith("error: --plot: ") and captured.out == ""
    assert not out.exists()


def test_a_plot_folder_that_cannot_be_made_is_refused_before_the_fit(
    small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--plot in a folder that cannot be made (here a name longer than a file system
    allows; a read-only place alike): a bare "[Errno 36] File name too long" naming no
    option."""
    out = tmp_path / "fitted.json"
    argv = ["fit", "--dataset", str(small), *QUICK, "--out", str(out),
            "--plot", str(tmp_path / ("p" * 300))]
    assert _main(argv, monkeypatch) == 2
    captured: Any = capsys.readouterr()
    assert captured.err.startswith("error: --plot ") and captured.out == ""
    assert "\n" not in captured.err.strip()
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.json"]


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_plots_that_cannot_be_written_whole_leave_no_half_png(
    small: Path, tmp_path: Path
) -> None:
    """A plot write cut short (disk full, file size limit: the ~2.5 kB config fits under
    6 kB, a PNG does not) left a truncated PNG and a bare "[Errno 27] File too large"."""
    out, plots = tmp_path / "fitted.json", tmp_path / "plots"
    limited = [part.replace("1500, 1500", "6000, 6000") for part in _LIMITED_TRAINING]
    proc = subprocess.run(
        [*limited, "fit", "--dataset", str(small), *QUICK, "--out", str(out),
         "--plot", str(plots)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=_NO_COMPILE_CACHE,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith(f"error: --plot {plots}: "), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "--out" in proc.stderr
    json.loads(out.read_text(encoding="utf-8"))  # the config, written before, is whole
    assert [p.name for p in plots.iterdir()] == []


def test_plots_without_matplotlib_are_refused_before_the_fit(
    small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--plot without matplotlib (an extra, ``[viz]``): the whole fit ran and the config
    was written, then the plots failed on the missing package."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` fails
    out = tmp_path / "fitted.json"
    argv = ["fit", "--dataset", str(small), *[a for a in QUICK if a != "--quiet"],
            "--out", str(out), "--plot", str(tmp_path / "plots")]
    assert _main(argv, monkeypatch) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --plot needs matplotlib") and "capture" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.json"]


def _table(small: Path, tmp_path: Path, name: str, **change: Any) -> Path:
    """An embedding table of every text of ``small`` (hashing embedder), changed."""
    from emotional_memory.embedders import HashingEmbedder

    texts: list[str] = []
    for scenario in json.loads(small.read_text(encoding="utf-8"))["scenarios"]:
        for session in scenario["sessions"]:
            texts += [e["content"] for e in session["events"]]
            texts += [q["query"] for q in session["queries"]]
    texts = list(dict.fromkeys(texts))
    arrays = {"texts": np.asarray(texts),
              "embeddings": np.asarray(HashingEmbedder(dim=16).embed_batch(texts), np.float32)}
    arrays.update({k: v(arrays[k]) for k, v in change.items()})
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize(("name", "change", "words"), [
    # object arrays: numpy's "Object arrays cannot be loaded when allow_pickle=False"
    ("objects.npz", {"texts": lambda t: t.astype(object)}, "cannot be read"),
    # a dataset text missing: a KeyError's repr half-way through the replay
    ("short.npz", {"texts": lambda t: t[1:], "embeddings": lambda e: e[1:]},
     "lacks 1 text(s) of the dataset"),
])
@pytest.mark.parametrize("command", ["evaluate", "cv", "fit"])
def test_a_bad_embedding_table_is_one_line_naming_it(
    name: str, change: dict[str, Any], words: str, command: str, small: Path,
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = _table(small, tmp_path, name, **change)
    argv = [command, "--dataset", str(small), "--embeddings", str(table)]
    if command == "evaluate":
        argv += ["--quiet", "--json"]
    else:
        argv += QUICK + (["--out", str(tmp_path / "x.json")] if command == "fit" else
                         ["--folds", "2", "--jobs", "1"])
    assert _main(argv, monkeypatch) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"error: embeddings {table}: ") and words in captured.err
    assert len(captured.err.strip().splitlines()) == 1 and captured.out == ""
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("where", ["missing folder", "a folder"])
def test_an_affect_head_out_that_cannot_be_written_is_refused_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    """``affect --out`` in a folder that does not exist (or naming a folder) failed
    only after the features and the training (minutes); now before reading EmoBank."""
    out = tmp_path / "nowhere" / "head.npz" if where == "missing folder" else tmp_path
    csv = tmp_path / "emobank.csv"  # never read: the --out check comes first
    assert _main(["affect", "--emobank", str(csv), "--out", str(out), "--quick"],
                 monkeypatch) == 2
    err = capsys.readouterr().err
    named = out.parent if where == "missing folder" else out
    assert err.startswith("error: --out") and str(named) in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_out_whose_name_is_too_long_is_refused_naming_it(
    small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``fit --out`` with a file name longer than the file system allows: a bare
    "[Errno 36] File name too long" naming no option."""
    out = tmp_path / ("f" * 300 + ".json")
    assert _main(["fit", "--dataset", str(small), *QUICK, "--out", str(out)],
                 monkeypatch) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out ") and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.json"]


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs Linux's sysfs")
def test_an_out_in_a_folder_that_takes_no_files_is_refused_before_the_fit(
    small: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``fit --out`` in a folder where no file can be made (sysfs here; a read-only
    mount or folder alike, which root may still write to) ran the whole fit first
    (minutes), then failed writing."""
    argv = ["fit", "--dataset", str(small), *[a for a in QUICK if a != "--quiet"],
            "--out", "/sys/fitted.json"]
    assert _main(argv, monkeypatch) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out /sys/fitted.json: ") and "capture" not in err, err


@pytest.mark.parametrize("which", ["--dataset", "--embeddings"])
def test_an_out_that_is_an_input_file_is_refused_before_the_fit(
    small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, which: str,
) -> None:
    """``fit --out`` naming the dataset or the embedding table (through another
    spelling of the path) replaced that input with the fitted config. (A start
    ``--config`` may be refitted in place: the config is written whole.)"""
    table = _table(small, tmp_path, "table.npz")
    start = tmp_path / "start.json"
    start.write_text("{}", encoding="utf-8")
    inputs = {"--dataset": small, "--embeddings": table, "--config": start}
    before = {p: p.read_bytes() for p in inputs.values()}
    out = tmp_path / "sub" / ".." / inputs[which].name
    (tmp_path / "sub").mkdir()
    argv = ["fit", *QUICK, "--out", str(out)]
    for option, path in inputs.items():
        argv += [option, str(path)]
    assert _main(argv, monkeypatch) == 2
    captured: Any = capsys.readouterr()
    assert captured.err.startswith("error: --out") and which in captured.err
    assert captured.out == ""
    assert {p: p.read_bytes() for p in inputs.values()} == before


@pytest.mark.parametrize(("option", "value"), [
    ("--dataset", "FOLDER"),
    ("--dataset", "MISSING"),
    ("--embeddings", "FOLDER"),
    ("--embeddings", "MISSING"),
    ("--config", "FOLDER"),
    ("--config", "MISSING"),
])
def test_an_input_file_that_cannot_be_read_is_one_line_naming_its_option(
    option: str, value: str, tmp_path: Path, small: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # "error: [Errno 21] Is a directory: '...'" named the path but not the option
    path = tmp_path if value == "FOLDER" else tmp_path / "missing.json"
    argv = ["evaluate", "--dataset", str(small), "--quiet", "--affect", "neutral",
            option, str(path)]
    assert _main(argv, monkeypatch) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {option} ") and str(path) in err and "\n" not in err


def test_an_emobank_folder_is_not_said_to_be_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    assert _main(["affect", "--emobank", str(tmp_path), "--quick", "--quiet"],
                 monkeypatch) == 2
    err = capsys.readouterr().err
    assert "is a directory" in err and "does not exist" not in err


def test_an_emobank_csv_without_a_dev_split_is_refused_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    # "the EmoBank CSV needs rows of split 'train' and of split 'dev'" named no file
    csv = tmp_path / "only_train.csv"
    csv.write_text("id,split,V,A,D,text\n1,train,3,3,3,fine\n2,test,2,3,3,bad\n",
                   encoding="utf-8")
    assert _main(["affect", "--emobank", str(csv), "--out", str(tmp_path / "h.npz"),
                  "--quick", "--quiet"], monkeypatch) == 2
    err = capsys.readouterr().err
    assert str(csv) in err and "'dev'" in err and "Traceback" not in err
    assert not (tmp_path / "h.npz").exists()


def test_a_negative_cv_seed_is_an_argument_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    # it failed after loading the data, as numpy's "expected non-negative integer"
    with pytest.raises(SystemExit) as info:
        _main(["cv", "--seed", "-1", "--quiet"], monkeypatch)
    assert info.value.code == 2
    assert "argument --seed: must be >= 0, got -1" in capsys.readouterr().err


def test_reembed_with_an_invalid_config_is_one_line_naming_each_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    # pydantic's multi-line dump (with its documentation URLs) was printed
    from emotional_memory.stores.sqlite import SQLiteStore

    SQLiteStore(str(tmp_path / "m.db")).close()
    config = tmp_path / "bad.json"
    config.write_text('{"retrieval": {"base_weights": [1, 2]}}', encoding="utf-8")
    argv = ["reembed", "--store", f"sqlite:///{tmp_path / 'm.db'}", "--config", str(config),
            "--quiet"]
    assert _main(argv, monkeypatch) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --config {config}: ") and "\n" not in err
    assert "retrieval.base_weights:" in err and "pydantic.dev" not in err


@pytest.mark.parametrize("plot", ["fitted.json", "fitted.json/plots", "./fitted.json"])
def test_a_plot_folder_at_or_below_the_out_file_is_refused_before_the_fit(
    plot: str, small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--plot naming the --out file (or a folder below it): the config was written,
    then "[Errno 17] File exists" after the fit."""
    monkeypatch.chdir(tmp_path)
    argv = ["fit", "--dataset", str(small), *QUICK, "--out", "fitted.json", "--plot", plot]
    assert _main(argv, monkeypatch) == 2
    captured: Any = capsys.readouterr()
    assert captured.err.startswith("error: --plot: ") and "--out" in captured.err
    assert captured.out == "" and not (tmp_path / "fitted.json").exists()


@pytest.mark.parametrize(("writes", "reads"), [
    ("--out", "--emobank"), ("--out", "--memory-events"),
    ("--cache", "--emobank"), ("--cache", "--memory-events"), ("--cache", "--out"),
])
def test_affect_outputs_that_are_its_inputs_are_refused_before_training(
    writes: str, reads: str, tmp_path: Path, small: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """``affect --out eb.csv --emobank eb.csv`` trained, then replaced the EmoBank CSV
    with the head (``--cache`` likewise with the features)."""
    csv = tmp_path / "eb.csv"
    csv.write_text("split,V,A,D,text\ntrain,3,3,3,a\ndev,3,3,3,b\n", encoding="utf-8")
    paths = {"--emobank": str(csv), "--memory-events": str(small),
             "--out": str(tmp_path / "head.npz"), "--cache": str(tmp_path / "cache.npz")}
    paths[writes] = str(tmp_path / "sub" / ".." / Path(paths[reads]).name)
    (tmp_path / "sub").mkdir()
    before = {p: Path(p).read_bytes() for p in (str(csv), str(small))}
    argv = ["affect", "--quick", "--quiet", *(a for kv in paths.items() for a in kv)]
    assert _main(argv, monkeypatch) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {writes}: ") and reads in err
    assert {p: Path(p).read_bytes() for p in before} == before
    assert not (tmp_path / "head.npz").exists() and not (tmp_path / "cache.npz").exists()


def test_reembed_of_a_file_that_is_no_database_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """sqlite3.DatabaseError ("file is not a database") escaped as a traceback."""
    path = tmp_path / "notes.json"
    path.write_text('{"a": 1}\n' * 100, encoding="utf-8")
    argv = ["reembed", "--store", f"sqlite:///{path}", "--embedder", "hashing", "--quiet"]
    assert _main(argv, monkeypatch) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --store: ") and "not a database" in err
