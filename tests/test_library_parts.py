"""Library replacements of hand-written parts: tqdm progress, the cachetools LRU, ml_dtypes
bfloat16 rounding (bit-identical to the previous bit arithmetic), contextlib.nullcontext."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime

import numpy as np
import pytest

from emotional_memory._llm import LRUCache
from emotional_memory._progress import progress_iter
from emotional_memory.affect import AffectiveMomentum, CoreAffect
from emotional_memory.interfaces import store_transaction
from emotional_memory.models import EmotionalTag, Memory
from emotional_memory.mood import MoodField
from emotional_memory.stores._shared.rows import precision
from emotional_memory.stores._shared.rows import writes as in_memory
from emotional_memory.stores.in_memory import InMemoryStore


def _bits_to_bf16_reference(values: np.ndarray) -> np.ndarray:
    """The hand-written rounding the store used before ml_dtypes (nearest, ties to even)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def test_progress_iter_draws_a_tqdm_bar(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(progress_iter(range(7), "fit")) == list(range(7))
    err = capsys.readouterr().err
    assert "fit" in err and "7/7" in err and "100%" in err
    assert list(progress_iter(iter("abc"), "replay", total=3)) == ["a", "b", "c"]
    assert "3/3" in capsys.readouterr().err
    assert list(progress_iter([1, 2], "quiet", enabled=False)) == [1, 2]
    assert capsys.readouterr().err == ""


def test_lru_cache_evicts_least_recently_used() -> None:
    cache: LRUCache[str, int] = LRUCache(3)
    for i, k in enumerate("abc"):
        cache.put(k, i)
    assert cache.get("a") == 0  # a is now the most recent
    cache.put("d", 3)  # evicts b
    assert cache.get("b") is None and cache.get("c") == 2 and len(cache) == 3
    off: LRUCache[str, int] = LRUCache(0)
    off.put("x", 1)
    assert off.get("x") is None and len(off) == 0


def test_bfloat16_rounding_is_bit_identical_to_the_previous_arithmetic() -> None:
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, size=2_000_000, dtype=np.uint64).astype(np.uint32)
    special = np.array(
        [
            0x00000000,
            0x80000000,
            0x00000001,
            0x007FFFFF,
            0x00800000,
            0x3F808000,
            0x3F818000,
            0x3F80FFFF,
            0x7F7FFFFF,
            0xFF7FFFFF,
            0x7F7F8000,
            0x3F7FFFFF,
        ],
        dtype=np.uint32,
    )
    values = np.concatenate([bits, special]).view(np.float32)
    values = values[np.isfinite(values)]
    got = precision.to_bfloat16_bits(values)
    np.testing.assert_array_equal(got, _bits_to_bf16_reference(values))
    every = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    back = precision.from_bfloat16_bits(every)
    np.testing.assert_array_equal(back.view(np.uint32), every.astype(np.uint32) << np.uint32(16))


def test_store_transaction_without_one_is_nullcontext() -> None:
    cm = store_transaction(object())
    assert isinstance(cm, contextlib.nullcontext)
    with cm as value:
        assert value is None


def test_in_memory_recent_cache_is_bounded() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    store = InMemoryStore()
    ids = []
    for i in range(in_memory.RECENT + 40):
        tag = EmotionalTag(
            core_affect=CoreAffect(valence=0.0, arousal=0.5),
            momentum=AffectiveMomentum.zero(),
            mood_snapshot=MoodField.neutral(t0),
            timestamp=t0,
            consolidation_strength=0.5,
        )
        m = Memory.create(content=f"m{i}", tag=tag, embedding=[float(i), 1.0])
        store.save(m)
        ids.append(m.id)
    for mid in ids:
        got = store.get(mid)
        assert got is not None and got.id == mid
    assert len(store._recent) == in_memory.RECENT
    assert ids[0] not in store._recent and ids[-1] in store._recent
