"""RedisAffectiveStateStore against a real redis-server on 127.0.0.1: what only Redis
does (the JSON value under its key, bytes clients, failing open, the README example).
The state-store contract (save, load, clear, scoped keys, reopen, engine views) is
``tests/stores/contract/test_contract_state_stores.py``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

redis = pytest.importorskip("redis", reason="the redis extra is not installed")

from emotional_memory.affect import CoreAffect  # noqa: E402
from emotional_memory.state import AffectiveState  # noqa: E402
from emotional_memory.stores.redis.state import RedisAffectiveStateStore  # noqa: E402
from support.servers import free_port  # noqa: E402


@pytest.fixture
def store(redis_url: str, request: pytest.FixtureRequest) -> Iterator[RedisAffectiveStateStore]:
    s = RedisAffectiveStateStore(redis_url, key=f"test:{request.node.name}", strict=True)
    s.clear()
    yield s
    s.clear()
    s.close()


def _moved_state() -> AffectiveState:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    state = AffectiveState.initial(t0)
    for i, (v, a) in enumerate([(0.5, 0.7), (-0.3, 0.2), (0.8, 0.9)]):
        state = state.update(CoreAffect(valence=v, arousal=a), now=t0 + timedelta(minutes=i))
    return state


def test_value_is_json_in_redis_under_the_key(store: RedisAffectiveStateStore) -> None:
    store.save(_moved_state())
    raw = store.client.get(store.key)
    assert isinstance(raw, str) and raw.startswith("{")
    assert store.client.exists(store.key) == 1


def test_bytes_client_is_accepted(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)  # decode_responses=False: bytes replies
    with RedisAffectiveStateStore(key="bytes", client=client, strict=True) as s:
        s.save(_moved_state())
        loaded = s.load()
        assert loaded is not None and loaded.snapshot() == _moved_state().snapshot()
        s.clear()


def test_unreachable_server_fails_open_unless_strict() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    lenient = RedisAffectiveStateStore(url)
    lenient.save(_moved_state())  # logged, not raised
    assert lenient.load() is None
    lenient.clear()
    strict = RedisAffectiveStateStore(url, strict=True)
    with pytest.raises(redis.exceptions.ConnectionError):
        strict.load()
    assert "strict=True" in repr(strict)


def test_readme_redis_example_runs(redis_url: str) -> None:
    from support.readme_blocks import integration_examples

    code = integration_examples()["emotional_memory.state_stores.redis"]
    assert "redis://127.0.0.1:6379/0" in code
    namespace: dict[str, object] = {}
    exec(code.replace("redis://127.0.0.1:6379/0", redis_url), namespace)
    states = namespace["states"]
    assert isinstance(states, RedisAffectiveStateStore)
    loaded = states.load()
    assert loaded is not None
    assert loaded.snapshot() == namespace["engine"].get_state().snapshot()  # type: ignore[attr-defined]
    states.clear()
    states.close()


def test_an_empty_key_is_refused() -> None:
    with pytest.raises(ValueError, match="key"):
        RedisAffectiveStateStore(key="", client=object())


def test_persist_state_writes_the_engine_state_under_the_key(redis_url: str) -> None:
    from emotional_memory import EmotionalMemory, InMemoryStore
    from emotional_memory.embedders import HashingEmbedder

    with RedisAffectiveStateStore(redis_url, key="engine", strict=True) as state_store:
        state_store.clear()
        em = EmotionalMemory(InMemoryStore(), HashingEmbedder(), state_store=state_store)
        em.encode("A wonderful surprise party with old friends")
        assert em.persist_state() == em.get_state().snapshot()  # SPEC 11: returns it
        assert state_store.client.exists("engine") == 1
        state_store.clear()


@pytest.mark.parametrize("raw", ["not json", '{"core_affect":', "[1]", "NaN", b"\xff\xfe",
                                 "[" * 10_000 + "]" * 10_000])
def test_a_key_holding_no_snapshot_is_a_value_error_naming_it(
    redis_url: str, raw: str | bytes
) -> None:
    """Another program's value (or a truncated one) under the key: a ValueError naming
    the key, not a bare JSONDecodeError; the value is left as it was."""
    raw_client = redis.Redis.from_url(redis_url)  # bytes replies: no decoding in redis-py
    store = RedisAffectiveStateStore(key="test:no-snapshot", client=raw_client, strict=True)
    raw_client.set(store.key, raw)
    try:
        named = r"'test:no-snapshot' is (not a state snapshot|JSON nested too deeply)"
        with pytest.raises(ValueError, match=named):
            store.load()
        assert raw_client.get(store.key) == (raw.encode() if isinstance(raw, str) else raw)
    finally:
        store.clear()
        store.close()


@pytest.mark.parametrize("url", [None, 6379, b"redis://127.0.0.1:6379/0", ["redis://x"]])
def test_a_url_that_is_no_string_is_a_type_error_naming_it(url: object) -> None:
    """A URL of another type: a TypeError naming ``url`` (was an AttributeError from
    inside redis-py, or a bytes/str TypeError that named nothing)."""
    with pytest.raises(TypeError, match="url must be a str"):
        RedisAffectiveStateStore(url)  # type: ignore[arg-type]


@pytest.mark.parametrize("strict", ["no", "false", 0.0, None])
def test_a_strict_that_is_no_bool_is_a_type_error_naming_it(strict: object) -> None:
    # bool(strict) made "no" and "false" strict (a config value read as text)
    with pytest.raises(TypeError, match="strict must be a bool"):
        RedisAffectiveStateStore("redis://127.0.0.1:1/0", strict=strict)  # type: ignore[arg-type]
    for truthy in (0, 1):  # the original's truthiness, for ints
        store = RedisAffectiveStateStore("redis://127.0.0.1:1/0", strict=truthy)
        assert repr(store).endswith(f"strict={bool(truthy)})")


@pytest.mark.parametrize("strict", [False, True])
def test_a_key_of_another_redis_type_is_named_when_strict_and_read_as_none_leniently(
    redis_url: str, strict: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Another program's list (or hash, set...) under the key: GET answers WRONGTYPE.
    Strict: a ValueError naming the key (it was a bare ResponseError), the list left as
    it was. Lenient (the default): as the original, logged and read as nothing stored
    (the engine starts from the initial state)."""
    from emotional_memory import EmotionalMemory, InMemoryStore
    from emotional_memory.embedders import HashingEmbedder

    raw_client = redis.Redis.from_url(redis_url)
    raw_client.delete("test:a-list")
    raw_client.rpush("test:a-list", "precious", "data")
    store = RedisAffectiveStateStore(redis_url, key="test:a-list", strict=strict)
    try:
        if strict:
            with pytest.raises(ValueError, match=r"'test:a-list' is not a state snapshot"):
                store.load()
            with pytest.raises(ValueError, match=r"'test:a-list' is not a state snapshot"):
                EmotionalMemory(InMemoryStore(), HashingEmbedder(), state_store=store)
        else:
            assert store.load() is None
            assert "WRONGTYPE" in caplog.text
            engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(), state_store=store)
            assert engine.get_state().core_affect.valence == 0.0
        assert raw_client.type("test:a-list") == b"list"
        assert raw_client.lrange("test:a-list", 0, -1) == [b"precious", b"data"]
    finally:
        raw_client.delete("test:a-list")
        raw_client.close()
        store.close()


