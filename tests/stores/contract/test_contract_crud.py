"""The store contract, part 1: save, get, update, delete, list_all, len and ``in``.

Every backend must answer exactly as the in-memory store (the oracle) after any
sequence of writes (a hypothesis state comparison), and the rules written out below
(checked on the oracle too, so the oracle is right): insertion order kept on replace,
a deleted memory saved again goes to the end, an unknown id for update is a KeyError,
an embedding of another dimension is a ValueError, neither changes anything, the
dimension is fixed by the first embedding and free again when none is left, an empty
embedding counts as none, NaN and infinite components and nested metadata come back
as saved.

Two differences between backends are part of the contract, asserted as such so that a
change in either is noticed: PostgreSQL and the vector databases keep the dimension of
the first embedding for good (a typed vector column, a collection's vector size:
``DIM_FIXED_FOR_GOOD``), and the vector databases refuse an empty embedding instead of
keeping it as none (``EMPTY_EMBEDDING_REFUSED``). Which error an update of an unknown
id with an embedding of another dimension raises (KeyError or ValueError) is left open.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emotional_memory.interfaces import MemoryStore
from emotional_memory.models import Memory
from support.backends import Backend, oracle_store
from support.memories import basic_memory as mem
from support.memories import memory_key as key

DIM_FIXED_FOR_GOOD = {"postgres", "qdrant", "chroma"}
EMPTY_EMBEDDING_REFUSED = {"qdrant", "chroma"}
PAGING = {"memory", "sqlite", "postgres"}  # the stores with list_page


def observe(store: Any, ids: list[str]) -> dict[str, Any]:
    """Everything the protocol shows of a store, for exact before/after comparisons."""
    return {
        "list_all": [key(m) for m in store.list_all()],
        "len": len(store),
        "dim": store.dim,
        "in": [i in store for i in ids],
        "get": [key(store.get(i)) for i in ids],
    }


def test_save_get_len_contains(backend: Backend) -> None:
    store = backend.new()
    assert isinstance(store, MemoryStore)
    a, b = mem("a", [1, 0]), mem("b")
    assert len(store) == 0 and store.get(a.id) is None and a.id not in store
    store.save(a)
    store.save(b)
    assert len(store) == 2
    assert a.id in store and b.id in store and "nope" not in store
    assert store.get(a.id) == a and store.get(b.id) == b and store.get("nope") is None
    assert store.list_all() == [a, b]


def test_save_refuses_a_non_memory(backend: Backend) -> None:
    store = backend.new()
    store.save(mem("a", [1, 0]))
    before = observe(store, [])
    with pytest.raises(TypeError, match="Memory"):
        store.save({"id": "x"})  # type: ignore[arg-type]
    assert observe(store, []) == before


def test_replace_keeps_the_position_and_a_new_save_goes_to_the_end(backend: Backend) -> None:
    store = backend.new()
    a, b, c = mem("a", [1.0, 0.0, 0.0]), mem("b"), mem("c", [0.0, 1.0, 0.5])
    for m in (a, b, c):
        store.save(m)
    b2 = b.model_copy(update={"content": "now embedded", "embedding": [0.0, 0.0, 1.0]})
    store.update(b2)  # the embedding appears
    a2 = a.model_copy(update={"embedding": None, "metadata": {"k": 1}})
    store.save(a2)  # save of a stored id replaces it; the embedding disappears
    assert store.list_all() == [a2, b2, c] and len(store) == 3
    assert store.delete(a.id) is True
    store.save(a)  # deleted, saved again: a new memory, last
    assert store.list_all() == [b2, c, a]


def test_update_of_an_unknown_id_is_a_keyerror_and_changes_nothing(backend: Backend) -> None:
    store = backend.new()
    kept = mem("kept", [1, 2])
    store.save(kept)
    missing = mem("missing", [2, 1])
    before = observe(store, [kept.id, missing.id])
    with pytest.raises(KeyError):
        store.update(missing)
    assert observe(store, [kept.id, missing.id]) == before


def test_delete_answers_whether_it_removed(backend: Backend) -> None:
    store = backend.new()
    a, b = mem("a", [1, 0]), mem("b", [0, 1])
    store.save(a)
    store.save(b)
    assert store.delete(a.id) is True
    assert store.delete(a.id) is False and store.delete("never") is False
    assert store.list_all() == [b] and len(store) == 1 and a.id not in store
    assert store.get(a.id) is None
    assert [m.id for m in store.search_by_embedding([1, 0], 5)] == [b.id]


def test_an_id_with_a_nul_or_a_lone_surrogate_is_an_unknown_id(backend: Backend) -> None:
    """PostgreSQL's text cannot hold NUL (nor UTF-8 a lone surrogate): such an id is in
    no store, never an error."""
    store = backend.new()
    a = mem("a", [1, 0])
    store.save(a)
    for odd in ("\x00", "a\x00b", a.id + "\x00", "\ud800", a.id + "\udfff"):
        assert store.get(odd) is None and odd not in store
        assert store.delete(odd) is False
    assert store.list_all() == [a]


@pytest.mark.parametrize("odd", [123, None, b"id", 1.5])
def test_an_id_that_is_not_a_str_is_a_type_error_naming_it(backend: Backend, odd: Any) -> None:
    """Every store answers a non-str id as the in-memory store does (a TypeError naming
    ``memory_id``), never with its database client's own error; nothing changes."""
    store = backend.new()
    a = mem("a", [1, 0])
    store.save(a)
    for call in (store.get, store.delete):
        with pytest.raises(TypeError, match="memory_id must be a str"):
            call(odd)
    assert store.list_all() == [a]


