"""A facade with mem0's ``Memory`` API over :class:`~emotional_memory.engine.EmotionalMemory`.

Code written against mem0 (``add`` / ``search`` / ``get`` / ``get_all`` / ``update`` /
``delete`` / ``delete_all`` / ``reset``) can use emotional memory by swapping the object: the
results have mem0's dict shapes (``{"results": [...]}``). Memories are stored
verbatim (mem0's LLM fact extraction is not reproduced). Each user is a scope of the
engine (``em.scoped(user_id)``): a hard partition, searched, linked and changed alone;
``agent_id`` / ``run_id`` (kept in the metadata) and ``filters`` narrow the candidates
inside the search.

No dependency: the ``mem0`` extra is empty.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from emotional_memory._validation import positive_int
from emotional_memory.engine import EmotionalMemory
from emotional_memory.filters import parse_where
from emotional_memory.integrations._engine import check_sync_engine
from emotional_memory.models import Memory

__all__ = [
    "DELETED_MESSAGE",
    "MAX_USER_VIEWS",
    "UPDATED_MESSAGE",
    "EmotionalMemoryMem0Backend",
    "messages_to_content",
]

DELETED_MESSAGE = "Memory deleted successfully!"
"""The ``message`` mem0 returns from ``delete`` and ``delete_all``."""

UPDATED_MESSAGE = "Memory updated successfully!"
"""The ``message`` mem0 returns from ``update``."""

MAX_USER_VIEWS = 4096
"""Users' engine views kept when the engine has a state store; beyond that the least
recently used idle one is dropped (its mood is persisted, so it comes back as it
was). A view serving a call is never dropped."""


def _message_dicts(
    messages: str | Mapping[str, Any] | Iterable[Mapping[str, Any]],
) -> list[Mapping[str, Any]]:
    """The message dicts of a non-string ``messages`` argument (one dict: a list of it).

    Raises:
        TypeError: ``messages`` is neither a dict nor an iterable of dicts (named).
    """
    if isinstance(messages, Mapping):
        return [messages]
    if isinstance(messages, (bytes, bytearray)) or not isinstance(messages, Iterable):
        raise TypeError(
            "messages must be a str, a message dict or a list of message dicts, "
            f"got {type(messages).__name__}"
        )
    found: list[Mapping[str, Any]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise TypeError(f"messages[{i}] must be a dict, got {type(message).__name__}")
        found.append(message)
    return found


def messages_to_content(
    messages: str | Mapping[str, Any] | Iterable[Mapping[str, Any]],
) -> str:
    """One text from a mem0 ``messages`` argument.

    Args:
        messages: A string (returned unchanged), one mem0-style message dict
            ``{"role": ..., "content": ...}`` or a list of them; dicts without content
            are skipped.

    Returns:
        The contents joined by newlines, each prefixed with ``"role: "`` when the
        message has a role.

    Raises:
        TypeError: When ``messages`` is not one of these, or a message is not a dict.
    """
    if isinstance(messages, str):
        return messages
    lines: list[str] = []
    for message in _message_dicts(messages):
        content = message.get("content")
        if not content:
            continue
        role = message.get("role")
        lines.append(f"{role}: {content}" if role else str(content))
    return "\n".join(lines)


def _check_id(name: str, value: object) -> None:
    """An ``agent_id`` / ``run_id``: None or a non-empty string.

    Raises:
        TypeError: not a string.
        ValueError: an empty string.
    """
    if value is None:
        return
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{name} must be a non-empty string")


_ENGINE_METHODS = ("scoped", "encode", "retrieve_with_explanations", "list_all", "get",
                   "update_memory", "delete", "reset_state", "close")


def _fetch_k(limit: int) -> int:
    """The ``top_k`` of a search for ``limit`` results: the original's
    ``max(limit * 4, 40)``."""
    return max(limit * 4, 40)


def _checked_filters(filters: Mapping[str, Any]) -> dict[str, Any]:
    """``filters`` as a ``where`` clause, parsed once so that a malformed one is named
    ``filters`` (the argument the caller passed), not the engine's ``where``.

    Raises:
        ValueError: a malformed filter (the message starts with ``filters:``).
    """
    clause = dict(filters)
    try:
        parse_where(clause)
    except ValueError as exc:
        text = str(exc)
        raise ValueError("filters" + text[len("where"):] if text.startswith("where")
                         else f"filters: {text}") from exc
    return clause


def _item(memory: Memory) -> dict[str, Any]:
    return {"id": memory.id, "memory": memory.content, "metadata": dict(memory.metadata)}


class EmotionalMemoryMem0Backend:
    """mem0's ``Memory`` interface backed by an :class:`EmotionalMemory`.

    Each user is a scope: ``user_id`` names the engine view ``em.scoped(user_id)``
    (calls without one use ``default_user_id``), so a user's search ranks, links and
    changes only that user's memories, with that user's own mood. ``agent_id`` and
    ``run_id`` are kept in the metadata and, with ``filters`` (this library's
    ``where`` dialect, :mod:`emotional_memory.filters`), narrow the candidates inside
    the search (no post-filter; the original's over-fetch of ``max(4 * limit, 40)``
    is kept, as the engine's ranking depends on it). As in mem0, any of the three ids may
    be given alone (``agent_id`` alone: that agent's memories of the default user).

    A user's view holds the user's mood. With a state store on the engine the mood is
    persisted after every operation, so at most ``max_user_views`` views are kept
    (the least recently used idle one dropped); without one every view is kept, since
    the mood lives only there. Safe to call from several threads.

    Memories the original library's facade wrote (in the engine itself, tagged
    ``metadata["user_id"]``) move into their user's scope before that user's first
    call, ids, tags and links kept: a store it filled answers as before.
    """

    __slots__ = ("_adopt_lock", "_adopted", "_default_user_id", "_em", "_lock", "_max_views",
                 "_users", "_views")

    def __init__(
        self,
        em: EmotionalMemory,
        *,
        default_user_id: str = "default",
        max_user_views: int = MAX_USER_VIEWS,
    ) -> None:
        """Wrap an engine.

        Args:
            em: The engine (store, embedder, appraisal already configured).
            default_user_id: The user of calls that give none.
            max_user_views: users' views kept when ``em`` has a state store.

        Raises:
            TypeError: ``em`` is no synchronous engine (an ``AsyncEmotionalMemory``:
                pass its ``.engine``).
            ValueError: an empty ``default_user_id``, ``max_user_views`` < 1.
        """
        check_sync_engine(em, _ENGINE_METHODS)
        if not isinstance(default_user_id, str) or not default_user_id:
            raise ValueError("default_user_id must be a non-empty string")
        bound = positive_int("max_user_views", max_user_views)
        self._em = em
        self._default_user_id = default_user_id
        self._lock = threading.Lock()
        self._max_views = bound if em.state_store is not None else None
        # user -> [view, calls using it]; least recently used first
        self._views: OrderedDict[str, list[Any]] = OrderedDict()
        # every user served (names only), so that reset() reaches evicted users' moods
        self._users: dict[str, None] = {}
        # users whose memories written by the original's facade were moved to their scope
        self._adopted: set[str] = set()
        self._adopt_lock = threading.Lock()

    @property
    def em(self) -> EmotionalMemory:
        """The wrapped engine."""
        return self._em

    @contextmanager
    def _user(self, user_id: str | None) -> Iterator[EmotionalMemory]:
        """The engine view of a user while a call uses it (kept: it holds the mood).

        Raises:
            ValueError: an empty or invalid ``user_id`` (named).
        """
        user = self._user_name(user_id)
        if user not in self._adopted:
            self._adopt_original(user)
        with self._lock:
            entry = self._views.get(user)
            if entry is not None:
                entry[1] += 1  # in use: never dropped
                self._views.move_to_end(user)
        if entry is None:
            fresh = self._em.scoped(user)  # may read the state store: not under the lock
            with self._lock:
                entry = self._views.setdefault(user, [fresh, 0])
                entry[1] += 1
                self._views.move_to_end(user)
                self._users[user] = None
        try:
            yield entry[0]
        finally:
            with self._lock:
                entry[1] -= 1
                self._trim()

    def _adopt_original(self, user: str) -> None:
        """Move ``user``'s memories written by the original's facade into their scope.

        The original kept every user's memories in the engine itself, tagged
        ``metadata["user_id"]``; here a user is a scope. Once per user (and object),
        before the user's first call, the memories of the wrapped engine's own scope
        tagged with this user move into the user's scope, ids, tags and links kept, so
        a store the original filled answers each user with their memories alone. Links
        to another user's memories are dropped: the user's scope must not hold them
        (its view would show those ids; ``import_memories`` refuses them).

        Raises:
            ValueError: an invalid ``user_id`` for a scope (named), nothing moved.
        """
        with self._adopt_lock:
            if user in self._adopted:
                return
            target = (*self._em.scope, user)
            self._em.scoped(user)  # the user is a valid scope part, or a named error
            held = self._em.list_all(where={"user_id": user})
            ids = {m.id for m in held if m.scope == self._em.scope}
            if ids:
                exported = [r for r in self._em.export_memories(where={"user_id": user})
                            if r["id"] in ids]
                targets = {lk["target_id"] for r in exported
                           for lk in r["tag"]["resonance_links"]} - ids
                # what the user's scope already sees among them: one read, not one per link
                seen = ({m.id for m in self._em.scoped(user).list_all()} & targets
                        if targets else set())
                records = [_without_links_outside({**r, "scope": list(target)}, ids | seen)
                           for r in exported]
                self._em.import_memories(records, overwrite=True)
            self._adopted.add(user)

    def _user_name(self, user_id: object) -> str:
        """The user of a call (``default_user_id`` for None), checked.

        Raises:
            ValueError: an empty or invalid ``user_id`` (named).
        """
        user = self._default_user_id if user_id is None else user_id
        if not isinstance(user, str) or not user:
            raise ValueError(f"user_id must be a non-empty string, got {user!r}")
        return user

    def _trim(self) -> None:
        """Drop least recently used idle views beyond ``max_user_views`` (caller holds
        the lock; nothing is dropped without a state store)."""
        if self._max_views is None:
            return
        excess = len(self._views) - self._max_views
        for user in [u for u, (_, calls) in self._views.items() if calls == 0][:excess]:
            del self._views[user]

    @staticmethod
    def _where(
        agent_id: str | None, run_id: str | None, filters: Mapping[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """The ``where`` filter of these ids and ``filters`` (None: no condition).

        Raises:
            TypeError: an id that is not a string, ``filters`` that is not a dict.
            ValueError: an empty id.
        """
        _check_id("agent_id", agent_id)
        _check_id("run_id", run_id)
        clauses: list[dict[str, Any]] = []
        if filters is not None:
            if not isinstance(filters, Mapping):
                raise TypeError(f"filters must be a dict, got {type(filters).__name__}")
            if filters:
                clauses.append(_checked_filters(filters))
        if agent_id is not None:
            clauses.append({"agent_id": agent_id})
        if run_id is not None:
            clauses.append({"run_id": run_id})
        if not clauses:
            return None
        return clauses[0] if len(clauses) == 1 else {"$and": clauses}

    def add(
        self,
        messages: str | dict[str, Any] | list[dict[str, Any]],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        infer: bool = False,
    ) -> dict[str, Any]:
        """Store ``messages`` as one memory.

        Args:
            messages: A string, one mem0-style message dict or a list of them (see
                :func:`messages_to_content`).
            user_id: Owner (default: ``default_user_id``); wins over ``metadata``.
            agent_id: Optional agent scope, stored in metadata.
            run_id: Optional run scope, stored in metadata.
            metadata: Extra metadata stored with the memory (its ``"role"`` is kept;
                otherwise the first message's role, as in the original, is stored).
            infer: Accepted for mem0 compatibility; no fact extraction is done.

        Returns:
            ``{"results": [{"id", "memory", "event": "ADD"}]}``; ``results`` is empty
            when the messages hold no content.

        Raises:
            TypeError: ``messages``, ``metadata``, ``agent_id`` or ``run_id`` of the
                wrong type (named); nothing is stored.
            ValueError: an empty or non-string ``user_id``, an empty ``agent_id`` /
                ``run_id``, content the engine refuses (named ``messages[i].content``
                or ``messages``).
        """
        del infer
        self._user_name(user_id)  # checked even when there is nothing to store
        if metadata is not None and not isinstance(metadata, Mapping):
            raise TypeError(f"metadata must be a dict, got {type(metadata).__name__}")
        _check_id("agent_id", agent_id)
        _check_id("run_id", run_id)
        listed = messages if isinstance(messages, str) else _message_dicts(messages)
        content = messages_to_content(listed)
        if not content:
            return {"results": []}
        self._check_content(listed, content)
        meta: dict[str, Any] = dict(metadata or {})
        if isinstance(messages, list | Mapping) and not isinstance(listed, str) and listed:
            # as the original: the first message's role (even one without content), of
            # a list (a single message dict: the original failed on it)
            role = listed[0].get("role")
            if role:
                meta.setdefault("role", str(role))
        if agent_id is not None:
            meta["agent_id"] = agent_id
        if run_id is not None:
            meta["run_id"] = run_id
        with self._user(user_id) as view:
            meta["user_id"] = view.scope[-1]
            memory = view.encode(content, metadata=meta)
        return {"results": [{"id": memory.id, "memory": memory.content, "event": "ADD"}]}

    def _check_content(self, listed: str | list[Mapping[str, Any]], content: str) -> None:
        """Check what ``add`` stores as the engine would, naming the ``messages``
        argument: each message's content (``messages[i].content``), then the joined text
        (``messages``), so that an error points at what the caller passed.

        Raises:
            ValueError: over ``max_content_length``, or not valid Unicode text.
        """
        check = getattr(self._em, "check_content", None)  # a duck engine may lack it
        if not callable(check):
            return
        if not isinstance(listed, str):
            for i, message in enumerate(listed):
                text = message.get("content")
                if text:
                    check(str(text), f"messages[{i}].content")
        check(content, "messages")

    def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        limit: int = 10,
        filters: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Memories for ``query`` in this scope, best first.

        Retrieval runs in the user's scope, among the memories matching ``agent_id``,
        ``run_id`` and ``filters`` (the filter decides the candidates). As in the
        original, it fetches ``max(4 * limit, 40)`` memories (the engine's ranking of
        the first ``limit`` depends on how many it fetches) and answers the first
        ``limit``; the engine's side effects apply to all fetched, as there.

        Args:
            query: The query text.
            user_id: The user (default: ``default_user_id``).
            agent_id: Optional agent: only its memories.
            run_id: Optional run: only its memories.
            limit: Maximum number of results (>= 1).
            filters: Extra conditions in the ``where`` dialect (``{"key": value}``,
                ``{"key": {"$gte": 3}}``, ``$and`` / ``$or``).

        Returns:
            ``{"results": [{"id", "memory", "score", "metadata"}]}``.

        Raises:
            TypeError: ``limit`` not an int, ``filters`` not a dict, an id not a str.
            ValueError: When ``limit < 1`` or ``filters`` is malformed.
        """
        positive_int("limit", limit)
        where = self._where(agent_id, run_id, filters)
        with self._user(user_id) as view:
            found = view.retrieve_with_explanations(query, top_k=_fetch_k(limit), where=where)
        return {"results": [{**_item(e.memory), "score": float(e.score)} for e in found[:limit]]}

    def get(self, memory_id: str) -> dict[str, Any] | None:
        """One memory by id.

        Args:
            memory_id: The memory's id.

        Returns:
            ``{"id", "memory", "metadata"}``, or None when absent.
        """
        memory = self._em.get(memory_id)
        return None if memory is None else _item(memory)

    def get_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        filters: dict[str, Any] | None = None,
        limit: int = 100,
    ) -> dict[str, Any]:
        """This user's memories (matching the ids and ``filters`` given), oldest first.

        Args:
            user_id: The user (default: ``default_user_id``).
            agent_id: Optional agent.
            run_id: Optional run.
            filters: Extra conditions in the ``where`` dialect, as in :meth:`search`.
            limit: Maximum number of results (>= 1).

        Returns:
            ``{"results": [{"id", "memory", "metadata"}]}``.

        Raises:
            TypeError: ``limit`` not an int, ``filters`` not a dict, an id not a str.
            ValueError: When ``limit < 1`` or ``filters`` is malformed.
        """
        positive_int("limit", limit)
        where = self._where(agent_id, run_id, filters)
        with self._user(user_id) as view:
            chosen = view.list_all(where=where, limit=limit)
        return {"results": [_item(m) for m in chosen]}

    def update(self, memory_id: str, data: str) -> dict[str, Any]:
        """Replace a memory's text (re-embedded; its affective tag is kept).

        Args:
            memory_id: The memory's id.
            data: The new text.

        Returns:
            ``{"message": "Memory updated successfully!"}``.

        Raises:
            TypeError: ``data`` is not a string (the memory is left as it was).
            KeyError: When no memory has this id.
        """
        if not isinstance(data, str):
            raise TypeError(f"data must be a str, got {type(data).__name__}")
        self._em.update_memory(memory_id, content=data)
        return {"message": UPDATED_MESSAGE}

    def delete(self, memory_id: str) -> dict[str, Any]:
        """Delete one memory (absent ids are ignored, as in mem0).

        Args:
            memory_id: The memory's id.

        Returns:
            ``{"message": "Memory deleted successfully!"}``.
        """
        self._em.delete(memory_id)
        return {"message": DELETED_MESSAGE}

    def delete_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """Delete this user's memories (of ``agent_id`` / ``run_id`` when given).

        Args:
            user_id: The user (default: ``default_user_id``).
            agent_id: Optional agent.
            run_id: Optional run.

        Returns:
            ``{"message": "Memory deleted successfully!"}``.
        """
        where = self._where(agent_id, run_id)
        with self._user(user_id) as view:
            for memory in view.list_all(where=where):
                view.delete(memory.id)
        return {"message": DELETED_MESSAGE}

    def reset(self) -> None:
        """Delete every memory of every user and reset every affective state: the
        root's, and that of each user this object served or who held a memory (also
        users a previous process left in a persisted state store)."""
        memories = self._em.list_all()
        with self._lock:
            served = list(self._users)
        users = dict.fromkeys([*served, *(m.scope[0] for m in memories if m.scope)])
        for memory in memories:
            self._em.delete(memory.id)
        self._em.reset_state()
        for user in users:
            with self._user(user) as view:
                view.reset_state()

    def close(self) -> None:
        """Close the engine (and its stores)."""
        self._em.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(memories={len(self._em)}, "
            f"default_user_id={self._default_user_id!r})"
        )


def _without_links_outside(record: dict[str, Any], ids: set[str]) -> dict[str, Any]:
    """An export ``record`` keeping only its links to ``ids`` (the memories moving with
    it, and those the user's scope already sees)."""
    tag = record["tag"]
    links = [lk for lk in tag["resonance_links"] if lk["target_id"] in ids]
    return {**record, "tag": {**tag, "resonance_links": links}}

