"""The LLM appraisal engine: asks a ``(prompt, json_schema) -> str`` callable.

:class:`LLMAppraisalEngine` parses the answer's JSON robustly, caches results and falls
back on error. This is also the original library's module path for the text-driven
engines, so the keyword engine is re-exported here (``from
emotional_memory.appraisal_llm import ...`` runs unchanged); both are importable from
:mod:`emotional_memory.appraisal` too.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from emotional_memory._llm import (
    LLMCallable,
    LRUCache,
    check_cache_size,
    check_llm,
    copy_schema,
    find_json,
)
from emotional_memory._warn import warn_caller
from emotional_memory.appraisal import (
    APPRAISAL_DIMENSIONS,
    AppraisalVector,
    KeywordAppraisalEngine,
    KeywordRule,
    _check_content,
    _check_context,
    _clamp_to_range,
)
from emotional_memory.appraisal_schema import (
    SCHERER_CPM_SCHEMA,
    AppraisalSchema,
    GenericAppraisalVector,
)

__all__ = [
    "DEFAULT_LLM_SYSTEM_PROMPT",
    "SCHERER_CPM_SCHEMA",
    "KeywordAppraisalEngine",
    "KeywordRule",
    "LLMAppraisalConfig",
    "LLMAppraisalEngine",
    "LLMCallable",
]

#: Default instructions placed at the top of every LLM appraisal prompt.
DEFAULT_LLM_SYSTEM_PROMPT: str = (
    "You rate events the way a person's emotional appraisal system would (Scherer's "
    "stimulus evaluation checks). Judge the event from the point of view of the person "
    "who experienced or wrote about it, and give one number per dimension."
)

_DIMENSION_HELP: dict[str, str] = {
    "novelty": "-1 = completely expected or routine, 1 = utterly surprising or new",
    "goal_relevance": "-1 = blocks what the person wants, 1 = strongly helps it",
    "coping_potential": "0 = helpless, nothing can be done, 1 = fully in control",
    "norm_congruence": "-1 = violates moral or social norms, 1 = fully fits them",
    "self_relevance": "0 = does not concern the person at all, 1 = deeply personal",
}

_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        name: {"type": "number", "minimum": low, "maximum": high, "description": help_}
        for (name, (low, high)), help_ in zip(
            APPRAISAL_DIMENSIONS.items(), _DIMENSION_HELP.values(), strict=True
        )
    },
    "required": list(APPRAISAL_DIMENSIONS),
    "additionalProperties": False,
}

# Only untagged or ``json`` fences: a narrower pattern than the shared default,
# kept so that which fence body is tried first stays as it always was.
_FENCE_RE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


class LLMAppraisalConfig(BaseModel):
    """Settings of :class:`LLMAppraisalEngine`.

    Attributes:
        cache_size: Maximum number of successful appraisals kept in the LRU cache
            (``0`` disables caching); must be ``>= 0``.
        fallback: Vector returned when appraisal fails; ``None`` means the neutral
            ``AppraisalVector.neutral()``.
        fallback_on_error: If true (default), failures warn and return the fallback;
            otherwise they raise ``ValueError``.
        system_prompt: Instructions placed at the top of every prompt.
        include_context: Whether the context dict is added to the prompt (as JSON)
            and to the cache key.
        appraisal_schema: The schema the LLM rates; ``None`` (default) or
            :data:`SCHERER_CPM_SCHEMA` gives :class:`AppraisalVector` answers, any
            other schema (e.g. :data:`DIRECT_VAD_SCHEMA`) gives
            :class:`GenericAppraisalVector` answers, prompted with the schema's own
            ``system_prompt`` and JSON schema.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, extra="forbid")


    cache_size: int = Field(default=128, ge=0)
    fallback: AppraisalVector | None = None
    fallback_on_error: bool = True
    system_prompt: str = DEFAULT_LLM_SYSTEM_PROMPT
    include_context: bool = True
    appraisal_schema: AppraisalSchema | None = None

    @field_validator("cache_size", mode="before")
    @classmethod
    def _int_cache_size(cls, v: object) -> object:
        return check_cache_size(v)


def _as_object(obj: object) -> dict[str, Any] | None:
    """``obj`` if it is a JSON object, else ``None``."""
    return obj if isinstance(obj, dict) else None


def _extract_json_object(answer: str) -> dict[str, Any]:
    """Find the JSON object in an LLM answer.

    Tries, in order: the whole answer, the contents of each Markdown code fence, and
    the first balanced ``{...}`` object embedded in the text.

    Args:
        answer: Raw text returned by the LLM callable.

    Returns:
        The decoded JSON object.

    Raises:
        ValueError: If no JSON object can be found.
    """
    found = find_json(answer, _as_object, _FENCE_RE)
    if found is not None:
        return found
    raise ValueError(f"no JSON object found in LLM answer {answer[:200]!r}")


