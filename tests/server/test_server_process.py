"""``emotional-memory serve`` and ``mcp`` as processes: a restart keeps every memory
(SQLite, PostgreSQL, a Chroma server), the stdio MCP server, ``--no-auth`` on loopback,
the CLI's refusals, and the README's Service examples run as written.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")
pytest.importorskip("mcp", reason="the server extra is not installed")

import httpx
from mcp import Client, StdioServerParameters

from support.paths import README
from support.rest_keys import ADMIN, ALICE, BOB, KEYS, all_memories, auth, post_memory
from support.service_process import START_TIMEOUT, child_env, command, start


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "keys.json"
    path.write_text(json.dumps(KEYS), encoding="utf-8")
    return path


# ---------------------------------------------------------------------- restart, SQLite


def _restart_keeps_everything(args: list[str], tmp_path: Path, refuses_nul: bool = False
                              ) -> None:
    """Write through one server process, stop it, start another: all there, all working.

    ``refuses_nul``: the store cannot hold NUL characters (PostgreSQL): a batch with one
    in an item is a 422 at that item's field, and nothing of it is stored."""
    first = start(args, tmp_path / "first.log")
    try:
        with httpx.Client(base_url=first.url, timeout=120.0) as http:
            if refuses_nul:
                bad = http.post("/v1/memories/batch", json={"items": [
                    {"content": "kept?"}, {"content": "x"}, {"content": "a\x00b"}]},
                    headers=auth(ALICE))
                assert bad.status_code == 422, bad.text
                (error,) = bad.json()["detail"]
                assert error["loc"] == ["body", "items", 2, "content"], error
                assert "memory 2 of the batch" in error["msg"]
                one = http.post("/v1/memories", json={"content": "x", "metadata": {"k": "\x00"}},
                                headers=auth(ALICE))
                assert one.status_code == 422, one.text
                assert one.json()["detail"][0]["loc"] == ["body", "metadata"]
            batch = http.post("/v1/memories/batch", json={"items": [
                {"content": f"durable {i}", "metadata": {"i": i}} for i in range(40)]},
                headers=auth(ALICE))
            assert batch.status_code == 201, batch.text
            singles = [post_memory(http, key, {"content": f"single {key[:3]} {i}",
                                         "affect": {"valence": 0.1 * i, "arousal": 0.5}})
                       for key in (ALICE, BOB) for i in range(5)]
            assert singles
            http.put("/v1/state/affect", json={"valence": 0.8, "arousal": 0.7},
                     headers=auth(ALICE))
            before = {key: all_memories(http, key) for key in (ADMIN, ALICE, BOB)}
            states = {key: http.get("/v1/state", headers=auth(key)).json()
                      for key in (ALICE, BOB)}
    finally:
        assert first.stop() == 0, first.log_text()
    assert len(before[ADMIN]) == 50

    second = start(args, tmp_path / "second.log")
    try:
        with httpx.Client(base_url=second.url, timeout=120.0) as http:
            for key in (ADMIN, ALICE, BOB):
                assert all_memories(http, key) == before[key]
            for key in (ALICE, BOB):
                assert http.get("/v1/state", headers=auth(key)).json() == states[key]
            # and it keeps working
            post_memory(http, ALICE, {"content": "after the restart"})
            assert len(all_memories(http, ADMIN)) == 51
    finally:
        second.stop()


def test_restart_with_sqlite_keeps_every_memory(keys_file: Path, tmp_path: Path) -> None:
    db = tmp_path / "memories.db"
    _restart_keeps_everything(
        ["--keys", str(keys_file), "--store", f"sqlite:///{db}", "--embedder", "hashing"], tmp_path
    )


def test_restart_over_postgresql_keeps_every_memory(
    keys_file: Path, tmp_path: Path, pg_dsn: str
) -> None:
    # tests/conftest.py's real PostgreSQL + pgvector server (the PostgreSQL store's)
    _restart_keeps_everything(
        ["--keys", str(keys_file), "--store", pg_dsn, "--embedder", "hashing"], tmp_path,
        refuses_nul=True,
    )


