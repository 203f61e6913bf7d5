"""A hostile tenant against the real process: odd values in every field.

One ``emotional-memory serve`` over SQLite (``tests/support/service_process.py``),
driven with httpx. Each request here once got a 500, or got through with a value the
documented API refuses, or cost the server more than the documented limits allow
(unbounded work, a stream that never ends); every one must answer its documented
4xx naming the field, store nothing, and leave the server answering.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")
pytest.importorskip("mcp", reason="the server extra is not installed")

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from support.service_process import Server, start

ALICE = "alice-key-0a1b2c3d4e5f6a7b"
KEYS = {ALICE: {"scope": ["alice"]}}
HEADERS = {"Authorization": f"Bearer {ALICE}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One SQLite-backed server for the module (each test in a scope of its own)."""
    tmp = tmp_path_factory.mktemp("hostile")
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


def _refused(r: httpx.Response, loc: list[Any]) -> str:
    """The message of a 422 whose one error is at ``loc``."""
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == loc, error
    return str(error["msg"])


@pytest.mark.parametrize("when", ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00"])
def test_an_expiry_outside_utcs_years_is_a_422_not_a_500(
    http: httpx.Client, when: str, server: Server
) -> None:
    scope = f"expiry-{when[:4]}"
    one = http.post("/v1/memories", json={"content": "x", "expires_at": when, "scope": [scope]})
    assert "expires_at" in _refused(one, ["body", "expires_at"])
    batch = http.post("/v1/memories/batch", json={
        "items": [{"content": "kept?"}, {"content": "x", "expires_at": when}], "scope": [scope]})
    assert "expires_at" in _refused(batch, ["body", "items", 1, "expires_at"])
    assert _stored(http, scope) == []
    assert "unhandled" not in server.log_text()


@pytest.mark.parametrize("value", [True, False, "0.5", "1e-1", None])
def test_an_affect_number_is_a_json_number_not_a_boolean_or_a_string(
    http: httpx.Client, value: Any
) -> None:
    scope = f"affect-{value!r}"
    before = http.get("/v1/state", params={"scope": scope}).json()
    made = http.post("/v1/memories", json={
        "content": "x", "affect": {"valence": value, "arousal": 0.5}, "scope": [scope]})
    assert "number" in _refused(made, ["body", "affect", "valence"])
    batch = http.post("/v1/memories/batch", json={
        "items": [{"content": "x", "affect": {"valence": 0.1, "arousal": value}}],
        "scope": [scope]})
    _refused(batch, ["body", "items", 0, "affect", "arousal"])
    put = http.put("/v1/state/affect", json={"valence": 0.1, "arousal": 0.5,
                                             "dominance": value, "scope": [scope]})
    _refused(put, ["body", "dominance"])
    found = http.post("/v1/search", json={"query": "x", "min_relevance": value,
                                          "scope": [scope]})
    if value is not None:  # None: no threshold
        assert "number" in _refused(found, ["body", "min_relevance"])
    assert _stored(http, scope) == []
    assert http.get("/v1/state", params={"scope": scope}).json() == before
    ok = http.post("/v1/memories", json={  # an integer is a number
        "content": "x", "affect": {"valence": -1, "arousal": 1}, "scope": [scope]})
    assert ok.status_code == 201, ok.text
    assert ok.json()["affect"]["valence"] == -1.0


@pytest.mark.parametrize("value", [0, -1, 1700000000000, 2.5e9, True, ["2030-01-01T00:00:00Z"]])
def test_an_expiry_is_an_iso_string_not_a_unix_number(http: httpx.Client, value: Any) -> None:
    scope = f"unix-{value!r}"
    r = http.post("/v1/memories", json={"content": "x", "expires_at": value, "scope": [scope]})
    _refused(r, ["body", "expires_at"])
    assert _stored(http, scope) == []


def test_mcp_remember_refuses_a_boolean_affect(server: Server, http: httpx.Client) -> None:
    async def run() -> list[bool]:
        client = httpx2.AsyncClient(headers=HEADERS, timeout=120.0)
        async with Client(streamable_http_client(f"{server.url}/mcp", http_client=client)) as c:
            out = []
            for valence in (True, "0.5"):
                got = await c.call_tool("remember", {
                    "content": "mcp-bool", "affect": {"valence": valence, "arousal": 0.5}})
                out.append(got.is_error)
            return out

    assert asyncio.run(run()) == [True, True]
    r = http.get("/v1/memories", params={"limit": 1000})
    assert all(m["content"] != "mcp-bool" for m in r.json()["memories"])


def test_mcp_tools_refuse_loose_numbers_and_unknown_arguments(
    server: Server, http: httpx.Client
) -> None:
    """A bool or fractional ``top_k``, a bool or string valence, or an argument the tool
    does not declare (here an expiry ``remember`` cannot honour, and a scope) is an
    error, never a silent coercion or a dropped argument; nothing is stored or set."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("recall", {"query": "x", "top_k": True}),
        ("recall", {"query": "x", "top_k": 2.5}),
        ("recall", {"query": "x", "min_relevance": True}),
        ("set_mood", {"valence": True, "arousal": 0.5}),
        ("set_mood", {"valence": "0.5", "arousal": 0.5}),
        ("set_mood", {"valence": 0.9, "arousal": 0.5, "scope": ["bob"]}),
        ("remember", {"content": "mcp-extra", "expires_at": "2000-01-01T00:00:00Z"}),
        ("recall", {"query": "x", "topk": 3}),
    ]

    async def run() -> tuple[list[tuple[bool, str]], Any, bool]:
        client = httpx2.AsyncClient(headers=HEADERS, timeout=120.0)
        async with Client(streamable_http_client(f"{server.url}/mcp", http_client=client)) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            before = (await c.call_tool("mood", {})).structured_content
            out = []
            for name, args in calls:
                got = await c.call_tool(name, args)
                text = got.content[0].text if got.content else ""
                out.append((got.is_error, str(text)))
            after = (await c.call_tool("mood", {})).structured_content
            ok = await c.call_tool("recall", {"query": "x", "top_k": 2})
            closed = all(t.input_schema.get("additionalProperties") is False
                         for t in tools.values())
            return out, (before, after, ok.is_error), closed

    out, (before, after, ok_error), closed = asyncio.run(run())
    for (name, args), (is_error, text) in zip(calls, out, strict=True):
        assert is_error, (name, args, text)
    assert "scope" in out[5][1] and "expires_at" in out[6][1] and "topk" in out[7][1]
    assert before is not None and after is not None
    assert after["core_affect"] == before["core_affect"]
    assert ok_error is False
    assert closed  # each tool's published schema says it takes no other argument
    r = http.get("/v1/memories", params={"limit": 1000})
    assert all(m["content"] != "mcp-extra" for m in r.json()["memories"])


def test_a_batch_items_bad_metadata_is_located_at_that_item(http: httpx.Client) -> None:
    """Metadata the engine refuses (too deep, NaN) is a 422 at ``[body, items, i,
    metadata]``, not at the whole body; nothing of the batch is stored."""
    scope = "batch-metadata"
    deep = json.loads("[" * 40 + "1" + "]" * 40)
    for bad in ({"deep": deep}, {"x": float("nan")}):
        body = {"items": [{"content": "kept?"}, {"content": "x", "metadata": bad}],
                "scope": [scope]}
        r = http.post("/v1/memories/batch", content=json.dumps(body),
                      headers={"Content-Type": "application/json"})
        assert "metadata" in _refused(r, ["body", "items", 1, "metadata"])
    single = http.post("/v1/memories", json={"content": "x", "metadata": {"deep": deep},
                                             "scope": [scope]})
    assert "metadata" in _refused(single, ["body", "metadata"])
    assert _stored(http, scope) == []


def test_a_scope_part_with_a_lone_surrogate_is_a_422_at_scope(http: httpx.Client) -> None:
    body = json.dumps({"content": "x", "scope": ["ok", "\ud800"]})  # ASCII-escaped
    r = http.post("/v1/memories", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][:2] == ["body", "scope"]
    assert _stored(http, "ok") == []


@pytest.mark.parametrize("value", ["1700000000", "-1", "1.7e9"])
def test_an_expiry_string_of_digits_is_not_read_as_unix_seconds(
    http: httpx.Client, value: str
) -> None:
    r = http.post("/v1/memories", json={"content": "x", "expires_at": value,
                                        "scope": ["digits"]})
    assert "ISO-8601" in _refused(r, ["body", "expires_at"])
    assert _stored(http, "digits") == []


@pytest.mark.parametrize("depth", [1000, 4000])
def test_a_query_filter_nested_past_the_parsers_stack_is_a_400(
    http: httpx.Client, depth: int, server: Server
) -> None:
    for where in ("[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth):
        r = http.get("/v1/memories", params={"where": where})
        assert r.status_code == 400, r.text
        assert "where" in r.json()["detail"]
    assert http.get("/v1/memories", params={"where": '{"a": 1}'}).status_code == 200
    assert "unhandled" not in server.log_text()


def test_a_query_scope_is_bounded_like_a_body_scope(http: httpx.Client) -> None:
    deep = ["d"] * 33  # the body's bound: 32 parts
    assert http.post("/v1/memories", json={"content": "x", "scope": deep}).status_code == 422
    memory_id = http.post("/v1/memories", json={"content": "x", "scope": deep[:32]}).json()["id"]
    for method, path in (("GET", "/v1/state"), ("GET", "/v1/memories"),
                         ("GET", f"/v1/memories/{memory_id}"),
                         ("DELETE", f"/v1/memories/{memory_id}")):
        r = http.request(method, path, params={"scope": deep})
        assert r.status_code == 422, (method, path, r.text)
        assert r.json()["detail"][0]["loc"] == ["query", "scope"]
        assert http.request(method, path, params={"scope": deep[:32]}).status_code in (200, 204)


def test_a_lone_surrogate_in_a_filter_is_a_422_at_where(http: httpx.Client) -> None:
    """No stored string holds one (content and metadata refuse it); PostgreSQL could
    not even take it as a parameter: refused naming where, on every store."""
    for raw in ('{"a": "\\ud800"}', '{"\\udfff": 1}', '{"emotion": {"$in": ["\\ud800"]}}'):
        body = b'{"query": "x", "where": ' + raw.encode() + b"}"
        found = http.post("/v1/search", content=body,
                          headers={"Content-Type": "application/json"})
        assert "Unicode" in _refused(found, ["body", "where"])
        listed = http.get("/v1/memories", params={"where": raw})
        assert "Unicode" in _refused(listed, ["query", "where"])


def test_a_json_body_without_a_content_type_is_a_415(http: httpx.Client) -> None:
    body = json.dumps({"content": "typeless", "scope": ["typeless"]}).encode()
    for method, path in (("POST", "/v1/memories"), ("POST", "/v1/search"),
                         ("PUT", "/v1/state/affect")):
        r = http.request(method, path, content=body)  # httpx sends no Content-Type
        assert "content-type" not in r.request.headers
        assert r.status_code == 415, r.text
        assert "Content-Type" in r.json()["detail"]
    assert _stored(http, "typeless") == []


@pytest.mark.parametrize(("body", "loc"), [
    (b'{"content": "\\ud800", "scope": ["sur"]}', ["body", "content"]),
    (b'{"content": "x", "metadata": {"k": "\\udfff"}, "scope": ["sur"]}', ["body", "metadata"]),
    (b'{"content": "x", "metadata": {"\\ud800": NaN}, "scope": ["sur"]}', ["body", "metadata"]),
    (b'{"items": [{"content": "ok"}, {"content": "a\\ud800"}], "scope": ["sur"]}',
     ["body", "items", 1, "content"]),
    (b'{"items": [{"content": "ok"}, {"content": "x", "metadata": {"a": ["\\ud800"]}}], '
     b'"scope": ["sur"]}', ["body", "items", 1, "metadata"]),
    (b'{"query": "\\ud800"}', ["body", "query"]),
    (b'{"query": "x", "where": {"\\ud800": NaN}}', ["body", "where"]),
])
def test_a_lone_surrogate_is_a_422_at_its_field(http: httpx.Client, body: bytes,
                                                 loc: list[str]) -> None:
    path = "/v1/search" if b'"query"' in body else (
        "/v1/memories/batch" if b'"items"' in body else "/v1/memories")
    r = http.post(path, content=body, headers={"Content-Type": "application/json"})
    msg = _refused(r, loc)
    assert "not valid Unicode text" in msg and "codec" not in msg
    assert _stored(http, "sur") == []


@pytest.mark.parametrize("item", ["{}", "1"])
def test_a_batch_over_the_item_limit_is_refused_before_its_items_are_validated(
    http: httpx.Client, server: Server, item: str
) -> None:
    """200,000 invalid items (a 1 MB body) once got each item validated, and a 422
    listing one error per item (about 15 MB); the count is over max_batch_items, so
    the answer is the 413 naming the limit, small, whatever the items hold."""
    body = '{"items": [' + ",".join([item] * 200_000) + '], "scope": ["amplified"]}'
    r = http.post("/v1/memories/batch", content=body.encode(),
                  headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text[:300]
    assert len(r.content) < 2048
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "items"] and "max_batch_items" in error["msg"]
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



@pytest.mark.parametrize(("method", "path", "params", "body", "unknown"), [
    ("DELETE", "/v1/memories/{id}", {"scop": "elsewhere"}, None, ["scop"]),
    ("GET", "/v1/memories/{id}", {"scopes": "elsewhere"}, None, ["scopes"]),
    ("GET", "/v1/memories", {"limt": "1", "scope": "unknown-query"}, None, ["limt"]),
    ("GET", "/v1/memories", {"cursor": "abc", "offset": "0"}, None, ["cursor"]),
    ("GET", "/v1/state", {"scope": "unknown-query", "where": "{}"}, None, ["where"]),
    ("POST", "/v1/memories", {"scope": "elsewhere"}, {"content": "queried"}, ["scope"]),
    ("POST", "/v1/memories/batch", {"dry_run": "1", "x": "2"},
     {"items": [{"content": "queried"}]}, ["dry_run", "x"]),
    ("POST", "/v1/search", {"top_k": "1"}, {"query": "kept"}, ["top_k"]),
    ("PUT", "/v1/state/affect", {"scope": "elsewhere"}, {"valence": 0.9, "arousal": 0.9},
     ["scope"]),
])
def test_an_unknown_query_parameter_is_a_422_naming_it_and_does_nothing(
    http: httpx.Client, method: str, path: str, params: dict[str, str], body: Any,
    unknown: list[str],
) -> None:
    """Bodies refuse fields they do not declare; a query parameter a route does not
    take was dropped without a word: a misspelt ``?scope=`` on a DELETE deleted in the
    key's whole scope, ``POST ...?scope=`` wrote in the key's own scope, ``?limt=``
    read a page of the default size. Now a 422 at ``[query, name]`` for each, and
    nothing is read (a search counts a retrieval), written, deleted or set."""
    made = http.post("/v1/memories", json={"content": "kept", "scope": ["unknown-query"]})
    assert made.status_code == 201, made.text
    before = (http.get("/v1/memories", params={"limit": 1000}).json(),
              http.get("/v1/state").json())
    r = http.request(method, path.format(id=made.json()["id"]), params=params, json=body)
    assert r.status_code == 422, r.text
    assert [e["loc"] for e in r.json()["detail"]] == [["query", k] for k in unknown]
    assert all(e["type"] == "extra_forbidden" for e in r.json()["detail"])
    after = (http.get("/v1/memories", params={"limit": 1000}).json(),
             http.get("/v1/state").json())
    assert after == before


def _unknown_fields(n: int) -> str:
    """``n`` distinct unknown names as JSON members (no braces)."""
    return ",".join(f'"f{i}": 0' for i in range(n))


@pytest.mark.parametrize(("method", "path", "body", "loc"), [
    ("POST", "/v1/memories", '{"content": "x", "scope": ["many"], %s}', ["body"]),
    ("POST", "/v1/memories",
     '{"content": "x", "scope": ["many"], "affect": {"valence": 0, "arousal": 0, %s}}',
     ["body", "affect"]),
    ("POST", "/v1/memories/batch", '{"items": [{"content": "x", %s}], "scope": ["many"]}',
     ["body", "items", 0]),
    ("POST", "/v1/search", '{"query": "x", "scope": ["many"], %s}', ["body"]),
    ("PUT", "/v1/state/affect",
     '{"valence": 0.9, "arousal": 0.9, "scope": ["many"], %s}', ["body"]),
])
def test_many_unknown_body_fields_are_one_small_422(
    http: httpx.Client, method: str, path: str, body: str, loc: list[Any]
) -> None:
    """200,000 unknown fields (a 2.6 MB body) once got one error each: a 17 MB 422,
    built on the event loop (a 10 MB body held every other request ~10 s). Past a
    few, one error at the object names their count; a few are still named each."""
    before = http.get("/v1/state", params={"scope": "many"}).json()
    r = http.request(method, path, content=(body % _unknown_fields(200_000)).encode(),
                     headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text[:300]
    assert len(r.content) < 2048
    (error,) = r.json()["detail"]
    assert error["loc"] == loc and "200000 unknown fields" in error["msg"], error
    assert error["type"] == "extra_forbidden"
    few = http.request(method, path, content=(body % _unknown_fields(2)).encode(),
                       headers={"Content-Type": "application/json"})
    assert [e["loc"] for e in few.json()["detail"]] == [[*loc, "f0"], [*loc, "f1"]]
    assert _stored(http, "many") == []
    assert http.get("/v1/state", params={"scope": "many"}).json() == before


def test_many_unknown_mcp_arguments_are_one_short_tool_error(
    server: Server, http: httpx.Client
) -> None:
    """The same over MCP: each unknown argument was a line of the tool error (a 1 MB
    call answered 18 MB); now one line naming their count, and nothing done."""
    many = {f"f{i}": 0 for i in range(200_000)}
    calls = [("recall", {"query": "x", **many}), ("remember", {"content": "mcp-many", **many}),
             ("set_mood", {"valence": 0.9, "arousal": 0.9, **many}),
             ("remember", {"content": "mcp-many",
                           "affect": {"valence": 0.9, "arousal": 0.9, **many}})]

    async def run() -> tuple[list[tuple[bool, str]], Any, Any]:
        client = httpx2.AsyncClient(headers=HEADERS, timeout=120.0)
        async with Client(streamable_http_client(f"{server.url}/mcp", http_client=client)) as c:
            before = (await c.call_tool("mood", {})).structured_content
            out = []
            for name, args in calls:
                got = await c.call_tool(name, args)
                out.append((got.is_error, str(got.content[0].text if got.content else "")))
            after = (await c.call_tool("mood", {})).structured_content
            return out, before, after

    out, before, after = asyncio.run(run())
    for is_error, text in out:
        assert is_error and len(text) < 2048, text[:300]
        assert "200000 unknown" in text, text[:300]
    assert before is not None and after is not None
    assert after["core_affect"] == before["core_affect"]
    r = http.get("/v1/memories", params={"limit": 1000})
    assert all(m["content"] != "mcp-many" for m in r.json()["memories"])


def test_many_unknown_query_parameters_are_one_small_422(http: httpx.Client) -> None:
    """Each unknown query parameter was an error of its own: a 40 KB query string
    answered a 700 KB 422. Past a few, one error at ``["query"]`` names their count."""
    params = {f"q{i}": "" for i in range(5000)}
    r = http.get("/v1/memories", params={**params, "scope": "many-query"})
    assert r.status_code == 422, r.text[:300]
    assert len(r.content) < 2048
    (error,) = r.json()["detail"]
    assert error["loc"] == ["query"] and error["type"] == "extra_forbidden"
    assert "5000 unknown query parameters" in error["msg"] and "scope" in error["msg"]
    few = http.get("/v1/memories", params={"q0": "", "q1": ""})
    assert [e["loc"] for e in few.json()["detail"]] == [["query", "q0"], ["query", "q1"]]
