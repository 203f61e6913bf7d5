"""Lexical analysis options: Snowball stemming, query-term counts.

* ``analyze`` against stems from the Snowball English algorithm's published examples;
* one index keeps every analysis in use, incrementally: equal to a rebuild, and its
  statistics equal a plain-Python BM25 over the stemmed tokens (an independent oracle);
* query terms: stop words matched before stemming; counts repeat terms, and BM25 then
  weighs each term by its count (oracle);
* the engine with ``lexical_stemmer="english"`` finds inflected matches; the default
  analysis is the plain one; every store answers alike; the fitting batch equals the
  engine's pass 2 under the options; bad settings are clear errors.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory import EmotionalMemoryConfig, InMemoryStore, SQLiteStore
from emotional_memory._bank import LexicalQuery
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.lexical import (
    ENGLISH_STOP_WORDS,
    LexicalIndex,
    analyze,
    query_terms,
    stop_word_set,
)
from emotional_memory.retrieval import RetrievalConfig
from support.lexical import (
    capture_pass2_scores,
    fill,
    lexical_memory,
    make_engine,
    oracle_bm25,
    oracle_tokens,
    tiny_dataset,
)

# Stems of the Snowball English stemmer (snowballstem.org's sample vocabulary / the
# Porter2 definition: "-ies" -> "i", "-ly" removed after "generous", ...).
KNOWN_STEMS = {
    "caresses": "caress", "ponies": "poni", "generously": "generous", "running": "run",
    "runs": "run", "ran": "ran", "conversations": "convers", "meetings": "meet",
    "happily": "happili", "dog": "dog",
}


def test_english_stems_match_the_snowball_examples() -> None:
    words = list(KNOWN_STEMS)
    assert analyze(words, "english") == [KNOWN_STEMS[w] for w in words]
    assert analyze(words, "none") is words  # the plain analysis: the tokens themselves
    with pytest.raises(ValueError, match="lexical_stemmer"):
        analyze(words, "klingon")


def stem_oracle(tokens: Sequence[str]) -> list[str]:
    """Stems via a fresh stemmer object (not the module's per-thread cache)."""
    import Stemmer

    return [str(s) for s in Stemmer.Stemmer("english").stemWords(list(tokens))]


WORDS = ["run", "running", "runs", "dog", "dogs", "meeting", "meet", "the", "a", "tea"]
CONTENT = st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join)
IDS = ["m0", "m1", "m2", "m3"]
OPS = st.lists(
    st.tuples(st.sampled_from(["set", "drop", "touch"]), st.sampled_from(IDS), CONTENT),
    max_size=14,
)
TERMS_STEMMED = ["run", "dog", "meet", "tea", "absent"]


def stats(index: LexicalIndex, analysis: str) -> Any:
    ids = [*IDS, "nope"]
    lex = index.inputs(TERMS_STEMMED, ids, analysis=analysis)
    return (np.asarray(lex.tf).tolist(), np.asarray(lex.length).tolist(),
            np.asarray(lex.df).tolist(), float(lex.n_docs), float(lex.avg_length),
            index.scores(TERMS_STEMMED, analysis=analysis),
            index.search(TERMS_STEMMED, 3, analysis=analysis))


