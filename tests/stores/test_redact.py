"""One ``redact()`` for every URL and DSN form, used by every message that shows one."""

from __future__ import annotations

import pytest

from emotional_memory.redact import redact
from emotional_memory.server.stores import StoreURLError, open_store, redact_url
from emotional_memory.stores.postgres import redact_dsn

SECRET = "s3cr3t-Pa55"

FORMS = [
    # URL user-info
    (f"postgresql://alice:{SECRET}@db.example.com:5432/mem", "postgresql://alice:***@"),
    (f"postgres://alice:{SECRET}@[::1]:5432/mem?sslmode=require", "postgres://alice:***@[::1]"),
    (f"redis://:{SECRET}@127.0.0.1:6379/0", "redis://:***@127.0.0.1"),
    (f"rediss://default:{SECRET}@cache:6380", "rediss://default:***@cache"),
    # the password in the query string
    (f"postgresql://alice@db/mem?password={SECRET}", "?password=***"),
    (f"postgresql://alice@db/mem?sslmode=require&password={SECRET}&x=1", "&password=***&x=1"),
    (f"postgresql://db/mem?sslpassword={SECRET}", "?sslpassword=***"),
    (f"qdrant://h:6333/c?api_key={SECRET}", "?api_key=***"),
    (f"https://h/x?token={SECRET}#frag", "?token=***#frag"),
    # libpq keyword/value strings
    (f"host=db user=alice password={SECRET} dbname=mem", "password=*** dbname=mem"),
    (f"host=db password = '{SECRET} with space' dbname=mem", "password = ***"),
    (f"host=db password='it\\'s {SECRET}' port=5432", "password=*** port=5432"),
    (f"PASSWORD={SECRET}", "PASSWORD=***"),
    # the user name holds an unescaped '@' (urlsplit splits user-info at the last '@')
    (f"redis://me@corp:{SECRET}@cache:6379/0", "redis://me@corp:***@cache"),
    # a percent-encoded key name (libpq decodes query keys), or '=' itself encoded
    (f"postgresql://db/mem?pass%77ord={SECRET}", "?pass%77ord=***"),
    (f"postgresql://db/mem?%70assword={SECRET}&x=1", "?%70assword=***&x=1"),
    (f"postgresql://db/mem?ssl%50ASSWORD={SECRET}", "?ssl%50ASSWORD=***"),
    (f"postgresql://db/mem?password%3D{SECRET}", "?password%3D***"),
    # a fragment parameter (OAuth-style) and key names ending in a secret word
    (f"https://h/cb#access_token={SECRET}&x=1", "#access_token=***&x=1"),
    (f"https://h/x?auth_token={SECRET}", "?auth_token=***"),
    (f"https://h/x?a=1&client_secret={SECRET}", "&client_secret=***"),
    # API keys, auth values and signatures in URL queries (an LLM base URL, a signed URL)
    (f"https://llm.example.com/v1?key={SECRET}&alt=json", "?key=***&alt=json"),
    (f"https://h/x?auth={SECRET}", "?auth=***"),
    (f"https://blob.example.com/c/f?sv=2024&sig={SECRET}", "&sig=***"),
    (f"https://h/f?X-Amz-Signature={SECRET}", "?X-Amz-Signature=***"),
    (f"https://h/x?credentials={SECRET}", "?credentials=***"),
    # HTTP credentials in a message
    (f"sent Authorization: Bearer {SECRET}", "Authorization: Bearer ***"),
    (f"header Basic {SECRET}==", "Basic ***"),
    (f"credentials={SECRET} rejected", "credentials=*** rejected"),
    # inside a message
    (f"cannot connect to postgresql://bob:{SECRET}@h/db: refused", "bob:***@h/db: refused"),
    # a slash too many after the scheme (as sqlite:///), in a message too
    (f"cannot connect to redis:///:{SECRET}@cache:6379/0: refused", "redis:///:***@cache"),
    (f"bad address postgresql:///bob:{SECRET}@h/db", "postgresql:///bob:***@h/db"),
]


@pytest.mark.parametrize(("text", "kept"), FORMS)
def test_every_form_is_masked(text: str, kept: str) -> None:
    for fn in (redact, redact_url, redact_dsn):
        out = fn(text)
        assert SECRET not in out and "with space" not in out, (fn.__name__, out)
        assert kept in out, (fn.__name__, out)


@pytest.mark.parametrize("text", [
    "postgresql://alice@db.example.com/mem",
    "sqlite:///relative/memories.db",
    "memory://",
    "host=db user=alice dbname=mem",
    "qdrant://localhost:6333/memories",
    "redis://127.0.0.1:6379/0",
    "redis://me@cache:6379/0",
    "postgresql://alice@db:5432/mem?sslmode=require&passfile=/home/a/.pgpass",
    "https://h/x?tokens=3&secretary=bob#section",
    "host=db passfile=/p dbname=mem",
    "the bearer of bad news; basic authentication needed",
    "RedisAffectiveStateStore(url='redis://h', key='default', strict=True)",
    "https://h/?config=1&design=2",
])
def test_text_without_a_secret_is_unchanged(text: str) -> None:
    assert redact(text) == text


def test_store_url_errors_never_show_the_query_password() -> None:
    url = f"postgresql://alice@127.0.0.1:1/mem?password={SECRET}&connect_timeout=1"
    with pytest.raises(StoreURLError) as info:
        open_store(url)
    assert SECRET not in str(info.value)
    assert "password=***" in str(info.value)


@pytest.mark.parametrize("text", [
    "x" * 60_000,                                   # one long word
    "?" + "a" * 60_000,                             # a long query
    "a://" + "b" * 30_000 + ":" + "c" * 30_000,     # a scheme, no '@'
    "ab://c:d" * 8_000,                             # many schemes, no '@'
], ids=["word", "query", "no-at", "many-schemes"])
def test_long_text_without_secrets_is_left_alone(text: str) -> None:
    # the user-info pattern could start at every letter of a word and rescan it to
    # its end: 60 KB of letters took about 20 s (a 200 KB one, four minutes); now
    # milliseconds. No clock is asserted here (the suite never times itself): this
    # checks the answer on such inputs, and a regression shows as a slow test.
    assert redact(text) == text
