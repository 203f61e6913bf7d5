"""SPEC 9: bad input fails loudly and early, and a failed call leaves the store and the
affective state exactly as they were (checked via ``export_memories`` and ``save_state``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest

from emotional_memory import (
    AdaptiveWeightsConfig,
    AppraisalVector,
    CoreAffect,
    DecayConfig,
    EmotionalMemory,
    EmotionalMemoryConfig,
    InMemoryStore,
    MoodDecayConfig,
    ResonanceConfig,
    RetrievalConfig,
    SQLiteStore,
)
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.replay import TickClock

START = datetime(2026, 1, 1, tzinfo=UTC)
NAN = float("nan")
INF = float("inf")


class SwitchEmbedder:
    """HashingEmbedder whose output can be corrupted on demand.

    ``mode``: ``"ok"``; ``"short"`` (wrong dimension); ``"nan"``; ``"raise"``;
    ``"short_third"`` (``embed_batch`` returns a wrong-dimension third vector).
    """

    def __init__(self, dim: int = 32) -> None:
        self.inner = HashingEmbedder(dim=dim)
        self.mode = "ok"

    def _one(self, text: str, i: int = 0) -> list[float]:
        v = self.inner.embed(text)
        if self.mode == "short" or (self.mode == "short_third" and i == 2):
            return v[:-3]
        if self.mode == "nan":
            return [NAN, *v[1:]]
        return v

    def embed(self, text: str) -> list[float]:
        if self.mode == "raise":
            raise RuntimeError("embedder down")
        return self._one(text)

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        if self.mode == "raise":
            raise RuntimeError("embedder down")
        return [self._one(t, i) for i, t in enumerate(texts)]


def build(store: Any = None, **cfg: Any) -> tuple[EmotionalMemory, SwitchEmbedder]:
    emb = SwitchEmbedder()
    engine = EmotionalMemory(
        store if store is not None else InMemoryStore(),
        emb,
        config=EmotionalMemoryConfig(**cfg),
        clock=TickClock(START),
    )
    engine.encode("the server crashed", affect=CoreAffect(valence=-0.7, arousal=0.9))
    engine.set_affect(CoreAffect(valence=0.4, arousal=0.6, dominance=0.3))
    engine.encode("coffee with a friend", metadata={"who": "sam"})
    engine.encode("the server is fine again")
    engine.retrieve("server", top_k=2)
    engine.set_affect(CoreAffect(valence=-0.2, arousal=0.4))
    return engine, emb


@contextmanager
def unchanged(engine: EmotionalMemory) -> Iterator[None]:
    memories = engine.export_memories()
    state = engine.save_state()
    yield
    assert engine.export_memories() == memories
    assert engine.save_state() == state


def check(engine: EmotionalMemory, exc: type[BaseException], fn: Callable[[], Any]) -> None:
    with unchanged(engine), pytest.raises(exc):
        fn()


@pytest.fixture
def engine() -> EmotionalMemory:
    return build()[0]


# --------------------------------------------------------------------------- content


@pytest.mark.parametrize("content", [123, None, b"bytes", ["a"], 1.5])
def test_non_str_content(engine: EmotionalMemory, content: Any) -> None:
    check(engine, TypeError, lambda: engine.encode(content))
    check(engine, TypeError, lambda: engine.encode_batch(["ok", content]))
    check(engine, TypeError, lambda: engine.retrieve(content))
    check(engine, TypeError, lambda: engine.retrieve_with_explanations(content))


def test_encode_batch_rejects_plain_str(engine: EmotionalMemory) -> None:
    check(engine, TypeError, lambda: engine.encode_batch("abc"))


def test_content_over_max_length() -> None:
    engine, _ = build(max_content_length=30)
    long = "x" * 31
    check(engine, ValueError, lambda: engine.encode(long))
    check(engine, ValueError, lambda: engine.encode_batch(["fine", long]))
    check(engine, ValueError, lambda: engine.observe(long))
    check(engine, ValueError, lambda: engine.retrieve(long))
    m = engine.list_all()[0]
    check(engine, ValueError, lambda: engine.update_memory(m.id, content=long))
    engine.encode("x" * 30)  # at the limit is fine
    with pytest.raises(ValueError):
        EmotionalMemoryConfig(max_content_length=0)


@pytest.mark.parametrize("meta", [["a"], "meta", 3, ("k", "v")])
def test_bad_metadata_type(engine: EmotionalMemory, meta: Any) -> None:
    check(engine, TypeError, lambda: engine.encode("text", metadata=meta))
    check(engine, TypeError, lambda: engine.encode_batch(["a", "b"], [None, meta]))
    m = engine.list_all()[0]
    check(engine, TypeError, lambda: engine.update_memory(m.id, metadata=meta))


def test_metadata_length_mismatch(engine: EmotionalMemory) -> None:
    check(engine, ValueError, lambda: engine.encode_batch(["a", "b"], [None]))


def test_bad_appraisal_and_affect_types(engine: EmotionalMemory) -> None:
    check(engine, TypeError, lambda: engine.encode("t", appraisal={"novelty": 0.1}))
    check(engine, TypeError, lambda: engine.encode("t", affect=(0.1, 0.2, 0.3)))
    check(engine, TypeError, lambda: engine.observe("t", affect="happy"))
    check(engine, TypeError, lambda: engine.set_affect({"valence": 0.1, "arousal": 0.2}))


# --------------------------------------------------------------------------- retrieval


@pytest.mark.parametrize(
    ("top_k", "exc"),
    [(0, ValueError), (-1, ValueError), (1.5, TypeError), ("3", TypeError), (True, TypeError),
     (False, TypeError), (None, TypeError)],
)
def test_bad_top_k(engine: EmotionalMemory, top_k: Any, exc: type[Exception]) -> None:
    check(engine, exc, lambda: engine.retrieve("server", top_k=top_k))
    check(engine, exc, lambda: engine.retrieve_with_explanations("server", top_k=top_k))


@pytest.mark.parametrize("qa", [(0.1, 0.2, 0.5), {"valence": 0.1, "arousal": 0.2}, "calm", 0.3])
def test_non_core_affect_query_affect(engine: EmotionalMemory, qa: Any) -> None:
    check(engine, TypeError, lambda: engine.retrieve("server", query_affect=qa))
    check(engine, TypeError, lambda: engine.retrieve_with_explanations("server", query_affect=qa))


# --------------------------------------------------------------------------- value objects


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
@pytest.mark.parametrize("field", ["valence", "arousal", "dominance"])
def test_nan_in_core_affect(field: str, bad: float) -> None:
    kwargs: dict[str, float] = {"valence": 0.1, "arousal": 0.2, "dominance": 0.5}
    kwargs[field] = bad
    with pytest.raises(ValueError, match=field):
        CoreAffect(**kwargs)


def test_nan_in_appraisal() -> None:
    with pytest.raises(ValueError):
        AppraisalVector(novelty=NAN, goal_relevance=0, coping_potential=0.5, norm_congruence=0,
                        self_relevance=0.5)


@pytest.mark.parametrize("bad", [NAN, INF])
@pytest.mark.parametrize(
    "factory",
    [
        lambda v: EmotionalMemoryConfig(mood_alpha=v),
        lambda v: EmotionalMemoryConfig(elaboration_learning_rate=v),
        lambda v: RetrievalConfig(base_weights=[v, 0.25, 0.15, 0.1, 0.1, 0.05]),
        lambda v: RetrievalConfig(ape_threshold=v),
        lambda v: RetrievalConfig(reconsolidation_learning_rate=v),
        lambda v: RetrievalConfig(reconsolidation_window_seconds=v),
        lambda v: ResonanceConfig(threshold=v),
        lambda v: ResonanceConfig(semantic_weight=v),
        lambda v: ResonanceConfig(temporal_half_life_seconds=v),
        lambda v: ResonanceConfig(hebbian_increment=v),
        lambda v: DecayConfig(base_decay=v),
        lambda v: DecayConfig(arousal_modulation=v),
        lambda v: DecayConfig(min_seconds=v),
        lambda v: MoodDecayConfig(base_half_life_seconds=v),
        lambda v: MoodDecayConfig(baseline_arousal=v),
        lambda v: AdaptiveWeightsConfig(calm_strength=v),
        lambda v: AdaptiveWeightsConfig(negative_mood_sharpness=v),
        lambda v: AdaptiveWeightsConfig(high_arousal_center=v),
    ],
)
def test_nan_inf_in_configs(factory: Callable[[float], Any], bad: float) -> None:
    with pytest.raises(ValueError):
        factory(bad)


def test_wrong_weight_vector_length() -> None:
    for n in (5, 7):
        with pytest.raises(ValueError, match="base_weights"):
            RetrievalConfig(base_weights=[1.0 / n] * n)


def test_bad_config_type() -> None:
    with pytest.raises(TypeError):
        EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), config={"mood_alpha": 0.1})


class _AsyncStates:
    """A state store written as coroutines (there is no async state-store protocol)."""

    def __init__(self) -> None:
        self.saved: Any = None

    async def save(self, state: Any) -> None:
        self.saved = state

    async def load(self) -> Any:
        return self.saved

    def scoped(self, path: tuple[str, ...]) -> _AsyncStates:
        return self


@pytest.mark.parametrize("states", ["redis://localhost:6379/0", {"save": 1}, object()])
def test_a_state_store_without_save_and_load_is_a_type_error_naming_it(states: Any) -> None:
    """A URL string or any object without ``save`` / ``load`` as ``state_store``: a
    TypeError naming it, as for the store and the embedder (it was an AttributeError
    from inside the state restore)."""
    with pytest.raises(TypeError, match="state_store must provide save, load"):
        EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), state_store=states)


def test_an_async_state_store_is_a_type_error_naming_it_on_both_engines() -> None:
    """A state store with ``async def`` methods: its coroutines were never awaited
    ("RuntimeWarning: coroutine ... was never awaited"), and the engine failed with
    "state snapshot must be a dict" from the coroutine load() returned. Both engines
    call the state store synchronously, so both refuse it by name."""
    import asyncio
    import warnings

    from emotional_memory.async_engine import AsyncEmotionalMemory

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no coroutine left unawaited
        with pytest.raises(TypeError, match=r"state_store _AsyncStates is async \(save"):
            EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), state_store=_AsyncStates())

        async def build() -> None:
            AsyncEmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16),
                                 state_store=_AsyncStates())

        with pytest.raises(TypeError, match=r"state_store _AsyncStates is async \(save"):
            asyncio.run(build())


# --------------------------------------------------------------------------- embeddings


def test_wrong_dimension_embedding_rejected(engine: EmotionalMemory) -> None:
    emb = engine.embedder
    assert isinstance(emb, SwitchEmbedder)
    emb.mode = "short"
    check(engine, ValueError, lambda: engine.encode("another event"))
    check(engine, ValueError, lambda: engine.encode_batch(["one", "two"]))
    check(engine, ValueError, lambda: engine.retrieve("server", top_k=1))
    check(engine, ValueError, lambda: engine.retrieve_with_explanations("server", top_k=4))
    m = engine.list_all()[0]
    check(engine, ValueError, lambda: engine.update_memory(m.id, content="changed"))
    check(engine, ValueError, lambda: engine.update_memory(m.id, embedding=[0.1] * 5))
    emb.mode = "ok"
    engine.encode("works again")
    assert len(engine) == 4


def test_wrong_dimension_mid_batch_stores_nothing(engine: EmotionalMemory) -> None:
    engine.embedder.mode = "short_third"  # type: ignore[attr-defined]
    check(engine, ValueError, lambda: engine.encode_batch(["one", "two", "three", "four"]))
    assert len(engine) == 3


def test_embedder_raising_stores_nothing(engine: EmotionalMemory) -> None:
    engine.embedder.mode = "raise"  # type: ignore[attr-defined]
    check(engine, RuntimeError, lambda: engine.encode("x"))
    check(engine, RuntimeError, lambda: engine.encode_batch(["a", "b", "c"]))
    check(engine, RuntimeError, lambda: engine.retrieve("server"))


def test_embedder_wrong_batch_length(engine: EmotionalMemory) -> None:
    class Short(SwitchEmbedder):
        def embed_batch(self, texts: list[str]) -> list[list[float]]:
            return super().embed_batch(texts)[:-1]

    engine.embedder = Short()
    check(engine, ValueError, lambda: engine.encode_batch(["a", "b", "c"]))


def test_embedder_returning_nan_warns_and_stores() -> None:
    engine, emb = build()
    emb.mode = "nan"
    with pytest.warns(RuntimeWarning) as first:
        m = engine.encode("nan embedding event")
    assert [w.filename for w in first] == [__file__]  # the caller's line, not the engine's
    assert len(engine) == 4
    stored = engine.get(m.id)
    assert stored is not None
    assert math.isnan(stored.embedding[0])
    emb.mode = "ok"
    res = engine.retrieve_with_explanations("nan embedding event", top_k=4)
    nan_hit = [r for r in res if r.memory.id == m.id]
    assert nan_hit and nan_hit[0].breakdown.raw_signals.semantic_similarity == 0.0
    emb.mode = "nan"
    with pytest.warns(RuntimeWarning) as caught:
        out = engine.encode_batch(["nan a", "nan b"])
    assert len(out) == 2
    assert len(engine) == 6
    assert {w.filename for w in caught} == {__file__}  # the caller's line, not the engine's
    with pytest.warns(RuntimeWarning) as query:
        engine.retrieve("nan query", top_k=2)
    with pytest.warns(RuntimeWarning) as updated:
        engine.update_memory(m.id, content="nan again")
    assert [w.filename for w in [*query, *updated]] == [__file__, __file__]


class _TypedEmbedder:
    """HashingEmbedder answering numpy arrays of one dtype (``embed_batch``: one 2-D array)."""

    def __init__(self, dtype: Any, widened: bool = False) -> None:
        self.inner = HashingEmbedder(dim=32)
        self.dtype = dtype
        self.widened = widened  # the same values, answered as float64 (the oracle)

    def _typed(self, values: Any) -> Any:
        import numpy as np

        out = np.asarray(values).astype(self.dtype)
        return out.astype(np.float64) if self.widened else out

    def embed(self, text: str) -> Any:
        return self._typed(self.inner.embed(text))

    def embed_batch(self, texts: list[str]) -> Any:
        return self._typed(self.inner.embed_batch(texts))


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn"])
def test_an_embedder_answering_ml_dtypes_floats_is_read_as_floats(name: str) -> None:
    """An accelerator model's bfloat16 output (ml_dtypes, as JAX answers it) was
    refused as 'non-numeric values' by encode, encode_batch and retrieve."""
    import ml_dtypes
    import numpy as np

    dtype = getattr(ml_dtypes, name)
    typed = EmotionalMemory(InMemoryStore(), _TypedEmbedder(dtype), clock=TickClock(START))
    plain = EmotionalMemory(InMemoryStore(), _TypedEmbedder(dtype, widened=True),
                            clock=TickClock(START))
    texts = ["the server crashed at night", "a calm walk by the sea", "lunch with Ana"]
    for engine in (typed, plain):
        engine.encode(texts[0])
        engine.encode_batch(texts[1:])
    want = [np.asarray(HashingEmbedder(dim=32).embed(t)).astype(dtype).astype(np.float64)
            for t in texts]
    got = [m.embedding for m in typed.list_all()]
    assert [list(w) for w in want] == got == [m.embedding for m in plain.list_all()]
    ranked = [[(r.memory.content, r.score) for r in e.retrieve_with_explanations("server crashed")]
              for e in (typed, plain)]
    assert ranked[0] == ranked[1]


@pytest.mark.parametrize("dtype", ["complex64", "bool", "U4", "V4"])
def test_an_embedder_answering_other_dtypes_is_refused(dtype: str) -> None:
    engine = EmotionalMemory(InMemoryStore(), _TypedEmbedder(dtype), clock=TickClock(START))
    with pytest.raises(TypeError, match="non-numeric values"):
        engine.encode("x")
    assert len(engine) == 0


# --------------------------------------------------------------------------- import / update


def test_import_with_one_invalid_item_imports_nothing(engine: EmotionalMemory) -> None:
    donor, _ = build()
    data = donor.export_memories()
    bad = dict(data[1])
    bad["tag"] = {"core_affect": "nope"}
    check(engine, ValueError, lambda: engine.import_memories([data[0], bad, data[2]]))
    missing = {k: v for k, v in data[1].items() if k != "content"}
    check(engine, ValueError, lambda: engine.import_memories([data[0], missing]))
    check(engine, ValueError, lambda: engine.import_memories([data[0], "not a dict"]))
    # valid items that only fail in the store (wrong dimension) are rolled back too
    short = dict(data[2])
    short["embedding"] = data[2]["embedding"][:5]
    check(engine, ValueError, lambda: engine.import_memories([data[0], data[1], short]))
    check(engine, TypeError, lambda: engine.import_memories(data[0]))
    check(engine, TypeError, lambda: engine.import_memories("data"))
    assert engine.import_memories(data) == 3
    assert len(engine) == 6


# a wrongly typed number is pydantic's ValidationError (a ValueError), as the original's
_NUMBER = ValueError


@pytest.mark.parametrize(("path", "value", "field", "error"), [
    (("scope",), "alice", "scope", TypeError),
    (("scope",), [5], "scope[0]", TypeError),
    (("tag", "core_affect", "valence"), None, "valence", _NUMBER),
    (("tag", "momentum", "d_valence"), "x", "d_valence", _NUMBER),
    (("tag", "resonance_links", 0, "strength"), [1], "strength", _NUMBER),
    (("tag", "prediction_learning_rate"), None, "prediction_learning_rate", _NUMBER),
])
def test_an_import_field_of_the_wrong_type_names_the_record(
    engine: EmotionalMemory, path: tuple[Any, ...], value: Any, field: str,
    error: type[Exception],
) -> None:
    # a field validator's TypeError left pydantic unwrapped: "valence must be a
    # number, got NoneType", naming no record of a long import
    donor, _ = build()
    data = donor.export_memories()
    holder = data[1]
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    with unchanged(engine), pytest.raises(error, match=rf"(?s)^data\[1\]: .*{re.escape(field)}"):
        engine.import_memories(data)


@pytest.mark.parametrize("bad", [NAN, INF])
def test_import_with_nan_embedding(engine: EmotionalMemory, bad: float) -> None:
    donor, _ = build()
    data = donor.export_memories()
    data[1]["embedding"] = [bad, *data[1]["embedding"][1:]]
    check(engine, ValueError, lambda: engine.import_memories(data))
    check(engine, ValueError, lambda: engine.import_memories(data, overwrite=True))


def test_update_memory_unknown_id(engine: EmotionalMemory) -> None:
    check(engine, KeyError, lambda: engine.update_memory("no-such-id", content="x"))


@pytest.mark.parametrize("bad", [NAN, INF])
def test_update_memory_nan_embedding(engine: EmotionalMemory, bad: float) -> None:
    m = engine.list_all()[0]
    emb = [bad] + [0.1] * 31
    check(engine, ValueError, lambda: engine.update_memory(m.id, embedding=emb))


def test_update_memory_bad_content(engine: EmotionalMemory) -> None:
    m = engine.list_all()[0]
    check(engine, TypeError, lambda: engine.update_memory(m.id, content=42))


# --------------------------------------------------------------------------- other entries


@pytest.mark.parametrize("threshold", [-0.01, 1.01, NAN, INF])
def test_prune_bad_threshold(engine: EmotionalMemory, threshold: float) -> None:
    check(engine, ValueError, lambda: engine.prune(threshold))


@pytest.mark.parametrize("threshold", ["abc", [0.5], None, True])
def test_prune_non_number_threshold(engine: EmotionalMemory, threshold: Any) -> None:
    check(engine, TypeError, lambda: engine.prune(threshold))


def test_load_state_garbage(engine: EmotionalMemory) -> None:
    check(engine, (TypeError, ValueError), lambda: engine.load_state("state"))
    check(engine, (TypeError, ValueError), lambda: engine.load_state({"core_affect": {}}))
    snap = engine.save_state()
    snap["core_affect"] = {"valence": NAN, "arousal": 0.1}
    check(engine, ValueError, lambda: engine.load_state(snap))


def test_elaborate_unknown_id(engine: EmotionalMemory) -> None:
    # SPEC 11: None for an unknown id (as the original), nothing changed
    before = (engine.export_memories(), engine.save_state())
    assert engine.elaborate("no-such-id") is None
    assert (engine.export_memories(), engine.save_state()) == before


# --------------------------------------------------------------------------- SQLite


def test_sqlite_wrong_dimension_atomic(tmp_path: Any) -> None:
    path = tmp_path / "m.db"
    store = SQLiteStore(path)
    engine, emb = build(store=store)
    emb.mode = "short"
    check(engine, ValueError, lambda: engine.encode("another"))
    check(engine, ValueError, lambda: engine.encode_batch(["one", "two"]))
    emb.mode = "short_third"
    check(engine, ValueError, lambda: engine.encode_batch(["one", "two", "three"]))
    expected = engine.list_all()
    store.close()
    with SQLiteStore(path) as reopened:
        assert reopened.list_all() == expected
        assert len(reopened) == 3


def test_sqlite_embedder_raising_atomic(tmp_path: Any) -> None:
    path = tmp_path / "m.db"
    store = SQLiteStore(path)
    engine, emb = build(store=store)
    emb.mode = "raise"
    check(engine, RuntimeError, lambda: engine.encode("x"))
    check(engine, RuntimeError, lambda: engine.encode_batch(["a", "b", "c"]))
    expected = engine.list_all()
    store.close()
    with SQLiteStore(path) as reopened:
        assert reopened.list_all() == expected


def test_sqlite_import_invalid_item_atomic(tmp_path: Any) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    engine, _ = build(store=store)
    donor, _ = build()
    data = donor.export_memories()
    short = dict(data[2])
    short["embedding"] = data[2]["embedding"][:5]
    check(engine, ValueError, lambda: engine.import_memories([data[0], data[1], short]))
    assert len(engine) == 3
    store.close()


# --------------------------------------------------------------------------- bad-input sweep


@pytest.fixture(params=["memory", "sqlite"])
def any_store_engine(request: pytest.FixtureRequest, tmp_path: Any) -> EmotionalMemory:
    store = InMemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "m.db")
    return build(store=store)[0]


def test_sqlite_missing_directory_named(tmp_path: Any) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "x.db"
    with pytest.raises(FileNotFoundError, match="no/such/dir"):
        SQLiteStore(missing)
    assert not (tmp_path / "no").exists()


def test_sqlite_directory_path_named(tmp_path: Any) -> None:
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(ValueError, match="is a directory") as info:
        SQLiteStore(tmp_path)
    assert str(tmp_path) in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_non_finite_metadata_named(any_store_engine: EmotionalMemory, bad: float) -> None:
    engine = any_store_engine
    with unchanged(engine), pytest.raises(ValueError, match=r"metadata\['x'\]\['y'\]"):
        engine.encode("x", metadata={"x": {"y": bad}})
    with unchanged(engine), pytest.raises(ValueError, match=r"metadata\[1\]\['x'\]\[0\]"):
        engine.encode_batch(["a", "b"], metadata=[{}, {"x": [bad]}])


class FixedEmbedder:
    """Returns the same (possibly bad) value for every text."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def embed(self, text: str) -> Any:
        return self.value

    def embed_batch(self, texts: list[str]) -> list[Any]:
        return [self.value for _ in texts]


