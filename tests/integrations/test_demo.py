"""``python -m emotional_memory.demo`` (``make demo``, the README's first command): runs
from any folder without ``../shared`` or the network, and prints the same every time."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from emotional_memory import demo
from support.paths import SRC


def _journal(tmp_path: Path, hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed,
           "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", "from emotional_memory.demo import journal_demo; journal_demo()"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_journal_part_prints_the_same_under_any_hash_seed(tmp_path: Path) -> None:
    first, second = _journal(tmp_path, "1"), _journal(tmp_path, "2")
    assert first == second
    assert first.startswith(f"Encoded {len(demo.JOURNAL)} journal entries.")
    assert "in a low mood" in first and "in a good mood" in first
    assert not re.search(r"\bnan\b", first, re.IGNORECASE)


def test_the_whole_demo_runs_without_the_network(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"the demo opened a connection: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.chdir(tmp_path)  # no ../shared beside it
    demo.main([])
    out = capsys.readouterr().out
    assert "=== Fitting on the built-in labelled set (30 scenarios) ===" in out
    assert "fitted base weights: [" in out
    assert not re.search(r"\bnan\b", out, re.IGNORECASE)


def test_help_describes_the_demo_without_running_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m emotional_memory.demo --help`` ran the whole demo (arguments were
    ignored); an unknown argument is a usage error."""
    monkeypatch.setattr(demo, "journal_demo", lambda: pytest.fail("the demo ran"))
    with pytest.raises(SystemExit) as info:
        demo.main(["--help"])
    assert info.value.code == 0
    assert "usage: python -m emotional_memory.demo" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        demo.main(["--bogus"])
    assert info.value.code == 2
