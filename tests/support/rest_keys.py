"""Keys and small REST helpers shared by the tests that drive a real ``serve`` process."""

from __future__ import annotations

import json
from typing import Any

import httpx

ADMIN = "admin-key-7f3c9a1e5b2d4c6e"
ALICE = "alice-key-0a1b2c3d4e5f6a7b"
BOB = "bob-key-99887766554433221"
KEYS = {ADMIN: {"scope": []}, ALICE: {"scope": ["alice"]}, BOB: {"scope": ["bob"]}}


def auth(key: str) -> dict[str, str]:
    """The bearer header of ``key``."""
    return {"Authorization": f"Bearer {key}"}


def all_memories(http: httpx.Client, key: str, scope: list[str] | None = None,
                 where: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every memory ``key`` lists (in ``scope``, matching ``where``), page by page."""
    params: dict[str, Any] = {"limit": 1000}  # the service's default max_list_limit
    if scope:
        params["scope"] = scope
    if where is not None:
        params["where"] = json.dumps(where)
    out: list[dict[str, Any]] = []
    while True:
        r = http.get("/v1/memories", params={**params, "offset": len(out)}, headers=auth(key))
        assert r.status_code == 200, r.text
        page = r.json()["memories"]
        out.extend(page)
        if len(page) < params["limit"]:
            return out


def post_memory(http: httpx.Client, key: str, body: dict[str, Any]) -> dict[str, Any]:
    """``POST /v1/memories`` as ``key``; asserts 201 and returns the memory."""
    r = http.post("/v1/memories", json=body, headers=auth(key))
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out
