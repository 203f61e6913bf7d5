"""A hostile tenant against the real service process: limits, hosts, keys, filters.

One server (SQLite, three keys, small limits) answers every limit with 413/422
naming the field and the limit, before anything is stored; filter errors are
located where the filter came from (query or body); an integer too large for a
float is a 422, an already-expired memory a 201. A key-less server refuses other
``Host`` / ``Origin`` values on REST as on MCP (DNS rebinding). A keys file that
repeats a key is refused at start-up, naming both positions. Large answers are
serialised off the event loop.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")
pytest.importorskip("mcp", reason="the server extra is not installed")

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from support.service_process import Server, start

ROOT = "root-key-5d1e2f3a4b5c6d7e8f"
ALICE = "alice-key-1f2e3d4c5b6a7f8e"
BOB = "bob-key-8e7f6a5b4c3d2e1f0a"
KEYS = {ROOT: {"scope": []}, ALICE: {"scope": ["alice"]}, BOB: {"scope": ["bob"]}}
LIMITS = {
    "max-content-bytes": 2000, "max-metadata-bytes": 300, "max-batch-items": 5,
    "max-top-k": 20, "max-list-limit": 50, "max-filter-clauses": 10, "max-filter-depth": 3,
}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("limits")
    keys = tmp / "keys.json"
    keys.write_text(json.dumps(KEYS), encoding="utf-8")
    flags = [x for name, value in LIMITS.items() for x in (f"--{name}", str(value))]
    srv = start(["--keys", str(keys), "--store", f"sqlite:///{tmp / 'm.db'}", *flags],
                tmp / "server.log")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=120.0) as client:
        yield client


def _count(http: httpx.Client, key: str) -> int:
    r = http.get("/v1/memories", params={"limit": 50}, headers=auth(key))
    assert r.status_code == 200, r.text
    return len(r.json()["memories"])


def _refused(r: httpx.Response, status: int, loc: list[Any], limit: str | None) -> str:
    assert r.status_code == status, r.text
    [error] = r.json()["detail"]
    assert error["loc"] == loc, error
    if limit is not None:
        flag = limit.replace("_", "-")
        assert f"{limit}={LIMITS[flag]}" in error["msg"] and f"--{flag}" in error["msg"]
    msg: str = error["msg"]
    return msg


def test_sizes_over_the_limits_are_413_naming_the_limit_and_store_nothing(
    http: httpx.Client,
) -> None:
    before = _count(http, ALICE)
    big = "é" * 1001  # 1001 characters, 2002 UTF-8 bytes
    _refused(http.post("/v1/memories", json={"content": big}, headers=auth(ALICE)),
             413, ["body", "content"], "max_content_bytes")
    ok = http.post("/v1/memories", json={"content": "é" * 1000}, headers=auth(ALICE))
    assert ok.status_code == 201, ok.text  # exactly at the limit
    meta = {"note": "x" * 300}
    _refused(http.post("/v1/memories", json={"content": "a", "metadata": meta},
                       headers=auth(ALICE)), 413, ["body", "metadata"], "max_metadata_bytes")
    items = [{"content": f"item {i}"} for i in range(6)]
    _refused(http.post("/v1/memories/batch", json={"items": items}, headers=auth(ALICE)),
             413, ["body", "items"], "max_batch_items")
    items = [{"content": "fine"}, {"content": "fine"}, {"content": big}]
    _refused(http.post("/v1/memories/batch", json={"items": items}, headers=auth(ALICE)),
             413, ["body", "items", 2, "content"], "max_content_bytes")
    _refused(http.post("/v1/search", json={"query": big}, headers=auth(ALICE)),
             413, ["body", "query"], "max_content_bytes")
    assert _count(http, ALICE) == before + 1


def test_counts_over_the_limits_are_422_naming_the_limit(http: httpx.Client) -> None:
    http.post("/v1/memories", json={"content": "rain on the bridge"}, headers=auth(BOB))
    _refused(http.post("/v1/search", json={"query": "rain", "top_k": 21}, headers=auth(BOB)),
             422, ["body", "top_k"], "max_top_k")
    r = http.post("/v1/search", json={"query": "rain", "top_k": 20}, headers=auth(BOB))
    assert r.status_code == 200 and r.json()["results"]
    _refused(http.get("/v1/memories", params={"limit": 51}, headers=auth(BOB)),
             422, ["query", "limit"], "max_list_limit")
    wide = {"$or": [{"n": i} for i in range(11)]}
    deep: dict[str, Any] = {"n": 1}
    for _ in range(4):
        deep = {"$and": [deep]}
    many_values = {"n": {"$in": list(range(11))}}
    for where, limit in ((wide, "max_filter_clauses"), (deep, "max_filter_depth"),
                         (many_values, "max_filter_clauses")):
        _refused(http.post("/v1/search", json={"query": "rain", "where": where},
                           headers=auth(BOB)), 422, ["body", "where"], limit)
        _refused(http.get("/v1/memories", params={"where": json.dumps(where)},
                          headers=auth(BOB)), 422, ["query", "where"], limit)
    assert http.post("/v1/search", json={"query": "rain", "where": {"$or": [
        {"n": i} for i in range(10)]}}, headers=auth(BOB)).status_code == 200


@pytest.mark.parametrize(("where", "named"), [
    ({"n": {"$regex": "x"}}, "$regex"),
    ({"valence": {"$gt": 10**400}}, "'valence'"),
    ({"retrieval_count": -(10**309)}, "'retrieval_count'"),
])
def test_filter_errors_are_located_where_the_filter_came_from(
    http: httpx.Client, where: dict[str, Any], named: str
) -> None:
    msg = _refused(http.post("/v1/search", json={"query": "q", "where": where},
                             headers=auth(ALICE)), 422, ["body", "where"], None)
    assert named in msg
    msg = _refused(http.get("/v1/memories", params={"where": json.dumps(where)},
                            headers=auth(ALICE)), 422, ["query", "where"], None)
    assert named in msg


def test_an_expired_memory_in_a_scope_with_others_is_stored_and_invisible(
    http: httpx.Client,
) -> None:
    scope = ["expiry"]
    first = http.post("/v1/memories", json={"content": "kept", "scope": scope},
                      headers=auth(ALICE))
    assert first.status_code == 201, first.text
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    gone = http.post("/v1/memories", json={"content": "gone", "scope": scope,
                                           "expires_at": past}, headers=auth(ALICE))
    assert gone.status_code == 201, gone.text
    assert http.get(f"/v1/memories/{gone.json()['id']}", params={"scope": scope},
                    headers=auth(ALICE)).status_code == 404
    listed = http.get("/v1/memories", params={"scope": scope}, headers=auth(ALICE))
    assert [m["content"] for m in listed.json()["memories"]] == ["kept"]


def test_mcp_recall_is_bounded_by_the_same_limits(server: Server) -> None:
    async def run() -> None:
        client = httpx2.AsyncClient(headers=auth(ALICE), timeout=120.0)
        async with Client(streamable_http_client(f"{server.url}/mcp", http_client=client)) as c:
            out = await c.call_tool("recall", {"query": "rain", "top_k": 21})
            assert out.is_error and "max_top_k" in out.content[0].text
            out = await c.call_tool("remember", {"content": "é" * 1001})
            assert out.is_error and "max_content_bytes" in out.content[0].text

    asyncio.run(run())


def test_a_keyless_server_answers_only_its_own_host(tmp_path: Path) -> None:
    srv = start(["--no-auth"], tmp_path / "noauth.log")
    port = srv.url.rsplit(":", 1)[1]
    try:
        with httpx.Client(base_url=srv.url, timeout=120.0) as http:
            body = {"content": "planted by a page"}
            evil = {"Host": f"attacker.example:{port}"}
            assert http.post("/v1/memories", json=body, headers=evil).status_code == 421
            assert http.get("/v1/memories", headers=evil).status_code == 421
            origin = {"Origin": "http://attacker.example"}
            assert http.post("/v1/memories", json=body, headers=origin).status_code == 403
            mcp = http.post("/mcp", headers={**evil, "Accept": "application/json"},
                            json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert mcp.status_code == 421
            assert http.get("/v1/memories").json()["memories"] == []
            for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
                r = http.post("/v1/memories", json=body, headers={"Host": host})
                assert r.status_code == 201, r.text
            assert http.post("/v1/memories", json=body, headers={
                "Origin": f"http://localhost:{port}"}).status_code == 201
            # "any port" includes none (port 80) and a name in any case, on REST and
            # MCP alike; MCP once refused these with the SDK's own stricter check
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            accept = {"Accept": "application/json, text/event-stream"}
            for host in ("localhost", "[::1]", f"LOCALHOST:{port}", "127.0.0.1"):
                assert http.get("/v1/state", headers={"Host": host}).status_code == 200, host
                r = http.post("/mcp", json=ping, headers={**accept, "Host": host})
                assert r.status_code == 200, (host, r.text)
            # a port that is not digits is no loopback Host (the SDK took a prefix)
            for host in ("127.0.0.1:80@attacker.example", "[::1]attacker.example",
                         "localhost:1:2", f"localhost:{port}.attacker.example"):
                assert http.get("/v1/state", headers={"Host": host}).status_code == 421, host
                r = http.post("/mcp", json=ping, headers={**accept, "Host": host})
                assert r.status_code == 421, (host, r.text)
    finally:
        srv.stop()


def test_a_keyed_loopback_server_answers_any_host_on_mcp_as_on_rest(
    http: httpx.Client,
) -> None:
    """With keys and no --allowed-host, REST and MCP answer any ``Host`` (the help's
    default). Behind a proxy passing its own name (``Host: memories.example``), MCP
    once answered 421 "Invalid Host header" on a 127.0.0.1 bind while REST answered."""
    mcp = {**auth(ALICE), "Accept": "application/json, text/event-stream"}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    for headers in ({"Host": "memories.example"},
                    {"Host": "memories.example:443", "Origin": "https://memories.example"}):
        assert http.get("/v1/state", headers={**auth(ALICE), **headers}).status_code == 200
        r = http.post("/mcp", json=call, headers={**mcp, **headers})
        assert r.status_code == 200, r.text
        assert "remember" in r.text
    assert http.post("/mcp", json=call, headers={"Host": "memories.example"}).status_code == 401


def test_configured_hosts_gate_rest_and_mcp_alike() -> None:
    from emotional_memory import EmotionalMemory, InMemoryStore
    from emotional_memory.embedders import HashingEmbedder
    from emotional_memory.server.app import TrustedHosts, build_app
    from emotional_memory.server.service import MemoryService

    hosts = TrustedHosts(["memories.internal:*", "10.0.0.5:8765", "[::1]:*"])
    assert hosts.allows("memories.internal:443") and hosts.allows("MEMORIES.internal")
    assert hosts.allows("10.0.0.5:8765") and not hosts.allows("10.0.0.5:8766")
    assert hosts.allows("[::1]:9") and not hosts.allows("[::2]:9")
    assert not hosts.allows("memories.internal.attacker.example:80") and not hosts.allows("")
    assert hosts.allows_origin(None) and hosts.allows_origin("https://memories.internal")
    assert not hosts.allows_origin("https://evil.example") and not hosts.allows_origin("null")
    with pytest.raises(ValueError, match="allowed host"):
        TrustedHosts(["http://x/"])

    service = MemoryService(EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8)))
    app = build_app(service, None, allowed_hosts=["memories.internal:*"])

    async def run() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport,
                                     base_url="http://memories.internal:8765") as client:
            assert (await client.get("/v1/memories")).status_code == 200
            r = await client.get("/v1/memories", headers={"Host": "127.0.0.1:8765"})
            assert r.status_code == 421

    asyncio.run(run())


def test_a_keyless_server_on_another_loopback_address_answers_its_own_host() -> None:
    """``--no-auth --host 127.0.0.2`` (or ``0:0:0:0:0:0:0:1``) is a loopback bind the CLI
    accepts; its default Host list once held only 127.0.0.1, localhost and [::1], so it
    answered 421 to every request addressed to it."""
    from emotional_memory import EmotionalMemory, InMemoryStore
    from emotional_memory.embedders import HashingEmbedder
    from emotional_memory.server.app import build_app
    from emotional_memory.server.service import MemoryService

    async def status(app: Any, host: str) -> int:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return (await client.get("/v1/state", headers={"Host": host})).status_code

    for bind, own in (("127.0.0.2", "127.0.0.2:8765"),
                      ("0:0:0:0:0:0:0:1", "[0:0:0:0:0:0:0:1]:8765")):
        service = MemoryService(EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8)))
        app = build_app(service, None, host=bind)
        assert asyncio.run(status(app, own)) == 200, bind
        assert asyncio.run(status(app, "localhost:8765")) == 200
        assert asyncio.run(status(app, "127.0.0.3:8765")) == 421


def test_a_keys_file_repeating_a_key_is_refused_naming_positions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from emotional_memory.server.cli import main

    path = tmp_path / "keys.json"
    entries = [f'"{ALICE}": {{"scope": ["alice"]}}', f'"{BOB}": {{"scope": ["bob"]}}',
               f'"{ALICE}": {{"scope": []}}']
    path.write_text("{" + ", ".join(entries) + "}", encoding="utf-8")
    assert main(["serve", "--keys", str(path)]) == 2
    err = capsys.readouterr().err
    assert "entry #3 repeats the key of entry #1" in err and ALICE not in err
    path.write_text(f'{{"{ALICE}": {{"scope": ["alice"], "scope": []}}}}', encoding="utf-8")
    assert main(["serve", "--keys", str(path)]) == 2
    err = capsys.readouterr().err
    assert "entry #1" in err and "repeats 'scope'" in err and ALICE not in err


def test_large_answers_are_serialised_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch's, a page's and a search's answer (up to ~25 MB of JSON) are built and
    serialised in a worker thread, never on the event loop other requests wait on;
    the answers and the OpenAPI schema stay those of the response models."""
    import threading

    from emotional_memory import EmotionalMemory, InMemoryStore
    from emotional_memory.embedders import HashingEmbedder
    from emotional_memory.server import rest
    from emotional_memory.server.app import build_app
    from emotional_memory.server.service import MemoryService

    threads: list[int] = []
    for name in ("memory_out", "result_out"):
        original = getattr(rest, name)

        def spy(*args: Any, _original: Any = original) -> Any:
            threads.append(threading.get_ident())
            return _original(*args)

        monkeypatch.setattr(rest, name, spy)
    service = MemoryService(EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=8)))
    app = build_app(service, None)

    async def run() -> None:
        loop_thread = threading.get_ident()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport,
                                     base_url="http://127.0.0.1:8765") as client:
            made = await client.post("/v1/memories/batch", json={
                "items": [{"content": f"harbour rain {i}", "metadata": {"i": i}}
                          for i in range(3)]})
            assert made.status_code == 201
            assert made.headers["content-type"] == "application/json"
            listed = await client.get("/v1/memories", params={"limit": 2})
            found = await client.post("/v1/search", json={"query": "harbour", "top_k": 2})
            assert listed.status_code == found.status_code == 200
        batch = made.json()["memories"]
        assert [m["metadata"]["i"] for m in batch] == [0, 1, 2]
        assert listed.json()["memories"] == batch[:2]
        results = found.json()["results"]
        assert len(results) == 2 and "relevance" not in results[0]
        assert {r["id"] for r in results} <= {m["id"] for m in batch}
        assert len(threads) == 3 + 2 + 2 and loop_thread not in threads

    asyncio.run(run())
    paths = app.app.openapi()["paths"]
    for path, method, code, model in (("/v1/memories/batch", "post", "201", "MemoriesOut"),
                                      ("/v1/memories", "get", "200", "MemoriesOut"),
                                      ("/v1/search", "post", "200", "SearchOut")):
        schema = paths[path][method]["responses"][code]["content"]["application/json"]
        assert schema["schema"]["$ref"].endswith(f"/{model}")


