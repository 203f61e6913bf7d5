"""ScoringParams: every tunable number of the retrieval score, as one nested pytree.

Leaves hold the *constrained* values (weights >= 0, strengths in [0, 1], ...), so the
default parameters reproduce docs/behaviour.md exactly. The mood gates, the recency law and
the lexical signal each have their own module with one named scalar leaf per
parameter (:class:`GateParams`, :class:`DecayParams`, :class:`LexicalParams`); the
per-signal parameters are (6,) vectors in :data:`~emotional_memory.kernel.SIGNAL_NAMES`
order. Training code reparametrises the leaves (softplus / sigmoid) outside the
kernel. The conversion from and to the pydantic configs lives outside the kernel, in
:mod:`emotional_memory.scoring_config`.

:func:`pack_params` / :func:`unpack_params` turn the whole tree into one (41,) vector
and back (exact), so a compiled program can take every parameter as one operand.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, TypeVar, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Float

from emotional_memory.kernel._types import Array

_G = TypeVar("_G", bound="ParamGroup")


class ParamGroup(eqx.Module):
    """A group of named scalar parameters (one 0-d leaf per field).

    Subclasses declare their fields in a fixed order; :meth:`vector` and
    :meth:`from_vector` convert to and from a vector in that order (for optimisers
    that update a group as one array).
    """

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The field names, in declaration order.

        Returns:
            The names.
        """
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_vector(cls: type[_G], values: Any) -> _G:
        """The group from a vector of its values in :meth:`names` order.

        Args:
            values: (K,) values (numpy, JAX or traced; indexed, not converted).

        Returns:
            The group, each leaf the 0-d ``values[i, ...]`` (an array, also for numpy).
        """
        return cls(*(values[i, ...] for i in range(len(cls.names()))))

    def vector(self) -> Any:
        """The values as one vector in :meth:`names` order.

        Returns:
            (K,) array: a JAX array inside a transformation (traced leaves), else a
            numpy array of the leaves' values (host or device; dtype kept, so float64
            stays exact whatever JAX's x64 mode).
        """
        leaves = [getattr(self, name) for name in self.names()]
        if any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
            return jnp.stack([jnp.asarray(leaf) for leaf in leaves])
        return np.stack([np.asarray(leaf) for leaf in leaves])


class GateParams(ParamGroup):
    """The ten parameters of the three smooth mood gates (docs/behaviour.md §4).

    Each name is the ``AdaptiveWeightsConfig`` field it comes from; every leaf is a
    0-d array.

    Attributes:
        negative_mood_strength: weight moved by a negative mood (to s2, s3).
        negative_mood_center: mood valence at the gate's midpoint.
        negative_mood_sharpness: slope of the negative-mood gate (> 0).
        high_arousal_strength: weight moved by high arousal (to s4).
        high_arousal_center: mood arousal at the gate's midpoint.
        high_arousal_sharpness: slope of the arousal gate (> 0).
        calm_strength: weight moved by a calm mood (to s1).
        calm_valence_width: width of the calm gate's valence bump (> 0).
        calm_arousal_center: mood arousal below which the mood counts as calm.
        calm_sharpness: slope of the calm gate's arousal edge (> 0).
    """

    negative_mood_strength: Float[Array, ""]
    negative_mood_center: Float[Array, ""]
    negative_mood_sharpness: Float[Array, ""]
    high_arousal_strength: Float[Array, ""]
    high_arousal_center: Float[Array, ""]
    high_arousal_sharpness: Float[Array, ""]
    calm_strength: Float[Array, ""]
    calm_valence_width: Float[Array, ""]
    calm_arousal_center: Float[Array, ""]
    calm_sharpness: Float[Array, ""]


