"""The store contract, keyset paging: ``list_after(position, limit)`` walks the
memories of ``list_all`` in the same order, page by page from a cursor.

Checked on every backend that has it (the in-memory store, SQLite, PostgreSQL; the
vector databases have neither ``list_page`` nor ``list_after``: a whole-store walk
reads ``list_all`` once): the walk equals ``list_all`` whatever the page size; an
empty store gives an empty page; a limit that is no positive int and a cursor that
is no cursor are ValueErrors naming the argument; writes between pages (the
cursor's own memory deleted, a memory ahead updated, one saved) leave the walk in
step with ``list_all`` (an update keeps a memory's place: re-embedding updates every
memory it pages through); the in-memory store's compaction between pages keeps its
cursors; a durable store's cursor outlives the store object.
"""

from __future__ import annotations

from typing import Any

import pytest

from emotional_memory.stores.base import KeysetPagingStore
from emotional_memory.stores.in_memory import InMemoryStore
from support.backends import Backend
from support.memories import basic_memory as mem
from support.memories import memory_key as key

KEYSET = ("memory", "sqlite", "postgres")


def _filled(backend: Backend, n: int) -> Any:
    store = backend.new()
    for i in range(n):
        store.save(mem(f"memory {i}", None if i % 5 == 3 else [1.0, float(i)]))
    return store


def _walk(store: Any, limit: int, position: int | None = None) -> list[str]:
    """Every memory after ``position``, as keys, page by page."""
    out: list[str] = []
    while True:
        page, after = store.list_after(position, limit)
        assert len(page) <= limit
        if not page:
            assert after == position
            return out
        out += [key(m) for m in page]
        position = after


def test_list_after_is_list_all_page_by_page_on_every_backend(backend: Backend) -> None:
    store = _filled(backend, 23)
    if backend.name not in KEYSET:  # the vector databases: one list_all
        assert not isinstance(store, KeysetPagingStore)
        assert not callable(getattr(store, "list_after", None))
        return
    assert isinstance(store, KeysetPagingStore)
    everything = [key(m) for m in store.list_all()]
    for limit in (1, 4, 5, 23, 24, 1000):
        assert _walk(store, limit) == everything


@pytest.mark.parametrize("backend", KEYSET, indirect=True)
def test_an_empty_store_gives_an_empty_page(backend: Backend) -> None:
    store = backend.new()
    assert store.list_after(None, 10) == ([], None)
    assert store.list_after(7, 1) == ([], 7)


@pytest.mark.parametrize("backend", KEYSET, indirect=True)
@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "3", None])
def test_a_limit_that_is_no_positive_int_is_refused_naming_it(
    backend: Backend, limit: Any
) -> None:
    store = _filled(backend, 3)
    before = [key(m) for m in store.list_all()]
    with pytest.raises(ValueError, match="limit"):
        store.list_after(None, limit)
    assert [key(m) for m in store.list_all()] == before


@pytest.mark.parametrize("backend", KEYSET, indirect=True)
@pytest.mark.parametrize("position", [-1, "0", 1.0, True, [1], {"after": 1}])
def test_a_cursor_that_is_no_cursor_is_refused_naming_it(
    backend: Backend, position: Any
) -> None:
    store = _filled(backend, 3)
    with pytest.raises(ValueError, match="position"):
        store.list_after(position, 2)


@pytest.mark.parametrize("backend", KEYSET, indirect=True)
def test_writes_between_pages_keep_the_walk_in_step_with_list_all(backend: Backend) -> None:
    store = _filled(backend, 20)
    first, position = store.list_after(None, 5)
    ids = [m.id for m in store.list_all()]
    assert [m.id for m in first] == ids[:5]
    store.delete(ids[4])  # the cursor's own memory
    store.delete(ids[7])  # one ahead
    ahead = store.get(ids[12])
    assert ahead is not None
    store.update(ahead.model_copy(update={"content": "changed", "embedding": [2.0, 3.0]}))
    walked = store.get(ids[1])  # one behind: updated, not walked again
    assert walked is not None
    store.update(walked.model_copy(update={"content": "changed too"}))
    store.save(mem("new", [0.5, 0.5]))
    rest = _walk(store, 3, position)
    after = [key(m) for m in store.list_all()]
    assert rest == after[4:]  # list_all without the 4 memories walked before
    assert [k for k in rest if '"changed"' in k] and '"new"' in rest[-1]


def test_the_in_memory_cursor_outlives_a_compaction() -> None:
    store = InMemoryStore()
    for i in range(60):
        store.save(mem(f"memory {i}", [1.0, float(i)]))
    page, position = store.list_after(None, 10)
    ids = [m.id for m in store.list_all()]
    assert [m.id for m in page] == ids[:10]
    capacity_rows = store._size
    for memory_id in ids[5:45]:  # the cursor's memory among them: more dead than live
        store.delete(memory_id)
    assert store._size < capacity_rows  # compacted: the rows were renumbered
    assert [m.id for m in store.list_after(position, 100)[0]] == ids[45:]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_a_durable_cursor_outlives_the_store_object(backend: Backend) -> None:
    store = _filled(backend, 12)
    everything = [key(m) for m in store.list_all()]
    _, position = store.list_after(None, 5)
    store.delete(store.list_all()[4].id)  # the cursor's memory gone too
    store = backend.reopen(store)
    assert _walk(store, 2, position) == everything[5:]


def test_a_subclass_overriding_list_all_withdraws_keyset_paging() -> None:
    class Mine(InMemoryStore):
        def list_all(self) -> list[Any]:
            return list(reversed(super().list_all()))

    assert isinstance(InMemoryStore(), KeysetPagingStore)
    assert not isinstance(Mine(), KeysetPagingStore)
