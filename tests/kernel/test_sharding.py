"""Sharded batch scoring (DESIGN "Scale"): the memory axis split over 8 devices.

XLA_FLAGS must be set before JAX initialises, so the comparison runs in a fresh
Python process with ``--xla_force_host_platform_device_count=8`` on the CPU; it prints
a JSON report that this test checks: the sharded top-k equals the single-device
``score_batch`` (same indices exactly, scores to 1e-6), for host-placed and
pre-sharded banks, a bank size that is not a multiple of 8, ties, an ablation mask,
and a k larger than the rows of one shard; a bank of fewer rows than devices with k
above it; an empty query batch; and the one-query ``score_bank`` / ``retrieval_plan``
on rows placed over the 8 devices (GSPMD) answering as on one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from emotional_memory.kernel.sharding import MEMORY_AXIS, memory_mesh
from emotional_memory.scoring_config import params_from_config

SCRIPT = textwrap.dedent(
    """
    import json
    import jax, jax.numpy as jnp, numpy as np
    from emotional_memory.decay import DecayConfig
    from emotional_memory.kernel import MemoryColumns, QueryFeatures
    from emotional_memory.kernel.chunked_topk import score_batch
    from emotional_memory.kernel.sharding import (
        MEMORY_AXIS, memory_mesh, score_batch_sharded, shard_columns,
    )
    from emotional_memory.retrieval import RetrievalConfig
    from emotional_memory.scoring_config import params_from_config

    rng = np.random.default_rng(0)
    f32 = np.float32

    def bank(n, d):
        emb = rng.normal(size=(n, d)).astype(f32)
        emb[::17] = 0.0          # zero rows
        emb[5::23] = np.nan      # NaN rows
        tie = tie_of(n)  # exact ties across a shard edge
        emb[tie] = 0.0
        affect = rng.uniform(0, 1, (n, 3)).astype(f32)
        mood = rng.uniform(0, 1, (n, 3)).astype(f32)
        vel = rng.normal(0, 0.2, (n, 3)).astype(f32)
        age = rng.uniform(0, 1e6, n).astype(f32)
        cons = rng.uniform(0.1, 1, n).astype(f32)
        count = rng.integers(0, 5, n).astype(f32)
        for col in (affect, mood, vel):
            col[tie] = col[tie.start]
        act = np.zeros(n, f32)
        # The tied rows win on recency and resonance, so they rank at the top.
        age[tie], cons[tie], count[tie], act[tie] = 1.0, 1.0, 0.0, 0.9
        valid = rng.uniform(size=n) > 0.1
        valid[tie] = True
        return MemoryColumns(
            embedding=emb, affect=affect, mood=mood, velocity=vel, age_seconds=age,
            consolidation=cons, retrieval_count=count, activation=act, valid=valid,
        )

    def tie_of(n):
        shard = -(-n // 8)
        return slice(max(0, shard - 5), min(n, shard + 6))

    def queries(q, d):
        emb = rng.normal(size=(q, d)).astype(f32)
        emb[0] = 0.0
        return QueryFeatures(
            embedding=emb, affect=rng.uniform(0, 1, (q, 3)).astype(f32),
            mood=rng.uniform(0, 1, (q, 3)).astype(f32),
            velocity=rng.normal(0, 0.2, (q, 3)).astype(f32),
        )

    params = params_from_config(RetrievalConfig(), DecayConfig()).astype(jnp.float32)
    mesh = memory_mesh()
    report = {"devices": len(jax.devices()), "cases": []}
    for n, k, chunk, mask in [
        (2003, 10, 64, None),                    # N % 8 != 0: padded with invalid rows
        (1024, 40, 32, [1, 0, 1, 0, 1, 1]),      # k > rows per shard chunk, masked
        (50, 12, 4, None),                       # shards of 7 rows, k > shard rows
    ]:
        cols = bank(n, 16)
        qs = queries(7, 16)
        m = None if mask is None else jnp.asarray(mask, jnp.float32)
        single = score_batch(params, qs, cols, k, chunk_size=chunk, signal_mask=m)
        host = score_batch_sharded(params, qs, cols, k, chunk_size=chunk, signal_mask=m)
        placed = shard_columns(cols, mesh)
        pre = score_batch_sharded(params, qs, placed, k, mesh=mesh, chunk_size=chunk,
                                  signal_mask=m)
        spec = str(placed.embedding.sharding.spec)
        s_idx, s_sc = np.asarray(single[0]), np.asarray(single[1], np.float64)
        case = {"n": n, "k": k, "spec": spec,
                "shards": len(placed.embedding.addressable_shards)}
        for name, out in (("host", host), ("pre", pre)):
            idx, sc = np.asarray(out[0]), np.asarray(out[1], np.float64)
            fin = np.isfinite(s_sc)
            case[name + "_same_indices"] = bool(np.array_equal(idx, s_idx))
            case[name + "_same_missing"] = bool(np.array_equal(np.isfinite(sc), fin))
            case[name + "_max_score_diff"] = float(np.max(np.abs(sc[fin] - s_sc[fin])))
        case["valid_only"] = bool(np.all(np.asarray(cols.valid)[s_idx[s_idx >= 0]]))
        tied = set(range(n)[tie_of(n)])
        case["ties_ranked"] = all(
            [r for r in row if r in tied] == sorted(r for r in row if r in tied)
            for row in s_idx.tolist()
        )
        # query 0 has no embedding: the tied rows win there and cross the shard edge
        case["ties_present"] = len(tied & set(s_idx[0].tolist())) >= min(k, len(tied)) // 2
        report["cases"].append(case)
    # Fewer rows than devices, and k above the whole bank: every row, then -1 / -inf.
    tiny = bank(3, 16)
    qs = queries(4, 16)
    single = score_batch(params, qs, tiny, 10, chunk_size=4)
    host = score_batch_sharded(params, qs, tiny, 10, chunk_size=4)
    report["tiny_same_indices"] = bool(np.array_equal(np.asarray(host[0]), np.asarray(single[0])))
    report["tiny_found"] = int(np.sum(np.asarray(host[0]) >= 0, axis=1).max())
    # No queries: (0, k) arrays from both (the sharded merge divided by Q).
    none = jax.tree.map(lambda x: x[:0], queries(2, 16))
    report["no_queries_shapes"] = [
        list(np.asarray(out[0]).shape)
        for out in (score_batch(params, none, tiny, 5, chunk_size=4),
                    score_batch_sharded(params, none, tiny, 5, chunk_size=4))
    ]

    # The one-query kernel under GSPMD: rows placed over the 8 devices, same answers.
    from jax.sharding import NamedSharding, PartitionSpec as P
    from emotional_memory.kernel import score_bank
    from emotional_memory.kernel.plan import retrieval_plan
    n = 64
    cols = bank(n, 16)
    q1 = jax.tree.map(lambda x: x[1], queries(2, 16))
    targets = rng.integers(-1, n, (n, 4)).astype(np.int32)
    strengths = np.where(targets >= 0, rng.uniform(0.1, 0.9, (n, 4)), 0.0).astype(f32)
    rows = NamedSharding(mesh, P(MEMORY_AXIS))
    placed = [jax.device_put(x, rows) for x in (cols, targets, strengths)]
    one = jax.jit(score_bank)(params, q1, cols)
    spread = jax.jit(score_bank)(params, q1, placed[0])
    plan = dict(top_k=5, hops=2, spread=True)
    ref = retrieval_plan(params, q1, cols, targets, strengths, **plan)
    got = retrieval_plan(params, q1, *placed, **plan)
    report["gspmd_shards"] = len(placed[0].embedding.addressable_shards)
    report["gspmd_score_diff"] = float(np.max(np.abs(
        np.asarray(one.totals) - np.asarray(spread.totals))[np.asarray(cols.valid)]))
    report["gspmd_plan_same"] = all(
        bool(np.array_equal(np.asarray(getattr(ref, name)), np.asarray(getattr(got, name))))
        for name in ("order1", "seeds", "reached", "order2"))
    report["gspmd_plan_reached"] = bool(np.asarray(ref.reached).any())
    print("REPORT" + json.dumps(report))
    """
)


def test_sharded_scorer_equals_single_device_on_8_host_devices() -> None:
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8")
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("REPORT"))
    report = json.loads(line[len("REPORT"):])
    assert report["devices"] == 8
    for case in report["cases"]:
        assert case["shards"] == 8, case
        assert MEMORY_AXIS in case["spec"], case
        for name in ("host", "pre"):
            assert case[name + "_same_indices"], case
            assert case[name + "_same_missing"], case
            assert case[name + "_max_score_diff"] <= 1e-6, case
        assert case["valid_only"], case
        assert case["ties_ranked"] and case["ties_present"], case
    assert report["tiny_same_indices"] and report["tiny_found"] == 3, report
    assert report["no_queries_shapes"] == [[0, 5], [0, 5]], report
    assert report["gspmd_shards"] == 8, report
    assert report["gspmd_score_diff"] <= 1e-6, report
    assert report["gspmd_plan_same"] and report["gspmd_plan_reached"], report


def test_memory_mesh_single_process() -> None:
    mesh = memory_mesh()
    assert mesh.axis_names == (MEMORY_AXIS,)
    assert int(np.prod(list(mesh.shape.values()))) >= 1


def test_sharded_scorer_runs_on_one_device() -> None:
    """The same code path with a 1-device mesh (what every test process has)."""
    import jax.numpy as jnp

    from emotional_memory.decay import DecayConfig
    from emotional_memory.kernel import MemoryColumns, QueryFeatures
    from emotional_memory.kernel.chunked_topk import score_batch
    from emotional_memory.kernel.sharding import score_batch_sharded
    from emotional_memory.retrieval import RetrievalConfig

    rng = np.random.default_rng(1)
    n, d = 37, 5
    f32 = np.float32
    cols = MemoryColumns(
        embedding=rng.normal(size=(n, d)).astype(f32), affect=rng.uniform(0, 1, (n, 3)).astype(f32),
        mood=rng.uniform(0, 1, (n, 3)).astype(f32), velocity=rng.normal(size=(n, 3)).astype(f32),
        age_seconds=rng.uniform(0, 1e5, n).astype(f32), consolidation=np.ones(n, f32),
        retrieval_count=np.zeros(n, f32), activation=np.zeros(n, f32), valid=np.ones(n, bool),
    )
    qs = QueryFeatures(
        embedding=rng.normal(size=(3, d)).astype(f32), affect=rng.uniform(0, 1, (3, 3)).astype(f32),
        mood=rng.uniform(0, 1, (3, 3)).astype(f32), velocity=np.zeros((3, 3), f32),
    )
    params = params_from_config(RetrievalConfig(), DecayConfig()).astype(jnp.float32)
    single = score_batch(params, qs, cols, 4, chunk_size=8)
    sharded = score_batch_sharded(params, qs, cols, 4, chunk_size=8)
    np.testing.assert_array_equal(np.asarray(single[0]), np.asarray(sharded[0]))
    np.testing.assert_allclose(np.asarray(single[1]), np.asarray(sharded[1]), atol=1e-6)
    with pytest.raises(ValueError, match="k must be"):
        score_batch_sharded(params, qs, cols, 0)
