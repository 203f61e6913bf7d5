"""A MiniLM fine-tuned by ``python -m training fit --tune-embedder``: saving and loading.

A fitted embedder is the installed all-MiniLM-L6-v2 (or another base folder) with
some encoder layers replaced. Only the replaced layers are saved, in one safetensors
file under their Hugging Face ``BertModel`` names, with metadata naming the format, the
base model and a digest of the saved tensors. :class:`FittedMiniLMEmbedder` loads the
base, overlays the file, and reports an ``identity`` that includes the digest, so a
store records which weights embedded its memories
(:mod:`emotional_memory.embedder_identity`).

A fitted config names its weights file (relative to the config) under the top-level key
``"embedder"``: :func:`write_fitted_config` writes such a file and
:func:`read_fitted_config` reads it back as ``(config, weights path or None)``; a plain
``EmotionalMemoryConfig`` JSON reads as ``(config, None)``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from emotional_memory._files import replaced_whole
from emotional_memory.embedders.minilm import (
    MiniLMEmbedder,
    MiniLMModel,
    _import_optional,
    _Layer,
    _load_config,
    _load_tensors,
)

__all__ = [
    "CONFIG_KEY",
    "FORMAT",
    "FittedMiniLMEmbedder",
    "layer_state_dict",
    "read_fitted_config",
    "save_fitted_weights",
    "write_fitted_config",
]

#: ``format`` metadata of a fitted weights file.
FORMAT = "emotional-memory/fitted-minilm/1"
#: Top-level key of a fitted config JSON naming its embedder.
CONFIG_KEY = "embedder"

_QKV = ("attention.self.query", "attention.self.key", "attention.self.value")


def layer_state_dict(layer: _Layer, index: int) -> dict[str, npt.NDArray[np.float32]]:
    """One encoder layer's tensors under Hugging Face ``BertModel`` names.

    The inverse of the per-layer part of :meth:`MiniLMModel.from_state_dict`: dense
    weights go back to ``(out, in)`` and the fused query/key/value matrix is split.

    Args:
        layer: the layer's weights.
        index: its position in the encoder (``encoder.layer.<index>``).

    Returns:
        Name -> float32 array.
    """
    prefix = f"encoder.layer.{index}."

    def f32(x: Any) -> npt.NDArray[np.float32]:
        return np.ascontiguousarray(np.asarray(x, dtype=np.float32))

    qkv_w = f32(layer.qkv_w)
    qkv_b = f32(layer.qkv_b)
    hidden = qkv_w.shape[0]
    out: dict[str, npt.NDArray[np.float32]] = {}
    for j, name in enumerate(_QKV):
        out[f"{prefix}{name}.weight"] = f32(qkv_w[:, j * hidden:(j + 1) * hidden].T)
        out[f"{prefix}{name}.bias"] = f32(qkv_b[j * hidden:(j + 1) * hidden])
    pairs = (
        ("attention.output.dense", layer.attn_out_w, layer.attn_out_b),
        ("intermediate.dense", layer.ffn_in_w, layer.ffn_in_b),
        ("output.dense", layer.ffn_out_w, layer.ffn_out_b),
    )
    for name, w, b in pairs:
        out[f"{prefix}{name}.weight"] = f32(np.asarray(w, np.float32).T)
        out[f"{prefix}{name}.bias"] = f32(b)
    out[f"{prefix}attention.output.LayerNorm.weight"] = f32(layer.attn_ln_w)
    out[f"{prefix}attention.output.LayerNorm.bias"] = f32(layer.attn_ln_b)
    out[f"{prefix}output.LayerNorm.weight"] = f32(layer.ffn_ln_w)
    out[f"{prefix}output.LayerNorm.bias"] = f32(layer.ffn_ln_b)
    return out


def _digest(tensors: Mapping[str, npt.NDArray[Any]]) -> str:
    """First 16 hex digits of a SHA-256 over the names, shapes and bytes (name order)."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name], dtype=np.float32)
        h.update(name.encode())
        h.update(repr(arr.shape).encode())
        h.update(arr.tobytes())
    return h.hexdigest()[:16]


