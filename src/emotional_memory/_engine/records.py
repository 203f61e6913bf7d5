"""The memory records: get, delete, update, list, prune, export and import."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel

from emotional_memory._bank import as_float_list
from emotional_memory._engine.core import EngineCore
from emotional_memory._engine.locks import _synchronized
from emotional_memory._validation import (
    in_range,
    json_instant,
    json_metadata,
    non_negative_int,
    strict_finite,
)
from emotional_memory._validation import memory_id as check_id
from emotional_memory.decay import strength_from_columns
from emotional_memory.filters import parse_where
from emotional_memory.interfaces import EmbeddingDimensionError, UnstorableValueError
from emotional_memory.models import EmotionalTag, Memory
from emotional_memory.stores.base import Now, PagingStore
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
            The memory with this id, or None (also for a memory of another scope,
            or one that has expired).
        """
        return self._view().get(check_id(memory_id))

    @_synchronized
    def delete(self, memory_id: str) -> bool:
        """Delete a memory and every link pointing to it.

        Args:
            memory_id: The memory's id.

        Returns:
            True when it existed.
        """
        check_id(memory_id)
        view = self._view()
        with view.transaction():
            return self._delete_many([memory_id], view) == 1

    def _delete_many(self, memory_ids: Sequence[str], view: Any) -> int:
        """Delete inside a transaction and drop links that target the deleted ids.

        Links are usually paired, but a backward twin may have been refused (target
        full) or evicted, so one pass over the store finds every link to a deleted id.
        Only memories ``view`` sees are deleted; the links to them are dropped
        wherever they are held (no link may dangle).

        Args:
            memory_ids: the ids to delete.
            view: the store as this engine view sees it (:meth:`_view`).

        Returns:
            The number of memories deleted.
        """
        doomed = {mid for mid in memory_ids if view.get(mid) is not None}
        if not doomed:
            return 0
        store = self._columnar
        holders = store.memories([mid for mid in view.linking_to(doomed) if mid not in doomed])
        for memory in holders:
            links = memory.tag.resonance_links
            kept = [lk for lk in links if lk.target_id not in doomed]
            if len(kept) != len(links):
                store.update(memory.model_copy(
                    update={"tag": memory.tag.model_copy(update={"resonance_links": kept})}
                ))
        for mid in doomed:
            view.delete(mid)
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
        view = self._view()
        # checked and embedded before the transaction: the embedder (a remote one, or
        # an async one waiting for its event loop) never runs holding the store's lock
        updates = self._memory_updates(view, memory_id, content, tag, metadata, embedding)
        with view.transaction():  # the current row, changed in one transaction
            memory = view.get(memory_id)
            if memory is None:
                raise KeyError(memory_id)
            updated = memory.model_copy(update=updates)
            view.update(updated)
            return updated

    def _memory_updates(
        self,
        view: Any,
        memory_id: str,
        content: str | None,
        tag: EmotionalTag | None,
        metadata: dict[str, Any] | None,
        embedding: Sequence[float] | None,
    ) -> dict[str, Any]:
        """``update_memory``'s checked changes, a new content's embedding included
        (nothing written).

        Raises:
            KeyError: unknown id (checked first, as before anything is embedded).
        """
        if view.get(memory_id) is None:
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
        return updates

    @_synchronized
    def list_all(
        self, *, where: Any = None, limit: int | None = None, offset: int = 0
    ) -> list[Memory]:
        """All memories in insertion order (this view's, not expired), or one page.

        Args:
            where: optional filter (:mod:`emotional_memory.filters`).
            limit: at most this many (None: all of them).
            offset: skip this many first.

        Returns:
            The memories this view sees (that match ``where``), from ``offset`` on,
            at most ``limit``. A store with ``list_page(offset, limit)`` (the
            in-memory, SQLite and PostgreSQL stores) builds only the page's memories
            (PostgreSQL reads only its rows and the skipped ones, in SQL).

        Raises:
            ValueError: a malformed ``where``, a negative ``limit`` or ``offset``.
            TypeError: ``limit`` or ``offset`` not an int.
        """
        parsed = parse_where(where)
        if limit is not None:
            limit = non_negative_int("limit", limit)
        offset = non_negative_int("offset", offset)
        view = self._view(None, parsed)
        if limit is None and offset == 0:
            return view.list_all()
        if isinstance(view, PagingStore):
            stop = limit if limit is not None else len(view)
            return view.list_page(offset, stop)
        everything = view.list_all()
        return everything[offset:] if limit is None else everything[offset:offset + limit]

    @_synchronized
    def __len__(self) -> int:
        return len(self._view())

    @_synchronized
    @traced("emotional_memory.prune", threshold=("threshold", float))
    def prune(self, threshold: float = 0.05, *, where: Any = None) -> int:
        """Delete memories whose effective strength has fallen below ``threshold``,
        and every memory that has expired.

        Args:
            threshold: in [0, 1].
            where: optional filter: only memories matching it are considered.

        Returns:
            Number of memories removed.

        Raises:
            ValueError: ``threshold`` out of range, or a malformed ``where``.
        """
        threshold = in_range("threshold", strict_finite("threshold", threshold), 0.0, 1.0)
        parsed = parse_where(where)
        now = self._now()
        view = self._view(now, parsed)
        ids, cols = view.columns(now)  # the same float64 inputs, no objects
        doomed: list[str] = []
        if ids:
            strengths = strength_from_columns(
                np.asarray(cols.age_seconds), np.asarray(cols.affect)[:, 1],
                np.asarray(cols.consolidation), np.asarray(cols.retrieval_count),
                self.config.decay,
            )
            doomed = [
                mid for mid, s in zip(ids, strengths.tolist(), strict=True) if s < threshold
            ]
        expired = self._view(now, parsed, expired=True)
        gone = [m.id for m in expired.list_all()]
        if not doomed and not gone:
            return 0
        with view.transaction():
            return self._delete_many(doomed, view) + self._delete_many(gone, expired)

    @_synchronized
    def export_memories(self, *, where: Any = None) -> list[dict[str, Any]]:
        """All memories as JSON-able dicts (insertion order; this view's, not expired).

        Args:
            where: optional filter (:mod:`emotional_memory.filters`).

        Returns:
            One ``Memory.model_dump(mode="json")`` dict per memory; feed them to
            :meth:`import_memories`. Links to memories this view no longer sees
            (expired ones) are left out, as ``prune`` would drop them; with ``where``,
            links to the memories it leaves out are kept, so the export imports back
            into this store (into an engine holding none of them, import it after
            removing those links). An embedding
            holding NaN or inf (an embedder's, stored with a warning) is exported as
            ``null``: it scores as no embedding, and JSON cannot hold it.
        """
        parsed = parse_where(where)
        now = Now(self._now)  # one time for both reads, read only if expiry is checked
        memories = self._view(now, parsed).list_all()
        ids = {m.id for m in memories}
        outside = list(dict.fromkeys(
            lk.target_id for m in memories for lk in m.tag.resonance_links
            if lk.target_id not in ids
        ))
        if outside and parsed is not None:  # memories the filter left out are still seen
            ids.update(m.id for m in self._view(now).memories(outside))
        if outside:
            memories = [_links_within(m, ids) for m in memories]
        return [_exported(m) for m in memories]

    @_synchronized
    def import_memories(
        self, data: Iterable[dict[str, Any]], overwrite: bool = False, *, reembed: bool = False
    ) -> int:
        """Import memories exported by :meth:`export_memories`.

        Everything is validated before anything is written. Through a scoped view,
        records land in the view's scope: a record without a scope (or exported at
        the root) takes the view's path, one under the view's path keeps it, and one
        naming another scope is refused, as is an id held outside the view. A link
        must target a memory the record's own scope sees (its path or below it, as
        encode links), and an overwrite giving a memory another scope drops the links
        held to it by memories that no longer see it. An expired memory of this view
        with a record's id is pruned (as :meth:`prune` would) and the record written.

        Args:
            data: list (or other iterable, as the original took) of memory dicts.
            overwrite: replace memories whose id already exists (else skip them).
            reembed: give every record this engine's embedding of its content (one
                ``embed_batch`` call) instead of the one it carries: memories move to
                an embedder of another dimension (``reembed_store`` keeps it).

        Returns:
            Number of memories written.
        """
        if isinstance(data, Mapping | str | bytes | BaseModel) or not isinstance(data, Iterable):
            raise TypeError(f"data must be a list of memory dicts, got {type(data).__name__}")
        data = data if isinstance(data, Sequence) else list(data)  # a generator, as before
        for name, flag in (("overwrite", overwrite), ("reembed", reembed)):
            if not isinstance(flag, bool | np.bool_):  # "false" would be truthy
                raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
        memories = [self._import_item(i, item, bool(reembed)) for i, item in enumerate(data)]
        _check_unique_ids(memories)
        if reembed and memories:
            vectors = self._batch_vectors([m.content for m in memories], "data.content")
            memories = [
                m.model_copy(update={"embedding": None if v is None else v.tolist()})
                for m, v in zip(memories, vectors, strict=True)
            ]
        now = Now(self._now)  # one time for every read of the import
        view, expired = self._view(now), self._view(now, expired=True)
        ids = [mem.id for mem in memories]
        seen, _ = self._import_targets(ids, view, expired)  # refuses another view's memory
        self._check_import_links(memories, view, {} if overwrite else seen)
        written = 0
        with view.transaction():
            # read again inside the transaction (a durable store locks what it reads)
            seen, stale = self._import_targets(ids, view, expired)
            # and the link targets: another engine may have deleted or moved one since
            skipped = {} if overwrite else seen
            self._check_import_links(memories, view, skipped)
            # what a store without transactions would refuse half-way, of the records
            # written (the skipped ones as read here)
            self._check_import_embeddings(memories, skipped)
            self._check_import_storable(memories, skipped)
            self._delete_many(stale, expired)  # invisible, awaiting prune: pruned now
            for i, mem in enumerate(memories):
                exists = mem.id in seen
                if exists and not overwrite:
                    continue
                try:
                    if exists:
                        view.update(mem)
                    else:
                        view.save(mem)
                except UnstorableValueError as exc:
                    raise UnstorableValueError(exc.field, f"data[{i}]: {exc}", i) from None
                except EmbeddingDimensionError as exc:  # the store's own type, kept
                    raise type(exc)(f"data[{i}].embedding: {exc}") from None
                written += 1
            if overwrite:
                self._drop_links_out_of_sight(
                    {m.id: m.scope for m in memories if m.id in seen and seen[m.id] != m.scope},
                    set(ids),
                )
        return written

    def _drop_links_out_of_sight(
        self, moved: Mapping[str, tuple[str, ...]], imported: set[str]
    ) -> None:
        """Inside the import's transaction: drop the links that memories outside the
        import hold to ``moved`` ones (id: new scope) whose new scope they no longer
        see (each scope links only to what its view sees, see
        :meth:`_check_import_links`).
        """
        if not moved:
            return
        store = self._columnar
        holders = store.memories(
            [mid for mid in store.linking_to(moved) if mid not in imported]
        )
        for memory in holders:
            links = memory.tag.resonance_links
            depth = len(memory.scope)
            kept = [lk for lk in links if lk.target_id not in moved
                    or moved[lk.target_id][:depth] == memory.scope]
            if len(kept) != len(links):
                store.update(memory.model_copy(
                    update={"tag": memory.tag.model_copy(update={"resonance_links": kept})}
                ))

    def _import_targets(
        self, ids: Sequence[str], view: Any, expired: Any
    ) -> tuple[dict[str, tuple[str, ...]], list[str]]:
        """Which of an import's ids this view sees (id: its scope now), and which are
        this view's expired memories (one read of each, not one per memory).

        Raises:
            ValueError: an id held by a memory this view cannot write (another scope's).
        """
        held = {m.id for m in self._columnar.memories(ids)}
        seen = {m.id: m.scope for m in view.memories(ids)} if held else {}
        hidden = [(i, mid) for i, mid in enumerate(ids) if mid in held and mid not in seen]
        stale = {m.id for m in expired.memories([mid for _, mid in hidden])} if hidden else set()
        for i, mid in hidden:
            if mid not in stale:
                raise ValueError(
                    f"data[{i}].id {mid!r} belongs to a memory this view cannot write"
                )
        return seen, [mid for _, mid in hidden if mid in stale]

    def _import_item(self, i: int, item: object, reembed: bool = False) -> Memory:
        """One import payload entry, validated as ``encode`` validates its input
        (``reembed``: its embedding, to be replaced, is dropped unchecked)."""
        if not isinstance(item, dict | Memory):
            raise ValueError(f"data[{i}] must be a memory dict, got {type(item).__name__}")
        if isinstance(item, Memory):  # validated as its dict: it may have been built
            item = item.model_dump(warnings=False)  # without (model_copy, model_construct)
        if reembed:
            item = {**item, "embedding": None}
        try:
            mem = Memory.model_validate(item)  # unknown keys rejected at every level
        except ValueError as exc:
            raise ValueError(f"data[{i}]: {exc}") from exc
        except TypeError as exc:  # a field validator's, which pydantic does not wrap
            raise TypeError(f"data[{i}]: {exc}") from exc
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
        scope = self._scope
        if scope:
            if not mem.scope:
                updates["scope"] = scope
            elif mem.scope[: len(scope)] != scope:
                raise ValueError(
                    f"data[{i}].scope {list(mem.scope)!r} is outside this view's scope "
                    f"{list(scope)!r}"
                )
        return mem.model_copy(update=updates)

    def _check_import_embeddings(
        self, memories: Sequence[Memory], skipped: Mapping[str, Any]
    ) -> None:
        """Refuse, before any write, the embeddings a store without transactions (a
        vector database: ``writes_atomic = False``) would refuse half-way through the
        import: another dimension than the store's or the first written record's, or
        an empty one where the store refuses it. Stores with transactions roll back
        instead and raise their own errors, as before.

        Args:
            memories: the validated import, in order.
            skipped: ids of held memories the import leaves as they are (no
                ``overwrite``): their records are never written, so never refused.

        Raises:
            ValueError: naming ``data[i].embedding``.
        """
        store = self.store
        if getattr(store, "writes_atomic", True) and callable(getattr(store, "transaction", None)):
            return
        dim = getattr(store, "dim", None)
        want: tuple[int, str] | None = (dim, "the store holds") if isinstance(dim, int) else None
        for i, mem in enumerate(memories):
            if mem.embedding is None or mem.id in skipped:
                continue
            n = len(mem.embedding)
            if n == 0:
                if getattr(store, "refuses_empty_embedding", False):
                    raise ValueError(
                        f"data[{i}].embedding is empty, which this store refuses "
                        "(null stores the memory without an embedding)"
                    )
                continue
            if want is None:
                want = (n, f"data[{i}].embedding has")
            elif n != want[0]:
                raise ValueError(
                    f"data[{i}].embedding has dimension {n}, but {want[1]} dimension {want[0]}"
                )

    def _check_import_storable(
        self, memories: Sequence[Memory], skipped: Mapping[str, Any]
    ) -> None:
        """Refuse, before any write, a memory a store without transactions cannot hold
        (its ``check_storable``, e.g. Chroma's limit on metadata keys): the import
        would otherwise stop half-way. Stores with transactions roll back instead.
        Records of ``skipped`` ids (held, no ``overwrite``) are never written: not
        checked.

        Raises:
            UnstorableValueError: naming ``data[i]`` and the field.
        """
        store = self.store
        check = getattr(store, "check_storable", None)
        if not callable(check) or (
            getattr(store, "writes_atomic", True) and callable(getattr(store, "transaction", None))
        ):
            return
        for i, mem in enumerate(memories):
            if mem.id in skipped:
                continue
            try:
                check(mem)
            except UnstorableValueError as exc:
                raise UnstorableValueError(exc.field, f"data[{i}]: {exc}", i) from None

    def _check_import_links(
        self, memories: Sequence[Memory], view: Any, skipped: Mapping[str, tuple[str, ...]]
    ) -> None:
        """Every link of an import targets a memory of the import or of the store that
        the record's own scope sees (its path or below it, as encode links): a scope's
        view must never be shown another scope's memory through a link. ``skipped``:
        the held memories (id: scope) the import leaves as they are (no overwrite),
        whose records' scopes are not the ones the links will reach."""
        known = {m.id: m.scope for m in memories}
        known.update(skipped)
        outside = list(dict.fromkeys(
            link.target_id for mem in memories for link in mem.tag.resonance_links
            if link.target_id not in known
        ))
        # one read for all of them
        known.update((m.id, m.scope) for m in view.memories(outside) if m.id not in known)
        for i, mem in enumerate(memories):
            for j, link in enumerate(mem.tag.resonance_links):
                target = link.target_id
                where = f"data[{i}].tag.resonance_links[{j}].target_id {target!r}"
                if target not in known:
                    raise ValueError(f"{where} is neither in data nor in the store")
                if known[target][: len(mem.scope)] != mem.scope:
                    raise ValueError(
                        f"{where} is a memory of scope {list(known[target])!r}, outside "
                        f"the record's scope {list(mem.scope)!r}"
                    )


