"""Fitted MiniLM weights: saved beside a config, loaded back equal, with their own identity.

Needs the installed all-MiniLM-L6-v2 (``make minilm``); skipped otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from emotional_memory import EmotionalMemoryConfig
from support.minilm import require_minilm

TEXTS = ["I finally finished the marathon", "The server crashed before the demo", "",
         "Melanie: We went camping with the kids last weekend, it rained all night."]


@pytest.fixture(scope="module")
def base() -> Any:
    require_minilm()
    from emotional_memory.embedders.minilm import MiniLMEmbedder
    return MiniLMEmbedder()


def _moved(base: Any, seed: int, layers: tuple[int, ...] = (5,)) -> Any:
    """The base model with some layers' weights moved by small random noise."""
    from emotional_memory.embedders.tunable import fitted_model

    rng = np.random.default_rng(seed)
    model = base.model
    new = list(model.layers)
    for i in layers:
        new[i] = jax.tree_util.tree_map(
            lambda w: w + jnp.asarray(rng.standard_normal(w.shape) * 0.02, w.dtype), new[i])
    return fitted_model(model, tuple(new[min(layers):]))


def _embed_with(base: Any, model: Any, texts: list[str]) -> np.ndarray:
    """Embeddings of ``texts`` by ``base``'s pipeline with ``model``'s weights."""
    from emotional_memory.embedders.minilm import MiniLMEmbedder

    other = object.__new__(MiniLMEmbedder)
    other.__dict__.update(base.__dict__)
    other._model = model
    return other.embed_array(texts)


def test_a_weights_write_that_fails_leaves_the_old_file(
    base: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """safetensors wrote straight to the target: a write cut short left half a file
    where the previous weights were; now they stay, and no temporary file."""
    import safetensors.numpy

    from emotional_memory.embedders.fitted import save_fitted_weights

    path = tmp_path / "fit.embedder.safetensors"
    save_fitted_weights(_moved(base, seed=0), base.model, path)
    before = path.read_bytes()

    def broken(tensors: Any, filename: str, metadata: Any = None) -> None:
        Path(filename).write_bytes(before[:100])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safetensors.numpy, "save_file", broken)
    with pytest.raises(OSError, match="No space"):
        save_fitted_weights(_moved(base, seed=1), base.model, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_saved_weights_load_back_to_identical_vectors(base: Any, tmp_path: Path) -> None:
    from emotional_memory.embedders.fitted import FittedMiniLMEmbedder, save_fitted_weights

    model = _moved(base, seed=0)
    path = tmp_path / "fit.embedder.safetensors"
    digest = save_fitted_weights(model, base.model, path)
    loaded = FittedMiniLMEmbedder(path)
    expected = _embed_with(base, model, TEXTS)
    got = loaded.embed_array(TEXTS)
    np.testing.assert_array_equal(got, expected)  # the same weights: the same vectors
    assert not np.allclose(got, base.embed_array(TEXTS), atol=1e-4)  # and not the base's
    assert loaded.identity == f"minilm-l6-v2+fit.{digest}/384"
    assert loaded.identity != base.identity
    # a max_length that truncates long texts otherwise is named, as in the base's
    short = FittedMiniLMEmbedder(path, max_length=64).identity
    assert short == f"minilm-l6-v2+fit.{digest},max_length=64/384"
    # only the changed layer is stored
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as fh:
        assert {k.split(".")[2] for k in fh.keys()} == {"5"}  # noqa: SIM118
        assert fh.metadata()["layers"] == "5"


def test_other_weights_have_another_identity_and_tampering_is_refused(
    base: Any, tmp_path: Path
) -> None:
    from safetensors.numpy import load_file, save_file

    from emotional_memory.embedders.fitted import FittedMiniLMEmbedder, save_fitted_weights

    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    save_fitted_weights(_moved(base, seed=1), base.model, a)
    save_fitted_weights(_moved(base, seed=2, layers=(4, 5)), base.model, b)
    ia, ib = FittedMiniLMEmbedder(a).identity, FittedMiniLMEmbedder(b).identity
    assert ia != ib and ia.startswith("minilm-l6-v2+fit.") and ib.endswith("/384")
    from safetensors import safe_open

    with safe_open(str(a), framework="numpy") as fh:
        meta = fh.metadata()
    tensors = load_file(str(a))
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 1.0
    bad = tmp_path / "bad.safetensors"
    save_file(tensors, str(bad), metadata=meta)
    with pytest.raises(ValueError, match="digest"):
        FittedMiniLMEmbedder(bad)
    plain = tmp_path / "plain.safetensors"
    save_file(tensors, str(plain))
    with pytest.raises(ValueError, match="not a fitted MiniLM"):
        FittedMiniLMEmbedder(plain)


def test_config_names_its_weights_relative_to_itself(base: Any, tmp_path: Path) -> None:
    from emotional_memory.embedders.fitted import (
        read_fitted_config,
        save_fitted_weights,
        write_fitted_config,
    )

    cfg = EmotionalMemoryConfig()
    plain = tmp_path / "plain.json"
    write_fitted_config(plain, cfg, None)
    assert plain.read_text(encoding="utf-8") == cfg.model_dump_json(indent=2)
    assert read_fitted_config(plain) == (cfg, None)

    folder = tmp_path / "fits"
    folder.mkdir()
    weights = folder / "fit.embedder.safetensors"
    save_fitted_weights(_moved(base, seed=3), base.model, weights)
    config_path = folder / "fit.json"
    write_fitted_config(config_path, cfg, weights)
    assert json.loads(config_path.read_text())["embedder"] == {
        "kind": "minilm-fitted", "weights": "fit.embedder.safetensors"}
    moved = tmp_path / "elsewhere"
    folder.rename(moved)  # the pair moves together
    loaded, path = read_fitted_config(moved / "fit.json")
    assert loaded == cfg and path == moved / "fit.embedder.safetensors"
    assert path.is_file()


def test_the_service_serves_a_fitted_config_with_its_embedder(base: Any, tmp_path: Path) -> None:
    import asyncio

    from emotional_memory.embedders.fitted import save_fitted_weights, write_fitted_config
    from emotional_memory.server import cli

    model = _moved(base, seed=3)
    weights = tmp_path / "fit.embedder.safetensors"
    digest = save_fitted_weights(model, base.model, weights)
    config_path = tmp_path / "fit.json"
    write_fitted_config(config_path, EmotionalMemoryConfig(), weights)
    db = tmp_path / "m.db"

    service = cli.build_service(f"sqlite:///{db}", None, str(config_path))
    engine = service.engine
    assert engine.embedder.identity == f"minilm-l6-v2+fit.{digest}/384"
    np.testing.assert_array_equal(engine.embedder.embed_array(TEXTS[:2]),
                                  _embed_with(base, model, TEXTS[:2]))
    # the affect head reads the base MiniLM it was trained on, not the fitted layers
    assert engine.affect_from_text.embedder.identity == "minilm-l6-v2/384"
    assert "+fit." in cli.describe(service)
    asyncio.run(service.close())

    with pytest.raises(cli.UsageError, match="names a fitted MiniLM embedder"):
        cli.build_service("memory://", "hashing", str(config_path))
    # the store records the fitted embedder: the base one is refused, naming both
    with pytest.raises(cli.UsageError, match=r"minilm-l6-v2\+fit\."):
        cli.build_service(f"sqlite:///{db}", "minilm", None)
    weights.unlink()
    with pytest.raises(cli.UsageError, match="fitted embedder cannot be loaded"):
        cli.build_service("memory://", None, str(config_path))
