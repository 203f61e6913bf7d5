"""``compute_effective_strength(_batch)`` name a wrong argument (SPEC 9).

A config that is not a ``DecayConfig`` or an item that is not an ``EmotionalTag``
failed deep inside with ``AttributeError`` ('str' object has no attribute
'base_decay', 'NoneType' object has no attribute 'timestamp').
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from emotional_memory.decay import (
    DecayConfig,
    compute_effective_strength,
    compute_effective_strength_batch,
)
from support.memories import indexed_memory

NOW = datetime(2030, 1, 1, tzinfo=UTC)
TAG = indexed_memory(0, None).tag


@pytest.mark.parametrize("config", ["x", {"base_decay": 0.5}, 0.5],
                         ids=["str", "dict", "float"])
def test_config_of_wrong_type_is_named(config: Any) -> None:
    with pytest.raises(TypeError, match="config"):
        compute_effective_strength(TAG, NOW, config)
    with pytest.raises(TypeError, match="config"):
        compute_effective_strength_batch([TAG], NOW, config)


@pytest.mark.parametrize("item", [None, "tag", indexed_memory(1, None)],
                         ids=["None", "str", "Memory"])
def test_item_that_is_not_a_tag_is_named(item: Any) -> None:
    with pytest.raises(TypeError, match=r"tags\[1\]"):
        compute_effective_strength_batch([TAG, item], NOW)
    with pytest.raises(TypeError, match="tag"):
        compute_effective_strength(item, NOW)


def test_valid_calls_agree() -> None:
    one = compute_effective_strength(TAG, NOW, DecayConfig())
    assert compute_effective_strength(TAG, NOW) == one
    assert compute_effective_strength_batch([TAG, TAG], NOW).tolist() == [one, one]
    assert compute_effective_strength_batch([], NOW).shape == (0,)


def _tag(consolidation: float, arousal: float) -> Any:
    return TAG.model_copy(update={
        "consolidation_strength": consolidation,
        "core_affect": TAG.core_affect.model_copy(update={"arousal": arousal}),
        "timestamp": NOW,
    })


@pytest.mark.parametrize("arousal", [0.0, 0.5, 0.9])
def test_zero_consolidation_stays_zero_where_the_power_law_overflows(arousal: float) -> None:
    # age 0 counts as min_seconds < 1: min_seconds ** -(rate * power) overflows to inf,
    # and 0 * inf was NaN. docs/behaviour.md §3: s = clamp(c * t ** -x, 0, c) = 0 for c = 0.
    cfg = DecayConfig(base_decay=1000.0, min_seconds=1e-3, power=2.0)
    zero, one = _tag(0.0, arousal), _tag(1.0, arousal)
    assert compute_effective_strength(zero, NOW, cfg) == 0.0
    assert compute_effective_strength(one, NOW, cfg) == 1.0  # clamped to c, as before
    assert compute_effective_strength_batch([zero, one], NOW, cfg).tolist() == [0.0, 1.0]
