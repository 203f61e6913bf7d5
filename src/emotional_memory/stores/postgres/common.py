"""PostgreSQL backend: row layouts, transaction records and small helpers."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emotional_memory.interfaces import StoreBusyError, StoreTimeoutError, StoreUnreachableError
from emotional_memory.lexical import analyze, tokenize
from emotional_memory.models import LINK_TYPES
from emotional_memory.redact import redact_address
from emotional_memory.stores._shared import records as _records

_SCHEMA_NAME = "emotional_memory.postgres"
LINK_CODE = {name: i for i, name in enumerate(LINK_TYPES)}
# fullmatch: a "$" would also match before a final newline ("mem\n" passed)
_IDENT = re.compile(r"[a-z_][a-z0-9_]{0,40}")
_LE_F64 = np.dtype("<f8")


MAX_TERM_BYTES = 1024
"""The longest term (UTF-8 bytes) kept as it is in the ``terms`` column. A GIN index
entry holds at most 2712 bytes (of an 8 kB page), compressed only when that pays
off (random text does not): a longer term, one long word, is stored and queried as
its digest (:func:`indexed_term`), the same on writes and reads, so the lexical
statistics are unchanged."""


def indexed_term(term: str) -> str:
    """The form of a lexical term in the ``terms`` column and its GIN index.

    Args:
        term: a token (letters and digits).

    Returns:
        ``term`` itself, or ``"#"`` + its SHA-256 (hex) when it is longer than
        :data:`MAX_TERM_BYTES` (``#`` never occurs in a token).
    """
    if len(term) * 4 <= MAX_TERM_BYTES:
        return term
    data = term.encode("utf-8")
    return term if len(data) <= MAX_TERM_BYTES else "#" + hashlib.sha256(data).hexdigest()


STEM_PREFIX = "~"
"""Marks a stemmed term (``lexical_stemmer="english"``) in the ``terms`` column: a row
holds its tokens and, prefixed, their Snowball stems, so one GIN index serves both
analyses (``~`` never occurs in a token)."""


def analysis_term(term: str, analysis: str) -> str:
    """The form of a query term of ``analysis`` in the ``terms`` column.

    Args:
        term: a term of that analysis (a token, or a stem for ``"english"``).
        analysis: ``"none"`` or ``"english"``.

    Returns:
        :func:`indexed_term` of ``term``, after :data:`STEM_PREFIX` for a stem.
    """
    return indexed_term(term if analysis == "none" else STEM_PREFIX + term)


def lexical_columns(content: str) -> tuple[list[str], list[int], int]:
    """The ``terms``, ``tfs`` and ``doc_len`` columns of a memory's content: every
    distinct token, then every distinct stem (prefixed), each with its count, and
    the number of tokens.

    Args:
        content: the memory's content.

    Returns:
        ``(terms, tfs, doc_len)``.
    """
    tokens = tokenize(content)
    counts: dict[str, int] = {}
    for token in tokens:
        key = indexed_term(token)
        counts[key] = counts.get(key, 0) + 1
    for stem in analyze(tokens, "english"):
        key = indexed_term(STEM_PREFIX + stem)
        counts[key] = counts.get(key, 0) + 1
    return list(counts), list(counts.values()), len(tokens)


MOST_ROWS = 2**60
"""More rows than any table holds: a larger ``top_k``, page ``limit`` or ``offset``
answers as this one does (SQL's ``LIMIT`` and ``OFFSET`` take a bigint, and the
statements add to and multiply them)."""


MAX_EF_SEARCH = 1000
"""pgvector's largest ``hnsw.ef_search``: searches wanting more candidates get them
from the iterative scan (``hnsw.iterative_scan = strict_order``)."""

MAX_HNSW_DIM = 2000
"""pgvector's largest dimension an HNSW index over ``vector`` holds: a store of
longer embeddings has no index (every search scans the rows, then re-ranks exactly)."""
MAX_VECTOR_DIM = 16000
"""pgvector's largest ``vector`` dimension: a longer embedding is refused."""


RECONNECT_WINDOW_S = 2.0
"""Seconds a pool retries a lost connection (psycopg_pool's delays double from 1 s)
before giving it up; a request short of connections then opens one at once. The
pool's default (300 s) let the delay grow with an outage: its next try could come
minutes after the database was back, every request failing meanwhile."""


OUTAGE_WAIT_S = 2.0
"""Seconds a request waits for a pooled connection before a new connection is tried:
refused, the request is told the database cannot be reached (a 503 at once rather
than after the pool's 30 s); else it waits the rest of the pool's wait. While the
database is known to be unreachable no request waits longer before its try."""


class PostgresStoreError(RuntimeError):
    """A PostgreSQL failure (connection, schema); the message names the redacted DSN."""


class StatementTimeout(PostgresStoreError, StoreTimeoutError):
    """A statement ran past the store's ``statement_timeout`` and was cancelled (the
    transaction rolled back)."""


class PoolBusy(PostgresStoreError, StoreBusyError):
    """Every connection of a pool stayed in use for the pool's whole wait (slow
    operations hold them): nothing was done."""


class DatabaseUnreachable(PostgresStoreError, StoreUnreachableError):
    """A pool's wait ended without a connection and a new one could not be opened
    (the server is down, restarting or refusing connections): nothing was done."""


# psycopg's prepare_threshold inside _prepared: a statement is prepared automatically
# after this many runs (never), or when executed with prepare=True.
_PREPARE_ONLY_WHEN_ASKED = 2**62


@contextmanager
def _prepared(conn: Any, prepare: bool) -> Iterator[None]:
    """Statements executed with ``prepare=True`` inside are prepared on the server once
    per connection and reused (their planning otherwise costs about as much as a
    retrieve's index search). Only for single statements outside pipeline mode: the
    pool's connections otherwise keep ``prepare_threshold=None`` (psycopg's prepared
    statements do not mix reliably with pipeline mode, where ``executemany`` always
    prepares), so psycopg prepares nothing else and tracks nothing else.

    Args:
        conn: a pooled connection, not in pipeline mode.
        prepare: False: nothing changes.
    """
    if not prepare:
        yield
        return
    conn.prepare_threshold = _PREPARE_ONLY_WHEN_ASKED
    try:
        yield
    finally:
        conn.prepare_threshold = None


def table_lock_key(table: str) -> int:
    """The advisory lock of the tables with prefix ``table``: taken by every write
    transaction of a :class:`PostgresStore` and while the schema is created or checked.

    Args:
        table: the tables' prefix.

    Returns:
        A signed 64-bit key.
    """
    digest = hashlib.sha256(f"{_SCHEMA_NAME}:{table}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def redact_dsn(dsn: str) -> str:
    """:func:`emotional_memory.redact.redact_address` (kept under this name)."""
    return redact_address(dsn)


def _float_bytes(values: np.ndarray) -> bytes:
    return np.ascontiguousarray(values, dtype=_LE_F64).tobytes()


def _has_nul(value: Any) -> bool:
    """Whether a string, or any key or string inside JSON data, holds a NUL character."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_has_nul(v) for v in value)
    return False


def _embedding_of(exact: bytes | None, vector: Any) -> np.ndarray | None:
    """A stored embedding as float64: the float64 bytes when kept, else the values of
    the vector column (float32 numbers, so exact), else None."""
    if exact is not None:
        return np.frombuffer(exact, dtype=_LE_F64)
    if vector is not None:  # pgvector's Vector (binary results) or an array
        values = vector.to_numpy() if hasattr(vector, "to_numpy") else vector
        return np.asarray(values, dtype=np.float64)
    return None


@dataclass
class _Tx:
    """The current thread's open transaction.

    ``queued`` holds writes not sent yet (statement, parameters): they go out together
    (pipelined) before the transaction's next read, savepoint or commit. ``known``:
    ids whose rows this transaction locked or wrote (they exist until it deletes them),
    so an update of one can be queued without a round trip to check it exists.
    ``nothing_expires``: whether no stored memory has an expiry (read once when a
    view needs it). ``rows``: the current row (``_MEMORY_COLUMNS``) of every memory
    this transaction locked or wrote, so reading one again costs no round trip (it
    holds the store's write lock and the row locks: only it changes them).
    ``absent``: ids a read of the whole table found no row for (only this
    transaction can insert them), so a view may insert them without asking again.
    """

    conn: Any
    depth: int
    write: bool
    queued: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    known: set[str] = field(default_factory=set)
    nothing_expires: bool | None = None
    rows: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    absent: set[str] = field(default_factory=set)  # ids no row had when read here
    fixed_dim: tuple[int, int] | None = None  # (dimension, depth): fixed here, uncommitted


@dataclass
class _Shared:
    """What a store and all its views (:meth:`PostgresStore.selected`) share: the
    embedding dimension once known (fixed for good by the first embedding: ``clear``
    keeps it), so a retrieve through a view asks for it no more than once; and the
    connections that hold scope locks (:mod:`~emotional_memory.stores.postgres.scope_locks`,
    made on first use); and whether the store is closed."""

    dim: int | None = None
    scope_locks: Any = None
    closed: bool = False
    # a pool gave up reconnecting (its database refused every try of its window), or a
    # request's try of a new connection was refused, and no connection was handed out
    # since: requests wait OUTAGE_WAIT_S at most
    outage: bool = False


class _Labels(_records.LabelTable):
    """The emotion-label table of decoded rows (triples interned from the columns)."""

    def intern(self, triple: Sequence[str]) -> int:
        """The code of a ``(primary, intensity, name)`` triple (added when new)."""
        key = (str(triple[0]), str(triple[1]), str(triple[2]))
        code = self._codes.get(key)
        if code is None:
            code = len(self._labels)
            self._codes[key] = code
            self._labels.append(key)
        return code


# Columns read to rebuild a memory, and to build candidate columns.
_PAGE_WALK_MIN = 256
_PAGE_WALK_FACTOR = 4
# list_page walks at most max(MIN, FACTOR * (offset + limit)) rows in insertion order
# before reading a sparse view's page through its indexes.
_MEMORY_COLUMNS = (
    "seq, id, content, exact, tagf, tagi, label, link_targets, link_strengths, "
    "link_types, metadata_json, whole, embedding, scope, expires_us"
)
_BANK_COLUMNS = (
    "seq, id, exact, tagf, tagi, link_targets, link_strengths, norm, embedding, embedded"
)
# Search results carry the rest of each row too (and its version, ``xmin``): a
# retrieve rebuilds its winners from them and writes its side effects back in one
# round trip when the rows are unchanged (see PostgresStore.modify_memories).
_SEARCH_COLUMNS = (
    f"{_BANK_COLUMNS}, content, label, link_types, metadata_json, whole, scope, "
    "expires_us, xmin::text"
)


COLUMN_TYPES = {
    "id": "text", "content": "text", "embedding": "vector", "exact": "bytea",
    "norm": "float8", "embedded": "boolean", "tagf": "float8[]", "tagi": "int8[]",
    "label": "text[]", "link_targets": "text[]", "link_strengths": "float8[]",
    "link_types": "int2[]", "metadata": "jsonb", "metadata_json": "text",
    "scope": "text[]", "expires_at": "timestamptz", "expires_us": "int8",
    "terms": "text[]", "tfs": "int4[]", "doc_len": "int4", "whole": "text",
}
"""The memories table's written columns and their types: multi-row statements cast
every parameter, so that their rows agree on their types."""

UPSERT_CHUNK = 1000
"""Rows per multi-row INSERT (21 parameters each: PostgreSQL takes 65,535)."""


def _search_row_memory_columns(r: Sequence[Any]) -> tuple[Any, ...]:
    """A ``_SEARCH_COLUMNS`` row laid out as ``_MEMORY_COLUMNS``."""
    return (r[0], r[1], r[10], r[2], r[3], r[4], r[11], r[5], r[6], r[12], r[13], r[14],
            r[8], r[15], r[16])


def check_options(
    dsn: object, table: object, connect_timeout: object, statement_timeout: object,
    **ints: object,
) -> None:
    """Validate :class:`PostgresStore`'s options before anything is opened.

    Args:
        dsn: must be a str.
        table: the table prefix (lowercase letters, digits, ``_``; 1-41 characters).
        connect_timeout: seconds, > 0.
        statement_timeout: seconds in 0.001..86400, or None.
        **ints: the integer options by name (each checked against its minimum).

    Raises:
        TypeError: ``dsn`` is not a str.
        ValueError: a bad option, named.
    """
    if not isinstance(dsn, str):
        raise TypeError(f"dsn must be a str, got {type(dsn).__name__}")
    if not isinstance(table, str) or not _IDENT.fullmatch(table):
        raise ValueError(
            "table must be 1-41 characters of lowercase letters, digits and '_' "
            f"(starting with a letter or '_'), got {table!r}"
        )
    for name, value in ints.items():
        low = _INT_MINIMUMS[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    ef_search = ints.get("ef_search", 64)
    if isinstance(ef_search, int) and ef_search > MAX_EF_SEARCH:
        raise ValueError(
            f"ef_search must be at most {MAX_EF_SEARCH} (pgvector's maximum), got {ef_search}"
        )
    fillfactor = ints.get("fillfactor", 70)
    if isinstance(fillfactor, int) and fillfactor > 100:
        raise ValueError(f"fillfactor must be an int in 10..100, got {fillfactor!r}")
    low_size, high_size = ints.get("min_connections", 1), ints.get("max_connections", 4)
    if isinstance(low_size, int) and isinstance(high_size, int) and high_size < low_size:
        raise ValueError("max_connections must be >= min_connections")
    if not (isinstance(connect_timeout, int | float) and connect_timeout > 0):
        raise ValueError(f"connect_timeout must be > 0, got {connect_timeout!r}")
    if statement_timeout is not None and not (
        isinstance(statement_timeout, int | float) and not isinstance(statement_timeout, bool)
        and 0.001 <= statement_timeout <= 86_400
    ):
        raise ValueError(
            f"statement_timeout must be seconds in 0.001..86400 or None, got "
            f"{statement_timeout!r}"
        )


_INT_MINIMUMS = {
    "min_connections": 0, "max_connections": 1, "exact_rows": 0, "ef_search": 1,
    "margin": 0, "hnsw_m": 2, "hnsw_ef_construction": 4, "fillfactor": 10,
}