class DecayParams(ParamGroup):
    """The seven parameters of the recency signal s5, ``DecayConfig``'s names.

    The law is in docs/behaviour.md §3.

    Attributes:
        base_decay: power-law decay rate before modulation.
        arousal_modulation: how much arousal slows forgetting, in [0, 1].
        retrieval_boost: how much each retrieval slows forgetting.
        floor_arousal_threshold: arousal from which the strength floor applies.
        floor_value: the floor of a high-arousal memory's strength.
        min_seconds: ages below this count as this (> 0).
        power: exponent multiplier of the power law.
    """

    base_decay: Float[Array, ""]
    arousal_modulation: Float[Array, ""]
    retrieval_boost: Float[Array, ""]
    floor_arousal_threshold: Float[Array, ""]
    floor_value: Float[Array, ""]
    min_seconds: Float[Array, ""]
    power: Float[Array, ""]


class LexicalParams(ParamGroup):
    """The opt-in lexical signal s7: its weight and Okapi BM25's two constants.

    Attributes:
        weight: base weight of s7 (0: off); config field ``lexical_weight``.
        k1: BM25's term-frequency saturation; ``lexical_k1``.
        b: BM25's length normalisation, in [0, 1]; ``lexical_b``.
    """

    weight: Float[Array, ""]
    k1: Float[Array, ""]
    b: Float[Array, ""]

    DEFAULT: ClassVar[tuple[float, float, float]] = (0.0, 1.2, 0.75)

    @classmethod
    def default(cls) -> LexicalParams:
        """Weight 0 (off), k1 = 1.2, b = 0.75, as float64 host scalars.

        Returns:
            The default group.
        """
        return cls.from_vector(np.asarray(cls.DEFAULT, dtype=np.float64))


class ContextParams(ParamGroup):
    """The opt-in conversational context signal s8 (:mod:`emotional_memory.kernel.context`).

    Attributes:
        weight: base weight of s8 (0: off); config field ``context_weight``.
        mix: share of the neighbours' semantic signal s1 in what they lend (the rest
            is their lexical signal s7), in [0, 1]; ``context_mix``.
    """

    weight: Float[Array, ""]
    mix: Float[Array, ""]

    DEFAULT: ClassVar[tuple[float, float]] = (0.0, 0.5)

    @classmethod
    def default(cls) -> ContextParams:
        """Weight 0 (off), mix 0.5, as float64 host scalars.

        Returns:
            The default group.
        """
        return cls.from_vector(np.asarray(cls.DEFAULT, dtype=np.float64))


GATE_FIELDS: tuple[str, ...] = GateParams.names()
"""The ten gate parameters' names (:class:`GateParams`; AdaptiveWeightsConfig fields)."""

DECAY_FIELDS: tuple[str, ...] = DecayParams.names()
"""The seven recency parameters' names (:class:`DecayParams`; DecayConfig fields)."""

LEXICAL_FIELDS: tuple[str, ...] = ("lexical_weight", "lexical_k1", "lexical_b")
"""The RetrievalConfig fields of :class:`LexicalParams`' leaves, in the same order."""

DEFAULT_LEXICAL: tuple[float, float, float] = LexicalParams.DEFAULT
"""Default :data:`LEXICAL_FIELDS` values: weight 0 (off), k1 = 1.2, b = 0.75."""

CONTEXT_FIELDS: tuple[str, ...] = ("context_weight", "context_mix")
"""The RetrievalConfig fields of :class:`ContextParams`' leaves, in the same order."""

DEFAULT_CONTEXT: tuple[float, float] = ContextParams.DEFAULT
"""Default :data:`CONTEXT_FIELDS` values: weight 0 (off), mix 0.5."""


