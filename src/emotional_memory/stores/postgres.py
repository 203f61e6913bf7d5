"""A memory store in PostgreSQL with pgvector (extra ``postgres``).

``PostgresStore(dsn)`` keeps memories in one table of a PostgreSQL database with the
``vector`` extension, so several application servers (processes, hosts) share one
bank: every engine operation is one transaction, and writers never lose each other's
updates. It answers the engine's columnar protocol
(:class:`~emotional_memory.stores.columnar.ColumnarStore`) straight from the rows: no
:class:`~emotional_memory.models.Memory` is built for a retrieval candidate.

The table (``{table}_memories``) holds each memory in typed columns:

- ``seq`` (insertion order, kept when a memory is replaced), ``id``, ``content``;
- ``embedding``: pgvector ``vector(D)`` under an HNSW cosine index. An embedding whose
  values are all float32 numbers (what embedders produce) is stored there as it is,
  once; any other is stored as its float64 values in ``exact`` (little-endian bytes)
  with its float32 unit direction in ``embedding`` for the index (NULL when it has no
  direction: zero, NaN, inf). ``norm`` (float64) and ``embedded`` complete it;
- ``tagf`` (``float8[]``) and ``tagi`` (``int8[]``): the emotional tag's numbers as
  :mod:`emotional_memory.stores._records` lays them out (affect, mood, momentum,
  consolidation, timestamps as microseconds, counters, flags), with ``valence``,
  ``arousal``, ``dominance``, ``created_us``, ``retrieval_count``, ``pending`` and
  ``emotion`` as generated columns; ``label`` (the emotion label's name parts);
- links as three arrays (``link_targets``, ``link_strengths``, ``link_types``; not
  indexed, so that writing links is a HOT update that never touches the vector
  index); who links to whom is kept by triggers in ``{table}_links`` (target id,
  source ``seq``; primary key on both), through which :meth:`PostgresStore.linking_to`
  (used by deletes) finds the linking memories without a scan;
  ``metadata`` as JSONB (GIN-indexed) plus its exact JSON text;
- ``scope`` (``text[]``, GIN) and ``expires_at`` (indexed);
- ``terms`` / ``tfs`` / ``doc_len``: the lexical statistics of the opt-in signal s7
  (GIN-indexed terms);
- ``whole``: the memory as JSON for the rare memory whose shape the columns cannot
  rebuild exactly (a non-UTC datetime, a subclass; see ``_records.fits``).

``{table}_meta`` holds the schema name and version, the embedding dimension, and the
counts of memories, of embedded memories and of expiring memories, kept by the
statements that write rows. ``{table}_memories_unchanged(got, want)`` fails a
transaction (SQLSTATE 40001) when a conditional write found fewer rows than expected
at the version it read (see :meth:`PostgresStore.modify_memories`).

**Answers.** Search ranks by the exact float64 cosine of the stored embeddings (NaN
and zero-norm rows as 0, ties by insertion order), as
:class:`~emotional_memory.stores.InMemoryStore` does: up to ``exact_rows`` embedded
memories every row is ranked exactly (the same answer as the in-memory store); above
it, the HNSW index supplies ``top_k + margin`` candidates (``hnsw.ef_search`` raised
to cover them), which are re-ranked exactly; the candidates are then approximate
(``benchmarks/postgres_scale.py`` measures their recall against exact search).

**Transactions.** Every engine operation runs in one transaction
(:meth:`PostgresStore.transaction`, re-entrant through savepoints), in libpq's
pipeline mode. A write transaction first takes one transaction-scoped advisory lock
per table, so writers from every process take turns (no deadlock between multi-row
updates) while readers never wait; every read inside it locks the rows it returns
(``SELECT ... FOR UPDATE``), so a read-modify-write always starts from the current
rows; the transaction keeps the rows it locked or wrote, so reading them again
asks the server nothing. Writes are checked at once and sent together before the
transaction's next read or its commit (an update that changes only the tag writes
only its columns). Reads outside a transaction run in one ``REPEATABLE READ READ
ONLY`` snapshot each (a single statement on its own, outside pipeline mode).

**A retrieve** is two statements: the candidate read (one prepared statement, the
memory counts riding along as columns: :meth:`PostgresStore.candidate_bank` with
``everything_upto``), and its side effects written by one statement that updates the
winners' tags only where the rows are still the version read, else the locked
read-modify-write (:meth:`PostgresStore.modify_memories`). The store keeps session
state on its pooled connections (prepared statements, ``hnsw.ef_search``,
``hnsw.iterative_scan``): connect directly or through a pooler in session mode.

**Schema.** Created on first use, versioned in ``{table}_meta`` and migrated in the
opening transaction (version 1 to 2: the links table and the check function); a
database whose tables of that name belong to something else, or whose schema
version is newer than this package's, is refused before anything is written.

**Errors** (unreachable server, bad DSN, foreign schema, dropped connection) raise
:class:`PostgresStoreError` naming the DSN with its password replaced by ``***``; a
failed transaction is rolled back whole.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import TracebackType
from typing import Any

import jax
import numpy as np

from emotional_memory._bank import (
    _COLUMNS_TREEDEF,
    CandidateBank,
    LexicalQuery,
    padded_adjacency,
)
from emotional_memory.interfaces import StoreTimeoutError
from emotional_memory.kernel.columns import MemoryColumns, bucket_size, pad_columns
from emotional_memory.kernel.lexical import LexicalInputs
from emotional_memory.lexical import tokenize
from emotional_memory.models import LINK_TYPES, Memory, ResonanceLink
from emotional_memory.stores import _records
from emotional_memory.stores._linking import (
    ForwardLink,
    LinkCandidates,
    MemoryLinker,
    _backward,
    _with_links,
    memory_candidates,
)
from emotional_memory.stores._precision import _F32_NORM_MAX, _F32_NORM_MIN, _norm, _row_norm
from emotional_memory.stores._vector_db import dump_memory, load_memory
from emotional_memory.stores._where_sql import positional, where_sql
from emotional_memory.stores.selection import Selection

__all__ = [
    "SCHEMA_VERSION",
    "PostgresStore",
    "PostgresStoreError",
    "StatementTimeout",
    "redact_dsn",
]

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


MAX_EF_SEARCH = 1000
"""pgvector's largest ``hnsw.ef_search``: searches wanting more candidates get them
from the iterative scan (``hnsw.iterative_scan = strict_order``)."""

SCHEMA_VERSION = 2
"""The version of the table layout this package writes (``{table}_meta``)."""

_SCHEMA_NAME = "emotional_memory.postgres"
_LINK_CODE = {name: i for i, name in enumerate(LINK_TYPES)}
_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")
_LE_F64 = np.dtype("<f8")

# The check a conditional write ends with: it fails the transaction (serialization
# failure, SQLSTATE 40001) when fewer rows than expected were still as read.
_UNCHANGED_FUNCTION = """CREATE FUNCTION {t}_unchanged(got bigint, want bigint)
RETURNS bigint LANGUAGE plpgsql AS $body$
BEGIN
    IF got <> want THEN
        RAISE EXCEPTION 'emotional_memory: % of % rows changed since they were read',
            want - got, want USING ERRCODE = '40001';
    END IF;
    RETURN got;
END
$body$"""

# Who links to whom, kept by the server: ``{links}`` holds one row per (target id,
# source seq) of the memories' link arrays, maintained by triggers on every write
# that changes them, so a delete finds the memories linking to it through an index
# while the link arrays stay unindexed (writing links stays a HOT update that never
# touches the vector index).
_LINKS_STATEMENTS = (
    "CREATE TABLE {links} (target text NOT NULL, source bigint NOT NULL, "
    "PRIMARY KEY (target, source))",
    """CREATE FUNCTION {t}_track_links() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM {links} WHERE source = OLD.seq;
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        DELETE FROM {links} WHERE source = OLD.seq AND NOT (target = ANY (NEW.link_targets));
    END IF;
    INSERT INTO {links} (target, source)
        SELECT DISTINCT x, NEW.seq FROM unnest(NEW.link_targets) AS x
        ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$body$""",
    "CREATE TRIGGER {t}_links_insert AFTER INSERT ON {t} FOR EACH ROW "
    "WHEN (cardinality(NEW.link_targets) > 0) EXECUTE FUNCTION {t}_track_links()",
    "CREATE TRIGGER {t}_links_update AFTER UPDATE OF link_targets ON {t} FOR EACH ROW "
    "WHEN (OLD.link_targets IS DISTINCT FROM NEW.link_targets) "
    "EXECUTE FUNCTION {t}_track_links()",
    "CREATE TRIGGER {t}_links_delete AFTER DELETE ON {t} FOR EACH ROW "
    "WHEN (cardinality(OLD.link_targets) > 0) EXECUTE FUNCTION {t}_track_links()",
)

# Migrations: version -> statements taking the schema from that version to the next
# (``{t}``: the memories table, ``{meta}``: the meta table, ``{links}``: the links
# table). _ensure_schema applies them in one transaction.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    # 2: retrieval side effects written conditionally; the links table
    1: (
        _UNCHANGED_FUNCTION,
        *_LINKS_STATEMENTS,
        "INSERT INTO {links} (target, source) SELECT DISTINCT x, m.seq "
        "FROM {t} AS m, unnest(m.link_targets) AS x",
    ),
}


class PostgresStoreError(RuntimeError):
    """A PostgreSQL failure (connection, schema); the message names the redacted DSN."""


class StatementTimeout(PostgresStoreError, StoreTimeoutError):
    """A statement ran past the store's ``statement_timeout`` and was cancelled (the
    transaction rolled back)."""


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


def redact_dsn(dsn: str) -> str:
    """``dsn`` with any password replaced by ``***`` (URL and key=value forms).

    Args:
        dsn: a libpq connection string or URL.

    Returns:
        The redacted string (safe for logs, errors and reprs).
    """
    out = re.sub(r"(?i)(^|\s)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", r"\1\2***", dsn)
    out = re.sub(r"(?i)([?&]password=)[^&#\s]*", r"\1***", out)
    return re.sub(r"^([a-z][a-z0-9+.-]*://[^/@:\s]*):[^@/\s]*@", r"\1:***@", out)


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
    """

    conn: Any
    depth: int
    write: bool
    queued: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    known: set[str] = field(default_factory=set)
    nothing_expires: bool | None = None
    rows: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    fixed_dim: tuple[int, int] | None = None  # (dimension, depth): fixed here, uncommitted


@dataclass
class _Shared:
    """What a store and all its views (:meth:`PostgresStore.selected`) share: the
    embedding dimension once known (fixed for good by the first embedding: ``clear``
    keeps it), so a retrieve through a view asks for it no more than once."""

    dim: int | None = None


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


def _search_row_memory_columns(r: Sequence[Any]) -> tuple[Any, ...]:
    """A ``_SEARCH_COLUMNS`` row laid out as ``_MEMORY_COLUMNS``."""
    return (r[0], r[1], r[10], r[2], r[3], r[4], r[11], r[5], r[6], r[12], r[13], r[14],
            r[8], r[15], r[16])


