"""``score_queries`` / ``BatchRetriever`` on edge inputs a service hands it: query
embeddings whose values overflow or underflow float32 and an infinite query
embedding, checked against the float64 pass-1 ranking; every ``top_k`` from 1 to
past the bank (few compiled programs, no buffers sized by a huge ``top_k``) and
numpy integers, checked as ``retrieve`` checks them.
"""

from __future__ import annotations

import math
import warnings
from datetime import datetime
from typing import Any

import numpy as np
import pytest

from emotional_memory import CoreAffect, EmotionalMemory
from emotional_memory.batch_retrieval import BatchRetriever, score_queries
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.kernel.chunked_topk import score_batch_compiled
from emotional_memory.retrieval import build_retrieval_plan
from emotional_memory.stores import InMemoryStore
from support.plain_store import PerMemoryStore

TEXTS = ["coffee with Ana", "the launch party", "rain in Lisbon", "budget meeting",
         "coffee again", "a storm at night", "the train was late", "exam results"]


class ScaledEmbedder:
    """A hashing embedder: ``"huge: x"`` / ``"tiny: x"`` embed as ``x`` scaled by
    1e200 / 1e-200 (finite in float64, not in float32), ``"inf: x"`` as ``x`` with
    an infinity."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(dim=16)

    def embed(self, text: str) -> list[float]:
        kind, _, rest = text.partition(": ")
        if not rest:
            return list(self.inner.embed(text))
        v = np.asarray(self.inner.embed(rest), np.float64)
        if kind == "huge":
            v = v * 1e200
        elif kind == "tiny":
            v = v * 1e-200
        else:
            v[0] = np.inf
        return v.tolist()

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [self.embed(t) for t in texts]


def _engine(embedder: Any, copies: int = 1) -> EmotionalMemory:
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16))
    for i, text in enumerate(TEXTS * copies):
        engine.set_affect(CoreAffect(valence=math.sin(i), arousal=0.5 + 0.4 * math.cos(i)))
        engine.encode(f"{text} ({i})")
    engine.set_affect(CoreAffect(valence=-0.3, arousal=0.6))
    engine.embedder = embedder
    return engine


def _float64_pass1(engine: EmotionalMemory, query: str, now: datetime, k: int) -> list[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the inf query's warning
        plan = build_retrieval_plan(
            engine.embedder.embed(query), engine.get_state().core_affect,
            engine.get_current_mood(now), engine.get_state().momentum, engine.list_all(),
            now, engine.config.decay, engine.config.retrieval, k,
            precomputed_weights=engine.current_weights(query, now), enable_resonance=False,
        )
    return [r.memory.id for r in plan.pass1[:k]]


def test_query_embeddings_out_of_float32_range_rank_like_float64() -> None:
    """A query scaled by 1e200 became inf in float32 and every total NaN, an empty
    answer; one scaled by 1e-200 became a zero vector (cosine 0). The scale of a query
    does not change its cosines: both rank as the unscaled query. An infinite value
    gives cosine 0 (docs/behaviour.md §4), the other signals still rank."""
    engine = _engine(ScaledEmbedder())
    now = engine._now()
    engine._clock = lambda: now
    queries = ["coffee Lisbon", "huge: coffee Lisbon", "tiny: coffee Lisbon", "inf: coffee"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got = score_queries(engine, queries, top_k=5)
    plain, huge, tiny, inf = ([m.id for m, _ in r] for r in got)
    assert len(plain) == 5
    assert huge == tiny == plain
    assert huge == _float64_pass1(engine, "coffee Lisbon", now, 5)
    assert inf == _float64_pass1(engine, "inf: coffee", now, 5)


class PrefixScaledEmbedder:
    """A hashing embedder: ``"s: x"`` embeds as ``x`` times ``factor``."""

    def __init__(self, factor: float) -> None:
        self.inner = HashingEmbedder(dim=16)
        self.factor = factor

    def embed(self, text: str) -> list[float]:
        kind, _, rest = text.partition(": ")
        if kind != "s" or not rest:
            return list(self.inner.embed(text))
        return (np.asarray(self.inner.embed(rest), np.float64) * self.factor).tolist()


STORES = {
    "float32": lambda: InMemoryStore(),
    "float64": lambda: InMemoryStore(embedding_dtype="float64"),
    "bfloat16": lambda: InMemoryStore(embedding_dtype="bfloat16"),
    "plain": lambda: PerMemoryStore(),
}


@pytest.mark.parametrize("store", sorted(STORES))
@pytest.mark.parametrize("factor", [1e25, 1e-25, 1e60, 1e-60])
def test_memories_whose_squared_norms_leave_float32_rank_like_float64(
    factor: float, store: str
) -> None:
    """Memory embeddings scaled by 1e25 (1e-25) are finite in float32, their squared
    norms are not (inf, 0); scaled by 1e60 they are not even finite. Those memories
    scored cosine 0 (the kernel's norms; the rows a float32 store keeps aside as
    zeros; the float32 cast of float64 rows) and ranked apart from ``retrieve``'s
    float64 pass 1."""
    engine = EmotionalMemory(STORES[store](), PrefixScaledEmbedder(factor))
    for i, text in enumerate(TEXTS):
        engine.set_affect(CoreAffect(valence=math.sin(i), arousal=0.5 + 0.4 * math.cos(i)))
        engine.encode(f"s: {text} ({i})" if i % 2 == 0 else f"{text} ({i})")
    now = engine._now()
    engine._clock = lambda: now
    got = [m.id for m, _ in score_queries(engine, ["coffee Lisbon"], top_k=8)[0]]
    assert got == _float64_pass1(engine, "coffee Lisbon", now, 8)


def test_every_top_k_answers_the_prefix_with_few_compiled_programs() -> None:
    """Each distinct ``top_k`` compiled its own ``score_batch`` program (39 for
    ``top_k`` 1..40 on a 40-memory bank) and a huge ``top_k`` allocated (Q, top_k)
    buffers; ``top_k`` is now bucketed and capped by the bank, its answers prefixes
    of one another."""
    engine = _engine(HashingEmbedder(dim=16), copies=5)
    now = engine._now()
    engine._clock = lambda: now
    queries = ["coffee Lisbon", "storm"]
    full = [[m.id for m, _ in r] for r in score_queries(engine, queries, top_k=40)]
    assert [len(r) for r in full] == [40, 40]
    jitted: Any = score_batch_compiled
    before = jitted._cache_size()
    for k in range(1, 41):
        got = score_queries(engine, queries, top_k=k)
        assert [[m.id for m, _ in r] for r in got] == [r[:k] for r in full]
    grown = jitted._cache_size() - before
    assert grown <= 3, f"{grown} programs compiled for 40 values of top_k"
    huge = score_queries(engine, queries, top_k=10**12)  # was a MemoryError
    assert [[m.id for m, _ in r] for r in huge] == full
    three: Any = np.int64(3)  # accepted, as by retrieve
    assert [m.id for m, _ in score_queries(engine, queries, top_k=three)[0]] == full[0][:3]


def test_top_k_and_chunk_size_are_checked_like_retrieve() -> None:
    engine = _engine(HashingEmbedder(dim=16))
    cases: list[tuple[Any, type[Exception]]] = [
        (True, TypeError), (2.0, TypeError), ("3", TypeError), (0, ValueError), (-1, ValueError),
    ]
    for bad, error in cases:
        with pytest.raises(error, match="top_k"):
            score_queries(engine, ["coffee"], top_k=bad)
        with pytest.raises(error, match="chunk_size"):
            BatchRetriever(engine, chunk_size=bad)


def test_embedder_output_that_is_no_list_is_a_named_error_and_embed_alone_works() -> None:
    """``embed_batch`` returning None raised "object of type 'NoneType' has no len()";
    an embedder with only ``embed`` (which ``encode_batch`` accepts) raised
    AttributeError."""

    class NoneBatch:
        def embed(self, text: str) -> list[float]:
            return list(HashingEmbedder(dim=16).embed(text))

        def embed_batch(self, texts: list[str]) -> Any:
            return None

    class EmbedOnly:
        def embed(self, text: str) -> list[float]:
            return list(HashingEmbedder(dim=16).embed(text))

    with pytest.raises(TypeError, match="embed_batch must return a sequence"):
        score_queries(_engine(NoneBatch()), ["coffee"])
    engine = _engine(EmbedOnly())
    want = score_queries(_engine(HashingEmbedder(dim=16)), ["coffee", "storm"], top_k=3)
    got = score_queries(engine, ["coffee", "storm"], top_k=3)
    assert [[m.content for m, _ in r] for r in got] == [[m.content for m, _ in r] for r in want]


def test_queries_that_are_no_sequence_of_str_name_their_type() -> None:
    """bytes were split into ints ("queries[0] must be a str, got int") and a generator
    was reported as "not a str"."""
    engine = _engine(HashingEmbedder(dim=16))
    for bad, kind in [(b"coffee", "bytes"), ((q for q in ["coffee"]), "generator"),
                      ({"coffee": 1}, "dict")]:
        with pytest.raises(TypeError, match=f"queries must be a sequence of str, got {kind}"):
            score_queries(engine, bad)


def test_an_engine_that_is_no_emotional_memory_is_a_named_error() -> None:
    """A store (or None) passed where the engine goes raised AttributeError
    ("'InMemoryStore' object has no attribute '_check_content'") on the first score."""
    store = InMemoryStore()
    for bad, kind in [(store, "InMemoryStore"), (None, "NoneType")]:
        with pytest.raises(TypeError, match=f"engine must be an EmotionalMemory, got {kind}"):
            score_queries(bad, ["coffee"])  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=f"engine must be an EmotionalMemory, got {kind}"):
            BatchRetriever(bad)  # type: ignore[arg-type]
    view = _engine(HashingEmbedder(dim=16)).scoped("a")  # a scoped view is an engine
    assert BatchRetriever(view)(["coffee"]) == [[]]


def test_an_embed_batch_answering_one_jax_or_numpy_array_is_accepted() -> None:
    """An embedder (a JAX one, say) whose ``embed_batch`` returns one (Q, D) JAX array:
    ``encode_batch`` accepts it, ``score_queries`` raised "embed_batch must return a
    sequence of embeddings, got ArrayImpl". A (Q, D) numpy array and a float16 one
    were already accepted and still are."""
    import jax.numpy as jnp

    inner = HashingEmbedder(dim=16)

    class ArrayBatch:
        def __init__(self, to_array: Any) -> None:
            self.to_array = to_array

        def embed(self, text: str) -> list[float]:
            return list(inner.embed(text))

        def embed_batch(self, texts: list[str]) -> Any:
            return self.to_array([inner.embed(t) for t in texts])

    queries = ["coffee", "storm", "Lisbon rain"]
    want = score_queries(_engine(inner), queries, top_k=3)
    for to_array in (jnp.asarray, np.asarray, lambda x: np.asarray(x, np.float16)):
        engine = _engine(ArrayBatch(to_array))
        got = score_queries(engine, queries, top_k=3)
        assert [[m.content for m, _ in r] for r in got] == [
            [m.content for m, _ in r] for r in want]
        for row, ref in zip(got, want, strict=True):
            np.testing.assert_allclose([s for _, s in row], [s for _, s in ref], atol=1e-3)
    engine.encode_batch(["tea in Porto"])  # the engine's own batch path takes it too


def test_each_route_scores_only_its_own_queries(monkeypatch: pytest.MonkeyPatch) -> None:
    """With query routing, queries of different base weights are scored in one call per
    route. Every call scored the whole (padded) batch and kept its route's rows: R
    routes cost R times the work of one. Each call now holds its route's queries only
    (padded to a power of two), and the answers are unchanged."""
    from emotional_memory import EmotionalMemoryConfig
    from emotional_memory.batch_retrieval import score_batch as real_score_batch
    from emotional_memory.retrieval import QueryClassifierConfig, RetrievalConfig

    routing = RetrievalConfig(query_classifier=QueryClassifierConfig(
        mode="heuristic",
        routed_weights={"temporal": [0.1, 0.1, 0.1, 0.1, 0.5, 0.1],
                        "single_hop": [0.8, 0.05, 0.05, 0.05, 0.05, 0.0]},
    ))
    engine = _engine(HashingEmbedder(dim=16))
    engine.config = EmotionalMemoryConfig(retrieval=routing)
    queries = ["when was the storm", "who had coffee", "when did the train leave",
               "what happened at the exam", "when was the launch"]
    routes: dict[tuple[float, ...], int] = {}
    for q in queries:
        key = tuple(engine._route(q))
        routes[key] = routes.get(key, 0) + 1
    assert len(routes) >= 2
    want = [score_queries(engine, [q], top_k=3)[0] for q in queries]
    seen: list[int] = []

    def counting(params: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(int(np.shape(batch.embedding)[0]))
        return real_score_batch(params, batch, *args, **kwargs)

    monkeypatch.setattr("emotional_memory.batch_retrieval.score_batch", counting)
    got = score_queries(engine, queries, top_k=3)
    assert sorted(seen) == sorted(1 << (n - 1).bit_length() for n in routes.values())
    for row, ref in zip(got, want, strict=True):
        assert [m.id for m, _ in row] == [m.id for m, _ in ref]
        np.testing.assert_allclose([s for _, s in row], [s for _, s in ref], atol=1e-6)
