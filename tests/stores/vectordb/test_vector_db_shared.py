"""Two QdrantStore / ChromaStore objects over one collection (two processes on one
server, or one client shared): each sees the other's first embedded memory.

A store opened while the collection held no embedded memory kept "no dimension"
for good: its searches answered ``[]`` whatever the other wrote, Qdrant refused its
every embedded write ("Collection ... already exists"), and Chroma took the
dimension of a write it refused, then refused every right one.
"""

from __future__ import annotations

from typing import Any

import pytest

from emotional_memory.stores.vectordb.chroma import ChromaStore
from emotional_memory.stores.vectordb.qdrant import QdrantStore
from support.backends import Backend
from support.memories import basic_memory as mem


def _twin(store: Any) -> Any:
    """A second store object over ``store``'s collections, through its client."""
    if isinstance(store, QdrantStore):
        return QdrantStore(client=store.client, collection_name=store.collection_name)
    assert isinstance(store, ChromaStore)
    return ChromaStore(client=store.client, collection_name=store.collection_name)


def test_a_store_opened_empty_sees_the_dimension_another_wrote(backend: Backend) -> None:
    first = backend.new()
    second = _twin(first)  # opened while nothing is embedded
    first.save(mem("first", [1.0, 0.0]))
    assert [m.content for m in second.search_by_embedding([1.0, 0.0], 5)] == ["first"]
    assert second.dim == 2
    with pytest.raises(ValueError, match="embedding length mismatch"):
        second.save(mem("wrong", [1.0, 0.0, 0.0]))
    second.save(mem("second", [0.0, 1.0]))
    assert [m.content for m in first.search_by_embedding([0.0, 1.0], 5)] == [
        "second", "first"]
    # (their order in list_all is not asserted: each object numbers its own
    # insertions, see stores/vectordb/README.md)
    assert sorted(m.content for m in second.list_all()) == ["first", "second"]


def test_a_refused_first_write_fixes_no_dimension(backend: Backend) -> None:
    """The dimension is the stored one, taken once a write succeeds."""
    first = backend.new()
    second = _twin(first)
    first.save(mem("first", [1.0, 0.0]))
    with pytest.raises(ValueError, match="embedding length mismatch"):
        second.save(mem("wrong", [1.0, 0.0, 0.0]))
    assert second.dim == 2
    assert [m.content for m in second.search_by_embedding([1.0, 0.0], 5)] == ["first"]


def test_an_embedded_qdrant_client_shared_by_two_stores_counts_their_expiry() -> None:
    """An embedded Qdrant store remembered whether it held an expiring memory, so its
    root view counted without a filter: through a client shared with another store
    object, that one's expired memory was counted."""
    from datetime import UTC, datetime, timedelta

    from qdrant_client import QdrantClient

    from emotional_memory.stores.base import Now, Selection

    client = QdrantClient(":memory:")
    first = QdrantStore(client=client)
    first.save(mem("alive", [1.0, 0.0]))
    second = QdrantStore(client=client)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    gone = mem("gone", [1.0, 0.0]).model_copy(update={"expires_at": now - timedelta(days=1)})
    second.save(gone)
    root = first.selected(Selection(now=Now(now)))
    assert [m.content for m in root.list_all()] == ["alive"]
    assert len(root) == 1


def test_a_view_confines_by_the_expiry_another_store_object_wrote(backend: Backend) -> None:
    """A view reads the clock only while some memory may expire, and asks the
    database (not this object's own writes) whether one may: a memory another object
    wrote, expired, is never seen, counted or found. An embedded Qdrant store
    remembered "no expiring memory" over its own client even once it had handed the
    client out (``store.client``): its root view counted the other's expired memory."""
    from datetime import timedelta

    from emotional_memory.stores.base import Now, Selection
    from support.scopes import T0

    first = backend.new()
    second = _twin(first)
    first.save(mem("kept", [1.0, 0.0]).model_copy(update={"scope": ("u",)}))
    gone = mem("gone", [1.0, 0.0]).model_copy(
        update={"scope": ("u",), "expires_at": T0 + timedelta(minutes=1)})
    second.save(gone)
    view = first.selected(Selection(("u",), None, Now(T0 + timedelta(hours=1))))
    assert [m.content for m in view.list_all()] == ["kept"]
    assert len(view) == 1
    assert [m.content for m in view.search_by_embedding([1.0, 0.0], 5)] == ["kept"]
    root = first.selected(Selection(now=Now(T0 + timedelta(hours=1))))
    assert len(root) == 1
    assert [m.content for m in root.list_all()] == ["kept"]


