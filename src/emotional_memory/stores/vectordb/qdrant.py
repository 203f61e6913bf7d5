"""A memory store in Qdrant (extra ``qdrant``: ``pip install 'emotional-memory-jax[qdrant]'``).

``QdrantStore()`` runs Qdrant embedded in memory, ``QdrantStore(path=...)`` embedded on
disk, ``QdrantStore(url=...)`` against a server or cluster (for a bank larger than one
machine). Qdrant proposes cosine candidates; the store ranks them exactly
(:mod:`~emotional_memory.stores.vectordb.base`). Point layout, payload indexes and
filters: ``stores/vectordb/README.md``. Collections written by the original library
(points with only ``id`` and ``data``) open as they are, their memories first in
``list_all``.
"""

from __future__ import annotations

import uuid
from typing import Any

from emotional_memory._extras import install_hint
from emotional_memory.redact import redact_address
from emotional_memory.stores.vectordb.base import Record, VectorDBStore
from emotional_memory.stores.vectordb.filter import NEVER, Cond

__all__ = ["QdrantStore"]

_NAMESPACE = uuid.NAMESPACE_OID
_PAGE = 512
_PAYLOAD = ["id", "seq", "data", "novec"]
_INDEXED = {
    "sp": "keyword", "x_exp": "float", "b_val": "float", "b_aro": "float",
    "b_dom": "float", "b_rc": "float", "b_ts": "float", "b_emo": "keyword",
    "b_lab": "bool", "me": "keyword", "mnn": "keyword", "lk": "keyword", "novec": "bool",
}
"""Payload indexes made with each collection (kinds as Qdrant names them)."""


def _point_id(memory_id: str) -> str:
    """The Qdrant point id of a memory (Qdrant ids must be UUIDs or integers).

    The original's mapping (``uuid5(NAMESPACE_OID, id)``, also under its name
    :func:`_uuid_for`), so a collection written by the original keeps every memory
    at the point this store looks for.

    Args:
        memory_id: the memory's id.

    Returns:
        The point id, a 36-character UUID string.
    """
    return str(uuid.uuid5(_NAMESPACE, memory_id))


#: The original's name for :func:`_point_id`.
_uuid_for = _point_id


