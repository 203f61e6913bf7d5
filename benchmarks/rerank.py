"""Does a cross-encoder re-ranking stage pay on held-out LoCoMo conversations?

Protocol (as ``benchmarks/abstention.py``): fit the scoring model with the CLI's
default command (``python -m training fit``) on some conversations of the dev half
(default c26 c30 c41), replay every conversation through the engine with it (top_k 5)
and keep each query's whole pass-2 ranking. Then:

* a cross-encoder (``embedders/cross_encoder.py``, all-MiniLM-L6-v2's encoder over
  ``[CLS] query [SEP] memory [SEP]``) is trained on the training conversations' queries:
  evidence turns against the best-ranked non-evidence candidates of the fitted model's
  ranking (hard negatives), listwise softmax loss, top encoder layers + head only;
* the mix weight of ``(1 - a) z(base score) + a z(cross-encoder score)`` is chosen on the
  training conversations only: a cross-encoder trained on all but the last training
  conversation re-ranks that conversation's top N, and the ``a`` of the best MRR wins;
* the cross-encoder trained on every training conversation re-scores the held-out
  conversations' top N (N in 10, 20), each query in its own call (tokenisation
  included), timed.

Prints top-1, hit@5 and MRR@5 of the base ranking, the cosine baseline, and each
re-ranking, with the re-ranking's per-query latency (p50 / p90 ms) and its per-query
gains and losses against the base (paired bootstrap interval of the difference).

Usage: python benchmarks/rerank.py [--data DIR] [--train c26,c30,c41]
       [--config FITTED.json] [--steps 250] [--layers 1] [--queries-per-step 8]
       [--list-size 8] [--mix A] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _args import positive_int

from emotional_memory import EmotionalMemoryConfig
from emotional_memory.embedders.cross_encoder import CrossEncoder, PairScorer, init_cross_encoder
from emotional_memory.embedders.minilm import MiniLMEmbedder
from emotional_memory.learn.rerank import (
    CandidateList,
    PairCache,
    RerankTraining,
    build_pair_cache,
    cached_scores,
    capture_candidates,
    rerank_order,
    train_cross_encoder,
)
from emotional_memory.replay import LookupEmbedder, load_dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from abstention import DEFAULT_DATA, _fit, _subset

K = 5
MIXES = tuple(round(a, 2) for a in np.linspace(0.0, 1.0, 11))


def _metrics(orders: list[list[str]], expected: list[set[str]]) -> dict[str, float]:
    """top-1, hit@5 and MRR@5 of ranked id lists."""
    top1, hit, rr = [], [], []
    for ids, exp in zip(orders, expected, strict=True):
        first = next((i for i, x in enumerate(ids[:K]) if x in exp), None)
        top1.append(first == 0)
        hit.append(first is not None)
        rr.append(0.0 if first is None else 1.0 / (first + 1))
    return {"top1": float(np.mean(top1)), "hit_at_5": float(np.mean(hit)),
            "mrr_at_5": float(np.mean(rr))}


def _paired(orders: list[list[str]], base: list[list[str]], expected: list[set[str]],
            seed: int = 0) -> dict[str, Any]:
    """Per-query changes against the base: queries gained / lost at top-1 and hit@5, and
    a paired bootstrap 95% interval (2,000 resamples of the queries) of each difference."""
    out: dict[str, Any] = {}
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(orders), size=(2000, len(orders)))
    for name, depth in (("top1", 1), ("hit_at_5", K)):
        new = np.asarray([any(x in e for x in o[:depth]) for o, e in zip(orders, expected,
                                                                          strict=True)])
        old = np.asarray([any(x in e for x in o[:depth]) for o, e in zip(base, expected,
                                                                         strict=True)])
        diff = new.astype(float) - old.astype(float)
        boot = diff[picks].mean(axis=1)
        out[name] = {"gained": int(np.sum(diff > 0)), "lost": int(np.sum(diff < 0)),
                     "ci95": [float(np.percentile(boot, 2.5)),
                              float(np.percentile(boot, 97.5))]}
    return out


def _reranked(lists: list[CandidateList], scores: list[np.ndarray], n: int,
              mix: float) -> list[list[str]]:
    """Each list's ids once its top ``n`` are re-scored (``scores`` of its top 20)."""
    out = []
    for c, s in zip(lists, scores, strict=True):
        m = min(n, len(c.ids))
        order = rerank_order(c.scores, s[:m], n, mix)
        out.append([c.ids[i] for i in order])
    return out


