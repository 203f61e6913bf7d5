"""A researcher's own dataset that is slightly wrong: each fault is refused in one
line naming the file, the place and the field, before any replay, and the replay of a
dict built in code names the event the engine refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emotional_memory import EmotionalMemoryConfig
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.replay import LookupEmbedder, load_dataset, replay_dataset


def _tiny() -> dict[str, Any]:
    """Two scenarios, one session each: three labelled events, one query."""
    scenarios = []
    for s in range(2):
        events = [{"memory_id": f"m{s}{i}", "content": f"event {i} of scenario {s}",
                   "valence": 0.1 * i, "arousal": 0.2} for i in range(3)]
        query = {"query_id": f"q{s}", "query": "event 1", "expected_memory_ids": [f"m{s}1"]}
        scenarios.append({"scenario_id": f"s{s}",
                          "sessions": [{"session_id": "a", "events": events,
                                        "queries": [query]}]})
    return {"default_top_k": 2, "scenarios": scenarios}


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(data), encoding="utf-8")  # NaN and lone surrogates pass
    return path


def _event(data: dict[str, Any]) -> dict[str, Any]:
    event: dict[str, Any] = data["scenarios"][1]["sessions"][0]["events"][2]
    return event


@pytest.mark.parametrize(("edit", "field"), [
    (lambda d: _event(d).update(metadata={"score": float("nan")}), "metadata"),
    (lambda d: _event(d).update(metadata={"tags": ["ok", "\ud800"]}), "metadata"),
    (lambda d: _event(d).update(content="bad \udcff byte"), "content"),
    (lambda d: d["scenarios"][1]["sessions"][0]["queries"][0].update(query="q \ud800"),
     "query"),
])
def test_values_the_engine_refuses_are_named_at_load(
        tmp_path: Path, edit: Any, field: str) -> None:
    data = _tiny()
    edit(data)
    with pytest.raises(ValueError) as err:
        load_dataset(_write(tmp_path, data))
    message = str(err.value)
    assert "data.json" in message and "scenarios[1]" in message and field in message
    assert "\n" not in message


def test_a_replay_names_the_event_the_engine_refuses() -> None:
    data = _tiny()
    _event(data)["content"] = "a much longer event than the limit allows"
    config = EmotionalMemoryConfig(max_content_length=30)
    with pytest.raises(ValueError) as err:
        replay_dataset(data, HashingEmbedder(dim=16), config)
    message = str(err.value)
    assert "'s1'" in message and "events[2]" in message and "'m12'" in message
    assert "max_content_length" in message


class _GrowingEmbedder(HashingEmbedder):
    """Answers one more dimension from its third text on."""

    calls = 0

    def embed(self, text: str) -> list[float]:
        self.calls += 1
        vector = super().embed(text)
        return vector if self.calls < 3 else [*vector, 0.0]


class _KeyedError(ValueError):
    """A user class that writes its own message from an attribute."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key

    def __str__(self) -> str:
        return f"bad key {self.key}"


class _FailingEmbedder(HashingEmbedder):
    def embed(self, text: str) -> list[float]:
        raise _KeyedError("k1")


def test_a_replay_keeps_the_class_of_what_the_engine_refused() -> None:
    """The place was prefixed by raising a plain ``ValueError`` / ``TypeError``:
    ``except EmbeddingDimensionError`` (or a ``FieldTypeError`` caught as a
    ``ValueError``) no longer matched a replay's error."""
    from emotional_memory.interfaces import EmbeddingDimensionError

    with pytest.raises(EmbeddingDimensionError) as err:
        replay_dataset(_tiny(), _GrowingEmbedder(dim=16))
    assert str(err.value).startswith("scenario 's0' sessions[0] events[2] ('m02'): ")
    assert "dimension" in str(err.value)
    with pytest.raises(_KeyedError) as keyed:
        replay_dataset(_tiny(), _FailingEmbedder(dim=16))
    assert keyed.value.key == "k1" and str(keyed.value) == "bad key k1"
    assert keyed.value.__notes__ == ["scenario 's0' sessions[0] events[0] ('m00')"]


class _ValidatingEmbedder(HashingEmbedder):
    """Validates its answer with a pydantic model, which refuses it."""

    def embed(self, text: str) -> list[float]:
        from emotional_memory import CoreAffect

        CoreAffect(valence=float("nan"), arousal=0.5)
        return super().embed(text)


def test_a_replay_keeps_an_error_its_class_cannot_be_made_without_arguments() -> None:
    """A pydantic ``ValidationError`` (a ValueError whose type has its own ``__new__``)
    came out as an unrelated ``TypeError: BaseException.__new__(...) is not safe``."""
    import pydantic

    with pytest.raises(pydantic.ValidationError) as err:
        replay_dataset(_tiny(), _ValidatingEmbedder(dim=16))
    assert "valence must be finite" in str(err.value)
    assert err.value.__notes__ == ["scenario 's0' sessions[0] events[0] ('m00')"]


def test_an_embedding_table_of_byte_strings_is_read_as_utf8(tmp_path: Path) -> None:
    """``np.array([b"..."])`` (dtype S, what ``.encode()`` lists give) was read as the
    texts "b'...'": no text of the dataset matched, and the error said they were
    missing."""
    texts = ["café au lait", "a second text"]
    path = tmp_path / "table.npz"
    np.savez(path, texts=np.array([t.encode("utf-8") for t in texts]),
             embeddings=np.eye(2, 3, dtype=np.float32))
    table = LookupEmbedder.from_npz(path)
    assert all(t in table for t in texts)
    assert table.embed("a second text") == [0.0, 1.0, 0.0]


def test_an_embedding_table_of_bytes_that_are_not_utf8_is_named(tmp_path: Path) -> None:
    path = tmp_path / "table.npz"
    np.savez(path, texts=np.array([b"fine", b"caf\xe9"]),
             embeddings=np.eye(2, 3, dtype=np.float32))
    with pytest.raises(ValueError, match=r"table\.npz.*'texts'\[1\].*UTF-8"):
        LookupEmbedder.from_npz(path)


@pytest.mark.parametrize("bad", [["q1"], {"id": 1}, "", True, 1.5])
def test_a_query_id_that_is_no_id_is_named(tmp_path: Path, bad: object) -> None:
    """It was kept as its repr (``"['q1']"``) in every per-query result."""
    data = _tiny()
    data["scenarios"][0]["sessions"][0]["queries"][0]["query_id"] = bad
    with pytest.raises(ValueError, match=r"scenarios\[0\].*queries\[0\].*'query_id'"):
        load_dataset(_write(tmp_path, data))


def test_a_fit_from_a_calibrated_config_leaves_the_stale_calibration_out() -> None:
    """The start's relevance calibration maps the start's scores: a fitted config (or
    the cosine candidate) scores otherwise, and kept it, so ``min_relevance`` filtered
    by a map of another model's scores."""
    from emotional_memory.learn import build_recall_batch, fit, semantic_only_config
    from emotional_memory.retrieval.config import RelevanceCalibration

    calibration = RelevanceCalibration(slope=50.0, intercept=-30.0, default_min_relevance=0.4)
    start = EmotionalMemoryConfig()
    start = start.model_copy(update={"retrieval": start.retrieval.model_copy(
        update={"relevance_calibration": calibration})})
    batch, info = build_recall_batch(_tiny(), HashingEmbedder(dim=16), start)
    fitted = fit(batch, info, start, steps=3).config
    assert fitted.retrieval.relevance_calibration is None
    assert semantic_only_config(start).retrieval.relevance_calibration is None
    assert fit(batch, info, start, steps=0).config.retrieval.relevance_calibration is None
