"""A real chat-completions HTTP server on 127.0.0.1 (``http.server`` in a thread) that
answers from a queue of scripted replies and records every request."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted reply: HTTP status, body, delay before answering, extra headers,
    ``drip``: seconds between body bytes (0: the body in one write), and
    ``header_drip``: seconds between the bytes of the status line and headers."""

    status: int = 200
    body: Any = None  # dict -> JSON, str -> raw text
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    drip: float = 0.0
    header_drip: float = 0.0


class FakeOpenAI:
    """A chat-completions server: replies from a queue, then a default; records requests."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.default_content = '{"ok": true}'
        self.requests: list[dict[str, Any]] = []
        self.header_drips: list[str] = []  # "sent" or "cut", per header_drip reply
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"null")
                owner.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "json": body}
                )
                reply = owner.replies.pop(0) if owner.replies else None
                if reply is None:
                    reply = Reply(body=completion(owner.default_content))
                if reply.delay:
                    time.sleep(reply.delay)
                raw = (
                    reply.body.encode()
                    if isinstance(reply.body, str)
                    else json.dumps(reply.body).encode()
                )
                try:
                    if reply.header_drip:
                        head = (
                            f"HTTP/1.1 {reply.status} X\r\nContent-Type: application/json\r\n"
                            f"Content-Length: {len(raw)}\r\n\r\n"
                        ).encode()
                        try:
                            for i in range(len(head)):
                                self.wfile.write(head[i : i + 1])
                                self.wfile.flush()
                                time.sleep(reply.header_drip)
                            self.wfile.write(raw)
                        except OSError:
                            owner.header_drips.append("cut")
                            raise
                        owner.header_drips.append("sent")
                        return
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    if not reply.drip:
                        self.wfile.write(raw)
                    for i in range(len(raw) if reply.drip else 0):
                        self.wfile.write(raw[i : i + 1])
                        self.wfile.flush()
                        time.sleep(reply.drip)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        host, port = self.server.server_address[:2]
        self.base_url = f"http://{host}:{port}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def completion(content: Any) -> dict[str, Any]:
    """A chat-completion response body whose one message holds ``content``."""
    return {
        "id": "cmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
    }
