"""A worker process of tests/engine/test_shared_state_mixed.py.

``KIND TARGET WORKER OPS SEED``: open an engine with ``shared_state=True`` whose
clock runs ``30 * WORKER`` seconds behind, and run OPS random operations (encode,
encode_batch, retrieve, set_affect, observe, reset_state, load_state, delete,
clear_persisted_state) on the root, ``("team",)``, ``("team", "sub")`` and
``("other",)``. Every state save and clear is printed as it happens (``E`` + JSON:
the state key, the version the save started from, the new version, the new history),
then the number of memories each scope gained (``C`` + JSON).
"""

from __future__ import annotations

import json
import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from emotional_memory import CoreAffect, EmotionalMemory

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script
from support.shared_state_worker import engine_for

SCOPES = {"root": (), "team": ("team",), "sub": ("team", "sub"), "other": ("other",)}
OPS = ["set_affect", "set_affect", "encode", "encode_batch", "retrieve", "reset_state",
       "delete", "observe", "clear", "load"]


def log_saves(cls: Any, current: list[str]) -> None:
    """Print every versioned save and clear of state store class ``cls``."""
    save, clear = cls.save_versioned, cls.clear

    def logged_save(self: Any, state: Any, expected: str | None = None) -> str:
        new: str = save(self, state, expected)
        snap = state if isinstance(state, dict) else state.snapshot()
        _emit(current[0], self.key, expected, new, snap["_history"])
        return new

    def logged_clear(self: Any) -> None:
        before = self.load_versioned()[1]
        clear(self)
        _emit(current[0], self.key, before, "", None)

    cls.save_versioned, cls.clear = logged_save, logged_clear


def _emit(op: str, key: str, expected: str | None, new: str, history: Any) -> None:
    entry = {"op": op, "key": key, "exp": expected, "new": new, "hist": history}
    print("E " + json.dumps(entry), flush=True)


def main(argv: list[str]) -> None:
    kind, target, worker, ops, seed = argv[0], argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    if kind == "sqlite":
        from emotional_memory.stores.sqlite.state import SQLiteAffectiveStateStore as cls
    else:
        from emotional_memory.stores.postgres.state import PostgresAffectiveStateStore as cls
    current = [""]
    log_saves(cls, current)
    plain = engine_for(kind, target)
    skew = timedelta(seconds=-30 * worker)
    root = EmotionalMemory(plain.store, plain.embedder, state_store=plain.state_store,
                           shared_state=True, clock=lambda: datetime.now(UTC) + skew)
    views = {name: root.scoped(*path) if path else root for name, path in SCOPES.items()}
    rng = random.Random(seed * 100 + worker)
    mine: dict[str, list[str]] = {name: [] for name in views}
    gained = dict.fromkeys(views, 0)
    snapshot: dict[str, Any] | None = None
    for i in range(ops):
        name, op = rng.choice(list(views)), rng.choice(OPS)
        view, current[0] = views[name], f"{op}:{name}:{worker}.{i}"
        valence = round(rng.uniform(-1, 1), 6)
        if op == "set_affect":
            view.set_affect(CoreAffect(valence=valence, arousal=0.5))
        elif op == "encode":
            mine[name].append(view.encode(f"w{worker} i{i} event {valence}").id)
            gained[name] += 1
        elif op == "encode_batch":
            batch = view.encode_batch([f"w{worker} i{i} a", f"w{worker} i{i} b"])
            mine[name] += [m.id for m in batch]
            gained[name] += 2
        elif op == "retrieve":
            view.retrieve("event", top_k=3)
            snapshot = view.save_state()
        elif op == "reset_state":
            view.reset_state()
        elif op == "delete" and mine[name]:
            assert view.delete(mine[name].pop(rng.randrange(len(mine[name]))))
            gained[name] -= 1
        elif op == "observe":
            view.observe(f"w{worker} observed {valence}")
        elif op == "clear":
            view.clear_persisted_state()
        elif op == "load" and snapshot is not None:
            view.load_state(snapshot)
    print("C " + json.dumps(gained), flush=True)
    root.close()


if __name__ == "__main__":
    main(sys.argv[1:])
