"""Engine dual-path encoding, prune, import/export, store access, affective state and
lifecycle (close, delete, columnar fast paths).

Everything runs on a deterministic ``TickClock`` (1 ms per reading unless stated), so
each engine operation's timestamp is known in advance: the engine reads the clock
once per encode / observe / set_affect / retrieve / prune / elaborate.
"""

from __future__ import annotations

import copy
import math
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from emotional_memory import (
    CoreAffect,
    EmotionalMemory,
    InMemoryAffectiveStateStore,
    InMemoryStore,
    MoodDecayConfig,
    SQLiteAffectiveStateStore,
    SQLiteStore,
    consolidation_strength,
)
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.replay import TickClock
from support.engine_cases import (
    NEG,
    POS,
    START,
    SpyAppraisal,
    SpyStore,
    by_content,
    canon,
    hand_strength,
    make,
)
from support.plain_store import PerMemoryStore

# --------------------------------------------------------------------------- dual path


def test_dual_path_encode_marks_pending_and_elaborate_blends() -> None:
    spy = SpyAppraisal(NEG)
    engine, clock = make(appraisal_engine=spy, dual_path_encoding=True)
    a = CoreAffect(valence=0.3, arousal=0.4, dominance=0.6)
    engine.set_affect(a)
    m = engine.encode("the meeting got cancelled")
    assert spy.calls == []
    assert m.tag.pending_appraisal is True
    assert m.tag.appraisal is None
    assert m.tag.core_affect == a
    assert engine.get_state().core_affect == a

    state_before = engine.save_state()
    t = clock.now
    out = engine.elaborate(m.id)
    appraised = NEG.to_core_affect()
    assert spy.calls == ["the meeting got cancelled"]
    assert out.tag.core_affect == a.lerp(appraised, 0.7)
    assert out.tag.consolidation_strength == consolidation_strength(
        appraised.arousal, m.tag.mood_snapshot.arousal
    )
    assert out.tag.pending_appraisal is False
    assert out.tag.appraisal == NEG
    assert out.tag.window_opened_at == t
    assert engine.get(m.id) == out
    assert engine.save_state() == state_before  # elaboration leaves the state alone
    # elaborating again is a no-op returning None (SPEC 11)
    assert engine.elaborate(m.id) is None
    assert engine.get(m.id) == out
    assert spy.calls == ["the meeting got cancelled"]


def test_dual_path_explicit_affect_or_appraisal_not_pending() -> None:
    engine, _ = make(appraisal_engine=SpyAppraisal(NEG), dual_path_encoding=True)
    assert engine.encode("x", appraisal=POS).tag.pending_appraisal is False
    assert engine.encode("y", affect=CoreAffect(valence=0.1, arousal=0.1)).tag.pending_appraisal \
        is False


def test_dual_path_without_engine_not_pending() -> None:
    engine, _ = make(dual_path_encoding=True)
    assert engine.encode("x").tag.pending_appraisal is False
    assert engine.elaborate_pending() == []
    assert engine.elaborate(engine.list_all()[0].id) is None  # no engine: None
    # enable_appraisal=False only stops encode-time appraisal: with an engine the
    # memory is still deferred to elaborate (SPEC 8, as in the original)
    off, _ = make(appraisal_engine=SpyAppraisal(NEG), dual_path_encoding=True,
                  enable_appraisal=False)
    assert off.encode("x").tag.pending_appraisal is True


def test_elaborate_pending_handles_all() -> None:
    spy = SpyAppraisal(POS)
    engine, _ = make(appraisal_engine=spy, dual_path_encoding=True, auto_categorize=True)
    ids = [engine.encode(f"event {i}").id for i in range(3)]
    engine.encode("explicit", affect=CoreAffect(valence=-0.5, arousal=0.5))
    labels = {mid: engine.get(mid).tag.emotion_label for mid in ids}
    out = engine.elaborate_pending()
    assert sorted(m.id for m in out) == sorted(ids)
    assert spy.calls == ["event 0", "event 1", "event 2"]
    for m in engine.list_all():
        assert m.tag.pending_appraisal is False
    for mid in ids:
        tag = engine.get(mid).tag
        assert tag.appraisal == POS
        assert tag.window_opened_at is not None
        # the label auto_categorize gave at encode time (label_tag: the mood
        # snapshot's dominance) stays: the original does not relabel on elaboration
        assert labels[mid] is not None and tag.emotion_label == labels[mid]
    assert engine.elaborate_pending() == []
    assert engine.elaborate("no-such-id") is None


# --------------------------------------------------------------------------- prune