def test_metadata_and_odd_embeddings_come_back_as_saved(backend: Backend) -> None:
    store = backend.new()
    nested = mem("nested", [1.0, 2.0, 3.0],
                 metadata={"source": "chat", "n": 3, "x": 0.1, "nested": {"l": [1, "2", None]},
                           "flag": False, "unicode": "ünï ☂"})
    odd = mem("odd", [math.nan, 1.0, math.inf])
    tiny = mem("tiny", [1e-300, -1e300, 1 / 3])
    for m in (nested, odd, tiny):
        store.save(m)
    assert store.get(nested.id) == nested and store.get(tiny.id) == tiny
    got = store.get(odd.id)
    assert got is not None and got.embedding is not None
    assert math.isnan(got.embedding[0]) and got.embedding[1:] == [1.0, math.inf]
    assert key(got) == key(odd)


def test_an_empty_embedding_counts_as_none(backend: Backend) -> None:
    store = backend.new()
    empty = mem("empty", [])
    if backend.name in EMPTY_EMBEDDING_REFUSED:
        with pytest.raises(ValueError, match="empty"):
            store.save(empty)
        assert len(store) == 0
        return
    store.save(empty)
    assert store.dim is None and store.get(empty.id) == empty
    assert store.search_by_embedding([1.0, 2.0], 3) == []


def test_the_dimension_is_fixed_by_the_first_embedding(backend: Backend) -> None:
    store = backend.new()
    plain = mem("plain")
    store.save(plain)
    assert store.dim is None
    assert store.search_by_embedding([1.0, 2.0], 3) == []
    a = mem("a", [1, 2, 3])
    store.save(a)
    assert store.dim == 3
    before = observe(store, [plain.id, a.id])
    with pytest.raises(ValueError, match="embedding"):
        store.save(mem("bad", [1, 2]))
    with pytest.raises(ValueError, match="embedding"):
        store.save(a.model_copy(update={"embedding": [1.0, 2.0, 3.0, 4.0]}))
    with pytest.raises(ValueError, match="embedding"):
        store.update(plain.model_copy(update={"embedding": [1.0]}))
    assert observe(store, [plain.id, a.id]) == before
    assert store.delete(a.id)
    b = mem("b", [1, 2, 3, 4, 5])
    if backend.name in DIM_FIXED_FOR_GOOD:
        assert store.dim == 3
        with pytest.raises(ValueError, match="embedding"):
            store.save(b)
        return
    assert store.dim is None  # no embedding left: any dimension may come next
    store.save(b)
    assert store.dim == 5
    assert [m.id for m in store.search_by_embedding([1, 0, 0, 0, 0], 3)] == [b.id]


@pytest.mark.parametrize("field", ["timestamp", "last_retrieved", "window_opened_at"])
def test_a_naive_datetime_skipping_the_models_check_is_refused_unchanged(
    backend: Backend, field: str
) -> None:
    # model_copy skips the models' validators: a naive datetime reaches the store,
    # which refuses it naming the field and keeps no half-written row
    store = backend.new()
    kept = mem("kept", [1, 0, 0])
    store.save(kept)
    before = observe(store, [kept.id])
    naive = datetime(2020, 1, 1, 12)
    new = mem("new", [0, 1, 0])
    for bad in (
        new.model_copy(update={"tag": new.tag.model_copy(update={field: naive})}),
        kept.model_copy(update={"tag": kept.tag.model_copy(update={field: naive})}),
    ):
        with pytest.raises(ValueError, match=rf"{field}.*timezone"):
            store.save(bad)
    assert observe(store, [kept.id]) == before
    assert [m.id for m in store.list_all()] == [kept.id] and len(store) == 1


# ------------------------------------------------ any sequence of writes, vs the oracle

