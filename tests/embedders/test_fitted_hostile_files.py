"""Hostile fitted configs and weights files: a clear ValueError naming the file or the
field, never a traceback from the JSON parser or the safetensors reader.

The weights tests need the installed all-MiniLM-L6-v2 (``make minilm``); skipped
otherwise (the CI run installs it and forbids skips).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emotional_memory.embedders.fitted import FORMAT, _digest, read_fitted_config
from support.minilm import require_minilm

_TENSOR = "encoder.layer.5.output.LayerNorm.bias"  # shape (384,) in MiniLM-L6


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


@pytest.mark.parametrize(("content", "words"), [
    (b"\xff\xfe{", "not UTF-8"),
    (b"{not json", "not valid JSON"),
    (b'{"embedder": {"kind": "minilm-fitted", "weights": ""}}', "non-empty path"),
])
def test_an_unreadable_config_names_the_file(tmp_path: Path, content: bytes,
                                             words: str) -> None:
    path = tmp_path / "odd.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=words) as info:
        read_fitted_config(path)
    assert str(path) in str(info.value)


def _config_naming(folder: Path, weights: str) -> Path:
    path = folder / "fitted.json"
    path.write_text(json.dumps({"embedder": {"kind": "minilm-fitted", "weights": weights}}))
    return path


@pytest.mark.parametrize("name", ["../outside.safetensors", "sub/../../outside.safetensors",
                                  "link.safetensors", "linked_dir/w.safetensors"])
def test_a_relative_weights_name_may_not_leave_the_config_folder(tmp_path: Path,
                                                                 name: str) -> None:
    """A relative ``weights`` was joined to the config's folder as it was: ``..`` or a
    symlink inside the folder made a config read any file of the machine (the CLI
    opens it at start). ``write_fitted_config`` writes a relative name only for
    weights inside the folder (else an absolute path), so a relative name must stay
    there after resolving links."""
    folder = tmp_path / "fits"
    folder.mkdir()
    outside = tmp_path / "outside.safetensors"
    outside.write_bytes(b"x")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "w.safetensors").write_bytes(b"x")
    (folder / "link.safetensors").symlink_to(outside)
    (folder / "linked_dir").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(ValueError, match=r"'embedder\.weights'") as info:
        read_fitted_config(_config_naming(folder, name))
    assert name in str(info.value) and "outside" in str(info.value)


@pytest.mark.parametrize("name", ["loop", "loop/w.safetensors", "w\x00.safetensors",
                                  "/abs/w\x00.safetensors"])
def test_an_unresolvable_weights_name_is_a_value_error_naming_the_field(
    tmp_path: Path, name: str
) -> None:
    """A symbolic-link loop (RuntimeError from ``Path.resolve`` on Python 3.11, which
    the CLI did not catch) or a NUL character is a ValueError naming the field and the
    file, like any other bad name."""
    folder = tmp_path / "fits"
    folder.mkdir()
    (folder / "loop").symlink_to(folder / "loop")
    config = _config_naming(folder, name)
    with pytest.raises(ValueError, match=r"'embedder\.weights'") as info:
        read_fitted_config(config)
    assert str(config) in str(info.value)


def test_weights_inside_the_folder_or_absolute_are_read(tmp_path: Path) -> None:
    folder = tmp_path / "fits"
    (folder / "sub").mkdir(parents=True)
    inside = folder / "sub" / "w.safetensors"
    inside.write_bytes(b"x")
    _, path = read_fitted_config(_config_naming(folder, "sub/../sub/w.safetensors"))
    assert path is not None and path.resolve() == inside.resolve()
    absolute = tmp_path / "abs.safetensors"  # documented: written for weights elsewhere
    _, path = read_fitted_config(_config_naming(folder, str(absolute)))
    assert path == absolute


def test_the_weights_argument_must_be_a_path() -> None:
    from emotional_memory.embedders.fitted import FittedMiniLMEmbedder

    with pytest.raises(TypeError, match="weights"):
        FittedMiniLMEmbedder(None)  # type: ignore[arg-type]


def test_the_cli_reports_a_deep_config_as_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from emotional_memory.server.cli import main

    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    assert main(["serve", "--no-auth", "--embedder", "hashing", "--affect", "none",
                 "--store", "memory://", "--config", str(path)]) == 2
    assert "nests too deeply" in capsys.readouterr().err


@pytest.fixture(scope="module")
def base_installed() -> None:
    require_minilm()


def _fitted(path: Path, value: Any) -> Path:
    from safetensors.numpy import save_file

    tensors = {_TENSOR: value}
    save_file(tensors, str(path), metadata={
        "format": FORMAT, "base": "minilm-l6-v2", "layers": "5", "digest": _digest(tensors)})
    return path


def _raw(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


_LIE = json.dumps({"__metadata__": {"format": FORMAT}, "x": {
    "dtype": "F32", "shape": [2**40], "data_offsets": [0, 2**42]}}).encode()


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: _raw(p, b""), "not a safetensors file"),
    (lambda p: _raw(p, b"garbage" * 10), "not a safetensors file"),
    (lambda p: _raw(p, struct.pack("<Q", 2**62) + b"{}"), "not a safetensors file"),
    (lambda p: _raw(p, struct.pack("<Q", len(_LIE)) + _LIE), "not a safetensors file"),
    (lambda p: _fitted(p, np.full(384, np.nan, np.float32)), "non-finite"),
    (lambda p: _fitted(p, np.array([np.inf] + [0.0] * 383, np.float32)), "non-finite"),
    (lambda p: _fitted(p, np.zeros(384, np.int64)), "floating"),
    (lambda p: _fitted(p, np.zeros(384, bool)), "floating"),
])
def test_hostile_weights_files_are_value_errors(
    base_installed: None, tmp_path: Path, make: Any, message: str
) -> None:
    """A corrupt safetensors file, or tensors that are not finite floats, are refused
    when loading, naming the file (and the tensor), never loaded into an embedder
    whose vectors would be NaN."""
    from emotional_memory.embedders.fitted import FittedMiniLMEmbedder

    path = make(tmp_path / "fit.embedder.safetensors")
    with pytest.raises(ValueError, match=message) as info:
        FittedMiniLMEmbedder(path)
    assert str(path) in str(info.value)
    if message != "not a safetensors file":
        assert _TENSOR in str(info.value)


def test_the_cli_reports_a_corrupt_weights_file_as_a_usage_error(
    base_installed: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from emotional_memory.server.cli import main

    _raw(tmp_path / "w.safetensors", b"garbage" * 10)
    config = tmp_path / "fitted.json"
    config.write_text(json.dumps({"embedder": {"kind": "minilm-fitted",
                                               "weights": "w.safetensors"}}))
    assert main(["serve", "--no-auth", "--embedder", "minilm", "--affect", "none",
                 "--store", "memory://", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "the fitted embedder cannot be loaded" in err and "not a safetensors file" in err
