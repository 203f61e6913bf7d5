"""Bridges from pydantic objects to kernel arrays (the boundary of the kernel).

Ages are computed here, in float64, from aware datetimes; inside the kernel only
ages exist.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jax
import numpy as np

from emotional_memory._validation import real_dtype
from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.kernel.columns import MemoryColumns, QueryFeatures, bucket_size
from emotional_memory.kernel.lexical import LexicalInputs
from emotional_memory.models import EmotionalTag, Memory
from emotional_memory.mood import MoodField


def embedding_dim(
    query_embedding: Sequence[float] | np.ndarray | None, memories: Sequence[Memory]
) -> int:
    """Common embedding dimension of a query and memories (missing/empty ones ignored).

    Args:
        query_embedding: The query embedding, shape (D,), or ``None``.
        memories: Memories whose non-empty embeddings must all have length D.

    Returns:
        D, or 1 when no embedding is present anywhere.

    Raises:
        ValueError: when two non-empty embeddings have different lengths.
    """
    dim = len(query_embedding) if query_embedding is not None else 0
    for m in memories:
        if m.embedding:
            n = len(m.embedding)
            if dim == 0:
                dim = n
            elif n != dim:
                raise ValueError(
                    f"embedding length mismatch: memory {m.id!r} has {n}, expected {dim}"
                )
    return max(dim, 1)


def _vector(values: Sequence[float] | np.ndarray | None, dim: int) -> np.ndarray:
    if values is None or len(values) == 0:
        return np.zeros(dim, dtype=np.float64)
    return np.asarray(values, dtype=np.float64)


def tag_recency_columns(
    tags: Sequence[EmotionalTag], now: datetime
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float64 per-tag inputs of the recency signal s5 other than arousal.

    Args:
        tags: the tags, in order.
        now: aware datetime for the ages.

    Returns:
        ``(age_seconds, consolidation, retrieval_count)``, each a float64 (N,) array;
        ages are ``(now - tag.timestamp).total_seconds()``.
    """
    age_seconds = np.asarray([(now - t.timestamp).total_seconds() for t in tags], np.float64)
    consolidation = np.asarray([t.consolidation_strength for t in tags], np.float64)
    retrieval_count = np.asarray([t.retrieval_count for t in tags], np.float64)
    return age_seconds, consolidation, retrieval_count


def columns_from_memories(
    memories: Sequence[Memory],
    now: datetime,
    dim: int,
    activation: dict[str, float] | None = None,
) -> MemoryColumns:
    """Float64 numpy columns for ``memories`` (unpadded).

    Args:
        memories: the bank, in order.
        now: aware datetime for the ages.
        dim: embedding dimension (missing embeddings become zero rows).
        activation: optional id -> activation map (absent ids get 0).

    Returns:
        :class:`MemoryColumns` with float64 numpy leaves.
    """
    n = len(memories)
    emb = np.zeros((n, dim), dtype=np.float64)
    for i, m in enumerate(memories):
        if m.embedding:
            emb[i] = m.embedding
    tags = [m.tag for m in memories]
    act = activation or {}
    age_seconds, consolidation, retrieval_count = tag_recency_columns(tags, now)
    return MemoryColumns(
        embedding=emb,
        affect=np.asarray([t.core_affect.as_tuple() for t in tags], np.float64).reshape(n, 3),
        mood=np.asarray([t.mood_snapshot.as_tuple() for t in tags], np.float64).reshape(n, 3),
        velocity=np.asarray([t.momentum.velocity() for t in tags], np.float64).reshape(n, 3),
        age_seconds=age_seconds,
        consolidation=consolidation,
        retrieval_count=retrieval_count,
        activation=np.asarray([act.get(m.id, 0.0) for m in memories], np.float64),
        valid=np.ones((n,), dtype=bool),
    )


def _treedef(cls: Any, leaves: int) -> Any:
    """The pytree structure of an equinox module ``cls`` with ``leaves`` array fields."""
    return jax.tree_util.tree_structure(cls(*[np.zeros(1)] * leaves))


COLUMNS_TREEDEF = _treedef(MemoryColumns, 9)
_QUERY_TREEDEF = _treedef(QueryFeatures, 4)


