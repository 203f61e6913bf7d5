"""REST and MCP side by side, in process, against the library's own engine.

The same input through ``POST /v1/memories`` / ``remember``, ``POST /v1/search`` /
``recall``, ``PUT /v1/state/affect`` / ``set_mood`` and ``DELETE`` / ``forget``
stores the same memories and answers the same results (scores, order, affect,
retrieval counts, state) as an :class:`EmotionalMemory` given the same calls (the
oracle); the service's limits refuse the same input on both, naming the limit.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")
pytest.importorskip("mcp", reason="the server extra is not installed")

import httpx
from mcp import Client

from emotional_memory import EmotionalMemory, InMemoryStore
from emotional_memory.affect import CoreAffect
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.server.app import build_app
from emotional_memory.server.limits import Limits
from emotional_memory.server.mcp_tools import build_mcp, fixed_principal
from emotional_memory.server.service import MemoryService
from emotional_memory.state_stores import InMemoryAffectiveStateStore

ITEMS = [("the demo crashed at work", {"topic": "work", "n": 1}, (-0.8, 0.9)),
         ("a lovely walk in the park", {"topic": "life", "n": 2}, (0.7, 0.3)),
         ("the boss praised the demo", {"topic": "work", "n": 3}, (0.6, 0.6)),
         ("a rainy commute, the train missed", {"topic": "life", "n": 4}, (-0.4, 0.5))]
SEARCHES = [("demo at work", None, 3), ("park", {"topic": "life"}, 5),
            ("x", {"n": {"$gte": 2}}, 2), ("train", {"$or": [{"n": 1}, {"n": 4}]}, 4)]
KEPT = ("content", "metadata", "affect", "retrieval_count", "expires_at")


def _engine() -> EmotionalMemory:
    return EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=64),
                           state_store=InMemoryAffectiveStateStore())


def _oracle_memory(m: Any) -> dict[str, Any]:
    return {"content": m.content, "metadata": m.metadata,
            "affect": m.tag.core_affect.model_dump(), "retrieval_count": m.tag.retrieval_count,
            "expires_at": None}


def _kept(d: dict[str, Any]) -> dict[str, Any]:
    return {k: d[k] for k in KEPT}


def test_rest_and_mcp_answer_what_the_library_answers() -> None:
    rest_service, mcp_service = MemoryService(_engine()), MemoryService(_engine())
    oracle = _engine().scoped("a")
    app = build_app(rest_service, None)

    async def run() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http, \
                Client(build_mcp(mcp_service, fixed_principal(("a",)))) as mcp:
            ids: list[tuple[str, str]] = []
            for content, meta, (v, a) in ITEMS:
                affect = {"valence": v, "arousal": a}
                r = await http.post("/v1/memories", json={"content": content, "metadata": meta,
                                                          "affect": affect, "scope": ["a"]})
                m = (await mcp.call_tool("remember", {"content": content, "metadata": meta,
                                                      "affect": affect})).structured_content
                o = oracle.encode(content, metadata=meta, affect=CoreAffect(valence=v, arousal=a))
                assert r.status_code == 201 and m is not None
                assert _kept(r.json()) == _kept(m) == _oracle_memory(o)
                assert r.json()["scope"] == ["a"] and m["scope"] == []  # relative to the key
                ids.append((r.json()["id"], m["id"]))
            for query, where, k in SEARCHES:
                r = await http.post("/v1/search", json={"query": query, "where": where,
                                                        "top_k": k, "scope": ["a"]})
                m = (await mcp.call_tool("recall", {"query": query, "where": where,
                                                    "top_k": k})).structured_content
                o = oracle.retrieve_with_explanations(query, top_k=k, where=where)
                assert m is not None and r.status_code == 200
                want = [(_oracle_memory(x.memory), pytest.approx(x.score, abs=1e-6)) for x in o]
                assert [(_kept(x), x["score"]) for x in r.json()["results"]] == want
                assert [(_kept(x), x["score"]) for x in m["results"]] == want
            r = await http.put("/v1/state/affect", json={"valence": 0.2, "arousal": 0.4,
                                                         "scope": ["a"]})
            m = (await mcp.call_tool("set_mood", {"valence": 0.2, "arousal": 0.4})
                 ).structured_content
            o = oracle.set_affect(CoreAffect(valence=0.2, arousal=0.4))
            assert m is not None
            for got in (r.json(), m):
                assert got["core_affect"] == o.core_affect.model_dump()
                assert got["mood"]["valence"] == pytest.approx(o.mood.valence, abs=1e-6)
                assert got["mood"]["arousal"] == pytest.approx(o.mood.arousal, abs=1e-6)
            rest_id, mcp_id = ids[1]
            assert (await http.delete(f"/v1/memories/{rest_id}", params={"scope": "a"})
                    ).status_code == 204
            assert not (await mcp.call_tool("forget", {"id": mcp_id})).is_error
            oracle.delete(oracle.list_all()[1].id)
            listed = (await http.get("/v1/memories", params={"scope": "a"})).json()["memories"]
            assert [_kept(x) for x in listed] == [_oracle_memory(x) for x in oracle.list_all()]
            through_mcp = await mcp_service.list(("a",), None, 100, 0)
            assert [x.content for x in through_mcp] == [x.content for x in oracle.list_all()]

    asyncio.run(run())


LIMITS = Limits(max_content_bytes=64, max_metadata_bytes=32, max_top_k=5,
                max_filter_clauses=3, max_filter_depth=2)
# (REST call, MCP call, the limit named): each over its limit by one
OVER: list[tuple[tuple[str, str, dict[str, Any]], tuple[str, dict[str, Any]], str]] = [
    (("POST", "/v1/memories", {"content": "é" * 32 + "x"}),
     ("remember", {"content": "é" * 32 + "x"}), "max_content_bytes"),
    (("POST", "/v1/memories", {"content": "x", "metadata": {"k": "v" * 25}}),
     ("remember", {"content": "x", "metadata": {"k": "v" * 25}}), "max_metadata_bytes"),
    (("POST", "/v1/search", {"query": "q" * 65}), ("recall", {"query": "q" * 65}),
     "max_content_bytes"),
    (("POST", "/v1/search", {"query": "q", "top_k": 6}), ("recall", {"query": "q", "top_k": 6}),
     "max_top_k"),
    (("POST", "/v1/search", {"query": "q", "where": {"a": {"$in": [1, 2, 3, 4]}}}),
     ("recall", {"query": "q", "where": {"a": {"$in": [1, 2, 3, 4]}}}), "max_filter_clauses"),
    (("POST", "/v1/search", {"query": "q", "where": {"$and": [{"$or": [{"$and": [{"a": 1}]}]}]}}),
     ("recall", {"query": "q", "where": {"$and": [{"$or": [{"$and": [{"a": 1}]}]}]}}),
     "max_filter_depth"),
]
AT = [(("POST", "/v1/memories", {"content": "é" * 32}), ("remember", {"content": "é" * 32})),
      (("POST", "/v1/memories", {"content": "x", "metadata": {"k": "v" * 24}}),
       ("remember", {"content": "x", "metadata": {"k": "v" * 24}})),
      (("POST", "/v1/search", {"query": "q", "top_k": 5, "where": {"a": {"$in": [1, 2, 3]}}}),
       ("recall", {"query": "q", "top_k": 5, "where": {"a": {"$in": [1, 2, 3]}}})),
      (("POST", "/v1/search", {"query": "q", "where": {"$and": [{"$or": [{"a": 1}]}]}}),
       ("recall", {"query": "q", "where": {"$and": [{"$or": [{"a": 1}]}]}}))]


def test_the_limits_refuse_the_same_input_on_rest_and_mcp() -> None:
    service = MemoryService(_engine(), limits=LIMITS)
    app = build_app(service, None)

    async def run() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http, \
                Client(build_mcp(service, fixed_principal(()))) as mcp:
            for (method, path, body), (tool, args), limit in OVER:
                r = await http.request(method, path, json=body)
                assert r.status_code in (413, 422), (limit, r.text)
                assert f"{limit}=" in r.json()["detail"][0]["msg"], (limit, r.text)
                got = await mcp.call_tool(tool, args)
                assert got.is_error and f"{limit}=" in str(getattr(got.content[0], "text", ""))
            assert (await http.get("/v1/memories")).json()["memories"] == []
            for (method, path, body), (tool, args) in AT:
                r = await http.request(method, path, json=body)
                assert r.status_code in (200, 201), r.text
                got = await mcp.call_tool(tool, args)
                assert not got.is_error, got.content

    asyncio.run(run())


def test_a_search_without_top_k_under_a_smaller_max_top_k_answers_on_both() -> None:
    """``--max-top-k 3``: a search that sends no ``top_k`` was refused 422 "top_k is
    5, over the limit" (on REST and MCP), for a value the client never sent; the
    list's default page already shrinks to ``max_list_limit``. Now the default is
    min(5, max_top_k); an explicit top_k over the limit is still refused."""
    service = MemoryService(_engine(), limits=Limits(max_top_k=3))
    app = build_app(service, None)

    async def run() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http, \
                Client(build_mcp(service, fixed_principal(()))) as mcp:
            for i in range(6):
                await http.post("/v1/memories", json={"content": f"memory {i}"})
            r = await http.post("/v1/search", json={"query": "memory"})
            assert r.status_code == 200, r.text
            assert len(r.json()["results"]) == 3
            r = await http.post("/v1/search", json={"query": "memory", "top_k": None})
            assert r.status_code == 200 and len(r.json()["results"]) == 3, r.text
            for args in ({"query": "memory"}, {"query": "memory", "top_k": None}):
                got = await mcp.call_tool("recall", args)
                assert not got.is_error, got.content
                assert got.structured_content is not None
                assert len(got.structured_content["results"]) == 3
            r = await http.post("/v1/search", json={"query": "memory", "top_k": 5})
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "top_k"]
            got = await mcp.call_tool("recall", {"query": "memory", "top_k": 5})
            assert got.is_error and "max_top_k" in str(getattr(got.content[0], "text", ""))

    asyncio.run(run())


class _FailingRater:
    """A server-side text rater that fails: raises, or answers no CoreAffect."""

    def __init__(self, fault: str) -> None:
        self.fault = fault

    def rate_affect(self, texts: Any) -> Any:
        if self.fault == "raises":
            raise ValueError("rater backend said: token sk-SECRET rejected")
        if self.fault == "nan":
            return [CoreAffect.model_construct(valence=float("nan"), arousal=0.1,
                                               dominance=0.5) for _ in texts]
        return [(0.1, 0.2, 0.5) for _ in texts]  # tuples, not CoreAffect


@pytest.mark.parametrize("fault", ["raises", "nan", "tuples"])
def test_a_failing_text_rater_is_a_server_error_on_rest_and_mcp(fault: str) -> None:
    """A fault of the service's own ``affect_from_text`` rater is the server's, not
    the request's: it was answered 422 / "invalid input" with the rater's message
    (which may hold a backend's secret); now 500 on REST and a tool error on MCP,
    neither naming it as the client's input nor carrying its message. Nothing is
    stored and the scope's mood does not move."""
    def engine() -> EmotionalMemory:
        return EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=64),
                               state_store=InMemoryAffectiveStateStore(),
                               affect_from_text=_FailingRater(fault))

    rest_service, mcp_service = MemoryService(engine()), MemoryService(engine())
    app = build_app(rest_service, None)

    async def run() -> None:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http, \
                Client(build_mcp(mcp_service, fixed_principal(("a",)))) as mcp:
            before = (await http.get("/v1/state", params={"scope": "a"})).json()
            for path, body in (("/v1/memories", {"content": "x", "scope": ["a"]}),
                               ("/v1/memories/batch", {"items": [{"content": "x"}],
                                                       "scope": ["a"]})):
                r = await http.post(path, json=body)
                assert r.status_code == 500, r.text
                assert "SECRET" not in r.text and "rate_affect" not in r.text
            got = await mcp.call_tool("remember", {"content": "x"})
            text = str(getattr(got.content[0], "text", ""))
            assert got.is_error and "invalid input" not in text and "SECRET" not in text
            assert (await http.get("/v1/memories", params={"scope": "a"})).json()[
                "memories"] == []
            assert (await http.get("/v1/state", params={"scope": "a"})).json() == before
            assert await mcp_service.list(("a",), None, 100, 0) == []

    asyncio.run(run())
