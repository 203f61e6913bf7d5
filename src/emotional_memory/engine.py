"""EmotionalMemory: the imperative shell around the scoring kernel (docs/behaviour.md §5-§9).

The engine owns the affective state, encodes events with their affective
fingerprint, links them into a resonance network, and retrieves with the two-pass,
mood-adaptive score. Retrieval then applies its side effects on the winners only:
reconsolidation within a labile window (Nader et al. 2000), Pearce-Hall prediction
updates (1980) and Hebbian strengthening of co-retrieved links.

Every operation validates its input before touching anything and runs inside one
store transaction, so a failed call leaves store and state exactly as they were.

The class is composed of one mixin per concern, in ``emotional_memory._engine``:
``state`` (affective state and its persistence), ``encoding`` (encode, observe,
elaborate, resonance linking), ``ranking`` (candidates, the two-pass ranking,
retrieve), ``effects`` (what retrieval does to its winners) and ``records`` (get,
delete, update, list, prune, export, import), on ``core`` (attributes, input checks);
the configuration is in ``config``, the lock decorators in ``locks``.
"""

from __future__ import annotations

import asyncio
import copy
from datetime import datetime

# The engine's parts, by concern. The names below that engine.py does not use itself
# were defined here before the split and stay importable from this module.
from emotional_memory._async_bridge import (
    APPRAISAL_METHODS,
    EMBEDDER_METHODS,
    STORE_METHODS,
    async_methods,
)
from emotional_memory._engine.config import EmotionalMemoryConfig, _ConfigDerived  # noqa: F401
from emotional_memory._engine.core import Clock
from emotional_memory._engine.encoding import (  # noqa: F401
    _LINK_SEARCH_BLOCK,
    BatchSearch,
    EncodingMixin,
)
from emotional_memory._engine.locks import _P, _R, _synchronized, _synchronized_state  # noqa: F401
from emotional_memory._engine.ranking import (  # noqa: F401
    _SEMANTIC_ONLY,
    RankingMixin,
    _Ranking,
)
from emotional_memory._engine.records import RecordsMixin
from emotional_memory._scope_locks import ScopeLocks
from emotional_memory._validation import utc_now
from emotional_memory.affect_rater import AffectRater
from emotional_memory.embedder_identity import check_embedder
from emotional_memory.interfaces import AffectiveStateStore, AppraisalEngine, Embedder, MemoryStore
from emotional_memory.models import check_scope_part
from emotional_memory.query_classifier import HeuristicQueryClassifier, QueryClassifier
from emotional_memory.state import AffectiveState
from emotional_memory.stores._shared.state import scoped_state_store


def _default_clock() -> datetime:
    return utc_now()


def _check_state_store(state_store: object) -> None:
    """Refuse a ``state_store`` the engine cannot call: without ``save`` / ``load``
    (a URL string, say), or with ``async def`` ones (the engine calls its state store
    synchronously, in its worker thread under ``AsyncEmotionalMemory``: their
    coroutines would never be awaited).

    Raises:
        TypeError: either, naming ``state_store``.
    """
    if state_store is None:
        return
    missing = [m for m in ("save", "load") if not callable(getattr(state_store, m, None))]
    if missing:
        raise TypeError(
            f"state_store must provide save, load; got {type(state_store).__name__} "
            f"without {', '.join(missing)}"
        )
    found = async_methods(state_store, ("save", "load", "clear"))
    if found:
        raise TypeError(
            f"state_store {type(state_store).__name__} is async ({found[0]} is async def): "
            "both engines call the state store synchronously; give it blocking methods"
        )


def _check_callables(appraisal_engine: object, query_classifier: object) -> None:
    """Refuse an appraisal engine without ``appraise`` or a query classifier without a
    blocking ``classify`` (an ``async def`` one's coroutine would never be awaited:
    llm routing would fall back to the default weights without a word).

    Raises:
        TypeError: either, naming ``appraisal_engine`` or ``query_classifier``.
    """
    for name, part, method in (("appraisal_engine", appraisal_engine, "appraise"),
                               ("query_classifier", query_classifier, "classify")):
        if part is not None and not callable(getattr(part, method, None)):
            raise TypeError(f"{name} must provide {method}; got {type(part).__name__}")
    if async_methods(query_classifier, ("classify",)):
        raise TypeError(
            f"query_classifier {type(query_classifier).__name__}.classify is async def: "
            "both engines call the query classifier synchronously (in the engine's "
            "thread under AsyncEmotionalMemory); give it a blocking classify"
        )


