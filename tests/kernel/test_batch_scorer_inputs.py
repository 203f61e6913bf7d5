"""The batch scorers' edge inputs: ``score_batch`` / ``score_batch_sharded`` on
non-finite embeddings (the contract of ``score_bank``: a query or row holding NaN or
an infinity has cosine 0, its other signals still count) and on malformed arguments
(a TypeError / ValueError naming the argument, raised before XLA sees the shapes).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from emotional_memory.kernel import MemoryColumns, QueryFeatures, score_bank
from emotional_memory.kernel.chunked_topk import row_features, score_batch
from emotional_memory.kernel.sharding import memory_mesh, score_batch_sharded, shard_columns
from support.kernel_banks import default_params, random_bank, to_dtype


def _bank(n: int, d: int, q: int, seed: int) -> tuple[QueryFeatures, MemoryColumns]:
    """``q`` float32 queries and an ``n``-row float32 bank (rows 3, 4 non-finite)."""
    rng = np.random.default_rng(seed)
    query, cols = random_bank(rng, n, d)
    cols = to_dtype(cols, jnp.float32)
    emb = np.array(cols.embedding)
    emb[3, 1] = np.inf
    emb[4, 0] = -np.inf
    cols = MemoryColumns(**{**_fields(cols), "embedding": emb})
    queries = QueryFeatures(
        embedding=rng.normal(size=(q, d)).astype(np.float32),
        affect=np.tile(np.asarray(query.affect, np.float32), (q, 1)),
        mood=np.tile(np.asarray(query.mood, np.float32), (q, 1)),
        velocity=np.tile(np.asarray(query.velocity, np.float32), (q, 1)),
    )
    return queries, cols


def _fields(module: Any) -> dict[str, Any]:
    return {k: getattr(module, k) for k in module.__dataclass_fields__}


def _reference(params: Any, queries: QueryFeatures, cols: MemoryColumns, k: int) -> np.ndarray:
    """Per query the ``score_bank`` totals' top-k rows (stable: lowest row first)."""
    totals = np.asarray(jax.vmap(lambda q: score_bank(params, q, cols).totals)(queries))
    assert np.isfinite(totals).all()
    return np.stack([np.argsort(-t, kind="stable")[:k] for t in totals])


@pytest.mark.parametrize("scorer", ["single", "sharded"])
def test_non_finite_query_and_rows_score_cosine_zero_like_score_bank(scorer: str) -> None:
    """An infinity in a query embedding dropped every row (all totals NaN: an empty
    answer), and one in a row dropped that row; ``score_bank`` scores both with
    cosine 0."""
    params = default_params().astype(jnp.float32)
    queries, cols = _bank(40, 6, 4, seed=5)
    emb = np.array(queries.embedding)
    emb[1, 2] = np.inf
    emb[2] = -np.inf
    queries = QueryFeatures(**{**_fields(queries), "embedding": emb})
    run = score_batch if scorer == "single" else score_batch_sharded
    index, scores = run(params, queries, cols, 40, chunk_size=16)
    assert np.isfinite(np.asarray(scores)).all()
    np.testing.assert_array_equal(np.asarray(index), _reference(params, queries, cols, 40))


def _replace(queries: QueryFeatures, **leaves: Any) -> QueryFeatures:
    return QueryFeatures(**{**_fields(queries), **leaves})


