"""The store contract, import: ``import_memories`` writes all of an import or none of it
on every backend, those without transactions (the vector databases, a plain protocol
store) included: an embedding the store would refuse half-way (another dimension, an
empty one where refused) is refused before the first write, naming ``data[i]``.
"""

from __future__ import annotations

from typing import Any

import pytest

from emotional_memory import EmotionalMemory
from emotional_memory.embedders import HashingEmbedder
from support.backends import ENGINES, Backend, oracle_store

pytestmark = pytest.mark.parametrize("backend", ENGINES, indirect=True)


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
    with pytest.raises(ValueError, match="dimension"):
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
