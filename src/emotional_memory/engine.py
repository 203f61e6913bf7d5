"""EmotionalMemory: the imperative shell around the scoring kernel (SPEC 5-9).

The engine owns the affective state, encodes events with their affective
fingerprint, links them into a resonance network, and retrieves with the two-pass,
mood-adaptive score. Retrieval then applies its side effects on the winners only:
reconsolidation within a labile window (Nader et al. 2000), Pearce-Hall prediction
updates (1980) and Hebbian strengthening of co-retrieved links.

Every operation validates its input before touching anything and runs inside one
store transaction, so a failed call leaves store and state exactly as they were.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

import jax
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from emotional_memory._bank import as_float_list
from emotional_memory._precision import float64
from emotional_memory._validation import aware, in_range, json_metadata, positive_int, utc_now
from emotional_memory.affect import CoreAffect
from emotional_memory.appraisal import AppraisalVector, GenericAppraisalVector
from emotional_memory.categorize import label_tag
from emotional_memory.decay import (
    DecayConfig,
    compute_effective_strength_batch,
    strength_from_columns,
)
from emotional_memory.interfaces import (
    AffectiveStateStore,
    AppraisalEngine,
    Embedder,
    MemoryStore,
    store_transaction,
)
from emotional_memory.kernel import LexicalInputs, QueryFeatures, ScoringParams
from emotional_memory.lexical import LexicalIndex, query_terms, stop_word_set
from emotional_memory.models import EmotionalTag, Memory, ResonanceLink, consolidation_strength
from emotional_memory.models import make_emotional_tag as _make_tag
from emotional_memory.mood import MoodDecayConfig, MoodField
from emotional_memory.query_classifier import HeuristicQueryClassifier, QueryClassifier
from emotional_memory.resonance import (
    ResonanceConfig,
    build_resonance_links,
    hebbian_strengthen,
)
from emotional_memory.retrieval import (
    PlanArrays,
    RetrievalConfig,
    RetrievalExplanation,
    RetrievalPlan,
    _check_weights,
    compute_ape,
    explain_top,
    masked_weights,
    mood_weights,
    plan_from_arrays,
    rank_candidates,
    reconsolidate,
    scoring_params,
    update_prediction,
)
from emotional_memory.state import AffectiveState
from emotional_memory.telemetry import RETRIEVE_ATTRIBUTES, traced, traced_span

Clock = Callable[[], datetime]
BatchSearch = Callable[..., list[list[Memory]]]
"""A store's ``search_by_embedding_batch(embeddings, top_k, *, visible_until=ids)``."""