@pytest.mark.parametrize("scorer", ["single", "sharded"])
def test_malformed_arguments_are_named_errors_before_xla(scorer: str) -> None:
    """Each of these was an XLA / tracing error from deep inside (dot_general's
    contracting dimensions, broadcasting, "Shapes must be 1D sequences of concrete
    values of integer type", an OverflowError), or for a bool ``k`` / ``chunk_size``
    silently taken as 1."""
    params = default_params().astype(jnp.float32)
    queries, cols = _bank(20, 6, 3, seed=2)
    run = score_batch if scorer == "single" else score_batch_sharded
    narrow = QueryFeatures(**{**_fields(queries), "embedding": queries.embedding[:, :4]})
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"queries": narrow}, ValueError, r"columns\.embedding must be \(N, 4\)"),
        ({"k": 2.0}, TypeError, "k must be an int"),
        ({"k": np.int64(0)}, ValueError, "k must be >= 1"),
        ({"chunk_size": True}, TypeError, "chunk_size must be an int"),
        ({"queries": _replace(queries, affect=queries.affect[:2])}, ValueError,
         r"queries\.affect must be \(3, 3\)"),
        ({"queries": _replace(queries, velocity=queries.velocity[:, :2])}, ValueError,
         r"queries\.velocity"),
        ({"queries": jax.tree_util.tree_map(lambda x: x[0], queries)}, ValueError,
         r"queries\.embedding must be \(Q, D\)"),
        ({"queries": _replace(queries, affect=queries.affect.astype(np.int32))}, TypeError,
         "floating point"),
        ({"signal_mask": np.ones(5, np.float32)}, ValueError, "signal_mask"),
    ]
    for change, error, message in cases:
        args: dict[str, Any] = {"queries": queries, "k": 3, "chunk_size": 8,
                                "signal_mask": None, **change}
        with pytest.raises(error, match=message):
            run(params, args["queries"], cols, args["k"], chunk_size=args["chunk_size"],
                signal_mask=args["signal_mask"])
    with pytest.raises(TypeError, match="k must be an int, got bool"):
        run(params, queries, cols, True, chunk_size=4)  # a k (and chunk) not yet compiled
    run(params, queries, cols, 1, chunk_size=4)
    with pytest.raises(TypeError, match="k must be an int, got bool"):
        run(params, queries, cols, True, chunk_size=4)  # True hashes as the compiled 1


def _cols(cols: MemoryColumns, **leaves: Any) -> MemoryColumns:
    return MemoryColumns(**{**_fields(cols), **leaves})


@pytest.mark.parametrize("scorer", ["single", "sharded"])
def test_bank_columns_of_another_shape_are_named_errors(scorer: str) -> None:
    """Only the bank's embedding was checked: a ``valid`` (or ``affect``, ...) column
    shorter than the embeddings scored only its rows (the scan's length is taken from
    ``valid``), an (N, 2) affect read its missing component from a clamped index, a
    float ``valid`` counted 0.5 as True: wrong answers without an error. Longer or
    shorter per-row columns were a ``vmap`` error naming none of them."""
    params = default_params().astype(jnp.float32)
    queries, cols = _bank(20, 6, 3, seed=2)
    run = score_batch if scorer == "single" else score_batch_sharded
    valid = np.asarray(cols.valid)
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"valid": valid[:10]}, ValueError, r"columns\.valid must be \(20,\)"),
        ({"valid": np.concatenate([valid, valid])}, ValueError, r"columns\.valid"),
        ({"valid": valid.astype(np.float32) * 0.5}, TypeError, r"columns\.valid must be bool"),
        ({"affect": np.asarray(cols.affect)[:, :2]}, ValueError,
         r"columns\.affect must be \(20, 3\)"),
        ({"mood": np.asarray(cols.mood)[:12]}, ValueError, r"columns\.mood"),
        ({"velocity": np.asarray(cols.velocity)[:, None]}, ValueError, r"columns\.velocity"),
        ({"age_seconds": np.asarray(cols.age_seconds)[:5]}, ValueError,
         r"columns\.age_seconds must be \(20,\)"),
        ({"consolidation": np.asarray(cols.consolidation)[:, None]}, ValueError,
         r"columns\.consolidation"),
        ({"retrieval_count": np.zeros(21, np.float32)}, ValueError, r"columns\.retrieval_count"),
        ({"activation": np.zeros(19, np.float32)}, ValueError, r"columns\.activation"),
    ]
    for change, error, message in cases:
        with pytest.raises(error, match=message):
            run(params, queries, _cols(cols, **change), 3, chunk_size=8)
    index, _ = run(params, queries, cols, 3, chunk_size=8)  # the well-formed bank still runs
    assert np.asarray(index).shape == (3, 3)


