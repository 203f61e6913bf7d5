"""Reliability on hostile input: linear-time regexes, unstorable metadata, unknown keys,
import checks, SQLite files and rows, smaller bad inputs named by field.

Every case uses the real thing (threads, processes, SQLite files in ``tmp_path``) and
is bounded in count; nothing asserts wall-clock time.
"""

from __future__ import annotations

import json
import math
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emotional_memory import (
    CoreAffect,
    EmotionalMemory,
    EmotionalMemoryConfig,
    InMemoryStore,
    QueryClassifierConfig,
    RetrievalConfig,
    SQLiteStore,
    query_classifier,
)
from emotional_memory._validation import MAX_METADATA_DEPTH
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.query_classifier import HeuristicQueryClassifier
from support.paths import ROOT

# ---------------------------------------------------------------- 6. linear-time regexes

def test_classifier_regexes_have_no_unbounded_wildcards() -> None:
    # Every pattern is literal words joined by \s+ (each scan is linear): no ".*",
    # ".+" or other wildcard that could rescan the text from each of many starts.
    patterns = [
        v for v in vars(query_classifier).values() if isinstance(v, re.Pattern)
    ] + [p for p in query_classifier._TEMPORAL_PATTERNS]
    assert patterns
    for p in patterns:
        assert ".*" not in p.pattern and ".+" not in p.pattern, p.pattern


def _did_oracle(text: str) -> bool:
    """The original's "did ... <order word>" rule, position by position: "did" at a word
    start, a space, at least one character, a space, the order word ending a word, no
    newline in between (ASCII text)."""
    def word_char(c: str) -> bool:
        return c.isascii() and (c.isalnum() or c == "_")

    low = text.lower()
    for i in range(len(text)):
        if low[i:i + 4] != "did " or (i and word_char(text[i - 1])):
            continue
        for j in range(i + 5, len(text)):
            if "\n" in text[i:j]:
                break
            for w in ("before", "after", "first", "last"):
                end = j + 1 + len(w)
                if (text[j] == " " and low[j + 1:end] == w
                        and (end == len(text) or not word_char(text[end]))):
                    return True
    return False


@given(st.lists(st.sampled_from(["did", "Did", "first", "last", "before", "after", "x",
                                 "didfirst", " ", " ", "\n", "-", "_", "9", "didn't"]),
                max_size=12))
def test_did_rule_matches_a_plain_oracle(parts: list[str]) -> None:
    text = "".join(parts)
    assert query_classifier._did_then_order_word(text) == _did_oracle(text)


def test_hostile_64kb_query_classifies() -> None:
    classifier = HeuristicQueryClassifier()
    assert classifier.classify("did " * 16384) == "open_domain"
    assert classifier.classify("did " * 16384 + "first") == "temporal"
    assert classifier.classify("how " * 16384) == "open_domain"


# ---------------------------------------------------------------- 7. hostile input


class _Opaque:
    pass


def _nested(depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for _ in range(depth - 1):
        out = {"x": out}
    return out


@pytest.mark.parametrize(
    ("metadata", "exc", "names"),
    [
        ({"obj": _Opaque()}, TypeError, "['obj'] is a _Opaque"),
        ({"a": [1, {"b": {1, 2}}]}, TypeError, "['a'][1]['b'] is a set"),
        ({1: "int key"}, TypeError, "key 1 of type int"),
        ({"deep": _nested(300)}, ValueError, "MAX_METADATA_DEPTH"),
        ({"s": "lone \ud800 surrogate"}, ValueError, "['s'] is not valid Unicode"),
    ],
)
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_encode_rejects_metadata_a_store_cannot_hold(
    metadata: dict[Any, Any], exc: type[Exception], names: str, kind: str, tmp_path: Path
) -> None:
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "m.db")
    engine = EmotionalMemory(store, HashingEmbedder(dim=8))
    engine.encode("kept", metadata={"ok": [1, 2.5, None, True, "s", {"n": {}}]})
    state = engine.get_state()
    with pytest.raises(exc, match=re.escape(names)):
        engine.encode("bad", metadata=metadata)
    with pytest.raises(exc, match=re.escape(names)):
        engine.encode_batch(["fine", "bad"], metadata=[None, metadata])
    assert len(engine) == 1 and engine.get_state() == state
    assert engine.export_memories()[0]["metadata"]["ok"][5] == {"n": {}}
    # Exactly at the documented limit still works.
    engine.encode("limit", metadata=_nested(MAX_METADATA_DEPTH))
    assert len(engine.export_memories()) == 2


