"""Secrets of one address (DSN, store URL, LLM base URL) never reach a repr or an error:
a password holding a raw '/', '?' or space, or one a driver quotes back when it
refuses the address (libpq's ``invalid percent-encoded token: "pw%zz"``)."""

from __future__ import annotations

import traceback

import pytest

from emotional_memory.redact import address_secrets, redact, redact_address

SECRET = "Zq7Secret"


def _everything(exc: BaseException) -> str:
    """The error's traceback text and every chained exception's message, suppressed
    context included."""
    seen = "".join(traceback.format_exception(exc))
    link: BaseException | None = exc
    while link is not None:
        seen += repr(link)
        link = link.__cause__ or link.__context__
    return seen


@pytest.mark.parametrize(("address", "shown"), [
    (f"postgresql://u:{SECRET}/x@db:5432/mem", "postgresql://u:***@db:5432/mem"),
    (f"postgresql://u:{SECRET} x@db/mem", "postgresql://u:***@db/mem"),
    (f"postgresql://u:{SECRET}?x@db/mem", "postgresql://u:***@db/mem"),
    (f"redis://:{SECRET}/x@cache:6379/0", "redis://:***@cache:6379/0"),
    (f"postgresql://u@db/mem?password={SECRET} x&a=1", "postgresql://u@db/mem?password=***&a=1"),
    ("postgresql://u:pw@db/mem?application_name=a@b", "postgresql://u:***@db/mem?application_name=a@b"),
    # both a '/' and a '?' (or '#') in the password: masked up to the last '@'
    (f"postgresql://u:{SECRET}/x?y@db:5432/mem", "postgresql://u:***@db:5432/mem"),
    (f"postgresql://u:{SECRET}?x/y@db/mem", "postgresql://u:***@db/mem"),
    (f"postgresql://u:{SECRET}#x/y@db/mem", "postgresql://u:***@db/mem"),
    # one slash too many (as sqlite:///): the user-info lands in the path, and the
    # driver reads the password as part of a database name or number
    (f"postgresql:///u:{SECRET}@db/mem", "postgresql:///u:***@db/mem"),
    (f"redis:///:{SECRET}@cache:6379/0", "redis:///:***@cache:6379/0"),
    (f"rediss:////default:{SECRET}/x@cache", "rediss:////default:***@cache"),
    # a slash too few (or none): the scheme's ':' then the user-info
    (f"https:/u:{SECRET}@llm.example/v1", "https:/u:***@llm.example/v1"),
    (f"https:u:{SECRET}@llm.example/v1", "https:u:***@llm.example/v1"),
])
def test_a_lone_address_is_masked_whole(address: str, shown: str) -> None:
    assert redact_address(address) == shown


@pytest.mark.parametrize("url", [
    f"redis:///:{SECRET}@127.0.0.1:1",
    f"rediss:///default:{SECRET}@127.0.0.1:1/0",
    f"postgresql:///u:{SECRET}@127.0.0.1:1/mem",
])
def test_one_slash_too_many_quotes_no_password(url: str) -> None:
    """``redis:///:pw@host`` (a third slash, as sqlite:///) was quoted whole."""
    from emotional_memory.stores._shared.urls import StoreURLError
    from emotional_memory.stores.registry import open_state_store, open_store

    if url.startswith("postgresql"):
        pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    opener = open_store if url.startswith("postgresql") else open_state_store
    with pytest.raises(StoreURLError) as info:
        opener(url)
    assert SECRET not in _everything(info.value)


def test_address_secrets_mask_the_forms_a_driver_quotes() -> None:
    dsn = f"postgresql://u:{SECRET}%zz@db/mem?sslpassword={SECRET}%2Fa"
    message = f'invalid percent-encoded token: "{SECRET}%zz"; then {SECRET}/a'
    out = redact(message, address_secrets(dsn))
    assert SECRET not in out
    assert "invalid percent-encoded token" in out
    assert address_secrets("postgresql://u@db/mem") == ()
    assert address_secrets(f"postgresql://u:{SECRET}/x?y@db/mem") == (
        f"{SECRET}/x?y", "x?y@", "y@")  # and the tails a driver may quote


