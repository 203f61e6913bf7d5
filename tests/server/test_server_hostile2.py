"""A hostile tenant against the real process, continued: request shapes that cost the
server more than the documented limits allow, and requests the gate let through to a
misleading answer.

One ``emotional-memory serve`` over SQLite (``tests/support/service_process.py``),
driven with httpx. Each case once answered out of contract (unbounded work, a stream
that never ends, a 422 where a 415 is promised); each must answer its documented
4xx quickly, store nothing, and leave the server answering.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")
pytest.importorskip("mcp", reason="the server extra is not installed")

import httpx

from support.service_process import Server, start

ALICE = "alice-key-7c1d2e3f4a5b6c7d"
KEYS = {ALICE: {"scope": ["alice"]}}
HEADERS = {"Authorization": f"Bearer {ALICE}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One SQLite-backed server for the module (each test in a scope of its own)."""
    tmp = tmp_path_factory.mktemp("hostile2")
    keys = tmp / "keys.json"
    keys.write_text(json.dumps(KEYS), encoding="utf-8")
    srv = start(["--keys", str(keys), "--store", f"sqlite:///{tmp / 'm.db'}",
                 "--embedder", "hashing"], tmp / "server.log")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=HEADERS, timeout=120.0) as client:
        yield client


def _stored(http: httpx.Client, scope: str) -> list[dict[str, Any]]:
    r = http.get("/v1/memories", params={"scope": scope})
    assert r.status_code == 200, r.text
    memories: list[dict[str, Any]] = r.json()["memories"]
    return memories


@pytest.mark.parametrize("item", ["{}", "1"])
def test_a_batch_over_the_item_limit_is_refused_before_its_items_are_validated(
    http: httpx.Client, server: Server, item: str
) -> None:
    """200,000 invalid items (a 1 MB body) once got each item validated, and a 422
    listing one error per item (about 15 MB); the count is over max_batch_items, so
    the answer is the 413 naming the limit, small, whatever the items hold."""
    body = '{"items": [' + ",".join([item] * 200_000) + '], "scope": ["amplified"]}'
    started = time.monotonic()
    r = http.post("/v1/memories/batch", content=body.encode(),
                  headers={"Content-Type": "application/json"})
    elapsed = time.monotonic() - started
    assert r.status_code == 413, r.text[:300]
    assert len(r.content) < 2048
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "items"] and "max_batch_items" in error["msg"]
    assert elapsed < 30.0
    # within the limit, an invalid item is still located at its position
    r = http.post("/v1/memories/batch", json={"items": [{"content": "ok"}, {}],
                                              "scope": ["amplified"]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "items", 1, "content"]
    assert _stored(http, "amplified") == []
    assert "unhandled" not in server.log_text()


def test_an_mcp_get_stream_is_refused_not_held_open(http: httpx.Client, server: Server) -> None:
    """The endpoint is stateless: no message of the server's own ever goes out on a GET
    stream, which once stayed open (and idle) until the client hung up. 405, at once."""
    with http.stream("GET", "/mcp", headers={"Accept": "text/event-stream"},
                     timeout=httpx.Timeout(30.0)) as r:
        assert r.status_code == 405
        assert "POST" in r.headers.get("allow", "")
        r.read()
    tools = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                      headers={"Accept": "application/json, text/event-stream"})
    assert tools.status_code == 200 and "remember" in tools.text


@pytest.mark.parametrize("media", ["text/plain+json", "application/x/+json", "text/json"])
def test_a_body_whose_media_type_fastapi_does_not_read_as_json_is_a_415(
    http: httpx.Client, media: str
) -> None:
    """``text/plain+json`` once passed the gate (it ends with +json) to a body FastAPI
    leaves unread: a 422 "Input should be a valid dictionary" for a valid JSON body."""
    body = json.dumps({"content": "typed", "scope": [media]}).encode()
    r = http.post("/v1/memories", content=body, headers={"Content-Type": media})
    assert r.status_code == 415, r.text
    ok = http.post("/v1/memories", content=body,
                   headers={"Content-Type": "application/vnd.api+json; charset=utf-8"})
    assert ok.status_code == 201, ok.text
    assert [m["content"] for m in _stored(http, media)] == ["typed"]