def test_unknown_keys_are_rejected_naming_them() -> None:
    with pytest.raises(ValueError, match="base_weigths"):
        EmotionalMemoryConfig.model_validate(
            {"retrieval": {"base_weigths": [0.5, 0.1, 0.1, 0.1, 0.1, 0.1]}}
        )
    with pytest.raises(ValueError, match="dominanse"):
        CoreAffect(valence=0.1, arousal=0.2, dominanse=0.9)  # type: ignore[call-arg]
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8))
    snapshot = engine.save_state()
    with pytest.raises(ValueError, match="moood"):
        engine.load_state({**snapshot, "moood": snapshot["mood"]})
    with pytest.raises(ValueError, match="valance"):
        engine.load_state({**snapshot, "core_affect": {**snapshot["core_affect"], "valance": 0}})
    engine.encode("one")
    item = engine.export_memories()[0]
    fresh = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8))
    with pytest.raises(ValueError, match="contnet"):
        fresh.import_memories([{**item, "id": "other", "contnet": "typo"}])
    with pytest.raises(ValueError, match="retrival_count"):
        fresh.import_memories([{**item, "tag": {**item["tag"], "retrival_count": 3}}])
    assert len(fresh) == 0


@pytest.mark.parametrize("stamp", [123, None, ["2026"], "yesterday", "2026-13-40T00:00:00"])
def test_bad_history_timestamp_is_named_and_leaves_the_state(stamp: Any) -> None:
    # datetime.fromisoformat raised "argument must be str" / "Invalid isoformat
    # string", naming neither the history nor the point
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8))
    before = engine.save_state()
    bad = {**before, "_history": [["2026-01-01T00:00:00+00:00", 0.1, 0.2, 0.3],
                                  [stamp, 0.1, 0.2, 0.3]]}
    with pytest.raises((TypeError, ValueError), match=r"history\[1\]\.timestamp"):
        engine.load_state(bad)
    assert engine.save_state() == before


@pytest.mark.parametrize("stamp", ["9999-12-31T23:00:00-05:00", "0001-01-01T01:00:00+05:00"])
@pytest.mark.parametrize("where", ["mood", "history"])
def test_a_snapshot_time_outside_the_utc_years_is_named_and_leaves_the_state(
    tmp_path: Path, stamp: str, where: str
) -> None:
    # a valid datetime in its zone, but past year 9999 (or before year 1) in UTC: it
    # was restored, and with shared_state every later operation (set_affect, encode)
    # failed with a bare OverflowError "date value out of range"
    from support.shared_state_worker import engine_for

    engine = engine_for("sqlite", str(tmp_path / "shared.db"))
    before = engine.save_state()
    bad = {**before, "mood": {**before["mood"], "timestamp": stamp}} if where == "mood" else {
        **before, "_history": [[stamp, 0.1, 0.2, 0.3]]}
    field = r"mood\.timestamp" if where == "mood" else r"history\[0\]\.timestamp"
    with pytest.raises(ValueError, match=field + ".*years 1 to 9999 in UTC"):
        engine.load_state(bad)
    assert engine.save_state() == before
    engine.set_affect(CoreAffect(valence=0.1, arousal=0.2))
    engine.close()


@pytest.mark.parametrize(("point", "kept"), [
    ((1e308, 0.2, 0.5), (1.0, 0.2, 0.5)), ((-1e308, -5.0, 9.0), (-1.0, 0.0, 1.0)),
])
def test_history_points_out_of_range_are_clamped_as_core_affects(
    point: tuple[float, float, float], kept: tuple[float, float, float]
) -> None:
    # a hand-edited snapshot's history point was kept as written: 1e308 then -1e308
    # 0.1 ms apart made the next set_affect (and encode) fail with a bare pydantic
    # "dd_valence must be finite" from AffectiveMomentum, naming no snapshot
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8))
    snapshot = engine.save_state()
    engine.load_state({**snapshot, "_history": [
        ["2026-01-01T00:00:00+00:00", -point[0], 0.1, 0.5],
        ["2026-01-01T00:00:00.0001+00:00", *point]]})
    assert engine.get_state().history[-1][1:] == kept
    engine.set_affect(CoreAffect(valence=0.1, arousal=0.2, dominance=0.5))
    assert all(math.isfinite(x) for x in engine.get_state().momentum.model_dump().values())
    engine.encode("after a hand-edited history")