def test_prune_removes_weak_memories() -> None:
    engine, clock = make()
    for i, arousal in enumerate([0.0, 0.3, 0.5, 0.75, 0.95]):
        engine.encode(f"memory {i}", affect=CoreAffect(valence=0.1, arousal=arousal))
    clock.advance(timedelta(days=1))
    now = clock.now
    strengths = {m.id: hand_strength(m.tag, now) for m in engine.list_all()}
    doomed = {mid for mid, s in strengths.items() if s < 0.05}
    assert 0 < len(doomed) < len(strengths)
    removed = engine.prune(0.05)
    assert removed == len(doomed)
    assert {m.id for m in engine.list_all()} == set(strengths) - doomed
    # the high-arousal memories are floored and survive any age
    clock.advance(timedelta(days=3650))
    assert engine.prune(0.05) == 0
    assert engine.prune(0.0) == 0
    assert len(engine) == len(strengths) - len(doomed)
    # floored at exactly min(floor_value, consolidation) = 0.1: "below" is strict
    floored = [m for m in engine.list_all() if m.tag.core_affect.arousal >= 0.7]
    assert floored and all(m.tag.consolidation_strength >= 0.1 for m in floored)
    assert all(hand_strength(m.tag, clock.now) == 0.1 for m in floored)
    assert engine.prune(0.1) == len(engine) - len(floored)
    assert {m.id for m in engine.list_all()} == {m.id for m in floored}
    assert engine.prune(0.1) == 0
    assert engine.prune(0.100001) == len(floored)


def test_prune_fresh_memories_kept_and_bad_threshold() -> None:
    engine, _ = make()
    engine.encode("fresh", affect=CoreAffect(valence=0.0, arousal=0.6))
    assert engine.prune() == 0
    for bad in (-0.1, 1.1, float("nan")):
        with pytest.raises(ValueError):
            engine.prune(bad)
    assert len(engine) == 1
    assert make()[0].prune(0.5) == 0


# --------------------------------------------------------------------------- import/export


def _populated() -> tuple[EmotionalMemory, TickClock]:
    engine, clock = make(auto_categorize=True)
    engine.encode("the server crashed", affect=CoreAffect(valence=-0.8, arousal=0.9),
                  metadata={"k": 1})
    engine.encode("coffee with a friend", appraisal=POS)
    engine.set_affect(CoreAffect(valence=0.5, arousal=0.5))
    engine.encode("server is fine now")
    engine.retrieve("server", top_k=2)
    return engine, clock


def test_export_import_round_trip() -> None:
    src, _ = _populated()
    data = src.export_memories()
    assert len(data) == 3
    dst, _ = make()
    assert dst.import_memories(data) == 3
    assert dst.list_all() == src.list_all()
    assert dst.export_memories() == data
    # overwrite=False skips existing ids
    changed = copy.deepcopy(data)
    changed[0]["content"] = "edited"
    assert dst.import_memories(changed) == 0
    assert dst.list_all() == src.list_all()
    # overwrite=True replaces them, keeping order
    assert dst.import_memories(changed, overwrite=True) == 3
    assert [m.content for m in dst.list_all()] == ["edited"] + [d["content"] for d in data[1:]]


def test_import_into_sqlite_round_trip(tmp_path: Any) -> None:
    src, _ = _populated()
    data = src.export_memories()
    path = tmp_path / "mem.db"
    with SQLiteStore(path) as store:
        dst, _ = make(store=store)
        assert dst.import_memories(data) == 3
        assert [m.id for m in dst.list_all()] == [d["id"] for d in data]
    with SQLiteStore(path) as store:
        again = store.list_all()
        assert [m.content for m in again] == [d["content"] for d in data]
        assert [m.tag for m in again] == [m.tag for m in src.list_all()]


# --------------------------------------------------------------------------- store access


def test_get_delete_update_len() -> None:
    engine, _ = make()
    m = engine.encode("original text", metadata={"a": 1})
    assert len(engine) == 1
    assert engine.get("missing") is None
    up = engine.update_memory(m.id, content="new text", metadata={"b": 2})
    assert up.content == "new text"
    assert up.metadata == {"b": 2}
    assert up.embedding == HashingEmbedder(dim=64).embed("new text")
    assert engine.get(m.id) == up
    emb = [0.5] * 64
    assert engine.update_memory(m.id, embedding=emb).embedding == emb
    assert engine.delete(m.id) is True
    assert engine.delete(m.id) is False
    assert len(engine) == 0


# --------------------------------------------------------------------------- state


