"""A store records the embedder that wrote it and refuses another one.

Real stores: a SQLite file (reopened by a second connection) and a real PostgreSQL
server (tests/conftest.py's).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from emotional_memory import CoreAffect, EmotionalMemory, InMemoryStore
from emotional_memory.embedder_identity import (
    EmbedderMismatchError,
    check_embedder,
    embedder_identity,
    record_embedder,
    recorded_embedder,
)
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.stores.sqlite import SQLiteStore
from support.minilm import require_minilm


def test_hashing_identity_names_its_settings() -> None:
    assert HashingEmbedder().identity == "hashing/384"
    assert HashingEmbedder(dim=64).identity == "hashing/64"
    seeded = HashingEmbedder(seed=7).identity
    assert seeded.startswith("hashing:") and seeded.endswith("/384")
    assert seeded == HashingEmbedder(seed=7).identity  # deterministic
    others = {HashingEmbedder(seed=7).identity, HashingEmbedder(ngram_range=(2, 4)).identity,
              HashingEmbedder(stopwords=["the"]).identity, HashingEmbedder(word_weight=2).identity}
    assert len(others) == 4 and "hashing/384" not in others
    assert embedder_identity(object()) is None
    assert embedder_identity(type("E", (), {"identity": ""})()) is None


def test_minilm_identity() -> None:
    pytest.importorskip("tokenizers", reason="MiniLM extras not installed (`make minilm`)")
    from emotional_memory.embedders.minilm import MiniLMEmbedder, default_model_dir

    folder = default_model_dir()
    if folder is None:
        pytest.skip("the MiniLM weights are not installed (`make minilm`)")
    assert MiniLMEmbedder().identity == "minilm-l6-v2/384"
    assert MiniLMEmbedder(model_dir=folder).identity == "minilm-l6-v2/384"


def test_minilm_folders_are_told_apart_by_their_weights(tmp_path: Path) -> None:
    """The identity of a model folder was ``minilm:<folder name>``: two different
    models in folders of one name shared it (a store opened with the other one without a
    word), and a copy of the installed weights got another identity than theirs."""
    require_minilm()
    from safetensors.numpy import load_file, save_file

    from emotional_memory.embedders.minilm import MiniLMEmbedder, default_model_dir

    installed = default_model_dir()
    assert installed is not None
    tensors = load_file(str(installed / "model.safetensors"))
    bias = next(name for name in tensors if name.endswith("5.output.LayerNorm.bias"))

    def folder(name: str, shift: float | None) -> Path:
        made = tmp_path / name / "model"  # every folder is named "model"
        made.mkdir(parents=True)
        for file in ("tokenizer.json", "config.json"):
            (made / file).symlink_to(installed / file)
        if shift is None:
            (made / "model.safetensors").symlink_to(installed / "model.safetensors")
        else:
            save_file({**tensors, bias: tensors[bias] + shift}, str(made / "model.safetensors"))
        return made

    copy, one, other = folder("copy", None), folder("one", 0.01), folder("other", 0.02)
    assert MiniLMEmbedder(copy).identity == "minilm-l6-v2/384"
    first, second = MiniLMEmbedder(one).identity, MiniLMEmbedder(other).identity
    assert first.startswith("minilm:") and second.startswith("minilm:") and first != second
    assert first == MiniLMEmbedder(tmp_path / "one" / "model").identity  # deterministic
    with SQLiteStore(str(tmp_path / "m.db")) as store:
        record_embedder(store, MiniLMEmbedder(one))
        with pytest.raises(EmbedderMismatchError):
            check_embedder(store, MiniLMEmbedder(other))


def _exercise(store: Any, reopen: Any) -> None:
    """Record on one handle; another handle of the same storage sees and enforces it."""
    assert store.setting("embedder") is None and recorded_embedder(store) is None
    EmotionalMemory(store, HashingEmbedder(dim=64))  # nothing recorded: never refused
    assert record_embedder(store, HashingEmbedder()) == "hashing/384"
    assert record_embedder(store, HashingEmbedder()) == "hashing/384"  # idempotent
    assert store.record_setting("embedder", "other/1") == "hashing/384"  # first one wins
    engine = EmotionalMemory(store, HashingEmbedder())
    engine.encode("kept", affect=CoreAffect(valence=0.2, arousal=0.3))
    other = reopen()
    try:
        assert recorded_embedder(other) == "hashing/384"
        with pytest.raises(EmbedderMismatchError) as caught:
            EmotionalMemory(other, HashingEmbedder(dim=64))
        message = str(caught.value)
        assert "'hashing/384'" in message and "'hashing/64'" in message
        assert isinstance(caught.value, ValueError)
        with pytest.raises(EmbedderMismatchError):
            record_embedder(other, HashingEmbedder(seed=3))
        assert recorded_embedder(other) == "hashing/384"
        # an embedder without identity is not checked; the right one works
        check_embedder(other, object())
        assert [m.content for m in EmotionalMemory(other, HashingEmbedder()).list_all()] == [
            "kept"
        ]
    finally:
        other.close()


def test_sqlite_store_records_its_embedder(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with SQLiteStore(str(path)) as store:
        _exercise(store, lambda: SQLiteStore(str(path)))
        assert store.schema_version == 3  # the schema row is untouched
    with SQLiteStore(str(path)) as again:
        assert again.setting("embedder") == "hashing/384"
        assert again.setting("schema_version") is None  # settings have their own keys


def test_a_store_without_settings_is_never_refused() -> None:
    store = InMemoryStore()
    assert record_embedder(store, HashingEmbedder()) is None
    assert recorded_embedder(store) is None
    EmotionalMemory(store, HashingEmbedder(dim=64))


def test_postgres_store_records_its_embedder(pg_dsn: str) -> None:
    from emotional_memory.stores.postgres import PostgresStore

    table = f"ident_{uuid.uuid4().hex[:8]}"
    with PostgresStore(pg_dsn, table=table) as store:
        _exercise(store, lambda: PostgresStore(pg_dsn, table=table))
        assert len(store) == 1


class _AsyncIdentified:
    """A native async embedder that names itself."""

    identity = "other-model/16"

    async def embed(self, text: str) -> list[float]:
        return [1.0] * 16

    async def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [[1.0] * 16 for _ in texts]


def test_async_engine_refuses_an_async_embedder_of_another_identity() -> None:
    """The async engine bridges an async embedder to a sync facade, which hid its
    ``identity``: a store of another embedder was opened without a word."""
    import asyncio

    from emotional_memory import AsyncEmotionalMemory, SyncToAsyncEmbedder

    store = SQLiteStore(":memory:")
    record_embedder(store, HashingEmbedder(dim=16))

    async def open_it() -> None:
        AsyncEmotionalMemory(store, _AsyncIdentified())

    with pytest.raises(EmbedderMismatchError):
        asyncio.run(open_it())
    assert embedder_identity(SyncToAsyncEmbedder(HashingEmbedder(dim=16))) == "hashing/16"
    assert embedder_identity(SyncToAsyncEmbedder(type("E", (), {"embed": len})())) is None


def test_minilm_identity_names_a_max_length_that_truncates_otherwise() -> None:
    """``max_length`` truncates long texts to other vectors, yet every ``max_length`` had
    the identity ``minilm-l6-v2/384``: a store written at 512 tokens opened at 128
    without a word, mixing vectors of two truncations."""
    require_minilm()
    from emotional_memory.embedders.minilm import MiniLMEmbedder

    base, short = MiniLMEmbedder(), MiniLMEmbedder(max_length=128)
    text = " ".join(f"word{i}" for i in range(300))
    assert len(base.tokenize([text])[0]) > 128  # so the vectors differ
    assert base.embed(text) != pytest.approx(short.embed(text), abs=1e-3)
    assert base.identity == MiniLMEmbedder(max_length=256).identity == "minilm-l6-v2/384"
    assert short.identity == "minilm-l6-v2,max_length=128/384"
    assert MiniLMEmbedder(max_length=512).identity == "minilm-l6-v2,max_length=512/384"


@pytest.mark.parametrize("changed", ["tokenizer.json", "config.json"])
def test_minilm_folders_are_told_apart_by_their_tokenizer_and_config(
    tmp_path: Path, changed: str
) -> None:
    """The installed weights beside another tokenizer (cased) or config (6 attention
    heads) embed differently, but the identity named the weights only: a store written
    by one opened with the other without a word."""
    require_minilm()
    import json

    import numpy as np

    from emotional_memory.embedders.minilm import MiniLMEmbedder, default_model_dir

    installed = default_model_dir()
    assert installed is not None
    made = tmp_path / "model"
    made.mkdir()
    for file in ("model.safetensors", "tokenizer.json", "config.json"):
        if file != changed:
            (made / file).symlink_to(installed / file)
    data = json.loads((installed / changed).read_text(encoding="utf-8"))
    if changed == "tokenizer.json":
        data["normalizer"]["lowercase"] = False
    else:
        data["num_attention_heads"] = 6
    (made / changed).write_text(json.dumps(data), encoding="utf-8")
    base, other = MiniLMEmbedder(), MiniLMEmbedder(made)
    text = "The Server Crashed Before The Demo"
    assert not np.allclose(base.embed(text), other.embed(text), atol=1e-3)
    assert other.identity != base.identity
    assert other.identity.startswith("minilm-l6-v2+") and other.identity.endswith("/384")
    assert other.identity == MiniLMEmbedder(made).identity  # deterministic


def test_minilm_identity_ignores_what_does_not_change_the_vectors(tmp_path: Path) -> None:
    """The tokenizer digest was of the file's bytes: the installed tokenizer saved again
    (another layout, the truncation and padding the embedder overrides, as
    ``save_pretrained`` writes it), or a ``config.json`` whose unused ``pad_token_id`` is
    null, gave the installed weights another identity than ``minilm-l6-v2``, so a store
    written with such a copy before the suffixes existed was refused."""
    require_minilm()
    import json

    from tokenizers import Tokenizer

    from emotional_memory.embedders.minilm import MiniLMEmbedder, default_model_dir

    installed = default_model_dir()
    assert installed is not None
    made = tmp_path / "model"
    made.mkdir()
    (made / "model.safetensors").symlink_to(installed / "model.safetensors")
    tokenizer = Tokenizer.from_file(str(installed / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=256)
    tokenizer.no_padding()
    tokenizer.save(str(made / "tokenizer.json"))  # same tokens, other bytes
    config = json.loads((installed / "config.json").read_text(encoding="utf-8"))
    (made / "config.json").write_text(json.dumps({**config, "pad_token_id": None}),
                                      encoding="utf-8")
    copy = MiniLMEmbedder(made)
    assert copy.identity == "minilm-l6-v2/384"
    text = "The Server Crashed Before The Demo"
    assert copy.tokenize([text]) == MiniLMEmbedder().tokenize([text])
    with SQLiteStore(str(tmp_path / "m.db")) as store:
        record_embedder(store, MiniLMEmbedder())
        check_embedder(store, copy)
