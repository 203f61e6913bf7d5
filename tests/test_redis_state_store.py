"""RedisAffectiveStateStore against a real redis-server started on 127.0.0.1."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

redis = pytest.importorskip("redis", reason="the redis extra is not installed")

from emotional_memory.affect import CoreAffect  # noqa: E402
from emotional_memory.state import AffectiveState  # noqa: E402
from emotional_memory.stores.redis.state import RedisAffectiveStateStore  # noqa: E402

REDIS_SERVER = shutil.which("redis-server")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway redis-server on a free local port, no persistence; stopped at the end."""
    if REDIS_SERVER is None:
        pytest.skip("redis-server binary not found (apt-get install redis-server)")
    workdir = tmp_path_factory.mktemp("redis")
    port = _free_port()
    proc = subprocess.Popen(
        [
            REDIS_SERVER,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        deadline = time.monotonic() + 20.0
        while True:
            try:
                if client.ping():
                    break
            except redis.exceptions.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        client.close()
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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


def test_empty_key_loads_none(store: RedisAffectiveStateStore) -> None:
    assert store.load() is None


def test_round_trip_keeps_state_and_history(store: RedisAffectiveStateStore) -> None:
    state = _moved_state()
    store.save(state)
    loaded = store.load()
    assert isinstance(loaded, AffectiveState)
    assert loaded.snapshot() == state.snapshot()
    assert loaded.history == state.history
    assert loaded.momentum == state.momentum


def test_value_is_json_in_redis_under_the_key(store: RedisAffectiveStateStore) -> None:
    store.save(_moved_state())
    raw = store.client.get(store.key)
    assert isinstance(raw, str) and raw.startswith("{")
    assert store.client.exists(store.key) == 1


def test_snapshot_dict_is_accepted(store: RedisAffectiveStateStore) -> None:
    state = _moved_state()
    store.save(state.snapshot())
    loaded = store.load()
    assert loaded is not None and loaded.snapshot() == state.snapshot()
    assert store.load_snapshot() == state.snapshot()
    store.clear()
    assert store.load_snapshot() is None


def test_save_replaces_and_clear_deletes(store: RedisAffectiveStateStore) -> None:
    store.save(AffectiveState.initial(datetime(2026, 1, 1, tzinfo=UTC)))
    moved = _moved_state()
    store.save(moved)
    loaded = store.load()
    assert loaded is not None
    assert loaded.core_affect == moved.core_affect
    store.clear()
    assert store.load() is None
    assert store.client.exists(store.key) == 0


def test_keys_are_independent_and_shared_across_clients(redis_url: str) -> None:
    a = RedisAffectiveStateStore(redis_url, key="agent:a", strict=True)
    b = RedisAffectiveStateStore(redis_url, key="agent:b", strict=True)
    a2 = RedisAffectiveStateStore(redis_url, key="agent:a", strict=True)
    try:
        a.clear()
        b.clear()
        a.save(_moved_state())
        assert b.load() is None
        loaded = a2.load()  # another client (another process in production) sees it
        assert loaded is not None and loaded.snapshot() == _moved_state().snapshot()
    finally:
        for s in (a, b):
            s.clear()
        for s in (a, b, a2):
            s.close()


def test_bytes_client_is_accepted(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)  # decode_responses=False: bytes replies
    with RedisAffectiveStateStore(key="bytes", client=client, strict=True) as s:
        s.save(_moved_state())
        loaded = s.load()
        assert loaded is not None and loaded.snapshot() == _moved_state().snapshot()
        s.clear()


def test_bad_input_raises(store: RedisAffectiveStateStore) -> None:
    with pytest.raises(TypeError):
        store.save([1, 2, 3])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RedisAffectiveStateStore(key="", client=object())


def test_unreachable_server_fails_open_unless_strict() -> None:
    url = f"redis://127.0.0.1:{_free_port()}/0"  # nothing listens there
    lenient = RedisAffectiveStateStore(url)
    lenient.save(_moved_state())  # logged, not raised
    assert lenient.load() is None
    lenient.clear()
    strict = RedisAffectiveStateStore(url, strict=True)
    with pytest.raises(redis.exceptions.ConnectionError):
        strict.load()
    assert "strict=True" in repr(strict)


def test_engine_persists_and_restores_through_redis(redis_url: str) -> None:
    from emotional_memory import EmotionalMemory, InMemoryStore
    from emotional_memory.embedders import HashingEmbedder

    state_store = RedisAffectiveStateStore(redis_url, key="engine", strict=True)
    state_store.clear()
    try:
        em = EmotionalMemory(InMemoryStore(), HashingEmbedder(), state_store=state_store)
        em.encode("A wonderful surprise party with old friends")
        em.encode("Lost my keys and missed the train")
        assert em.persist_state() == em.get_state().snapshot()  # SPEC 11: returns it
        assert state_store.client.exists("engine") == 1
        # A second engine (another worker) starts from the persisted mood.
        em2 = EmotionalMemory(InMemoryStore(), HashingEmbedder(), state_store=state_store)
        assert em2.get_state().snapshot() == em.get_state().snapshot()
    finally:
        state_store.clear()
        state_store.close()


def test_scoped_views_keep_one_state_each_in_redis(redis_url: str) -> None:
    from emotional_memory import CoreAffect, EmotionalMemory, InMemoryStore
    from emotional_memory.embedders import HashingEmbedder
    from emotional_memory.stores._shared.state import scoped_key

    state_store = RedisAffectiveStateStore(redis_url, key="team", strict=True)
    keys = ["team", scoped_key("team", ("alice",)), scoped_key("team", ("alice", "s1"))]
    state_store.client.delete(*keys)
    try:
        em = EmotionalMemory(InMemoryStore(), HashingEmbedder(), state_store=state_store)
        alice = em.scoped("alice")
        alice.set_affect(CoreAffect(valence=-0.8, arousal=0.9))
        alice.scoped("s1").set_affect(CoreAffect(valence=0.6, arousal=0.1))
        assert state_store.client.exists(*keys[1:]) == 2
        assert state_store.client.exists("team") == 0  # the root's state untouched
        # another worker's engine restores each scope's own state
        em2 = EmotionalMemory(InMemoryStore(), HashingEmbedder(), state_store=state_store)
        assert em2.scoped("alice").get_state().snapshot() == alice.get_state().snapshot()
        assert em2.scoped("alice", "s1").get_state().core_affect.valence == 0.6
        assert em2.get_state().core_affect.valence == 0.0
    finally:
        state_store.client.delete(*keys)
        state_store.close()


def test_readme_redis_example_runs(redis_url: str) -> None:
    from readme_blocks import integration_examples

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
