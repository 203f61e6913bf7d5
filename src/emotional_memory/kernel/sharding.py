"""Batch scoring with the memory axis sharded across devices (``jax.sharding``).

The N axis of every :class:`MemoryColumns` leaf is split over a 1-D
:class:`~jax.sharding.Mesh` (``PartitionSpec(axis_name)``); queries and parameters are
replicated. Inside one ``jax.shard_map`` program each device runs
:func:`~emotional_memory.kernel.chunked_topk.score_batch`'s chunked scan on its shard,
and one ``lax.top_k`` over the (Q, devices * k) winners merges them: the same indices
as a single device (ties: lowest global row) and the same scores to float rounding.
Multi-host use (``jax.distributed``, ``shard_columns(process_local=True)``) is in
``docs/scale.md``, "Sharding over devices".
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from jaxtyping import Float, Int

from emotional_memory.kernel._types import Array
from emotional_memory.kernel.chunked_topk import (
    DEFAULT_CHUNK_SIZE,
    batch_arrays,
    check_batch_inputs,
    prepare_queries,
    row_features,
    top_k_over_rows,
)
from emotional_memory.kernel.columns import MemoryColumns, QueryFeatures, pad_columns
from emotional_memory.kernel.params import ScoringParams

MEMORY_AXIS = "memories"
"""Default mesh axis name of the memory (N) axis."""


def memory_mesh(devices: Sequence[Any] | None = None, axis_name: str = MEMORY_AXIS) -> Mesh:
    """A 1-D mesh over ``devices`` (default: ``jax.devices()``, all processes' devices).

    Args:
        devices: devices to shard the memory axis over.
        axis_name: name of the mesh axis.

    Returns:
        The :class:`~jax.sharding.Mesh`.

    Raises:
        ValueError: ``devices`` is empty.
    """
    devs = list(jax.devices() if devices is None else devices)
    if not devs:
        raise ValueError("devices must name at least one device (None: jax.devices())")
    return Mesh(np.asarray(devs, dtype=object), (axis_name,))


def _check_mesh(mesh: Any, axis_name: Any) -> None:
    """Raise a TypeError for a ``mesh`` that is no :class:`Mesh`, a ValueError for an
    ``axis_name`` that is none of its axes."""
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    if axis_name not in mesh.axis_names:
        raise ValueError(f"axis_name {axis_name!r} is not an axis of mesh (axes: "
                         f"{tuple(mesh.axis_names)})")


def _axis_size(mesh: Mesh, axis_name: str) -> int:
    return int(mesh.shape[axis_name])


def shard_columns(
    columns: MemoryColumns,
    mesh: Mesh,
    axis_name: str = MEMORY_AXIS,
    *,
    process_local: bool = False,
) -> MemoryColumns:
    """Place a bank on ``mesh``, rows split along ``axis_name``.

    The rows are padded with invalid rows (never selected) to a multiple of the
    number of devices on the axis.

    Args:
        columns: the bank (numpy or JAX leaves). With ``process_local`` it is this
            process's own block of rows; blocks are concatenated in process order and
            every process must pass the same number of rows.
        mesh: from :func:`memory_mesh`.
        axis_name: the mesh axis of the memory dimension.
        process_local: multi-host input (``jax.make_array_from_process_local_data``).

    Returns:
        Columns whose leaves are sharded ``jax.Array`` s.

    Raises:
        TypeError / ValueError: ``mesh`` no ``Mesh``, or ``axis_name`` none of its axes.
    """
    _check_mesh(mesh, axis_name)
    sharding = NamedSharding(mesh, P(axis_name))
    if process_local:
        local_devices = sum(d.process_index == jax.process_index() for d in mesh.devices.flat)
        n = columns.size
        padded = pad_columns(columns, math.ceil(n / local_devices) * local_devices)
        return jax.tree_util.tree_map(
            lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), padded
        )
    n_dev = _axis_size(mesh, axis_name)
    n = columns.size
    padded = pad_columns(columns, max(n_dev, math.ceil(n / n_dev) * n_dev))
    return jax.device_put(padded, sharding)


@functools.partial(jax.jit, static_argnames=("k", "chunk_size", "mesh", "axis_name"))
def _score_sharded(
    params: ScoringParams,
    queries: QueryFeatures,
    columns: MemoryColumns,
    signal_mask: Any,
    *,
    k: int,
    chunk_size: int,
    mesh: Mesh,
    axis_name: str,
) -> tuple[Array, Array]:
    dtype = jnp.result_type(queries.affect)
    prepared = prepare_queries(params, queries, dtype, signal_mask)

    def local(params: ScoringParams, prepared: Any, shard: MemoryColumns) -> tuple[Array, Array]:
        shard_rows = shard.age_seconds.shape[0]
        offset = jax.lax.axis_index(axis_name).astype(jnp.int32) * shard_rows
        rows = row_features(params, shard, dtype)
        index, scores = top_k_over_rows(
            params, prepared, rows, k, chunk_size=chunk_size, row_offset=offset
        )
        return index[None], scores[None]

    index, scores = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(P(), P(), P(axis_name)),
        out_specs=(P(axis_name), P(axis_name)),
        # The scan's initial carry is replicated while its output varies per shard;
        # the per-shard program is plain single-device code, so skip the VMA typing.
        check_vma=False,
    )(params, prepared, columns)
    # (devices, Q, k) -> (Q, devices * k), shard-major: position order is row order.
    # The width is spelt out: ``reshape(Q, -1)`` divides by Q (an error for no queries).
    n_dev, n_queries, width = index.shape
    all_scores = jnp.moveaxis(scores, 0, 1).reshape(n_queries, n_dev * width)
    all_index = jnp.moveaxis(index, 0, 1).reshape(n_queries, n_dev * width)
    top, position = jax.lax.top_k(all_scores, k)
    winners = jnp.where(jnp.isneginf(top), -1, jnp.take_along_axis(all_index, position, 1))
    replicated = NamedSharding(mesh, P())
    return (
        jax.lax.with_sharding_constraint(winners, replicated),
        jax.lax.with_sharding_constraint(top, replicated),
    )


def score_batch_sharded(
    params: ScoringParams,
    queries: QueryFeatures,
    columns: MemoryColumns,
    k: int,
    *,
    mesh: Mesh | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    signal_mask: Float[Array, 6] | None = None,
    axis_name: str = MEMORY_AXIS,
) -> tuple[Int[Array, "Q K"], Float[Array, "Q K"]]:
    """:func:`~emotional_memory.kernel.chunked_topk.score_batch` with rows sharded over devices.

    Args:
        params: scoring parameters (replicated).
        queries: batched query features (replicated).
        columns: the bank: host arrays (padded and placed here) or the output of
            :func:`shard_columns` (used as it is).
        k: how many rows per query (static).
        mesh: 1-D mesh (default :func:`memory_mesh` over ``jax.devices()``).
        chunk_size: rows per scan step on each device.
        signal_mask: optional (6,) ablation mask.
        axis_name: the mesh axis of the memory dimension.

    Returns:
        ``(indices, scores)`` as :func:`score_batch`: (Q, k) global row indices (rows
        of ``columns``; never a padding row) and scores, replicated on every device.

    Raises:
        TypeError / ValueError: as :func:`score_batch`; ``mesh`` no ``Mesh``, or
            ``axis_name`` none of its axes.
    """
    queries, columns, signal_mask = batch_arrays(params, queries, columns, signal_mask)
    check_batch_inputs(queries, columns, k, chunk_size, signal_mask)
    # static arguments of the compiled program: a 0-d numpy / JAX integer is no key
    k, chunk_size = operator.index(k), operator.index(chunk_size)
    mesh = memory_mesh(axis_name=axis_name) if mesh is None else mesh
    _check_mesh(mesh, axis_name)
    n_dev = _axis_size(mesh, axis_name)
    expected = NamedSharding(mesh, P(axis_name))
    leaves = jax.tree_util.tree_leaves(columns)
    placed = all(
        isinstance(x, jax.Array) and x.sharding.is_equivalent_to(expected, x.ndim)
        for x in leaves
    )
    if not (placed and columns.size % n_dev == 0):
        columns = shard_columns(columns, mesh, axis_name)
    replicated = NamedSharding(mesh, P())
    params = jax.device_put(params, replicated)
    queries = jax.device_put(queries, replicated)
    if signal_mask is not None:
        signal_mask = jax.device_put(jnp.asarray(signal_mask), replicated)
    return _score_sharded(
        params, queries, columns, signal_mask,
        k=k, chunk_size=chunk_size, mesh=mesh, axis_name=axis_name,
    )
