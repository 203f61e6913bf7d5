"""Query-type classification for retrieval weight routing (docs/behaviour.md §4).

A query is sorted into one of a few coarse types so that retrieval can pick a
weight vector suited to it (see :data:`LOCOMO_ROUTING`). Two classifiers are
provided:

* :class:`HeuristicQueryClassifier` -- a fast, deterministic rule cascade where the
  first rule that fires wins: ``temporal`` > ``multi_hop`` > ``single_hop`` >
  ``open_domain``.
* :class:`LLMQueryClassifier` -- asks a user-supplied callable
  ``(prompt, json_schema) -> str`` for the type, parses the answer robustly, caches
  successful answers in a small LRU and falls back to a default type on error.

Both satisfy the :class:`QueryClassifier` protocol.
"""

from __future__ import annotations

import re
from typing import Any, Protocol, runtime_checkable

from emotional_memory._llm import (
    LLMCallable,
    LRUCache,
    check_cache_size,
    check_llm,
    copy_schema,
    find_json,
)

__all__ = [
    "LOCOMO_ROUTING",
    "QUERY_TYPES",
    "HeuristicQueryClassifier",
    "LLMQueryClassifier",
    "QueryClassifier",
]

#: Every type a classifier may return (``default`` is only produced as a fallback).
QUERY_TYPES: frozenset[str] = frozenset(
    {"single_hop", "multi_hop", "temporal", "open_domain", "default"}
)

#: Types the LLM is asked to choose among (in prompt order).
_LLM_CHOICES: tuple[str, ...] = ("single_hop", "multi_hop", "temporal", "open_domain")

#: Per-query-type retrieval weight vectors tuned for LoCoMo-style benchmarks.
LOCOMO_ROUTING: dict[str, list[float]] = {
    "single_hop": [0.70, 0.10, 0.05, 0.05, 0.05, 0.05],
    "multi_hop": [0.50, 0.30, 0.10, 0.05, 0.05, 0.00],
    "open_domain": [0.40, 0.20, 0.15, 0.10, 0.10, 0.05],
    "temporal": [0.50, 0.30, 0.10, 0.05, 0.05, 0.00],
    "default": [0.35, 0.25, 0.15, 0.10, 0.10, 0.05],
}


@runtime_checkable
class QueryClassifier(Protocol):
    """Anything that maps a query string to one of :data:`QUERY_TYPES`."""

    def classify(self, query: str) -> str:
        """Return the query type of ``query``.

        Args:
            query: The retrieval query text.

        Returns:
            One of :data:`QUERY_TYPES`.
        """
        ...


# --------------------------------------------------------------------------- heuristic

_FLAGS = re.IGNORECASE

# The original 0.18.1's rules, word for word: cue phrases are separated by exactly one
# space (``"how  long"`` or ``"how\nlong"`` is no cue), units take an optional plural
# ``s`` (``"how much time"`` is temporal), matching is ``re.IGNORECASE`` (so ``"İs "``
# counts as ``"is "``, as ``re`` folds it). docs/behaviour.md §4.
_TEMPORAL_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"\b(?:when|after|before|how long|until|since|during)\b", _FLAGS),
    re.compile(r"\bat what (?:time|point)\b", _FLAGS),
    re.compile(r"\bhow (?:many|much) (?:years?|months?|days?|weeks?|hours?|times?)\b", _FLAGS),
    re.compile(r"\bhow (?:soon|late|early|often|frequently)\b", _FLAGS),
)

# "did ... before/after/first/last": "did" and a space, at least one character, a
# space and the order word, all on one line (the original's ``did .+ (...)\b``, where
# ``.`` stops at a newline). Linear time: per line, the first "did " leaves the most
# room, so one search for it and one for a later " <order word>" decide the line (the
# single ``.+`` pattern rescanned the rest of the line from every "did").
_DID: re.Pattern[str] = re.compile(r"\bdid ", _FLAGS)
_ORDER_WORD: re.Pattern[str] = re.compile(r" (?:before|after|first|last)\b", _FLAGS)


