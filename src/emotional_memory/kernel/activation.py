"""Spreading activation (Collins & Loftus 1975) over a padded adjacency.

The graph is dense-padded: ``targets (N, L)`` holds row indices of each memory's
link targets inside the bank (``-1`` for none) and ``strengths (N, L)`` their
weights. The wave semantics are docs/behaviour.md §5's: each hop spreads ``activation * strength``
from the current wave only, seeds are never targets, a target keeps the largest
spread of the hop, and the result keeps the max over hops (capped at 1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Bool, Float, Int

from emotional_memory.kernel._types import Array

_ONE_HOT_MAX = 1 << 16
"""Largest ``N * L * N`` spread through a one-hot target table (else scatter-max)."""


def spreading_activation_dense(
    seeds: Bool[Array, " N"],
    targets: Int[Array, "N L"],
    strengths: Float[Array, "N L"],
    hops: int,
) -> tuple[Float[Array, " N"], Bool[Array, " N"]]:
    """Multi-hop activation from the seed rows.

    Args:
        seeds: (N,) True on seed rows.
        targets: (N, L) target row per link, -1 for an empty slot.
        strengths: (N, L) link strengths in [0, 1].
        hops: number of hops (static Python int).

    Returns:
        ``(activation, reached)``: (N,) activation values and (N,) mask of rows that
        received any spread (a reached row may hold 0.0). Seeds are never reached.
    """
    n = seeds.shape[0]
    has_link = targets >= 0
    safe_targets = jnp.where(has_link, targets, 0)
    target_is_seed = seeds[safe_targets]
    live = has_link & ~target_is_seed
    # Small banks (a retrieve's candidates): each hop's scatter-max as a masked max
    # over a one-hot (N, L, N) target table, a few fused loops instead of scatters
    # (the same contributions, and max is exact: identical values).
    one_hot = (
        safe_targets[:, :, None] == jnp.arange(n, dtype=safe_targets.dtype)
        if n * n * targets.shape[1] <= _ONE_HOT_MAX else None
    )

    wave_value = jnp.where(seeds, 1.0, 0.0).astype(strengths.dtype)
    wave_reached = seeds
    result = jnp.zeros((n,), strengths.dtype)
    reached = jnp.zeros((n,), bool)
    for _ in range(hops):
        spread = wave_value[:, None] * strengths
        active = live & wave_reached[:, None]
        if one_hot is not None:
            hit = one_hot & active[:, :, None]
            # initial: an empty bank or rows without link slots reduce over nothing
            new_value = jnp.max(jnp.where(hit, spread[:, :, None], -jnp.inf), axis=(0, 1),
                                initial=-jnp.inf)
            new_reached = jnp.any(hit, axis=(0, 1))
        else:
            contrib = jnp.where(active, spread, -jnp.inf).ravel()
            idx = safe_targets.ravel()
            new_value = jnp.full((n,), -jnp.inf, strengths.dtype).at[idx].max(contrib)
            new_reached = jnp.zeros((n,), bool).at[idx].max(active.ravel())
        new_value = jnp.where(new_reached, new_value, 0.0)
        result = jnp.where(
            new_reached,
            jnp.where(reached, jnp.maximum(result, jnp.minimum(1.0, new_value)),
                      jnp.minimum(1.0, new_value)),
            result,
        )
        reached = reached | new_reached
        wave_value, wave_reached = new_value, new_reached
    return result, reached


spreading_activation_jit = jax.jit(spreading_activation_dense, static_argnums=3)
""":func:`spreading_activation_dense` compiled (``hops`` static)."""
