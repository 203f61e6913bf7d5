"""Re-embedding a store with another embedder (``reembed_store``, ``training reembed``).

Checked on real stores (an SQLite file, a real PostgreSQL database, the in-memory
store) against a plain oracle: afterwards every memory's vector is exactly the new
embedder's vector of its content and nothing else of it changed; an interrupted run
leaves the store refused to engines and resumes where it stopped; bad input changes
nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from training.cli import main as training_main

from emotional_memory import AsyncEmotionalMemory, EmotionalMemory, InMemoryStore
from emotional_memory.embedder_identity import (
    REEMBED_SETTING,
    EmbedderMismatchError,
    ReembedInProgressError,
    record_embedder,
    recorded_embedder,
)
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.reembed import reembed_store
from emotional_memory.stores.postgres import PostgresStore
from emotional_memory.stores.sqlite import SQLiteStore
from support.minilm import require_minilm

OLD = HashingEmbedder(dim=32)
NEW = HashingEmbedder(dim=32, seed=7)
TEXTS = [f"memory {i}: {['rain', 'storm', 'harbour', 'coffee'][i % 4]} {i * 7 % 13}"
         for i in range(23)]
_TABLES = itertools.count()


@pytest.fixture(params=["sqlite", "postgres", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "sqlite":
        made: Any = SQLiteStore(tmp_path / "m.db")
    elif request.param == "postgres":
        made = PostgresStore(request.getfixturevalue("pg_dsn"), table=f"re{next(_TABLES)}")
    else:
        made = InMemoryStore()
    yield made
    close = getattr(made, "close", None)
    if callable(close):
        close()


def _filled(store: Any) -> list[dict[str, Any]]:
    """Encode TEXTS with the old embedder (links and all); the memories as dicts."""
    record_embedder(store, OLD)
    engine = EmotionalMemory(store, OLD)
    engine.encode_batch(TEXTS[:10])
    for text in TEXTS[10:]:
        engine.encode(text)
    return [m.model_dump() for m in store.list_all()]


def _check_reembedded(store: Any, before: list[dict[str, Any]]) -> None:
    """The oracle: each vector is NEW's vector of the content; the rest unchanged."""
    after = [m.model_dump() for m in store.list_all()]
    assert [m["id"] for m in after] == [m["id"] for m in before]
    for old, new in zip(before, after, strict=True):
        assert new["embedding"] == pytest.approx(NEW.embed(old["content"]), abs=1e-6)
        assert new["embedding"] != pytest.approx(old["embedding"], abs=1e-6)
        assert {k: v for k, v in new.items() if k != "embedding"} == {
            k: v for k, v in old.items() if k != "embedding"}


def test_every_vector_is_the_new_embedders(store: Any) -> None:
    before = _filled(store)
    report = reembed_store(store, NEW, batch_size=5, progress=False)
    assert (report.memories, report.reembedded, report.resumed_from) == (23, 23, 0)
    _check_reembedded(store, before)
    if isinstance(store, InMemoryStore):
        assert report.current is None  # it keeps no settings
        return
    assert (report.previous, report.current) == (OLD.identity, NEW.identity)
    assert recorded_embedder(store) == NEW.identity
    with pytest.raises(EmbedderMismatchError):
        EmotionalMemory(store, OLD)
    hits = EmotionalMemory(store, NEW).retrieve(TEXTS[3], top_k=1)
    assert hits[0].content == TEXTS[3]


class _NewWith:
    """NEW, calling ``meanwhile()`` before its ``at``-th batch (to fail there, or to
    write through another engine while the run goes on)."""

    def __init__(self, at: int, meanwhile: Callable[[], object]) -> None:
        self.identity = NEW.identity
        self.calls = 0
        self.at = at
        self.meanwhile = meanwhile

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        if self.calls == self.at:
            self.meanwhile()
        return NEW.embed_batch(texts)


def _went_away() -> None:
    raise RuntimeError("the embedding server went away")