def test_mcp_bodies_are_bounded_by_max_body_bytes_as_rest_bodies_are(tmp_path: Path) -> None:
    """The MCP SDK bounds its bodies by 4 MiB of its own, which once applied on /mcp
    whatever ``--max-body-bytes`` said: a memory REST stored under raised limits was a
    plain-text 413 over MCP. Now one limit for both, and one JSON 413 over it."""
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(KEYS), encoding="utf-8")
    srv = start(["--keys", str(keys), "--embedder", "hashing", "--max-content-bytes",
                 "8000000", "--max-body-bytes", "6000000"], tmp_path / "server.log")
    mcp = {**auth(ALICE), "Accept": "application/json, text/event-stream"}

    def remember(content: str) -> httpx.Response:
        return http.post("/mcp", headers=mcp, json={
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "remember", "arguments": {"content": content}}})

    try:
        with httpx.Client(base_url=srv.url, timeout=120.0) as http:
            big = "m" * 5_000_000
            rest = http.post("/v1/memories", json={"content": big}, headers=auth(ALICE))
            assert rest.status_code == 201, rest.text[:300]
            r = remember(big)
            assert r.status_code == 200, r.text[:300]
            assert r.json()["result"]["isError"] is False, r.text[:300]
            for over in (http.post("/v1/memories", json={"content": big + "m" * 1_000_000},
                                   headers=auth(ALICE)),
                         remember(big + "m" * 1_000_000)):
                assert over.status_code == 413
                assert over.json() == {"detail": "request body too large"}
            assert _count(http, ALICE) == 2
    finally:
        srv.stop()