def test_restart_over_a_chroma_server_with_sqlite_states(
    keys_file: Path, tmp_path: Path, chroma_server: int
) -> None:
    args = ["--keys", str(keys_file), "--store", f"chroma://127.0.0.1:{chroma_server}/service",
            "--state", f"sqlite:///{tmp_path / 'states.db'}", "--embedder", "hashing"]
    first = start(args, tmp_path / "first.log")
    try:
        with httpx.Client(base_url=first.url, timeout=120.0) as http:
            mine = [post_memory(http, ALICE, {"content": f"chroma note {i}", "metadata": {"i": i}})
                    for i in range(6)]
            theirs = post_memory(http, BOB, {"content": "chroma note from bob"})
            assert http.get(f"/v1/memories/{theirs['id']}", headers=auth(ALICE)).status_code \
                == 404
            found = http.post("/v1/search", json={"query": "chroma note", "top_k": 20},
                              headers=auth(ALICE)).json()["results"]
            assert {x["id"] for x in found} == {m["id"] for m in mine}
            http.put("/v1/state/affect", json={"valence": -0.6, "arousal": 0.3},
                     headers=auth(ALICE))
            before = all_memories(http, ALICE)
            state = http.get("/v1/state", headers=auth(ALICE)).json()
    finally:
        assert first.stop() == 0, first.log_text()
    second = start(args, tmp_path / "second.log")
    try:
        with httpx.Client(base_url=second.url, timeout=120.0) as http:
            after = all_memories(http, ALICE)
            assert [m["id"] for m in after] == [m["id"] for m in before]
            assert [m["content"] for m in after] == [m["content"] for m in before]
            assert http.get("/v1/state", headers=auth(ALICE)).json() == state
    finally:
        second.stop()


# ---------------------------------------------------------------------- stdio, CLI


def test_mcp_stdio(tmp_path: Path) -> None:
    db = tmp_path / "stdio.db"
    params = StdioServerParameters(
        command=sys.executable,
        args=command("mcp", "--store", f"sqlite:///{db}", "--scope", "alice",
                     "--embedder", "hashing", "--log-level", "warning")[1:],
        env=child_env(),
    )

    async def run() -> str:
        async with Client(params, read_timeout_seconds=300) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == {"remember", "recall", "forget", "mood", "set_mood"}
            made = await client.call_tool("remember", {"content": "Desk plant needs water"})
            assert not made.is_error, made.content
            found = await client.call_tool("recall", {"query": "plant", "top_k": 1})
            results = found.structured_content["results"]  # type: ignore[index]
            assert [r["content"] for r in results] == ["Desk plant needs water"]
            mid: str = made.structured_content["id"]  # type: ignore[index]
            return mid

    mid = asyncio.run(run())
    from emotional_memory.stores.sqlite import SQLiteStore

    with SQLiteStore(str(db)) as store:
        stored = store.get(mid)
        assert stored is not None and stored.content == "Desk plant needs water"
        assert stored.scope == ("alice",)


def test_no_auth_on_loopback(tmp_path: Path) -> None:
    srv = start(["--no-auth", "--embedder", "hashing"], tmp_path / "noauth.log")
    try:
        with httpx.Client(base_url=srv.url, timeout=120.0) as http:
            made = http.post("/v1/memories", json={"content": "open house"})
            assert made.status_code == 201, made.text
            assert http.get(f"/v1/memories/{made.json()['id']}").status_code == 200
    finally:
        srv.stop()


def test_serve_freezes_its_start_up_heap(tmp_path: Path) -> None:
    """``serve`` exempts what start-up made from the cyclic collector (full collections
    otherwise scan it: ~100 ms pauses of every thread, benchmarks/gc_pauses.py)."""
    import gc

    from emotional_memory.server.cli import _parser, _serve_app

    args = _parser().parse_args(["serve", "--no-auth", "--embedder", "hashing",
                                 "--store", f"sqlite:///{tmp_path / 'm.db'}"])
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    app = _serve_app(args)
    try:
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        app.app.app.state.service.engine.close()  # ExitDeadline(Gate(FastAPI))


@pytest.mark.parametrize(("args", "message"), [
    (["serve"], "refusing to start without API keys"),
    (["serve", "--no-auth", "--host", "0.0.0.0"], "loopback"),
    (["serve", "--no-auth", "--keys", "k.json"], "either --keys or --no-auth"),
    (["serve", "--keys", "/nonexistent/keys.json"], "cannot read --keys"),
    (["mcp", "--scope", ""], "--scope[0]"),
    *[(["serve", "--no-auth", "--port", "0", "--shutdown-timeout", bad],
       "--shutdown-timeout must be a positive finite number of seconds")
      for bad in ("0", "-1", "nan", "inf")],
])
def test_cli_refuses(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from emotional_memory.server.cli import main

    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_cli_refuses_bad_keys_file_without_echoing_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from emotional_memory.server.cli import main

    secret = "short-secret"
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({ALICE: {"scope": ["a"]}, secret: {"scope": ["b"]}}))
    assert main(["serve", "--keys", str(path)]) == 2
    err = capsys.readouterr().err
    assert "entry #2" in err and secret not in err and ALICE not in err


