"""Replay labelled recall scenarios through the real engine and score the rankings.

The data format is the realistic-recall JSON (scenarios -> sessions -> events with
preset valence/arousal, and queries with expected memory ids, a challenge type and an
optional query-time state). The protocol follows the published figures:

* a fresh engine per scenario; sessions in order;
* before each event ``set_affect(CoreAffect(valence, arousal))``, then ``encode``;
* per query: save the state, ``set_affect`` to the query state when present,
  ``retrieve_with_explanations(query, top_k)``, then restore the state.

A deterministic clock (1 ms per reading) replaces the wall clock, so a replay gives
the same numbers on any machine, however slow.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from emotional_memory.affect import CoreAffect
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
            ValueError: If ``embeddings`` does not have shape (len(texts), D).
        """
        with np.load(path, allow_pickle=False) as data:
            return cls([str(t) for t in data["texts"]], data["embeddings"])

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


def load_dataset(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and minimally validate a realistic-recall JSON file.

    Args:
        path: Path of the JSON dataset.

    Returns:
        The parsed dataset (an object with a ``scenarios`` list).

    Raises:
        ValueError: when the file lacks ``scenarios`` or a query lacks expected ids.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("scenarios"), list):
        raise ValueError(f"{path}: expected an object with a 'scenarios' list")
    for scenario in data["scenarios"]:
        for session in scenario.get("sessions", []):
            for query in session.get("queries", []):
                if not query.get("expected_memory_ids"):
                    raise ValueError(
                        f"{path}: query {query.get('query_id')!r} has no expected_memory_ids"
                    )
    return data


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

    @property
    def top1(self) -> bool:
        """The first result is expected."""
        return bool(self.retrieved) and self.retrieved[0] in self.expected

    @property
    def hit(self) -> bool:
        """Any result is expected."""
        return any(r in self.expected for r in self.retrieved)

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
        ``{"top1", "hit_at_k", "mrr"}`` means (0.0 when empty), ``"n_queries"`` and
        ``"by_challenge"`` (challenge type -> top-1 rate, sorted by type).
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
        "n_queries": n,
        "by_challenge": {k: mean([r.top1 for r in v]) for k, v in sorted(by.items())},
    }


def iter_scenarios(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The scenarios of a dataset, in file order.

    Args:
        data: A dataset as returned by :func:`load_dataset`.

    Yields:
        Each scenario dict.
    """
    yield from data["scenarios"]


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
    from emotional_memory.stores.in_memory import InMemoryStore

    def make(embedder: Embedder, clock: TickClock) -> EmotionalMemory:
        return EmotionalMemory(InMemoryStore(), embedder, config=config, clock=clock)

    return make


def replay_scenario(
    scenario: dict[str, Any],
    engine: EmotionalMemory,
    top_k: int,
    on_query: QueryHook | None = None,
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

    Returns:
        One :class:`QueryResult` per query.
    """
    id_map: dict[str, str] = {}
    results: list[QueryResult] = []
    sid = str(scenario.get("scenario_id", ""))
    for session in scenario.get("sessions", []):
        for event in session.get("events", []):
            engine.set_affect(
                CoreAffect(valence=float(event["valence"]), arousal=float(event["arousal"]))
            )
            memory = engine.encode(event["content"], metadata=dict(event.get("metadata") or {}))
            id_map[memory.id] = str(event["memory_id"])
        for query in session.get("queries", []):
            saved = engine.save_state()
            state = query.get("state")
            if state:
                engine.set_affect(
                    CoreAffect(valence=float(state["valence"]), arousal=float(state["arousal"]))
                )
            if on_query is None:
                explanations = engine.retrieve_with_explanations(query["query"], top_k=top_k)
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
) -> list[QueryResult]:
    """Replay every scenario of ``data`` and return the per-query results.

    Args:
        data: a dataset from :func:`load_dataset`.
        embedder: text embedder (e.g. :class:`LookupEmbedder`).
        config: engine configuration (default: SPEC defaults).
        top_k: results per query (default: the dataset's ``default_top_k`` or 2).
        engine_factory: builds a fresh engine per scenario (default: in-memory).
        progress: show a progress bar on stderr.

    Returns:
        All :class:`QueryResult` objects in dataset order.
    """
    from emotional_memory._progress import progress_iter

    k = int(top_k if top_k is not None else data.get("default_top_k", 2))
    factory = engine_factory if engine_factory is not None else default_engine_factory(config)
    results: list[QueryResult] = []
    scenarios = list(iter_scenarios(data))
    for scenario in progress_iter(scenarios, "replay", enabled=progress):
        engine = factory(embedder, TickClock())
        try:
            results.extend(replay_scenario(scenario, engine, k))
        finally:
            engine.close()
    return results
