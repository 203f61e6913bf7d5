"""Re-embed every memory of a store with another embedder, resumably.

Vectors of two embedders cannot be compared, so changing the embedder (a fitted
MiniLM, MiniLM instead of the hashing embedder) means embedding every stored memory
again. :func:`reembed_store` does it in batches, each batch's vectors written in one
store transaction. On a store that keeps settings (SQLite, PostgreSQL) the progress is
recorded in the same transaction (settings key ``reembedding``): while it is there no
engine opens the store (:class:`~emotional_memory.embedder_identity.
ReembedInProgressError`), an interrupted run resumes where it stopped, and the last
batch records the new embedder's identity. Resonance links are kept as they are (they
were drawn with the old vectors). A store with cursors (``list_after``: in-memory,
SQLite, PostgreSQL) is walked by cursor, each batch read in O(its size) however far
into the store it lies; the progress record keeps the cursor (``after``) beside the
count (``done``; a record with the count alone, of an earlier version, still resumes).

Run it with no engine or server open on the store: memories written meanwhile by an
engine opened before the start would be embedded by the old embedder. A run that
ends with another count of memories than it began with does not record the new
embedder: its progress restarts at 0 and it says so (an equal number added and
deleted goes unnoticed).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from emotional_memory._progress import progress_counter
from emotional_memory.embedder_identity import (
    EMBEDDER_SETTING,
    REEMBED_SETTING,
    embedder_identity,
    recorded_embedder,
)
from emotional_memory.models import Memory
from emotional_memory.stores.base import (
    KeysetPagingStore,
    PagingStore,
    Selection,
    SettingsStore,
)

__all__ = ["ReembedReport", "reembed_store"]


@dataclass(frozen=True)
class ReembedReport:
    """What :func:`reembed_store` did.

    Attributes:
        memories: memories in the store.
        reembedded: memories given a new vector by this call (memories without an
            embedding are left without one).
        resumed_from: the position an interrupted run had reached (0: a fresh run).
        previous: the embedder identity recorded before (None: none recorded).
        current: the identity recorded now (None: the store keeps no settings or the
            embedder has no identity).
    """

    memories: int
    reembedded: int
    resumed_from: int
    previous: str | None
    current: str | None


def _check_batch_size(batch_size: object) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    return batch_size


def _check_whole_store(store: object) -> None:
    """Refuse an engine (or an engine view) and a store's confined view: the store
    records one embedder for all its memories, so only the whole store is re-embedded.

    Raises:
        TypeError: naming what to pass instead.
    """
    from emotional_memory.async_engine import AsyncEmotionalMemory
    from emotional_memory.engine import EmotionalMemory

    if isinstance(store, EmotionalMemory | AsyncEmotionalMemory):
        raise TypeError(
            f"reembed_store re-embeds a whole store: pass the engine's store "
            f"(engine.store), not the {type(store).__name__} itself"
        )
    if isinstance(getattr(store, "selection", None), Selection):
        raise TypeError(
            "reembed_store re-embeds a whole store, not a view confined to a scope or "
            "filter (the store records one embedder for all its memories): pass the store"
        )


def _transaction(store: Any) -> Any:
    """The store's all-or-nothing block, or none for a store without transactions."""
    begin = getattr(store, "transaction", None)
    return begin() if callable(begin) else nullcontext()


def _batches(store: Any, done: int, after: int | None, size: int,
             everything: list[Memory] | None) -> Iterator[tuple[list[Memory], int | None]]:
    """The batches left after the first ``done`` memories, each with the cursor after
    it (None where the store has no cursors).

    A store with ``list_after`` is walked from the cursor ``after`` (from the first
    ``done`` memories skipped once when None: a record of a version that counted
    memories only), each page O(its size); else pages by offset (``list_page``) or
    slices of ``everything`` (the store's ``list_all``: a store without either).
    """
    if isinstance(store, KeysetPagingStore):
        if after is None:
            skipped = 0
            while skipped < done:
                page, after = store.list_after(after, min(size, done - skipped))
                if not page:
                    return
                skipped += len(page)
        while True:
            page, after = store.list_after(after, size)
            if not page:
                return
            yield page, after
    offset = done
    while True:
        page = store.list_page(offset, size) if everything is None else everything[
            offset:offset + size]
        if not page:
            return
        offset += len(page)
        yield page, None


