"""Memories and their affective fingerprint (docs/behaviour.md §2).

An :class:`EmotionalTag` records how an event felt (core affect), where the feeling
was heading (momentum), the mood at the time, its appraisal, resonance links to other
memories, and the bookkeeping of retrieval, reconsolidation and prediction.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from emotional_memory._unvalidated import unvalidated as _unvalidated
from emotional_memory._validation import aware, clamp, finite, in_utc, utc_now
from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.appraisal import AppraisalVector
from emotional_memory.categorize import EmotionLabel
from emotional_memory.mood import MoodField

LinkType = Literal["semantic", "emotional", "temporal", "causal", "contrastive"]
LINK_TYPES: tuple[str, ...] = ("semantic", "emotional", "temporal", "causal", "contrastive")


_M = TypeVar("_M", bound=BaseModel)
_set_attr = object.__setattr__


def with_fields(model: _M, updates: dict[str, Any]) -> _M:
    """``model.model_copy(update=updates)``, without its generic overhead.

    For the models of this library (no extra fields, no private attributes): a
    shallow copy with ``updates`` applied, unvalidated, the updated names added to
    the fields set, exactly what ``model_copy`` builds for them. The retrieval side
    effects copy a few tags and links per winner through it.

    Args:
        model: a model (one with extra fields or private attributes, e.g. a user's
            subclass, is copied by ``model_copy`` itself).
        updates: field name -> new value (already valid).

    Returns:
        The copy.
    """
    if model.__pydantic_extra__ is not None or model.__pydantic_private__ is not None:
        return model.model_copy(update=updates)
    out = object.__new__(type(model))
    values = model.__dict__.copy()
    values.update(updates)
    _set_attr(out, "__dict__", values)
    _set_attr(out, "__pydantic_extra__", None)
    _set_attr(out, "__pydantic_fields_set__", model.__pydantic_fields_set__ | updates.keys())
    _set_attr(out, "__pydantic_private__", None)
    return out


class ResonanceLink(BaseModel):
    """A weighted, typed association from one memory to another.

    ``strength`` must lie in [0, 1] (validated, not clamped).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    source_id: str
    target_id: str
    strength: float
    link_type: LinkType

    @field_validator("strength", mode="before")
    @classmethod
    def _strength(cls, v: float) -> float:
        v = finite("strength", v)
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"strength must lie in [0, 1], got {v}")
        return v


MAX_COUNT = 2**53
"""Largest retrieval / reconsolidation count: counts are float64 columns in the
kernel, exact up to 2**53 (SQLite's INTEGER would overflow at 2**63)."""


