"""One process of tests/kernel/test_sharding_multiprocess.py (run as a script).

``python sharding_worker.py single OUT``: one process, 8 host devices: the sharded
scorer over all 8 and single-device ``score_batch``.
``python sharding_worker.py multi OUT PROCESS_ID PORT``: one of 2 processes with 4
host devices each, joined by ``jax.distributed`` (gloo CPU collectives) into one
mesh of 8; each process places only its own half of the rows
(``shard_columns(process_local=True)``) and process 0 writes the answer.
The bank and the queries are the same in every run (seeded).
"""

from __future__ import annotations

import sys

import numpy as np


def bank_and_queries(n: int = 2000, d: int = 24, q: int = 9) -> tuple[object, object]:
    from emotional_memory.kernel import MemoryColumns, QueryFeatures

    rng = np.random.default_rng(7)
    f32 = np.float32
    emb = rng.normal(size=(n, d)).astype(f32)
    emb[::19] = 0.0
    tie = slice(n // 2 - 4, n // 2 + 4)  # exact ties across the process boundary
    emb[tie] = emb[tie.start]
    columns = MemoryColumns(
        embedding=emb,
        affect=rng.uniform(0, 1, (n, 3)).astype(f32),
        mood=rng.uniform(0, 1, (n, 3)).astype(f32),
        velocity=rng.normal(0, 0.2, (n, 3)).astype(f32),
        age_seconds=rng.uniform(0, 1e6, n).astype(f32),
        consolidation=rng.uniform(0.1, 1, n).astype(f32),
        retrieval_count=rng.integers(0, 5, n).astype(f32),
        activation=np.zeros(n, f32),
        valid=rng.uniform(size=n) > 0.1,
    )
    for col in (columns.affect, columns.mood, columns.velocity, columns.age_seconds,
                columns.consolidation, columns.retrieval_count):
        col[tie] = col[tie.start]
    columns.valid[tie] = True
    queries = QueryFeatures(
        embedding=rng.normal(size=(q, d)).astype(f32),
        affect=rng.uniform(0, 1, (q, 3)).astype(f32),
        mood=rng.uniform(0, 1, (q, 3)).astype(f32),
        velocity=rng.normal(0, 0.2, (q, 3)).astype(f32),
    )
    queries.embedding[0] = emb[tie.start]  # the tied rows win query 0
    return columns, queries


def main(argv: list[str]) -> None:
    mode, out = argv[0], argv[1]
    import jax

    if mode == "multi":
        process_id, port = int(argv[2]), int(argv[3])
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=process_id
        )
    import jax.numpy as jnp

    from emotional_memory.decay import DecayConfig
    from emotional_memory.kernel.chunked_topk import score_batch
    from emotional_memory.kernel.sharding import memory_mesh, score_batch_sharded, shard_columns
    from emotional_memory.retrieval import RetrievalConfig
    from emotional_memory.scoring_config import params_from_config

    params = params_from_config(RetrievalConfig(), DecayConfig()).astype(jnp.float32)
    columns, queries = bank_and_queries()
    mesh = memory_mesh()
    k, chunk = 12, 64
    result: dict[str, np.ndarray] = {}
    if mode == "multi":
        half = columns.size // 2
        mine = jax.tree_util.tree_map(
            lambda x: x[half * process_id: half * (process_id + 1)], columns
        )
        placed = shard_columns(mine, mesh, process_local=True)
        idx, scores = score_batch_sharded(params, queries, placed, k, mesh=mesh,
                                          chunk_size=chunk)
        result["processes"] = np.asarray(jax.process_count())
        result["devices"] = np.asarray(len(jax.devices()))
        result["local_devices"] = np.asarray(len(jax.local_devices()))
    else:
        idx, scores = score_batch_sharded(params, queries, columns, k, mesh=mesh,
                                          chunk_size=chunk)
        single = score_batch(params, queries, columns, k, chunk_size=chunk)
        result["single_index"] = np.asarray(single[0])
        result["single_scores"] = np.asarray(single[1])
        result["devices"] = np.asarray(len(jax.devices()))
    # replicated outputs: every process holds the whole answer
    result["index"] = np.asarray(jax.device_get(idx.addressable_shards[0].data))
    result["scores"] = np.asarray(jax.device_get(scores.addressable_shards[0].data))
    if mode != "multi" or int(argv[2]) == 0:
        np.savez(out, **result)
    if mode == "multi":
        jax.distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