@pytest.mark.parametrize("store", ["sqlite", "postgres"], indirect=True)
def test_an_interrupted_run_is_refused_to_engines_and_resumes(store: Any) -> None:
    before = _filled(store)
    with pytest.raises(RuntimeError, match="went away"):
        reembed_store(store, _NewWith(3, _went_away), batch_size=5, progress=False)
    done = [m.model_dump() for m in store.list_all()]
    assert done[:10] != before[:10] and done[10:] == before[10:]  # two batches written
    for embedder in (OLD, NEW):
        with pytest.raises(ReembedInProgressError, match="10"):
            EmotionalMemory(store, embedder)
    with pytest.raises(ValueError, match="embedder"):
        reembed_store(store, HashingEmbedder(dim=32, seed=8), batch_size=5, progress=False)
    report = reembed_store(store, NEW, batch_size=5, progress=False)
    assert (report.resumed_from, report.reembedded, report.previous) == (10, 13, OLD.identity)
    _check_reembedded(store, before)
    EmotionalMemory(store, NEW)  # opens again


def test_bad_input_changes_nothing(store: Any) -> None:
    before = _filled(store)
    for bad in (0, -1, 2.5, True, "8"):
        with pytest.raises(ValueError, match="batch_size"):
            reembed_store(store, NEW, batch_size=bad, progress=False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dimension"):
        reembed_store(store, HashingEmbedder(dim=16), progress=False)
    for flag in ("no", 0, None):  # "no" drew a bar (any truthy value did)
        with pytest.raises(TypeError, match="progress must be a bool"):
            reembed_store(store, NEW, progress=flag)  # type: ignore[arg-type]
    assert [m.model_dump() for m in store.list_all()] == before
    if not isinstance(store, InMemoryStore):
        assert recorded_embedder(store) == OLD.identity
        EmotionalMemory(store, OLD)  # not left half-way


def test_another_dimension_moves_by_export_and_an_import_that_embeds_again(
    store: Any, tmp_path: Path
) -> None:
    """reembed_store keeps the dimension and says to export and import into a new
    store; the import kept the old vectors, leaving an engine whose every encode and
    retrieve failed on the dimension, which no re-embedding could then change."""
    before = _filled(store)
    with pytest.raises(ValueError, match=r"import_memories\(data, reembed=True\)"):
        reembed_store(store, HashingEmbedder(dim=16), progress=False)
    wider = HashingEmbedder(dim=48, seed=3)
    data = EmotionalMemory(store, OLD).export_memories()
    data[4]["embedding"] = [float("nan")] * 32  # replaced unread (the original's NaN)
    target = SQLiteStore(tmp_path / "wider.db")
    engine = EmotionalMemory(target, wider)
    assert engine.import_memories(data, reembed=True) == len(TEXTS)
    after = [m.model_dump() for m in target.list_all()]
    for old, new in zip(before, after, strict=True):
        assert new["embedding"] == pytest.approx(wider.embed(old["content"]), abs=1e-6)
        assert {k: v for k, v in new.items() if k != "embedding"} == {
            k: v for k, v in old.items() if k != "embedding"}
    assert engine.retrieve(TEXTS[3], top_k=1)[0].content == TEXTS[3]
    engine.encode("a new memory, of the new dimension")
    with pytest.raises(TypeError, match="reembed must be a bool"):
        engine.import_memories(data, reembed="yes")  # type: ignore[arg-type]
    target.close()
    aengine = AsyncEmotionalMemory(InMemoryStore(), wider)
    assert asyncio.run(aengine.import_memories(data, reembed=True)) == len(TEXTS)
    stored = asyncio.run(aengine.list_all())
    assert len(stored) == len(TEXTS)
    for memory in stored:
        assert memory.embedding == pytest.approx(wider.embed(memory.content), abs=1e-6)


def test_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cli.db"
    with SQLiteStore(path) as s:
        engine = EmotionalMemory(s, HashingEmbedder())
        record_embedder(s, HashingEmbedder())
        engine.encode_batch(TEXTS)
    seeded = HashingEmbedder(seed=3)
    assert training_main(["reembed", "--store", f"sqlite:///{path}", "--embedder", "hashing",
                          "--quiet"]) == 0  # the same embedder: vectors rewritten equal
    printed = json.loads(capsys.readouterr().out)
    assert printed["reembedded"] == len(TEXTS) and printed["current"] == "hashing/384"
    assert training_main(["reembed", "--store", "nope://x", "--embedder", "hashing"]) == 2
    assert "--store" in capsys.readouterr().err
    with SQLiteStore(path) as s:
        assert recorded_embedder(s) == "hashing/384"
        with pytest.raises(EmbedderMismatchError, match="reembed"):
            EmotionalMemory(s, seeded)


def test_the_command_line_reembeds_with_a_fitted_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``reembed --config fitted.json`` embeds with the config's fitted MiniLM and
    records its identity, so ``serve --config fitted.json`` opens the store (the
    README's way to move a store to a fitted embedder); a config naming no fitted
    embedder, or none at all, is an error naming it, the store untouched."""
    require_minilm()
    import numpy as np
    from safetensors.numpy import save_file

    from emotional_memory.embedders.fitted import FORMAT, FittedMiniLMEmbedder, _digest
    from emotional_memory.server.cli import build_service

    tensors = {"encoder.layer.5.output.LayerNorm.bias": np.full(384, 0.01, np.float32)}
    save_file(tensors, str(tmp_path / "fit.safetensors"), metadata={
        "format": FORMAT, "base": "minilm-l6-v2", "layers": "5", "digest": _digest(tensors)})
    config = tmp_path / "fitted.json"
    config.write_text(json.dumps({"embedder": {"kind": "minilm-fitted",
                                               "weights": "fit.safetensors"}}))
    plain = tmp_path / "plain.json"
    plain.write_text("{}")
    path = tmp_path / "cli.db"
    with SQLiteStore(path) as s:
        record_embedder(s, HashingEmbedder())
        EmotionalMemory(s, HashingEmbedder()).encode_batch(TEXTS[:5])
        before = [m.model_dump() for m in s.list_all()]
    url = f"sqlite:///{path}"
    for bad, message in ((plain, "names no fitted embedder"),
                         (tmp_path / "missing.json", "No such file")):
        assert training_main(["reembed", "--store", url, "--config", str(bad), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert f"--config {bad}" in err and message in err
    with SQLiteStore(path) as s:
        assert [m.model_dump() for m in s.list_all()] == before
    assert training_main(["reembed", "--store", url, "--config", str(config), "--quiet"]) == 0
    fitted = FittedMiniLMEmbedder(tmp_path / "fit.safetensors")
    assert json.loads(capsys.readouterr().out)["current"] == fitted.identity
    with SQLiteStore(path) as s:
        assert recorded_embedder(s) == fitted.identity
        for m in s.list_all():
            assert m.embedding == pytest.approx(fitted.embed(m.content), abs=1e-5)
    service = build_service(url, "minilm", str(config), affect="none")
    service.engine.close()


@pytest.mark.parametrize("record", ["not json", "[1]", '"done"', '{"to": null}',
                                    '{"done": "3"}', '{"done": -1}', '{"done": true}',
                                    '{"done": 1, "after": -1}', '{"done": 1, "after": "9"}',
                                    '{"done": 1, "after": 2.5}', '{"done": 1, "after": false}'])
def test_a_malformed_progress_record_is_a_value_error_naming_it(
    tmp_path: Path, record: str
) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    try:
        before = _filled(store)
        store.replace_setting(REEMBED_SETTING, record)
        with pytest.raises(ValueError, match=r"'reembedding'.*not a re-embedding progress"):
            reembed_store(store, NEW, batch_size=5, progress=False)
        assert [m.model_dump() for m in store.list_all()] == before
        assert store.setting(REEMBED_SETTING) == record
    finally:
        store.close()


class _Returning:
    """NEW's identity, answering every batch with ``make(len(texts))``."""

    def __init__(self, make: Any) -> None:
        self.identity = NEW.identity
        self.make = make

    def embed_batch(self, texts: list[str]) -> Any:
        return self.make(len(texts))


@pytest.mark.parametrize("store", ["sqlite", "memory"], indirect=True)
def test_bad_vectors_are_named_errors_and_change_nothing(store: Any) -> None:
    """NaN / inf vectors overwrote the stored ones, bools were stored as 1.0, None or
    text were bare "not iterable" / "could not convert" errors."""
    before = _filled(store)
    cases: list[tuple[Any, type[Exception], str]] = [
        (lambda n: [[float("nan")] * 32] * n, ValueError, "NaN or inf"),
        (lambda n: [[1.0] * 31 + [float("inf")]] * n, ValueError, "NaN or inf"),
        (lambda n: [[True] * 32] * n, TypeError, "numbers"),
        (lambda n: ["x" * 32] * n, TypeError, "numbers"),
        (lambda n: None, TypeError, "embed_batch must return a sequence"),
    ]
    for make, error, words in cases:
        with pytest.raises(error, match=f"embedder: .*{words}"):
            reembed_store(store, _Returning(make), batch_size=5, progress=False)
    assert [m.model_dump() for m in store.list_all()] == before
    if not isinstance(store, InMemoryStore):
        assert recorded_embedder(store) == OLD.identity
        EmotionalMemory(store, OLD)  # not left half-way


@pytest.mark.parametrize("password", ["Zq7Pw/Kx9?Wm4", "Zq7Pw?Kx9/Wm4", "Zq7Pw#Kx9/Wm4"])
def test_the_command_line_never_shows_the_store_password(
    password: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A password holding a '/' and a '?' (or '#') was printed whole in the error."""
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    url = f"postgresql://app:{password}@127.0.0.1:1/mem"
    assert training_main(["reembed", "--store", url, "--embedder", "hashing"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: --store: ")
    assert "127.0.0.1:1/mem" in captured.err
    for piece in password.replace("?", "/").replace("#", "/").split("/"):
        assert piece not in captured.err + captured.out


def test_the_command_line_refuses_a_store_that_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped SQLite path made a new, empty store (recording the embedder) and
    reported success; memory:// (always empty) did too."""
    typo = tmp_path / "typo.db"
    for url in (f"sqlite:///{typo}", "memory://"):
        assert training_main(["reembed", "--store", url, "--embedder", "hashing",
                              "--quiet"]) == 2
        captured = capsys.readouterr()
        assert captured.err.startswith("error: --store: ") and captured.out == ""
    assert not typo.exists()
    assert list(tmp_path.iterdir()) == []


def test_the_command_line_says_why_postgres_could_not_be_opened(
    capsys: pytest.CaptureFixture[str]
) -> None:
    """The error said only "PostgresStoreError" (not: refused, no such host, bad DSN)."""
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    url = "postgresql://app:Zq7Pw@127.0.0.1:1/mem"  # nothing listens on port 1
    assert training_main(["reembed", "--store", url, "--embedder", "hashing"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --store: ") and len(err.strip().splitlines()) == 1
    assert "refused" in err.lower() and "Zq7Pw" not in err


@pytest.mark.parametrize("store", ["sqlite", "postgres", "memory"], indirect=True)
def test_an_engine_or_a_scoped_view_is_refused_naming_the_store(store: Any) -> None:
    """An engine failed with "'EmotionalMemory' object has no attribute 'update'"; a
    store's scoped view re-embedded its scope only and left the store recording the
    old embedder (its vectors then of two embedders, which no engine noticed); a
    PostgreSQL view then still did, and recorded the new embedder for the whole
    table."""
    from emotional_memory import AsyncEmotionalMemory
    from emotional_memory.stores.base import Selection

    record_embedder(store, OLD)
    engine = EmotionalMemory(store, OLD)
    engine.scoped("a").encode_batch(TEXTS[:3])
    engine.scoped("b").encode_batch(TEXTS[3:6])
    before = [m.model_dump() for m in store.list_all()]
    targets = [engine, engine.scoped("a"), AsyncEmotionalMemory(store, OLD),
               store.selected(Selection(scope=("a",)))]
    for target in targets:
        with pytest.raises(TypeError, match="whole store"):
            reembed_store(target, NEW, batch_size=2, progress=False)
    assert [m.model_dump() for m in store.list_all()] == before
    assert reembed_store(store, NEW, progress=False).reembedded == 6  # the store itself


@pytest.mark.parametrize("store", ["sqlite", "postgres"], indirect=True)
def test_a_memory_written_meanwhile_is_not_left_with_the_old_embedder(store: Any) -> None:
    _filled(store)
    # an engine opened before the run (as a server would be) stores a memory meanwhile
    writer = EmotionalMemory(store, OLD)
    with pytest.raises(ValueError, match="23 memories when re-embedding began and 24"):
        reembed_store(store, _NewWith(2, lambda: writer.encode("a late arrival: harbour rain")),
                      batch_size=5, progress=False)
    assert recorded_embedder(store) == OLD.identity  # the new one is not recorded
    for embedder in (OLD, NEW):
        with pytest.raises(ReembedInProgressError):
            EmotionalMemory(store, embedder)
    report = reembed_store(store, NEW, batch_size=5, progress=False)
    assert (report.resumed_from, report.memories, report.reembedded) == (0, 24, 24)
    for memory in store.list_all():  # the late one too
        assert memory.embedding == pytest.approx(NEW.embed(memory.content), abs=1e-6)
    assert recorded_embedder(store) == NEW.identity
    EmotionalMemory(store, NEW)
