"""The engine's retrieval core builds only what it returns, with unchanged results.

``retrieve`` and ``retrieve_with_explanations`` rank from arrays (no breakdown objects
for candidates that are not returned), reuse parameters derived once per config
object, and skip the activation program when no seed has a link to spread along.
Every test compares with the full-plan path (``_plan`` + ``_commit``, what
``plan_retrieval`` and the replay harness use) or with the public per-call helpers,
exactly (``==``), not approximately.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import equinox as eqx
import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory import (
    CoreAffect,
    EmotionalMemory,
    EmotionalMemoryConfig,
    InMemoryStore,
    KeywordAppraisalEngine,
    MoodDecayConfig,
    QueryClassifierConfig,
    ResonanceConfig,
    RetrievalConfig,
)
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.kernel import MemoryColumns, pack_params, pad_columns, score_with_weights
from emotional_memory.kernel.activation import spreading_activation_jit
from emotional_memory.kernel.columns import replace_activation
from emotional_memory.kernel.lexical import LexicalInputs
from emotional_memory.kernel.plan import (
    TABLE,
    pack_columns,
    pack_query,
    retrieval_plan,
    retrieval_plan_packed,
)
from emotional_memory.replay import TickClock
from emotional_memory.retrieval import adaptive_weights, masked_weights
from emotional_memory.retrieval import plan as retrieval_module

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
"""JAX's monitoring event of one XLA compile (``jax._src.dispatch``)."""
START = datetime(2026, 1, 1, tzinfo=UTC)
WORDS = [
    "server", "crashed", "demo", "coffee", "friend", "rain", "launch", "budget", "party",
    "furious", "happy", "calm", "sad", "review", "garden", "night", "storm", "email",
]
ROUTES = {
    "semantic": [0.6, 0.1, 0.1, 0.1, 0.05, 0.05],
    "emotional": [0.1, 0.4, 0.3, 0.1, 0.05, 0.05],
}

CONFIGS = {
    "default": EmotionalMemoryConfig(),
    "routed_masked": EmotionalMemoryConfig(
        enable_momentum=False,
        retrieval=RetrievalConfig(
            query_classifier=QueryClassifierConfig(mode="heuristic", routed_weights=ROUTES)
        ),
        resonance=ResonanceConfig(threshold=0.1, propagation_hops=3),
    ),
    "mood_decay_calibrated": EmotionalMemoryConfig(
        mood_decay=MoodDecayConfig(),
        retrieval=RetrievalConfig(
            signal_scale=[1.1, 0.9, 1.0, 1.2, 0.8, 1.0], signal_shift=[0, 0.1, 0, 0, 0, -0.05]
        ),
    ),
    "no_resonance": EmotionalMemoryConfig(enable_resonance=False),
}


def texts(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(WORDS[w] for w in rng.integers(0, len(WORDS), 4)) + f" {i}"
            for i in range(n)]


def twin(config: EmotionalMemoryConfig) -> EmotionalMemory:
    engine = EmotionalMemory(
        InMemoryStore(), HashingEmbedder(dim=32), KeywordAppraisalEngine(), config=config,
        clock=TickClock(START, timedelta(seconds=53)),
    )
    engine.encode_batch(texts(60, 1))
    engine.set_affect(CoreAffect(valence=-0.5, arousal=0.8, dominance=0.3))
    engine.encode_batch(texts(40, 2))
    return engine


def dump(engine: EmotionalMemory, value: Any) -> str:
    text = json.dumps(value)
    for i, memory in enumerate(engine.list_all()):
        text = text.replace(memory.id, f"#{i}")
    return text


def store_and_state(engine: EmotionalMemory) -> str:
    return dump(engine, {"memories": engine.export_memories(), "state": engine.save_state()})


@pytest.mark.parametrize("name", list(CONFIGS))
def test_explanations_equal_the_full_plan_path(name: str) -> None:
    fast, full = twin(CONFIGS[name]), twin(CONFIGS[name])
    spread = 0
    for i, query in enumerate([*texts(12, 3), "why was I so furious", "what happened"]):
        top_k = 1 + i % 6
        got = fast.retrieve_with_explanations(query, top_k=top_k)
        plan, now = full._plan(query, top_k, None)
        want = full._commit(plan, top_k, now)
        assert dump(fast, [e.model_dump(mode="json") for e in got]) == dump(
            full, [e.model_dump(mode="json") for e in want]
        )
        spread += sum(e.activation_level > 0 for e in got)
    assert store_and_state(fast) == store_and_state(full)
    if CONFIGS[name].enable_resonance:
        assert spread > 0  # activation reached some winners: pass 2 was exercised