def _vector_from_json(obj: Mapping[str, Any]) -> AppraisalVector:
    """Validate a decoded answer into an :class:`AppraisalVector`.

    Finite values outside a dimension's range are clamped into it, as the original
    does (novelty 5.0 is 1.0); missing dimensions, non-numbers and non-finite values
    raise.
    An answer wrapped in one extra object level (``{"appraisal": {...}}``) is unwrapped.

    Args:
        obj: The decoded JSON object.

    Returns:
        The validated vector.

    Raises:
        ValueError: On missing, non-numeric or non-finite values.
    """
    if not any(k in obj for k in APPRAISAL_DIMENSIONS):
        nested = [v for v in obj.values() if isinstance(v, Mapping)]
        if len(nested) == 1:
            obj = nested[0]
    missing = [k for k in APPRAISAL_DIMENSIONS if k not in obj]
    if missing:
        raise ValueError(f"LLM answer is missing field(s) {missing}")
    values: dict[str, float] = {}
    for name in APPRAISAL_DIMENSIONS:
        raw = obj[name]
        if isinstance(raw, bool) or not isinstance(raw, int | float | str):
            raise ValueError(f"{name} must be a number, got {type(raw).__name__}")
        try:
            num = float(raw)
        except ValueError as exc:
            raise ValueError(f"{name} must be a number, got {raw!r}") from exc
        except OverflowError:  # an int beyond the float range (10**400)
            raise ValueError(f"{name} must be finite, got an int too large for a float") from None
        if not math.isfinite(num):
            raise ValueError(f"{name} must be finite, got {raw!r}")
        values[name] = num
    return _clamp_to_range(values)