_EMBEDDINGS = st.one_of(
    st.none(), st.just([0.0] * 4), st.just([math.nan, 1.0, 0.0, 0.0]),
    st.lists(st.floats(-3, 3, allow_nan=False), min_size=4, max_size=4),
    st.lists(st.floats(-3, 3, allow_nan=False), min_size=3, max_size=3),  # another dim
)
_WRITE = st.one_of(
    st.tuples(st.just("save"), st.integers(0, 9), _EMBEDDINGS),
    st.tuples(st.just("update"), st.integers(0, 9), _EMBEDDINGS),
    st.tuples(st.just("delete"), st.integers(0, 9), st.none()),
)


def _apply(store: Any, write: str, memory: Memory) -> tuple[str, Any]:
    """Run one write; its outcome (the result, or that it raised KeyError or
    ValueError: which one, for an unknown id with a wrong dimension, is open)."""
    try:
        if write == "save":
            return "ok", store.save(memory)
        if write == "update":
            return "ok", store.update(memory)
        return "ok", store.delete(memory.id)
    except (KeyError, ValueError):
        return "raised", None


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(writes=st.lists(_WRITE, min_size=1, max_size=14))
def test_any_sequence_of_writes_leaves_what_the_oracle_holds(
    backend: Backend, writes: list[tuple[str, int, Any]]
) -> None:
    """Saves (new and replacing), updates (known and unknown ids) and deletes of ten
    ids, with embeddings missing, zero, NaN or of another dimension (an anchor memory
    keeps the dimension fixed): each write has the oracle's outcome and leaves the
    oracle's state; searches agree at the end."""
    store, oracle = backend.new(), oracle_store()
    anchor = mem("anchor", [1.0, 0.0, 0.0, 0.0])
    store.save(anchor)
    oracle.save(anchor)
    base = [mem(f"m{i}", None, metadata={"i": i}) for i in range(10)]
    ids = [anchor.id, *(m.id for m in base)]
    for step, (write, i, embedding) in enumerate(writes):
        memory = base[i].model_copy(update={"content": f"m{i} at {step}",
                                            "embedding": embedding})
        assert _apply(store, write, memory) == _apply(oracle, write, memory), (step, write)
        assert observe(store, ids) == observe(oracle, ids), step
    rng = np.random.default_rng(len(writes))
    for query in ([0.0] * 4, rng.normal(size=4).tolist()):
        for k in (1, 3, 11):
            assert [m.id for m in store.search_by_embedding(query, k)] == [
                m.id for m in oracle.search_by_embedding(query, k)]


def _with_surrogate(field: str) -> Memory:
    base = mem("fine", [1, 0])
    if field == "id":
        return base.model_copy(update={"id": "x\udc00"})
    if field == "content":
        return base.model_copy(update={"content": "a\ud800b"})
    return base.model_copy(update={"metadata": {"k": ["\ud800"]}})


@pytest.mark.parametrize("field", ["id", "content", "metadata"])
def test_a_lone_surrogate_is_kept_or_refused_naming_its_field(
    backend: Backend, field: str
) -> None:
    """A lone surrogate (valid in a Python str, not in UTF-8) is kept as the oracle
    keeps it, or refused by the write itself with an UnstorableValueError naming the
    field, nothing written (SQLite raised the driver's UnicodeEncodeError, naming no
    field)."""
    from emotional_memory.interfaces import UnstorableValueError

    store, oracle = backend.new(), oracle_store()
    kept = mem("kept", [0, 1])
    store.save(kept)
    odd = _with_surrogate(field)
    try:
        store.save(odd)
    except UnstorableValueError as exc:
        assert exc.field == field
        assert store.list_all() == [kept] and len(store) == 1
        return
    oracle.save(kept)
    oracle.save(odd)
    assert [key(m) for m in store.list_all()] == [key(m) for m in oracle.list_all()]
    assert key(store.get(odd.id)) == key(oracle.get(odd.id)) == key(odd)


@pytest.mark.parametrize(("offset", "limit", "error", "named"), [
    (-1, 2, ValueError, "offset"),
    (0, -1, ValueError, "limit"),
    (1.5, 2, TypeError, "offset"),
    (0, None, TypeError, "limit"),
    (True, 2, TypeError, "offset"),
])
def test_list_page_refuses_what_is_no_page_naming_the_argument(
    backend: Backend, offset: Any, limit: Any, error: type[Exception], named: str
) -> None:
    # a negative offset read as a Python slice (the last memories) on some backends,
    # an SQL error or "can't multiply" on others; the engine checks before calling, a
    # store's direct caller did not get the same answer from every backend
    store = backend.new()
    if backend.name not in PAGING:  # the vector databases page through list_all
        assert not callable(getattr(store, "list_page", None))
        return
    saved = [mem(f"m{i}", [1, float(i)]) for i in range(3)]
    for m in saved:
        store.save(m)
    with pytest.raises(error, match=named):
        store.list_page(offset, limit)
    assert store.list_page(1, 5) == saved[1:]
