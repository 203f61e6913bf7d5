"""The opt-in lexical signal s7 in the engine: the default six-signal path, hybrid
candidates, stores agreeing on the index, the fitting path, config validation.

Every check compares against an independent plain-Python oracle (Okapi BM25, the SPEC 4
gates, a char-by-char tokenizer, a rebuilt index), never against the code under test.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emotional_memory import (
    EmotionalMemory,
    EmotionalMemoryConfig,
    InMemoryStore,
    Memory,
    RetrievalConfig,
    SQLiteStore,
)
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.lexical import LexicalIndex
from support.lexical import (
    capture_pass2_scores,
    fill,
    lexical_memory,
    make_engine,
    oracle_bm25,
    oracle_tokens,
    tiny_dataset,
)

# ------------------------------------------------------------------ engines

FILLER = [
    "walked the dog around the park this morning",
    "the dog chased a ball in the park",
    "morning walk with the dog near the lake",
    "took the dog to the park after work",
    "the park was busy and the dog was happy",
]


def bank() -> list[str]:
    out = []
    for i in range(22):
        out.append(f"{FILLER[i % 5]} note {i}")
    out.append("zanzibar quokka")  # the rare-word memory: little semantic overlap
    out.extend(["dinner with friends downtown", "read a book before bed"])
    return out


QUERY = "walked the dog around the park this morning zanzibar quokka"


# ------------------------------------------------------------------ 6. default path


def test_default_weight_zero_is_six_signal_path() -> None:
    texts = bank()
    default = make_engine()
    off = make_engine(enable_lexical=False, retrieval=RetrievalConfig(lexical_weight=0.5))
    assert default.config.retrieval.lexical_weight == 0.0
    for engine in (default, off):
        fill(engine, texts)
    for query, k in [(QUERY, 1), ("dog park morning", 3), ("quokka", 2), ("", 2)]:
        outs = []
        for engine in (default, off):
            ex = engine.retrieve_with_explanations(query, top_k=k)
            outs.append([(e.memory.content, e.score, e.pass1_rank, e.pass2_rank,
                          e.candidate_count, e.breakdown.model_dump()) for e in ex])
        assert outs[0] == outs[1]
        for row in outs[0]:
            assert not any(key.startswith("lexical") for key in row[5])
            assert len(row[5]["weights"]) == 6
    # the six-signal default never adds lexical candidates: a semantic shortlist only
    ex = default.retrieve_with_explanations(QUERY, top_k=1)
    assert ex[0].candidate_count == default.config.retrieval.candidate_multiplier


# ------------------------------------------------------------------ 7. engine, s7 on


def test_hybrid_candidates_bring_in_the_lexical_match() -> None:
    texts = bank()
    cfg = RetrievalConfig(lexical_weight=3.0, candidate_multiplier=2)
    engine = make_engine(retrieval=cfg)
    fill(engine, texts)
    rare = next(m for m in engine.list_all() if m.content == "zanzibar quokka")
    shortlist = engine.store.search_by_embedding(engine.embedder.embed(QUERY), 2)
    assert rare.id not in {m.id for m in shortlist}, "test setup: must be outside"
    ex = engine.retrieve_with_explanations(QUERY, top_k=1)
    assert ex[0].memory.id == rare.id
    assert ex[0].candidate_count > 2
    bd = ex[0].breakdown
    assert bd.lexical_signal == 1.0
    w = [*bd.weights.model_dump().values(), bd.lexical_weight]
    s = [*bd.raw_signals.model_dump().values(), bd.lexical_signal]
    assert len(w) == 7 and sum(w) == pytest.approx(1.0, abs=1e-12)
    total = 0.0
    for wi, si in zip(w, s, strict=True):
        total += wi * si
    assert bd.total_score == total
    assert ex[0].score == bd.total_score  # no resonance reached a single seed
    dumped = bd.model_dump()
    assert dumped["lexical_signal"] == 1.0 and "lexical_weight" in dumped


def test_hybrid_lexical_signal_relative_to_best_candidate() -> None:
    texts = bank()
    engine = make_engine(retrieval=RetrievalConfig(lexical_weight=0.4,
                                                   full_bank_candidates=True))
    fill(engine, texts)
    ex = engine.retrieve_with_explanations(QUERY, top_k=len(texts))
    assert all(e.candidate_count == len(engine.store) for e in ex)
    assert len(ex) == len(texts)
    # oracle s7 over the whole bank (query terms: stop words dropped)
    docs = {e.memory.id: oracle_tokens(e.memory.content) for e in ex}
    terms = ["walked", "dog", "around", "park", "morning", "zanzibar", "quokka"]
    raw = {m: oracle_bm25(terms, d, docs, 1.2, 0.75) for m, d in docs.items()}
    top = max(raw.values())
    for e in ex:
        assert e.breakdown.lexical_signal == pytest.approx(raw[e.memory.id] / top, rel=1e-12)
        assert e.breakdown.lexical_weight == ex[0].breakdown.lexical_weight


def test_engine_best_lexical_match_scores_exactly_one() -> None:
    engine = make_engine(retrieval=RetrievalConfig(lexical_weight=0.5,
                                                   full_bank_candidates=True))
    fill(engine, bank())
    plan = engine.plan_retrieval("lake dog", top_k=1)  # found by a random search
    assert max(r.breakdown.lexical_signal or 0.0 for r in plan.pass1) == 1.0


# ------------------------------------------------------------------ 8. stores agree


STORE_TEXTS = ["apple pie and tea", "apple pie and tea", "banana bread", "tea with lemon",
               "apple apple crumble", "", "lemon tart, apple!", "bread and butter"]

STORE_TERMS = [["apple"], ["tea", "lemon"], ["bread", "apple", "pie"], ["zzz"]]


def lex_view(store: Any, ids: Sequence[str], ordered: bool = True) -> Any:
    """Everything the engine reads from a store's index; ``ordered=False`` compares
    the shortlists as sets (their scores are compared through ``scores``)."""
    index = store.lexical_index()
    out = []
    for terms in STORE_TERMS:
        lex = index.inputs(terms, ids)
        found = [index.search(terms, 10), index.search(terms, 2, k1=0.5, b=0.1)]
        out.append((np.asarray(lex.tf).tolist(), np.asarray(lex.length).tolist(),
                    np.asarray(lex.df).tolist(), float(lex.n_docs), float(lex.avg_length),
                    index.scores(terms), index.scores(terms, k1=0.5, b=0.1),
                    found[0] if ordered else set(found[0]),
                    found[1] if ordered else len(found[1])))
    return out


class _Plain:
    def __init__(self, memories: Sequence[Memory]) -> None:
        self.index = LexicalIndex.from_pairs((m.id, m.content) for m in memories)

    def lexical_index(self) -> LexicalIndex:
        return self.index


def rebuilt_view(store: Any, ids: Sequence[str], ordered: bool = True) -> Any:
    return lex_view(_Plain(store.list_all()), ids, ordered)


def test_stores_agree_on_lexical_index(tmp_path: Path) -> None:
    mems = [lexical_memory(t, i) for i, t in enumerate(STORE_TEXTS)]
    ids = [m.id for m in mems] + ["unknown"]
    path = tmp_path / "lex.db"
    stores: list[Any] = [InMemoryStore(), SQLiteStore(path)]
    # the index exists before the writes on one store, after them on the other path
    stores[0].lexical_index()
    for store in stores:
        for m in mems:
            store.save(m)
        store.update(mems[2].model_copy(update={"content": "banana banana split"}))
        store.save(mems[3].model_copy(update={"content": "green tea"}))
        assert store.delete(mems[7].id)
    views = [lex_view(s, ids) for s in stores]
    assert views[0] == views[1]
    assert views[0] == rebuilt_view(stores[0], ids)
    # reopen the SQLite file: rebuilt from the durable content
    stores[1].close()
    stores[1] = SQLiteStore(path)
    assert lex_view(stores[1], ids) == views[0]
    # another connection writes; refresh() rebuilds the cache and its index
    other = SQLiteStore(path)
    late = lexical_memory("late apple pie", 42)
    other.save(late)
    other.delete(mems[1].id)
    other.close()
    stores[1].refresh()
    assert lex_view(stores[1], [*ids, late.id]) == rebuilt_view(stores[1], [*ids, late.id])
    assert stores[1].lexical_index().search(["late"], 3) == [late.id]
    assert mems[1].id not in stores[1].lexical_index()
    stores[1].close()


def _failed_transaction(store: Any, mems: Sequence[Memory], extra: Memory) -> None:
    with pytest.raises(RuntimeError, match="boom"), store.transaction():
        store.save(extra)
        store.update(mems[4].model_copy(update={"content": "no fruit here"}))
        assert store.delete(mems[0].id)  # "apple pie and tea": ties with mems[1]
        assert store.delete(mems[6].id)
        raise RuntimeError("boom")


def test_stores_agree_after_rollback(tmp_path: Path) -> None:
    # Statistics, scores and shortlist membership; the order of tied shortlist entries
    # is test_rollback_keeps_tie_order (a known bug).
    mems = [lexical_memory(t, i) for i, t in enumerate(STORE_TEXTS)]
    ids = [m.id for m in mems] + ["unknown"]
    path = tmp_path / "lex.db"
    stores: list[Any] = [InMemoryStore(), SQLiteStore(path)]
    for store in stores:
        for m in mems:
            store.save(m)
        store.lexical_index()
        before = lex_view(store, ids)
        _failed_transaction(store, mems, lexical_memory("apple apple apple", 99))
        assert lex_view(store, ids, False) == rebuilt_view(store, ids, False)
        assert lex_view(store, ids, False) == lex_view(_Plain(mems), ids, False)
        assert lex_view(_Plain(mems), ids) == before
    assert lex_view(stores[0], ids, False) == lex_view(stores[1], ids, False)
    stores[1].close()
    reopened = SQLiteStore(path)
    assert lex_view(reopened, ids) == before  # reopened: the original order
    assert lex_view(reopened, ids, False) == lex_view(stores[0], ids, False)
    reopened.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_rollback_keeps_tie_order(tmp_path: Path, kind: str) -> None:
    mems = [lexical_memory(t, i) for i, t in enumerate(STORE_TEXTS)]
    store: Any = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "t.db")
    for m in mems:
        store.save(m)
    index = store.lexical_index()
    assert index.search(["pie"], 1) == [mems[0].id]  # tie with mems[1]: insertion order
    _failed_transaction(store, mems, lexical_memory("apple apple apple", 99))
    rebuilt = _Plain(store.list_all()).index
    assert rebuilt.search(["pie"], 1) == [mems[0].id]
    assert store.lexical_index().search(["pie"], 1) == [mems[0].id]


def test_engine_ops_keep_index_in_step(tmp_path: Path) -> None:
    # Through the engine: encode, update_memory(content), delete, a failed transaction.
    engines = [make_engine(InMemoryStore(), retrieval=RetrievalConfig(lexical_weight=0.5)),
               make_engine(SQLiteStore(tmp_path / "e.db"),
                           retrieval=RetrievalConfig(lexical_weight=0.5))]
    views = []
    for engine in engines:
        fill(engine, STORE_TEXTS)
        engine.retrieve("apple", top_k=2)  # builds the index
        ms = engine.list_all()
        engine.update_memory(ms[2].id, content="banana banana split")
        engine.delete(ms[7].id)
        extra = lexical_memory("apple apple apple", 99)
        extra = extra.model_copy(update={"embedding": engine.embedder.embed(extra.content)})
        with pytest.raises(RuntimeError), engine.store.transaction():
            engine.store.save(extra)
            engine.update_memory(ms[3].id, content="tea tea tea")
            engine.store.delete(ms[1].id)
            raise RuntimeError
        ms = engine.list_all()
        assert len(ms) == 7
        order = [m.id for m in ms]
        name = {m.id: f"{i}:{m.content}" for i, m in enumerate(ms)}
        index = engine.store.lexical_index()
        rebuilt = LexicalIndex.from_pairs((m.id, m.content) for m in ms)
        view = []
        for terms in STORE_TERMS:
            a, r = index.inputs(terms, order), rebuilt.inputs(terms, order)
            for f in ("tf", "length", "df", "n_docs", "avg_length"):
                assert np.asarray(getattr(a, f)).tolist() == np.asarray(getattr(r, f)).tolist()
            assert index.scores(terms) == rebuilt.scores(terms)
            view.append((sorted(name[i] for i in index.search(terms, 10)),
                         {name[i]: v for i, v in index.scores(terms).items()}))
        views.append(view)
    assert views[0] == views[1]
    engines[1].store.close()


# ------------------------------------------------------------------ 9. fitting path


FIT_CONFIGS = {
    "lexical": {},
    "lexical_ablated": {"enable_momentum": False, "enable_mood_signal": False},
    "lexical_switched_off": {"enable_lexical": False},
}


@pytest.mark.parametrize("variant", list(FIT_CONFIGS))
def test_fitting_batch_scores_equal_engine_pass2(
    monkeypatch: pytest.MonkeyPatch, variant: str
) -> None:
    from emotional_memory.learn import build_recall_batch, evaluate_batch
    from emotional_memory.scoring_config import params_from_config

    lexical_on = variant != "lexical_switched_off"

    def check(plan: Any) -> None:
        assert len(plan.weights) == (7 if lexical_on else 6)
        assert all((r.breakdown.lexical_signal is not None) == lexical_on for r in plan.pass2)

    captured = capture_pass2_scores(monkeypatch, check)
    config = EmotionalMemoryConfig(retrieval=RetrievalConfig(
        lexical_weight=0.45, lexical_k1=0.9, lexical_b=0.4), **FIT_CONFIGS[variant])
    batch, info = build_recall_batch(tiny_dataset(), HashingEmbedder(dim=32), config,
                                     lexical=True)
    assert batch.lexical is not None and len(captured) == 3
    # hybrid capture: the semantic shortlist plus the lexical one's extras
    assert all(1 <= len(c) <= 4 for c in captured)
    totals = evaluate_batch(params_from_config(config.retrieval, config.decay), batch, config)
    for q, want in enumerate(captured):
        got = totals[q, : len(want)].tolist()
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert info.query_ids == ("q1", "q2", "q3")


# ------------------------------------------------------------------ 10. validation


@pytest.mark.parametrize(("field", "value"), [
    ("lexical_weight", -1), ("lexical_k1", 0), ("lexical_k1", -0.5),
    ("lexical_b", 1.5), ("lexical_b", -0.1), ("lexical_stop_words", "klingon"),
    ("lexical_weight", float("nan")), ("lexical_k1", float("inf")),
])
def test_lexical_config_validation(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field):
        RetrievalConfig(**{field: value})


def test_lexical_config_accepts_edges() -> None:
    cfg = RetrievalConfig(lexical_weight=0, lexical_k1=1e-3, lexical_b=0,
                          lexical_stop_words=["The", "dog"])
    assert cfg.lexical_b == 0.0 and not cfg.lexical_on
    assert RetrievalConfig(lexical_b=1, lexical_stop_words="none").lexical_b == 1.0


def test_engine_rankings_agree_across_stores(tmp_path: Path) -> None:
    # The store's own index (InMemoryStore), one rebuilt per query from list_all() (a
    # protocol-only store), and SQLite's: the same hybrid ranking with s7 on.
    from support.plain_store import PerMemoryStore

    cfg = RetrievalConfig(lexical_weight=0.6, candidate_multiplier=2)
    engines = [make_engine(InMemoryStore(), retrieval=cfg),
               make_engine(PerMemoryStore(), retrieval=cfg),
               make_engine(SQLiteStore(tmp_path / "r.db"), retrieval=cfg)]
    texts = bank()
    results = []
    for engine in engines:
        fill(engine, texts)
        ms = engine.list_all()
        engine.update_memory(ms[3].id, content="quokka at the lake")
        engine.delete(ms[5].id)
        out = []
        for query, k in [(QUERY, 1), ("quokka lake", 2), ("the a of", 2), ("dog", 3)]:
            ex = engine.retrieve_with_explanations(query, top_k=k)
            out.append([(e.memory.content, e.score, e.candidate_count,
                         e.breakdown.lexical_signal, e.pass1_rank, e.pass2_rank)
                        for e in ex])
        results.append(out)
    assert results[0] == results[1]
    # SQLite stores float32 embeddings: same memories, ranks and s7; scores close
    for a, b in zip(results[0], results[2], strict=True):
        assert [(x[0], x[2], x[3], x[4], x[5]) for x in a] == \
            [(x[0], x[2], x[3], x[4], x[5]) for x in b]
        assert [x[1] for x in a] == pytest.approx([x[1] for x in b], rel=1e-6)
    engines[2].store.close()


def test_lexical_params_round_trip() -> None:
    from emotional_memory.decay import DecayConfig
    from emotional_memory.scoring_config import params_from_config, params_to_config

    cfg = RetrievalConfig(lexical_weight=0.3, lexical_k1=0.9, lexical_b=0.1)
    params = params_from_config(cfg, DecayConfig())
    assert params.lexical.vector().tolist() == [0.3, 0.9, 0.1]
    assert (params.lexical.weight, params.lexical.k1, params.lexical.b) == (0.3, 0.9, 0.1)
    r, _ = params_to_config(params)
    assert (r.lexical_weight, r.lexical_k1, r.lexical_b) == (0.3, 0.9, 0.1)
    default = params_from_config(RetrievalConfig(), DecayConfig())
    assert default.lexical.vector().tolist() == [0.0, 1.2, 0.75]
    r, _ = params_to_config(default)
    assert (r.lexical_weight, r.lexical_k1, r.lexical_b) == (0.0, 1.2, 0.75)


def test_params_to_config_holds_default_lexical_params() -> None:
    from emotional_memory.decay import DecayConfig
    from emotional_memory.scoring_config import params_from_config, params_to_config

    default = params_from_config(RetrievalConfig(), DecayConfig())
    r, _ = params_to_config(default, RetrievalConfig(lexical_weight=0.5, lexical_k1=2.0))
    assert (r.lexical_weight, r.lexical_k1, r.lexical_b) == (0.0, 1.2, 0.75)


def test_sqlite_lexical_queries_see_other_connections_commits(tmp_path: Path) -> None:
    """Two store objects on one file: B's lexical shortlist and statistics include
    what A committed after B built its index (no refresh() call)."""
    path = tmp_path / "shared.db"
    a, b = SQLiteStore(path), SQLiteStore(path)
    try:
        ea = EmotionalMemory(a, HashingEmbedder(dim=32))
        first = ea.encode("a quiet walk along the harbour")
        assert b.lexical_search(["harbour"], 5) == [first.id]
        second = ea.encode("the harbour lights at night")
        assert set(b.lexical_search(["harbour"], 5)) == {first.id, second.id}
        stats = b.lexical_inputs(["harbour"], [second.id])
        assert float(stats.n_docs) == 2 and stats.tf.tolist() == [[1.0]]
        ea.delete(first.id)
        assert b.lexical_search(["harbour"], 5) == [second.id]
    finally:
        a.close()
        b.close()


def test_six_precomputed_weights_with_the_lexical_signal_weigh_s7_zero() -> None:
    """With ``lexical_weight > 0``, six ``precomputed_weights`` ("used as they are")
    scored s7 with the sixth weight (the kernel indexed a six-vector seven times and
    JAX clamped the index), and ``retrieve_with_explanations`` crashed ("need 6, 7 or
    8 weights and as many signals, got 6 and 7"). s7 now gets weight 0: the score is
    the six weighted signals."""
    engine = make_engine(retrieval=RetrievalConfig(lexical_weight=0.5,
                                                   full_bank_candidates=True))
    fill(engine, bank())
    weights = [0.1, 0.1, 0.1, 0.1, 0.1, 0.5]
    explained = engine.retrieve_with_explanations(QUERY, top_k=8, precomputed_weights=weights)
    assert any((r.breakdown.lexical_signal or 0.0) > 0 for r in explained)
    for ranked in explained:
        bd = ranked.breakdown
        assert bd.lexical_weight == 0.0
        raw = bd.raw_signals
        six = [raw.semantic_similarity, raw.mood_congruence, raw.affect_proximity,
               raw.momentum_alignment, raw.recency, raw.resonance]
        want = 0.0
        for w, s in zip(weights, six, strict=True):
            want += w * s
        assert ranked.score == pytest.approx(want, abs=1e-12)
    scores = [r.score for r in explained]
    assert scores == sorted(scores, reverse=True)
