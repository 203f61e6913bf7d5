"""Model selection with the recall-v2 pieces: stemmed analyses and the
query adapter compete, the choice never loses to default or cosine on its inner folds,
and what is chosen (a stemmed index, an adapter) is an ordinary config the engine and
the command line load and replay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from emotional_memory import EmotionalMemoryConfig
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.learn import (
    LEXICAL_ANALYSES,
    analysis_config,
    build_recall_batch,
    candidate_models,
    select_model,
)
from emotional_memory.replay import ReplayAffect, replay_dataset, summarize
from support.recall_data import unlabelled_dataset


@pytest.fixture(scope="module")
def batches() -> tuple[Any, Any, Any, dict[str, Any], Any]:
    data = unlabelled_dataset(4)
    # inflected query words: only the stemmed analysis matches "planting" to "planted"
    for scenario in data["scenarios"]:
        for q in scenario["sessions"][-1]["queries"]:
            q["query"] = q["query"].replace("mention", "mentioning plants and planting")
    settings = ReplayAffect.prepare(data, "neutral")
    embedder = HashingEmbedder(dim=64)
    cfg = EmotionalMemoryConfig()
    batch, info = build_recall_batch(data, embedder, cfg, lexical=True, affect=settings,
                                     embeddings=True)
    stem, _ = build_recall_batch(data, embedder, analysis_config(cfg, "stem"), lexical=True,
                                 affect=settings, embeddings=True)
    return batch, stem, info, data, settings


def test_candidates_cover_analyses_and_adapter() -> None:
    models = candidate_models(EmotionalMemoryConfig(), True, analyses=("stem",), adapter=True)
    assert list(models) == [
        "default", "semantic", "fitted", "lexical", "lexical_full", "lexical_adapter",
        "lexical@stem", "lexical_full@stem", "lexical_adapter@stem",
    ]
    start, trainable = models["lexical_adapter@stem"]
    assert trainable is not None and "adapter" in trainable
    assert start.retrieval.lexical_stemmer == "english" and start.retrieval.lexical_query_counts
    assert models["lexical"][0].retrieval.lexical_stemmer == "none"
    # without the options: today's candidates
    assert list(candidate_models(EmotionalMemoryConfig(), True)) == [
        "default", "semantic", "fitted", "lexical", "lexical_full"]
    with pytest.raises(ValueError, match="analysis"):
        analysis_config(EmotionalMemoryConfig(), "klingon")
    assert set(LEXICAL_ANALYSES) == {"stem"}


def test_selection_with_analyses_and_adapter(
    batches: tuple[Any, Any, Any, dict[str, Any], Any],
) -> None:
    batch, stem, info, data, settings = batches
    result = select_model(batch, info, steps=30, folds=2, analysis_batches={"stem": stem},
                          adapter=True, adapter_rank=2)
    table = {row["model"]: row for row in result.selection["table"]}
    assert {"lexical@stem", "lexical_adapter", "lexical_adapter@stem"} <= set(table)
    chosen_name = result.selection["chosen"]
    chosen = table[chosen_name]
    assert chosen["top1"] >= max(table["default"]["top1"], table["semantic"]["top1"])
    assert chosen["top1"] == max(row["top1"] for row in table.values())
    retrieval = result.config.retrieval
    assert (retrieval.lexical_stemmer == "english") == chosen_name.endswith("@stem")
    assert (retrieval.query_adapter is not None) == ("adapter" in chosen_name)
    config = EmotionalMemoryConfig.model_validate_json(result.config.model_dump_json())
    replayed = summarize(replay_dataset(data, HashingEmbedder(dim=64), config, affect=settings))
    assert replayed["n_queries"] == 24


def test_analysis_batch_must_match(batches: tuple[Any, Any, Any, dict[str, Any], Any]) -> None:
    batch, stem, info, _, _ = batches
    import jax

    fewer = jax.tree_util.tree_map(lambda x: x[:5], stem)
    with pytest.raises(ValueError, match="analysis_batches"):
        select_model(batch, info, steps=1, folds=2, analysis_batches={"stem": fewer})


def test_cli_fits_and_loads_an_adapter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from training.cli import main

    path = tmp_path / "unlabelled.json"
    path.write_text(json.dumps(unlabelled_dataset(2)), encoding="utf-8")
    out = tmp_path / "fitted.json"
    assert main(["fit", "--dataset", str(path), "--affect", "neutral", "--quiet", "--json",
                 "--trainable", "base_weights,lexical,adapter", "--adapter-rank", "3",
                 "--adapter-l2", "0.5", "--l2", "0.01", "--temperature", "0.05",
                 "--steps", "20", "--out", str(out)]) == 0
    capsys.readouterr()
    config = EmotionalMemoryConfig.model_validate_json(out.read_text(encoding="utf-8"))
    spec = config.retrieval.query_adapter
    assert spec is not None and (spec.dim, spec.rank) == (384, 3)
    assert main(["evaluate", "--dataset", str(path), "--affect", "neutral", "--json",
                 "--quiet", "--config", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["n_queries"] == 12
    # an edited factor: refused on load, naming the checksum
    raw = json.loads(out.read_text(encoding="utf-8"))
    raw["retrieval"]["query_adapter"]["right"][0] += 1.0
    out.write_text(json.dumps(raw), encoding="utf-8")
    assert main(["evaluate", "--dataset", str(path), "--affect", "neutral", "--json",
                 "--quiet", "--config", str(out)]) == 2
    assert "query_adapter.sha256" in capsys.readouterr().err


def test_cli_rejects_unknown_analysis(capsys: pytest.CaptureFixture[str]) -> None:
    from training.cli import main

    with pytest.raises(SystemExit):
        main(["cv", "--analyses", "klingon", "--quiet"])
    assert "--analyses" in capsys.readouterr().err
