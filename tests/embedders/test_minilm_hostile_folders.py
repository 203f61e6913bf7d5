"""Hostile MiniLM model folders: ``config.json``, ``tokenizer.json`` and
``model.safetensors`` that do not make a model give a ValueError / TypeError naming
the file and the field or tensor, never a ZeroDivisionError, a KeyError, a bare
``Exception`` from ``tokenizers`` or an embedder whose vectors are NaN.

A tiny random BERT (``support.tiny_bert``) with a word-level tokenizer of its own
vocabulary: needs ``tokenizers`` and ``safetensors``, not the MiniLM weights.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from support.tiny_bert import TINY, tiny_tensors

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world", "rain", "coffee"]


def _tokenizer(path: Path, words: list[str]) -> None:
    tokenizers = pytest.importorskip(
        "tokenizers", reason="the minilm extra (tokenizers) is not installed")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(
        {w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.save(str(path))


def _folder(root: Path, config: Any = None, tensors: Any = None,
            words: list[str] | None = None) -> Path:
    safetensors_numpy = pytest.importorskip(
        "safetensors.numpy", reason="the minilm extra (safetensors) is not installed")
    root.mkdir(parents=True, exist_ok=True)
    _tokenizer(root / "tokenizer.json", WORDS if words is None else words)
    safetensors_numpy.save_file(tiny_tensors() if tensors is None else tensors,
                                str(root / "model.safetensors"))
    text = config if isinstance(config, str) else json.dumps(
        dict(TINY) if config is None else config)
    (root / "config.json").write_text(text, encoding="utf-8")
    return root


def _embedder(folder: Path) -> Any:
    from emotional_memory.embedders.minilm import MiniLMEmbedder

    return MiniLMEmbedder(folder, max_length=32)


def test_the_tiny_folder_itself_embeds_finite_unit_vectors(tmp_path: Path) -> None:
    vector = np.asarray(_embedder(_folder(tmp_path / "m")).embed("hello rain zebra"))
    assert np.isfinite(vector).all() and math.isclose(float(np.linalg.norm(vector)), 1.0,
                                                      rel_tol=1e-5)


@pytest.mark.parametrize(("field", "value"), [
    ("num_attention_heads", 0),  # was a ZeroDivisionError
    ("num_attention_heads", 3),  # not a divisor of hidden_size 8
    ("hidden_size", "8"),  # was "not all arguments converted during string formatting"
    ("hidden_size", -8),
    ("num_hidden_layers", -1),  # was a model of no layers, silently
    ("num_hidden_layers", 2.5),  # was int(2.5) = 2 layers, silently
    ("num_hidden_layers", True),
    ("layer_norm_eps", float("nan")),  # was NaN embeddings
    ("layer_norm_eps", -1.0),
    ("layer_norm_eps", "x"),
    ("max_position_embeddings", "abc"),
    ("vocab_size", None),
    ("pad_token_id", "x"),
    ("pad_token_id", 99),  # outside the vocabulary
])
def test_a_config_field_that_makes_no_model_is_named(tmp_path: Path, field: str,
                                                     value: Any) -> None:
    folder = _folder(tmp_path / "m", {**TINY, field: value})
    with pytest.raises((ValueError, TypeError), match=repr(field)) as info:
        _embedder(folder)
    assert "config.json" in str(info.value)


@pytest.mark.parametrize(("text", "words"), [("{bad", "not valid JSON"),
                                             ("[1]", "JSON object")])
def test_a_config_that_is_no_json_object_names_the_file(tmp_path: Path, text: str,
                                                        words: str) -> None:
    with pytest.raises(ValueError, match=words) as info:
        _embedder(_folder(tmp_path / "m", text))
    assert "config.json" in str(info.value)


def _without(name: str) -> dict[str, np.ndarray]:
    return {k: v for k, v in tiny_tensors().items() if k != name}


def _changed(name: str, value: np.ndarray) -> dict[str, np.ndarray]:
    return {**tiny_tensors(), name: value}


_LN = "embeddings.LayerNorm.weight"


@pytest.mark.parametrize(("tensors", "words"), [
    (_without("encoder.layer.0.output.dense.bias"), "missing"),  # was a KeyError
    (_changed(_LN, np.ones(8, np.int32)), "floating"),  # was cast silently
    (_changed(_LN, np.array([np.nan] + [1.0] * 7, np.float32)), "non-finite"),  # NaN vectors
    (_changed(_LN, np.ones(9, np.float32)), "shape"),
])
def test_weights_that_make_no_model_name_the_file_and_tensor(
    tmp_path: Path, tensors: dict[str, np.ndarray], words: str
) -> None:
    with pytest.raises(ValueError, match=words) as info:
        _embedder(_folder(tmp_path / "m", tensors=tensors))
    assert "model.safetensors" in str(info.value)


def test_a_corrupt_weights_file_is_a_value_error_naming_it(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "m")
    (folder / "model.safetensors").write_bytes(b"garbage" * 10)  # was a SafetensorError
    with pytest.raises(ValueError, match="not a safetensors file") as info:
        _embedder(folder)
    assert "model.safetensors" in str(info.value)


def test_a_corrupt_tokenizer_is_a_value_error_naming_it(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "m")
    (folder / "tokenizer.json").write_text("{}", encoding="utf-8")  # was a bare Exception
    with pytest.raises(ValueError, match=r"tokenizer\.json"):
        _embedder(folder)


def test_a_tokenizer_larger_than_the_vocabulary_is_refused(tmp_path: Path) -> None:
    """Ids past ``vocab_size`` were gathered as NaN rows: every vector NaN."""
    words = WORDS + [f"w{i}" for i in range(TINY["vocab_size"])]
    with pytest.raises(ValueError, match="vocab_size") as info:
        _embedder(_folder(tmp_path / "m", words=words))
    assert "tokenizer.json" in str(info.value)
