"""The memory-store backends the contract suite runs over, opened the same way.

``memory`` (InMemoryStore, also the oracle), ``sqlite`` (a file per store),
``postgres`` (a table per store on the session's real server), ``qdrant`` (local mode
on disk), ``chroma`` (a collection per store on the session's real ``chroma run``
server) and ``plain``: a user's own protocol-only store, which the engine serves
through its generic paths (engine-level contracts only).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emotional_memory import InMemoryStore
from support.plain_store import PerMemoryStore

STORES = ("memory", "sqlite", "postgres", "qdrant", "chroma")
"""Every library backend of memories."""
DURABLE = ("sqlite", "postgres", "qdrant", "chroma")
"""The backends whose memories outlive the store object (``Backend.reopen``)."""
ENGINES = (*STORES, "plain")
"""What an engine runs over: every backend and a plain protocol-only store."""


def oracle_store() -> InMemoryStore:
    """The oracle: an in-memory store keeping embeddings as float64, as every backend
    returns them."""
    return InMemoryStore(embedding_dtype="float64")


class Backend:
    """Opens stores of one backend for one test and closes them when it ends.

    Args:
        name: one of ``ENGINES``.
        request: the test's fixture request (servers and temporary folders come
            from its fixtures, started on first use).
    """

    def __init__(self, name: str, request: pytest.FixtureRequest) -> None:
        if name not in ENGINES:
            raise ValueError(f"unknown backend {name!r}")
        self.name = name
        self._request = request
        self._opened: list[Any] = []
        self._where: dict[int, str] = {}
        self._numbers = itertools.count()
        self._tmp: Path | None = None

    def __repr__(self) -> str:
        return f"Backend({self.name!r})"

    @property
    def durable(self) -> bool:
        """Whether ``reopen`` finds the memories again."""
        return self.name in DURABLE

    @property
    def generic(self) -> bool:
        """Whether the engine serves this store through its generic paths only."""
        return self.name == "plain"

    def new(self) -> Any:
        """A new, empty store (its own file, table or collection)."""
        number = next(self._numbers)
        if self.name == "memory" or self.name == "plain":
            where = ""
        elif self.name == "sqlite":
            where = str(self._folder() / f"s{number}.db")
        elif self.name == "qdrant":
            where = str(self._folder() / f"q{number}")
        else:  # postgres table / chroma collection: unique on the shared server
            where = f"c{number}_{uuid.uuid4().hex[:10]}"
        store = self._open(where)
        self._where[id(store)] = where
        return store

    def reopen(self, store: Any) -> Any:
        """Close ``store`` and open the same data again (durable backends only)."""
        if not self.durable:
            raise ValueError(f"the {self.name} backend keeps nothing after close")
        where = self._where[id(store)]
        store.close()
        again = self._open(where)
        self._where[id(again)] = where
        return again

    def close(self) -> None:
        """Close every store this backend opened (each once)."""
        for store in self._opened:
            close = getattr(store, "close", None)
            if close is not None and not getattr(store, "closed", False):
                close()
        self._opened.clear()

    def _folder(self) -> Path:
        if self._tmp is None:
            factory: pytest.TempPathFactory = self._request.getfixturevalue("tmp_path_factory")
            self._tmp = factory.mktemp(f"contract-{self.name}")
        return self._tmp

    def _open(self, where: str) -> Any:
        store: Any
        if self.name == "memory":
            store = InMemoryStore()
        elif self.name == "plain":
            store = PerMemoryStore()
        elif self.name == "sqlite":
            from emotional_memory.stores.sqlite import SQLiteStore

            store = SQLiteStore(where)
        elif self.name == "postgres":
            from emotional_memory.stores.postgres import PostgresStore

            dsn: str = self._request.getfixturevalue("pg_dsn")
            store = PostgresStore(dsn, table=where, min_connections=0, max_connections=4)
        elif self.name == "qdrant":
            pytest.importorskip("qdrant_client", reason="the qdrant extra is not installed")
            from emotional_memory.stores.vectordb.qdrant import QdrantStore

            store = QdrantStore(path=where)
        else:
            from emotional_memory.stores.vectordb.chroma import ChromaStore

            port: int = self._request.getfixturevalue("chroma_server")
            store = ChromaStore(host="127.0.0.1", port=port, collection_name=where)
        self._opened.append(store)
        return store


STATE_STORES = ("memory", "sqlite", "postgres", "redis")
"""Every library backend of affective states."""
DURABLE_STATE_STORES = ("sqlite", "postgres", "redis")
"""The state backends whose states outlive the store object (``StateBackend.reopen``)."""


class StateBackend:
    """Opens affective-state stores of one backend for one test; closes them after.

    Args:
        name: one of ``STATE_STORES``.
        request: the test's fixture request (servers and folders come from it).
    """

    def __init__(self, name: str, request: pytest.FixtureRequest) -> None:
        if name not in STATE_STORES:
            raise ValueError(f"unknown state backend {name!r}")
        self.name = name
        self._request = request
        self._opened: list[Any] = []
        self._where: dict[int, tuple[str, str]] = {}
        self._numbers = itertools.count()

    def __repr__(self) -> str:
        return f"StateBackend({self.name!r})"

    @property
    def durable(self) -> bool:
        """Whether ``reopen`` finds the states again."""
        return self.name in DURABLE_STATE_STORES

    def new(self, key: str = "default") -> Any:
        """A state store keeping the state under ``key`` in a place of its own (its
        own file, table or key prefix), empty."""
        number = next(self._numbers)
        place = f"st{number}_{uuid.uuid4().hex[:10]}"
        if self.name == "sqlite":
            factory: pytest.TempPathFactory = self._request.getfixturevalue("tmp_path_factory")
            place = str(factory.mktemp("states") / f"{place}.db")
        store = self._open(place, key)
        self._where[id(store)] = (place, key)
        return store

    def reopen(self, store: Any) -> Any:
        """Close ``store`` and open its place and key again (durable backends only)."""
        if not self.durable:
            raise ValueError(f"the {self.name} state backend keeps nothing after close")
        place, key = self._where[id(store)]
        store.close()
        again = self._open(place, key)
        self._where[id(again)] = (place, key)
        return again

    def overwrite(self, store: Any, text: str) -> None:
        """Replace the stored JSON of ``store``'s state by hand with ``text`` (another
        program's value, or a truncated one). Durable backends only."""
        place, _ = self._where[id(store)]
        if self.name == "sqlite":
            import sqlite3

            conn = sqlite3.connect(place)
            with conn:
                conn.execute("UPDATE em_affective_state SET snapshot = ? WHERE key = ?",
                             (text, store.key))
            conn.close()
        elif self.name == "postgres":
            import psycopg

            dsn: str = self._request.getfixturevalue("pg_dsn")
            with psycopg.connect(dsn, autocommit=True) as pg:
                pg.execute(f"UPDATE {place}_state SET snapshot_json = %s", (text,))
        elif self.name == "redis":
            store.client.set(store.key, text)
        else:
            raise ValueError(f"the {self.name} state backend keeps no stored text")

    def close(self) -> None:
        """Close every state store this backend opened."""
        for store in self._opened:
            store.close()
        self._opened.clear()

    def _open(self, place: str, key: str) -> Any:
        store: Any
        if self.name == "memory":
            from emotional_memory.stores.memory.state import InMemoryAffectiveStateStore

            store = InMemoryAffectiveStateStore()
        elif self.name == "sqlite":
            from emotional_memory.stores.sqlite.state import SQLiteAffectiveStateStore

            store = SQLiteAffectiveStateStore(place, key=key)
        elif self.name == "postgres":
            from emotional_memory.stores.postgres.state import PostgresAffectiveStateStore

            dsn: str = self._request.getfixturevalue("pg_dsn")
            store = PostgresAffectiveStateStore(dsn, key=key, table=place)
        else:
            from emotional_memory.stores.redis.state import RedisAffectiveStateStore

            url: str = self._request.getfixturevalue("redis_url")
            store = RedisAffectiveStateStore(url, key=f"{place}:{key}", strict=True)
        self._opened.append(store)
        return store


def opened_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """The body of a ``backend`` fixture: stores of the backend named by the
    fixture's parameter, closed afterwards (``yield from`` it)."""
    opened = Backend(request.param, request)
    try:
        yield opened
    finally:
        opened.close()