class LLMAppraisalEngine:
    """Appraise events by asking a language model, with an LRU cache and a fallback.

    The ``llm`` callable receives ``(prompt, json_schema)``: the prompt explains the
    five dimensions and their ranges and contains the content (and the context as
    JSON when given and ``include_context`` is set); the schema describes an object
    with the five required number properties. The answer may be raw JSON, JSON in a
    Markdown code fence, or JSON embedded in prose.
    """

    def __init__(
        self,
        llm: LLMCallable,
        config: LLMAppraisalConfig | None = None,
        fallback: AppraisalVector | GenericAppraisalVector | None = None,
    ) -> None:
        """Create the engine.

        Args:
            llm: Callable ``(prompt, json_schema) -> str``.
            config: Settings; ``None`` uses ``LLMAppraisalConfig()``.
            fallback: Answer on failure (overrides ``config.fallback``); ``None``
                means the schema's neutral values.

        Raises:
            TypeError: If ``llm`` is not callable or ``config`` has the wrong type.
        """
        check_llm(llm)
        if config is None:
            config = LLMAppraisalConfig()
        if not isinstance(config, LLMAppraisalConfig):
            raise TypeError(
                f"config must be an LLMAppraisalConfig or None, got {type(config).__name__}"
            )
        schema = config.appraisal_schema
        if schema is not None and not isinstance(schema, AppraisalSchema):
            raise TypeError(
                f"appraisal_schema must be an AppraisalSchema, got {type(schema).__name__}"
            )
        # A schema other than Scherer's answers with generic vectors.
        self._schema: AppraisalSchema | None = (
            None if schema is None or schema.name == SCHERER_CPM_SCHEMA.name else schema
        )
        if fallback is not None and not isinstance(
            fallback, AppraisalVector | GenericAppraisalVector
        ):
            raise TypeError(f"fallback must be an appraisal vector, got {type(fallback).__name__}")
        self._llm = llm
        self._config = config
        if fallback is None:
            fallback = config.fallback
        if fallback is None:
            fallback = (
                AppraisalVector.neutral()
                if self._schema is None
                else GenericAppraisalVector(self._schema.neutral_values(), self._schema)
            )
        self._fallback: AppraisalVector | GenericAppraisalVector = fallback
        self._fallback_count = 0
        self._cache: LRUCache[
            tuple[str, str | None], AppraisalVector | GenericAppraisalVector
        ] = LRUCache(config.cache_size)

    @property
    def config(self) -> LLMAppraisalConfig:
        """The engine's settings."""
        return self._config

    @property
    def fallback(self) -> AppraisalVector | GenericAppraisalVector:
        """The vector returned on failure when ``fallback_on_error`` is set."""
        return self._fallback

    @property
    def fallback_count(self) -> int:
        """How many appraisals fell back since creation or :meth:`reset_fallback_count`."""
        return self._fallback_count

    def reset_fallback_count(self) -> None:
        """Set :attr:`fallback_count` back to 0."""
        self._fallback_count = 0

    def close(self) -> None:
        """Release the LLM callable's resources when it has a ``close()``."""
        close = getattr(self._llm, "close", None)
        if callable(close):
            close()

    @property
    def json_schema(self) -> dict[str, Any]:
        """A fresh copy of the JSON schema passed to the LLM."""
        if self._schema is not None:
            return self._schema.to_json_schema()
        return copy_schema(_JSON_SCHEMA)

    def cache_len(self) -> int:
        """Number of appraisals currently cached."""
        return len(self._cache)

    def clear_cache(self) -> None:
        """Drop every cached appraisal."""
        self._cache.clear()

    def _context_json(self, context: Mapping[str, Any] | None) -> str | None:
        if context is None or not self._config.include_context:
            return None
        try:
            return json.dumps(dict(context), sort_keys=True, default=str, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError) as exc:  # mixed key types, a cycle
            raise TypeError(
                "context must be JSON-serialisable (sortable keys, no cycles): "
                f"{type(exc).__name__}: {exc}"
            ) from None

    def build_prompt(self, content: str, context: dict[str, Any] | None = None) -> str:
        """Return the prompt sent to the LLM.

        Args:
            content: The event description (included verbatim).
            context: Optional extra information, included as JSON when
                ``include_context`` is set.

        Returns:
            The prompt string.

        Raises:
            TypeError: If ``content`` is not a ``str`` or ``context`` is not a dict.
        """
        text = _check_content(content, "content")
        ctx_json = self._context_json(_check_context(context))
        return self._prompt(text, ctx_json)

    def _prompt(self, content: str, ctx_json: str | None) -> str:
        if self._schema is not None:
            return self._schema_prompt(self._schema, content, ctx_json)
        lines = [self._config.system_prompt.strip(), "", "Dimensions:"]
        for name, (low, high) in APPRAISAL_DIMENSIONS.items():
            lines.append(f"- {name} (number in [{low:g}, {high:g}]): {_DIMENSION_HELP[name]}")
        lines += ["", "Event:", content]
        if ctx_json is not None:
            lines += ["", "Context (JSON):", ctx_json]
        lines += [
            "",
            "Answer with a single JSON object containing exactly these five number "
            "fields: " + ", ".join(APPRAISAL_DIMENSIONS) + ". No other text.",
        ]
        return "\n".join(lines)

    @staticmethod
    def _schema_prompt(schema: AppraisalSchema, content: str, ctx_json: str | None) -> str:
        lines = [schema.system_prompt.strip(), "", "Dimensions:"]
        for dim in schema.dimensions:
            low, high = dim.range
            lines.append(f"- {dim.name} (number in [{low:g}, {high:g}]): {dim.description}")
        lines += ["", "Event:", content]
        if ctx_json is not None:
            lines += ["", "Context (JSON):", ctx_json]
        lines += [
            "",
            "Answer with a single JSON object with these number fields: "
            + ", ".join(schema.dimension_names)
            + ". No other text.",
        ]
        return "\n".join(lines)

    def _parse(self, answer: str) -> AppraisalVector | GenericAppraisalVector:
        obj = _extract_json_object(answer)
        if self._schema is None:
            return _vector_from_json(obj)
        names = self._schema.dimension_names
        if not any(k in obj for k in names):
            nested = [v for v in obj.values() if isinstance(v, Mapping)]
            if len(nested) == 1:
                obj = dict(nested[0])
        # a partial answer is a failure (as the original), not neutral-filled
        missing = [k for k in names if k not in obj]
        if missing:
            raise ValueError(f"LLM answer is missing field(s) {missing}")
        return GenericAppraisalVector(obj, self._schema)

    def appraise(
        self, event_text: str, context: dict[str, Any] | None = None
    ) -> AppraisalVector | GenericAppraisalVector:
        """Appraise ``event_text`` via the LLM, using the cache when possible.

        Args:
            event_text: The event description.
            context: Optional extra information (e.g. speaker, situation).

        Returns:
            The LLM's appraisal (out-of-range values clamped); on failure,
            the fallback vector (with a ``RuntimeWarning``) if ``fallback_on_error``.

        Raises:
            TypeError: If ``event_text`` is not a ``str`` or ``context`` is not a dict.
            Exception: With ``fallback_on_error`` false, whatever the ``llm``
                callable raised, unchanged (as the original).
            ValueError: With ``fallback_on_error`` false, when the answer is not a
                usable appraisal (the parse error chained as ``__cause__``).
        """
        text = _check_content(event_text)
        ctx_json = self._context_json(_check_context(context))
        key = (text, ctx_json)
        cached = self._cache.get(key)
        if cached is not None:
            return cached

        try:
            raw_answer = self._llm(self._prompt(text, ctx_json), self.json_schema)
        except Exception as exc:
            if not self._config.fallback_on_error:
                raise
            return self._fall_back(exc)
        try:
            if not isinstance(raw_answer, str):
                raise TypeError(f"LLM must return a str, got {type(raw_answer).__name__}")
            result = self._parse(raw_answer)
        except Exception as exc:
            if not self._config.fallback_on_error:
                raise ValueError(
                    f"LLM appraisal failed ({type(exc).__name__}: {exc})"
                ) from exc
            return self._fall_back(exc)

        self._cache.put(key, result)
        return result

    def _fall_back(self, exc: Exception) -> AppraisalVector | GenericAppraisalVector:
        """Warn about ``exc``, count it, and answer with the fallback vector."""
        reason = f"{type(exc).__name__}: {exc}"
        self._fallback_count += 1
        warn_caller(f"LLM appraisal failed ({reason}); using the fallback vector")
        return self._fallback

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(cache_size={self._config.cache_size}, "
            f"cached={len(self._cache)}, "
            f"fallback_on_error={self._config.fallback_on_error})"
        )
