"""A worker process of tests/test_shared_state.py (``python shared_state_worker.py``).

``KIND TARGET WORKER OPS MODE``: open an engine with ``shared_state=True`` on the
PostgreSQL DSN or SQLite path ``TARGET`` (KIND ``postgres`` / ``sqlite``), scope
``("team",)``, and run OPS operations: MODE ``affect``: ``set_affect`` with a valence
unique to this worker and round, printing the new state's last two history points
(the predecessor tells which state the update started from); MODE ``encode``:
``encode`` (each also feeds the state), printing the round.
"""

from __future__ import annotations

import json
import sys

from emotional_memory import CoreAffect, EmotionalMemory
from emotional_memory.embedders import HashingEmbedder


def unique_valence(worker: int, round_: int, ops: int) -> float:
    """A valence no other (worker, round) uses, in (-1, 1)."""
    return round(-0.9 + 1.8 * (worker * ops + round_ + 1) / (16 * ops + 2), 9)


def engine_for(kind: str, target: str) -> EmotionalMemory:
    if kind == "postgres":
        from emotional_memory.stores.postgres import PostgresStore
        from emotional_memory.stores.postgres.state import PostgresAffectiveStateStore

        store = PostgresStore(target, table="shared")
        states = PostgresAffectiveStateStore.from_store(store)
    else:
        from emotional_memory.stores.sqlite import SQLiteStore
        from emotional_memory.stores.sqlite.state import SQLiteAffectiveStateStore

        store = SQLiteStore(target)
        states = SQLiteAffectiveStateStore.from_store(store)
    return EmotionalMemory(store, HashingEmbedder(dim=32), state_store=states, shared_state=True)


def main(argv: list[str]) -> None:
    kind, target, worker, ops, mode = argv[0], argv[1], int(argv[2]), int(argv[3]), argv[4]
    root = engine_for(kind, target)
    engine = root.scoped("team")
    for i in range(ops):
        if mode == "encode":
            engine.encode(f"worker {worker} round {i}")
            print(json.dumps({"encoded": i}), flush=True)
            continue
        state = engine.set_affect(CoreAffect(valence=unique_valence(worker, i, ops), arousal=0.4))
        history = [[p[0].isoformat(), *p[1:]] for p in state.history]
        print(json.dumps({"last": history[-1], "prev": history[-2] if len(history) > 1 else None}),
              flush=True)
    root.close()


if __name__ == "__main__":
    main(sys.argv[1:])
