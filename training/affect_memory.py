"""Memory-register labels for the affect head (``training affect --memory-events``).

EmoBank rates news, fiction, letters and blogs on a mild scale: its "clearly positive"
sentences sit near +0.2 on this library's valence axis, and its arousal is calm vs
excited, not how intense an event felt.  Agents store first-person events.  A dataset
in the realistic-recall format (``scenarios[].sessions[].events[]`` with ``content``,
``valence`` in [-1, 1] and ``arousal`` in [0, 1]) labels such events on the library's
own axes; its events join EmoBank's train split, each repeated ``weight`` times.

The weight is chosen, among candidates, by one rule giving general text and the
memory register equal say: the mean of (a) the EmoBank dev Pearson r (valence,
arousal, dominance) and (b) the memory events' valence and arousal r out of fold, in
scenario-grouped folds (no scenario is in both the training and the scored part).
Weight 0 (EmoBank only) is always a candidate.  The events carry no dominance: their
dominance target is the prediction of an EmoBank-only head.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
import numpy.typing as npt

from emotional_memory._progress import progress_iter
from training.affect import FloatArray, HeadConfig, fit_head, pearson
from training.affect_calibration import scenario_fold_ids

__all__ = ["MemoryEvents", "WeightChoice", "load_memory_events", "select_memory_weight",
           "with_memory_rows"]


@dataclass(frozen=True)
class MemoryEvents:
    """Labelled first-person events: texts, scenario groups and (valence, arousal).

    Attributes:
        texts: ``N`` event texts.
        groups: ``(N,)`` scenario ids (the folds never split a scenario).
        va: ``(N, 2)`` float32 valence in [-1, 1], arousal in [0, 1].
    """

    texts: list[str]
    groups: npt.NDArray[np.str_]
    va: FloatArray

    def __len__(self) -> int:
        return len(self.texts)


class WeightChoice(NamedTuple):
    """What :func:`select_memory_weight` chose.

    Attributes:
        weight: the chosen weight.
        reports: one report per candidate weight.
        oof: ``(M, 2)`` unclipped valence and arousal predicted out of fold for the
            memory events at the chosen weight.
    """

    weight: int
    reports: list[dict[str, Any]]
    oof: FloatArray


def _number(value: Any, low: float, high: float, where: str) -> float:
    """A finite real in ``[low, high]`` (bools refused), else ``ValueError`` naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where} must be a number, got {type(value).__name__}")
    out = float(value)
    if not low <= out <= high:
        raise ValueError(f"{where} must be in [{low}, {high}], got {value!r}")
    return out


def load_memory_events(path: str | Path) -> MemoryEvents:
    """Read the events with both ``valence`` and ``arousal`` from a realistic-recall file.

    Events missing either label are skipped (LoCoMo-style data has none).

    Args:
        path: the JSON dataset.

    Returns:
        The labelled events, in file order.

    Raises:
        FileNotFoundError: when the file does not exist.
        IsADirectoryError: when ``path`` is a folder.
        ValueError: on a malformed file, a label out of range, or no labelled event.
    """
    p = Path(path)
    if p.is_dir():
        raise IsADirectoryError(f"memory events file {str(p)!r} is a directory, not a file")
    if not p.is_file():
        raise FileNotFoundError(f"memory events file {str(p)!r} does not exist")
    data = json.loads(p.read_text(encoding="utf-8"))
    scenarios = data.get("scenarios") if isinstance(data, dict) else None
    if not isinstance(scenarios, list):
        raise ValueError(f"{p.name}: expected an object with a 'scenarios' list")
    texts: list[str] = []
    groups: list[str] = []
    rows: list[tuple[float, float]] = []
    for i, scenario in enumerate(scenarios):
        sid = str(scenario.get("scenario_id", i)) if isinstance(scenario, dict) else ""
        sessions = scenario.get("sessions") if isinstance(scenario, dict) else None
        if not isinstance(sessions, list):
            raise ValueError(f"{p.name}: scenarios[{i}].sessions must be a list")
        for j, session in enumerate(sessions):
            events = session.get("events", []) if isinstance(session, dict) else None
            if not isinstance(events, list):
                raise ValueError(f"{p.name}: scenarios[{i}].sessions[{j}].events must be a list")
            for k, event in enumerate(events):
                where = f"scenarios[{i}].sessions[{j}].events[{k}]"
                if not isinstance(event, dict) or not isinstance(event.get("content"), str):
                    raise ValueError(f"{p.name}: {where}.content must be a string")
                if event.get("valence") is None or event.get("arousal") is None:
                    continue
                rows.append((_number(event["valence"], -1.0, 1.0, f"{where}.valence"),
                             _number(event["arousal"], 0.0, 1.0, f"{where}.arousal")))
                texts.append(event["content"])
                groups.append(sid)
    if not texts:
        raise ValueError(f"{p.name}: no event carries both valence and arousal")
    return MemoryEvents(texts, np.array(groups), np.array(rows, np.float32))


