"""``affect_from_text``: events without affect get one rated from their text.

The oracle is the library's own opt-in path: an engine with a rater must store and
feel exactly what an engine without one stores and feels when each event's rating is
passed as ``encode(..., affect=rating)``. The rater here is a plain-Python keyword
rater; the shipped MiniLM rater is checked against the appraisal engine it wraps.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory import (
    AsyncEmotionalMemory,
    CoreAffect,
    EmotionalMemory,
    EmotionalMemoryConfig,
    InMemoryStore,
    StaticAppraisalEngine,
)
from emotional_memory.affect_rater import AffectRater, AffectRatingError, TextAffectRater
from emotional_memory.appraisal import AppraisalVector
from emotional_memory.embedders import HashingEmbedder

GOOD = {"adopted", "won", "love", "sunny", "friends", "shipped"}
BAD = {"died", "crashed", "lost", "failed", "alone", "rain"}


class KeywordRater:
    """Plain-Python rater: valence from good/bad words, arousal from '!' and length."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def rate_affect(self, texts: Sequence[str]) -> list[CoreAffect]:
        self.calls.append(list(texts))
        out = []
        for text in texts:
            words = text.lower().replace("!", " ").split()
            v = 0.4 * sum(w in GOOD for w in words) - 0.4 * sum(w in BAD for w in words)
            a = min(1.0, 0.2 + 0.3 * text.count("!") + 0.01 * len(words))
            out.append(CoreAffect(valence=max(-1.0, min(1.0, v)), arousal=a,
                                  dominance=0.3 if v < 0 else 0.6))
        return out


def _clock() -> Callable[[], datetime]:
    start = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
    ticks = itertools.count()
    return lambda: start + timedelta(minutes=7 * next(ticks))


def _engine(rater: Any = None, **kwargs: Any) -> EmotionalMemory:
    return EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=64), clock=_clock(),
                           affect_from_text=rater, **kwargs)


def _shape(engine: EmotionalMemory) -> list[tuple[Any, ...]]:
    """Everything stored, memory ids replaced by positions (ids are random)."""
    memories = engine.list_all()
    index = {m.id: i for i, m in enumerate(memories)}
    return [
        (m.content, m.tag.core_affect, m.tag.momentum, m.tag.mood_snapshot,
         m.tag.consolidation_strength, m.tag.timestamp,
         [(index[link.target_id], link.strength, link.link_type)
          for link in m.tag.resonance_links])
        for m in memories
    ]


TEXTS = [
    "We adopted a puppy and love him",
    "The server crashed and we lost the data!",
    "Meeting moved to Thursday",
    "Grandpa died, I feel alone",
    "We won the cup with friends!!",
]


def test_encode_feeds_the_rating_as_the_affect_argument_does() -> None:
    rater = KeywordRater()
    rated = _engine(rater)
    oracle = _engine()
    for text in TEXTS:
        rated.encode(text)
        oracle.encode(text, affect=KeywordRater().rate_affect([text])[0])
    assert _shape(rated) == _shape(oracle)
    assert rated.get_state().snapshot() == oracle.get_state().snapshot()
    assert rater.calls == [[t] for t in TEXTS]
    # the ratings really moved things: the first memory is positive, the second negative
    first, second = rated.list_all()[:2]
    assert first.tag.core_affect.valence > 0 > second.tag.core_affect.valence


def test_default_is_off_and_takes_the_current_affect() -> None:
    plain = _engine()
    plain.set_affect(CoreAffect(valence=0.5, arousal=0.4))
    memory = plain.encode("Grandpa died, I feel alone")
    assert memory.tag.core_affect == CoreAffect(valence=0.5, arousal=0.4)
    assert plain.affect_from_text is None


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(TEXTS), st.booleans()), min_size=1, max_size=6))
def test_encode_batch_rates_the_missing_ones_in_one_call(items: list[tuple[str, bool]]) -> None:
    texts = [t for t, _ in items]
    given_affects = [CoreAffect(valence=-0.7, arousal=0.9) if g else None for _, g in items]
    rater = KeywordRater()
    rated = _engine(rater)
    rated.encode_batch(texts, affect=given_affects)
    oracle = _engine()
    full = [a if a is not None else KeywordRater().rate_affect([t])[0]
            for t, a in zip(texts, given_affects, strict=True)]
    oracle.encode_batch(texts, affect=full)
    assert _shape(rated) == _shape(oracle)
    assert rated.get_state().snapshot() == oracle.get_state().snapshot()
    missing = [t for t, a in zip(texts, given_affects, strict=True) if a is None]
    assert rater.calls == ([missing] if missing else [])


