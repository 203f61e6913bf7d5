"""The ASGI app: REST under ``/v1``, MCP at ``/mcp``, behind one bearer-key gate.

:func:`build_app` puts together the FastAPI routes of
:mod:`emotional_memory.server.rest`, the MCP streamable-HTTP endpoint of
:mod:`emotional_memory.server.mcp_tools` (stateless: every POST is authenticated
on its own), ``GET /healthz`` (liveness), ``GET /readyz`` (readiness: the store
answers a read) and ``/openapi.json``, behind :class:`Gate`, an ASGI
middleware that authenticates every other request and bounds request bodies.

Errors are JSON ``{"detail": ...}``: 400 for malformed JSON, 401 without a known
key, 404 / 405 for an unknown path / method, 413 for a body over the limit, 415 for
a JSON-body route's request without a JSON ``Content-Type``, 421 / 403 for a
``Host`` / ``Origin`` not allowed, 429 for a key past its requests in flight, 422
naming the invalid field, 503 when a database statement ran past the statement
timeout, no connection came free or the database cannot be reached, 500 with a
generic message (the traceback goes to the server's log
only). Keys never appear in responses or logs.
"""

from __future__ import annotations

import contextlib
import email.message
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from emotional_memory.interfaces import StoredStateError, StoreTimeoutError
from emotional_memory.server.keys import PRINCIPAL_KEY, KeyRing, Principal
from emotional_memory.server.limits import LimitExceeded
from emotional_memory.server.mcp_tools import build_mcp, http_principal
from emotional_memory.server.openapi import install_openapi
from emotional_memory.server.rest import router
from emotional_memory.server.service import (
    BUSY_DETAIL,
    FieldError,
    MemoryService,
    database_busy,
    timeout_detail,
)

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_IN_FLIGHT",
    "LOOPBACK_HOSTS",
    "PUBLIC_PATHS",
    "Gate",
    "TrustedHosts",
    "build_app",
]

logger = logging.getLogger("emotional_memory.server")

DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
"""Largest request body accepted (bytes); larger ones get 413."""
DEFAULT_MAX_IN_FLIGHT = 64
"""Requests of one API key served at once (running or waiting for their scope's turn,
each holding its body); more get 429 at once, before their body is read."""
PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json"})
"""Paths served without a key."""


LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")
"""The ``Host`` values a loopback server accepts by default (``:*``: any port)."""


def _default_hosts(host: str) -> tuple[str, ...]:
    """The ``Host`` patterns a key-less server served at ``host`` answers:
    :data:`LOOPBACK_HOSTS` and ``host`` itself (any port), so a bind to another
    loopback address (``127.0.0.2``, ``0:0:0:0:0:0:0:1``) answers requests to it.

    Args:
        host: the address served (an IPv6 address with or without brackets).

    Returns:
        The patterns, lower-case.
    """
    name = host.strip().lower()
    if ":" in name and not name.startswith("["):
        name = f"[{name}]"
    own = f"{name}:*"
    return LOOPBACK_HOSTS if not name or own in LOOPBACK_HOSTS else (*LOOPBACK_HOSTS, own)

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _split_host(host: str) -> tuple[str, str | None]:
    """``(name, port)`` of ``name``, ``name:port`` or ``[v6]:port`` (port None if absent).

    A bracketed value with text after ``]`` that is no ``:port`` gives a port of
    ``"?"``; a second colon leaves one in the port (``"localhost:1:2"``: ``"1:2"``):
    neither is digits, so :func:`_port_ok` refuses both."""
    if host.startswith("["):
        end = host.find("]")
        rest = host[end + 1:]
        if end < 0 or (rest and not rest.startswith(":")):
            return host, "?"
        return host[: end + 1], rest[1:] if rest else None
    name, sep, port = host.partition(":")
    return name, port if sep else None


def _port_ok(port: str | None) -> bool:
    """Whether a ``Host`` value's port is absent or digits (RFC 3986's ``*DIGIT``)."""
    return port is None or port == "" or (port.isascii() and port.isdigit())


