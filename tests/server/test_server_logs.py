"""What the service writes to its log about a request: never a control character the
client chose.

The warning and error lines of a failed request name its method and path; the path is
the client's (a memory id, percent-decoded), so an escape sequence or carriage return
in it reached the server's log verbatim (a terminal reading the log ran it; a ``\\r``
hid the line's start). Logged paths are escaped now.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the server extra is not installed")

from emotional_memory import EmotionalMemory, InMemoryStore
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.interfaces import StoreTimeoutError
from emotional_memory.server.app import build_app
from emotional_memory.server.service import MemoryService

HOSTILE_ID = "%1b%5b2J%1b%5b31mpwned%0dfake%07%7f%c2%9b"
"""An id of ANSI escapes, a carriage return, a bell, DEL and a C1 control (CSI)."""


def _logged_lines(failure: BaseException, caplog: pytest.LogCaptureFixture) -> list[str]:
    """The log lines of a ``GET /v1/memories/<HOSTILE_ID>`` whose store read raises
    ``failure``."""
    service = MemoryService(EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16)))

    async def failing(*args: Any, **kwargs: Any) -> Any:
        raise failure

    service.get = failing  # type: ignore[method-assign]
    app = build_app(service, None)

    async def run() -> int:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport,
                                     base_url="http://127.0.0.1:8765") as client:
            r = await client.get(f"/v1/memories/{HOSTILE_ID}")
            return r.status_code

    try:
        with caplog.at_level(logging.WARNING, logger="emotional_memory"):
            status = asyncio.run(run())
    finally:
        service.engine.close()
    assert status in (500, 503)
    return [r.getMessage() for r in caplog.records if r.name.startswith("emotional_memory")]


@pytest.mark.parametrize(
    "failure",
    [StoreTimeoutError("canceling statement due to statement timeout"),
     RuntimeError("a bug")],
    ids=["timeout-503", "crash-500"],
)
def test_a_failed_requests_logged_path_holds_no_control_character(
    failure: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    lines = _logged_lines(failure, caplog)
    assert lines, "the failure was not logged"
    for line in lines:
        controls = [c for c in line if not c.isprintable()]
        assert not controls, (line, controls)
    # still readable: the path is there, escaped
    assert any("/v1/memories/" in line and "\\x1b" in line and "pwned" in line
               for line in lines), lines
