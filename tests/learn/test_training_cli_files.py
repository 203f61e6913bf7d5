"""The training command line against a user's file mistakes: an output that cannot be
written whole, a plot folder under a file, malformed embedding tables. Each is one
``error: ...`` line naming the argument or file, exit status 2, and nothing written or
changed. Runs on three built-in scenarios, a few optimisation steps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def _limit_file_size() -> None:  # pragma: no cover - runs in the child
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (1500, 1500))  # a config is ~2.5 kB


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_config_that_cannot_be_written_whole_leaves_the_old_one(
    small: Path, tmp_path: Path
) -> None:
    """A write cut short (disk full, file size limit) truncated the existing --out to a
    half config, and the error named no file."""
    out = tmp_path / "fitted.json"
    out.write_text('{"old": true}', encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "training", "fit", "--dataset", str(small), *QUICK,
         "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=_limit_file_size,
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