def test_the_repr_of_a_store_over_a_given_client_names_no_unused_url(redis_url: str) -> None:
    """With ``client=`` the URL is ignored: the repr showed the default
    ``redis://localhost:6379/0`` (or the ignored URL) as if the store used it."""
    client = redis.Redis.from_url(redis_url)
    with RedisAffectiveStateStore(key="given", client=client) as s:
        assert "localhost" not in repr(s) and "url=" not in repr(s)
        assert repr(s) == "RedisAffectiveStateStore(client=Redis, key='given', strict=False)"
    with RedisAffectiveStateStore(redis_url, key="own") as s:
        assert repr(s) == f"RedisAffectiveStateStore(url={redis_url!r}, key='own', strict=False)"


def test_a_lenient_store_that_cannot_save_keeps_the_memories() -> None:
    """README "Memories and state together": without ``strict=True`` a failed save is
    logged and the memory stays; the engine's state moves on, unpersisted."""
    from emotional_memory import EmotionalMemory, InMemoryStore
    from emotional_memory.embedders import HashingEmbedder

    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(),
                             state_store=RedisAffectiveStateStore(url))
    before = engine.get_state().snapshot()
    engine.encode("A wonderful surprise party with old friends", affect=CoreAffect(
        valence=0.9, arousal=0.8))
    assert len(engine) == 1
    assert engine.get_state().snapshot() != before


@pytest.mark.parametrize("strict", [False, True])
def test_a_value_that_is_no_utf8_is_named_by_a_store_built_from_its_url(
    redis_url: str, strict: bool
) -> None:
    """A value cut inside a multi-byte character (or another program's bytes) under the
    key, read by a store built from a URL (its client decodes replies): a ValueError
    naming the key, in either mode, as for any value that is no snapshot. Strict, it
    was redis-py's bare UnicodeDecodeError; lenient, it was logged and read as nothing
    stored, so the engine started from the initial state and its first save
    overwrote the value."""
    from emotional_memory import EmotionalMemory, InMemoryStore
    from emotional_memory.embedders import HashingEmbedder

    raw_client = redis.Redis.from_url(redis_url)
    raw = '{"core_affect": "é'.encode()[:-1]  # truncated inside the é
    raw_client.set("test:not-utf8", raw)
    store = RedisAffectiveStateStore(redis_url, key="test:not-utf8", strict=strict)
    try:
        named = r"'test:not-utf8' is not a state snapshot"
        for read in (store.load, store.load_snapshot):
            with pytest.raises(ValueError, match=named):
                read()
        with pytest.raises(ValueError, match=named):
            EmotionalMemory(InMemoryStore(), HashingEmbedder(), state_store=store)
        assert raw_client.get("test:not-utf8") == raw
        store.save(AffectiveState.initial())  # the client goes on working
        assert store.load() == AffectiveState.initial(store.load().mood.timestamp)
    finally:
        raw_client.delete("test:not-utf8")
        raw_client.close()
        store.close()
