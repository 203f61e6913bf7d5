"""Calibrated relevance and abstention on held-out LoCoMo conversations.

Fits with the CLI's default command (``python -m training fit``: model selection with
the relevance calibration) on some conversations of the dev half, then replays the
others through the engine twice:

* as they are (queries with evidence): each result's calibrated relevance, hit@k
  before and after dropping results below the config's suggested threshold;
* without evidence: the held-out queries split in two halves per conversation; each
  half is replayed with the union of its evidence turns removed from the
  conversation (so none of its expected memories is stored) and only its queries
  asked. A query abstains when no result reaches the threshold.

Prints the expected calibration error (10 bins) over every returned result of both
replays, the abstention rate on the no-evidence queries, the share of hit@k kept,
and the same at a few other thresholds; the baseline timed in the same process is
the plain replay.

It also prints a diagnostic that needs no fit: how far the best cosine between a
question and its conversation's turns falls when the question's evidence turns are
removed, and what a max-cosine abstainer could do (``--cosine-only`` prints just that).

Usage: python benchmarks/abstention.py [--data DIR] [--train c26,c30,c41]
       [--config FITTED.json] [--json OUT] [--cosine-only]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from emotional_memory import EmotionalMemoryConfig
from emotional_memory.learn.calibration import expected_calibration_error
from emotional_memory.replay import LookupEmbedder, ReplayAffect, load_dataset, replay_dataset

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _subset(data: dict[str, Any], ids: set[str]) -> dict[str, Any]:
    return {**data, "scenarios": [s for s in data["scenarios"] if s["scenario_id"] in ids]}


def _without_evidence(data: dict[str, Any], half: int, seed: int = 0) -> dict[str, Any]:
    """Per scenario, one half of its queries, with their evidence turns removed."""
    rng = np.random.default_rng(seed)
    scenarios = []
    for scenario in data["scenarios"]:
        queries = [q for s in scenario["sessions"] for q in s.get("queries", [])]
        mask = rng.permutation(len(queries)) % 2 == half
        asked = [q for q, m in zip(queries, mask, strict=True) if m]
        gone = {str(m) for q in asked for m in q["expected_memory_ids"]}
        sessions = []
        for s in scenario["sessions"]:
            keep = [e for e in s["events"] if str(e["memory_id"]) not in gone]
            sessions.append({**s, "events": keep,
                             "queries": [q for q in s.get("queries", []) if q in asked]})
        scenarios.append({**scenario, "sessions": sessions})
    return {**data, "scenarios": scenarios}


def _fit(data: dict[str, Any], npz: Path, out: Path) -> float:
    from training.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        t0 = time.perf_counter()
        assert main(["fit", "--dataset", str(path), "--embeddings", str(npz), "--quiet",
                     "--json", "--out", str(out)]) == 0
        return time.perf_counter() - t0


def _rows(results: list[Any]) -> tuple[list[float], list[bool]]:
    probs, relevant = [], []
    for r in results:
        for e, rid in zip(r.explanations, r.retrieved, strict=True):
            probs.append(float(e.relevance))
            relevant.append(rid in r.expected)
    return probs, relevant


def _kept_hit(r: Any, t: float) -> bool:
    return any(rid in r.expected and e.relevance >= t
               for e, rid in zip(r.explanations, r.retrieved, strict=True))


def cosine_ceiling(data: dict[str, Any], embedder: LookupEmbedder) -> dict[str, Any]:
    """What the best query-turn cosine says about whether the evidence is stored.

    Args:
        data: the dataset (its questions name their evidence turns).
        embedder: the dataset's vectors.

    Returns:
        ``median_drop``: the median over questions of (best cosine over all turns) -
        (best cosine over the non-evidence turns); ``share_closest_not_evidence``: the
        share of questions whose closest turn is not evidence; ``cosine_hit_at_5``; and per
        threshold (the 1st..10th percentile of the best cosine of the questions whose
        evidence ranks in the cosine top 5) the share of those kept and of the
        no-evidence questions (evidence removed) abstained.
    """
    best, best_without, hit = [], [], []
    for scenario in data["scenarios"]:
        events = [e for s in scenario["sessions"] for e in s["events"]]
        turns = np.asarray(embedder.embed_batch([str(e["content"]) for e in events]))
        turns = turns / np.linalg.norm(turns, axis=1, keepdims=True)
        ids = [str(e["memory_id"]) for e in events]
        for q in (q for s in scenario["sessions"] for q in s.get("queries", [])):
            v = np.asarray(embedder.embed(str(q["query"])))
            cos = turns @ (v / np.linalg.norm(v))
            evidence = np.isin(ids, [str(m) for m in q["expected_memory_ids"]])
            best.append(cos.max())
            best_without.append(cos[~evidence].max())
            hit.append(bool(cos[evidence].max() >= np.sort(cos)[-min(5, len(cos))]))
    b, bw, h = np.asarray(best), np.asarray(best_without), np.asarray(hit)
    rows = [{"threshold": float(t), "hit_kept": float(np.mean(b[h] >= t)),
             "abstain_no_evidence": float(np.mean(bw < t))}
            for t in np.percentile(b[h], [1, 5, 10])]
    return {"n_questions": len(b), "median_drop": float(np.median(b - bw)),
            "share_closest_not_evidence": float(np.mean(b == bw)),
            "mean_drop": float(np.mean(b - bw)), "cosine_hit_at_5": float(h.mean()),
            "thresholds": rows}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--train", default="c26,c30,c41")
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--cosine-only", action="store_true",
                        help="only the max-cosine diagnostic, on every conversation")
    args = parser.parse_args(argv)
    data = load_dataset(args.data / "locomo10_dev.json")
    npz = args.data / "locomo10_dev.minilm.npz"
    embedder = LookupEmbedder.from_npz(npz)
    if args.cosine_only:
        print(json.dumps(cosine_ceiling(data, embedder), indent=1))
        return
    every = {s["scenario_id"] for s in data["scenarios"]}
    train = set(args.train.split(","))
    if not train <= every or not every - train:
        parser.error(f"--train: conversations of {sorted(every)}, leaving one held out "
                     f"(unknown: {sorted(train - every)})")
    test = every - train
    fit_seconds = None
    if args.config is None:
        args.config = Path(tempfile.mkdtemp()) / "fitted.json"
        fit_seconds = _fit(_subset(data, train), npz, args.config)
    cfg = EmotionalMemoryConfig.model_validate_json(args.config.read_text(encoding="utf-8"))
    cal = cfg.retrieval.relevance_calibration
    if cal is None:
        parser.error(f"--config {args.config}: no relevance calibration "
                     "(python -m training fit writes one)")
    held = _subset(data, test)
    t0 = time.perf_counter()
    with_evidence = replay_dataset(held, embedder, cfg, affect=ReplayAffect.prepare(held))
    t_replay = time.perf_counter() - t0
    without: list[Any] = []
    for half in (0, 1):
        ablated = _without_evidence(held, half)
        without += replay_dataset(ablated, embedder, cfg, affect=ReplayAffect.prepare(ablated))
    probs, relevant = _rows(with_evidence)
    p2, r2 = _rows(without)
    assert not any(r2), "an evidence turn was left in"
    ece_all = expected_calibration_error(np.asarray(probs + p2), np.asarray(relevant + r2))
    ece_evidence = expected_calibration_error(np.asarray(probs), np.asarray(relevant))
    hits = [r for r in with_evidence if r.hit]
    rows = []
    for t in sorted({cal.default_min_relevance, 0.05, 0.1, 0.2, 0.3, 0.5}):
        abstain = np.mean([not any(e.relevance >= t for e in r.explanations) for r in without])
        kept = np.mean([_kept_hit(r, t) for r in hits]) if hits else float("nan")
        rows.append({"threshold": t, "abstain_no_evidence": float(abstain),
                     "hit_kept": float(kept),
                     "answered_with_evidence": float(np.mean(
                         [any(e.relevance >= t for e in r.explanations)
                          for r in with_evidence]))})
    report = {
        "train": sorted(train), "test": sorted(test), "fit_seconds": fit_seconds,
        "replay_seconds": t_replay, "calibration": cal.model_dump(),
        "n_evidence_queries": len(with_evidence), "n_no_evidence_queries": len(without),
        "top1": float(np.mean([r.top1 for r in with_evidence])),
        "hit_at_k": len(hits) / len(with_evidence),
        "ece_all_results": ece_all, "ece_evidence_results": ece_evidence,
        "thresholds": rows, "cosine_ceiling": cosine_ceiling(held, embedder),
    }
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report), encoding="utf-8")


if __name__ == "__main__":
    main()
