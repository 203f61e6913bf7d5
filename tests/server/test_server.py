"""The memory service against the real process: ``emotional-memory serve`` on 127.0.0.1.

Every test here drives a server started as a subprocess (``tests/support/service_process.py``)
with httpx and with the official ``mcp`` SDK's clients (streamable HTTP and stdio):
per-key isolation, 401s, bad input (nothing stored), ``where`` filters, a bounded
load test, the MCP tools over HTTP, and no key in the log (restarts, stdio and the CLI:
``test_server_process.py``).
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

from emotional_memory.affect import CoreAffect
from emotional_memory.categorize import categorize_affect
from support.rest_keys import ADMIN, ALICE, BOB, KEYS, all_memories, auth, post_memory
from support.service_process import Server, start

BODY_LIMIT = 1 << 20


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "keys.json"
    path.write_text(json.dumps(KEYS), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def server(keys_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One in-memory server for the module (each test works in scopes of its own)."""
    log = tmp_path_factory.mktemp("log") / "server.log"
    srv = start(["--keys", str(keys_file), "--max-body-bytes", str(BODY_LIMIT),
                 "--embedder", "hashing"], log)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=120.0) as client:
        yield client


# ---------------------------------------------------------------------- basics


def test_healthz_and_openapi_need_no_key(http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").json() == {"status": "ready"}
    doc = http.get("/openapi.json").json()
    paths = doc["paths"]
    assert set(paths["/v1/memories"]) == {"post", "get"}
    assert set(paths["/v1/memories/{memory_id}"]) == {"get", "delete"}
    assert "post" in paths["/v1/memories/batch"] and "post" in paths["/v1/search"]
    assert "get" in paths["/v1/state"] and "put" in paths["/v1/state/affect"]
    schemas = doc["components"]["schemas"]
    assert {"content", "metadata", "affect", "expires_at", "scope"} <= set(
        schemas["MemoryIn"]["properties"]
    )
    assert {"query", "top_k", "where", "explain", "scope"} <= set(
        schemas["SearchIn"]["properties"]
    )
    assert schemas["SearchIn"]["properties"]["top_k"]["default"] == 5
    assert "401" in paths["/v1/search"]["post"]["responses"]


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Bearer not-a-configured-key-123"},
    {"Authorization": f"Basic {ALICE}"},
    {"Authorization": "Bearer"},
    {"Authorization": f"Bearer {ALICE}x"},
    {"Authorization": f"Bearer {ALICE[:-1]}"},
])
def test_no_or_unknown_key_is_401_everywhere(http: httpx.Client, headers: dict[str, str]) -> None:
    before = len(all_memories(http, ADMIN))
    calls = [
        ("POST", "/v1/memories", {"content": "sneaky"}),
        ("POST", "/v1/memories/batch", {"items": [{"content": "sneaky"}]}),
        ("POST", "/v1/search", {"query": "x"}),
        ("GET", "/v1/memories", None),
        ("GET", "/v1/memories/some-id", None),
        ("DELETE", "/v1/memories/some-id", None),
        ("GET", "/v1/state", None),
        ("PUT", "/v1/state/affect", {"valence": 0.1, "arousal": 0.1}),
        ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    ]
    for method, path, body in calls:
        r = http.request(method, path, json=body, headers=headers)
        assert r.status_code == 401, (method, path, r.text)
        assert r.json() == {"detail": "missing or unknown API key"}
        assert r.headers["www-authenticate"] == "Bearer"
    assert len(all_memories(http, ADMIN)) == before


