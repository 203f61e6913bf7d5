"""Shared affective state under a random mix of operations from several processes.

Worker processes (tests/support/shared_state_mixed_worker.py) run random encodes,
batches, retrievals, state changes, resets, loads, deletes and clears on a parent
scope, its child, a sibling and the root of one SQLite file, with clocks up to a
minute apart, and print every state save as it happens. Checked: per state key, the
saves form one serial history (every save starts from the state the previous one
left, none from a state no save made, none twice from one state unless it recurred);
each update extends the history it started from, never back in time; each scope
holds exactly the memories its workers kept.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from support.paths import SUPPORT
from support.shared_state_worker import engine_for

EXTENDING = {"set_affect", "encode", "observe"}


def _run(target: str, workers: int, ops: int, seed: int) -> tuple[list[dict[str, Any]], Counter]:
    procs = [
        subprocess.Popen(
            [sys.executable, str(SUPPORT / "shared_state_mixed_worker.py"), "sqlite", target,
             str(w), str(ops), str(seed)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for w in range(workers)
    ]
    saves: list[dict[str, Any]] = []
    gained: Counter = Counter()
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        for line in out.splitlines():
            if line.startswith("E "):
                saves.append(json.loads(line[2:]))
            elif line.startswith("C "):
                gained.update(json.loads(line[2:]))
    return saves, gained


def _check_serial(key: str, saves: list[dict[str, Any]]) -> None:
    """The saves of one key form one serial history (see the module docstring)."""
    starts: dict[str, list[str]] = defaultdict(list)
    made: Counter = Counter()
    for save in saves:
        if save["exp"] == save["new"]:  # a load of the very state stored
            continue
        assert save["exp"] is not None, f"{key}: {save['op']} saved unchecked"
        starts[save["exp"]].append(save["op"])
        made[save["new"]] += 1
    for version, ops in starts.items():
        allowed = made[version] + (1 if version == "" else 0)
        assert len(ops) <= allowed, f"{key}: {ops} all started from one state (lost update)"
    for save in saves:
        if not save["exp"] or save["hist"] is None:
            continue
        before, after = json.loads(save["exp"])["_history"], save["hist"]
        if save["op"].split(":")[0] in EXTENDING:
            assert after[:-1] == before[len(before) - len(after) + 1:], save["op"]
            assert not before or after[-1][0] >= before[-1][0], f"{save['op']} went back"


def test_random_operations_of_processes_keep_one_serial_history(tmp_path: Path) -> None:
    path = tmp_path / "mixed.db"
    engine_for("sqlite", str(path)).close()  # create the file once
    saves, gained = _run(str(path), workers=3, ops=20, seed=3)
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for save in saves:
        by_key[save["key"]].append(save)
    assert len(by_key) == 4
    for key, of_key in by_key.items():
        _check_serial(key, of_key)
    engine = engine_for("sqlite", str(path))
    own = {"root": engine, "team": engine.scoped("team"),
           "sub": engine.scoped("team", "sub"), "other": engine.scoped("other")}
    expected = {"root": sum(gained.values()), "team": gained["team"] + gained["sub"],
                "sub": gained["sub"], "other": gained["other"]}
    assert {name: len(view.list_all()) for name, view in own.items()} == expected
    engine.close()