def test_state_methods() -> None:
    engine, clock = make()
    s0 = engine.get_state()
    assert s0.core_affect == CoreAffect.neutral()
    assert s0.momentum.magnitude() == 0.0
    a = CoreAffect(valence=0.5, arousal=0.6, dominance=0.2)
    s1 = engine.set_affect(a)
    assert s1.core_affect == a
    assert engine.get_state() == s1
    engine.set_affect(CoreAffect(valence=-0.5, arousal=0.1))
    assert engine.get_state().momentum.magnitude() > 0
    t = clock.now
    engine.reset_state()
    st = engine.get_state()
    assert st.core_affect == CoreAffect.neutral()
    assert st.momentum.magnitude() == 0.0
    assert (st.mood.valence, st.mood.arousal, st.mood.dominance, st.mood.inertia) == (
        0.0, 0.0, 0.5, 0.5
    )
    assert st.mood.timestamp == t
    assert st.history == []


def test_save_load_state_continues_momentum() -> None:
    a, clock_a = make()
    a.set_affect(CoreAffect(valence=0.1, arousal=0.2))
    a.set_affect(CoreAffect(valence=0.4, arousal=0.5))
    snap = a.save_state()
    b, clock_b = make(clock=TickClock(START + timedelta(days=3)))
    b.load_state(snap)
    assert b.save_state() == snap
    assert b.get_state().momentum == a.get_state().momentum
    clock_b.now = clock_a.now
    nxt = CoreAffect(valence=0.9, arousal=0.9)
    a.set_affect(nxt)
    b.set_affect(nxt)
    assert b.save_state() == a.save_state()
    assert b.get_state().momentum.dd_valence != 0.0  # acceleration needs the history


def test_persist_restore_clear_state_store() -> None:
    ss = InMemoryAffectiveStateStore()
    engine, _ = make(state_store=ss)
    assert ss.load() is None  # nothing stored yet
    assert engine.restore_persisted_state() is False
    engine.set_affect(CoreAffect(valence=0.6, arousal=0.7))
    assert ss.load_snapshot() == engine.save_state()
    engine.clear_persisted_state()
    assert ss.load() is None
    kept = engine.save_state()
    assert kept["core_affect"]["valence"] == 0.6
    assert engine.persist_state() == kept  # SPEC 11: returns the snapshot
    assert ss.load_snapshot() == kept
    # a fresh engine with the same state store restores at construction
    fresh, _ = make(state_store=ss, clock=TickClock(START + timedelta(days=1)))
    assert fresh.save_state() == kept
    # restore_persisted_state brings back the persisted snapshot
    engine.set_affect(CoreAffect(valence=-1.0, arousal=0.0))
    ss.save(kept)
    assert engine.restore_persisted_state() is True
    assert engine.save_state() == kept
    # reset_state and load_state persist too
    engine.reset_state()
    assert ss.load_snapshot() == engine.save_state()
    engine.load_state(kept)
    assert ss.load_snapshot() == kept


def test_persist_state_without_store_returns_snapshot() -> None:
    engine, _ = make()
    assert engine.persist_state() == engine.save_state()  # as the original: no error
    assert engine.restore_persisted_state() is False
    engine.clear_persisted_state()  # no-op


def test_get_current_mood_regresses_with_mood_decay() -> None:
    cfg = MoodDecayConfig(base_half_life_seconds=100.0)
    engine, _ = make(mood_decay=cfg)
    for _ in range(10):
        engine.set_affect(CoreAffect(valence=0.9, arousal=0.9, dominance=0.9))
    mood = engine.get_state().mood
    at = mood.timestamp + timedelta(seconds=100)
    got = engine.get_current_mood(at)
    f = math.exp(-100 * math.log(2) / (100 * (1 + mood.inertia * 2.0)))
    assert got.valence == pytest.approx(mood.valence * f, abs=1e-12)
    assert got.arousal == pytest.approx(0.3 + (mood.arousal - 0.3) * f, abs=1e-12)
    assert got.dominance == pytest.approx(0.5 + (mood.dominance - 0.5) * f, abs=1e-12)
    assert got.timestamp == at
    assert abs(got.valence) < abs(mood.valence)
    # without mood_decay the mood is returned as is
    plain, _ = make()
    plain.set_affect(CoreAffect(valence=0.9, arousal=0.9))
    m = plain.get_state().mood
    assert plain.get_current_mood(m.timestamp + timedelta(days=5)) == m


def test_mood_decay_applies_between_updates() -> None:
    cfg = MoodDecayConfig(base_half_life_seconds=10.0)
    engine, clock = make(mood_decay=cfg)
    engine.set_affect(CoreAffect(valence=1.0, arousal=1.0))
    clock.advance(timedelta(hours=5))
    engine.set_affect(CoreAffect(valence=0.0, arousal=0.3))
    mood = engine.get_state().mood
    assert mood.valence == pytest.approx(0.0, abs=1e-9)
    assert mood.arousal == pytest.approx(0.3, abs=1e-9)


