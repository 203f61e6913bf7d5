"""The store contract, part 6: expiry.

A memory whose ``expires_at`` has passed (by the engine's clock) is invisible to
``get``, ``list_all``, ``retrieve``, ``export_memories`` and ``len``, is never a new
memory's link target, and ``prune`` removes it; in the root engine and in scoped
views alike, over every backend.

Documented for a plain store of the user's own (README, "Many users in one store"):
its root engine counts expired memories in ``len`` until pruned, and links through
the store's own search, which may see them. A vector database confines its views
itself, expiry included, so its root engine links through that view.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from emotional_memory import EmotionalMemory
from emotional_memory.embedders import HashingEmbedder
from support.backends import ENGINES, STORES, Backend
from support.scopes import T0, Clock, lexical_config


@pytest.mark.parametrize("backend", ENGINES, indirect=True)
def test_expired_memories_are_invisible_and_pruned(backend: Backend) -> None:
    clock = Clock()
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=16), clock=clock)
    soon = T0 + timedelta(hours=1)
    brief = engine.encode("a storm on the harbour", expires_at=soon)
    kept = engine.encode("a storm on the harbour at night")
    batch = engine.encode_batch(["rain", "more rain"], expires_at=[None, soon])
    assert brief.expires_at == soon and batch[1].expires_at == soon
    assert engine.get(brief.id) is not None and len(engine) == 4
    clock.now = soon  # expired once the clock reaches it
    assert engine.get(brief.id) is None
    assert [m.id for m in engine.list_all()] == [kept.id, batch[0].id]
    assert brief.id not in [m.id for m in engine.retrieve("storm harbour", 5)]
    assert all(m["id"] != brief.id for m in engine.export_memories())
    if not backend.generic:  # a plain store's count includes them until pruned
        assert len(engine) == 2
    engine.encode("a storm on the harbour again")
    assert engine.prune(0.0) == 2  # removes the expired ones, nothing else at 0
    assert len(engine.scoped("x")) == 0 and len(engine) == 3


@pytest.mark.parametrize("backend", ENGINES, indirect=True)
def test_expiry_in_a_scoped_view(backend: Backend) -> None:
    clock = Clock()
    store = backend.new()
    engine = EmotionalMemory(store, HashingEmbedder(dim=16), clock=clock)
    alice = engine.scoped("alice")
    secret = alice.encode("alice's secret")
    soon = T0 + timedelta(hours=1)
    brief = alice.encode("a storm on the harbour", expires_at=soon)
    kept = alice.scoped("s1").encode("a storm on the harbour at night")
    assert len(alice) == 3
    clock.now = soon
    assert alice.get(brief.id) is None
    assert [m.id for m in alice.list_all()] == [secret.id, kept.id]
    assert brief.id not in [m.id for m in alice.retrieve("storm harbour", 5)]
    late = alice.encode("a storm on the harbour again")
    assert all(lk.target_id != brief.id for lk in late.tag.resonance_links)
    assert len(alice) == 3
    if not backend.generic:  # a plain store's count includes them until pruned
        assert len(engine) == 3
    assert engine.prune(0.0) == 1 and len(store) == 3
    assert [m.id for m in engine.list_all()] == [secret.id, kept.id, late.id]


@pytest.mark.parametrize("backend", STORES, indirect=True)
def test_an_expired_memory_is_no_link_target_of_the_root(backend: Backend) -> None:
    clock = Clock()
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=16), clock=clock)
    soon = T0 + timedelta(hours=1)
    brief = engine.encode("a storm on the harbour", expires_at=soon)
    batch = engine.encode_batch(["a storm", "a storm on the harbour"],
                                expires_at=[None, soon])
    clock.now = soon
    late = engine.encode("a storm on the harbour again")
    later = engine.encode_batch(["a storm on the harbour once more"])[0]
    targets = {lk.target_id for m in (late, later) for lk in m.tag.resonance_links}
    assert batch[0].id in targets  # it links, but to the living only
    assert targets.isdisjoint({brief.id, batch[1].id})


@pytest.mark.parametrize("backend", ENGINES, indirect=True)
@pytest.mark.parametrize("overwrite", [False, True])
def test_an_import_replaces_an_expired_memory_of_the_same_id(
    backend: Backend, overwrite: bool
) -> None:
    """An expired memory is invisible to every read and waits for ``prune``: importing
    a record of its id (a backup restored, a memory renewed) is no write into another
    view's memory. It is pruned first, links to it dropped, and the record written,
    by the root and by the view holding it; another view still may not."""
    clock = Clock()
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=16), clock=clock)
    for view in (engine, engine.scoped("alice")):
        brief = view.encode("rain on the harbour", expires_at=T0 + timedelta(hours=1))
        kept = view.encode("rain on the harbour at night")
        record = next(r for r in view.export_memories() if r["id"] == brief.id)
        assert {lk.target_id for lk in view.get(kept.id).tag.resonance_links} == {brief.id}
        clock.now = T0 + timedelta(hours=2)
        renewed = {**record, "content": "renewed", "expires_at": None,
                   "tag": {**record["tag"], "resonance_links": []}}
        with pytest.raises(ValueError, match="cannot write"):
            engine.scoped("bob").import_memories([{**renewed, "scope": []}], overwrite=overwrite)
        assert view.import_memories([renewed], overwrite=overwrite) == 1
        assert view.get(brief.id).content == "renewed"
        assert view.get(kept.id).tag.resonance_links == []  # as prune would leave it
        assert [m.id for m in view.list_all()] == [kept.id, brief.id]
        assert view.prune(0.0) == 0
        clock.now = T0
        engine.delete(brief.id)
        engine.delete(kept.id)


_EAST, _WEST = timezone(timedelta(hours=14)), timezone(timedelta(hours=-12))
_ODD = timezone(timedelta(hours=5, minutes=30, seconds=17, microseconds=3))
_US = timedelta(microseconds=1)


def _boundaries(at: datetime) -> dict[str, datetime]:
    """Expiries around the instant ``at``, named."""
    return {
        "now": at, "1us before": at - _US, "1us after": at + _US,
        "now at +14:00": at.astimezone(_EAST),
        "1us after at -12:00": (at + _US).astimezone(_WEST),
        "1us before, odd offset": (at - _US).astimezone(_ODD),
        "1us after, odd offset": (at + _US).astimezone(_ODD),
        "year 1": datetime(1, 1, 1, tzinfo=UTC), "year 9999": datetime.max.replace(tzinfo=UTC),
        "year 9999 at +14:00": datetime.max.replace(tzinfo=_EAST),
    }


@pytest.mark.parametrize("backend", ENGINES, indirect=True)
@pytest.mark.parametrize("at", [T0, datetime(9000, 6, 1, 12, tzinfo=UTC),
                                datetime(1000, 6, 1, 12, tzinfo=UTC)],
                         ids=["now", "year 9000", "year 1000"])
def test_expiry_boundaries_agree_with_the_instant(backend: Backend, at: datetime) -> None:
    """At the clock's instant, a memory is seen exactly when ``expires_at > now`` as
    instants (whatever the offset), by every read, encoded or imported alike; also
    where microseconds since 1970 pass 2**53 (a vector database's float field)."""
    bounds = _boundaries(at)
    clock = Clock()
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=16), clock=clock)
    clock.now = at - timedelta(days=1)
    names = {}
    for name, moment in bounds.items():
        names[engine.encode(f"rain {name}", expires_at=moment).id] = name
    records = [{**r, "id": r["id"][::-1], "content": "i" + r["content"],
                "tag": {**r["tag"], "resonance_links": []},
                "expires_at": bounds[names[r["id"]]]}
               for r in engine.export_memories()]
    for record in records:
        names[record["id"]] = names[record["id"][::-1]]
    assert engine.import_memories(records) == len(records)
    clock.now = at
    alive = sorted(mid for mid, name in names.items() if bounds[name] > at)
    assert sorted(m.id for m in engine.list_all()) == alive
    everything = [m.id for m in engine.list_all()]
    assert [m.id for m in engine.list_all(limit=3, offset=1)] == everything[1:4]
    assert [m.id for m in engine.list_all(offset=len(alive) - 1)] == everything[-1:]
    assert sorted(r["id"] for r in engine.export_memories()) == alive
    assert sorted(mid for mid in names if engine.get(mid) is not None) == alive
    assert sorted(m.id for m in engine.retrieve("rain", len(names))) == alive
    for mid in alive:
        assert engine.get(mid).expires_at == bounds[names[mid]]
    if not backend.generic:
        assert len(engine) == len(alive)
    assert engine.prune(0.0) == len(names) - len(alive)