class EmotionalTag(BaseModel):
    """The affective fingerprint stored with every memory."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    core_affect: CoreAffect
    momentum: AffectiveMomentum
    mood_snapshot: MoodField
    appraisal: AppraisalVector | None = None
    resonance_links: list[ResonanceLink] = Field(default_factory=list)
    timestamp: datetime
    consolidation_strength: float
    last_retrieved: datetime | None = None
    retrieval_count: int = 0
    reconsolidation_count: int = 0
    pending_appraisal: bool = False
    window_opened_at: datetime | None = None
    expected_affect: CoreAffect | None = None
    prediction_learning_rate: float = 0.2
    emotion_label: EmotionLabel | None = None

    @field_validator("consolidation_strength", mode="before")
    @classmethod
    def _consolidation(cls, v: float) -> float:
        v = finite("consolidation_strength", v)
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"consolidation_strength must lie in [0, 1], got {v}")
        return v

    @field_validator("timestamp", mode="after")
    @classmethod
    def _ts(cls, v: datetime) -> datetime:
        return aware("timestamp", v)

    @field_validator("last_retrieved", "window_opened_at", mode="after")
    @classmethod
    def _opt_ts(cls, v: datetime | None, info: object) -> datetime | None:
        return None if v is None else aware(str(getattr(info, "field_name", "time")), v)

    @field_validator("retrieval_count", "reconsolidation_count", mode="after")
    @classmethod
    def _count(cls, v: int, info: object) -> int:
        if not 0 <= v <= MAX_COUNT:
            raise ValueError(
                f"{getattr(info, 'field_name', 'count')} must lie in [0, 2**53], got {v}"
            )
        return v

    @field_validator("prediction_learning_rate", mode="before")
    @classmethod
    def _lr(cls, v: float) -> float:
        return finite("prediction_learning_rate", v)


class Memory(BaseModel):
    """A stored memory: content, optional embedding, affective tag and metadata."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(default_factory=lambda: str(uuid.uuid4()))
    content: str
    embedding: list[float] | None = None
    tag: EmotionalTag
    metadata: dict[str, Any] = Field(default_factory=dict)
    # Where the memory lives: the scope path of the engine view that wrote
    # it, () for the root. A view sees the memories whose path starts with its own.
    scope: tuple[str, ...] = ()
    # Once the clock passes it the memory is invisible to every read (None: never).
    expires_at: datetime | None = None

    @field_validator("scope", mode="before")
    @classmethod
    def _scope(cls, v: Any) -> tuple[str, ...]:
        return scope_path("scope", v)

    @field_validator("expires_at")
    @classmethod
    def _expires(cls, v: datetime | None) -> datetime | None:
        if v is None:
            return None
        in_utc("expires_at", aware("expires_at", v))  # a store keeps it in UTC
        return v

    @classmethod
    def create(
        cls,
        content: str,
        tag: EmotionalTag,
        embedding: list[float] | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        scope: tuple[str, ...] = (),
        expires_at: datetime | None = None,
    ) -> Memory:
        """Build a memory with a fresh uuid4 id.

        Args:
            content: The memory's text.
            tag: Its emotional tag.
            embedding: Optional embedding vector, shape (D,); copied.
            metadata: Optional user metadata; copied (``None`` -> ``{}``).
            scope: its scope path (``()``: the root).
            expires_at: aware datetime after which it is invisible (None: never).

        Returns:
            The new ``Memory``.
        """
        place: dict[str, Any] = {}  # only what is set (the fields set stays the original's)
        if scope:
            place["scope"] = scope
        if expires_at is not None:
            place["expires_at"] = expires_at
        return cls(
            content=content,
            tag=tag,
            embedding=list(embedding) if embedding is not None else None,
            metadata=dict(metadata) if metadata else {},
            **place,
        )


MAX_SCOPE_PART_BYTES = 1024
"""The longest scope path part (UTF-8 bytes). Every store indexes the parts (the
PostgreSQL store in a GIN index, whose entries hold at most 2712 bytes): a longer
part is refused with a ``ValueError`` naming it, on every store alike."""


def check_scope_part(field: str, part: str) -> None:
    """Refuse a scope part longer than :data:`MAX_SCOPE_PART_BYTES` UTF-8 bytes, or not
    valid Unicode.

    Args:
        field: the part's name in errors.
        part: the part (a str).

    Raises:
        ValueError: it is too long, or not valid Unicode (a lone surrogate, which no
            database driver can store).
    """
    try:
        part.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{field} is not valid Unicode text (a lone surrogate)") from None
    if len(part) * 4 > MAX_SCOPE_PART_BYTES:
        size = len(part.encode("utf-8", "surrogatepass"))
        if size > MAX_SCOPE_PART_BYTES:
            raise ValueError(
                f"{field} is {size} UTF-8 bytes, over the {MAX_SCOPE_PART_BYTES} a scope "
                "part may hold"
            )


def scope_path(field: str, value: Any) -> tuple[str, ...]:
    """A scope path checked: a tuple (or list) of non-empty strings.

    Args:
        field: the name errors give.
        value: the candidate path (``()`` or ``[]``: the root).

    Returns:
        The path as a tuple.

    Raises:
        TypeError: not a tuple/list of strings. ValueError: an empty string in it,
            or one over :data:`MAX_SCOPE_PART_BYTES`.
    """
    if isinstance(value, str) or not isinstance(value, tuple | list):
        raise TypeError(f"{field} must be a tuple of strings, got {type(value).__name__}")
    for i, part in enumerate(value):
        if not isinstance(part, str):
            raise TypeError(f"{field}[{i}] must be a str, got {type(part).__name__}")
        if not part:
            raise ValueError(f"{field}[{i}] must be a non-empty string")
        if "\x00" in part:
            raise ValueError(f"{field}[{i}] must not contain NUL characters")
        check_scope_part(f"{field}[{i}]", part)
    return tuple(value)


