"""PostgreSQL backend: the connection pool, transactions and confined views"""

from __future__ import annotations

import copy
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, TypeVar, cast

from emotional_memory.interfaces import MemoryStore
from emotional_memory.redact import address_secrets, redact
from emotional_memory.stores._shared import records as _records
from emotional_memory.stores.base import Selection
from emotional_memory.stores.postgres.common import (
    MAX_EF_SEARCH,
    OUTAGE_WAIT_S,
    DatabaseUnreachable,
    PoolBusy,
    PostgresStoreError,
    StatementTimeout,
    _Labels,
    _Shared,
    _Tx,
)
from emotional_memory.stores.postgres.where import positional, where_sql

_T = TypeVar("_T")
# PostgreSQL's messages refusing a connection for a connection limit (SQLSTATE 53300:
# the server's, a role's, a database's, the slots reserved for superusers); a connect
# error carries no sqlstate
_CONNECTION_LIMIT = ("too many clients", "too many connections", "connection slots are reserved")


class _Core:
    """PostgreSQL backend of :class:`~emotional_memory.stores.postgres.PostgresStore`."""

    # set by PostgresStore.__init__
    _psycopg: Any
    _redacted: str
    _secrets: tuple[str, ...]  # the DSN's secrets, masked in every message
    _table: str
    _t: str  # the memories table
    _meta: str  # the meta table
    _links: str  # the links table
    _lock_key: int  # the advisory lock of this table's writers
    _exact_rows: int
    _ef_search: int
    _margin: int
    _hnsw: tuple[int, int]  # (m, ef_construction)
    _fillfactor: int
    _upsert_sql: str
    _update_sql: str
    _tag_sql: str
    _local: threading.local  # this thread's transaction
    _selection: Selection | None  # a view's selection (see selected)
    _f: str  # a view's row predicate, appended to every WHERE clause
    _fv: dict[str, Any]  # the values of its named placeholders
    _timeout_ms: int  # the statement timeout (0: none)
    _expiry_us: int | None  # an expiry-only view's time (see selected)
    _last_use: weakref.WeakKeyDictionary[Any, float]
    _session_ef: weakref.WeakKeyDictionary[Any, int]  # each connection's hnsw.ef_search
    _labels: _Labels
    _labels_lock: threading.Lock
    _shared: _Shared
    _pool: Any
    _TAG_COLUMNS: tuple[str, ...]



    # ------------------------------------------------------------------ plumbing

    _IDLE_CHECK_S = 5.0
    """A pooled connection idle this long is checked (one round trip) before use."""
    _PROBE_TIMEOUT_S = 2
    """Seconds (libpq's whole seconds) a pool timeout's probe waits for a connection."""

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
    def _find_secrets(dsn: str) -> tuple[str, ...]:
        """The DSN's secrets as written (a DSN libpq refuses may quote them) and the
        password as libpq reads it."""
        found = address_secrets(dsn)
        try:
            import psycopg

            password = psycopg.conninfo.conninfo_to_dict(dsn).get("password")
        except Exception:
            return found
        return (*found, str(password)) if password else found

    def _configure(self, conn: Any) -> None:
        """Set up a new pooled connection: pgvector's types, the statement timeout."""
        from pgvector.psycopg import register_vector

        register_vector(conn)
        if self._timeout_ms:
            conn.execute(
                "SELECT set_config('statement_timeout', %s, false)", (f"{self._timeout_ms}ms",)
            )

    def _clean(self, exc: BaseException) -> str:
        """An exception's message with the DSN's secrets (if any) removed."""
        return redact(str(exc).strip() or type(exc).__name__, self._secrets)

    def _error(self, what: str, exc: BaseException) -> PostgresStoreError:
        from psycopg_pool import PoolTimeout

        kind: type[PostgresStoreError] = PostgresStoreError
        if isinstance(exc, self._psycopg.errors.QueryCanceled) and self._timeout_ms:
            kind = StatementTimeout
        elif isinstance(exc, PoolTimeout):  # busy connections, or none can be opened
            refused = self._connect_refused()
            if refused is not None:
                return self._unreachable(what, refused)
            kind = PoolBusy
        return kind(f"{what} failed on {self._redacted!r}: {self._clean(exc)}")

    def _checked_out(self) -> tuple[Any, Any]:
        """A pooled connection's context manager and the connection, entered (see
        :meth:`_taken`).

        Raises:
            PostgresStoreError: naming the redacted DSN (see :meth:`_error`).
        """

        def take(timeout: float) -> tuple[Any, Any]:
            conn_cm = self._pool.connection(timeout=timeout)
            return conn_cm, conn_cm.__enter__()

        return self._taken(self._pool, take, "connecting")

    def _taken(self, pool: Any, take: Callable[[float], _T], what: str) -> _T:
        """What ``take`` returns: a connection of ``pool``, waited for in two parts.

        The first :data:`OUTAGE_WAIT_S` seconds; when none came free by then, a new
        connection is tried (:meth:`_connect_refused`): refused, the database cannot
        be reached (an outage begins: later requests wait no longer than that); else,
        or refused only for a connection limit, the rest of the pool's wait. So the
        first request of an outage is told within seconds, not after the pool's 30 s,
        and the first after it is served rather than refused.

        Args:
            pool: the connection pool (its ``timeout`` is the whole wait).
            take: gets a connection, waiting at most the seconds it is given.
            what: the operation, named in an error.

        Returns:
            ``take``'s result.

        Raises:
            PostgresStoreError: naming the redacted DSN (see :meth:`_error`).
        """
        from psycopg_pool import PoolTimeout

        whole = float(pool.timeout)
        first = OUTAGE_WAIT_S if self._shared.outage else min(OUTAGE_WAIT_S, whole)
        try:
            try:
                return take(first)
            except PoolTimeout as exc:
                if first >= whole and not self._shared.outage:
                    raise self._error(what, exc) from None  # the whole wait is spent
                refused = self._connect_refused()
                # refused for a connection limit, the database answers: busy (this
                # pool's connections among those at the limit), the rest is waited
                if refused is not None and not any(m in refused for m in _CONNECTION_LIMIT):
                    self._shared.outage = True
                    raise self._unreachable(what, refused) from None
            self._shared.outage = False  # the database answers: the pool is busy
            return take(whole - first if whole > first else whole)
        except PostgresStoreError:
            raise
        except Exception as exc:
            raise self._error(what, exc) from None

    def _unreachable(self, what: str, refused: str) -> DatabaseUnreachable:
        """The error of a pool wait that ended without a connection while a new one
        is ``refused`` (the redacted reason)."""
        return DatabaseUnreachable(
            f"{what} failed on {self._redacted!r}: no pooled connection came free and "
            f"none can be opened: {refused}")

    def _reconnect_failed(self, pool: Any) -> None:
        """A pool's callback: it retried a connection for its whole window in vain."""
        self._shared.outage = True

    def _connect_refused(self) -> str | None:
        """Why a new connection cannot be opened right now (redacted), or None when
        one can (it is closed at once): tells a pool timeout of a database that is
        down or refusing connections from one of a pool whose connections are busy."""
        psycopg = self._psycopg
        kwargs = {**self._pool.kwargs, "connect_timeout": self._PROBE_TIMEOUT_S}
        try:
            psycopg.connect(self._pool.conninfo, **kwargs).close()
        except psycopg.Error as exc:
            return self._clean(exc)
        return None

    @property
    def dsn(self) -> str:
        """The DSN with its password redacted."""
        return self._redacted

    @property
    def table(self) -> str:
        """The tables' prefix."""
        return self._table

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._shared.closed

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
                tx.absent.clear()
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
        if self._shared.closed:  # the store's and every view's
            raise ValueError("the PostgresStore is closed")
        conn_cm, conn = self._checked_out()
        self._shared.outage = False
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
                        # read committed whatever the server's default: what follows
                        # the lock must see every write committed while it waited
                        conn.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
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

    def _upsert_many(self, cur: Any, rows: list[dict[str, Any]]) -> None:
        """Upsert many rows in a few statements (``_Writer``)."""
        raise NotImplementedError

    def _flush(self, tx: _Tx) -> None:
        """Send the transaction's queued writes (each run of one statement pipelined;
        a run of upserts as multi-row statements)."""
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
                if sql is self._upsert_sql and end - start > 1:  # multi-row statements
                    self._upsert_many(cur, [params for _, params in queued[start:end]])
                else:
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

    @property
    def selection(self) -> Selection | None:
        """The selection this view is confined to (see :meth:`selected`); None for
        the store itself."""
        return self._selection

    def selected(self, selection: Selection) -> Any:
        """This store confined to ``selection`` (scopes, filters and expiry in SQL).

        The selection is answered natively: a view sharing this store's connections
        and transactions whose every read adds the selection to its SQL
        (``scope[1:n] = path``, under the GIN index on ``scope``; ``expires_us >
        now``, or ``<= now`` for what ``prune`` removes; the ``where`` filter as one
        exact SQL expression over the typed columns and ``metadata jsonb``, see
        ``stores/postgres/where.py``), so searches, lexical statistics and link
        candidates see only those rows; writes are refused for memories it does not
        see (as unknown ids). A ``where`` filter without an exact SQL form (a range
        with a string operand, a metadata number of magnitude 2**53 or more, more
        than ``where.MAX_BOUND_VALUES`` values) is served by the generic
        :class:`~emotional_memory.stores.selection.SelectedStore` (its memories
        filtered in Python, O(N) per operation).

        Args:
            selection: what an operation sees.

        Returns:
            The view (this store itself for the root while no memory has an expiry).
        """
        from emotional_memory.stores._shared.filtered import SelectedStore

        parts: list[str] = []
        values: dict[str, Any] = {}
        expiry_only = False
        if selection.where is not None:
            rendered = where_sql(selection.where.clause, prefix="vfw")
            if rendered is None:
                return SelectedStore(self, cast(MemoryStore, self), selection)
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
            expiring = selection.expiring  # (memories written with an expiry)
            if not expiring:
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
