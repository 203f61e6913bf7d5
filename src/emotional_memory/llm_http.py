"""An OpenAI-compatible chat-completions client on httpx (extra ``llm``).

:func:`make_httpx_llm` returns a callable ``(prompt, json_schema) -> str``, the
``LLMCallable`` that :class:`~emotional_memory.appraisal.LLMAppraisalEngine` and
:class:`~emotional_memory.query_classifier.LLMQueryClassifier` take. It speaks to any
server with a ``POST {base_url}/chat/completions`` endpoint (OpenAI, vLLM, llama.cpp,
Ollama, LiteLLM, ...), reuses one connection pool, applies a timeout to every request
and retries transport errors (a body its ``Content-Encoding`` cannot decode included)
and 408, 409, 425, 429, 500, 502, 503 and 504 answers a bounded number of times.

Configuration comes from :class:`OpenAICompatibleLLMConfig` or from the environment
(:meth:`OpenAICompatibleLLMConfig.from_env`):

========================================  ==========================================
``EMOTIONAL_MEMORY_LLM_API_KEY``          bearer token (required by ``from_env``)
``EMOTIONAL_MEMORY_LLM_BASE_URL``         default ``https://api.openai.com/v1``
``EMOTIONAL_MEMORY_LLM_MODEL``            default ``gpt-5-mini``
``EMOTIONAL_MEMORY_LLM_TIMEOUT_SECONDS``  per-request timeout, default 30, at most 86400
``EMOTIONAL_MEMORY_LLM_OUTPUT_MODE``      ``plain`` | ``json_object`` | ``json_schema``
``EMOTIONAL_MEMORY_LLM_MAX_RETRIES``      retries after the first try, default 2
``EMOTIONAL_MEMORY_LLM_DEADLINE_SECONDS`` total time of one attempt (connect,
                                          headers, body), default
                                          ``3 * timeout_seconds``
========================================  ==========================================

``httpx`` is imported when a client is built, so importing this module never needs the
extra.
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Literal, TypeAlias

from emotional_memory._extras import install_hint
from emotional_memory._llm import LLMCallable
from emotional_memory._validation import strict_finite
from emotional_memory.redact import MASK, address_secrets, redact, redact_address

__all__ = [
    "DEADLINE_TIMEOUT_FACTOR",
    "DEFAULT_OPENAI_COMPAT_BASE_URL",
    "DEFAULT_OPENAI_COMPAT_MAX_RETRIES",
    "DEFAULT_OPENAI_COMPAT_MODEL",
    "DEFAULT_OPENAI_COMPAT_OUTPUT_MODE",
    "DEFAULT_OPENAI_COMPAT_TIMEOUT_SECONDS",
    "KNOWN_INVALID_PROJECT_MODELS",
    "MAX_OPENAI_COMPAT_RETRIES",
    "MAX_OPENAI_COMPAT_TIMEOUT_SECONDS",
    "MAX_RESPONSE_BYTES",
    "HttpxLLM",
    "LLMOutputMode",
    "OpenAICompatibleLLMConfig",
    "build_openai_compatible_payload",
    "make_httpx_llm",
    "make_httpx_llm_from_env",
    "probe_openai_compatible_llm",
    "project_config_issues",
]

DEFAULT_OPENAI_COMPAT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_OPENAI_COMPAT_MODEL = "gpt-5-mini"
DEFAULT_OPENAI_COMPAT_TIMEOUT_SECONDS = 30.0
DEFAULT_OPENAI_COMPAT_MAX_RETRIES = 2
DEADLINE_TIMEOUT_FACTOR = 3.0
"""Default per-attempt deadline, in multiples of ``timeout_seconds``."""
KNOWN_INVALID_PROJECT_MODELS: frozenset[str] = frozenset({"gpt-5.2-mini"})
"""Model names known not to exist; :func:`project_config_issues` reports them."""

LLMOutputMode: TypeAlias = Literal["plain", "json_object", "json_schema"]
"""How JSON output is requested: not at all, ``json_object`` mode, or strict schema."""
DEFAULT_OPENAI_COMPAT_OUTPUT_MODE: LLMOutputMode = "plain"

_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                    "all_proxy")
_OUTPUT_MODES: tuple[LLMOutputMode, ...] = ("plain", "json_object", "json_schema")
_RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
_MAX_BACKOFF_SECONDS = 30.0
MAX_OPENAI_COMPAT_RETRIES = 100
"""Most retries a configuration may ask for (each wait is capped at 30 s)."""
MAX_OPENAI_COMPAT_TIMEOUT_SECONDS = 86400.0
"""Longest ``timeout_seconds`` (one day): a socket cannot take much longer ones
(about 9.2e9 s, beyond which every call failed with an ``OverflowError``)."""
MAX_RESPONSE_BYTES = 16 * 2**20
"""Largest response body read; a longer one fails the call (16 MiB)."""


def _env_seconds(
    data: Mapping[str, str], name: str, most: float = math.inf
) -> float | None:
    """A finite positive number of seconds, at most ``most``, from ``data[name]``, or
    None when unset."""
    raw = data.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be a number") from exc
    if not (0 < value < math.inf):
        raise ValueError(f"{name} must be finite and > 0")
    if value > most:
        raise ValueError(f"{name} must be at most {most:g}")
    return value


class _DeadlineExceeded(Exception):
    """One attempt ran past ``attempt_deadline_seconds``."""


def _output_mode(raw: str) -> LLMOutputMode:
    value = raw.strip().lower()
    for mode in _OUTPUT_MODES:
        if value == mode:
            return mode
    raise ValueError("EMOTIONAL_MEMORY_LLM_OUTPUT_MODE must be one of: " + ", ".join(_OUTPUT_MODES))


@dataclass(frozen=True, slots=True)
class OpenAICompatibleLLMConfig:
    """Where and how to call an OpenAI-compatible chat-completions endpoint.

    Attributes:
        api_key: Bearer token sent in ``Authorization`` (empty: no header).
        base_url: API root; requests go to ``{base_url}/chat/completions``.
        model: Model name sent in the payload.
        output_mode: ``"plain"`` (prompt only), ``"json_object"`` (``response_format``
            JSON mode) or ``"json_schema"`` (strict schema from the caller).
        timeout_seconds: Timeout of each HTTP request (connect, read, write, pool),
            at most :data:`MAX_OPENAI_COMPAT_TIMEOUT_SECONDS`.
        max_retries: Retries after the first attempt for transport errors (an
            undecodable body included) and 408/409/425/429/5xx answers (0: no retry).
        backoff_seconds: First retry delay; doubled each retry, capped at 30 s. A
            ``Retry-After`` header, when present, is used instead (same cap).
        temperature: Sampling temperature sent in the payload, or None to omit it.
        deadline_seconds: Total time one attempt may take (httpx's timeout is per
            read, so a server dripping bytes could hold a call indefinitely); checked
            as the body arrives. None: ``DEADLINE_TIMEOUT_FACTOR * timeout_seconds``.
    """

    api_key: str = field(repr=False)  # a secret: never in reprs, logs or errors
    base_url: str = DEFAULT_OPENAI_COMPAT_BASE_URL
    model: str = DEFAULT_OPENAI_COMPAT_MODEL
    output_mode: LLMOutputMode = DEFAULT_OPENAI_COMPAT_OUTPUT_MODE
    timeout_seconds: float = DEFAULT_OPENAI_COMPAT_TIMEOUT_SECONDS
    max_retries: int = DEFAULT_OPENAI_COMPAT_MAX_RETRIES
    backoff_seconds: float = 0.5
    temperature: float | None = None
    deadline_seconds: float | None = None

    def __post_init__(self) -> None:
        """Validate the fields.

        Raises:
            TypeError: A field of the wrong type (the key's value is never shown), a
                ``base_url`` or ``model`` that is not a str included.
            ValueError: On a timeout outside ``(0, MAX_OPENAI_COMPAT_TIMEOUT_SECONDS]``
                (or non-finite), retries outside
                ``[0, MAX_OPENAI_COMPAT_RETRIES]``, a negative or non-finite backoff, a
                non-finite temperature, a non-positive or non-finite deadline, an API
                key that cannot be a header, an unknown output mode or an empty or
                blank base URL or model.
        """
        if not isinstance(self.api_key, str):
            raise TypeError(f"api_key must be a str, got {type(self.api_key).__name__}")
        if not all("!" <= ch <= "~" for ch in self.api_key):  # an HTTP header's token
            raise ValueError(
                "api_key must hold visible ASCII characters only (no spaces, line breaks "
                "or other control characters); the value is not shown"
            )
        if not (
            0 < strict_finite("timeout_seconds", self.timeout_seconds)
            <= MAX_OPENAI_COMPAT_TIMEOUT_SECONDS
        ):
            raise ValueError(
                f"timeout_seconds must lie in (0, {MAX_OPENAI_COMPAT_TIMEOUT_SECONDS:g}]"
            )
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int):
            raise ValueError("max_retries must be an int")
        if not 0 <= self.max_retries <= MAX_OPENAI_COMPAT_RETRIES:
            raise ValueError(f"max_retries must lie in [0, {MAX_OPENAI_COMPAT_RETRIES}]")
        if not (strict_finite("backoff_seconds", self.backoff_seconds) >= 0):
            raise ValueError("backoff_seconds must be >= 0")
        if self.temperature is not None:
            strict_finite("temperature", self.temperature)
        if self.deadline_seconds is not None and not (
            strict_finite("deadline_seconds", self.deadline_seconds) > 0
        ):
            raise ValueError("deadline_seconds must be > 0")
        if self.output_mode not in _OUTPUT_MODES:
            raise ValueError(f"output_mode must be one of {_OUTPUT_MODES}")
        for name in ("base_url", "model"):  # the URL's value is never shown
            value = getattr(self, name)
            if not value:
                raise ValueError(f"{name} must not be empty")
            if not isinstance(value, str):
                raise TypeError(f"{name} must be a str, got {type(value).__name__}")
            if not value.strip():
                raise ValueError(f"{name} must not be blank")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OpenAICompatibleLLMConfig | None:
        """Read the configuration from ``EMOTIONAL_MEMORY_LLM_*`` variables.

        Args:
            env: Variables to read (default ``os.environ``).

        Returns:
            The configuration, or None when ``EMOTIONAL_MEMORY_LLM_API_KEY`` is unset
            or blank.

        Raises:
            ValueError: On an invalid timeout, deadline, retry count or output mode.
        """
        data = os.environ if env is None else env
        api_key = data.get("EMOTIONAL_MEMORY_LLM_API_KEY", "").strip()
        if not api_key:
            return None
        base_url = (
            data.get("EMOTIONAL_MEMORY_LLM_BASE_URL", "").strip().rstrip("/")
            or DEFAULT_OPENAI_COMPAT_BASE_URL
        )
        model = data.get("EMOTIONAL_MEMORY_LLM_MODEL", "").strip() or DEFAULT_OPENAI_COMPAT_MODEL
        mode = _output_mode(
            data.get("EMOTIONAL_MEMORY_LLM_OUTPUT_MODE", "") or DEFAULT_OPENAI_COMPAT_OUTPUT_MODE
        )
        timeout = (_env_seconds(data, "EMOTIONAL_MEMORY_LLM_TIMEOUT_SECONDS",
                                MAX_OPENAI_COMPAT_TIMEOUT_SECONDS)
                   or DEFAULT_OPENAI_COMPAT_TIMEOUT_SECONDS)
        deadline = _env_seconds(data, "EMOTIONAL_MEMORY_LLM_DEADLINE_SECONDS")
        retries_raw = data.get("EMOTIONAL_MEMORY_LLM_MAX_RETRIES", "").strip()
        try:
            retries = int(retries_raw) if retries_raw else DEFAULT_OPENAI_COMPAT_MAX_RETRIES
        except ValueError as exc:
            raise ValueError("EMOTIONAL_MEMORY_LLM_MAX_RETRIES must be an integer") from exc
        if not 0 <= retries <= MAX_OPENAI_COMPAT_RETRIES:
            raise ValueError(
                f"EMOTIONAL_MEMORY_LLM_MAX_RETRIES must lie in [0, {MAX_OPENAI_COMPAT_RETRIES}]"
            )
        return cls(
            api_key=api_key,
            base_url=base_url,
            model=model,
            output_mode=mode,
            timeout_seconds=timeout,
            max_retries=retries,
            deadline_seconds=deadline,
        )

    @property
    def attempt_deadline_seconds(self) -> float:
        """The total time one attempt may take (``deadline_seconds`` or its default)."""
        if self.deadline_seconds is not None:
            return float(self.deadline_seconds)
        return DEADLINE_TIMEOUT_FACTOR * float(self.timeout_seconds)

    def __repr__(self) -> str:
        """The dataclass repr without the key, with any password in ``base_url`` masked."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.repr}
        values["base_url"] = redact_address(self.base_url)
        shown = [f"{name}={value!r}" for name, value in values.items()]
        return f"{type(self).__name__}({', '.join(shown)})"

    def public_summary(self) -> dict[str, object]:
        """The configuration without the secret, for logs and diagnostics.

        Returns:
            A dict with ``api_key_set`` (bool) instead of the key, and the other fields.
        """
        return {
            "api_key_set": bool(self.api_key),
            "base_url": redact_address(self.base_url),
            "model": self.model,
            "output_mode": self.output_mode,
            "timeout_seconds": self.timeout_seconds,
            "max_retries": self.max_retries,
            "deadline_seconds": self.attempt_deadline_seconds,
        }


def project_config_issues(config: OpenAICompatibleLLMConfig) -> list[str]:
    """Problems with a configuration that the server would only report at call time.

    Args:
        config: The configuration to check.

    Returns:
        Human-readable issues; empty when none is known.
    """
    issues: list[str] = []
    if config.model in KNOWN_INVALID_PROJECT_MODELS:
        issues.append(
            f"model {config.model!r} does not exist; use {DEFAULT_OPENAI_COMPAT_MODEL!r} "
            "or another model your provider serves"
        )
    return issues


def build_openai_compatible_payload(
    prompt: str,
    json_schema: dict[str, Any],
    config: OpenAICompatibleLLMConfig,
) -> dict[str, Any]:
    """The JSON body of one chat-completions request.

    Args:
        prompt: The user message.
        json_schema: Schema the answer should follow; sent only in ``json_schema`` mode
            (the prompts of this library already describe the expected JSON).
        config: Model, output mode and temperature.

    Returns:
        A dict with ``model``, ``messages`` and, depending on the mode,
        ``response_format`` and ``temperature``.
    """
    payload: dict[str, Any] = {
        "model": config.model,
        "messages": [{"role": "user", "content": prompt}],
    }
    if config.output_mode == "json_object":
        payload["response_format"] = {"type": "json_object"}
    elif config.output_mode == "json_schema":
        payload["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": json_schema, "strict": True},
        }
    if config.temperature is not None:
        payload["temperature"] = config.temperature
    return payload


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _key_forms(key: str) -> tuple[str, ...]:
    """``key`` as a server may echo it: raw, JSON-escaped (also with ``\\/``), as
    Python's ``repr`` quotes it, and percent-encoded; longest first, no empty one."""
    if not key:
        return ()
    in_json = json.dumps(key)[1:-1]
    forms = {
        key, in_json, in_json.replace("/", "\\/"), repr(key)[1:-1],
        urllib.parse.quote(key, safe=""), urllib.parse.quote_plus(key, safe=""),
    }
    return tuple(sorted(forms, key=len, reverse=True))