def _did_then_order_word(text: str) -> bool:
    """Whether a line holds ``did``, a space, something, a space and an order word."""
    for line in text.split("\n"):
        did = _DID.search(line)
        if did is not None and _ORDER_WORD.search(line, did.end() + 1) is not None:
            return True
    return False


_MULTI_HOP_PATTERN: re.Pattern[str] = re.compile(
    r"\b(?:and then|both|also|in addition|as well as|additionally|furthermore"
    r"|at the same time|meanwhile|alongside|together with)\b",
    _FLAGS,
)

# docs/behaviour.md §4: who/what/where/which are plain prefixes (so "what's" counts), unlike
# the auxiliary verbs, which carry a trailing space.
_SINGLE_HOP_START: re.Pattern[str] = re.compile(
    r"(?:who|what|where|which|is |are |does |did |was |were )", _FLAGS
)
_SINGLE_HOP_MAX_LEN = 100


def _check_query(query: object) -> str:
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, got {type(query).__name__}")
    return query


class HeuristicQueryClassifier:
    """Rule-based classifier; the first rule that fires wins.

    Order: ``temporal`` > ``multi_hop`` > ``single_hop`` > ``open_domain``. All cue
    words are matched as whole words, case-insensitively. It never returns
    ``default``.
    """

    def classify(self, query: str) -> str:
        """Classify ``query`` with the heuristic rule cascade.

        Args:
            query: The retrieval query text.

        Returns:
            One of ``temporal``, ``multi_hop``, ``single_hop`` or ``open_domain``.

        Raises:
            TypeError: If ``query`` is not a ``str``.
        """
        text = _check_query(query)
        if any(p.search(text) for p in _TEMPORAL_PATTERNS) or _did_then_order_word(text):
            return "temporal"
        if _MULTI_HOP_PATTERN.search(text):
            return "multi_hop"
        stripped = text.strip()
        if len(stripped) <= _SINGLE_HOP_MAX_LEN and _SINGLE_HOP_START.match(stripped):
            return "single_hop"
        return "open_domain"

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


# --------------------------------------------------------------------------- LLM

_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query_type": {"type": "string", "enum": list(_LLM_CHOICES)},
    },
    "required": ["query_type"],
    "additionalProperties": False,
}

_PROMPT_TEMPLATE = (
    "Classify the memory-retrieval query below into exactly one type:\n"
    "- single_hop: a simple factual question answered by one memory.\n"
    "- multi_hop: needs combining several memories or facts.\n"
    "- temporal: about time, dates, order or duration of events.\n"
    "- open_domain: open-ended, opinion or general-knowledge question.\n"
    'Answer with JSON only, e.g. {{"query_type": "single_hop"}}.\n\n'
    "Query: {query}"
)

_BARE_WORD_STRIP = " \t\r\n\"'`.,;:!"


def _normalise_type(value: object) -> str:
    """Return ``value`` as a known query type, else raise ``ValueError``."""
    if not isinstance(value, str):
        raise ValueError(f"query_type must be a string, got {type(value).__name__}")
    norm = re.sub(r"[\s-]+", "_", value.strip().lower())
    if norm not in QUERY_TYPES:
        raise ValueError(f"unknown query_type {value!r}")
    return norm


def _type_from_json(obj: object) -> str | None:
    """Extract a query type from a decoded JSON value, or ``None`` if it has none."""
    if isinstance(obj, dict):
        if "query_type" in obj:
            return _normalise_type(obj["query_type"])
        return None
    if isinstance(obj, str):
        return _normalise_type(obj)
    return None


def _parse_answer(answer: str) -> str:
    """Parse an LLM answer into a query type.

    Accepts plain JSON, JSON inside Markdown code fences, a JSON object embedded in
    prose, a JSON string, or a bare type word.

    Args:
        answer: Raw text returned by the LLM callable.

    Returns:
        A member of :data:`QUERY_TYPES`.

    Raises:
        ValueError: If no valid query type can be extracted.
    """
    found = find_json(answer, _type_from_json)
    if found is not None:
        return found

    bare = answer.strip().strip(_BARE_WORD_STRIP)
    if bare and len(bare.split()) <= 2:
        return _normalise_type(bare)
    raise ValueError(f"could not parse a query type from LLM answer {answer[:200]!r}")


