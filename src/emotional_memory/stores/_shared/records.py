"""Compact row records: a memory's tag as one float64 and one int64 row, packed links.

The row engine keeps a memory's numbers in per-row blocks (``tagf``, :data:`TAG_F`
columns; ``tagi``, :data:`TAG_I` columns) and its links as ``(targets, packed)``, and
rebuilds the :class:`~emotional_memory.models.Memory` on read, equal to the one saved.
Only memories of the common shape are encoded (:func:`fits`). Also the JSON codec of a
whole memory (:func:`dump_memory`, :func:`load_memory`). Layout and reasons:
``stores/_shared/README.md``.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from emotional_memory._validation import aware
from emotional_memory._validation import memory_id as check_id
from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.appraisal import AppraisalVector
from emotional_memory.categorize import EmotionLabel
from emotional_memory.interfaces import UnstorableValueError
from emotional_memory.models import LINK_TYPES, EmotionalTag, Memory, ResonanceLink
from emotional_memory.mood import MoodField

# --- float64 block ---------------------------------------------------------------
F_AFFECT = slice(0, 3)
F_MOOD = slice(3, 6)
F_VELOCITY = slice(6, 9)
F_ACCEL = slice(9, 12)
F_INERTIA = 12
F_CONSOLIDATION = 13
F_RETRIEVAL = 14
F_APPRAISAL = slice(15, 20)
F_EXPECTED = slice(20, 23)
F_LEARNING_RATE = 23
F_LABEL_CONFIDENCE = 24
TAG_F = 25

# --- int64 block -----------------------------------------------------------------
I_TIMESTAMP = 0
I_MOOD_TIME = 1
I_LAST_RETRIEVED = 2
I_WINDOW = 3
I_RETRIEVAL = 4
I_RECONSOLIDATION = 5
I_FLAGS = 6
I_LABEL = 7
TAG_I = 8

NO_TIME = -(2**63)
"""Stands for a missing (None) datetime in the int64 block."""

FLAG_APPRAISAL = 1
FLAG_EXPECTED = 2
FLAG_PENDING = 4
FLAG_LABEL = 8

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
LINK_CODE = {name: i for i, name in enumerate(LINK_TYPES)}
_MAX_EXACT_INT = 2**53

_FIELDS: dict[type[Any], set[str]] = {
    cls: set(cls.model_fields)
    for cls in (
        CoreAffect,
        AffectiveMomentum,
        MoodField,
        AppraisalVector,
        EmotionLabel,
        ResonanceLink,
        EmotionalTag,
        Memory,
    )
}


def to_microseconds(moment: datetime) -> int:
    """An aware datetime as integer microseconds since the Unix epoch (exact)."""
    return (moment - _EPOCH) // _MICROSECOND


TIME_US = range(
    (datetime.min.replace(tzinfo=UTC) - _EPOCH) // _MICROSECOND,
    (datetime.max.replace(tzinfo=UTC) - _EPOCH) // _MICROSECOND + 1,
)
"""Microseconds since the epoch a ``datetime`` can hold (years 1 to 9999)."""
TIME_RANGE = f"[{TIME_US.start}, {TIME_US.stop - 1}] microseconds since 1970 (years 1-9999)"


def in_time_range(us: np.ndarray) -> np.ndarray:
    """Which of these int64 microsecond counts lie in :data:`TIME_US`."""
    return (us >= TIME_US.start) & (us < TIME_US.stop)


def times_valid(tagi: np.ndarray) -> bool:
    """Whether every time of these int64 record rows is one a ``datetime`` holds (a
    hand-edited row's would otherwise fail every later read with an OverflowError)."""
    always = tagi[:, [I_TIMESTAMP, I_MOOD_TIME]]
    maybe = tagi[:, [I_LAST_RETRIEVED, I_WINDOW]]
    return bool(
        in_time_range(always).all() and (in_time_range(maybe) | (maybe == NO_TIME)).all()
    )


def row_times_valid(ints: Sequence[int]) -> bool:
    """:func:`times_valid` of one record row given as Python ints (no array built)."""
    return all(ints[k] in TIME_US for k in (I_TIMESTAMP, I_MOOD_TIME)) and all(
        ints[k] == NO_TIME or ints[k] in TIME_US for k in (I_LAST_RETRIEVED, I_WINDOW)
    )


def _time(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def _model(cls: type[Any], values: dict[str, Any]) -> Any:
    """An instance of the pydantic model ``cls`` holding ``values``, unvalidated."""
    obj = object.__new__(cls)
    set_attr = object.__setattr__
    set_attr(obj, "__dict__", values)
    set_attr(obj, "__pydantic_fields_set__", _FIELDS[cls])
    set_attr(obj, "__pydantic_extra__", None)
    set_attr(obj, "__pydantic_private__", None)
    return obj


class LabelTable:
    """Interns the ``(primary, intensity, name)`` triples of emotion labels."""

    def __init__(self) -> None:
        self._codes: dict[tuple[str, str, str], int] = {}
        self._labels: list[tuple[str, str, str]] = []

    def code(self, label: EmotionLabel) -> int:
        """The code of ``label``'s triple (a new one is added)."""
        return self.code_of((label.primary, label.intensity, label.name))

    def code_of(self, key: tuple[str, str, str]) -> int:
        """The code of a ``(primary, intensity, name)`` triple (a new one is added)."""
        code = self._codes.get(key)
        if code is None:
            code = len(self._labels)
            self._codes[key] = code
            self._labels.append(key)
        return code

    def triple(self, code: int) -> tuple[str, str, str]:
        """The triple of a code."""
        return self._labels[code]


def _utc(moment: datetime | None) -> bool:
    return moment is None or (type(moment) is datetime and moment.tzinfo is UTC)


def fits(memory: Memory) -> bool:
    """Whether ``memory`` can be encoded compactly and rebuilt equal.

    Args:
        memory: a validated memory.

    Returns:
        False when a datetime is not in ``datetime.UTC``, a sub-object is a subclass
        (or not of its declared model), a link does not leave ``memory``, a counter is
        too large for an exact float, or the memory/tag is a subclass.
    """
    if type(memory) is not Memory or type(memory.id) is not str:
        return False
    tag = memory.tag
    if type(tag) is not EmotionalTag:
        return False
    if not (
        type(tag.core_affect) is CoreAffect
        and type(tag.momentum) is AffectiveMomentum
        and type(tag.mood_snapshot) is MoodField
        and (tag.appraisal is None or type(tag.appraisal) is AppraisalVector)
        and (tag.expected_affect is None or type(tag.expected_affect) is CoreAffect)
        and (tag.emotion_label is None or type(tag.emotion_label) is EmotionLabel)
        and type(tag.retrieval_count) is int
        and type(tag.reconsolidation_count) is int
        and type(tag.pending_appraisal) is bool
    ):
        return False
    if memory.expires_at is not None and not _utc(memory.expires_at):
        return False
    if not (
        _utc(tag.timestamp)
        and _utc(tag.mood_snapshot.timestamp)
        and _utc(tag.last_retrieved)
        and _utc(tag.window_opened_at)
    ):
        return False
    if not (
        0 <= tag.retrieval_count < _MAX_EXACT_INT
        and 0 <= tag.reconsolidation_count < _MAX_EXACT_INT
    ):
        return False
    if type(tag.resonance_links) is not list:
        return False
    mid = memory.id
    for link in tag.resonance_links:
        if type(link) is not ResonanceLink or link.source_id != mid:
            return False
        if type(link.target_id) is not str:
            return False
    return type(memory.metadata) is dict and type(memory.content) is str


def encode_tag(tag: EmotionalTag, labels: LabelTable) -> tuple[list[float], list[int]]:
    """The float64 and int64 row values of ``tag`` (a tag that :func:`fits`).

    Args:
        tag: the tag.
        labels: the store's label table (the label's triple is interned there).

    Returns:
        ``(floats, ints)`` of lengths :data:`TAG_F` and :data:`TAG_I`.
    """
    a, m, v = tag.core_affect, tag.mood_snapshot, tag.momentum
    ap, ex, lab = tag.appraisal, tag.expected_affect, tag.emotion_label
    flags = (
        (FLAG_APPRAISAL if ap is not None else 0)
        | (FLAG_EXPECTED if ex is not None else 0)
        | (FLAG_PENDING if tag.pending_appraisal else 0)
        | (FLAG_LABEL if lab is not None else 0)
    )
    floats = [
        a.valence,
        a.arousal,
        a.dominance,
        m.valence,
        m.arousal,
        m.dominance,
        v.d_valence,
        v.d_arousal,
        v.d_dominance,
        v.dd_valence,
        v.dd_arousal,
        v.dd_dominance,
        m.inertia,
        tag.consolidation_strength,
        float(tag.retrieval_count),
        *(
            (
                ap.novelty,
                ap.goal_relevance,
                ap.coping_potential,
                ap.norm_congruence,
                ap.self_relevance,
            )
            if ap is not None
            else (0.0,) * 5
        ),
        *((ex.valence, ex.arousal, ex.dominance) if ex is not None else (0.0,) * 3),
        tag.prediction_learning_rate,
        lab.confidence if lab is not None else 0.0,
    ]
    ints = [
        to_microseconds(tag.timestamp),
        to_microseconds(m.timestamp),
        NO_TIME if tag.last_retrieved is None else to_microseconds(tag.last_retrieved),
        NO_TIME if tag.window_opened_at is None else to_microseconds(tag.window_opened_at),
        tag.retrieval_count,
        tag.reconsolidation_count,
        flags,
        labels.code(lab) if lab is not None else -1,
    ]
    return floats, ints


def pack_links(links: list[ResonanceLink], intern: Any) -> tuple[tuple[str, ...], bytes] | None:
    """Links (all leaving one memory) as ``(targets, packed)``; None when empty.

    Args:
        links: the memory's resonance links.
        intern: ``str -> str`` returning a shared copy of an id (the store's own).

    Returns:
        The target ids, and the strengths (float64) followed by the type codes (one
        byte each) packed little-endian.
    """
    if not links:
        return None
    n = len(links)
    packed = struct.pack(
        f"<{n}d{n}B",
        *(link.strength for link in links),
        *(LINK_CODE[link.link_type] for link in links),
    )
    return tuple(intern(link.target_id) for link in links), packed


def pack_link_columns(
    targets: tuple[str, ...], strengths: tuple[float, ...], codes: bytes
) -> tuple[tuple[str, ...], bytes]:
    """Links given as columns, packed as :func:`pack_links` packs them (the same bytes).

    Args:
        targets: the target ids (the store's own copies).
        strengths: the strengths, one per target.
        codes: the link type codes (indices in ``LINK_TYPES``), one byte per target.

    Returns:
        ``(targets, packed)``.
    """
    return targets, struct.pack(f"<{len(strengths)}d", *strengths) + codes


def unpack_link_columns(
    record: tuple[tuple[str, ...], bytes] | None,
) -> tuple[tuple[str, ...], tuple[float, ...], bytes]:
    """The target ids, strengths and type codes of a packed link record (empty for None).

    Immutable columns of atoms (two tuples and ``bytes``), which the garbage
    collector stops tracking the first time it meets them.
    """
    if record is None:
        return (), (), b""
    targets, packed = record
    n = len(targets)
    return targets, struct.unpack_from(f"<{n}d", packed), packed[8 * n :]


def unpack_links(
    source_id: str, record: tuple[tuple[str, ...], bytes] | None
) -> list[ResonanceLink]:
    """The links :func:`pack_links` encoded, leaving ``source_id``."""
    if record is None:
        return []
    targets, packed = record
    n = len(targets)
    values = struct.unpack(f"<{n}d{n}B", packed)
    return [
        _model(
            ResonanceLink,
            {
                "source_id": source_id,
                "target_id": targets[j],
                "strength": values[j],
                "link_type": LINK_TYPES[values[n + j]],
            },
        )
        for j in range(n)
    ]


def decode_memory(
    memory_id: str,
    content: str,
    embedding: list[float] | None,
    floats: list[float],
    ints: list[int],
    links: tuple[tuple[str, ...], bytes] | None,
    metadata: dict[str, Any] | None,
    labels: LabelTable,
    scope: tuple[str, ...] = (),
    expires_us: int | None = None,
) -> Memory:
    """Rebuild a memory from its record (the inverse of :func:`encode_tag` and
    :func:`pack_links`).

    Args:
        memory_id: the id.
        content: the content.
        embedding: the embedding list (or None).
        floats: the row of the float64 block, as Python floats.
        ints: the row of the int64 block, as Python ints.
        links: the packed links.
        metadata: the metadata dict (None for an empty one).
        labels: the store's label table.
        scope: the memory's scope path.
        expires_us: its expiry as integer microseconds (None: none).

    Returns:
        A :class:`Memory` equal to the one encoded.
    """
    f, i = floats, ints
    flags = i[I_FLAGS]
    affect = _model(CoreAffect, {"valence": f[0], "arousal": f[1], "dominance": f[2]})
    mood = _model(
        MoodField,
        {
            "valence": f[3],
            "arousal": f[4],
            "dominance": f[5],
            "inertia": f[F_INERTIA],
            "timestamp": _time(i[I_MOOD_TIME]),
        },
    )
    momentum = _model(
        AffectiveMomentum,
        {
            "d_valence": f[6],
            "d_arousal": f[7],
            "d_dominance": f[8],
            "dd_valence": f[9],
            "dd_arousal": f[10],
            "dd_dominance": f[11],
        },
    )
    appraisal = None
    if flags & FLAG_APPRAISAL:
        appraisal = _model(
            AppraisalVector,
            {
                "novelty": f[15],
                "goal_relevance": f[16],
                "coping_potential": f[17],
                "norm_congruence": f[18],
                "self_relevance": f[19],
            },
        )
    expected = None
    if flags & FLAG_EXPECTED:
        expected = _model(CoreAffect, {"valence": f[20], "arousal": f[21], "dominance": f[22]})
    label = None
    if flags & FLAG_LABEL:
        primary, intensity, name = labels.triple(i[I_LABEL])
        label = _model(
            EmotionLabel,
            {
                "primary": primary,
                "intensity": intensity,
                "name": name,
                "confidence": f[F_LABEL_CONFIDENCE],
            },
        )
    last = i[I_LAST_RETRIEVED]
    window = i[I_WINDOW]
    tag = _model(
        EmotionalTag,
        {
            "core_affect": affect,
            "momentum": momentum,
            "mood_snapshot": mood,
            "appraisal": appraisal,
            "resonance_links": unpack_links(memory_id, links),
            "timestamp": _time(i[I_TIMESTAMP]),
            "consolidation_strength": f[F_CONSOLIDATION],
            "last_retrieved": None if last == NO_TIME else _time(last),
            "retrieval_count": i[I_RETRIEVAL],
            "reconsolidation_count": i[I_RECONSOLIDATION],
            "pending_appraisal": bool(flags & FLAG_PENDING),
            "window_opened_at": None if window == NO_TIME else _time(window),
            "expected_affect": expected,
            "prediction_learning_rate": f[F_LEARNING_RATE],
            "emotion_label": label,
        },
    )
    return _model(
        Memory,
        {
            "id": memory_id,
            "content": content,
            "embedding": embedding,
            "tag": tag,
            "metadata": metadata if metadata is not None else {},
            "scope": scope,
            "expires_at": None if expires_us is None else _time(expires_us),
        },
    )


def row_arrays(capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """Zeroed float64 ``(capacity, TAG_F)`` and int64 ``(capacity, TAG_I)`` blocks."""
    return np.zeros((capacity, TAG_F)), np.zeros((capacity, TAG_I), dtype=np.int64)


def storable_id(memory_id: str) -> bool:
    """Whether a database can hold ``memory_id``: no NUL (PostgreSQL's text refuses it)
    and valid UTF-8 (no lone surrogate). Any other id is stored nowhere, so a store
    answers it as unknown instead of passing it to its driver.

    Args:
        memory_id: the id.

    Returns:
        True when it can be stored.

    Raises:
        TypeError: ``memory_id`` is not a str (named, as the in-memory store does;
            the database clients would answer with their own, unrelated errors).
    """
    check_id(memory_id)
    return "\x00" not in memory_id and _utf8(memory_id)


def _utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (holds no lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_utf8(memory: Memory, store: str, metadata_json: str | None = None) -> None:
    """Refuse a memory holding text UTF-8 cannot encode (a lone surrogate), naming the
    field, for a store whose database holds UTF-8 text only.

    Args:
        memory: the memory to write.
        store: the store's name, for the message.
        metadata_json: its metadata as JSON text when already built (else built here).

    Raises:
        UnstorableValueError: field ``id``, ``content``, ``metadata``, ``scope`` or
            ``tag`` (a link's ids).
    """
    if metadata_json is None:
        try:
            metadata_json = json.dumps(memory.metadata, ensure_ascii=False)
        except (TypeError, ValueError):  # not JSON: the write's own error says so
            metadata_json = ""
    links = memory.tag.resonance_links
    fields = (("id", (memory.id,)), ("content", (memory.content,)),
              ("metadata", (metadata_json,)), ("scope", memory.scope),
              ("tag", [i for lk in links for i in (lk.source_id, lk.target_id)]))
    for name, texts in fields:
        if not all(_utf8(text) for text in texts):
            raise UnstorableValueError(
                name, f"{name} holds a lone surrogate, which {store} cannot hold (not UTF-8 "
                "text)"
            )


_DATETIME_PATHS = (
    ("expires_at",), ("tag", "timestamp"), ("tag", "last_retrieved"),
    ("tag", "window_opened_at"), ("tag", "mood_snapshot", "timestamp"),
)
"""Where a memory's JSON form holds datetimes."""


def _odd_offset(moment: Any) -> bool:
    """Whether ``moment`` is a datetime whose UTC offset is not whole minutes (its
    seconds are lost by pydantic's JSON form, which moves the instant)."""
    offset = moment.utcoffset() if isinstance(moment, datetime) else None
    return offset is not None and offset % timedelta(minutes=1) != timedelta(0)


def _fix_datetimes(memory: Memory, data: dict[str, Any]) -> None:
    """Write a datetime with seconds in its UTC offset as Python's ISO form (which
    keeps them) into ``data``, pydantic's JSON form of ``memory``."""
    for path in _DATETIME_PATHS:
        value: Any = memory
        for part in path:
            value = getattr(value, part, None)
        if _odd_offset(value):
            node = data
            for part in path[:-1]:
                node = node[part]
            node[path[-1]] = value.isoformat()


def _read_datetimes(data: Any) -> None:
    """Parse the datetimes :func:`_fix_datetimes` wrote (pydantic refuses an offset
    with seconds) in place; every other value is left to the model's validation."""
    for path in _DATETIME_PATHS:
        node = data
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        text = node.get(path[-1]) if isinstance(node, dict) else None
        if isinstance(text, str):
            try:
                moment = datetime.fromisoformat(text)
            except ValueError:
                continue
            if _odd_offset(moment):
                assert isinstance(node, dict)
                node[path[-1]] = moment


def dump_memory(memory: Memory) -> str:
    """The memory as JSON text (NaN/inf embeddings and metadata survive: ``NaN``
    tokens; pydantic's JSON mode would turn such metadata into null; a UTC offset's
    seconds survive too)."""
    data = memory.model_dump(mode="json")
    _fix_datetimes(memory, data)
    try:
        return json.dumps({**data, "metadata": memory.metadata}, ensure_ascii=False)
    except (TypeError, ValueError):  # a value only pydantic's JSON form holds
        return json.dumps(data, ensure_ascii=False)


def load_memory(data: str) -> Memory:
    """The memory stored by :func:`dump_memory`.

    Raises:
        ValueError: ``data`` is no such memory (a hand-edited one: not JSON, nested past
            the parser's limit, or failing the model's validation).
    """
    try:
        parsed = json.loads(data)
        _read_datetimes(parsed)
        return Memory.model_validate(parsed)
    except RecursionError:
        raise ValueError("the stored memory nests too deeply") from None


def check_times(memory: Memory) -> None:
    """Require every datetime of ``memory`` timezone-aware (a ``model_copy`` skips the
    models' own check); stores call it before writing anything.

    Args:
        memory: the memory about to be written.

    Raises:
        ValueError: a naive datetime, naming its field (``tag.timestamp`` ...).
    """
    tag = memory.tag
    for field, value in (
        ("tag.timestamp", tag.timestamp),
        ("tag.last_retrieved", tag.last_retrieved),
        ("tag.window_opened_at", tag.window_opened_at),
        ("expires_at", memory.expires_at),
    ):
        if value is not None:
            aware(field, value)
