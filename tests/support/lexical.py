"""Plain-Python oracles of the lexical signal and the SPEC 4 gates, and the small
engines and datasets the lexical, context and query-adapter tests share."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from typing import Any

from emotional_memory import CoreAffect, EmotionalMemory, EmotionalMemoryConfig, InMemoryStore
from emotional_memory.affect import AffectiveMomentum
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.models import Memory, make_emotional_tag
from emotional_memory.mood import MoodField
from emotional_memory.replay import TickClock


def oracle_tokens(text: str) -> list[str]:
    """Char-by-char: maximal runs that start with an ``ch.isalnum()`` character of the
    folded text and go on with such characters or combining marks (category M).

    ``fold`` is Unicode's full case folding between two NFC normalisations: the text
    is folded *as a whole* first ('İ' (U+0130) folds to 'i' + U+0307, a mark inside
    the word; every sigma folds to 'σ'; 'ß' to 'ss'), then split. ``[^\\W_]`` matches
    exactly the ``isalnum()`` characters (checked over every code point in
    :func:`test_word_class_is_isalnum`).
    """
    folded = unicodedata.normalize("NFC", unicodedata.normalize("NFC", text).casefold())
    out: list[str] = []
    run: list[str] = []
    for ch in folded:
        if ch.isalnum() or (run and unicodedata.category(ch).startswith("M")):
            run.append(ch)
        elif run:
            out.append("".join(run))
            run = []
    if run:
        out.append("".join(run))
    return out


def oracle_bm25(
    terms: Sequence[str], doc: Sequence[str], corpus: dict[str, list[str]] | list[list[str]],
    k1: float, b: float,
) -> float:
    """Okapi BM25 in plain Python: idf = ln(1 + (N - df + .5) / (df + .5))."""
    docs = list(corpus.values()) if isinstance(corpus, dict) else corpus
    n = len(docs)
    avg = sum(len(d) for d in docs) / n if n else 0.0
    total = 0.0
    for t in terms:
        tf = doc.count(t)
        if tf == 0:
            continue
        df = sum(t in d for d in docs)
        idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
        rel = len(doc) / avg if avg > 0 else 1.0
        total += idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * rel))
    return total


def oracle_gated(base: Sequence[float], g: Sequence[float], v: float, a: float) -> list[float]:
    """SPEC 4 gates on the six base weights (plain Python)."""
    def gate(x: float, c: float, k: float) -> float:
        return 0.5 * (1.0 + math.tanh(k * (x - c)))

    s_neg, c_neg, k_neg, s_aro, c_aro, k_aro, s_calm, width, c_calm, k_calm = g
    w = list(base)
    neg = gate(v, c_neg, -k_neg)
    w[1] += s_neg * neg * 2.0 / 3.0
    w[2] += s_neg * neg / 3.0
    w[0] -= s_neg * neg
    aro = gate(a, c_aro, k_aro)
    w[3] += s_aro * aro
    w[0] -= s_aro * aro
    calm = math.exp(-((v / width) ** 2)) * gate(a, c_calm, -k_calm)
    w[0] += s_calm * calm
    w[1] -= s_calm * calm * 2.0 / 3.0
    w[2] -= s_calm * calm / 3.0
    return w


def oracle_normalise(w: Sequence[float]) -> list[float]:
    """Clip negative weights to 0 and normalise to sum 1 (uniform when all are 0)."""
    c = [max(x, 0.0) for x in w]
    total = sum(c)
    return [x / total for x in c] if total > 0 else [1.0 / len(c)] * len(c)


TAG_AFFECTS = [(0.6, 0.4), (-0.7, 0.9), (0.1, 0.2), (-0.2, 0.6), (0.8, 0.8)]


def make_engine(store: Any = None, **cfg: Any) -> EmotionalMemory:
    """An engine over ``store`` (a new InMemoryStore by default), 64-d hashing
    embeddings, a tick clock and ``EmotionalMemoryConfig(**cfg)``."""
    return EmotionalMemory(
        store if store is not None else InMemoryStore(), HashingEmbedder(dim=64),
        config=EmotionalMemoryConfig(**cfg), clock=TickClock(),
    )


def fill(engine: EmotionalMemory, texts: Sequence[str]) -> None:
    """Encode ``texts`` in order, each under the next affect of ``TAG_AFFECTS``."""
    for i, text in enumerate(texts):
        v, a = TAG_AFFECTS[i % len(TAG_AFFECTS)]
        engine.set_affect(CoreAffect(valence=v, arousal=a))
        engine.encode(text)


def lexical_memory(content: str, i: int) -> Memory:
    """A memory with ``content``, a simple tag and a 3-d embedding varying with ``i``."""
    tag = make_emotional_tag(CoreAffect(valence=0.1 * (i % 5), arousal=0.5),
                             AffectiveMomentum.zero(), MoodField.neutral(), 0.5)
    return Memory.create(content, tag, embedding=[1.0, float(i % 3), 0.5])


def tiny_dataset() -> dict[str, Any]:
    """A two-scenario labelled recall dataset (lexical and mood-dependent queries)."""
    def ev(mid: str, content: str, v: float, a: float) -> dict[str, Any]:
        return {"memory_id": mid, "content": content, "valence": v, "arousal": a}

    return {
        "default_top_k": 1,
        "scenarios": [
            {"scenario_id": "s1", "sessions": [{"events": [
                ev("a", "walked the dog in the park", 0.5, 0.4),
                ev("b", "the dog park was muddy", -0.3, 0.6),
                ev("c", "zanzibar quokka sighting", 0.8, 0.9),
                ev("d", "paid the electricity bill", -0.1, 0.2),
            ], "queries": [
                {"query_id": "q1", "query": "quokka in the park",
                 "expected_memory_ids": ["c"], "challenge_type": "lexical"},
                {"query_id": "q2", "query": "the dog", "expected_memory_ids": ["a", "b"],
                 "state": {"valence": -0.5, "arousal": 0.7}},
            ]}]},
            {"scenario_id": "s2", "sessions": [{"events": [
                ev("e", "coffee with an old friend", 0.7, 0.3),
                ev("f", "friend moved abroad", -0.6, 0.5),
                ev("g", "bill for coffee machine repair", -0.2, 0.4),
            ], "queries": []}, {"events": [
                ev("h", "coffee coffee coffee", 0.1, 0.8),
            ], "queries": [
                {"query_id": "q3", "query": "coffee friend", "expected_memory_ids": ["e"]},
            ]}]},
        ],
    }


def capture_pass2_scores(
    monkeypatch: Any, check: Any = None
) -> list[list[float]]:
    """Record the engine's pass-2 scores of each query that ``build_recall_batch``
    captures (the fitting batch's oracle), in candidate order.

    Args:
        monkeypatch: pytest's ``monkeypatch`` (wraps ``recall_batch._capture``).
        check: optional ``check(plan)`` run on each captured plan.

    Returns:
        The list the scores are appended to, one list per query, as queries are
        captured.
    """
    from emotional_memory.learn import recall_batch as rb

    captured: list[list[float]] = []
    original = rb._capture

    def spy(plan: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(plan, *args, **kwargs)
        score = {r.memory.id: r.score for r in plan.pass2}
        captured.append([score[m.id] for m in plan.candidates])
        if check is not None:
            check(plan)
        return out

    monkeypatch.setattr(rb, "_capture", spy)
    return captured