def padded_columns_from_memories(
    memories: Sequence[Memory], now: datetime, dim: int
) -> MemoryColumns:
    """``pad_columns(columns_from_memories(memories, now, dim))``, built in one step.

    The same arrays (float64 columns padded to :func:`bucket_size` rows with zeros,
    ``valid`` False on padding, zero activation), written into padded arrays directly
    and assembled by unflattening (as ``pad_columns`` does), without the unpadded
    intermediate.

    Args:
        memories: the bank, in order.
        now: aware datetime for the ages.
        dim: embedding dimension (missing embeddings become zero rows).

    Returns:
        Padded :class:`MemoryColumns` with numpy leaves.
    """
    n = len(memories)
    size = bucket_size(n)
    emb = np.zeros((size, dim), dtype=np.float64)
    rows = []
    for i, m in enumerate(memories):
        if m.embedding:
            emb[i] = m.embedding
        t = m.tag
        rows.append((
            *t.core_affect.as_tuple(), *t.mood_snapshot.as_tuple(), *t.momentum.velocity(),
            (now - t.timestamp).total_seconds(), t.consolidation_strength, t.retrieval_count,
        ))
    table = np.asarray(rows, np.float64).reshape(n, 12)
    leaves: list[np.ndarray] = [emb]
    for lo in (0, 3, 6):  # affect, mood, velocity
        col = np.zeros((size, 3), dtype=np.float64)
        col[:n] = table[:, lo:lo + 3]
        leaves.append(col)
    for j in (9, 10, 11):  # age_seconds, consolidation, retrieval_count
        col = np.zeros((size,), dtype=np.float64)
        col[:n] = table[:, j]
        leaves.append(col)
    valid = np.zeros((size,), dtype=bool)
    valid[:n] = True
    leaves += [np.zeros((size,), dtype=np.float64), valid]  # activation, valid
    out: MemoryColumns = jax.tree_util.tree_unflatten(COLUMNS_TREEDEF, leaves)
    return out


def query_features(
    query_embedding: Sequence[float] | np.ndarray | None,
    query_affect: CoreAffect,
    current_mood: MoodField,
    current_momentum: AffectiveMomentum,
    dim: int,
) -> QueryFeatures:
    """Float64 numpy query features.

    Args:
        query_embedding: The query embedding, shape (D,); missing/empty -> zeros (D,).
        query_affect: Affect compared with each memory's core affect (signal s3).
        current_mood: The engine's mood (signal s2).
        current_momentum: The engine's momentum; only its velocity is used (s4).
        dim: Embedding dimension D for a missing query embedding.

    Returns:
        :class:`QueryFeatures` with ``embedding`` (D,) and ``affect``, ``mood``,
        ``velocity`` each (3,).
    """
    # assembled by unflattening: the module QueryFeatures(...) builds, without its
    # per-call __init__ machinery
    out: QueryFeatures = jax.tree_util.tree_unflatten(_QUERY_TREEDEF, [
        _vector(query_embedding, dim),
        np.asarray(query_affect.as_tuple(), np.float64),
        np.asarray(current_mood.as_tuple(), np.float64),
        np.asarray(current_momentum.velocity(), np.float64),
    ])
    return out


def adjacency_from_memories(
    memories: Sequence[Memory], min_width: int = 8
) -> tuple[np.ndarray, np.ndarray]:
    """Padded link adjacency restricted to the given memories.

    Args:
        memories: the candidate set.
        min_width: the link axis is padded to a power of two >= this (few shapes, so
            few compilations).

    Returns:
        ``(targets (N, L) int32, strengths (N, L) float64)``; -1 marks empty slots.
    """
    index = {m.id: i for i, m in enumerate(memories)}
    rows: list[list[tuple[int, float]]] = []
    for m in memories:
        rows.append(
            [(index[link.target_id], link.strength) for link in m.tag.resonance_links
             if link.target_id in index]
        )
    width = link_width(max((len(r) for r in rows), default=0), min_width)
    targets = np.full((len(memories), width), -1, dtype=np.int32)
    strengths = np.zeros((len(memories), width), dtype=np.float64)
    for i, r in enumerate(rows):
        for j, (t, s) in enumerate(r):
            targets[i, j] = t
            strengths[i, j] = s
    return targets, strengths


