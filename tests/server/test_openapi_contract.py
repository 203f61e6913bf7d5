"""``/openapi.json`` against what the REST routes accept and answer (in process).

The published schema is what clients generate code and validate against: a
constraint a route enforces but the schema omits (or a status a route answers that
the schema never lists) makes a schema-valid request fail, or an answer unexpected.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")

import httpx

from emotional_memory import EmotionalMemory, InMemoryStore
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.server.app import build_app
from emotional_memory.server.service import MemoryService


def _app() -> Any:
    return build_app(MemoryService(EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16))),
                     None)


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
