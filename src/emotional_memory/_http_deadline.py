"""A total deadline for one HTTP exchange, enforced at the socket reads and writes.

httpx's timeouts bound each read, write or connect on its own, so a server that
sends its status line and headers a byte at a time, each inside the read timeout,
holds a request for as long as it likes. :class:`DeadlineBackend` wraps httpcore's
network backend: every connect, TLS handshake, read and write of the calling thread
waits at most until the deadline set with :func:`deadline_at`, and one past it raises
:class:`DeadlineExceeded` (the connection is then closed by httpcore).

Imported only when an HTTP client is built (httpx and httpcore are an extra).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpcore

__all__ = ["DeadlineBackend", "DeadlineExceeded", "deadline_at", "wrap_client"]

_local = threading.local()


class DeadlineExceeded(Exception):
    """The calling thread's deadline passed during a network operation."""


@contextlib.contextmanager
def deadline_at(at: float) -> Iterator[None]:
    """Bound the calling thread's network operations until ``at``.

    Args:
        at: The deadline, a ``time.monotonic()`` value.

    Yields:
        Nothing; the previous deadline (if any) is restored on exit.
    """
    previous = getattr(_local, "at", None)
    _local.at = at
    try:
        yield
    finally:
        _local.at = previous


def _left(timeout: float | None) -> float | None:
    """``timeout`` shortened to the time left before the thread's deadline."""
    at = getattr(_local, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise DeadlineExceeded
    return left if timeout is None else min(timeout, left)


def _past_deadline() -> bool:
    at = getattr(_local, "at", None)
    return at is not None and time.monotonic() >= at


class _Stream(httpcore.NetworkStream):
    """A network stream whose operations end by the thread's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            return self._inner.read(max_bytes, _left(timeout))
        except httpcore.ReadTimeout:
            if _past_deadline():
                raise DeadlineExceeded from None
            raise

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        try:
            self._inner.write(buffer, _left(timeout))
        except httpcore.WriteTimeout:
            if _past_deadline():
                raise DeadlineExceeded from None
            raise

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, _left(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's network backend with every operation bounded by :func:`deadline_at`."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        """Wrap ``inner``.

        Args:
            inner: The backend that opens the real connections.
        """
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(host, port, _left(timeout), local_address,
                                         socket_options)
        return _Stream(stream)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_unix_socket(path, _left(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def wrap_client(client: object) -> bool:
    """Put :class:`DeadlineBackend` under every connection pool of an ``httpx.Client``.

    httpx has no public way to choose a pool's network backend, so this reaches the
    client's default transport and its proxy mounts (environment proxies included).

    Args:
        client: An ``httpx.Client`` built with httpx's own transports.

    Returns:
        Whether the deadline now covers all of the client's connections (``False``
        when a transport or pool has another shape; those are left alone).
    """
    mounts = getattr(client, "_mounts", {})
    transports = [getattr(client, "_transport", None), *mounts.values()]
    return all([_wrap(t) for t in transports if t is not None])


def _wrap(transport: object) -> bool:
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if not isinstance(backend, httpcore.NetworkBackend):
        return False
    if not isinstance(backend, DeadlineBackend):
        pool._network_backend = DeadlineBackend(backend)  # type: ignore[union-attr]
    return True
