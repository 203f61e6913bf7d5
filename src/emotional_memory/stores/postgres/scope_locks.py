"""Scope locks across processes on PostgreSQL: session advisory locks.

An engine with ``shared_state`` holds its scope for the whole of each operation
(:func:`~emotional_memory.stores._shared.scope_hold.lock_plan`: the path exclusive,
its prefixes shared) on a connection of its own, outside the store's transactions, so
ranking and embedding run with no transaction open and other scopes' operations go on.
The locks live on a small separate pool: a holder never waits for one of the store's
data connections while holding a lock connection, so the two pools cannot starve each
other. A connection lost mid-operation loses its locks with it (the server releases a
session's locks when it ends). The lock connections run under the store's statement
timeout: waiting longer than it for a scope that another process holds (a stuck or
very slow operation) fails with :class:`~emotional_memory.stores.postgres.common.
StatementTimeout`, nothing held, rather than waiting without bound.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from emotional_memory.stores._shared.scope_hold import ScopeHoldTimeout, lock_plan
from emotional_memory.stores.postgres.common import RECONNECT_WINDOW_S

__all__ = ["LOCK_CONNECTIONS", "AdvisoryScopeLocks"]

LOCK_CONNECTIONS = 64
"""At most this many operations of one process hold scope locks at once (more wait for
a lock connection, up to the pool's 30 s timeout)."""


_LOCK_SQL = {  # (exclusive, wait) -> the statement taking one lock
    (True, True): "SELECT pg_advisory_lock(%s)",
    (False, True): "SELECT pg_advisory_lock_shared(%s)",
    (True, False): "SELECT pg_try_advisory_lock(%s)",
    (False, False): "SELECT pg_try_advisory_lock_shared(%s)",
}


class AdvisoryScopeLocks:
    """Scope locks of one :class:`~emotional_memory.stores.postgres.PostgresStore`."""

    def __init__(self, store: Any) -> None:
        """Prepare the lock pool (connections are opened on first use).

        Args:
            store: the PostgresStore whose table names the locks' namespace.
        """
        self._store = store
        self._namespace = f"{store.table}:scopes"
        self._pool: Any = None
        self._mutex = threading.Lock()
        self._closed = False

    def _connections(self) -> Any:
        with self._mutex:
            if self._closed:
                raise ValueError("the PostgresStore is closed")
            if self._pool is None:
                from psycopg_pool import ConnectionPool

                data = self._store._pool
                self._pool = ConnectionPool(
                    data.conninfo, min_size=0, max_size=LOCK_CONNECTIONS,
                    kwargs={**data.kwargs}, open=True,
                    name=f"{data.name}.scope_locks", configure=self._configure,
                    # as the data pool: a connection idle for a while is pinged (and
                    # replaced when dead) before it is handed out
                    check=self._store._check_connection,
                    reconnect_timeout=RECONNECT_WINDOW_S,
                    reconnect_failed=self._store._reconnect_failed,
                )
            return self._pool

    def _configure(self, conn: Any) -> None:
        """A new lock connection: the store's statement timeout bounds each wait."""
        timeout_ms = self._store._timeout_ms
        if timeout_ms:
            conn.execute(
                "SELECT set_config('statement_timeout', %s, false)", (f"{timeout_ms}ms",)
            )

    @contextmanager
    def hold(self, path: tuple[str, ...], wait: bool = True) -> Iterator[None]:
        """Hold scope ``path`` against overlapping operations of every process.

        Args:
            path: the operation's scope path (``()``: the root, which excludes all).
            wait: False: ``pg_try_advisory_lock``, no wait for a holder.

        Yields:
            None, while the locks are held.

        Raises:
            StatementTimeout: another holder kept an overlapping scope past the
                store's statement timeout (nothing is held).
            ScopeHoldTimeout: ``wait=False`` and an overlapping scope is held
                (nothing is held).
            PostgresStoreError: the locks could not be taken (the message names the
                redacted DSN).
        """
        pool = self._connections()
        conn = self._store._taken(pool, pool.getconn, "taking a scope lock")
        self._store._shared.outage = False
        try:
            try:
                for name, exclusive in lock_plan(self._namespace, path):
                    key = int.from_bytes(name[:8], "big", signed=True)
                    sql = _LOCK_SQL[(exclusive, wait)]
                    row = conn.execute(sql, (key,)).fetchone()
                    if not wait and not row[0]:
                        raise ScopeHoldTimeout(
                            f"scope {list(path)} is held by another operation; "
                            "nothing was changed"
                        )
            except self._store._psycopg.Error as exc:
                raise self._store._error("taking a scope lock", exc) from None
            yield
        finally:
            try:
                if not conn.closed and not conn.broken:
                    conn.execute("SELECT pg_advisory_unlock_all()")
            except self._store._psycopg.Error:
                conn.close()  # its session, and with it every lock, ends
            pool.putconn(conn)

    def close(self) -> None:
        """Close the lock pool (idempotent)."""
        with self._mutex:
            self._closed = True
            if self._pool is not None:
                self._pool.close()
                self._pool = None
