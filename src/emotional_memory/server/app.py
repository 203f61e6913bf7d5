"""The ASGI app: REST under ``/v1``, MCP at ``/mcp``, behind one bearer-key gate.

:func:`build_app` puts together the FastAPI routes of
:mod:`emotional_memory.server.rest`, the MCP streamable-HTTP endpoint of
:mod:`emotional_memory.server.mcp_tools` (stateless: every POST is authenticated
on its own), ``GET /healthz`` and ``/openapi.json``, behind :class:`Gate`, an ASGI
middleware that authenticates every other request and bounds request bodies.

Errors are JSON ``{"detail": ...}``: 400 for malformed JSON, 401 without a known
key, 404, 413 for a body over the limit, 415 for a body that is not JSON, 422
naming the invalid field, 500 with a generic message (the traceback goes to the
server's log only). Keys never appear in responses or logs.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from emotional_memory.server.keys import PRINCIPAL_KEY, KeyRing, Principal
from emotional_memory.server.mcp_tools import build_mcp, http_principal
from emotional_memory.server.rest import router
from emotional_memory.server.service import MemoryService

__all__ = ["DEFAULT_MAX_BODY_BYTES", "PUBLIC_PATHS", "Gate", "build_app"]

logger = logging.getLogger("emotional_memory.server")

DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
"""Largest request body accepted (bytes); larger ones get 413."""
PUBLIC_PATHS = frozenset({"/healthz", "/openapi.json"})
"""Paths served without a key."""


_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


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
    the root. Bodies over ``max_body_bytes`` get 413.

    Args:
        app: the wrapped app.
        keys: the key ring, or None for no authentication.
        max_body_bytes: the body limit.
    """

    def __init__(self, app: ASGIApp, keys: KeyRing | None, max_body_bytes: int) -> None:
        self.app = app
        self.keys = keys
        self.max_body_bytes = max_body_bytes
        self._anonymous = Principal((), "no-auth")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
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
        if scope["method"] in _BODY_METHODS and scope["path"].startswith("/v1/"):
            media = headers.get("content-type", "application/json").split(";")[0].strip().lower()
            if media != "application/json" and not media.endswith("+json"):
                await _reply(scope, receive, send, 415, "Content-Type must be application/json")
                return
        scope = dict(scope)
        scope[PRINCIPAL_KEY] = principal
        await self._bounded(scope, receive, send)

    async def _bounded(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app, stopping a (chunked) body that grows past the limit."""
        seen = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    raise _BodyTooLarge()
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _BodyTooLarge:
            if not started:
                await _reply(scope, receive, send, 413, "request body too large")


async def _reply(
    scope: Scope, receive: Receive, send: Send, code: int, detail: str,
    headers: dict[str, str] | None = None,
) -> None:
    await JSONResponse({"detail": detail}, status_code=code, headers=headers)(scope, receive, send)


def _field_errors(errors: Any) -> list[dict[str, Any]]:
    """Pydantic errors as ``{loc, msg, type}`` (no echoed input, nothing unserialisable)."""
    return [
        {"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", "")),
         "type": str(e.get("type", ""))}
        for e in errors
    ]


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return JSONResponse({"detail": "malformed JSON in the request body"}, status_code=400)
    return JSONResponse({"detail": _field_errors(errors)}, status_code=422)


async def _on_library_error(request: Request, exc: Exception) -> JSONResponse:
    """The library's ValueError / TypeError: bad input, named in the message."""
    return JSONResponse(
        {"detail": [{"loc": ["body"], "msg": str(exc), "type": "value_error"}]}, status_code=422
    )


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return JSONResponse(
        {"detail": exc.detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None)
    )


async def _on_crash(request: Request, exc: Exception) -> JSONResponse:
    logger.error("unhandled %s on %s %s", type(exc).__name__, request.method, request.url.path,
                 exc_info=exc)
    return JSONResponse({"detail": "internal server error"}, status_code=500)


def build_app(
    service: MemoryService,
    keys: KeyRing | None,
    *,
    host: str = "127.0.0.1",
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> Gate:
    """The whole service as one ASGI app.

    Args:
        service: the engine and its scope views.
        keys: the key ring; None serves without authentication (``--no-auth``:
            every request acts as the root; the CLI allows it on loopback only).
        host: the address served (the MCP endpoint checks ``Host`` / ``Origin``
            against it on loopback, against DNS rebinding).
        max_body_bytes: largest accepted request body.

    Returns:
        The app (:class:`Gate` around FastAPI); ``.app.state.service`` is ``service``.
    """
    mcp = build_mcp(service, http_principal)
    mcp_app = mcp.streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True, host=host
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

    @api.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        """Liveness: 200 while the service runs (no key needed)."""
        return {"status": "ok"}

    for route in mcp_app.routes:  # POST/GET/DELETE /mcp, served by the SDK
        api.router.routes.append(route)
    api.add_exception_handler(RequestValidationError, _on_validation)
    api.add_exception_handler(StarletteHTTPException, _on_http_error)
    api.add_exception_handler(ValueError, _on_library_error)
    api.add_exception_handler(TypeError, _on_library_error)
    api.add_exception_handler(Exception, _on_crash)
    return Gate(api, keys, max_body_bytes)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("emotional-memory-jax")
    except Exception:  # not installed as a distribution (a source checkout)
        return "0"
