"""Plumbing shared by the components that ask a language model.

:class:`~emotional_memory.appraisal.LLMAppraisalEngine` and
:class:`~emotional_memory.query_classifier.LLMQueryClassifier` both send a prompt
and a JSON schema to a user-supplied ``(prompt, json_schema) -> str`` callable,
dig a JSON value out of a free-form answer (raw JSON, a Markdown code fence, or
JSON embedded in prose) and keep successful answers in a small thread-safe LRU.
"""

from __future__ import annotations

import inspect
import json
import re
import threading
from collections.abc import Callable, Hashable
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import cachetools

__all__ = [
    "FENCE_RE",
    "MAX_JSON_SCAN_FACTOR",
    "MAX_JSON_STARTS",
    "LLMCallable",
    "LRUCache",
    "ask_llm",
    "check_cache_size",
    "check_llm",
    "copy_schema",
    "find_json",
]

@runtime_checkable
class LLMCallable(Protocol):
    """``(prompt, json_schema) -> str``: sends the prompt to a language model.

    A runtime-checkable protocol (as in the original): wrap any SDK in a callable of
    this shape. ``json_schema`` describes the expected answer; enforcing it is up to
    the backend. ``isinstance(f, LLMCallable)`` is true for any callable.
    """

    def __call__(self, prompt: str, json_schema: dict[str, Any], /) -> str:
        """Answer ``prompt``.

        Args:
            prompt: The full prompt text.
            json_schema: JSON schema of the expected answer.

        Returns:
            The model's text answer.
        """
        ...

#: A Markdown code fence with any (or no) language tag; group 1 is its body.
FENCE_RE: re.Pattern[str] = re.compile(r"```[A-Za-z0-9_-]*\s*(.*?)```", re.DOTALL)

MAX_JSON_STARTS = 64
"""Most places in an answer's prose where :func:`find_json` tries to decode an object.

Each failed try may scan to the end of the answer, so trying every ``{`` was
quadratic in the answer's length (160 KB of junk braces took seconds)."""

MAX_JSON_SCAN_FACTOR = 4
"""The tries at those places decode at most this many times the answer's length.

Nested starts (``{"a":{"a":...[1,1,...``) each decode up to the end, so 64 of them
cost 64 times the answer (a 16 MiB one took about 35 s of CPU)."""

#: Where a JSON object can start: a brace followed by a key's quote or its close.
_OBJECT_START_RE = re.compile(r'\{\s*["}]')
_DECODER = json.JSONDecoder()

_T = TypeVar("_T")
_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


def check_llm(llm: object) -> None:
    """Reject a non-callable ``llm``, or an async one (``async def``, also as
    ``__call__`` or under ``functools.partial``): each call would return a coroutine
    that nobody awaits, and the component would fall back without a word.

    Args:
        llm: The candidate ``(prompt, json_schema) -> str`` callable.

    Raises:
        TypeError: If ``llm`` is not callable, or is async.
    """
    if not callable(llm):
        raise TypeError(f"llm must be callable, got {type(llm).__name__}")
    if inspect.iscoroutinefunction(llm) or inspect.iscoroutinefunction(
        type(llm).__call__  # an object with an async __call__
    ):
        raise TypeError(
            f"llm {getattr(llm, '__qualname__', type(llm).__name__)} is async def: the "
            "LLM components call it synchronously (in the engine's worker thread under "
            "AsyncEmotionalMemory); give a blocking (prompt, json_schema) -> str callable"
        )


def check_cache_size(cache_size: object) -> int:
    """Validate an LRU capacity: a non-negative ``int`` (``bool`` is refused).

    Args:
        cache_size: The candidate capacity.

    Returns:
        ``cache_size`` unchanged.

    Raises:
        TypeError: If it is not an ``int`` (or is a ``bool``).
        ValueError: If it is negative.
    """
    if isinstance(cache_size, bool) or not isinstance(cache_size, int):
        raise TypeError(f"cache_size must be an int, got {type(cache_size).__name__}")
    if cache_size < 0:
        raise ValueError(f"cache_size must be >= 0, got {cache_size}")
    return cache_size