def _start(store: Any, target: str | None) -> tuple[int, int | None, str | None, str | None]:
    """The memories done, the cursor after them (None: from the count), the identity
    recorded before the first run and the progress record read (None: none)."""
    if not isinstance(store, SettingsStore):
        return 0, None, None, None
    raw = store.setting(REEMBED_SETTING)
    if raw is None:
        return 0, None, recorded_embedder(store), None
    try:
        progress = json.loads(raw)
        done, after = progress["done"], progress.get("after")
        if not isinstance(progress, dict) or type(done) is not int or done < 0:
            raise TypeError
        if after is not None and (type(after) is not int or after < 0):
            raise TypeError
    except (ValueError, TypeError, KeyError, AttributeError):
        raise ValueError(
            f"store setting {REEMBED_SETTING!r}: not a re-embedding progress record "
            "(a JSON object with a non-negative integer 'done' and an 'after' cursor, "
            "a non-negative integer or null); remove it to start over"
        ) from None
    if progress.get("to") != target:
        raise ValueError(
            f"embedder: this store's unfinished re-embedding is to {progress.get('to')!r}, "
            f"not {target!r}; resume it with that embedder"
        )
    return done, after, progress.get("from"), raw


def _check_unchanged(store: Any, expected: str | None) -> None:
    """Inside a batch's transaction: refuse to go on when the progress record is not
    the one this run read or last wrote (another run of this store wrote it since).

    Raises:
        ValueError: naming the other run's record; this batch is then undone.
    """
    found = store.setting(REEMBED_SETTING)
    if found != expected:
        raise ValueError(
            f"another re-embedding of this store ran meanwhile (its progress: {found}); "
            "this one stopped, its last batch undone: run one re-embedding at a time"
        )


def _finish(store: Any, expected: str | None, previous: str | None, target: str | None,
            total: int) -> None:
    """The last transaction: record ``target`` and drop the progress record, unless
    memories were added or deleted since the run counted ``total`` (an engine or
    server open on the store meanwhile): then the progress restarts at 0, the store
    stays refused to engines, and a ValueError says to stop them and run again.

    Raises:
        ValueError: another run's record (see :func:`_check_unchanged`), or the count
            changed.
    """
    with _transaction(store):
        _check_unchanged(store, expected)
        now = len(store)
        if now == total:
            store.replace_setting(EMBEDDER_SETTING, target)
            store.replace_setting(REEMBED_SETTING, None)
            return
        store.replace_setting(REEMBED_SETTING, json.dumps(
            {"from": previous, "to": target, "done": 0, "after": None, "of": now}))
    raise ValueError(
        f"the store held {total} memories when re-embedding began and {now} at its end: "
        "an engine or server wrote to it meanwhile, with the old embedder; stop every "
        "engine and server on the store and run again (it starts over; the store stays "
        "refused to engines until then)"
    )


def _not_iterable(raw: object) -> bool:
    return raw is None or isinstance(raw, str | bytes) or not hasattr(raw, "__iter__")


def _vector(raw: object, memory: Memory) -> list[float]:
    """``raw`` as a list of finite floats, or a TypeError / ValueError naming the memory."""
    arr = np.asarray(None if _not_iterable(raw) else list(raw))  # type: ignore[call-overload]
    if arr.ndim != 1 or arr.dtype.kind not in "iuf":
        raise TypeError(
            f"embedder: the vector for memory {memory.id!r} is not a 1-D sequence of "
            f"numbers ({type(raw).__name__})"
        )
    vector = arr.astype(np.float64)
    if not np.isfinite(vector).all():
        raise ValueError(f"embedder: the vector for memory {memory.id!r} holds NaN or inf")
    out: list[float] = vector.tolist()
    return out


