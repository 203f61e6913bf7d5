"""A memory store in Chroma (extra ``chroma``: ``pip install 'emotional-memory-jax[chroma]'``).

``ChromaStore(path=...)`` uses an embedded persistent Chroma, ``ChromaStore(host=...,
port=...)`` a Chroma server, ``ChromaStore()`` an in-process ephemeral one. Chroma
proposes cosine candidates; the store ranks them exactly
(:mod:`~emotional_memory.stores.vectordb.base`). Record layout and filters:
``stores/vectordb/README.md``. Collections written by the original library open as
they are (their memories first in ``list_all``).
"""

from __future__ import annotations

import os
from typing import Any

from emotional_memory._extras import install_hint
from emotional_memory.redact import redact_address
from emotional_memory.stores.vectordb.base import Record, VectorDBStore
from emotional_memory.stores.vectordb.filter import Cond

__all__ = ["ChromaStore"]

_PAGE = 512


class ChromaStore(VectorDBStore):
    """A :class:`~emotional_memory.interfaces.MemoryStore` in a Chroma collection."""

    # Chroma compiles a where into one SQLite expression, whose depth grows with the
    # number of comparisons: about 1,000 fail ("Expression tree is too large") and a
    # few thousand crashed a Chroma 1.x server. Larger filters are narrowed in Python.
    filter_size_max = 256
    # A record of some 3,000 metadata keys made Chroma 1.x fail ("Error in compaction:
    # Failed to apply logs to the metadata segment") and every later write to the
    # collection with it; 2,000 are written and filtered.
    metadata_paths_max = 2000
    # Its client refuses an empty id and text that is not UTF-8 (a lone surrogate).
    utf8_only = True

    def __init__(
        self,
        *,
        path: str | os.PathLike[str] | None = None,
        host: str | None = None,
        port: int = 8000,
        collection_name: str = "emotional_memory",
        client: Any | None = None,
    ) -> None:
        """Open (creating if needed) the collections.

        Args:
            path: Directory of an embedded persistent Chroma; exclusive with ``host``.
            host: Chroma server host for ``chromadb.HttpClient``.
            port: Chroma server port.
            collection_name: The collection of memories; a second collection
                ``{collection_name}__unembedded`` holds memories without embeddings.
            client: A ready Chroma client to use instead (path/host ignored).

        Raises:
            ImportError: When chromadb is not installed.
            ValueError: When both ``path`` and ``host`` are given.
        """
        if path is not None and host is not None:
            raise ValueError("pass at most one of path and host")
        try:
            import chromadb
        except ImportError as exc:
            raise ImportError(
                f"ChromaStore needs chromadb: {install_hint('chroma')}"
            ) from exc
        if client is not None:
            self._client = client
        elif host is not None:
            self._client = chromadb.HttpClient(host=host, port=port)
        elif path is not None:
            self._client = chromadb.PersistentClient(path=os.fspath(path))
        else:
            self._client = chromadb.EphemeralClient()
        self._where = f"{host}:{port}" if host is not None else (os.fspath(path) if path else None)
        self._names = (collection_name, f"{collection_name}__unembedded")
        self._collections: dict[bool, Any] = {
            main: self._client.get_or_create_collection(
                name,
                metadata={"hnsw:space": "cosine"},
                embedding_function=None,
            )
            for main, name in zip((True, False), self._names, strict=True)
        }
        super().__init__()

    @property
    def client(self) -> Any:
        """The underlying Chroma client."""
        return self._client

    @property
    def collection_name(self) -> str:
        """The collection of embedded memories."""
        return self._names[0]

    def _stored_dim(self) -> int | None:
        peek = self._collection(True).get(limit=1, include=["embeddings"])
        embeddings = peek.get("embeddings")
        if embeddings is None or len(embeddings) == 0:
            return None
        return len(embeddings[0])

    def _create_main(self, dim: int) -> None:
        del dim  # Chroma fixes the dimension with the first record

    def _records(self, main: bool, result: dict[str, Any]) -> list[Record]:
        # Records written by the original library have the JSON document and only
        # ``id`` in their metadata: they sort first (seq -1) and have a direction.
        name = self._collection(main).name
        out = []
        for i, meta, doc in zip(
            result["ids"], result["metadatas"], result["documents"], strict=True
        ):
            seq, novec = (meta or {}).get("seq", -1), (meta or {}).get("novec", False)
            wrong = (
                "no document" if not isinstance(doc, str)
                else "an 'seq' that is no integer" if type(seq) is not int
                else "a 'novec' that is no boolean" if not isinstance(novec, bool)
                else None
            )
            if wrong is not None:
                raise ValueError(
                    f"memory {str(i)!r} in collection {name!r} holds no memory record: "
                    f"it has {wrong}"
                )
            out.append(Record(str(i), seq, doc, novec, collection=name))
        return out

    def _upsert(self, main: bool, records: list[Record], vectors: list[list[float]]) -> None:
        collection = self._collection(main)
        metadatas: list[dict[str, Any]] = [
            {**(r.fields or {}), "id": r.id, "seq": r.seq, "novec": r.novec} for r in records
        ]
        # Chroma's upsert merges metadata keys: a filter field the old version had and
        # the new one lacks (a metadata key, a label, a scope) is removed as None
        old = collection.get(ids=[r.id for r in records], include=["metadatas"])
        stale = {str(i): meta or {} for i, meta in zip(old["ids"], old["metadatas"], strict=True)}
        for r, meta in zip(records, metadatas, strict=True):
            for name in stale.get(r.id, {}):
                meta.setdefault(name, None)
        collection.upsert(
            ids=[r.id for r in records],
            embeddings=vectors,
            documents=[r.data for r in records],
            metadatas=metadatas,
        )

    def _fetch(self, main: bool, ids: list[str]) -> list[Record]:
        if not ids:
            return []
        return self._records(
            main,
            self._collection(main).get(ids=ids, include=["metadatas", "documents"])
        )

    def _remove(self, main: bool, ids: list[str]) -> None:
        if ids:
            self._collection(main).delete(ids=ids)

    def _scan(self, main: bool, novec_only: bool = False, flt: Any = None) -> list[Record]:
        collection = self._collection(main)
        where = flt
        if novec_only:
            where = {"novec": True} if flt is None else {"$and": [{"novec": True}, flt]}
        out: list[Record] = []
        offset = 0
        while True:
            page = collection.get(
                where=where, limit=_PAGE, offset=offset, include=["metadatas", "documents"]
            )
            records = self._records(main, page)
            out.extend(records)
            if len(records) < _PAGE:
                return out
            offset += _PAGE

    def _seq_and_legacy(self, main: bool) -> tuple[int, list[str]]:
        """The largest ``seq`` and the records without filter fields, reading only
        the metadata."""
        collection = self._collection(main)
        best = -1
        legacy: list[str] = []
        offset = 0
        while True:
            page = collection.get(limit=4 * _PAGE, offset=offset, include=["metadatas"])
            for i, meta in zip(page["ids"], page["metadatas"], strict=True):
                meta = meta or {}
                best = max(best, int(meta.get("seq", -1)))
                if "fv" not in meta:
                    legacy.append(str(i))
            if len(page["ids"]) < 4 * _PAGE:
                return best, legacy
            offset += 4 * _PAGE

    def _set_fields(self, main: bool, fields: list[tuple[str, dict[str, Any]]]) -> None:
        if fields:  # Chroma's update merges metadata keys
            self._collection(main).update(
                ids=[i for i, _ in fields], metadatas=[f for _, f in fields]
            )

    def _rewrite(self, main: bool, records: list[Record], vectors: list[list[float]]) -> None:
        collection = self._collection(main)
        # the stale filter fields are those of the version stored now (another store
        # object may have written it since it was read), as in _upsert
        held = collection.get(ids=[r.id for r in records], include=["metadatas"])
        stored = {str(i): meta or {} for i, meta in zip(held["ids"], held["metadatas"],
                                                        strict=True)}
        kept = [(r, v) for r, v in zip(records, vectors, strict=True)
                if r.id in stored]  # none deleted since
        if not kept:
            return
        metadatas: list[dict[str, Any]] = []
        for r, _ in kept:
            meta = {**(r.fields or {}), "id": r.id, "seq": r.seq, "novec": r.novec}
            for name in stored[r.id]:  # Chroma's update merges metadata keys
                meta.setdefault(name, None)
            metadatas.append(meta)
        # embeddings given: an update of documents without them would have Chroma
        # embed the documents with its own model
        collection.update(
            ids=[r.id for r, _ in kept],
            embeddings=[v for _, v in kept],
            documents=[r.data for r, _ in kept],
            metadatas=metadatas,
        )

    def _render(self, cond: Cond) -> Any:
        """A condition tree as a Chroma ``where``."""
        ops = {"eq": "$eq", "ne": "$ne", "has": "$contains", "hasnot": "$not_contains"}

        def walk(c: Cond) -> dict[str, Any]:
            if c.kind in ("and", "or"):
                return {f"${c.kind}": [walk(x) for x in c.items]}
            if c.kind == "range":
                return {c.key: {f"${c.op}": c.value}}
            return {c.key: {ops[c.kind]: c.value}}

        return walk(cond)

    def _nearest(self, vector: list[float], k: int, flt: Any = None) -> list[str]:
        if k <= 0:
            return []
        # directionless records hold a placeholder vector: never candidates
        where = {"novec": False} if flt is None else {"$and": [{"novec": False}, flt]}
        result = self._collection(True).query(
            query_embeddings=[vector], n_results=k, where=where, include=["distances"]
        )
        return [str(i) for i in result["ids"][0]]

    def _count(self, main: bool, flt: Any = None) -> int:
        collection = self._collection(main)
        if flt is None:
            return int(collection.count())
        total = 0
        offset = 0
        while True:  # Chroma counts a where by listing the matching ids
            page = collection.get(where=flt, limit=4 * _PAGE, offset=offset, include=[])
            total += len(page["ids"])
            if len(page["ids"]) < 4 * _PAGE:
                return total
            offset += 4 * _PAGE

    def _collection(self, main: bool) -> Any:
        """The collection of embedded (``main``) or unembedded memories.

        Raises:
            ValueError: the store is closed.
        """
        try:
            return self._collections[main]
        except KeyError:
            raise ValueError("the ChromaStore is closed") from None

    def close(self) -> None:
        """Drop the references to the collections (Chroma clients need no closing)."""
        self._collections = {}

    def __repr__(self) -> str:
        where = None if self._where is None else redact_address(self._where)
        return f"ChromaStore({where!r}, collection_name={self._names[0]!r})"
