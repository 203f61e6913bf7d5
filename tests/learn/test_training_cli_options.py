"""Options of ``python -m training`` that the chosen mode would ignore are refused in
one ``error:`` line naming them (before any file is read), instead of a run that
silently does something else than asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.paths import ROOT


def _run(argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
         capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``main(argv)`` on a dataset that does not exist: an option error comes first."""
    monkeypatch.syspath_prepend(str(ROOT))
    from training.cli import main

    missing = str(tmp_path / "missing.json")
    out = ["--out", str(tmp_path / "fitted.json")] if argv[0] == "fit" else []
    code = main([*argv, "--dataset", missing, *out, "--quiet", "--json"])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("argv", "named"), [
    (["fit", "--trainable", "base_weights", "--no-calibration"], "--no-calibration"),
    (["cv", "--trainable", "base_weights", "--tune"], "--tune"),
    (["fit", "--trainable", "base_weights", "--select-by", "top1"], "--select-by"),
    (["cv", "--trainable", "lexical", "--no-context"], "--no-context"),
    (["fit", "--tune-steps", "5"], "--tune-steps"),
    (["cv", "--tune-folds", "3"], "--tune-folds"),
    (["fit", "--tune-embedder", "last-layers", "--tune-rank", "4"], "--tune-rank"),
    (["fit", "--trainable", "base_weights", "--adapter-rank", "4"], "--adapter-rank"),
    (["fit", "--no-adapter", "--adapter-l2", "0.5"], "--adapter-l2"),
])
def test_an_option_the_mode_ignores_is_refused_naming_it(
        argv: list[str], named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(argv, tmp_path, monkeypatch, capsys)
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1
    assert named in err and "missing.json" not in err


@pytest.mark.parametrize("argv", [
    ["fit", "--no-lexical", "--analyses", "none"],
    ["cv", "--trainable", "base_weights,adapter", "--adapter-rank", "4"],
    ["fit", "--tune-embedder", "lora", "--tune-rank", "4", "--tune-steps", "5"],
    ["fit", "--analyses", "none", "--no-calibration", "--tune-adapter", "--adapter-rank", "4"],
])
def test_options_that_apply_reach_the_dataset(
        argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(argv, tmp_path, monkeypatch, capsys)
    assert code == 2 and "missing.json" in err
