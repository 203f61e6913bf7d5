"""Memory-register labels for the affect head: loading, weighting, choosing the weight."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from training.affect import HeadConfig
from training.affect_memory import load_memory_events, select_memory_weight, with_memory_rows

from emotional_memory.appraisal_embedding import load_affect_head


def _dataset(events_per_scenario: list[list[dict[str, Any]]]) -> dict[str, Any]:
    return {"scenarios": [
        {"scenario_id": f"s{i}", "sessions": [{"session_id": "a", "events": events}]}
        for i, events in enumerate(events_per_scenario)
    ]}


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "events.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_loads_labelled_events_and_skips_unlabelled(tmp_path: Path) -> None:
    data = _dataset([
        [{"content": "good", "valence": 0.8, "arousal": 0.5},
         {"content": "no labels"},
         {"content": "half", "valence": 0.1}],
        [{"content": "bad", "valence": -1, "arousal": 1}],
    ])
    events = load_memory_events(_write(tmp_path, data))
    assert events.texts == ["good", "bad"] and len(events) == 2
    assert events.groups.tolist() == ["s0", "s1"]
    np.testing.assert_allclose(events.va, [[0.8, 0.5], [-1.0, 1.0]])
    assert events.va.dtype == np.float32


@pytest.mark.parametrize(("event", "match"), [
    ({"content": "x", "valence": 1.5, "arousal": 0.5}, r"events\[0\]\.valence"),
    ({"content": "x", "valence": 0.5, "arousal": -0.1}, r"events\[0\]\.arousal"),
    ({"content": "x", "valence": True, "arousal": 0.5}, r"valence must be a number"),
    ({"content": "x", "valence": "0.5", "arousal": 0.5}, r"valence must be a number"),
    ({"content": 3, "valence": 0.5, "arousal": 0.5}, r"content must be a string"),
])
def test_bad_events_are_refused_naming_the_field(
    tmp_path: Path, event: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        load_memory_events(_write(tmp_path, _dataset([[event]])))


def test_files_without_labels_or_shape_are_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_memory_events(tmp_path / "missing.json")
    with pytest.raises(IsADirectoryError, match="is a directory"):  # said "does not exist"
        load_memory_events(tmp_path)
    with pytest.raises(ValueError, match="'scenarios' list"):
        load_memory_events(_write(tmp_path, [1, 2]))
    with pytest.raises(ValueError, match="no event carries both"):
        load_memory_events(_write(tmp_path, _dataset([[{"content": "x"}]])))
    with pytest.raises(ValueError, match=r"sessions must be a list"):
        load_memory_events(_write(tmp_path, {"scenarios": [{"sessions": 3}]}))


def test_with_memory_rows_repeats_the_memory_rows() -> None:
    x, y = np.ones((3, 2), np.float32), np.zeros((3, 3), np.float32)
    xm, ym = np.full((2, 2), 5.0, np.float32), np.full((2, 3), 7.0, np.float32)
    assert with_memory_rows(x, y, xm, ym, 0)[0] is x
    bx, by = with_memory_rows(x, y, xm, ym, 3)
    assert bx.shape == (9, 2) and by.shape == (9, 3)
    np.testing.assert_array_equal(bx[:3], x)
    assert (bx[3:] == 5.0).all() and (by[3:] == 7.0).all()


def _synthetic(seed: int) -> tuple[Any, ...]:
    """General rows whose targets follow feature 0; memory rows that follow feature 1.

    A head trained on the general rows alone cannot rate the memory rows, so a good
    weight rule must give them weight; it must also keep the general dev rows rated.
    """
    rng = np.random.default_rng(seed)
    f = 6
    x = rng.normal(size=(400, f)).astype(np.float32)
    y = np.stack([np.tanh(x[:, 0]), 0.5 + 0.3 * np.tanh(x[:, 0]), 0.5 + 0 * x[:, 0]], 1)
    y = (y + rng.normal(size=y.shape) * [0.05, 0.05, 0.1]).astype(np.float32)
    xm = rng.normal(size=(120, f)).astype(np.float32)
    ym = np.stack([np.tanh(2 * xm[:, 1]), 0.5 + 0.4 * np.tanh(2 * xm[:, 1]),
                   0.5 + 0.1 * rng.normal(size=120)], 1).astype(np.float32)
    groups = np.array([f"s{i % 10}" for i in range(120)])
    return x[:300], y[:300], x[300:], y[300:], xm, ym, groups


def test_the_weight_rule_gives_weight_to_labels_the_general_data_lacks() -> None:
    x, y, xd, yd, xm, ym, groups = _synthetic(0)
    config = HeadConfig(hidden=16, dropout=0.0, epochs=15, lr=1e-2, batch_size=32)
    weight, reports, oof = select_memory_weight((x, y), (xd, yd), (xm, ym), groups, config,
                                                (1, 2), folds=3)
    assert [r["weight"] for r in reports] == [0, 1, 2]  # 0 is always a candidate
    by_weight = {r["weight"]: r for r in reports}
    # EmoBank-only cannot rate the memory rows; weighted training can, out of fold
    assert by_weight[0]["memory_cv_r"][0] < 0.3 < by_weight[2]["memory_cv_r"][0]
    assert weight > 0
    for r in reports:
        assert r["score"] == pytest.approx(
            (np.mean(r["emobank_dev_r"]) + np.mean(r["memory_cv_r"])) / 2, abs=1e-3)
        assert len(r["memory_cv_mae"]) == 2 and all(math.isfinite(v) for v in r["memory_cv_mae"])
    assert by_weight[weight]["score"] == max(r["score"] for r in reports)
    # the chosen weight's out-of-fold predictions come back unclipped, and their
    # clipped error is the one reported
    assert oof.shape == (120, 2) and np.isfinite(oof).all()
    mae = np.abs(np.clip(oof, [-1, 0], [1, 1]) - ym[:, :2]).mean(axis=0)
    np.testing.assert_allclose(by_weight[weight]["memory_cv_mae"], mae, atol=1e-4)


def test_the_weight_rule_needs_two_scenarios() -> None:
    x, y, xd, yd, xm, ym, _ = _synthetic(1)
    config = HeadConfig(hidden=8, epochs=1)
    with pytest.raises(ValueError, match="two scenarios"):
        select_memory_weight((x, y), (xd, yd), (xm, ym), np.array(["one"] * len(xm)), config,
                             (1,))


def test_cli_trains_with_memory_events(tmp_path: Path) -> None:
    """`python -m training affect --memory-events` end to end on synthetic features."""
    from training.cli import main

    rng = np.random.default_rng(0)
    bank = [f"sentence {i}" for i in range(40)]
    csv = tmp_path / "bank.csv"
    csv.write_text("\n".join(["id,split,V,A,D,text"] + [
        f"s{i},{'train' if i < 30 else 'dev'},{rng.uniform(1, 5):.2f},{rng.uniform(1, 5):.2f},"
        f"{rng.uniform(1, 5):.2f},{t}" for i, t in enumerate(bank)]) + "\n", encoding="utf-8")
    events = [[{"content": f"event {s}-{k}", "valence": float(rng.uniform(-1, 1)),
                "arousal": float(rng.uniform(0, 1))} for k in range(4)] for s in range(3)]
    path = _write(tmp_path, _dataset(events))
    texts = bank + [e["content"] for scenario in events for e in scenario]
    cache = tmp_path / "cache.npz"
    np.savez(cache, texts=np.array(texts),
             pooled=rng.normal(size=(len(texts), 6, 2, 384)).astype(np.float32))
    out = tmp_path / "head.npz"
    code = main(["affect", "--emobank", str(csv), "--cache", str(cache), "--out", str(out),
                 "--memory-events", str(path), "--memory-weights", "2", "--quick",
                 "--members", "1", "--quiet", "--json"])
    assert code == 0
    head = load_affect_head(out)
    meta = json.loads(str(np.load(out)["metadata"]))
    assert meta["memory_events"] == 12 and meta["memory_weight"] in (0, 2)
    assert [c["weight"] for c in meta["memory_candidates"]] == [0, 2]
    assert set(meta["register_calibration"]) == {"valence", "arousal"}
    x = rng.normal(size=(4, head.n_features)).astype(np.float32)
    assert np.isfinite(np.asarray(head(jnp.asarray(x)))).all()


@pytest.mark.parametrize("weights", ["a,b", "-1", "101"])
def test_cli_refuses_bad_weights(weights: str, capsys: pytest.CaptureFixture[str]) -> None:
    from training.cli import main

    with pytest.raises(SystemExit):
        main(["affect", "--emobank", "x.csv", "--memory-weights", weights])
    assert "--memory-weights" in capsys.readouterr().err


def test_cli_refuses_weights_without_events(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from training.cli import main

    csv = tmp_path / "bank.csv"
    csv.write_text("id,split,V,A,D,text\na,train,3,3,3,x\nb,dev,3,3,3,y\n", encoding="utf-8")
    code = main(["affect", "--emobank", str(csv), "--memory-weights", "1", "--quiet"])
    assert code == 2
    assert "--memory-weights needs --memory-events" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("weights", "error", "match"),
    [
        ((1.5,), TypeError, r"weights\[0\] must be an int, got float"),  # was cut to 1
        ((2, -1), ValueError, r"weights\[1\] must be >= 0, got -1"),
        ((True,), TypeError, r"weights\[0\] must be an int, got bool"),
    ],
)
def test_the_weight_rule_refuses_bad_candidates(
    weights: tuple[Any, ...], error: type[Exception], match: str
) -> None:
    x, y, xd, yd, xm, ym, groups = _synthetic(2)
    config = HeadConfig(hidden=8, epochs=1)
    with pytest.raises(error, match=match):
        select_memory_weight((x, y), (xd, yd), (xm, ym), groups, config, weights)


def test_the_weight_rule_needs_one_group_per_memory_row() -> None:
    x, y, xd, yd, xm, ym, groups = _synthetic(3)
    with pytest.raises(ValueError, match=r"groups has 119 entries for 120 memory rows"):
        select_memory_weight((x, y), (xd, yd), (xm, ym), groups[:-1], HeadConfig(epochs=1),
                             (1,))


def test_with_memory_rows_refuses_a_negative_weight() -> None:
    x, y = np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="weight must be >= 0, got -1"):
        with_memory_rows(x, y, x, y, -1)
