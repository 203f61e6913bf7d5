"""``GET /v1/memories`` paged by ``offset`` through one ``serve`` process while
another process over the same PostgreSQL database inserts or deletes.

Two real ``emotional-memory serve`` processes (A pages, B writes) on one database:

- inserts (single and batched, into the scope and its sub-scopes, mostly through B
  and also through A, so commits of both processes race): the pages never repeat a
  memory, list every memory that existed before the first page in its order, and
  are exactly the start of the scope's listing afterwards (a memory written
  meanwhile only ever appears after the last one already listed);
- deletes: the pages never repeat a memory and keep the order; a memory deleted
  before the page being read shifts the later ones back, so at most one surviving
  memory per delete is passed over (offset paging, as documented in the README).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support.service_process import Server, start

ARGS = ["--no-auth", "--embedder", "hashing", "--affect", "none"]
PAGE = 3
MOST = 90  # pages stop here: the writers keep up with the pager


@pytest.fixture(scope="module")
def servers(
    pg_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, Server]]:
    """Two ``serve`` processes over one fresh PostgreSQL database (started together)."""
    store = str(pg_server.create_database("paging_workers"))
    logs = tmp_path_factory.mktemp("paging")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        started = [pool.submit(start, ["--store", store, *ARGS], logs / f"{n}.log") for n in "ab"]
    errors = [f.exception() for f in started]
    up = [f.result() for f in started if f.exception() is None]
    if any(errors):
        for server in up:
            server.stop()
        raise next(e for e in errors if e is not None)
    yield up[0], up[1]
    for server in up:
        server.stop()


def _post(http: httpx.Client, scope: list[str], content: str) -> str:
    r = http.post("/v1/memories", json={"content": content, "scope": scope})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _listing(server: Server, scope: str) -> list[str]:
    r = httpx.get(f"{server.url}/v1/memories", params={"scope": scope, "limit": 1000},
                  timeout=60)
    r.raise_for_status()
    return [m["id"] for m in r.json()["memories"]]


def _page_through(server: Server, scope: str, done: threading.Event) -> list[str]:
    """Every id paged through ``scope`` at ``PAGE`` per request; sets ``done`` after."""
    paged: list[str] = []
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            while True:
                r = http.get("/v1/memories",
                             params={"scope": scope, "limit": PAGE, "offset": len(paged)})
                r.raise_for_status()
                page = [m["id"] for m in r.json()["memories"]]
                paged += page
                if len(page) < PAGE or len(paged) >= MOST:
                    return paged
    finally:
        done.set()


def _seed(a: Server, b: Server, scope: str, n: int) -> list[str]:
    """``n`` memories in ``scope``'s three sub-scopes, written through both processes."""
    ids = []
    for i in range(n):
        with httpx.Client(base_url=(a, b)[i % 2].url, timeout=60) as http:
            ids.append(_post(http, [scope, str(i % 3)], f"{scope} before {i}"))
    return ids


def test_paging_through_one_process_while_another_inserts(
    servers: tuple[Server, Server],
) -> None:
    a, b = servers
    before = _seed(a, b, "ins", 24)
    assert _listing(a, "ins") == before
    added: list[str] = []
    done = threading.Event()

    def writer(server: Server, part: str) -> None:
        scope = ["ins"] if part == "" else ["ins", part]
        with httpx.Client(base_url=server.url, timeout=60) as http:
            n = 0
            while not done.is_set():
                if n % 2:  # a batch: one longer transaction, its rows in a run
                    r = http.post("/v1/memories/batch", json={"scope": scope, "items": [
                        {"content": f"during {part} {n} {k}"} for k in range(4)]})
                    assert r.status_code == 201, r.text
                    added.extend(str(m["id"]) for m in r.json()["memories"])
                else:
                    added.append(_post(http, scope, f"during {part} {n}"))
                n += 1

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        writers = [pool.submit(writer, server, part)
                   for server, part in ((b, "0"), (b, "1"), (b, ""), (a, "2"), (a, "1"))]
        paged = pool.submit(_page_through, a, "ins", done).result()
        for w in writers:
            w.result()
    assert len(paged) == len(set(paged)), "a memory listed on two pages"
    assert paged[: len(before)] == before, "a memory present before paging was skipped"
    assert set(paged[len(before):]) <= set(added)
    assert len(paged) > len(before), "no insert was listed while paging"
    final = _listing(b, "ins")
    assert paged == final[: len(paged)], "the pages are not the start of the listing after"


def test_paging_through_one_process_while_another_deletes(
    servers: tuple[Server, Server],
) -> None:
    a, b = servers
    before = _seed(a, b, "del", 30)
    deleted: list[str] = []
    done = threading.Event()

    def deleter() -> None:
        with httpx.Client(base_url=b.url, timeout=60) as http:
            for mid in before[::2]:  # the oldest first: they shift the pages back
                if done.is_set():
                    return
                deleted.append(mid)
                r = http.delete(f"/v1/memories/{mid}", params={"scope": "del"})
                assert r.status_code == 204, r.text

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        deleting = pool.submit(deleter)
        paged = pool.submit(_page_through, a, "del", done).result()
        deleting.result()
    assert deleted, "no delete ran while paging"
    assert len(paged) == len(set(paged)), "a memory listed on two pages"
    assert set(paged) <= set(before)
    assert paged == [m for m in before if m in set(paged)], "the pages left insertion order"
    survivors = [m for m in before if m not in set(deleted)]
    passed_over = [m for m in survivors if m not in set(paged)]
    assert len(passed_over) <= len(deleted), "more memories passed over than deleted"
    assert _listing(a, "del") == survivors
