"""The store contract, import: ``import_memories`` writes all of an import or none of it
on every backend, those without transactions (the vector databases, a plain protocol
store) included: an embedding the store would refuse half-way (another dimension, an
empty one where refused) is refused before the first write, naming ``data[i]``.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from emotional_memory import EmotionalMemory
from emotional_memory.embedders import HashingEmbedder
from support.backends import ENGINES, Backend, oracle_store

pytestmark = pytest.mark.parametrize("backend", ENGINES, indirect=True)
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def _fingerprint(engine: EmotionalMemory) -> list[tuple[Any, ...]]:
    return [(m.id, m.content, m.embedding, m.tag) for m in engine.list_all()]


def _export(n: int) -> list[dict[str, Any]]:
    source = EmotionalMemory(oracle_store(), HashingEmbedder(dim=8))
    for i in range(n):
        source.encode(f"exported event {i}")
    return source.export_memories()


@pytest.mark.parametrize("into_empty", [True, False])
def test_an_import_with_another_dimension_writes_nothing(
    backend: Backend, into_empty: bool
) -> None:
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=8))
    if not into_empty:
        engine.encode("already here")
    before = _fingerprint(engine)
    data = _export(3)
    data[2]["embedding"] = [1.0, 2.0]
    with pytest.raises(ValueError, match=r"data\[2\]\.embedding.*dimension"):
        engine.import_memories(data)
    assert _fingerprint(engine) == before


def test_an_import_with_an_empty_embedding_writes_all_or_nothing(backend: Backend) -> None:
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=8))
    engine.encode("already here")
    before = _fingerprint(engine)
    data = _export(3)
    data[2]["embedding"] = []
    try:
        written = engine.import_memories(data)
    except ValueError as exc:
        assert "data[2].embedding" in str(exc)
        assert _fingerprint(engine) == before
    else:
        assert written == 3 and len(engine.list_all()) == 4


class _NaNForSome:
    """An embedder returning NaN (or inf) for texts naming it: the engine warns and
    stores the memory with that vector, which scores as no embedding."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder(dim=8)

    def embed(self, text: str) -> list[float]:
        vector = self.inner.embed(text)
        if "nan" in text:
            return [math.nan, *vector[1:]]
        return [math.inf] * 8 if "inf" in text else vector

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [self.embed(t) for t in texts]


def test_an_export_holding_an_embedders_nan_vector_imports_with_the_same_answers(
    backend: Backend,
) -> None:
    """Encode stores (with a warning) a vector the embedder made NaN or infinite; the
    export must still be strict JSON that ``import_memories`` (which refuses NaN from
    the caller) takes back, here or into a fresh store, ranking as before."""
    embedder = _NaNForSome()
    clock = lambda: T0  # noqa: E731  (one instant: the same decay on both sides)
    source = EmotionalMemory(backend.new(), embedder, clock=clock)
    with pytest.warns(RuntimeWarning):
        for text in ("rain on the bridge", "a nan rain", "rain inf again", "rain at noon"):
            source.encode(text)
    data = json.loads(json.dumps(source.export_memories(), allow_nan=False))
    assert [d["embedding"] is None for d in data] == [False, True, True, False]
    fresh = EmotionalMemory(backend.new(), embedder, clock=clock)
    assert fresh.import_memories(data) == 4
    fresh.load_state(source.save_state())
    assert [(r.memory.id, r.score) for r in fresh.retrieve_with_explanations("rain", top_k=4)] \
        == [(r.memory.id, r.score) for r in source.retrieve_with_explanations("rain", top_k=4)]
    assert source.import_memories(data, overwrite=True) == 4


_ODD = timezone(timedelta(hours=5, minutes=30, seconds=17, microseconds=3))


