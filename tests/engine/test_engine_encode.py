"""Engine encoding (SPEC 5-8): encode, encode_batch and observe: state updates, appraisal,
categorisation, metadata.

Everything runs on a deterministic ``TickClock`` (1 ms per reading unless stated), so
each engine operation's timestamp is known in advance: the engine reads the clock
once per encode / observe / set_affect / retrieve / prune / elaborate.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from emotional_memory import (
    CoreAffect,
    InMemoryAffectiveStateStore,
    KeywordAppraisalEngine,
    categorize_affect,
    consolidation_strength,
)
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.replay import TickClock
from support.engine_cases import (
    NEG,
    POS,
    START,
    CountingEmbedder,
    SpyAppraisal,
    canon,
    make,
)

# --------------------------------------------------------------------------- encode


def test_set_affect_then_encode_stores_zero_velocity_and_snapshots_state() -> None:
    engine, _ = make()
    a = CoreAffect(valence=0.6, arousal=0.8, dominance=0.3)
    engine.set_affect(CoreAffect(valence=-0.5, arousal=0.1))
    engine.set_affect(a)
    m = engine.encode("a sunny day at the beach")
    state = engine.get_state()
    assert m.tag.core_affect == a
    assert m.tag.momentum.velocity() == (0.0, 0.0, 0.0)
    assert m.tag.momentum.magnitude() == 0.0
    # the tag snapshots the state after the update
    assert state.core_affect == a
    assert m.tag.momentum == state.momentum
    assert m.tag.mood_snapshot == state.mood
    assert m.tag.timestamp == START + timedelta(milliseconds=3)
    assert m.tag.appraisal is None
    assert m.tag.pending_appraisal is False
    assert m.tag.emotion_label is None
    assert engine.get(m.id) == m


def test_encode_feeds_current_affect_twice_into_mood() -> None:
    engine, _ = make()
    a = CoreAffect(valence=0.8, arousal=0.9, dominance=0.5)
    engine.set_affect(a)
    m = engine.encode("event")
    # neutral mood (0, 0, .5; inertia .5); e = 0.1 * (1 - 0.5) = 0.05; two updates with a
    e1 = 0.05
    v = (1 - e1) * (e1 * 0.8) + e1 * 0.8
    ar = (1 - e1) * (e1 * 0.9) + e1 * 0.9
    assert m.tag.mood_snapshot.valence == pytest.approx(v, abs=1e-15)
    assert m.tag.mood_snapshot.arousal == pytest.approx(ar, abs=1e-15)
    assert m.tag.mood_snapshot.dominance == pytest.approx(0.5, abs=1e-15)


def test_encode_with_affect_stores_real_trajectory_velocity() -> None:
    engine, _ = make(clock=TickClock(START, step=timedelta(seconds=1)))
    a0 = CoreAffect(valence=-0.4, arousal=0.2, dominance=0.6)
    a1 = CoreAffect(valence=0.5, arousal=0.7, dominance=0.4)
    engine.set_affect(a0)
    m = engine.encode("the call came through", affect=a1)
    assert m.tag.core_affect == a1
    vel = m.tag.momentum.velocity()  # dt = 1 s between the two readings
    assert vel == pytest.approx((0.9, 0.5, -0.2), abs=1e-12)
    assert engine.get_state().core_affect == a1
    assert m.tag.consolidation_strength == consolidation_strength(
        a1.arousal, engine.get_state().mood.arousal
    )

    # the default path after the same two set_affects has zero velocity
    other, _ = make(clock=TickClock(START, step=timedelta(seconds=1)))
    other.set_affect(a0)
    other.set_affect(a1)
    m2 = other.encode("the call came through")
    assert m2.tag.momentum.velocity() == (0.0, 0.0, 0.0)
    assert m2.tag.momentum.dd_valence == pytest.approx(-0.9, abs=1e-12)


def test_consolidation_uses_event_arousal_and_new_mood_arousal() -> None:
    engine, _ = make()
    engine.set_affect(CoreAffect(valence=0.2, arousal=0.9))
    mood_before = engine.get_state().mood.arousal
    m = engine.encode("high arousal event")
    mood_after = engine.get_state().mood.arousal
    assert mood_after != mood_before
    assert m.tag.mood_snapshot.arousal == mood_after
    e_ = 0.7 * 0.9 + 0.3 * mood_after
    expected = min(1.0, max(0.1, 1 - 4 * (e_ - 0.7) ** 2))
    assert m.tag.consolidation_strength == pytest.approx(expected, abs=1e-15)
    assert m.tag.consolidation_strength != consolidation_strength(0.9, mood_before)


def test_given_appraisal_drives_state() -> None:
    engine, _ = make()
    m = engine.encode("I failed the exam", appraisal=NEG)
    projected = NEG.to_core_affect()
    assert m.tag.core_affect == projected
    assert m.tag.appraisal == NEG
    assert engine.get_state().core_affect == projected
    assert m.tag.consolidation_strength == consolidation_strength(
        projected.arousal, engine.get_state().mood.arousal
    )


def test_appraisal_engine_used_when_enabled() -> None:
    spy = SpyAppraisal(POS)
    engine, _ = make(appraisal_engine=spy)
    m = engine.encode("got the job")
    assert spy.calls == ["got the job"]
    assert m.tag.appraisal == POS
    assert m.tag.core_affect == POS.to_core_affect()
    assert engine.get_state().core_affect == POS.to_core_affect()
    # an explicit appraisal or affect bypasses the engine
    m2 = engine.encode("explicit", appraisal=NEG)
    assert m2.tag.appraisal == NEG
    a = CoreAffect(valence=-0.2, arousal=0.3)
    m3 = engine.encode("explicit affect", affect=a)
    assert m3.tag.core_affect == a
    assert spy.calls == ["got the job"]


def test_keyword_appraisal_engine_drives_encode() -> None:
    kw = KeywordAppraisalEngine()
    engine, _ = make(appraisal_engine=kw)
    text = "I was furious and terrified when the car crashed"
    m = engine.encode(text)
    expected = kw.appraise(text)
    assert m.tag.appraisal == expected
    assert m.tag.core_affect == expected.to_core_affect()


def test_appraisal_engine_skipped_when_disabled() -> None:
    spy = SpyAppraisal(POS)
    engine, _ = make(appraisal_engine=spy, enable_appraisal=False)
    a = CoreAffect(valence=-0.3, arousal=0.4)
    engine.set_affect(a)
    m = engine.encode("got the job")
    assert spy.calls == []
    assert m.tag.appraisal is None
    assert m.tag.core_affect == a
    # an explicitly given appraisal still counts
    m2 = engine.encode("explicit", appraisal=POS)
    assert m2.tag.core_affect == POS.to_core_affect()
    assert spy.calls == []


def test_auto_categorize_stores_label() -> None:
    engine, _ = make(auto_categorize=True)
    a = CoreAffect(valence=0.8, arousal=0.6)
    m = engine.encode("party", affect=a)
    assert m.tag.emotion_label is not None
    assert m.tag.emotion_label == categorize_affect(a)
    assert engine.get(m.id).tag.emotion_label == m.tag.emotion_label
    plain, _ = make()
    assert plain.encode("party", affect=a).tag.emotion_label is None


def test_metadata_stored_and_copied() -> None:
    engine, _ = make()
    meta = {"source": "chat", "turn": 3, "tags": ["a", "b"]}
    m = engine.encode("hello", metadata=meta)
    meta["source"] = "mutated"
    stored = engine.get(m.id)
    assert stored.metadata == {"source": "chat", "turn": 3, "tags": ["a", "b"]}
    assert engine.encode("no meta").metadata == {}


def test_encode_persists_state_when_state_store_configured() -> None:
    ss = InMemoryAffectiveStateStore()
    engine, _ = make(state_store=ss)
    engine.encode("event", affect=CoreAffect(valence=0.3, arousal=0.6))
    assert ss.load_snapshot() == engine.save_state()
    assert ss.load() == engine.get_state()  # the original's protocol: a state


# --------------------------------------------------------------------------- encode_batch


def test_encode_batch_equals_repeated_encode() -> None:
    texts = [
        "the server crashed before the demo",
        "we fixed the server after the demo",
        "lunch with the team was fun",
        "the demo went well in the end",
        "crashed again, the server is flaky",
    ]
    metas = [{"i": i} if i % 2 else None for i in range(len(texts))]
    start_affect = CoreAffect(valence=-0.3, arousal=0.7, dominance=0.4)

    emb_a = CountingEmbedder(HashingEmbedder(dim=64))
    a, _ = make(embedder=emb_a, auto_categorize=True)
    a.set_affect(start_affect)
    out_a = a.encode_batch(texts, metas)
    assert emb_a.batch_calls == 1
    assert emb_a.embed_calls == 0

    b, _ = make(auto_categorize=True)
    b.set_affect(start_affect)
    out_b = [b.encode(t, metadata=m) for t, m in zip(texts, metas, strict=True)]

    assert [m.content for m in out_a] == texts
    assert canon(a.export_memories()) == canon(b.export_memories())
    assert a.save_state() == b.save_state()
    assert [m.tag.timestamp for m in out_a] == [m.tag.timestamp for m in out_b]
    # returned as repeated encode returns them: the store's copies with only their
    # forward links (the backward twins of later memories are in the store)
    names = {m.id: m.content for m in a.list_all()} | {m.id: m.content for m in b.list_all()}
    exported = [[m.model_dump(mode="json") for m in out] for out in (out_a, out_b)]
    assert canon(exported[0], names) == canon(exported[1], names)
    for m in out_a:
        stored = a.get(m.id)
        assert stored is not None
        assert m == stored.model_copy(update={"tag": stored.tag.model_copy(
            update={"resonance_links": m.tag.resonance_links})})
    assert len(a) == len(texts)


def test_encode_batch_with_appraisal_engine_matches_encode() -> None:
    texts = ["I was furious", "what a happy surprise", "a calm walk"]
    kw = KeywordAppraisalEngine()
    a, _ = make(appraisal_engine=kw)
    a.encode_batch(texts)
    b, _ = make(appraisal_engine=kw)
    for t in texts:
        b.encode(t)
    assert canon(a.export_memories()) == canon(b.export_memories())
    assert a.save_state() == b.save_state()


def test_encode_batch_empty() -> None:
    emb = CountingEmbedder(HashingEmbedder(dim=64))
    engine, _ = make(embedder=emb)
    before = engine.save_state()
    assert engine.encode_batch([]) == []
    assert len(engine) == 0
    assert engine.save_state() == before


# --------------------------------------------------------------------------- observe


def test_observe_updates_state_and_stores_nothing() -> None:
    engine, _ = make()
    a = CoreAffect(valence=0.4, arousal=0.5, dominance=0.7)
    tag = engine.observe("something happened", affect=a)
    assert len(engine) == 0
    # SPEC 11: observe returns the tag encode would have stored
    assert tag.core_affect == a
    assert tag.mood_snapshot == engine.get_state().mood
    assert engine.get_state().core_affect == a
    engine.observe(appraisal=NEG)
    assert engine.get_state().core_affect == NEG.to_core_affect()
    assert len(engine) == 0


def test_observe_matches_encode_state_update() -> None:
    spy = SpyAppraisal(NEG)
    a, _ = make(appraisal_engine=spy)
    b, _ = make(appraisal_engine=SpyAppraisal(NEG))
    a.set_affect(CoreAffect(valence=0.2, arousal=0.2))
    b.set_affect(CoreAffect(valence=0.2, arousal=0.2))
    a.observe("bad news")
    b.encode("bad news")
    assert spy.calls == ["bad news"]
    assert a.save_state() == b.save_state()
    assert len(a) == 0 and len(b) == 1