def padded_adjacency(
    links: Iterable[tuple[Sequence[str], Sequence[float]]], ids: Sequence[str], size: int
) -> tuple[np.ndarray, np.ndarray]:
    """The links among candidates as a padded adjacency (``adjacency_from_memories``'s
    answer from link columns: stores that keep links as target/strength arrays).

    Args:
        links: per candidate, in candidate order, its link targets and strengths.
        ids: the candidates' ids (links to other ids are dropped, order kept).
        size: rows of the result (>= the number of candidates).

    Returns:
        ``(targets (size, L) int32, strengths (size, L) float64)``; -1 marks empty slots.
    """
    index = {mid: i for i, mid in enumerate(ids)}
    # every kept link as (row, slot, target, strength), written with one fancy
    # assignment per output (not two slice assignments per candidate)
    at_row: list[int] = []
    at_slot: list[int] = []
    at_target: list[int] = []
    at_strength: list[float] = []
    widest = 0
    get = index.get
    for i, (targets, strengths) in enumerate(links):
        slot = 0
        for target, strength in zip(targets, strengths, strict=True):
            j = get(target)
            if j is not None:  # links leaving the candidates are dropped, order kept
                at_row.append(i)
                at_slot.append(slot)
                at_target.append(j)
                at_strength.append(strength)
                slot += 1
        if slot > widest:
            widest = slot
    width = link_width(widest)
    out_t = np.full((size, width), -1, dtype=np.int32)
    out_s = np.zeros((size, width), dtype=np.float64)
    if at_row:
        out_t[at_row, at_slot] = at_target
        out_s[at_row, at_slot] = at_strength
    return out_t, out_s


def as_float_list(field: str, values: Any) -> list[float] | None:
    """Validate a user-supplied embedding: a flat sequence of finite numbers, or None.

    Args:
        field: Name used in error messages.
        values: The candidate embedding, shape (D,), or ``None``.

    Returns:
        The values as a list of Python floats, or ``None`` when ``values`` is ``None``.

    Raises:
        TypeError: If the values are not numbers (naming ``field``).
        ValueError: If not 1-D or holding NaN/inf (naming ``field``).
    """
    if values is None:
        return None
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{field} must be a 1-D sequence of numbers, got shape {arr.shape}")
    if arr.size and not real_dtype(arr.dtype):
        raise TypeError(f"{field} must contain numbers")
    arr = arr.astype(np.float64)
    if not np.isfinite(arr).all():
        raise ValueError(f"{field} contains NaN or infinite values")
    return [float(v) for v in arr]


@dataclass(frozen=True)
class LexicalQuery:
    """The lexical part of a retrieve, answered in the same store read as its candidates.

    Attributes:
        terms: the query's terms (distinct unless ``lexical_query_counts``).
        shortlist: how many memories the BM25 shortlist adds after the semantic
            candidates (those not already among them); 0: none.
        k1: BM25 k1.
        b: BM25 b.
        statistics: also return the candidates' term statistics (the lexical signal
            s7 is on).
        analysis: the lexical analysis that produced ``terms``
            (:data:`emotional_memory.lexical.ANALYSES`); the store's index answers in it.
    """

    terms: Sequence[str]
    shortlist: int
    k1: float
    b: float
    statistics: bool
    analysis: str = "none"


@dataclass(frozen=True)
class CandidateBank:
    """The candidates of one retrieval as columns: what a store hands the ranking.

    Attributes:
        ids: the candidates' memory ids, in candidate order (ties keep it).
        columns: their float64 :class:`MemoryColumns` padded to :func:`bucket_size`
            rows (``valid`` False and zeros on padding, zero activation).
        adjacency: ``(targets (S, L) int32, strengths (S, L) float64)``: each
            candidate's links to other candidates (as :func:`adjacency_from_memories`),
            padded to the columns' S rows (-1 / 0 on padding rows).
        dim: the embedding dimension of the columns (and of the query features).
        memories: the candidates as :class:`Memory` objects when the store produced
            them anyway (a plain store's answers), else None (built on demand).
        lexical: the candidates' unpadded term statistics, in candidate order, when a
            :class:`LexicalQuery` asked for them (else None).
        features: the columns' (S, 13) features matrix as
            :func:`~emotional_memory.kernel.plan.pack_columns` builds it, when the store
            built the columns as views of it (the ranking then skips packing them);
            None: packed from ``columns`` when needed.
        total: the number of memories the store (view) held when it was read, from a
            store that counts them with its candidates (``everything_upto``), else
            None.
    """

    ids: list[str]
    columns: MemoryColumns
    adjacency: tuple[np.ndarray, np.ndarray]
    dim: int
    memories: list[Memory] | None = None
    lexical: LexicalInputs | None = None
    features: np.ndarray | None = None
    total: int | None = None

    def __len__(self) -> int:
        """Number of candidates."""
        return len(self.ids)


