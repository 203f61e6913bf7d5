"""EmotionalMemory: the imperative shell around the scoring kernel (SPEC 5-9).

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

import copy
from datetime import datetime

# The engine's parts, by concern. The names below that engine.py does not use itself
# were defined here before the split and stay importable from this module.
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
from emotional_memory.interfaces import AffectiveStateStore, AppraisalEngine, Embedder, MemoryStore
from emotional_memory.models import check_scope_part
from emotional_memory.query_classifier import HeuristicQueryClassifier, QueryClassifier
from emotional_memory.state import AffectiveState
from emotional_memory.state_stores._scoped import scoped_state_store


def _default_clock() -> datetime:
    return utc_now()


class EmotionalMemory(EncodingMixin, RankingMixin, RecordsMixin):
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
        self._scope_locks = ScopeLocks()
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
        view.__dict__.pop("_joined_cache", None)
        view._scope = full
        view._root_state_store = root_states
        view.state_store = scoped_state_store(root_states, full)
        view._state = AffectiveState.initial(view._now())
        if view.state_store is not None:
            view.restore_persisted_state()
        return view

    # ------------------------------------------------------------------ lifecycle

    @_synchronized
    def close(self) -> None:
        """Close the store, the state store and the appraisal engine when they can be.

        The embedder is not closed: the caller owns it (as in the original). A
        scoped view closes nothing: the root engine owns the shared parts.
        """
        if self._scope:
            return
        for obj in (self.store, self.state_store, self.appraisal_engine):
            close = getattr(obj, "close", None)
            if callable(close):
                close()

    def __enter__(self) -> EmotionalMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