# --------------------------------------------------------------------------- lifecycle


def test_context_manager_closes_store(tmp_path: Any) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    with make(store=store)[0] as engine:
        engine.encode("hello")
        assert not store.closed
    assert store.closed

    spy = SpyStore()

    class ClosingStateStore(InMemoryAffectiveStateStore):
        closed = 0

        def close(self) -> None:
            ClosingStateStore.closed += 1

    ss = ClosingStateStore()
    with make(store=spy, state_store=ss)[0] as engine:
        engine.encode("x")
    assert spy.closed_count == 1
    assert ClosingStateStore.closed == 1


@pytest.mark.parametrize("memory_store", [InMemoryStore, SQLiteStore])
def test_a_view_made_before_close_fails_as_the_root_does(memory_store: Any) -> None:
    """The root engine's close closes the state store its views write through: a view
    then fails with the root's clear error, naming the closed store, nothing changed."""
    store = memory_store()
    engine = make(store=store, state_store=SQLiteAffectiveStateStore())[0]
    view = engine.scoped("alice")
    engine.close()
    for who in (engine, view):
        state = who.get_state().snapshot()
        for name, args in (("set_affect", (CoreAffect(valence=0.3, arousal=0.4),)),
                           ("persist_state", ()), ("observe", ("x",))):
            with pytest.raises(ValueError, match="is closed"):
                getattr(who, name)(*args)
        assert who.get_state().snapshot() == state
    if memory_store is InMemoryStore:
        with pytest.raises(ValueError, match="SQLiteAffectiveStateStore is closed"):
            view.encode("hello")
        assert len(store) == 0


def test_delete_removes_backward_links_to_the_deleted_memory() -> None:
    engine, _ = make()
    for text in ("the server crashed", "the server crashed again", "server crash postmortem"):
        engine.encode(text, affect=CoreAffect(valence=-0.5, arousal=0.6))
    mems = by_content(engine)
    victim = mems["the server crashed again"]
    assert victim.tag.resonance_links, "fixture must create links"
    partners = {lk.target_id for lk in victim.tag.resonance_links}
    assert any(
        lk.target_id == victim.id
        for pid in partners
        for lk in engine.get(pid).tag.resonance_links  # type: ignore[union-attr]
    )
    assert engine.delete(victim.id) is True
    assert engine.get(victim.id) is None
    for m in engine.list_all():
        assert all(lk.target_id != victim.id for lk in m.tag.resonance_links)
    assert engine.delete(victim.id) is False


def test_encode_batch_with_an_embed_only_embedder() -> None:
    class EmbedOnly:
        def embed(self, text: str) -> list[float]:
            return [float(len(text)), 1.0, 0.0]

    engine, _ = make(embedder=EmbedOnly())
    out = engine.encode_batch(["a", "bb"])
    assert [m.embedding for m in out] == [[1.0, 1.0, 0.0], [2.0, 1.0, 0.0]]


def test_columnar_fast_paths_equal_the_generic_paths() -> None:
    """prune (from columns), delete (linking_to) and elaborate_pending (pending_ids)
    give the same stores as the list_all paths of a protocol-only store."""
    runs = []
    for store in (InMemoryStore(), PerMemoryStore()):
        engine, clock = make(store=store)
        for i in range(40):
            engine.encode(f"memory {i} about {['rain', 'coffee', 'launch'][i % 3]}",
                          affect=CoreAffect(valence=0.1 * (i % 7) - 0.3,
                                            arousal=(i % 10) / 10))
        clock.advance(timedelta(hours=30))
        removed = engine.prune(0.01)
        doomed = [m.id for m in engine.list_all()[::4]]
        deleted = [engine.delete(mid) for mid in doomed]
        pending = engine.elaborate_pending()
        runs.append((removed, deleted, pending, canon(engine.export_memories())))
    assert runs[0][0] > 0 and all(runs[0][1])
    assert any(m["tag"]["resonance_links"] for m in runs[0][3])
    assert runs[0] == runs[1]


def test_a_view_on_one_file_fails_once_the_state_store_is_closed(tmp_path: Path) -> None:
    """Memories and state in one SQLite file (the state store writes in the memory
    operation's transaction): closing the state store left views made before it
    encoding through their twin, with no state saved."""
    path = tmp_path / "m.db"
    store = SQLiteStore(path)
    state_store = SQLiteAffectiveStateStore(path)
    engine = make(store=store, state_store=state_store)[0]
    view = engine.scoped("alice")
    state_store.close()
    for who in (engine, view):
        with pytest.raises(ValueError, match="SQLiteAffectiveStateStore is closed"):
            who.encode("hello")
    assert len(store) == 0
    store.close()
