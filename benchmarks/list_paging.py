"""The cost of one page of ``GET /v1/memories``: a large scope against a small one.

Starts the real server (hashing embedder) over SQLite or PostgreSQL, fills one scope
with ``--big`` memories and another with ``--small``, and times ``--requests``
requests for a 10-item page of each (the first page, and a page in the middle),
alternating. A page is read in the store (``list_all(limit=, offset=)``): only its
memories are built, so the target is a ratio <= 2 between the large scope's page
and the small one's.

Usage:
    python benchmarks/list_paging.py [--store sqlite|postgres] [--big 3000] [--small 30]
        [--requests 100]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.service_process import start

KEY = "paging-root-key-0123456789"


def _fill(client: httpx.Client, scope: str, n: int) -> None:
    for first in range(0, n, 1000):
        items = [{"content": f"memory {i} of {scope} about the harbour", "metadata": {"i": i}}
                 for i in range(first, min(n, first + 1000))]
        client.post("/v1/memories/batch", json={"items": items, "scope": [scope]}
                    ).raise_for_status()


def _page_ms(client: httpx.Client, scope: str, offset: int) -> float:
    t0 = time.perf_counter()
    r = client.get("/v1/memories", params={"scope": [scope], "limit": 10, "offset": offset})
    elapsed = time.perf_counter() - t0
    r.raise_for_status()
    assert len(r.json()["memories"]) == 10
    return elapsed * 1000


def run(store: str, big: int, small: int, requests: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="em-paging-"))
    keys = work / "keys.json"
    keys.write_text(json.dumps({KEY: {"scope": []}}))
    pg = None
    if store == "sqlite":
        url = f"sqlite:///{work / 'paging.db'}"
    else:
        from support import pg_server

        pg = pg_server.start(Path(tempfile.mkdtemp(prefix="em-paging-pg-")))
        url = pg.create_database("paging")
    srv = start(["--keys", str(keys), "--store", url], work / "server.log")
    try:
        with httpx.Client(base_url=srv.url, timeout=600.0,
                          headers={"Authorization": f"Bearer {KEY}"}) as client:
            _fill(client, "big", big)
            _fill(client, "small", small)
            out: dict[str, Any] = {"store": store, "big": big, "small": small,
                                   "requests": requests}
            for name, offsets in (("first page", (0, 0)), ("middle page", (big // 2, small // 2))):
                for _ in range(10):  # warm-up
                    _page_ms(client, "big", offsets[0])
                    _page_ms(client, "small", offsets[1])
                times: dict[str, list[float]] = {"big": [], "small": []}
                for _ in range(requests):
                    times["big"].append(_page_ms(client, "big", offsets[0]))
                    times["small"].append(_page_ms(client, "small", offsets[1]))
                b, s = statistics.median(times["big"]), statistics.median(times["small"])
                out[name] = {"big_ms": round(b, 2), "small_ms": round(s, 2),
                             "ratio": round(b / s, 2)}
            return out
    finally:
        srv.stop()
        if pg is not None:
            pg.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--big", type=int, default=3000)
    parser.add_argument("--small", type=int, default=30)
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args(argv)
    if min(args.big, args.small) < 20:  # the middle page (offset n // 2) must hold 10 items
        parser.error("--big and --small must be at least 20")
    if args.requests < 1:
        parser.error("--requests must be at least 1")
    print(json.dumps(run(args.store, args.big, args.small, args.requests), indent=2))


if __name__ == "__main__":
    main()
