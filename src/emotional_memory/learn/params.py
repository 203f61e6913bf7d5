"""Unconstrained parametrisation of the trainable parts of :class:`ScoringParams`.

Optimisers work on unconstrained reals; the kernel needs constrained values. Each
scalar has a kind: ``free`` (identity), ``positive`` (softplus), ``unit`` (sigmoid to
[0, 1]) or ``signed`` (tanh to [-1, 1]), so weights stay >= 0, strengths in [0, 1]
and sharpness > 0 by construction. Elements a fit left exactly at their initial
value map back to the original config numbers bit-for-bit.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from emotional_memory.kernel import ScoringParams

FREE, POSITIVE, UNIT, SIGNED = 0, 1, 2, 3

GROUPS: tuple[str, ...] = ("base_weights", "gates", "decay", "calibration", "lexical")
"""Selectable trainable groups. ``calibration`` is the per-signal affine map;
``lexical`` the lexical signal's weight, BM25 k1 and b (start it from a weight > 0)."""

_KINDS: dict[str, tuple[int, ...]] = {
    "base_weights": (POSITIVE,) * 6,
    # negative_mood_{strength, center, sharpness}, high_arousal_{strength, center,
    # sharpness}, calm_{strength, valence_width, arousal_center, sharpness}
    "gates": (UNIT, SIGNED, POSITIVE, UNIT, UNIT, POSITIVE, UNIT, POSITIVE, UNIT, POSITIVE),
    # base_decay, arousal_modulation, retrieval_boost, floor_arousal_threshold,
    # floor_value, min_seconds, power
    "decay": (POSITIVE, UNIT, POSITIVE, UNIT, UNIT, POSITIVE, POSITIVE),
    "signal_scale": (FREE,) * 6,
    "signal_shift": (FREE,) * 6,
    # lexical_weight, lexical_k1, lexical_b
    "lexical": (POSITIVE, POSITIVE, UNIT),
}
_EPS = 1e-6
_U_LIMIT = 700.0


def _leaves_for(groups: Iterable[str]) -> tuple[str, ...]:
    out: list[str] = []
    for g in groups:
        if g not in GROUPS:
            raise ValueError(f"trainable group must be one of {GROUPS}, got {g!r}")
        out.extend(["signal_scale", "signal_shift"] if g == "calibration" else [g])
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
        groups: trainable groups, a subset of :data:`GROUPS`.
    """

    def __init__(self, base: ScoringParams, groups: Iterable[str]) -> None:
        self.base = base
        self.leaves = _leaves_for(groups)
        if not self.leaves:
            raise ValueError("select at least one trainable group")
        self.kinds = {name: np.asarray(_KINDS[name]) for name in self.leaves}
        self.initial = {
            name: unconstrain(np.asarray(getattr(base, name), np.float64), self.kinds[name])
            for name in self.leaves
        }

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
        fields = {f: np.asarray(getattr(self.base, f), np.float64) for f in _FIELDS}
        for name in self.leaves:
            raw = np.asarray(u[name], np.float64)
            value = np.asarray(
                constrain(jnp.asarray(raw), jnp.asarray(self.kinds[name])), np.float64
            )
            fields[name] = np.where(raw == self.initial[name], fields[name], value)
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
    fields.update({name: constrain(u[name], kinds[name]) for name in u})
    return ScoringParams(**fields)


def l2_penalty(u: dict[str, Any], initial: dict[str, Any]) -> Any:
    """``sum((u - initial)^2)`` over every trainable leaf.

    Args:
        u: Leaf name -> unconstrained values.
        initial: Leaf name -> starting values (same keys and shapes as ``u``).

    Returns:
        Scalar penalty (differentiable in ``u``).
    """
    return sum(jnp.sum((u[k] - jnp.asarray(initial[k])) ** 2) for k in u)


_FIELDS = (
    "base_weights", "gates", "decay", "distance_scale", "signal_scale", "signal_shift",
    "lexical",
)
