"""Replay labelled recall scenarios through the real engine and score the rankings.

The data format is the realistic-recall JSON (scenarios -> sessions -> events with
preset valence/arousal, and queries with expected memory ids, a challenge type and an
optional query-time state). The protocol follows the published figures:

* a fresh engine per scenario; sessions in order;
* before each event ``set_affect(CoreAffect(valence, arousal))``, then ``encode``;
* per query: save the state, ``set_affect`` to the query state when present,
  ``retrieve_with_explanations(query, top_k)``, then restore the state.

A deterministic clock (1 ms per reading) replaces the wall clock, so a replay gives
the same numbers on any machine, however slow. Events with a ``timestamp`` (ISO 8601)
are encoded at that time on the clock; queries are then asked at the latest event time.

Real conversations come without affect labels. :class:`ReplayAffect` says what to do
then: events without ``valence``/``arousal`` get the affect a text model estimates
(``"estimate"``, the default:
:class:`~emotional_memory.appraisal_embedding.EmbeddingAppraisalEngine`) or the neutral
point (``"neutral"``); queries without a ``state`` keep the engine's
state (``"keep"``, the original protocol) or take their own text's estimated affect
(``"estimate"``).
"""

from __future__ import annotations

import contextlib
import os
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import numpy as np

from emotional_memory._validation import positive_int
from emotional_memory.affect import CoreAffect
from emotional_memory.dataset_format import (  # noqa: F401  (load_dataset, validate_dataset: public here too)
    check_scenario,
    event_time,
    load_dataset,
    validate_dataset,
)
from emotional_memory.engine import EmotionalMemory, EmotionalMemoryConfig
from emotional_memory.interfaces import Embedder
from emotional_memory.retrieval import RetrievalExplanation, RetrievalPlan


class TickClock:
    """A fake clock: starts at ``start`` and advances ``step`` on every reading.

    Args:
        start: first reading (aware; default 2026-01-01 UTC).
        step: advance per call (default 1 ms).
    """

    def __init__(
        self, start: datetime | None = None, step: timedelta = timedelta(milliseconds=1)
    ) -> None:
        self.now = start if start is not None else datetime(2026, 1, 1, tzinfo=UTC)
        self.step = step

    def __call__(self) -> datetime:
        current = self.now
        self.now = current + self.step
        return current

    def advance(self, delta: timedelta) -> None:
        """Jump forward by ``delta``.

        Args:
            delta: How far to move the next reading forward.
        """
        self.now = self.now + delta


def _text_names(path: object, texts: np.ndarray) -> list[str]:
    """The table's texts as str: byte strings (dtype ``S``) decoded as UTF-8, not
    read as their ``"b'...'"`` repr.

    Raises:
        ValueError: naming the file and the row of bytes that are not UTF-8.
    """
    if texts.dtype.kind != "S":
        return [str(t) for t in texts]
    names = []
    for i, raw in enumerate(texts.tolist()):
        try:
            names.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ValueError(f"embeddings {path}: 'texts'[{i}] is bytes that are not "
                             f"UTF-8 ({exc.reason} at byte {exc.start})") from None
    return names