class TrustedHosts:
    """The ``Host`` (and ``Origin``) values a server answers, against DNS rebinding.

    A page on another origin that makes its name resolve to 127.0.0.1 reaches the
    server with its own name in ``Host`` (and ``Origin``): refusing names not listed
    keeps such pages from planting or reading memories of a key-less server.

    Args:
        patterns: ``host``, ``host:port`` or ``host:*`` (any port); IPv6 in brackets.
    """

    def __init__(self, patterns: Sequence[str]) -> None:
        cleaned = []
        for p in patterns:
            if not isinstance(p, str) or not p.strip() or "/" in p:
                raise ValueError(f"an allowed host must be host, host:port or host:*, got {p!r}")
            cleaned.append(p.strip().lower())
        if not cleaned:
            raise ValueError("give at least one allowed host")
        self.patterns = tuple(cleaned)

    def allows(self, host: str | None) -> bool:
        """Whether a ``Host`` header value is listed.

        Args:
            host: the header's value (``name`` or ``name:port``), or None when absent.

        Returns:
            True when a pattern matches its name and port.
        """
        if not host:
            return False
        name, port = _split_host(host.strip().lower())
        if not _port_ok(port):  # "127.0.0.1:80@evil.example" is no loopback Host
            return False
        for pattern in self.patterns:
            p_name, p_port = _split_host(pattern)
            if p_name == name and (p_port == "*" or p_port == port):
                return True
        return False

    def allows_origin(self, origin: str | None) -> bool:
        """Whether an ``Origin`` header is absent or names a listed host.

        Args:
            origin: the header's value (``http`` or ``https``), or None when absent.

        Returns:
            True when absent or when its host passes :meth:`allows`.
        """
        if origin is None:
            return True
        scheme, sep, rest = origin.partition("://")
        return bool(sep) and scheme in ("http", "https") and self.allows(rest.rstrip("/"))


def _is_json(content_type: str) -> bool:
    """Whether a ``Content-Type`` names JSON as FastAPI reads it (``application/json``
    or ``application/*+json``, parsed as it parses it), so a body the gate lets through
    is one FastAPI parses (``text/plain+json`` is not: it would answer a puzzling 422).

    Args:
        content_type: the header's value (``""`` when absent).

    Returns:
        True for a JSON media type.
    """
    message = email.message.Message()
    message["content-type"] = content_type
    if message.get_content_maintype() != "application":
        return False
    subtype = message.get_content_subtype()
    return subtype == "json" or subtype.endswith("+json")


class _BodyTooLarge(StarletteHTTPException):
    """A body that grew past the limit while read (chunked, no Content-Length): 413.

    An HTTP exception, so FastAPI's body reading re-raises it as it is.
    """

    def __init__(self) -> None:
        super().__init__(413, "request body too large")


