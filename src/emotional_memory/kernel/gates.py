"""Smooth mood gates and mood-adaptive signal weights (docs/behaviour.md §4).

Mood modulates which signals dominate recall (Bower 1981): a negative mood favours
mood congruence and affect proximity, high arousal favours momentum, and a calm
mood favours semantics. Each condition is a smooth tanh/Gaussian gate, so the
weights are differentiable in the mood and in every gate parameter.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Float

from emotional_memory.kernel._types import Array
from emotional_memory.kernel.params import ScoringParams

Scalar = Float[Array, ""]


def accurate_tanh(z: Scalar) -> Scalar:
    """``tanh`` within about 1 ulp of a correctly rounded one, exactly +-1 in saturation.

    XLA's float64 tanh is off by up to ~8e-16 near saturation and never returns
    exactly +-1, so ``1 + tanh(z)`` is not exactly 0 where the reference (libm) says
    it is - and an exact 0 decides the uniform-weights fallback. Away from 0 this
    uses ``1 - 2e / (1 + e)`` with ``e = exp(-2|z|)``, which rounds once at the end.

    Args:
        z: scalar or array.

    Returns:
        tanh(z), same shape and dtype.
    """
    # the sign flip as selects, not ``sign(z) * ...`` / ``abs(z)``: their derivatives
    # at z == 0 are 0, which made the gate's derivative 0 at its centre (it is 1 there)
    negative = z < 0
    a = jnp.where(negative, -z, z)
    e = jnp.exp(-2.0 * a)
    far = 1.0 - 2.0 * e / (1.0 + e)
    t = jnp.where(a < 0.55, jnp.tanh(a), far)
    return jnp.where(negative, -t, t)


def smooth_gate(x: Scalar, center: Scalar, sharpness: Scalar) -> Scalar:
    """``0.5 * (1 + tanh(sharpness * (x - center)))``: a sigmoid step at ``center``.

    Args:
        x, center, sharpness: scalars (negative sharpness flips the step).

    Returns:
        A value in [0, 1].
    """
    return 0.5 * (1.0 + accurate_tanh(sharpness * (x - center)))


def normalise_weights(weights: Float[Array, " S"]) -> Float[Array, " S"]:
    """Clip at 0 and divide by the sum; uniform 1/S when everything cancelled out.

    The double-``where`` keeps the gradient finite on the uniform branch.

    Args:
        weights: (S,) raw weights (may be negative): 6, or 7 with the lexical signal.

    Returns:
        (S,) non-negative weights summing to 1.
    """
    w = jnp.maximum(weights, 0.0)
    total = jnp.sum(w)
    ok = total > 0
    safe_total = jnp.where(ok, total, 1.0)
    return jnp.where(ok, w / safe_total, jnp.full_like(w, 1.0 / w.shape[0]))


def adaptive_weights(
    params: ScoringParams, mood_valence: Scalar, mood_arousal: Scalar
) -> Float[Array, 6]:
    """Mood-modulated, normalised signal weights.

    Args:
        params: scoring parameters (``base_weights`` and ``gates`` are used).
        mood_valence: current mood valence, scalar.
        mood_arousal: current mood arousal, scalar.

    Returns:
        (6,) non-negative weights summing to 1, in the dtype of ``mood_valence``.
    """
    return normalise_weights(gated_weights(params, mood_valence, mood_arousal))


def adaptive_weights_lexical(
    params: ScoringParams, mood_valence: Scalar, mood_arousal: Scalar
) -> Float[Array, 7]:
    """The seven weights with the lexical signal s7: its weight joins the normalisation.

    The six mood-gated weights of :func:`gated_weights` and ``params.lexical.weight`` are
    clipped at 0 and divided by their sum (uniform 1/7 if all are 0).

    Args:
        params: scoring parameters (``base_weights``, ``gates``, ``lexical``).
        mood_valence: current mood valence, scalar.
        mood_arousal: current mood arousal, scalar.

    Returns:
        (7,) non-negative weights summing to 1.
    """
    dtype = jnp.result_type(mood_valence)
    gated = gated_weights(params, mood_valence, mood_arousal)
    lexical = jnp.asarray(params.lexical.weight, dtype)
    return normalise_weights(jnp.concatenate([gated, lexical[None]]))


def adaptive_weights_context(
    params: ScoringParams, mood_valence: Scalar, mood_arousal: Scalar
) -> Float[Array, 8]:
    """The eight weights with the lexical signal s7 and the context signal s8.

    The six mood-gated weights of :func:`gated_weights`, ``params.lexical.weight`` and
    ``params.context.weight`` are clipped at 0 and divided by their sum (uniform 1/8
    if all are 0).

    Args:
        params: scoring parameters (``base_weights``, ``gates``, ``lexical``,
            ``context``).
        mood_valence: current mood valence, scalar.
        mood_arousal: current mood arousal, scalar.

    Returns:
        (8,) non-negative weights summing to 1.
    """
    dtype = jnp.result_type(mood_valence)
    gated = gated_weights(params, mood_valence, mood_arousal)
    lexical = jnp.asarray(params.lexical.weight, dtype)
    context = jnp.asarray(params.context.weight, dtype)
    return normalise_weights(jnp.concatenate([gated, lexical[None], context[None]]))


def gated_weights(
    params: ScoringParams, mood_valence: Scalar, mood_arousal: Scalar
) -> Float[Array, 6]:
    """The base weights moved by the three mood gates, before clipping and normalising.

    Args:
        params: scoring parameters (``base_weights`` and ``gates`` are used).
        mood_valence: current mood valence, scalar.
        mood_arousal: current mood arousal, scalar.

    Returns:
        (6,) raw weights (may be negative).
    """
    dtype = jnp.result_type(mood_valence)
    g = params.gates
    s_neg, c_neg, k_neg = (
        jnp.asarray(x, dtype)
        for x in (g.negative_mood_strength, g.negative_mood_center, g.negative_mood_sharpness)
    )
    s_aro, c_aro, k_aro = (
        jnp.asarray(x, dtype)
        for x in (g.high_arousal_strength, g.high_arousal_center, g.high_arousal_sharpness)
    )
    s_calm, width, c_calm, k_calm = (
        jnp.asarray(x, dtype)
        for x in (g.calm_strength, g.calm_valence_width, g.calm_arousal_center,
                  g.calm_sharpness)
    )
    w = jnp.asarray(params.base_weights, dtype=dtype)
    w0, w1, w2, w3, w4, w5 = (w[i] for i in range(6))

    neg = smooth_gate(mood_valence, c_neg, -k_neg)
    w1 = w1 + s_neg * neg * (2.0 / 3.0)
    w2 = w2 + s_neg * neg * (1.0 / 3.0)
    w0 = w0 - s_neg * neg

    aro = smooth_gate(mood_arousal, c_aro, k_aro)
    w3 = w3 + s_aro * aro
    w0 = w0 - s_aro * aro

    # width > 0 is validated at the config boundary; guard the division anyway so a
    # training step that drives it to 0 yields a finite gradient.
    # exp(-(v / width)^2) written so the gradient stays finite as a training step drives
    # the width towards 0: beyond |v| >= 27 widths the value is < 1e-316, i.e. 0, and
    # below width 1e-15 only the limit (1 at v == 0, else 0) is used - in both regions
    # the ratio, whose gradient would overflow (0 * inf = NaN), is never formed.
    near = (width > 1e-15) & (jnp.abs(mood_valence) < 27.0 * width)
    safe_width = jnp.where(near, width, 1.0)
    limit = jnp.where((mood_valence == 0) & (width > 0), 1.0, 0.0)
    valence_calm = jnp.where(near, jnp.exp(-((mood_valence / safe_width) ** 2)), limit)
    calm = valence_calm * smooth_gate(mood_arousal, c_calm, -k_calm)
    w0 = w0 + s_calm * calm
    w1 = w1 - s_calm * calm * (2.0 / 3.0)
    w2 = w2 - s_calm * calm * (1.0 / 3.0)

    return jnp.stack([w0, w1, w2, w3, w4, w5])


def apply_signal_mask(weights: Float[Array, " S"], mask: Float[Array, " S"]) -> Float[Array, " S"]:
    """Zero disabled signals and renormalise (the engine's ablation flags, docs/behaviour.md §4).

    With every signal enabled the weights pass through bit-for-bit. If all enabled
    weights are 0, the result is uniform over the enabled signals.

    Args:
        weights: (S,) normalised weights (6, or 7 with the lexical signal).
        mask: (S,) 1.0 for enabled signals, 0.0 for disabled ones.

    Returns:
        (S,) weights.
    """
    mask = jnp.asarray(mask, dtype=weights.dtype)
    masked = weights * mask
    total = jnp.sum(masked)
    n_enabled = jnp.sum(mask)
    ok = total > 0
    renorm = jnp.where(
        ok,
        masked / jnp.where(ok, total, 1.0),
        mask / jnp.where(n_enabled > 0, n_enabled, 1.0),
    )
    return jnp.where(jnp.all(mask == 1.0), weights, renorm)