def test_an_offset_with_seconds_keeps_its_instant_when_stored_and_exported(
    backend: Backend,
) -> None:
    """JSON keeps only the hours and minutes of an offset (pydantic's form): a datetime
    whose offset has seconds must be stored, read and exported as its instant, not
    moved by them."""
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=8))
    engine.encode("rain on the harbour")
    (record,) = engine.export_memories()
    odd = datetime(2100, 3, 1, 9, tzinfo=UTC).astimezone(_ODD)
    tag = record["tag"]
    record = {**record, "id": "odd", "expires_at": odd, "tag": {
        **tag, "timestamp": odd, "last_retrieved": odd, "window_opened_at": odd,
        "mood_snapshot": {**tag["mood_snapshot"], "timestamp": odd}}}
    assert engine.import_memories([record]) == 1
    fresh = EmotionalMemory(oracle_store(), HashingEmbedder(dim=8))
    exported = next(r for r in engine.export_memories() if r["id"] == "odd")
    assert fresh.import_memories([json.loads(json.dumps(exported))]) == 1
    for back in (engine.get("odd"), fresh.get("odd")):
        assert back is not None and back.expires_at == odd
        assert back.tag.timestamp == odd and back.tag.mood_snapshot.timestamp == odd
        assert back.tag.last_retrieved == odd and back.tag.window_opened_at == odd


def _linking(record: dict[str, Any], rid: str, scope: tuple[str, ...],
             targets: list[str]) -> dict[str, Any]:
    """``record`` as memory ``rid`` of ``scope``, linking to ``targets``."""
    links = [{"source_id": rid, "target_id": t, "strength": 0.5, "link_type": "semantic"}
             for t in targets]
    return {**record, "id": rid, "scope": list(scope),
            "tag": {**record["tag"], "resonance_links": links}}


@pytest.mark.parametrize(("importer", "scope", "target_scope"), [
    ((), ("bob",), ("alice",)),  # a sibling's memory
    ((), ("bob",), ()),  # the root's, which bob does not see
    (("alice",), ("alice", "x"), ("alice",)),  # the parent's, through the parent's view
])
@pytest.mark.parametrize("target_in_data", [False, True])
def test_an_import_cannot_link_a_record_to_a_memory_its_scope_does_not_see(
    backend: Backend, importer: tuple[str, ...], scope: tuple[str, ...],
    target_scope: tuple[str, ...], target_in_data: bool,
) -> None:
    """A scope acts as a separate engine holding only its memories, which could hold no
    link to a memory outside them: a record whose link leaves its scope would show that
    memory's id to the scope's view (``get``, ``list_all``, retrieval results). It is
    refused, naming the link, and nothing is written. A link into a sub-scope (the
    links a view's own encode makes) is taken."""
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=8))
    (record,) = _export(1)
    target = _linking(record, "target", target_scope, [])
    if not target_in_data:
        assert engine.import_memories([target]) == 1
    view = engine.scoped(*importer) if importer else engine
    before = _fingerprint(engine)
    data = [target] if target_in_data else []
    data.append(_linking(record, "leaky", scope, ["target"]))
    with pytest.raises(ValueError, match=rf"data\[{len(data) - 1}\]\.tag\.resonance_links"
                                         r"\[0\]\.target_id 'target'.*outside"):
        view.import_memories(data)
    assert _fingerprint(engine) == before
    assert engine.get("leaky") is None

    inward = [_linking(record, "deeper", (*target_scope, "x"), []),
              _linking(record, "outer", target_scope, ["deeper"])]
    assert engine.import_memories(inward) == 2
    assert [lk.target_id for lk in engine.get("outer").tag.resonance_links] == ["deeper"]


def _links_in_sight(engine: EmotionalMemory) -> list[tuple[str, str, bool]]:
    """(holder, target, whether the holder's scope sees the target) for every link."""
    scope = {m.id: m.scope for m in engine.list_all()}
    return [(m.id, lk.target_id, scope[lk.target_id][: len(m.scope)] == m.scope)
            for m in engine.list_all() for lk in m.tag.resonance_links]