class PostgresStore:
    """A :class:`~emotional_memory.stores.columnar.ColumnarStore` in PostgreSQL (module docs).

    Thread-safe: each thread's transaction has its own pooled connection.
    """

    def __init__(
        self,
        dsn: str,
        *,
        table: str = "emotional_memory",
        min_connections: int = 1,
        max_connections: int = 4,
        connect_timeout: float = 10.0,
        exact_rows: int = 2048,
        ef_search: int = 64,
        margin: int = 4,
        hnsw_m: int = 16,
        hnsw_ef_construction: int = 128,
        fillfactor: int = 70,
        statement_timeout: float | None = None,
    ) -> None:
        """Connect, and create (or check) the schema.

        Args:
            dsn: libpq connection string or URL (``postgresql://user:pw@host/db``).
            table: prefix of the store's tables (``{table}_memories``, ``{table}_meta``);
                lowercase letters, digits and ``_``.
            min_connections: connections the pool keeps open.
            max_connections: connections the pool opens at most (one per thread in
                a transaction).
            connect_timeout: seconds to wait for the server.
            statement_timeout: seconds any one statement of the store's may run
                before the server cancels it (PostgreSQL's ``statement_timeout`` on
                every pooled connection); the operation then fails with
                :class:`StatementTimeout`, its transaction rolled back. None: no limit
                (the server's own setting).
            exact_rows: up to this many embedded memories, search ranks every row
                exactly; above it the HNSW index supplies the candidates.
            ef_search: pgvector's ``hnsw.ef_search`` for the store's searches
                (raised to ``top_k + margin`` when that is larger). 64, above
                pgvector's default 40: on 100,000 clustered sentence-like vectors
                the candidates' recall was 0.980 at 40 and 0.987 at 64.
            margin: extra HNSW candidates fetched beyond ``top_k`` for the exact
                re-rank (they only absorb float32 / float64 ordering differences near
                the cut: the index finds no more true neighbours by returning more).
            hnsw_m: the HNSW index's ``m``.
            hnsw_ef_construction: the HNSW index's ``ef_construction`` (read when the
                first embedding creates the index). 128, above pgvector's default 64:
                on 100,000 clustered sentence-like vectors two builds in three at 64
                left a query whose 15 true neighbours the search could not reach at
                any ``ef_search`` (candidate recall 0.989, 0.979 in an earlier run),
                none of four builds at 128 did (recall 1.000 each); inserting into
                the index costs ~1.45x as much (690 against 990 rows/s, bare COPY).
                An existing index keeps its value: ``ALTER INDEX
                {table}_memories_hnsw SET (ef_construction = 128)`` then ``REINDEX``.
            fillfactor: the memories table's ``fillfactor`` (10..100, read when the
                store creates its tables): the share of each 8 KB page that inserts
                fill, the rest kept for updated row versions. A retrieve rewrites
                its winners' tags; a new version that fits on its row's page is a HOT
                update (no index touched), one that does not is written elsewhere and
                entered in every index (in the HNSW one after a search for the equal
                vector, whose entry then points at both versions). A row with a 384-d
                embedding takes ~2.1 KB: at 70 two share a page, and an update finds
                room for one new version per page until the page is pruned; updating
                5 rows of consecutive pages (memories saved one after another) took
                3.3 ms at 70 against 0.27 ms at 50, where each row has a page of its
                own (and the table takes ~2x the space). Random winners mostly
                update HOT at 70 already; see docs/scale.md for ``encode_batch``,
                which updates each new memory's linked neighbours. An existing
                table: ``ALTER TABLE
                {table}_memories SET (fillfactor = ...)`` (new pages only).

        Raises:
            ImportError: psycopg / psycopg-pool / pgvector are not installed.
            ValueError: a bad option.
            PostgresStoreError: the server cannot be reached, the DSN is invalid, or
                the database holds a foreign or newer schema (nothing written).
        """
        try:
            import psycopg
            from pgvector.psycopg import register_vector  # noqa: F401 (see _configure)
            from psycopg_pool import ConnectionPool
        except ImportError as exc:
            raise ImportError(
                "PostgresStore needs psycopg, psycopg-pool and pgvector: "
                "pip install 'emotional-memory-jax[postgres]'"
            ) from exc
        if not isinstance(dsn, str):
            raise TypeError(f"dsn must be a str, got {type(dsn).__name__}")
        if not isinstance(table, str) or not _IDENT.match(table):
            raise ValueError(
                "table must be 1-41 characters of lowercase letters, digits and '_' "
                f"(starting with a letter or '_'), got {table!r}"
            )
        for name, value, low in (
            ("min_connections", min_connections, 0), ("max_connections", max_connections, 1),
            ("exact_rows", exact_rows, 0), ("ef_search", ef_search, 1), ("margin", margin, 0),
            ("hnsw_m", hnsw_m, 2), ("hnsw_ef_construction", hnsw_ef_construction, 4),
            ("fillfactor", fillfactor, 10),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if ef_search > MAX_EF_SEARCH:
            raise ValueError(
                f"ef_search must be at most {MAX_EF_SEARCH} (pgvector's maximum), got {ef_search}"
            )
        if fillfactor > 100:
            raise ValueError(f"fillfactor must be an int in 10..100, got {fillfactor!r}")
        if max_connections < min_connections:
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
        self._timeout_ms = 0 if statement_timeout is None else round(statement_timeout * 1000)
        self._psycopg = psycopg
        self._redacted = redact_dsn(dsn)
        self._password = self._find_password(dsn)
        self._table = table
        self._t = f"{table}_memories"
        self._meta = f"{table}_meta"
        self._links = f"{table}_links"
        self._lock_key = int.from_bytes(
            hashlib.sha256(f"{_SCHEMA_NAME}:{table}".encode()).digest()[:8],
            "big", signed=True,
        )
        self._exact_rows = exact_rows
        self._ef_search = ef_search
        self._margin = margin
        self._hnsw = (hnsw_m, hnsw_ef_construction)
        self._fillfactor = fillfactor
        self._upsert_sql, self._update_sql = self._statements()
        self._tag_sql = (
            f"UPDATE {self._t} SET "
            + ", ".join(f"{c} = %({c})s" for c in self._TAG_COLUMNS)
            + " WHERE id = %(id)s"
        )
        self._local = threading.local()
        self._selection: Selection | None = None  # a view's (see selected)
        self._f = ""  # a view's row predicate, appended to every WHERE clause
        self._fv: dict[str, Any] = {}  # the values of its named placeholders
        self._expiry_us: int | None = None  # an expiry-only view's time (see selected)
        self._last_use: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        # each pooled connection's session value of hnsw.ef_search (_search_settings)
        self._session_ef: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._labels = _Labels()
        self._labels_lock = threading.Lock()
        self._shared = _Shared()
        self._closed = False
        try:
            psycopg.conninfo.conninfo_to_dict(dsn)
        except psycopg.Error as exc:
            raise PostgresStoreError(
                f"invalid PostgreSQL DSN {self._redacted!r}: {self._clean(exc)}"
            ) from None
        try:
            conn = psycopg.connect(
                dsn, autocommit=True, connect_timeout=max(1, math.ceil(connect_timeout))
            )
        except psycopg.Error as exc:
            raise PostgresStoreError(
                f"cannot connect to PostgreSQL at {self._redacted!r}: {self._clean(exc)}"
            ) from None
        try:
            self._ensure_schema(conn)
        finally:
            conn.close()
        self._pool = ConnectionPool(
            dsn,
            min_size=min_connections,
            max_size=max_connections,
            # no prepared statements but a retrieve's read and write (see _prepared):
            # psycopg's do not mix reliably with pipeline mode (and a pooler in
            # transaction mode forbids them)
            kwargs={
                "autocommit": True,
                "connect_timeout": max(1, math.ceil(connect_timeout)),
                "prepare_threshold": None,
            },
            configure=self._configure,
            check=self._check_connection,
            open=False,
            name=f"emotional_memory.{table}",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except Exception as exc:
            self._pool.close(timeout=0)
            raise PostgresStoreError(
                f"cannot connect to PostgreSQL at {self._redacted!r}: {self._clean(exc)}"
            ) from None

    # ------------------------------------------------------------------ plumbing

    _IDLE_CHECK_S = 5.0
    """A pooled connection idle this long is checked (one round trip) before use."""

    def _check_connection(self, conn: Any) -> None:
        """The pool's check: a connection idle for a while must answer a ping (the
        pool replaces it otherwise); one in steady use skips the round trip (a broken
        one then fails its transaction, with nothing written, and is replaced)."""
        now = time.monotonic()
        last = self._last_use.get(conn)
        if last is None or now - last > self._IDLE_CHECK_S or conn.broken:
            conn.execute("")
        self._last_use[conn] = now

    @staticmethod
    def _find_password(dsn: str) -> str | None:
        try:
            import psycopg

            password = psycopg.conninfo.conninfo_to_dict(dsn).get("password")
        except Exception:
            return None
        return str(password) if password else None

    def _configure(self, conn: Any) -> None:
        """Set up a new pooled connection: pgvector's types, the statement timeout."""
        from pgvector.psycopg import register_vector

        register_vector(conn)
        if self._timeout_ms:
            conn.execute(
                "SELECT set_config('statement_timeout', %s, false)", (f"{self._timeout_ms}ms",)
            )

    def _clean(self, exc: BaseException) -> str:
        """An exception's message with the password (if any) removed."""
        text = str(exc).strip() or type(exc).__name__
        if self._password:
            text = text.replace(self._password, "***")
        return redact_dsn(text)

    def _error(self, what: str, exc: BaseException) -> PostgresStoreError:
        kind = (
            StatementTimeout
            if isinstance(exc, self._psycopg.errors.QueryCanceled) and self._timeout_ms
            else PostgresStoreError
        )
        return kind(f"{what} failed on {self._redacted!r}: {self._clean(exc)}")

    @property
    def dsn(self) -> str:
        """The DSN with its password redacted."""
        return self._redacted

    @property
    def table(self) -> str:
        """The tables' prefix."""
        return self._table

    @property
    def dim(self) -> int | None:
        """The embedding dimension (None while no memory has had an embedding)."""
        with self._read() as cur:
            return self._stored_dim(cur)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def _current(self) -> _Tx | None:
        tx: _Tx | None = getattr(self._local, "tx", None)
        return tx

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All-or-nothing block of writes: one PostgreSQL transaction (re-entrant).

        The outermost block takes the store's advisory write lock (writers from every
        process take turns; readers never wait) and commits at its end or rolls back
        on an exception; a nested block is a savepoint, so a failing inner block
        undoes only its own writes. Reads inside lock the rows they return.

        Yields:
            None.

        Raises:
            PostgresStoreError: the connection failed (the transaction is rolled back
                by the server).
        """
        tx = self._current()
        if tx is not None and tx.write:
            name = f"em_sp{tx.depth}"
            self._flush(tx)
            tx.conn.execute(f"SAVEPOINT {name}")
            tx.depth += 1
            try:
                yield
                self._flush(tx)
            except BaseException:
                tx.depth -= 1
                if tx.fixed_dim is not None and tx.fixed_dim[1] > tx.depth:
                    tx.fixed_dim = None  # the dimension was fixed inside: undone
                tx.queued.clear()
                tx.known.clear()  # rows written after the savepoint are gone
                tx.rows.clear()
                if not tx.conn.closed and not tx.conn.broken:
                    tx.conn.execute(f"ROLLBACK TO SAVEPOINT {name}")
                raise
            tx.depth -= 1
            tx.conn.execute(f"RELEASE SAVEPOINT {name}")
            return
        if tx is not None:
            raise RuntimeError("a write transaction cannot start inside a read")
        with self._transaction(write=True):
            yield

    @property
    def _dim(self) -> int | None:
        return self._shared.dim

    @_dim.setter
    def _dim(self, value: int | None) -> None:
        self._shared.dim = value

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        """A pooled connection (errors name the redacted DSN)."""
        if self._closed:
            raise ValueError("the PostgresStore is closed")
        try:
            conn_cm = self._pool.connection()
            conn = conn_cm.__enter__()
        except Exception as exc:
            raise self._error("connecting", exc) from None
        failed: BaseException | None = None
        try:
            yield conn
        except BaseException as exc:
            failed = exc
            raise
        finally:
            if failed is None:
                conn_cm.__exit__(None, None, None)
            else:
                conn_cm.__exit__(type(failed), failed, failed.__traceback__)

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Any]:
        """A top-level transaction on a pooled connection; yields the connection.

        It runs in libpq's pipeline mode: statements whose results nobody waits for
        (BEGIN, the advisory lock, queued writes, COMMIT) travel with the next one
        that is read, so a transaction costs a round trip per read plus one.
        """
        psycopg = self._psycopg
        with self._connection() as conn:
            tx = _Tx(conn, 1, write)
            self._local.tx = tx
            try:
                with conn.pipeline():
                    if write:
                        conn.execute("BEGIN")
                        conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,))
                    else:
                        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    yield conn
                    self._flush(tx)
                    conn.execute("COMMIT")
                if tx.fixed_dim is not None:  # committed: every view may rely on it
                    self._dim = tx.fixed_dim[0]
            except psycopg.OperationalError as exc:
                raise self._error("a transaction", exc) from None
            except BaseException:
                if not conn.closed and not conn.broken:
                    with suppress(psycopg.Error):
                        conn.execute("ROLLBACK")
                raise
            finally:
                self._local.tx = None

    def _flush(self, tx: _Tx) -> None:
        """Send the transaction's queued writes (each run of one statement pipelined)."""
        if not tx.queued:
            return
        queued, tx.queued = tx.queued, []
        with tx.conn.cursor(binary=True) as cur:
            start = 0
            while start < len(queued):
                sql = queued[start][0]
                end = start
                while end < len(queued) and queued[end][0] is sql:
                    end += 1
                cur.executemany(sql, [params for _, params in queued[start:end]])
                start = end

    @contextmanager
    def _read(self, *, single: bool = False) -> Iterator[Any]:
        """A cursor for reads: the open transaction's (its queued writes sent first),
        else a read-only snapshot's; ``single``: statements that need no common
        snapshot (each is its own, outside pipeline mode, which costs a single
        statement more than it saves; no BEGIN / COMMIT round trips)."""
        tx = self._current()
        if tx is not None:
            self._flush(tx)
            with tx.conn.cursor(binary=True) as cur:
                yield cur
            return
        if single:  # autocommit statements: each is its own snapshot
            psycopg = self._psycopg
            with self._connection() as conn:
                try:
                    with conn.cursor(binary=True) as cur:
                        yield cur
                except psycopg.OperationalError as exc:
                    raise self._error("a read", exc) from None
            return
        with self._transaction(write=False) as conn, conn.cursor(binary=True) as cur:
            yield cur

    @contextmanager
    def _write(self) -> Iterator[Any]:
        """A cursor for writes: inside the open write transaction, else a new one."""
        tx = self._current()
        if tx is not None and not tx.write:
            raise RuntimeError("cannot write inside a read")
        if tx is not None:
            self._flush(tx)
            with tx.conn.cursor(binary=True) as cur:
                yield cur
            return
        with self.transaction():
            tx = self._current()
            assert tx is not None
            with tx.conn.cursor(binary=True) as cur:
                yield cur

    def _locked(self, ids: Iterable[str], lock: str) -> None:
        """Note rows a write transaction locked (they exist until it deletes them)."""
        if lock:
            tx = self._current()
            if tx is not None:
                tx.known.update(ids)

    def _lock_rows(self) -> str:
        """``FOR UPDATE`` inside a write transaction (reads lock what they return)."""
        tx = self._current()
        return " FOR UPDATE" if tx is not None and tx.write else ""

    # ------------------------------------------------------------------ views

    def selected(self, selection: Selection) -> Any:
        """This store confined to ``selection`` (issue 23's scopes and expiry in SQL).

        The selection is answered natively: a view sharing this store's connections
        and transactions whose every read adds the selection to its SQL
        (``scope[1:n] = path``, under the GIN index on ``scope``; ``expires_us >
        now``, or ``<= now`` for what ``prune`` removes; the ``where`` filter as one
        exact SQL expression over the typed columns and ``metadata jsonb``, see
        ``stores/_where_sql.py``), so searches, lexical statistics and link
        candidates see only those rows; writes are refused for memories it does not
        see (as unknown ids). A ``where`` filter without an exact SQL form (a range
        with a string operand) is served by the generic
        :class:`~emotional_memory.stores.selection.SelectedStore` (its memories
        filtered in Python, O(N) per operation).

        Args:
            selection: what an operation sees.

        Returns:
            The view (this store itself for the root while no memory has an expiry).
        """
        from emotional_memory.stores.selection import SelectedStore

        parts: list[str] = []
        values: dict[str, Any] = {}
        expiry_only = False
        if selection.where is not None:
            rendered = where_sql(selection.where.clause, prefix="vfw")
            if rendered is None:
                return SelectedStore(self, self, selection)
            parts.append(f" AND {rendered[0]}")
            values.update(rendered[1])
        if selection.scope:  # bound as one text[]: no character of a part is special
            values["vfs"] = list(selection.scope)
            values["vfn"] = len(selection.scope)
            parts.append(
                " AND scope @> %(vfs)s::text[] AND scope[1:%(vfn)s] = %(vfs)s::text[]"
            )
        if selection.expired:
            values["vft"] = _records.to_microseconds(selection.now())
            parts.append(" AND expires_us IS NOT NULL AND expires_us <= %(vft)s")
        elif selection.now.known:
            # The operation's time is at hand (a retrieve's): the expiry goes into the
            # SQL as it is, with no round trip asking whether any memory expires (the
            # counts then subtract the expired rows, found through their index).
            now = _records.to_microseconds(selection.now())
            expiry_only = not parts
            values["vft"] = now
            parts.append(" AND (expires_us IS NULL OR expires_us > %(vft)s)")
        else:
            with self._read(single=True) as cur:
                expiring = cur.execute(  # kept by every write, like the counts
                    f"SELECT value::bigint > 0 FROM {self._meta} WHERE key = 'expiring'"
                ).fetchone()[0]
            if expiring:  # the clock is read only when some memory can expire
                values["vft"] = _records.to_microseconds(selection.now())
                parts.append(" AND (expires_us IS NULL OR expires_us > %(vft)s)")
        if not parts:
            return self
        view = copy.copy(self)  # shares the pool, the transactions, the label table
        view._selection = selection
        view._f = "".join(parts)
        view._fv = values
        if expiry_only:
            view._expiry_us = now
        return view

    def _filter_args(self, *own: Any) -> tuple[str, tuple[Any, ...]]:
        """The view's row predicate for a statement with positional parameters.

        Args:
            *own: the statement's own parameters, all of them placed before the
                predicate in its text.

        Returns:
            ``(predicate SQL with %s placeholders, own + the predicate's values)``.
        """
        if not self._f:
            return "", own
        sql, values = positional(self._f, self._fv)
        return sql, (*own, *values)

    def _view_filter(self) -> tuple[str, dict[str, Any], bool]:
        """The view's row predicate for a statement with named parameters: ``(SQL,
        parameters, whether the statement text is the same every time)`` (an
        expiry-only view's time goes in as a parameter, so its statements can be
        prepared once; other views' filters are bound too, their text varying)."""
        if self._expiry_us is not None:
            return (
                " AND (expires_us IS NULL OR expires_us > %(now)s)",
                {"now": self._expiry_us}, True,
            )
        if not self._f:
            return "", {}, True
        return self._f, dict(self._fv), False

    def _count_exprs(self, bound: int, upto: int | None) -> tuple[str, str]:
        """SQL expressions (named parameters as :meth:`_view_filter`) for the number
        of embedded rows a search sees (exactly from the meta table for the whole
        table or an expiry-only view, which subtracts its expired rows found through
        their partial index; up to ``bound`` for any other view) and, with ``upto``,
        of all the rows it sees (exactly, or up to ``upto + 1``; else NULL)."""
        meta, t = self._meta, self._t
        if not self._f or self._expiry_us is not None:
            embedded = f"(SELECT value::bigint FROM {meta} WHERE key = 'embedded')"
            count = f"(SELECT value::bigint FROM {meta} WHERE key = 'count')"
            if self._expiry_us is not None:
                embedded += (
                    f" - (SELECT count(*) FROM {t} WHERE expires_us <= %(now)s AND embedded)"
                )
                count += f" - (SELECT count(*) FROM {t} WHERE expires_us <= %(now)s)"
            return embedded, count if upto is not None else "NULL::bigint"
        f = self._f  # its values: :meth:`_view_filter`'s parameters
        count = "NULL::bigint" if upto is None else (
            f"(SELECT count(*) FROM (SELECT 1 FROM {t} WHERE true{f} "
            f"LIMIT {int(upto) + 1}) AS c)"
        )
        embedded = (
            f"(SELECT count(*) FROM (SELECT 1 FROM {t} WHERE embedded{f} "
            f"LIMIT {int(bound)}) AS e)"
        )
        return embedded, count

    def _search_settings(self, cur: Any, ef: int) -> None:
        """Set the index's search breadth (``hnsw.ef_search``) to ``ef`` and let it
        scan on past rows a filter drops (``hnsw.iterative_scan``) for the next
        search on ``cur``: for the transaction inside one (sent with the next
        statement), else for the connection's session when it differs (the common
        case costs nothing). pgvector caps ``ef_search`` at :data:`MAX_EF_SEARCH`:
        a search wanting more candidates keeps the cap and the iterative scan goes on
        past it until the ``LIMIT`` is met (strict order: still nearest first)."""
        ef = min(ef, MAX_EF_SEARCH)
        conn = cur.connection
        if self._current() is not None:
            cur.execute(
                "SELECT set_config('hnsw.ef_search', %s, true), "
                "set_config('hnsw.iterative_scan', 'strict_order', true)", (str(ef),)
            )
            return
        if self._session_ef.get(conn) != ef:
            cur.execute(
                "SELECT set_config('hnsw.ef_search', %s, false), "
                "set_config('hnsw.iterative_scan', 'strict_order', false)", (str(ef),)
            ).fetchone()
            self._session_ef[conn] = ef

    # ------------------------------------------------------------------ schema

    def _sql(self, template: str) -> str:
        """A schema statement template with this store's table names filled in."""
        return (
            template.replace("{t}", self._t).replace("{meta}", self._meta)
            .replace("{links}", self._links)
        )

    def _schema_statements(self) -> list[str]:
        t, meta = self._t, self._meta
        return [
            "CREATE EXTENSION IF NOT EXISTS vector",
            f"""CREATE TABLE {meta} (key text PRIMARY KEY, value text NOT NULL)""",
            f"""CREATE TABLE {t} (
                seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                id text NOT NULL UNIQUE,
                content text NOT NULL,
                embedding vector,
                exact bytea,
                norm float8,
                embedded boolean NOT NULL,
                tagf float8[] NOT NULL,
                tagi int8[] NOT NULL,
                valence float8 GENERATED ALWAYS AS (tagf[1]) STORED,
                arousal float8 GENERATED ALWAYS AS (tagf[2]) STORED,
                dominance float8 GENERATED ALWAYS AS (tagf[3]) STORED,
                created_us bigint GENERATED ALWAYS AS (tagi[1]) STORED,
                retrieval_count bigint GENERATED ALWAYS AS (tagi[5]) STORED,
                pending boolean GENERATED ALWAYS AS ((tagi[7] & 4) <> 0) STORED,
                label text[],
                emotion text GENERATED ALWAYS AS (label[3]) STORED,
                link_targets text[] NOT NULL,
                link_strengths float8[] NOT NULL,
                link_types int2[] NOT NULL,
                metadata jsonb NOT NULL,
                metadata_json text NOT NULL,
                scope text[] NOT NULL DEFAULT '{{}}',
                expires_at timestamptz,
                expires_us bigint,
                terms text[] NOT NULL,
                tfs int4[] NOT NULL,
                doc_len int4 NOT NULL,
                whole text
            ) WITH (fillfactor = {self._fillfactor}, toast_tuple_target = 8160)""",
            f"CREATE INDEX {t}_scope ON {t} USING gin (scope)",
            f"CREATE INDEX {t}_expires ON {t} (expires_us) WHERE expires_us IS NOT NULL",
            f"CREATE INDEX {t}_metadata ON {t} USING gin (metadata jsonb_path_ops)",
            f"CREATE INDEX {t}_terms ON {t} USING gin (terms)",
            f"CREATE INDEX {t}_pending ON {t} (seq) WHERE pending",
            f"CREATE INDEX {t}_embedded ON {t} (seq) WHERE embedded",
            f"CREATE INDEX {t}_novec ON {t} (seq) WHERE embedded AND embedding IS NULL",
            f"CREATE INDEX {t}_created ON {t} (created_us)",
            self._sql(_UNCHANGED_FUNCTION),
            *(self._sql(statement) for statement in _LINKS_STATEMENTS),
            f"INSERT INTO {meta} VALUES ('schema', '{_SCHEMA_NAME}'), "
            f"('version', '{SCHEMA_VERSION}'), ('count', '0'), ('embedded', '0'), "
            "('expiring', '0')",
        ]

    def _ensure_schema(self, conn: Any) -> None:
        """Create the tables on first use; check (and migrate) an existing schema, all
        in one transaction under the store's advisory lock."""
        psycopg = self._psycopg
        try:
            conn.execute("BEGIN")
            try:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,))
                rows = conn.execute(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = current_schema() AND table_name = ANY(%s)",
                    ([self._t, self._meta],),
                ).fetchall()
                found = {r[0] for r in rows}
                if not found:
                    for statement in self._schema_statements():
                        conn.execute(statement)
                else:
                    self._check_schema(conn, found)
                conn.execute("COMMIT")
            except BaseException:
                if not conn.closed and not conn.broken:
                    conn.execute("ROLLBACK")
                raise
        except psycopg.Error as exc:
            raise self._error("creating the schema", exc) from None

    def _check_schema(self, conn: Any, found: set[str]) -> None:
        meta: dict[str, str] = {}
        if self._meta in found:
            cols = {
                r[0] for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND table_name = %s",
                    (self._meta,),
                )
            }
            if cols == {"key", "value"}:
                meta = dict(conn.execute(f"SELECT key, value FROM {self._meta}").fetchall())
        if meta.get("schema") != _SCHEMA_NAME or self._t not in found:
            raise PostgresStoreError(
                f"{self._redacted!r}: the tables {self._t!r}/{self._meta!r} exist but were "
                "not written by emotional_memory's PostgresStore; choose another table= "
                "prefix (nothing was written)"
            )
        try:
            version = int(meta.get("version", ""))
        except ValueError:
            version = -1
        if version > SCHEMA_VERSION or version < 1:
            raise PostgresStoreError(
                f"{self._redacted!r}: schema version {meta.get('version')!r} of "
                f"{self._t!r} is not one this package (version {SCHEMA_VERSION}) can use; "
                "upgrade emotional-memory-jax (nothing was written)"
            )
        while version < SCHEMA_VERSION:  # one transaction: the caller's
            for statement in _MIGRATIONS[version]:
                conn.execute(self._sql(statement))
            version += 1
            conn.execute(
                f"UPDATE {self._meta} SET value = %s WHERE key = 'version'", (str(version),)
            )

    def _stored_dim(self, cur: Any) -> int | None:
        """The embedding dimension (None before the first embedding), cached for the
        store and its views once committed (it never changes after)."""
        if self._dim is not None:
            return self._dim
        tx = self._current()
        if tx is not None and tx.fixed_dim is not None:
            return tx.fixed_dim[0]  # fixed by this transaction, not committed yet
        row = cur.execute(f"SELECT value FROM {self._meta} WHERE key = 'dim'").fetchone()
        if row is None:
            return None
        self._dim = int(row[0])  # committed before this transaction (if any) began
        return self._dim

    def _fix_dim(self, cur: Any, dim: int) -> None:
        """Record the embedding dimension on the first embedding: type the vector
        column and build the HNSW index (inside the writing transaction)."""
        row = cur.execute(
            f"SELECT value FROM {self._meta} WHERE key = 'dim' FOR UPDATE"
        ).fetchone()
        if row is not None:
            self._dim = int(row[0])
            return
        t = self._t
        m, ef = self._hnsw
        cur.execute(f"ALTER TABLE {t} ALTER COLUMN embedding TYPE vector({dim})")
        cur.execute(
            f"CREATE INDEX {t}_hnsw ON {t} USING hnsw (embedding vector_cosine_ops) "
            f"WITH (m = {m}, ef_construction = {ef})"
        )
        cur.execute(f"INSERT INTO {self._meta} VALUES ('dim', %s)", (str(dim),))
        tx = self._current()
        assert tx is not None and tx.write
        tx.fixed_dim = (dim, tx.depth)  # cached for every view once committed

    # ------------------------------------------------------------------ writing

    def _tag_values(self, tag: Any) -> dict[str, Any]:
        """The columns of an emotional tag (its numbers, label and links)."""
        with self._labels_lock:
            floats, ints = _records.encode_tag(tag, self._labels)
        lab = tag.emotion_label
        links = tag.resonance_links
        return {
            "tagf": floats,
            "tagi": ints,
            "label": None if lab is None else [lab.primary, lab.intensity, lab.name],
            "link_targets": [lk.target_id for lk in links],
            "link_strengths": [float(lk.strength) for lk in links],
            "link_types": [_LINK_CODE[lk.link_type] for lk in links],
        }

    def _row_values(self, memory: Memory) -> dict[str, Any]:
        tag = memory.tag
        embedding = memory.embedding
        exact: bytes | None = None
        vector: np.ndarray | None = None
        norm: float | None = None
        if embedding is not None:
            vec = np.asarray(embedding, dtype=np.float64)
            if not vec.size:
                exact = b""
            else:
                with np.errstate(over="ignore", invalid="ignore"):
                    norm = _row_norm(vec)
                f32 = vec.astype(np.float32)
                if _F32_NORM_MIN <= norm <= _F32_NORM_MAX and (f32 == vec).all():
                    vector = f32  # the values themselves: the vector column holds them
                else:
                    exact = _float_bytes(vec)  # float64 values kept beside the index
                    if math.isfinite(norm) and norm > 0.0:
                        unit = (vec / norm).astype(np.float32)
                        if np.isfinite(unit).all() and unit.any():
                            vector = unit
        try:
            metadata_json = json.dumps(memory.metadata, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"metadata must be JSON-serialisable finite values: {exc}") from None
        # PostgreSQL text (and JSONB) cannot hold NUL characters: refuse them up front
        for name, value in (("id", memory.id), ("content", memory.content),
                            ("metadata", memory.metadata)):
            if _has_nul(value):
                raise ValueError(
                    f"{name} contains a NUL character, which PostgreSQL text cannot store"
                )
        counts: dict[str, int] = {}
        tokens = tokenize(memory.content)
        for token in tokens:
            key = indexed_term(token)
            counts[key] = counts.get(key, 0) + 1
        scope = memory.scope
        return {
            "id": memory.id,
            "content": memory.content,
            "embedding": vector,
            "exact": exact,
            "norm": norm,
            "embedded": bool(embedding),
            **self._tag_values(tag),
            "metadata": metadata_json,
            "metadata_json": metadata_json,
            "scope": list(scope),
            "expires_at": memory.expires_at,
            "expires_us": None if memory.expires_at is None
            else _records.to_microseconds(memory.expires_at),
            "terms": list(counts),
            "tfs": list(counts.values()),
            "doc_len": len(tokens),
            "whole": None if _records.fits(memory) else dump_memory(memory),
        }

    _FIELDS = (
        "id", "content", "embedding", "exact", "norm", "embedded", "tagf", "tagi", "label",
        "link_targets", "link_strengths", "link_types", "metadata", "metadata_json",
        "scope", "expires_at", "expires_us", "terms", "tfs", "doc_len", "whole",
    )

    def _statements(self) -> tuple[str, str]:
        """The upsert and update statements; both keep the meta table's counts of
        memories and of embedded memories current in the same statement."""
        fields = self._FIELDS
        values = [
            "%(metadata)s::jsonb" if f == "metadata" else f"%({f})s" for f in fields
        ]
        excluded = ", ".join(f"{f} = excluded.{f}" for f in fields[1:])
        t, meta = self._t, self._meta
        # ``old`` reads the row as it was before the statement (one snapshot)
        counts = (
            f"UPDATE {meta} SET value = (value::bigint + d.delta)::text FROM ("
            "SELECT 'count' AS key, (SELECT count(*) FROM up) - (SELECT count(*) FROM old) "
            "AS delta UNION ALL SELECT 'embedded', (SELECT count(*) FROM up WHERE embedded) "
            "- (SELECT count(*) FROM old WHERE embedded) UNION ALL SELECT 'expiring', "
            "(SELECT count(*) FROM up WHERE expires_us IS NOT NULL) "
            "- (SELECT count(*) FROM old WHERE expires_us IS NOT NULL)) AS d "
            f"WHERE {meta}.key = d.key AND d.delta <> 0"  # most writes change no count
        )
        upsert = (
            f"WITH old AS (SELECT embedded, expires_us FROM {t} WHERE id = %(id)s), "
            f"up AS (INSERT INTO {t} ({', '.join(fields)}) "
            f"VALUES ({', '.join(values)}) ON CONFLICT (id) DO UPDATE SET {excluded} "
            f"RETURNING embedded, expires_us) {counts}"
        )
        sets = ", ".join(f"{f} = {v}" for f, v in zip(fields[1:], values[1:], strict=True))
        update = (
            f"WITH old AS (SELECT embedded, expires_us FROM {t} WHERE id = %(id)s), "
            f"up AS (UPDATE {t} SET {sets} WHERE id = %(id)s RETURNING embedded, expires_us) "
            f"{counts}"
        )
        return upsert, update

    def _put(self, memory: Memory, *, must_exist: bool) -> None:
        if not isinstance(memory, Memory):
            raise TypeError(f"memory must be a Memory, got {type(memory).__name__}")
        tx = self._current()
        if tx is None:
            with self.transaction():
                self._put(memory, must_exist=must_exist)
            return
        if not tx.write:
            raise RuntimeError("cannot write inside a read")
        cached = self._cached_row(tx, memory.id)
        if must_exist and cached is not None and self._only_tag_differs(cached, memory):
            # links, counters, affect: only the tag's columns are written (the row
            # is known to exist and to be visible here)
            tag = self._tag_values(memory.tag)
            tx.queued.append((self._tag_sql, {"id": memory.id, **tag}))
            tx.rows[memory.id] = (
                *cached[:4], tag["tagf"], tag["tagi"], tag["label"], tag["link_targets"],
                tag["link_strengths"], tag["link_types"], *cached[10:],
            )
            return
        values = self._row_values(memory)
        embedding = memory.embedding
        psycopg = self._psycopg
        try:
            if embedding:
                dim = self._dim
                if dim is None:
                    with self._write() as cur:
                        dim = self._stored_dim(cur)
                        if dim is None:
                            self._fix_dim(cur, len(embedding))
                            dim = len(embedding)
                if len(embedding) != dim:
                    raise ValueError(
                        f"embedding length mismatch: memory has {len(embedding)}, "
                        f"the store holds dimension {dim}"
                    )
            if cached is not None:
                pass  # locked or written by this transaction, and visible here
            elif (
                self._expiry_us is not None and not must_exist
                and self._nothing_expires(tx)
            ):
                pass  # an expiry-only view while no memory expires: it sees every row
            elif self._selection is not None:  # a view writes only what it sees
                f, f_values = self._filter_args()  # the predicate's values come first
                with self._write() as cur:
                    row = cur.execute(
                        f"SELECT (true{f}) FROM {self._t} WHERE id = %s FOR UPDATE",
                        (*f_values, memory.id),
                    ).fetchone()
                if (row is None and must_exist) or (row is not None and not row[0]):
                    if must_exist:
                        raise KeyError(memory.id)
                    raise ValueError(f"memory id {memory.id!r} cannot be written from this view")
            elif must_exist and memory.id not in tx.known:
                with self._write() as cur:
                    cur.execute(
                        f"SELECT 1 FROM {self._t} WHERE id = %s FOR UPDATE", (memory.id,)
                    )
                    if cur.fetchone() is None:
                        raise KeyError(memory.id)
            if values["expires_us"] is not None:
                tx.nothing_expires = False
            # queued: sent with the transaction's next read or at its commit
            tx.queued.append((self._update_sql if must_exist else self._upsert_sql, values))
            tx.known.add(memory.id)
            old = tx.rows.get(memory.id)
            tx.rows[memory.id] = (
                None if old is None else old[0], memory.id, values["content"],
                values["exact"], values["tagf"], values["tagi"], values["label"],
                values["link_targets"], values["link_strengths"], values["link_types"],
                values["metadata_json"], values["whole"], values["embedding"],
                values["scope"], values["expires_us"],
            )
        except psycopg.OperationalError as exc:
            raise self._error("saving a memory", exc) from None

    def _cached_row(self, tx: _Tx, memory_id: str) -> tuple[Any, ...] | None:
        """The transaction's current row of a memory (``_MEMORY_COLUMNS``) when it has
        it and this store (view) sees it (the whole table or an expiry-only view;
        other views always ask the server)."""
        row = tx.rows.get(memory_id)
        if row is None:
            return None
        if self._expiry_us is not None:
            expires = row[14]
            return row if expires is None or expires > self._expiry_us else None
        return None if self._f else row

    @staticmethod
    def _only_tag_differs(row: tuple[Any, ...], memory: Memory) -> bool:
        """Whether ``memory`` equals the stored ``row`` (``_MEMORY_COLUMNS``) in every
        field but its tag (then only the tag's columns need writing)."""
        if row[11] is not None or not _records.fits(memory) or memory.content != row[2]:
            return False
        if tuple(row[13]) != memory.scope:
            return False
        expires = memory.expires_at
        if (None if expires is None else _records.to_microseconds(expires)) != row[14]:
            return False
        stored = _embedding_of(row[3], row[12])
        if memory.embedding is None or stored is None:
            if (memory.embedding is None) != (stored is None):
                return False
        elif len(memory.embedding) != stored.shape[0] or not np.array_equal(
            np.asarray(memory.embedding, dtype=np.float64), stored
        ):
            return False
        try:
            metadata = json.dumps(memory.metadata, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError):
            return False
        return bool(metadata == row[10])

    def _nothing_expires(self, tx: _Tx) -> bool:
        """Whether no stored memory has an expiry (read once per write transaction,
        which holds the store's write lock: only its own writes change it)."""
        if tx.nothing_expires is None:
            with self._write() as cur:
                tx.nothing_expires = bool(cur.execute(
                    f"SELECT value::bigint = 0 FROM {self._meta} WHERE key = 'expiring'"
                ).fetchone()[0])
        return tx.nothing_expires

    def save(self, memory: Memory) -> None:
        """Insert a memory, or replace the one with the same id (keeping its position).

        Args:
            memory: the memory.

        Raises:
            TypeError: not a :class:`Memory`.
            ValueError: an embedding of another dimension than the store's, or
                metadata that is not JSON.
        """
        self._put(memory, must_exist=False)

    def update(self, memory: Memory) -> None:
        """Replace an existing memory in place.

        Args:
            memory: the new version; its id must be stored.

        Raises:
            KeyError: no memory has this id.
            ValueError: as :meth:`save`.
        """
        self._put(memory, must_exist=True)

    def delete(self, memory_id: str) -> bool:
        """Remove a memory.

        Args:
            memory_id: the id.

        Returns:
            True when it existed.
        """
        f, args = self._filter_args(memory_id)
        with self._write() as cur:
            row = cur.execute(
                f"WITH d AS (DELETE FROM {self._t} WHERE id = %s{f} "
                "RETURNING embedded, expires_us) "
                f"UPDATE {self._meta} SET value = (value::bigint - CASE key "
                "WHEN 'count' THEN (SELECT count(*) FROM d) "
                "WHEN 'embedded' THEN (SELECT count(*) FROM d WHERE embedded) "
                "ELSE (SELECT count(*) FROM d WHERE expires_us IS NOT NULL) END)::text "
                "WHERE key IN ('count', 'embedded', 'expiring') "
                "RETURNING (SELECT count(*) FROM d)",
                args,
            ).fetchone()
        tx = self._current()
        if tx is not None:
            tx.known.discard(memory_id)
            tx.rows.pop(memory_id, None)
        return bool(row[0])

    # ------------------------------------------------------------------ reading

    def _memory(self, row: Sequence[Any]) -> Memory:
        (_, mid, content, exact, tagf, tagi, label, targets, strengths, types,
         metadata_json, whole, vector, scope, expires_us) = row
        if whole is not None:
            return load_memory(whole)
        ints = list(tagi)
        if label is not None:
            with self._labels_lock:
                ints[_records.I_LABEL] = self._labels.intern(label)
        values = _embedding_of(exact, vector)
        embedding = None if values is None else values.tolist()
        links = None
        if targets:
            links = _records.pack_link_columns(
                tuple(targets), tuple(strengths), bytes(int(c) for c in types)
            )
        metadata = json.loads(metadata_json)
        return _records.decode_memory(
            mid, content, embedding, list(tagf), ints, links, metadata or None, self._labels,
            tuple(scope), expires_us,
        )

    counts_candidates = True
    """:meth:`candidate_bank` counts the memories in the same round trip
    (``everything_upto``; the engine then asks no ``len`` first)."""

    _TAG_COLUMNS = ("tagf", "tagi", "label", "link_targets", "link_strengths", "link_types")
    _TAG_TYPES = ("float8[]", "int8[]", "text[]", "text[]", "float8[]", "int2[]")

    def modify_memories(
        self, memory_ids: Sequence[str], change: Any
    ) -> list[Memory]:
        """A read-modify-write: ``change(current memories)`` written back atomically.

        Outside a transaction, when every id was among the rows this thread's last
        :meth:`candidate_bank` read (a retrieve's winners), the memories are rebuilt
        from those rows and, when ``change`` altered their tags only, the new tags
        are written in ONE round trip: a transaction (under the store's write lock)
        whose statement updates each row only if it is still the version that was
        read (its ``xmin``) and fails as a whole otherwise. Then, or in any other
        case, the memories are read again under row locks (``FOR UPDATE``) in a write
        transaction, changed again, and written (what a plain read-modify-write does).

        Args:
            memory_ids: the ids (missing ones skipped).
            change: maps the current memories (in ``memory_ids`` order) to their new
                versions (same ids, same order); pure: it may run twice.

        Returns:
            What ``change`` returned for the memories written.
        """
        ids = list(memory_ids)
        found = getattr(self._local, "found", None)
        self._local.found = None  # once: the rows are stale after any write
        if (
            found is not None and ids and self._current() is None
            and all(mid in found for mid in ids) and len(set(ids)) == len(ids)
        ):
            rows = [found[mid] for mid in ids]
            old = [self._memory(_search_row_memory_columns(r)) for r in rows]
            new: list[Memory] = change(old)
            if self._write_tags_if_unchanged(rows, old, new):
                return new
        with self.transaction():
            new = change(self.memories(ids))
            for memory in new:
                self.update(memory)
        return new

    def _write_tags_if_unchanged(
        self, rows: list[Any], old: list[Memory], new: list[Memory]
    ) -> bool:
        """Write ``new``'s tags over rows still as read, in one round trip (see
        :meth:`modify_memories`); False (nothing written) when some row changed since,
        or when ``new`` differs from ``old`` in more than tags."""
        if len(new) != len(old):
            return False
        fields = [f for f in Memory.model_fields if f != "tag"]
        for r, o, n in zip(rows, old, new, strict=True):
            if not isinstance(n, Memory) or n.id != o.id or r[14] is not None:
                return False
            if any(
                getattr(n, f) is not getattr(o, f) and getattr(n, f) != getattr(o, f)
                for f in fields
            ) or not _records.fits(n):
                return False
        params: list[Any] = []
        for r, n in zip(rows, new, strict=True):
            values = self._tag_values(n.tag)
            params += [n.id, r[17], *(values[c] for c in self._TAG_COLUMNS)]
        typed = ", ".join(f"%s::{ty}" for ty in self._TAG_TYPES)
        row = f"(%s, %s, {typed})"
        sets = ", ".join(f"{c} = v.{c}" for c in self._TAG_COLUMNS)
        # One statement, so one transaction of its own: the store's write lock (joined
        # in, so taken before any row is written), the update of the rows still at the
        # version read, and the check that fails it whole when some row was not.
        sql = (
            "WITH l AS MATERIALIZED (SELECT pg_advisory_xact_lock(%s) AS locked), "
            f"v (id, version, {', '.join(self._TAG_COLUMNS)}) AS (VALUES "
            + ", ".join([row] * len(new))
            + f"), u AS (UPDATE {self._t} AS m SET {sets} FROM v, l "
            "WHERE m.id = v.id AND m.xmin::text = v.version RETURNING 1) "
            f"SELECT {self._t}_unchanged((SELECT count(*) FROM u), %s)"
        )
        params = [self._lock_key, *params, len(new)]
        psycopg = self._psycopg
        with self._connection() as conn:
            try:
                with _prepared(conn, True), conn.cursor(binary=True) as cur:
                    cur.execute(sql, params, prepare=True).fetchone()
            except psycopg.errors.SerializationFailure:
                return False  # rolled back whole by the server
            except psycopg.OperationalError as exc:
                raise self._error("a transaction", exc) from None
        return True

    def get(self, memory_id: str) -> Memory | None:
        """A memory by id (None when absent).

        Args:
            memory_id: the id.

        Returns:
            The memory.
        """
        found = self.memories([memory_id])
        return found[0] if found else None

    def memories(self, memory_ids: Sequence[str]) -> list[Memory]:
        """The stored memories of ``memory_ids``, in that order (missing ones skipped).

        Inside a write transaction the rows are locked (in insertion order, so two
        writers never deadlock) until it ends.

        Args:
            memory_ids: the ids.

        Returns:
            The memories.
        """
        ids = list(memory_ids)
        if not ids:
            return []
        lock = self._lock_rows()
        tx = self._current()
        by_id: dict[str, Any] = {}
        if lock and tx is not None:  # rows this transaction holds already
            for mid in ids:
                row = self._cached_row(tx, mid)
                if row is not None:
                    by_id[mid] = row
        missing = [mid for mid in dict.fromkeys(ids) if mid not in by_id]
        if missing:
            with self._read(single=True) as cur:
                f, args = self._filter_args(missing)
                rows = cur.execute(
                    f"SELECT {_MEMORY_COLUMNS} FROM {self._t} WHERE id = ANY(%s){f} "
                    f"ORDER BY seq{lock}",
                    args,
                ).fetchall()
            self._locked_rows(rows, lock)
            by_id.update((r[1], r) for r in rows)
        return [self._memory(by_id[i]) for i in ids if i in by_id]

    def _locked_rows(self, rows: Sequence[Any], lock: str) -> None:
        """Note rows (``_MEMORY_COLUMNS``) a write transaction read and locked."""
        if lock:
            tx = self._current()
            if tx is not None:
                for r in rows:
                    tx.known.add(r[1])
                    tx.rows[r[1]] = tuple(r)

    def list_all(self) -> list[Memory]:
        """Every memory, in insertion order.

        Returns:
            A new list.
        """
        lock = self._lock_rows()
        with self._read(single=True) as cur:
            f, args = self._filter_args()
            rows = cur.execute(
                f"SELECT {_MEMORY_COLUMNS} FROM {self._t} WHERE true{f} "
                f"ORDER BY seq{lock}",
                args,
            ).fetchall()
        self._locked_rows(rows, lock)
        return [self._memory(r) for r in rows]

    def list_page(self, offset: int, limit: int) -> list[Memory]:
        """``list_all()[offset:offset + limit]``, reading about ``offset + limit`` rows.

        First the rows in insertion order are walked through the primary key, at
        most a few times ``offset + limit`` of them, keeping the ones the view sees:
        when they hold the page (a scope that is not rare in the table), that is
        the answer. Otherwise (a sparse scope) the page is read through the view's
        indexes (the scope's GIN index), sorted: O(the scope's size).

        Args:
            offset: memories skipped first (>= 0).
            limit: most memories returned (>= 0).

        Returns:
            The page, in insertion order.
        """
        if limit <= 0:
            return []
        lock = self._lock_rows()
        wanted = offset + limit
        with self._read() as cur:  # one snapshot for the walk and the page's rows
            f, args = self._filter_args()
            seqs: list[int] = []
            if not lock:  # (a locking read cannot walk a subquery)
                budget = max(_PAGE_WALK_MIN, _PAGE_WALK_FACTOR * wanted)
                seqs = [r[0] for r in cur.execute(
                    f"SELECT seq FROM (SELECT * FROM {self._t} ORDER BY seq LIMIT %s) "
                    f"AS walked WHERE true{f} ORDER BY seq LIMIT %s",
                    (budget, *args, wanted),
                ).fetchall()]
            if len(seqs) == wanted:  # the walk held the page: read just its rows
                rows = cur.execute(
                    f"SELECT {_MEMORY_COLUMNS} FROM {self._t} WHERE seq = ANY(%s) ORDER BY seq",
                    (seqs[offset:],),
                ).fetchall()
            else:
                rows = cur.execute(
                    f"SELECT {_MEMORY_COLUMNS} FROM {self._t} WHERE true{f} "
                    f"ORDER BY seq LIMIT %s OFFSET %s{lock}",
                    (*args, limit, offset),
                ).fetchall()
        self._locked_rows(rows, lock)
        return [self._memory(r) for r in rows]

    def __len__(self) -> int:
        """Number of memories stored."""
        with self._read(single=True) as cur:
            if self._expiry_us is not None:
                _, count = self._count_exprs(0, 0)
                row = cur.execute(f"SELECT {count}", self._view_filter()[1]).fetchone()
            elif self._f:
                f, args = self._filter_args()
                row = cur.execute(f"SELECT count(*) FROM {self._t} WHERE true{f}", args).fetchone()
            else:
                row = cur.execute(
                    f"SELECT value::bigint FROM {self._meta} WHERE key = 'count'"
                ).fetchone()
        return int(row[0])

    def count(self) -> int:
        """Number of memories stored (same as ``len(store)``)."""
        return len(self)

    def __contains__(self, memory_id: object) -> bool:
        """Whether a memory with this id is stored."""
        if not isinstance(memory_id, str):
            return False
        with self._read(single=True) as cur:
            f, args = self._filter_args(memory_id)
            row = cur.execute(f"SELECT 1 FROM {self._t} WHERE id = %s{f}", args).fetchone()
        return row is not None

    # ------------------------------------------------------------------ search

    def _check_query(self, cur: Any, embedding: Any) -> np.ndarray:
        query = np.asarray(embedding if embedding is not None else [], dtype=np.float64)
        if query.ndim != 1:
            raise ValueError(f"embedding must be one-dimensional, got shape {query.shape}")
        dim = self._stored_dim(cur)
        if query.shape[0] and dim is not None and query.shape[0] != dim:
            raise ValueError(
                f"embedding length mismatch: query has {query.shape[0]}, "
                f"the store holds dimension {dim}"
            )
        return query

    def _search_rows(
        self, cur: Any, query: np.ndarray, k: int, upto: int | None = None
    ) -> tuple[list[Any], int | None]:
        """The ``k`` best embedded rows (``_SEARCH_COLUMNS``), exact float64 order.

        With ``upto``, also the number of memories this store (view) holds, read in
        the same statement (exact, or any number above ``upto`` once it exceeds it);
        when it is at most ``upto`` the rows are instead every memory it holds, in
        insertion order. Without ``upto`` the number is None.

        One statement in the common case (a table above ``exact_rows`` embedded
        memories): the HNSW search over-fetching ``k + margin`` rows, with the counts
        as two more columns (prepared once per connection for the whole table and
        expiry-only views); the rows are then re-ranked exactly.
        """
        t = self._t
        if k <= 0 and upto is None:
            return [], None
        query_norm = _norm(query) if query.shape[0] else 0.0
        zero = query_norm == 0.0 or not math.isfinite(query_norm)
        want = max(k, 0) + self._margin
        bound = max(self._exact_rows, want) + 1
        view, params, fixed = self._view_filter()
        embedded_expr, count_expr = self._count_exprs(bound, upto)
        rows: list[Any] = []
        total: int | None = None
        count: int | None = None
        if k > 0 and not zero:
            self._search_settings(cur, max(self._ef_search, want))
            unit = (query / query_norm).astype(np.float32)
            # prepared once the vector column is typed (its first embedding changes
            # the result type, which a prepared statement may not see)
            prepare = fixed and self._current() is None and self._dim is not None
            with _prepared(cur.connection, prepare):
                found = cur.execute(
                    f"SELECT {_SEARCH_COLUMNS}, {embedded_expr}, {count_expr} FROM {t} "
                    f"WHERE embedding IS NOT NULL{view} ORDER BY embedding <=> %(q)s "
                    f"LIMIT {int(want)}",
                    {**params, "q": unit},
                    prepare=prepare,
                ).fetchall()
            if found:
                total, count = found[0][-2], found[0][-1]
                rows = [r[:-2] for r in found]
        if total is None:  # no row came back to carry the counts
            total, count = cur.execute(
                f"SELECT {embedded_expr}, {count_expr}", params
            ).fetchone()
        total = int(total)
        count = None if count is None else int(count)
        if count is not None and count <= int(upto or 0):
            everything = cur.execute(
                f"SELECT {_SEARCH_COLUMNS} FROM {t} WHERE true{view} ORDER BY seq", params
            ).fetchall()
            return list(everything), count
        if k <= 0 or total == 0:
            return [], count
        if zero:  # every similarity is 0 (or NaN, counting 0): insertion order
            rows = cur.execute(
                f"SELECT {_SEARCH_COLUMNS} FROM {t} WHERE embedded{view} ORDER BY seq "
                f"LIMIT {int(k)}", params
            ).fetchall()
            return list(rows), count
        if total < bound:  # small enough to rank every row exactly
            rows = cur.execute(
                f"SELECT {_SEARCH_COLUMNS} FROM {t} WHERE embedded{view} ORDER BY seq", params
            ).fetchall()
            return self._rank(query, query_norm, rows, k)[0], count
        rows.sort(key=lambda r: r[0])
        best, sims = self._rank(query, query_norm, rows, k)
        if len(best) < k or sims[-1] <= 0.0:
            # embedded rows without a direction (zero, NaN, inf: not in the index)
            # count as similarity 0: they may rank among these
            rows += cur.execute(
                f"SELECT {_SEARCH_COLUMNS} FROM {t} WHERE embedded AND embedding IS NULL"
                f"{view}", params
            ).fetchall()
            rows.sort(key=lambda r: r[0])
            best, _ = self._rank(query, query_norm, rows, k)
        return best, count

    @staticmethod
    def _rank(
        query: np.ndarray, query_norm: float, rows: list[Any], k: int
    ) -> tuple[list[Any], np.ndarray]:
        """Rows (``_SEARCH_COLUMNS``, in seq order) ranked by exact cosine: the best k,
        and their similarities."""
        if not rows:
            return [], np.zeros((0,))
        vectors = np.empty((len(rows), query.shape[0]), dtype=np.float64)
        for i, r in enumerate(rows):
            vectors[i] = _embedding_of(r[2], r[8])
        norms = np.fromiter((r[7] for r in rows), np.float64, len(rows))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            dots = np.multiply(vectors, query).sum(axis=1)
            sims = dots / (norms * query_norm)
        sims = np.where(np.isnan(sims) | (norms == 0.0), 0.0, sims)
        order = np.argsort(-sims, kind="stable")[:k]
        return [rows[i] for i in order.tolist()], sims[order]

    def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        """Nearest embedded memories by cosine similarity (SPEC 5), best first.

        Memories without an embedding are skipped; ``top_k <= 0`` gives ``[]``; a
        zero-norm query gives the first ``top_k`` embedded memories in insertion order;
        otherwise exact float64 cosine ranks them (NaN as 0, ties by insertion order)
        over every row up to ``exact_rows`` embedded memories, over the HNSW
        candidates above.

        Args:
            embedding: the (D,) query.
            top_k: how many at most.

        Returns:
            The memories.

        Raises:
            TypeError: ``top_k`` is not an int.
            ValueError: the query's length differs from the store's dimension.
        """
        if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer):
            raise TypeError(f"top_k must be an int, got {type(top_k).__name__}")
        with self._read() as cur:
            query = self._check_query(cur, embedding)
            rows, _ = self._search_rows(cur, query, int(top_k))
        self._lock_found(rows)
        return [self._memory(_search_row_memory_columns(r)) for r in rows]

    def _lock_found(self, rows: Sequence[Any]) -> None:
        """Inside a write transaction, lock the rows (``_SEARCH_COLUMNS``) a search
        returned (``FOR UPDATE``), queued like a write: sent before anything this
        transaction writes next. The rows read are current already (every writer
        holds the store's write lock, which this transaction has)."""
        tx = self._current()
        if tx is None or not tx.write or not rows:
            return
        tx.queued.append((
            f"SELECT 1 FROM {self._t} WHERE seq = ANY(%(seqs)s) ORDER BY seq FOR UPDATE",
            {"seqs": sorted({r[0] for r in rows})},
        ))
        tx.known.update(r[1] for r in rows)
        for r in rows:
            tx.rows[r[1]] = _search_row_memory_columns(r)

    def search_by_embedding_batch(
        self,
        embeddings: Sequence[Sequence[float] | None],
        top_k: int,
        *,
        visible_until: Sequence[str] | None = None,
    ) -> list[list[Memory]]:
        """One :meth:`search_by_embedding` per query, all in one transaction whose
        index searches travel together (pipeline mode).

        Args:
            embeddings: the (D,) queries (None or empty: insertion order).
            top_k: how many memories per query at most.
            visible_until: per query, the id of the last memory (in insertion order)
                it may see (``encode_batch``: each new memory sees the memories stored
                up to itself); None: every memory.

        Returns:
            The memories of each query, best first.
        """
        found = self._search_batch_rows(embeddings, top_k, visible_until=visible_until)
        memories = {
            r[0]: self._memory(_search_row_memory_columns(r)) for rows in found for r in rows
        }
        return [[memories[r[0]] for r in rows] for rows in found]

    def _search_batch_rows(
        self,
        embeddings: Sequence[Sequence[float] | None],
        top_k: int,
        *,
        visible_until: Sequence[str] | None = None,
    ) -> list[list[Any]]:
        """:meth:`search_by_embedding_batch` as rows (``_SEARCH_COLUMNS``), locked
        inside a write transaction (no memory built)."""
        if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer):
            raise TypeError(f"top_k must be an int, got {type(top_k).__name__}")
        n = len(embeddings)
        if visible_until is not None and len(visible_until) != n:
            raise ValueError("visible_until must have one id per query")
        with self._read() as cur:
            limits: list[int | None] = [None] * n
            if visible_until is not None:
                seq_of = dict(cur.execute(
                    f"SELECT id, seq FROM {self._t} WHERE id = ANY(%s)",
                    (list(dict.fromkeys(visible_until)),),
                ).fetchall())
                limits = [seq_of.get(mid, -1) for mid in visible_until]
            queries = [self._check_query(cur, e) for e in embeddings]
            found = self._search_many(cur, queries, int(top_k), limits)
        unique = {r[0]: r for rows in found for r in rows}
        self._lock_found(list(unique.values()))
        return found

    def _search_many(
        self, cur: Any, queries: list[np.ndarray], k: int, limits: list[int | None]
    ) -> list[list[Any]]:
        """:meth:`_search_rows` of many queries, each over the rows ``seq <= limit``;
        the index searches are sent together and read back in one round trip."""
        t = self._t
        out: list[list[Any]] = [[] for _ in queries]
        if k <= 0 or not queries:
            return out
        want = k + self._margin
        bound = max(self._exact_rows, want) + 1
        view, params, _ = self._view_filter()
        self._search_settings(cur, max(self._ef_search, want))
        embedded_expr, _ = self._count_exprs(bound, None)
        total = int(cur.execute(f"SELECT {embedded_expr}", params).fetchone()[0])
        if total == 0:
            return out
        top = max((x for x in limits if x is not None), default=None)
        if total < bound:  # every row, once, ranked per query
            everything = cur.execute(
                f"SELECT {_SEARCH_COLUMNS} FROM {t} WHERE embedded{view} "
                + ("AND seq <= %(top)s " if top is not None else "")
                + "ORDER BY seq",
                {**params, "top": top},
            ).fetchall()
        cursors: list[Any] = []
        norms: list[float] = []
        for i, query in enumerate(queries):
            norm = _norm(query) if query.shape[0] else 0.0
            norms.append(norm)
            limit = limits[i]
            if limit is not None and limit < 0:
                cursors.append(None)
                continue
            visible = view + ("" if limit is None else " AND seq <= %(limit)s")
            bound_params = {**params, "limit": limit}
            if norm == 0.0 or not math.isfinite(norm):
                c = cur.connection.cursor(binary=True)
                c.execute(
                    f"SELECT {_SEARCH_COLUMNS} FROM {t} WHERE embedded{visible} "
                    f"ORDER BY seq LIMIT {int(k)}", bound_params,
                )
                cursors.append(c)
            elif total < bound:
                cursors.append(None)
            else:
                c = cur.connection.cursor(binary=True)
                c.execute(
                    f"SELECT {_SEARCH_COLUMNS} FROM {t} WHERE embedding IS NOT NULL"
                    f"{visible} ORDER BY embedding <=> %(q)s LIMIT {int(want)}",
                    {**bound_params, "q": (query / norm).astype(np.float32)},
                )
                cursors.append(c)
        directionless: list[Any] | None = None  # embedded rows not in the index
        for i, query in enumerate(queries):
            c = cursors[i]
            limit = limits[i]
            if limit is not None and limit < 0:
                continue
            norm = norms[i]
            if norm == 0.0 or not math.isfinite(norm):
                out[i] = list(c.fetchall())
            elif c is None:  # small table: rank the visible rows exactly
                rows = everything if limit is None else [r for r in everything if r[0] <= limit]
                out[i] = self._rank(query, norm, rows, k)[0]
            else:
                rows = sorted(c.fetchall(), key=lambda r: r[0])
                best, sims = self._rank(query, norm, rows, k)
                if len(best) < k or sims[-1] <= 0.0:  # they count as similarity 0
                    if directionless is None:
                        directionless = cur.execute(
                            f"SELECT {_SEARCH_COLUMNS} FROM {t} WHERE embedded AND "
                            f"embedding IS NULL{view}", params,
                        ).fetchall()
                    rows = sorted(
                        rows + [r for r in directionless if limit is None or r[0] <= limit],
                        key=lambda r: r[0],
                    )
                    best, _ = self._rank(query, norm, rows, k)
                out[i] = best
            if c is not None:
                c.close()
        return out

    def _row_candidates(self, rows: Sequence[Any]) -> LinkCandidates:
        """The :class:`LinkCandidates` of search rows (``_SEARCH_COLUMNS``), as
        :func:`memory_candidates` makes them of the rows' memories."""
        if any(r[14] is not None for r in rows):  # a shape only the memory holds
            return memory_candidates([self._memory(_search_row_memory_columns(r)) for r in rows])
        ids = [r[1] for r in rows]
        vectors: list[np.ndarray | None] = []
        for r in rows:
            vec = _embedding_of(r[2], r[8])
            vectors.append(None if vec is None or not vec.size else vec)
        return LinkCandidates(
            ids=ids,
            vectors=vectors,
            affects=[tuple(r[3][_records.F_AFFECT]) for r in rows],
            times_us=[int(r[4][_records.I_TIMESTAMP]) for r in rows],
            keys=ids,
        )

    def row_linker(self, block_size: int) -> _PostgresLinker:
        """The linker ``encode_batch`` uses (see :class:`_PostgresLinker`).

        Args:
            block_size: memories saved and searched together.

        Returns:
            The linker.
        """
        return _PostgresLinker(self, block_size)

    # ------------------------------------------------------------------ columns

    def candidate_bank(
        self,
        embedding: Sequence[float] | np.ndarray | None,
        limit: int | None,
        now: datetime,
        *,
        also: Sequence[str] = (),
        lexical: LexicalQuery | None = None,
        with_memories: bool = False,
        everything_upto: int | None = None,
    ) -> CandidateBank:
        """The retrieval candidates of a query as columns, in one snapshot (see
        :meth:`~emotional_memory.stores.columnar.ColumnarStore.candidate_bank`).

        The store counts its memories in the same round trip
        (:attr:`counts_candidates`): with ``everything_upto``, a store (view) holding
        at most that many memories answers as with ``limit=None``, and the bank's
        ``total`` is the number of memories it holds.

        Args:
            embedding: the query embedding, shape (D,), or None.
            limit: the semantic shortlist size, or None for every memory.
            now: aware datetime for the ages.
            also: ids appended when not already candidates (unknown ids skipped).
            lexical: the BM25 shortlist and statistics, read in the same snapshot.
            with_memories: also rebuild the candidates' memories.
            everything_upto: see above (None: ``limit`` decides, ``total`` is None).

        Returns:
            The :class:`CandidateBank`.

        Raises:
            ValueError: a query whose length differs from the stored embeddings, or a
                lexical analysis other than the plain one (this store keeps the plain
                terms only: ``lexical_stemmer`` is not supported here yet).
        """
        if lexical is not None and getattr(lexical, "analysis", "none") != "none":
            raise ValueError(
                f"PostgresStore keeps the plain lexical analysis only; got analysis "
                f"{lexical.analysis!r} (set RetrievalConfig.lexical_stemmer='none')"
            )
        # A plain semantic shortlist is one search (its row count only picks exact or
        # index search): no snapshot needed. Anything read besides needs one.
        plain = limit is not None and not also and lexical is None and not with_memories
        total: int | None = None
        with self._read(single=plain) as cur:
            t = self._t
            f, f_args = self._filter_args()
            everything = f"SELECT {_SEARCH_COLUMNS} FROM {t} WHERE true{f} ORDER BY seq"
            if limit is None:
                ordered: list[Any] = list(cur.execute(everything, f_args).fetchall())
                if everything_upto is not None:
                    total = len(ordered)
            else:
                query = self._check_query(cur, embedding)
                ordered, total = self._search_rows(cur, query, int(limit), everything_upto)
                if total is not None and total <= int(everything_upto or 0):
                    ordered = list(cur.execute(everything, f_args).fetchall())
                    total = len(ordered)
            extra = list(also)
            if lexical is not None and lexical.shortlist and lexical.terms:
                extra += self._lexical_search(
                    cur, lexical.terms, lexical.shortlist, lexical.k1, lexical.b
                )
            have = {r[1] for r in ordered}
            wanted = [mid for mid in dict.fromkeys(extra) if mid not in have]
            if wanted:
                found = {r[1]: r for r in cur.execute(
                    f"SELECT {_SEARCH_COLUMNS} FROM {t} WHERE id = ANY(%s){f}", (wanted, *f_args)
                ).fetchall()}
                ordered += [found[mid] for mid in wanted if mid in found]
            bank = self._bank(ordered, embedding, now, self._stored_dim(cur))
            if with_memories:
                bank = replace(bank, memories=[
                    self._memory(_search_row_memory_columns(r)) for r in ordered
                ])
            if lexical is not None and lexical.statistics:
                bank = replace(bank, lexical=self._lexical_inputs(cur, lexical.terms, bank.ids))
        if total is not None:
            bank = replace(bank, total=total)
        if self._current() is None:  # what modify_memories may start from
            self._local.found = {r[1]: r for r in ordered}
        return bank

    def _bank(
        self,
        rows: list[Any],
        embedding: Sequence[float] | np.ndarray | None,
        now: datetime,
        store_dim: int | None,
    ) -> CandidateBank:
        """The bank of ``rows`` (``_BANK_COLUMNS``, candidate order)."""
        n = len(rows)
        ids: list[str] = [r[1] for r in rows]
        has = [bool(r[9]) for r in rows]
        query_dim = len(embedding) if embedding is not None else 0
        if query_dim and any(has) and store_dim is not None and store_dim != query_dim:
            raise ValueError(
                f"embedding length mismatch: memory {ids[has.index(True)]!r} has "
                f"{store_dim}, expected {query_dim}"
            )
        dim = max(query_dim or ((store_dim or 0) if any(has) else 0), 1)
        size = bucket_size(n)
        emb = np.zeros((size, dim), dtype=np.float64)
        for i, r in enumerate(rows):
            if has[i]:
                emb[i] = _embedding_of(r[2], r[8])
        tagf = np.asarray([r[3] for r in rows], dtype=np.float64).reshape(n, _records.TAG_F)
        stamps = np.asarray([r[4][0] for r in rows], dtype=np.int64)
        leaves: list[np.ndarray] = [emb]
        for cols in (_records.F_AFFECT, _records.F_MOOD, _records.F_VELOCITY):
            col = np.zeros((size, 3), dtype=np.float64)
            col[:n] = tagf[:, cols]
            leaves.append(col)
        for values in (
            (_records.to_microseconds(now) - stamps) / 1e6,
            tagf[:, _records.F_CONSOLIDATION],
            tagf[:, _records.F_RETRIEVAL],
        ):
            col = np.zeros((size,), dtype=np.float64)
            col[:n] = values
            leaves.append(col)
        valid = np.zeros((size,), dtype=bool)
        valid[:n] = True
        leaves += [np.zeros((size,), dtype=np.float64), valid]
        columns: MemoryColumns = jax.tree_util.tree_unflatten(
            _COLUMNS_TREEDEF, leaves
        )
        adjacency = padded_adjacency(((r[5], r[6]) for r in rows), ids, size)
        return CandidateBank(ids=ids, columns=columns, adjacency=adjacency, dim=dim)

    def columns(self, now: datetime) -> tuple[list[str], MemoryColumns]:
        """Every memory as float64 columns, in insertion order (unpadded).

        Args:
            now: aware datetime for the ages.

        Returns:
            ``(ids, columns)``.
        """
        with self._read() as cur:
            f, args = self._filter_args()
            rows = cur.execute(
                f"SELECT {_BANK_COLUMNS} FROM {self._t} WHERE true{f} ORDER BY seq", args
            ).fetchall()
            dim = self._stored_dim(cur)
        bank = self._bank(rows, None, now, dim)
        n = len(rows)
        cols = jax.tree_util.tree_map(lambda x: x[:n], bank.columns)
        return bank.ids, cols

    def scoring_bank(
        self, now: datetime, dtype: Any = np.float32
    ) -> tuple[list[str | None], MemoryColumns, int | None]:
        """Every memory as padded JAX columns for batch scoring, from one snapshot.

        Args:
            now: aware datetime for the ages.
            dtype: dtype of the float columns other than the embedding.

        Returns:
            ``(row_ids, columns, dim)`` (see ``ColumnarStore.scoring_bank``).
        """
        from emotional_memory.stores.columnar import _device_columns

        ids, cols = self.columns(now)
        size = bucket_size(len(ids))
        padded = pad_columns(cols, size)
        row_ids: list[str | None] = [*ids, *([None] * (size - len(ids)))]
        with self._read() as cur:
            f, args = self._filter_args()
            any_embedded = cur.execute(
                f"SELECT EXISTS (SELECT 1 FROM {self._t} WHERE embedded{f})", args
            ).fetchone()[0]
        dim = padded.embedding.shape[1]
        return row_ids, _device_columns(padded, dtype), dim if any_embedded else None

    # ------------------------------------------------------------------ lexical

    def _lexical_search(
        self, cur: Any, terms: Sequence[str], k: int, k1: float, b: float
    ) -> list[str]:
        if k <= 0 or not terms:
            return []
        terms = [indexed_term(term) for term in terms]
        f, f_args = self._filter_args()
        n_docs, total = cur.execute(
            f"SELECT count(*), coalesce(sum(doc_len), 0) FROM {self._t} WHERE true{f}", f_args
        ).fetchone()
        rows = cur.execute(
            f"SELECT seq, id, doc_len, terms, tfs FROM {self._t} WHERE terms && %s{f}",
            (terms, *f_args),
        ).fetchall()
        if not rows:
            return []
        avg = int(total) / int(n_docs) if n_docs else 0.0
        postings: dict[str, list[tuple[str, int, int]]] = {}
        seq_of: dict[str, int] = {}
        wanted = set(terms)
        for seq, mid, doc_len, row_terms, tfs in rows:
            seq_of[mid] = seq
            for term, tf in zip(row_terms, tfs, strict=True):
                if term in wanted:
                    postings.setdefault(term, []).append((mid, tf, doc_len))
        out: dict[str, float] = {}
        for term in terms:  # LexicalIndex.scores' sums, in the same order
            posting = postings.get(term)
            if not posting:
                continue
            df = len(posting)
            idf = math.log1p((n_docs - df + 0.5) / (df + 0.5))
            for mid, tf, doc_len in posting:
                rel = doc_len / avg if avg > 0 else 1.0
                part = idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * rel))
                out[mid] = out.get(mid, 0.0) + part
        ids = list(out)
        values = np.fromiter((out[i] for i in ids), np.float64, len(ids))
        seq = np.fromiter((seq_of[i] for i in ids), np.int64, len(ids))
        order = np.lexsort((seq, -values))[:k]
        return [ids[i] for i in order.tolist()]

    def _lexical_inputs(
        self, cur: Any, terms: Sequence[str], memory_ids: Sequence[str]
    ) -> LexicalInputs:
        terms = [indexed_term(term) for term in terms]  # as the rows hold them
        n = len(memory_ids)
        width = max(len(terms), 1)
        tf = np.zeros((n, width), dtype=np.float64)
        df = np.zeros((width,), dtype=np.float64)
        length = np.zeros((n,), dtype=np.float64)
        f, f_args = self._filter_args()
        n_docs, total = cur.execute(
            f"SELECT count(*), coalesce(sum(doc_len), 0) FROM {self._t} WHERE true{f}", f_args
        ).fetchone()
        if terms:
            counts = dict(cur.execute(
                f"SELECT term, count(*) FROM {self._t}, unnest(terms) AS term "
                f"WHERE terms && %s AND term = ANY(%s){f} GROUP BY term",
                (terms, terms, *f_args),
            ).fetchall())
            for j, term in enumerate(terms):
                df[j] = counts.get(term, 0)
        row_of = {mid: i for i, mid in enumerate(memory_ids)}
        if memory_ids:
            column = {term: j for j, term in enumerate(terms)}
            for mid, doc_len, row_terms, tfs in cur.execute(
                f"SELECT id, doc_len, terms, tfs FROM {self._t} WHERE id = ANY(%s){f}",
                (list(memory_ids), *f_args),
            ).fetchall():
                i = row_of[mid]
                length[i] = doc_len
                for term, count in zip(row_terms, tfs, strict=True):
                    at = column.get(term)
                    if at is not None:
                        tf[i, at] = count
        docs = int(n_docs)
        avg = int(total) / docs if docs else 0.0
        return LexicalInputs(
            tf=tf, length=length, df=df, n_docs=np.asarray(docs, np.float64),
            avg_length=np.asarray(avg, np.float64),
        )

    def lexical_search(self, terms: Sequence[str], k: int, k1: float, b: float) -> list[str]:
        """Up to ``k`` memory ids by BM25 of ``terms``, best first (lexical signal s7).

        Args:
            terms: distinct query terms.
            k: shortlist size.
            k1: BM25 k1.
            b: BM25 b.

        Returns:
            Memory ids (ties in insertion order).
        """
        with self._read() as cur:
            return self._lexical_search(cur, terms, k, k1, b)

    def lexical_inputs(self, terms: Sequence[str], memory_ids: Sequence[str]) -> LexicalInputs:
        """Term statistics of candidates, in candidate order (lexical signal s7).

        Args:
            terms: distinct query terms.
            memory_ids: the candidates.

        Returns:
            Unpadded :class:`~emotional_memory.kernel.LexicalInputs`.
        """
        with self._read() as cur:
            return self._lexical_inputs(cur, terms, memory_ids)

    # ------------------------------------------------------------------ the rest

    def linking_to(self, memory_ids: Iterable[str]) -> list[str]:
        """Ids of the memories holding a link to any of ``memory_ids``, in insertion order.

        Args:
            memory_ids: the link targets.

        Returns:
            The linking memories' ids.
        """
        targets = list(memory_ids)
        if not targets:
            return []
        lock = self._lock_rows()
        with self._read(single=True) as cur:
            rows = cur.execute(  # through the links table's index
                f"SELECT id FROM {self._t} WHERE seq IN (SELECT source FROM {self._links} "
                f"WHERE target = ANY(%s)) ORDER BY seq{lock}",
                (targets,),
            ).fetchall()
        self._locked([r[0] for r in rows], lock)
        return [r[0] for r in rows]

    def pending_ids(self) -> list[str]:
        """Ids of the memories pending appraisal, in insertion order.

        Returns:
            The ids.
        """
        with self._read(single=True) as cur:
            f, args = self._filter_args()
            rows = cur.execute(
                f"SELECT id FROM {self._t} WHERE pending{f} ORDER BY seq", args
            ).fetchall()
        return [r[0] for r in rows]

    def clear(self) -> None:
        """Delete every memory (one transaction; the schema stays).

        Raises:
            RuntimeError: called on a view (see :meth:`selected`).
        """
        if self._selection is not None:
            raise RuntimeError("clear() empties the whole table: call it on the store")
        with self._write() as cur:
            cur.execute(f"DELETE FROM {self._t}")
            cur.execute(
                f"UPDATE {self._meta} SET value = '0' "
                "WHERE key IN ('count', 'embedded', 'expiring')"
            )
        tx = self._current()
        if tx is not None:
            tx.known.clear()
            tx.rows.clear()

    def close(self) -> None:
        """Close the connection pool (idempotent)."""
        if not self._closed:
            self._closed = True
            self._pool.close()

    def __enter__(self) -> PostgresStore:
        """Context-manager entry: the store itself."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Context-manager exit: :meth:`close`."""
        self.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self._redacted!r}, table={self._table!r})"


