"""The JSON shapes of the REST API (request bodies and responses), as pydantic models.

Requests reject unknown fields and values out of range (422 naming the field); the
service's configurable limits (:mod:`emotional_memory.server.limits`: sizes, counts,
filter size) are checked next, before any work;
responses are built from the library's objects by :func:`memory_out`,
:func:`result_out` and :func:`state_out`. FastAPI publishes all of them in
``/openapi.json``.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from emotional_memory._validation import INSTANT_PATTERN, json_instant, parse_instant
from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.categorize import EmotionLabel
from emotional_memory.models import Memory
from emotional_memory.mood import MoodField
from emotional_memory.retrieval import RetrievalBreakdown, RetrievalExplanation
from emotional_memory.state import AffectiveState

_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
INSTANT_SCHEMA: dict[str, Any] = {
    "type": "string", "format": "date-time", "pattern": INSTANT_PATTERN,
}
"""The timestamp strings taken (``expires_at``, a filter's ``timestamp``)."""
DEFAULT_TOP_K = 5
"""A search's ``top_k`` when not given (or the service's ``max_top_k`` when smaller)."""
MAX_SCOPE_DEPTH = 32
"""Most parts a request's ``scope`` may append to its key's path (body or query)."""
ScopePart = Annotated[StrictStr, Field(min_length=1, pattern=r"^[^\x00]+$")]
Scope = Annotated[
    list[ScopePart] | None,
    Field(
        default=None,
        max_length=MAX_SCOPE_DEPTH,
        description="Sub-scope to work in, appended to the API key's scope path "
        "(never leaves it). Omitted or [] = the key's own scope.",
    ),
]
Finite = Annotated[float, Field(strict=True, allow_inf_nan=False)]
"""A finite JSON number (an integer is taken as a float; a boolean or a string is not)."""


def whole_number(value: Any) -> Any:
    """A whole-number float as the integer it is (``5.0`` -> 5: JSON Schema's
    ``integer`` includes it, and a JavaScript client may send it); anything else as
    it is, for strict integer validation to take or refuse (a fraction, a boolean,
    a string, a non-finite number).

    Args:
        value: the input before validation.

    Returns:
        ``int(value)`` for a finite float without a fractional part, else ``value``.
    """
    if isinstance(value, float) and value.is_integer():  # False for inf and nan
        return int(value)
    return value


PositiveInt = Annotated[int, Field(strict=True, ge=1), BeforeValidator(whole_number)]
"""A JSON integer >= 1: an int or a whole-number float (``5.0``); not a boolean, a
string, a fraction or a non-finite number. (The bound is inside: one given outside
the validator is published as ``ge``, which JSON Schema does not know.)"""


def unicode_text(path: str, text: str) -> str:
    """``text``, refused when not valid Unicode (a lone surrogate: JSON's ``"\\ud800"``).

    Args:
        path: the field's name, for the message.
        text: the string.

    Returns:
        ``text``.

    Raises:
        ValueError: it holds a lone surrogate (the message never quotes it raw).
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{path} is not valid Unicode text: {exc.reason}") from None
    return text


def finite_json(path: str, value: Any) -> None:
    """Reject NaN and infinities anywhere in JSON data (Python's json accepts them),
    and strings or keys that are not valid Unicode (:func:`unicode_text`).

    Args:
        path: the field's name, for the message (``metadata``, ``where``).
        value: parsed JSON data.

    Raises:
        ValueError: a non-finite float or a lone surrogate, named by its path
            (``metadata.a[2]``).
    """
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{path} must be a finite number, got {value}")
    if isinstance(value, str):
        unicode_text(path, value)
    elif isinstance(value, dict):
        for k, v in value.items():
            unicode_text(f"{path} key {k!r}", k)
            finite_json(f"{path}.{k}", v)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            finite_json(f"{path}[{i}]", v)


UNCALIBRATED = ("This service has no relevance calibration: only null (or omitted) is "
                "accepted.")
"""What an uncalibrated service's schema says of ``min_relevance``."""


def publish_uncalibrated(schema: dict[str, Any]) -> None:
    """Make a published ``min_relevance`` schema (number or null) say null only: a
    service without a relevance calibration refuses every number (422).

    Args:
        schema: the property's JSON Schema, changed in place.
    """
    schema.pop("anyOf", None)
    schema["type"] = "null"
    schema["description"] = f"{schema.get('description', '').rstrip()} {UNCALIBRATED}".strip()


MAX_UNKNOWN_NAMED = 8
"""Unknown fields (or MCP arguments) of one object answered one error each; more are
one error naming their count."""


def few_unknown(model: type[BaseModel], data: Any) -> Any:
    """``data``, refused whole when it holds over :data:`MAX_UNKNOWN_NAMED` names
    ``model`` does not declare: ``extra="forbid"`` lists each, an answer (and work on
    the event loop) proportional to the body rather than to the model.

    Args:
        model: the model ``data`` is validated as.
        data: the input before validation.

    Returns:
        ``data``.

    Raises:
        PydanticCustomError: ``extra_forbidden``, naming the count and a few names.
    """
    if not isinstance(data, dict) or len(data) <= MAX_UNKNOWN_NAMED:
        return data
    fields = model.model_fields
    known = set(fields) | {f.alias for f in fields.values() if f.alias}
    unknown = [k for k in data if k not in known]
    if len(unknown) > MAX_UNKNOWN_NAMED:
        raise PydanticCustomError(
            "extra_forbidden", "{count} unknown fields (such as {names}); this takes: {takes}",
            {"count": len(unknown), "names": ", ".join(ascii(str(k)[:32]) for k in unknown[:3]),
             "takes": ", ".join(fields) or "nothing"},
        )
    return data


class FewUnknown(BaseModel):
    """A model that refuses many unknown names as one error (:func:`few_unknown`)."""

    @model_validator(mode="before")
    @classmethod
    def _few_unknown(cls, data: Any) -> Any:
        return few_unknown(cls, data)


class _Strict(FewUnknown):
    model_config = ConfigDict(extra="forbid")


class AffectIn(_Strict):
    """A point in valence/arousal/dominance space."""

    valence: Annotated[Finite, Field(ge=-1.0, le=1.0, description="Pleasantness, -1..1.")]
    arousal: Annotated[Finite, Field(ge=0.0, le=1.0, description="Activation, 0..1.")]
    dominance: Annotated[
        Finite, Field(ge=0.0, le=1.0, description="Sense of control, 0..1.")
    ] = 0.5

    def core_affect(self) -> CoreAffect:
        """The library's value object."""
        return CoreAffect(valence=self.valence, arousal=self.arousal, dominance=self.dominance)


class ItemIn(_Strict):
    """One memory to store."""

    # not min_length: pydantic's constrained str would refuse a lone surrogate before
    # unicode_text can name it
    content: Annotated[StrictStr, Field(description="The event text (not empty).",
                                        json_schema_extra={"minLength": 1})]
    metadata: dict[str, Any] | None = Field(
        default=None, description="JSON object stored with the memory (filterable with where)."
    )
    affect: AffectIn | None = Field(
        default=None,
        description="The event's own affect; omitted: estimated from the content when the "
        "service rates text (--affect text, the default with MiniLM), else the scope's "
        "current affective state.",
    )
    expires_at: Annotated[AwareDatetime, WithJsonSchema(INSTANT_SCHEMA)] | None = Field(
        default=None, description="RFC 3339 time with offset after which the memory is invisible."
    )

    @field_validator("content")
    @classmethod
    def _unicode_content(cls, v: str) -> str:
        if not v:
            raise ValueError("content must not be empty (as MCP's remember)")
        return unicode_text("content", v)

    @field_validator("metadata")
    @classmethod
    def _finite_metadata(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None:
            finite_json("metadata", v)
        return v

    @field_validator("expires_at", mode="before")
    @classmethod
    def _iso_expiry(cls, v: Any) -> Any:
        """Take a string only: a JSON number is no RFC 3339 time (pydantic would read
        it as Unix seconds or milliseconds)."""
        if v is not None and not isinstance(v, str | datetime):
            raise ValueError(
                f"expires_at must be an RFC 3339 (ISO-8601) string, got {type(v).__name__}")
        if isinstance(v, str) and _NUMBER.fullmatch(v.strip()):
            raise ValueError(
                "expires_at must be an RFC 3339 (ISO-8601) string, not a number of seconds")
        if isinstance(v, str):  # the grammar of a filter's timestamp, not pydantic's
            return parse_instant("expires_at", v)
        return v

    @field_validator("expires_at")
    @classmethod
    def _utc_expiry(cls, v: datetime | None) -> datetime | None:
        """Refuse a time that has no UTC datetime (``9999-12-31T23:59:59-14:00``)."""
        if v is not None:
            try:
                v.astimezone(UTC)
            except OverflowError:
                raise ValueError("expires_at is outside the years 1 to 9999 in UTC") from None
        return v


class MemoryIn(ItemIn):
    """``POST /v1/memories``."""

    scope: Scope = None


class BatchIn(_Strict):
    """``POST /v1/memories/batch``: stored in one transaction, all or none."""

    items: list[ItemIn] = Field(min_length=1, description="At most max_batch_items.")
    scope: Scope = None


class SearchIn(_Strict):
    """``POST /v1/search``."""

    query: StrictStr
    top_k: Annotated[
        PositiveInt | None, Field(description="At most the service's max_top_k; "
                          "default (omitted or null) 5, or max_top_k when smaller.")
    ] = DEFAULT_TOP_K
    where: dict[str, Any] | None = Field(
        default=None,
        description='Filter: {"field": value}, $eq $ne $gt $gte $lt $lte $in $nin $exists, '
        "$and, $or; fields are metadata keys (dotted paths) and timestamp, valence, arousal, "
        "dominance, emotion, retrieval_count.",
    )
    explain: StrictBool = Field(default=False, description="Add each result's score breakdown.")
    min_relevance: float | None = Field(
        default=None, ge=0.0, le=1.0, allow_inf_nan=False, strict=True,
        description="Drop results whose calibrated relevance probability is below this "
        "(0 to 1; possibly every result). Needs a config with a relevance calibration "
        "(python -m training fit writes one); absent: the top_k results as ranked.",
    )
    scope: Scope = None

    @field_validator("query")
    @classmethod
    def _unicode_query(cls, v: str) -> str:
        return unicode_text("query", v)

    @field_validator("where")
    @classmethod
    def _finite_where(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None:
            finite_json("where", v)
        return v


class StateAffectIn(AffectIn):
    """``PUT /v1/state/affect``."""

    scope: Scope = None


class MemoryOut(BaseModel):
    """A stored memory."""

    id: str
    content: str
    metadata: dict[str, Any]
    scope: list[str] = Field(description="Its scope path, relative to the API key's scope.")
    timestamp: datetime
    affect: CoreAffect
    emotion: EmotionLabel | None = Field(description="Plutchik label of its affect.")
    expires_at: datetime | None = None
    retrieval_count: int


class MemoriesOut(BaseModel):
    """A list of memories."""

    memories: list[MemoryOut]


class ResultOut(MemoryOut):
    """A search result: the memory (after retrieval), its score and, on request, why."""

    score: float
    breakdown: RetrievalBreakdown | None = None
    relevance: float | None = Field(
        default=None, exclude_if=lambda v: v is None,
        description="Calibrated probability that the memory is relevant (only with a "
        "relevance calibration in the config).",
    )


class SearchOut(BaseModel):
    """``POST /v1/search`` response, best first."""

    results: list[ResultOut]


class StateOut(BaseModel):
    """A scope's affective state."""

    core_affect: CoreAffect
    momentum: AffectiveMomentum
    mood: MoodField


class MoodChange(BaseModel):
    """How far the mood moved, per dimension (new minus old)."""

    valence: float
    arousal: float
    dominance: float


class RememberOut(MemoryOut):
    """What storing one memory stored, where its affect came from, how the mood moved."""

    affect_source: Literal["given", "text", "current"] = Field(
        description="given: the request's affect; text: estimated from the content; "
        "current: the scope's current affect."
    )
    mood_before: MoodField
    mood_after: MoodField
    mood_change: MoodChange


class ErrorOut(BaseModel):
    """Any error: ``detail`` is a message, or a list of ``{loc, msg, type}`` per field."""

    detail: str | list[dict[str, Any]]


def _relative(scope: tuple[str, ...], base: tuple[str, ...]) -> list[str]:
    return list(scope[len(base):]) if scope[: len(base)] == base else list(scope)


def memory_fields(memory: Memory, base: tuple[str, ...]) -> dict[str, Any]:
    """The :class:`MemoryOut` fields of a memory.

    Args:
        memory: the library's memory.
        base: the API key's scope path (the memory's scope is shown relative to it).

    Returns:
        A dict for :class:`MemoryOut` / :class:`ResultOut`.
    """
    tag = memory.tag
    return {
        "id": memory.id,
        "content": memory.content,
        "metadata": memory.metadata,
        "scope": _relative(tuple(getattr(memory, "scope", ())), base),
        # an offset with seconds as UTC: JSON would drop the seconds (and move it)
        "timestamp": json_instant(tag.timestamp),
        "affect": tag.core_affect,
        "emotion": tag.emotion_label,
        "expires_at": json_instant(getattr(memory, "expires_at", None)),
        "retrieval_count": tag.retrieval_count,
    }


def memory_out(memory: Memory, base: tuple[str, ...]) -> MemoryOut:
    """The response shape of a memory (see :func:`memory_fields`).

    Args:
        memory: the stored memory.
        base: the key's scope path (the memory's ``scope`` is answered relative to it).

    Returns:
        The :class:`MemoryOut`.
    """
    return MemoryOut(**memory_fields(memory, base))


def result_out(found: RetrievalExplanation, base: tuple[str, ...], explain: bool) -> ResultOut:
    """The response shape of one retrieval result.

    Args:
        found: the library's explanation.
        base: the API key's scope path.
        explain: include the breakdown.

    Returns:
        The result.
    """
    return ResultOut(
        **memory_fields(found.memory, base),
        score=found.score,
        breakdown=found.breakdown if explain else None,
        relevance=found.relevance,
    )


def state_out(state: AffectiveState) -> StateOut:
    """The response shape of an affective state."""
    return StateOut(core_affect=state.core_affect, momentum=state.momentum, mood=state.mood)


def mood_change(old: MoodField, new: MoodField) -> MoodChange:
    """How far the mood moved from ``old`` to ``new`` (new minus old, per dimension)."""
    return MoodChange(
        valence=new.valence - old.valence,
        arousal=new.arousal - old.arousal,
        dominance=new.dominance - old.dominance,
    )


def remember_out(
    memory: Memory, base: tuple[str, ...], source: str, before: MoodField, after: MoodField
) -> RememberOut:
    """The response shape of a stored memory with its affect's source and mood change.

    Args:
        memory: the stored memory.
        base: the API key's scope path.
        source: ``"given"``, ``"text"`` or ``"current"``.
        before: the scope's mood just before storing it.
        after: its mood just after.

    Returns:
        The :class:`RememberOut`.
    """
    return RememberOut(
        **memory_fields(memory, base),
        affect_source=source,
        mood_before=before,
        mood_after=after,
        mood_change=mood_change(before, after),
    )