def copy_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Deep copy of a JSON schema, so a callee that mutates it cannot harm the original.

    Args:
        schema: A JSON-serialisable dict.

    Returns:
        An independent copy.
    """
    result: dict[str, Any] = json.loads(json.dumps(schema))
    return result


def ask_llm(llm: LLMCallable, prompt: str, schema: dict[str, Any]) -> str:
    """Call ``llm`` and check that it answered with text.

    Args:
        llm: The ``(prompt, json_schema) -> str`` callable.
        prompt: The prompt.
        schema: The JSON schema passed along with it.

    Returns:
        The model's answer.

    Raises:
        TypeError: If the answer is not a ``str``.
        Exception: Whatever ``llm`` itself raises.
    """
    answer = llm(prompt, schema)
    if not isinstance(answer, str):
        raise TypeError(f"LLM must return a str, got {type(answer).__name__}")
    return answer


def find_json(
    answer: str,
    pick: Callable[[object], _T | None],
    fence: re.Pattern[str] = FENCE_RE,
) -> _T | None:
    """Find the first JSON value in an LLM answer that ``pick`` accepts.

    Candidates, in order: the whole (stripped) answer, the body of each code fence
    matched by ``fence``, then the JSON objects that start at a ``{`` in the text
    (the first :data:`MAX_JSON_STARTS` places where an object can start, until those
    tries have decoded :data:`MAX_JSON_SCAN_FACTOR` times the answer's length).
    Text that does not decode is skipped; ``pick`` decides what a decoded value
    yields (``None`` to keep looking) and may raise to reject the answer outright.

    Args:
        answer: Raw text returned by the LLM callable.
        pick: Maps a decoded JSON value to a result, or ``None`` to skip it.
        fence: Pattern of a code fence whose group 1 is the body.

    Returns:
        The first non-``None`` result of ``pick``, or ``None`` if there is none.

    Raises:
        ValueError: If the answer is empty or blank.
    """
    text = answer.strip()
    if not text:
        raise ValueError("empty LLM answer")
    candidates = [text, *(m.group(1).strip() for m in fence.finditer(text))]
    for candidate in candidates:
        try:
            obj = json.loads(candidate)
        except (ValueError, RecursionError):  # RecursionError: nested too deeply
            continue
        found = pick(obj)
        if found is not None:
            return found
    budget = MAX_JSON_SCAN_FACTOR * len(text)
    for tried, match in enumerate(_OBJECT_START_RE.finditer(text)):
        if tried == MAX_JSON_STARTS or budget < 0:
            break
        start = match.start()
        try:
            obj, end = _DECODER.raw_decode(text, start)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
            # where decoding stopped (a huge int or deep nesting: counted to the end)
            budget -= getattr(exc, "pos", len(text)) - start
            continue
        budget -= end - start
        found = pick(obj)
        if found is not None:
            return found
    return None


class LRUCache(Generic[_K, _V]):
    """A thread-safe least-recently-used cache of at most ``maxsize`` entries.

    A lock around :class:`cachetools.LRUCache`, the project's one LRU implementation.

    ``maxsize == 0`` turns it off: :meth:`get` always misses and :meth:`put` keeps
    nothing.
    """

    def __init__(self, maxsize: int) -> None:
        """Create an empty cache.

        Args:
            maxsize: Capacity (``>= 0``; validate it with :func:`check_cache_size`).
        """
        self._maxsize = maxsize
        # cachetools refuses maxsize 0 items; a 0 cache never stores (see put).
        self._data: cachetools.LRUCache[_K, _V] = cachetools.LRUCache(maxsize=max(maxsize, 1))
        self._lock = threading.Lock()

    @property
    def maxsize(self) -> int:
        """The capacity (``0`` means caching is off)."""
        return self._maxsize

    def get(self, key: _K) -> _V | None:
        """Look ``key`` up and mark it most recently used.

        Args:
            key: The cache key.

        Returns:
            The cached value, or ``None`` on a miss.
        """
        if self._maxsize <= 0:
            return None
        with self._lock:
            return self._data.get(key)  # a hit becomes the most recently used

    def put(self, key: _K, value: _V) -> None:
        """Store ``value`` under ``key``, evicting the least recently used beyond capacity.

        Args:
            key: The cache key.
            value: The value (not ``None``: ``None`` reads as a miss).
        """
        if self._maxsize <= 0:
            return
        with self._lock:
            self._data[key] = value  # evicts the least recently used beyond maxsize

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        """Number of entries held."""
        with self._lock:
            return len(self._data)