def test_the_originals_snapshot_config_and_export_still_load() -> None:
    # Keys as emotional_memory 0.18.1 writes them: state snapshots keep the history
    # under "_history"; memory exports and configs use the same field names as ours.
    original_snapshot = {
        "core_affect": {"valence": 0.2, "arousal": 0.4, "dominance": 0.5},
        "momentum": {"d_valence": 0.0, "d_arousal": 0.0, "d_dominance": 0.0,
                     "dd_valence": 0.0, "dd_arousal": 0.0, "dd_dominance": 0.0},
        "mood": {"valence": 0.0, "arousal": 0.0, "dominance": 0.5, "inertia": 0.5,
                 "timestamp": "2026-01-01T00:00:00Z"},
        "_history": [],
    }
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8))
    engine.load_state(original_snapshot)
    assert engine.get_state().core_affect.valence == 0.2
    engine.load_state(engine.save_state())  # and our own
    config = EmotionalMemoryConfig().model_dump(mode="json")
    assert EmotionalMemoryConfig.model_validate(config) == EmotionalMemoryConfig()
    engine.encode("exported")
    again = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8))
    assert again.import_memories(engine.export_memories()) == 1


def test_training_cli_rejects_a_misspelt_config(tmp_path: Path) -> None:
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"retrieval": {"base_weigths": [0.5, 0.1, 0.1, 0.1, 0.1, 0.1]}}))
    root = ROOT
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), *sys.path]))
    result = subprocess.run(
        [sys.executable, "-m", "training", "evaluate", "--config", str(typo), "--quiet"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )
    assert result.returncode == 2
    assert "base_weigths" in result.stderr and str(typo) in result.stderr


# ---------------------------------------------------------------- 8. import checks


def test_import_applies_encodes_checks() -> None:
    config = EmotionalMemoryConfig(max_content_length=20)
    donor = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8))
    first = donor.encode("rain on the river")
    donor.encode("rain on the bridge")  # links both ways
    data = donor.export_memories()
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8), config=config)
    bad_cases = {
        "content": [{**data[0], "content": "x" * 21}],
        "id": [{**data[0], "id": ""}],
        "source_id": [{**data[0], "id": "renamed"}],  # its links leave another memory
        "target_id": [data[1]],  # links to a memory neither imported nor stored
        "more than once": [data[0], data[0]],
        "metadata": [{**data[0], "metadata": {"deep": _nested(100)}}],
    }
    for field, payload in bad_cases.items():
        with pytest.raises(ValueError, match=re.escape(field)):
            engine.import_memories(payload)
        assert len(engine) == 0
    assert engine.import_memories(data) == 2
    assert engine.get(first.id) == donor.get(first.id)


def test_an_id_repeated_in_an_import_is_named_by_both_indices() -> None:
    donor = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8))
    donor.encode("rain on the river")
    (record,) = donor.export_memories()
    other = {**record, "id": "other", "tag": {**record["tag"], "resonance_links": []}}
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8))
    with pytest.raises(ValueError, match=r"data\[2\]\.id 'other' is also data\[0\]\.id"):
        engine.import_memories([other, record, other])
    assert len(engine) == 0


def test_an_imported_memory_object_is_checked_as_its_dict_would_be() -> None:
    """``import_memories`` takes ``Memory`` objects too; one built without validation
    (``model_copy(update=...)``) was stored as it came: a NaN consolidation, a
    negative retrieval count, a scope that is a str."""
    donor = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8))
    good = donor.encode("rain on the river")
    tag = good.tag
    bad_cases = {
        "tag.consolidation_strength": {"tag": tag.model_copy(
            update={"consolidation_strength": math.nan})},
        "tag.retrieval_count": {"tag": tag.model_copy(update={"retrieval_count": -3})},
        "scope": {"scope": "alice"},
        "tag.core_affect.valence": {"tag": tag.model_copy(update={
            "core_affect": tag.core_affect.model_copy(update={"valence": math.inf})})},
    }
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8))
    for field, update in bad_cases.items():
        with pytest.raises((ValueError, TypeError), match=r"data\[0\]") as caught:
            engine.import_memories([good.model_copy(update=update)])
        assert field.rsplit(".", 1)[-1] in str(caught.value)
        assert len(engine) == 0
    assert engine.import_memories([good]) == 1
    assert engine.get(good.id) == donor.get(good.id)


