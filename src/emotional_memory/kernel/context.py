"""The opt-in conversational context signal s8: a memory borrows from its neighbours.

In a conversation the evidence for a question often sits next to the turn that carries
the question's words. s8 lets a memory's score borrow from the memories encoded just
before and after it (in the same scope, within an optional time window): the store
supplies, per candidate row, the rows of those neighbours (:class:`ContextInputs`;
the engine makes the neighbours candidates too), and the kernel blends each
neighbour's semantic and lexical signals::

    h(j)  = mix * s1(j) + (1 - mix) * s7(j)                 (calibrated s1, s7 of row j)
    s8(i) = max over the present neighbours j of i of h(j)  (0 when i has none)

``mix`` and s8's weight (which joins docs/behaviour.md §4's normalisation as an eighth weight) are
:class:`~emotional_memory.kernel.params.ContextParams`, differentiable and fittable
like every other parameter. With the weight 0 (default) no context input exists and the
score is the six- (or seven-) signal one bit for bit.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Bool, Float, Int

from emotional_memory.kernel._types import Array


class ContextInputs(eqx.Module):
    """The neighbours of N candidate rows, as row indices into the same rows.

    Attributes:
        neighbours: (N, K) int32 row of each neighbour (K = 2: the memory encoded
            just before, then the one just after); -1 where there is none (first or
            last memory of its scope, outside the time window, or a padding row).
    """

    neighbours: Int[Array, "N K"]


def neighbour_blend(
    semantic: Float[Array, " N"], lexical: Float[Array, " N"], mix: Float[Array, ""]
) -> Float[Array, " N"]:
    """``mix * semantic + (1 - mix) * lexical``: what a neighbour lends, per row.

    Args:
        semantic: (N,) the rows' (calibrated) semantic signal s1.
        lexical: (N,) the rows' lexical signal s7.
        mix: () share of s1, in [0, 1].

    Returns:
        (N,) blended values.
    """
    return mix * semantic + (1.0 - mix) * lexical


def context_signal(
    lent: Float[Array, " N"], context: ContextInputs, valid: Bool[Array, " N"]
) -> Float[Array, " N"]:
    """s8 of every row: the best value its present neighbours lend (0 without any).

    A neighbour index of -1, out of range, or pointing at a padding row counts as
    absent. Gradients flow to the winning neighbour's value (the max's subgradient) and
    stay finite on rows without neighbours.

    Args:
        lent: (N,) what each row lends its neighbours (:func:`neighbour_blend`).
        context: the (N, K) neighbour rows.
        valid: (N,) False on padding rows (never a neighbour; their s8 is 0).

    Returns:
        (N,) s8 in ``lent``'s dtype.
    """
    idx = jnp.asarray(context.neighbours)
    n = lent.shape[0]
    inside = (idx >= 0) & (idx < n)
    safe = jnp.where(inside, idx, 0)
    present = inside & jnp.asarray(valid)[safe] & jnp.asarray(valid)[:, None]
    values = jnp.where(present, lent[safe], -jnp.inf)
    best = jnp.max(values, axis=-1, initial=-jnp.inf)  # K = 0: no neighbour slots
    any_present = jnp.any(present, axis=-1)
    # rows without a neighbour: 0 (their -inf maximum never reaches the gradient)
    return jnp.where(any_present, best, 0.0).astype(lent.dtype)
