"""The SQLite store: one file, a row-engine cache (design in ``README.md`` beside this file)."""

from __future__ import annotations

import gc
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime
from types import TracebackType
from typing import Any

import numpy as np

from emotional_memory._bank import CandidateBank, LexicalQuery
from emotional_memory._validation import check_after, check_page
from emotional_memory._validation import memory_id as check_id
from emotional_memory.kernel.columns import MemoryColumns
from emotional_memory.kernel.lexical import LexicalInputs
from emotional_memory.lexical import LexicalIndex
from emotional_memory.models import Memory
from emotional_memory.stores._shared.linking import Linker
from emotional_memory.stores._shared.rows.selected import SelectedRows
from emotional_memory.stores._shared.rows.store import EmbeddingDimensionError, RowStore
from emotional_memory.stores.base import BackendStore, Selection
from emotional_memory.stores.sqlite.bulk_load import fill_rows
from emotional_memory.stores.sqlite.checkpoint import WalCheckpointer
from emotional_memory.stores.sqlite.linker import SQLiteLinker
from emotional_memory.stores.sqlite.original_layout import prepare_memory_file
from emotional_memory.stores.sqlite.records import (
    cached_row_params,
    decode_rows,
    encode_link_ids,
    memory_params,
    row_memory,
)
from emotional_memory.stores.sqlite.schema import (
    _CHANGE_LOG,
    _LOG_CHANGE,
    _PRUNE_CHANGES,
    _ROW_COLUMNS,
    _UPDATE_LINKS,
    _UPSERT,
    SQLiteBusyError,
    SQLiteClosedError,
    SQLiteDimensionError,
    _create_tables,
    _fill_memories,
    begin_immediate,
    busy_named,
    check_memory_file,
    check_path,
    check_timeout,
    create_schema,
    open_connection,
    read_changed,
    read_snapshot,
    too_big_named,
)

# ``_changes`` of a cache that failed to pick up the file's changes: the next read reloads.
_STALE = -1


