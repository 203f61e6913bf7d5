"""QdrantStore and ChromaStore against the real libraries, beyond the contract suite
(``tests/stores/contract/`` runs every check over Qdrant on disk and Chroma's server):
the client modes the contract does not open (Qdrant in memory, embedded Chroma on
disk) answer as the oracle and reopen, and collections in the original library's
layout open as they are.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emotional_memory.models import Memory
from support.backends import oracle_store
from support.memories import indexed_memory as mem


def _open(mode: str, path: Path) -> Any:
    if mode == "qdrant-memory":
        pytest.importorskip("qdrant_client", reason="the qdrant extra is not installed")
        from emotional_memory.stores.vectordb.qdrant import QdrantStore

        return QdrantStore()
    pytest.importorskip("chromadb", reason="the chroma extra is not installed")
    from emotional_memory.stores.vectordb.chroma import ChromaStore

    return ChromaStore(path=path)


@pytest.mark.parametrize("mode", ["qdrant-memory", "chroma-embedded"])
def test_other_client_modes_answer_as_the_oracle(mode: str, tmp_path: Path) -> None:
    store, oracle = _open(mode, tmp_path / "db"), oracle_store()
    rng = np.random.default_rng(7)
    memories = [mem(i, rng.normal(size=8).round(3).tolist()) for i in range(30)]
    memories += [mem(30, None), mem(31, [0.0] * 8), mem(32, [math.nan] + [1.0] * 7)]
    for m in memories:
        store.save(m)
        oracle.save(m)
    for i in range(0, 30, 4):
        assert store.delete(memories[i].id) is oracle.delete(memories[i].id) is True
    again = memories[5].model_copy(update={"embedding": None, "content": "replaced"})
    store.update(again)
    oracle.update(again)

    def agree(s: Any) -> None:
        assert [m.id for m in s.list_all()] == [m.id for m in oracle.list_all()]
        assert s.get(again.id) == again and len(s) == len(oracle)
        for query in ([0.0] * 8, rng.normal(size=8).tolist(), rng.normal(size=8).tolist()):
            for k in (1, 5, 40):
                assert [m.id for m in s.search_by_embedding(query, k)] == [
                    m.id for m in oracle.search_by_embedding(query, k)]

    agree(store)
    if mode == "chroma-embedded":  # on disk: the same again after a reopen
        store.close()
        store = _open(mode, tmp_path / "db")
        agree(store)
    store.close()


def _original_layout_memories() -> list[Memory]:
    return [mem(i, [1.0, float(i), 0.5]) for i in range(3)]


def test_qdrant_opens_a_collection_in_the_original_layout(tmp_path: Path) -> None:
    """The original library's layout, built by hand: unnamed cosine vectors, point id
    uuid5(NAMESPACE_OID, memory id), payload {"id", "data": Memory JSON}."""
    pytest.importorskip("qdrant_client", reason="the qdrant extra is not installed")
    import uuid

    from qdrant_client import QdrantClient, models

    from emotional_memory.stores.qdrant import QdrantStore

    path = tmp_path / "orig-qdrant"
    client = QdrantClient(path=str(path))
    client.create_collection(
        "emotional_memory",
        vectors_config=models.VectorParams(size=3, distance=models.Distance.COSINE),
    )
    old = _original_layout_memories()
    client.upsert(
        "emotional_memory",
        points=[
            models.PointStruct(
                id=str(uuid.uuid5(uuid.NAMESPACE_OID, m.id)),
                vector=m.embedding,
                payload={"id": m.id, "data": m.model_dump_json()},
            )
            for m in old
        ],
    )
    client.close()
    store = QdrantStore(path=str(path))
    try:
        assert len(store) == 3 and store.dim == 3
        assert {m.id for m in store.list_all()} == {m.id for m in old}
        assert store.get(old[1].id) == old[1]
        assert [m.id for m in store.search_by_embedding([1.0, 2.0, 0.5], 1)] == [old[2].id]
        new = mem(9, [0.0, 1.0, 0.0])
        store.save(new)
        assert store.list_all()[-1].id == new.id  # new memories follow the old ones
        store.update(old[0].model_copy(update={"content": "edited"}))
        assert store.get(old[0].id).content == "edited"  # type: ignore[union-attr]
        assert len(store) == 4  # replaced in place, not duplicated
        assert store.delete(old[2].id) and len(store) == 3
    finally:
        store.close()


def test_chroma_opens_a_collection_in_the_original_layout(tmp_path: Path) -> None:
    """The original library's layout, built by hand: id = memory id, document = Memory
    JSON, metadata {"id"}, collection metadata {"hnsw:space": "cosine", "dim"}."""
    pytest.importorskip("chromadb", reason="the chroma extra is not installed")
    import chromadb

    from emotional_memory.stores.chroma import ChromaStore

    path = tmp_path / "orig-chroma"
    client = chromadb.PersistentClient(path=str(path))
    col = client.create_collection(
        "emotional_memory", metadata={"hnsw:space": "cosine", "dim": "3"}
    )
    old = _original_layout_memories()
    col.upsert(
        ids=[m.id for m in old],
        embeddings=[m.embedding for m in old],  # type: ignore[misc]
        documents=[m.model_dump_json() for m in old],
        metadatas=[{"id": m.id} for m in old],
    )
    store = ChromaStore(path=path)
    try:
        assert len(store) == 3 and store.dim == 3
        assert {m.id for m in store.list_all()} == {m.id for m in old}
        assert store.get(old[1].id) == old[1]
        assert [m.id for m in store.search_by_embedding([1.0, 2.0, 0.5], 1)] == [old[2].id]
        new = mem(9, [0.0, 1.0, 0.0])
        store.save(new)
        assert store.list_all()[-1].id == new.id
        assert store.delete(old[2].id) and len(store) == 3
    finally:
        store.close()


@pytest.mark.parametrize(
    "edit", ["data not json", "data not a memory", "no id", "seq not a number"]
)
def test_a_hand_edited_qdrant_point_is_a_named_error(edit: str) -> None:
    """A point whose payload was edited by hand (not JSON, not a memory, its id or
    sequence number broken) is a ValueError naming the point and what is wrong, on
    every read, never a KeyError or a pydantic error without the memory's id."""
    pytest.importorskip("qdrant_client", reason="the qdrant extra is not installed")
    from emotional_memory.stores.vectordb.qdrant import QdrantStore, _point_id

    store = QdrantStore()
    for i in range(3):
        store.save(mem(i, [1.0, float(i), 0.5]))
    victim = store.list_all()[1].id
    payload = {"data not json": {"data": "{not json"},
               "data not a memory": {"data": '{"id": 3}'},
               "seq not a number": {"seq": "x"}}.get(edit)
    client = store._client
    if payload is not None:
        client.set_payload(store._main, payload=payload, points=[_point_id(victim)], wait=True)
    else:
        client.delete_payload(store._main, keys=["id"], points=[_point_id(victim)], wait=True)
    named = victim if edit != "no id" else _point_id(victim)
    for read in (lambda: store.get(victim), store.list_all,
                 lambda: store.search_by_embedding([1.0, 1.0, 0.5], 3)):
        with pytest.raises(ValueError, match=named) as info:
            read()
        assert "memory" in str(info.value) and store._main in str(info.value)


@pytest.mark.parametrize("edit", ["document not json", "document of another memory",
                                  "seq not a number"])
def test_a_hand_edited_chroma_record_is_a_named_error(edit: str, tmp_path: Path) -> None:
    """As for Qdrant: a record edited by hand is a ValueError naming the memory and
    its collection on every read."""
    pytest.importorskip("chromadb", reason="the chroma extra is not installed")
    from emotional_memory.stores.vectordb.chroma import ChromaStore

    store = ChromaStore(path=tmp_path / "db")
    memories = [mem(i, [1.0, float(i), 0.5]) for i in range(3)]
    for m in memories:
        store.save(m)
    victim = memories[1].id
    collection = store._collections[True]
    if edit == "seq not a number":
        collection.update(ids=[victim], metadatas=[{"seq": "x"}])
    else:
        document = "{not json" if edit == "document not json" else memories[2].model_dump_json()
        collection.update(ids=[victim], documents=[document], embeddings=[[1.0, 1.0, 0.5]])
    for read in (lambda: store.get(victim), store.list_all,
                 lambda: store.search_by_embedding([1.0, 1.0, 0.5], 3)):
        with pytest.raises(ValueError, match=victim) as info:
            read()
        assert "memory" in str(info.value) and collection.name in str(info.value)