@pytest.mark.parametrize("backend", ENGINES, indirect=True)
@pytest.mark.parametrize("text", ["9999-12-31T23:59:59.999999-12:00",
                                  "0001-01-01T00:00:00+14:00"])
def test_an_expiry_outside_the_utc_years_is_refused_on_import(
    backend: Backend, text: str
) -> None:
    """An ``expires_at`` whose instant lies outside the years 1..9999 in UTC (which
    ``encode`` refuses) is a ValueError naming the field on import, nothing written."""
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=16), clock=Clock())
    engine.encode("rain")
    record = {**engine.export_memories()[0], "id": "renewed", "expires_at": text}
    with pytest.raises(ValueError, match="expires_at"):
        engine.import_memories([record])
    assert [m.content for m in engine.list_all()] == ["rain"]
    assert engine.get("renewed") is None


_ST_JOHNS = ZoneInfo("America/St_Johns")


@pytest.mark.parametrize("backend", ENGINES, indirect=True)
def test_expiry_in_a_zone_is_judged_as_an_instant_across_a_dst_fold(backend: Backend) -> None:
    """A clock and an expiry in one DST zone compare as instants: the second 01:10 of
    the night the clocks go back is 40 minutes after the first 01:30 (Python compares
    two datetimes of one tzinfo by wall time, ignoring ``fold``)."""
    first = datetime(2026, 11, 1, 1, 30, tzinfo=_ST_JOHNS)  # 04:00 UTC
    later = datetime(2026, 11, 1, 1, 10, tzinfo=_ST_JOHNS, fold=1)  # 04:40 UTC
    assert later.astimezone(UTC) > first.astimezone(UTC)
    clock = Clock()
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=16), clock=clock)
    kept = engine.encode("rain at the harbour")
    record = {**engine.export_memories()[0], "id": "until-first", "expires_at": first}
    assert engine.import_memories([record]) == 1
    engine.encode("rain on the bridge", expires_at=first)
    clock.now = later
    assert [m.id for m in engine.list_all()] == [kept.id]
    assert engine.get("until-first") is None
    assert [r["id"] for r in engine.export_memories()] == [kept.id]
    assert engine.prune(0.0) == 2


