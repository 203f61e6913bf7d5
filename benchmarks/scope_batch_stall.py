"""How long a scope's largest batch holds a SQLite store, and what another scope waits.

In one process, over one SQLite file (the service's layout: one store, shared state):
a victim thread retrieves in scope ``victim`` back to back while scope ``attacker``
encodes one batch of long memories. Printed: the attacker's longest store transaction
(how long it held the store's lock) and the victim's p50 / p99 / longest retrieve,
with the batch's candidates searched before the transaction (``Linker.prefetch``,
the default) and without (the earlier behaviour: searched inside it), and with the
log's checkpoint after the lock is released (the default) against SQLite's automatic
one inside the commit, all timed in the same process, and their ratios.

    .venv/bin/python benchmarks/scope_batch_stall.py [--items 1000] [--words 4096] [--stored 2000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from _args import positive_int

from emotional_memory import EmotionalMemory
from emotional_memory.embedders import HashingEmbedder
from emotional_memory.server.stores import open_store
from emotional_memory.stores._shared.linking import Linker
from emotional_memory.stores._shared.rows.linking import SelectedRowLinker

WORDS = ["rain", "bridge", "coffee", "storm", "harbour", "exam", "garden", "train", "dog",
         "music", "river", "lamp"]


def run_once(items: int, words: int, stored: int, prefetch: bool,
             checkpoint_in_commit: bool = False) -> dict[str, Any]:
    """One batch against a retrieving victim; times in milliseconds.

    ``checkpoint_in_commit``: SQLite's own automatic checkpoint (inside the commit,
    under the store's lock) instead of the store's checkpoint after the lock."""
    rng = random.Random(0)

    def text(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    opened = open_store(f"sqlite:///{Path(tempfile.mkdtemp()) / 'm.db'}")
    store = opened.store
    engine = EmotionalMemory(store=store, embedder=HashingEmbedder(),
                             state_store=opened.state_store, shared_state=True)
    attacker, victim = engine.scoped("attacker"), engine.scoped("victim")
    attacker.encode_batch([text(12) for _ in range(stored)])
    victim.encode_batch([text(12) for _ in range(200)])
    batch = [text(words) for _ in range(items)]
    for _ in range(20):
        victim.retrieve("harbour rain", top_k=5)
    if checkpoint_in_commit and store._checkpointer is not None:
        store._checkpointer.close()
        store._checkpointer = None
        store._connection().execute("PRAGMA wal_autocheckpoint=1000")
    transactions: list[float] = []
    released: list[float] = []  # when the attacker's transaction let the lock go
    if store._checkpointer is not None:
        after_commit = store._checkpointer.after_commit

        def timed_after_commit() -> bool:
            if threading.current_thread().name == "attacker":
                released.append(time.perf_counter())
            return after_commit()

        store._checkpointer.after_commit = timed_after_commit  # type: ignore[method-assign]
    original = store.transaction

    @contextlib.contextmanager
    def timed() -> Iterator[None]:
        started = time.perf_counter()
        with original():
            yield
        if threading.current_thread().name == "attacker":
            end = released.pop() if released else time.perf_counter()
            transactions.append(end - started)

    store.transaction = timed
    latencies: list[float] = []
    stop = threading.Event()

    def victim_loop() -> None:
        i = 0
        while not stop.is_set():
            started = time.perf_counter()
            victim.retrieve(f"{WORDS[i % len(WORDS)]} harbour", top_k=5)
            latencies.append(time.perf_counter() - started)
            i += 1

    saved = SelectedRowLinker.prefetch
    if not prefetch:
        SelectedRowLinker.prefetch = Linker.prefetch
    try:
        worker = threading.Thread(target=victim_loop)
        writer = threading.Thread(target=lambda: attacker.encode_batch(batch), name="attacker")
        worker.start()
        time.sleep(0.5)
        started = time.perf_counter()
        writer.start()
        writer.join()
        batch_s = time.perf_counter() - started
        time.sleep(0.5)
        stop.set()
        worker.join()
    finally:
        SelectedRowLinker.prefetch = saved
    lat = np.asarray(latencies) * 1000
    return {"batch_s": round(batch_s, 1), "transaction_ms": round(max(transactions) * 1000),
            "victim_n": int(lat.shape[0]), "victim_p50_ms": round(float(np.percentile(lat, 50)), 1),
            "victim_p99_ms": round(float(np.percentile(lat, 99)), 1),
            "victim_max_ms": round(float(lat.max()), 1)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=positive_int, default=1000, help="memories in the batch")
    parser.add_argument("--words", type=positive_int, default=4096, help="words per memory")
    parser.add_argument("--stored", type=int, default=2000,
                        help="memories the attacker's scope holds before the batch")
    args = parser.parse_args(argv)
    before = run_once(args.items, args.words, args.stored, prefetch=False)
    in_commit = run_once(args.items, args.words, args.stored, prefetch=True,
                         checkpoint_in_commit=True)
    after = run_once(args.items, args.words, args.stored, prefetch=True)
    print(json.dumps({
        "in_transaction": before, "prefetch_checkpoint_in_commit": in_commit,
        "prefetch": after,
        "transaction_ratio": round(after["transaction_ms"] / before["transaction_ms"], 2),
        "victim_max_ratio": round(after["victim_max_ms"] / before["victim_max_ms"], 2),
        "checkpoint_transaction_ratio": round(
            after["transaction_ms"] / in_commit["transaction_ms"], 2),
    }, indent=2))


if __name__ == "__main__":
    main()
