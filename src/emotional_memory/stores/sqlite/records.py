"""The rows of :class:`~emotional_memory.stores.SQLiteStore`'s ``em_memories`` table.

One memory is one row. Since schema version 3 a memory of the common shape (the
shape :class:`~emotional_memory.stores.InMemoryStore` keeps as a compact row: see
:func:`~emotional_memory.stores._shared.records.fits`) is stored as columns of what the
in-memory cache holds, so a reopen decodes the whole table with a few array
operations instead of validating one JSON tag per row:

- ``rec``: the tag's numbers, ``TAG_F`` float64 values (core affect, mood, momentum,
  counters, ...; :mod:`~emotional_memory.stores._shared.records`), then the float64 norm of
  the embedding (``sqrt(v . v)`` of its float64 values; 0 without one), then the
  ``TAG_I`` int64 values (timestamps in microseconds, counters, flags), all
  little-endian; the label code slot holds -1 (labels live in ``label``);
- ``label``: the emotion label as the JSON array ``[primary, intensity, name]``
  (NULL: none; its confidence is in ``rec``);
- ``link_ids``: the resonance links' target ids as a JSON array, ``link_data`` their
  strengths (float64) then link type codes (one byte each, indices of
  :data:`~emotional_memory.models.LINK_TYPES`); both NULL without links;
- ``tag``: ``''``.

Any other memory (a datetime with a non-zero UTC offset, a subclassed model, ...)
keeps the whole tag as JSON in ``tag`` with ``rec``, ``label``, ``link_ids`` and
``link_data`` NULL, exactly as in version 2. ``embedding``, ``dim``, ``metadata``,
``scope`` and ``expires_at`` are as in version 2 for both kinds.

:func:`memory_params` writes a row from a :class:`Memory`, :func:`row_params` from a
row of the cache (the batched linker's path: no ``Memory`` is built), and both give
the same parameters for the same memory; :func:`row_memory` reads one row back,
:func:`decode_rows` every row at once (None when some row needs the per-row path).
"""

from __future__ import annotations

import itertools
import json
import operator
import struct
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from emotional_memory.models import LINK_TYPES, EmotionalTag, Memory
from emotional_memory.stores._shared import records as _records
from emotional_memory.stores._shared.ranking import row_norm
from emotional_memory.stores._shared.rows.columns import NEVER_US
from emotional_memory.stores.sqlite.bulk_load import RowBlock

if TYPE_CHECKING:
    from emotional_memory.stores._shared.rows.store import RowStore

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ZERO = timedelta(0)
_MINUTE = timedelta(minutes=1)
_FLOAT32_LE = np.dtype("<f4")
_FLOAT64_LE = np.dtype("<f8")

#: float64 values of a record: the tag's, then the embedding norm.
REC_F = _records.TAG_F + 1
#: Bytes of a record.
REC_BYTES = 8 * (REC_F + _records.TAG_I)
_REC = struct.Struct(f"<{REC_F}d{_records.TAG_I}q")

#: The columns of a row, in the order of :func:`memory_params` / :func:`row_params`.
ROW_COLUMNS = (
    "id, content, embedding, dim, tag, metadata, scope, expires_at, rec, label, link_ids, "
    "link_data"
)
#: Where ``rec`` sits in a row (None there: the tag is kept as JSON).
REC_AT = ROW_COLUMNS.split(", ").index("rec")
#: Columns a version 2 table lacks (added by the upgrade, NULL in old rows).
RECORD_COLUMNS = (
    ("rec", "BLOB"), ("label", "TEXT"), ("link_ids", "TEXT"), ("link_data", "BLOB"),
)

# json.dumps(..., ensure_ascii=False) builds an encoder per call; one is kept instead
_JSON = json.JSONEncoder(ensure_ascii=False)

Row = tuple[Any, ...]
"""One row's values in :data:`ROW_COLUMNS` order."""


def encode_scope(scope: tuple[str, ...]) -> str:
    """A scope path as its JSON array text (``'[]'``: the root)."""
    return _JSON.encode(list(scope)) if scope else "[]"


def encode_link_ids(targets: Sequence[str]) -> str:
    """Link target ids as their JSON array text (the ``link_ids`` column)."""
    return _JSON.encode(list(targets))