def _check_prompt(prompt: object) -> str:
    """``prompt`` if it is text UTF-8 can encode; else a TypeError or a ValueError
    naming it (httpx's own error names a position in the JSON body instead)."""
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"prompt is not valid Unicode: a lone surrogate at index {exc.start}"
        ) from None
    return prompt


def _check_base_url(httpx: Any, base_url: str) -> tuple[str, Any]:
    """The chat-completions URL without user info, and the Basic auth that user info
    asked for (None without it); httpx logs each request's URL at INFO, so a password
    must not be part of it.

    Refuses a base URL httpx cannot parse; its own words may quote a piece of the
    password (a raw '/' in it makes the rest of the password read as the port). A
    stand-in module with only the original's surface (``Client``, ``HTTPError``) gets
    the URL as given."""
    text = f"{base_url.rstrip('/')}/chat/completions"
    url_type, invalid = getattr(httpx, "URL", None), getattr(httpx, "InvalidURL", None)
    if url_type is None or invalid is None:
        return text, None
    try:
        url = url_type(text)
    except invalid:
        pass
    else:
        if not url.userinfo:
            return text, None
        # what httpx would do with user info in the URL: Basic auth from it
        bare = str(url.copy_with(username=None, password=None))
        return bare, httpx.BasicAuth(url.username, url.password)
    raise ValueError(  # outside the except: no chained httpx error quoting the URL
        f"base_url {redact_address(base_url)!r} is not a valid URL (percent-encode any "
        "'/', '?', '#', '@' or ':' in a user name or password)"
    )


