"""Several service processes over one database behave as one service.

Real ``emotional-memory serve`` processes on 127.0.0.1 driven by httpx:

- two separate ``serve`` processes on one SQLite file: a mood set through one is what
  the other answers next, in every scope; memories written through both are all
  seen by both;
- ``serve --workers 2`` (uvicorn worker processes sharing the port): 16 concurrent
  clients writing to and reading 4 scopes lose no memory, and every read of a
  scope's state afterwards (whichever worker answers) is the same;
- ``--workers`` refused where the workers could not share their states.
"""

from __future__ import annotations

import concurrent.futures
import subprocess
from pathlib import Path

import httpx
import pytest

from support.service_process import Server, child_env, command, start

ARGS = ["--no-auth", "--embedder", "hashing", "--affect", "none"]


@pytest.fixture
def two_servers(tmp_path: Path):  # type: ignore[no-untyped-def]
    store = f"sqlite:///{tmp_path / 'shared.db'}"
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
    for i, server in enumerate((a, b, a, b)):
        httpx.post(f"{server.url}/v1/memories",
                   json={"content": f"note {i}", "scope": ["alice"]}, timeout=60).raise_for_status()
    for server in (a, b):
        listed = httpx.get(f"{server.url}/v1/memories", params={"scope": "alice"}, timeout=60)
        assert sorted(m["content"] for m in listed.json()["memories"]) == [
            "note 0", "note 1", "note 2", "note 3"
        ]


def test_workers_share_one_state_and_lose_no_memory(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'workers.db'}"
    server = start(["--store", store, "--workers", "2", *ARGS], tmp_path / "w.log")
    try:
        scopes = ["s0", "s1", "s2", "s3"]

        def client(i: int) -> None:
            with httpx.Client(base_url=server.url, timeout=120) as http:
                for j in range(4):
                    scope = scopes[(i + j) % 4]
                    http.post("/v1/memories", json={"content": f"c{i} m{j}", "scope": [scope]}
                              ).raise_for_status()
                    http.put("/v1/state/affect", json={"scope": [scope], "valence": -0.5,
                                                       "arousal": 0.3}).raise_for_status()
                    http.post("/v1/search", json={"query": "m", "scope": [scope], "top_k": 3}
                              ).raise_for_status()

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(client, range(16)))
        total = 0
        for scope in scopes:
            listed = httpx.get(f"{server.url}/v1/memories",
                               params={"scope": scope, "limit": 100}, timeout=60).json()
            total += len(listed["memories"])
            states = {str(_state(server, scope)) for _ in range(8)}  # any worker answers
            assert len(states) == 1
        assert total == 64
        assert server.log_text().count("emotional-memory: serving") == 2  # two workers
    finally:
        server.stop()


@pytest.mark.parametrize("store", ["memory://", "qdrant://localhost:6333/c"])
def test_workers_need_a_shared_store(store: str, tmp_path: Path) -> None:
    out = subprocess.run(
        command("serve", "--store", store, "--workers", "2", *ARGS, "--port", "1"),
        capture_output=True, text=True, env=child_env(), timeout=120,
    )
    assert out.returncode == 2
    assert "--workers > 1 needs a store" in out.stderr
