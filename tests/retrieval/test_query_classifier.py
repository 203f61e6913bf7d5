"""Tests for emotional_memory.query_classifier (SPEC 4)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emotional_memory.query_classifier import (
    LOCOMO_ROUTING,
    QUERY_TYPES,
    HeuristicQueryClassifier,
    LLMQueryClassifier,
    QueryClassifier,
)
from support.fake_llm import FakeLLM


@pytest.fixture
def heur() -> HeuristicQueryClassifier:
    return HeuristicQueryClassifier()


# --------------------------------------------------------------------------- constants


def test_query_types_contents() -> None:
    assert isinstance(QUERY_TYPES, frozenset)
    assert {"single_hop", "multi_hop", "temporal", "open_domain", "default"} == QUERY_TYPES


def test_locomo_routing_values() -> None:
    assert LOCOMO_ROUTING == {
        "single_hop": [0.70, 0.10, 0.05, 0.05, 0.05, 0.05],
        "multi_hop": [0.50, 0.30, 0.10, 0.05, 0.05, 0.00],
        "open_domain": [0.40, 0.20, 0.15, 0.10, 0.10, 0.05],
        "temporal": [0.50, 0.30, 0.10, 0.05, 0.05, 0.00],
        "default": [0.35, 0.25, 0.15, 0.10, 0.10, 0.05],
    }
    assert set(LOCOMO_ROUTING) == QUERY_TYPES
    for weights in LOCOMO_ROUTING.values():
        assert len(weights) == 6
        assert sum(weights) == pytest.approx(1.0)


def test_protocol_is_satisfied() -> None:
    assert isinstance(HeuristicQueryClassifier(), QueryClassifier)
    assert isinstance(LLMQueryClassifier(FakeLLM("temporal")), QueryClassifier)
    assert not isinstance(object(), QueryClassifier)


# --------------------------------------------------------------------------- heuristic


@pytest.mark.parametrize(
    "query",
    [
        "When did Alice move to Paris?",
        "I felt sad after the funeral",
        "It happened before lunch",
        "How long was the trip?",
        "Stay until Friday",
        "I have been calm since January",
        "She cried during the movie",
        "At what time did the party start?",
        "at what point did you give up",
        "How many years has she lived there?",
        "how much months remain",
        "How many days until the deadline",
        "how many weeks of rest",
        "How many hours did it take",
        "How many times did they meet?",
        "How soon can we leave",
        "how late is the shop open",
        "How early should I arrive",
        "How often does Bob run?",
        "how frequently do they talk",
        "Did Bob go to the gym first?",
        "Did she visit Rome or Milan last",
        "Who did the dishes first",
        "WHEN WAS IT",
    ],
)
def test_temporal_rules(heur: HeuristicQueryClassifier, query: str) -> None:
    assert heur.classify(query) == "temporal"


@pytest.mark.parametrize(
    "query",
    [
        "Tell me about the trip and then the dinner",
        "Describe both of her hobbies",
        "Bob also likes jazz, tell me more",
        "In addition to painting, list her hobbies",
        "Her friends as well as her family came",
        "Additionally, list the pets",
        "Furthermore, explain the reason",
        "at the same time she was sad",
        "Meanwhile the dog slept",
        "The cat sat alongside the dog",
        "She went together with Tom",
        "What did Alice AND THEN Bob do?",
    ],
)
def test_multi_hop_rules(heur: HeuristicQueryClassifier, query: str) -> None:
    assert heur.classify(query) == "multi_hop"


@pytest.mark.parametrize(
    "query",
    [
        "Who is Alice's sister?",
        "What is Bob's favourite food?",
        "where does Carol live",
        "Which book did Dan like?",
        "Is Alice a doctor?",
        "are they married",
        "Does Bob own a dog?",
        "Did Carol enjoy the concert?",
        "Was the film good?",
        "Were the kids happy?",
        "   who is this   ",
        "What?",
    ],
)
def test_single_hop_rules(heur: HeuristicQueryClassifier, query: str) -> None:
    assert heur.classify(query) == "single_hop"


@pytest.mark.parametrize("query", ["Whoever wins gets a prize", "Whatever happened to Bob",
                                   "What's the plan", "whichever one"])
def test_single_hop_wh_words_are_plain_prefixes(
    heur: HeuristicQueryClassifier, query: str
) -> None:
    # SPEC: "starting with who/what/where/which" (no word boundary, unlike "is ", "are ")
    assert heur.classify(query) == "single_hop"


@pytest.mark.parametrize(
    "query",
    [
        "Tell me about Alice's hobbies",
        "Describe your feelings about the project",
        "Isabel likes tea",
        "Wasps are scary",
        "Didactic stories about Bob",
        "",
        "   ",
    ],
)
def test_open_domain_fallthrough(heur: HeuristicQueryClassifier, query: str) -> None:
    assert heur.classify(query) == "open_domain"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # temporal beats multi_hop
        ("When did Alice and then Bob arrive?", "temporal"),
        ("Did they both leave before noon", "temporal"),
        ("How often do they also meet", "temporal"),
        # temporal beats single_hop
        ("Who left after the party?", "temporal"),
        ("What happened during the storm?", "temporal"),
        # multi_hop beats single_hop
        ("Who are both of her parents?", "multi_hop"),
        ("What does Bob also like?", "multi_hop"),
        ("Is Carol together with Dan?", "multi_hop"),
    ],
)
def test_precedence(heur: HeuristicQueryClassifier, query: str, expected: str) -> None:
    assert heur.classify(query) == expected


@pytest.mark.parametrize(
    "query",
    [
        "Tell me whenever you can",
        "A sincere apology was offered",
        "Describe the afterglow",
        "The beforehand plan was good",
        "Describe the untill typo",
        "Describe the duringness",
        "Tell me about howling wolves long ago",
        "Describe the bothersome noise",
        "Tell me about the alsoran horse",
        "Describe the meanwhiles",
        "Tell me about the brand then the logo",
    ],
)
def test_whole_word_matching(heur: HeuristicQueryClassifier, query: str) -> None:
    assert heur.classify(query) == "open_domain"


@pytest.mark.parametrize(
    "query",
    [
        "How many apples did she buy",  # unit not in the list
        "Tell me how many cats live there",
        "how much money was spent",
        "Tell me how it was long",  # "how long" must be adjacent
        "Tell me how she did",  # no before/after/first/last after "did"
        "Tell me the first thing she did",  # "first" precedes "did"
    ],
)
def test_temporal_rule_boundaries(heur: HeuristicQueryClassifier, query: str) -> None:
    assert heur.classify(query) == "open_domain"


# Answers of the original 0.18.1's classifier (run on these very strings): cue phrases
# take exactly one space, units an optional plural "s", "did ... <order word>" stays on
# one line and needs a space after "did" and before the order word, and the prefixes
# match as ``re.IGNORECASE`` folds them ("İs ", "ıs ", "iſ ").
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ('Tell me what Bob did\nand who came first', 'open_domain'),
        ('how many day', 'temporal'),
        ('How much time', 'temporal'),
        ('how many year did it take', 'temporal'),
        ('how\nlong was it', 'open_domain'),
        ('how  long', 'open_domain'),
        ('at what\ttime', 'open_domain'),
        ('how\xa0often', 'open_domain'),
        ('me and\nthen you', 'open_domain'),
        ('both\u2003', 'multi_hop'),
        ('did first', 'single_hop'),
        ('Did  first?', 'single_hop'),
        ('did it first', 'temporal'),
        ('did.  first', 'open_domain'),
        ('did-is-\t-last', 'open_domain'),
        ('İs it so', 'single_hop'),
        ('ıs it so', 'single_hop'),
        ('iſ it so', 'single_hop'),
        ('waſ it', 'single_hop'),
        ('WHO', 'single_hop'),
        ('\nWhat?', 'single_hop'),
        ('did it\nfirst', 'single_hop'),
        ('Tell me what you did today, and the day before', 'temporal'),
        ('did x before\nfirst', 'temporal'),
        ('x\ndid it last', 'temporal'),
        ("didn't it last", 'open_domain'),
        ('did x firstly', 'single_hop'),
        ('how many hour', 'temporal'),
        ('how many timesheets', 'open_domain'),
        ('at what  point', 'open_domain'),
        ('in  addition', 'open_domain'),
        ('as well  as', 'open_domain'),
        ('at the same\ntime', 'open_domain'),
        ('together\twith', 'open_domain'),
        ('DID it LAST', 'temporal'),
        ('dıd it last', 'temporal'),
        ('did it fırst', 'temporal'),
    ],
)
def test_answers_as_the_original(
    heur: HeuristicQueryClassifier, query: str, expected: str
) -> None:
    assert heur.classify(query) == expected


_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")  # \\w on ASCII


def _phrase_at(text: str, start: int, phrase: str) -> bool:
    """Whether ``phrase`` (lower case) is at ``start`` of ``text`` as whole words."""
    end = start + len(phrase)
    return (
        text[start:end].lower() == phrase
        and (start == 0 or text[start - 1].lower() not in _WORD_CHARS)
        and (end == len(text) or text[end].lower() not in _WORD_CHARS)
    )


def _has(text: str, phrases: list[str]) -> bool:
    return any(_phrase_at(text, i, p) for i in range(len(text)) for p in phrases)


def _oracle(query: str) -> str:
    """The rules of docs/behaviour.md §4 on ASCII text, position by position: phrases
    with single spaces, plural "s" optional on units, "did <x> <order word>" on one
    line."""
    units = [u + s for u in ("year", "month", "day", "week", "hour", "time") for s in ("", "s")]
    temporal = ["when", "after", "before", "how long", "until", "since", "during",
                "at what time", "at what point",
                *(f"how {q} {u}" for q in ("many", "much") for u in units),
                *(f"how {w}" for w in ("soon", "late", "early", "often", "frequently"))]
    order = ("before", "after", "first", "last")
    did = any(
        _phrase_at(query, i, "did") and query[i + 3:i + 4] == " "
        and any(query[j] == " " and _phrase_at(query, j + 1, w) and "\n" not in query[i:j]
                for j in range(i + 5, len(query)) for w in order)
        for i in range(len(query))
    )
    if did or _has(query, temporal):
        return "temporal"
    if _has(query, ["and then", "both", "also", "in addition", "as well as", "additionally",
                    "furthermore", "at the same time", "meanwhile", "alongside",
                    "together with"]):
        return "multi_hop"
    stripped = query.strip()
    starts = ("who", "what", "where", "which", "is ", "are ", "does ", "did ", "was ",
              "were ")
    if len(stripped) <= 100 and stripped.lower().startswith(starts):
        return "single_hop"
    return "open_domain"


_WORDS = ["did", "Did", "how", "HOW", "many", "much", "time", "times", "day", "long", "at",
          "what", "point", "first", "last", "before", "and", "then", "both", "in",
          "addition", "is", "who", "x", "didn't", ""]
_GAPS = [" ", " ", " ", "  ", "\n", "\t", "-", ".", "?"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_WORDS), st.sampled_from(_GAPS)), max_size=8))
def test_heuristic_matches_a_plain_oracle(parts: list[tuple[str, str]]) -> None:
    query = "".join(word + gap for word, gap in parts)
    assert HeuristicQueryClassifier().classify(query) == _oracle(query)


def test_single_hop_length_limit(heur: HeuristicQueryClassifier) -> None:
    base = "Who is "
    at_limit = base + "x" * (100 - len(base))
    over_limit = base + "x" * (101 - len(base))
    assert len(at_limit) == 100
    assert len(over_limit) == 101
    assert heur.classify(at_limit) == "single_hop"
    assert heur.classify(over_limit) == "open_domain"
    # Surrounding whitespace is stripped before measuring.
    assert heur.classify("   " + at_limit + "   ") == "single_hop"


def test_heuristic_rejects_non_str(heur: HeuristicQueryClassifier) -> None:
    with pytest.raises(TypeError, match="query"):
        heur.classify(42)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_heuristic_total(query: str) -> None:
    result = HeuristicQueryClassifier().classify(query)
    assert result in {"single_hop", "multi_hop", "temporal", "open_domain"}


# --------------------------------------------------------------------------- LLM parsing


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ('{"query_type": "temporal"}', "temporal"),
        ('  {"query_type": "multi_hop"}\n', "multi_hop"),
        ('```json\n{"query_type": "single_hop"}\n```', "single_hop"),
        ('```\n{"query_type": "open_domain"}\n```', "open_domain"),
        (
            'Sure! Here you go:\n```json\n{"query_type": "temporal"}\n```\nHope it helps.',
            "temporal",
        ),
        ('The answer is {"query_type": "multi_hop"} as requested.', "multi_hop"),
        ('Thinking {not json} ... {"query_type": "single_hop"}', "single_hop"),
        ('{"query_type": "TEMPORAL"}', "temporal"),
        ('"open_domain"', "open_domain"),
        ("temporal", "temporal"),
        ("  single_hop.\n", "single_hop"),
        ("`multi_hop`", "multi_hop"),
        ("multi-hop", "multi_hop"),
    ],
)
def test_llm_parses_answers(answer: str, expected: str) -> None:
    clf = LLMQueryClassifier(FakeLLM(answer), fallback_on_error=False)
    assert clf.classify("some query") == expected


def test_llm_receives_prompt_and_schema() -> None:
    llm = FakeLLM('{"query_type": "temporal"}')
    LLMQueryClassifier(llm).classify("When did Alice visit Rome?")
    assert len(llm.calls) == 1
    prompt, schema = llm.calls[0]
    assert isinstance(prompt, str)
    assert "When did Alice visit Rome?" in prompt
    for name in ("single_hop", "multi_hop", "temporal", "open_domain"):
        assert name in prompt
    assert isinstance(schema, dict)
    assert schema["type"] == "object"
    assert "query_type" in schema["required"]
    prop = schema["properties"]["query_type"]
    assert prop["type"] == "string"
    assert set(prop["enum"]) == {"single_hop", "multi_hop", "temporal", "open_domain"}


def test_llm_schema_mutation_does_not_leak() -> None:
    def llm(prompt: str, schema: dict[str, Any]) -> str:
        schema["properties"]["query_type"]["enum"].clear()
        return "temporal"

    clf = LLMQueryClassifier(llm, cache_size=0)
    clf.classify("a")
    seen: list[dict[str, Any]] = []

    def recorder(prompt: str, schema: dict[str, Any]) -> str:
        seen.append(schema)
        return "temporal"

    LLMQueryClassifier(recorder).classify("b")
    assert len(seen[0]["properties"]["query_type"]["enum"]) == 4


# --------------------------------------------------------------------------- LLM caching


def test_llm_caches_answers() -> None:
    llm = FakeLLM("temporal")
    clf = LLMQueryClassifier(llm)
    assert clf.classify("q1") == "temporal"
    assert clf.classify("q1") == "temporal"
    assert len(llm.calls) == 1
    clf.classify("q2")
    assert len(llm.calls) == 2


def test_llm_cache_eviction_lru() -> None:
    llm = FakeLLM("single_hop")
    clf = LLMQueryClassifier(llm, cache_size=2)
    clf.classify("a")
    clf.classify("b")
    assert len(llm.calls) == 2
    clf.classify("a")  # hit; "a" becomes most recently used
    assert len(llm.calls) == 2
    clf.classify("c")  # evicts "b" (least recently used)
    assert len(llm.calls) == 3
    clf.classify("a")
    clf.classify("c")
    assert len(llm.calls) == 3
    clf.classify("b")  # was evicted -> new call
    assert len(llm.calls) == 4


def test_llm_cache_size_zero_disables_cache() -> None:
    llm = FakeLLM("temporal")
    clf = LLMQueryClassifier(llm, cache_size=0)
    for _ in range(3):
        assert clf.classify("same") == "temporal"
    assert len(llm.calls) == 3


def test_llm_clear_cache() -> None:
    llm = FakeLLM("temporal")
    clf = LLMQueryClassifier(llm)
    clf.classify("q")
    clf.clear_cache()
    clf.classify("q")
    assert len(llm.calls) == 2


def test_llm_failures_not_cached() -> None:
    llm = FakeLLM(RuntimeError("boom"), '{"query_type": "multi_hop"}')
    clf = LLMQueryClassifier(llm)
    assert clf.classify("q") == "open_domain"  # the original's default_type
    assert clf.classify("q") == "multi_hop"
    assert clf.classify("q") == "multi_hop"
    assert len(llm.calls) == 2


def test_llm_garbage_not_cached() -> None:
    llm = FakeLLM("no idea, sorry about that", "temporal")
    clf = LLMQueryClassifier(llm)
    assert clf.classify("q") == "open_domain"
    assert clf.classify("q") == "temporal"
    assert len(llm.calls) == 2


# --------------------------------------------------------------------------- LLM errors


@pytest.mark.parametrize(
    "answer",
    [
        RuntimeError("llm down"),
        "I cannot decide what this is about.",
        "",
        '{"query_type": "chitchat"}',
        '{"kind": "temporal"}',
        '{"query_type": 3}',
        "banana",
    ],
)
def test_llm_fallback_to_default(answer: str | Exception) -> None:
    assert LLMQueryClassifier(FakeLLM(answer)).classify("q") == "open_domain"
    clf = LLMQueryClassifier(FakeLLM(answer), default_type="default")
    assert clf.classify("q") == "default"


def test_llm_fallback_on_non_str_answer() -> None:
    clf = LLMQueryClassifier(lambda p, s: 123)  # type: ignore[arg-type, return-value]
    assert clf.classify("q") == "open_domain"


@pytest.mark.parametrize(
    "answer",
    [RuntimeError("llm down"), "garbage garbage garbage", '{"query_type": "chitchat"}'],
)
def test_llm_no_fallback_raises(answer: str | Exception) -> None:
    clf = LLMQueryClassifier(FakeLLM(answer), fallback_on_error=False)
    if isinstance(answer, Exception):
        # SPEC 11: the callable's own exception propagates unchanged
        with pytest.raises(RuntimeError) as exc_info:
            clf.classify("q")
        assert exc_info.value is answer
        return
    with pytest.raises(ValueError) as info:
        clf.classify("q")
    assert info.value.__cause__ is not None


def test_llm_repr_shows_cached_count() -> None:
    clf = LLMQueryClassifier(FakeLLM("temporal", "multi_hop"))
    assert "cached=0" in repr(clf)
    clf.classify("q1")
    clf.classify("q2")
    assert "cached=2" in repr(clf)


def test_llm_rejects_non_callable() -> None:
    with pytest.raises(TypeError, match="llm"):
        LLMQueryClassifier("not callable")  # type: ignore[arg-type]


def test_llm_rejects_negative_cache_size() -> None:
    with pytest.raises(ValueError, match="cache_size"):
        LLMQueryClassifier(FakeLLM("temporal"), cache_size=-1)


def test_llm_rejects_unknown_default_type() -> None:
    with pytest.raises(ValueError, match="default_type"):
        LLMQueryClassifier(FakeLLM("temporal"), default_type="nope")


@pytest.mark.parametrize("bad", [["temporal"], {"temporal": 1}, 3])
def test_llm_names_a_default_type_that_is_not_text(bad: object) -> None:
    """A list or dict was "unhashable type: 'list'", naming nothing."""
    with pytest.raises(TypeError, match="default_type must be a str, got"):
        LLMQueryClassifier(FakeLLM("temporal"), default_type=bad)  # type: ignore[arg-type]


def test_llm_classify_rejects_non_str() -> None:
    llm = FakeLLM("temporal")
    clf = LLMQueryClassifier(llm)
    with pytest.raises(TypeError, match="query"):
        clf.classify(None)  # type: ignore[arg-type]
    assert llm.calls == []


def test_llm_type_error_not_swallowed_when_query_invalid() -> None:
    clf = LLMQueryClassifier(FakeLLM("temporal"), fallback_on_error=True)
    with pytest.raises(TypeError):
        clf.classify(b"bytes")  # type: ignore[arg-type]
