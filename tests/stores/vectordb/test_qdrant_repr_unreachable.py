"""A repr never raises: a Qdrant server gone after the store opened (a log line
``%r`` of the store or of its engine lost the record to a logging error)."""

from __future__ import annotations

import json
import threading
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("qdrant_client", reason="the qdrant extra is not installed")


class _Qdrant(BaseHTTPRequestHandler):
    """Answers what opening a store asks: the version, and "no such collection"."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.endswith("/exists"):
            body = {"result": {"exists": False}, "status": "ok", "time": 0.0}
        else:
            body = {"title": "qdrant", "version": "1.20.0"}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Qdrant)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_repr_of_a_store_whose_server_went_away(server: ThreadingHTTPServer) -> None:
    from emotional_memory import EmotionalMemory
    from emotional_memory.embedders import HashingEmbedder
    from emotional_memory.stores.vectordb.qdrant import QdrantStore

    url = f"http://127.0.0.1:{server.server_address[1]}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the client's version check
        store = QdrantStore(url=url, collection_name="c")
    em = EmotionalMemory(store, HashingEmbedder())
    assert repr(store) == f"QdrantStore({url!r}, collection='c', count=0)"
    server.shutdown()
    server.server_close()
    assert repr(store) == f"QdrantStore({url!r}, collection='c', count=unavailable)"
    assert repr(em) == (
        f"EmotionalMemory(store=QdrantStore({url!r}, collection='c', count=unavailable), "
        "memories=unavailable)"
    )
    store.close()