def save_fitted_weights(
    model: MiniLMModel, base: MiniLMModel, path: str | os.PathLike[str], *,
    base_name: str = "minilm-l6-v2",
) -> str:
    """Save the layers of ``model`` that differ from ``base`` (safetensors).

    Args:
        model: the fitted model.
        base: the model it was fitted from (same architecture).
        path: the file to write.
        base_name: the base's model name (metadata; the installed MiniLM's by default).

    Returns:
        The digest of the saved tensors (part of the loaded embedder's identity).

    Raises:
        ValueError: when the two models have different numbers of layers.
    """
    if len(model.layers) != len(base.layers):
        raise ValueError("the fitted and the base model have different numbers of layers")
    safetensors_numpy = _import_optional("safetensors.numpy")
    tensors: dict[str, npt.NDArray[np.float32]] = {}
    changed: list[int] = []
    for i, (mine, theirs) in enumerate(zip(model.layers, base.layers, strict=True)):
        ours = layer_state_dict(mine, i)
        ref = layer_state_dict(theirs, i)
        if any(not np.array_equal(ours[k], ref[k]) for k in ours):
            tensors.update(ours)
            changed.append(i)
    digest = _digest(tensors)
    metadata = {"format": FORMAT, "base": base_name,
                "layers": ",".join(str(i) for i in changed), "digest": digest}
    with replaced_whole(path) as temporary:  # whole or not at all
        safetensors_numpy.save_file(tensors, str(temporary), metadata=metadata)
    return digest


def _read_weights(path: Path) -> tuple[dict[str, npt.NDArray[Any]], dict[str, str]]:
    """The tensors and metadata of a fitted weights file (format checked; every tensor
    finite floating point).

    Raises:
        ValueError: not a safetensors file, not a fitted weights file, or a tensor
            that is not floating point or holds NaN or infinities (named).
    """
    safetensors_numpy = _import_optional("safetensors.numpy")
    safetensors = _import_optional("safetensors")
    try:
        with safetensors.safe_open(str(path), framework="numpy") as fh:
            metadata = dict(fh.metadata() or {})
        if metadata.get("format") != FORMAT:
            raise ValueError(f"{path} is not a fitted MiniLM weights file (format {FORMAT!r})")
        tensors = dict(safetensors_numpy.load_file(str(path)))
    except safetensors.SafetensorError as exc:  # a truncated or corrupt file
        raise ValueError(f"{path} is not a safetensors file: {exc}") from None
    for name, value in tensors.items():
        if not np.issubdtype(value.dtype, np.floating):
            raise ValueError(f"{path}: tensor {name!r} is {value.dtype}, not floating point")
        if not np.isfinite(value).all():
            raise ValueError(f"{path}: tensor {name!r} holds non-finite values")
    return tensors, metadata


class FittedMiniLMEmbedder(MiniLMEmbedder):
    """A :class:`MiniLMEmbedder` whose encoder layers are overlaid by a fitted file.

    Args:
        weights: the fitted weights file (:func:`save_fitted_weights`).
        model_dir: the base model folder (``None``: the installed all-MiniLM-L6-v2).
        **kwargs: other :class:`MiniLMEmbedder` arguments (``max_length``,
            ``batch_size``, ``dtype``, ``matmul_dtype``).

    Raises:
        TypeError: when ``weights`` is not a path.
        FileNotFoundError: when the weights file or the base model is missing.
        ValueError: when the file is not a (readable) fitted weights file, holds a
            tensor that is not finite floating point, was fitted from another base,
            its tensors do not fit the base, or its digest does not match them.
    """

    def __init__(
        self, weights: str | os.PathLike[str], model_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(weights, str | os.PathLike):
            raise TypeError(f"weights must be a path (str or os.PathLike), got "
                            f"{type(weights).__name__}")
        path = Path(weights).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"fitted embedder weights {str(path)!r} do not exist")
        super().__init__(model_dir, **kwargs)
        overlay, metadata = _read_weights(path)
        digest = _digest(overlay)
        if metadata.get("digest") != digest:
            raise ValueError(f"{path}: the tensors do not match the recorded digest")
        if metadata.get("base") != self._model_name:
            raise ValueError(f"{path} was fitted from {metadata.get('base')!r}, the base "
                             f"model given is {self._model_name!r}")
        tensors = _load_tensors(self.model_dir / "model.safetensors")
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in tensors else ""
        for name, value in overlay.items():
            key = prefix + name
            if key not in tensors:
                raise ValueError(f"{path}: tensor {name!r} is not in the base model")
            if tensors[key].shape != value.shape:
                raise ValueError(f"{path}: tensor {name!r} has shape {value.shape}, the "
                                 f"base's is {tensors[key].shape}")
            tensors[key] = value
        self._model = MiniLMModel.from_state_dict(
            tensors, _load_config(self.model_dir), dtype=self._dtype,
            matmul_dtype=self._matmul_dtype,
        )
        self._weights = path
        self._digest = digest

    @property
    def weights(self) -> Path:
        """The fitted weights file."""
        return self._weights

    @property
    def identity(self) -> str:
        """``"<base name>+fit.<digest>/<dim>"``, e.g. ``"minilm-l6-v2+fit.1a2b.../384"``:
        differs from the base's and from every other fit's (the digest of the weights);
        a ``max_length`` other than 256 is named as in the base's identity.
        """
        return f"{self._model_name}+fit.{self._digest}{self._length_tag()}/{self.dim}"

    def __repr__(self) -> str:
        """Constructor-style representation."""
        return (f"FittedMiniLMEmbedder(weights={str(self._weights)!r}, "
                f"model_dir={str(self.model_dir)!r})")