def with_memory_rows(
    x: FloatArray, y: FloatArray, xm: FloatArray, ym: FloatArray, weight: int
) -> tuple[FloatArray, FloatArray]:
    """EmoBank rows followed by the memory rows repeated ``weight`` times.

    Args:
        x, y: ``(N, F)`` / ``(N, 3)`` EmoBank features and targets.
        xm, ym: ``(M, F)`` / ``(M, 3)`` memory features and targets.
        weight: repetitions (0: EmoBank only).

    Returns:
        ``(N + weight * M, F)`` features and ``(N + weight * M, 3)`` targets.

    Raises:
        ValueError: When ``weight`` is negative.
    """
    if weight < 0:
        raise ValueError(f"weight must be >= 0, got {weight}")
    if weight == 0:
        return x, y
    return (np.concatenate([x, np.tile(xm, (weight, 1))]),
            np.concatenate([y, np.tile(ym, (weight, 1))]))


def select_memory_weight(
    train: tuple[FloatArray, FloatArray], dev: tuple[FloatArray, FloatArray],
    memory: tuple[FloatArray, FloatArray], groups: npt.NDArray[np.str_],
    config: HeadConfig, weights: Sequence[int], *, folds: int = 5, progress: bool = False,
) -> WeightChoice:
    """Choose the memory-row weight by scenario-grouped CV (see the module docstring).

    Args:
        train: EmoBank train ``(x, y)``.
        dev: EmoBank dev ``(x, y)``.
        memory: memory ``(x, y)``; ``y`` ``(M, 3)`` with pseudo-labelled dominance.
        groups: ``(M,)`` scenario ids.
        config: the head's hyper-parameters.
        weights: candidate weights, ints >= 0 (0 is added when missing).
        folds: number of scenario-grouped folds, clipped to [2, number of scenarios].
        progress: progress bar over the fits.

    Returns:
        A :class:`WeightChoice`; each report has ``weight``, ``emobank_dev_r`` (3),
        ``memory_cv_r`` (valence, arousal), ``memory_cv_mae`` (valence, arousal, of the
        clipped predictions) and ``score``.

    Raises:
        TypeError: When a candidate weight is not an int.
        ValueError: When a weight is negative, ``groups`` does not hold one id per
            memory row, or the events come from fewer than two scenarios.
    """
    xm, ym = memory
    for i, w in enumerate(weights):  # before any fit: int() would cut 1.5 to 1
        if isinstance(w, bool) or not isinstance(w, numbers.Integral):
            raise TypeError(f"weights[{i}] must be an int, got {type(w).__name__}")
        if w < 0:
            raise ValueError(f"weights[{i}] must be >= 0, got {w}")
    if len(groups) != len(xm):
        raise ValueError(f"groups has {len(groups)} entries for {len(xm)} memory rows")
    fold, n_folds = scenario_fold_ids(groups, folds)
    candidates = sorted({0, *(int(w) for w in weights)})
    jobs = [(w, f) for w in candidates for f in range(n_folds)]
    preds = {w: np.zeros((len(xm), 2), np.float32) for w in candidates}
    dev_r: dict[int, list[list[float]]] = {w: [] for w in candidates}
    for w, f in progress_iter(jobs, "memory weight", enabled=progress):
        held = fold == f
        x, y = with_memory_rows(*train, xm[~held], ym[~held], w)
        head = fit_head(x, y, config, seeds=(0,))
        preds[w][held] = np.asarray(head.raw(jnp.asarray(xm[held])))[:, :2]
        dev_r[w].append(pearson(np.asarray(head(jnp.asarray(dev[0]))), dev[1]))
    reports: list[dict[str, Any]] = []
    scores: dict[int, float] = {}
    for w in candidates:
        eb = np.mean(dev_r[w], axis=0)
        clipped = np.clip(preds[w], [-1.0, 0.0], [1.0, 1.0])
        mem = pearson(clipped, ym[:, :2])
        reports.append({
            "weight": w,
            "emobank_dev_r": [round(float(v), 4) for v in eb],
            "memory_cv_r": [round(v, 4) for v in mem],
            "memory_cv_mae": [round(float(v), 4)
                              for v in np.abs(clipped - ym[:, :2]).mean(axis=0)],
            "score": round(float((eb.mean() + np.mean(mem)) / 2), 4),
        })
        scores[w] = reports[-1]["score"]
    best = max(candidates, key=lambda w: (scores[w], -w))  # ties: the smaller weight
    return WeightChoice(best, reports, preds[best])
