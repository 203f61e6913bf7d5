"""``/openapi.json`` against what the REST routes accept and answer (in process).

The published schema is what clients generate code and validate against: a
constraint a route enforces but the schema omits (or a status a route answers that
the schema never lists) makes a schema-valid request fail, or an answer unexpected.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")

import httpx
from hypothesis import strategies as st

from emotional_memory import EmotionalMemory, EmotionalMemoryConfig, InMemoryStore
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.retrieval import RelevanceCalibration, RetrievalConfig
from emotional_memory.server.app import build_app
from emotional_memory.server.limits import Limits
from emotional_memory.server.mcp_tools import build_mcp, fixed_principal
from emotional_memory.server.service import MemoryService


def _service(limits: Limits | None = None) -> MemoryService:
    return MemoryService(EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16)), limits=limits)


def _app(limits: Limits | None = None) -> Any:
    return build_app(_service(limits), None)


def _calls(app: Any, calls: list[tuple[str, str, Any, Any]]) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            return [await http.request(m, p, json=body, params=params)
                    for m, p, body, params in calls]

    return asyncio.run(run())


def test_content_is_documented_as_not_empty_as_the_routes_refuse_it() -> None:
    """``content: ""`` is a 422 on both routes; the schema said any string."""
    app = _app()
    schemas = app.app.openapi()["components"]["schemas"]
    for name in ("MemoryIn", "ItemIn"):
        assert schemas[name]["properties"]["content"].get("minLength") == 1, name
    one, batch = _calls(app, [("POST", "/v1/memories", {"content": ""}, None),
                              ("POST", "/v1/memories/batch", {"items": [{"content": ""}]}, None)])
    assert one.status_code == 422 and one.json()["detail"][0]["loc"] == ["body", "content"]
    assert batch.status_code == 422
    assert batch.json()["detail"][0]["loc"] == ["body", "items", 0, "content"]


@pytest.mark.parametrize("part", ["", "a\x00b"])
def test_a_query_scope_part_is_documented_and_refused_as_a_body_scope_part(part: str) -> None:
    """A body scope's parts are documented non-empty without NUL; the query's
    ``?scope=`` refuses the same parts, but its schema said any string."""
    app = _app()
    doc = app.app.openapi()
    body_part = doc["components"]["schemas"]["MemoryIn"]["properties"]["scope"]["anyOf"][0]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for p in op.get("parameters", []):
                if p["name"] == "scope":
                    items = p["schema"]["anyOf"][0]["items"]
                    assert items.get("minLength") == body_part["items"]["minLength"], (path, method)
                    assert items.get("pattern") == body_part["items"]["pattern"], (path, method)
    r, = _calls(app, [("GET", "/v1/state", None, {"scope": ["ok", part]})])
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][:2] == ["query", "scope"]


def test_every_v1_route_documents_the_503_it_answers() -> None:
    """A statement timeout or a busy database is a 503 on every route (README's
    Errors); the schema listed only 400, 401, 413 and 422 (and 404)."""
    doc = _app().app.openapi()
    for path, ops in doc["paths"].items():
        if path.startswith("/v1/"):
            for method, op in ops.items():
                assert "503" in op["responses"], (path, method)


def test_every_json_body_route_documents_the_415_it_answers() -> None:
    """A body without ``Content-Type: application/json`` is a 415 (the gate's), on
    each route that takes a JSON body; the schema never listed 415."""
    app = _app()
    doc = app.app.openapi()
    body_ops = [(m.upper(), p) for p, ops in doc["paths"].items() for m, op in ops.items()
                if "requestBody" in op]
    assert len(body_ops) == 4
    answers = _calls(app, [(m, p, None, None) for m, p in body_ops])
    for (method, path), r in zip(body_ops, answers, strict=True):
        assert r.status_code == 415, (method, path, r.text)
        assert "415" in doc["paths"][path][method.lower()]["responses"], (method, path)


def test_an_undocumented_method_or_path_answers_405_or_404_not_415() -> None:
    """The gate answered 415 (Content-Type) to ``PUT /v1/state`` or ``POST
    /v1/nowhere`` sent without a JSON body: a method a path does not take is 405
    (with ``Allow``), an unknown path 404, whatever the body."""
    app = _app()
    doc = app.app.openapi()
    calls: list[tuple[str, str, Any, Any]] = []
    for path, ops in doc["paths"].items():
        concrete = path.replace("{memory_id}", "m-1")
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            taken_as_an_id = path == "/v1/memories/batch" and method == "DELETE"
            if method.lower() not in ops and not taken_as_an_id:
                calls.append((method, concrete, None, None))
    calls += [("POST", "/v1/nowhere", None, None), ("PUT", "/v1/memories/a/b", None, None)]
    for (method, path, _, _), r in zip(calls, _calls(app, calls), strict=True):
        expected = 404 if path in ("/v1/nowhere", "/v1/memories/a/b") else 405
        assert r.status_code == expected, (method, path, r.status_code, r.text)
        if expected == 405:
            assert method not in r.headers["allow"], (method, path)


def test_the_list_filter_is_documented_as_a_json_object_in_the_query() -> None:
    """``GET /v1/memories?where=`` takes a JSON object (``where=abc`` is a 400, ``[1]``
    a 422); the schema said any string, so clients and fuzzers sent plain text. Each
    query parameter read as JSON is published as ``content: application/json``, and
    the statuses its refusals answer are the route's documented ones."""
    app = _app()
    doc = app.app.openapi()
    op = doc["paths"]["/v1/memories"]["get"]
    where, = [p for p in op["parameters"] if p["name"] == "where"]
    assert "schema" not in where, where
    value = where["content"]["application/json"]["schema"]
    value = doc["components"]["schemas"][value["$ref"].rsplit("/", 1)[-1]] if "$ref" in value \
        else value
    assert value["type"] == "object", value
    for path, ops in doc["paths"].items():
        for method, other in ops.items():
            for p in other.get("parameters", []):
                if "JSON" in p.get("description", ""):
                    assert "content" in p and "schema" not in p, (path, method, p["name"])
    bad = ["", "abc", "[1]", "{", '"a"', '{"a": {}}', '{"$x": 1}']
    answers = _calls(app, [("GET", "/v1/memories", None, {"where": w}) for w in bad]
                     + [("GET", "/v1/memories", None, {"where": json.dumps({"a": 1})})])
    for w, r in zip(bad, answers, strict=False):
        assert r.status_code in (400, 422), (w, r.status_code, r.text)
        assert str(r.status_code) in op["responses"], (w, r.status_code)
    assert answers[-1].status_code == 200, answers[-1].text


def _integer(schema: dict[str, Any]) -> dict[str, Any]:
    ints = [s for s in schema.get("anyOf", [schema]) if s.get("type") == "integer"]
    assert len(ints) == 1, schema
    return dict(ints[0])


def _top_k_schema(doc: dict[str, Any]) -> dict[str, Any]:
    return _integer(doc["components"]["schemas"]["SearchIn"]["properties"]["top_k"])


def _list_limit_schema(doc: dict[str, Any]) -> dict[str, Any]:
    limit, = [p for p in doc["paths"]["/v1/memories"]["get"]["parameters"]
              if p["name"] == "limit"]
    return _integer(limit["schema"])


@pytest.mark.parametrize("limits", [Limits(), Limits(max_top_k=7, max_list_limit=9,
                                                      max_batch_items=3)],
                         ids=["default", "configured"])
def test_the_configured_limits_are_published_as_numbers(limits: Limits) -> None:
    """``top_k``, list ``limit`` and batch ``items`` are bounded by the service's
    limits, which the schema only named: a schema-valid ``top_k: 101`` was a 422.
    Each app publishes its own limits (two apps of different limits side by side),
    and a request at the published bound is accepted, one past it refused."""
    other = _app(Limits(max_top_k=2, max_list_limit=2, max_batch_items=2)).app.openapi()
    app = _app(limits)
    doc = app.app.openapi()
    assert _top_k_schema(doc)["maximum"] == limits.max_top_k
    assert _list_limit_schema(doc)["maximum"] == limits.max_list_limit
    assert doc["components"]["schemas"]["BatchIn"]["properties"]["items"]["maxItems"] == \
        limits.max_batch_items
    assert _top_k_schema(other)["maximum"] == 2  # not one app's numbers in another's doc
    # the byte and filter limits have no exact keyword: their numbers are in the text
    props = doc["components"]["schemas"]["ItemIn"]["properties"]
    assert str(limits.max_content_bytes) in props["content"]["description"]
    assert str(limits.max_metadata_bytes) in props["metadata"]["description"]
    where = doc["components"]["schemas"]["SearchIn"]["properties"]["where"]["description"]
    assert str(limits.max_filter_clauses) in where and str(limits.max_filter_depth) in where
    n = limits.max_batch_items
    at = _calls(app, [
        ("POST", "/v1/search", {"query": "q", "top_k": limits.max_top_k}, None),
        ("GET", "/v1/memories", None, {"limit": limits.max_list_limit}),
        ("POST", "/v1/memories/batch", {"items": [{"content": "x"}] * n}, None)])
    assert [r.status_code for r in at] == [200, 200, 201], [r.text for r in at]
    over = _calls(app, [
        ("POST", "/v1/search", {"query": "q", "top_k": limits.max_top_k + 1}, None),
        ("GET", "/v1/memories", None, {"limit": limits.max_list_limit + 1}),
        ("POST", "/v1/memories/batch", {"items": [{"content": "x"}] * (n + 1)}, None)])
    assert [r.status_code for r in over] == [422, 422, 413], [r.text for r in over]
    # MCP's recall publishes the same bound
    recall = asyncio.run(build_mcp(app.app.state.service, fixed_principal(())).list_tools())
    top_k, = [t.input_schema["properties"]["top_k"] for t in recall if t.name == "recall"]
    assert _integer(top_k)["maximum"] == limits.max_top_k
    # and says the filter's limits, as the REST schema does
    where, = [t.input_schema["properties"]["where"]["description"]
              for t in recall if t.name == "recall"]
    assert str(limits.max_filter_clauses) in where and str(limits.max_filter_depth) in where
    assert "--max-filter-clauses" in where and "retrieval_count" in where


def test_a_whole_number_float_is_an_integer_on_rest_and_mcp() -> None:
    """``top_k: 5.0`` is an integer under JSON Schema (and what a JavaScript client
    may send); REST and MCP refused it, "Input should be a valid integer". Taken as 5
    on both; a fraction, a boolean, a string or an out-of-range number is refused on
    both, as before."""
    from mcp import Client

    service = _service()
    app = build_app(service, None)

    async def run() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http, \
                Client(build_mcp(service, fixed_principal(()))) as mcp:
            recall, = [t for t in (await mcp.list_tools()).tools if t.name == "recall"]
            doc = (await http.get("/openapi.json")).json()
            for top_k in (recall.input_schema["properties"]["top_k"],
                          doc["components"]["schemas"]["SearchIn"]["properties"]["top_k"]):
                ints = [s for s in top_k["anyOf"] if s.get("type") == "integer"]
                assert ints and ints[0].get("minimum") == 1 and "ge" not in ints[0], top_k
            for i in range(4):
                await http.post("/v1/memories", json={"content": f"memory {i}"})
            for top_k, n in ((2.0, 2), (3, 3), (1e0, 1)):
                r = await http.post("/v1/search", json={"query": "memory", "top_k": top_k})
                assert r.status_code == 200 and len(r.json()["results"]) == n, (top_k, r.text)
                got = await mcp.call_tool("recall", {"query": "memory", "top_k": top_k})
                assert not got.is_error, (top_k, got.content)
                assert got.structured_content is not None
                assert len(got.structured_content["results"]) == n
            for top_k in (2.5, True, "2", 0.0, -1.0, 1e300, [2]):
                r = await http.post("/v1/search", json={"query": "memory", "top_k": top_k})
                assert r.status_code == 422, (top_k, r.text)
                assert r.json()["detail"][0]["loc"] == ["body", "top_k"], (top_k, r.text)
                got = await mcp.call_tool("recall", {"query": "memory", "top_k": top_k})
                assert got.is_error and "top_k" in str(getattr(got.content[0], "text", "")), (
                    top_k, got.content)

    asyncio.run(run())


@pytest.mark.parametrize("calibrated", [False, True], ids=["plain", "calibrated"])
def test_min_relevance_is_published_as_the_service_takes_it(calibrated: bool) -> None:
    """Without a relevance calibration every ``min_relevance`` but null is a 422, yet
    the schema (REST and MCP) offered any number in 0..1; it says null only there,
    and the numbers where the service has a calibration."""
    calibration = RelevanceCalibration(slope=8.0, intercept=-3.0) if calibrated else None
    cfg = EmotionalMemoryConfig(retrieval=RetrievalConfig(relevance_calibration=calibration))
    service = MemoryService(EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16),
                                            config=cfg))
    app = build_app(service, None)
    rest = app.app.openapi()["components"]["schemas"]["SearchIn"]["properties"]["min_relevance"]
    tools = asyncio.run(build_mcp(service, fixed_principal(())).list_tools())
    mcp, = [t.input_schema["properties"]["min_relevance"] for t in tools if t.name == "recall"]
    answers = _calls(app, [("POST", "/v1/search", {"query": "q", "min_relevance": v}, None)
                           for v in (None, 0.5)])
    assert answers[0].status_code == 200, answers[0].text
    assert answers[1].status_code == (200 if calibrated else 422), answers[1].text
    for schema in (rest, mcp):
        types = {s.get("type") for s in schema.get("anyOf", [schema])}
        assert types == ({"number", "null"} if calibrated else {"null"}), schema