def test_batch_equals_repeated_encode_with_a_rater() -> None:
    one = _engine(KeywordRater())
    for text in TEXTS:
        one.encode(text)
    many = _engine(KeywordRater())
    many.encode_batch(TEXTS)
    assert _shape(one) == _shape(many)
    assert one.get_state().snapshot() == many.get_state().snapshot()


def test_observe_rates_its_content_and_not_a_missing_one() -> None:
    rater = KeywordRater()
    rated = _engine(rater)
    oracle = _engine()
    text = "We won the cup with friends!!"
    tag = rated.observe(text)
    expected = oracle.observe(text, affect=KeywordRater().rate_affect([text])[0])
    assert tag == expected
    rated.observe()
    assert rater.calls == [[text]]


def test_given_affect_appraisal_or_appraisal_engine_win() -> None:
    rater = KeywordRater()
    engine = _engine(rater)
    given_affect = CoreAffect(valence=-0.9, arousal=0.8, dominance=0.1)
    assert engine.encode("We adopted a puppy", affect=given_affect).tag.core_affect == given_affect
    appraisal = AppraisalVector(novelty=0.5, goal_relevance=0.9, coping_potential=0.2,
                                norm_congruence=-0.8, self_relevance=0.9)
    stored = engine.encode("We adopted a puppy", appraisal)
    assert stored.tag.core_affect == appraisal.to_core_affect()
    assert rater.calls == []
    vector = AppraisalVector(novelty=0.1, goal_relevance=0.2, coping_potential=0.9,
                             norm_congruence=0.9, self_relevance=0.1)
    with_engine = _engine(rater, appraisal_engine=StaticAppraisalEngine(vector))
    assert with_engine.encode("Grandpa died").tag.core_affect == vector.to_core_affect()
    with_engine.encode_batch(["Grandpa died", "We won"])
    off = _engine(rater, config=EmotionalMemoryConfig(enable_appraisal=False))
    off.set_affect(CoreAffect(valence=0.2, arousal=0.2))
    assert off.encode("Grandpa died").tag.core_affect == CoreAffect(valence=0.2, arousal=0.2)
    assert rater.calls == []


def test_scoped_views_share_the_rater() -> None:
    rater = KeywordRater()
    root = _engine(rater)
    alice = root.scoped("alice")
    memory = alice.encode("Grandpa died, I feel alone")
    assert memory.tag.core_affect.valence < 0 and memory.scope == ("alice",)
    assert alice.get_state().mood.valence < 0 == root.get_state().mood.valence


class _Bad:
    def __init__(self, out: Any) -> None:
        self.out = out

    def rate_affect(self, texts: Sequence[str]) -> Any:
        return self.out


@pytest.mark.parametrize(("out", "error", "message"), [
    ([], ValueError, "returned 0 ratings for 1 texts"),
    ([(0.1, 0.2, 0.3)], TypeError, "tuple at index 0"),
    ("x", TypeError, "must return a sequence of CoreAffect"),
    (None, TypeError, "got NoneType"),
])
def test_a_bad_rater_is_named_and_nothing_changes(out: Any, error: type, message: str) -> None:
    engine = _engine(_Bad(out))
    engine.encode("kept", affect=CoreAffect(valence=0.1, arousal=0.1))
    before = (_shape(engine), engine.get_state().snapshot())
    pattern = f"affect_from_text _Bad failed: .*{message}"
    with pytest.raises(AffectRatingError, match=pattern) as info:
        engine.encode("Grandpa died")
    assert isinstance(info.value.__cause__, error)
    with pytest.raises(AffectRatingError, match=r"affect_from_text\.rate_affect"):
        engine.encode_batch(["a", "b"])
    assert (_shape(engine), engine.get_state().snapshot()) == before


def _unchecked(**fields: Any) -> CoreAffect:
    """A CoreAffect that skipped validation (``model_construct``), as a careless rater
    may build one."""
    return CoreAffect.model_construct(**{"valence": 0.1, "arousal": 0.2, "dominance": 0.5,
                                         **fields})