def _ranked(engine: EmotionalMemory, query: str) -> list[tuple[str, float, float]]:
    plan = engine.plan_retrieval(query, 3)
    return [(e.memory.content, e.score, e.breakdown.lexical_signal) for e in plan.pass2]


@pytest.mark.parametrize("backend", ENGINES, indirect=True)
def test_expired_memories_leave_the_lexical_statistics(backend: Backend) -> None:
    """Term statistics (document counts, frequencies, mean length) are those of the
    memories seen: the ranking is the same before and after ``prune`` removes the
    expired ones."""
    clock = Clock()
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=32), clock=clock,
                             config=lexical_config(True))
    texts = ["rain harbour storm", "storm storm storm bridge", "coffee garden",
             "rain rain exam", "harbour dog music", "train rain"]
    for i, text in enumerate(texts):
        engine.encode(text, expires_at=T0 + timedelta(hours=1) if i % 2 else None)
    clock.now = T0 + timedelta(hours=2)
    before = _ranked(engine, "rain storm harbour")
    assert engine.prune(0.0) == 3
    after = _ranked(engine, "rain storm harbour")
    assert [c for c, _, _ in before] == [c for c, _, _ in after]
    for (_, s0, l0), (_, s1, l1) in zip(before, after, strict=True):
        assert s0 == pytest.approx(s1, rel=1e-6) and l0 == pytest.approx(l1, rel=1e-6)


def _links_by_content(engine: EmotionalMemory) -> dict[str, list[tuple[str, float]]]:
    content = {m.id: m.content for m in engine.store.list_all()}
    return {m.content: [(content[lk.target_id], round(lk.strength, 9))
                        for lk in m.tag.resonance_links] for m in engine.store.list_all()}


@pytest.mark.parametrize("backend", ENGINES, indirect=True)
@pytest.mark.parametrize("primed", [False, True], ids=["fresh", "primed"])
def test_a_batch_links_as_repeated_encode_around_its_own_expired_memories(
    backend: Backend, primed: bool
) -> None:
    """A batch memory already expired when stored (``expires_at`` at or before the
    clock) is no link target of the later ones, as with repeated ``encode``, whether
    or not the store held an expiring memory before the batch."""
    texts = ["rain on the harbour", "rain on the harbour again",
             "rain on the harbour once more", "rain harbour"]
    expiries = [T0 - timedelta(hours=1), None, T0, None]
    engines = [EmotionalMemory(store, HashingEmbedder(dim=32), clock=Clock())
               for store in (backend.new(), backend.new())]
    for engine in engines if primed else ():
        engine.encode("a garden", expires_at=T0 + timedelta(days=9))
    returned = engines[0].encode_batch(texts, expires_at=expiries)
    singles = [engines[1].encode(t, expires_at=e) for t, e in zip(texts, expiries, strict=True)]
    assert _links_by_content(engines[0]) == _links_by_content(engines[1])
    assert [[lk.strength for lk in m.tag.resonance_links] for m in returned] == [
        [lk.strength for lk in m.tag.resonance_links] for m in singles]
    assert [m.content for m in engines[0].list_all()] == ["a garden"] * primed + texts[1::2]