class HttpxLLM:
    """The ``LLMCallable`` over one ``httpx.Client`` (thread-safe, keep-alive pool).

    Call it as ``llm(prompt, json_schema)``; it returns ``choices[0].message.content``.
    ``close()`` releases the pool (``LLMAppraisalEngine.close()`` calls it).
    """

    __slots__ = (
        "_client", "_closed", "_config", "_key_forms", "_lock", "_url", "attempts",
        "deadline_covers_headers",
    )

    def __init__(self, config: OpenAICompatibleLLMConfig, *, transport: Any | None = None) -> None:
        """Create the client.

        Args:
            config: Endpoint, model, timeout and retry settings.
            transport: Optional ``httpx.BaseTransport`` (proxies, unix sockets, ...),
                used as is: the attempt deadline then bounds the body only (the
                transport httpx_llm builds itself bounds the headers too).

        Raises:
            ImportError: When httpx is not installed.
            ValueError: ``config.base_url`` is no URL httpx can send to, or a proxy
                variable of the environment holds an invalid URL (the message shows
                them with any password masked).
        """
        try:
            import httpx
        except ImportError as exc:
            raise ImportError(
                f"the OpenAI-compatible client needs httpx: {install_hint('llm')}"
            ) from exc
        self._url, auth = _check_base_url(httpx, config.base_url)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        self._config = config
        self._key_forms = _key_forms(config.api_key)
        # A float timeout is httpx's Timeout(x) (connect, read, write, pool alike). The
        # default transport's socket operations also end by the attempt's deadline.
        from emotional_memory._http_deadline import wrap_client

        options: dict[str, Any] = {} if transport is None else {"transport": transport}
        if auth is not None:
            options["auth"] = auth
        failed = ""
        try:
            self._client = httpx.Client(headers=headers, timeout=config.timeout_seconds,
                                        **options)
        except (ValueError, getattr(httpx, "InvalidURL", ValueError)) as exc:
            failed = type(exc).__name__
        if failed:  # outside the except: no chained httpx error in __context__
            # httpx reads the environment's proxies here; its words may quote a piece
            # of a proxy password (a raw '/' makes the rest read as the port)
            proxies = {name: redact_address(value) for name in _PROXY_VARIABLES
                       if (value := os.environ.get(name))}
            raise ValueError(
                f"the HTTP client could not be built ({failed}); check the proxy "
                f"variables {proxies} (percent-encode any '/', '?', '#', '@' or ':' in "
                "a user name or password)"
            )
        self._lock = threading.Lock()
        self._closed = False
        self.attempts = 0
        """HTTP requests sent so far (retries included)."""
        self.deadline_covers_headers = transport is None and wrap_client(self._client)
        """Whether the attempt deadline bounds the whole exchange (connect, headers,
        body), not only the body: true on the transports httpx builds for it."""

    @property
    def config(self) -> OpenAICompatibleLLMConfig:
        """The configuration this client uses."""
        return self._config

    def _context(self) -> str:
        return f"model={self._config.model!r}, base_url={redact_address(self._config.base_url)!r}"

    def _scrub(self, text: str) -> str:
        """``text`` (a server's or transport's words) without the key (in any form
        :func:`_key_forms` knows) or URL passwords."""
        for form in self._key_forms:
            text = text.replace(form, MASK)
        return redact(text, address_secrets(self._config.base_url))

    def __call__(self, prompt: str, json_schema: dict[str, Any]) -> str:
        """Send ``prompt`` and return the model's text.

        Args:
            prompt: The user message.
            json_schema: The JSON schema of the expected answer.

        Returns:
            ``choices[0].message.content`` of the response.

        Raises:
            TypeError: ``prompt`` is not a str (nothing is sent).
            ValueError: ``prompt`` holds a lone surrogate, which UTF-8 cannot encode
                (nothing is sent).
            RuntimeError: When every attempt failed (transport error, a body its
                ``Content-Encoding`` cannot decode, an attempt past
                ``config.attempt_deadline_seconds``, or a retryable status), on a
                non-retryable HTTP error status, or when the response is not a chat
                completion with string content, or its body exceeds
                :data:`MAX_RESPONSE_BYTES`. The key and any URL password are never in
                the message (masked also where the server echoes them).
        """
        import httpx

        if self._closed:
            raise RuntimeError("the LLM client is closed")
        _check_prompt(prompt)
        config = self._config
        url = self._url
        payload = build_openai_compatible_payload(prompt, json_schema, config)
        delay = config.backoff_seconds
        last_error = ""
        transport_failed = False
        transport_error = getattr(httpx, "TransportError", httpx.HTTPError)
        # a body its Content-Encoding cannot decode: corrupted on the way, as a reset
        failed_in_transit = (transport_error, getattr(httpx, "DecodingError", transport_error))
        # a URL whose scheme httpx cannot send to: no retry can succeed
        unsendable = getattr(httpx, "UnsupportedProtocol", ())
        for attempt in range(config.max_retries + 1):
            with self._lock:
                self.attempts += 1
            wait: float | None = None
            deadline = time.monotonic() + config.attempt_deadline_seconds
            try:
                response, body = self._send(url, payload, deadline)
            except unsendable as exc:
                raise RuntimeError(
                    f"LLM transport failed ({self._context()}): "
                    + self._scrub(f"{type(exc).__name__}: {exc}")
                ) from None
            except failed_in_transit as exc:  # connect/read timeouts, resets, ...
                last_error = self._scrub(f"{type(exc).__name__}: {exc}")
                transport_failed = True
            except _DeadlineExceeded:
                last_error = (
                    f"attempt exceeded deadline_seconds={config.attempt_deadline_seconds:g}"
                )
                transport_failed = True
            else:
                transport_failed = False
                if response.status_code < 300:  # a 3xx (not followed) is a failure
                    return self._content(body)
                text = body.decode("utf-8", "replace")
                detail = self._scrub(text.strip().replace("\n", " "))[:300]
                last_error = f"status={response.status_code}: {detail}"
                if response.status_code not in _RETRY_STATUS:
                    raise RuntimeError(f"LLM request failed ({self._context()}, {last_error})")
                wait = _retry_after(response.headers.get("Retry-After"))
            if attempt < config.max_retries:
                time.sleep(min(_MAX_BACKOFF_SECONDS, delay if wait is None else wait))
                delay *= 2
        what = "transport" if transport_failed else "request"
        raise RuntimeError(
            f"LLM {what} failed after {config.max_retries + 1} attempt(s) "
            f"({self._context()}): {last_error}"
        )

    def _send(self, url: str, payload: dict[str, Any], deadline: float) -> tuple[Any, bytes]:
        """POST ``payload``; the response and its body, read by ``deadline`` (monotonic)."""
        from emotional_memory._http_deadline import DeadlineExceeded, deadline_at

        if not hasattr(self._client, "stream"):  # a client with only the original's post()
            response = self._client.post(url, json=payload)
            try:
                body = json.dumps(response.json()) if response.status_code < 400 else None
            except ValueError:
                body = None
            return response, (response.text if body is None else body).encode("utf-8")
        try:
            with deadline_at(deadline), self._client.stream("POST", url, json=payload) as response:
                return response, self._read_capped(response, deadline)
        except DeadlineExceeded:
            raise _DeadlineExceeded from None

    def _read_capped(self, response: Any, deadline: float = math.inf) -> bytes:
        """The body of a streamed response, refusing one over :data:`MAX_RESPONSE_BYTES`
        or still arriving after ``deadline`` (``time.monotonic()``)."""
        chunks: list[bytes] = []
        total = 0
        for chunk in response.iter_bytes():
            if time.monotonic() > deadline:
                raise _DeadlineExceeded
            total += len(chunk)
            if total > MAX_RESPONSE_BYTES:
                raise RuntimeError(
                    f"LLM response exceeds MAX_RESPONSE_BYTES = {MAX_RESPONSE_BYTES} "
                    f"({self._context()}, status={response.status_code})"
                )
            chunks.append(chunk)
        return b"".join(chunks)

    def _content(self, body: bytes) -> str:
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as exc:
            # scrubbed before the cut: a key split by the cut would show its start
            text = self._scrub(body.decode("utf-8", "replace"))[:300]
            raise RuntimeError(
                f"LLM response was not JSON ({self._context()}): {text!r}"
            ) from None if isinstance(exc, RecursionError) else exc
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise RuntimeError(
                f"LLM response did not contain choices[0].message.content ({self._context()}): "
                f"{self._scrub(str(data))[:300]}"
            ) from exc
        if not isinstance(content, str):
            raise RuntimeError(
                f"LLM response content was not a string ({self._context()}, "
                f"type={type(content).__name__})"
            )
        return content

    def close(self) -> None:
        """Close the connection pool (idempotent)."""
        self._closed = True
        self._client.close()

    def __enter__(self) -> HttpxLLM:
        """Context-manager entry: the client itself."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Context-manager exit: :meth:`close`."""
        self.close()

    def __repr__(self) -> str:
        return f"HttpxLLM({self._context()})"


