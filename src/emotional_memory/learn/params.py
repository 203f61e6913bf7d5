"""Unconstrained parametrisation of the trainable parts of :class:`ScoringParams`.

Optimisers work on unconstrained reals; the kernel needs constrained values. Each
scalar has a kind: ``free`` (identity), ``positive`` (softplus), ``unit`` (sigmoid to
[0, 1]) or ``signed`` (tanh to [-1, 1]), so weights stay >= 0, strengths in [0, 1]
and sharpness > 0 by construction. Elements a fit left exactly at their initial
value map back to the original config numbers bit-for-bit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from emotional_memory._precision import float64
from emotional_memory.kernel import (
    ContextParams,
    DecayParams,
    GateParams,
    LexicalParams,
    ScoringParams,
)
from emotional_memory.kernel.adapter import QueryAdapter
from emotional_memory.kernel.params import ParamGroup

FREE, POSITIVE, UNIT, SIGNED = 0, 1, 2, 3

GROUPS: tuple[str, ...] = (
    "base_weights", "gates", "decay", "calibration", "lexical", "context",
)
"""The trainable groups of :class:`ScoringParams`. ``calibration`` is the per-signal
affine map; ``lexical`` the lexical signal's weight, BM25 k1 and b (start it from a
weight > 0); ``context`` the context signal's weight and mix (start it from a weight
> 0; the batch needs its neighbours and lexical statistics)."""

TRAINABLE_GROUPS: tuple[str, ...] = (*GROUPS, "adapter")
"""Every selectable trainable group: :data:`GROUPS` and ``adapter``, the query
adapter's factors (:mod:`emotional_memory.kernel.adapter`; free reals outside
:class:`ScoringParams`, see :func:`adapter_of`; the batch needs its embeddings)."""

ADAPTER_LEAVES: tuple[str, str] = ("adapter_left", "adapter_right")
"""The trainable leaves of the ``adapter`` group: its (D, R) factors."""

_NAMED_KINDS: dict[str, dict[str, int]] = {
    "gates": {
        "negative_mood_strength": UNIT, "negative_mood_center": SIGNED,
        "negative_mood_sharpness": POSITIVE,
        "high_arousal_strength": UNIT, "high_arousal_center": UNIT,
        "high_arousal_sharpness": POSITIVE,
        "calm_strength": UNIT, "calm_valence_width": POSITIVE, "calm_arousal_center": UNIT,
        "calm_sharpness": POSITIVE,
    },
    "decay": {
        "base_decay": POSITIVE, "arousal_modulation": UNIT, "retrieval_boost": POSITIVE,
        "floor_arousal_threshold": UNIT, "floor_value": UNIT, "min_seconds": POSITIVE,
        "power": POSITIVE,
    },
    "lexical": {"weight": POSITIVE, "k1": POSITIVE, "b": UNIT},
    "context": {"weight": POSITIVE, "mix": UNIT},
}
_GROUP_TYPES: dict[str, type[ParamGroup]] = {
    "gates": GateParams, "decay": DecayParams, "lexical": LexicalParams,
    "context": ContextParams,
}
_KINDS: dict[str, tuple[int, ...]] = {
    "base_weights": (POSITIVE,) * 6,
    "signal_scale": (FREE,) * 6,
    "signal_shift": (FREE,) * 6,
    **{
        group: tuple(_NAMED_KINDS[group][name] for name in cls.names())
        for group, cls in _GROUP_TYPES.items()
    },
}
"""Per trainable leaf, the kind of each element (a group's in its field order)."""
_EPS = 1e-6
_U_LIMIT = 700.0


def _leaves_for(groups: Iterable[str]) -> tuple[str, ...]:
    out: list[str] = []
    for g in groups:
        if g not in TRAINABLE_GROUPS:
            raise ValueError(f"trainable group must be one of {TRAINABLE_GROUPS}, got {g!r}")
        if g == "calibration":
            out.extend(["signal_scale", "signal_shift"])
        elif g == "adapter":
            out.extend(ADAPTER_LEAVES)
        else:
            out.append(g)
    return tuple(dict.fromkeys(out))


def constrain(u: Any, kinds: Any) -> Any:
    """Map unconstrained values to constrained ones, elementwise by kind.

    Args:
        u: (K,) unconstrained values.
        kinds: (K,) int kinds (``FREE``, ``POSITIVE``, ``UNIT`` or ``SIGNED``).

    Returns:
        (K,) values: identity, softplus, sigmoid or tanh per element. Bounded kinds
        see ``u`` clipped to [-700, 700], so softplus stays strictly positive in
        float64 (a huge optimiser step cannot reach an invalid 0 sharpness).
    """
    bounded = jnp.clip(u, -_U_LIMIT, _U_LIMIT)
    return jnp.select(
        [kinds == POSITIVE, kinds == UNIT, kinds == SIGNED],
        [jax.nn.softplus(bounded), jax.nn.sigmoid(bounded), jnp.tanh(bounded)],
        u,
    )


def unconstrain(x: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """Inverse of :func:`constrain` (boundary values nudged inside by 1e-6).

    Args:
        x: (K,) constrained values.
        kinds: (K,) int kinds, as for :func:`constrain`.

    Returns:
        (K,) float64 unconstrained values.
    """
    x = np.asarray(x, np.float64)
    pos = np.maximum(x, _EPS)
    softplus_inv = pos + np.log(-np.expm1(-pos))
    p = np.clip(x, _EPS, 1.0 - _EPS)
    logit = np.log(p) - np.log1p(-p)
    t = np.clip(x, -1.0 + _EPS, 1.0 - _EPS)
    atanh = np.arctanh(t)
    return np.select([kinds == POSITIVE, kinds == UNIT, kinds == SIGNED],
                     [softplus_inv, logit, atanh], x)


class Reparam:
    """Converts between ``ScoringParams`` and a dict of unconstrained trainable leaves.

    Args:
        base: the starting parameters (untrained leaves stay exactly these).
        groups: trainable groups, a subset of :data:`TRAINABLE_GROUPS`.
        adapter: the adapter's starting ``(left, right)`` (D, R) factors; required with
            the ``adapter`` group (e.g. :func:`initial_adapter`).
    """

    def __init__(
        self, base: ScoringParams, groups: Iterable[str],
        adapter: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.base = base
        self.leaves = _leaves_for(groups)
        if not self.leaves:
            raise ValueError("select at least one trainable group")
        scalar = [name for name in self.leaves if name not in ADAPTER_LEAVES]
        self.kinds = {name: np.asarray(_KINDS[name]) for name in scalar}
        self.initial = {
            name: unconstrain(leaf_vector(base, name), self.kinds[name]) for name in scalar
        }
        if ADAPTER_LEAVES[0] in self.leaves:
            if adapter is None:
                raise ValueError("the adapter group needs starting factors (adapter=...)")
            for name, factor in zip(ADAPTER_LEAVES, adapter, strict=True):
                self.kinds[name] = np.zeros(np.shape(factor), np.int64)  # FREE
                self.initial[name] = np.asarray(factor, np.float64).copy()

    def init(self) -> dict[str, np.ndarray]:
        """The unconstrained starting point (a copy).

        Returns:
            Trainable leaf name -> float64 unconstrained array (e.g. ``gates`` (10,)).
        """
        return {k: v.copy() for k, v in self.initial.items()}

    def params(self, u: dict[str, Any]) -> ScoringParams:
        """Differentiable: ScoringParams with the trainable leaves from ``u``.

        Args:
            u: Trainable leaf name -> unconstrained values (shapes as :meth:`init`).

        Returns:
            ``base`` with those leaves replaced by their constrained values.
        """
        return constrained_params(self.base, {k: jnp.asarray(v) for k, v in self.kinds.items()},
                                  u)

    def export(self, u: dict[str, Any]) -> ScoringParams:
        """Host float64 ScoringParams; elements equal to their start keep exact values.

        Args:
            u: Trainable leaf name -> unconstrained values (shapes as :meth:`init`).

        Returns:
            Parameters with float64 numpy leaves.
        """
        host = jax.tree_util.tree_map(lambda leaf: np.asarray(leaf, np.float64), self.base)
        fields = {f: getattr(host, f) for f in _FIELDS}
        for name in self.leaves:
            if name in ADAPTER_LEAVES:
                continue
            raw = np.asarray(u[name], np.float64)
            with float64():  # the constraint in float64 whatever JAX's global x64 mode
                value = np.asarray(
                    constrain(jnp.asarray(raw), jnp.asarray(self.kinds[name])), np.float64
                )
            kept = np.where(raw == self.initial[name], leaf_vector(host, name), value)
            fields[name] = leaf_from_vector(name, kept)
        return ScoringParams(**fields)


def constrained_params(
    base: ScoringParams, kinds: dict[str, Any], u: dict[str, Any]
) -> ScoringParams:
    """Pure and differentiable: ``base`` with leaves ``constrain(u[k], kinds[k])``.

    Args:
        base: parameters providing the untrained leaves.
        kinds: per trainable leaf, an int array of kinds.
        u: per trainable leaf, unconstrained values.

    Returns:
        ScoringParams.
    """
    fields = {f: getattr(base, f) for f in _FIELDS}
    fields.update({name: leaf_from_vector(name, constrain(u[name], kinds[name])) for name in u
                   if name not in ADAPTER_LEAVES})
    return ScoringParams(**fields)


def adapter_of(u: dict[str, Any]) -> QueryAdapter | None:
    """The query adapter held by trainable leaves (None without the ``adapter`` group).

    Args:
        u: trainable leaf name -> values (the adapter's factors are free reals).

    Returns:
        The :class:`~emotional_memory.kernel.adapter.QueryAdapter`, or None.
    """
    if ADAPTER_LEAVES[0] not in u:
        return None
    return QueryAdapter(u[ADAPTER_LEAVES[0]], u[ADAPTER_LEAVES[1]])


def initial_adapter(dim: int, rank: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Starting factors of a rank-``rank`` adapter: the identity map exactly.

    ``left`` is zero (so ``q + left @ (right.T @ q)`` is ``q``) and ``right`` random
    with unit-norm-scale columns (so the first steps move ``left`` in R independent
    directions).

    Args:
        dim: D, the embedding dimension.
        rank: R, 1 <= R <= D.
        seed: random seed of ``right``.

    Returns:
        ``(left, right)``: float64 (D, R) arrays.

    Raises:
        ValueError: a rank outside [1, D].
    """
    if not 1 <= rank <= dim:
        raise ValueError(f"adapter rank must lie in [1, {dim}], got {rank}")
    right = np.random.default_rng(seed).standard_normal((dim, rank)) / math.sqrt(dim)
    return np.zeros((dim, rank)), right


def leaf_vector(params: ScoringParams, name: str) -> Any:
    """One trainable leaf of ``params`` as a vector (a group's in its field order).

    Args:
        params: the parameters.
        name: a trainable leaf name (a key of the kinds, e.g. ``"gates"``).

    Returns:
        (K,) array: float64 numpy for host leaves, else a JAX array.
    """
    leaf = getattr(params, name)
    if isinstance(leaf, ParamGroup):
        return leaf.vector()
    return np.asarray(leaf, np.float64) if isinstance(leaf, np.ndarray) else leaf


def leaf_from_vector(name: str, values: Any) -> Any:
    """:func:`leaf_vector`'s inverse: the leaf ``name`` holding ``values``.

    Args:
        name: a trainable leaf name.
        values: (K,) values.

    Returns:
        A :class:`~emotional_memory.kernel.params.ParamGroup` for a group, else
        ``values``.
    """
    group = _GROUP_TYPES.get(name)
    return values if group is None else group.from_vector(values)


def l2_penalty(
    u: dict[str, Any], initial: dict[str, Any], adapter: bool | None = None
) -> Any:
    """``sum((u - initial)^2)`` over trainable leaves.

    Args:
        u: Leaf name -> unconstrained values.
        initial: Leaf name -> starting values (same keys and shapes as ``u``).
        adapter: None: every leaf; False: the leaves outside the ``adapter`` group;
            True: the adapter's factors only.

    Returns:
        Scalar penalty (differentiable in ``u``; 0.0 when no leaf is selected).
    """
    keys = [k for k in u if adapter is None or (k in ADAPTER_LEAVES) == adapter]
    return sum((jnp.sum((u[k] - jnp.asarray(initial[k])) ** 2) for k in keys), 0.0)


_FIELDS = (
    "base_weights", "gates", "decay", "distance_scale", "signal_scale", "signal_shift",
    "lexical", "context",
)