@pytest.mark.parametrize(("importer", "old", "new"), [
    ((), ("bob",), ("alice",)),  # to a sibling
    (("alice",), ("alice", "x"), ()),  # up to the view's own path (recorded without one)
])
def test_an_overwrite_moving_a_memory_drops_the_links_its_old_scope_held_to_it(
    backend: Backend, importer: tuple[str, ...], old: tuple[str, ...],
    new: tuple[str, ...],
) -> None:
    """An overwrite may give a memory another scope the importing view sees; memories
    that can no longer see it must not keep links to it (their scope's view would show
    its id, as a separate engine holding that scope never could). Links from memories
    that still see it are kept."""
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=8))
    source = engine.scoped(*old)
    moved = source.encode("rain on the bridge")
    stays = source.encode("rain on the bridge again")
    above = engine.encode("rain on the bridge at night")  # the root sees every scope
    assert moved.id in [lk.target_id for lk in engine.get(stays.id).tag.resonance_links]
    assert moved.id in [lk.target_id for lk in engine.get(above.id).tag.resonance_links]
    record = next(r for r in engine.export_memories() if r["id"] == moved.id)
    view = engine.scoped(*importer) if importer else engine
    assert view.import_memories([_linking(record, moved.id, new, [])], overwrite=True) == 1
    assert source.get(moved.id) is None
    assert [lk.target_id for lk in source.get(stays.id).tag.resonance_links] == []
    assert moved.id in [lk.target_id for lk in engine.get(above.id).tag.resonance_links]
    assert all(seen for _, _, seen in _links_in_sight(engine))


@pytest.mark.parametrize(("importer", "held", "claimed"), [
    ((), ("alice",), ("bob",)),
    (("alice",), ("alice",), ("alice", "x")),
])
def test_a_skipped_record_lends_its_claimed_scope_to_no_link(
    backend: Backend, importer: tuple[str, ...], held: tuple[str, ...],
    claimed: tuple[str, ...],
) -> None:
    """A record whose id is held is skipped (no ``overwrite``): the memory keeps its
    scope, so another record's link to it is checked against that scope, not the one
    the skipped record claims (else the linking scope's view shows the memory's id)."""
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=8))
    (record,) = _export(1)
    assert engine.import_memories([_linking(record, "held", held, [])]) == 1
    view = engine.scoped(*importer) if importer else engine
    before = _fingerprint(engine)
    data = [_linking(record, "held", claimed, []), _linking(record, "new", claimed, ["held"])]
    with pytest.raises(ValueError, match=r"data\[1\]\.tag\.resonance_links\[0\]\.target_id "
                                         r"'held'.*outside"):
        view.import_memories(data)
    assert _fingerprint(engine) == before
    assert view.import_memories(data, overwrite=True) == 2  # moved with it: taken
    assert [lk.target_id for lk in engine.get("new").tag.resonance_links] == ["held"]


_UNWRITABLE = {
    "dimension": ("embedding", [1.0] * 4),
    "empty embedding": ("embedding", []),
    "metadata too wide": ("metadata", {f"k{i}": i for i in range(2500)}),
}


@pytest.mark.parametrize("value", list(_UNWRITABLE))
def test_a_skipped_record_is_not_refused_for_what_only_a_write_would_refuse(
    backend: Backend, value: str,
) -> None:
    """Without ``overwrite`` a record whose id is held is skipped, never written: a
    store without transactions must not refuse the import for what it would refuse
    only on writing it (another dimension, an empty embedding, metadata too wide),
    as the stores that roll back never do. The records written are still checked."""
    engine = EmotionalMemory(backend.new(), HashingEmbedder(dim=8))
    engine.encode("rain on the bridge")
    before = _fingerprint(engine)
    (held,) = engine.export_memories()
    field, bad = _UNWRITABLE[value]
    held[field] = bad
    assert engine.import_memories([held]) == 0
    assert _fingerprint(engine) == before
    (new,) = _export(1)
    wrong = {**new, "id": "wrong", "embedding": [1.0] * 4}
    with pytest.raises(ValueError, match=r"data\[2\]\.embedding"):
        engine.import_memories([held, new, wrong])
    assert _fingerprint(engine) == before
    assert engine.import_memories([held, new]) == 1
    assert engine.get(new["id"]) is not None and len(engine.list_all()) == 2
