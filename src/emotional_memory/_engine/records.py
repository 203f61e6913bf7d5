"""The memory records: get, delete, update, list, prune, export and import."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from emotional_memory._bank import as_float_list
from emotional_memory._engine.core import EngineCore
from emotional_memory._engine.locks import _synchronized
from emotional_memory._validation import in_range, json_metadata, strict_finite
from emotional_memory._validation import memory_id as check_id
from emotional_memory.decay import strength_from_columns
from emotional_memory.models import EmotionalTag, Memory
from emotional_memory.telemetry import traced


class RecordsMixin(EngineCore):
    """Reading, changing and removing stored memories (links kept consistent)."""

    # ------------------------------------------------------------------ store access

    @_synchronized
    def get(self, memory_id: str) -> Memory | None:
        """Look a memory up by id.

        Args:
            memory_id: The memory's id.

        Returns:
            The memory with this id, or None.
        """
        return self.store.get(check_id(memory_id))

    @_synchronized
    def delete(self, memory_id: str) -> bool:
        """Delete a memory and every link pointing to it.

        Args:
            memory_id: The memory's id.

        Returns:
            True when it existed.
        """
        check_id(memory_id)
        with self._columnar.transaction():
            return self._delete_many([memory_id]) == 1

    def _delete_many(self, memory_ids: Sequence[str]) -> int:
        """Delete inside a transaction and drop links that target the deleted ids.

        Links are usually paired, but a backward twin may have been refused (target
        full) or evicted, so one pass over the store finds every link to a deleted id.
        Returns the number of memories deleted.
        """
        doomed = {mid for mid in memory_ids if self.store.get(mid) is not None}
        if not doomed:
            return 0
        store = self._columnar
        holders = store.memories([mid for mid in store.linking_to(doomed) if mid not in doomed])
        for memory in holders:
            links = memory.tag.resonance_links
            kept = [lk for lk in links if lk.target_id not in doomed]
            if len(kept) != len(links):
                self.store.update(memory.model_copy(
                    update={"tag": memory.tag.model_copy(update={"resonance_links": kept})}
                ))
        for mid in doomed:
            self.store.delete(mid)
        return len(doomed)

    @_synchronized
    def update_memory(
        self,
        memory_id: str,
        *,
        content: str | None = None,
        tag: EmotionalTag | None = None,
        metadata: dict[str, Any] | None = None,
        embedding: Sequence[float] | None = None,
    ) -> Memory:
        """Change a memory's content, tag, metadata or embedding.

        A new content is re-embedded unless ``embedding`` is given.

        Args:
            memory_id: The memory's id.
            content: New text (``None`` keeps the old one).
            tag: New :class:`EmotionalTag` (``None`` keeps the old one).
            metadata: New metadata, replacing the old dict (``None`` keeps it).
            embedding: New embedding, shape (D,) (``None`` keeps it, or re-embeds a
                new ``content``).

        Returns:
            The updated memory.

        Raises:
            KeyError: unknown id.
            TypeError: bad content/metadata/embedding type.
            ValueError: bad content length or embedding values.
        """
        with self._columnar.transaction():  # the current row, changed in one transaction
            return self._update_memory(memory_id, content, tag, metadata, embedding)

    def _update_memory(
        self,
        memory_id: str,
        content: str | None,
        tag: EmotionalTag | None,
        metadata: dict[str, Any] | None,
        embedding: Sequence[float] | None,
    ) -> Memory:
        memory = self.store.get(memory_id)
        if memory is None:
            raise KeyError(memory_id)
        updates: dict[str, Any] = {}
        if content is not None:
            updates["content"] = self._check_content(content)
        if tag is not None:
            if not isinstance(tag, EmotionalTag):
                raise TypeError(f"tag must be an EmotionalTag or None, got {type(tag).__name__}")
            updates["tag"] = tag
        if metadata is not None:
            updates["metadata"] = dict(self._check_metadata(metadata) or {})
        if embedding is not None:
            updates["embedding"] = as_float_list("embedding", embedding)
        elif content is not None:
            updates["embedding"] = self._clean_embedding(self.embedder.embed(content), "content")
        updated = memory.model_copy(update=updates)
        self.store.update(updated)
        return updated

    @_synchronized
    def list_all(self) -> list[Memory]:
        """All memories in insertion order.

        Returns:
            A list of every stored memory.
        """
        return self.store.list_all()

    @_synchronized
    def __len__(self) -> int:
        return len(self.store)

    @_synchronized
    @traced("emotional_memory.prune", threshold=("threshold", float))
    def prune(self, threshold: float = 0.05) -> int:
        """Delete memories whose effective strength has fallen below ``threshold``.

        Args:
            threshold: in [0, 1].

        Returns:
            Number of memories removed.
        """
        threshold = in_range("threshold", strict_finite("threshold", threshold), 0.0, 1.0)
        now = self._now()
        ids, cols = self._columnar.columns(now)  # the same float64 inputs, no objects
        if not ids:
            return 0
        strengths = strength_from_columns(
            np.asarray(cols.age_seconds), np.asarray(cols.affect)[:, 1],
            np.asarray(cols.consolidation), np.asarray(cols.retrieval_count), self.config.decay,
        )
        doomed = [mid for mid, s in zip(ids, strengths.tolist(), strict=True) if s < threshold]
        with self._columnar.transaction():
            return self._delete_many(doomed)

    @_synchronized
    def export_memories(self) -> list[dict[str, Any]]:
        """All memories as JSON-able dicts (insertion order).

        Returns:
            One ``Memory.model_dump(mode="json")`` dict per memory; feed them to
            :meth:`import_memories`.
        """
        return [m.model_dump(mode="json") for m in self.store.list_all()]

    @_synchronized
    def import_memories(self, data: Sequence[dict[str, Any]], overwrite: bool = False) -> int:
        """Import memories exported by :meth:`export_memories`.

        Everything is validated before anything is written.

        Args:
            data: list of memory dicts.
            overwrite: replace memories whose id already exists (else skip them).

        Returns:
            Number of memories written.
        """
        if isinstance(data, dict | str) or not isinstance(data, Sequence):
            raise TypeError(f"data must be a list of memory dicts, got {type(data).__name__}")
        memories = [self._import_item(i, item) for i, item in enumerate(data)]
        self._check_import_links(memories)
        written = 0
        with self._columnar.transaction():
            for mem in memories:
                exists = self.store.get(mem.id) is not None
                if exists and not overwrite:
                    continue
                if exists:
                    self.store.update(mem)
                else:
                    self.store.save(mem)
                written += 1
        return written

    def _import_item(self, i: int, item: object) -> Memory:
        """One import payload entry, validated as ``encode`` validates its input."""
        if not isinstance(item, dict | Memory):
            raise ValueError(f"data[{i}] must be a memory dict, got {type(item).__name__}")
        try:
            mem = Memory.model_validate(item)  # unknown keys rejected at every level
        except ValueError as exc:
            raise ValueError(f"data[{i}]: {exc}") from exc
        if not mem.id:
            raise ValueError(f"data[{i}].id must be a non-empty string")
        self._check_content(mem.content, f"data[{i}].content")
        updates: dict[str, Any] = {"metadata": json_metadata(f"data[{i}].metadata", mem.metadata)}
        if mem.embedding is not None:
            updates["embedding"] = as_float_list(f"data[{i}].embedding", mem.embedding)
        for j, link in enumerate(mem.tag.resonance_links):
            if link.source_id != mem.id:
                raise ValueError(
                    f"data[{i}].tag.resonance_links[{j}].source_id is {link.source_id!r}, "
                    f"not the memory's id {mem.id!r}"
                )
        return mem.model_copy(update=updates)

    def _check_import_links(self, memories: Sequence[Memory]) -> None:
        """Every link of an import targets a memory of the import or of the store."""
        ids = [m.id for m in memories]
        if len(set(ids)) != len(ids):
            dup = next(mid for mid in ids if ids.count(mid) > 1)
            raise ValueError(f"data holds the id {dup!r} more than once")
        known = set(ids)
        for i, mem in enumerate(memories):
            for j, link in enumerate(mem.tag.resonance_links):
                target = link.target_id
                if target not in known and self.store.get(target) is None:
                    raise ValueError(
                        f"data[{i}].tag.resonance_links[{j}].target_id {target!r} is neither "
                        "in data nor in the store"
                    )