@pytest.mark.parametrize("scorer", ["single", "sharded"])
@pytest.mark.parametrize("exponent", [70, -80])
def test_embeddings_whose_squares_leave_float32_score_as_unscaled(
    scorer: str, exponent: int
) -> None:
    """Rows and queries with entries near 2**70 (or 2**-80) are finite float32, but
    their squared norms overflowed to inf (or underflowed to 0): cosine 0 for the
    rows, every row cosine 0 for the query, a different ranking. A power-of-two scale
    changes no cosine, and the norms of such rows are now taken of exactly rescaled
    vectors: the answer is the unscaled one (scores to float32 rounding: the rescaled
    rows' sums may be reduced in another order)."""
    params = default_params().astype(jnp.float32)
    queries, cols = _bank(40, 6, 4, seed=7)
    scale = np.float32(2.0**exponent)
    emb = np.array(cols.embedding)
    emb[::2] *= scale
    q_emb = np.array(queries.embedding)
    q_emb[1] *= scale
    scaled_queries = _replace(queries, embedding=q_emb)
    run = score_batch if scorer == "single" else score_batch_sharded
    want_index, want_scores = run(params, queries, cols, 40, chunk_size=16)
    index, scores = run(params, scaled_queries, _cols(cols, embedding=emb), 40, chunk_size=16)
    np.testing.assert_array_equal(np.asarray(index), np.asarray(want_index))
    np.testing.assert_allclose(np.asarray(scores), np.asarray(want_scores), rtol=4e-7, atol=0)


@pytest.mark.parametrize("scorer", ["single", "sharded"])
@pytest.mark.parametrize("storage", ["float32", "bfloat16"])
def test_rows_near_the_largest_float_score_their_cosine(scorer: str, storage: str) -> None:
    """Rows with entries near float32's (or bfloat16's, the same range) maximum: their
    inverse norm ``2**-127``-ish was flushed to 0 and their products with the query
    overflowed to inf, so they scored cosine 0 or a NaN total (the valid row never
    returned, even with k = N). The rows are rescaled by a power of two before the
    product: the cosine of a float64 oracle, every row returned."""
    dtype = jnp.bfloat16 if storage == "bfloat16" else np.float32
    params = default_params().astype(jnp.float32)
    queries, cols = _bank(24, 6, 3, seed=11)
    emb = np.array(cols.embedding, np.float64)
    emb[3:5] = 1.0  # no non-finite rows here: every row has a cosine
    emb[0] *= 3e38 / np.abs(emb[0]).max()
    emb[1] = 0.0
    emb[1, 2] = float(jnp.finfo(dtype).max)
    emb[7] = np.abs(emb[7]) * (1e38 / np.abs(emb[7]).max())  # all products of one sign
    stored = jnp.asarray(emb.astype(np.float32), dtype)
    rows = np.asarray(stored, np.float64)
    unit = rows / np.abs(rows).max(axis=1, keepdims=True)
    q = np.asarray(queries.embedding, np.float64)
    want = (q @ unit.T) / np.linalg.norm(q, axis=1)[:, None] / np.linalg.norm(unit, axis=1)
    semantic_only = jnp.asarray([1.0, 0, 0, 0, 0, 0], jnp.float32)
    run = score_batch if scorer == "single" else score_batch_sharded
    index, scores = run(params, queries, _cols(cols, embedding=stored), 24, chunk_size=8,
                        signal_mask=semantic_only)
    index, scores = np.asarray(index), np.asarray(scores)
    assert (np.sort(index, axis=1) == np.arange(24)).all()  # every valid row returned
    got = np.empty_like(want)
    np.put_along_axis(got, index, scores, axis=1)
    np.testing.assert_allclose(got, want, atol=2e-6)


def test_an_odd_row_leaves_every_other_rows_norm_as_it_was() -> None:
    """The rescaling pass runs only when some row needs it, and then changes only
    those rows: every other row's inverse norm is the plain one, bit for bit (one
    memory at 1e25 does not move the scores of the rest)."""
    params = default_params().astype(jnp.float32)
    _, cols = _bank(24, 5, 1, seed=3)
    emb = np.array(cols.embedding)
    emb[0] = 0.0  # zero, NaN and inf rows need no rescaling: still the plain path
    emb[1, 0] = np.nan
    plain = row_features(params, _cols(cols, embedding=emb), jnp.float32)
    odd = emb.copy()
    odd[5] *= np.float32(2.0**70)
    odd[9] *= np.float32(2.0**-80)
    mixed = row_features(params, _cols(cols, embedding=odd), jnp.float32)
    others = np.setdiff1d(np.arange(24), [5, 9])
    np.testing.assert_array_equal(np.asarray(mixed.inv_norm)[others],
                                  np.asarray(plain.inv_norm)[others])
    np.testing.assert_array_equal(np.asarray(mixed.ok), np.asarray(plain.ok))
    assert not np.asarray(plain.ok)[:2].any()
    np.testing.assert_array_equal(np.asarray(plain.scale), 1.0)
    for row, scale in ((5, 2.0**70), (9, 2.0**-80)):  # the same row's norm, rescaled
        factor = float(mixed.scale[row])  # a power of two, applied before the product
        assert factor != 1.0 and np.log2(factor) == round(np.log2(factor))
        np.testing.assert_allclose(float(mixed.inv_norm[row]) * factor * scale,
                                   float(plain.inv_norm[row]), rtol=4e-7)