class LookupEmbedder:
    """An embedder that looks texts up in a precomputed table (e.g. an ``.npz``).

    Args:
        texts: the known texts.
        embeddings: (len(texts), D) array.
    """

    def __init__(self, texts: Sequence[str], embeddings: np.ndarray) -> None:
        emb = np.asarray(embeddings, dtype=np.float32)
        if emb.ndim != 2 or emb.shape[0] != len(texts):
            raise ValueError(
                f"embeddings must have shape (len(texts), D); got {emb.shape} for "
                f"{len(texts)} texts"
            )
        self._index = {str(t): i for i, t in enumerate(texts)}
        self._emb = emb
        self.dim = int(emb.shape[1])

    @classmethod
    def from_npz(cls, path: str | os.PathLike[str]) -> LookupEmbedder:
        """Load a table with arrays ``texts`` and ``embeddings``.

        Args:
            path: An ``.npz`` file holding ``texts`` (N,) and ``embeddings`` (N, D).

        Returns:
            The ``LookupEmbedder`` over that table.

        Raises:
            FileNotFoundError: If there is no such file.
            IsADirectoryError: If ``path`` is a folder.
            ValueError: Naming the file, when it is not an ``.npz`` archive, lacks one
                of the arrays, ``embeddings`` is not a finite (len(texts), D) array
                of numbers with D >= 1, or a text repeats with another embedding.
        """
        try:
            archive = np.load(path, allow_pickle=False)
        except (FileNotFoundError, IsADirectoryError):
            raise
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            # numpy reads any other file as a pickle, which allow_pickle=False refuses
            detail = "" if isinstance(exc, ValueError) else f" ({exc})"
            raise ValueError(f"embeddings {path}: not an .npz archive{detail}") from None
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise ValueError(f"embeddings {path}: not an .npz archive (a single array)")
        with archive:
            missing = [k for k in ("texts", "embeddings") if k not in archive.files]
            if missing:
                raise ValueError(f"embeddings {path}: lacks the array(s) {missing} (has "
                                 f"{sorted(archive.files)}; needs 'texts' (N,) and "
                                 "'embeddings' (N, D))")
            try:
                texts, emb = archive["texts"], archive["embeddings"]
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
                # object arrays (pickles) are refused here, and damaged members
                raise ValueError(f"embeddings {path}: an array cannot be read ({exc})"
                                 ) from None
        if texts.ndim != 1 or texts.dtype.kind not in "US":
            raise ValueError(f"embeddings {path}: 'texts' must be a 1-d array of strings, "
                             f"got dtype {texts.dtype} shape {texts.shape}")
        if emb.dtype.kind not in "iuf":
            raise ValueError(f"embeddings {path}: 'embeddings' must hold numbers, got dtype "
                             f"{emb.dtype}")
        if emb.ndim != 2 or emb.shape[0] != len(texts) or emb.shape[1] < 1:
            raise ValueError(f"embeddings {path}: 'embeddings' must have shape "
                             f"(len(texts), D) with D >= 1; got {emb.shape} for "
                             f"{len(texts)} texts")
        names = _text_names(path, texts)
        bad = np.flatnonzero(~np.isfinite(emb).all(axis=1))
        if bad.size:
            raise ValueError(f"embeddings {path}: {bad.size} row(s) hold NaN or inf, the "
                             f"first for text {names[bad[0]][:60]!r}")
        first: dict[str, int] = {}
        for i, name in enumerate(names):  # a repeated text must mean one embedding
            j = first.setdefault(name, i)
            if j != i and not np.array_equal(emb[i], emb[j]):
                raise ValueError(f"embeddings {path}: the text {name[:60]!r} appears twice "
                                 f"with different embeddings (rows {j} and {i})")
        return cls(names, emb)

    def __contains__(self, text: object) -> bool:
        return text in self._index

    def embed(self, text: str) -> list[float]:
        """The stored embedding of ``text``.

        Args:
            text: A text from the table (exact match).

        Returns:
            Its embedding as float64 values, shape (D,).

        Raises:
            KeyError: Naming the text when it is not in the table.
        """
        try:
            row = self._index[text]
        except KeyError:
            raise KeyError(f"text not in the embedding table: {text[:80]!r}") from None
        return self._emb[row].astype(np.float64).tolist()

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        """Embeddings of ``texts``, in order.

        Args:
            texts: Texts from the table.

        Returns:
            One embedding per text, shape (len(texts), D).

        Raises:
            KeyError: If any text is not in the table.
        """
        return [self.embed(t) for t in texts]


@dataclass
class QueryResult:
    """One replayed query.

    Attributes:
        scenario_id, query_id, challenge_type: identifiers.
        expected: expected memory ids (dataset ids).
        retrieved: retrieved dataset ids, best first.
        explanations: the engine's explanations (ranking-time breakdowns).
    """

    scenario_id: str
    query_id: str
    challenge_type: str
    expected: list[str]
    retrieved: list[str]
    explanations: list[RetrievalExplanation] = field(default_factory=list, repr=False)
    k: int | None = None
    """The replay's ``top_k`` (None: the number retrieved)."""

    @property
    def top1(self) -> bool:
        """The first result is expected."""
        return bool(self.retrieved) and self.retrieved[0] in self.expected

    @property
    def hit(self) -> bool:
        """Any result is expected."""
        return any(r in self.expected for r in self.retrieved)

    @property
    def recall(self) -> float:
        """Share of the distinct expected ids among the results (recall@k)."""
        expected = set(self.expected)
        return len(expected & set(self.retrieved)) / len(expected) if expected else 0.0

    @property
    def ndcg(self) -> float:
        """nDCG@k with binary relevance: sum of 1/log2(rank + 1) over expected results,
        over its maximum for min(k, #expected) expected results ranked first."""
        expected = set(self.expected)
        k = self.k if self.k is not None else len(self.retrieved)
        ideal = sum(1.0 / np.log2(i + 2) for i in range(min(k, len(expected))))
        if ideal == 0:
            return 0.0
        seen: set[str] = set()
        dcg = 0.0
        for i, r in enumerate(self.retrieved[:k]):
            if r in expected and r not in seen:
                seen.add(r)
                dcg += 1.0 / np.log2(i + 2)
        return float(dcg / ideal)

    @property
    def reciprocal_rank(self) -> float:
        """1 / rank of the first expected result (0 when none was retrieved)."""
        for i, r in enumerate(self.retrieved):
            if r in self.expected:
                return 1.0 / (i + 1)
        return 0.0


