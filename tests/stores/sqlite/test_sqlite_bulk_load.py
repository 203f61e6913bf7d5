"""SQLiteStore's records and bulk reopen.

A reopened store decodes the whole table column by column (``decode_rows`` +
``fill_rows``), not one ``Memory`` per row. The oracle is an ``InMemoryStore`` fed the
same memories one ``save`` at a time: the reopened cache must hold the same rows
array for array (tag blocks, embedding matrix, norms, scales, side matrix, links,
labels, scopes, expiry), and hand back equal memories. Also: the row written from the
cache's columns (``row_params``, the batched linker's path) equals the row written
from the memory (``memory_params``); a version 2 file is upgraded to records in its
opening transaction, float64 embeddings staying exact; a malformed record names its
memory.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emotional_memory import EmotionalMemory, InMemoryStore, SQLiteStore
from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.appraisal import AppraisalVector
from emotional_memory.categorize import categorize_affect
from emotional_memory.models import LINK_TYPES, EmotionalTag, Memory, ResonanceLink
from emotional_memory.mood import MoodField
from emotional_memory.replay import TickClock
from emotional_memory.stores._shared.records import fits
from emotional_memory.stores.sqlite import records as _sqlite_records
from emotional_memory.stores.sqlite import store as sqlite_module

T0 = datetime(2026, 2, 1, tzinfo=UTC)
unit = st.floats(0.0, 1.0, allow_nan=False)
signed = st.floats(-1.0, 1.0, allow_nan=False)
small = st.floats(-5.0, 5.0, allow_nan=False)
SCOPES = [(), (), ("team",), ("team", "ana"), ("é",)]


@st.composite
def moments(draw: Any, compact: bool) -> datetime:
    moment = T0 + timedelta(microseconds=draw(st.integers(-10**13, 10**13)))
    if not compact and draw(st.integers(0, 4)) == 0:
        return moment.astimezone(timezone(timedelta(hours=2)))  # kept whole
    return moment


@st.composite
def embeddings(draw: Any) -> list[float] | None:
    kind = draw(st.sampled_from(["f32", "f32", "f64", "none", "empty", "tiny", "huge"]))
    if kind == "none":
        return None
    if kind == "empty":
        return []
    values = draw(st.lists(st.floats(-1e3, 1e3, allow_nan=False, width=32), min_size=4,
                           max_size=4))
    if kind == "f64":  # float64 values float32 cannot hold: kept aside
        return [v + 1e-9 for v in values]
    if kind == "tiny":  # a norm below float32's range: kept aside, rescored exactly
        return [v * 1e-25 for v in values]
    if kind == "huge":
        return [v * 1e25 for v in values]
    return values


@st.composite
def bank(draw: Any, compact: bool) -> list[Memory]:
    """Memories ``m0 .. m{n-1}`` (links to each other and to one never stored)."""
    n = draw(st.integers(1, 12))
    ids = [f"m{i}" for i in range(n)]
    out = []
    for mid in ids:
        affect = CoreAffect(valence=draw(signed), arousal=draw(unit), dominance=draw(unit))
        links = [
            ResonanceLink(
                source_id=mid if compact or draw(st.integers(0, 5)) else "elsewhere",
                target_id=draw(st.sampled_from([*ids, "gone"])),
                strength=draw(unit),
                link_type=draw(st.sampled_from(LINK_TYPES)),
            )
            for _ in range(draw(st.integers(0, 5)))
        ]
        tag = EmotionalTag(
            core_affect=affect,
            momentum=AffectiveMomentum(
                d_valence=draw(small), d_arousal=draw(small), d_dominance=draw(small),
                dd_valence=draw(small), dd_arousal=draw(small), dd_dominance=draw(small),
            ),
            mood_snapshot=MoodField(
                valence=draw(signed), arousal=draw(unit), dominance=draw(unit),
                inertia=draw(unit), timestamp=draw(moments(compact)),
            ),
            appraisal=draw(st.none() | st.builds(
                AppraisalVector, novelty=signed, goal_relevance=signed, coping_potential=unit,
                norm_congruence=signed, self_relevance=unit,
            )),
            resonance_links=links,
            timestamp=draw(moments(compact)),
            consolidation_strength=draw(unit),
            last_retrieved=draw(st.none() | moments(compact)),
            retrieval_count=draw(st.integers(0, 10**6)),
            reconsolidation_count=draw(st.integers(0, 50)),
            pending_appraisal=draw(st.booleans()),
            window_opened_at=draw(st.none() | moments(compact)),
            expected_affect=draw(st.none() | st.builds(
                CoreAffect, valence=signed, arousal=unit, dominance=unit
            )),
            prediction_learning_rate=draw(unit),
            emotion_label=categorize_affect(affect) if draw(st.booleans()) else None,
        )
        metadata = draw(st.dictionaries(
            st.sampled_from(["a", "b", "ключ"]),
            st.integers(-10**20, 10**20) | st.text(max_size=3) | st.floats(allow_nan=False)
            | st.lists(st.integers(), max_size=2),
            max_size=2,
        ))
        out.append(Memory(
            id=mid, content=draw(st.text(max_size=10)), embedding=draw(embeddings()),
            tag=tag, metadata=metadata, scope=draw(st.sampled_from(SCOPES)),
            expires_at=draw(st.none() | moments(True)),
        ))
    return out


def _same_rows(got: InMemoryStore, want: InMemoryStore) -> None:
    """Every array and list of two caches' rows equal (``want``: saved one by one)."""
    n = want._size
    assert got._size == n and got._dead == want._dead == 0
    assert got._row_ids == want._row_ids and got._row_of == want._row_of
    assert got._content == want._content and got._meta == want._meta
    assert got._links == want._links
    assert set(got._whole) == set(want._whole)
    for name in want._ROW_ARRAYS:
        assert np.array_equal(getattr(got, name)[:n], getattr(want, name)[:n], equal_nan=True), (
            name
        )
    assert got._dim == want._dim
    assert np.array_equal(got._matrix[:n], want._matrix[:n])
    assert (got._n_embedded, got._n_special) == (want._n_embedded, want._n_special)
    rows = np.flatnonzero(want._has[:n])
    assert np.array_equal(got._exact_rows(rows), want._exact_rows(rows), equal_nan=True)
    for store in (got, want):  # labels and scopes by value (codes are per store)
        store.__dict__["_test_labels"] = [
            store._labels.triple(int(code)) if code >= 0 else None
            for code in store._tagi[:n, 7]
        ]
    assert got.__dict__["_test_labels"] == want.__dict__["_test_labels"]
    assert [got._place_of(r) if got._placed else ((), None) for r in range(n)] == [
        want._place_of(r) if want._placed else ((), None) for r in range(n)
    ]
    assert got._any_expiry == want._any_expiry