@pytest.mark.parametrize("name", list(CONFIGS))
def test_retrieve_equals_the_full_plan_winners(name: str) -> None:
    fast, full = twin(CONFIGS[name]), twin(CONFIGS[name])
    for i, query in enumerate(texts(10, 4)):
        top_k = 1 + i % 5
        got = fast.retrieve(query, top_k=top_k, query_affect=CoreAffect(valence=0.2, arousal=0.4))
        plan, now = full._plan(query, top_k, CoreAffect(valence=0.2, arousal=0.4))
        want = full._after_retrieval([r.memory.id for r in plan.pass2[:top_k]], now)
        assert dump(fast, [m.model_dump(mode="json") for m in got]) == dump(
            full, [m.model_dump(mode="json") for m in want]
        )
    assert store_and_state(fast) == store_and_state(full)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_current_weights_equal_the_public_helpers(name: str) -> None:
    engine = twin(CONFIGS[name])
    cfg = engine.config
    for query in ["", "why was I so furious", "the launch budget", "coffee"]:
        for valence, arousal in [(-0.9, 0.9), (0.0, 0.3), (0.4, 0.1)]:
            engine.set_affect(CoreAffect(valence=valence, arousal=arousal))
            now = engine.get_state().mood.timestamp + timedelta(minutes=20)
            # SPEC 11: the weights read the mood as last updated, not regressed to now
            mood = engine.get_state().mood
            expected = masked_weights(
                adaptive_weights(
                    mood, engine._route(query), cfg.retrieval.adaptive_weights_config
                ).tolist(),
                cfg.signal_mask(),
            )
            assert engine.current_weights(query, now).tolist() == expected.tolist()


def test_replacing_the_config_replaces_the_derived_values() -> None:
    engine = twin(CONFIGS["default"])
    before = engine.current_weights("the launch budget")
    engine.config = CONFIGS["routed_masked"]
    after = engine.current_weights("the launch budget")
    fresh = twin(CONFIGS["routed_masked"])
    fresh.load_state(engine.save_state())
    assert after.tolist() == fresh.current_weights("the launch budget").tolist()
    assert after.tolist() != before.tolist()
    assert after[3] == 0.0  # momentum masked by the new config


_score_jit = jax.jit(score_with_weights)


def _reference_plan(
    weights: np.ndarray, params: Any, query: Any, cols: MemoryColumns, top_k: int,
    targets: np.ndarray, strengths: np.ndarray, hops: int,
) -> dict[str, np.ndarray]:
    """The plan composed step by step from separate programs and numpy sorts."""
    n = cols.size
    out1 = _score_jit(weights, params, query, cols)
    raw1, totals1 = np.asarray(out1.raw), np.asarray(out1.totals)
    order1 = np.argsort(-totals1, kind="stable")
    seeds = order1[:top_k]
    seed_mask = np.zeros(n, bool)
    seed_mask[seeds] = True
    act, hit = spreading_activation_jit(seed_mask, targets, strengths, hops)
    activation, reached = np.asarray(act), np.asarray(hit)
    out2 = _score_jit(weights, params, query, replace_activation(cols, activation))
    raw2, totals2 = np.asarray(out2.raw), np.asarray(out2.totals)
    if not reached.any():
        raw2, totals2 = raw1, totals1
    return {
        "weights": np.asarray(out1.weights), "raw1": raw1, "totals1": totals1,
        "order1": order1, "raw2": raw2, "totals2": totals2,
        "order2": np.argsort(-totals2, kind="stable"), "activation": activation,
        "reached": reached, "seeds": seeds,
    }


def twin_mood() -> Any:
    return EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8)).get_current_mood()


def twin_momentum() -> Any:
    return EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8)).get_state().momentum


@pytest.mark.parametrize("case", range(12))
def test_one_program_plan_equals_the_step_by_step_plan(case: int) -> None:
    """The fused plan equals separate pass-1 / activation / pass-2 programs exactly."""
    rng = np.random.default_rng(case)
    n, width = 12, 8
    targets = np.full((n, width), -1, dtype=np.int32)
    strengths = np.zeros((n, width))
    density = [0.0, 0.05, 0.3][case % 3]
    for i in range(n):
        for j in range(width):
            if rng.random() < density:
                targets[i, j] = rng.integers(0, n)
                strengths[i, j] = rng.uniform(0.1, 1.0)
    cols = MemoryColumns(
        embedding=rng.standard_normal((n, 8)), affect=rng.uniform(0, 1, (n, 3)),
        mood=rng.uniform(0, 1, (n, 3)), velocity=rng.normal(0, 0.1, (n, 3)),
        age_seconds=rng.uniform(0, 1e6, n), consolidation=rng.uniform(0, 1, n),
        retrieval_count=rng.integers(0, 4, n).astype(float), activation=np.zeros(n),
        valid=np.ones(n, bool),
    )
    query = retrieval_module.query_features(
        rng.standard_normal(8).tolist(), CoreAffect(valence=0.1, arousal=0.5),
        twin_mood(), twin_momentum(), 8,
    )
    params = retrieval_module.scoring_params(RetrievalConfig(), EmotionalMemoryConfig().decay)
    weights = np.asarray([0.3, 0.2, 0.15, 0.1, 0.1, 0.15])
    top_k = 1 + case % 4
    with retrieval_module.float64():
        got = retrieval_module.plan_arrays(
            params, query, pad_columns(cols), n, top_k, (targets, strengths), 2,
            weights=weights,
        )
        want = _reference_plan(weights, params, query, cols, top_k, targets, strengths, 2)
    for name, value in want.items():
        np.testing.assert_array_equal(getattr(got, name), value, err_msg=name)
    if case % 3 == 2:
        assert got.reached.any()  # dense links: pass 2 differs from pass 1