KEYS = ["a", "b.c", "metadata.n", "valence", "retrieval_count", "emotion", "timestamp",
        "$and", "$or", "", "$x", "a..b", "b.", ".a", "$eq", "$in", "$gt", "$exists"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(
    [0.5, "x", "joy", 2**1100, "2024-01-02T03:04:05Z", "2024-01-02T03:04:05.25+02:00",
     "2024-01-02t03:04:05z", "2024-01-02T03:04:60Z", "2024-01-02 03:04:05",
     "0000-01-01T00:00:00Z", "2024-02-30T00:00:00Z"]))
JSONISH = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KEYS), inner, max_size=3)),
    max_leaves=12)

OPS = ["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$x"]
GOOD = st.sampled_from(["a", "b.c", "metadata.n", "valence", "retrieval_count", "emotion",
                        "timestamp"])
FIELDS = st.one_of(GOOD, GOOD, GOOD, st.sampled_from(["", "$x", "a..b", "b.", ".a", "$eq"]))
PLAIN = st.one_of(st.integers(-3, 3), st.sampled_from([None, "x", "2024-01-02T03:04:05Z"]))
OPERATORS = st.dictionaries(st.sampled_from(OPS), st.one_of(
    PLAIN, st.booleans(), st.lists(PLAIN, max_size=2)), min_size=1, max_size=2)
