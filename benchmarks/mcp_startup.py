"""Start-up of the stdio MCP server, as a desktop agent sees it.

Each run starts ``emotional-memory mcp`` (in-memory store) through the ``mcp`` SDK's
stdio client and times, from the spawn:

- ``initialize``: the server's first answer (the MCP handshake; the engine, MiniLM
  weights and the affect head are loaded before it);
- ``first remember``: the first tool answer (embedding and rating a text: MiniLM's
  programs are compiled, or read from the persistent compilation cache);
- ``second remember`` and ``first recall``: the next calls, for scale.

The MiniLM server (its defaults: MiniLM, affect from text) is compared with the
hashing one (``--embedder hashing``, no rater) timed in the same process, runs
alternating, with a fresh compilation cache directory: the first run of each compiles
(cold), the later ones read the cache (warm). A floor is timed alongside: a bare
interpreter that imports JAX and the MCP SDK and runs one JAX operation (what any
JAX-based MCP server pays before its first answer). The target is a MiniLM
initialize within 3 s (warm cache).

Usage:
    python benchmarks/mcp_startup.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _args import positive_int
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = Path(__file__).resolve().parent.parent


async def one_run(args: list[str], cache_dir: Path, errlog: Path) -> dict[str, float]:
    """Time one server process from spawn to its first answers.

    Args:
        args: arguments after ``mcp``.
        cache_dir: the JAX compilation cache directory of the process.
        errlog: where its stderr goes.

    Returns:
        Seconds from the spawn to each answer.
    """
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAX_PLATFORMS", "TF_CPP_MIN_LOG_LEVEL")}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env["EMOTIONAL_MEMORY_JAX_CACHE_DIR"] = str(cache_dir)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "emotional_memory.server", "mcp", *args], env=env
    )
    out: dict[str, float] = {}
    with errlog.open("a") as err:
        t0 = time.perf_counter()
        async with Client(stdio_client(params, errlog=err), read_timeout_seconds=600) as c:
            out["initialize"] = time.perf_counter() - t0
            made = await c.call_tool("remember", {"content": "I got the job I wanted!"})
            out["first remember"] = time.perf_counter() - t0
            assert not made.is_error, made.content
            await c.call_tool("remember", {"content": "My grandfather died last night"})
            out["second remember"] = time.perf_counter() - t0
            await c.call_tool("recall", {"query": "what happened?", "top_k": 2})
            out["first recall"] = time.perf_counter() - t0
    return out


FLOOR = "import jax.numpy as jnp; jnp.zeros(1).block_until_ready(); import mcp.server.mcpserver"


def floor_run() -> float:
    """Seconds for a bare interpreter to import JAX and the MCP SDK (CPU backend)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", FLOOR], check=True, env=env)
    return time.perf_counter() - t0


def main() -> None:
    """Run the comparison and print medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=positive_int, default=3, help="runs of each server")
    opts = parser.parse_args()
    kinds = {"minilm": [], "hashing": ["--embedder", "hashing"]}
    cold: dict[str, dict[str, float]] = {}
    warm: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    floors: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        errlog = Path(tmp) / "stderr.log"
        for i in range(opts.repeats + 1):
            for kind, args in kinds.items():
                run = asyncio.run(one_run(args, Path(tmp) / f"cache-{kind}", errlog))
                if i == 0:
                    cold[kind] = run
                else:
                    warm[kind].append(run)
            floors.append(floor_run())
        print("server stderr (first lines):")
        for line in errlog.read_text().splitlines()[:2]:
            print("   ", line)
    steps = list(cold["minilm"])
    print(f"\nseconds from spawn (cold = first run, compiles; warm = median of "
          f"{opts.repeats} runs with the cache)")
    print(f"{'':18}{'minilm cold':>12}{'hashing cold':>13}{'minilm warm':>12}"
          f"{'hashing warm':>13}{'ratio warm':>11}")
    for step in steps:
        mw = statistics.median(r[step] for r in warm["minilm"])
        hw = statistics.median(r[step] for r in warm["hashing"])
        print(f"{step:18}{cold['minilm'][step]:12.2f}{cold['hashing'][step]:13.2f}"
              f"{mw:12.2f}{hw:13.2f}{mw / hw:10.2f}x")
    floor = statistics.median(floors)
    init = statistics.median(r["initialize"] for r in warm["minilm"])
    verdict = "meets" if init <= 3.0 else "misses"
    print(f"\nfloor (import JAX + MCP SDK, one JAX op): {floor:.2f} s (median of "
          f"{len(floors)})")
    print(f"MiniLM initialize (warm) {init:.2f} s = {init / floor:.2f}x the floor: "
          f"{verdict} the 3 s target on this machine now")


if __name__ == "__main__":
    main()
