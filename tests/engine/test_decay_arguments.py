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