_HttpxLLM = HttpxLLM  # the original library's (private) name


def make_httpx_llm(config: OpenAICompatibleLLMConfig) -> LLMCallable:
    """An ``LLMCallable`` for ``config`` with a shared connection pool.

    Args:
        config: Endpoint, model, timeout and retry settings.

    Returns:
        An :class:`HttpxLLM` (callable, with ``close()``).

    Raises:
        ImportError: When httpx is not installed.
    """
    return HttpxLLM(config)


def make_httpx_llm_from_env(env: Mapping[str, str] | None = None) -> LLMCallable | None:
    """An ``LLMCallable`` configured from ``EMOTIONAL_MEMORY_LLM_*`` variables.

    Args:
        env: Variables to read (default ``os.environ``).

    Returns:
        The client, or None when no API key is configured.
    """
    config = OpenAICompatibleLLMConfig.from_env(env)
    return None if config is None else make_httpx_llm(config)


def probe_openai_compatible_llm(config: OpenAICompatibleLLMConfig) -> None:
    """Send one tiny request to check key, model and endpoint before a long run.

    Args:
        config: The configuration to check.

    Raises:
        RuntimeError: When the request fails (the message names model and URL, never
            the key).
    """
    with HttpxLLM(config) as llm:
        llm("Return only a JSON object: {}", {"type": "object", "properties": {}})
