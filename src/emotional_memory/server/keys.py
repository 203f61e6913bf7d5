"""API keys bound to scopes: the service's ``KEYS.json`` and the bearer check.

``KEYS.json`` maps each key to the scope path it may use::

    {"k-alice-3f9...": {"scope": ["alice"]}, "k-admin-81c...": {"scope": []}}

``[]`` is the root (an administrator's key sees every scope). A request may narrow
into a sub-scope of its key's path, never leave it: the request's path is appended
to the key's (:func:`narrowed`).

Keys are compared in constant time: the presented key and every configured key are
hashed (SHA-256, so lengths do not matter) and compared with
:func:`hmac.compare_digest`, all of them, whichever matches. Keys never appear in
errors, logs or reprs; a key file's errors name the entry by its position.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from emotional_memory.models import scope_path

__all__ = ["MIN_KEY_LENGTH", "PRINCIPAL_KEY", "KeyRing", "Principal", "narrowed", "scope_path"]

MIN_KEY_LENGTH = 16
"""Shortest key a key file may hold (characters)."""
PRINCIPAL_KEY = "emotional_memory.principal"
"""Where the auth middleware leaves the caller's :class:`Principal` in the ASGI scope."""


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: the scope path its key is bound to.

    Attributes:
        scope: the key's scope path (``()``: the root).
        name: a label for logs that is not the key (``"key #3"``, ``"no-auth"``).
    """

    scope: tuple[str, ...]
    name: str


def narrowed(principal: Principal, requested: Sequence[str] | None) -> tuple[str, ...]:
    """The scope a request works in: its key's path with the requested path appended.

    Args:
        principal: the authenticated caller.
        requested: the request's ``scope`` (None or ``[]``: the key's own scope).

    Returns:
        ``principal.scope + requested``; never outside the key's scope.

    Raises:
        TypeError, ValueError: ``requested`` is not a valid path.
    """
    if requested is None:
        return principal.scope
    return principal.scope + scope_path("scope", requested)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its key/value pairs in file order (repeats kept)."""


def _unique(data: Any, source: str) -> Any:
    """``data`` with each JSON object as a dict, refusing a key given twice.

    A repeated key would otherwise silently take its last entry (a tenant's key could
    become a root key by a copy-paste). Entries are named by position, never by key.

    Raises:
        ValueError: a key repeated at the top level (both positions named) or in an
            entry's value.
    """
    if not isinstance(data, _Pairs):
        return data
    first: dict[str, int] = {}
    out: dict[str, Any] = {}
    for i, (key, value) in enumerate(data, start=1):
        if key in first:
            raise ValueError(
                f"{source} entry #{i} repeats the key of entry #{first[key]}: "
                "each key must appear once"
            )
        first[key] = i
        if isinstance(value, _Pairs):
            names = [k for k, _ in value]
            repeated = sorted({k for k in names if names.count(k) > 1})
            if repeated:
                raise ValueError(f"{source} entry #{i}: its value repeats {repeated[0]!r}")
            value = {k: _plain(v) for k, v in value}
        out[key] = value
    return out


