"""SQLiteStore's batched row linker (issue 27, item 6): ``encode_batch`` links on the
cache's rows and upserts each block's changed rows at once; the file, the cache and
other connections must end up exactly as with the in-memory store, and a failing batch
must leave the file as it was."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emotional_memory import EmotionalMemory, EmotionalMemoryConfig, InMemoryStore, SQLiteStore
from emotional_memory._engine import encoding as engine_module
from emotional_memory.replay import TickClock
from emotional_memory.stores._shared.linking import MemoryLinker

START = datetime(2026, 1, 1, tzinfo=UTC)


class Table:
    """Text ``"t<i>"`` -> row i of a table (optionally failing at one row)."""

    def __init__(self, vectors: np.ndarray, fail_at: int | None = None) -> None:
        self.vectors, self.fail_at = vectors, fail_at

    def embed(self, text: str) -> list[float]:
        i = int(text[1:])
        if i == self.fail_at:
            raise RuntimeError("embedder down")
        out: list[float] = self.vectors[i].tolist()
        return out

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [self.embed(t) for t in texts]


def _vectors(n: int, dim: int = 8, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    v[::3] = v[::3].astype(np.float32)  # some rows float32 numbers, some not
    return v


def canon(memories: list[Any], order: list[Any]) -> list[Any]:
    """Memories as dicts with ids replaced by their position in ``order`` (ids are
    random uuid4s, so two engines give different ones)."""
    pos = {m.id: i for i, m in enumerate(order)}
    out = []
    for m in memories:
        d = m.model_dump()
        d["id"] = pos[m.id]
        d["tag"]["resonance_links"] = [
            (pos[link["source_id"]], pos[link["target_id"]], link["strength"], link["link_type"])
            for link in d["tag"]["resonance_links"]
        ]
        out.append(d)
    return out


def _engine(store: Any, vectors: np.ndarray, **cfg: Any) -> EmotionalMemory:
    return EmotionalMemory(
        store, Table(vectors), config=EmotionalMemoryConfig(**cfg),
        clock=TickClock(START, timedelta(seconds=3)),
    )


@pytest.mark.parametrize("block", [7, 64])
def test_encode_batch_on_sqlite_equals_in_memory(
    tmp_path: Path, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_module, "_LINK_SEARCH_BLOCK", block)
    vectors = _vectors(150)
    path = tmp_path / "m.db"
    sql = _engine(SQLiteStore(path), vectors)
    mem = _engine(InMemoryStore(), vectors)
    assert not isinstance(sql._linker(batched=True), MemoryLinker)  # the row linker
    other = SQLiteStore(path)  # another connection, open before the writes
    for lo, hi in ((0, 5), (5, 90), (90, 150)):
        texts = [f"t{i}" for i in range(lo, hi)]
        got, want = sql.encode_batch(texts), mem.encode_batch(texts)
        # what encode_batch hands back, links included
        assert canon(got, sql.list_all()) == canon(want, mem.list_all())
    sql.encode("t3")  # a single encode goes through the same linker
    mem.encode("t3")
    expected = canon(mem.list_all(), mem.list_all())
    assert any(m["tag"]["resonance_links"] for m in expected)
    stored = sql.list_all()
    assert canon(stored, stored) == expected
    assert other.list_all() == stored  # the changes log told the other connection
    sql.store.close()  # type: ignore[attr-defined]
    other.close()
    with SQLiteStore(path) as reopened:
        assert reopened.list_all() == stored
    conn = sqlite3.connect(path)
    try:
        ids = [r[0] for r in conn.execute("SELECT id FROM em_memories ORDER BY seq")]
        assert ids == [m.id for m in stored]
    finally:
        conn.close()


def test_failing_batch_leaves_the_file_and_cache_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_module, "_LINK_SEARCH_BLOCK", 16)
    vectors = _vectors(120, seed=1)
    path = tmp_path / "m.db"
    engine = _engine(SQLiteStore(path), vectors)
    engine.encode_batch([f"t{i}" for i in range(40)])
    before = engine.list_all()
    # a failure after some blocks were linked and written (the appraisal of item 70)
    calls = {"n": 0}

    class FailingAppraiser:
        def appraise(self, text: str, context: Any = None) -> Any:
            calls["n"] += 1
            if calls["n"] == 30:
                raise RuntimeError("appraiser down")
            from emotional_memory import AppraisalVector

            return AppraisalVector.neutral()

    engine.appraisal_engine = FailingAppraiser()  # type: ignore[assignment]
    with pytest.raises(RuntimeError, match="appraiser down"):
        engine.encode_batch([f"t{i}" for i in range(40, 120)])
    assert engine.list_all() == before
    engine.store.close()  # type: ignore[attr-defined]
    with SQLiteStore(path) as reopened:
        assert reopened.list_all() == before


def test_row_linker_needs_a_transaction(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    linker = store.row_linker(4)
    assert linker is not None
    with pytest.raises(RuntimeError, match=r"inside store\.transaction"):
        linker.save([])
    store.close()