def test_weights_whose_sum_overflows_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"base_weights.*MAX_WEIGHT_TOTAL"):
        RetrievalConfig(base_weights=[1e308] * 6)
    with pytest.raises(ValueError, match=r"routed_weights.*MAX_WEIGHT_TOTAL"):
        QueryClassifierConfig(routed_weights={"temporal": [1e308] * 6})
    # Large but summable weights still normalise to finite, non-zero weights.
    config = EmotionalMemoryConfig(retrieval=RetrievalConfig(base_weights=[1e299] * 6))
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8), config=config)
    weights = engine.current_weights("x")
    assert weights.sum() == pytest.approx(1.0) and (weights > 0).all()


# ---------------------------------------------------------------- 8. SQLite input


def test_sqlite_keeps_embedding_values_beyond_float32(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    engine = EmotionalMemory(SQLiteStore(path), HashingEmbedder(dim=8))
    engine.encode("kept")
    big = [0.1, 0.2, 0.3, 1e39, 0.0, 0.0, 0.0, 0.0]
    engine.import_memories([{**engine.export_memories()[0], "id": "big", "embedding": big}])
    engine.close()
    with SQLiteStore(path) as store:
        got = store.get("big")
        assert got is not None and got.embedding == big


@pytest.mark.parametrize("path", ["", "file:x.db?mode=memory"])
def test_sqlite_refuses_paths_that_keep_nothing(path: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="path"):
        SQLiteStore(path)
    assert list(tmp_path.iterdir()) == []  # no stray file either


def test_sqlite_a_nul_in_the_path_is_named(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # it was sqlite3's bare "embedded null byte", naming neither the path nor the field
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"path 'a\\x00b\.db' holds a NUL character"):
        SQLiteStore("a\x00b.db")
    assert list(tmp_path.iterdir()) == []


def test_sqlite_on_a_foreign_database_changes_nothing(tmp_path: Path) -> None:
    foreign = tmp_path / "app.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.execute("CREATE TABLE memories (when_ TEXT, what TEXT)")  # not ours
    conn.execute("INSERT INTO users VALUES ('ada')")
    conn.commit()
    conn.close()
    before = foreign.read_bytes()
    with pytest.raises(ValueError, match=r"app\.db"):
        SQLiteStore(foreign)
    assert foreign.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]  # no -wal / -shm


def test_sqlite_corruption_errors_name_the_file(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(sqlite3.DatabaseError, match=r"junk\.db"):
        SQLiteStore(junk)


def test_sqlite_rows_are_validated_on_load(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    engine = EmotionalMemory(SQLiteStore(path), HashingEmbedder(dim=8))
    memory = engine.encode("text")
    engine.close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE em_memories SET content = ? WHERE id = ?", (b"\x00\x01", memory.id))
    conn.commit()
    conn.close()
    with pytest.raises(ValueError, match=re.escape(memory.id)):
        SQLiteStore(path)


# ---------------------------------------------------------------- 11. smaller items


def test_smaller_bad_inputs_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="store"):
        EmotionalMemory(None, HashingEmbedder(dim=8))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="embedder"):
        EmotionalMemory(InMemoryStore(), None)  # type: ignore[arg-type]
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8))
    with pytest.raises(TypeError, match="contents"):
        engine.encode_batch(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="metadata"):
        engine.encode_batch(["a"], metadata={"k": 1})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"data\[0\]"):
        engine.import_memories([1])  # type: ignore[list-item]
    missing = tmp_path / "no" / "such" / "dir" / "x.db"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        SQLiteStore(missing)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_lone_surrogate_content_is_rejected_by_every_store(kind: str, tmp_path: Path) -> None:
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "m.db")
    engine = EmotionalMemory(store, HashingEmbedder(dim=8))
    with pytest.raises(ValueError, match="content"):
        engine.encode("broken \ud83d text")
    with pytest.raises(ValueError, match=r"contents\[1\]"):
        engine.encode_batch(["fine", "broken \udc00"])
    assert len(engine) == 0
    engine.encode("emoji 😀 fine")
    assert len(engine) == 1


def test_training_fit_checks_its_output_folder_first(tmp_path: Path) -> None:
    root = ROOT
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), *sys.path]))
    out = tmp_path / "missing" / "x.json"
    result = subprocess.run(
        [sys.executable, "-m", "training", "fit", "--dataset", str(tmp_path / "none.json"),
         "--out", str(out), "--quiet"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )
    assert result.returncode == 2
    assert "missing" in result.stderr and "none.json" not in result.stderr