class SQLiteStore(BackendStore):
    """A durable :class:`~emotional_memory.interfaces.MemoryStore` in one SQLite file.

    Every write outside :meth:`transaction` commits on its own; inside, all writes
    commit together or not at all. Reads come from an in-memory column cache, so
    the column-cache API of :class:`InMemoryStore` is available too
    (:meth:`embedding_matrix`, :attr:`dim`, :attr:`capacity`, :attr:`reallocations`).
    Thread-safe: a re-entrant lock guards the connection and the cache.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        check_same_thread: bool = False,
        timeout: float = 30.0,
    ) -> None:
        """Open (creating if needed) the store at ``path``.

        A file written by the original library (0.18.1) gets this library's tables,
        filled from the original's, which stay as they were (the original still opens
        the file); see :mod:`emotional_memory.stores.sqlite.original_layout`.

        Args:
            path: database file; ``":memory:"`` (the default, as in the original)
                gives a private, non-durable database.
            check_same_thread: passed to :func:`sqlite3.connect`.
            timeout: seconds to wait for another connection's write lock.

        Raises:
            ValueError: a bad ``timeout``, or a file holding a newer schema version.
            SQLiteBusyError: another connection kept the file locked past ``timeout``.
        """
        self._path = check_path(path)
        self._timeout = timeout = check_timeout(timeout)
        self._lock = threading.RLock()
        with busy_named(self._path, timeout):
            prepare_memory_file(path, _create_tables, _fill_memories, timeout=timeout)
        self._conn: sqlite3.Connection | None = open_connection(
            path, timeout=timeout, check_same_thread=check_same_thread,
            check=lambda conn: check_memory_file(conn, self._path),
        )
        self._depth = 0
        self._dirty = False  # the open transaction wrote memories
        self._tx_changes: list[tuple[str, int]] = []  # (id, deleted) written by it
        self._data_version: int | None = None  # PRAGMA data_version last seen
        self._changes = 0  # the file's memory change counter the cache reflects
        self._cache = RowStore()
        self._checkpointer: WalCheckpointer | None = None
        # this thread's _locked() blocks (.depth) and a commit in them (.pending)
        self._held = threading.local()
        try:
            self._checkpointer = WalCheckpointer.attach(self._conn)
            create_schema(self._conn, self._path, self._timeout)
            self._load()
            self._data_version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        except BaseException as exc:
            self._conn.close()
            self._conn = None
            if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, SQLiteBusyError):
                raise type(exc)(f"{self._path!r}: {exc}") from exc  # the file named
            raise

    # ---------------------------------------------------------------- lifecycle

    @property
    def path(self) -> str:
        """The database path this store was opened with."""
        return self._path

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._conn is None

    def close(self) -> None:
        """Close the connection (idempotent). Later calls raise ``ValueError``."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            if self._checkpointer is not None:
                self._checkpointer.close()

    def __repr__(self) -> str:
        """``SQLiteStore('<path>', count=<n>)`` (``count=closed`` once closed)."""
        if self._conn is None:
            return f"SQLiteStore({self._path!r}, count=closed)"
        return f"SQLiteStore({self._path!r}, count={len(self)})"

    def __enter__(self) -> SQLiteStore:
        """Context-manager entry: the store itself."""
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Context-manager exit: :meth:`close`."""
        self.close()

    def refresh(self) -> None:
        """Rebuild the in-memory cache from the database (after another process wrote).

        Raises:
            RuntimeError: inside a transaction.
        """
        with self._lock:
            self._connection()
            if self._depth:
                raise RuntimeError("cannot refresh inside a transaction")
            self._data_version = None
            self._load()

    def rebuild_vector_index(self) -> int:
        """Rebuild the search index from the table (the original's sqlite-vec method).

        The index here is the in-memory column cache, so this is :meth:`refresh`.

        Returns:
            The number of memories with an embedding now indexed.

        Raises:
            RuntimeError: inside a transaction.
        """
        with self._lock:
            self.refresh()
            return sum(1 for m in self._cache.list_all() if m.embedding)

    # ------------------------------------------------------------- transactions

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All-or-nothing block: ``BEGIN IMMEDIATE`` ... ``COMMIT``, ``ROLLBACK`` on error.

        Re-entrant: nested blocks join the outer transaction through a SAVEPOINT,
        so a failing inner block undoes only its own writes. On rollback the cache is
        reverted too. The store's lock is held for the whole block; the log's
        checkpoint, when due, runs after it is released (:mod:`.checkpoint`).

        Yields:
            None.
        """
        with self._lock:
            conn = self._connection()
            depth = self._depth
            savepoint = f"emotional_memory_sp{depth}"
            if depth:
                conn.execute(f"SAVEPOINT {savepoint}")
            else:
                begin_immediate(conn, self._path, self._timeout)
                self._dirty = False
                self._tx_changes = []
                try:  # the write lock is held: the cache now meets the current rows
                    self._sync()
                except BaseException:
                    if conn.in_transaction:  # SQLite may have rolled back already
                        conn.execute("ROLLBACK")
                    raise
            changes_before = self._changes
            mark = self._cache._tx_begin()
            self._depth = depth + 1
            try:
                yield
                if depth == 0:
                    if self._dirty:
                        conn.executemany(_LOG_CHANGE, self._tx_changes)
                        conn.execute(_PRUNE_CHANGES, (_CHANGE_LOG,))
                        self._changes = self._read_changes()
                        self._tx_changes = []
                    conn.execute("COMMIT")
                else:
                    conn.execute(f"RELEASE SAVEPOINT {savepoint}")
            except BaseException:
                self._depth = depth
                self._cache._tx_rollback(mark)
                if depth == 0:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    self._changes = changes_before  # the file's counter was not bumped
                else:
                    conn.execute(f"ROLLBACK TO SAVEPOINT {savepoint}")
                    conn.execute(f"RELEASE SAVEPOINT {savepoint}")
                raise
            self._depth = depth
            self._cache._tx_commit()
        if depth == 0:
            if getattr(self._held, "depth", 0):
                self._held.pending = True  # run when the _locked() block releases
            else:
                self._checkpoint()

    # ------------------------------------------------------------------ protocol

    def save(self, memory: Memory) -> None:
        """Insert a memory, or replace the one with the same id (keeping its position).

        The embedding is stored exactly (float32 or float64 blob, see the module).

        Args:
            memory: the memory to store.

        Raises:
            TypeError: when ``memory`` is not a :class:`Memory` or its metadata is not
                JSON-serialisable.
            ValueError: on an embedding dimension mismatch (store unchanged).
        """
        if not isinstance(memory, Memory):
            raise TypeError(f"memory must be a Memory, got {type(memory).__name__}")
        stored, params = self._prepare(memory)
        try:
            self._write(lambda: self._cache.save(stored), _UPSERT, params)
        except EmbeddingDimensionError as exc:
            raise SQLiteDimensionError(str(exc)) from None

    def get(self, memory_id: str) -> Memory | None:
        """Look a memory up by id.

        Args:
            memory_id: the id.

        Returns:
            The memory, or None when absent.
        """
        check_id(memory_id)
        with self._lock:
            self._sync()
            return self._cache.get(memory_id)

    def update(self, memory: Memory) -> None:
        """Replace an existing memory in place.

        Args:
            memory: the new version; its id must already be stored.

        Raises:
            KeyError: when no memory has this id.
            ValueError: on an embedding dimension mismatch (store unchanged).
        """
        if not isinstance(memory, Memory):
            raise TypeError(f"memory must be a Memory, got {type(memory).__name__}")
        stored, params = self._prepare(memory)
        with self._locked(), self._joined():
            if memory.id not in self._cache:
                raise KeyError(memory.id)
            try:
                self._write(lambda: self._cache.update(stored), _UPSERT, params)
            except EmbeddingDimensionError as exc:
                raise SQLiteDimensionError(str(exc)) from None

    def delete(self, memory_id: str) -> bool:
        """Remove a memory.

        Args:
            memory_id: the id.

        Returns:
            True when the memory existed.
        """
        check_id(memory_id)
        with self._lock:
            self._sync()
            if memory_id not in self._cache:
                return False
        with self._locked(), self._joined():
            if memory_id not in self._cache:  # deleted by another connection meanwhile
                return False
            self._write(lambda: self._cache.delete(memory_id),
                        "DELETE FROM em_memories WHERE id = ?", (memory_id,))
            return True

    def list_all(self) -> list[Memory]:
        """All memories, in insertion order."""
        with self._lock:
            self._sync()
            return self._cache.list_all()

    def list_page(self, offset: int, limit: int) -> list[Memory]:
        """``list_all()[offset:offset + limit]`` (from the cache: O(limit) memories)."""
        offset, limit = check_page(offset, limit)
        with self._lock:
            self._sync()
            return self._cache.list_page(offset, limit)

    def list_after(self, position: int | None, limit: int) -> tuple[list[Memory], int | None]:
        """See :class:`~emotional_memory.stores.base.KeysetPagingStore`: the cursor is
        the row's ``seq`` (kept by updates, durable); O(log N + limit)."""
        cursor, limit = check_after(position, limit)
        with self._lock:
            self._sync()
            rows = self._connection().execute(
                "SELECT seq, id FROM em_memories WHERE seq > ? ORDER BY seq LIMIT ?",
                (cursor, limit)).fetchall()
            if not rows:
                return [], position
            return self._cache.memories([r[1] for r in rows], keep=False), int(rows[-1][0])

    def lexical_index(self) -> LexicalIndex:
        """The inverted index of memory contents (lexical signal s7).

        Kept by the in-memory cache, built from the durable ``content`` column when
        first needed after the file is opened (or refreshed) and updated with every
        write, in step with the transaction (a rollback reverts it). Values are those
        of :class:`~emotional_memory.stores.memory.InMemoryStore` for the same
        memories.

        Returns:
            The :class:`~emotional_memory.lexical.LexicalIndex`.
        """
        with self._lock:
            self._sync()  # other connections' commits first, like every read
            return self._cache.lexical_index()

    def lexical_search(
        self, terms: Sequence[str], k: int, k1: float = 1.2, b: float = 0.75,
        analysis: str = "none",
    ) -> list[str]:
        """:meth:`RowStore.lexical_search` over the current rows (other
        connections' commits included), under the store's lock."""
        with self._lock:
            self._sync()
            return self._cache.lexical_search(terms, k, k1, b, analysis)

    def lexical_inputs(
        self, terms: Sequence[str], memory_ids: Sequence[str], analysis: str = "none"
    ) -> LexicalInputs:
        """:meth:`RowStore.lexical_inputs` over the current rows (other
        connections' commits included), under the store's lock."""
        with self._lock:
            self._sync()
            return self._cache.lexical_inputs(terms, memory_ids, analysis)

    def search_by_embedding(self, embedding: Sequence[float], top_k: int) -> list[Memory]:
        """Nearest embedded memories by cosine similarity (docs/behaviour.md §5).

        Same contract as :meth:`RowStore.search_by_embedding`, computed on the
        cache's float64 copy of the stored embeddings.

        Args:
            embedding: the (D,) query vector.
            top_k: how many memories to return at most.

        Returns:
            Up to ``top_k`` memories, best first.
        """
        with self._lock:
            self._sync()
            return self._cache.search_by_embedding(embedding, top_k)

    def candidate_bank(
        self,
        embedding: Sequence[float] | np.ndarray | None,
        limit: int | None,
        now: datetime,
        *,
        also: Sequence[str] = (),
        lexical: LexicalQuery | None = None,
        with_memories: bool = False,
    ) -> CandidateBank:
        """The retrieval candidates of a query as columns, from the cache's rows
        (other connections' commits included); see
        :meth:`~emotional_memory.stores.columnar.ColumnarStore.candidate_bank`."""
        with self._lock:
            self._sync()
            return self._cache.candidate_bank(
                embedding, limit, now, also=also, lexical=lexical,
                with_memories=with_memories,
            )

    def columns(self, now: datetime) -> tuple[list[str], MemoryColumns]:
        """Every memory as float64 columns, in insertion order (see
        :meth:`RowStore.columns`), from the cache's rows."""
        with self._lock:
            self._sync()
            ids, cols = self._cache.columns(now)
            return ids, cols  # type: ignore[return-value]  # every row is live

    def scoring_bank(
        self, now: datetime, dtype: Any = np.float32
    ) -> tuple[list[str | None], MemoryColumns, int | None]:
        """Every memory as padded JAX columns for batch scoring, from the cache's rows
        (see :meth:`~emotional_memory.stores.columnar.ColumnarStore.scoring_bank`)."""
        with self._lock:
            self._sync()
            return self._cache.scoring_bank(now, dtype)

    def selected(self, selection: Selection) -> Any:
        """This store confined to ``selection`` (see :meth:`RowStore.selected`):
        reads answer from the cache's selected rows (other connections' commits
        first), writes go through this store.

        Args:
            selection: what an operation sees.

        Returns:
            A :class:`~emotional_memory.stores._shared.rows.selected.SelectedRows` view, or the
            store itself when nothing is confined.
        """
        with self._lock:
            self._sync()
            if selection.unconfined and not (selection.expiring or self._cache._any_expiry):
                return self
        return SelectedRows(
            lambda: self._cache, self, selection, sync=self._sync_if_open,
            wrap_linker=lambda inner: SQLiteLinker(self, inner),
        )

    def _sync_if_open(self) -> None:
        with self._lock:
            self._sync()

    def memories(self, memory_ids: Sequence[str]) -> list[Memory]:
        """The stored memories of ``memory_ids``, in order (missing ones skipped)."""
        with self._lock:
            self._sync()
            return self._cache.memories(memory_ids)

    def count(self) -> int:
        """Number of memories stored (same as ``len(store)``)."""
        return len(self)

    def __len__(self) -> int:
        """Number of memories stored."""
        with self._lock:
            self._sync()
            return len(self._cache)

    def __contains__(self, memory_id: object) -> bool:
        """Whether a memory with this id is stored."""
        with self._lock:
            self._sync()
            return memory_id in self._cache

    def linking_to(self, memory_ids: Iterable[str]) -> list[str]:
        """See :meth:`RowStore.linking_to` (answered from the cache)."""
        with self._lock:
            self._sync()
            return self._cache.linking_to(memory_ids)

    def pending_ids(self) -> list[str]:
        """See :meth:`RowStore.pending_ids` (answered from the cache)."""
        with self._lock:
            self._sync()
            return self._cache.pending_ids()

    def row_linker(self, block_size: int) -> Linker | None:
        """The cache's batched row linker, each block's rows then written in one go.

        ``encode_batch`` saves and links a block of new memories on the in-memory
        cache (one batched search, no ``Memory`` per candidate) inside the engine's
        transaction; the rows it changed (the new memories, and the old ones given
        backward links) are then upserted with one ``executemany``. The transaction
        makes both all-or-nothing, as for one write at a time.

        Args:
            block_size: memories saved and searched together.

        Returns:
            The linker, or None when the cache has none.
        """
        inner = self._cache.row_linker(block_size)
        return None if inner is None else SQLiteLinker(self, inner)

    def _write_rows_since(self, mark: int) -> int:
        """Upsert every row the cache changed since undo-log ``mark`` (in a transaction,
        lock held); returns the new mark."""
        cache = self._cache
        undo = cache._undo
        kinds: dict[str, set[str]] = {}
        for entry in undo[mark:]:
            kinds.setdefault(entry[1], set()).add(entry[0])
        rows: list[tuple[Any, ...]] = []
        links: list[tuple[str | None, bytes | None, str]] = []
        for memory_id, kind in kinds.items():
            row = cache._row_of.get(memory_id)
            if row is None:
                continue
            if kind == {"links"}:  # a compact row's links alone changed
                record = cache._links[row]
                if record is None:
                    links.append((None, None, memory_id))
                else:
                    links.append((encode_link_ids(record[0]), record[1], memory_id))
                continue
            rows.append(cached_row_params(cache, memory_id))
        conn = self._connection()
        if links and conn.executemany(_UPDATE_LINKS, links).rowcount != len(links):
            # some row is not a record in the file: write those rows whole
            rows += [cached_row_params(cache, memory_id) for _, _, memory_id in links]
        if rows:
            with too_big_named(conn, rows):
                conn.executemany(_UPSERT, rows)
        if rows or links:
            self._dirty = True
            self._tx_changes.extend((memory_id, 0) for memory_id in kinds if memory_id in cache)
        return len(undo)

    # ------------------------------------------------------------- column cache

    @property
    def dim(self) -> int | None:
        """The common embedding dimension, or None while no memory has an embedding
        (``SQLiteClosedError`` once closed, as every read)."""
        with self._lock:
            self._connection()
            return self._cache.dim

    @property
    def capacity(self) -> int:
        """Rows allocated in the cache's column arrays."""
        return self._cache.capacity

    @property
    def reallocations(self) -> int:
        """How many times the cache's column arrays were reallocated."""
        return self._cache.reallocations

    def embedding_matrix(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        """The embedding columns, as :meth:`RowStore.embedding_matrix`.

        Returns:
            ``(ids, matrix, has_embedding)`` in insertion order (read-only arrays,
            valid until the next write).
        """
        with self._lock:
            self._sync()
            return self._cache.embedding_matrix()

    @property
    def schema_version(self) -> int:
        """The schema version recorded in the database's ``meta`` table."""
        with self._lock:
            row = (
                self._connection()
                .execute("SELECT value FROM meta WHERE key = 'schema_version'")
                .fetchone()
            )
            return int(row[0])

    def setting(self, key: str) -> str | None:
        """A value recorded in the ``meta`` table (e.g. the embedder's identity).

        Args:
            key: the setting's name.

        Returns:
            Its value, or None when none is recorded.
        """
        with self._lock:
            row = self._connection().execute(
                "SELECT value FROM meta WHERE key = ?", ("setting:" + key,)
            ).fetchone()
            return None if row is None else str(row[0])

    def record_setting(self, key: str, value: str) -> str:
        """Record ``value`` under ``key`` unless a value is recorded (one transaction).

        Args:
            key: the setting's name.
            value: its value.

        Returns:
            The value recorded now or before.
        """
        with self._locked(), self.transaction():
            conn = self._connection()
            conn.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)", ("setting:" + key, value)
            )
            row = conn.execute("SELECT value FROM meta WHERE key = ?", ("setting:" + key,))
            return str(row.fetchone()[0])

    def replace_setting(self, key: str, value: str | None) -> None:
        """Set ``key`` to ``value``, or forget it (None); joins an open transaction.

        Args:
            key: the setting's name.
            value: its new value, or None.
        """
        with self._locked(), self.transaction():
            conn = self._connection()
            if value is None:
                conn.execute("DELETE FROM meta WHERE key = ?", ("setting:" + key,))
            else:
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES (?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    ("setting:" + key, value),
                )

    # ---------------------------------------------------------------- internals

    def _write(self, cache_op: Callable[[], object], sql: str, params: tuple[Any, ...]) -> None:
        """Apply one cache change and its one SQL statement, both or neither.

        Outside a transaction this opens (and commits) its own. Inside one, a single
        statement is already atomic, so no savepoint is needed: a failure only has to
        undo the cache change.
        """
        with self._locked():
            if self._depth == 0:
                with self.transaction():
                    self._write(cache_op, sql, params)
                return
            conn = self._connection()
            mark = self._cache._tx_begin()
            try:
                cache_op()
                with too_big_named(conn, [params]):
                    conn.execute(sql, params)
            except BaseException:
                self._cache._tx_rollback(mark)
                raise
            self._cache._tx_commit()
            self._dirty = True
            self._tx_changes.append((params[0], int(sql.startswith("DELETE"))))

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The store's lock around a write; the log's checkpoint, if due, after it."""
        with self._lock:
            self._held.depth = getattr(self._held, "depth", 0) + 1
            try:
                yield
            finally:
                self._held.depth -= 1
        if not self._held.depth and getattr(self._held, "pending", False):
            self._held.pending = False
            self._checkpoint()

    def _checkpoint(self) -> None:
        """Checkpoint the log if due (:mod:`.checkpoint`); outside the store's lock
        unless a caller of :meth:`transaction` holds it around the block."""
        if self._checkpointer is not None:
            self._checkpointer.after_commit()

    def _joined(self) -> AbstractContextManager[None]:
        """The open transaction (lock held), or a new one: a check and the write it
        guards then see the same rows."""
        return nullcontext() if self._depth else self.transaction()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise SQLiteClosedError("the SQLiteStore is closed")
        return self._conn

    def _sync(self) -> None:
        """Bring the cache up to what other connections committed (lock held).

        One ``PRAGMA data_version`` when nobody else committed; when someone did, the
        ``changes`` log says which memories changed, and only those rows are read
        again, in one read transaction (the whole cache is rebuilt when the log no longer
        reaches back far enough, or when a memory was deleted and saved again, which
        moves it in the insertion order). Inside a transaction nothing is done: its
        ``BEGIN IMMEDIATE`` synced, and no other connection commits meanwhile."""
        conn = self._connection()
        if self._depth:
            return
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        if version == self._data_version:
            return
        try:
            with read_snapshot(conn):  # the log and the rows it names, as of one commit
                if self._read_changes() != self._changes:
                    self._refresh_changed()
        except BaseException:
            # the cache may hold part of the changes: the next operation reloads it
            self._changes = _STALE
            raise
        self._data_version = version

    def _read_changes(self) -> int:
        """The newest change sequence number of the file (0 when none)."""
        row = self._connection().execute("SELECT MAX(seq) FROM changes").fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    def _refresh_changed(self) -> None:
        """Re-read the memories other connections changed since the cache's state."""
        found = read_changed(self._connection(), self._changes)
        if found is None:
            self._load()  # the log was pruned past this cache's state
            return
        log, changed, deleted, rows = found
        present = {row[1] for row in rows}
        if present & deleted & set(self._cache._row_of):
            self._load()  # deleted and saved again: its insertion position moved
            return
        cache = self._cache
        for memory_id in changed:
            if memory_id not in present:
                cache.delete(memory_id)
        for row in rows:
            cache.save(row_memory(row[1:]))
        self._changes = max(seq for seq, _, _ in log)

    def _load(self) -> None:
        """Rebuild the cache from the table, in insertion (``seq``) order."""
        # Loading builds many small containers (embedding lists, models) that all
        # survive; the cyclic GC would rescan them repeatedly, roughly doubling the
        # load time of a large store. Pause it for the load.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            with read_snapshot(self._connection()):  # the log's end and the rows agree
                changes = self._read_changes()
                self._load_rows()
        except BaseException:
            self._changes = _STALE  # the cache is not the file's: the next operation reloads
            raise
        finally:
            if gc_was_enabled:
                gc.enable()
        self._changes = changes

    def _load_rows(self) -> None:
        sql = f"SELECT {_ROW_COLUMNS} FROM em_memories ORDER BY seq"
        rows = self._connection().execute(sql).fetchall()
        cache = RowStore()
        block = decode_rows(rows)
        if block is not None:  # every row a record: decoded column by column
            fill_rows(cache, block)
        else:  # a tag kept as JSON, or a malformed row: one memory per row (errors named)
            cache._load_bulk([row_memory(row) for row in rows], None)
        self._cache = cache

    # the memory as a reopen reads it back, and its row's SQL parameters
    _prepare = staticmethod(memory_params)