class ScoringParams(eqx.Module):
    """All tunable numbers of the score.

    Attributes:
        base_weights: (6,) base weights of the six signals.
        gates: the mood gates' parameters.
        decay: the recency signal's parameters.
        distance_scale: () normaliser of PAD distances (sqrt 6).
        signal_scale: (6,) per-signal affine calibration scale (identity: 1).
        signal_shift: (6,) per-signal affine calibration shift (identity: 0).
        lexical: the lexical signal's parameters; used only when lexical inputs are
            scored.
        context: the context signal's parameters; used only when context inputs are
            scored.
    """

    base_weights: Float[Array, 6]
    gates: GateParams
    decay: DecayParams
    distance_scale: Float[Array, ""]
    signal_scale: Float[Array, 6]
    signal_shift: Float[Array, 6]
    lexical: LexicalParams = eqx.field(default_factory=LexicalParams.default)
    context: ContextParams = eqx.field(default_factory=ContextParams.default)

    def __check_init__(self) -> None:
        for name, group in (("gates", GateParams), ("decay", DecayParams),
                            ("lexical", LexicalParams), ("context", ContextParams)):
            if not isinstance(getattr(self, name), group):
                raise TypeError(
                    f"ScoringParams.{name} must be a {group.__name__} (named scalars), got "
                    f"{type(getattr(self, name)).__name__}; build it with "
                    f"{group.__name__}.from_vector(values) for values in "
                    f"{group.__name__}.names() order"
                )

    def astype(self, dtype: Any) -> ScoringParams:
        """Cast every leaf to ``dtype`` (as JAX arrays).

        Args:
            dtype: Target dtype (e.g. ``jnp.float32``).

        Returns:
            New parameters with JAX-array leaves of ``dtype`` (shapes unchanged).
        """
        out: ScoringParams = jax.tree_util.tree_map(
            lambda leaf: jnp.asarray(leaf, dtype=dtype), self
        )
        return out


def _template() -> ScoringParams:
    zero = np.zeros((), np.float64)
    return ScoringParams(
        base_weights=np.zeros(6), gates=GateParams(*[zero] * len(GATE_FIELDS)),
        decay=DecayParams(*[zero] * len(DECAY_FIELDS)), distance_scale=zero,
        signal_scale=np.zeros(6), signal_shift=np.zeros(6),
        lexical=LexicalParams(zero, zero, zero), context=ContextParams(zero, zero),
    )


_LEAVES, _TREEDEF = jax.tree_util.tree_flatten(_template())
_SHAPES: tuple[tuple[int, ...], ...] = tuple(np.shape(leaf) for leaf in _LEAVES)
_SIZES: tuple[int, ...] = tuple(int(np.prod(shape)) for shape in _SHAPES)
PACKED_SIZE: int = sum(_SIZES)
"""Length of :func:`pack_params`' vector (41)."""


def pack_params(params: ScoringParams) -> np.ndarray:
    """Every leaf of ``params``, flattened in pytree order into one host vector.

    Args:
        params: unbatched parameters with host or device leaves.

    Returns:
        (:data:`PACKED_SIZE`,) float64 numpy vector (exact for float64 or float32
        leaves).

    Raises:
        ValueError: when a leaf's shape is not the one :class:`ScoringParams` declares
            (e.g. ``base_weights`` of 5 values), naming the leaf.
    """
    paths_leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
    if cast(Any, treedef) != _TREEDEF:
        raise ValueError("params must be an unbatched ScoringParams")
    for (path, leaf), shape in zip(paths_leaves, _SHAPES, strict=True):
        if np.shape(leaf) != shape:
            raise ValueError(
                f"params{jax.tree_util.keystr(path)} must have shape {shape}, "
                f"got {np.shape(leaf)}"
            )
    return np.concatenate(
        [np.asarray(leaf, np.float64).reshape(-1) for _, leaf in paths_leaves]
    )


def unpack_params(packed: Float[Array, " P"]) -> ScoringParams:
    """:func:`pack_params`' inverse: slices of ``packed``, no arithmetic.

    Args:
        packed: (:data:`PACKED_SIZE`,) vector (numpy, JAX or traced).

    Returns:
        The parameters; every leaf has ``packed``'s dtype.

    Raises:
        ValueError: when ``packed`` is not a (:data:`PACKED_SIZE`,) vector.
    """
    if np.shape(packed) != (PACKED_SIZE,):
        raise ValueError(
            f"packed params must have shape ({PACKED_SIZE},), got {np.shape(packed)}"
        )
    leaves = []
    start = 0
    for shape, size in zip(_SHAPES, _SIZES, strict=True):
        leaves.append(packed[start:start + size].reshape(shape))
        start += size
    out: ScoringParams = jax.tree_util.tree_unflatten(_TREEDEF, leaves)
    return out
