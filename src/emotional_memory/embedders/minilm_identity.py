"""The model part of :attr:`MiniLMEmbedder.identity
<emotional_memory.embedders.minilm.MiniLMEmbedder.identity>`, read from a model folder.

The files, not the folder's name, tell two models apart: the weights, the tokenizer's
content and the architecture fields of ``config.json`` that change the vectors.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: SHA-256 of all-MiniLM-L6-v2's ``model.safetensors`` (the installed package's, and
#: the Hugging Face repository's): a copy of it in any folder is that model.
INSTALLED_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
#: :func:`tokenizer_sha256` of all-MiniLM-L6-v2's ``tokenizer.json`` (the installed
#: package's, or the same tokenizer saved again).
INSTALLED_TOKENIZER_SHA256 = "be31104b6f24999221b2d3c998f415a4ed94b29fdf35ac7d72fba1fc7aacd4ce"
#: ``tokenizer.json`` sections the embedder overrides (they change no id it uses).
_OVERRIDDEN_TOKENIZER_KEYS = frozenset({"truncation", "padding"})
#: ``config.json`` fields that change no vector (padding positions are masked out).
_UNUSED_CONFIG_KEYS = frozenset({"pad_token_id"})


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def tokenizer_sha256(path: Path) -> str:
    """Hex SHA-256 of a ``tokenizer.json``'s content: its JSON with sorted keys and
    without :data:`_OVERRIDDEN_TOKENIZER_KEYS`, so the same tokenizer saved again
    (another layout, truncation or padding) has the same digest; the file's bytes when
    it is no JSON object (loading the tokenizer refuses it then)."""
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        return file_sha256(path)
    kept = {key: value for key, value in data.items() if key not in _OVERRIDDEN_TOKENIZER_KEYS}
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def model_name(folder: Path, config: Mapping[str, Any], default_config: Mapping[str, Any],
               installed: Path | None) -> str:
    """The identity's model part of a model folder.

    Args:
        folder: the model folder.
        config: its merged ``config.json``.
        default_config: all-MiniLM-L6-v2's architecture (the keys compared).
        installed: the installed model's folder, or ``None``.

    Returns:
        ``"minilm-l6-v2"`` for the installed weights (or a copy of them), else
        ``"minilm:<first 16 hex digits of the weights file's SHA-256>"``; then
        ``"+tokenizer.<12 hex>"`` when the tokenizer's content (:func:`tokenizer_sha256`)
        is not the installed one's and ``"+config.<12 hex>"`` when the architecture of
        ``config.json`` is not all-MiniLM-L6-v2's (both change the vectors of the same
        weights).
    """
    if installed is not None and folder.resolve() == installed.resolve():
        return "minilm-l6-v2"
    digest = file_sha256(folder / "model.safetensors")
    name = "minilm-l6-v2" if digest == INSTALLED_SHA256 else f"minilm:{digest[:16]}"
    tokenizer = tokenizer_sha256(folder / "tokenizer.json")
    if tokenizer != INSTALLED_TOKENIZER_SHA256:
        name += f"+tokenizer.{tokenizer[:12]}"
    keys = [key for key in default_config if key not in _UNUSED_CONFIG_KEYS]
    architecture = {key: config[key] for key in keys}
    if architecture != {key: default_config[key] for key in keys}:
        text = json.dumps(architecture, sort_keys=True)
        name += f"+config.{hashlib.sha256(text.encode()).hexdigest()[:12]}"
    return name