def _plain(value: Any) -> Any:
    """Nested :class:`_Pairs` as dicts (the last of a repeat; an entry's value only)."""
    if isinstance(value, _Pairs):
        return {k: _plain(v) for k, v in value}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class KeyRing:
    """The configured keys, checked in constant time.

    Build with :meth:`load` (a ``KEYS.json`` path) or :meth:`from_mapping`.
    """

    _entries: tuple[tuple[bytes, Principal], ...] = field(repr=False)

    def __repr__(self) -> str:
        return f"KeyRing({len(self._entries)} keys)"

    def __len__(self) -> int:
        return len(self._entries)

    @classmethod
    def from_mapping(cls, data: object, *, source: str = "keys") -> KeyRing:
        """Keys from a ``{key: {"scope": [...]}}`` mapping.

        Args:
            data: the parsed ``KEYS.json``.
            source: what errors call it.

        Returns:
            The key ring.

        Raises:
            ValueError: not a non-empty mapping of keys (at least
                :data:`MIN_KEY_LENGTH` ASCII characters, no whitespace) to
                ``{"scope": [strings]}``; entries are named by position, never by key.
        """
        if not isinstance(data, Mapping) or not data:
            raise ValueError(
                f"{source} must be a non-empty JSON object of key -> {{\"scope\": [...]}}"
            )
        entries: list[tuple[bytes, Principal]] = []
        for i, (key, spec) in enumerate(data.items(), start=1):
            where = f"{source} entry #{i}"
            if not isinstance(key, str) or len(key) < MIN_KEY_LENGTH:
                raise ValueError(
                    f"{where}: keys must be strings of at least {MIN_KEY_LENGTH} characters"
                )
            if any(c.isspace() for c in key) or not key.isprintable():
                raise ValueError(f"{where}: keys must not contain whitespace or control characters")
            if not key.isascii():
                # an HTTP server reads a header's bytes as Latin-1, so a key with other
                # characters (sent as UTF-8) would never match: refuse it here, not at 401
                raise ValueError(f"{where}: keys must be ASCII (HTTP headers carry them "
                                 "byte for byte, read as Latin-1)")
            if not isinstance(spec, Mapping) or set(spec) != {"scope"}:
                raise ValueError(f"{where}: the value must be {{\"scope\": [...]}}")
            try:
                scope = scope_path("scope", spec["scope"])
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{where}: {exc}") from None
            entries.append((_digest(key), Principal(scope, f"key #{i}")))
        return cls(tuple(entries))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> KeyRing:
        """Keys from a ``KEYS.json`` file (UTF-8, a leading byte-order mark allowed).

        Args:
            path: the file.

        Returns:
            The key ring.

        Raises:
            OSError: the file cannot be read.
            ValueError: it is not valid JSON or not a valid key mapping.
        """
        source = f"keys file {os.fspath(path)!r}"
        with open(path, encoding="utf-8-sig") as fh:  # a leading BOM is no JSON
            try:
                text = fh.read()
            except UnicodeDecodeError as exc:
                raise ValueError(f"{source} is not UTF-8 text (byte {exc.start})") from None
        try:
            data: Any = json.loads(text, object_pairs_hook=_Pairs)
        except json.JSONDecodeError as exc:  # the message quotes no content
            raise ValueError(f"{source} is not valid JSON (line {exc.lineno})") from None
        except ValueError:  # an integer too long to read
            raise ValueError(f"{source} holds a number too long to read") from None
        except RecursionError:  # [[[...]]] thousands deep: more than the parser's stack
            raise ValueError(f"{source} nests too deeply to read") from None
        return cls.from_mapping(_unique(data, source), source=source)

    def authenticate(self, presented: str) -> Principal | None:
        """The principal of a presented key, compared in constant time.

        Every configured key is compared (no early exit) with
        :func:`hmac.compare_digest` over SHA-256 digests, so the time taken says
        nothing about which key, or how much of one, matched.

        Args:
            presented: the key from the request.

        Returns:
            Its principal, or None for an unknown key.
        """
        probe = _digest(presented)
        found: Principal | None = None
        for digest, principal in self._entries:
            if hmac.compare_digest(probe, digest):
                found = principal
        return found

    def authenticate_header(self, authorization: str | None) -> Principal | None:
        """:meth:`authenticate` for an ``Authorization: Bearer <key>`` header value.

        Args:
            authorization: the header's value (None when absent).

        Returns:
            The principal, or None (no header, another scheme, an unknown key).
        """
        if not authorization:
            return None
        scheme, _, credentials = authorization.strip().partition(" ")
        if scheme.lower() != "bearer":
            return None
        credentials = credentials.strip()
        if not credentials:
            return None
        return self.authenticate(credentials)