@pytest.mark.parametrize("scorer", ["single", "sharded"])
def test_an_empty_query_batch_answers_empty_arrays(scorer: str) -> None:
    """No queries: ``(0, k)`` indices and scores, as ``score_batch`` answers.
    ``score_batch_sharded`` raised a ZeroDivisionError from inside a JAX reshape
    (its ``reshape(Q, -1)`` of the merged shard winners with Q = 0)."""
    params = default_params().astype(jnp.float32)
    queries, cols = _bank(20, 6, 2, seed=4)
    empty = jax.tree_util.tree_map(lambda x: np.asarray(x)[:0], queries)
    run = score_batch if scorer == "single" else score_batch_sharded
    index, scores = run(params, empty, cols, 3, chunk_size=8)
    assert np.asarray(index).shape == np.asarray(scores).shape == (0, 3)
    assert np.asarray(index).dtype == np.int32 and np.asarray(scores).dtype == np.float32


def test_a_mesh_without_the_memory_axis_is_a_named_error() -> None:
    """An ``axis_name`` the mesh does not have was a bare ``KeyError: 'x'`` and a mesh
    that is no ``Mesh`` an AttributeError ('str' object has no attribute 'shape')."""
    params = default_params().astype(jnp.float32)
    queries, cols = _bank(20, 6, 2, seed=6)
    mesh = memory_mesh()
    with pytest.raises(ValueError, match=r"axis_name 'x' is not an axis of mesh"):
        score_batch_sharded(params, queries, cols, 3, mesh=mesh, axis_name="x")
    with pytest.raises(TypeError, match=r"mesh must be a jax\.sharding\.Mesh, got str"):
        score_batch_sharded(params, queries, cols, 3, mesh="cpu")  # type: ignore[arg-type]
    index, _ = score_batch_sharded(params, queries, cols, 3, mesh=memory_mesh(axis_name="x"),
                                   axis_name="x")  # a mesh with that axis still runs
    np.testing.assert_array_equal(np.asarray(index), np.asarray(score_batch(
        params, queries, cols, 3)[0]))