def _oracle(memories: list[Memory]) -> InMemoryStore:
    store = InMemoryStore()
    for memory in memories:
        store.save(memory)
    return store


@pytest.fixture
def fill_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many rows each bulk fill of a reopen wrote."""
    calls: list[int] = []
    real = sqlite_module.fill_rows

    def spy(cache: InMemoryStore, block: Any) -> None:
        calls.append(len(block.ids))
        real(cache, block)

    monkeypatch.setattr(sqlite_module, "fill_rows", spy)
    return calls


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(memories=bank(compact=True))
def test_bulk_reopen_equals_saving_each_memory(
    tmp_path_factory: pytest.TempPathFactory, fill_calls: list[int], memories: list[Memory]
) -> None:
    assert all(fits(m) for m in memories)
    path = tmp_path_factory.mktemp("bulk") / "m.db"
    with SQLiteStore(path) as store:
        for memory in memories:
            store.save(memory)
    fill_calls.clear()
    with SQLiteStore(path) as reopened:
        assert fill_calls == [len(memories)]  # the bulk path, not one memory per row
        oracle = _oracle(memories)
        _same_rows(reopened._cache, oracle)
        listed = reopened.list_all()
        assert listed == memories
        assert [m.model_dump_json() for m in listed] == [m.model_dump_json() for m in memories]
        for query in ([1.0, 0.0, 0.0, 0.0], [0.3, -2.0, 1e-30, 5.0]):
            if oracle.dim is not None:
                assert [m.id for m in reopened.search_by_embedding(query, 5)] == [
                    m.id for m in oracle.search_by_embedding(query, 5)
                ]
        now = T0 + timedelta(days=3)
        ids, cols = reopened.columns(now)
        want_ids, want_cols = oracle.columns(now)
        assert ids == want_ids
        for field, value in vars(want_cols).items():
            assert np.array_equal(np.asarray(getattr(cols, field)), np.asarray(value),
                                  equal_nan=True), field


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(memories=bank(compact=False))
def test_memories_kept_as_json_reopen_one_by_one_and_equal(
    tmp_path_factory: pytest.TempPathFactory, memories: list[Memory]
) -> None:
    """Odd shapes (UTC offsets, links leaving another memory) keep their JSON tag;
    a table holding any reopens through the per-row path, with the same result."""
    path = tmp_path_factory.mktemp("whole") / "m.db"
    with SQLiteStore(path) as store:
        for memory in memories:
            store.save(memory)
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT id, tag, rec FROM em_memories ORDER BY seq").fetchall()
    conn.close()
    for memory, (memory_id, tag_json, rec) in zip(memories, rows, strict=True):
        assert memory_id == memory.id
        if fits(memory):
            assert tag_json == "" and len(rec) == _sqlite_records.REC_BYTES
        else:
            assert rec is None
            assert EmotionalTag.model_validate_json(tag_json) == memory.tag
    with SQLiteStore(path) as reopened:
        listed = reopened.list_all()
        assert listed == memories
        assert [m.model_dump_json() for m in listed] == [m.model_dump_json() for m in memories]
        oracle = _oracle(memories)
        assert [m.id for m in reopened.search_by_embedding([1.0, 2.0, 0.0, -1.0], 4)] == (
            [m.id for m in oracle.search_by_embedding([1.0, 2.0, 0.0, -1.0], 4)]
            if oracle.dim is not None else []
        )


@settings(max_examples=60, deadline=None)
@given(memories=bank(compact=False))
def test_row_from_the_cache_equals_row_from_the_memory(memories: list[Memory]) -> None:
    cache = _oracle([_sqlite_records.memory_params(m)[0] for m in memories])
    for memory in memories:
        params = _sqlite_records.row_params(cache, cache._row_of[memory.id])
        want = _sqlite_records.memory_params(memory)[1]
        if fits(memory):
            assert params == want
        else:
            assert params is None and want[_sqlite_records.REC_AT] is None  # kept whole: a JSON tag


def _row(memory: Memory) -> tuple[Any, ...]:
    return _sqlite_records.memory_params(memory)[1]


def _compact_memory(mid: str, **tag: Any) -> Memory:
    return Memory(
        id=mid, content=mid, embedding=[1.0, 0.5],
        tag=EmotionalTag(
            core_affect=CoreAffect(valence=0.1, arousal=0.2, dominance=0.3),
            momentum=AffectiveMomentum(),
            mood_snapshot=MoodField(valence=0.0, arousal=0.5, dominance=0.5, inertia=0.5,
                                    timestamp=T0),
            timestamp=T0, consolidation_strength=0.5, **tag,
        ),
    )


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("rec", b"\x00" * 7, "rec is not a record"),
        ("link_data", b"\x00" * 4, "link_ids and link_data do not hold links"),
        ("link_ids", '["m0", 3]', "link_ids and link_data do not hold links"),
        ("label", '["joy"]', "label .* is not \\[primary, intensity, name\\]"),
        ("link_ids", '["m0"], ["m0"]', "Extra data"),  # one parse of every row must not mix rows
        ("metadata", '{"a": 1}, {"b": 2}', "Extra data"),
        ("metadata", "[1]", "metadata is a list, not a JSON object"),
        # no link type 9
        ("link_data", b"\x00" * 8 + b"\x09", "link_ids and link_data do not hold links"),
        # hand-edited: a scope that is not a list, or nested past the parser's stack;
        # an expiry past what a datetime holds (it used to fail every later read)
        ("scope", '"abc"', "scope '\"abc\"' is not a list of non-empty strings"),
        ("scope", "[" * 10_000 + "]" * 10_000, "scope nests too deeply"),
        ("expires_at", 10**18, "expires_at 1000000000000000000 is out of range"),
        ("expires_at", -(10**18), "expires_at -1000000000000000000 is out of range"),
    ],
)
def test_a_malformed_record_names_its_memory(
    tmp_path: Path, column: str, value: Any, message: str
) -> None:
    path = tmp_path / "m.db"
    links = [ResonanceLink(source_id="bad", target_id="m0", strength=0.5,
                           link_type="semantic")]
    with SQLiteStore(path) as store:
        store.save(_compact_memory("m0"))
        label = categorize_affect(CoreAffect(valence=0.8, arousal=0.6, dominance=0.5))
        store.save(_compact_memory("bad", resonance_links=links, emotion_label=label))
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(f"UPDATE em_memories SET {column} = ? WHERE id = 'bad'", (value,))
    conn.close()
    with pytest.raises(ValueError, match=f"memory 'bad' has an invalid row: {message}"):
        SQLiteStore(path)


@pytest.mark.parametrize("slot", ["I_TIMESTAMP", "I_MOOD_TIME", "I_LAST_RETRIEVED", "I_WINDOW"])
def test_a_record_time_a_datetime_cannot_hold_names_its_memory(tmp_path: Path, slot: str) -> None:
    # it used to load, then fail every get / list_all / retrieve with an OverflowError
    from emotional_memory.stores._shared import records as shared

    path = tmp_path / "m.db"
    with SQLiteStore(path) as store:
        store.save(_compact_memory("m0"))
        store.save(_compact_memory("bad"))
    conn = sqlite3.connect(path)
    with conn:
        (rec,) = conn.execute("SELECT rec FROM em_memories WHERE id = 'bad'").fetchone()
        at = 8 * (_sqlite_records.REC_F + getattr(shared, slot))
        rec = rec[:at] + (10**18).to_bytes(8, "little", signed=True) + rec[at + 8:]
        conn.execute("UPDATE em_memories SET rec = ? WHERE id = 'bad'", (rec,))
    conn.close()
    with pytest.raises(ValueError, match="memory 'bad' has an invalid row: rec holds a time"):
        SQLiteStore(path)


_V2_TABLE = """CREATE TABLE em_memories (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, content TEXT NOT NULL,
    embedding BLOB, dim INTEGER, tag TEXT NOT NULL, metadata TEXT NOT NULL,
    scope TEXT NOT NULL DEFAULT '[]', expires_at INTEGER)"""


def _write_v2(path: Path, memories: list[Memory]) -> None:
    """A file as schema version 2 wrote it (tags as JSON, embeddings as blobs)."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO meta VALUES ('schema_version', '2')")
        conn.execute(_V2_TABLE)
        conn.execute("CREATE TABLE changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                     "id TEXT NOT NULL, deleted INTEGER NOT NULL)")
        for m in memories:
            emb = m.embedding
            wide = np.asarray(emb, dtype="<f8") if emb is not None else None
            blob = None
            if wide is not None:
                narrow = wide.astype("<f4")
                blob = (narrow if np.array_equal(narrow, wide) else wide).tobytes()
            conn.execute(
                "INSERT INTO em_memories (id, content, embedding, dim, tag, metadata, scope, "
                "expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (m.id, m.content, blob, None if emb is None else len(emb),
                 m.tag.model_dump_json(), json.dumps(m.metadata), json.dumps(list(m.scope)),
                 None if m.expires_at is None
                 else (m.expires_at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(
                     microseconds=1)),
            )
    conn.close()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(memories=bank(compact=False))