@pytest.mark.parametrize(("bad", "field"), [
    (_unchecked(valence=math.nan), "valence"),
    (_unchecked(arousal=math.inf), "arousal"),
    (_unchecked(dominance="high"), "dominance"),
    (_unchecked(valence=True), "valence"),
])
def test_a_rating_that_skipped_validation_is_refused_naming_the_rater(
    bad: CoreAffect, field: str
) -> None:
    engine = _engine(_Bad([bad]))
    engine.encode("kept", affect=CoreAffect(valence=0.1, arousal=0.1))
    before = (_shape(engine), engine.get_state().snapshot())
    pattern = rf"affect_from_text\.rate_affect returned .*{field}.* at index 0"
    with pytest.raises(AffectRatingError, match=pattern):
        engine.encode("Grandpa died")
    batch = _engine(_Bad([CoreAffect(valence=0.1, arousal=0.1), bad]))
    with pytest.raises(AffectRatingError, match=pattern.replace("index 0", "index 1")):
        batch.encode_batch(["a", "b"])
    assert batch.list_all() == []
    assert (_shape(engine), engine.get_state().snapshot()) == before


def test_a_rating_out_of_range_is_clamped_as_a_core_affect_is() -> None:
    engine = _engine(_Bad([_unchecked(valence=-3.0, arousal=2.0, dominance=-1.0)]))
    clamped = CoreAffect(valence=-1.0, arousal=1.0, dominance=0.0)
    assert engine.encode("Grandpa died").tag.core_affect == clamped


class _Raising:
    def rate_affect(self, texts: Sequence[str]) -> Any:
        raise OSError("the rating backend is down")


def test_a_raising_rater_is_named_and_nothing_changes() -> None:
    async def run() -> None:
        engine = AsyncEmotionalMemory(InMemoryStore(), HashingEmbedder(dim=64),
                                      affect_from_text=_Raising())
        before = engine.get_state().snapshot()
        for call in (engine.encode("x"), engine.encode_batch(["x", "y"])):
            with pytest.raises(AffectRatingError, match="_Raising failed: OSError: the rat"):
                await call
        assert await engine.list_all() == [] and engine.get_state().snapshot() == before

    asyncio.run(run())


def test_constructor_refuses_a_non_rater() -> None:
    with pytest.raises(TypeError, match="affect_from_text must provide rate_affect"):
        _engine(lambda texts: texts)
    assert isinstance(KeywordRater(), AffectRater)


def test_async_engine_rates_alike() -> None:
    async def run() -> tuple[list[Any], dict[str, Any]]:
        engine = AsyncEmotionalMemory(InMemoryStore(), HashingEmbedder(dim=64),
                                      clock=_clock(), affect_from_text=KeywordRater())
        for text in TEXTS[:2]:
            await engine.encode(text)
        await engine.encode_batch(TEXTS[2:])
        return _shape(engine.engine), engine.get_state().snapshot()

    shape, state = asyncio.run(run())
    oracle = _engine(KeywordRater())
    for text in TEXTS[:2]:
        oracle.encode(text)
    oracle.encode_batch(TEXTS[2:])
    assert shape == _shape(oracle) and state == oracle.get_state().snapshot()


def test_as_async_keeps_the_rater() -> None:
    from emotional_memory import as_async

    rater = KeywordRater()
    engine = as_async(_engine(rater))
    assert engine.engine.affect_from_text is rater


# ---------------------------------------------------------------------- the shipped rater


@pytest.fixture(scope="module")
def minilm() -> Any:
    pytest.importorskip("tokenizers", reason="MiniLM extras not installed (`make minilm`)")
    from emotional_memory.embedders.minilm import MiniLMEmbedder, default_model_dir

    if default_model_dir() is None:
        pytest.skip("the MiniLM weights are not installed (`make minilm`)")
    return MiniLMEmbedder()


def test_text_rater_is_the_appraisal_engines_prediction(minilm: Any) -> None:
    from emotional_memory.appraisal_embedding import EmbeddingAppraisalEngine

    rater = TextAffectRater(minilm)
    assert rater.embedder is minilm
    texts = ["I got the job I wanted!", "My grandfather died last night", "Lunch at noon"]
    rows = EmbeddingAppraisalEngine(minilm).predict_affect(texts).tolist()
    got = rater.rate_affect(texts)
    assert [a.as_tuple() for a in got] == [pytest.approx(tuple(r), abs=1e-6) for r in rows]
    assert rater.rate(texts[1]).as_tuple() == pytest.approx(got[1].as_tuple(), abs=1e-4)
    with pytest.raises(TypeError):
        rater.rate_affect("one string")
    with pytest.raises(TypeError):
        rater.rate(3)  # type: ignore[arg-type]