def decode_place(
    memory_id: str, scope_json: str | None, expires_us: int | None
) -> tuple[tuple[str, ...], datetime | None]:
    """A row's scope path and expiry (errors name the memory id)."""
    try:
        try:
            path = json.loads(scope_json) if scope_json else []
        except RecursionError:
            raise ValueError("scope nests too deeply") from None
        if not isinstance(path, list) or any(not isinstance(p, str) or not p for p in path):
            raise ValueError(f"scope {scope_json!r} is not a list of non-empty strings")
        scope = tuple(path)
        if expires_us is not None:
            if not isinstance(expires_us, int):
                raise ValueError(f"expires_at {expires_us!r} is not an integer")
            if expires_us not in _records.TIME_US:
                raise ValueError(f"expires_at {expires_us} is out of range {_records.TIME_RANGE}")
    except (ValueError, TypeError) as exc:
        raise ValueError(f"memory {memory_id!r} has an invalid row: {exc}") from None
    expires = None if expires_us is None else _EPOCH + timedelta(microseconds=expires_us)
    return scope, expires



def encode_embedding(
    embedding: Sequence[float] | np.ndarray | None, memory_id: str = ""
) -> tuple[bytes | None, int | None]:
    """Blob and dimension for an embedding (NULL blob when missing), exact.

    A float32 blob when every value is a float32 number (what embedders give: half
    the space), else a float64 blob; NaN and infinities are kept.

    Raises:
        ValueError: the embedding is not one-dimensional (the memory named).
    """
    if embedding is None:
        return None, None
    wide = np.asarray(embedding, dtype=_FLOAT64_LE)
    if wide.ndim != 1:
        raise ValueError(
            f"memory {memory_id!r}: embedding must be a flat list of floats, got shape "
            f"{wide.shape}"
        )
    with np.errstate(over="ignore", invalid="ignore"):
        narrow = wide.astype(_FLOAT32_LE)
    if np.array_equal(narrow, wide, equal_nan=True):
        return narrow.tobytes(), int(wide.shape[0])
    return wide.tobytes(), int(wide.shape[0])


def blob_dtype(blob: bytes, dim: int | None, memory_id: object = "") -> np.dtype:
    """The dtype of a stored embedding blob, from its length and dimension."""
    if dim is not None and len(blob) == 4 * dim:
        return _FLOAT32_LE
    if dim is not None and len(blob) == 8 * dim:
        return _FLOAT64_LE
    if dim is None and len(blob) % 4 == 0:  # written without a dimension: float32
        return _FLOAT32_LE
    raise ValueError(
        f"memory {memory_id!r} has an invalid row: an embedding blob of {len(blob)} bytes "
        f"for dimension {dim}"
    )


def decode_embedding(
    blob: bytes | None, dim: int | None = None, memory_id: object = ""
) -> list[float] | None:
    """The float64 list a stored blob (float32 or float64, see the schema) stands for."""
    if blob is None:
        return None
    return np.frombuffer(blob, dtype=blob_dtype(blob, dim, memory_id)).astype(np.float64).tolist()


def encode_metadata(metadata: dict[str, Any]) -> str:
    """Metadata as JSON text (what ``json.dumps(metadata, ensure_ascii=False)`` gives).

    Raises:
        TypeError: not JSON-serialisable. ValueError: nested too deeply.
    """
    if type(metadata) is dict and not metadata:
        return "{}"
    try:
        return _JSON.encode(metadata)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"metadata must be JSON-serialisable: {exc}") from exc
    except RecursionError:
        raise ValueError("metadata nests too deeply to be stored as JSON") from None


def _as_utc(moment: datetime | None) -> datetime | None:
    """A zero-offset aware datetime with ``datetime.UTC`` as its tzinfo (the same
    instant; a JSON round trip keeps only the offset anyway); one whose offset has
    seconds, which the JSON form drops (moving the instant), as the same instant in
    UTC; others unchanged."""
    if moment is None or moment.tzinfo is UTC:
        return moment
    offset = moment.utcoffset()
    if offset == _ZERO:
        return moment.replace(tzinfo=UTC)
    if offset is not None and offset % _MINUTE:
        return moment.astimezone(UTC)
    return moment