_SEMANTIC_ONLY = np.array([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
"""Weights of a ranking by semantic similarity alone (``retrieve_query_gated``)."""

_LINK_SEARCH_BLOCK = 1024
"""New memories saved and searched together by ``encode_batch`` (bounds the batch
search's working memory; any size gives the same links)."""


@dataclass
class _Ranking:
    """One query's two-pass ranking as arrays (the engine's retrieval core).

    Attributes:
        now: the engine time of the ranking.
        plan_now: the ``now`` an equivalent :class:`RetrievalPlan` carries (None for an
            empty store).
        weights: (6,) final weights.
        candidates: the ranked memories, in candidate order.
        arrays: the plan arrays (None without candidates).
        query: the query features scored (None without candidates).
    """

    now: datetime
    plan_now: datetime | None
    weights: np.ndarray
    candidates: list[Memory] = field(default_factory=list)
    arrays: PlanArrays | None = None
    query: QueryFeatures | None = None

    def winners(self, top_k: int) -> list[Memory]:
        """The pass-2 top ``top_k`` memories, best first.

        Args:
            top_k: how many.

        Returns:
            Up to ``top_k`` memories (the ranking-time objects).
        """
        if self.arrays is None:
            return []
        return [self.candidates[i] for i in self.arrays.order2[:top_k].tolist()]

    def plan(self) -> RetrievalPlan:
        """The full :class:`RetrievalPlan`, every breakdown built.

        Returns:
            The plan ``build_retrieval_plan`` gives for this ranking.
        """
        if self.arrays is None or self.query is None:
            return RetrievalPlan(weights=self.weights, pass1=[], pass2=[], now=self.plan_now)
        return plan_from_arrays(self.candidates, self.arrays, self.now, self.query)


class _StoreLexicon:
    """A store's lexical queries under the store's own lock, as a LexicalIndex's names."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def search(self, terms: Sequence[str], k: int, k1: float, b: float) -> list[str]:
        """The store's lexical shortlist."""
        ids: list[str] = self._store.lexical_search(terms, k, k1, b)
        return ids

    def inputs(self, terms: Sequence[str], memory_ids: Sequence[str]) -> LexicalInputs:
        """The store's term statistics of the candidates."""
        out: LexicalInputs = self._store.lexical_inputs(terms, memory_ids)
        return out


class _ConfigDerived:
    """What the engine derives from one (frozen) config object, computed once.

    Args:
        config: the engine configuration.

    Attributes:
        config: the config these values belong to (compared by identity).
        signal_mask: its (6,) ablation mask.
        all_signals_on: whether the mask keeps every signal (weights pass through).
        mask: the mask as a float64 array for the plan program (None: all on; 7
            entries when the lexical signal is on, s7 always kept).
        params: float64 scoring parameters of the plan, as device arrays.
        lexical_on: whether the lexical signal s7 takes part (weight > 0 and
            ``enable_lexical``).
        stop_words: the query words s7 ignores.
    """

    def __init__(self, config: EmotionalMemoryConfig) -> None:
        self.config = config
        self.signal_mask = config.signal_mask()
        self.all_signals_on = all(v == 1.0 for v in self.signal_mask)
        self.mask = None if self.all_signals_on else np.asarray(self.signal_mask, np.float64)
        self.params = self._device(scoring_params(config.retrieval, config.decay))
        self._routes: dict[tuple[float, ...], ScoringParams] = {}
        self.lexical_on = config.enable_lexical and config.retrieval.lexical_on
        self.stop_words = stop_word_set(config.retrieval.lexical_stop_words)
        if self.lexical_on and self.mask is not None:
            self.mask = np.append(self.mask, 1.0)

    @staticmethod
    def _device(params: ScoringParams) -> ScoringParams:
        """``params`` as float64 device arrays (passed to the compiled programs as is).

        Args:
            params: parameters with float64 numpy leaves.

        Returns:
            The same parameters on the default device.
        """
        with float64():  # float64 leaves stay float64 on the device
            out: ScoringParams = jax.device_put(params)
        return out

    def weight_params(self, base_weights: Sequence[float]) -> ScoringParams:
        """Parameters for the adaptive weights of these (routed) base weights.

        Args:
            base_weights: the six base weights of the query's route.

        Returns:
            Device parameters with these base weights and the config's gates.
        """
        key = tuple(base_weights)
        params = self._routes.get(key)
        if params is None:
            params = self._device(
                scoring_params(self.config.retrieval, self.config.decay, base_weights=key)
            )
            self._routes[key] = params
        return params


class EmotionalMemoryConfig(BaseModel):
    """Everything that configures an :class:`EmotionalMemory`.

    Attributes:
        decay: recency signal parameters.
        retrieval: weights, gates, reconsolidation and routing.
        resonance: link building and spreading activation.
        mood_alpha: mood blending rate per affect update (in [0, 1]).
        mood_decay: optional regression of mood towards a baseline between updates.
        dual_path_encoding: encode fast, appraise later (``elaborate``).
        elaboration_learning_rate: blend of the appraised affect at elaboration.
        auto_categorize: store a Plutchik label with each tag.
        enable_reconsolidation, enable_appraisal, enable_mood_signal, enable_momentum,
        enable_resonance: ablation switches (all on by default).
        enable_lexical: ablation switch of the opt-in lexical signal s7 (it takes part
            only when also ``retrieval.lexical_weight > 0``).
        max_content_length: optional limit on the content length (characters).
        appraisal_max_concurrency: most appraisals an async engine runs at once
            (>= 1; the original's field, kept for compatibility).
        query_affect_gate_tau: |valence| below which :meth:`EmotionalMemory.
            retrieve_query_gated` treats the query as affect-neutral ([0, 2]).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    decay: DecayConfig = Field(default_factory=DecayConfig)
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    resonance: ResonanceConfig = Field(default_factory=ResonanceConfig)
    mood_alpha: float = 0.1
    mood_decay: MoodDecayConfig | None = None
    dual_path_encoding: bool = False
    elaboration_learning_rate: float = 0.7
    auto_categorize: bool = False
    enable_reconsolidation: bool = True
    enable_appraisal: bool = True
    enable_mood_signal: bool = True
    enable_momentum: bool = True
    enable_resonance: bool = True
    enable_lexical: bool = True
    max_content_length: int | None = None
    appraisal_max_concurrency: int = Field(default=8, ge=1)
    query_affect_gate_tau: float = Field(default=0.2, ge=0.0, le=2.0)

    @field_validator("mood_alpha", "elaboration_learning_rate", mode="before")
    @classmethod
    def _unit(cls, v: float, info: Any) -> float:
        return in_range(info.field_name, v, 0.0, 1.0)

    @field_validator("max_content_length", mode="after")
    @classmethod
    def _max_len(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError(f"max_content_length must be >= 1, got {v}")
        return v

    def signal_mask(self) -> list[float]:
        """The (6,) ablation mask: mood congruence, momentum and resonance switches.

        Returns:
            Six floats in SPEC 4 signal order; 1.0 for enabled signals, 0.0 for the
            mood (s2), momentum (s4) or resonance (s6) signal when switched off.
        """
        return [
            1.0,
            1.0 if self.enable_mood_signal else 0.0,
            1.0,
            1.0 if self.enable_momentum else 0.0,
            1.0,
            1.0 if self.enable_resonance else 0.0,
        ]


def _default_clock() -> datetime:
    return utc_now()


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _synchronized(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run an engine method under the engine's re-entrant operation lock.

    One operation at a time per engine: threads sharing an engine see each call run
    whole (an encode's save, links and state; a retrieve's ranking and side effects)
    with no other call of the same engine interleaved. Reads of the (immutable)
    current state - ``get_state``, ``save_state``, ``get_current_mood`` - take no
    lock, so an event loop calling them never waits for a running operation.
    """

    @functools.wraps(method)
    def locked(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with args[0]._op_lock:  # type: ignore[attr-defined]
            return method(*args, **kwargs)

    return locked


def _synchronized_state(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """:func:`_synchronized` for the methods that change only the in-memory state.

    Called on a thread running an event loop while an operation holds the lock
    (``AsyncEmotionalMemory``'s synchronous state methods, as in the original), the
    method runs at once instead of blocking the loop: the running operation may be
    waiting for that very loop (async stores and embedders are called back on it), so
    waiting could deadlock. That is the original's semantics: a state change between
    two steps of a running operation.
    """

    @functools.wraps(method)
    def locked(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        lock = args[0]._op_lock  # type: ignore[attr-defined]
        if not lock.acquire(blocking=asyncio._get_running_loop() is None):
            return method(*args, **kwargs)
        try:
            return method(*args, **kwargs)
        finally:
            lock.release()

    return locked


class EmotionalMemory:
    """Affective memory for an agent: encode events, retrieve by meaning and feeling.

    Args:
        store: where memories live (``InMemoryStore``, ``SQLiteStore`` or your own).
        embedder: text -> vector.
        appraisal_engine: optional appraiser used by ``encode`` when no appraisal or
            affect is given.
        config: engine configuration (defaults reproduce SPEC).
        state_store: optional persistence for the affective state; a stored state is
            restored at construction and every state change is persisted.
        query_classifier: classifier for ``query_classifier.mode == "llm"`` routing.
        clock: zero-argument callable returning an aware datetime (default UTC now);
            inject one to replay timestamped logs deterministically.
    """

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        appraisal_engine: AppraisalEngine | None = None,
        config: EmotionalMemoryConfig | None = None,
        state_store: AffectiveStateStore | None = None,
        query_classifier: QueryClassifier | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        if config is not None and not isinstance(config, EmotionalMemoryConfig):
            raise TypeError("config must be an EmotionalMemoryConfig")
        if clock is not None and not callable(clock):
            raise TypeError("clock must be a zero-argument callable returning a datetime")
        for name, obj, methods in (("store", store, ("save", "get", "update", "delete")),
                                   ("embedder", embedder, ("embed",))):
            missing = [m for m in methods if not callable(getattr(obj, m, None))]
            if missing:
                raise TypeError(
                    f"{name} must provide {', '.join(methods)}; got {type(obj).__name__} "
                    f"without {', '.join(missing)}"
                )
        self._op_lock = threading.RLock()
        self.store = store
        self.embedder = embedder
        self.appraisal_engine = appraisal_engine
        self.config = config if config is not None else EmotionalMemoryConfig()
        self.state_store = state_store
        self.query_classifier = query_classifier
        self._clock: Clock = clock if clock is not None else _default_clock
        self._heuristic = HeuristicQueryClassifier()
        self._state = AffectiveState.initial(self._now())
        if state_store is not None:
            self.restore_persisted_state()

    # ------------------------------------------------------------------ helpers

    def _now(self) -> datetime:
        return aware("clock()", self._clock())

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
        """Validate an embedder's output; NaN is warned about, not fatal (SPEC 9)."""
        if raw is None:
            return None
        arr = np.asarray(raw)
        if arr.ndim != 1:
            raise ValueError(f"embedder returned a non 1-D embedding for {what}: {arr.shape}")
        if arr.size and not np.issubdtype(arr.dtype, np.number):
            raise TypeError(f"embedder returned non-numeric values for {what}")
        arr = arr.astype(np.float64)
        if not np.all(np.isfinite(arr)):
            warnings.warn(
                f"embedder returned NaN/inf values for {what}; its semantic similarity "
                "will count as 0",
                RuntimeWarning,
                stacklevel=3,
            )
        return arr.tolist()

    def _adopt(self, state: AffectiveState) -> AffectiveState:
        """Persist ``state`` (when a state store is configured), then make it current.

        Persisting first means a failing state store leaves the in-memory state as it
        was (SPEC 9).
        """
        if self.state_store is not None:
            self._persist(state)
        self._state = state
        return state

    def _persist(self, state: AffectiveState, state_store: Any = None) -> None:
        """Write ``state`` to the configured state store (or to ``state_store``)."""
        target = state_store if state_store is not None else self._joined_state_store()
        if target is None:
            target = self.state_store
        assert target is not None
        target.save(state)  # the original's protocol: save(AffectiveState)

    def _joined_state_store(self) -> Any:
        """A state store whose saves join the store's transactions, or None.

        ``SQLiteAffectiveStateStore`` offers ``joined_with(store)``: itself when it
        was made by ``from_store(store)``, a twin on the store's connection when it
        has its own connection to the store's file, else None.
        """
        cached = getattr(self, "_joined_cache", None)
        if cached is not None and cached[0] is self.state_store and cached[1] is self.store:
            return cached[2]
        joined_with = getattr(self.state_store, "joined_with", None)
        joined = joined_with(self.store) if callable(joined_with) else None
        self._joined_cache = (self.state_store, self.store, joined)
        return joined

    def _store_with_state(
        self, write: Callable[[], _R], final_state: Callable[[], AffectiveState]
    ) -> _R:
        """Run the store writes ``write`` and adopt the state after them: both or neither.

        A state store that can join the store's transactions (an
        ``SQLiteAffectiveStateStore`` on the store's file) saves inside it: one
        commit. Any other state store saves at the end of the store's transaction, so
        a failing save rolls the store back; when the commit itself fails, the
        previously persisted snapshot is put back. After a failure the store, the
        persisted state and the in-memory state are as they were.

        Args:
            write: the store writes (run inside one store transaction).
            final_state: the state once ``write`` has run.

        Returns:
            What ``write`` returns.
        """
        state_store = self.state_store
        joined = self._joined_state_store() if state_store is not None else None
        saved = False
        before: Any = None
        try:
            with store_transaction(self.store):
                out = write()
                new_state = final_state()
                if joined is not None:
                    self._persist(new_state, joined)
                elif state_store is not None:
                    before = state_store.load()
                    self._persist(new_state)
                    saved = True
        except BaseException:
            if saved and state_store is not None:  # the store's commit failed
                if before is None:
                    state_store.clear()
                else:
                    state_store.save(before)
            raise
        self._state = new_state
        return out

    def _update_state(self, affect: CoreAffect, now: datetime) -> AffectiveState:
        return self._state.update(
            affect, now=now, mood_alpha=self.config.mood_alpha, mood_decay=self.config.mood_decay
        )

    # ------------------------------------------------------------------ encoding

    def _event_affect(
        self,
        content: str,
        appraisal: AppraisalVector | GenericAppraisalVector | None,
        affect: CoreAffect | None,
        context: dict[str, Any] | None = None,
    ) -> tuple[CoreAffect | None, AppraisalVector | None, bool]:
        """Decide the event's affect: ``(affect or None for current, appraisal, pending)``.

        The appraisal engine gets ``context`` (the memory's metadata) as in the
        original. A :class:`GenericAppraisalVector` sets the affect but is not kept
        on the tag (whose ``appraisal`` field holds Scherer vectors only).
        """
        if appraisal is not None and not isinstance(
            appraisal, AppraisalVector | GenericAppraisalVector
        ):
            raise TypeError(
                "appraisal must be an AppraisalVector, a GenericAppraisalVector or None"
            )
        if affect is not None and not isinstance(affect, CoreAffect):
            raise TypeError("affect must be a CoreAffect or None")
        pending = False
        engine = self.appraisal_engine if self.config.enable_appraisal else None
        if appraisal is None and affect is None and engine is not None:
            if self.config.dual_path_encoding:
                pending = True
            else:
                appraisal = engine.appraise(content, context)
        kept = appraisal if isinstance(appraisal, AppraisalVector) else None
        if affect is not None:
            return affect, kept, pending
        if appraisal is not None:
            return appraisal.to_core_affect(), kept, pending
        return None, None, pending

    def _prepare(
        self,
        state: AffectiveState,
        content: str,
        embedding: list[float] | None,
        appraisal: AppraisalVector | GenericAppraisalVector | None,
        metadata: dict[str, Any] | None,
        affect: CoreAffect | None,
        now: datetime,
    ) -> tuple[Memory, AffectiveState]:
        """Pure part of encoding: the new state and the memory to store."""
        event, kept, pending = self._event_affect(content, appraisal, affect, metadata)
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
        return Memory.create(content, tag, embedding=embedding, metadata=metadata), new_state

    def _store_and_link(self, memory: Memory) -> Memory:
        """Save ``memory`` and build its forward and backward resonance links."""
        self.store.save(memory)
        if not self.config.enable_resonance:
            return memory
        cfg = self.config.resonance
        limit = cfg.max_links * cfg.candidate_multiplier
        if len(self.store) > limit:
            candidates = self.store.search_by_embedding(memory.embedding or [], limit)
        else:
            candidates = self.store.list_all()
        return self._link(memory, candidates)

    def _link(self, memory: Memory, candidates: Sequence[Memory]) -> Memory:
        """Build ``memory``'s forward links to ``candidates`` and their backward twins.

        ``memory`` is already stored. Candidates are read for their id, embedding,
        core affect and timestamp only, so a snapshot taken before other links were
        written gives the same links; backward twins always read the target's
        current links from the store.

        Args:
            memory: the stored new memory.
            candidates: its resonance candidates (SPEC 7), itself possibly included.

        Returns:
            ``memory`` with its forward links (unchanged when it has none).
        """
        cfg = self.config.resonance
        links = build_resonance_links(memory, candidates, cfg)
        if not links:
            return memory
        memory = memory.model_copy(
            update={"tag": memory.tag.model_copy(update={"resonance_links": links})}
        )
        self.store.update(memory)
        for link in links:
            target = self.store.get(link.target_id)
            if target is None:
                continue
            back = ResonanceLink(
                source_id=target.id, target_id=memory.id, strength=link.strength,
                link_type=link.link_type,
            )
            existing = list(target.tag.resonance_links)
            if len(existing) < cfg.max_links:
                existing.append(back)
            else:
                weakest = min(range(len(existing)), key=lambda i: existing[i].strength)
                if back.strength > existing[weakest].strength:
                    existing[weakest] = back
                else:
                    continue
            self.store.update(
                target.model_copy(
                    update={"tag": target.tag.model_copy(update={"resonance_links": existing})}
                )
            )
        return memory

    def _store_and_link_batch(
        self, memories: Iterable[Memory], search: BatchSearch
    ) -> list[Memory]:
        """:meth:`_store_and_link` for consecutive new memories, searches batched.

        Memory ``j``'s candidates depend only on the embeddings and insertion order of
        the memories stored up to it, which linking never changes. So each block of
        memories is saved first, the candidates of all its memories come from one
        ``search(embeddings, limit, visible_until=ids)`` (each memory sees the store
        as it was right after its own save), and the memories are then linked one by
        one, in order, exactly as :meth:`_store_and_link` would.

        Args:
            memories: new memories in encoding order (resonance enabled); consumed
                one block at a time.
            search: the store's ``search_by_embedding_batch``.

        Returns:
            The memories with their forward links, in order.
        """
        cfg = self.config.resonance
        limit = cfg.max_links * cfg.candidate_multiplier
        out: list[Memory] = []
        source = iter(memories)
        while block := list(itertools.islice(source, _LINK_SEARCH_BLOCK)):
            before = len(self.store)
            for memory in block:
                self.store.save(memory)
            # Memory i of the block is linked when the store holds before + i + 1
            # memories; up to ``limit`` of them its candidates are all of them (SPEC 7).
            first = min(len(block), max(0, limit - before))
            searched = block[first:]
            found = (
                search([m.embedding or [] for m in searched], limit,
                       visible_until=[m.id for m in searched])
                if searched else []
            )
            if len(found) != len(searched):
                raise ValueError(
                    f"search_by_embedding_batch returned {len(found)} results for "
                    f"{len(searched)} queries"
                )
            everything = self.store.list_all()[: before + first] if first else []
            for i, memory in enumerate(block):
                candidates = everything[: before + i + 1] if i < first else found[i - first]
                out.append(self._link(memory, candidates))
        return out

    @_synchronized
    @traced("emotional_memory.encode", content_length=("content", len))
    def encode(
        self,
        content: str,
        appraisal: AppraisalVector | GenericAppraisalVector | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        affect: CoreAffect | None = None,
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
                ``set_affect`` yields zero velocity).

        Returns:
            The stored memory (with its forward links).
        """
        content = self._check_content(content)
        metadata = self._check_metadata(metadata)
        now = self._now()
        with traced_span("emotional_memory.embed"):
            embedding = self._clean_embedding(self.embedder.embed(content), "content")
        memory, new_state = self._prepare(
            self._state, content, embedding, appraisal, metadata, affect, now
        )
        memory = self._store_with_state(lambda: self._store_and_link(memory), lambda: new_state)
        return self._stored(memory)

    def _stored(self, memory: Memory) -> Memory:
        """The store's copy (a durable store may round embeddings, e.g. to float32)."""
        stored = self.store.get(memory.id)
        return stored if stored is not None else memory

    @_synchronized
    @traced("emotional_memory.encode_batch", batch_size=("contents", len))
    def encode_batch(
        self,
        contents: Sequence[str],
        metadata: Sequence[dict[str, Any] | None] | None = None,
    ) -> list[Memory]:
        """Encode many events with one ``embed_batch`` call; same result as repeated encode.

        The whole batch is one transaction: either every memory is stored or none.
        When the store has ``search_by_embedding_batch(embeddings, top_k, *,
        visible_until=ids)`` (as ``InMemoryStore`` does), the resonance candidates of
        a block of new memories are found by one batched search after saving them,
        each memory seeing only the memories stored up to itself; links, their order
        and the final state are the same as with one search per memory, which is
        what stores without that method get.

        Args:
            contents: event texts.
            metadata: optional per-event metadata (same length as ``contents``).

        Returns:
            The stored memories, in order.
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
                f"metadata must have one entry per content ({len(texts)}), got {len(metadata)}"
            )
        metas = [
            self._check_metadata(m, f"metadata[{i}]")
            for i, m in enumerate(metadata if metadata is not None else [None] * len(texts))
        ]
        if not texts:
            return []
        batch = getattr(self.embedder, "embed_batch", None)
        # Embedders with only ``embed`` still work (one call per text).
        with traced_span("emotional_memory.embed", {"count": len(texts)}):
            raw = batch(texts) if callable(batch) else [self.embedder.embed(t) for t in texts]
        if len(raw) != len(texts):
            raise ValueError(f"embedder returned {len(raw)} embeddings for {len(texts)} texts")
        # Each raw vector is dropped once cleaned: one copy of the batch at a time.
        pending: list[Any] = list(raw)
        del raw
        embeddings: list[list[float] | None] = []
        for i in range(len(pending)):
            embeddings.append(self._clean_embedding(pending[i], f"contents[{i}]"))
            pending[i] = None
        state = self._state

        def prepared() -> Iterator[Memory]:
            """The batch's memories, prepared one at a time as they are consumed."""
            nonlocal state
            for text, emb, meta in zip(texts, embeddings, metas, strict=True):
                memory, state = self._prepare(state, text, emb, None, meta, None, self._now())
                yield memory

        def write() -> list[Memory]:
            search = getattr(self.store, "search_by_embedding_batch", None)
            if self.config.enable_resonance and callable(search):
                return self._store_and_link_batch(prepared(), search)
            return [self._store_and_link(m) for m in prepared()]

        out = self._store_with_state(write, lambda: state)
        return [self._stored(m) for m in out]

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
                neither ``appraisal`` nor ``affect`` is given; default "").
            appraisal: Optional appraisal; its projection becomes the event affect.
            metadata: Optional dict passed to the appraisal engine as ``context``.
            affect: Optional explicit event affect (takes precedence over ``appraisal``).

        Returns:
            The tag ``encode`` would have stored for this event (as in the original).
        """
        text = self._check_content(content if content is not None else "")
        metadata = self._check_metadata(metadata)
        now = self._now()
        memory, new_state = self._prepare(
            self._state, text, None, appraisal, metadata, affect, now
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
        arousal and the snapshot mood arousal; the reconsolidation window opens (SPEC 8).

        Args:
            memory_id: Id of the memory to elaborate.

        Returns:
            The updated memory, or None (as in the original) for an unknown id, a
            memory not pending appraisal, or no appraisal engine.
        """
        if self.appraisal_engine is None:
            return None
        memory = self.store.get(memory_id)
        if memory is None or not memory.tag.pending_appraisal:
            return None
        now = self._now()
        appraisal = self.appraisal_engine.appraise(memory.content, memory.metadata or None)
        appraised = appraisal.to_core_affect()
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
        if self.config.auto_categorize:
            new_tag = label_tag(new_tag)
        updated = memory.model_copy(update={"tag": new_tag})
        with store_transaction(self.store):
            current = self.store.get(memory_id)
            if current == memory:
                self.store.update(updated)
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
        pending_ids = getattr(self.store, "pending_ids", None)
        if callable(pending_ids):
            pending = list(pending_ids())
        else:
            pending = [m.id for m in self.store.list_all() if m.tag.pending_appraisal]
        done = (self.elaborate(mid) for mid in pending)
        return [m for m in done if m is not None]

    # ------------------------------------------------------------------ retrieval

    def _route(self, query: str) -> list[float]:
        cfg = self.config.retrieval
        qc = cfg.query_classifier
        if qc is None or qc.mode == "disabled":
            return list(cfg.base_weights)
        if qc.mode == "heuristic":
            qtype = self._heuristic.classify(query)
        elif self.query_classifier is not None:
            qtype = self.query_classifier.classify(query)
        else:
            return list(cfg.base_weights)
        if qtype in qc.routed_weights:
            return list(qc.routed_weights[qtype])
        if qc.default_type in qc.routed_weights:
            return list(qc.routed_weights[qc.default_type])
        return list(cfg.base_weights)

    @_synchronized
    def current_weights(self, query: str = "", now: datetime | None = None) -> np.ndarray:
        """The (6,) weights a retrieval of ``query`` would use now (routing, mood, mask).

        Args:
            query: Query text used for routing (SPEC 4, query routing).
            now: Accepted for compatibility; retrieval reads the mood as last
                updated, not regressed to a time (SPEC 11).

        Returns:
            Weights, shape (6,), in SPEC 4 signal order, summing to 1.
        """
        del now  # the weights read the mood as last updated (SPEC 11), whatever the time
        mood = self._state.mood
        derived = self._derived()
        w = mood_weights(derived.weight_params(self._route(query)), mood)
        if derived.all_signals_on:  # the mask passes the weights through bit for bit
            return w
        return masked_weights(w.tolist(), derived.signal_mask)

    @_synchronized
    def plan_retrieval(
        self, query: str, top_k: int = 5, *, query_affect: CoreAffect | None = None
    ) -> RetrievalPlan:
        """The two-pass ranking :meth:`retrieve` would use now, without side effects.

        Args:
            query: query text.
            top_k: number of seeds / results (>= 1).
            query_affect: optional override for affect proximity.

        Returns:
            The :class:`RetrievalPlan` (with its candidates, time and query features).
        """
        return self._plan(query, top_k, query_affect)[0]

    def _derived(self) -> _ConfigDerived:
        """Values derived from ``self.config`` alone, rebuilt when the config is replaced.

        Returns:
            The :class:`_ConfigDerived` of the current config object.
        """
        derived = getattr(self, "_config_derived", None)
        if derived is None or derived.config is not self.config:
            derived = _ConfigDerived(self.config)
            self._config_derived = derived
        return derived

    def _rank(
        self,
        query: str,
        top_k: int,
        query_affect: CoreAffect | None,
        precomputed_weights: Any = None,
    ) -> _Ranking:
        """The two-pass ranking of ``query`` now, as arrays (no breakdown objects).

        Args:
            query: query text.
            top_k: number of seeds / results (>= 1).
            query_affect: optional override for affect proximity.
            precomputed_weights: optional (6,) final weights used instead of the
                routed, mood-adaptive, masked ones.

        Returns:
            The :class:`_Ranking` (its ``plan()`` is what ``plan_retrieval`` returns).
        """
        top_k = positive_int("top_k", top_k)
        fixed = None if precomputed_weights is None else _check_weights(precomputed_weights)
        self._check_content(query, "query")
        if query_affect is not None and not isinstance(query_affect, CoreAffect):
            raise TypeError("query_affect must be a CoreAffect or None")
        now = self._now()
        n = len(self.store)
        if n == 0:
            return _Ranking(now=now, plan_now=None, weights=np.zeros(6))
        with traced_span("emotional_memory.embed"):
            embedding = self._clean_embedding(self.embedder.embed(query), "query")
        cfg = self.config.retrieval
        limit = top_k * cfg.candidate_multiplier
        derived = self._derived()
        if n > limit and not cfg.full_bank_candidates:
            with traced_span("emotional_memory.store.search_by_embedding", {"limit": limit}):
                candidates = self.store.search_by_embedding(embedding or [], limit)
        else:
            candidates = self.store.list_all()
        lexical = None
        if derived.lexical_on or (cfg.hybrid_candidates and self.config.enable_lexical):
            candidates, lexical = self._lexical_candidates(
                query, candidates, limit, full=n <= limit or cfg.full_bank_candidates
            )
            if not derived.lexical_on:  # hybrid candidates, six-signal score
                lexical = None
        if not candidates:
            weights = fixed if fixed is not None else _check_weights(self.current_weights(query))
            return _Ranking(now=now, plan_now=now, weights=weights)
        # One compiled program: weights (route, mood, mask), both passes, activation.
        arrays, features = rank_candidates(
            embedding,
            query_affect if query_affect is not None else self._state.core_affect,
            # SPEC 11: the weights and s2 read the mood as last updated, un-regressed.
            self._state.mood,
            self._state.momentum,
            candidates,
            now,
            derived.params,
            fixed,
            top_k,
            self.config.resonance.propagation_hops,
            self.config.enable_resonance,
            weight_params=derived.weight_params(self._route(query)),
            signal_mask=derived.mask,
            lexical=lexical,
        )
        weights = _check_weights(arrays.weights, lexical=lexical is not None)
        return _Ranking(
            now=now, plan_now=now, weights=weights, candidates=candidates, arrays=arrays,
            query=features,
        )

    def _lexical_index(self) -> Any:
        """What answers lexical queries: the store itself when it keeps a lexical index
        (``lexical_search`` / ``lexical_inputs`` under its lock), else an index built
        from ``list_all()`` for a plain store (``search`` / ``inputs``)."""
        if callable(getattr(self.store, "lexical_search", None)):
            return _StoreLexicon(self.store)
        return LexicalIndex.from_pairs((m.id, m.content) for m in self.store.list_all())

    def _lexical_candidates(
        self, query: str, candidates: list[Memory], limit: int, *, full: bool
    ) -> tuple[list[Memory], LexicalInputs]:
        """Hybrid candidates and their term statistics (lexical signal s7 on).

        The semantic shortlist is followed by the memories of the lexical shortlist
        (the ``limit`` best BM25 scores) it lacks, in lexical rank order. With ``full``
        the candidates are already every memory.

        Args:
            query: query text.
            candidates: the semantic candidates (or every memory with ``full``).
            limit: shortlist size (``top_k * candidate_multiplier``).
            full: whether ``candidates`` already holds the whole store.

        Returns:
            ``(candidates, lexical)``: the candidates and their unpadded statistics.
        """
        cfg = self.config.retrieval
        terms = query_terms(query, self._derived().stop_words)
        index = self._lexical_index()
        if not full and terms:
            have = {m.id for m in candidates}
            extra = [i for i in index.search(terms, limit, cfg.lexical_k1, cfg.lexical_b)
                     if i not in have]
            found = (self.store.get(i) for i in extra)
            candidates = candidates + [m for m in found if m is not None]
        return candidates, index.inputs(terms, [m.id for m in candidates])

    def _plan(
        self, query: str, top_k: int, query_affect: CoreAffect | None
    ) -> tuple[RetrievalPlan, datetime]:
        ranking = self._rank(query, top_k, query_affect)
        return ranking.plan(), ranking.now

    def _after_retrieval(self, winners: list[Memory], now: datetime) -> list[Memory]:
        """Apply the retrieval side effects to the winners' current rows, in one transaction.

        The winners are read again inside the store's write transaction, so another
        engine or process writing the same memories between the ranking and now loses
        no update (a winner deleted meanwhile is dropped).
        """
        with store_transaction(self.store):
            current = [self.store.get(m.id) for m in winners]
            updated = self._retrieval_effects([m for m in current if m is not None], now)
            for m in updated:
                self.store.update(m)
        return updated

    def _retrieval_effects(self, winners: list[Memory], now: datetime) -> list[Memory]:
        """Reconsolidation, prediction update and Hebbian strengthening (SPEC 6)."""
        cfg = self.config.retrieval
        affect = self._state.core_affect
        updated: list[Memory] = []
        for memory in winners:
            tag: EmotionalTag = memory.tag.model_copy(
                update={"last_retrieved": now, "retrieval_count": memory.tag.retrieval_count + 1}
            )
            ape = compute_ape(tag, affect)
            if self.config.enable_reconsolidation:
                if ape > cfg.ape_threshold and tag.window_opened_at is None:
                    tag = reconsolidate(tag, affect, ape, cfg.reconsolidation_learning_rate)
                    tag = tag.model_copy(update={"window_opened_at": now})
                elif tag.window_opened_at is not None:
                    open_for = (now - tag.window_opened_at).total_seconds()
                    if open_for <= cfg.reconsolidation_window_seconds:
                        tag = reconsolidate(tag, affect, ape, cfg.reconsolidation_learning_rate)
                    else:
                        tag = tag.model_copy(update={"window_opened_at": None})
            tag = update_prediction(tag, affect, ape)
            updated.append(memory.model_copy(update={"tag": tag}))
        increment = self.config.resonance.hebbian_increment
        if increment > 0 and len(updated) > 1:
            ids = [m.id for m in updated]
            updated = [
                m.model_copy(
                    update={"tag": m.tag.model_copy(
                        update={"resonance_links": hebbian_strengthen(m, ids, increment)}
                    )}
                )
                for m in updated
            ]
        return updated

    @_synchronized
    @traced("emotional_memory.retrieve", **RETRIEVE_ATTRIBUTES)
    def retrieve(
        self,
        query: str,
        top_k: int = 5,
        *,
        query_affect: CoreAffect | None = None,
        precomputed_weights: Any = None,
    ) -> list[Memory]:
        """Recall the ``top_k`` memories that best match the query, meaning and mood.

        Args:
            query: query text.
            top_k: number of memories (>= 1).
            query_affect: overrides the current affect for affect proximity (s3) only.
            precomputed_weights: optional (6,) finite weights used as they are,
                instead of the routed, mood-adaptive ones.

        Returns:
            Up to ``top_k`` memories, best first, after retrieval side effects.

        Raises:
            ValueError: ``top_k < 1`` or ``precomputed_weights`` not 6 finite numbers.
        """
        ranking = self._rank(query, top_k, query_affect, precomputed_weights)
        winners = ranking.winners(top_k)
        return self._after_retrieval(winners, ranking.now) if winners else []

    @_synchronized
    @traced("emotional_memory.retrieve_with_explanations", **RETRIEVE_ATTRIBUTES)
    def retrieve_with_explanations(
        self,
        query: str,
        top_k: int = 5,
        *,
        query_affect: CoreAffect | None = None,
        precomputed_weights: Any = None,
    ) -> list[RetrievalExplanation]:
        """Like :meth:`retrieve`, with the ranking-time breakdown of each result.

        Args:
            query: query text.
            top_k: number of memories (>= 1).
            query_affect: overrides the current affect for affect proximity (s3) only.
            precomputed_weights: optional (6,) finite weights used as they are.

        Returns:
            One :class:`RetrievalExplanation` per result (memory after side effects).
        """
        ranking = self._rank(query, top_k, query_affect, precomputed_weights)
        winners = ranking.winners(top_k)
        if not winners or ranking.arrays is None:
            return []
        updated = self._after_retrieval(winners, ranking.now)
        return explain_top(ranking.candidates, ranking.arrays, updated)

    def _commit(
        self, plan: RetrievalPlan, top_k: int, now: datetime
    ) -> list[RetrievalExplanation]:
        """Apply retrieval side effects for the plan's winners and explain them."""
        top = plan.pass2[:top_k]
        if not top:
            return []
        updated = self._after_retrieval([r.memory for r in top], now)
        rank1 = {r.memory.id: i + 1 for i, r in enumerate(plan.pass1)}
        seeds = set(plan.seed_ids)
        return [
            RetrievalExplanation(
                memory=mem,
                score=r.score,
                breakdown=r.breakdown,
                activation_level=plan.activation_map.get(mem.id, 0.0),
                pass1_rank=rank1[mem.id],
                pass2_rank=i + 1,
                selected_as_seed=mem.id in seeds,
                candidate_count=plan.candidate_count,
            )
            for i, (r, mem) in enumerate(zip(top, updated, strict=True))
        ]

    def _appraise_query(self, query: str) -> CoreAffect:
        """The appraised affect of the query text (RuntimeError without an engine)."""
        self._check_content(query, "query")
        if self.appraisal_engine is None:
            raise RuntimeError(
                "retrieving with query appraisal needs an appraisal_engine; pass one to "
                "EmotionalMemory, or call retrieve(query, query_affect=...)"
            )
        return self.appraisal_engine.appraise(query, None).to_core_affect()

    @_synchronized
    def retrieve_with_query_appraisal(self, query: str, top_k: int = 5) -> list[Memory]:
        """Retrieve with the query's own appraised affect as ``query_affect``.

        The query is always appraised (also with ``enable_appraisal=False``); the
        engine's affective state is not changed by the appraisal.

        Args:
            query: query text (also the text appraised).
            top_k: number of memories (>= 1).

        Returns:
            Up to ``top_k`` memories, best first, after retrieval side effects.

        Raises:
            RuntimeError: without an appraisal engine.
        """
        affect = self._appraise_query(query)
        return self.retrieve(query, top_k, query_affect=affect)

    def retrieve_query_gated(
        self, query: str, top_k: int = 5, *, tau: float | None = None
    ) -> list[Memory]:
        """Retrieve by meaning alone when the query carries no affect, else by its affect.

        The query is appraised; when ``|valence| < tau`` the ranking uses
        semantic-only weights ``[1, 0, 0, 0, 0, 0]``, otherwise it is
        :meth:`retrieve_with_query_appraisal`'s ranking with that affect.

        Args:
            query: query text.
            top_k: number of memories (>= 1).
            tau: valence gate; ``None`` uses ``config.query_affect_gate_tau``.

        Returns:
            Up to ``top_k`` memories, best first, after retrieval side effects.

        Raises:
            RuntimeError: without an appraisal engine.
            ValueError: ``tau`` not a finite number >= 0.
        """
        gate = self.config.query_affect_gate_tau if tau is None else tau
        gate = in_range("tau", gate, 0.0, float("inf"))
        affect = self._appraise_query(query)
        if abs(affect.valence) < gate:
            return self.retrieve(query, top_k, precomputed_weights=_SEMANTIC_ONLY)
        return self.retrieve(query, top_k, query_affect=affect)

    # ------------------------------------------------------------------ store access

    @_synchronized
    def get(self, memory_id: str) -> Memory | None:
        """Look a memory up by id.

        Args:
            memory_id: The memory's id.

        Returns:
            The memory with this id, or None.
        """
        return self.store.get(memory_id)

    @_synchronized
    def delete(self, memory_id: str) -> bool:
        """Delete a memory and every link pointing to it.

        Args:
            memory_id: The memory's id.

        Returns:
            True when it existed.
        """
        with store_transaction(self.store):
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
        linking_to = getattr(self.store, "linking_to", None)
        if callable(linking_to):  # columnar stores answer without rebuilding memories
            linking = [self.store.get(mid) for mid in linking_to(doomed) if mid not in doomed]
            holders: list[Memory] = [m for m in linking if m is not None]
        else:
            holders = [m for m in self.store.list_all() if m.id not in doomed]
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
        with store_transaction(self.store):  # the current row, changed in one transaction
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
        threshold = in_range("threshold", threshold, 0.0, 1.0)
        now = self._now()
        columns = getattr(self.store, "columns", None)
        if callable(columns):  # columnar stores: the same float64 inputs, no objects
            ids, cols = columns(now)
            if not ids:
                return 0
            strengths = strength_from_columns(
                cols.age_seconds, cols.affect[:, 1], cols.consolidation,
                cols.retrieval_count, self.config.decay,
            )
        else:
            memories = self.store.list_all()
            if not memories:
                return 0
            ids = [m.id for m in memories]
            strengths = compute_effective_strength_batch(
                [m.tag for m in memories], now, self.config.decay
            )
        doomed = [mid for mid, s in zip(ids, strengths.tolist(), strict=True) if s < threshold]
        with store_transaction(self.store):
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
        with store_transaction(self.store):
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

    # ------------------------------------------------------------------ state

    def get_state(self) -> AffectiveState:
        """The current affective state.

        Returns:
            The engine's (immutable) ``AffectiveState``.
        """
        return self._state

    @_synchronized_state
    def set_affect(self, core_affect: CoreAffect) -> AffectiveState:
        """Feed an observed affect into the state (momentum and mood follow).

        Args:
            core_affect: The observed core affect.

        Returns:
            The new state (persisted first when a state store is configured).

        Raises:
            TypeError: If ``core_affect`` is not a ``CoreAffect``.
        """
        if not isinstance(core_affect, CoreAffect):
            raise TypeError("core_affect must be a CoreAffect")
        return self._adopt(self._update_state(core_affect, self._now()))

    @_synchronized_state
    def reset_state(self) -> None:
        """Back to the initial neutral state."""
        self._adopt(AffectiveState.initial(self._now()))

    def save_state(self) -> dict[str, Any]:
        """A JSON-able snapshot of the state (see :meth:`load_state`).

        Returns:
            ``AffectiveState.snapshot()`` of the current state, history included.
        """
        return self._state.snapshot()

    @_synchronized_state
    def load_state(self, data: dict[str, Any]) -> None:
        """Restore a snapshot from :meth:`save_state` (of this library or the original).

        Args:
            data: A snapshot dict; persisted when a state store is configured.
        """
        self._adopt(AffectiveState.restore(data))

    @_synchronized
    def persist_state(self) -> dict[str, Any]:
        """Write the state to the state store, when one is configured.

        Returns:
            The state's snapshot (as :meth:`save_state`), also without a state store.
        """
        if self.state_store is not None:
            self._persist(self._state)
        return self._state.snapshot()

    @_synchronized
    def restore_persisted_state(self) -> bool:
        """Load the state from the state store.

        Returns:
            True when a stored state was loaded; False without a state store or when
            none was stored.
        """
        if self.state_store is None:
            return False
        loaded: Any = self.state_store.load()
        if loaded is None:
            return False
        # Stores of the original protocol return a state; older ones a snapshot dict.
        self._state = loaded if isinstance(loaded, AffectiveState) else AffectiveState.restore(
            loaded
        )
        return True

    @_synchronized
    def clear_persisted_state(self) -> None:
        """Forget the persisted state (the in-memory state is kept)."""
        if self.state_store is not None:
            self.state_store.clear()

    def get_current_mood(self, now: datetime | None = None) -> MoodField:
        """The mood at ``now``, regressed towards baseline when ``mood_decay`` is set.

        Args:
            now: Aware time to read the mood at (default: the engine clock); only used
                with ``mood_decay``.

        Returns:
            The stored mood, or its regression to ``now`` (the state is not changed).
        """
        mood = self._state.mood
        if self.config.mood_decay is None:
            return mood
        at = self._now() if now is None else aware("now", now)
        return mood.regress(at, self.config.mood_decay)

    # ------------------------------------------------------------------ lifecycle

    @_synchronized
    def close(self) -> None:
        """Close the store, the state store and the appraisal engine when they can be.

        The embedder is not closed: the caller owns it (as in the original).
        """
        for obj in (self.store, self.state_store, self.appraisal_engine):
            close = getattr(obj, "close", None)
            if callable(close):
                close()

    def __enter__(self) -> EmotionalMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

