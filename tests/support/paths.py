"""Paths of the repository and its neighbours, for tests that read files (independent
of where a test module sits under ``tests/``)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository root (README.md, pyproject.toml, src/, training/, notebooks/)."""
TESTS = ROOT / "tests"
SRC = ROOT / "src"
SUPPORT = TESTS / "support"
README = ROOT / "README.md"
SHARED_DATA = ROOT.parent / "shared" / "data"
"""The data sets read at run time, beside the repository (never copied into it)."""