CLAUSES = st.recursive(
    st.dictionaries(FIELDS, st.one_of(PLAIN, OPERATORS), min_size=1,
                    max_size=2),
    lambda inner: st.dictionaries(st.sampled_from(["$and", "$or"]),
                                  st.lists(inner, min_size=1, max_size=2), min_size=1),
    max_leaves=6)
"""Filters mostly of the grammar's shape (about half of them valid)."""


@pytest.mark.parametrize("depth", [2, 6])
def test_the_published_filter_schema_is_what_the_filter_parser_takes(depth: int) -> None:
    """The filter (``where`` of search and list) was published as any object; the
    parser refuses most objects (an empty clause, an unknown operator, a list as a
    value, a string compared with valence, a naive timestamp...). The published
    ``Filter`` takes exactly the filters the service takes, its $and/$or nesting
    bounded by the app's max_filter_depth (small filters: the clause count is in the
    text only)."""
    import jsonschema_rs
    from hypothesis import HealthCheck, given, settings

    service = _service(Limits(max_filter_depth=depth, max_filter_clauses=1000))
    doc = build_app(service, None).app.openapi()
    validator = jsonschema_rs.validator_for(
        {**doc, "$ref": "#/components/schemas/Filter"}, validate_formats=True)

    def takes(where: Any) -> bool:
        try:
            service.parse_filter(where)
        except ValueError:
            return False
        return True

    nested: Any = {"a": 1}
    for _ in range(depth):
        nested = {"$or": [nested]}
    fixed = [{"a": 1}, {"valence": {"$gte": -0.5, "$lt": 1}}, {"emotion": {"$in": ["joy", None]}},
             {"timestamp": {"$gt": "2024-01-02T03:04:05+01:00"}}, nested, {"$and": [nested]},
             {}, {"a": {}}, {"a": [1]}, {"$x": 1}, {"a": {"$x": 1}}, {"valence": "x"},
             {"timestamp": "2024-01-02 03:04:05"}, {"a": {"$in": 1}}, {"a": {"$exists": 1}},
             {"$and": []}, {"$and": [1]}, {"a..b": 1}, {"a": 2**1100}]
    # integers at the edge of a float's range: the published bounds are the exact
    # largest float, not its shortest decimal (1.7976931348623157e308, smaller by
    # ~8e291), which a validator reads exactly and the parser does not
    top = int(sys.float_info.max)
    shortest = 17976931348623157 * 10**292
    fixed += [{"a": top}, {"a": -top}, {"a": top + 1}, {"valence": {"$gt": -top - 1}},
              {"a": {"$lt": -shortest - 1}}, {"arousal": {"$lte": shortest + 1}}]
    for where in fixed:
        assert validator.is_valid(where) == takes(where), where

    @settings(max_examples=400, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(where=st.one_of(CLAUSES, st.dictionaries(st.sampled_from(KEYS), JSONISH, max_size=3)))
    def agree(where: dict[str, Any]) -> None:
        assert validator.is_valid(where) == takes(where), where

    agree()


def _top_level_fields(braced: str) -> set[str]:
    """``{a (note), b? = 5, c? {x, y}}`` -> ``{"a", "b", "c"}``."""
    inner = braced.strip()[1:-1]
    while re.search(r"\{[^{}]*\}|\([^()]*\)", inner):
        inner = re.sub(r"\{[^{}]*\}|\([^()]*\)", "", inner)
    return {re.match(r"\s*([\w.]+)", part)[1] for part in inner.split(",")
            if part.strip()}


def test_the_readme_route_table_is_the_apps() -> None:
    """The README's REST table names every route the app serves (and no other), each
    body's fields, ``GET /v1/memories``' query parameters and the memory's fields."""
    from support.paths import README

    doc = _app().app.openapi()
    text = README.read_text(encoding="utf-8")
    table = text.split("| route | body / query | answer |", 1)[1].split("\n\n", 1)[0]
    documented: dict[tuple[str, str], str] = {}
    for route, body, _ in re.findall(r"^\| (.+?) \| (.+?) \| (.+?) \|$", table, re.M):
        path = ""
        for method, named in re.findall(r"`(GET|POST|PUT|DELETE) ([^`]+)`", route):
            path = path if named == "..." else re.sub(r"\{\w+\}", "{}", named)
            documented[(method, path)] = body
    served = {(m.upper(), re.sub(r"\{\w+\}", "{}", p))
              for p, ops in doc["paths"].items() for m in ops}
    assert set(documented) == served | {("GET", "/openapi.json")}
    schemas = doc["components"]["schemas"]
    for (method, path), body in documented.items():
        op = doc["paths"].get(path.replace("{}", "{memory_id}"), {}).get(method.lower(), {})
        ref = op.get("requestBody", {}).get("content", {}).get("application/json", {})
        if ref:
            name = ref["schema"]["$ref"].rsplit("/", 1)[1]
            braced = re.search(r"`(\{.*\})`", body)[1]
            assert _top_level_fields(braced) == set(schemas[name]["properties"]), path
    listing = documented[("GET", "/v1/memories")]
    params = {p["name"] for p in doc["paths"]["/v1/memories"]["get"]["parameters"]}
    assert set(re.findall(r"[?&](\w+)=", listing)) == params
    memory = re.search(r"201 the memory `(\{[^`]*\})`", table)[1]
    assert _top_level_fields(memory) == set(schemas["MemoryOut"]["properties"])


def test_the_readme_mcp_tools_are_the_servers() -> None:
    """The README's MCP paragraph names every tool the server lists (and no other),
    each with its arguments, the optional ones marked ``?``."""
    from support.paths import README

    text = README.read_text(encoding="utf-8")
    paragraph = text.split("**MCP.** Tools ", 1)[1].split("\n\n", 1)[0]
    documented: dict[str, set[str]] = {}
    for name, args in re.findall(r"`(\w+)\(([^`]*)\)`", paragraph):
        documented[name] = {a.split("?")[0].split("=")[0].strip()
                            for a in args.split(",") if a.strip()}
        documented[name] |= {a.split("?")[0].strip() + "?" for a in args.split(",")
                             if "?" in a}
    tools = asyncio.run(build_mcp(_service(), fixed_principal(())).list_tools())
    served: dict[str, set[str]] = {}
    for tool in tools:
        schema = tool.input_schema
        required = set(schema.get("required", []))
        served[tool.name] = set(schema["properties"]) | {
            f"{p}?" for p in schema["properties"] if p not in required}
    assert documented == served