@pytest.mark.parametrize("dsn", [
    f"postgresql://u:{SECRET}%zz@127.0.0.1:1/mem",
    f"postgresql://u:{SECRET}%00@127.0.0.1:1/mem",
    f"postgresql://u@127.0.0.1:1/mem?password={SECRET}%zz",
    f"postgresql://u:{SECRET} x@127.0.0.1:1/mem",
    f"postgresql://u:{SECRET}/x@127.0.0.1:1/mem",
    f"postgresql://u:{SECRET}@[::1:1/mem",
    f"postgresql://u:a/b?{SECRET}@127.0.0.1:1/mem",  # libpq quotes the part after '?'
    f"postgresql://u:a?b/{SECRET}@127.0.0.1:1/mem",
])
def test_postgres_errors_never_quote_the_password(dsn: str) -> None:
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    from emotional_memory.stores.postgres import PostgresStore, PostgresStoreError
    from emotional_memory.stores.postgres.state import PostgresAffectiveStateStore

    for build in (PostgresStore, PostgresAffectiveStateStore):
        with pytest.raises(PostgresStoreError) as info:
            build(dsn, connect_timeout=1)
        assert SECRET not in _everything(info.value), build.__name__
        assert "127.0.0.1:1/mem" in str(info.value) or "[::1:1" in str(info.value)


@pytest.mark.parametrize("url", [
    f"redis://:{SECRET}@127.0.0.1:1/0",
    f"rediss://user:{SECRET}@127.0.0.1:1/0",
    f"redis://127.0.0.1:1/0?password={SECRET}",
])
def test_the_redis_state_store_repr_masks_the_password(url: str) -> None:
    pytest.importorskip("redis", reason="the redis extra is not installed")
    from emotional_memory.stores.redis.state import RedisAffectiveStateStore

    store = RedisAffectiveStateStore(url)
    assert SECRET not in repr(store)
    assert "127.0.0.1:1/0" in repr(store)


def test_a_malformed_redis_url_error_quotes_no_piece_of_the_password() -> None:
    pytest.importorskip("redis", reason="the redis extra is not installed")
    from emotional_memory.server.stores import open_store
    from emotional_memory.stores.redis.state import RedisAffectiveStateStore

    url = f"redis://:{SECRET[:4]}/{SECRET[4:]}@127.0.0.1:1/0"
    with pytest.raises(ValueError, match="malformed Redis URL") as info:
        RedisAffectiveStateStore(url)
    assert SECRET[:4] not in _everything(info.value)
    with pytest.raises(ValueError) as info:
        open_store("memory://", url)
    assert SECRET[:4] not in _everything(info.value)


def test_the_qdrant_store_repr_masks_the_url_password(monkeypatch: pytest.MonkeyPatch) -> None:
    qdrant_client = pytest.importorskip("qdrant_client", reason="the qdrant extra is not installed")
    from emotional_memory.stores.vectordb.qdrant import QdrantStore

    real = qdrant_client.QdrantClient
    monkeypatch.setattr(qdrant_client, "QdrantClient", lambda **kw: real(":memory:"))
    store = QdrantStore(url=f"https://u:{SECRET}@q.example:6333", api_key=SECRET)
    try:
        assert SECRET not in repr(store)
        assert "q.example:6333" in repr(store)
    finally:
        store.close()


def test_an_llm_base_url_httpx_cannot_parse_quotes_no_piece_of_the_password() -> None:
    pytest.importorskip("httpx", reason="the llm extra (httpx) is not installed")
    from emotional_memory.llm_http import HttpxLLM, OpenAICompatibleLLMConfig

    # a raw '/' in the password: httpx reads what precedes it as the port
    config = OpenAICompatibleLLMConfig(
        api_key="k", base_url=f"https://u:{SECRET[:4]}/{SECRET[4:]}@llm.example/v1"
    )
    assert SECRET[:4] not in repr(config) and SECRET[:4] not in str(config.public_summary())
    with pytest.raises(ValueError, match="base_url") as info:
        HttpxLLM(config)
    assert SECRET[:4] not in _everything(info.value)
    assert "llm.example/v1" in str(info.value)


@pytest.mark.parametrize("base_url", [
    f"https:/u:{SECRET}@llm.example/v1",
    f"https:u:{SECRET}@llm.example/v1",
])
def test_an_llm_base_url_with_a_slash_too_few_shows_no_password(base_url: str) -> None:
    """``https:/u:pw@host`` (a slash lost in an environment variable) was shown whole."""
    pytest.importorskip("httpx", reason="the llm extra (httpx) is not installed")
    from emotional_memory.llm_http import HttpxLLM, OpenAICompatibleLLMConfig

    config = OpenAICompatibleLLMConfig(api_key="k", base_url=base_url)
    assert SECRET not in repr(config) and SECRET not in str(config.public_summary())
    try:
        client = HttpxLLM(config)
    except ValueError as exc:  # refused as no URL: its message shows none of it either
        assert SECRET not in _everything(exc)
    else:
        assert SECRET not in repr(client)
        client.close()