def summarize(results: Sequence[QueryResult]) -> dict[str, Any]:
    """Aggregate metrics over replayed queries.

    Args:
        results: Replayed queries (any order).

    Returns:
        ``{"top1", "hit_at_k", "mrr", "ndcg_at_k", "recall_at_k"}`` means (0.0 when
        empty; ``mrr`` is over the top k retrieved, a reciprocal rank of 0 when no
        expected memory was retrieved, so it can be below the fitting metrics'
        all-candidate MRR), ``"n_queries"`` and ``"by_challenge"`` (challenge type ->
        top-1 rate, sorted by type).
    """
    n = len(results)
    by: dict[str, list[QueryResult]] = {}
    for r in results:
        by.setdefault(r.challenge_type, []).append(r)
    mean = lambda xs: float(np.mean(xs)) if xs else 0.0  # noqa: E731
    return {
        "top1": mean([r.top1 for r in results]),
        "hit_at_k": mean([r.hit for r in results]),
        "mrr": mean([r.reciprocal_rank for r in results]),
        "ndcg_at_k": mean([r.ndcg for r in results]),
        "recall_at_k": mean([r.recall for r in results]),
        "n_queries": n,
        "by_challenge": {k: mean([r.top1 for r in v]) for k, v in sorted(by.items())},
    }


AffectEstimator = Callable[[list[str]], np.ndarray]
"""``texts -> (N, 3)`` valence [-1, 1], arousal [0, 1], dominance [0, 1]."""

EventAffect = Literal["estimate", "neutral"]
QueryAffect = Literal["keep", "estimate"]


def _has_affect(event: dict[str, Any]) -> bool:
    return event.get("valence") is not None and event.get("arousal") is not None


