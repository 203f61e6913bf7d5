"""QdrantStore (embedded local mode) and ChromaStore (PersistentClient, and HttpClient
against a real local Chroma server) against the real libraries: the MemoryStore
contract as InMemoryStore answers it, persistence, and the engine ranking identically
over them."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emotional_memory import EmotionalMemory, InMemoryStore
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.models import Memory
from support.memories import indexed_memory as mem

T0 = datetime(2026, 5, 1, tzinfo=UTC)


def _qdrant(path: Path | None) -> Any:
    pytest.importorskip("qdrant_client", reason="the qdrant extra is not installed")
    from emotional_memory.stores.qdrant import QdrantStore

    return QdrantStore(path=str(path)) if path is not None else QdrantStore()


def _chroma(path: Path | None) -> Any:
    pytest.importorskip("chromadb", reason="the chroma extra is not installed")
    from emotional_memory.stores.chroma import ChromaStore

    return ChromaStore(path=path) if path is not None else ChromaStore(collection_name="eph")


_CHROMA_SERVER: dict[str, Any] = {}


def _chroma_http(path: Path | None) -> Any:
    """A ChromaStore over HttpClient, against the test's local `chroma run` server."""
    from emotional_memory.stores.chroma import ChromaStore

    name = "c" + hashlib.sha1(str(path).encode()).hexdigest()[:16]  # one per test path
    return ChromaStore(host="127.0.0.1", port=_CHROMA_SERVER["port"], collection_name=name)


FACTORIES: dict[str, Callable[[Path | None], Any]] = {
    "qdrant": _qdrant,
    "chroma": _chroma,
    "chroma-http": _chroma_http,
}


@pytest.fixture(params=sorted(FACTORIES))
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "chroma-http":
        _CHROMA_SERVER["port"] = request.getfixturevalue("chroma_server")
    return str(request.param)


@pytest.fixture
def store(kind: str, tmp_path: Path) -> Iterator[Any]:
    s = FACTORIES[kind](tmp_path / kind)
    yield s
    s.close()


def test_round_trip_order_update_delete(store: Any) -> None:
    a, b, c = mem(0, [1.0, 0.0, 0.0]), mem(1, None), mem(2, [0.0, 1.0, 0.5])
    for m in (a, b, c):
        store.save(m)
    assert len(store) == 3 and store.dim == 3
    assert [m.id for m in store.list_all()] == [a.id, b.id, c.id]
    assert store.get(a.id) == a and store.get(b.id) == b and store.get("nope") is None
    # replace keeps the position, also when the embedding appears or disappears
    b2 = b.model_copy(update={"content": "now embedded", "embedding": [0.0, 0.0, 1.0]})
    store.update(b2)
    a2 = a.model_copy(update={"embedding": None})
    store.save(a2)
    assert [m.content for m in store.list_all()] == ["memory 0", "now embedded", "memory 2"]
    assert store.get(b.id) == b2 and store.get(a.id) == a2 and len(store) == 3
    with pytest.raises(KeyError):
        store.update(mem(9, [1.0, 1.0, 1.0]))
    with pytest.raises(ValueError):
        store.save(mem(10, [1.0, 2.0]))
    assert store.delete(c.id) is True and store.delete(c.id) is False
    assert [m.id for m in store.list_all()] == [a.id, b.id]
    d = mem(3, [0.3, 0.3, 0.3])
    store.save(d)
    assert [m.id for m in store.list_all()] == [a.id, b.id, d.id]
    assert d.id in store and c.id not in store


def _oracle(memories: list[Memory], query: list[float], k: int) -> list[str]:
    """InMemoryStore's answer (float64: embeddings kept as given, like these stores)."""
    ref = InMemoryStore(embedding_dtype="float64")
    for m in memories:
        ref.save(m)
    return [m.id for m in ref.search_by_embedding(query, k)]


