"""Progress of the training command line's long steps on stderr: every replay that
captures a batch draws a bar, the text model estimating unlabelled affect says so
before it runs, and no empty bar is drawn. Three built-in scenarios, a few steps."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from emotional_memory.data import load_builtin_dataset
from support.paths import ROOT

SMALL = ["--affect", "neutral", "--no-adapter", "--no-context", "--steps", "3"]


def _dataset(tmp_path: Path, *, labelled: bool = True) -> Path:
    data = load_builtin_dataset()
    data = {**data, "scenarios": data["scenarios"][:3]}
    if not labelled:
        for scenario in data["scenarios"]:
            for session in scenario["sessions"]:
                for event in session["events"]:
                    event.pop("valence", None)
                    event.pop("arousal", None)
    path = tmp_path / "small.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _bars(stderr: str) -> list[str]:
    """The label of each progress bar drawn (its first frame)."""
    frames = [f for f in re.split(r"[\r\n]", stderr) if f.strip()]
    return [f.split(":")[0].strip() for f in frames if re.search(r"(^|\D)0(/\d+|it) \[", f)]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "training", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.parametrize("command", ["fit", "cv"])
def test_every_capture_draws_a_bar_and_no_bar_is_empty(command: str, tmp_path: Path) -> None:
    """The model selection also replays the dataset for the stemmed analysis: that
    capture drew no bar (fit) and cv drew none for either; a selection whose lead has
    no stemmed variant drew an empty "select: 0it" bar."""
    extra = ["--out", str(tmp_path / "fitted.json")] if command == "fit" else [
        "--folds", "2", "--jobs", "1"]
    proc = _run(command, "--dataset", str(_dataset(tmp_path)), *SMALL, *extra)
    bars = _bars(proc.stderr)
    assert bars.count("capture") == 2, bars
    assert "replay" in bars, bars  # cv's replay of the default config ran silent
    assert not re.search(r": 0it \[", proc.stderr), proc.stderr[-2000:]


def test_estimating_unlabelled_affect_is_announced(tmp_path: Path) -> None:
    """The text model rating unlabelled events (a minute on a few thousand) ran with
    nothing on stderr."""
    proc = _run("evaluate", "--dataset", str(_dataset(tmp_path, labelled=False)))
    first = proc.stderr.lstrip().splitlines()[0]
    assert first.startswith("affect: estimating") and "texts" in first, proc.stderr[:500]
    quiet = _run("evaluate", "--quiet", "--dataset", str(_dataset(tmp_path, labelled=False)))
    assert "affect:" not in quiet.stderr and "replay" not in quiet.stderr
