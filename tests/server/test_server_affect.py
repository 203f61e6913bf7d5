"""The service feels what it stores: real processes with MiniLM and the shipped rater.

One ``emotional-memory serve`` process for the module (its defaults: MiniLM and affect
from text), driven with httpx; a real stdio MCP session (the ``mcp`` SDK's client)
with JAX's backend probing left to the CLI (no ``JAX_PLATFORMS`` in its
environment); further short-lived processes for the embedder choices.

The thresholds were measured with the shipped head before being written (valences:
"I got the job I wanted!" +0.46, "My grandfather died last night" -0.49, "I failed my
exam and feel terrible" -0.64, "My dog was hit by a car" -0.40; with the EmoBank-only
head shipped before: +0.38, -0.41, -0.57, -0.37). The shipped head rates "I adopted a
cat named Miso" -0.02, so that text is not used as a clearly positive one here.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")
pytest.importorskip("mcp", reason="the server extra is not installed")
pytest.importorskip("tokenizers", reason="MiniLM extras not installed (`make minilm`)")

import httpx
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from emotional_memory.embedders.minilm import default_model_dir
from support.service_process import Server, child_env, command, start

if default_model_dir() is None:  # pragma: no cover - CI installs the weights
    pytest.skip("the MiniLM weights are not installed (`make minilm`)", allow_module_level=True)

POSITIVE = "I got the job I wanted!"
NEGATIVE = "My grandfather died last night"
SAD = [NEGATIVE, "I failed my exam and feel terrible", "My dog was hit by a car"]
HAPPY = [POSITIVE, "We had a wonderful picnic in the sun with friends",
         "My sister had a healthy baby girl"]
NEUTRAL_QUERY = "What happened recently?"
STARTUP = "embedder minilm-l6-v2/384; affect from text (emobank-head) unless given"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("db") / "memories.db"


@pytest.fixture(scope="module")
def server(db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server with the defaults (MiniLM, affect from text) over a SQLite file."""
    log = tmp_path_factory.mktemp("log") / "server.log"
    srv = start(["--no-auth", "--store", f"sqlite:///{db}", "--log-level", "warning"], log)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=120.0) as client:
        yield client


def _post(http: httpx.Client, content: str, scope: list[str], **extra: Any) -> dict[str, Any]:
    r = http.post("/v1/memories", json={"content": content, "scope": scope, **extra})
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def _mood(http: httpx.Client, scope: list[str]) -> dict[str, Any]:
    r = http.get("/v1/state", params={"scope": scope})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()["mood"]
    return out


def test_startup_line_names_the_embedder_and_rater(server: Server) -> None:
    assert STARTUP in server.log_text()


def test_rest_rates_affect_from_text_and_the_mood_follows(http: httpx.Client) -> None:
    scope = ["rest", "felt"]
    start_mood = _mood(http, scope)
    happy = _post(http, POSITIVE, scope)
    assert happy["affect"]["valence"] > 0.3
    assert happy["emotion"] is not None
    after_happy = _mood(http, scope)
    assert after_happy["valence"] > start_mood["valence"]
    # the answer says where the affect came from and how the mood moved, as MCP's does
    assert happy["affect_source"] == "text"
    assert happy["mood_before"] == start_mood and happy["mood_after"] == after_happy
    for dim in ("valence", "arousal", "dominance"):
        moved = after_happy[dim] - start_mood[dim]
        assert happy["mood_change"][dim] == pytest.approx(moved, abs=1e-12)
    sad = [_post(http, text, scope) for text in SAD]
    assert all(m["affect"]["valence"] < -0.3 for m in sad), [m["affect"] for m in sad]
    after_sad = _mood(http, scope)
    assert after_sad["valence"] < after_happy["valence"]
    # three sad memories in a fresh scope leave its mood negative
    for text in SAD:
        _post(http, text, ["rest", "sad-only"])
    assert _mood(http, ["rest", "sad-only"])["valence"] < 0


def test_a_given_affect_overrides_the_estimate(http: httpx.Client) -> None:
    given = {"valence": -0.6, "arousal": 0.2, "dominance": 0.9}
    made = _post(http, POSITIVE, ["rest", "given"], affect=given)
    assert made["affect"] == given and made["affect_source"] == "given"
    batch = http.post("/v1/memories/batch", json={"scope": ["rest", "given"], "items": [
        {"content": POSITIVE}, {"content": POSITIVE, "affect": given}]})
    assert batch.status_code == 201, batch.text
    rated, kept = batch.json()["memories"]
    assert rated["affect"]["valence"] > 0.3 and kept["affect"] == given