@settings(max_examples=60, deadline=None)
@given(OPS)
def test_index_keeps_each_analysis_in_step(ops: list[tuple[str, str, str]]) -> None:
    index = LexicalIndex()
    live: dict[str, str] = {}
    for kind, mid, content in ops:
        if kind == "set":
            index.set(mid, content)
            live[mid] = content
        elif kind == "drop":
            index.discard(mid)
            live.pop(mid, None)
        else:  # first use of the stemmed analysis, at any point of the history
            index.search(["run"], 1, analysis="english")
    rebuilt = LexicalIndex.from_pairs(live.items())
    for analysis in ("none", "english"):
        assert stats(index, analysis) == stats(rebuilt, analysis)
    assert rebuilt.analyses == ("none", "english")
    # the oracle: BM25 over the stemmed tokens of the live contents
    docs = {m: stem_oracle(oracle_tokens(c)) for m, c in live.items()}
    got = index.scores(TERMS_STEMMED, 0.9, 0.3, analysis="english")
    for mid, doc in docs.items():
        want = oracle_bm25(TERMS_STEMMED, doc, docs, 0.9, 0.3)
        assert got.get(mid, 0.0) == pytest.approx(want, rel=1e-12, abs=1e-15)
    lex = index.inputs(TERMS_STEMMED, list(docs), analysis="english")
    for i, doc in enumerate(docs.values()):
        assert np.asarray(lex.tf)[i].tolist() == [float(doc.count(t)) for t in TERMS_STEMMED]
        assert float(np.asarray(lex.length)[i]) == len(doc)
    # the plain analysis is untouched by the stemmed one
    assert index.total_length == sum(len(oracle_tokens(c)) for c in live.values())


def test_query_terms_options() -> None:
    q = "Having run, the dogs ran; running DOGS run"
    assert query_terms(q) == ["run", "dogs", "ran", "running"]
    # "having" is a stop word: dropped before stemming (its stem "have" is not one)
    assert query_terms(q, analysis="english") == ["run", "dog", "ran"]
    assert query_terms(q, analysis="english", counts=True) == \
        ["run", "dog", "ran", "run", "dog", "run"]
    assert query_terms(q, frozenset(), counts=True)[:2] == ["having", "run"]


@pytest.mark.parametrize("word", ["Straße", "STRASSE", "café", "cafe\u0301", "CAFÉ",
                                  "ΣΟΦΟΣ", "σοφος", "Ørsted", "ﬁre", "naïve"])
@pytest.mark.parametrize("spell", [str, str.upper, str.lower, str.title,
                                   lambda w: unicodedata.normalize("NFD", w)])
def test_a_stop_word_list_drops_its_words_in_any_case_or_form(
    word: str, spell: Any
) -> None:
    # the query's tokens are case-folded and NFC-normalised: a stop word given in
    # any case or normal form drops the word it spells
    query = f"{spell(word)} keep"
    assert query_terms(query, stop_word_set([word])) == ["keep"]
    assert query_terms(query, stop_word_set([spell(word)])) == ["keep"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=8), st.lists(CONTENT, min_size=1,
                                                                           max_size=5))
def test_query_counts_weigh_terms_by_count(query: list[str], contents: list[str]) -> None:
    index = LexicalIndex.from_pairs((f"m{i}", c) for i, c in enumerate(contents))
    text = " ".join(query)
    terms = query_terms(text, ENGLISH_STOP_WORDS, "english", counts=True)
    docs = {f"m{i}": stem_oracle(oracle_tokens(c)) for i, c in enumerate(contents)}
    got = index.scores(terms, analysis="english")
    stems = stem_oracle([w for w in query if w not in ENGLISH_STOP_WORDS])
    for mid, doc in docs.items():
        want = sum(stems.count(t) * oracle_bm25([t], doc, docs, 1.2, 0.75)
                   for t in dict.fromkeys(stems))
        assert got.get(mid, 0.0) == pytest.approx(want, rel=1e-12, abs=1e-15)


def test_engine_stemmer_finds_inflected_words() -> None:
    texts = ["she went running by the river", "quiet evening at home",
             "bought groceries for the week", "the meetings ran late again"]
    plain = make_engine(retrieval=RetrievalConfig(lexical_weight=1.0, full_bank_candidates=True))
    stem = make_engine(retrieval=RetrievalConfig(
        lexical_weight=1.0, full_bank_candidates=True, lexical_stemmer="english"))
    for engine in (plain, stem):
        fill(engine, texts)
    by_content = {}
    for name, engine in (("plain", plain), ("stem", stem)):
        plan = engine.plan_retrieval("runs and meeting", top_k=1)
        by_content[name] = {r.memory.content: r.breakdown.lexical_signal for r in plan.pass1}
    assert all(v == 0.0 for v in by_content["plain"].values())
    assert by_content["stem"]["she went running by the river"] > 0
    assert by_content["stem"]["the meetings ran late again"] > 0
    assert by_content["stem"]["quiet evening at home"] == 0.0