def _cosine(data: dict[str, Any], embedder: LookupEmbedder) -> list[list[str]]:
    """Per query the conversation's turns by cosine to it, best first."""
    orders = []
    for scenario in data["scenarios"]:
        events = [e for s in scenario["sessions"] for e in s["events"]]
        emb = np.asarray(embedder.embed_batch([e["content"] for e in events]))
        for s in scenario["sessions"]:
            for q in s.get("queries", []):
                sims = emb @ np.asarray(embedder.embed(q["query"]))
                orders.append([str(events[i]["memory_id"]) for i in np.argsort(-sims)[:K]])
    return orders


def _choose_mix(model: CrossEncoder, cache: PairCache, rows: list[int],
                ns: tuple[int, ...]) -> dict[int, dict[str, Any]]:
    """Per N the mix of the best MRR@5 over ``rows`` of the cache (and its table)."""
    lists = [cache.queries[i] for i in rows]
    scores = [cached_scores(model, cache, i, max(ns)) for i in rows]
    expected = [c.expected for c in lists]
    out = {}
    for n in ns:
        table = {a: _metrics(_reranked(lists, scores, n, a), expected) for a in MIXES}
        best = max(MIXES, key=lambda a: (table[a]["mrr_at_5"], table[a]["top1"], -a))
        out[n] = {"mix": best, "by_mix": {str(a): m for a, m in table.items()}}
    return out


def _held_out(scorer: PairScorer, lists: list[CandidateList],
              ns: tuple[int, ...]) -> tuple[list[np.ndarray], dict[int, list[float]]]:
    """Cross-encoder scores of each list's top max(ns), and per N each call's seconds."""
    for n in ns:  # compile the shapes first
        scorer.score(lists[0].query, lists[0].texts[:n])
    times: dict[int, list[float]] = {n: [] for n in ns}
    scores = []
    for c in lists:
        for n in ns:
            t0 = time.perf_counter()
            s = scorer.score(c.query, c.texts[:n])
            times[n].append(time.perf_counter() - t0)
        scores.append(s)  # the largest N's (ns ascending)
    return scores, times