def test_embedder_returning_empty_rejected(any_store_engine: EmotionalMemory) -> None:
    engine = any_store_engine
    engine.embedder = FixedEmbedder([])
    check(engine, ValueError, lambda: engine.encode("x"))
    check(engine, ValueError, lambda: engine.encode_batch(["x", "y"]))
    with unchanged(engine), pytest.raises(ValueError, match="empty embedding for query"):
        engine.retrieve("server")


@pytest.mark.parametrize("value", [["a"] * 32, [0.5] * 31 + ["x"], [None] * 32, [1j] * 32])
def test_embedder_returning_non_numbers_named(
    any_store_engine: EmotionalMemory, value: list[Any]
) -> None:
    engine = any_store_engine
    engine.embedder = FixedEmbedder(value)
    first_bad = next(i for i, v in enumerate(value) if not isinstance(v, float))
    pattern = rf"embedder .*content: element {first_bad} is {value[first_bad]!r}"
    with unchanged(engine), pytest.raises(TypeError, match=pattern.replace("(", r"\(")):
        engine.encode("x")
    with unchanged(engine), pytest.raises(TypeError, match=r"embedder .*contents\[0\]"):
        engine.encode_batch(["x", "y"])
    with unchanged(engine), pytest.raises(TypeError, match=r"embedder .*query"):
        engine.retrieve("server")