def test_the_schema_says_an_omitted_affect_may_be_estimated() -> None:
    """The OpenAPI description of an item's affect said an omitted one is "the scope's
    current affective state", while the default service (MiniLM, ``--affect text``)
    estimates it from the content, as the test above shows."""
    from emotional_memory.server.schemas import ItemIn

    description = ItemIn.model_fields["affect"].description or ""
    assert "estimated from the content" in description and "--affect text" in description
    assert "current affective state" in description  # --affect none


@pytest.mark.parametrize(("affect", "field"), [
    ({"valence": 1.5, "arousal": 0.2}, "valence"),
    ({"valence": 0.5, "arousal": -0.1}, "arousal"),
    ({"valence": 0.5, "arousal": 0.1, "dominance": 2}, "dominance"),
    ({"valence": 0.5}, "arousal"),
])
def test_bad_affect_is_422_naming_the_field(
    http: httpx.Client, affect: dict[str, Any], field: str
) -> None:
    scope = ["rest", "bad"]
    r = http.post("/v1/memories", json={"content": "x", "affect": affect, "scope": scope})
    assert r.status_code == 422
    assert ["body", "affect", field] in [e["loc"] for e in r.json()["detail"]]
    listed = http.get("/v1/memories", params={"scope": scope}).json()["memories"]
    assert listed == []


def test_mood_congruent_recall_in_sibling_scopes(http: httpx.Client) -> None:
    """Same six memories, same order; one scope left sad, the other happy."""
    six = [text for pair in zip(SAD, HAPPY, strict=True) for text in pair]
    ranks: dict[str, list[int]] = {}
    for name, valence in (("sad", -0.8), ("happy", 0.8)):
        scope = ["congruence", name]
        for text in six:
            _post(http, text, scope)
        r = http.put("/v1/state/affect",
                     json={"valence": valence, "arousal": 0.5, "scope": scope})
        assert r.status_code == 200, r.text
        found = http.post("/v1/search", json={"query": NEUTRAL_QUERY, "top_k": 6,
                                              "scope": scope}).json()["results"]
        order = [x["content"] for x in found]
        assert sorted(order) == sorted(six)
        ranks[name] = [order.index(text) for text in SAD]
    # each sad memory ranks higher (a smaller index) when the scope is sad
    assert all(s < h for s, h in zip(ranks["sad"], ranks["happy"], strict=True)), ranks
    assert sorted(ranks["sad"]) == [0, 1, 2], ranks


# ---------------------------------------------------------------------- stdio MCP


def _quiet_env() -> dict[str, str]:
    """The server's environment without the JAX settings the CLI chooses itself."""
    env = child_env()
    for name in ("JAX_PLATFORMS", "TF_CPP_MIN_LOG_LEVEL"):
        env.pop(name, None)
    return env


def test_stdio_mcp_feels_what_it_stores(tmp_path: Path) -> None:
    db = tmp_path / "stdio.db"
    params = StdioServerParameters(
        command=command()[0],
        args=command("mcp", "--store", f"sqlite:///{db}", "--scope", "alice")[1:],
        env=_quiet_env(),
    )
    errlog = tmp_path / "stderr.log"

    async def run() -> None:
        with errlog.open("w") as err:
            async with Client(stdio_client(params, errlog=err), read_timeout_seconds=300) as c:
                tools = {t.name: t for t in (await c.list_tools()).tools}
                assert set(tools["remember"].input_schema["properties"]) == {
                    "content", "metadata", "affect"}
                assert "estimated from the text" in (tools["remember"].description or "")

                happy = await c.call_tool("remember", {"content": POSITIVE})
                assert not happy.is_error, happy.content
                made = happy.structured_content
                assert made is not None and made["affect"]["valence"] > 0.3
                assert made["affect_source"] == "text" and made["emotion"] is not None
                assert made["mood_change"]["valence"] > 0
                assert made["mood_after"]["valence"] > made["mood_before"]["valence"]
                text = happy.content[0].text  # type: ignore[union-attr]
                assert "estimated from the text" in text and "Mood now valence" in text

                for content in SAD:
                    sad = await c.call_tool("remember", {"content": content})
                    out = sad.structured_content
                    assert out is not None and out["affect"]["valence"] < -0.3, out
                    assert out["mood_change"]["valence"] < 0

                mood = (await c.call_tool("mood", {})).structured_content
                assert mood is not None and mood["mood"]["valence"] < 0
                # the first check compares with the mood when the scope was opened
                assert mood["previous_mood"]["valence"] == 0.0
                assert mood["mood_change"]["valence"] == pytest.approx(mood["mood"]["valence"])
                again = (await c.call_tool("mood", {})).structured_content
                assert again is not None and again["mood_change"]["valence"] == 0.0

                given = {"valence": 0.9, "arousal": 0.1, "dominance": 0.7}
                over = await c.call_tool("remember", {"content": NEGATIVE, "affect": given})
                out = over.structured_content
                assert out is not None and out["affect"] == given
                assert out["affect_source"] == "given"
                bad = await c.call_tool("remember", {"content": "x",
                                                     "affect": {"valence": -3, "arousal": 0}})
                assert bad.is_error and "valence" in bad.content[0].text  # type: ignore[union-attr]

                found = await c.call_tool("recall", {"query": "a death in the family",
                                                     "top_k": 2})
                results = found.structured_content["results"]  # type: ignore[index]
                assert results[0]["content"] == NEGATIVE
                assert all("affect" in r and "emotion" in r for r in results)
                assert "valence" in found.content[0].text  # type: ignore[union-attr]

    asyncio.run(run())
    # a quiet start: the start-up line first, and nothing from JAX's backend probing
    # (the SDK's own log of the rejected call may follow)
    lines = errlog.read_text().splitlines()
    assert STARTUP in lines[0] and "scope alice" in lines[0], lines
    chatter = ("jax", "xla", "backend", "tpu", "gpu", "cuda", "platform")
    assert not [line for line in lines[1:] if any(w in line.lower() for w in chatter)], lines
    assert all(line.startswith("INFO:mcp.") for line in lines[1:]), lines
    from emotional_memory.stores.sqlite import SQLiteStore

    with SQLiteStore(str(db)) as store:
        assert store.setting("embedder") == "minilm-l6-v2/384"
        assert len(store) == 5