def bank_from_memories(
    memories: Sequence[Memory],
    now: datetime,
    query_embedding: Sequence[float] | np.ndarray | None,
) -> CandidateBank:
    """The :class:`CandidateBank` of candidate memories (any store's answers).

    Args:
        memories: the candidates, in candidate order.
        now: aware datetime for the ages.
        query_embedding: the query embedding (fixes the dimension), or None.

    Returns:
        The bank, its ``memories`` the given objects.

    Raises:
        ValueError: embeddings of different lengths (see :func:`embedding_dim`).
    """
    cands = list(memories)
    dim = embedding_dim(query_embedding, cands)
    columns = padded_columns_from_memories(cands, now, dim)
    targets, strengths = adjacency_from_memories(cands)
    pad = ((0, columns.size - len(cands)), (0, 0))
    return CandidateBank(
        ids=[m.id for m in cands],
        columns=columns,
        adjacency=(np.pad(targets, pad, constant_values=-1), np.pad(strengths, pad)),
        dim=dim,
        memories=cands,
    )


def link_width(longest: int, min_width: int = 8) -> int:
    """Width of the padded link axis for rows of at most ``longest`` links.

    Args:
        longest: the most links any row keeps.
        min_width: the smallest width.

    Returns:
        A power of two >= ``max(longest, min_width)`` (few shapes, few compilations).
    """
    return max(min_width, 1 << max(longest - 1, 0).bit_length())


FAR_ROW_EXPONENT = 64
"""Rows whose largest entry lies outside ``[2**-64, 2**64]`` are rescaled for scoring."""


def rescale_far_rows(emb: np.ndarray) -> np.ndarray:
    """Embedding rows too large or too small for float32 scoring, rescaled exactly.

    A row whose largest magnitude is finite, nonzero and outside
    ``[2**-64, 2**64]`` is multiplied by the power of two that brings it into
    [0.5, 1): exact in float64 and cosine-preserving, while a float32 cast of the
    raw values would overflow to inf or underflow to 0 (cosine 0). Other rows, zero
    rows and rows holding NaN or an infinity are kept as they are.

    Args:
        emb: (N, D) float embeddings.

    Returns:
        ``emb`` itself when no row is far, else a float64 copy with far rows rescaled.
    """
    if emb.ndim != 2 or emb.shape[1] == 0 or emb.dtype.kind != "f":
        return emb
    with np.errstate(invalid="ignore"):
        peak = np.max(np.abs(emb), axis=1)
    far = np.isfinite(peak) & (peak > 0)
    far &= (peak > 2.0**FAR_ROW_EXPONENT) | (peak < 2.0**-FAR_ROW_EXPONENT)
    if not far.any():
        return emb
    out = emb.astype(np.float64)  # a copy
    _, exponent = np.frexp(peak[far])
    out[far] = np.ldexp(out[far], -exponent[:, None])
    return out


def device_columns(cols: MemoryColumns, dtype: Any) -> MemoryColumns:
    """Numpy columns as JAX device arrays, every float leaf as ``dtype``.

    Embedding rows beyond float32's comfortable range are rescaled first
    (:func:`rescale_far_rows`): the rows keep their cosines, not their values.

    Args:
        cols: numpy columns.
        dtype: the float dtype.

    Returns:
        The columns as JAX arrays.
    """

    def cast(x: Any) -> Any:
        arr = np.asarray(x)
        return arr.astype(dtype) if arr.dtype.kind == "f" else arr

    scaled = dataclasses.replace(cols, embedding=rescale_far_rows(np.asarray(cols.embedding)))
    out: MemoryColumns = jax.device_put(jax.tree_util.tree_map(cast, scaled))
    return out
