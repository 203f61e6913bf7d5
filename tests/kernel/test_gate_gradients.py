"""Gradients of the smooth mood gates where their branches meet, against oracles.

``accurate_tanh`` is tanh (smooth everywhere) computed by two formulas, switching at
``|z| = 0.55``, and odd by a sign flip. Its derivative must be ``1 - tanh(z)^2`` at
every point, including ``z = 0``: a mood exactly at a gate's centre (e.g. a mood
regressed to the baseline arousal 0.3, the calm gate's centre) used to get a zero
derivative there (``sign(z)`` has derivative 0 and ``sign(0) = 0``), so a fit saw no
gradient for that gate's centre and sharpness. All checks run in float64 inside
JAX's local x64 context (the global flag is never touched).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from emotional_memory import EmotionalMemoryConfig
from emotional_memory.kernel.gates import accurate_tanh, gated_weights, smooth_gate
from emotional_memory.learn.params import Reparam, constrained_params
from emotional_memory.scoring_config import params_from_config


def _dtanh(z: float) -> float:
    """sech(z)^2 (``1 - tanh^2`` would round to 0 in saturation)."""
    return 1.0 / math.cosh(z) ** 2


@given(st.one_of(
    st.sampled_from([0.0, -0.0, 0.55, -0.55, 1e-300, -1e-300, 20.0, -20.0]),
    st.floats(-30.0, 30.0),
    st.floats(-1e-6, 1e-6),
    st.floats(0.549, 0.551),
))
def test_accurate_tanh_derivative_is_the_libm_oracle(z: float) -> None:
    with jax.enable_x64(True):
        got = float(jax.grad(accurate_tanh)(jnp.float64(z)))
        value = float(accurate_tanh(jnp.float64(z)))
    assert got == pytest.approx(_dtanh(z), rel=1e-13, abs=1e-300)
    assert value == pytest.approx(math.tanh(z), rel=3e-16, abs=1e-300)  # ~1 ulp


@pytest.mark.parametrize("sharpness", [5.0, -5.0, 0.3])
def test_smooth_gate_gradient_at_its_centre(sharpness: float) -> None:
    """At ``x == center`` the gate is 0.5 and its derivatives are ``+-k / 2`` (in x and
    the centre) and 0 (in the sharpness): the oracle and central differences agree."""
    with jax.enable_x64(True):
        x, c, k = jnp.float64(0.3), jnp.float64(0.3), jnp.float64(sharpness)
        dx, dc, dk = jax.grad(smooth_gate, argnums=(0, 1, 2))(x, c, k)
        h = 1e-6
        fd_x = (smooth_gate(x + h, c, k) - smooth_gate(x - h, c, k)) / (2 * h)
    assert float(dx) == pytest.approx(sharpness / 2, rel=1e-12)
    assert float(dc) == pytest.approx(-sharpness / 2, rel=1e-12)
    assert float(dk) == 0.0
    assert float(dx) == pytest.approx(float(fd_x), rel=1e-8)


def test_gate_parameters_get_their_gradient_with_the_mood_at_the_centres() -> None:
    """The gated weights in the unconstrained gate parameters, with the mood exactly at
    the calm centre (valence 0, arousal 0.3 = the baseline arousal) and at the other
    gates' centres: autodiff equals central finite differences (float64)."""
    cfg = EmotionalMemoryConfig()
    base = params_from_config(cfg.retrieval, cfg.decay)
    reparam = Reparam(base, ("gates",))
    with jax.enable_x64(True):
        kinds = {k: jnp.asarray(v) for k, v in reparam.kinds.items()}
        u0 = jnp.asarray(reparam.init()["gates"])
        for valence, arousal in ((0.0, 0.3), (-0.5, 0.7)):
            v, a = jnp.float64(valence), jnp.float64(arousal)

            def weights(u: jax.Array, v: jax.Array = v, a: jax.Array = a) -> jax.Array:
                params = constrained_params(base, kinds, {"gates": u})
                return jnp.sum(gated_weights(params, v, a) * jnp.arange(1.0, 7.0))

            auto = np.asarray(jax.grad(weights)(u0))
            h = 1e-6
            eye = np.eye(u0.shape[0])
            fd = np.asarray([(weights(u0 + h * e) - weights(u0 - h * e)) / (2 * h)
                             for e in eye])
            np.testing.assert_allclose(auto, fd, rtol=1e-6, atol=1e-9,
                                       err_msg=f"mood ({valence}, {arousal})")