def write_fitted_config(
    path: str | os.PathLike[str], config: Any, weights: str | os.PathLike[str] | None
) -> None:
    """Write a config JSON, naming the fitted embedder's weights when there are some.

    Args:
        path: the config file to write.
        config: the :class:`~emotional_memory.engine.EmotionalMemoryConfig`.
        weights: the weights file (stored relative to the config's folder when it lies
            inside it), or None for a plain config (exactly ``model_dump_json(indent=2)``).

    The file is replaced whole (a temporary file beside it, then renamed): a write that
    fails leaves the previous file as it was and no temporary file.
    """
    target = Path(path)
    text = config.model_dump_json(indent=2)
    if weights is not None:
        data = json.loads(text)
        wpath = Path(weights)
        try:
            name = str(wpath.resolve().relative_to(target.parent.resolve()))
        except ValueError:
            name = str(wpath.resolve())
        data[CONFIG_KEY] = {"kind": "minilm-fitted", "weights": name}
        text = json.dumps(data, indent=2)
    with replaced_whole(target) as temporary:
        temporary.write_text(text, encoding="utf-8")


def read_fitted_config(path: str | os.PathLike[str]) -> tuple[Any, Path | None]:
    """Read a config JSON and the weights file its ``"embedder"`` key names, if any.

    Args:
        path: the config file.

    Returns:
        ``(config, weights)``: the validated ``EmotionalMemoryConfig`` and the weights
        path (an absolute name as it is; a relative one joined to the config's folder,
        which it must not leave through ``..`` or symbolic links), or None.

    Raises:
        ValueError: when the config is not UTF-8 JSON (or nests too deeply to read), does
            not validate, names an unknown embedder kind or key, a weights name holding
            a NUL character, or a relative weights name resolving outside the config's
            folder or not at all (a symbolic-link loop) (the file named).
    """
    from emotional_memory.engine import EmotionalMemoryConfig

    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
        data = json.loads(text)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{source} is not UTF-8 text: {exc.reason} at byte {exc.start}"
                         ) from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source} is not valid JSON: {exc}") from None
    except RecursionError:  # [[[...]]] thousands deep: more than the parser's stack
        raise ValueError(f"{source} nests too deeply to be a config") from None
    if not isinstance(data, dict) or CONFIG_KEY not in data:
        return EmotionalMemoryConfig.model_validate_json(text), None
    spec = data.pop(CONFIG_KEY)
    config = EmotionalMemoryConfig.model_validate_json(json.dumps(data))
    if not isinstance(spec, dict) or spec.get("kind") != "minilm-fitted" or not isinstance(
        spec.get("weights"), str
    ) or not spec["weights"].strip():
        raise ValueError(f"{CONFIG_KEY!r} must be {{'kind': 'minilm-fitted', 'weights': PATH}} "
                         f"(a non-empty path), in {source}")
    unknown = sorted(set(spec) - {"kind", "weights"})
    if unknown:
        raise ValueError(f"{CONFIG_KEY!r} has an unknown key {unknown[0]!r} (its keys: "
                         "'kind', 'weights')")
    if "\x00" in spec["weights"]:
        raise ValueError(f"{CONFIG_KEY + '.weights'!r} in {source} holds a NUL character, "
                         "which no file name can")
    weights = Path(spec["weights"])
    if weights.is_absolute():
        return config, weights
    return config, _inside(source.parent, weights, source)


def _inside(folder: Path, name: Path, source: Path) -> Path:
    """``folder / name``, refused when it resolves (``..``, symbolic links) outside
    ``folder``: a relative name is read from the config's folder only.

    Raises:
        ValueError: the name leaves the folder or cannot be resolved (a symbolic-link
            loop): the field, the name and the file named.
    """
    path = folder / name
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError) as exc:  # a symbolic-link loop (RuntimeError on 3.11)
        raise ValueError(f"{CONFIG_KEY + '.weights'!r} {str(name)!r} in {source} cannot be "
                         f"resolved: {exc}") from None
    if not resolved.is_relative_to(folder.resolve()):
        raise ValueError(
            f"{CONFIG_KEY + '.weights'!r} {str(name)!r} in {source} resolves outside the "
            "config's folder (a relative name must stay inside it; name weights "
            "elsewhere by an absolute path)"
        )
    return path