class _PostgresLinker(MemoryLinker):
    """:class:`~emotional_memory.stores._linking.MemoryLinker` with the round trips cut:
    a block's new rows go out together, its candidate searches travel together
    (:meth:`PostgresStore.search_by_embedding_batch`, each memory seeing the memories
    stored up to itself), and a memory's link targets are read (and locked) in one
    query; their updates are queued like every write. The links are those of one
    search and one ``get`` per link (SPEC 7)."""

    def __init__(self, store: PostgresStore, block_size: int) -> None:
        super().__init__(
            store, store.search_by_embedding_batch if block_size > 1 else None, block_size
        )
        self._pg = store

    def save_and_find(
        self,
        memories: Sequence[Memory],
        limit: int,
        vectors: Sequence[np.ndarray | None] | None = None,
    ) -> Iterator[LinkCandidates]:
        """See :meth:`Linker.save_and_find`: the block's searches travel together and
        the candidates are built from the rows (no memory built for them)."""
        pg = self._pg
        before = len(pg)
        self.save(memories)
        # memory i of the block sees before + i + 1 memories; up to ``limit`` of them
        # its candidates are all of them (SPEC 7)
        first = min(len(memories), max(0, limit - before))
        searched = memories[first:]
        found = pg._search_batch_rows(
            [m.embedding or [] for m in searched], limit,
            visible_until=[m.id for m in searched],
        ) if searched else []
        everything = pg.list_all()[: before + first] if first else []
        return (
            memory_candidates(everything[: before + i + 1]) if i < first
            else pg._row_candidates(found[i - first])
            for i in range(len(memories))
        )

    def link(
        self,
        memory: Memory,
        candidates: LinkCandidates,
        links: list[ForwardLink],
        max_links: int,
    ) -> None:
        """See :meth:`Linker.link` (the targets read in one query)."""
        forward = [
            ResonanceLink(
                source_id=memory.id, target_id=candidates.ids[i], strength=strength,
                link_type=link_type,
            )
            for i, strength, link_type in links
        ]
        memory = _with_links(memory, forward)
        self._pg.update(memory)
        self._forward[memory.id] = memory
        targets = {m.id: m for m in self._pg.memories([lk.target_id for lk in forward])}
        for link in forward:
            target = targets.get(link.target_id)
            if target is None:
                continue
            back = ResonanceLink(
                source_id=target.id, target_id=memory.id, strength=link.strength,
                link_type=link.link_type,
            )
            existing = list(target.tag.resonance_links)
            strengths = [lk.strength for lk in existing]
            if _backward(existing, strengths, back, back.strength, max_links):
                updated = _with_links(target, existing)
                targets[target.id] = updated
                self._pg.update(updated)