def test_engine_with_the_shipped_rater_feels_what_it_stores(minilm: Any) -> None:
    engine = EmotionalMemory(InMemoryStore(), minilm, affect_from_text=TextAffectRater(minilm))
    happy = engine.encode("I got the job I wanted!")
    assert happy.tag.core_affect.valence > 0.3
    assert engine.get_state().mood.valence > 0
    for text in ("My grandfather died last night", "I failed my exam and feel terrible",
                 "My dog was hit by a car"):
        assert engine.encode(text).tag.core_affect.valence < -0.3
    assert engine.get_state().mood.valence < 0


def test_the_shipped_head_refuses_a_fitted_minilm(minilm: Any, tmp_path: Any) -> None:
    """The shipped head reads the base MiniLM's layers; given the engine's fitted MiniLM
    (as the docs say: "pass it the engine's own MiniLMEmbedder") it rated the fitted
    model's features without a word, other numbers than the head was trained on."""
    import numpy as np
    from safetensors.numpy import save_file

    from emotional_memory.embedders.fitted import FORMAT, FittedMiniLMEmbedder, _digest

    tensors = {"encoder.layer.5.output.LayerNorm.bias": np.full(384, 0.05, np.float32)}
    save_file(tensors, str(tmp_path / "fit.safetensors"), metadata={
        "format": FORMAT, "base": "minilm-l6-v2", "layers": "5", "digest": _digest(tensors)})
    fitted = FittedMiniLMEmbedder(tmp_path / "fit.safetensors")
    with pytest.raises(ValueError, match=r"'minilm-l6-v2/384'.*'minilm-l6-v2\+fit\."):
        TextAffectRater(fitted)
    from emotional_memory.appraisal_embedding import load_affect_head

    TextAffectRater(fitted, load_affect_head())  # a head given explicitly is the caller's


def test_the_shipped_rater_reads_a_long_text_from_its_beginning(minilm: Any) -> None:
    """As documented: only the first ``max_length`` tokens count, so a huge content
    costs the tokenizer, not the model, and its tail does not move the rating."""
    rater = TextAffectRater(minilm)
    start = "My grandfather died last night and I cannot stop crying. " * 30
    assert len(minilm.tokenize([start])[0]) == minilm.max_length  # truncated already
    long = start + "We won the lottery and I am overjoyed! " * 5000
    assert rater.rate(long) == rater.rate(start)


class _HeldRater(KeywordRater):
    """Rates only once ``release`` is set, after saying it has started."""

    def __init__(self) -> None:
        super().__init__()
        import threading

        self.started, self.release = threading.Event(), threading.Event()

    def rate_affect(self, texts: Sequence[str]) -> list[CoreAffect]:
        self.started.set()
        assert self.release.wait(30), "the test never released the rater"
        return super().rate_affect(texts)


def test_a_slow_rater_does_not_hold_the_scope_during_a_batch() -> None:
    """``encode_batch`` rated its texts in the scope's turn: every other operation
    on the scope (and, with shared_state, its database locks) waited for the rater.
    Now the rating (and the embedding) come before the turn, as appraisals do; the
    batch still equals the stored result of its own ratings."""
    import threading

    rater = _HeldRater()
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16), affect_from_text=rater)
    done: list[Any] = []
    batch = threading.Thread(
        target=lambda: done.append(engine.encode_batch(["we won!", "it crashed"])))
    batch.start()
    assert rater.started.wait(30)
    other = threading.Thread(target=lambda: done.append(
        engine.encode("meanwhile", affect=CoreAffect(valence=0.1, arousal=0.2))))
    other.start()
    other.join(10)
    finished = not other.is_alive()
    rater.release.set()
    batch.join(30)
    other.join(30)
    assert finished, "encode waited for another call's rater"
    assert [m.content for m in engine.list_all()] == ["meanwhile", "we won!", "it crashed"]
    won = next(m for m in engine.list_all() if m.content == "we won!")
    assert won.tag.core_affect.valence == pytest.approx(0.4)