@pytest.mark.parametrize("bad_id", [["a list"], {"a": 1}, 7, None])
def test_non_str_ids_named(any_store_engine: EmotionalMemory, bad_id: Any) -> None:
    engine = any_store_engine
    for fn in (engine.get, engine.delete, engine.store.get, engine.store.delete,
               lambda i: engine.update_memory(i, content="x")):
        with unchanged(engine), pytest.raises(TypeError, match="memory_id must be a str"):
            fn(bad_id)


@pytest.mark.parametrize("threshold", ["0.5", b"0.5", "nan"])
def test_prune_string_threshold(any_store_engine: EmotionalMemory, threshold: Any) -> None:
    engine = any_store_engine
    with unchanged(engine), pytest.raises(TypeError, match="threshold"):
        engine.prune(threshold)


@pytest.mark.parametrize("field", ["retrieval_count", "reconsolidation_count"])
@pytest.mark.parametrize("count", [10**30, 2**63, 2**53 + 1, -1])
def test_import_count_out_of_range(
    any_store_engine: EmotionalMemory, field: str, count: int
) -> None:
    engine = any_store_engine
    item = dict(engine.export_memories()[0])
    item["id"] = "imported"
    item["tag"] = {**item["tag"], field: count}
    with unchanged(engine), pytest.raises(ValueError, match=field):
        engine.import_memories([item])


def test_import_count_at_the_bound_roundtrips(any_store_engine: EmotionalMemory) -> None:
    engine = any_store_engine
    item = dict(engine.export_memories()[0])
    item["id"] = "imported"
    item["tag"] = {**item["tag"], "retrieval_count": 2**53, "resonance_links": []}
    engine.import_memories([item])
    got = engine.get("imported")
    assert got is not None and got.tag.retrieval_count == 2**53
