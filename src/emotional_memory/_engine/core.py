"""The base every part of the engine builds on: attributes and input checks."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import numpy as np

from emotional_memory._engine.config import EmotionalMemoryConfig
from emotional_memory._scope_locks import ScopeLocks
from emotional_memory._validation import aware, in_utc, json_metadata, real_dtype
from emotional_memory._warn import warn_caller
from emotional_memory.filters import Where
from emotional_memory.interfaces import (
    AffectiveStateStore,
    AppraisalEngine,
    Embedder,
    MemoryStore,
)
from emotional_memory.query_classifier import HeuristicQueryClassifier, QueryClassifier
from emotional_memory.state import AffectiveState
from emotional_memory.stores.columnar import ColumnarStore, columnar
from emotional_memory.stores.selection import Now, Selection, select
from emotional_memory.telemetry import traced_span

Clock = Callable[[], datetime]


class EngineCore:
    """What every part of the engine shares: its attributes and its input checks.

    The attributes are set by the constructor of
    :class:`~emotional_memory.engine.EmotionalMemory`; the other parts (state,
    encoding, ranking, effects, records) are mixins on this class.
    """

    store: MemoryStore
    embedder: Embedder
    appraisal_engine: AppraisalEngine | None
    # The text rater of ``affect_from_text`` (an AffectRater), or None.
    affect_from_text: Any = None
    config: EmotionalMemoryConfig
    state_store: AffectiveStateStore | None
    query_classifier: QueryClassifier | None
    _scope_locks: ScopeLocks
    _clock: Clock
    _heuristic: HeuristicQueryClassifier
    _state: AffectiveState
    # The scope path of this engine view; () for the root engine.
    _scope: tuple[str, ...] = ()
    _root_state_store: AffectiveStateStore | None

    @property
    def _columnar(self) -> ColumnarStore:
        """The store as the engine reads and writes it (:mod:`~emotional_memory.stores.
        columnar`): the store itself, or its adapter, chosen once per store object."""
        cached: tuple[MemoryStore, ColumnarStore] | None = self.__dict__.get("_columnar_of")
        if cached is None or cached[0] is not self.store:
            cached = (self.store, columnar(self.store))
            self.__dict__["_columnar_of"] = cached
        return cached[1]

    @property
    def scope(self) -> tuple[str, ...]:
        """This view's scope path (``()`` for the root engine, which sees everything)."""
        return self._scope

    def _view(
        self,
        now: datetime | Callable[[], datetime] | None = None,
        where: Where | None = None,
        *,
        expired: bool = False,
        expiring: bool = False,
    ) -> ColumnarStore:
        """The store as this view sees it in one operation: its scope, ``where`` and
        expiry at ``now`` (see :mod:`emotional_memory.stores.selection`).

        Args:
            now: the operation's time (or a callable giving it); None reads the
                clock only if expiry must be checked (a store holding no expiring
                memory never needs it).
            where: a parsed filter (:func:`~emotional_memory.filters.parse_where`).
            expired: see the expired memories instead (``prune``).
            expiring: the operation writes memories with an expiry (see
                :class:`~emotional_memory.stores.base.Selection`).

        Returns:
            The confined columnar store (the store itself when nothing is confined).
        """
        selection = Selection(
            self._scope, where, Now(now if now is not None else self._now), expired, expiring
        )
        out: ColumnarStore = select(self._columnar, self.store, selection)
        return out

    # ------------------------------------------------------------------ helpers

    def _now(self) -> datetime:
        """The clock's reading in UTC (a zone's datetimes subtract and compare by wall
        time when they share a tzinfo, wrong across a DST fold).

        In an operation on a shared state (``shared_state``), never before the stored
        state's latest time: a worker whose clock is behind another's must not stamp
        the state back in time (the next reader's mood decay would count time that
        never passed).

        Raises:
            ValueError: a naive reading, or one outside the years 1..9999 in UTC.
        """
        now = in_utc("clock()", aware("clock()", self._clock()))
        floor: datetime | None = self.__dict__.get("_time_floor")
        return floor if floor is not None and floor > now else now

    def check_content(self, content: object, field: str = "content") -> str:
        """Check a memory's content as ``encode`` does, storing nothing (integrations
        check a whole batch before writing any of it).

        Args:
            content: the text to check.
            field: the name errors give it.

        Returns:
            ``content``, unchanged.

        Raises:
            TypeError: ``content`` is not a ``str``.
            ValueError: over ``max_content_length``, or not valid Unicode text.
        """
        return self._check_content(content, field)

    def _check_content(self, content: object, field: str = "content") -> str:
        if not isinstance(content, str):
            raise TypeError(f"{field} must be a str, got {type(content).__name__}")
        limit = self.config.max_content_length
        if limit is not None and len(content) > limit:
            raise ValueError(f"{field} is {len(content)} characters, over max_content_length "
                             f"{limit}")
        if not content.isascii():
            try:  # a lone surrogate cannot be stored as UTF-8 (SQLite, JSON export)
                content.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(
                    f"{field} is not valid Unicode text at index {exc.start}: {exc.reason}"
                ) from None
        return content

    @staticmethod
    def _check_metadata(metadata: object, field: str = "metadata") -> dict[str, Any] | None:
        """Validated private copy of a caller's metadata (JSON data, bounded depth)."""
        return None if metadata is None else json_metadata(field, metadata)

    @staticmethod
    def _clean_embedding(raw: object, what: str) -> list[float] | None:
        """Validate an embedder's output; NaN is warned about, not fatal (docs/behaviour.md §9)."""
        arr = EngineCore._embedding_array(raw, what)
        return None if arr is None else arr.tolist()

    @staticmethod
    def _embedding_array(raw: object, what: str) -> np.ndarray | None:
        """:meth:`_clean_embedding` as a float64 (D,) array (a query's, used as is)."""
        if raw is None:
            return None
        arr = np.asarray(raw)
        if arr.ndim != 1:
            raise ValueError(f"embedder returned a non 1-D embedding for {what}: {arr.shape}")
        if arr.size == 0:
            raise ValueError(f"embedder returned an empty embedding for {what}")
        if not real_dtype(arr.dtype):
            raise TypeError(_non_numeric(raw, what))
        # a list of floats already became a new float64 array: no second copy
        if not (isinstance(raw, list) and arr.dtype == np.float64):
            arr = arr.astype(np.float64)
        if not np.isfinite(arr).all():
            warn_caller(
                f"embedder returned NaN/inf values for {what}; its semantic similarity "
                "will count as 0"
            )
        return arr

    def _batch_vectors(
        self, texts: list[str], what: str = "contents"
    ) -> list[np.ndarray | None]:
        """The texts' embeddings in one ``embed_batch`` call, checked as float64
        vectors (None: no embedding); ``what[i]`` names text ``i`` in messages."""
        batch = getattr(self.embedder, "embed_batch", None)
        # Embedders with only ``embed`` still work (one call per text).
        with traced_span("emotional_memory.embed", {"count": len(texts)}):
            raw = batch(texts) if callable(batch) else [self.embedder.embed(t) for t in texts]
        if len(raw) != len(texts):
            raise ValueError(f"embedder returned {len(raw)} embeddings for {len(texts)} texts")
        # Each raw vector is dropped once cleaned: one copy of the batch at a time.
        # Cleaned as float64 vectors (what _clean_embedding checks, before anything is
        # stored); a memory's list is made from its vector when it is prepared, and
        # the store writes the row from the vector itself (no second conversion).
        pending: list[Any] = list(raw)
        del raw
        vectors: list[np.ndarray | None] = []
        for i in range(len(pending)):
            vectors.append(self._embedding_array(pending[i], f"{what}[{i}]"))
            pending[i] = None
        return vectors


def _non_numeric(raw: object, what: str) -> str:
    """The message for an embedder output that is not numbers: names the first bad value."""
    items = raw.tolist() if isinstance(raw, np.ndarray) else raw
    if isinstance(items, list | tuple):
        for i, item in enumerate(items):
            if isinstance(item, bool) or not isinstance(item, int | float | np.number):
                return (f"embedder returned non-numeric values for {what}: element {i} is "
                        f"{item!r} ({type(item).__name__})")
    return f"embedder returned non-numeric values for {what}: {type(raw).__name__}"
