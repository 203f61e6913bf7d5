"""Researchers' own data and arguments reaching the learning API.

* cross-validation replays every held-out scenario, whatever the JSON type of its
  ``scenario_id``;
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from emotional_memory.data import load_builtin_dataset
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.learn import cross_validate, subset_dataset


@pytest.fixture(scope="module")
def small() -> dict[str, Any]:
    """Six scenarios of the built-in dataset (labelled affect: no text model needed)."""
    data = load_builtin_dataset()
    return {**data, "scenarios": copy.deepcopy(data["scenarios"][:6])}


def test_subset_dataset_matches_integer_scenario_ids(small: dict[str, Any]) -> None:
    data = copy.deepcopy(small)
    for i, scenario in enumerate(data["scenarios"]):
        scenario["scenario_id"] = i + 1
    # the batch's info holds the ids as strings
    kept = subset_dataset(data, ["2", "5"])
    assert [s["scenario_id"] for s in kept["scenarios"]] == [2, 5]


def test_cross_validation_with_integer_scenario_ids(small: dict[str, Any]) -> None:
    data = copy.deepcopy(small)
    for i, scenario in enumerate(data["scenarios"]):
        scenario["scenario_id"] = i + 1
    n_queries = sum(len(s["queries"]) for sc in data["scenarios"] for s in sc["sessions"])
    cv = cross_validate(data, HashingEmbedder(dim=384), folds=3, select=False, steps=5)
    assert cv.metrics["n_queries"] == n_queries == cv.default_metrics["n_queries"]
    assert sum(f["n_queries"] for f in cv.fold_metrics) == n_queries
