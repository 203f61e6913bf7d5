"""What the wheel and the sdist are built from, read from ``pyproject.toml`` and
``MANIFEST.in`` (building them needs the build backend from the package index, so
these tests read the files instead).

* The build backend pinned by ``[build-system]`` understands ``[project]`` as written:
  ``license = "MIT AND CC-BY-SA-4.0"`` (an SPDX expression, PEP 639) needs setuptools
  77; an older one refuses the file (``project.license must be valid exactly by one
  definition``).
* Every file the library reads at run time from its package (the affect head, the
  built-in data set, ``py.typed``) is listed as package data.
* The sdist carries no stray half of ``tests/`` (setuptools adds ``tests/test*.py`` by
  default, without ``conftest.py`` or ``tests/support/``, so they could not run).
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
import tomllib

from support.paths import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _setuptools_floor() -> tuple[int, ...]:
    for req in PYPROJECT["build-system"]["requires"]:
        if (m := re.fullmatch(r"setuptools\s*>=\s*([\d.]+)", req.strip())):
            return tuple(int(p) for p in m.group(1).split("."))
    raise AssertionError(f"no setuptools>=X in {PYPROJECT['build-system']['requires']}")


def test_build_backend_floor_reads_the_spdx_licence() -> None:
    assert isinstance(PYPROJECT["project"]["license"], str)  # PEP 639 form
    assert _setuptools_floor() >= (77,)


def test_the_licence_covers_what_the_wheel_ships() -> None:
    # the affect head is derived from EmoBank (CC-BY-SA 4.0): "MIT" alone misstated
    # the wheel, which also carried no licence text
    project = PYPROJECT["project"]
    assert set(re.split(r"\s+AND\s+", project["license"])) == {"MIT", "CC-BY-SA-4.0"}
    for name in project["license-files"]:
        assert (ROOT / name).is_file(), name
    assert "MIT License" in (ROOT / "LICENSE").read_text(encoding="utf-8")
    notice = (ROOT / "src/emotional_memory/data/AFFECT_HEAD_NOTICE.md").read_text("utf-8")
    assert "CC-BY-SA 4.0" in notice


def test_every_package_file_read_at_run_time_is_package_data() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "src/emotional_memory", "training"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]
    missing = []
    for path in tracked:
        if path.endswith(".py") or path.endswith("/README.md"):  # code; folder notes
            continue
        package, _, rest = path.removeprefix("src/").partition("/")
        if not any(fnmatch.fnmatch(rest, p) for p in patterns.get(package, [])):
            missing.append(path)
    assert missing == []
    for needed in ("py.typed", "data/affect_head.npz", "data/builtin_recall.json",
                   "data/AFFECT_HEAD_NOTICE.md"):
        assert any(fnmatch.fnmatch(needed, p) for p in patterns["emotional_memory"]), needed


def test_sdist_prunes_tests() -> None:
    manifest = (ROOT / "MANIFEST.in").read_text(encoding="utf-8").splitlines()
    assert "prune tests" in [line.strip() for line in manifest]