def _train(model: CrossEncoder, cache: PairCache, opts: RerankTraining, rows: list[int],
           label: str) -> tuple[CrossEncoder, dict[str, Any]]:
    t0 = time.perf_counter()
    trained, losses = train_cross_encoder(model, cache, opts, train=rows, progress=True)
    info = {"seconds": time.perf_counter() - t0, "queries": len(rows),
            "loss_first20": float(np.mean(losses[:20])),
            "loss_last20": float(np.mean(losses[-20:]))}
    print(f"{label}: {info}", file=sys.stderr)
    return trained, info


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--train", default="c26,c30,c41")
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--layers", type=positive_int, default=1)
    parser.add_argument("--steps", type=positive_int, default=250)
    parser.add_argument("--queries-per-step", type=positive_int, default=8)
    parser.add_argument("--list-size", type=positive_int, default=8)
    parser.add_argument("--mix", type=float, default=None,
                        help="use this mix for every N instead of choosing it on the last "
                             "training conversation (skips the inner training)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    ns = (10, 20)
    data = load_dataset(args.data / "locomo10_dev.json")
    npz = args.data / "locomo10_dev.minilm.npz"
    lookup = LookupEmbedder.from_npz(npz)
    train_ids = args.train.split(",")
    every = {s["scenario_id"] for s in data["scenarios"]}
    if not set(train_ids) <= every or not every - set(train_ids):
        parser.error(f"--train: conversations of {sorted(every)}, leaving one held out "
                     f"(unknown: {sorted(set(train_ids) - every)})")
    if args.mix is None and len(set(train_ids)) < 2:
        parser.error("--train: two conversations at least (the mix is chosen on the last, "
                     "trained on the others), or give --mix")
    test = sorted(every - set(train_ids))
    fit_seconds = None
    if args.config is None:
        args.config = Path(tempfile.mkdtemp()) / "fitted.json"
        fit_seconds = _fit(_subset(data, set(train_ids)), npz, args.config)
    cfg = EmotionalMemoryConfig.model_validate_json(args.config.read_text(encoding="utf-8"))
    t0 = time.perf_counter()
    train_lists, _ = capture_candidates(_subset(data, set(train_ids)), lookup, cfg, top_k=K)
    test_data = _subset(data, set(test))
    test_lists, test_results = capture_candidates(test_data, lookup, cfg, top_k=K)
    capture_seconds = time.perf_counter() - t0
    assert all(r.retrieved == c.ids[:K] for r, c in zip(test_results, test_lists, strict=True))
    expected = [c.expected for c in test_lists]

    embedder = MiniLMEmbedder()
    base_model = init_cross_encoder(embedder.model)
    opts = RerankTraining(layers=args.layers, steps=args.steps,
                          queries_per_step=args.queries_per_step, list_size=args.list_size,
                          hard_pool=max(ns))
    t0 = time.perf_counter()
    cache = build_pair_cache(base_model, embedder, train_lists,
                             len(base_model.encoder.layers) - args.layers,
                             hard_pool=max(ns), progress=True)
    cache_seconds = time.perf_counter() - t0
    last = train_ids[-1]
    inner = [i for i, c in enumerate(train_lists) if c.scenario_id != last]
    held_inner = [i for i, c in enumerate(train_lists) if c.scenario_id == last]
    untrained = _choose_mix(base_model, cache, held_inner, ns)
    chosen: dict[int, dict[str, Any]]
    inner_info: dict[str, Any] | None
    if args.mix is None:
        inner_model, inner_info = _train(base_model, cache, opts, inner, "inner")
        chosen = _choose_mix(inner_model, cache, held_inner, ns)
        where = f"chosen on {last}"
    else:
        inner_info, chosen, where = None, {n: {"mix": args.mix} for n in ns}, "given"
    final_model, final_info = _train(base_model, cache, opts, list(range(len(train_lists))),
                                     "final")
    scorer = PairScorer(final_model, embedder)
    scores, times = _held_out(scorer, test_lists, ns)
    base_orders = [c.ids for c in test_lists]
    rows: list[dict[str, Any]] = [
        {"ranking": "cosine (MiniLM lookup)", **_metrics(_cosine(test_data, lookup), expected)},
        {"ranking": "fitted model (engine replay)", **_metrics(base_orders, expected)},
    ]
    for n in ns:
        lat = np.asarray(times[n]) * 1e3
        for label, mix in (("cross-encoder alone", 1.0),
                           (f"mix a={chosen[n]['mix']} ({where})", chosen[n]["mix"])):
            orders = _reranked(test_lists, scores, n, mix)
            rows.append({"ranking": f"rerank top-{n}: {label}", "top_n": n, "mix": mix,
                         **_metrics(orders, expected),
                         "vs_base": _paired(orders, base_orders, expected),
                         "latency_ms_p50": float(np.percentile(lat, 50)),
                         "latency_ms_p90": float(np.percentile(lat, 90))})
    report = {
        "train": train_ids, "test": test, "n_test_queries": len(test_lists),
        "fit_seconds": fit_seconds, "capture_seconds": capture_seconds,
        "candidates_per_query": {"min": min(len(c.ids) for c in test_lists),
                                 "median": float(np.median([len(c.ids) for c in test_lists]))},
        "options": {k: getattr(opts, k) for k in opts.__dataclass_fields__},
        "cache_pairs": len(cache.states), "cache_seconds": cache_seconds,
        "inner_training": inner_info, "final_training": final_info,
        "inner_choice": {n: chosen[n] for n in ns},
        "inner_untrained_head": {n: untrained[n]["by_mix"]["1.0"] for n in ns},
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rows": rows,
    }
    print(f"{'ranking':<52} {'top-1':>6} {'hit@5':>6} {'MRR@5':>6} {'p50 ms':>7} {'p90 ms':>7}")
    for r in rows:
        cell = (f"{r['latency_ms_p50']:7.1f} {r['latency_ms_p90']:7.1f}"
                if "latency_ms_p50" in r else "")
        print(f"{r['ranking']:<52} {r['top1']:6.3f} {r['hit_at_5']:6.3f} {r['mrr_at_5']:6.3f} "
              f"{cell}")
        if "vs_base" in r:
            v = r["vs_base"]
            print("    vs base: " + "; ".join(
                f"{m} +{v[m]['gained']} -{v[m]['lost']} queries, 95% CI of the difference "
                f"[{v[m]['ci95'][0]:+.3f}, {v[m]['ci95'][1]:+.3f}]" for m in ("top1", "hit_at_5")))
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report), encoding="utf-8")


if __name__ == "__main__":
    main()