def test_create_get_delete(http: httpx.Client) -> None:
    body = {
        "content": "The server crashed before the demo.",
        "metadata": {"topic": "work", "tags": {"priority": 2}},
        "affect": {"valence": -0.8, "arousal": 0.9, "dominance": 0.3},
        "scope": ["crud"],
    }
    made = post_memory(http, ALICE, body)
    assert made["content"] == body["content"]
    assert made["metadata"] == body["metadata"]
    assert made["scope"] == ["crud"]  # relative to the key's scope
    assert made["affect"] == body["affect"]
    label = categorize_affect(CoreAffect(valence=-0.8, arousal=0.9, dominance=0.3))
    assert made["emotion"]["name"] == label.name
    assert made["emotion"]["primary"] == label.primary
    stamp = datetime.fromisoformat(made["timestamp"])
    assert abs(stamp - datetime.now(UTC)) < timedelta(minutes=5)

    assert made["affect_source"] == "given"
    stored = {k: v for k, v in made.items()
              if k not in ("affect_source", "mood_before", "mood_after", "mood_change")}
    got = http.get(f"/v1/memories/{made['id']}", headers=auth(ALICE))
    assert got.status_code == 200 and got.json() == stored
    # the administrator sees it at its full path
    admin = http.get(f"/v1/memories/{made['id']}", headers=auth(ADMIN)).json()
    assert admin["scope"] == ["alice", "crud"]

    r = http.delete(f"/v1/memories/{made['id']}", headers=auth(ALICE))
    assert r.status_code == 204 and r.content == b""
    assert http.get(f"/v1/memories/{made['id']}", headers=auth(ALICE)).status_code == 404
    assert http.delete(f"/v1/memories/{made['id']}", headers=auth(ALICE)).status_code == 404
    assert made["id"] not in {m["id"] for m in all_memories(http, ADMIN)}


def test_batch_is_one_call_and_keeps_order(http: httpx.Client) -> None:
    items = [
        {"content": f"batch event {i}", "metadata": {"i": i},
         **({"affect": {"valence": 0.5, "arousal": 0.4}} if i % 2 else {})}
        for i in range(12)
    ]
    r = http.post("/v1/memories/batch", json={"items": items, "scope": ["batch"]},
                  headers=auth(ALICE))
    assert r.status_code == 201, r.text
    made = r.json()["memories"]
    assert [m["content"] for m in made] == [it["content"] for it in items]
    assert [m["metadata"] for m in made] == [it["metadata"] for it in items]
    for it, m in zip(items, made, strict=True):
        if "affect" in it:
            assert m["affect"]["valence"] == it["affect"]["valence"]
    listed = all_memories(http, ALICE, scope=["batch"])
    assert [m["id"] for m in listed] == [m["id"] for m in made]


def test_search_scores_and_explain(http: httpx.Client) -> None:
    scope = ["search"]
    texts = ["The quarterly budget spreadsheet is due Friday",
             "We adopted a small grey kitten named Pixel",
             "The kitten knocked a glass off the table"]
    for t in texts:
        post_memory(http, ALICE, {"content": t, "scope": scope})
    r = http.post("/v1/search", json={"query": "kitten", "top_k": 2, "scope": scope,
                                      "explain": True}, headers=auth(ALICE))
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert len(results) == 2
    assert {x["content"] for x in results} == set(texts[1:])
    assert results[0]["score"] >= results[1]["score"]
    for x in results:
        b = x["breakdown"]
        assert b["total_score"] == pytest.approx(x["score"])
        assert sum(b["weighted_signals"].values()) == pytest.approx(x["score"])
        assert sum(b["weights"].values()) == pytest.approx(1.0)
        assert x["retrieval_count"] == 1
    plain = http.post("/v1/search", json={"query": "kitten", "scope": scope},
                      headers=auth(ALICE)).json()["results"]
    assert len(plain) == 3 and all(x["breakdown"] is None for x in plain)


def test_list_pages(http: httpx.Client) -> None:
    scope = ["pages"]
    ids = [m["id"] for m in http.post(
        "/v1/memories/batch", json={"items": [{"content": f"p{i}"} for i in range(7)],
                                    "scope": scope}, headers=auth(ALICE)).json()["memories"]]
    got = []
    for offset in range(0, 7, 3):
        r = http.get("/v1/memories", params={"scope": scope, "limit": 3, "offset": offset},
                     headers=auth(ALICE))
        got.extend(m["id"] for m in r.json()["memories"])
    assert got == ids
    assert http.get("/v1/memories", params={"limit": 1000}, headers=auth(ALICE)).status_code \
        == 200


# ---------------------------------------------------------------------- bad input