def utc_memory(memory: Memory) -> Memory:
    """``memory`` with every zero-offset datetime of its tag in ``datetime.UTC`` (and
    one whose offset has seconds as the same instant in UTC).

    Pydantic parses ``"...Z"`` with a timezone object of its own; the memories of a
    JSON tag (version 2 rows, the original library's files) then fit the compact
    shape, whose datetimes are ``datetime.UTC``. Equal to ``memory`` (``==``, and
    the same JSON).
    """
    tag = memory.tag
    mood = tag.mood_snapshot
    stamps: dict[str, Any] = {
        "timestamp": _as_utc(tag.timestamp),
        "last_retrieved": _as_utc(tag.last_retrieved),
        "window_opened_at": _as_utc(tag.window_opened_at),
    }
    mood_time = _as_utc(mood.timestamp)
    expires = _as_utc(memory.expires_at)
    if (
        all(stamps[k] is getattr(tag, k) for k in stamps)
        and mood_time is mood.timestamp
        and expires is memory.expires_at
    ):
        return memory
    if mood_time is not mood.timestamp:
        stamps["mood_snapshot"] = mood.model_copy(update={"timestamp": mood_time})
    new_tag = tag.model_copy(update=stamps)
    return memory.model_copy(update={"tag": new_tag, "expires_at": expires})


def _record_columns(
    floats: Sequence[float], norm: float, ints: Sequence[int],
    label: tuple[str, str, str] | None, links: tuple[tuple[str, ...], bytes] | None,
) -> tuple[bytes, str | None, str | None, bytes | None]:
    """``rec``, ``label``, ``link_ids``, ``link_data`` of a compact row."""
    ints = list(ints)
    ints[_records.I_LABEL] = -1
    rec = _REC.pack(*floats, norm, *ints)
    label_json = None if label is None else _JSON.encode(list(label))
    if links is None:
        return rec, label_json, None, None
    targets, packed = links
    return rec, label_json, encode_link_ids(targets), packed


def memory_params(memory: Memory) -> tuple[Memory, Row]:
    """The memory as a reopen reads it back, and its row (:data:`ROW_COLUMNS` order).

    Args:
        memory: the memory.

    Returns:
        ``(stored, params)``: ``stored`` holds the embedding as the blob keeps it,
        the JSON round-tripped metadata (zero-offset datetimes in ``datetime.UTC``)
        and ``expires_at`` in UTC.

    Raises:
        ValueError: the embedding is not flat. TypeError: the metadata is not JSON.
        UnstorableValueError: text UTF-8 cannot encode (a lone surrogate), naming it.
    """
    blob, dim = encode_embedding(memory.embedding, memory.id)
    metadata_json = encode_metadata(memory.metadata)
    _records.check_utf8(memory, "SQLite", metadata_json)
    update: dict[str, Any] = {
        "embedding": decode_embedding(blob, dim, memory.id),
        "metadata": json.loads(metadata_json),
    }
    expires = memory.expires_at
    if expires is not None and expires.tzinfo is not UTC:
        # the column keeps the instant, not the offset: as a reopen reads it
        update["expires_at"] = expires = expires.astimezone(UTC)
    stored = utc_memory(memory).model_copy(update=update)
    place = (
        encode_scope(stored.scope),
        None if expires is None else _records.to_microseconds(expires),
    )
    head = (memory.id, memory.content, blob, dim)
    if not _records.fits(stored):
        return stored, (
            *head, stored.tag.model_dump_json(), metadata_json, *place, None, None, None, None,
        )
    tag = stored.tag
    labels = _records.LabelTable()
    floats, ints = _records.encode_tag(tag, labels)
    emb = stored.embedding
    with np.errstate(over="ignore", invalid="ignore"):
        norm = row_norm(np.asarray(emb, dtype=np.float64)) if emb else 0.0
    label = labels.triple(0) if tag.emotion_label is not None else None
    links = _records.pack_links(tag.resonance_links, lambda target: target)
    return stored, (
        *head, "", metadata_json, *place, *_record_columns(floats, norm, ints, label, links),
    )


def row_params(cache: RowStore, row: int) -> Row | None:
    """The row of the cache's live ``row`` (a float32-mode store), as
    :func:`memory_params` writes the same memory; None for a memory kept whole
    (write it with :func:`memory_params`)."""
    content = cache._content[row]
    if content is None:
        return None
    memory_id = cache._row_ids[row]
    blob: bytes | None
    if cache._has[row]:
        if cache._aside[row]:
            blob, dim = encode_embedding(cache._exact_row(row), memory_id or "")
        else:
            dim = cache._dim
            blob = cache._matrix[row, :dim].astype(_FLOAT32_LE).tobytes()
    elif cache._empty[row]:
        blob, dim = b"", 0
    else:
        blob, dim = None, None
    meta = cache._meta[row]
    scope, expires = cache._place_of(row) if cache._placed else ((), None)
    ints = cache._tagi[row].tolist()
    code = ints[_records.I_LABEL]
    label = cache._labels.triple(code) if ints[_records.I_FLAGS] & _records.FLAG_LABEL else None
    return (
        memory_id, content, blob, dim, "", encode_metadata(meta or {}), encode_scope(scope),
        expires,
        *_record_columns(
            cache._tagf[row].tolist(), float(cache._norms[row]), ints, label, cache._links[row],
        ),
    )