def checked_memory(
    content: str,
    tag: EmotionalTag,
    embedding: list[float] | None,
    metadata: dict[str, Any] | None,
    scope: tuple[str, ...] = (),
    expires_at: datetime | None = None,
) -> Memory:
    """``Memory.create(content, tag, embedding, metadata)`` for values already checked,
    built without pydantic's validation (an equal memory, with the same fields set),
    which takes ``embedding`` and ``metadata`` over instead of copying them.

    The engine's encode path checks every value first (a ``str`` content, an
    embedding cleaned into a new list of Python floats, metadata validated into a
    new dict of JSON data with ``str`` keys); validating them again, float by
    float, would cost more than building the memory, and copying the lists it
    owns only adds work (and objects for the garbage collector).

    Args:
        content: the memory's text (a ``str``).
        tag: its emotional tag (an :class:`EmotionalTag`).
        embedding: None, or a list of Python floats the caller hands over (not
            copied: the caller must not keep changing it).
        metadata: None, or a dict with ``str`` keys the caller hands over (not
            copied; empty or None -> a new ``{}``).
        scope: a checked scope path (``()``: the root).
        expires_at: a checked aware datetime, or None.

    Returns:
        The new ``Memory``, with a fresh uuid4 id.
    """
    fields: dict[str, Any] = {
        "content": content,
        "embedding": embedding,
        "tag": tag,
        "metadata": metadata if metadata else {},
    }
    if scope:
        fields["scope"] = scope
    if expires_at is not None:
        fields["expires_at"] = expires_at
    return _unvalidated(Memory, fields)


def consolidation_strength(arousal: float, mood_arousal: float) -> float:
    """Encoding strength as an inverted U of arousal (Yerkes-Dodson; McGaugh 2004).

    Args:
        arousal: the event's arousal (clamped to [0, 1]).
        mood_arousal: the mood's arousal (clamped to [0, 1]).

    Returns:
        ``clamp(1 - 4*(e - 0.7)^2, 0.1, 1)`` with ``e = 0.7*arousal + 0.3*mood_arousal``.
    """
    a = clamp(finite("arousal", arousal), 0.0, 1.0)
    m = clamp(finite("mood_arousal", mood_arousal), 0.0, 1.0)
    e = 0.7 * a + 0.3 * m
    raw = 1.0 - 4.0 * (e - 0.7) ** 2
    return clamp(raw, 0.1, 1.0)


def make_emotional_tag(
    core_affect: CoreAffect,
    momentum: AffectiveMomentum,
    mood: MoodField,
    consolidation_strength: float,
    appraisal: AppraisalVector | None = None,
    *,
    now: datetime | None = None,
) -> EmotionalTag:
    """Build a tag stamped ``now`` (default: UTC now); consolidation clamped to [0, 1].

    Args:
        core_affect: The affect at encoding time.
        momentum: The affective momentum at encoding time.
        mood: The mood, stored as the tag's ``mood_snapshot``.
        consolidation_strength: Encoding strength; must be finite, clamped to [0, 1].
        appraisal: Optional appraisal that produced the affect.
        now: Encoding time (default: UTC now).

    Returns:
        The new ``EmotionalTag`` (retrieval/reconsolidation counters at defaults).

    Raises:
        ValueError: If ``consolidation_strength`` is NaN or infinite.
    """
    strength = clamp(finite("consolidation_strength", consolidation_strength), 0.0, 1.0)
    if (
        type(core_affect) is CoreAffect
        and type(momentum) is AffectiveMomentum
        and type(mood) is MoodField
        and (appraisal is None or type(appraisal) is AppraisalVector)
        and type(now) is datetime
        and now.tzinfo is not None
        and now.utcoffset() is not None
    ):
        # Validation would keep every value as it is: the same tag, built directly.
        return _unvalidated(EmotionalTag, {
            "core_affect": core_affect,
            "momentum": momentum,
            "mood_snapshot": mood,
            "appraisal": appraisal,
            "timestamp": now,
            "consolidation_strength": strength,
        })
    return EmotionalTag(
        core_affect=core_affect,
        momentum=momentum,
        mood_snapshot=mood,
        appraisal=appraisal,
        timestamp=now if now is not None else utc_now(),
        consolidation_strength=strength,
    )
