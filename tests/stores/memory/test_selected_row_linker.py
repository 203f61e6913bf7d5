"""A confined view of the in-memory or SQLite store links through its row linker
(``SelectedRows.row_linker``: no ``Memory`` per candidate, no whole-memory update per
link). Its answers are checked against a separate engine over every backend by the
contract suite (``tests/stores/contract/test_contract_scoped_links.py``)."""

from __future__ import annotations

from pathlib import Path

from emotional_memory import InMemoryStore, SQLiteStore
from emotional_memory.stores._shared.rows.linking import SelectedRowLinker
from support.scoped_links import clustered_vectors, small_link_engine


def test_a_view_links_through_its_row_linker(tmp_path: Path) -> None:
    vectors = clustered_vectors(40, seed=3)
    for store in (InMemoryStore(), SQLiteStore(tmp_path / "m.db")):
        engine = small_link_engine(store, vectors)
        engine.encode("t39")  # the root's memory, which the view does not see
        view = engine.scoped("a")
        linker = view._linker(batched=True)
        inner = getattr(linker, "_inner", linker)  # SQLite wraps it to write its rows
        assert isinstance(inner, SelectedRowLinker)
        memories = view.encode_batch([f"t{i}" for i in range(30)])
        assert sum(len(m.tag.resonance_links) for m in memories) > 0
        root_id = engine.list_all()[0].id
        assert all(lk.target_id != root_id for m in view.list_all()
                   for lk in m.tag.resonance_links)
