"""How ``emotional-memory serve`` stops: bounded, whatever its requests are doing.

On SIGTERM or SIGINT uvicorn stops accepting connections and lets the requests in
progress run for ``--shutdown-timeout`` seconds (:data:`DEFAULT_SHUTDOWN_TIMEOUT`),
then cancels them and closes the store; a process still alive :data:`CLOSE_GRACE_S`
later (held by a request's work in a worker thread) exits with
:data:`FORCED_EXIT_STATUS` (:class:`ExitDeadline`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import sys
import threading
from typing import Any

__all__ = ["CLOSE_GRACE_S", "DEFAULT_SHUTDOWN_TIMEOUT", "FORCED_EXIT_STATUS", "ExitDeadline",
           "check_shutdown_timeout"]

DEFAULT_SHUTDOWN_TIMEOUT = 25.0
"""Seconds ``serve`` lets the requests in progress finish after SIGTERM or SIGINT
(``--shutdown-timeout``); with :data:`CLOSE_GRACE_S` to close the store, a stop
ends within Kubernetes' default grace period (30 s) before its SIGKILL."""
CLOSE_GRACE_S = 5.0
"""Seconds after the shutdown limit that a server process may take to close its
store before it exits regardless, with status :data:`FORCED_EXIT_STATUS`."""
FORCED_EXIT_STATUS = 1
"""Exit status of a server process that had to abandon work still running (a
request's database call or computation in a worker thread) to stop in time."""


def check_shutdown_timeout(value: object) -> float:
    """A ``--shutdown-timeout`` value checked.

    Args:
        value: seconds.

    Returns:
        The seconds, as a float.

    Raises:
        ValueError: not a positive finite number (the message names the option).
    """
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or value <= 0):
        raise ValueError(f"--shutdown-timeout must be a positive finite number of seconds, "
                         f"got {value!r}")
    return float(value)


logger = logging.getLogger("emotional_memory.server")

_CUT_BODY = json.dumps({"detail": "the server is shutting down; retry the request"}).encode()


def _cut_at_shutdown(exc: asyncio.CancelledError) -> bool:
    """Whether ``exc`` is uvicorn's cancellation of a request at the shutdown limit."""
    return any("graceful shutdown" in str(arg) for arg in exc.args)


class ExitDeadline:
    """ASGI wrapper bounding a server process's stop: uvicorn lets the requests in
    progress run up to ``--shutdown-timeout``, cancels them, then sends the lifespan's
    shutdown; a request's work running in a worker thread (a database call, a
    computation) cannot be cancelled and held the process alive (its store's close
    waits for it, and so does the interpreter's exit). From that shutdown on, the
    process has ``grace`` seconds to end before it exits with
    :data:`FORCED_EXIT_STATUS` and one line saying why.

    A request cut at the limit is answered 503 (``Retry-After: 1``, the connection
    closed) when no answer had started, and logged in one line (it was uvicorn's
    "Exception in ASGI application" with a traceback, and a 500)."""

    def __init__(self, app: Any, grace: float) -> None:
        """Args:
            app: the ASGI app.
            grace: seconds the process may take to end once the lifespan's
                shutdown begins.
        """
        self.app = app
        self.grace = grace

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            return await self._request(scope, receive, send)
        if scope["type"] != "lifespan":
            return await self.app(scope, receive, send)

        async def watched() -> Any:
            message = await receive()
            if message.get("type") == "lifespan.shutdown":
                timer = threading.Timer(self.grace, self._exit)
                timer.daemon = True
                timer.start()
            return message

        return await self.app(scope, watched, send)

    async def _request(self, scope: Any, receive: Any, send: Any) -> None:
        started = False

        async def tracked(message: Any) -> None:
            nonlocal started
            started = started or message.get("type") == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except asyncio.CancelledError as exc:
            if not _cut_at_shutdown(exc):
                raise
            path = "".join(c if c.isprintable() else c.encode("unicode_escape").decode()
                           for c in f"{scope.get('method', '')} {scope.get('path', '')}")
            logger.warning("%s cut at the shutdown limit", path)
            if not started:
                await send({"type": "http.response.start", "status": 503, "headers": [
                    (b"content-type", b"application/json"), (b"retry-after", b"1"),
                    (b"connection", b"close"),
                    (b"content-length", str(len(_CUT_BODY)).encode())]})
                await send({"type": "http.response.body", "body": _CUT_BODY})

    def _exit(self) -> None:
        print(f"emotional-memory: error: process {os.getpid()} still busy {self.grace:g} s "
              "after the shutdown limit (a request's work is still running); exiting "
              f"with status {FORCED_EXIT_STATUS}", file=sys.stderr, flush=True)
        os._exit(FORCED_EXIT_STATUS)