def _new_vectors(embedder: Any, batch: list[Memory]) -> list[list[float]]:
    """The batch's vectors (one per memory with an embedding), checked: finite numbers
    of the stored dimension."""
    embedded = [m for m in batch if m.embedding]
    raw = embedder.embed_batch([m.content for m in embedded])
    if _not_iterable(raw):
        raise TypeError(
            f"embedder: embed_batch must return a sequence of vectors, got {type(raw).__name__}"
        )
    rows = list(raw)
    if len(rows) != len(embedded):
        raise ValueError(
            f"embedder: embed_batch returned {len(rows)} vectors for {len(embedded)} texts"
        )
    vectors = [_vector(v, m) for v, m in zip(rows, embedded, strict=True)]
    for memory, vector in zip(embedded, vectors, strict=True):
        assert memory.embedding is not None
        if len(vector) != len(memory.embedding):
            raise ValueError(
                f"embedder: its vectors have {len(vector)} dimensions, the store's "
                f"{len(memory.embedding)}; re-embedding keeps the dimension (export the "
                "memories and import them into a new store with an engine of the new "
                "embedder: import_memories(data, reembed=True))"
            )
    return vectors


def reembed_store(
    store: Any, embedder: Any, *, batch_size: int = 256, progress: bool = True
) -> ReembedReport:
    """Embed every memory of ``store`` again with ``embedder`` (resumable).

    Args:
        store: a memory store (the root store, not a view); resumable and guarded
            where it keeps settings (SQLite, PostgreSQL).
        embedder: the new embedder (``embed_batch(texts)``; the same dimension as the
            stored vectors).
        batch_size: memories embedded and written per transaction.
        progress: show a progress bar (tqdm, on stderr) counting memories, from
            where a resumed run starts; none when nothing is left to re-embed.

    Returns:
        A :class:`ReembedReport`.

    Raises:
        TypeError: ``store`` is an engine (or an engine's scoped view) or a store's
            confined view, not the store; ``progress`` is not a bool.
        ValueError: ``batch_size`` is not a positive int; the embedder's dimension
            differs from the stored vectors'; an unfinished re-embedding of this store
            is to another embedder; another re-embedding of the store wrote its
            progress since this one read or wrote it (nothing of the failing batch
            is written); memories were added or deleted during the run (it then
            starts over when run again).
    """
    batch_size = _check_batch_size(batch_size)
    if not isinstance(progress, bool):
        raise TypeError(f"progress must be a bool, got {type(progress).__name__}")
    _check_whole_store(store)
    target = embedder_identity(embedder)
    start, after, previous, expected = _start(store, target)
    settings = isinstance(store, SettingsStore)
    keyset = isinstance(store, KeysetPagingStore)
    everything = None if keyset or isinstance(store, PagingStore) else list(store.list_all())
    total = len(everything) if everything is not None else len(store)
    done, reembedded = start, 0
    bar = progress_counter("re-embedding", total, initial=start, unit="memory",
                           enabled=progress)
    try:
        for batch, cursor in _batches(store, start, after, batch_size, everything):
            vectors = iter(_new_vectors(embedder, batch))
            with _transaction(store):
                if settings:
                    _check_unchanged(store, expected)
                for memory in batch:
                    if memory.embedding:
                        store.update(memory.model_copy(update={"embedding": next(vectors)}))
                        reembedded += 1
                done += len(batch)
                if settings:
                    expected = json.dumps({"from": previous, "to": target, "done": done,
                                           "after": cursor, "of": total})
                    store.replace_setting(REEMBED_SETTING, expected)
            bar.update(len(batch))
    finally:
        bar.close()
    if settings:
        _finish(store, expected, previous, target, total)
    return ReembedReport(
        memories=total, reembedded=reembedded, resumed_from=start, previous=previous,
        current=target if settings else None,
    )
