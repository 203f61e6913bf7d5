"""Tests for emotional_memory._llm, the plumbing shared by the LLM-backed components."""

from __future__ import annotations

import functools
import json
import re
import threading
from typing import Any

import pytest

from emotional_memory import _llm
from emotional_memory._llm import (
    LLMCallable,
    LRUCache,
    ask_llm,
    check_cache_size,
    check_llm,
    copy_schema,
    find_json,
)


def _dict_or_none(obj: object) -> dict[str, Any] | None:
    return obj if isinstance(obj, dict) else None


# --------------------------------------------------------------------------- find_json


@pytest.mark.parametrize(
    "answer",
    [
        '{"a": 1}',
        '  \n{"a": 1}\n ',
        '```json\n{"a": 1}\n```',
        '```\n{"a": 1}\n```',
        'Here you go:\n```python\n{"a": 1}\n```\nDone.',
        'Sure! The answer is {"a": 1} as requested.',
        'prefix {not json} then {"a": 1} suffix',
    ],
)
def test_find_json_locates_object(answer: str) -> None:
    assert find_json(answer, _dict_or_none) == {"a": 1}


def test_find_json_prefers_whole_text_then_fences_then_embedded() -> None:
    # The whole answer is valid JSON: used as is, even with other objects inside.
    assert find_json('{"outer": {"inner": 1}}', _dict_or_none) == {"outer": {"inner": 1}}
    # A fence body comes before an earlier object embedded in the prose.
    answer = 'e.g. {"x": 0}\n```json\n{"x": 1}\n```'
    assert find_json(answer, _dict_or_none) == {"x": 1}


def test_find_json_skips_values_pick_rejects() -> None:
    answer = '{"skip": true} and then {"want": 2}'
    pick = lambda obj: obj if isinstance(obj, dict) and "want" in obj else None  # noqa: E731
    assert find_json(answer, pick) == {"want": 2}


def test_find_json_pick_sees_non_objects() -> None:
    seen: list[object] = []

    def pick(obj: object) -> str | None:
        seen.append(obj)
        return obj if isinstance(obj, str) else None

    assert find_json('"temporal"', pick) == "temporal"
    assert seen == ["temporal"]


def test_find_json_pick_errors_propagate() -> None:
    def pick(obj: object) -> None:
        raise ValueError("rejected")

    with pytest.raises(ValueError, match="rejected"):
        find_json('{"a": 1}', pick)


def test_find_json_none_when_nothing_found() -> None:
    assert find_json("no json here", _dict_or_none) is None
    assert find_json("[1, 2, 3]", _dict_or_none) is None
    assert find_json("{broken", _dict_or_none) is None


@pytest.mark.parametrize("answer", ["", "   ", "\n\t"])
def test_find_json_empty_answer_raises(answer: str) -> None:
    with pytest.raises(ValueError, match="empty LLM answer"):
        find_json(answer, _dict_or_none)


def test_find_json_custom_fence() -> None:
    only_json = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
    # Under the narrower pattern the tagged body is not valid JSON on its own, so the
    # first embedded object wins; the default pattern reads the fence body.
    answer = 'e.g. {"x": 0}\n```python\n{"x": 1}\n```'
    assert find_json(answer, _dict_or_none, only_json) == {"x": 0}
    assert find_json(answer, _dict_or_none) == {"x": 1}


# --------------------------------------------------------------------------- LRUCache


def test_lru_get_put_and_len() -> None:
    cache: LRUCache[str, int] = LRUCache(2)
    assert cache.maxsize == 2
    assert cache.get("a") is None
    cache.put("a", 1)
    cache.put("b", 2)
    assert len(cache) == 2
    assert cache.get("a") == 1
    assert cache.get("b") == 2


def test_lru_evicts_least_recently_used() -> None:
    cache: LRUCache[str, int] = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "a" is now the most recent
    cache.put("c", 3)
    assert cache.get("b") is None
    assert cache.get("a") == 1
    assert cache.get("c") == 3
    assert len(cache) == 2


def test_lru_put_existing_key_refreshes_it() -> None:
    cache: LRUCache[str, int] = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    cache.put("c", 3)
    assert cache.get("a") == 10
    assert cache.get("b") is None


def test_lru_size_zero_keeps_nothing() -> None:
    cache: LRUCache[str, int] = LRUCache(0)
    cache.put("a", 1)
    assert len(cache) == 0
    assert cache.get("a") is None


def test_lru_clear() -> None:
    cache: LRUCache[tuple[str, str | None], int] = LRUCache(4)
    cache.put(("a", None), 1)
    cache.put(("a", "ctx"), 2)
    cache.clear()
    assert len(cache) == 0
    assert cache.get(("a", None)) is None


