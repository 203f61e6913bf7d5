"""The persistent compilation cache: on by default, movable, opt-out, user config wins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import emotional_memory

SRC = str(Path(emotional_memory.__file__).parent.parent)

PROBE = """
import json, jax
from emotional_memory import EmotionalMemory, InMemoryStore
from emotional_memory.embedders import HashingEmbedder
engine = EmotionalMemory(InMemoryStore(), HashingEmbedder(dim=16))
engine.encode_batch(["coffee with a friend", "the server crashed", "rain at night"])
engine.retrieve("coffee", top_k=2)
print(json.dumps({
    "dir": jax.config.jax_compilation_cache_dir,
    "min_time": jax.config.jax_persistent_cache_min_compile_time_secs,
}))
"""


def run_probe(tmp_path: Path, **env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("JAX_", "EMOTIONAL_MEMORY_JAX", "XDG_CACHE_HOME"))}
    clean.update(PYTHONPATH=SRC, HOME=str(tmp_path / "home"), **env)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=clean, check=True
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_cache_on_by_default_in_the_user_cache_dir(tmp_path: Path) -> None:
    got = run_probe(tmp_path)
    expected = tmp_path / "home" / ".cache" / "emotional_memory" / "jax"
    assert got["dir"] == str(expected)
    assert got["min_time"] == 0.1
    assert any(expected.iterdir())  # the retrieval programs were written


def test_env_var_moves_the_cache_and_xdg_is_honoured(tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere"
    got = run_probe(tmp_path, EMOTIONAL_MEMORY_JAX_CACHE_DIR=str(moved))
    assert got["dir"] == str(moved) and any(moved.iterdir())
    xdg = tmp_path / "xdg"
    got = run_probe(tmp_path, XDG_CACHE_HOME=str(xdg))
    assert got["dir"] == str(xdg / "emotional_memory" / "jax")


def test_opt_out_and_the_users_own_config_win(tmp_path: Path) -> None:
    got = run_probe(tmp_path, EMOTIONAL_MEMORY_JAX_CACHE="0")
    assert got["dir"] is None and got["min_time"] == 1.0
    assert not (tmp_path / "home" / ".cache").exists()
    own = tmp_path / "own"
    got = run_probe(
        tmp_path, JAX_COMPILATION_CACHE_DIR=str(own),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="1.0",
    )
    assert got["dir"] == str(own) and got["min_time"] == 1.0
