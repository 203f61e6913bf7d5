"""Hostile fitted configs and weights files: a clear ValueError naming the file or the
field, never a traceback from the JSON parser or the safetensors reader.

The weights tests need the installed all-MiniLM-L6-v2 (``make minilm``); skipped
otherwise (the CI run installs it and forbids skips).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emotional_memory.embedders.fitted import read_fitted_config


@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,
    '{"embedder": ' + "[" * 100_000 + "]" * 100_000 + "}",
    '{"a": ' * 5_000 + "1" + "}" * 5_000,
])
def test_a_config_nesting_too_deeply_is_a_value_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "deep.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match="nests too deeply"):
        read_fitted_config(path)


@pytest.mark.parametrize("extra", [{"model_dir": "/elsewhere"}, {"weigths": "w"}])
def test_the_embedder_entry_refuses_unknown_keys(tmp_path: Path, extra: dict[str, str]) -> None:
    """A misspelt or unsupported key is named, not silently dropped (the config's own
    keys are strict too)."""
    path = tmp_path / "fitted.json"
    path.write_text(json.dumps(
        {"embedder": {"kind": "minilm-fitted", "weights": "w.safetensors", **extra}}))
    with pytest.raises(ValueError, match=repr(next(iter(extra)))):
        read_fitted_config(path)


def test_the_cli_reports_a_deep_config_as_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from emotional_memory.server.cli import main

    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    assert main(["serve", "--no-auth", "--embedder", "hashing", "--affect", "none",
                 "--store", "memory://", "--config", str(path)]) == 2
    assert "nests too deeply" in capsys.readouterr().err
