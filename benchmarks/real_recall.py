"""Recall on real conversations: cosine, BM25, the default engine and the fitted model.

For each dataset (``locomo10_dev``: LoCoMo conversations without affect labels;
``realistic_recall_v2``: scripted, labelled scenarios), every ranking runs through the
real engine and the replay protocol of ``../shared/data/README.md``:

* ``cosine``: plain cosine (weights (1, 0, ..., 0), no mood gates);
* ``bm25``: the lexical signal s7 alone (Okapi BM25 over hybrid candidates);
* ``default``: the SPEC default config (affect of unlabelled events estimated from the
  text by the shipped EmoBank head when MiniLM is installed, else neutral);
* ``fitted``: scenario-grouped k-fold CV; in each fold the model is chosen by inner CV
  among default, cosine and fitted variants with the lexical signal
  (:func:`emotional_memory.learn.select_model`) and replayed on the held-out scenarios;
* ``fitted_v2``: the same with the recall-v2 candidates too: the lexical
  models under the stemmed analysis (Snowball stems, query-term counts) and with a
  fitted query adapter;
* ``fitted_context``: the lexical models with and without the conversational context
  signal s8 (``lexical_context``), plain and stemmed, the winner fitted at l2 0.01,
  temperature 0.05 (no hyperparameter grid: the selection's fits dominate the time).

* ``cli_default`` / ``cli_tuned`` (only with ``--rankings``): ``python -m training cv``
  as a user runs it (its fast default selection, folds in parallel processes), and the
  same with ``--tune-embedder lora`` (the MiniLM fine-tuned inside each fold; about
  10 minutes a fold on 2 cores).

``--ablation`` adds ``v2_no_adapter`` and ``v2_no_stem`` (``fitted_v2`` without one
of the two) and ``context_no_context`` (``fitted_context`` without the context
models). ``--batch-ablation`` scores the ``lexical`` model with each of the query
adapter, stemming and the context signal on and off (8 variants, out of fold over the
same scenario folds, with the batch forward: candidates and activation as captured)
and adds them as a second panel per dataset. Prints top-1 / hit@k / nDCG@k / recall@k
per ranking, the fitted models' ratio to cosine, the seconds of each, and writes a bar
chart (``--plot``, PNG) and a JSON report (``--json``).

Usage: python benchmarks/real_recall.py [--data DIR] [--folds 5] [--affect estimate]
       [--datasets locomo10_dev,realistic_recall_v2] [--ablation] [--batch-ablation]
       [--rankings R,...]
       [--plot out.png] [--json out.json] [--quiet]
       python benchmarks/real_recall.py --plot-from a.json b.json --plot out.png
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from emotional_memory import EmotionalMemoryConfig
from emotional_memory.learn import (
    build_recall_batch,
    cross_validate,
    evaluate_batch,
    fit,
    ranking_metrics,
    scenario_folds,
    semantic_only_config,
)
from emotional_memory.learn.fitting import analysis_config, candidate_models
from emotional_memory.replay import (
    LookupEmbedder,
    ReplayAffect,
    load_dataset,
    replay_dataset,
    summarize,
)
from emotional_memory.scoring_config import params_from_config

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
METRICS = ("top1", "hit_at_k", "ndcg_at_k", "recall_at_k")
RANKINGS = ("cosine", "bm25", "default", "fitted", "fitted_v2", "fitted_context")
ABLATION = ("v2_no_adapter", "v2_no_stem", "context_no_context")
#: ``python -m training cv`` as a user runs it: its default selection, and with
#: ``--tune-embedder`` (the MiniLM fine-tuned inside each fold; slow: ~10 min a fold)
CLI_RANKINGS: dict[str, tuple[str, ...]] = {
    "cli_default": (),
    "cli_tuned": ("--tune-embedder", "lora"),
}
FITTED: dict[str, dict[str, Any]] = {  # cross_validate options of each fitted ranking
    "fitted": {"analyses": (), "adapter": False},
    "fitted_v2": {"analyses": ("stem",), "adapter": True},
    "v2_no_adapter": {"analyses": ("stem",), "adapter": False},
    "v2_no_stem": {"analyses": (), "adapter": True},
    "fitted_context": {"analyses": ("stem",), "adapter": False, "context": True,
                       "tune": False},
    "context_no_context": {"analyses": ("stem",), "adapter": False, "context": False,
                           "tune": False},
}


def bm25_only_config(config: EmotionalMemoryConfig) -> EmotionalMemoryConfig:
    """``config`` ranking by the lexical signal alone (hybrid candidates)."""
    cosine = semantic_only_config(config)
    return cosine.model_copy(update={"retrieval": cosine.retrieval.model_copy(update={
        "base_weights": [0.0] * 6, "lexical_weight": 1.0,
    })})


def _affect_mode(requested: str) -> str:
    if requested != "estimate":
        return requested
    try:
        from emotional_memory.appraisal_embedding import EmbeddingAppraisalEngine

        EmbeddingAppraisalEngine()
    except (ImportError, RuntimeError, FileNotFoundError) as exc:
        print(f"affect estimator unavailable ({exc}); using --affect neutral",
              file=sys.stderr)
        return "neutral"
    return "estimate"


def run_dataset(
    name: str, data_dir: Path, folds: int, affect: str, progress: bool,
    rankings: tuple[str, ...] = RANKINGS,
) -> dict[str, Any]:
    """The rankings on one dataset.

    Args:
        name: dataset stem in ``data_dir``.
        data_dir: folder with ``NAME.json`` and ``NAME.minilm.npz``.
        folds: outer CV folds of the fitted models (at most the scenario count).
        affect: ``estimate`` or ``neutral`` for unlabelled events.
        progress: progress bars on stderr.
        rankings: which rankings (:data:`RANKINGS` and :data:`ABLATION` names).

    Returns:
        ``{"rankings": {ranking: metrics}, "chosen": {ranking: [...]}, "seconds": {...}}``.
    """
    data = load_dataset(data_dir / f"{name}.json")
    embedder = LookupEmbedder.from_npz(data_dir / f"{name}.minilm.npz")
    settings = ReplayAffect.prepare(data, events=affect)  # type: ignore[arg-type]
    base = EmotionalMemoryConfig()
    out: dict[str, Any] = {"rankings": {}, "seconds": {}, "chosen": {}}
    fixed = {"cosine": semantic_only_config(base), "bm25": bm25_only_config(base),
             "default": base}
    k = min(folds, len(data["scenarios"]))
    for ranking in rankings:
        t0 = time.perf_counter()
        if ranking in CLI_RANKINGS:
            report = _cli_cv(data_dir / f"{name}.json", data_dir / f"{name}.minilm.npz", k,
                             affect, progress, CLI_RANKINGS[ranking])
            out["rankings"][ranking] = report
            out["chosen"][ranking] = report["chosen"]
        elif ranking in fixed:
            out["rankings"][ranking] = summarize(replay_dataset(
                data, embedder, fixed[ranking], affect=settings, progress=progress
            ))
        else:
            cv = cross_validate(data, embedder, base, folds=k, select="model", lexical=True,
                                affect=settings, progress=progress, **FITTED[ranking])
            out["rankings"][ranking] = cv.metrics
            out["chosen"][ranking] = cv.chosen
        out["seconds"][ranking] = time.perf_counter() - t0
    out["folds"] = k
    return out


def batch_ablation(
    name: str, data_dir: Path, folds: int, affect: str, progress: bool
) -> dict[str, Any]:
    """The ``lexical`` model with the adapter, stemming and context each on and off.

    Out of fold over ``folds`` scenario folds (the seed-0 folds of the CV), scored with
    the batch forward; every variant at l2 0.01, temperature 0.05.

    Args:
        name, data_dir, folds, affect, progress: as :func:`run_dataset`.

    Returns:
        ``{"rankings": {variant: {"top1", "hit_at_k", ...}}, "seconds": {...},
        "folds": k}``; variants are named ``lexical`` plus ``+adapter``, ``+stem``,
        ``+context``.
    """
    data = load_dataset(data_dir / f"{name}.json")
    embedder = LookupEmbedder.from_npz(data_dir / f"{name}.minilm.npz")
    settings = ReplayAffect.prepare(data, events=affect)  # type: ignore[arg-type]
    base = EmotionalMemoryConfig()
    batches = {
        analysis: build_recall_batch(
            data, embedder, base if analysis == "none" else analysis_config(base, analysis),
            lexical=True, context=True, embeddings=True, affect=settings, progress=progress,
        )
        for analysis in ("none", "stem")
    }
    info = batches["none"][1]
    models = candidate_models(base, True, analyses=("stem",), adapter=True, context=True)
    k = min(folds, len(info.scenario_ids))
    parts = scenario_folds(len(info.scenario_ids), k, 0)
    out: dict[str, Any] = {"rankings": {}, "seconds": {}, "folds": k}
    for stem in (False, True):
        for adapter in (False, True):
            for context in (False, True):
                model = "lexical" + ("_context" if context else "") + (
                    "_adapter" if adapter else "") + ("@stem" if stem else "")
                label = "lexical" + "".join(
                    f" +{part}" for part, on in (("adapter", adapter), ("stem", stem),
                                                 ("context", context)) if on
                )
                start, trainable = models[model]
                batch = batches["stem" if stem else "none"][0]
                scen = np.asarray(batch.scenario)
                lab, valid = np.asarray(batch.labels), np.asarray(batch.columns.valid)
                per_query = {m: np.zeros(batch.n_queries) for m in ("top1", "hit_at_k", "rr")}
                t0 = time.perf_counter()
                for held in parts:
                    held_mask = np.isin(scen, held)
                    result = fit(batch, info, start, trainable=trainable or (),
                                 train_mask=~held_mask, l2=0.01, temperature=0.05)
                    params = params_from_config(result.config.retrieval, result.config.decay)
                    per = ranking_metrics(evaluate_batch(params, batch, result.config), lab,
                                          valid, info.top_k)
                    for m in per_query:
                        per_query[m][held_mask] = per[m][held_mask]
                out["rankings"][label] = {
                    "top1": float(per_query["top1"].mean()),
                    "hit_at_k": float(per_query["hit_at_k"].mean()),
                    "mrr": float(per_query["rr"].mean()),
                    "n_queries": batch.n_queries,
                }
                out["seconds"][label] = time.perf_counter() - t0
    return out


def _cli_cv(
    dataset: Path, embeddings: Path, folds: int, affect: str, progress: bool,
    extra: tuple[str, ...],
) -> dict[str, Any]:
    """``python -m training cv`` on ``dataset`` with its defaults plus ``extra``."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from training.cli import build_parser, run_cv

    argv = ["cv", "--dataset", str(dataset), "--embeddings", str(embeddings), "--folds",
            str(folds), "--affect", affect, *extra, *([] if progress else ["--quiet"])]
    return run_cv(build_parser().parse_args(argv))


