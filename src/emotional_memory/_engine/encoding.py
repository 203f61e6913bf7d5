"""Encoding: events -> memories with their affective tag, linked into the network."""

from __future__ import annotations

import contextvars
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import numpy as np

from emotional_memory._engine.event_args import (
    NOT_APPRAISED,
    _check_event_args,
    _check_expiry,
    _per_item_affects,
    appraisal_affect,
    checked_appraisal,
)
from emotional_memory._engine.locks import _synchronized
from emotional_memory._engine.state import StateMixin
from emotional_memory.affect import CoreAffect
from emotional_memory.affect_rater import AffectRatingError, checked_ratings
from emotional_memory.appraisal import AppraisalVector, GenericAppraisalVector
from emotional_memory.categorize import label_tag
from emotional_memory.interfaces import UnstorableValueError
from emotional_memory.models import (
    EmotionalTag,
    Memory,
    ResonanceLink,
    checked_memory,
    consolidation_strength,
)
from emotional_memory.models import make_emotional_tag as _make_tag
from emotional_memory.resonance import _microseconds, score_links
from emotional_memory.state import AffectiveState
from emotional_memory.stores._shared.linking import (  # noqa: F401  (BatchSearch: was defined here)
    BatchSearch,
    LinkCandidates,
    Linker,
    forward_links,
    linker_for,
    with_links,
)
from emotional_memory.stores.selection import SelectedStore
from emotional_memory.telemetry import traced, traced_span

_LINK_SEARCH_BLOCK = 1024
"""New memories saved and searched together by ``encode_batch`` (bounds the batch
search's working memory; any size gives the same links)."""


def _as_encoded(stored: Memory, forward: list[ResonanceLink]) -> Memory:
    """``stored`` with the links it had when it was linked (``forward``)."""
    return stored if stored.tag.resonance_links == forward else with_links(stored, forward)