def _check_row(memory_id: Any, content: Any, metadata_json: Any) -> dict[str, Any]:
    """The metadata of a row whose id, content and metadata are well typed."""
    if not isinstance(memory_id, str) or not memory_id:
        raise ValueError(f"id is {memory_id!r}, not a non-empty string")
    if not isinstance(content, str):
        raise ValueError(f"content is a {type(content).__name__}, not text")
    if not isinstance(metadata_json, str | bytes):
        raise ValueError("metadata must be JSON text")
    metadata = json.loads(metadata_json)
    if not isinstance(metadata, dict):
        raise ValueError(f"metadata is a {type(metadata).__name__}, not a JSON object")
    return metadata


def _links_of(link_ids: Any, link_data: Any) -> tuple[tuple[str, ...], bytes] | None:
    """The packed links of a record's ``link_ids`` / ``link_data`` (validated)."""
    if link_ids is None and link_data is None:
        return None
    targets = json.loads(link_ids) if isinstance(link_ids, str) else None
    if (
        not isinstance(targets, list) or not targets
        or any(type(t) is not str for t in targets)
        or not isinstance(link_data, bytes) or len(link_data) != 9 * len(targets)
        or max(link_data[8 * len(targets):]) >= len(LINK_TYPES)
    ):
        raise ValueError("link_ids and link_data do not hold links")
    return tuple(targets), link_data


def _label_of(label_json: Any) -> tuple[str, str, str]:
    triple = json.loads(label_json) if isinstance(label_json, str) else None
    if not isinstance(triple, list) or len(triple) != 3 or any(
        type(p) is not str for p in triple
    ):
        raise ValueError(f"label {label_json!r} is not [primary, intensity, name]")
    return triple[0], triple[1], triple[2]


def row_memory(row: Row) -> Memory:
    """The memory of one table row, validated (errors name the memory id).

    Args:
        row: the row's values in :data:`ROW_COLUMNS` order.

    Returns:
        The memory (zero-offset datetimes in ``datetime.UTC``).

    Raises:
        ValueError: the row does not hold a valid memory.
    """
    (memory_id, content, blob, dim, tag_json, metadata_json, scope_json, expires_us, rec,
     label_json, link_ids, link_data) = row
    embedding = decode_embedding(blob, dim, memory_id)
    scope, expires = decode_place(memory_id, scope_json, expires_us)
    try:
        metadata = _check_row(memory_id, content, metadata_json)
        if rec is None:
            if not isinstance(tag_json, str | bytes):
                raise ValueError("tag must be JSON text")
            tag = EmotionalTag.model_validate_json(tag_json)
            return utc_memory(Memory.model_construct(
                id=memory_id, content=content, embedding=embedding, tag=tag,
                metadata=metadata, scope=scope, expires_at=expires,
            ))
        if not isinstance(rec, bytes) or len(rec) != REC_BYTES:
            raise ValueError(f"rec is not a record of {REC_BYTES} bytes")
        values = _REC.unpack(rec)
        floats = list(values[: _records.TAG_F])
        ints = list(values[REC_F:])
        if not _records.row_times_valid(ints):
            raise ValueError(f"rec holds a time outside {_records.TIME_RANGE}")
        labels = _records.LabelTable()
        if label_json is not None:
            ints[_records.I_LABEL] = labels.code_of(_label_of(label_json))
        if bool(ints[_records.I_FLAGS] & _records.FLAG_LABEL) != (label_json is not None):
            raise ValueError("the label flag and the label column disagree")
        links = _links_of(link_ids, link_data)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"memory {memory_id!r} has an invalid row: {exc}") from None
    return _records.decode_memory(
        memory_id, content, embedding, floats, ints, links, metadata or None, labels,
        scope, None if expires_us is None else expires_us,
    )


