"""``spreading_activation`` and ``temporal_proximity`` name a wrong argument.

``hops`` was passed to ``int()`` unchecked (2.5 ran as 2, "2" failed comparing str
with int) and unrolled into the traced program (hops=100_000 traced for minutes,
though walks longer than the candidate count add nothing as strengths lie in [0, 1]);
a NaN half-life returned NaN, outside the documented [0, 1].
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest

from emotional_memory.models import Memory, ResonanceLink
from emotional_memory.resonance import (
    hebbian_strengthen,
    spreading_activation,
    temporal_proximity,
)
from support.memories import INDEXED_T0, indexed_memory


def _ring(n: int) -> list[Memory]:
    """``n`` memories linked in a ring, i -> i+1 with strength 0.9, plus i -> i+2 (0.5)."""
    mems = [indexed_memory(i, None) for i in range(n)]
    out = []
    for i, m in enumerate(mems):
        links = [
            ResonanceLink(source_id=m.id, target_id=mems[(i + step) % n].id,
                          strength=s, link_type="semantic")
            for step, s in ((1, 0.9), (2, 0.5))
        ]
        tag = m.tag.model_copy(update={"resonance_links": links})
        out.append(m.model_copy(update={"tag": tag}))
    return out


RING = _ring(5)
SEED = [RING[0].id]


@pytest.mark.parametrize(("hops", "error"), [
    ("2", TypeError), (True, TypeError), (None, TypeError), (2.5, ValueError),
    (float("nan"), ValueError), (float("inf"), ValueError),
], ids=["str", "bool", "None", "2.5", "nan", "inf"])
def test_bad_hops_is_named(hops: Any, error: type) -> None:
    with pytest.raises(error, match="hops"):
        spreading_activation(SEED, RING, hops=hops)


def test_many_hops_equal_as_many_hops_as_candidates() -> None:
    full = spreading_activation(SEED, RING, hops=len(RING))
    assert set(full) == {m.id for m in RING[1:]}
    assert spreading_activation(SEED, RING, hops=2.0) == spreading_activation(SEED, RING, 2)

def test_many_hops_compile_at_most_as_many_hops_as_candidates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # each hop is unrolled into the traced program: 100,000 hops traced for minutes
    import emotional_memory.resonance as resonance

    seen: list[int] = []
    real = resonance.spreading_activation_jit

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(int(args[3]) if len(args) > 3 else int(kwargs["hops"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(resonance, "spreading_activation_jit", spy)
    full = spreading_activation(SEED, RING, hops=len(RING))
    assert spreading_activation(SEED, RING, hops=100_000) == full
    assert seen and max(seen) <= len(RING)


T1 = INDEXED_T0 + timedelta(hours=1)


@pytest.mark.parametrize(("half_life", "error"), [
    (float("nan"), ValueError), ("3600", TypeError), (True, TypeError), (None, TypeError),
], ids=["nan", "str", "bool", "None"])
def test_bad_half_life_is_named(half_life: Any, error: type) -> None:
    with pytest.raises(error, match="half_life_seconds"):
        temporal_proximity(INDEXED_T0, T1, half_life)


def test_half_life_edges_keep_their_meaning() -> None:
    assert temporal_proximity(INDEXED_T0, T1, 3600.0) == 0.5
    assert temporal_proximity(INDEXED_T0, T1, 0) == 0.0
    assert temporal_proximity(INDEXED_T0, T1, -(10**400)) == 0.0
    assert temporal_proximity(INDEXED_T0, T1, math.inf) == 1.0
    assert temporal_proximity(INDEXED_T0, T1, 10**400) == 1.0


@pytest.mark.parametrize("increment", [-0.1, -5.0, -(10**400)])
def test_hebbian_negative_increment_is_rejected(increment: float) -> None:
    # it built links of strength -4.1, which ResonanceLink itself refuses (and a
    # store could not load back)
    with pytest.raises(ValueError, match="increment"):
        hebbian_strengthen(RING[0], [RING[1].id], increment)


def test_hebbian_increment_is_added_and_capped() -> None:
    links = hebbian_strengthen(RING[0], [RING[1].id, RING[2].id], 0.3)
    assert [lk.strength for lk in links] == [1.0, pytest.approx(0.8)]
    assert hebbian_strengthen(RING[0], [RING[1].id], 0.0) == list(RING[0].tag.resonance_links)
