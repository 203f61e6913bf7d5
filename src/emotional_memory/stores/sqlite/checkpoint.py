"""Write-ahead-log checkpoints of a SQLite store, run outside the store's lock.

SQLite's automatic checkpoint runs inside the ``COMMIT`` that pushes the log past
1,000 pages: for a batch of 1,000 memories of 32 KiB that is ~60 ms of copying
inside the transaction, under the store's lock, while every other scope waits.
:class:`WalCheckpointer` turns it off on the store's connection and instead runs a
``PASSIVE`` checkpoint from a connection of its own after the store's lock is
released, once the log has grown past a threshold. A passive checkpoint never waits
for (or blocks) writers or readers; pages a reader still needs stay in the log until
a later checkpoint.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from pathlib import Path

__all__ = ["WAL_CHECKPOINT_BYTES", "WalCheckpointer"]

logger = logging.getLogger(__name__)

WAL_CHECKPOINT_BYTES = 4 * 1024 * 1024
"""Log size that triggers a checkpoint after a commit (SQLite's default: 1,000 pages
of 4 KiB)."""


class WalCheckpointer:
    """Checkpoints one database file's write-ahead log when it has grown.

    Made by :meth:`attach`; the store calls :meth:`after_commit` once its lock is
    released. Thread-safe: at most one checkpoint runs at a time (a commit that
    finds one running skips its own), on a connection used by nothing else.

    Args:
        file: the database file's path (its log is ``file + "-wal"``).
        threshold: log bytes from which a commit triggers a checkpoint.
    """

    def __init__(self, file: str, *, threshold: int = WAL_CHECKPOINT_BYTES) -> None:
        self.file = file
        self.wal = file + "-wal"
        self.threshold = threshold
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._copied_size = -1  # the log's size when a checkpoint last copied all of it

    @classmethod
    def attach(
        cls, conn: sqlite3.Connection, *, threshold: int = WAL_CHECKPOINT_BYTES
    ) -> WalCheckpointer | None:
        """Take over the checkpoints of ``conn``'s main database.

        Turns off ``conn``'s automatic checkpoints and has the log truncated when it
        restarts (``journal_size_limit = 0``), so its size is what was written since
        the last complete checkpoint.

        Args:
            conn: the store's connection.
            threshold: see the class.

        Returns:
            The checkpointer, or None when the database is not a file in WAL mode
            (``":memory:"``): nothing is changed then.
        """
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        file = next((row[2] for row in conn.execute("PRAGMA database_list")
                     if row[1] == "main"), "")
        if str(mode).lower() != "wal" or not file:
            return None
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute("PRAGMA journal_size_limit=0")
        return cls(file, threshold=threshold)

    def due(self) -> bool:
        """Whether the log has reached the threshold and grew since a checkpoint last
        copied all of it (one ``stat``).

        The size is what was written since the log last restarted on the store's
        connection (it truncates the log then). A log another connection restarted
        keeps its size, so a checkpoint waits until the log outgrows it; that
        connection's own automatic checkpoints bound it meanwhile.
        """
        try:
            size = os.stat(self.wal).st_size
        except OSError:
            return False
        return size >= self.threshold and size != self._copied_size

    def after_commit(self) -> bool:
        """Checkpoint if the log is due and no checkpoint is running.

        Returns:
            Whether a checkpoint ran and copied the whole log.
        """
        if self._closed or not self.due() or not self._lock.acquire(blocking=False):
            return False
        try:
            if self._closed:
                return False
            return self._checkpoint()
        finally:
            self._lock.release()

    def _checkpoint(self) -> bool:
        try:
            size = os.stat(self.wal).st_size
            if self._conn is None:  # mode=rw: never create a file that went away
                self._conn = sqlite3.connect(
                    Path(self.file).as_uri() + "?mode=rw", uri=True, timeout=0,
                    isolation_level=None, check_same_thread=False,
                )
            busy, frames, copied = self._conn.execute(
                "PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except (OSError, sqlite3.Error) as exc:  # a later commit retries
            logger.debug("WAL checkpoint skipped: %s", exc)
            return False
        if busy or frames < 0 or copied < frames:
            return False  # another checkpoint ran, or a reader still needs pages
        self._copied_size = size
        return True

    def close(self) -> None:
        """Close the checkpoint connection (idempotent; waits for a running checkpoint)."""
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None
