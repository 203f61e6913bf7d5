"""A big batch costs the hashing embedder memory for its output, not more."""

from __future__ import annotations

import tracemalloc

import numpy as np

from emotional_memory.embedders import HashingEmbedder


def test_a_big_batch_needs_little_more_memory_than_its_output() -> None:
    emb = HashingEmbedder(dim=512)
    texts = [f"memory number {i} about a crashed server" for i in range(4_000)]
    emb.embed_array(texts[:8])  # warm the feature-hash cache on the shared words
    tracemalloc.start()
    try:
        out = emb.embed_array(texts)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.shape == (4_000, 512)
    # The float32 output is 8 MB; the whole batch at once held (3, n, dim) float64
    # channels and their temporaries: more than 150 MB.
    assert peak < 3 * out.nbytes + 40 * 2**20


def test_the_rows_of_a_big_batch_are_those_of_each_text_alone() -> None:
    emb = HashingEmbedder(dim=2048)  # 64 rows per chunk
    texts = [f"text {i} " + "word " * (i % 7) for i in range(300)]
    batch = emb.embed_array(texts)
    assert batch.dtype == np.float32
    assert batch.tolist() == [emb.embed(t) for t in texts]
    assert emb.embed_batch(texts) == batch.tolist()
