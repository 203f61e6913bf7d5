"""One affective state per scope: the key a scope's state is kept under.

Each built-in state store offers ``scoped(path)``: the state store of the engine view
``engine.scoped(*path)``, which keeps its state beside the root engine's under
:func:`scoped_key` of the root's key (the in-memory store keeps one child store per
path). A state store of the user's own gives scoped views their own state by
offering the same method.
"""

from __future__ import annotations

import json
import re
from typing import Any

from emotional_memory.interfaces import StateConflictError, StoredStateError
from emotional_memory.models import scope_path
from emotional_memory.state import AffectiveState

__all__ = [
    "StoredStateError",
    "check_key",
    "check_path",
    "loads_snapshot",
    "restore_stored",
    "scoped_key",
    "scoped_state_store",
    "snapshot_of",
    "state_conflict",
]


# ``\u0000`` in JSON text not preceded by an escaping backslash: a NUL in a string
# (json.dumps writes a NUL so, and a literal backslash as two)
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def state_conflict(key: str) -> StateConflictError:
    """The error of a versioned save whose stored version moved (see
    :class:`~emotional_memory.interfaces.StateConflictError`)."""
    return StateConflictError(
        f"the affective state {key!r} changed during the operation "
        "(its scope lock was lost); nothing was saved, retry"
    )


def loads_snapshot(key: str, text: str | bytes) -> dict[str, Any]:
    """The snapshot dict stored as JSON ``text`` under ``key`` (a state store's
    ``load_snapshot``).

    Raises:
        StoredStateError: ``text`` is not JSON, nests past the parser's limit, or is
            no JSON object; a ValueError naming ``key`` (not a bare JSONDecodeError).
    """
    try:
        data = json.loads(text)
    except RecursionError:
        raise StoredStateError(key, "JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise StoredStateError(key, f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise StoredStateError(key, f"a JSON {type(data).__name__}, not an object")
    return data


def restore_stored(key: str, snapshot: dict[str, Any] | None) -> AffectiveState | None:
    """The state of the snapshot dict stored under ``key`` (a state store's ``load``).

    Raises:
        StoredStateError: a JSON object that is no state snapshot (another
            program's, or edited by hand); a ValueError naming ``key``.
    """
    if snapshot is None:
        return None
    try:
        return AffectiveState.restore(snapshot)
    except (TypeError, ValueError) as exc:
        raise StoredStateError(key, str(exc)) from None


def check_key(key: object) -> str:
    """A state store's ``key``, checked the same on every backend.

    Args:
        key: the key given.

    Returns:
        ``key``.

    Raises:
        ValueError: not a non-empty string, not valid Unicode (a lone surrogate,
            which no database driver encodes), or holding a NUL character (which
            PostgreSQL text cannot hold; refused on every backend alike).
    """
    if not isinstance(key, str) or not key:
        raise ValueError("key must be a non-empty string")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("key is not valid Unicode text (a lone surrogate)") from None
    if "\x00" in key:
        raise ValueError("key must not contain NUL characters")
    return key


def check_path(path: object) -> tuple[str, ...]:
    """A state store's ``scoped(path)`` argument, checked as an engine view's path.

    Raises:
        TypeError: not a tuple (or list) of strings. ValueError: an empty part, a
            NUL character, a lone surrogate, a part over ``MAX_SCOPE_PART_BYTES``.
    """
    return scope_path("path", path)


def scoped_key(key: str, path: tuple[str, ...]) -> str:
    """The key of ``path``'s state next to the root state's ``key``.

    Args:
        key: the root engine's state key.
        path: the scope path (``()``: the root itself).

    Returns:
        ``key`` for the root, else ``key + "/scope:" + the path as a JSON array``
        (unambiguous whatever characters the parts hold).
    """
    path = check_path(path)
    if not path:
        return key
    return f"{key}/scope:{json.dumps(list(path), ensure_ascii=False, separators=(',', ':'))}"


def scoped_state_store(store: Any, path: tuple[str, ...]) -> Any:
    """The state store of scope ``path`` derived from the root engine's ``store``.

    Args:
        store: the root engine's state store, or None.
        path: the view's full scope path.

    Returns:
        None without a state store; else ``store.scoped(path)``.

    Raises:
        TypeError: a state store without ``scoped``: a view must not share (and
            overwrite) the root engine's state.
    """
    if store is None:
        return None
    own = getattr(store, "scoped", None)
    if not callable(own):
        raise TypeError(
            f"state store {type(store).__name__} cannot keep one state per scope: give it "
            "a scoped(path) method returning the state store of that path (the built-in "
            "state stores have one)"
        )
    return own(path)


def snapshot_of(state: AffectiveState | dict[str, Any]) -> dict[str, Any]:
    """The snapshot dict to store for ``state``.

    Args:
        state: an :class:`AffectiveState` or a snapshot dict.

    Returns:
        ``state.snapshot()`` or the dict itself.

    Raises:
        TypeError: when ``state`` is neither.
    """
    if isinstance(state, AffectiveState):
        return state.snapshot()
    if isinstance(state, dict):
        return state
    raise TypeError(
        f"state must be an AffectiveState or a snapshot dict, got {type(state).__name__}"
    )


def snapshot_text(state: AffectiveState | dict[str, Any]) -> str:
    """The JSON text stored for a state or snapshot (every state backend's).

    Args:
        state: an :class:`AffectiveState` or a snapshot dict.

    Returns:
        Compact JSON, non-ASCII kept.

    Raises:
        TypeError: neither, or not JSON-serialisable.
        ValueError: NaN or infinite numbers, nesting past the encoder's limit, a NUL
            character (which PostgreSQL's jsonb cannot hold; refused on every backend
            alike) or a lone surrogate (which no database driver encodes) in a string.
    """
    snapshot = snapshot_of(state)
    try:
        text = json.dumps(snapshot, ensure_ascii=False, allow_nan=False)
    except TypeError as exc:
        raise TypeError(f"snapshot must be JSON-serialisable: {exc}") from exc
    except ValueError as exc:
        raise ValueError(f"snapshot must hold only finite numbers: {exc}") from exc
    except RecursionError:
        raise ValueError("snapshot nests too deeply to be stored as JSON") from None
    if _JSON_NUL.search(text):
        raise ValueError("snapshot holds a NUL character in a string (key or value)")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            "snapshot holds a lone surrogate in a string (not valid Unicode text)"
        ) from None
    return text