def test_search_matches_in_memory_store(store: Any) -> None:
    rng = np.random.default_rng(7)
    memories = [mem(i, rng.normal(size=8).round(3).tolist()) for i in range(60)]
    memories.append(mem(60, None))  # never returned
    memories.append(mem(61, [0.0] * 8))  # zero norm: similarity 0
    memories.append(mem(62, [math.nan] + [1.0] * 7))  # NaN: similarity 0
    memories.append(mem(63, memories[5].embedding))  # exact tie with 5: insertion order
    for m in memories:
        store.save(m)
    for q in range(5):
        query = rng.normal(size=8).tolist()
        for k in (1, 3, 10, 40, 70):
            assert [m.id for m in store.search_by_embedding(query, k)] == _oracle(
                memories, query, k
            ), (q, k)
    # ties, zero-sim memories placing above negatives, zero-norm query, k <= 0
    assert [m.id for m in store.search_by_embedding(memories[5].embedding, 2)] == [
        memories[5].id,
        memories[63].id,
    ]
    opposite = (-np.asarray(memories[0].embedding)).tolist()
    assert [m.id for m in store.search_by_embedding(opposite, 64)] == _oracle(
        memories, opposite, 64
    )
    assert [m.id for m in store.search_by_embedding([0.0] * 8, 4)] == _oracle(
        memories, [0.0] * 8, 4
    )
    assert store.search_by_embedding(memories[0].embedding, 0) == []
    with pytest.raises(ValueError):
        store.search_by_embedding([1.0, 2.0], 3)


def test_nan_embedding_round_trips(store: Any) -> None:
    m = mem(0, [math.nan, 1.0, math.inf])
    store.save(m)
    got = store.get(m.id)
    assert got is not None and got.embedding is not None
    assert math.isnan(got.embedding[0]) and got.embedding[1:] == [1.0, math.inf]


def test_persists_across_reopen(kind: str, tmp_path: Path) -> None:
    path = tmp_path / f"{kind}-db"
    s = FACTORIES[kind](path)
    memories = [mem(i, [float(i), 1.0, 0.0]) for i in range(5)] + [mem(5, None)]
    for m in memories:
        s.save(m)
    s.delete(memories[1].id)
    s.close()
    s2 = FACTORIES[kind](path)
    try:
        assert [m.id for m in s2.list_all()] == [m.id for i, m in enumerate(memories) if i != 1]
        assert s2.dim == 3
        later = mem(6, [0.0, 0.0, 1.0])
        s2.save(later)  # sequence numbers continue after the stored ones
        assert s2.list_all()[-1].id == later.id
    finally:
        s2.close()


TEXTS = [
    "I won the lottery and cried with joy",
    "My grandmother passed away this morning",
    "The meeting was boring and ran late",
    "We celebrated our anniversary at the beach",
    "I was terrified during the turbulence on the flight",
    "Got a parking ticket, so annoying",
    "Our team shipped the release on time",
    "The kids built a sandcastle at the beach",
    "Argued with my landlord about the broken heater",
    "A stranger helped me carry groceries home",
    "I failed the driving test again",
    "Hiking at sunrise felt peaceful",
]


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> datetime:
        self.t += timedelta(seconds=30)
        return self.t


def _run(store: Any) -> list[list[tuple[str, float]]]:
    em = EmotionalMemory(store, HashingEmbedder(), clock=Clock())
    em.encode_batch(TEXTS[:6])
    for t in TEXTS[6:]:
        em.encode(t)
    out = []
    # top_k=2 with 12 memories: the engine takes candidates from search_by_embedding
    for query, k in [("beach holiday", 2), ("scary flight", 3), ("bad news", 12)]:
        out.append(
            [(e.memory.content, e.score) for e in em.retrieve_with_explanations(query, top_k=k)]
        )
    out.append([(m.content, 0.0) for m in em.retrieve("release", top_k=4)])
    return out


def test_engine_ranks_identically_over_backends(kind: str, tmp_path: Path) -> None:
    expected = _run(InMemoryStore(embedding_dtype="float64"))
    store = FACTORIES[kind](tmp_path / f"{kind}-engine")
    try:
        got = _run(store)
    finally:
        store.close()
    for exp, res in zip(expected, got, strict=True):
        assert res == exp  # same memories, same order, same scores


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