def decode_rows(rows: Sequence[Row]) -> RowBlock | None:
    """Every row at once as the cache's columns (the reopen path).

    Args:
        rows: the table's rows in insertion order, :data:`ROW_COLUMNS` order each.

    Returns:
        The :class:`RowBlock`, or None when some row is outside this path (a tag kept
        as JSON, embeddings of several dimensions, a malformed value): read those
        rows with :func:`row_memory`, which reports what is wrong.
    """
    n = len(rows)
    if n == 0:
        return None
    (ids, contents, blobs, dims, _, metas, scopes, expires, recs, label_col, link_col,
     data_col) = zip(*rows, strict=True)
    if (
        set(map(type, ids)) != {str} or "" in ids
        or set(map(type, contents)) != {str}
        or set(map(type, recs)) != {bytes} or set(map(len, recs)) != {REC_BYTES}
        or not set(map(type, metas)) <= {str}
        or not set(map(type, expires)) <= {int, type(None)}
    ):
        return None
    try:
        block = np.frombuffer(b"".join(recs), dtype=np.uint8).reshape(n, REC_BYTES)
        values = np.ascontiguousarray(block[:, : 8 * REC_F]).view(_FLOAT64_LE)
        tagf = values[:, : _records.TAG_F].astype(np.float64)
        norms = values[:, _records.TAG_F].astype(np.float64)
        tagi = np.ascontiguousarray(block[:, 8 * REC_F :]).view("<i8").astype(np.int64)
        # labels: each distinct JSON once
        labels = _records.LabelTable()
        codes: dict[str, int] = {}
        has_label = np.zeros(n, dtype=bool)
        for i, label_json in enumerate(label_col):
            if label_json is not None:
                code = codes.get(label_json)
                if code is None:
                    code = codes[label_json] = labels.code_of(_label_of(label_json))
                tagi[i, _records.I_LABEL] = code
                has_label[i] = True
        if not np.array_equal((tagi[:, _records.I_FLAGS] & _records.FLAG_LABEL) != 0, has_label):
            return None
        links = _link_records(ids, link_col, data_col)
        if links is None:
            return None
        metadata = _metadata_column(metas)
        if metadata is None:
            return None
        scope_index: dict[str, int] = {"[]": 0}  # JSON text -> scope id
        path_index: dict[tuple[str, ...], int] = {(): 0}
        scope_paths: list[tuple[str, ...]] = [()]
        scope_ids = np.zeros(n, dtype=np.int32)
        for i, scope_json in enumerate(scopes):
            if scope_json != "[]":
                sid = scope_index.get(scope_json)
                if sid is None:
                    path, _ = decode_place(ids[i], scope_json, None)
                    sid = path_index.get(path)
                    if sid is None:
                        sid = path_index[path] = len(scope_paths)
                        scope_paths.append(path)
                    scope_index[scope_json] = sid
                scope_ids[i] = sid
        expires_us = np.array(
            [NEVER_US if e is None else e for e in expires], dtype=np.int64
        )
        never = np.array([e is None for e in expires], dtype=bool)
        if not (never | _records.in_time_range(expires_us)).all() or not _records.times_valid(tagi):
            return None
        embedding = _embedding_columns(blobs, dims, n)
    except (ValueError, TypeError, OverflowError, RecursionError):
        return None
    if embedding is None:
        return None
    dim, narrow, wide_rows, wide, has, empty = embedding
    return RowBlock(
        ids=list(ids), contents=list(contents), metadata=metadata, links=links,
        tagf=tagf, tagi=tagi, labels=labels, scopes=scope_paths, scope_ids=scope_ids,
        expires_us=expires_us, dim=dim, narrow=narrow, wide_rows=wide_rows, wide=wide,
        has=has, empty=empty, norms=np.where(has, norms, 0.0),
    )