def _check_unique_ids(memories: Sequence[Memory]) -> None:
    """Refuse an import holding an id twice, naming both records.

    Raises:
        ValueError: ``data[j].id`` repeating ``data[i].id``.
    """
    first: dict[str, int] = {}
    for j, mem in enumerate(memories):
        i = first.setdefault(mem.id, j)
        if i != j:
            raise ValueError(
                f"data[{j}].id {mem.id!r} is also data[{i}].id: data holds the id more "
                "than once"
            )


def _json_exact(memory: Memory) -> Memory:
    """``memory`` with every datetime whose UTC offset has seconds as its instant in
    UTC (itself when there is none), so that its JSON dump holds the same instants."""
    tag = memory.tag
    mood = tag.mood_snapshot
    stamps: dict[str, Any] = {k: json_instant(getattr(tag, k))
                              for k in ("timestamp", "last_retrieved", "window_opened_at")}
    mood_time, expires = json_instant(mood.timestamp), json_instant(memory.expires_at)
    if (all(v is getattr(tag, k) for k, v in stamps.items()) and mood_time is mood.timestamp
            and expires is memory.expires_at):
        return memory
    if mood_time is not mood.timestamp:
        stamps["mood_snapshot"] = mood.model_copy(update={"timestamp": mood_time})
    return memory.model_copy(update={"tag": tag.model_copy(update=stamps),
                                     "expires_at": expires})


def _exported(memory: Memory) -> dict[str, Any]:
    """``memory`` as an export record: its JSON dump (every instant as stored, see
    :func:`_json_exact`), with a non-finite embedding as ``None`` (what
    ``import_memories`` takes and scores alike)."""
    data: dict[str, Any] = _json_exact(memory).model_dump(mode="json")
    embedding = data["embedding"]
    # a finite sum means finite values (the sum is the quick test, the values the sure one)
    if embedding and not math.isfinite(sum(embedding)) and not all(map(math.isfinite, embedding)):
        data["embedding"] = None
    return data


def _links_within(memory: Memory, ids: set[str]) -> Memory:
    """``memory`` without its links to targets outside ``ids`` (itself when none)."""
    links = memory.tag.resonance_links
    kept = [lk for lk in links if lk.target_id in ids]
    if len(kept) == len(links):
        return memory
    return memory.model_copy(
        update={"tag": memory.tag.model_copy(update={"resonance_links": kept})}
    )

