"""One grammar for timestamp strings: ``where`` on ``timestamp`` and ``expires_at``.

The two were read by different parsers: a ``where`` timestamp by
``datetime.fromisoformat`` (ISO basic format, week dates and a space separator in,
a lower-case ``z`` out) and ``expires_at`` by pydantic (the other way round), while
the published ``Filter`` schema states RFC 3339. Both now take RFC 3339 date-times
(upper- or lower-case ``T``/``Z``, as RFC 3339 allows and ``expires_at`` took),
truncating a fraction past microseconds, and refuse everything else naming the field.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")

import httpx

from emotional_memory import EmotionalMemory, InMemoryStore
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.filters import Compare, parse_where
from emotional_memory.server.app import build_app
from emotional_memory.server.service import MemoryService

TAKEN = {
    "2030-01-01T00:00:00Z": 0,
    "2030-01-01T00:00:00z": 0,
    "2030-01-01t00:00:00Z": 0,
    "2030-01-01t00:00:00z": 0,
    "2030-01-01T01:00:00+01:00": 0,
    "2030-01-01T00:00:00-00:00": 0,
    "2030-01-01T00:00:00.5Z": 500_000,
    "2030-01-01T00:00:00.1234567Z": 123_456,  # truncated, not rounded
    "2030-01-01T00:00:00.123456999999Z": 123_456,
    "2030-01-02T00:00:00+23:59": 60_000_000,
}
"""Taken, with the microseconds past 2030-01-01T00:00:00Z they name."""

REFUSED = [
    "20300101T000000Z",  # ISO basic format
    "2030-W01-2T00:00:00Z",  # week date
    "2030-001T00:00:00Z",  # ordinal date
    "2030-01-01 00:00:00Z",  # space separator
    "2030-01-01T00:00Z",  # no seconds
    "2030-01-01T00:00:00,5Z",  # comma fraction
    "2030-01-01T00:00:00.Z",  # empty fraction
    "2030-01-01T00:00:00+01",  # hour-only offset
    "2030-01-01T00:00:00+0100",  # basic offset
    "2030-01-01T00:00:00+01:00:30",  # offset with seconds
    "2030-01-01T00:00:00+24:00",
    "2030-01-01T00:00:00+01:60",
    "2030-01-01T24:00:00Z",
    "2030-12-31T23:59:60Z",  # leap second: no datetime holds it
    "2030-02-30T00:00:00Z",
    "0000-01-01T00:00:00Z",
    "2030-01-01T00:00:00",  # naive
    "2030-01-01",
    "2030-01-01T00:00:00UTC",
    " 2030-01-01T00:00:00Z",
    "2030-01-01T00:00:00Z\n",
    "\uff12\uff10\uff13\uff10-01-01T00:00:00Z",  # full-width digits
    "1893456000",
]
BASE = datetime(2030, 1, 1, tzinfo=UTC)


def _app() -> Any:
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16))
    return build_app(MemoryService(engine), None)


def _calls(app: Any, calls: list[tuple[str, str, Any]]) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            return [await http.request(m, p, json=body) for m, p, body in calls]

    return asyncio.run(run())


def _library(text: str) -> int | None:
    """The where operand's microseconds past BASE, None when refused."""
    try:
        clause = parse_where({"timestamp": {"$gte": text}}).clause
    except ValueError as exc:
        assert "timestamp" in str(exc), exc
        return None
    assert isinstance(clause, Compare)
    return int(clause.value) - round(BASE.timestamp() * 1_000_000)


def test_where_and_expires_at_take_the_same_timestamp_strings() -> None:
    """Each string is taken (naming the same instant) or refused (naming the field)
    alike by the library's where, REST's where and REST's expires_at."""
    app = _app()
    texts = [*TAKEN, *REFUSED]
    posts = _calls(app, [("POST", "/v1/memories", {"content": f"m{i}", "expires_at": t})
                         for i, t in enumerate(texts)])
    searches = _calls(app, [("POST", "/v1/search",
                             {"query": "m", "where": {"timestamp": {"$gte": t}}})
                            for t in texts])
    for text, post, search in zip(texts, posts, searches, strict=True):
        taken = text in TAKEN
        assert (_library(text) is not None) == taken, text
        assert post.status_code == (201 if taken else 422), (text, post.text)
        assert search.status_code == (200 if taken else 422), (text, search.text)
        if taken:
            assert _library(text) == TAKEN[text], text
            stored = datetime.fromisoformat(post.json()["expires_at"])
            assert (stored - BASE) // _MICRO == TAKEN[text], (text, stored)
        else:
            assert "expires_at" in post.text, (text, post.text)
            assert "timestamp" in search.text, (text, search.text)


_MICRO = datetime(2000, 1, 1, 0, 0, 0, 1) - datetime(2000, 1, 1)


def test_the_published_schemas_state_the_same_grammar() -> None:
    """The Filter's timestamp and MemoryIn's expires_at publish the same string
    schema, and it takes exactly the strings the parsers take."""
    import jsonschema_rs

    doc = _app().app.openapi()
    schemas = doc["components"]["schemas"]
    expiry = [s for s in schemas["ItemIn"]["properties"]["expires_at"]["anyOf"]
              if s.get("type") == "string"]
    assert len(expiry) == 1
    where = jsonschema_rs.validator_for(
        {**doc, "$ref": "#/components/schemas/Filter"}, validate_formats=True)
    body = jsonschema_rs.validator_for(expiry[0], validate_formats=True)
    for text in [*TAKEN, *REFUSED]:
        taken = text in TAKEN
        assert where.is_valid({"timestamp": {"$gte": text}}) == taken, text
        assert body.is_valid(text) == taken, text


def test_a_served_memory_keeps_an_instant_whose_offset_has_seconds() -> None:
    """A memory imported with times whose UTC offset has seconds (the library keeps
    them as given) is served with the same instants: JSON writes an offset's hours
    and minutes only, so REST (and MCP, same fields) answer such a time in UTC."""
    from datetime import timedelta, timezone

    from emotional_memory.server.schemas import memory_out

    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder())
    record = engine.encode("seed").model_dump()
    odd = timezone(timedelta(hours=5, seconds=30))
    record |= {"id": "odd", "expires_at": datetime(2100, 1, 1, 12, tzinfo=odd)}
    record["tag"]["timestamp"] = datetime(2020, 6, 1, 8, 0, 15, tzinfo=odd)
    engine.import_memories([record])
    stored = engine.get("odd")
    assert stored is not None and stored.expires_at is not None
    served = memory_out(stored, ()).model_dump(mode="json")
    assert datetime.fromisoformat(served["expires_at"]) == stored.expires_at
    assert datetime.fromisoformat(served["timestamp"]) == stored.tag.timestamp
    app = build_app(MemoryService(engine), None)

    async def run() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            got = await c.get("/v1/memories/odd")
            assert got.status_code == 200, got.text
            body: dict[str, Any] = got.json()
            return body

    body = asyncio.run(run())
    assert datetime.fromisoformat(body["expires_at"]) == stored.expires_at
    assert datetime.fromisoformat(body["timestamp"]) == stored.tag.timestamp
