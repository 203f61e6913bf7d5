"""Ranking: candidates (semantic, lexical, hybrid), the two-pass plan, retrieve*."""

from __future__ import annotations

import dataclasses
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from emotional_memory._bank import CandidateBank, LexicalQuery
from emotional_memory._context import missing_neighbours, neighbour_rows, view_neighbours
from emotional_memory._engine.config import _ConfigDerived, adapt_embedding
from emotional_memory._engine.effects import EffectsMixin
from emotional_memory._engine.event_args import appraisal_affect, checked_appraisal
from emotional_memory._engine.locks import _synchronized
from emotional_memory._validation import in_range, positive_int
from emotional_memory.affect import CoreAffect
from emotional_memory.filters import Where, parse_where
from emotional_memory.kernel import QueryFeatures
from emotional_memory.lexical import query_terms
from emotional_memory.models import Memory
from emotional_memory.retrieval import (
    PlanArrays,
    RetrievalExplanation,
    RetrievalPlan,
    check_min_relevance,
    explain_top,
    masked_weights,
    mood_weights,
    plan_from_arrays,
    rank_bank,
)
from emotional_memory.retrieval.scoring import check_weights
from emotional_memory.stores.base import CountingStore
from emotional_memory.telemetry import RETRIEVE_ATTRIBUTES, traced, traced_span