def test_a_version_2_file_is_upgraded_to_records(
    tmp_path_factory: pytest.TempPathFactory, fill_calls: list[int], memories: list[Memory]
) -> None:
    path = tmp_path_factory.mktemp("v2") / "m.db"
    _write_v2(path, memories)
    with SQLiteStore(path) as store:
        assert store.schema_version == 3
        assert store.list_all() == memories
        # float64 embeddings (the original's, migrated) stay float64, exactly
        for got, want in zip(store.list_all(), memories, strict=True):
            assert np.asarray(got.embedding).tobytes() == np.asarray(want.embedding).tobytes()
    conn = sqlite3.connect(path)
    recs = [r for (r,) in conn.execute("SELECT rec FROM em_memories ORDER BY seq")]
    conn.close()
    # every memory of the compact shape (after parsing "Z" as UTC) is a record now
    assert [r is not None for r in recs] == [
        fits(_sqlite_records.utc_memory(m)) for m in memories
    ]
    fill_calls.clear()
    with SQLiteStore(path) as again:
        assert again.list_all() == memories
        assert fill_calls == ([len(memories)] if all(r is not None for r in recs) else [])


def test_encode_batch_writes_backward_links_as_link_updates(tmp_path: Path) -> None:
    """Old rows that only gain backward links are written as one UPDATE of their
    link columns (not a whole row); the reopened file equals the in-memory store."""
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((300, 16)).astype(np.float32)

    class Table:
        def embed(self, text: str) -> list[float]:
            out: list[float] = vectors[int(text[1:])].tolist()
            return out

        def embed_batch(self, texts: list[str]) -> list[list[float]]:
            return [self.embed(t) for t in texts]

    clock = {"clock": TickClock(T0, timedelta(seconds=1))}
    path = tmp_path / "m.db"
    sql = EmotionalMemory(SQLiteStore(path), Table(), **clock)  # type: ignore[arg-type]
    mem = EmotionalMemory(InMemoryStore(), Table(), clock=TickClock(T0, timedelta(seconds=1)))
    statements: list[str] = []
    sql.store._connection().set_trace_callback(statements.append)  # type: ignore[attr-defined]
    for lo in range(0, 300, 100):
        sql.encode_batch([f"t{i}" for i in range(lo, lo + 100)])
        mem.encode_batch([f"t{i}" for i in range(lo, lo + 100)])
    assert any(s.startswith("UPDATE em_memories SET link_ids") for s in statements)
    sql.store.close()  # type: ignore[attr-defined]
    with SQLiteStore(path) as reopened:
        got = reopened.list_all()
    want = mem.list_all()
    position = {m.id: i for i, m in enumerate(got)}
    want_position = {m.id: i for i, m in enumerate(want)}
    assert [
        (m.content, m.embedding, m.tag.model_copy(update={"resonance_links": []}),
         [(position[lk.target_id], lk.strength, lk.link_type) for lk in m.tag.resonance_links])
        for m in got
    ] == [
        (m.content, m.embedding, m.tag.model_copy(update={"resonance_links": []}),
         [(want_position[lk.target_id], lk.strength, lk.link_type)
          for lk in m.tag.resonance_links])
        for m in want
    ]