class Gate:
    """ASGI middleware: bearer-key authentication and a request-body limit.

    Every HTTP request outside :data:`PUBLIC_PATHS` must carry ``Authorization:
    Bearer <key>`` with a key of ``keys`` (else 401); its principal is left in the
    ASGI scope under :data:`~emotional_memory.server.keys.PRINCIPAL_KEY` for the
    routes and the MCP tools. Without ``keys`` (``--no-auth``) every request acts as
    the root. Bodies over ``max_body_bytes`` get 413. With ``hosts``, a request whose
    ``Host`` is not listed gets 421 and one whose ``Origin`` is not gets 403 (as the
    MCP endpoint answers). A body without a JSON ``Content-Type`` sent to a route that
    takes JSON gets 415. A key with ``max_in_flight`` requests in progress gets
    429 for the next one (its body unread), so that no key can pile up requests
    (each holding a body of up to ``max_body_bytes``) without bound. A request is in
    progress until the app returns for it: a client that disconnects leaves it counted
    until its operation ends (uvicorn does not cancel it), but a request cancelled (by
    a server that cancels on disconnect) frees its place at once, while its operation
    completes in the background (its scope's next operation waits for it). The count
    is kept on the one event loop the app serves on (as the service's views are).

    Args:
        app: the wrapped app.
        keys: the key ring, or None for no authentication.
        max_body_bytes: the body limit.
        hosts: the trusted hosts, or None to answer any ``Host``.
        takes_json: whether a request goes to a route that reads a JSON body (the
            others, an unknown path or method included, are the app's to answer:
            404, 405); None: every POST, PUT or PATCH under ``/v1/``.
        max_in_flight: requests of one key in progress at most.
    """

    def __init__(
        self,
        app: ASGIApp,
        keys: KeyRing | None,
        max_body_bytes: int,
        hosts: TrustedHosts | None = None,
        takes_json: Callable[[Scope], bool] | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) \
                or max_in_flight < 1:
            raise ValueError(f"max_in_flight must be an integer >= 1, got {max_in_flight!r}")
        self.app = app
        self.keys = keys
        self.max_body_bytes = max_body_bytes
        self.hosts = hosts
        self.takes_json = takes_json if takes_json is not None else (
            lambda scope: scope["method"] in _BODY_METHODS and scope["path"].startswith("/v1/")
        )
        self.max_in_flight = max_in_flight
        # principal -> its requests in progress (an entry only while some are): touched
        # only on the serving event loop's thread, with no await between read and write
        self._in_flight: dict[Principal, int] = {}
        self._anonymous = Principal((), "no-auth")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if self.hosts is not None:
            if not self.hosts.allows(headers.get("host")):
                await _reply(scope, receive, send, 421, "Host header not allowed")
                return
            if not self.hosts.allows_origin(headers.get("origin")):
                await _reply(scope, receive, send, 403, "Origin header not allowed")
                return
        if self.keys is None:
            principal: Principal | None = self._anonymous
        else:
            principal = self.keys.authenticate_header(headers.get("authorization"))
        if principal is None:
            await _reply(scope, receive, send, 401, "missing or unknown API key",
                         {"WWW-Authenticate": "Bearer"})
            return
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            await _reply(scope, receive, send, 413, "request body too large")
            return
        # no Content-Type is no JSON: FastAPI leaves such a body unread (its
        # strict_content_type, against CSRF), which would answer a puzzling 422
        if self.takes_json(scope) and not _is_json(headers.get("content-type", "")):
            await _reply(scope, receive, send, 415, "Content-Type must be application/json")
            return
        running = self._in_flight.get(principal, 0)
        if running >= self.max_in_flight:
            await _reply(scope, receive, send, 429,
                         f"too many requests of this API key in progress (at most "
                         f"{self.max_in_flight}, --max-in-flight); try again",
                         {"Retry-After": "1"})
            return
        self._in_flight[principal] = running + 1
        scope = dict(scope)
        scope[PRINCIPAL_KEY] = principal
        try:
            await self._bounded(scope, receive, send)
        finally:
            left = self._in_flight[principal] - 1
            if left:
                self._in_flight[principal] = left
            else:
                del self._in_flight[principal]

    async def _bounded(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app, stopping a (chunked) body that grows past the limit.

        An exception the app's 500 handler has answered (and logged) in full is not
        passed on: Starlette re-raises it after the answer, and uvicorn then closed
        the keep-alive connection without a word, so the client's next request on it
        failed with a reset.
        """
        seen = 0
        started = finished = False

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    raise _BodyTooLarge()
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started, finished
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                finished = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _BodyTooLarge:
            if not started:
                await _reply(scope, receive, send, 413, "request body too large")
        except Exception:
            if not finished:  # no complete answer: the server's own handling
                raise


async def _reply(
    scope: Scope, receive: Receive, send: Send, code: int, detail: str,
    headers: dict[str, str] | None = None,
) -> None:
    await JSONResponse({"detail": detail}, status_code=code, headers=headers)(scope, receive, send)


def _field_errors(errors: Any) -> list[dict[str, Any]]:
    """Pydantic errors as ``{loc, msg, type}`` (no echoed input, nothing unserialisable;
    a list index stays a number, as in the service's own located errors)."""
    return [
        {"loc": [p if isinstance(p, int | str) and not isinstance(p, bool) else str(p)
                 for p in e.get("loc", ())], "msg": str(e.get("msg", "")),
         "type": str(e.get("type", ""))}
        for e in errors
    ]


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return JSONResponse({"detail": "malformed JSON in the request body"}, status_code=400)
    return JSONResponse({"detail": _field_errors(errors)}, status_code=422)


def _source(request: Request) -> str:
    """Where a request's input came from: the query of a GET or DELETE, else the body."""
    return "query" if request.method in ("GET", "DELETE", "HEAD") else "body"


async def _on_library_error(request: Request, exc: Exception) -> JSONResponse:
    """The library's ValueError / TypeError: bad input, named in the message; a
    service limit (413 or 422) or a located field error names its place too."""
    loc: list[Any] = [_source(request)]
    code, kind = 422, "value_error"
    if isinstance(exc, LimitExceeded):
        loc += list(exc.loc)
        code, kind = exc.status, "limit_exceeded"
    elif isinstance(exc, FieldError):
        loc += list(exc.loc)
    return JSONResponse(
        {"detail": [{"loc": loc, "msg": str(exc), "type": kind}]}, status_code=code
    )


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return JSONResponse(
        {"detail": exc.detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None)
    )


def _loggable(request: Request) -> str:
    """``METHOD path`` of a request for a log line, each character that is not
    printable (an escape sequence, a carriage return the client put in an id) written
    as its Python escape, so that a client cannot write control characters into the
    server's log."""
    text = f"{request.method} {request.url.path}"
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)


async def _on_timeout(request: Request, exc: Exception) -> JSONResponse:
    """A store's statement timeout, or no connection free: 503 (nothing changed)."""
    assert isinstance(exc, StoreTimeoutError)
    logger.warning("%s on %s", type(exc).__name__, _loggable(request))
    return JSONResponse({"detail": timeout_detail(exc)}, status_code=503,
                        headers={"Retry-After": "1"})


async def _on_spoiled_state(request: Request, exc: Exception) -> JSONResponse:
    """A scope's stored state that is no snapshot (edited by hand, another program's
    value): the server's data, not the request's, so 500, its key only in the log."""
    logger.error("%s on %s: %s", type(exc).__name__, _loggable(request), exc)
    return JSONResponse({"detail": "internal server error"}, status_code=500)


async def _on_crash(request: Request, exc: Exception) -> JSONResponse:
    if database_busy(exc):  # SQLite's file held by another process: 503, as a full pool
        logger.warning("database busy on %s", _loggable(request))
        return JSONResponse({"detail": BUSY_DETAIL}, status_code=503,
                            headers={"Retry-After": "1"})
    logger.error("unhandled %s on %s", type(exc).__name__, _loggable(request),
                 exc_info=exc)
    return JSONResponse({"detail": "internal server error"}, status_code=500)


def build_app(
    service: MemoryService,
    keys: KeyRing | None,
    *,
    host: str = "127.0.0.1",
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    allowed_hosts: Sequence[str] | None = None,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
) -> Gate:
    """The whole service as one ASGI app.

    Args:
        service: the engine and its scope views.
        keys: the key ring; None serves without authentication (``--no-auth``:
            every request acts as the root; the CLI allows it on loopback only).
        host: the address served (given to the MCP SDK; ``Host`` / ``Origin`` are
            checked by the gate, for REST and MCP alike, see ``allowed_hosts``).
        max_body_bytes: largest accepted request body.
        allowed_hosts: the ``Host`` values REST and MCP answer (``host``,
            ``host:port``, ``host:*``); None: :func:`_default_hosts` without keys
            (:data:`LOOPBACK_HOSTS` and ``host``), any host with keys (a rebound page
            has no key; a proxy in front passes its own name).
        max_in_flight: requests of one key in progress at once (more: 429).

    Returns:
        The app (:class:`Gate` around FastAPI); ``.app.state.service`` is ``service``.
    """
    hosts = TrustedHosts(allowed_hosts) if allowed_hosts is not None else (
        TrustedHosts(_default_hosts(host)) if keys is None else None
    )
    from mcp.server.transport_security import TransportSecuritySettings

    # the gate checks Host and Origin for /mcp as for REST (one grammar: any case, any
    # or no port); the SDK's own check (case-sensitive, a port required by "host:*",
    # any text after "host:" taken) would refuse some values REST answers
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    mcp = build_mcp(service, http_principal)
    # the SDK bounds /mcp bodies by a limit of its own (4 MiB, answered in plain text),
    # which would override max_body_bytes there: the gate's limit is the one limit
    extra: dict[str, Any] = {}
    if "max_request_body_size" in inspect.signature(mcp.streamable_http_app).parameters:
        extra["max_request_body_size"] = max_body_bytes
    mcp_app = mcp.streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True, host=host,
        transport_security=security, **extra,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with mcp.session_manager.run():
            yield
        await service.close()

    api = FastAPI(
        title="emotional-memory",
        summary="Emotional memory for LLM agents: REST and MCP.",
        version=_version(),
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    api.state.service = service
    api.include_router(router)
    install_openapi(api, service.limits, service.calibrated)

    @api.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        """Liveness: 200 while the service runs (no key needed)."""
        return {"status": "ok"}

    @api.get("/readyz", tags=["health"], responses={503: {"description": "not ready"}})
    async def readyz() -> JSONResponse:
        """Readiness: 200 when the stores (memories, states) answer a read, else 503
        saying why within a few seconds (no key needed)."""
        why = await service.ready()
        if why is None:
            return JSONResponse({"status": "ready"})
        return JSONResponse({"status": "unavailable", "detail": why}, status_code=503,
                            headers={"Retry-After": "1"})

    for route in mcp_app.routes:  # POST/DELETE /mcp, served by the SDK
        if isinstance(route, Route) and route.path == "/mcp":
            # stateless: the server never sends a message of its own, so a GET's SSE
            # stream would stay open, idle, for as long as the client likes; the MCP
            # spec's answer for a server without one is 405
            route = Route(route.path, endpoint=route.endpoint, methods=["POST", "DELETE"])
        api.router.routes.append(route)
    api.add_exception_handler(RequestValidationError, _on_validation)
    api.add_exception_handler(StarletteHTTPException, _on_http_error)
    api.add_exception_handler(StoredStateError, _on_spoiled_state)  # a ValueError: by MRO
    api.add_exception_handler(ValueError, _on_library_error)
    api.add_exception_handler(TypeError, _on_library_error)
    api.add_exception_handler(StoreTimeoutError, _on_timeout)
    api.add_exception_handler(Exception, _on_crash)
    return Gate(api, keys, max_body_bytes, hosts, _json_routes(router.routes), max_in_flight)


def _json_routes(routes: Sequence[BaseRoute]) -> Callable[[Scope], bool]:
    """Whether a request matches (path and method) one of ``routes`` with a body.

    Args:
        routes: the REST routes (paths with their prefix).

    Returns:
        The predicate :class:`Gate` checks ``Content-Type`` by.
    """
    with_body = [r for r in routes if isinstance(r, APIRoute) and r.body_field is not None]

    def takes_json(scope: Scope) -> bool:
        return scope["method"] in _BODY_METHODS and any(
            r.matches(scope)[0] == Match.FULL for r in with_body)

    return takes_json


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("emotional-memory-jax")
    except Exception:  # not installed as a distribution (a source checkout)
        return "0"