def test_cli_refuses_unknown_store(keys_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from emotional_memory.server.cli import main

    assert main(["serve", "--keys", str(keys_file), "--store", "mongodb://u:pw@h/db"]) == 2
    err = capsys.readouterr().err
    assert "unknown store URL scheme 'mongodb'" in err and "pw" not in err


def test_console_script_is_installed() -> None:
    import subprocess
    import sys

    # the script pip installed next to this interpreter (make install: .venv/bin)
    script = Path(sys.executable).parent / "emotional-memory"
    assert script.exists(), f"{script} missing: run `make install` (pip install -e .)"
    out = subprocess.run([str(script), "serve"], capture_output=True, text=True,
                         env=child_env(), timeout=120)
    assert out.returncode == 2 and "refusing to start without API keys" in out.stderr


# ---------------------------------------------------------------------- README


def _service_section() -> str:
    text = README.read_text(encoding="utf-8")
    return text.split("\n## Service\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.skipif(shutil.which("curl") is None or shutil.which("bash") is None,
                    reason="the README's example uses curl and bash (.ci/run installs curl)")
def test_readme_service_examples_run_as_written(tmp_path: Path) -> None:
    import re
    import shlex
    import subprocess

    from emotional_memory.server.cli import _parser

    section = _service_section()
    setup, calls, workers = re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    deploy = shlex.split(workers.replace("\\\n", " "))
    assert deploy[:2] == ["emotional-memory", "serve"]
    parsed_deploy = _parser().parse_args(deploy[1:])  # "Deploying several workers"
    assert parsed_deploy.workers == 4 and parsed_deploy.store.startswith("postgresql://")
    lines = setup.strip().splitlines()
    serve = next(line for line in lines if line.startswith("emotional-memory serve"))
    heredoc = "\n".join(line for line in lines if line != serve)
    subprocess.run(["bash", "-euc", heredoc], cwd=tmp_path, check=True)
    keys = json.loads((tmp_path / "keys.json").read_text())
    assert (tmp_path / "keys.json").stat().st_mode & 0o077 == 0  # only its owner reads it
    argv = shlex.split(serve.split("#", 1)[0])[2:]  # after `emotional-memory serve`
    srv = start(argv, tmp_path / "readme.log", cwd=tmp_path)
    try:
        port = srv.url.rsplit(":", 1)[1]
        script = calls.replace("localhost:8765", f"127.0.0.1:{port}")
        out = subprocess.run(["bash", "-euc", script], capture_output=True, text=True,
                             check=True, timeout=300).stdout
        made, found = (json.loads(part) for part in out.replace("}{", "}\n{").splitlines())
        assert made["metadata"] == {"topic": "work"} and made["affect"]["valence"] == -0.8
        assert [r["id"] for r in found["results"]] == [made["id"]]
        assert found["results"][0]["breakdown"] is not None
    finally:
        srv.stop()
    assert (tmp_path / "memories.db").exists()
    assert "chmod 600" not in (tmp_path / "readme.log").read_text()  # no start-up warning

    config = json.loads(re.findall(r"```json\n(.*?)```", section, flags=re.DOTALL)[0])
    local, remote = config["mcpServers"].values()
    # a desktop app starts the command without the venv's PATH: the script's full path
    assert local["command"] == "/home/me/.emotional-memory/bin/emotional-memory"
    parsed = _parser().parse_args(local["args"])
    assert parsed.command == "mcp" and parsed.scope == ["alice"]
    assert remote["url"].endswith(":8765/mcp")
    key = remote["headers"]["Authorization"].removeprefix("Bearer ")
    assert keys[key] == {"scope": ["alice"]}


def _serve_process(args: list[str], log: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """``emotional-memory serve --embedder hashing ARGS``, output to ``log``."""
    with log.open("wb") as out:
        proc = subprocess.Popen(command("serve", "--embedder", "hashing", *args),
                                stdout=out, stderr=subprocess.STDOUT, env=child_env())
    return proc, log


def test_serve_on_port_0_prints_the_port_the_os_chose(tmp_path: Path) -> None:
    proc, log = _serve_process(["--no-auth", "--host", "127.0.0.1", "--port", "0"],
                               tmp_path / "p0.log")
    try:
        deadline = time.monotonic() + START_TIMEOUT
        found = None
        while found is None and proc.poll() is None and time.monotonic() < deadline:
            found = re.search(r"serving (http://127\.0\.0\.1:(\d+)) ", log.read_text())
            time.sleep(0.1)
        assert found is not None, log.read_text()
        assert found.group(2) != "0"
        while True:  # the printed URL answers (uvicorn listens a moment later)
            try:
                assert httpx.get(f"{found.group(1)}/healthz", timeout=5).status_code == 200
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert proc.returncode == 0, log.read_text()


@pytest.mark.parametrize("host", ["127.0.0.1", "no-such-host.invalid"])
def test_serve_on_an_address_it_cannot_bind_exits_2_in_one_line(
    tmp_path: Path, keys_file: Path, host: str
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc, log = _serve_process(["--keys", str(keys_file), "--host", host,
                                    "--port", str(port)], tmp_path / "b.log")
        try:
            proc.wait(timeout=START_TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = log.read_text()
    assert proc.returncode == 2, text
    errors = [line for line in text.splitlines() if "error" in line.lower()]
    assert errors == [line for line in errors if line.startswith("emotional-memory: error: ")]
    assert len(errors) == 1 and f"{host}:{port}" in errors[0], text
    assert "Traceback" not in text