class EncodingMixin(StateMixin):
    """encode, encode_batch, observe, elaborate; resonance linking (docs/behaviour.md §7)."""

    # ------------------------------------------------------------------ encoding

    def _event_affect(
        self,
        content: str,
        appraisal: AppraisalVector | GenericAppraisalVector | None,
        affect: CoreAffect | None,
        context: dict[str, Any] | None = None,
        rate_text: bool = True,
        defer: bool = True,
        appraised: Any = NOT_APPRAISED,
    ) -> tuple[CoreAffect | None, AppraisalVector | None, bool]:
        """Decide the event's affect: ``(affect or None for current, appraisal, pending)``.

        The appraisal engine gets ``context`` (the memory's metadata) as in the
        original. A :class:`GenericAppraisalVector` sets the affect but is not kept
        on the tag (whose ``appraisal`` field holds Scherer vectors only). Without
        affect, appraisal and appraisal engine, the ``affect_from_text`` rater (when
        set and ``rate_text``) rates ``content`` and its rating is the affect.

        With ``dual_path_encoding``, an appraisal engine and neither appraisal nor
        affect given, a ``defer`` call (``encode``) appraises nothing and marks the
        memory pending, even with ``enable_appraisal`` off, as the original does;
        ``observe`` (``defer=False``) appraises as without dual-path encoding.
        ``appraised``: what the appraisal engine answered beforehand for this event
        (:meth:`_batch_appraisals`), used instead of appraising it here.
        """
        _check_event_args(appraisal, affect)
        unset = appraisal is None and affect is None
        pending = (
            defer and unset and self.config.dual_path_encoding
            and self.appraisal_engine is not None
        )
        engine = self.appraisal_engine if self.config.enable_appraisal else None
        if unset and not pending and engine is not None:
            appraisal = checked_appraisal(
                engine.appraise(content, context) if appraised is NOT_APPRAISED else appraised
            )
        if rate_text and appraisal is None and affect is None and self._rates_text():
            affect = self._rate_texts([content])[0]
        kept = appraisal if isinstance(appraisal, AppraisalVector) else None
        if affect is not None:
            return affect, kept, pending
        if appraisal is not None:
            return appraisal_affect(appraisal), kept, pending
        return None, None, pending

    def _rates_text(self) -> bool:
        """Whether events without affect get one from ``affect_from_text``: a rater is
        set, no appraisal engine is, and appraisal is enabled."""
        return (
            self.affect_from_text is not None
            and self.appraisal_engine is None
            and self.config.enable_appraisal
        )

    def _rate_texts(self, texts: list[str]) -> list[CoreAffect]:
        """The ``affect_from_text`` ratings of ``texts``, checked (one CoreAffect each).

        Raises:
            AffectRatingError: the rater raised, or answered no finite CoreAffect per
                text (the rater and the fault named, the cause chained).
        """
        rater = self.affect_from_text
        with traced_span("emotional_memory.rate_affect", {"count": len(texts)}):
            try:
                return checked_ratings(rater, texts)
            except Exception as exc:
                raise AffectRatingError(
                    f"affect_from_text {type(rater).__name__} failed: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc

    def _prepare(
        self,
        state: AffectiveState,
        content: str,
        embedding: list[float] | None,
        appraisal: AppraisalVector | GenericAppraisalVector | None,
        metadata: dict[str, Any] | None,
        affect: CoreAffect | None,
        now: datetime,
        expires_at: datetime | None = None,
        rate_text: bool = True,
        defer: bool = True,
        appraised: Any = NOT_APPRAISED,
    ) -> tuple[Memory, AffectiveState]:
        """Pure part of encoding: the new state and the memory to store.

        ``content``, ``embedding`` and ``metadata`` are the checked values of
        :meth:`_check_content`, :meth:`_clean_embedding` and :meth:`_check_metadata`
        (new objects of the caller's: the memory is built from them without
        validating them again, and takes the list and the dict over). ``defer`` and
        ``appraised``: see :meth:`_event_affect`.
        """
        event, kept, pending = self._event_affect(
            content, appraisal, affect, metadata, rate_text, defer, appraised
        )
        event = event if event is not None else state.core_affect
        new_state = state.update(
            event, now=now, mood_alpha=self.config.mood_alpha, mood_decay=self.config.mood_decay
        )
        strength = consolidation_strength(event.arousal, new_state.mood.arousal)
        tag = _make_tag(
            new_state.core_affect, new_state.momentum, new_state.mood, strength, kept,
            now=now,
        )
        if pending:
            tag = tag.model_copy(update={"pending_appraisal": True})
        if self.config.auto_categorize:
            tag = label_tag(tag)
        return checked_memory(
            content, tag, embedding, metadata, self._scope, expires_at
        ), new_state

    def _linker(
        self, batched: bool, now: datetime | Callable[[], datetime] | None = None,
        expiring: bool = False,
    ) -> Linker:
        """The store's :class:`~emotional_memory.stores._shared.linking.Linker`, confined to
        this view (resonance candidates and backward twins only among what it sees).

        Args:
            batched: save and search new memories in blocks of ``_LINK_SEARCH_BLOCK``
                (``encode_batch``) rather than one at a time (``encode``).
            now: the operation's time, or a callable giving it when first needed
                (expired memories are never link targets).
            expiring: some of the new memories have an expiry (one may have expired
                on arrival: the view confines by expiry even if the store held none).

        Returns:
            The linker.
        """
        view = self._view(now, expiring=expiring)
        # The root of a store without selections of its own links through the store's
        # own searches (expired memories of such a store may be link targets); a store
        # that confines views itself (a vector database) links through the view.
        unconfined = view is self._columnar or (
            isinstance(view, SelectedStore) and view.selection.unconfined
            and not view.confined_by_store
        )
        target = self.store if unconfined else view
        block = _LINK_SEARCH_BLOCK if batched else 1
        return linker_for(target, block, None if unconfined else self.store)

    def _store_and_link(
        self,
        linker: Linker,
        memories: Iterable[Memory],
        vectors: Iterable[np.ndarray | None] | None = None,
        batch: bool = False,
        forward: dict[str, list[ResonanceLink]] | None = None,
    ) -> list[Memory]:
        """Save new memories and build their forward and backward resonance links.

        Memory ``j``'s candidates depend only on the embeddings and insertion order of
        the memories stored up to it, which linking never changes. So each block of
        memories is saved first, the candidates of all its memories are found
        together (each memory seeing the store as it was right after its own save),
        and the memories are then linked one by one, in order, exactly as one
        ``save`` + search + link per memory would (docs/behaviour.md §7).

        Args:
            linker: the store's linker.
            memories: new memories in encoding order; consumed one block at a time.
            vectors: optionally, their embeddings as the float64 vectors of their
                lists (None where missing or empty), in the same order: the store
                may write its rows from them (see :meth:`Linker.save`).
            batch: whether the memories are a batch's (an
                :class:`UnstorableValueError` then names the memory's position).
            forward: optionally, a dict that gets each linked memory's forward links
                (by id), as they were when it was linked.

        Returns:
            The memories as given (without links), in order.

        Raises:
            UnstorableValueError: a memory the store cannot hold (nothing kept).
        """
        cfg = self.config.resonance
        limit = cfg.max_links * cfg.candidate_multiplier
        out: list[Memory] = []
        source = iter(memories)
        vector_source = iter(vectors) if vectors is not None else None
        # With a linker that overlaps, a block is linked once the next one is saved
        # and its search started, so the store's search runs meanwhile (the search
        # sees embeddings only, and a block's candidates are all saved before it, so
        # the links are the same); otherwise each block is linked at once.
        waiting: tuple[list[Memory], Iterator[LinkCandidates]] | None = None
        try:
            while block := list(itertools.islice(source, linker.block_size)):
                block_vectors = (
                    list(itertools.islice(vector_source, len(block)))
                    if vector_source is not None
                    else None
                )
                found: Iterator[LinkCandidates] | None
                try:
                    if not self.config.enable_resonance:
                        linker.save(block, block_vectors)
                        found = None
                    else:
                        found = linker.save_and_find(block, limit, block_vectors)
                except UnstorableValueError as exc:
                    raise _located(exc, len(out) if batch else None) from None
                if found is not None:
                    if waiting is not None:
                        self._link_block(linker, *waiting, forward)
                        waiting = None
                    if linker.overlaps:
                        waiting = (block, found)
                    else:
                        self._link_block(linker, block, found, forward)
                out.extend(block)
            if waiting is not None:
                self._link_block(linker, *waiting, forward)
        finally:
            # a failure may leave a search running: fetch it before the rollback
            # writes rows
            linker.settle()
        return out

    def _link_block(
        self,
        linker: Linker,
        block: list[Memory],
        found: Iterator[LinkCandidates],
        forward: dict[str, list[ResonanceLink]] | None = None,
    ) -> None:
        """Link a saved block's memories in order, from their candidates ``found``."""
        for memory, candidates in zip(block, found, strict=True):
            self._link(linker, memory, candidates, forward)
        linker.flush()

    def _link(
        self,
        linker: Linker,
        memory: Memory,
        candidates: LinkCandidates,
        forward: dict[str, list[ResonanceLink]] | None = None,
    ) -> None:
        """Score ``memory``'s links to ``candidates`` and write them with their twins.

        Args:
            linker: the store's linker.
            memory: the stored new memory.
            candidates: its resonance candidates (docs/behaviour.md §7), itself possibly included.
            forward: see :meth:`_store_and_link`.
        """
        cfg = self.config.resonance
        affect = memory.tag.core_affect
        links = score_links(
            memory.id,
            candidates.new_vector if candidates.new_vector is not None else memory.embedding,
            (affect.valence, affect.arousal, affect.dominance),
            _microseconds(memory.tag.timestamp),
            candidates.ids,
            candidates.vectors,
            candidates.affects,
            candidates.times_us,
            cfg,
            candidates.norms,
        )
        if links:
            linker.link(memory, candidates, links, cfg.max_links)
            if forward is not None:
                forward[memory.id] = forward_links(memory.id, candidates, links)

    @_synchronized
    @traced("emotional_memory.encode", content_length=("content", len))
    def encode(
        self,
        content: str,
        appraisal: AppraisalVector | GenericAppraisalVector | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        affect: CoreAffect | None = None,
        expires_at: datetime | None = None,
    ) -> Memory:
        """Store an event with its affective fingerprint.

        Args:
            content: the event text.
            appraisal: optional appraisal; its projection becomes the event affect.
            metadata: optional JSON-able dict stored with the memory; also passed to
                the appraisal engine as ``context``.
            affect: opt-in: the event's own affect. The state is updated once with it,
                so the stored momentum is the real trajectory (the default path feeds
                the current affect, as the original library does, which after
                ``set_affect`` yields zero velocity). Without it (and without
                appraisal and appraisal engine) an engine with ``affect_from_text``
                rates ``content`` and feeds that rating here.
            expires_at: optional aware datetime: once the clock passes it the memory
                is invisible to every read and ``prune`` removes it.

        Returns:
            The stored memory (with its forward links).
        """
        content = self._check_content(content)
        metadata = self._check_metadata(metadata)
        expires = _check_expiry(expires_at, "expires_at")
        _check_event_args(appraisal, affect)  # before the embedder's (maybe paid) call
        now = self._now()
        with traced_span("emotional_memory.embed"):
            embedding = self._clean_embedding(self.embedder.embed(content), "content")
        memory, new_state = self._prepare(
            self._state, content, embedding, appraisal, metadata, affect, now, expires
        )
        linker = self._linker(batched=False, now=now)

        def write() -> Memory:
            self._store_and_link(linker, [memory])
            # The store's copy (a durable store may round embeddings, e.g. to
            # float32), read in the transaction: another engine on the store may
            # change or delete it as soon as it commits.
            return linker.stored(memory)

        return self._store_with_state(write, lambda: new_state)

    def _batch_inputs(
        self,
        contents: Any,
        metadata: Any,
        expires_at: Any,
    ) -> tuple[list[str], list[dict[str, Any] | None], list[datetime | None]]:
        """``encode_batch``'s texts, metadata and expiries, checked (nothing stored).

        Raises:
            TypeError / ValueError: an argument of the wrong type or length (named).
            UnstorableValueError: metadata the store cannot hold (its position named).
        """
        if isinstance(contents, str):
            raise TypeError("contents must be a sequence of str, not a str")
        if not isinstance(contents, Sequence):
            raise TypeError(f"contents must be a sequence of str, got {type(contents).__name__}")
        if metadata is not None and (
            isinstance(metadata, dict | str) or not isinstance(metadata, Sequence)
        ):
            raise TypeError(
                f"metadata must be a sequence of dicts (one per content) or None, got "
                f"{type(metadata).__name__}"
            )
        texts = [self._check_content(c, f"contents[{i}]") for i, c in enumerate(contents)]
        if metadata is not None and len(metadata) != len(texts):
            raise ValueError(
                f"metadata length {len(metadata)} does not match contents length {len(texts)}: "
                "metadata must have one entry per content"
            )
        metas = [
            self._check_metadata(m, f"metadata[{i}]")
            for i, m in enumerate(metadata if metadata is not None else [None] * len(texts))
        ]
        # a store without transactions refuses such metadata before anything is written
        fits = getattr(self.store, "check_metadata", None)
        if callable(fits):
            for i, meta in enumerate(metas):
                try:
                    fits(meta or {})
                except UnstorableValueError as exc:
                    raise UnstorableValueError(
                        exc.field, f"memory {i} of the batch: {exc}", i
                    ) from None
        if expires_at is None or isinstance(expires_at, datetime):
            expiries = [_check_expiry(expires_at, "expires_at")] * len(texts)
        elif isinstance(expires_at, str) or not isinstance(expires_at, Sequence):
            raise TypeError(
                "expires_at must be an aware datetime, one per content, or None; got "
                f"{type(expires_at).__name__}"
            )
        elif len(expires_at) != len(texts):
            raise ValueError(
                f"expires_at must have one entry per content ({len(texts)}), got "
                f"{len(expires_at)}"
            )
        else:
            expiries = [_check_expiry(e, f"expires_at[{i}]") for i, e in enumerate(expires_at)]
        return texts, metas, expiries

    @traced("emotional_memory.encode_batch", batch_size=("contents", len))
    def encode_batch(
        self,
        contents: Sequence[str],
        metadata: Sequence[dict[str, Any] | None] | None = None,
        *,
        expires_at: datetime | Sequence[datetime | None] | None = None,
        affect: CoreAffect | Sequence[CoreAffect | None] | None = None,
    ) -> list[Memory]:
        """Encode many events with one ``embed_batch`` call; same result as repeated encode.

        The whole batch is one transaction: either every memory is stored or none.
        The appraisal engine appraises the events (those without a given affect)
        before the call takes its scope's turn, so it never runs while the store's
        write lock is held and may call the engine back: as in the original, in a
        pool of ``config.appraisal_max_concurrency`` threads (the appraiser must then
        be thread-safe; set it to 1 to appraise one event after another), the answers
        used in order.
        Links, their order and the final state equal those of repeated ``encode``;
        stores that can search in batches find a block's candidates in one search
        (``stores/_shared/README.md``, "Linking new memories").

        Args:
            contents: event texts.
            metadata: optional per-event metadata (same length as ``contents``).
            expires_at: optional expiry: one aware datetime for every memory, or one
                (or None) per content.

            affect: opt-in event affects, as ``encode(..., affect=)`` takes one: a
                :class:`CoreAffect` for every memory, or one (or None: the current
                state's, as without ``affect``) per content. With ``affect_from_text``
                (and no appraisal engine) the contents without one are rated, all in
                one ``rate_affect`` call.

        Returns:
            The stored memories, in order, each as repeated ``encode`` would have
            returned it (as in the original): with the links of its own step, not the
            backward twins later memories of the batch gave it (those are stored).
        """
        texts, metas, expiries = self._batch_inputs(contents, metadata, expires_at)
        affects = _per_item_affects(affect, len(texts))
        if not texts:
            return []
        # asked before the scope's turn: the pool's threads do not hold it, and an
        # appraiser may call the engine back (the original takes no lock at all);
        # ratings and embeddings too (they read no state): a slow rater or embedder
        # does not hold the scope (nor, with shared_state, its database locks)
        appraisals = self._batch_appraisals(texts, metas, affects)
        if self._rates_text():  # the texts without an affect, rated in one call
            unrated = [i for i, a in enumerate(affects) if a is None]
            if unrated:
                rated = self._rate_texts([texts[i] for i in unrated])
                for i, a in zip(unrated, rated, strict=True):
                    affects[i] = a
        vectors = self._batch_vectors(texts)
        return self._encode_batch_in_turn(texts, metas, expiries, affects, appraisals, vectors)

    @_synchronized
    def _encode_batch_in_turn(
        self,
        texts: list[str],
        metas: list[dict[str, Any] | None],
        expiries: list[datetime | None],
        affects: list[CoreAffect | None],
        appraisals: list[Any],
        vectors: list[np.ndarray | None],
    ) -> list[Memory]:
        """:meth:`encode_batch` of checked inputs, their appraisals, affects and
        embeddings, in the scope's turn: the state's steps, the store's transaction."""
        state = self._state
        latest: list[datetime] = []  # the time of the last memory prepared

        def prepared() -> Iterator[Memory]:
            """The batch's memories, prepared one at a time as they are consumed."""
            nonlocal state
            for text, vec, meta, expires, event, appraised in zip(
                texts, vectors, metas, expiries, affects, appraisals, strict=True
            ):
                emb = None if vec is None else vec.tolist()  # what _clean_embedding gives
                latest[:] = [self._now()]
                memory, state = self._prepare(
                    state, text, emb, None, meta, event, latest[0], expires,
                    appraised=appraised,
                )
                yield memory

        row_vectors = [None if vec is None or vec.size == 0 else vec for vec in vectors]
        # link targets' expiry is judged at one time for the whole batch (the view's
        # Now keeps its first reading): the last memory prepared when a store first
        # asks (the first block's, saved before its search), or the clock when one asks
        # before any is prepared; with a clock that moves, a target expiring during
        # the batch stays one for its later blocks (repeated encode would drop it)
        linker = self._linker(
            batched=True, now=lambda: latest[0] if latest else self._now(),
            expiring=any(e is not None for e in expiries),
        )
        if self.config.enable_resonance:
            # candidates among the memories already stored, searched before the
            # transaction holds the store (the linker re-checks them inside it)
            cfg = self.config.resonance
            linker.prefetch(row_vectors, cfg.max_links * cfg.candidate_multiplier)
        forward: dict[str, list[ResonanceLink]] = {}

        def write() -> list[Memory]:
            out = self._store_and_link(linker, prepared(), row_vectors, True, forward)
            # each memory as repeated ``encode`` returns it (as the original's batch
            # does): its own forward links, not the backward twins later memories gave
            # it; read in the transaction (another engine on the store may change or
            # delete them as soon as it commits)
            return [_as_encoded(linker.stored(m), forward.get(m.id, [])) for m in out]

        return self._store_with_state(write, lambda: state)

    def _batch_appraisals(
        self,
        texts: list[str],
        metas: list[dict[str, Any] | None],
        affects: list[CoreAffect | None],
    ) -> list[Any]:
        """What the appraisal engine answers for each of a batch's events without a
        given affect, asked before the store's transaction (up to ``config.
        appraisal_max_concurrency`` at once, answers in order): an appraiser (a
        slow LLM's, or an async one waiting for its event loop) never runs while the
        store's lock is held (the loop's own state calls may wait for that lock).

        Args:
            texts: the checked contents.
            metas: their checked metadata (the appraiser's context, as in ``encode``).
            affects: the given affects (None: none given).

        Returns:
            Per event, the appraiser's answer, or ``NOT_APPRAISED`` (an affect was
            given, no appraisal engine is used, or dual-path encoding defers it).
        """
        engine = self.appraisal_engine if self.config.enable_appraisal else None
        out: list[Any] = [NOT_APPRAISED] * len(texts)
        if engine is None or self.config.dual_path_encoding:
            return out
        todo = [i for i, event in enumerate(affects) if event is None]
        workers = min(self.config.appraisal_max_concurrency, len(todo))
        if workers <= 1:
            for i in todo:
                out[i] = engine.appraise(texts[i], metas[i])
            return out
        # as the original: a bounded pool, answers in order (the first failure, in
        # order, is raised); each call runs in a copy of the caller's context so that
        # its spans and context variables are the caller's
        with ThreadPoolExecutor(max_workers=workers,
                                thread_name_prefix="emotional-memory-appraise") as pool:
            try:
                futures = [pool.submit(contextvars.copy_context().run, engine.appraise,
                                       texts[i], metas[i]) for i in todo]
            except RuntimeError:  # the interpreter is shutting down (an atexit
                futures = []      # handler): no new thread; appraised below, serially
            try:
                for i, future in zip(todo, futures, strict=False):
                    out[i] = future.result()
            finally:
                for future in futures:  # after a failure: those not started never run
                    future.cancel()
        if not futures:
            for i in todo:
                out[i] = engine.appraise(texts[i], metas[i])
        return out

    @_synchronized
    @traced("emotional_memory.observe", content_length=("content", len))
    def observe(
        self,
        content: str | None = None,
        appraisal: AppraisalVector | GenericAppraisalVector | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        affect: CoreAffect | None = None,
    ) -> EmotionalTag:
        """Update the affective state as ``encode`` would, without storing anything.

        Args:
            content: Event text (appraised when an appraisal engine is enabled and
                neither ``appraisal`` nor ``affect`` is given, else rated by
                ``affect_from_text`` when set; default "": nothing is rated).
            appraisal: Optional appraisal; its projection becomes the event affect.
            metadata: Optional dict passed to the appraisal engine as ``context``.
            affect: Optional explicit event affect (takes precedence over ``appraisal``).

        Returns:
            The tag ``encode`` would have stored for this event (as in the original),
            except that with ``dual_path_encoding`` the event is appraised now (there
            is no memory to elaborate later), so the tag is never pending.
        """
        text = self._check_content(content if content is not None else "")
        metadata = self._check_metadata(metadata)
        now = self._now()
        memory, new_state = self._prepare(
            self._state, text, None, appraisal, metadata, affect, now,
            rate_text=content is not None, defer=False,
        )
        self._adopt(new_state)
        return memory.tag

    # ------------------------------------------------------------------ elaboration

    @_synchronized
    @traced("emotional_memory.elaborate", memory_id=("memory_id", str))
    def elaborate(self, memory_id: str) -> Memory | None:
        """Appraise a pending memory (dual-path encoding) and blend the result in.

        ``core_affect`` moves towards the appraised affect by
        ``elaboration_learning_rate``; consolidation is recomputed from the appraised
        arousal and the snapshot mood arousal; the reconsolidation window opens
        (docs/behaviour.md §8).

        Args:
            memory_id: Id of the memory to elaborate.

        Returns:
            The updated memory, or None (as in the original) for an unknown id, a
            memory not pending appraisal, or no appraisal engine.
        """
        if self.appraisal_engine is None:
            return None
        view = self._view()
        memory = view.get(memory_id)
        if memory is None or not memory.tag.pending_appraisal:
            return None
        now = self._now()
        # the content alone, no context (as the original's elaborate)
        appraisal = checked_appraisal(self.appraisal_engine.appraise(memory.content, None))
        appraised = appraisal_affect(appraisal)
        tag = memory.tag
        new_tag = tag.model_copy(
            update={
                "core_affect": tag.core_affect.lerp(
                    appraised, self.config.elaboration_learning_rate
                ),
                "appraisal": appraisal if isinstance(appraisal, AppraisalVector) else None,
                "consolidation_strength": consolidation_strength(
                    appraised.arousal, tag.mood_snapshot.arousal
                ),
                "pending_appraisal": False,
                "window_opened_at": now,
            }
        )
        # emotion_label stays the one given at encode time, as in the original
        updated = memory.model_copy(update={"tag": new_tag})
        with view.transaction():
            current = view.get(memory_id)
            if current == memory:
                view.update(updated)
        if current != memory:  # another writer changed it since it was read: start over
            return self.elaborate(memory_id)
        return updated

    @_synchronized
    def elaborate_pending(self) -> list[Memory]:
        """Elaborate every memory still marked ``pending_appraisal``.

        Returns:
            The elaborated memories in insertion order ([] without an appraisal engine).
        """
        if self.appraisal_engine is None:
            return []
        done = (self.elaborate(mid) for mid in self._view().pending_ids())
        return [m for m in done if m is not None]


def _located(exc: UnstorableValueError, offset: int | None) -> UnstorableValueError:
    """``exc`` placed in its batch: ``offset`` is the position of the block the store
    was saving (its index is within the block), None for a single memory."""
    if offset is None or exc.index is None:
        exc.index = None
        return exc
    at = offset + exc.index
    return UnstorableValueError(exc.field, f"memory {at} of the batch: {exc}", at)