def test_one_compiled_program_dispatch_per_retrieve(monkeypatch: pytest.MonkeyPatch) -> None:
    """A retrieve runs the plan program once and compiles (so runs) no other program.

    After ``jax.clear_caches()`` every program a retrieve runs, jitted or eager, has to
    be compiled again; the persistent cache is off so a compile cannot be skipped. One
    compile event plus one call of the plan function means one dispatch.
    """
    engine = twin(CONFIGS["routed_masked"])  # routing + mask + resonance: every step
    engine.retrieve("coffee friend", top_k=3)  # warm everything outside the plan
    calls: list[int] = []
    real = retrieval_module.retrieval_plan_packed

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(retrieval_module, "retrieval_plan_packed", counted)
    compiles: list[str] = []

    def listener(event: str, duration: float, **kw: Any) -> None:
        if event == BACKEND_COMPILE_EVENT:
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    previous = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        jax.clear_caches()
        results = engine.retrieve("why was I so furious", top_k=4)
        first = len(compiles)
        engine.retrieve("the launch budget", top_k=4)  # warm: no compile at all
        warm = len(compiles) - first
    finally:
        jax.config.update("jax_enable_compilation_cache", previous)
        jax.monitoring.unregister_event_duration_listener(listener)
    assert len(results) == 4
    assert calls == [1, 1]
    assert first == 1
    assert warm == 0


def test_with_activation_and_pad_columns_match_the_reference_implementations() -> None:
    rng = np.random.default_rng(11)
    n = 13
    cols = MemoryColumns(
        embedding=rng.standard_normal((n, 5)), affect=rng.random((n, 3)),
        mood=rng.random((n, 3)), velocity=rng.random((n, 3)), age_seconds=rng.random(n),
        consolidation=rng.random(n), retrieval_count=rng.random(n), activation=rng.random(n),
        valid=rng.random(n) < 0.8,
    )
    for size in (None, 13, 40):
        padded = pad_columns(cols, size)
        target = 16 if size is None else size
        for name in ("embedding", "affect", "mood", "velocity", "age_seconds",
                     "consolidation", "retrieval_count", "activation", "valid"):
            got, ref = getattr(padded, name), getattr(cols, name)
            want = np.pad(ref, [(0, target - n)] + [(0, 0)] * (ref.ndim - 1))
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
    act = rng.random(n)
    swapped = cols.with_activation(act)
    reference = eqx.tree_at(lambda c: c.activation, cols, act)
    assert jax.tree_util.tree_structure(swapped) == jax.tree_util.tree_structure(reference)
    assert swapped.activation is act
    assert swapped.embedding is cols.embedding and swapped.valid is cols.valid
    assert cols.activation is not act  # the original is untouched


_PACK_CASE = st.tuples(
    st.integers(1, 20),  # real rows
    st.integers(1, 6),  # top_k
    st.integers(0, 3),  # hops
    st.sampled_from([np.float32, np.float64]),
    st.booleans(),  # fixed weights
    st.booleans(),  # lexical signal
    st.booleans(),  # signal mask
    st.integers(0, 2**31 - 1),
    st.booleans(),  # fixed weights: six even with s7 (the engine's precomputed_weights)
)


