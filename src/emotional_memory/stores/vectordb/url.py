"""``qdrant://HOST[:PORT]/COLLECTION`` (``qdrant+https://`` for TLS) and
``chroma://HOST[:PORT]/COLLECTION``: a vector-database server; states in process
memory (the registry's default) unless a state URL says where."""

from __future__ import annotations

import os
from typing import Any

from emotional_memory.redact import address_secrets, redact
from emotional_memory.stores._shared.urls import (
    QDRANT_API_KEY_ENV,
    Backend,
    OpenedStore,
    StoreURLError,
    require_module,
    server_parts,
)


def open_vector_db(url: str, description: str, options: dict[str, Any]) -> OpenedStore:
    """A Qdrant or Chroma server's store (extras ``qdrant`` / ``chroma``)."""
    scheme = url.partition("://")[0].lower()
    kwargs: dict[str, Any]
    if scheme == "chroma":
        host, port, collection = server_parts(url, 8000)
        require_module("chromadb", "chroma", "the Chroma store")
        from emotional_memory.stores.vectordb.chroma import ChromaStore

        factory: Any = ChromaStore
        kwargs = {"host": host, "port": port}
    else:
        host, port, collection = server_parts(url, 6333)
        require_module("qdrant_client", "qdrant", "the Qdrant store")
        from emotional_memory.stores.vectordb.qdrant import QdrantStore

        http = "https" if scheme == "qdrant+https" else "http"
        shown_host = f"[{host}]" if ":" in host else host
        factory = QdrantStore
        kwargs = {"url": f"{http}://{shown_host}:{port}",
                  "api_key": os.environ.get(QDRANT_API_KEY_ENV) or None}
    if collection is not None:
        kwargs["collection_name"] = collection
    try:
        store = factory(**kwargs)
    except Exception as exc:  # unreachable server, refused key, ...
        secrets = (*address_secrets(url), kwargs.get("api_key") or "")
        reason = " ".join(redact(str(exc), secrets).split())[:300]
        raise StoreURLError(
            f"could not open the store at {description}: {type(exc).__name__}"
            + (f": {reason}" if reason else "")
        ) from None
    return OpenedStore(store, None, description, True, False)  # states: the registry's default


BACKEND = Backend("vectordb", ("chroma", "qdrant", "qdrant+https"), (), open_vector_db)
