"""The command line's store, state and config arguments: refused up front, one line, no secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from emotional_memory.server import cli
from emotional_memory.server.stores import StoreURLError, open_store

SECRET = "redis-pw-7f3a9c1e"


def test_an_unreachable_redis_state_store_is_a_usage_error_without_the_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # serve printed a redis ConnectionError traceback (exit 1) from the engine's
    # first state load; PostgreSQL's unreachable server was already one line
    pytest.importorskip("redis", reason="the redis extra is not installed")
    from support.service_process import free_port

    url = f"redis://:{SECRET}@127.0.0.1:{free_port()}/0"  # nothing listens there
    with pytest.raises(StoreURLError, match=r"127\.0\.0\.1") as info:
        open_store("memory://", url)
    assert SECRET not in str(info.value)
    for command in (["serve", "--no-auth"], ["mcp"]):
        assert cli.main([*command, "--embedder", "hashing", "--state", url]) == 2
        err = capsys.readouterr().err
        assert "emotional-memory: error: --store/--state:" in err
        assert "Traceback" not in err and SECRET not in err


@pytest.mark.parametrize("db", ["1abc", "abc", "0/extra", "-1"])
def test_a_redis_state_url_whose_database_is_no_number_is_refused(db: str) -> None:
    # redis-py reads such a path as no database at all: the states went to db 0
    pytest.importorskip("redis", reason="the redis extra is not installed")
    with pytest.raises(StoreURLError, match="database"):
        open_store("memory://", f"redis://127.0.0.1:1/{db}")


def test_a_reachable_redis_state_store_opens(redis_url: str) -> None:
    from emotional_memory.state_stores import RedisAffectiveStateStore

    opened = open_store("memory://", redis_url)
    try:
        assert isinstance(opened.state_store, RedisAffectiveStateStore)
        assert opened.durable_state and opened.state_store.client.ping()
    finally:
        opened.close()


def test_a_redis_state_url_names_its_key_so_deployments_on_one_database_keep_apart(
    redis_url: str,
) -> None:
    # every --state redis:// used the default key: two services on one Redis database
    # shared (and overwrote) each other's moods; ?key= was handed to redis-py (refused)
    from emotional_memory import CoreAffect, EmotionalMemory
    from emotional_memory.embedders import HashingEmbedder
    from emotional_memory.stores.redis.state import DEFAULT_REDIS_KEY

    first = open_store("memory://", f"{redis_url}?key=app%3Aone")
    second = open_store("memory://", redis_url)
    try:
        assert first.state_store.key == "app:one"
        assert second.state_store.key == DEFAULT_REDIS_KEY
        for opened, valence in ((first, 0.8), (second, -0.8)):
            e = EmotionalMemory(opened.store, HashingEmbedder(dim=8),
                                state_store=opened.state_store)
            e.set_affect(CoreAffect(valence=valence, arousal=0.3))
        assert first.state_store.load().core_affect.valence == 0.8
        assert second.state_store.load().core_affect.valence == -0.8
    finally:
        first.state_store.clear()
        second.state_store.clear()
        first.close()
        second.close()
    for bad in ("?key=", "?key=a&key=b"):
        with pytest.raises(StoreURLError, match="key"):
            open_store("memory://", redis_url + bad)


def test_an_invalid_config_file_is_one_line_naming_each_field(tmp_path: object) -> None:
    # the error was pydantic's multi-line dump with its documentation URLs
    from pathlib import Path

    path = Path(str(tmp_path)) / "bad.json"
    path.write_text('{"retrieval": {"base_weights": [1, 2]}, "bogus": 1}')
    with pytest.raises(cli.UsageError) as info:
        cli.build_service("memory://", "hashing", str(path))
    text = str(info.value)
    assert "\n" not in text and "pydantic.dev" not in text
    assert "retrieval.base_weights:" in text and "bogus:" in text


@pytest.mark.parametrize(("host", "shown"), [
    ("::1", "http://[::1]:8123"),
    ("[::1]", "http://[::1]:8123"),
    ("127.0.0.1", "http://127.0.0.1:8123"),
])
def test_the_startup_line_shows_a_url_that_works_for_ipv6_hosts(
    host: str, shown: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # "serving http://::1:8123" is no URL (an IPv6 address needs brackets in one)
    uvicorn = pytest.importorskip("uvicorn", reason="the server extra is not installed")
    bound: list[tuple[str, int]] = []

    class Bound:  # the socket _bind returns, not bound (::1 may not exist here)
        def getsockname(self) -> tuple[str, int]:
            return bound[-1]

        def close(self) -> None:
            pass

    def bind(host: str, port: int) -> Bound:
        bound.append((host, port))
        return Bound()

    class Stub:  # uvicorn.Config would configure logging process-wide (pytest's too)
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def run(self, sockets: object = None) -> None:
            pass

    monkeypatch.setattr(cli, "_bind", bind)
    monkeypatch.setattr(uvicorn, "Config", Stub)
    monkeypatch.setattr(uvicorn, "Server", Stub)
    monkeypatch.setattr(cli, "_freeze_startup_heap", lambda: None)
    assert cli.main(["serve", "--no-auth", "--embedder", "hashing", "--host", host,
                     "--port", "8123"]) == 0
    assert f"serving {shown} " in capsys.readouterr().err
    assert bound == [(host.strip("[]"), 8123)]  # what the socket binds: no brackets


@pytest.mark.parametrize(("parts", "shown"), [
    ([], "scope the root;"),
    (["alice", "work"], "scope alice/work;"),
    (["alice/work"], 'scope ["alice/work"];'),
])
def test_the_mcp_startup_line_tells_nested_parts_from_a_part_with_a_slash(
    parts: list[str], shown: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # --scope alice/work is one part named "alice/work", not alice nested in work,
    # yet both were shown as "scope alice/work"
    anyio = pytest.importorskip("anyio", reason="the server extra is not installed")
    monkeypatch.setattr(anyio, "run", lambda fn: None)
    argv = ["mcp", "--embedder", "hashing"] + [a for p in parts for a in ("--scope", p)]
    assert cli.main(argv) == 0
    assert shown in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--store", "--state"])
def test_a_file_that_is_no_database_is_a_usage_error(
    flag: str, tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    # sqlite3.DatabaseError ("file is not a database") escaped as a traceback, exit 1
    from pathlib import Path

    path = Path(str(tmp_path)) / "notes.json"
    path.write_text('{"a": 1}\n' * 100)
    before = path.read_bytes()
    assert cli.main(["serve", "--no-auth", "--embedder", "hashing", flag,
                     f"sqlite:///{path}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("emotional-memory: error: --store/--state: ")
    assert "not a database" in err and "Traceback" not in err
    assert path.read_bytes() == before


def _store_recording(path: Path, identity: str, memories: int) -> str:
    """A SQLite store that records ``identity`` as its embedder and holds ``memories``."""
    from emotional_memory import CoreAffect, EmotionalMemory
    from emotional_memory.embedder_identity import EMBEDDER_SETTING
    from emotional_memory.embedders import HashingEmbedder
    from emotional_memory.stores.sqlite import SQLiteStore

    store = SQLiteStore(path)
    engine = EmotionalMemory(store, HashingEmbedder())
    for i in range(memories):
        engine.encode(f"memory {i}", affect=CoreAffect(valence=0.1, arousal=0.2))
    store.replace_setting(EMBEDDER_SETTING, identity)
    store.close()
    return f"sqlite:///{path}"


def test_an_empty_store_of_another_embedder_is_refused_with_the_way_to_switch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    # a first start without the MiniLM weights records hashing/384 in a store that
    # holds nothing; after installing the weights every start was refused, the only
    # advice being --embedder hashing or another store
    url = _store_recording(tmp_path / "empty.db", "minilm-l6-v2/384", 0)
    assert cli.main(["mcp", "--embedder", "hashing", "--store", url]) == 2
    err = capsys.readouterr().err
    assert "was written with the embedder minilm-l6-v2/384, not hashing/384" in err
    assert "holds no memories" in err
    assert f"python -m training reembed --store {url} --embedder hashing" in err
    # the advice works: the store then opens with hashing, unchanged otherwise
    from training.cli import main as training_main

    assert training_main(["reembed", "--store", url, "--embedder", "hashing"]) == 0
    from emotional_memory.stores.sqlite import SQLiteStore

    with SQLiteStore(tmp_path / "empty.db") as store:
        assert store.setting("embedder") == "hashing/384" and len(store) == 0


def test_a_store_with_memories_of_another_embedder_gets_no_empty_store_advice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    url = _store_recording(tmp_path / "full.db", "minilm-l6-v2/384", 2)
    assert cli.main(["mcp", "--embedder", "hashing", "--store", url]) == 2
    err = capsys.readouterr().err
    assert "was written with the embedder minilm-l6-v2/384" in err
    assert "start it with --embedder minilm" in err and "holds no memories" not in err


def test_the_empty_store_advice_names_the_store_url_alone_when_states_live_elsewhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], redis_url: str,
) -> None:
    # the advice's --store was the opened stores' description, which with --state
    # reads "<store> (states: <state>)": a command that could not run
    url = _store_recording(tmp_path / "empty states.db", "minilm-l6-v2/384", 0)
    assert cli.main(["mcp", "--embedder", "hashing", "--store", url,
                     "--state", redis_url]) == 2
    err = capsys.readouterr().err
    assert f"python -m training reembed --store '{url}' --embedder hashing`" in err


def test_the_empty_store_advice_says_where_a_redacted_password_goes(
    pg_dsn: str, capsys: pytest.CaptureFixture[str],
) -> None:
    from urllib.parse import urlsplit

    from emotional_memory.embedder_identity import EMBEDDER_SETTING
    from emotional_memory.stores.postgres import PostgresStore

    with PostgresStore(pg_dsn) as store:  # the table the CLI opens
        store.replace_setting(EMBEDDER_SETTING, "minilm-l6-v2/384")
    url = pg_dsn  # with its password
    password = urlsplit(url).password
    assert password
    assert cli.main(["mcp", "--embedder", "hashing", "--store", url]) == 2
    err = capsys.readouterr().err
    assert "holds no memories" in err and "your password where *** is" in err, err
    assert password not in err