@settings(max_examples=25, deadline=None)
@given(_PACK_CASE)
def test_packed_plan_equals_the_plan_field_for_field(case: Any) -> None:
    """``retrieval_plan_packed`` (the engine's boundary) returns ``retrieval_plan``'s bits.

    Random padded banks with links, both compute dtypes, fixed or adaptive weights
    (from the signal parameters or a route's), with and without the lexical signal and
    the ablation mask, parameters packed or not: every field of the plan equals the
    packed table's column, orders and flags included.
    """
    n, top_k, hops, dtype, fixed, lexical_on, masked, seed, six = case
    rng = np.random.default_rng(seed)
    dim, width = 5, 4
    cols = pad_columns(MemoryColumns(
        embedding=rng.standard_normal((n, dim)), affect=rng.uniform(-1, 1, (n, 3)),
        mood=rng.uniform(-1, 1, (n, 3)), velocity=rng.normal(0, 0.2, (n, 3)),
        age_seconds=rng.uniform(0, 1e6, n), consolidation=rng.uniform(0, 1, n),
        retrieval_count=rng.integers(0, 4, n).astype(float), activation=np.zeros(n),
        valid=np.ones(n, bool),
    ))
    size = cols.size
    cols = jax.tree_util.tree_map(
        lambda x: x.astype(dtype) if x.dtype != bool else x, cols
    )
    targets = np.where(rng.random((size, width)) < 0.3, rng.integers(0, n, (size, width)), -1)
    targets = targets.astype(np.int32)
    strengths = np.where(targets >= 0, rng.uniform(0.1, 1, (size, width)), 0.0).astype(dtype)
    query = retrieval_module.query_features(
        rng.standard_normal(dim).tolist(), CoreAffect(valence=0.2, arousal=0.4),
        twin_mood(), twin_momentum(), dim,
    )
    query = jax.tree_util.tree_map(lambda x: np.asarray(x, dtype), query)
    params = retrieval_module.scoring_params(RetrievalConfig(), EmotionalMemoryConfig().decay)
    signals = 7 if lexical_on else 6
    kwargs: dict[str, Any] = {}
    if fixed:
        count = 6 if six else signals
        kwargs["weights"] = np.full(count, 1.0 / count)
    if masked:
        kwargs["signal_mask"] = np.asarray([1.0, 0.0, 1.0, 1.0, 0.0, 1.0] + [1.0] * (signals - 6))
    if lexical_on:
        terms = 3
        kwargs["lexical"] = LexicalInputs(
            tf=rng.integers(0, 3, (size, terms)).astype(np.float64),
            length=rng.integers(1, 9, size).astype(np.float64),
            df=rng.integers(1, 5, terms).astype(np.float64),
            n_docs=np.asarray(9.0), avg_length=np.asarray(4.5),
        )
    packed_kwargs = dict(kwargs)
    if not fixed and top_k % 2:  # a routed query's weight parameters (other base weights)
        kwargs["weight_params"] = retrieval_module.scoring_params(
            RetrievalConfig(), EmotionalMemoryConfig().decay,
            base_weights=[0.5, 0.1, 0.1, 0.1, 0.1, 0.1],
        )
        packed_kwargs["weight_params"] = pack_params(kwargs["weight_params"])
    static = {"top_k": top_k, "hops": hops, "spread": hops > 0}
    with retrieval_module.float64():
        want = retrieval_plan(params, query, cols, targets, strengths, **static, **kwargs)
        q_emb, q_state = pack_query(query)
        got_w, table = retrieval_plan_packed(
            pack_params(params), q_emb, q_state, *pack_columns(cols), targets, strengths,
            **static, **packed_kwargs,
        )
    got_w, table = np.asarray(got_w), np.asarray(table)
    np.testing.assert_array_equal(got_w, np.asarray(want.weights))
    assert table.dtype == np.asarray(want.raw1).dtype
    np.testing.assert_array_equal(table[:, :signals], np.asarray(want.raw1))
    for i, name in enumerate(TABLE):
        expected = np.asarray(getattr(want, name))
        np.testing.assert_array_equal(table[:, signals + i].astype(expected.dtype), expected,
                                      err_msg=name)
    # the host side reads the same table back (plan_arrays, sliced to the real rows)
    with retrieval_module.float64():
        arrays = retrieval_module.plan_arrays(  # packed (as the engine caches them) or not
            pack_params(params) if hops % 2 else params, query, cols, n, top_k,
            (targets, strengths) if hops else None, hops,
            weights=kwargs.get("weights"), signal_mask=kwargs.get("signal_mask"),
            lexical=kwargs.get("lexical"), weight_params=kwargs.get("weight_params"),
        )
    np.testing.assert_array_equal(arrays.weights, np.asarray(want.weights))
    np.testing.assert_array_equal(arrays.raw1, np.asarray(want.raw1)[:n])
    for name in ("totals1", "order1", "activation", "reached"):
        np.testing.assert_array_equal(getattr(arrays, name), np.asarray(getattr(want, name))[:n],
                                      err_msg=name)
    if arrays.reached.any():
        np.testing.assert_array_equal(arrays.totals2, np.asarray(want.totals2)[:n])
        np.testing.assert_array_equal(arrays.order2, np.asarray(want.order2)[:n])
        np.testing.assert_array_equal(arrays.raw2[:, 5], np.asarray(want.resonance2)[:n])