def test_shard_columns_and_memory_mesh_name_a_bad_mesh() -> None:
    """``shard_columns`` with a mesh that is no ``Mesh`` raised AttributeError ('str'
    object has no attribute 'size'), and ``memory_mesh([])`` built a mesh of no devices
    that the scorer then divided by (ZeroDivisionError)."""
    _, cols = _bank(10, 4, 1, seed=8)
    with pytest.raises(TypeError, match=r"mesh must be a jax\.sharding\.Mesh, got str"):
        shard_columns(cols, "cpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"axis_name 'x' is not an axis of mesh"):
        shard_columns(cols, memory_mesh(), "x")
    with pytest.raises(ValueError, match="devices must name at least one device"):
        memory_mesh([])


@pytest.mark.parametrize("scorer", ["single", "sharded"])
@pytest.mark.parametrize("n", [82, 130])
def test_identical_rows_tie_across_a_short_last_chunk(scorer: str, n: int) -> None:
    """N identical memories tie, so the lowest rows win, whatever N is. The rows past
    the last full chunk were scored as a narrower chunk, whose product rounds
    differently (an ulp or two): identical rows there beat the earlier ones. The last
    chunk is now a full-width one ending at row N, its rows already scanned masked."""
    params = default_params().astype(jnp.float32)
    queries, cols = _bank(8, 4, 16, seed=13)
    one = {k: np.asarray(v)[:1] for k, v in _fields(cols).items()}  # row 0: finite
    same = MemoryColumns(**{k: np.repeat(v, n, axis=0) for k, v in one.items()})
    semantic_only = jnp.asarray([1.0, 0, 0, 0, 0, 0], jnp.float32)
    run = score_batch if scorer == "single" else score_batch_sharded
    for mask in (None, semantic_only):
        index, scores = run(params, queries, same, 8, chunk_size=64, signal_mask=mask)
        np.testing.assert_array_equal(np.asarray(index), np.tile(np.arange(8), (16, 1)))
        scores = np.asarray(scores)
        np.testing.assert_array_equal(scores, np.repeat(scores[:, :1], 8, axis=1))
        full, _ = run(params, queries, same, n, chunk_size=64, signal_mask=mask)
        np.testing.assert_array_equal(np.asarray(full), np.tile(np.arange(n), (16, 1)))


@pytest.mark.parametrize("scorer", ["single", "sharded"])
def test_lists_of_lists_score_as_the_same_arrays(scorer: str) -> None:
    """Query, bank and mask leaves given as (nested) Python lists: ``score_batch``
    raised JAX's TracerArrayConversionError while checking their shapes (the lists
    arrived in the compiled function as lists of tracers), where
    ``score_batch_sharded`` answered. Both now answer as for the arrays."""
    params = default_params().astype(jnp.float32)
    queries, cols = _bank(20, 6, 3, seed=21)
    mask = np.asarray([1, 0, 1, 1, 1, 1], np.float32)
    run = score_batch if scorer == "single" else score_batch_sharded
    want = run(params, queries, cols, 4, chunk_size=8, signal_mask=mask)
    as_lists = jax.tree_util.tree_map(lambda x: np.asarray(x).tolist(), (queries, cols))
    got = run(params, *as_lists, 4, chunk_size=8, signal_mask=mask.tolist())
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), rtol=0, atol=1e-6)
    rows = as_lists[1]
    ragged = MemoryColumns(**{**_fields(rows), "embedding": [[0.0] * 6] * 19 + [[0.0] * 5]})
    with pytest.raises(ValueError, match=r"columns\.embedding"):
        run(params, queries, ragged, 4)


@pytest.mark.parametrize("scorer", ["single", "sharded"])
def test_arguments_of_the_wrong_type_are_named_type_errors(scorer: str) -> None:
    """``queries`` / ``columns`` that are no QueryFeatures / MemoryColumns (None, a
    tuple of the four arrays) and ``params`` that is no ScoringParams raised an
    AttributeError ('NoneType' object has no attribute 'embedding' / 'gates')."""
    params = default_params().astype(jnp.float32)
    queries, cols = _bank(20, 6, 2, seed=23)
    run = score_batch if scorer == "single" else score_batch_sharded
    as_tuple = tuple(_fields(queries).values())
    for bad, kind in [(None, "NoneType"), (as_tuple, "tuple")]:
        with pytest.raises(TypeError, match=f"queries must be a QueryFeatures, got {kind}"):
            run(params, bad, cols, 3)
        with pytest.raises(TypeError, match=f"columns must be a MemoryColumns, got {kind}"):
            run(params, queries, bad, 3)
        with pytest.raises(TypeError, match=f"params must be a ScoringParams, got {kind}"):
            run(bad, queries, cols, 3)


@pytest.mark.parametrize("scorer", ["single", "sharded"])
def test_either_scorer_takes_k_as_a_zero_d_integer_array(scorer: str) -> None:
    """``k`` as a 0-d numpy or JAX integer (what ``np.array(3)`` / ``jnp.int32(3)``
    give) passed the argument checks, then failed compiling: 'Non-hashable static
    arguments are not supported', naming no argument."""
    params = default_params().astype(jnp.float32)
    queries, cols = _bank(20, 6, 3, seed=29)
    run = score_batch if scorer == "single" else score_batch_sharded
    want = run(params, queries, cols, 4, chunk_size=8)
    for k in (np.array(4), jnp.asarray(4, jnp.int32)):
        got = run(params, queries, cols, k, chunk_size=np.array(8))
        np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
        np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(want[1]))