def _link_records(
    ids: Sequence[str], link_col: Sequence[Any], data_col: Sequence[Any]
) -> list[Any] | None:
    """The packed link records of every row (None: no links), validated in bulk, or
    None when some row's ``link_ids`` / ``link_data`` do not hold links.

    The target lists of every row are parsed in one JSON parse; the targets are the
    store's own id strings where stored (as the cache interns them).
    """
    n = len(ids)
    present = np.fromiter(map(operator.is_not, link_col, itertools.repeat(None)), bool, n)
    if not np.array_equal(
        present, np.fromiter(map(operator.is_not, data_col, itertools.repeat(None)), bool, n)
    ):
        return None  # link ids without link data, or the other way round
    if present.all():  # the usual table: every memory linked
        texts, datas = link_col, data_col
    elif present.any():
        rows = np.flatnonzero(present).tolist()
        texts = [link_col[i] for i in rows]
        datas = [data_col[i] for i in rows]
    else:
        return [None] * n
    if set(map(type, texts)) != {str} or set(map(type, datas)) != {bytes}:
        return None
    targets = json.loads("[" + ",".join(texts) + "]")
    if set(map(type, targets)) != {list}:
        return None
    counts = np.fromiter(map(len, targets), np.int64, len(targets))
    sizes = np.fromiter(map(len, datas), np.int64, len(targets))
    if (counts == 0).any() or not np.array_equal(sizes, 9 * counts):
        return None
    if set(map(type, itertools.chain.from_iterable(targets))) != {str}:
        return None
    # every type code (the last ``count`` bytes of each row's data) names a link type
    data = np.frombuffer(b"".join(datas), dtype=np.uint8)
    starts = np.cumsum(sizes) - counts  # offset of each row's first code
    first = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    if data[first + np.arange(int(counts.sum()))].max() >= len(LINK_TYPES):
        return None
    get = dict(zip(ids, ids, strict=True)).get  # the store's own id strings
    packed = [(tuple(map(get, t, t)), d) for t, d in zip(targets, datas, strict=True)]
    if len(packed) == n:
        return packed
    records: list[Any] = [None] * n
    for i, record in zip(rows, packed, strict=True):
        records[i] = record
    return records


def _metadata_column(metas: Sequence[str]) -> list[dict[str, Any] | None] | None:
    """Every row's metadata (None for ``{}``) from one JSON parse of the non-empty
    ones; None when one is not a JSON object."""
    out: list[dict[str, Any] | None] = [None] * len(metas)
    rows = [i for i, text in enumerate(metas) if text != "{}"]
    if not rows:
        return out
    values = json.loads("[" + ",".join([metas[i] for i in rows]) + "]")
    if len(values) != len(rows) or set(map(type, values)) != {dict}:
        return None
    for i, value in zip(rows, values, strict=True):
        out[i] = value or None
    return out


def _embedding_columns(
    blobs: Sequence[Any], dims: Sequence[Any], n: int
) -> tuple[int | None, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """``(dim, narrow, wide_rows, wide, has, empty)`` of the rows' blobs (see
    :class:`RowBlock`), or None for blobs of several dimensions or odd lengths."""
    if not set(map(type, blobs)) <= {bytes, type(None)}:
        return None
    none = np.fromiter(map(operator.is_, blobs, itertools.repeat(None)), bool, n)
    sizes = np.fromiter(map(len, [b or b"" for b in blobs]), np.int64, n)
    has = sizes > 0
    empty = ~has & ~none
    if not has.any():
        zeros = np.zeros((n, 0), dtype=np.float32)
        return None, zeros, np.zeros(0, dtype=np.int64), np.zeros((0, 0)), has, empty
    kinds = set(itertools.compress(dims, has.tolist()))
    if len(kinds) != 1:
        return None
    dim = kinds.pop()
    if type(dim) is not int or dim <= 0:
        return None
    is_narrow = sizes == 4 * dim
    is_wide = sizes == 8 * dim
    if not np.array_equal(is_narrow | is_wide, has):
        return None
    narrow_rows = np.flatnonzero(is_narrow)
    wide_rows = np.flatnonzero(is_wide)
    if len(narrow_rows) == n:  # the usual file: every row a float32 embedding (read-only)
        narrow = np.frombuffer(b"".join(blobs), dtype=_FLOAT32_LE).reshape(n, dim)
    else:
        narrow = np.zeros((n, dim), dtype=np.float32)
    if 0 < len(narrow_rows) < n:
        narrow[narrow_rows] = np.frombuffer(
            b"".join(itertools.compress(blobs, is_narrow.tolist())), dtype=_FLOAT32_LE
        ).reshape(len(narrow_rows), dim)
    wide = np.frombuffer(
        b"".join(itertools.compress(blobs, is_wide.tolist())), dtype=_FLOAT64_LE
    ).reshape(len(wide_rows), dim).astype(np.float64)
    return dim, narrow, wide_rows.astype(np.int64), wide, has, empty


def cached_row_params(cache: Any, memory_id: str) -> tuple[Any, ...]:
    """The SQL parameters of the cached memory ``memory_id`` (from its columns)."""
    row = cache._row_of[memory_id]
    params = row_params(cache, row)
    if params is None:  # kept whole
        params = memory_params(cache._memory_at(row))[1]
    return params