class EmotionalMemory(EncodingMixin, RankingMixin, RecordsMixin):
    """Affective memory for an agent: encode events, retrieve by meaning and feeling.

    Args:
        store: where memories live (``InMemoryStore``, ``SQLiteStore`` or your own).
        embedder: text -> vector.
        appraisal_engine: optional appraiser used by ``encode`` when no appraisal or
            affect is given.
        config: engine configuration (defaults reproduce docs/behaviour.md).
        state_store: optional persistence for the affective state; a stored state is
            restored at construction and every state change is persisted.
        query_classifier: classifier for ``query_classifier.mode == "llm"`` routing.
        clock: zero-argument callable returning an aware datetime (default UTC now);
            inject one to replay timestamped logs deterministically.
        affect_from_text: opt-in :class:`~emotional_memory.affect_rater.AffectRater`
            (e.g. :class:`~emotional_memory.affect_rater.TextAffectRater`): an event
            encoded (or observed) without an affect, an appraisal or an appraisal
            engine gets its affect rated from its text, fed exactly as
            ``encode(..., affect=rating)`` feeds it. ``None`` (the default): such an
            event takes the current affect, as in the original. Off while
            ``config.enable_appraisal`` is False. A rater that raises, or answers
            no finite CoreAffect per text, makes the call raise
            :class:`~emotional_memory.affect_rater.AffectRatingError` (nothing stored).
        shared_state: share the affective state with engines in other processes or
            hosts over the same database: every operation runs on the state as last
            saved (its version read once per operation, while the operation holds
            its scope), operations on one scope (or a scope and its parent) are
            serialised across processes (PostgreSQL: advisory locks per scope;
            SQLite: ``flock`` on files beside the database), and each saves the new
            state, with a new version, in its write transaction. Needs a state
            store made by ``from_store(store)``. Off by default (each engine keeps
            its own copy, as in the original).

    Raises:
        TypeError: a store, embedder, appraisal engine, query classifier or
            ``affect_from_text`` without the methods needed, an async store, embedder
            or appraisal engine (the async engine's), an async query classifier,
            a config or clock of the wrong type.
        ValueError: the store records another embedder than ``embedder`` (see
            :mod:`emotional_memory.embedder_identity`), or ``shared_state`` without a
            state store in the store's database.
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
        affect_from_text: AffectRater | None = None,
        shared_state: bool = False,
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
        parts: tuple[tuple[str, object, tuple[str, ...]], ...] = (
            ("store", store, STORE_METHODS), ("embedder", embedder, EMBEDDER_METHODS),
            ("appraisal_engine", appraisal_engine, APPRAISAL_METHODS),
        )
        for name, part, protocol in parts:
            found = async_methods(part, protocol)
            if found:  # its calls would return coroutines that nobody awaits
                raise TypeError(
                    f"{name} {type(part).__name__} is async ({found[0]} is async def): the "
                    "sync engine needs blocking components; use AsyncEmotionalMemory"
                )
        _check_state_store(state_store)
        _check_callables(appraisal_engine, query_classifier)
        if affect_from_text is not None and not callable(
            getattr(affect_from_text, "rate_affect", None)
        ):
            raise TypeError(
                "affect_from_text must provide rate_affect(texts) -> list[CoreAffect]; got "
                f"{type(affect_from_text).__name__}"
            )
        if async_methods(affect_from_text, ("rate_affect",)):
            raise TypeError(
                f"affect_from_text {type(affect_from_text).__name__}.rate_affect is async "
                "def: the text rater must be synchronous (it runs in the engine's thread, "
                "also under AsyncEmotionalMemory)"
            )
        check_embedder(store, embedder)
        self._scope_locks = ScopeLocks()
        self.store = store
        self.embedder = embedder
        self.appraisal_engine = appraisal_engine
        self.affect_from_text = affect_from_text
        self.config = config if config is not None else EmotionalMemoryConfig()
        self.state_store = state_store
        self.query_classifier = query_classifier
        self._clock: Clock = clock if clock is not None else _default_clock
        self._heuristic = HeuristicQueryClassifier()
        self._state = AffectiveState.initial(self._now())
        self._shared_state = bool(shared_state)
        if shared_state and self._shared_states() is None:
            raise ValueError(
                "shared_state needs a state store kept in the memory store's own "
                "database (SQLiteAffectiveStateStore.from_store(store) or "
                "PostgresAffectiveStateStore.from_store(store))"
            )
        if state_store is not None:
            self._restore_new_view()  # restore_persisted_state, tolerating a bad shared one

    # ------------------------------------------------------------------ scopes

    def scoped(self, *path: str) -> EmotionalMemory:
        """A view of this engine confined to a scope path (many users in one store).

        The view shares the store, embedder, appraisal engine, config, clock and lock
        of this engine and has its own affective state, restored from and persisted
        to the state store under a key derived from the full path (see
        :func:`~emotional_memory.state_stores.scoped_state_store`). Memories it
        encodes carry the path (``Memory.scope``); it sees the memories whose path
        starts with its own, and everything it does (candidate search, lexical
        statistics, resonance linking, activation, retrieval side effects, get,
        delete, update, list, prune, export, import, elaboration) sees and touches
        only those. Another scope's memory behaves exactly like an unknown id. The
        root engine (path ``()``) sees every scope. ``view.scoped("s1")`` nests.

        Args:
            *path: one or more non-empty strings, appended to this view's path.

        Returns:
            The view (an :class:`EmotionalMemory`).

        Raises:
            ValueError: no part, or a part that is not a non-empty string or is longer
                than ``MAX_SCOPE_PART_BYTES`` (1024 UTF-8 bytes), named.
            TypeError: a state store that cannot keep one state per scope.
        """
        if not path:
            raise ValueError("scoped() needs at least one path part, e.g. scoped('alice')")
        for i, part in enumerate(path):
            if not isinstance(part, str) or not part:
                raise ValueError(
                    f"scope path part {i} must be a non-empty string, got {part!r}"
                )
            if "\x00" in part:
                raise ValueError(f"scope path part {i} must not contain NUL characters")
            check_scope_part(f"scope path part {i}", part)
        full = (*self._scope, *path)
        root_states = self.__dict__.get("_root_state_store", self.state_store)
        view = copy.copy(self)
        for cached in ("_joined_cache", "_state_version", "_sharing_depth", "_time_floor"):
            view.__dict__.pop(cached, None)
        view._scope = full
        view._root_state_store = root_states
        view.state_store = scoped_state_store(root_states, full)
        view._state = AffectiveState.initial(view._now())
        if view.state_store is not None:
            view._restore_new_view()
        return view

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the store, the state store and the appraisal engine when they can be.

        The embedder is not closed: the caller owns it (as in the original). A
        scoped view closes nothing: the root engine owns the shared parts.
        """
        if self._scope:
            return
        with self._scope_locks.hold(self._scope):  # not an operation: no shared state
            for obj in (self.store, self.state_store, self.appraisal_engine):
                close = getattr(obj, "close", None)
                if callable(close):
                    close()

    def __repr__(self) -> str:
        """``EmotionalMemory(store=<store repr>, memories=<n>)``, as the original's
        (``memories``: what this engine or view sees).

        On a thread running an event loop (``repr(async_engine.engine)`` in a log line)
        it never waits for a running operation, which may be waiting for that loop:
        ``memories=busy`` then, and ``memories=unknown`` when async components cannot
        be called there; ``memories=unavailable`` when the store cannot count (its
        server down)."""
        locks, path = self._scope_locks, self._scope
        if not locks.acquire(path, blocking=asyncio._get_running_loop() is None):
            count: object = "busy"
        else:
            try:  # the count alone: no shared-state locks taken, nothing reloaded
                count = len(self._view())
            except ValueError:  # a closed store
                count = "closed"
            except RuntimeError:  # async components, on their loop's thread
                count = "unknown"
            except Exception:  # the store's server unreachable: a repr never raises
                count = "unavailable"
            finally:
                locks.release(path)
        return f"{type(self).__name__}(store={self.store!r}, memories={count})"

    def __enter__(self) -> EmotionalMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