def plot(report: dict[str, Any], path: Path) -> Path:
    """Grouped bars: each dataset x metric, one bar per ranking."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report)
    fig, axes = plt.subplots(1, len(names), figsize=(7.5 * len(names), 4.4), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        shown = list(report[name]["rankings"])
        width = 0.84 / len(shown)
        metrics = [m for m in METRICS if m in report[name]["rankings"][shown[0]]]
        for j, ranking in enumerate(shown):
            values = [report[name]["rankings"][ranking][m] for m in metrics]
            xs = [i + (j - (len(shown) - 1) / 2) * width for i in range(len(metrics))]
            bars = ax.bar(xs, values, width, label=ranking)
            ax.bar_label(bars, fmt="%.2f", fontsize=6, padding=1, rotation=90)
        ax.set_xticks(range(len(metrics)), [m.replace("_at_k", "@k") for m in metrics])
        ax.set_ylim(0, 1.12)
        ax.set_title(f"{name} ({report[name]['folds']}-fold CV for the fitted rows)",
                     fontsize=9)
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--datasets", default="locomo10_dev,realistic_recall_v2")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--affect", choices=("estimate", "neutral"), default="estimate")
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--ablation", action="store_true",
                        help="also fitted_v2 without the adapter / without stemming")
    parser.add_argument("--batch-ablation", action="store_true",
                        help="also the lexical model with the adapter, stemming and "
                             "context each on and off (batch forward, out of fold)")
    parser.add_argument("--rankings", default=None,
                        help="comma list of rankings to run (default: all, see --ablation)")
    parser.add_argument("--plot-from", type=Path, nargs="+", default=None,
                        help="draw --plot from saved --json reports (merged, in order) "
                             "instead of running")
    args = parser.parse_args(argv)
    if args.plot_from:
        merged: dict[str, Any] = {}
        for path in args.plot_from:
            for name, part in json.loads(path.read_text(encoding="utf-8")).items():
                entry = merged.setdefault(name, {"rankings": {}, "folds": part["folds"]})
                entry["rankings"].update(part["rankings"])
        if args.plot is None:
            parser.error("--plot-from needs --plot")
        print(f"plot: {plot(merged, args.plot)}")
        return
    affect = _affect_mode(args.affect)
    rankings = RANKINGS + (ABLATION if args.ablation else ())
    if args.rankings is not None:
        rankings = tuple(r.strip() for r in args.rankings.split(",") if r.strip())
        known = RANKINGS + ABLATION + tuple(CLI_RANKINGS)
        unknown = [r for r in rankings if r not in known]
        if unknown:
            parser.error(f"--rankings: unknown {unknown}; choose from {known}")
    if not rankings and not args.batch_ablation:
        parser.error("--rankings: nothing to run (name a ranking or add --batch-ablation)")
    if args.folds < 2:
        parser.error("--folds must be at least 2 (scenario-grouped cross-validation)")
    datasets = [n.strip() for n in args.datasets.split(",") if n.strip()]
    absent = [n for n in datasets if not (args.data / f"{n}.json").is_file()
              or not (args.data / f"{n}.minilm.npz").is_file()]
    if absent or not datasets:
        parser.error(f"--datasets: no NAME.json and NAME.minilm.npz in {args.data} for "
                     f"{absent or args.datasets!r}")
    report: dict[str, Any] = {}
    for name in datasets:
        if rankings:
            report[name] = run_dataset(name, args.data, args.folds, affect,
                                       not args.quiet, rankings)
        if args.batch_ablation:
            key = f"{name} ablation (batch forward)"
            report[key] = batch_ablation(name, args.data, args.folds, affect,
                                         not args.quiet)
            print(f"\n{key}")
            for label, row in report[key]["rankings"].items():
                print(f"{label:34} top1 {row['top1']:.3f}  hit@k {row['hit_at_k']:.3f}  "
                      f"({report[key]['seconds'][label]:.0f} s)")
        if name not in report:
            continue
        rows = report[name]["rankings"]
        first = next(iter(rows.values()))
        print(f"\n{name} (affect of unlabelled events: {affect}; "
              f"{first['n_queries']} queries)")
        print(f"{'ranking':14}" + "".join(f"{m:>13}" for m in METRICS) + f"{'seconds':>10}")
        for ranking in rows:
            print(f"{ranking:14}" + "".join(f"{rows[ranking][m]:13.3f}" for m in METRICS)
                  + f"{report[name]['seconds'][ranking]:10.1f}")
        cos = rows.get("cosine")
        for fitted in (r for r in rows if r in FITTED or r in CLI_RANKINGS):
            if cos is not None:
                print(f"{fitted} / cosine: " + ", ".join(
                    f"{m} {rows[fitted][m] / cos[m]:.2f}x" for m in METRICS if cos[m] > 0))
            print(f"{fitted}: models chosen per fold: {report[name]['chosen'][fitted]}")
    if args.plot:
        print(f"plot: {plot(report, args.plot)}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")


if __name__ == "__main__":
    main()