# ---------------------------------------------------------------------- embedder choices


def _refused(args: list[str]) -> str:
    out = subprocess.run(command(*args), capture_output=True, text=True, env=child_env(),
                         timeout=300)
    assert out.returncode == 2, (out.returncode, out.stderr)
    return out.stderr


def test_hashing_is_selectable_and_a_mismatch_is_refused(
    server: Server, db: Path, tmp_path: Path
) -> None:
    # the module's MiniLM server recorded its embedder: hashing is refused on that file
    err = _refused(["serve", "--no-auth", "--store", f"sqlite:///{db}",
                    "--embedder", "hashing"])
    assert "minilm-l6-v2/384" in err and "hashing/384" in err
    assert "--embedder minilm" in err

    other = tmp_path / "hashing.db"
    srv = start(["--no-auth", "--store", f"sqlite:///{other}", "--embedder", "hashing"],
                tmp_path / "hashing.log")
    try:
        assert "embedder hashing/384; affect as given" in srv.log_text()
        with httpx.Client(base_url=srv.url, timeout=120.0) as http:
            made = _post(http, POSITIVE, [])
            assert made["affect"]["valence"] == 0.0  # the current (neutral) affect
            assert made["affect_source"] == "current"
            given = _post(http, POSITIVE, [], affect={"valence": 0.4, "arousal": 0.3})
            assert given["affect"]["valence"] == 0.4
    finally:
        srv.stop()
    err = _refused(["mcp", "--store", f"sqlite:///{other}", "--embedder", "minilm"])
    assert "hashing/384" in err and "minilm-l6-v2/384" in err and "--embedder hashing" in err
    err = _refused(["mcp", "--store", f"sqlite:///{other}"])  # the default is MiniLM too
    assert "written with the embedder hashing/384" in err


def test_a_store_of_another_hashing_dimension_is_not_told_to_use_hashing(
    tmp_path: Path,
) -> None:
    """A store the library wrote with ``HashingEmbedder(dim=32)`` is refused by
    ``--embedder hashing`` (384-d), naming both, without advising the very option
    that was refused."""
    from emotional_memory import EmotionalMemory
    from emotional_memory.embedder_identity import record_embedder
    from emotional_memory.embedders import HashingEmbedder
    from emotional_memory.stores.sqlite import SQLiteStore

    path = tmp_path / "dim32.db"
    store = SQLiteStore(path)
    record_embedder(store, HashingEmbedder(dim=32))
    EmotionalMemory(store, HashingEmbedder(dim=32)).encode("written by the library")
    store.close()
    err = _refused(["serve", "--no-auth", "--store", f"sqlite:///{path}",
                    "--embedder", "hashing"])
    assert "hashing/32" in err and "hashing/384" in err
    assert "start it with --embedder hashing" not in err
    assert "the embedder that wrote it" in err
