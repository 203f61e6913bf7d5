"""``python -m training fit --tune-embedder`` and configs that name a fitted embedder.

Runs on the builtin dataset with the installed MiniLM (``make minilm``; skipped
otherwise), a fixed scoring fit and a few tuning steps, so it checks the plumbing (the
inner-CV decision, weights beside the config, evaluate with them), not the gain.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emotional_memory import EmotionalMemoryConfig
from support.minilm import require_minilm
from support.paths import ROOT


def run_cli(*args: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "training", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout
    out = json.loads(lines[0])
    assert isinstance(out, dict)
    return out


@pytest.fixture(scope="module")
def minilm() -> Any:
    require_minilm()
    from emotional_memory.embedders.minilm import MiniLMEmbedder
    return MiniLMEmbedder()


def test_fit_with_tune_embedder_writes_what_it_selected(minilm: Any, tmp_path: Path) -> None:
    out = tmp_path / "fit.json"
    report = run_cli("fit", "--dataset", "builtin", "--trainable", "base_weights", "--l2",
                     "0.01", "--temperature", "0.05", "--steps", "5", "--tune-embedder",
                     "lora", "--tune-layers", "1", "--tune-steps", "3", "--out", str(out),
                     "--json", "--quiet")
    tuning = report["embedder_tuning"]
    assert [row["model"] for row in tuning["table"]] == ["untuned", "tuned"]
    untuned, tuned = tuning["table"]
    wins = (round(tuned["mrr"], 9), round(tuned["top1"], 9)) > (
        round(untuned["mrr"], 9), round(untuned["top1"], 9))
    assert tuning["selected"] == wins
    written = sorted(tmp_path.glob("fit.embedder.*.safetensors"))
    named = json.loads(out.read_text()).get("embedder")
    assert len(written) == int(wins)
    assert named == ({"kind": "minilm-fitted", "weights": written[0].name} if wins else None)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(  # no staging folder left
        ["fit.json", *(p.name for p in written)])
    evaluated = run_cli("evaluate", "--dataset", "builtin", "--config", str(out), "--json",
                        "--quiet")
    assert 0.0 <= evaluated["top1"] <= evaluated["mrr"] <= evaluated["hit_at_k"] <= 1.0
    if wins:
        assert tuning["identity"].startswith("minilm-l6-v2+fit.")


def test_evaluate_embeds_with_the_weights_the_config_names(minilm: Any, tmp_path: Path) -> None:
    import jax
    import jax.numpy as jnp

    from emotional_memory.data import load_builtin_dataset
    from emotional_memory.embedders.fitted import (
        FittedMiniLMEmbedder,
        save_fitted_weights,
        write_fitted_config,
    )
    from emotional_memory.embedders.tunable import fitted_model
    from emotional_memory.replay import replay_dataset, summarize

    rng = np.random.default_rng(0)
    top = jax.tree_util.tree_map(  # a clearly different top layer
        lambda w: w + jnp.asarray(rng.standard_normal(w.shape) * 0.2, w.dtype),
        minilm.model.layers[-1])
    weights = tmp_path / "moved.embedder.safetensors"
    save_fitted_weights(fitted_model(minilm.model, (top,)), minilm.model, weights)
    cfg = EmotionalMemoryConfig()
    config = tmp_path / "moved.json"
    write_fitted_config(config, cfg, weights)
    got = run_cli("evaluate", "--dataset", "builtin", "--config", str(config), "--json",
                  "--quiet")
    data = load_builtin_dataset()
    expected = summarize(replay_dataset(data, FittedMiniLMEmbedder(weights), cfg))
    base = summarize(replay_dataset(data, minilm, cfg))
    for key in ("top1", "mrr", "hit_at_k"):
        assert got[key] == pytest.approx(expected[key], abs=1e-12)
    assert (got["top1"], got["mrr"]) != (base["top1"], base["mrr"])


def test_cv_with_tune_embedder_tunes_inside_each_fold(minilm: Any) -> None:
    report = run_cli("cv", "--dataset", "builtin", "--folds", "2", "--jobs", "1",
                     "--trainable", "base_weights", "--l2", "0.01", "--temperature", "0.05",
                     "--steps", "5", "--tune-embedder", "lora", "--tune-steps", "3",
                     "--json", "--quiet")
    assert report["folds"] == 2 and report["jobs"] == 1
    assert len(report["chosen"]) == 2
    # every fold went through the tuning decision, whichever way it went
    assert all(c.endswith(("(tuned)", "(untuned)")) for c in report["chosen"])
    assert 0.0 <= report["top1"] <= report["mrr"] <= report["hit_at_k"] <= 1.0


def test_a_fold_whose_winner_is_stemmed_tunes_the_stemmed_batch(
    minilm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cv fold whose selection picks an ``@stem`` model tunes that model's own batch
    with that batch's own candidate lists (once tuned with the plain batch's lists)."""
    import types

    from emotional_memory.data import load_builtin_dataset
    from emotional_memory.learn import build_recall_batch
    from emotional_memory.learn import embedder_tuning as tuning_module
    from emotional_memory.learn.cross_validation import _FoldWork
    from emotional_memory.learn.embedder_tuning import EmbedderTuning
    from emotional_memory.learn.selection import analysis_config
    from emotional_memory.replay import ReplayAffect

    data = load_builtin_dataset()
    cfg = EmotionalMemoryConfig()
    cfg = cfg.model_copy(update={"retrieval": cfg.retrieval.model_copy(
        update={"lexical_weight": 0.35})})
    stem_cfg = analysis_config(cfg, "stem")
    affect = ReplayAffect.prepare(data)
    plain, plain_info = build_recall_batch(data, minilm, cfg, lexical=True, affect=affect)
    stem, stem_info = build_recall_batch(data, minilm, stem_cfg, lexical=True, affect=affect)
    # (on the builtin banks both analyses list the same candidates; on larger banks the
    # lists differ and the plain one made the tuning fail with an IndexError)

    def pick_stem(batch: Any, info: Any, config: Any, **_: Any) -> Any:
        return types.SimpleNamespace(config=stem_cfg, selection={"chosen": "lexical@stem"})

    seen: list[Any] = []
    real = tuning_module.tune_embedder

    def spy(data: Any, batch: Any, info: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append((batch, info))
        return real(data, batch, info, *args, **kwargs)

    monkeypatch.setattr(tuning_module, "tune_embedder", spy)
    opts = EmbedderTuning(mode="lora", layers=1, rank=2, steps=2, queries_per_step=4,
                          list_size=4)
    work = _FoldWork(pick_stem, plain, plain_info, cfg, 0, {"analysis_batches": {"stem": stem}},
                     data, minilm, affect, opts, 2, {"stem": stem_info})
    chosen, results = work.run(np.array([0]))
    assert seen and seen[0][0] is stem and seen[0][1] is stem_info
    assert chosen in ("lexical@stem (tuned)", "lexical@stem (untuned)")
    held = {q["query_id"] for s in data["scenarios"][:1] for ss in s["sessions"]
            for q in ss["queries"]}
    assert {r.query_id for r in results} == held


def test_a_new_fit_never_overwrites_the_weights_an_existing_config_names(
    minilm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The weights are written before the config; when they went to one fixed name, a
    refit whose config write then failed (disk full) left the old config naming the new
    weights. Each weights file is now named by its digest."""
    import argparse

    import jax
    import jax.numpy as jnp
    from training import tune_embedder

    from emotional_memory.embedders.fitted import read_fitted_config, write_fitted_config
    from emotional_memory.embedders.tunable import fitted_model
    from emotional_memory.learn import embedder_tuning

    def moved(scale: float) -> Any:
        rng = np.random.default_rng(int(scale * 100))
        top = jax.tree_util.tree_map(
            lambda w: w + jnp.asarray(rng.standard_normal(w.shape) * scale, w.dtype),
            minilm.model.layers[-1])
        return fitted_model(minilm.model, (top,))

    cfg = EmotionalMemoryConfig()
    out = tmp_path / "fit.json"
    args = argparse.Namespace(out=str(out), quiet=True, tune_embedder="lora", tune_layers=1,
                              tune_steps=1, tune_rank=2, tune_folds=2, select_by="mrr")
    paths = []
    for scale in (0.1, 0.2):
        result = embedder_tuning.TuningResult(model=moved(scale), config=cfg, selected=True)
        monkeypatch.setattr(embedder_tuning, "tune_embedder", lambda *a, r=result, **k: r)
        _, _, weights, _ = tune_embedder.tune_after_fit(args, {}, None, None, cfg, minilm)
        assert weights is not None and weights.parent == tmp_path
        paths.append(weights)
        if scale == 0.1:  # the first fit completes: its config names its weights
            write_fitted_config(out, cfg, weights)
            kept = weights.read_bytes()
    assert paths[0] != paths[1]
    # the second fit's config was never written: the first pair is intact
    assert read_fitted_config(out)[1] == paths[0] and paths[0].read_bytes() == kept


def _moved_weights(minilm: Any, folder: Path) -> tuple[Path, Path]:
    """A config naming weights whose top layer clearly differs from the MiniLM's."""
    import jax
    import jax.numpy as jnp

    from emotional_memory.embedders.fitted import save_fitted_weights, write_fitted_config
    from emotional_memory.embedders.tunable import fitted_model

    rng = np.random.default_rng(0)
    top = jax.tree_util.tree_map(
        lambda w: w + jnp.asarray(rng.standard_normal(w.shape) * 0.2, w.dtype),
        minilm.model.layers[-1])
    weights = folder / "moved.embedder.safetensors"
    save_fitted_weights(fitted_model(minilm.model, (top,)), minilm.model, weights)
    config = folder / "moved.json"
    write_fitted_config(config, EmotionalMemoryConfig(), weights)
    return config, weights


def test_fit_from_a_config_naming_weights_embeds_with_them_and_keeps_them(
    minilm: Any, tmp_path: Path
) -> None:
    """``fit --config X`` embedded with the hashing embedder (or --embeddings) although X
    names fitted weights, and wrote a config without them: what ``cv --config X`` and
    ``evaluate`` measure was not what ``fit`` produced."""
    from emotional_memory.data import load_builtin_dataset
    from emotional_memory.embedders.fitted import FittedMiniLMEmbedder, read_fitted_config
    from emotional_memory.replay import replay_dataset, summarize

    config, weights = _moved_weights(minilm, tmp_path)
    out = tmp_path / "refit.json"
    report = run_cli("fit", "--dataset", "builtin", "--config", str(config), "--trainable",
                     "base_weights", "--steps", "2", "--out", str(out), "--json", "--quiet")
    fitted, named = read_fitted_config(out)
    assert named is not None and named.resolve() == weights.resolve()
    expected = summarize(replay_dataset(load_builtin_dataset(),
                                        FittedMiniLMEmbedder(weights), fitted))
    assert report["fitted_top1"] == pytest.approx(expected["top1"], abs=1e-12)
    assert report["fitted_mrr"] == pytest.approx(expected["mrr"], abs=1e-12)


def test_tuning_from_a_config_naming_weights_is_refused_before_the_fit(
    minilm: Any, tmp_path: Path
) -> None:
    config, _ = _moved_weights(minilm, tmp_path)
    out = tmp_path / "refit.json"
    proc = subprocess.run([sys.executable, "-m", "training", "fit", "--dataset", "builtin",
                           "--config", str(config), "--tune-embedder", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "--tune-embedder" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("command", ["fit", "cv"])
def test_tuning_over_embeddings_of_another_width_is_refused_before_the_fit(
    minilm: Any, tmp_path: Path, command: str
) -> None:
    """--tune-embedder tunes the MiniLM; with an --embeddings table of another width
    the fit ran, then the tuning died on "Size of label 'd' for operand 1 (384) does
    not match previous terms (16)" (the query adapter fitted on the table's vectors)."""
    from emotional_memory.data import load_builtin_dataset
    from emotional_memory.embedders import HashingEmbedder

    data = load_builtin_dataset()
    data = {**data, "scenarios": data["scenarios"][:3]}
    dataset = tmp_path / "small.json"
    dataset.write_text(json.dumps(data), encoding="utf-8")
    texts = list(dict.fromkeys(
        t for sc in data["scenarios"] for s in sc["sessions"]
        for t in [e["content"] for e in s["events"]] + [q["query"] for q in s["queries"]]))
    table = tmp_path / "table16.npz"
    np.savez(table, texts=np.asarray(texts),
             embeddings=np.asarray(HashingEmbedder(dim=16).embed_batch(texts), np.float32))
    out = tmp_path / "fitted.json"
    extra = ["--out", str(out)] if command == "fit" else ["--folds", "2", "--jobs", "1"]
    proc = subprocess.run(
        [sys.executable, "-m", "training", command, "--dataset", str(dataset),
         "--embeddings", str(table), "--tune-embedder", "--tune-steps", "1",
         "--trainable", "base_weights,adapter", "--l2", "0.01", "--temperature", "0.05",
         "--steps", "2", "--affect", "neutral", "--quiet", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("error: --tune-embedder"), proc.stderr[-2000:]
    assert "16" in proc.stderr and str(table) in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.json", "table16.npz"]
