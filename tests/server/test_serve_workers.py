"""Several service processes over one database behave as one service.

Real ``emotional-memory serve`` processes on 127.0.0.1 driven by httpx:

- two separate ``serve`` processes on one SQLite file, and on one PostgreSQL
  database: a mood set through one is what the other answers next, in every scope;
  memories written through both are all seen by both; 16 clients writing and
  searching 8 scopes through both (single writes and batches) lose no memory, each
  write is answered at once by the other process, the retrieval counts add up to the
  results the searches returned, and both processes answer the same state; a delete
  through one is what the other answers next;
- ``serve --workers 2`` (uvicorn worker processes sharing the port): 16 concurrent
  clients writing to and reading 4 scopes lose no memory, the retrieval counts add
  up to the results returned, and every read of a scope's state and memories
  afterwards (whichever worker answers) is the same;
- ``--workers`` refused where the workers could not share their states.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.service_process import Server, child_env, command, start

ARGS = ["--no-auth", "--embedder", "hashing", "--affect", "none"]


_DATABASES = itertools.count()


@pytest.fixture(params=["sqlite", "postgres"])
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL two processes can share: an SQLite file, or a fresh PostgreSQL
    database on the session's real server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shared.db'}"
    server: Any = request.getfixturevalue("pg_server")
    return str(server.create_database(f"workers_{next(_DATABASES)}"))


@pytest.fixture
def two_servers(shared_store: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    store = shared_store
    first = start(["--store", store, *ARGS], tmp_path / "a.log")
    try:
        second = start(["--store", store, *ARGS], tmp_path / "b.log")
    except BaseException:
        first.stop()
        raise
    yield first, second
    second.stop()
    first.stop()


def _state(server: Server, scope: str) -> dict:  # type: ignore[type-arg]
    response = httpx.get(f"{server.url}/v1/state", params={"scope": scope}, timeout=60)
    response.raise_for_status()
    return response.json()  # type: ignore[no-any-return]


def _set(server: Server, scope: str, valence: float) -> dict:  # type: ignore[type-arg]
    response = httpx.put(f"{server.url}/v1/state/affect",
                         json={"scope": [scope], "valence": valence, "arousal": 0.6}, timeout=60)
    response.raise_for_status()
    return response.json()  # type: ignore[no-any-return]


def test_a_mood_set_through_one_process_is_what_the_other_answers(two_servers) -> None:  # type: ignore[no-untyped-def]
    a, b = two_servers
    for scope, valence in (("alice", -0.9), ("bob", 0.8)):
        for _ in range(3):
            set_through_a = _set(a, scope, valence)
        assert _state(b, scope) == set_through_a
    then = _set(b, "alice", 0.5)  # starts from the state a left
    assert _state(a, "alice") == then
    ids = []
    for i, server in enumerate((a, b, a, b)):
        made = httpx.post(f"{server.url}/v1/memories",
                          json={"content": f"note {i}", "scope": ["alice"]}, timeout=60)
        made.raise_for_status()
        ids.append(made.json()["id"])
    for server in (a, b):
        listed = httpx.get(f"{server.url}/v1/memories", params={"scope": "alice"}, timeout=60)
        assert sorted(m["content"] for m in listed.json()["memories"]) == [
            "note 0", "note 1", "note 2", "note 3"
        ]
    # a delete through one process is what the other answers next
    gone = httpx.delete(f"{b.url}/v1/memories/{ids[0]}", params={"scope": "alice"}, timeout=60)
    assert gone.status_code == 204
    assert httpx.get(f"{a.url}/v1/memories/{ids[0]}", params={"scope": "alice"},
                     timeout=60).status_code == 404
    assert httpx.delete(f"{a.url}/v1/memories/{ids[0]}", params={"scope": "alice"},
                        timeout=60).status_code == 404
    for server in (a, b):
        listed = httpx.get(f"{server.url}/v1/memories", params={"scope": "alice"}, timeout=60)
        assert [m["id"] for m in listed.json()["memories"]] == ids[1:]


def test_two_processes_lose_nothing_and_count_every_retrieval(two_servers) -> None:  # type: ignore[no-untyped-def]
    servers = two_servers
    scopes = [f"s{k}" for k in range(8)]
    returned: list[int] = []

    def client(i: int) -> None:
        for j in range(4):
            server = servers[(i + j) % 2]
            scope = scopes[(i + j) % 8]
            other = servers[(i + j + 1) % 2]
            with httpx.Client(base_url=server.url, timeout=120) as http:
                if j % 2:  # a batch of two
                    made = http.post("/v1/memories/batch", json={"scope": [scope], "items": [
                        {"content": f"client {i} note {j}"},
                        {"content": f"client {i} note {j}b"}]})
                    made.raise_for_status()
                    made_ids = [m["id"] for m in made.json()["memories"]]
                else:
                    made = http.post("/v1/memories", json={"content": f"client {i} note {j}",
                                                           "scope": [scope]})
                    made.raise_for_status()
                    made_ids = [made.json()["id"]]
                for made_id in made_ids:  # the other process answers it at once
                    seen = httpx.get(f"{other.url}/v1/memories/{made_id}",
                                     params={"scope": scope}, timeout=120)
                    assert seen.status_code == 200, seen.text
                http.put("/v1/state/affect", json={"scope": [scope], "valence": 0.1 * j - 0.2,
                                                   "arousal": 0.4}).raise_for_status()
                found = http.post("/v1/search", json={"query": "note", "scope": [scope],
                                                      "top_k": 3})
                found.raise_for_status()
                returned.append(len(found.json()["results"]))

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(client, range(16)))
    memories = []
    for scope in scopes:
        listings = [httpx.get(f"{s.url}/v1/memories", params={"scope": scope, "limit": 100},
                              timeout=60).json()["memories"] for s in servers]
        assert listings[0] == listings[1]
        memories += listings[0]
        assert _state(servers[0], scope) == _state(servers[1], scope)
    assert sorted(m["content"] for m in memories) == sorted(
        [f"client {i} note {j}" for i in range(16) for j in range(4)]
        + [f"client {i} note {j}b" for i in range(16) for j in (1, 3)])
    assert sum(m["retrieval_count"] for m in memories) == sum(returned) > 0


def test_workers_share_one_state_and_lose_no_memory(shared_store: str, tmp_path: Path) -> None:
    store = shared_store
    server = start(["--store", store, "--workers", "2", *ARGS], tmp_path / "w.log")
    try:
        scopes = ["s0", "s1", "s2", "s3"]
        returned: list[int] = []

        def client(i: int) -> None:
            with httpx.Client(base_url=server.url, timeout=120) as http:
                for j in range(4):
                    scope = scopes[(i + j) % 4]
                    http.post("/v1/memories", json={"content": f"c{i} m{j}", "scope": [scope]}
                              ).raise_for_status()
                    http.put("/v1/state/affect", json={"scope": [scope], "valence": -0.5,
                                                       "arousal": 0.3}).raise_for_status()
                    found = http.post("/v1/search", json={"query": "m", "scope": [scope],
                                                          "top_k": 3})
                    found.raise_for_status()
                    returned.append(len(found.json()["results"]))

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(client, range(16)))
        memories = []
        for scope in scopes:
            listings = {str(httpx.get(f"{server.url}/v1/memories",  # any worker answers
                                      params={"scope": scope, "limit": 100}, timeout=60).json())
                        for _ in range(4)}
            assert len(listings) == 1
            memories += httpx.get(f"{server.url}/v1/memories",
                                  params={"scope": scope, "limit": 100}, timeout=60
                                  ).json()["memories"]
            states = {str(_state(server, scope)) for _ in range(8)}  # any worker answers
            assert len(states) == 1
        assert sorted(m["content"] for m in memories) == sorted(
            f"c{i} m{j}" for i in range(16) for j in range(4))
        assert sum(m["retrieval_count"] for m in memories) == sum(returned) > 0
        assert server.log_text().count("emotional-memory: serving") == 2  # two workers
    finally:
        server.stop()


@pytest.mark.parametrize("store", ["memory://", "qdrant://localhost:6333/c",
                                   "sqlite:///:memory:"])  # private to each worker
def test_workers_need_a_shared_store(store: str, tmp_path: Path) -> None:
    out = subprocess.run(
        command("serve", "--store", store, "--workers", "2", *ARGS, "--port", "1"),
        capture_output=True, text=True, env=child_env(), timeout=120,
    )
    assert out.returncode == 2
    assert "--workers > 1 needs a store" in out.stderr


def test_a_felt_memory_reports_the_mood_its_own_encode_started_from(tmp_path: Path) -> None:
    """``remember_felt`` (the MCP ``remember`` tool's mood change) reads the mood before
    and after its encode in the same turn as the encode, across processes: another
    worker's write arriving just as the request starts is the "before" it reports, not
    a change it attributes to its own memory."""
    import asyncio
    import sys

    from emotional_memory import CoreAffect
    from emotional_memory.server.service import BatchItem, MemoryService
    from emotional_memory.state import AffectiveState
    from support.paths import SUPPORT
    from support.shared_state_worker import engine_for

    path = str(tmp_path / "shared.db")
    service = MemoryService(engine_for("sqlite", path))
    other_worker = [sys.executable, str(SUPPORT / "shared_state_worker.py"), "sqlite", path,
                    "0", "1", "affect"]

    async def run() -> tuple[Any, Any]:
        view = await service.view(("team",))
        states = view.engine._shared_states()
        assert states is not None
        hold, moods = states.hold_scope, []

        def arriving(scope: tuple[str, ...]) -> Any:
            if not moods:  # another worker's write lands as this request starts
                subprocess.run(other_worker, check=True, capture_output=True, timeout=120)
                snapshot, _ = states.load_versioned()
                moods.append(AffectiveState.restore(snapshot).mood)  # type: ignore[arg-type]
            return hold(scope)

        states.hold_scope = arriving  # type: ignore[method-assign]
        done = await service.remember_felt(
            ("team",), BatchItem("a memory", affect=CoreAffect(valence=0.6, arousal=0.3)))
        return done, moods[0]

    try:
        done, other = asyncio.run(run())
        assert done.mood_before == other
        assert done.mood_after == done.memory.tag.mood_snapshot
        assert done.mood_after == asyncio.run(service.state(("team",))).mood
    finally:
        service.engine.close()
