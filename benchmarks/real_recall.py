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
  (:func:`emotional_memory.learn.select_model`) and replayed on the held-out scenarios.

Prints top-1 / hit@k / nDCG@k / recall@k per ranking, the fitted model's ratio to
cosine, and writes a bar chart (``--plot``, PNG) and a JSON report (``--json``).

Usage: python benchmarks/real_recall.py [--data DIR] [--folds 5] [--affect estimate]
       [--datasets locomo10_dev,realistic_recall_v2] [--plot out.png] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from emotional_memory import EmotionalMemoryConfig
from emotional_memory.learn import cross_validate, semantic_only_config
from emotional_memory.replay import (
    LookupEmbedder,
    ReplayAffect,
    load_dataset,
    replay_dataset,
    summarize,
)

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
METRICS = ("top1", "hit_at_k", "ndcg_at_k", "recall_at_k")
RANKINGS = ("cosine", "bm25", "default", "fitted")


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
    name: str, data_dir: Path, folds: int, affect: str, progress: bool
) -> dict[str, Any]:
    """All four rankings on one dataset.

    Args:
        name: dataset stem in ``data_dir``.
        data_dir: folder with ``NAME.json`` and ``NAME.minilm.npz``.
        folds: outer CV folds of the fitted model (at most the scenario count).
        affect: ``estimate`` or ``neutral`` for unlabelled events.
        progress: progress bars on stderr.

    Returns:
        ``{"rankings": {ranking: metrics}, "chosen": [...], "seconds": {...}}``.
    """
    data = load_dataset(data_dir / f"{name}.json")
    embedder = LookupEmbedder.from_npz(data_dir / f"{name}.minilm.npz")
    settings = ReplayAffect.prepare(data, events=affect)  # type: ignore[arg-type]
    base = EmotionalMemoryConfig()
    out: dict[str, Any] = {"rankings": {}, "seconds": {}}
    fixed = {"cosine": semantic_only_config(base), "bm25": bm25_only_config(base),
             "default": base}
    for ranking, config in fixed.items():
        t0 = time.perf_counter()
        out["rankings"][ranking] = summarize(
            replay_dataset(data, embedder, config, affect=settings, progress=progress)
        )
        out["seconds"][ranking] = time.perf_counter() - t0
    t0 = time.perf_counter()
    k = min(folds, len(data["scenarios"]))
    cv = cross_validate(data, embedder, base, folds=k, select="model", lexical=True,
                        affect=settings, progress=progress)
    out["rankings"]["fitted"] = cv.metrics
    out["seconds"]["fitted"] = time.perf_counter() - t0
    out["chosen"] = cv.chosen
    out["folds"] = k
    return out


def plot(report: dict[str, Any], path: Path) -> Path:
    """Grouped bars: each dataset x metric, one bar per ranking."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report)
    fig, axes = plt.subplots(1, len(names), figsize=(6.5 * len(names), 4.2), squeeze=False)
    width = 0.8 / len(RANKINGS)
    for ax, name in zip(axes[0], names, strict=True):
        for j, ranking in enumerate(RANKINGS):
            values = [report[name]["rankings"][ranking][m] for m in METRICS]
            xs = [i + (j - (len(RANKINGS) - 1) / 2) * width for i in range(len(METRICS))]
            bars = ax.bar(xs, values, width, label=ranking)
            ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
        ax.set_xticks(range(len(METRICS)), [m.replace("_at_k", "@k") for m in METRICS])
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{name} ({report[name]['folds']}-fold CV for 'fitted')")
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
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
    args = parser.parse_args()
    affect = _affect_mode(args.affect)
    report: dict[str, Any] = {}
    for name in [n.strip() for n in args.datasets.split(",") if n.strip()]:
        report[name] = run_dataset(name, args.data, args.folds, affect, not args.quiet)
        rows = report[name]["rankings"]
        print(f"\n{name} (affect of unlabelled events: {affect}; "
              f"{rows['cosine']['n_queries']} queries)")
        print(f"{'ranking':10}" + "".join(f"{m:>13}" for m in METRICS) + f"{'seconds':>10}")
        for ranking in RANKINGS:
            print(f"{ranking:10}" + "".join(f"{rows[ranking][m]:13.3f}" for m in METRICS)
                  + f"{report[name]['seconds'][ranking]:10.1f}")
        cos = rows["cosine"]
        print("fitted / cosine: " + ", ".join(
            f"{m} {rows['fitted'][m] / cos[m]:.2f}x" for m in METRICS if cos[m] > 0))
        print(f"models chosen per fold: {report[name]['chosen']}")
    if args.plot:
        print(f"plot: {plot(report, args.plot)}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")


if __name__ == "__main__":
    main()
