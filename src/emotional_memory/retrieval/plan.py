"""The two-pass retrieval plan: candidates ranked by the compiled kernel program."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray

from emotional_memory._bank import (
    CandidateBank,
    bank_from_memories,
    query_features,
)
from emotional_memory._precision import float64
from emotional_memory._validation import (
    positive_int,
)
from emotional_memory.affect import MAX_PAD_DISTANCE as MAX_PAD_DISTANCE
from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.kernel import (
    ContextInputs,
    LexicalInputs,
    MemoryColumns,
    QueryFeatures,
    ScoringParams,
    bucket_size,
)
from emotional_memory.kernel.params import pack_params
from emotional_memory.kernel.plan import (
    RESONANCE,
    TABLE,
    pack_columns,
    pack_query,
    retrieval_plan_packed,
    top_k_bucket,
)
from emotional_memory.models import Memory
from emotional_memory.mood import MoodField
from emotional_memory.retrieval._common import (
    ParamsLike,
)
from emotional_memory.retrieval.results import (
    RankedMemory,
    RetrievalExplanation,
    RetrievalPlan,
)
from emotional_memory.retrieval.scoring import (
    _check_query_embedding,
    adaptive_weights,
    breakdown_from_values,
    check_weights,
    scoring_params,
)


@dataclass(frozen=True)
class PlanArrays:
    """Array form of a two-pass plan over ``n`` candidates (numpy, float64 or float32).

    Attributes:
        weights: (6,); raw1/raw2: (n, 6); totals1/totals2: (n,); order1/order2: (n,)
        candidate indices by rank; activation: (n,); reached: (n,) bool;
        seeds: indices of the pass-1 top_k.
    """

    weights: np.ndarray
    raw1: np.ndarray
    totals1: np.ndarray
    order1: np.ndarray
    raw2: np.ndarray
    totals2: np.ndarray
    order2: np.ndarray
    activation: np.ndarray
    reached: np.ndarray
    seeds: np.ndarray


def plan_arrays(
    params: ParamsLike,
    query: QueryFeatures,
    columns: MemoryColumns,
    n: int,
    top_k: int,
    adjacency: tuple[np.ndarray, np.ndarray] | None,
    hops: int,
    *,
    weights: Any = None,
    weight_params: ParamsLike | None = None,
    signal_mask: Any = None,
    lexical: LexicalInputs | None = None,
    features: np.ndarray | None = None,
    context: ContextInputs | None = None,
) -> PlanArrays:
    """Run the two-pass plan on (padded) columns: ONE compiled program, one transfer.

    The shared array-level path of :func:`build_retrieval_plan` and the engine's
    ``retrieve`` (:func:`~emotional_memory.kernel.plan.retrieval_plan_packed`).

    Args:
        params: scoring parameters, or their
            :func:`~emotional_memory.kernel.params.pack_params` vector (what the engine
            caches per config: one operand for the program).
        query: query features.
        columns: bank padded to a bucket; rows ``>= n`` are padding.
        n: number of real candidates.
        top_k: number of seeds.
        adjacency: ``(targets, strengths)`` for the first ``n`` rows (or already
            padded to the columns' rows), or None to skip spreading activation
            (resonance disabled).
        hops: propagation hops.
        weights: optional (6,) final weights; else the mood-adaptive weights of
            ``weight_params`` (then ``signal_mask``) are computed in the program.
        weight_params: parameters of the adaptive weights (default: ``params``),
            as parameters or packed like ``params``.
        signal_mask: optional (6,) ablation mask of the adaptive weights.
        lexical: optional term statistics padded to the columns' rows: adds the
            lexical signal s7 (7 weights, 7 signal columns).
        features: the columns' features matrix when already packed
            (:attr:`~emotional_memory._bank.CandidateBank.features`, the very values
            :func:`~emotional_memory.kernel.plan.pack_columns` gives); None: packed here.
        context: optional neighbours padded to the columns' rows (with ``lexical``):
            adds the context signal s8 (8 weights, 8 signal columns).

    Returns:
        :class:`PlanArrays` sliced to the ``n`` real rows.
    """
    size = columns.size
    dtype = np.asarray(query.affect).dtype
    if adjacency is None:
        targets = np.full((size, 1), -1, dtype=np.int32)
        strengths = np.zeros((size, 1), dtype=dtype)
    elif adjacency[0].shape[0] == size and adjacency[1].dtype == dtype:
        targets, strengths = adjacency  # already padded (a CandidateBank's)
    else:
        width = adjacency[0].shape[1]
        targets = np.full((size, width), -1, dtype=np.int32)
        targets[:n] = adjacency[0][:n]
        strengths = np.zeros((size, width), dtype=dtype)
        strengths[:n] = adjacency[1][:n]
    # numpy operands go to the compiled program directly (no eager transfers), the
    # small columns packed (fewer host arrays to convert per call; same bits)
    query_embedding, query_state = pack_query(query)
    if features is None:
        embedding, features, valid = pack_columns(columns)
    else:
        embedding, valid = columns.embedding, columns.valid
    if isinstance(params, ScoringParams):
        params = pack_params(params)
    if isinstance(weight_params, ScoringParams):
        weight_params = pack_params(weight_params)
    out_weights, out_table = retrieval_plan_packed(
        params, query_embedding, query_state, embedding, features, valid, targets,
        strengths, top_k=top_k_bucket(top_k), hops=hops, spread=adjacency is not None,
        weights=weights, weight_params=weight_params, signal_mask=signal_mask,
        lexical=lexical, context=context, seed_count=np.int32(min(top_k, size)),
    )
    plan_weights = np.asarray(out_weights)
    # the signal columns: 7 with s7 even when 6 precomputed weights are given
    s = out_table.shape[1] - len(TABLE)
    table = np.asarray(out_table)[:n]  # padding rows sort after every real row
    col = {name: s + i for i, name in enumerate(TABLE)}
    raw1 = table[:, :s]
    totals1 = table[:, col["totals1"]]
    order1 = table[:, col["order1"]].astype(np.int32)
    reached = table[:, col["reached"]] != 0
    if reached.any():
        raw2 = raw1.copy()
        raw2[:, RESONANCE] = table[:, col["resonance2"]]
        totals2 = table[:, col["totals2"]]
        order2 = table[:, col["order2"]].astype(np.int32)
    else:  # nothing reached: pass 2 is pass 1, bit for bit
        raw2, totals2, order2 = raw1, totals1, order1
    return PlanArrays(
        weights=plan_weights, raw1=raw1, totals1=totals1, order1=order1,
        raw2=raw2, totals2=totals2, order2=order2,
        activation=table[:, col["activation"]], reached=reached, seeds=order1[:top_k],
    )


def build_retrieval_plan(
    query_embedding: list[float] | None,
    query_affect: CoreAffect,
    current_mood: MoodField,
    current_momentum: AffectiveMomentum,
    candidates: Sequence[Memory],
    top_k: Any,
    now: Any,
    decay_config: Any,
    retrieval_config: Any,
    propagation_hops: int = 2,
    spreading_activation_fn: Callable[..., dict[str, float]] | None = None,
    precomputed_weights: NDArray[np.float64] | None = None,
    enable_resonance: bool = True,
) -> RetrievalPlan:
    """Pure two-pass ranking of ``candidates`` (docs/behaviour.md §5); no store writes.

    Pass 1 scores everything without activation and sorts (stable, descending); the
    pass-1 top_k seed spreading activation; pass 2 rescores with it when any spread.

    The signature is the original's. The earlier order of this library,
    ``(..., candidates, now, decay_config, retrieval_config, top_k, ...)``, is
    recognised (a datetime in the ``top_k`` position) and still works.

    Args:
        query_embedding, query_affect, current_mood, current_momentum: query features.
        candidates: memories to rank, in candidate order (ties keep it).
        top_k: number of seeds (>= 1).
        now: aware datetime.
        decay_config, retrieval_config: configs.
        propagation_hops: hops of spreading activation (1..5).
        spreading_activation_fn: ``(seed_ids: set[str], candidates: list[Memory],
            hops: int) -> dict[str, float]``; ``None`` or
            :func:`~emotional_memory.resonance.spreading_activation` use the compiled
            plan, any other function is called for the activation of pass 2.
        precomputed_weights: optional (6,) final weights (e.g. after ablation).
        enable_resonance: False skips spreading activation (pass 2 = pass 1).

    Returns:
        :class:`RetrievalPlan`.
    """
    if isinstance(top_k, datetime):  # this library's earlier positional order
        top_k, now, decay_config, retrieval_config = retrieval_config, top_k, now, decay_config
    try:
        top_k = positive_int("top_k", top_k)
    except TypeError as exc:  # the plan reports every bad top_k as a ValueError
        raise ValueError(str(exc)) from exc
    if not 1 <= int(propagation_hops) <= 5:
        raise ValueError(f"propagation_hops must lie in [1, 5], got {propagation_hops}")
    if spreading_activation_fn is not None and not callable(spreading_activation_fn):
        raise TypeError("spreading_activation_fn must be callable or None")
    _check_query_embedding(query_embedding)
    cands = list(candidates)
    params = scoring_params(retrieval_config, decay_config)
    if precomputed_weights is not None:
        weights: np.ndarray = check_weights(precomputed_weights)
    else:
        weights = adaptive_weights(
            current_mood, retrieval_config.base_weights, retrieval_config.adaptive_weights_config
        )
    if not cands:
        return RetrievalPlan(weights=weights, pass1=[], pass2=[], candidate_count=0, now=now)
    from emotional_memory.resonance import spreading_activation

    custom = spreading_activation_fn not in (None, spreading_activation)
    arrays, query = rank_candidates(
        query_embedding, query_affect, current_mood, current_momentum, cands, now, params,
        weights, top_k, int(propagation_hops), enable_resonance and not custom,
    )
    plan = plan_from_arrays(cands, arrays, now, query)
    if not (custom and enable_resonance):
        return plan
    assert spreading_activation_fn is not None
    activation = dict(
        spreading_activation_fn(set(plan.seed_ids), list(cands), int(propagation_hops))
    )
    if not activation:
        return plan
    w = arrays.weights.tolist()
    rescored = []
    for i, memory in enumerate(cands):
        raw = arrays.raw1[i].tolist()
        raw[5] = float(activation.get(memory.id, 0.0))
        bd = breakdown_from_values(w, raw)
        rescored.append(
            RankedMemory.model_construct(memory=memory, score=bd.total_score, breakdown=bd)
        )
    pass2 = sorted(rescored, key=lambda r: -r.score if r.score == r.score else math.inf)
    return plan.model_copy(update={"pass2": pass2, "activation_map": activation})


def rank_candidates(
    query_embedding: Sequence[float] | None,
    query_affect: CoreAffect,
    current_mood: MoodField,
    current_momentum: AffectiveMomentum,
    candidates: list[Memory],
    now: datetime,
    params: ParamsLike,
    weights: np.ndarray | None,
    top_k: int,
    propagation_hops: int,
    enable_resonance: bool,
    *,
    weight_params: ParamsLike | None = None,
    signal_mask: Any = None,
    lexical: LexicalInputs | None = None,
) -> tuple[PlanArrays, QueryFeatures]:
    """The array half of :func:`build_retrieval_plan` (inputs already validated).

    Args:
        query_embedding, query_affect, current_mood, current_momentum: query features.
        candidates: the memories to rank (non-empty), in candidate order.
        now: aware datetime.
        params: scoring parameters (e.g. :func:`scoring_params`) or their packed
            vector (:data:`ParamsLike`; the engine caches the packed form).
        weights: (6,) float64 final weights, or None to compute the mood-adaptive
            weights of ``weight_params`` and ``signal_mask`` inside the plan program.
        top_k: number of seeds (>= 1).
        propagation_hops: hops of spreading activation (1..5).
        enable_resonance: False skips spreading activation.
        weight_params: parameters of the adaptive weights (default: ``params``).
        signal_mask: optional (6,) ablation mask of the adaptive weights (7 entries
            with ``lexical``).
        lexical: optional unpadded term statistics of the candidates (rows in
            candidate order): adds the lexical signal s7.

    Returns:
        ``(arrays, query)``: the plan's :class:`PlanArrays` over the candidates and the
        float64 query features scored.
    """
    return rank_bank(
        query_embedding, query_affect, current_mood, current_momentum,
        bank_from_memories(candidates, now, query_embedding), params, weights, top_k,
        propagation_hops, enable_resonance, weight_params=weight_params,
        signal_mask=signal_mask, lexical=lexical,
    )


def rank_bank(
    query_embedding: Sequence[float] | np.ndarray | None,
    query_affect: CoreAffect,
    current_mood: MoodField,
    current_momentum: AffectiveMomentum,
    bank: CandidateBank,
    params: ParamsLike,
    weights: np.ndarray | None,
    top_k: int,
    propagation_hops: int,
    enable_resonance: bool,
    *,
    weight_params: ParamsLike | None = None,
    signal_mask: Any = None,
    lexical: LexicalInputs | None = None,
    neighbours: np.ndarray | None = None,
) -> tuple[PlanArrays, QueryFeatures]:
    """:func:`rank_candidates` of candidates already in columns (a store's bank).

    Args:
        query_embedding, query_affect, current_mood, current_momentum: query features.
        bank: the candidates (non-empty) as columns and adjacency.
        params, weights, top_k, propagation_hops, enable_resonance, weight_params,
            signal_mask, lexical: as :func:`rank_candidates`.
        neighbours: optional (n, 2) int32 neighbour rows of the n candidates (-1:
            none), with ``lexical``: adds the context signal s8.

    Returns:
        ``(arrays, query)``: the plan arrays over the bank's candidates and the float64
        query features scored.
    """
    query = query_features(
        query_embedding, query_affect, current_mood, current_momentum, bank.dim
    )
    padded = None if lexical is None else pad_lexical(lexical, bank.columns.size)
    context = None
    if neighbours is not None:
        rows = np.full((bank.columns.size, 2), -1, np.int32)
        rows[: len(neighbours)] = neighbours
        context = ContextInputs(neighbours=rows)
    with float64():
        arrays = plan_arrays(
            params, query, bank.columns, len(bank), top_k,
            bank.adjacency if enable_resonance else None, propagation_hops,
            weights=weights, weight_params=weight_params, signal_mask=signal_mask,
            lexical=padded, features=bank.features, context=context,
        )
    return arrays, query


def pad_lexical(lexical: LexicalInputs, rows: int, min_terms: int = 4) -> LexicalInputs:
    """Pad term statistics to ``rows`` rows and a power-of-two number of terms.

    Few shapes mean few compiled programs: the term axis grows in buckets like the
    row axis. Padding terms and rows hold zeros (they never contribute).

    Args:
        lexical: statistics with numpy leaves, (n, T) term frequencies.
        rows: target rows (the padded bank's size).
        min_terms: smallest term bucket.

    Returns:
        Padded statistics (float64 numpy leaves).
    """
    tf = np.asarray(lexical.tf, np.float64)
    n, t = tf.shape
    width = bucket_size(t, min_terms)
    out = np.zeros((rows, width), np.float64)
    out[:n, :t] = tf
    length = np.zeros((rows,), np.float64)
    length[:n] = np.asarray(lexical.length, np.float64)[:n]
    df = np.zeros((width,), np.float64)
    df[:t] = np.asarray(lexical.df, np.float64)
    return LexicalInputs(
        tf=out, length=length, df=df, n_docs=np.asarray(lexical.n_docs, np.float64),
        avg_length=np.asarray(lexical.avg_length, np.float64),
    )


def plan_from_arrays(
    candidates: list[Memory], arrays: PlanArrays, now: datetime, query: QueryFeatures
) -> RetrievalPlan:
    """The :class:`RetrievalPlan` of :func:`rank_candidates`' arrays, every breakdown built.

    Args:
        candidates: the ranked memories, in candidate order.
        arrays: their plan arrays.
        now: the scoring time.
        query: the query features scored.

    Returns:
        The plan, as :func:`build_retrieval_plan` returns it.
    """
    w = arrays.weights.tolist()

    def ranked(order: np.ndarray, raw: np.ndarray) -> list[RankedMemory]:
        out = []
        for i in order.tolist():
            bd = breakdown_from_values(w, raw[i].tolist())
            out.append(
                RankedMemory.model_construct(
                    memory=candidates[i], score=bd.total_score, breakdown=bd
                )
            )
        return out

    pass1 = ranked(arrays.order1, arrays.raw1)
    pass2 = ranked(arrays.order2, arrays.raw2) if arrays.reached.any() else pass1
    activation_map = {  # positive spreads only, as the original records them
        candidates[i].id: float(arrays.activation[i])
        for i in np.flatnonzero(arrays.reached & (arrays.activation > 0))
    }
    return RetrievalPlan(
        weights=np.asarray(w, dtype=np.float64),
        pass1=pass1,
        pass2=pass2,
        activation_map=activation_map,
        seed_ids=[candidates[i].id for i in arrays.seeds.tolist()],
        candidate_count=len(candidates),
        candidates=candidates,
        now=now,
        query=query,
    )


def explain_top(
    candidate_count: int, arrays: PlanArrays, memories: Sequence[Memory]
) -> list[RetrievalExplanation]:
    """Explanations of the pass-2 winners, building breakdowns for them only.

    The same explanations as a full :func:`plan_from_arrays` plan gives for its first
    ``len(memories)`` pass-2 entries.

    Args:
        candidate_count: the number of ranked candidates.
        arrays: their plan arrays.
        memories: the first ``len(memories)`` pass-2 winners after retrieval side
            effects, in rank order.

    Returns:
        One :class:`RetrievalExplanation` per winner.
    """
    n = candidate_count
    w = arrays.weights.tolist()
    pass1_rank = np.empty(n, dtype=np.int64)
    pass1_rank[arrays.order1] = np.arange(1, n + 1)
    seeds = set(arrays.seeds.tolist())
    top = arrays.order2[: len(memories)].tolist()
    out = []
    for rank, (i, memory) in enumerate(zip(top, memories, strict=True), start=1):
        bd = breakdown_from_values(w, arrays.raw2[i].tolist())
        out.append(
            RetrievalExplanation(
                memory=memory,
                score=bd.total_score,
                breakdown=bd,
                activation_level=float(arrays.activation[i]) if arrays.reached[i] else 0.0,
                pass1_rank=int(pass1_rank[i]),
                pass2_rank=rank,
                selected_as_seed=i in seeds,
                candidate_count=n,
            )
        )
    return out