@dataclass(frozen=True)
class ReplayAffect:
    """How a replay sets the affect of unlabelled events and queries.

    Attributes:
        events: ``"estimate"`` (the text model's affect) or ``"neutral"`` (0, 0, 0.5)
            for events without valence/arousal; labelled events always use theirs.
        queries: ``"keep"`` (the original protocol: the state is left as the events
            made it) or ``"estimate"`` (the query text's estimated affect becomes the
            state) for queries without a ``state``.
        table: text -> (valence, arousal, dominance) estimates (see :meth:`prepare`).
    """

    events: EventAffect = "estimate"
    queries: QueryAffect = "keep"
    table: dict[str, tuple[float, float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.events not in ("estimate", "neutral"):
            raise ValueError(f"events must be 'estimate' or 'neutral', got {self.events!r}")
        if self.queries not in ("keep", "estimate"):
            raise ValueError(f"queries must be 'keep' or 'estimate', got {self.queries!r}")

    @classmethod
    def prepare(
        cls,
        data: dict[str, Any],
        events: EventAffect = "estimate",
        queries: QueryAffect = "keep",
        estimator: AffectEstimator | None = None,
    ) -> ReplayAffect:
        """Estimate, once, the affect of every text the replay will need.

        Nothing is estimated (and no text model loaded) when every event is labelled
        and queries keep the state.

        Args:
            data: the dataset.
            events: mode for unlabelled events.
            queries: mode for queries without a state.
            estimator: ``texts -> (N, 3)``; default
                ``EmbeddingAppraisalEngine().predict_affect`` (needs MiniLM).

        Returns:
            The replay settings with their estimates.
        """
        base = cls(events=events, queries=queries)
        texts: list[str] = []
        for scenario in iter_scenarios(data):
            for session in scenario.get("sessions", []):
                if events == "estimate":
                    texts += [e["content"] for e in session.get("events", [])
                              if not _has_affect(e)]
                if queries == "estimate":
                    texts += [q["query"] for q in session.get("queries", [])
                              if not q.get("state")]
        texts = list(dict.fromkeys(texts))
        if not texts:
            return base
        if estimator is None:
            from emotional_memory.appraisal_embedding import EmbeddingAppraisalEngine

            estimator = EmbeddingAppraisalEngine().predict_affect
        values = np.asarray(estimator(texts), dtype=np.float64)
        if values.shape != (len(texts), 3):
            raise ValueError(f"estimator must return ({len(texts)}, 3), got {values.shape}")
        table = {t: (float(v[0]), float(v[1]), float(v[2])) for t, v in zip(texts, values,
                                                                            strict=True)}
        return cls(events=events, queries=queries, table=table)

    def event_affect(self, event: dict[str, Any]) -> CoreAffect:
        """The affect to set before encoding ``event``.

        Args:
            event: one event dict.

        Returns:
            Its labelled affect, else the estimate (or neutral).
        """
        if _has_affect(event):
            return CoreAffect(valence=float(event["valence"]), arousal=float(event["arousal"]))
        if self.events == "neutral":
            return CoreAffect.neutral()
        return self._estimated(event["content"])

    def query_affect(self, query: dict[str, Any]) -> CoreAffect | None:
        """The state to set before ``query`` (None: leave the state as it is).

        Args:
            query: one query dict.

        Returns:
            The query's ``state``, else its estimate when ``queries == "estimate"``.
        """
        state = query.get("state")
        if state:
            return CoreAffect(valence=float(state["valence"]), arousal=float(state["arousal"]))
        if self.queries == "estimate":
            return self._estimated(query["query"])
        return None

    def _estimated(self, text: str) -> CoreAffect:
        try:
            v, a, d = self.table[text]
        except KeyError:
            raise ValueError(
                f"no affect estimate for {text[:60]!r}: build with ReplayAffect.prepare(data)"
            ) from None
        return CoreAffect(valence=v, arousal=a, dominance=d)


def iter_scenarios(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The scenarios of a dataset, in file order.

    Args:
        data: A dataset as returned by :func:`load_dataset`.

    Yields:
        Each scenario dict.
    """
    yield from data["scenarios"]


@contextlib.contextmanager
def _named(where: str) -> Iterator[None]:
    """Prefix the place ``where`` to a ``ValueError`` / ``TypeError`` raised inside
    (what the engine refused: a content over ``max_content_length``, a query embedding
    the config's adapter cannot take), so a dataset's fault is found by its place."""
    try:
        yield
    except (TypeError, ValueError) as exc:
        placed = _placed(exc, where)
        if placed is exc:
            raise
        raise placed from exc


def _placed(exc: TypeError | ValueError, where: str) -> BaseException:
    """``exc`` as the same class (attributes kept) with ``where`` before its message,
    so ``except EmbeddingDimensionError`` (or a ``FieldTypeError`` caught as a
    ``ValueError``) still matches; the original with a note where that cannot be."""
    message = f"{where}: {exc}"
    try:  # a class with its own __new__ (pydantic's ValidationError) refuses this
        new = BaseException.__new__(type(exc))
        new.args = (message,)
        new.__dict__.update(exc.__dict__)
        if str(new) == message:
            return new
    except Exception:  # the original, with a note, instead
        pass
    exc.add_note(where)  # a class that writes its own message
    return exc


EngineFactory = Callable[[Embedder, TickClock], EmotionalMemory]
QueryHook = Callable[[EmotionalMemory, dict[str, Any], dict[str, str], RetrievalPlan], None]


def default_engine_factory(
    config: EmotionalMemoryConfig | None = None,
) -> EngineFactory:
    """A factory building a fresh in-memory engine with ``config`` per scenario.

    Args:
        config: Engine configuration (``None`` -> defaults).

    Returns:
        A callable ``(embedder, clock) -> EmotionalMemory`` over a new ``InMemoryStore``.
    """
    from emotional_memory.stores.memory import InMemoryStore

    def make(embedder: Embedder, clock: TickClock) -> EmotionalMemory:
        return EmotionalMemory(InMemoryStore(), embedder, config=config, clock=clock)

    return make


def replay_scenario(
    scenario: dict[str, Any],
    engine: EmotionalMemory,
    top_k: int,
    on_query: QueryHook | None = None,
    *,
    affect: ReplayAffect | None = None,
    clock: TickClock | None = None,
) -> list[QueryResult]:
    """Replay one scenario into ``engine`` (which should be empty).

    Args:
        scenario: one scenario dict.
        engine: a fresh engine.
        top_k: results per query.
        on_query: optional hook called for each query with the engine (state set to
            the query state), the query dict, the engine-id -> dataset-id map and the
            ranking plan, before the retrieval side effects; the learning pipeline uses
            it to capture what the ranker saw.
        affect: how to set the affect of unlabelled events and queries (default:
            :class:`ReplayAffect` ``("estimate", "keep")`` with no estimates, enough
            for labelled data).
        clock: the engine's clock; events with a ``timestamp`` are encoded at it
            (queries at the latest event time so far). Without one, timestamps are
            ignored.

    Returns:
        One :class:`QueryResult` per query.
    """
    if not isinstance(scenario, dict):
        raise ValueError(f"scenario: expected an object, got {type(scenario).__name__}")
    check_scenario(f"scenario {scenario.get('scenario_id')!r}", scenario, labelled=False)
    settings = affect if affect is not None else ReplayAffect()
    sid = str(scenario.get("scenario_id", ""))
    last_event: datetime | None = None
    id_map: dict[str, str] = {}
    results: list[QueryResult] = []
    for j, session in enumerate(scenario.get("sessions", [])):
        for k, event in enumerate(session.get("events", [])):
            ts = event_time(event) if clock is not None else None
            if clock is not None and ts is not None:
                clock.now = ts
                last_event = ts if last_event is None else max(last_event, ts)
            with _named(f"scenario {sid!r} sessions[{j}] events[{k}] "
                        f"({event['memory_id']!r})"):
                engine.set_affect(settings.event_affect(event))
                memory = engine.encode(event["content"],
                                       metadata=dict(event.get("metadata") or {}))
            id_map[memory.id] = str(event["memory_id"])
        for k, query in enumerate(session.get("queries", [])):
            if clock is not None and last_event is not None:
                clock.now = last_event
            saved = engine.save_state()
            with _named(f"scenario {sid!r} sessions[{j}] queries[{k}] "
                        f"({query.get('query_id')!r})"):
                state = settings.query_affect(query)
                if state is not None:
                    engine.set_affect(state)
                if on_query is None:
                    explanations = engine.retrieve_with_explanations(query["query"],
                                                                     top_k=top_k)
                else:
                    plan, now = engine._plan(query["query"], top_k, None)
                    on_query(engine, query, id_map, plan)
                    explanations = engine._commit(plan, top_k, now)
            engine.load_state(saved)
            results.append(
                QueryResult(
                    scenario_id=sid,
                    query_id=str(query.get("query_id", "")),
                    challenge_type=str(query.get("challenge_type", "unknown")),
                    expected=[str(x) for x in query["expected_memory_ids"]],
                    retrieved=[id_map.get(e.memory.id, e.memory.id) for e in explanations],
                    explanations=explanations,
                    k=top_k,
                )
            )
    return results


def replay_dataset(
    data: dict[str, Any],
    embedder: Embedder,
    config: EmotionalMemoryConfig | None = None,
    *,
    top_k: int | None = None,
    engine_factory: EngineFactory | None = None,
    progress: bool = False,
    affect: ReplayAffect | None = None,
) -> list[QueryResult]:
    """Replay every scenario of ``data`` and return the per-query results.

    Args:
        data: a dataset from :func:`load_dataset`.
        embedder: text embedder (e.g. :class:`LookupEmbedder`).
        config: engine configuration (default: the library defaults).
        top_k: results per query (default: the dataset's ``default_top_k`` or 2).
        engine_factory: builds a fresh engine per scenario (default: in-memory).
        progress: show a progress bar on stderr.
        affect: unlabelled events and queries (default: estimated when the data needs
            it, see :meth:`ReplayAffect.prepare`).

    Returns:
        All :class:`QueryResult` objects in dataset order.
    """
    validate_dataset(data, labelled=False)  # values and shape (data from anywhere)
    settings = affect if affect is not None else ReplayAffect.prepare(data)
    from emotional_memory._progress import progress_iter

    k = positive_int("top_k", top_k if top_k is not None else data.get("default_top_k", 2))
    factory = engine_factory if engine_factory is not None else default_engine_factory(config)
    results: list[QueryResult] = []
    scenarios = list(iter_scenarios(data))
    for scenario in progress_iter(scenarios, "replay", enabled=progress):
        clock = TickClock()
        engine = factory(embedder, clock)
        try:
            results.extend(replay_scenario(scenario, engine, k, affect=settings, clock=clock))
        finally:
            engine.close()
    return results