_SEMANTIC_ONLY = np.array([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
"""Weights of a ranking by semantic similarity alone (``retrieve_query_gated``)."""


@dataclass
class _Ranking:
    """One query's two-pass ranking as arrays (the engine's retrieval core).

    Attributes:
        now: the engine time of the ranking.
        plan_now: the ``now`` an equivalent :class:`RetrievalPlan` carries (None for an
            empty store).
        weights: (6,) final weights (7 with the lexical signal).
        bank: the ranked candidates as columns (None without candidates).
        arrays: the plan arrays (None without candidates).
        query: the query features scored (None without candidates).
    """

    now: datetime
    plan_now: datetime | None
    weights: np.ndarray
    bank: CandidateBank | None = None
    arrays: PlanArrays | None = None
    query: QueryFeatures | None = None

    def winners(self, top_k: int) -> list[str]:
        """The ids of the pass-2 top ``top_k`` candidates, best first.

        Args:
            top_k: how many.

        Returns:
            Up to ``top_k`` memory ids.
        """
        if self.arrays is None or self.bank is None:
            return []
        ids = self.bank.ids
        return [ids[i] for i in self.arrays.order2[:top_k].tolist()]

    def plan(self) -> RetrievalPlan:
        """The full :class:`RetrievalPlan`, every breakdown built.

        Returns:
            The plan ``build_retrieval_plan`` gives for this ranking (the bank must
            carry its memories: rank with ``with_memories=True``).
        """
        if self.arrays is None or self.query is None or self.bank is None:
            return RetrievalPlan(weights=self.weights, pass1=[], pass2=[], now=self.plan_now)
        assert self.bank.memories is not None, "rank with with_memories=True for a plan"
        return plan_from_arrays(self.bank.memories, self.arrays, self.now, self.query)


class RankingMixin(EffectsMixin):
    """Retrieval: the routed, mood-adaptive two-pass ranking and the retrieve calls."""

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
            query: Query text used for routing (docs/behaviour.md §4, query routing).
            now: Accepted for compatibility; retrieval reads the mood as last
                updated, not regressed to a time (docs/behaviour.md §11).

        Returns:
            Weights, shape (6,), in docs/behaviour.md §4 signal order, summing to 1.
        """
        del now  # the mood as last updated, never regressed (docs/behaviour.md §11)
        mood = self._state.mood
        derived = self._derived()
        w = mood_weights(derived.weight_params(self._route(query)), mood)
        if derived.all_signals_on:  # the mask passes the weights through bit for bit
            return w
        return masked_weights(w.tolist(), derived.signal_mask)

    @_synchronized
    def plan_retrieval(
        self, query: str, top_k: int = 5, *, query_affect: CoreAffect | None = None,
        where: Any = None,
    ) -> RetrievalPlan:
        """The two-pass ranking :meth:`retrieve` would use now, without side effects.

        Args:
            query: query text.
            top_k: number of seeds / results (>= 1).
            query_affect: optional override for affect proximity.
            where: optional filter deciding the candidates (see :meth:`retrieve`).

        Returns:
            The :class:`RetrievalPlan` (with its candidates, time and query features).
        """
        return self._plan(query, top_k, query_affect, parse_where(where))[0]

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
        *,
        with_memories: bool = False,
        where: Where | None = None,
    ) -> _Ranking:
        """The two-pass ranking of ``query`` now, as arrays (no breakdown objects).

        Candidates come from the store as columns (:meth:`ColumnarStore.candidate_bank`):
        no memory object is built for them unless ``with_memories``.

        Args:
            query: query text.
            top_k: number of seeds / results (>= 1).
            query_affect: optional override for affect proximity.
            precomputed_weights: optional (6,) final weights used instead of the
                routed, mood-adaptive, masked ones.
            with_memories: also read the candidates' memories (for a full plan).
            where: a parsed filter: the candidates are the memories matching it (as
                if every other memory were deleted).

        Returns:
            The :class:`_Ranking` (its ``plan()`` is what ``plan_retrieval`` returns).
        """
        top_k = positive_int("top_k", top_k)
        fixed = None if precomputed_weights is None else check_weights(precomputed_weights)
        self._check_content(query, "query")
        if query_affect is not None and not isinstance(query_affect, CoreAffect):
            raise TypeError("query_affect must be a CoreAffect or None")
        now = self._now()
        store = self._view(now, where)
        derived = self._derived()
        cfg = self.config.retrieval
        limit = top_k * cfg.candidate_multiplier
        # s8 blends the neighbours' s1 and s7: with context, s7 is scored too
        context_on = derived.context_on and fixed is None
        statistics = derived.lexical_on or context_on
        lexical_on = statistics or (cfg.hybrid_candidates and self.config.enable_lexical)
        expand = context_on or cfg.context_candidates
        if (
            not lexical_on
            and not expand
            and isinstance(store, CountingStore)
        ):
            # The store counts its memories in the candidate read itself (one round
            # trip fewer); the query is then embedded before an empty store is seen.
            bank, embedding = self._counted_bank(store, query, limit, now, with_memories)
            if bank.total == 0:
                return _Ranking(now=now, plan_now=None, weights=np.zeros(6))
            return self._rank_bank(
                query, top_k, query_affect, fixed, now, bank, embedding, derived, None,
                False, None,
            )
        n = len(store)
        if n == 0:
            return _Ranking(now=now, plan_now=None, weights=np.zeros(6))
        embedding = self._query_embedding(query, derived)
        everything = n <= limit or cfg.full_bank_candidates
        terms = query_terms(
            query, derived.stop_words, derived.analysis, derived.query_counts
        ) if lexical_on else []
        # The lexical shortlist joins the semantic one (hybrid candidates); s7's term
        # statistics come with the candidates, from the same read of the store.
        shortlist = limit if terms and not everything else 0
        lexical_query = (
            LexicalQuery(
                terms, shortlist, cfg.lexical_k1, cfg.lexical_b, statistics=statistics,
                analysis=derived.analysis,
            )
            if shortlist or statistics else None
        )
        links = view_neighbours(store, now, derived.context_window) if expand else None
        also: list[str] = []
        if links is not None and not everything:
            # the neighbours of the shortlisted candidates join them (they lend s8 and
            # may be lifted by it): the shortlist first, then one read with them added
            first = store.candidate_bank(
                embedding, limit, now,
                lexical=None if lexical_query is None
                else dataclasses.replace(lexical_query, statistics=False),
            )
            also = missing_neighbours(first.ids, links)
        # the original's span around the shortlist search (none without a search)
        span = nullcontext() if everything else traced_span(
            "emotional_memory.store.search_by_embedding", {"limit": limit}
        )
        with span:
            if lexical_query is None and not also:  # no lexical part: the keyword-free
                # call, which a store written before ``lexical=`` existed also answers
                bank = store.candidate_bank(
                    embedding, None if everything else limit, now, with_memories=with_memories
                )
            elif lexical_query is None:
                bank = store.candidate_bank(
                    embedding, limit, now, also=also, with_memories=with_memories
                )
            elif also:
                bank = store.candidate_bank(
                    embedding, limit, now, also=also, lexical=lexical_query,
                    with_memories=with_memories,
                )
            else:
                bank = store.candidate_bank(
                    embedding, None if everything else limit, now, lexical=lexical_query,
                    with_memories=with_memories,
                )
        # hybrid candidates score six signals unless s7 itself (or s8) is on
        return self._rank_bank(
            query, top_k, query_affect, fixed, now, bank, embedding, derived,
            bank.lexical if statistics else None, context_on, links,
        )

    def _query_embedding(self, query: str, derived: _ConfigDerived) -> np.ndarray | None:
        """The query's embedding as the store searches it and s1 scores it."""
        with traced_span("emotional_memory.embed"):
            embedding = self._embedding_array(self.embedder.embed(query), "query")
        if embedding is not None and derived.adapter is not None:
            # the adapted query is what the store searches and what s1 scores
            embedding = adapt_embedding(derived.adapter, embedding)
        return embedding

    def _counted_bank(
        self, store: Any, query: str, limit: int, now: datetime, with_memories: bool
    ) -> tuple[CandidateBank, np.ndarray | None]:
        """The candidates from a store that counts its memories in the same read
        (``candidate_bank(..., everything_upto=limit)``): every memory when it holds
        at most ``limit`` (or with ``full_bank_candidates``), else the shortlist; and
        the query embedding."""
        embedding = self._query_embedding(query, self._derived())
        full = self.config.retrieval.full_bank_candidates
        span = nullcontext() if full else traced_span(
            "emotional_memory.store.search_by_embedding", {"limit": limit}
        )
        with span:
            bank: CandidateBank = store.counted_candidate_bank(
                embedding, None if full else limit, now, with_memories=with_memories,
                everything_upto=limit,
            )
        return bank, embedding

    def _rank_bank(
        self,
        query: str,
        top_k: int,
        query_affect: CoreAffect | None,
        fixed: np.ndarray | None,
        now: datetime,
        bank: CandidateBank,
        embedding: np.ndarray | None,
        derived: _ConfigDerived,
        lexical: Any,
        context_on: bool,
        links: Any,
    ) -> _Ranking:
        """The two-pass ranking of a read bank (see :meth:`_rank`): ``lexical`` the
        candidates' term statistics when s7 (or s8) is scored, ``links`` the view's
        encode-order neighbours when s8 is on."""
        if not len(bank):
            weights = fixed if fixed is not None else check_weights(self.current_weights(query))
            return _Ranking(now=now, plan_now=now, weights=weights)
        # One compiled program: weights (route, mood, mask), both passes, activation.
        arrays, features = rank_bank(
            embedding,
            query_affect if query_affect is not None else self._state.core_affect,
            # docs/behaviour.md §11: the weights and s2 read the mood as last updated, un-regressed.
            self._state.mood,
            self._state.momentum,
            bank,
            derived.params,
            fixed,
            top_k,
            self.config.resonance.propagation_hops,
            self.config.enable_resonance,
            weight_params=derived.weight_params(self._route(query)),
            signal_mask=derived.mask,
            lexical=lexical,
            neighbours=neighbour_rows(bank.ids, links) if context_on and links else None,
        )
        weights = check_weights(arrays.weights, lexical=lexical is not None,
                                 context=context_on)
        return _Ranking(
            now=now, plan_now=now, weights=weights, bank=bank, arrays=arrays, query=features,
        )

    def _plan(
        self, query: str, top_k: int, query_affect: CoreAffect | None,
        where: Where | None = None,
    ) -> tuple[RetrievalPlan, datetime]:
        ranking = self._rank(query, top_k, query_affect, with_memories=True, where=where)
        return ranking.plan(), ranking.now

    @_synchronized
    @traced("emotional_memory.retrieve", **RETRIEVE_ATTRIBUTES)
    def retrieve(
        self,
        query: str,
        top_k: int = 5,
        *,
        query_affect: CoreAffect | None = None,
        precomputed_weights: Any = None,
        where: Any = None,
        min_relevance: Any = None,
    ) -> list[Memory]:
        """Recall the ``top_k`` memories that best match the query, meaning and mood.

        Args:
            query: query text.
            top_k: number of memories (>= 1).
            query_affect: overrides the current affect for affect proximity (s3) only.
            precomputed_weights: optional (6,) finite weights used as they are,
                instead of the routed, mood-adaptive ones.
            where: optional filter (:mod:`emotional_memory.filters`) deciding the
                candidates: the answer and its side effects are those of this engine
                with every non-matching memory deleted.
            min_relevance: optional probability in [0, 1]: results whose calibrated
                relevance (``retrieval.relevance_calibration``) is below it are
                dropped, possibly all (only the kept ones get retrieval side
                effects). None (default): the ``top_k`` results as ranked.

        Returns:
            Up to ``top_k`` memories, best first, after retrieval side effects.

        Raises:
            ValueError: ``top_k < 1``, ``precomputed_weights`` not 6 finite numbers, a
                malformed ``where``, ``min_relevance`` not in [0, 1], or
                ``min_relevance`` without a relevance calibration.
        """
        threshold = self._check_min_relevance(min_relevance)
        ranking = self._rank(
            query, top_k, query_affect, precomputed_weights, where=parse_where(where)
        )
        winners, _ = self._relevant(ranking, ranking.winners(top_k), threshold)
        return self._after_retrieval(winners, ranking.now) if winners else []

    def _check_min_relevance(self, min_relevance: Any) -> float | None:
        """``min_relevance`` checked (ValueError naming it), and that the config has
        a calibration when it is given."""
        threshold = check_min_relevance(min_relevance)
        if threshold is not None and self.config.retrieval.relevance_calibration is None:
            raise ValueError(
                "min_relevance needs a fitted relevance calibration "
                "(retrieval.relevance_calibration; python -m training fit writes one)"
            )
        return threshold

    def _relevant(
        self, ranking: _Ranking, winners: list[str], threshold: float | None
    ) -> tuple[list[str], list[float] | None]:
        """The winners whose relevance reaches ``threshold`` (a prefix: the probability
        rises with the score) and their probabilities (None without a calibration)."""
        calibration = self.config.retrieval.relevance_calibration
        if calibration is None or ranking.arrays is None or not winners:
            return winners, None
        top = ranking.arrays.order2[: len(winners)]
        probs = calibration.probability(ranking.arrays.totals2[top]).tolist()
        if threshold is not None:
            keep = sum(1 for p in probs if p >= threshold)
            winners, probs = winners[:keep], probs[:keep]
        return winners, probs

    @_synchronized
    @traced("emotional_memory.retrieve_with_explanations", **RETRIEVE_ATTRIBUTES)
    def retrieve_with_explanations(
        self,
        query: str,
        top_k: int = 5,
        *,
        query_affect: CoreAffect | None = None,
        precomputed_weights: Any = None,
        where: Any = None,
        min_relevance: Any = None,
    ) -> list[RetrievalExplanation]:
        """Like :meth:`retrieve`, with the ranking-time breakdown of each result.

        Args:
            query: query text.
            top_k: number of memories (>= 1).
            query_affect: overrides the current affect for affect proximity (s3) only.
            precomputed_weights: optional (6,) finite weights used as they are.
            where: optional filter deciding the candidates (see :meth:`retrieve`).
            min_relevance: optional probability in [0, 1] (see :meth:`retrieve`).

        Returns:
            One :class:`RetrievalExplanation` per result (memory after side effects);
            with a relevance calibration each carries its ``relevance``.

        Raises:
            ValueError: as :meth:`retrieve`.
        """
        threshold = self._check_min_relevance(min_relevance)
        ranking = self._rank(
            query, top_k, query_affect, precomputed_weights, where=parse_where(where)
        )
        winners, probs = self._relevant(ranking, ranking.winners(top_k), threshold)
        if not winners or ranking.arrays is None or ranking.bank is None:
            return []
        updated = self._after_retrieval(winners, ranking.now)
        out = explain_top(len(ranking.bank), ranking.arrays, updated)
        if probs is None:
            return out
        return [e.model_copy(update={"relevance": p}) for e, p in zip(out, probs, strict=True)]

    def _commit(
        self, plan: RetrievalPlan, top_k: int, now: datetime
    ) -> list[RetrievalExplanation]:
        """Apply retrieval side effects for the plan's winners and explain them."""
        top = plan.pass2[:top_k]
        if not top:
            return []
        updated = self._after_retrieval([r.memory.id for r in top], now)
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
        return appraisal_affect(checked_appraisal(self.appraisal_engine.appraise(query, None)))

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
        positive_int("top_k", top_k)  # before the appraiser's (maybe paid) call
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
        positive_int("top_k", top_k)  # before the appraiser's (maybe paid) call
        affect = self._appraise_query(query)
        if abs(affect.valence) < gate:
            return self.retrieve(query, top_k, precomputed_weights=_SEMANTIC_ONLY)
        return self.retrieve(query, top_k, query_affect=affect)
