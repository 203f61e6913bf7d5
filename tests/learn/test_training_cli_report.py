"""What ``python -m training fit`` / ``cv`` report as the default: the replay of the
starting config as given (``--config`` or the library's defaults), not of the start
the fit grows from (``--trainable lexical`` / ``context`` switch those signals on)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from support.paths import ROOT

FIXED = ["--quiet", "--json", "--affect", "neutral", "--l2", "0.01", "--temperature", "0.05",
         "--steps", "0"]


def _dataset(tmp_path: Path) -> Path:
    """Three scenarios whose queries share words with their memory (BM25 helps)."""
    scenarios = []
    for s in range(3):
        events = [{"memory_id": f"m{s}{i}", "content": f"scenario {s} event {i} about topic "
                   f"{i % 3} words", "valence": 0.1 * i - 0.2, "arousal": 0.1 * i}
                  for i in range(6)]
        queries = [{"query_id": f"q{s}{i}", "query": f"topic {i} words",
                    "expected_memory_ids": [f"m{s}{i}"]} for i in range(3)]
        scenarios.append({"scenario_id": f"s{s}", "sessions": [
            {"session_id": "a", "events": events[:3]},
            {"session_id": "b", "events": events[3:], "queries": queries}]})
    path = tmp_path / "data.json"
    path.write_text(json.dumps({"default_top_k": 2, "scenarios": scenarios}), encoding="utf-8")
    return path


def _main(argv: list[str], monkeypatch: pytest.MonkeyPatch,
          capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    monkeypatch.syspath_prepend(str(ROOT))
    from training.cli import main

    assert main(argv) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


@pytest.mark.parametrize("trainable", ["base_weights,lexical", "base_weights,context"])
def test_the_default_reported_is_the_given_config(
        trainable: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    data = str(_dataset(tmp_path))
    default = _main(["evaluate", "--dataset", data, "--quiet", "--json", "--affect",
                     "neutral"], monkeypatch, capsys)
    fit = _main(["fit", "--dataset", data, "--out", str(tmp_path / "fitted.json"),
                 "--trainable", trainable, *FIXED], monkeypatch, capsys)
    assert fit["default_top1"] == default["top1"]
    cv = _main(["cv", "--dataset", data, "--folds", "3", "--jobs", "1",
                "--trainable", trainable, *FIXED], monkeypatch, capsys)
    assert cv["default_top1"] == default["top1"]
    assert cv["default_mrr"] == default["mrr"]
