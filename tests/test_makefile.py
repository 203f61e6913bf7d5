"""The Makefile's targets: every ``.PHONY`` name is a target, and ``make lint`` runs
ruff over every Python folder of the project (mypy's own ``files`` are in pyproject)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAKEFILE = (ROOT / "Makefile").read_text()


def test_every_phony_name_is_a_target() -> None:
    phony = re.search(r"^\.PHONY:(.*)$", MAKEFILE, re.M)
    assert phony is not None
    targets = set(re.findall(r"^([A-Za-z][\w-]*):", MAKEFILE, re.M))
    missing = [name for name in phony.group(1).split() if name not in targets]
    assert not missing, f".PHONY names targets the Makefile lacks: {missing}"


def test_lint_runs_ruff_over_every_python_folder() -> None:
    lint = re.search(r"^lint:.*\n((?:\t.*\n)+)", MAKEFILE, re.M)
    assert lint is not None
    ruff = next(line for line in lint.group(1).splitlines() if "ruff check" in line)
    folders = {p.name for p in ROOT.iterdir()
               if p.is_dir() and not p.name.startswith(".") and any(p.glob("*.py"))}
    folders |= {"src"}
    missing = sorted(f for f in folders if f not in ruff.split())
    assert not missing, f"make lint's ruff skips {missing}"