def test_default_analysis_is_plain() -> None:
    cfg = RetrievalConfig()
    assert cfg.lexical_stemmer == "none" and cfg.lexical_query_counts is False
    assert LexicalQuery(["a"], 1, 1.2, 0.75, True).analysis == "none"


@pytest.mark.parametrize(("field", "value"), [
    ("lexical_stemmer", "porter"), ("lexical_stemmer", 3), ("lexical_query_counts", "maybe"),
])
def test_analysis_config_validation(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field):
        RetrievalConfig(**{field: value})


def test_stores_agree_under_stemming(tmp_path: Path) -> None:
    from emotional_memory.stores.columnar import StoreAdapter
    from support.plain_store import PerMemoryStore

    texts = ["apple pies and teas", "running late", "the runner runs", "tea with lemons",
             "apples, apple crumble"]
    mems = [lexical_memory(t, i) for i, t in enumerate(texts)]
    stores: list[Any] = [InMemoryStore(), SQLiteStore(tmp_path / "s.db"), PerMemoryStore()]
    stores[0].lexical_index()  # the plain index exists before the writes
    for store in stores:
        for m in mems:
            store.save(m)
        store.update(mems[1].model_copy(update={"content": "ran and running"}))
    terms = query_terms("apple run tea lemon", analysis="english")
    views = []
    for store in stores:
        adapter = store if hasattr(store, "candidate_bank") else StoreAdapter(store)
        lex = LexicalQuery(terms, 3, 1.2, 0.75, statistics=True, analysis="english")
        bank = adapter.candidate_bank(None, None, mems[0].tag.timestamp, lexical=lex)
        assert bank.lexical is not None
        views.append((bank.ids, np.asarray(bank.lexical.tf).tolist(),
                      np.asarray(bank.lexical.length).tolist(),
                      np.asarray(bank.lexical.df).tolist(), float(bank.lexical.n_docs),
                      adapter.lexical_search(terms, 3, 1.2, 0.75, "english")))
    assert views[0] == views[1] == views[2]
    assert terms == ["appl", "run", "tea", "lemon"]
    # "ran and running": stems ran, and, run ("ran" is not "run")
    assert views[0][1][1] == [0.0, 1.0, 0.0, 0.0] and views[0][2][1] == 3.0
    # "the runner runs" -> the, runner, run; "apples, apple crumble" -> appl x2
    assert views[0][1][2] == [0.0, 1.0, 0.0, 0.0] and views[0][1][4][0] == 2.0
    stores[1].close()


def test_fitting_batch_equals_engine_under_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    from emotional_memory.learn import build_recall_batch, evaluate_batch
    from emotional_memory.scoring_config import params_from_config

    captured = capture_pass2_scores(monkeypatch)
    config = EmotionalMemoryConfig(retrieval=RetrievalConfig(
        lexical_weight=0.45, lexical_k1=0.9, lexical_b=0.4, lexical_stemmer="english",
        lexical_query_counts=True))
    data = tiny_dataset()
    data["scenarios"][0]["sessions"][0]["queries"][0]["query"] = "quokkas quokka sightings"
    batch, _ = build_recall_batch(data, HashingEmbedder(dim=32), config, lexical=True)
    assert batch.lexical is not None
    assert np.asarray(batch.lexical.tf).shape[-1] >= 3  # repeated terms kept
    totals = evaluate_batch(params_from_config(config.retrieval, config.decay), batch, config)
    assert len(captured) == totals.shape[0] > 0
    for q, want in enumerate(captured):
        assert totals[q, : len(want)].tolist() == pytest.approx(want, rel=1e-12, abs=1e-12)
