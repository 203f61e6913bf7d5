"""Worker process of tests/engine/test_reembed_interrupted.py (run as a script).

``KIND TARGET TABLE BATCH HANG_AT``: re-embed the store (``sqlite`` TARGET: a file;
``postgres`` TARGET: a DSN, TABLE its table) with ``HashingEmbedder(dim=32, seed=7)``
in batches of BATCH, printing ``hanging`` and sleeping, inside the transaction, once
HANG_AT memories were given their new vector (the parent kills it then).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from emotional_memory.embedders import HashingEmbedder
from emotional_memory.reembed import reembed_store


def _open(kind: str, target: str, table: str) -> Any:
    if kind == "sqlite":
        from emotional_memory.stores.sqlite import SQLiteStore

        return SQLiteStore(target)
    from emotional_memory.stores.postgres import PostgresStore

    return PostgresStore(target, table=table)


def main(argv: list[str]) -> None:
    kind, target, table, batch, hang_at = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    store = _open(kind, target, table)
    update = store.update
    written = 0

    def hanging_update(memory: Any) -> None:
        nonlocal written
        update(memory)
        written += 1
        if written == hang_at:
            print("hanging", flush=True)
            time.sleep(600)

    store.update = hanging_update
    reembed_store(store, HashingEmbedder(dim=32, seed=7), batch_size=batch, progress=False)
    print("finished", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