def test_lru_concurrent_puts_respect_capacity() -> None:
    cache: LRUCache[int, int] = LRUCache(8)

    def worker(offset: int) -> None:
        for i in range(200):
            cache.put(offset * 1000 + i, i)
            cache.get(offset * 1000 + i // 2)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 8


# --------------------------------------------------------------------------- checks


@pytest.mark.parametrize("size", [0, 1, 256])
def test_check_cache_size_accepts(size: int) -> None:
    assert check_cache_size(size) == size


@pytest.mark.parametrize("bad", [True, 1.0, "3", None])
def test_check_cache_size_type(bad: object) -> None:
    with pytest.raises(TypeError, match="cache_size must be an int"):
        check_cache_size(bad)


def test_check_cache_size_negative() -> None:
    with pytest.raises(ValueError, match="cache_size must be >= 0"):
        check_cache_size(-1)


def test_check_llm() -> None:
    check_llm(lambda prompt, schema: "")
    with pytest.raises(TypeError, match="llm must be callable, got str"):
        check_llm("not callable")


def test_an_async_llm_is_refused_naming_it() -> None:
    # LLMAppraisalEngine and LLMQueryClassifier took an ``async def`` llm (natural for
    # an AsyncEmotionalMemory user): each call got a coroutine, never awaited, and fell
    # back to the neutral appraisal / the default query type
    from emotional_memory import LLMAppraisalEngine, LLMQueryClassifier

    async def llm(prompt: str, schema: dict[str, Any]) -> str:
        return "{}"

    class AsyncCallable:
        async def __call__(self, prompt: str, schema: dict[str, Any]) -> str:
            return "{}"

    for bad in (llm, AsyncCallable(), functools.partial(llm)):
        for make in (check_llm, LLMAppraisalEngine, LLMQueryClassifier):
            with pytest.raises(TypeError, match=r"llm .* is async def"):
                make(bad)


def test_ask_llm_passes_arguments_and_checks_type() -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    def llm(prompt: str, schema: dict[str, Any]) -> str:
        calls.append((prompt, schema))
        return "ok"

    fn: LLMCallable = llm
    assert ask_llm(fn, "p", {"type": "object"}) == "ok"
    assert calls == [("p", {"type": "object"})]
    bad: Any = lambda prompt, schema: 42  # noqa: E731
    with pytest.raises(TypeError, match="LLM must return a str, got int"):
        ask_llm(bad, "p", {})


def test_copy_schema_is_independent() -> None:
    schema: dict[str, Any] = {"type": "object", "required": ["a"], "properties": {"a": {}}}
    copy = copy_schema(schema)
    assert copy == schema
    copy["required"].append("b")
    copy["properties"]["a"]["type"] = "number"
    assert schema == {"type": "object", "required": ["a"], "properties": {"a": {}}}


class _CountingDecoder(json.JSONDecoder):
    """A JSON decoder that counts the places it is asked to start at."""

    def __init__(self) -> None:
        super().__init__()
        self.starts = 0

    def raw_decode(self, s: str, idx: int = 0) -> tuple[Any, int]:
        self.starts += 1
        return super().raw_decode(s, idx)


@pytest.mark.parametrize(
    ("junk", "found"),
    [
        ("{" * 20_000, {"a": 1}),  # no object can start at any of them: none tried
        ('{"a":' * 4_000, None),  # each start decodes to the end (or recursion limit)
        ('{"k" ' * 4_000, None),  # each fails at once, but its error counts lines up to it
    ],
)
def test_find_json_bounds_the_embedded_starts_it_tries(
    monkeypatch: pytest.MonkeyPatch, junk: str, found: object
) -> None:
    # Every failed start scans up to the end of the text, so trying all of them was
    # quadratic (160 KB of such junk: 1.7-4.1 s); only MAX_JSON_STARTS are tried.
    decoder = _CountingDecoder()
    monkeypatch.setattr(_llm, "_DECODER", decoder)
    assert find_json(junk + ' {"a": 1}', _dict_or_none) == found
    assert decoder.starts <= _llm.MAX_JSON_STARTS


def test_find_json_skips_braces_no_object_can_start_at() -> None:
    # "{{{" and "{ x" cannot start a JSON object: they do not count against the bound.
    answer = "{" * 10_000 + " {not json} " * 500 + '{"a": 1}'
    assert find_json(answer, _dict_or_none) == {"a": 1}


def test_find_json_finds_an_object_after_fewer_failed_starts_than_the_bound() -> None:
    answer = '{"k" ' * (_llm.MAX_JSON_STARTS - 1) + '{"a": 1}'
    assert find_json(answer, _dict_or_none) == {"a": 1}
    answer = '{"k" ' * _llm.MAX_JSON_STARTS + '{"a": 1}'
    assert find_json(answer, _dict_or_none) is None


class _ScanningDecoder(json.JSONDecoder):
    """A JSON decoder that adds up how many characters its tries decoded."""

    def __init__(self) -> None:
        super().__init__()
        self.scanned = 0

    def raw_decode(self, s: str, idx: int = 0) -> tuple[Any, int]:
        try:
            obj, end = super().raw_decode(s, idx)
        except json.JSONDecodeError as exc:
            self.scanned += exc.pos - idx
            raise
        self.scanned += end - idx
        return obj, end


def test_find_json_bounds_the_text_its_embedded_tries_decode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 64 nested starts that each decode up to the end: 64 times the answer (a hostile
    # server's 16 MiB completion took about 35 s of CPU, the GIL held, per appraisal)
    decoder = _ScanningDecoder()
    monkeypatch.setattr(_llm, "_DECODER", decoder)
    answer = "x " + '{"a":' * 64 + "[" + "1," * 50_000
    assert find_json(answer, _dict_or_none) is None
    assert decoder.scanned <= (_llm.MAX_JSON_SCAN_FACTOR + 1) * len(answer)


def test_find_json_still_finds_an_object_after_a_long_failed_try() -> None:
    # the first try decodes most of the answer before failing: within the budget
    answer = 'note {"a": [' + "1, " * 50_000 + ' and then {"b": 2}'
    assert find_json(answer, _dict_or_none) == {"b": 2}