BAD_BODIES: list[tuple[str, str, Any, int, str]] = [
    # (method, path, body, status, a field the error must name)
    ("POST", "/v1/memories", {}, 422, "content"),
    ("POST", "/v1/memories", {"content": 5}, 422, "content"),
    ("POST", "/v1/memories", {"content": ""}, 422, "content"),  # as MCP's remember
    ("POST", "/v1/memories/batch", {"items": [{"content": "ok"}, {"content": ""}]}, 422,
     "content"),
    ("POST", "/v1/memories", {"content": "x", "affect": {"valence": 2, "arousal": 0.5}}, 422,
     "valence"),
    ("POST", "/v1/memories", {"content": "x", "affect": {"valence": 0, "arousal": -0.1}}, 422,
     "arousal"),
    ("POST", "/v1/memories", {"content": "x", "affect": {"valence": 0}}, 422, "arousal"),
    ("POST", "/v1/memories", {"content": "x", "metadata": [1, 2]}, 422, "metadata"),
    ("POST", "/v1/memories", {"content": "x", "metadata": {"a": 1}, "colour": "red"}, 422,
     "colour"),
    ("POST", "/v1/memories", {"content": "x", "expires_at": "2030-01-01T00:00:00"}, 422,
     "expires_at"),
    ("POST", "/v1/memories", {"content": "x", "expires_at": "tomorrow"}, 422, "expires_at"),
    ("POST", "/v1/memories", {"content": "x", "scope": ""}, 422, "scope"),
    ("POST", "/v1/memories", {"content": "x", "scope": [""]}, 422, "scope"),
    ("POST", "/v1/memories", {"content": "x", "scope": [3]}, 422, "scope"),
    ("POST", "/v1/memories", {"content": "x", "metadata": {"deep": [[[[[[[[[[[[[[[[[[[[
        [[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}, 422, "metadata"),
    ("POST", "/v1/memories/batch", {"items": []}, 422, "items"),
    ("POST", "/v1/memories/batch", {"items": [{"content": "ok"}, {"content": "x", "metadata": {
        "deep": json.loads("[" * 40 + "1" + "]" * 40)}}]}, 422, "metadata[1]"),
    ("POST", "/v1/memories/batch", {"items": [{"content": "ok"}, {"content": None}]}, 422,
     "content"),
    ("POST", "/v1/memories/batch", {"items": [{"content": "ok"},
                                              {"content": "x", "metadata": "m"}]}, 422,
     "metadata"),
    ("POST", "/v1/search", {"query": "x", "top_k": 0}, 422, "top_k"),
    ("POST", "/v1/search", {"query": "x", "top_k": "5"}, 422, "top_k"),
    ("POST", "/v1/search", {"query": "x", "explain": "yes"}, 422, "explain"),
    ("POST", "/v1/search", {"query": "x", "where": [1]}, 422, "where"),
    ("POST", "/v1/search", {"query": ["x"]}, 422, "query"),
    ("PUT", "/v1/state/affect", {"valence": 0.2}, 422, "arousal"),
    ("PUT", "/v1/state/affect", {"valence": 0.2, "arousal": 1.5}, 422, "arousal"),
]


def _names(detail: Any, field: str) -> bool:
    return field in json.dumps(detail)


@pytest.mark.parametrize(("method", "path", "body", "code", "field"), BAD_BODIES)
def test_bad_input_is_4xx_naming_the_field_and_stores_nothing(
    http: httpx.Client, method: str, path: str, body: Any, code: int, field: str
) -> None:
    before = all_memories(http, ADMIN)
    state = http.get("/v1/state", headers=auth(ALICE)).json()
    r = http.request(method, path, json=body, headers=auth(ALICE))
    assert r.status_code == code, r.text
    detail = r.json()["detail"]
    assert _names(detail, field), detail
    assert ALICE not in r.text and "Traceback" not in r.text
    assert all_memories(http, ADMIN) == before
    assert http.get("/v1/state", headers=auth(ALICE)).json() == state


@pytest.mark.parametrize("raw", [
    b'{"content": "x",', b"not json", b'{"content": "x"}}', b"\xff\xfe",
])
def test_malformed_json_is_400(http: httpx.Client, raw: bytes) -> None:
    before = all_memories(http, ADMIN)
    r = http.post("/v1/memories", content=raw,
                  headers={**auth(ALICE), "Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert "JSON" in r.json()["detail"]
    assert all_memories(http, ADMIN) == before


def test_non_finite_numbers_are_422(http: httpx.Client) -> None:
    before = all_memories(http, ADMIN)
    for raw, field in [
        (b'{"content": "x", "metadata": {"a": NaN}}', "metadata"),
        (b'{"content": "x", "affect": {"valence": Infinity, "arousal": 0.1}}', "valence"),
    ]:
        r = http.post("/v1/memories", content=raw,
                      headers={**auth(ALICE), "Content-Type": "application/json"})
        assert r.status_code == 422, r.text
        assert field in r.text
    assert all_memories(http, ADMIN) == before


def test_wrong_content_type_and_oversized_body(http: httpx.Client) -> None:
    before = all_memories(http, ADMIN)
    r = http.post("/v1/memories", content=b"content=x",
                  headers={**auth(ALICE), "Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415
    big = {"content": "x" * (BODY_LIMIT + 10)}
    r = http.post("/v1/memories", json=big, headers=auth(ALICE))
    assert r.status_code == 413
    body = json.dumps(big).encode()

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer encoding
        for i in range(0, len(body), 65536):
            yield body[i:i + 65536]

    r = http.post("/v1/memories", content=chunks(),
                  headers={**auth(ALICE), "Content-Type": "application/json"})
    assert r.status_code == 413 and r.json() == {"detail": "request body too large"}
    assert all_memories(http, ADMIN) == before


def test_bad_query_parameters(http: httpx.Client) -> None:
    r = http.get("/v1/memories", params={"where": "{bad"}, headers=auth(ALICE))
    assert r.status_code == 400 and "where" in r.json()["detail"]
    r = http.get("/v1/memories", params={"where": "[1]"}, headers=auth(ALICE))
    assert r.status_code == 422 and "where" in r.text
    for params in ({"limit": 0}, {"limit": 10_001}, {"offset": -1}, {"limit": "many"}):
        r = http.get("/v1/memories", params=params, headers=auth(ALICE))
        assert r.status_code == 422, params
        assert next(iter(params)) in r.text


def test_bad_where_names_the_operator(http: httpx.Client) -> None:
    before = all_memories(http, ADMIN)
    r = http.post("/v1/search", json={"query": "x", "where": {"topic": {"$regex": "w.*"}}},
                  headers=auth(ALICE))
    assert r.status_code == 422, r.text
    assert "$regex" in r.text
    r = http.get("/v1/memories", params={"where": json.dumps({"$or": "no"})},
                 headers=auth(ALICE))
    assert r.status_code == 422 and "$or" in r.text
    assert all_memories(http, ADMIN) == before


# ---------------------------------------------------------------------- scopes


def test_per_key_isolation(http: httpx.Client) -> None:
    mine = post_memory(http, ALICE, {"content": "Alice's secret: the vault code is 4711",
                               "scope": ["iso"]})
    theirs = post_memory(http, BOB, {"content": "Bob's secret: the vault code is 1234",
                               "scope": ["iso"]})
    # GET, DELETE: another key's memory is an unknown id
    for key, other in ((ALICE, theirs), (BOB, mine)):
        assert http.get(f"/v1/memories/{other['id']}", headers=auth(key)).status_code == 404
        assert http.get(f"/v1/memories/{other['id']}", params={"scope": ["iso"]},
                        headers=auth(key)).status_code == 404
        assert http.delete(f"/v1/memories/{other['id']}", headers=auth(key)).status_code == 404
    # search and list: only one's own
    for key, own, other in ((ALICE, mine, theirs), (BOB, theirs, mine)):
        found = http.post("/v1/search", json={"query": "vault code secret", "top_k": 50},
                          headers=auth(key)).json()["results"]
        ids = {x["id"] for x in found}
        assert own["id"] in ids and other["id"] not in ids
        listed = {m["id"] for m in all_memories(http, key)}
        assert own["id"] in listed and other["id"] not in listed
    # narrowing never leaves the key's scope: bob's ["..", "alice"] is bob/../alice
    sneaky = http.get("/v1/memories", params={"scope": ["..", "alice", "iso"], "limit": 100},
                      headers=auth(BOB)).json()["memories"]
    assert sneaky == []
    # the administrator sees both, each at its full path
    both = {m["id"]: m["scope"] for m in all_memories(http, ADMIN)}
    assert both[mine["id"]] == ["alice", "iso"] and both[theirs["id"]] == ["bob", "iso"]
    assert http.get(f"/v1/memories/{mine['id']}", headers=auth(ADMIN)).status_code == 200
    # still there after the refused deletes
    assert http.get(f"/v1/memories/{mine['id']}", headers=auth(ALICE)).status_code == 200


def test_sub_scope_is_inside_its_parent(http: httpx.Client) -> None:
    inner = post_memory(http, ALICE, {"content": "deep inside", "scope": ["nest", "a", "b"]})
    assert http.get(f"/v1/memories/{inner['id']}", params={"scope": ["nest"]},
                    headers=auth(ALICE)).status_code == 200
    assert http.get(f"/v1/memories/{inner['id']}", params={"scope": ["nest", "other"]},
                    headers=auth(ALICE)).status_code == 404
    listed = all_memories(http, ALICE, scope=["nest", "a"])
    assert [m["id"] for m in listed] == [inner["id"]]
    assert listed[0]["scope"] == ["nest", "a", "b"]


def test_state_is_per_scope(http: httpx.Client) -> None:
    bob_before = http.get("/v1/state", params={"scope": ["mood"]}, headers=auth(BOB)).json()
    r = http.put("/v1/state/affect", json={"valence": -0.9, "arousal": 0.8, "scope": ["mood"]},
                 headers=auth(ALICE))
    assert r.status_code == 200, r.text
    state = r.json()
    assert state["core_affect"] == {"valence": -0.9, "arousal": 0.8, "dominance": 0.5}
    assert state["mood"]["valence"] < 0
    again = http.get("/v1/state", params={"scope": ["mood"]}, headers=auth(ALICE)).json()
    assert again == state
    assert http.get("/v1/state", params={"scope": ["mood"]}, headers=auth(BOB)).json() \
        == bob_before
    # the memory encoded next carries the scope's affect
    made = post_memory(http, ALICE, {"content": "after the bad news", "scope": ["mood"]})
    assert made["affect"]["valence"] == pytest.approx(-0.9)


def test_where_filters(http: httpx.Client) -> None:
    scope = ["where"]
    rows = [
        ("standup ran long", {"topic": "work", "n": 1}, 0.2),
        ("shipped the release", {"topic": "work", "n": 5, "tags": {"big": True}}, 0.9),
        ("pasta with friends", {"topic": "food", "n": 3}, 0.6),
        ("burnt the toast", {"topic": "food", "n": 0}, -0.4),
        ("read a novel", {"n": 2}, 0.3),
    ]
    for content, meta, valence in rows:
        post_memory(http, ALICE, {"content": content, "metadata": meta, "scope": scope,
                            "affect": {"valence": valence, "arousal": 0.5}})
    everything = all_memories(http, ALICE, scope=scope)

    def oracle(pred: Any) -> list[str]:
        return [m["content"] for m in everything if pred(m)]

    cases: list[tuple[dict[str, Any], Any]] = [
        ({"topic": "work"}, lambda m: m["metadata"].get("topic") == "work"),
        ({"n": {"$gte": 2}}, lambda m: m["metadata"]["n"] >= 2),
        ({"topic": {"$in": ["food", "travel"]}}, lambda m: m["metadata"].get("topic") == "food"),
        ({"topic": {"$exists": False}}, lambda m: "topic" not in m["metadata"]),
        ({"tags.big": True}, lambda m: m["metadata"].get("tags", {}).get("big") is True),
        ({"valence": {"$lt": 0}}, lambda m: m["affect"]["valence"] < 0),
        ({"$or": [{"topic": "food"}, {"n": {"$gt": 4}}]},
         lambda m: m["metadata"].get("topic") == "food" or m["metadata"]["n"] > 4),
    ]
    for where, pred in cases:
        got = [m["content"] for m in all_memories(http, ALICE, scope=scope, where=where)]
        assert got == oracle(pred), where
        found = http.post("/v1/search", json={"query": "the", "top_k": 50, "where": where,
                                              "scope": scope}, headers=auth(ALICE))
        assert found.status_code == 200, found.text
        assert sorted(x["content"] for x in found.json()["results"]) == sorted(oracle(pred))


def test_expired_memories_are_invisible(http: httpx.Client) -> None:
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    gone = post_memory(http, ALICE, {"content": "old news", "expires_at": past, "scope": ["ttl"]})
    kept = post_memory(http, ALICE,
                       {"content": "fresh news", "expires_at": future, "scope": ["ttl"]})
    assert datetime.fromisoformat(kept["expires_at"]) == datetime.fromisoformat(future)
    assert http.get(f"/v1/memories/{gone['id']}", headers=auth(ALICE)).status_code == 404
    assert [m["id"] for m in all_memories(http, ALICE, scope=["ttl"])] == [kept["id"]]


# ---------------------------------------------------------------------- load


def test_sixteen_clients_no_failure_no_lost_write(server: Server) -> None:
    clients, per_client = 16, 25

    async def one(i: int, client: httpx.AsyncClient) -> tuple[list[str], list[int]]:
        written: list[str] = []
        codes: list[int] = []
        scope = ["load", f"c{i}"]
        for j in range(per_client):
            if j % 5 == 4:
                r = await client.post("/v1/search", json={"query": f"note {i}", "top_k": 3,
                                                          "scope": scope})
            elif j % 5 == 3 and written:
                r = await client.get(f"/v1/memories/{written[-1]}", params={"scope": scope})
            else:
                r = await client.post("/v1/memories", json={
                    "content": f"load note {i}-{j}", "metadata": {"client": i, "j": j},
                    "scope": scope})
                if r.status_code == 201:
                    written.append(r.json()["id"])
            codes.append(r.status_code)
        return written, codes

    async def run() -> list[tuple[list[str], list[int]]]:
        limits = httpx.Limits(max_connections=clients)
        async with httpx.AsyncClient(base_url=server.url, headers=auth(ALICE), timeout=300.0,
                                     limits=limits) as client:
            return await asyncio.wait_for(
                asyncio.gather(*(one(i, client) for i in range(clients))), timeout=600
            )

    outcomes = asyncio.run(run())
    codes = [c for _, cs in outcomes for c in cs]
    assert len(codes) == clients * per_client
    assert all(c in (200, 201) for c in codes), sorted(set(codes))
    with httpx.Client(base_url=server.url, timeout=120.0) as http:
        for i, (written, _) in enumerate(outcomes):
            assert len(written) == 15
            listed = all_memories(http, ALICE, scope=["load", f"c{i}"])
            assert [m["id"] for m in listed] == written
            assert [m["metadata"]["j"] for m in listed] == [
                j for j in range(per_client) if j % 5 < 3
            ]


# ---------------------------------------------------------------------- MCP over HTTP


def _mcp(server: Server, key: str) -> Client:
    http_client = httpx2.AsyncClient(headers=auth(key), timeout=120.0)
    return Client(streamable_http_client(f"{server.url}/mcp", http_client=http_client))


def test_mcp_http_tools_within_the_keys_scope(server: Server, http: httpx.Client) -> None:
    async def run() -> None:
        async with _mcp(server, ALICE) as alice:
            tools = {t.name: t for t in (await alice.list_tools()).tools}
            assert set(tools) == {"remember", "recall", "forget", "mood", "set_mood"}
            for tool in tools.values():
                assert tool.description and len(tool.description) > 30
                assert tool.output_schema is not None
            assert tools["remember"].input_schema["required"] == ["content"]
            assert set(tools["recall"].input_schema["properties"]) == {"query", "top_k", "where",
                                                                   "min_relevance"}
            assert tools["set_mood"].input_schema["required"] == ["valence", "arousal"]

            made = await alice.call_tool("remember", {
                "content": "Alice's cat is called Miso", "metadata": {"topic": "pets"}})
            assert not made.is_error, made.content
            memory = made.structured_content
            assert memory is not None and memory["content"] == "Alice's cat is called Miso"
            assert memory["id"] in made.content[0].text  # type: ignore[union-attr]

            found = await alice.call_tool("recall", {"query": "cat name", "top_k": 3,
                                                     "where": {"topic": "pets"}})
            assert not found.is_error, found.content
            results = found.structured_content["results"]  # type: ignore[index]
            assert [r["id"] for r in results] == [memory["id"]]
            assert "Miso" in found.content[0].text  # type: ignore[union-attr]

            bad = await alice.call_tool("recall", {"query": "x", "where": {"a": {"$bogus": 1}}})
            assert bad.is_error and "$bogus" in bad.content[0].text  # type: ignore[union-attr]

            moved = await alice.call_tool("set_mood", {"valence": 0.7, "arousal": 0.6})
            assert not moved.is_error
            assert moved.structured_content["core_affect"]["valence"] == 0.7  # type: ignore[index]
            mood = await alice.call_tool("mood", {})
            shown = mood.structured_content
            assert shown is not None
            assert {k: shown[k] for k in ("core_affect", "momentum", "mood")} == \
                moved.structured_content

        # the same memory through REST with the same key; not for bob
        assert http.get(f"/v1/memories/{memory['id']}", headers=auth(ALICE)).status_code == 200
        assert http.get(f"/v1/memories/{memory['id']}", headers=auth(BOB)).status_code == 404
        assert http.get("/v1/state", headers=auth(ALICE)).json()["core_affect"]["valence"] == 0.7

        async with _mcp(server, BOB) as bob:
            found = await bob.call_tool("recall", {"query": "cat name Miso", "top_k": 50})
            ids = [r["id"] for r in found.structured_content["results"]]  # type: ignore[index]
            assert memory["id"] not in ids
            refused = await bob.call_tool("forget", {"id": memory["id"]})
            assert refused.is_error
        assert http.get(f"/v1/memories/{memory['id']}", headers=auth(ALICE)).status_code == 200

        async with _mcp(server, ALICE) as alice:
            gone = await alice.call_tool("forget", {"id": memory["id"]})
            assert not gone.is_error
            assert gone.structured_content == {"id": memory["id"], "deleted": True}
        assert http.get(f"/v1/memories/{memory['id']}", headers=auth(ALICE)).status_code == 404

    asyncio.run(run())


def test_mcp_bad_arguments_store_nothing(server: Server, http: httpx.Client) -> None:
    before = all_memories(http, ADMIN)

    async def run() -> None:
        async with _mcp(server, ALICE) as alice:
            for name, args in [("remember", {}), ("remember", {"content": 3}),
                               ("remember", {"content": "x", "metadata": "m"}),
                               ("remember", {"content": "x", "metadata": {
                                   "deep": json.loads("[" * 40 + "1" + "]" * 40)}}),
                               ("remember", {"content": "x",
                                             "affect": {"valence": 2, "arousal": 0.1}}),
                               ("remember", {"content": "x", "affect": {"valence": 0.1}}),
                               ("set_mood", {"valence": 2, "arousal": 0.1}),
                               ("recall", {"query": "x", "top_k": 0})]:
                result = await alice.call_tool(name, args)
                assert result.is_error, (name, args)

    asyncio.run(run())
    assert all_memories(http, ADMIN) == before


# ---------------------------------------------------------------------- secrets


def test_keys_never_reach_the_log(server: Server, http: httpx.Client) -> None:
    http.get("/v1/state", headers=auth(ALICE))
    http.get("/v1/state", headers={"Authorization": "Bearer wrong-key-abcdef-123456"})
    http.post("/v1/memories", json={"content": 1}, headers=auth(BOB))
    log = server.log_text()
    assert "401" in log  # the access log is on
    for secret in (ADMIN, ALICE, BOB, "wrong-key-abcdef-123456"):
        assert secret not in log
