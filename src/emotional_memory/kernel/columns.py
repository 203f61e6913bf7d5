"""Struct-of-arrays views of a memory bank and of a query.

A bank of N memories is one :class:`MemoryColumns` pytree whose leaves share a
leading axis N. Banks are padded to power-of-two size buckets with a ``valid`` mask
so a growing store recompiles O(log N) times, not once per insert.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Bool, Float

from emotional_memory.kernel._types import Array

MIN_BUCKET = 16


class MemoryColumns(eqx.Module):
    """Columns of a memory bank (or, unbatched, of one memory).

    Attributes:
        embedding: (N, D) embeddings; a missing embedding is a zero row (cosine 0).
        affect: (N, 3) the tag's core affect (valence, arousal, dominance). Its
            arousal also drives the recency decay and floor.
        mood: (N, 3) the mood snapshot at encoding (valence, arousal, dominance).
        velocity: (N, 3) the momentum velocity at encoding.
        age_seconds: (N,) ``now - tag.timestamp`` in seconds (computed at the boundary
            in float64; float32 cannot hold unix time).
        consolidation: (N,) consolidation strength in [0, 1].
        retrieval_count: (N,) times retrieved (float).
        activation: (N,) spreading activation (0 in pass 1).
        valid: (N,) False on padding rows.
    """

    embedding: Float[Array, "N D"]
    affect: Float[Array, "N 3"]
    mood: Float[Array, "N 3"]
    velocity: Float[Array, "N 3"]
    age_seconds: Float[Array, " N"]
    consolidation: Float[Array, " N"]
    retrieval_count: Float[Array, " N"]
    activation: Float[Array, " N"]
    valid: Bool[Array, " N"]

    @property
    def size(self) -> int:
        """Number of rows N (padding included)."""
        return int(self.age_seconds.shape[0])

    def with_activation(self, activation: Any) -> MemoryColumns:
        """Return a copy whose ``activation`` column is replaced.

        Args:
            activation: (N,) new spreading-activation values.

        Returns:
            The columns with ``activation`` swapped in; other leaves are shared.
        """
        return replace_activation(self, activation)

    def astype(self, dtype: Any) -> MemoryColumns:
        """Cast every float leaf to ``dtype`` (as JAX arrays); ``valid`` stays bool.

        Args:
            dtype: Target float dtype (e.g. ``jnp.float32``).

        Returns:
            New columns with JAX-array leaves (shapes unchanged).
        """
        return MemoryColumns(
            embedding=jnp.asarray(self.embedding, dtype),
            affect=jnp.asarray(self.affect, dtype),
            mood=jnp.asarray(self.mood, dtype),
            velocity=jnp.asarray(self.velocity, dtype),
            age_seconds=jnp.asarray(self.age_seconds, dtype),
            consolidation=jnp.asarray(self.consolidation, dtype),
            retrieval_count=jnp.asarray(self.retrieval_count, dtype),
            activation=jnp.asarray(self.activation, dtype),
            valid=jnp.asarray(self.valid, bool),
        )


def _is_none(x: Any) -> bool:
    return x is None


_ACTIVATION_LEAF = [f.name for f in dataclasses.fields(MemoryColumns)].index("activation")
"""Position of ``activation`` among a flattened :class:`MemoryColumns`' leaves."""


def replace_activation(columns: MemoryColumns, activation: Any) -> MemoryColumns:
    """:meth:`MemoryColumns.with_activation` as a function.

    The same result as ``eqx.tree_at(lambda c: c.activation, columns, activation)``
    (which also rebuilds the module by unflattening) without its per-call tracing, and
    without the bound-method object an equinox method access builds.

    Args:
        columns: the bank.
        activation: (N,) new spreading-activation values.

    Returns:
        The columns with ``activation`` swapped in; other leaves are shared.
    """
    leaves, treedef = jax.tree_util.tree_flatten(columns, is_leaf=_is_none)
    leaves[_ACTIVATION_LEAF] = activation
    out: MemoryColumns = jax.tree_util.tree_unflatten(treedef, leaves)
    return out


