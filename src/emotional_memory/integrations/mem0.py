"""A facade with mem0's ``Memory`` API over :class:`~emotional_memory.engine.EmotionalMemory`.

Code written against mem0 (``add`` / ``search`` / ``get`` / ``get_all`` / ``update`` /
``delete`` / ``delete_all`` / ``reset``) can use emotional memory by swapping the object: the
results have mem0's dict shapes (``{"results": [...]}``). Memories are stored
verbatim (mem0's LLM fact extraction is not reproduced); each carries ``user_id`` (and
``agent_id`` / ``run_id`` when given) in its metadata, which scopes every call.

No dependency: the ``mem0`` extra is empty.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from emotional_memory.engine import EmotionalMemory
from emotional_memory.models import Memory

__all__ = [
    "DELETED_MESSAGE",
    "UPDATED_MESSAGE",
    "EmotionalMemoryMem0Backend",
    "messages_to_content",
]

DELETED_MESSAGE = "Memory deleted successfully!"
"""The ``message`` mem0 returns from ``delete`` and ``delete_all``."""

UPDATED_MESSAGE = "Memory updated successfully!"
"""The ``message`` mem0 returns from ``update``."""

_SEARCH_OVERFETCH = 4
_SEARCH_MIN_FETCH = 40


def messages_to_content(messages: str | Iterable[Mapping[str, Any]]) -> str:
    """One text from a mem0 ``messages`` argument.

    Args:
        messages: A string (returned unchanged) or mem0-style message dicts
            ``{"role": ..., "content": ...}``; dicts without content are skipped.

    Returns:
        The contents joined by newlines, each prefixed with ``"role: "`` when the
        message has a role.

    Raises:
        TypeError: When a message is not a mapping.
    """
    if isinstance(messages, str):
        return messages
    lines: list[str] = []
    for message in messages:
        if not isinstance(message, Mapping):
            raise TypeError(f"each message must be a dict, got {type(message).__name__}")
        content = message.get("content")
        if not content:
            continue
        role = message.get("role")
        lines.append(f"{role}: {content}" if role else str(content))
    return "\n".join(lines)


def _item(memory: Memory) -> dict[str, Any]:
    return {"id": memory.id, "memory": memory.content, "metadata": dict(memory.metadata)}


class EmotionalMemoryMem0Backend:
    """mem0's ``Memory`` interface backed by an :class:`EmotionalMemory`.

    Calls without ``user_id`` use ``default_user_id``.
    """

    __slots__ = ("_default_user_id", "_em")

    def __init__(self, em: EmotionalMemory, *, default_user_id: str = "default") -> None:
        """Wrap an engine.

        Args:
            em: The engine (store, embedder, appraisal already configured).
            default_user_id: The user of calls that give none.
        """
        self._em = em
        self._default_user_id = default_user_id

    @property
    def em(self) -> EmotionalMemory:
        """The wrapped engine."""
        return self._em

    def _scope(
        self, user_id: str | None, agent_id: str | None, run_id: str | None
    ) -> dict[str, Any]:
        scope: dict[str, Any] = {"user_id": self._default_user_id if user_id is None else user_id}
        if agent_id is not None:
            scope["agent_id"] = agent_id
        if run_id is not None:
            scope["run_id"] = run_id
        return scope

    @staticmethod
    def _matches(memory: Memory, conditions: Mapping[str, Any]) -> bool:
        meta = memory.metadata
        return all(k in meta and meta[k] == v for k, v in conditions.items())

    def add(
        self,
        messages: str | list[dict[str, Any]],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        infer: bool = False,
    ) -> dict[str, Any]:
        """Store ``messages`` as one memory.

        Args:
            messages: A string or mem0-style message dicts (see
                :func:`messages_to_content`).
            user_id: Owner (default: ``default_user_id``); wins over ``metadata``.
            agent_id: Optional agent scope, stored in metadata.
            run_id: Optional run scope, stored in metadata.
            metadata: Extra metadata stored with the memory.
            infer: Accepted for mem0 compatibility; no fact extraction is done.

        Returns:
            ``{"results": [{"id", "memory", "event": "ADD"}]}``; ``results`` is empty
            when the messages hold no content.
        """
        del infer
        content = messages_to_content(messages)
        if not content:
            return {"results": []}
        meta: dict[str, Any] = dict(metadata or {})
        if not isinstance(messages, str):
            roles = [m.get("role") for m in messages if m.get("content") and m.get("role")]
            if roles:
                meta.setdefault("role", str(roles[0]))
        meta.update(self._scope(user_id, agent_id, run_id))
        memory = self._em.encode(content, metadata=meta)
        return {"results": [{"id": memory.id, "memory": memory.content, "event": "ADD"}]}

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

        Retrieval runs over the whole store (``max(4 * limit, 40)`` candidates, with the
        engine's usual side effects), then keeps this scope's memories.

        Args:
            query: The query text.
            user_id: Scope (default: ``default_user_id``).
            agent_id: Optional agent scope.
            run_id: Optional run scope.
            limit: Maximum number of results (>= 1).
            filters: Extra metadata equality conditions (``{"key": value}``).

        Returns:
            ``{"results": [{"id", "memory", "score", "metadata"}]}``.

        Raises:
            ValueError: When ``limit < 1``.
        """
        if limit < 1:
            raise ValueError("limit must be >= 1")
        conditions = {**(filters or {}), **self._scope(user_id, agent_id, run_id)}
        fetch = max(limit * _SEARCH_OVERFETCH, _SEARCH_MIN_FETCH)
        results: list[dict[str, Any]] = []
        for explanation in self._em.retrieve_with_explanations(query, top_k=fetch):
            memory = explanation.memory
            if not self._matches(memory, conditions):
                continue
            results.append({**_item(memory), "score": float(explanation.score)})
            if len(results) == limit:
                break
        return {"results": results}

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
        limit: int = 100,
    ) -> dict[str, Any]:
        """This scope's memories, oldest first.

        Args:
            user_id: Scope (default: ``default_user_id``).
            agent_id: Optional agent scope.
            run_id: Optional run scope.
            limit: Maximum number of results.

        Returns:
            ``{"results": [{"id", "memory", "metadata"}]}``.
        """
        conditions = self._scope(user_id, agent_id, run_id)
        chosen = [m for m in self._em.list_all() if self._matches(m, conditions)]
        return {"results": [_item(m) for m in chosen[: max(0, limit)]]}

    def update(self, memory_id: str, data: str) -> dict[str, Any]:
        """Replace a memory's text (re-embedded; its affective tag is kept).

        Args:
            memory_id: The memory's id.
            data: The new text.

        Returns:
            ``{"message": "Memory updated successfully!"}``.

        Raises:
            KeyError: When no memory has this id.
        """
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
        """Delete this scope's memories.

        Args:
            user_id: Scope (default: ``default_user_id``).
            agent_id: Optional agent scope.
            run_id: Optional run scope.

        Returns:
            ``{"message": "Memory deleted successfully!"}``.
        """
        conditions = self._scope(user_id, agent_id, run_id)
        for memory in [m for m in self._em.list_all() if self._matches(m, conditions)]:
            self._em.delete(memory.id)
        return {"message": DELETED_MESSAGE}

    def reset(self) -> None:
        """Delete every memory of every user and reset the affective state."""
        for memory in self._em.list_all():
            self._em.delete(memory.id)
        self._em.reset_state()

    def close(self) -> None:
        """Close the engine (and its stores)."""
        self._em.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(memories={len(self._em.list_all())}, "
            f"default_user_id={self._default_user_id!r})"
        )