class QdrantStore(VectorDBStore):
    """A :class:`~emotional_memory.interfaces.MemoryStore` in a Qdrant collection."""

    def __init__(
        self,
        *,
        url: str | None = None,
        path: str | None = None,
        collection_name: str = "emotional_memory",
        api_key: str | None = None,
        client: Any | None = None,
    ) -> None:
        """Open (or prepare to create) the collection.

        Args:
            url: Qdrant server URL (``http://host:6333``); exclusive with ``path``.
            path: Directory of an embedded on-disk Qdrant; exclusive with ``url``.
                With neither, an embedded in-memory Qdrant (lost on close).
            collection_name: The collection of memories; a second collection
                ``{collection_name}__unembedded`` holds memories without embeddings.
                Both are created on first use.
            api_key: API key for Qdrant Cloud / a secured server.
            client: A ready ``QdrantClient`` to use instead (url/path/api_key ignored).

        Raises:
            ImportError: When qdrant-client is not installed.
            ValueError: When both ``url`` and ``path`` are given.
        """
        if url is not None and path is not None:
            raise ValueError("pass at most one of url and path")
        try:
            from qdrant_client import QdrantClient, models
        except ImportError as exc:
            raise ImportError(
                f"QdrantStore needs qdrant-client: {install_hint('qdrant')}"
            ) from exc
        self._models = models
        if client is not None:
            self._client = client
        elif url is not None:
            self._client = QdrantClient(url=url, api_key=api_key)
        elif path is not None:
            self._client = QdrantClient(path=str(path))
        else:
            self._client = QdrantClient(":memory:")
        self._url = url
        self._path = path
        self._main = collection_name
        self._side = f"{collection_name}__unembedded"
        self._closed = False
        # payload indexes only matter (and only exist) on a server
        self._indexes: set[str] | None = (
            None if type(getattr(self._client, "_client", None)).__name__ == "QdrantLocal"
            else set()
        )
        super().__init__()
        if self._indexes is None and client is None:
            # Embedded Qdrant of this store's own (one process holds its directory;
            # its filters are a loop over every point): remember whether any memory
            # may expire, so the root view's count needs no filtered pass while none
            # does. A client passed in may serve other store objects too.
            m = self._models
            expiring = m.Filter(must=[m.FieldCondition(key="x_exp",
                                                       range=m.Range(lt=NEVER))])
            self._may_expire = any(self._count(main, expiring) for main in (True, False))

    @property
    def client(self) -> Any:
        """The underlying ``QdrantClient`` (once handed out it may serve other store
        objects: whether a memory may expire is then asked of the database)."""
        with self._lock:
            self._may_expire = None
        return self._client

    @property
    def collection_name(self) -> str:
        """The collection of embedded memories."""
        return self._main

    @property
    def _collection_name(self) -> str:
        """The original's attribute: :attr:`collection_name`."""
        return self._main

    @property
    def _collection_ready(self) -> bool:
        """The original's attribute: whether the collection of embedded memories exists."""
        return self._dim is not None

    def _name(self, main: bool) -> str:
        return self._main if main else self._side

    def _exists(self, main: bool) -> bool:
        return bool(self._client.collection_exists(self._name(main)))

    def _stored_dim(self) -> int | None:
        if not self._exists(True):
            return None
        vectors = self._client.get_collection(self._main).config.params.vectors
        return int(vectors.size)

    def _create_main(self, dim: int) -> None:
        self._create(True, dim)

    def _create(self, main: bool, dim: int) -> None:
        m = self._models
        try:
            self._client.create_collection(
                self._name(main),
                vectors_config=m.VectorParams(size=dim, distance=m.Distance.COSINE),
            )
        except Exception:
            if not self._exists(main):
                raise
            # another store object (process) created it meanwhile: its vector size
            # is checked by the write
        self._index(main, _INDEXED)

    def _index(self, main: bool, kinds: dict[str, str]) -> None:
        """Make the payload indexes ``kinds`` (field -> kind) that are not yet made."""
        if self._indexes is None:
            return
        for name, kind in kinds.items():
            key = f"{int(main)}:{name}"
            if key in self._indexes:
                continue
            self._client.create_payload_index(
                self._name(main), field_name=name, field_schema=kind, wait=True
            )
            self._indexes.add(key)

    def _record(self, main: bool, point: Any) -> Record:
        # Points written by the original library carry only ``id`` and ``data``: they
        # sort first (seq -1, in scroll order) and count as having a direction.
        payload = point.payload or {}
        memory_id, data = payload.get("id"), payload.get("data")
        seq, novec = payload.get("seq", -1), payload.get("novec", False)
        wrong = (
            "no string 'id'" if not isinstance(memory_id, str)
            else "no string 'data'" if not isinstance(data, str)
            else "an 'seq' that is no integer" if type(seq) is not int
            else "a 'novec' that is no boolean" if not isinstance(novec, bool)
            else None
        )
        if wrong is not None:
            of = f" (memory {memory_id!r})" if isinstance(memory_id, str) else ""
            raise ValueError(
                f"point {str(point.id)!r}{of} in collection {self._name(main)!r} holds no "
                f"memory record: its payload has {wrong}"
            )
        return Record(str(memory_id), seq, str(data), novec, collection=self._name(main))

    def _upsert(self, main: bool, records: list[Record], vectors: list[list[float]]) -> None:
        if not main and not self._exists(False):
            self._create(False, 1)
        points = [
            self._models.PointStruct(
                id=_point_id(r.id),
                vector=v,
                payload={
                    **(r.fields or {}),
                    "id": r.id, "seq": r.seq, "data": r.data, "novec": r.novec,
                },
            )
            for r, v in zip(records, vectors, strict=True)
        ]
        self._client.upsert(self._name(main), points=points, wait=True)

    def _fetch(self, main: bool, ids: list[str]) -> list[Record]:
        if not ids or not self._exists(main):
            return []
        points = self._client.retrieve(
            self._name(main), ids=[_point_id(i) for i in ids], with_payload=_PAYLOAD
        )
        return [self._record(main, p) for p in points]

    def _remove(self, main: bool, ids: list[str]) -> None:
        if not ids or not self._exists(main):
            return
        selector = self._models.PointIdsList(points=[_point_id(i) for i in ids])
        self._client.delete(self._name(main), points_selector=selector, wait=True)

    def _scan(self, main: bool, novec_only: bool = False, flt: Any = None) -> list[Record]:
        if not self._exists(main):
            return []
        m = self._models
        if novec_only:
            novec = m.FieldCondition(key="novec", match=m.MatchValue(value=True))
            flt = m.Filter(must=[novec] if flt is None else [novec, flt])
        out: list[Record] = []
        offset: Any = None
        while True:
            points, offset = self._client.scroll(
                self._name(main),
                scroll_filter=flt,
                limit=_PAGE,
                offset=offset,
                with_payload=_PAYLOAD,
                with_vectors=False,
            )
            out.extend(self._record(main, p) for p in points)
            if offset is None:
                return out

    def _seq_and_legacy(self, main: bool) -> tuple[int, list[str]]:
        """The largest ``seq`` and the points without filter fields, reading only
        ``seq``, ``fv`` and ``id``."""
        if not self._exists(main):
            return -1, []
        best = -1
        legacy: list[str] = []
        offset: Any = None
        while True:
            points, offset = self._client.scroll(
                self._name(main),
                limit=4 * _PAGE,
                offset=offset,
                with_payload=["seq", "fv", "id"],
                with_vectors=False,
            )
            for p in points:
                best = max(best, int(p.payload.get("seq", -1)))
                if "fv" not in p.payload:
                    legacy.append(str(p.payload["id"]))
            if offset is None:
                return best, legacy

    def _set_fields(self, main: bool, fields: list[tuple[str, dict[str, Any]]]) -> None:
        m = self._models
        if not fields:
            return
        operations = [
            m.SetPayloadOperation(set_payload=m.SetPayload(payload=f, points=[_point_id(i)]))
            for i, f in fields
        ]
        self._client.batch_update_points(self._name(main), update_operations=operations,
                                         wait=True)
        self._index(main, _INDEXED)

    def _rewrite(self, main: bool, records: list[Record], vectors: list[list[float]]) -> None:
        m = self._models
        operations: list[Any] = []
        for r, v in zip(records, vectors, strict=True):
            point = _point_id(r.id)
            operations.append(m.OverwritePayloadOperation(overwrite_payload=m.SetPayload(
                # the whole payload replaced: stale fields go with it
                payload={**(r.fields or {}), "id": r.id, "seq": r.seq, "data": r.data,
                         "novec": r.novec},
                points=[point],
            )))
            operations.append(m.UpdateVectorsOperation(update_vectors=m.UpdateVectors(
                points=[m.PointVectors(id=point, vector=v)])))
        try:
            self._client.batch_update_points(self._name(main), update_operations=operations,
                                             wait=True)
        except Exception:
            # a point deleted since the read (another store object) fails the batch:
            # the records still held are written again (idempotent), the deleted stay so
            held = {r.id for r in self._fetch(main, [r.id for r in records])}
            if len(held) == len({r.id for r in records}):
                raise
            kept = [(r, v) for r, v in zip(records, vectors, strict=True) if r.id in held]
            if kept:
                self._rewrite(main, [r for r, _ in kept], [v for _, v in kept])

    def _render(self, cond: Cond) -> Any:
        """A condition tree as a Qdrant ``Filter`` (making the payload indexes of
        metadata keys it names, on a server)."""
        m = self._models
        kinds = {"ms_": "keyword", "mn_": "float", "mb_": "bool"}
        named: dict[str, str] = {}

        def walk(c: Cond) -> Any:
            if c.kind == "and":
                return m.Filter(must=[walk(x) for x in c.items])
            if c.kind == "or":
                return m.Filter(should=[walk(x) for x in c.items])
            if c.key[:3] in kinds:
                named[c.key] = kinds[c.key[:3]]
            if c.kind == "range":
                return m.FieldCondition(key=c.key, range=m.Range(**{c.op: c.value}))
            if isinstance(c.value, float):  # numbers: compared as float64 ranges
                match = m.FieldCondition(key=c.key, range=m.Range(gte=c.value, lte=c.value))
            else:
                match = m.FieldCondition(key=c.key, match=m.MatchValue(value=c.value))
            if c.kind in ("eq", "has"):
                return match
            return m.Filter(must_not=[match])  # ne / hasnot: a missing key matches

        out = walk(cond)
        for main in (True, False):
            if self._exists(main):
                self._index(main, named)
        return out if isinstance(out, m.Filter) else m.Filter(must=[out])

    def _nearest(self, vector: list[float], k: int, flt: Any = None) -> list[str]:
        if k <= 0:
            return []
        # directionless records hold a placeholder vector: never candidates
        m = self._models
        novec = m.FieldCondition(key="novec", match=m.MatchValue(value=True))
        flt = m.Filter(must_not=[novec]) if flt is None else m.Filter(must=[flt], must_not=[novec])
        response = self._client.query_points(
            self._main, query=vector, query_filter=flt, limit=k, with_payload=["id"],
            with_vectors=False,
        )
        return [str(p.payload["id"]) for p in response.points]

    def _count(self, main: bool, flt: Any = None) -> int:
        if not self._exists(main):
            return 0
        return int(self._client.count(self._name(main), count_filter=flt, exact=True).count)

    def close(self) -> None:
        """Close the client (idempotent)."""
        if not self._closed:
            self._closed = True
            self._client.close()

    def __repr__(self) -> str:
        where = redact_address(self._url) if self._url else self._path or ":memory:"
        try:
            count: object = "closed" if self._closed else len(self)
        except Exception:  # a server gone: a repr (a log line's %r) never raises
            count = "unavailable"
        return f"QdrantStore({where!r}, collection={self._main!r}, count={count})"