def test_tag_writes_racing_another_objects_update_leave_a_whole_record(
    backend: Backend,
) -> None:
    """``update_tags`` reads the records, then writes them: another store object's
    ``update`` in between (a metadata key removed, one added, a new embedding) is lost
    there as with ``update``, but the record written must be one whole version. Chroma
    kept the other's filter field (a ``where`` on a key the stored memory lacks found
    it) and both kept the other's vector under the older memory's data."""
    from emotional_memory.stores.vectordb.base import _direction
    from emotional_memory.stores.vectordb.filter import filter_fields

    first = backend.new()
    second = _twin(first)
    first.save(mem("other", [0.0, 1.0]))
    original = mem("racing", [1.0, 0.0]).model_copy(update={"metadata": {"color": "red"}})
    first.save(original)
    rewrite = first._rewrite

    def raced(*args: Any) -> None:
        second.update(original.model_copy(update={
            "content": "changed", "metadata": {"size": 3}, "embedding": [0.0, 1.0]}))
        rewrite(*args)

    first._rewrite = raced
    first.update_tags([(original.id, original.tag.model_copy(update={"retrieval_count": 4}))])
    stored = first.get(original.id)
    assert stored is not None and stored.tag.retrieval_count == 4  # the last write's memory
    if isinstance(first, ChromaStore):
        got = first._collection(True).get(ids=[original.id],
                                          include=["metadatas", "embeddings"])
        meta, vector = got["metadatas"][0], list(got["embeddings"][0])
    else:
        (point,) = first.client.retrieve(first._name(True), ids=[first_point(original.id)],
                                         with_payload=True, with_vectors=True)
        meta, vector = point.payload, list(point.vector)
    fields = {k: v for k, v in meta.items() if k not in ("id", "seq", "novec", "data")}
    assert {k: v for k, v in fields.items() if v is not None} == filter_fields(stored)
    assert vector == pytest.approx(_direction(stored.embedding or []), abs=1e-6)


def first_point(memory_id: str) -> Any:
    """A Qdrant point id of a memory id."""
    from emotional_memory.stores.vectordb.qdrant import _point_id

    return _point_id(memory_id)


def test_tag_writes_skip_a_memory_another_object_deleted_meanwhile(backend: Backend) -> None:
    """Another store object deleting one of the memories between ``update_tags``'s
    read and its write: the deleted memory stays deleted (not brought back) and the
    others get their tags. Qdrant raised its client's own error for the missing point
    (a retrieve failing whose winner was just deleted elsewhere)."""
    first = backend.new()
    second = _twin(first)
    kept, gone = mem("kept", [1.0, 0.0]), mem("gone", [0.0, 1.0])
    first.save(kept)
    first.save(gone)
    rewrite = first._rewrite

    def raced(*args: Any) -> None:
        second.delete(gone.id)
        rewrite(*args)

    first._rewrite = raced
    first.update_tags([(gone.id, gone.tag.model_copy(update={"retrieval_count": 2})),
                       (kept.id, kept.tag.model_copy(update={"retrieval_count": 5}))])
    assert first.get(gone.id) is None and gone.id not in first
    stored = first.get(kept.id)
    assert stored is not None and stored.tag.retrieval_count == 5
    assert [m.content for m in first.list_all()] == ["kept"]
