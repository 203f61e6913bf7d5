"""llm_http against a real HTTP server started on 127.0.0.1 (http.server in a thread)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("httpx", reason="the llm extra is not installed")

from emotional_memory.appraisal import LLMAppraisalEngine
from emotional_memory.llm_http import (
    DEFAULT_OPENAI_COMPAT_BASE_URL,
    DEFAULT_OPENAI_COMPAT_MODEL,
    HttpxLLM,
    OpenAICompatibleLLMConfig,
    build_openai_compatible_payload,
    make_httpx_llm,
    make_httpx_llm_from_env,
    probe_openai_compatible_llm,
    project_config_issues,
)
from emotional_memory.query_classifier import LLMQueryClassifier
from support.fake_openai import FakeOpenAI, Reply, completion


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    s = FakeOpenAI()
    yield s
    s.close()


def cfg(server: FakeOpenAI, **kw: Any) -> OpenAICompatibleLLMConfig:
    base = {"api_key": "sk-secret", "base_url": server.base_url, "model": "test-model"}
    base.update({"backoff_seconds": 0.01, "timeout_seconds": 5.0})
    base.update(kw)
    return OpenAICompatibleLLMConfig(**base)


SCHEMA = {"type": "object", "properties": {"x": {"type": "number"}}}


def test_call_posts_chat_completion_and_returns_content(server: FakeOpenAI) -> None:
    server.replies.append(Reply(body=completion('{"x": 1}')))
    with HttpxLLM(cfg(server)) as llm:
        assert llm("hello", SCHEMA) == '{"x": 1}'
    (req,) = server.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["Authorization"] == "Bearer sk-secret"
    assert req["json"]["model"] == "test-model"
    assert req["json"]["messages"] == [{"role": "user", "content": "hello"}]
    assert "response_format" not in req["json"]


def test_json_modes_request_json(server: FakeOpenAI) -> None:
    with make_httpx_llm(cfg(server, output_mode="json_object")) as llm:  # type: ignore[attr-defined]
        llm("p", SCHEMA)
    with make_httpx_llm(cfg(server, output_mode="json_schema")) as llm:  # type: ignore[attr-defined]
        llm("p", SCHEMA)
    assert server.requests[0]["json"]["response_format"] == {"type": "json_object"}
    fmt = server.requests[1]["json"]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"] == SCHEMA


def test_retries_5xx_and_429_then_succeeds(server: FakeOpenAI) -> None:
    server.replies += [
        Reply(status=503, body={"error": "busy"}),
        Reply(status=429, body={"error": "slow down"}, headers={"Retry-After": "0"}),
        Reply(body=completion("fine")),
    ]
    llm = HttpxLLM(cfg(server, max_retries=2))
    assert llm("p", SCHEMA) == "fine"
    assert llm.attempts == 3 == len(server.requests)
    llm.close()


def test_retries_are_bounded(server: FakeOpenAI) -> None:
    server.replies += [Reply(status=500, body={"error": f"boom {i}"}) for i in range(10)]
    llm = HttpxLLM(cfg(server, max_retries=3))
    with pytest.raises(RuntimeError, match=r"after 4 attempt\(s\).*status=500") as info:
        llm("p", SCHEMA)
    assert len(server.requests) == 4
    assert "sk-secret" not in str(info.value)
    llm.close()


def test_client_error_is_not_retried(server: FakeOpenAI) -> None:
    server.replies.append(Reply(status=401, body={"error": "bad key"}))
    llm = HttpxLLM(cfg(server, max_retries=5))
    with pytest.raises(RuntimeError, match="status=401"):
        llm("p", SCHEMA)
    assert len(server.requests) == 1
    llm.close()


def test_timeout_is_applied_and_retried(server: FakeOpenAI) -> None:
    server.replies += [Reply(body=completion("late"), delay=1.5), Reply(body=completion("ok"))]
    llm = HttpxLLM(cfg(server, timeout_seconds=0.3, max_retries=1))
    # "ok" is the second reply: the first attempt was cut by the timeout, not awaited
    assert llm("p", SCHEMA) == "ok"
    assert llm.attempts == 2
    llm.close()


def test_timeout_exhausts_retries(server: FakeOpenAI) -> None:
    server.replies += [Reply(body=completion("late"), delay=1.0) for _ in range(2)]
    llm = HttpxLLM(cfg(server, timeout_seconds=0.2, max_retries=1))
    with pytest.raises(RuntimeError, match=r"transport failed.*Timeout"):
        llm("p", SCHEMA)
    llm.close()


@pytest.mark.parametrize(
    "body",
    ["not json at all", {"choices": []}, completion(None), {"unexpected": 1}],
)
def test_malformed_response_raises(server: FakeOpenAI, body: Any) -> None:
    server.replies.append(Reply(body=body))
    llm = HttpxLLM(cfg(server, max_retries=0))
    with pytest.raises(RuntimeError, match="LLM response"):
        llm("p", SCHEMA)
    llm.close()


def test_connection_refused_is_retried_then_raises() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = OpenAICompatibleLLMConfig(
        api_key="k", base_url=f"http://127.0.0.1:{port}/v1", max_retries=2, backoff_seconds=0
    )
    llm = HttpxLLM(config)
    with pytest.raises(RuntimeError, match="LLM transport failed after 3 attempt"):
        llm("p", SCHEMA)
    assert llm.attempts == 3
    llm.close()
    with pytest.raises(RuntimeError, match="closed"):
        llm("p", SCHEMA)


def test_from_env(server: FakeOpenAI) -> None:
    assert OpenAICompatibleLLMConfig.from_env({}) is None
    assert OpenAICompatibleLLMConfig.from_env({"EMOTIONAL_MEMORY_LLM_API_KEY": "  "}) is None
    default = OpenAICompatibleLLMConfig.from_env({"EMOTIONAL_MEMORY_LLM_API_KEY": "k"})
    assert default is not None
    assert default.base_url == DEFAULT_OPENAI_COMPAT_BASE_URL
    assert default.model == DEFAULT_OPENAI_COMPAT_MODEL
    env = {
        "EMOTIONAL_MEMORY_LLM_API_KEY": "k2",
        "EMOTIONAL_MEMORY_LLM_BASE_URL": server.base_url + "/",
        "EMOTIONAL_MEMORY_LLM_MODEL": "m",
        "EMOTIONAL_MEMORY_LLM_TIMEOUT_SECONDS": "2.5",
        "EMOTIONAL_MEMORY_LLM_OUTPUT_MODE": "JSON_OBJECT",
        "EMOTIONAL_MEMORY_LLM_MAX_RETRIES": "0",
    }
    c = OpenAICompatibleLLMConfig.from_env(env)
    assert c is not None
    assert (c.base_url, c.model, c.timeout_seconds, c.output_mode, c.max_retries) == (
        server.base_url,
        "m",
        2.5,
        "json_object",
        0,
    )
    summary = c.public_summary()
    assert summary["api_key_set"] is True and "k2" not in json.dumps(summary)
    llm = make_httpx_llm_from_env(env)
    assert llm is not None
    assert llm("p", SCHEMA) == '{"ok": true}'
    assert server.requests[-1]["headers"]["Authorization"] == "Bearer k2"
    assert make_httpx_llm_from_env({}) is None
    for key, bad in [
        ("EMOTIONAL_MEMORY_LLM_TIMEOUT_SECONDS", "0"),
        ("EMOTIONAL_MEMORY_LLM_TIMEOUT_SECONDS", "soon"),
        ("EMOTIONAL_MEMORY_LLM_OUTPUT_MODE", "xml"),
        ("EMOTIONAL_MEMORY_LLM_MAX_RETRIES", "-1"),
    ]:
        with pytest.raises(ValueError):
            OpenAICompatibleLLMConfig.from_env({"EMOTIONAL_MEMORY_LLM_API_KEY": "k", key: bad})


def test_from_env_reads_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMOTIONAL_MEMORY_LLM_API_KEY", "env-key")
    monkeypatch.setenv("EMOTIONAL_MEMORY_LLM_MODEL", "env-model")
    c = OpenAICompatibleLLMConfig.from_env()
    assert c is not None and c.api_key == "env-key" and c.model == "env-model"


def test_config_validation_and_helpers() -> None:
    with pytest.raises(ValueError):
        OpenAICompatibleLLMConfig(api_key="k", timeout_seconds=0)
    with pytest.raises(ValueError):
        OpenAICompatibleLLMConfig(api_key="k", max_retries=-1)
    with pytest.raises(ValueError):
        OpenAICompatibleLLMConfig(api_key="k", output_mode="xml")  # type: ignore[arg-type]
    assert project_config_issues(OpenAICompatibleLLMConfig(api_key="k")) == []
    assert project_config_issues(OpenAICompatibleLLMConfig(api_key="k", model="gpt-5.2-mini"))
    payload = build_openai_compatible_payload(
        "hi", SCHEMA, OpenAICompatibleLLMConfig(api_key="k", temperature=0.0)
    )
    assert payload == {
        "model": DEFAULT_OPENAI_COMPAT_MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.0,
    }


def test_api_key_stays_out_of_reprs_and_errors(server: FakeOpenAI) -> None:
    config = cfg(server, max_retries=0)
    assert "sk-secret" not in repr(config) and "sk-secret" not in str(config)
    assert "api_key" not in repr(config) and config.public_summary()["api_key_set"] is True
    server.replies.append(Reply(status=401, body={"error": "bad key"}))
    llm = HttpxLLM(config)
    with pytest.raises(RuntimeError) as info:
        llm("p", SCHEMA)
    assert server.requests[0]["headers"]["Authorization"] == "Bearer sk-secret"
    assert "sk-secret" not in f"{info.value} {info.value!r} {llm!r}"
    llm.close()


def test_probe(server: FakeOpenAI) -> None:
    probe_openai_compatible_llm(cfg(server))
    server.replies.append(Reply(status=404, body={"error": "no such model"}))
    with pytest.raises(RuntimeError, match="404"):
        probe_openai_compatible_llm(cfg(server))


def test_drives_llm_appraisal_engine(server: FakeOpenAI) -> None:
    server.default_content = json.dumps(
        {
            "novelty": 0.8,
            "goal_relevance": -0.6,
            "coping_potential": 0.2,
            "norm_congruence": -0.4,
            "self_relevance": 0.9,
        }
    )
    llm = HttpxLLM(cfg(server, output_mode="json_object"))
    engine = LLMAppraisalEngine(llm)
    vec = engine.appraise("My flight was cancelled at the last minute")
    assert (vec.novelty, vec.goal_relevance, vec.coping_potential) == (0.8, -0.6, 0.2)
    assert (vec.norm_congruence, vec.self_relevance) == (-0.4, 0.9)
    assert "flight was cancelled" in server.requests[-1]["json"]["messages"][0]["content"]
    llm.close()


def test_drives_llm_query_classifier(server: FakeOpenAI) -> None:
    server.default_content = '```json\n{"query_type": "temporal"}\n```'
    llm = HttpxLLM(cfg(server))
    clf = LLMQueryClassifier(llm, fallback_on_error=False)
    assert clf.classify("When did we last meet?") == "temporal"
    llm.close()


@pytest.mark.parametrize("body", [
    "proxy refused header Authorization: Bearer sk-secret",
    {"error": {"message": "Incorrect API key provided: sk-secret"}},
], ids=["text", "json"])
def test_api_key_echoed_by_the_server_is_redacted(server: FakeOpenAI, body: Any) -> None:
    # the error detail quoted the server's body, key and all
    server.replies.append(Reply(status=401, body=body))
    llm = HttpxLLM(cfg(server, max_retries=0))
    with pytest.raises(RuntimeError, match="401") as info:
        llm("p", SCHEMA)
    assert "sk-secret" not in str(info.value)
    server.replies.append(Reply(body={"echo": "sk-secret"}))  # 200, not a completion
    with pytest.raises(RuntimeError, match="choices") as info:
        llm("p", SCHEMA)
    assert "sk-secret" not in str(info.value)
    llm.close()


def test_a_key_cut_by_the_quoted_window_is_not_shown_in_part(server: FakeOpenAI) -> None:
    # masking shortens the text: a key cut at the raw window's end moved into the quote
    # a key of no known shape (redact() masks sk-... tokens even in part)
    echoed = "x" + "hunter2hun " * 100  # the 600th character falls inside a key
    server.replies += [Reply(body=echoed), Reply(body={"echo": echoed})]
    llm = HttpxLLM(cfg(server, api_key="hunter2hun", max_retries=0))
    for match in ("not JSON", "choices"):
        with pytest.raises(RuntimeError, match=match) as info:
            llm("p", SCHEMA)
        assert "hunter" not in str(info.value) and "***" in str(info.value)
    llm.close()


def test_base_url_password_stays_out_of_reprs_and_errors(server: FakeOpenAI) -> None:
    url = server.base_url.replace("http://", "http://user:hunter2@")
    config = cfg(server, base_url=url, max_retries=0)
    server.replies.append(Reply(status=400, body={"error": "nope"}))
    llm = HttpxLLM(config)
    with pytest.raises(RuntimeError, match="400") as info:
        llm("p", SCHEMA)
    shown = f"{info.value} {llm!r} {config!r} {config.public_summary()}"
    assert "hunter2" not in shown and "user:***@" in shown
    assert len(server.requests) == 1
    llm.close()


def test_oversized_response_is_refused(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    from emotional_memory import llm_http

    monkeypatch.setattr(llm_http, "MAX_RESPONSE_BYTES", 1000)
    server.replies.append(Reply(body=completion("x" * 2000)))
    llm = HttpxLLM(cfg(server, max_retries=0))
    with pytest.raises(RuntimeError, match="MAX_RESPONSE_BYTES"):
        llm("p", SCHEMA)
    assert llm("p", SCHEMA) == '{"ok": true}'  # a small answer still goes through
    llm.close()


@pytest.mark.parametrize(("field", "value"), [
    ("timeout_seconds", float("inf")), ("timeout_seconds", float("nan")),
    ("timeout_seconds", True), ("timeout_seconds", "5"),
    ("backoff_seconds", float("inf")), ("backoff_seconds", "1"),
    ("temperature", float("nan")), ("temperature", float("inf")), ("temperature", "0.5"),
    ("max_retries", 10**9), ("max_retries", 2.0),
])
def test_config_rejects_bad_numbers_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises((TypeError, ValueError), match=field):
        OpenAICompatibleLLMConfig(api_key="k", **{field: value})


@pytest.mark.parametrize(("var", "value"), [
    ("EMOTIONAL_MEMORY_LLM_TIMEOUT_SECONDS", "inf"),
    ("EMOTIONAL_MEMORY_LLM_TIMEOUT_SECONDS", "nan"),
    ("EMOTIONAL_MEMORY_LLM_MAX_RETRIES", "1000000000"),
])
def test_from_env_rejects_unbounded_values(var: str, value: str) -> None:
    with pytest.raises(ValueError, match=var):
        OpenAICompatibleLLMConfig.from_env({"EMOTIONAL_MEMORY_LLM_API_KEY": "k", var: value})


@pytest.mark.parametrize("key", ["sk-QZX\ncret", "sk-QZX\r\nX-Injected: 1", "sk-QZXé", "sk QZX"])
def test_api_key_that_cannot_be_a_header_is_refused_without_showing_it(key: str) -> None:
    # '\n' went out as a header (injection), 'é' failed deep in httpx with the key in
    # the UnicodeEncodeError's .object
    with pytest.raises(ValueError, match="api_key") as info:
        OpenAICompatibleLLMConfig(api_key=key)
    assert "QZX" not in f"{info.value} {info.value!r}"
    with pytest.raises(TypeError, match="api_key"):
        OpenAICompatibleLLMConfig(api_key=b"sk")  # type: ignore[arg-type]


def test_dripping_body_is_cut_by_the_attempt_deadline(server: FakeOpenAI) -> None:
    # each byte arrives well inside the 2 s read timeout, but the ~150-byte body would
    # take ~7 s: the 0.5 s deadline cuts the attempt, which is reported by name
    server.replies.append(Reply(body=completion("late"), drip=0.05))
    llm = HttpxLLM(cfg(server, timeout_seconds=2.0, deadline_seconds=0.5, max_retries=0))
    with pytest.raises(RuntimeError, match=r"deadline_seconds=0\.5"):
        llm("p", SCHEMA)
    llm.close()
    # the default deadline derives from the timeout; a dripping body still fits it
    server.replies.append(Reply(body=completion("ok"), drip=0.001))
    with HttpxLLM(cfg(server, timeout_seconds=5.0)) as ok:
        assert ok.config.attempt_deadline_seconds == 15.0
        assert ok("p", SCHEMA) == "ok"


def test_dripping_headers_are_cut_by_the_attempt_deadline(server: FakeOpenAI) -> None:
    # the status line and headers arrive a byte per 50 ms, each well inside the 2 s read
    # timeout: before the response exists only httpx's per-read timeout applied, so the
    # ~80 bytes were read in ~4 s and answered; the 0.5 s deadline now covers them too
    server.replies.append(Reply(body=completion("late"), header_drip=0.05))
    llm = HttpxLLM(cfg(server, timeout_seconds=2.0, deadline_seconds=0.5, max_retries=0))
    with pytest.raises(RuntimeError, match=r"deadline_seconds=0\.5"):
        llm("p", SCHEMA)
    llm.close()
    for _ in range(100):  # the server notices the closed connection at its next byte
        if server.header_drips:
            break
        time.sleep(0.05)
    assert server.header_drips == ["cut"]  # not read to the end, then refused


def test_the_deadline_covers_the_transport_httpx_llm_builds() -> None:
    # the header deadline rests on a network backend wrapped into httpx's pool; if a
    # future httpx moved its pool, this fails instead of the deadline silently going
    config = OpenAICompatibleLLMConfig(api_key="k", base_url="http://127.0.0.1:9/v1")
    llm = HttpxLLM(config)
    try:
        assert llm.deadline_covers_headers
    finally:
        llm.close()
    # a transport the caller passes is used as is (the deadline bounds its body only)
    with HttpxLLM(config, transport=httpx.HTTPTransport()) as own:
        assert not own.deadline_covers_headers


@pytest.mark.parametrize("value", [0, -1.0, float("inf"), float("nan"), True, "5"])
def test_config_rejects_bad_deadline_naming_it(value: Any) -> None:
    with pytest.raises((TypeError, ValueError), match="deadline_seconds"):
        OpenAICompatibleLLMConfig(api_key="k", deadline_seconds=value)


def test_from_env_reads_the_deadline() -> None:
    env = {"EMOTIONAL_MEMORY_LLM_API_KEY": "k", "EMOTIONAL_MEMORY_LLM_DEADLINE_SECONDS": "7"}
    c = OpenAICompatibleLLMConfig.from_env(env)
    assert c is not None and c.attempt_deadline_seconds == 7.0
    with pytest.raises(ValueError, match="EMOTIONAL_MEMORY_LLM_DEADLINE_SECONDS"):
        OpenAICompatibleLLMConfig.from_env({**env, "EMOTIONAL_MEMORY_LLM_DEADLINE_SECONDS": "0"})


def test_a_base_url_password_reaches_no_log_record_and_still_authenticates(
    server: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    # httpx logs every request's URL at INFO ("HTTP Request: POST <url> ..."): a
    # password in base_url's userinfo must not be part of that URL
    import base64

    server.replies.append(Reply(body=completion('{"x": 1}')))
    base = server.base_url.replace("http://", "http://user:pw%2FPWSECRET@")
    caplog.set_level(logging.DEBUG)
    with HttpxLLM(cfg(server, base_url=base, api_key="")) as llm:
        assert llm("hello", SCHEMA) == '{"x": 1}'
    assert "PWSECRET" not in caplog.text
    assert "HTTP Request: POST" in caplog.text  # httpx did log the request
    (req,) = server.requests
    assert req["path"] == "/v1/chat/completions"
    expected = base64.b64encode(b"user:pw/PWSECRET").decode()
    assert req["headers"]["Authorization"] == f"Basic {expected}"


@pytest.mark.parametrize("base_url", ["127.0.0.1:{port}/v1", "ftp://127.0.0.1:{port}/v1"])
def test_a_base_url_without_http_scheme_fails_at_once_not_after_retries(
    server: FakeOpenAI, base_url: str
) -> None:
    # httpx's UnsupportedProtocol is a TransportError: it was retried max_retries times
    # with backoff (up to 100 x 30 s), though no retry can succeed
    port = server.base_url.split(":")[2].split("/")[0]
    llm = HttpxLLM(cfg(server, base_url=base_url.format(port=port), max_retries=5))
    with pytest.raises(RuntimeError, match="UnsupportedProtocol") as info:
        llm("p", SCHEMA)
    assert llm.attempts == 1 and "sk-secret" not in str(info.value)
    llm.close()


@pytest.mark.parametrize("status", [301, 307, 308])
def test_a_redirect_is_a_failed_request_naming_the_status(server: FakeOpenAI, status: int) -> None:
    # httpx does not follow redirects here; a 3xx was read as a completion and reported
    # as "LLM response was not JSON: ''" (the original: "request failed ... status=3xx")
    server.replies.append(Reply(status=status, body="", headers={"Location": "https://x/v1"}))
    llm = HttpxLLM(cfg(server, max_retries=2))
    with pytest.raises(RuntimeError, match=f"LLM request failed.*status={status}"):
        llm("p", SCHEMA)
    assert len(server.requests) == 1
    llm.close()


def test_the_deadline_covers_environment_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    # httpx mounts a transport per proxy found in the environment: each is covered,
    # and the client still routes through the proxy (its own transport kept them)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    llm = HttpxLLM(OpenAICompatibleLLMConfig(api_key="k"))
    try:
        mounts = llm._client._mounts
        assert mounts and all(t is not None for t in mounts.values())
        assert llm.deadline_covers_headers
    finally:
        llm.close()


@pytest.mark.parametrize(("key", "echoed"), [
    ("sk-QZX/base64+tok==", '{"error": "bad key sk-QZX\\/base64+tok=="}'),  # PHP-style "\/"
    ('sk-QZX"quoted', '{"error": "bad key sk-QZX\\"quoted"}'),  # JSON escapes '"'
    ("sk-QZX\\back", '{"error": "bad key sk-QZX\\\\back"}'),  # and '\'
    ("sk-QZX/pct+enc=", '{"error": "bad key sk-QZX%2Fpct%2Benc%3D"}'),  # percent-encoded
], ids=["json-slash", "json-quote", "json-backslash", "percent"])
def test_api_key_echoed_in_an_escaped_form_is_redacted(
    server: FakeOpenAI, key: str, echoed: str
) -> None:
    # the raw key was masked, but not the same key as a JSON or URL encoder writes it
    server.replies.append(Reply(status=401, body=echoed))
    llm = HttpxLLM(cfg(server, api_key=key, max_retries=0))
    with pytest.raises(RuntimeError, match="401") as info:
        llm("p", SCHEMA)
    assert "QZX" not in str(info.value) and "***" in str(info.value)
    llm.close()


def test_api_key_echoed_in_a_non_completion_is_redacted_in_its_quoted_form(
    server: FakeOpenAI,
) -> None:
    # a 200 without choices was quoted as a Python dict, whose repr doubles a '\'
    server.replies.append(Reply(body={"echo": "sk-QZX\\back"}))
    llm = HttpxLLM(cfg(server, api_key="sk-QZX\\back", max_retries=0))
    with pytest.raises(RuntimeError, match="choices") as info:
        llm("p", SCHEMA)
    assert "QZX" not in str(info.value) and "***" in str(info.value)
    llm.close()


def test_timeout_too_long_for_a_socket_is_refused_naming_it(server: FakeOpenAI) -> None:
    # a finite 1e12 s passed the check, then every call failed in socket.settimeout
    # with "OverflowError: timestamp out of range for platform time_t"
    from emotional_memory.llm_http import MAX_OPENAI_COMPAT_TIMEOUT_SECONDS

    with pytest.raises(ValueError, match="timeout_seconds"):
        cfg(server, timeout_seconds=1e12)
    with pytest.raises(ValueError, match="EMOTIONAL_MEMORY_LLM_TIMEOUT_SECONDS"):
        OpenAICompatibleLLMConfig.from_env({
            "EMOTIONAL_MEMORY_LLM_API_KEY": "k", "EMOTIONAL_MEMORY_LLM_TIMEOUT_SECONDS": "1e12",
        })
    with HttpxLLM(cfg(server, timeout_seconds=MAX_OPENAI_COMPAT_TIMEOUT_SECONDS)) as llm:
        assert llm("p", SCHEMA) == '{"ok": true}'  # the longest allowed still works


def test_prompt_with_a_lone_surrogate_is_refused_naming_it(server: FakeOpenAI) -> None:
    # httpx's UnicodeEncodeError named a position in the JSON body, not in the prompt
    llm = HttpxLLM(cfg(server, max_retries=2))
    with pytest.raises(ValueError, match=r"prompt .*lone surrogate.* index 3\b"):
        llm("abc\ud800def", SCHEMA)
    assert server.requests == [] and llm.attempts == 0  # nothing sent, nothing retried
    with pytest.raises(TypeError, match="prompt must be a str"):
        llm(b"abc", SCHEMA)  # type: ignore[arg-type]
    assert llm("abc", SCHEMA) == '{"ok": true}'
    llm.close()


def test_a_body_that_fails_its_content_encoding_is_a_failed_attempt(server: FakeOpenAI) -> None:
    # httpx.DecodingError is no TransportError: it escaped as is (not the RuntimeError
    # documented, no model or URL named) and was never retried
    broken = Reply(body="not gzip at all", headers={"Content-Encoding": "gzip"})
    server.replies += [broken, Reply(body=completion("fine"))]
    with HttpxLLM(cfg(server, max_retries=1)) as llm:
        assert llm("p", SCHEMA) == "fine" and llm.attempts == 2
    server.replies.append(broken)
    with (
        HttpxLLM(cfg(server, max_retries=0)) as llm,
        pytest.raises(RuntimeError, match="failed after 1 attempt") as info,
    ):
        llm("p", SCHEMA)
    assert "DecodingError" in str(info.value) and "test-model" in str(info.value)


@pytest.mark.parametrize(("field", "value", "error"), [
    ("base_url", 5, TypeError),  # AttributeError: 'int' object has no attribute 'rstrip'
    ("base_url", b"http://127.0.0.1/v1", TypeError),  # a bytes-like object is required
    ("model", 5, TypeError),  # accepted, then sent as a JSON number
    ("model", "  ", ValueError),  # accepted, then sent as a blank model name
    ("base_url", " ", ValueError),
])
def test_config_refuses_a_base_url_or_model_that_is_no_text_naming_it(
    field: str, value: Any, error: type[Exception]
) -> None:
    with pytest.raises(error, match=field):
        OpenAICompatibleLLMConfig(api_key="k", **{field: value})


def test_an_invalid_environment_proxy_is_refused_without_its_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # httpx's own error, raised by HttpxLLM(...), quoted the head of the password
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    # a raw '/' in the password: httpx reads "hunter" as the port and says so
    monkeypatch.setenv("HTTPS_PROXY", "http://user:hunter/2@proxy.invalid:3128")
    with pytest.raises(ValueError, match="HTTPS_PROXY") as info:
        HttpxLLM(OpenAICompatibleLLMConfig(api_key="k", base_url="https://127.0.0.1/v1"))
    shown = f"{info.value!r} {info.value.__cause__!r} {info.value.__context__!r}"
    assert "hunter" not in shown and "user:***@" in shown