class LLMQueryClassifier:
    """Classify queries by asking a language model, with caching and fallback.

    The ``llm`` callable receives ``(prompt, json_schema)`` -- the prompt contains
    the query, the schema describes an object with a required ``query_type``
    string enum -- and must return the model's text answer.
    """

    def __init__(
        self,
        llm: LLMCallable,
        *,
        cache_size: int = 256,
        fallback_on_error: bool = True,
        default_type: str = "open_domain",
    ) -> None:
        """Create the classifier.

        Args:
            llm: Callable ``(prompt, json_schema) -> str`` answering the prompt.
            cache_size: Maximum number of successful answers kept in the LRU cache,
                keyed by query string; ``0`` disables caching.
            fallback_on_error: If true, any failure yields ``default_type``;
                otherwise the callable's own exception propagates unchanged, and an
                answer that cannot be parsed raises ``ValueError``.
            default_type: Type returned on failure; must be in :data:`QUERY_TYPES`.

        Raises:
            TypeError: If ``llm`` is not callable, ``cache_size`` is not an int or
                ``default_type`` is not a str.
            ValueError: If ``cache_size`` is negative or ``default_type`` is unknown.
        """
        check_llm(llm)
        check_cache_size(cache_size)
        if not isinstance(default_type, str):
            raise TypeError(f"default_type must be a str, got {type(default_type).__name__}")
        if default_type not in QUERY_TYPES:
            raise ValueError(
                f"default_type must be one of {sorted(QUERY_TYPES)}, got {default_type!r}"
            )
        self._llm = llm
        self._cache_size = cache_size
        self._fallback_on_error = bool(fallback_on_error)
        self._default_type = default_type
        self._cache: LRUCache[str, str] = LRUCache(cache_size)

    @property
    def cache_size(self) -> int:
        """Maximum number of cached answers (``0`` means caching is off)."""
        return self._cache_size

    @property
    def default_type(self) -> str:
        """Type returned when classification fails and fallback is enabled."""
        return self._default_type

    @property
    def fallback_on_error(self) -> bool:
        """Whether failures fall back to :attr:`default_type` instead of raising."""
        return self._fallback_on_error

    def build_prompt(self, query: str) -> str:
        """Return the prompt sent to the LLM for ``query``.

        Args:
            query: The retrieval query text.

        Returns:
            The prompt string, which contains ``query`` verbatim.
        """
        return _PROMPT_TEMPLATE.format(query=query)

    def clear_cache(self) -> None:
        """Drop every cached answer."""
        self._cache.clear()

    def classify(self, query: str) -> str:
        """Classify ``query`` via the LLM, using the cache when possible.

        Args:
            query: The retrieval query text.

        Returns:
            A member of :data:`QUERY_TYPES`; ``default_type`` if the LLM call or
            parsing fails and ``fallback_on_error`` is true.

        Raises:
            TypeError: If ``query`` is not a ``str``.
            Exception: With ``fallback_on_error`` false, whatever the ``llm``
                callable raised, unchanged; a ValueError when its answer cannot be
                parsed (the parse error chained as ``__cause__``).
        """
        text = _check_query(query)
        cached = self._cache.get(text)
        if cached is not None:
            return cached

        try:
            answer = self._llm(self.build_prompt(text), copy_schema(_JSON_SCHEMA))
        except Exception:
            if self._fallback_on_error:
                return self._default_type
            raise  # the callable's own exception, unchanged (as the original)
        try:
            if not isinstance(answer, str):
                raise TypeError(f"LLM must return a str, got {type(answer).__name__}")
            result = _parse_answer(answer)
        except Exception as exc:
            if self._fallback_on_error:
                return self._default_type
            raise ValueError(f"LLM query classification failed: {exc}") from exc

        self._cache.put(text, result)
        return result

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(cache_size={self._cache_size}, "
            f"cached={len(self._cache)}, "
            f"fallback_on_error={self._fallback_on_error}, "
            f"default_type={self._default_type!r})"
        )