class QueryFeatures(eqx.Module):
    """What the score needs to know about the query and the current state.

    Attributes:
        embedding: (D,) query embedding (zeros when missing).
        affect: (3,) query affect (s3).
        mood: (3,) current mood (s2 and the weight gates).
        velocity: (3,) current momentum velocity (s4).
    """

    embedding: Float[Array, " D"]
    affect: Float[Array, 3]
    mood: Float[Array, 3]
    velocity: Float[Array, 3]


def bucket_size(n: int, minimum: int = MIN_BUCKET) -> int:
    """Smallest power of two >= max(n, minimum).

    Args:
        n: Number of real rows.
        minimum: Smallest bucket to use.

    Returns:
        The padded row count (a power of two, at least 1).
    """
    size = max(int(n), minimum, 1)
    return 1 << (size - 1).bit_length()


def pad_columns(columns: MemoryColumns, size: int | None = None) -> MemoryColumns:
    """Pad every column to ``size`` rows (default: :func:`bucket_size`) with invalid rows.

    Args:
        columns: an unpadded (or smaller) bank; leaves may be numpy or JAX arrays.
        size: target rows, >= ``columns.size``.

    Returns:
        Padded columns (numpy leaves for numpy inputs); padding rows have
        ``valid=False`` and zeros elsewhere.
    """
    n = columns.size
    target = bucket_size(n) if size is None else int(size)
    if target < n:
        raise ValueError(f"size must be >= the number of rows ({n}), got {target}")

    def pad(x: Any) -> Any:
        if isinstance(x, np.ndarray):  # zeros + copy: np.pad's result, ~50x cheaper
            out = np.zeros((target, *x.shape[1:]), dtype=x.dtype)
            out[:n] = x
            return out
        widths = [(0, target - n)] + [(0, 0)] * (x.ndim - 1)
        return jnp.pad(x, widths)

    # tree_map rebuilds the module by unflattening (no __init__ checks per call).
    padded: MemoryColumns = jax.tree_util.tree_map(pad, columns)
    return padded


_ROW_SHAPES = (
    ("affect", (3,)), ("mood", (3,)), ("velocity", (3,)), ("age_seconds", ()),
    ("consolidation", ()), ("retrieval_count", ()), ("activation", ()), ("valid", ()),
)


def check_bank_rows(columns: MemoryColumns, n: int) -> None:
    """Every bank column has the embedding's N rows (and its own trailing shape), and
    ``valid`` is bool: a column of another length was sliced with clamped indices (a
    short ``valid`` scored only its rows), a float ``valid`` counted 0.5 as True.

    Args:
        columns: the bank (leaves only read for their shapes and dtypes).
        n: the number of rows N.

    Raises:
        ValueError: a column of another shape (named). TypeError: ``valid`` not bool.
    """
    for name, tail in _ROW_SHAPES:
        shape = jnp.shape(getattr(columns, name))
        if shape != (n, *tail):
            raise ValueError(f"columns.{name} must be {(n, *tail)} like columns.embedding's "
                             f"N, got shape {shape}")
    if jnp.result_type(columns.valid) != jnp.bool_:
        raise TypeError(f"columns.valid must be bool, got {jnp.result_type(columns.valid)}")


def check_query(query: QueryFeatures) -> None:
    """An unbatched query's static shapes and its compute dtype (no device sync).

    Args:
        query: the query features.

    Raises:
        ValueError: ``embedding`` not (D,) or a state leaf not (3,) (named).
        TypeError: ``affect`` (the compute dtype) not floating point.
    """
    shape = jnp.shape(query.embedding)
    if len(shape) != 1:
        raise ValueError(f"query.embedding must be (D,), got shape {shape}")
    for name in ("affect", "mood", "velocity"):
        shape = jnp.shape(getattr(query, name))
        if shape != (3,):
            raise ValueError(f"query.{name} must be (3,), got shape {shape}")
    if not jnp.issubdtype(jnp.result_type(query.affect), jnp.floating):
        raise TypeError("query.affect must be floating point (it sets the compute dtype), "
                        f"got {jnp.result_type(query.affect)}")
