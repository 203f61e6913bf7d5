"""EMOTIONAL_MEMORY_NO_SKIPS=1 (set by .ci/run) turns every kind of skip into a failure."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROBES = {
    "test_module_skip.py": (
        "import pytest\n"
        "pytest.importorskip('no_such_module_em', reason='module probe')\n"
        "def test_a():\n    pass\n"
    ),
    "test_item_skips.py": (
        "import pytest\n"
        "@pytest.mark.skipif(True, reason='marker probe')\n"
        "def test_marker():\n    pass\n"
        "def test_inline():\n    pytest.skip('inline probe')\n"
        "@pytest.mark.xfail(reason='xfail probe', strict=True)\n"
        "def test_xfail():\n    assert False\n"
        "def test_passes():\n    pass\n"
    ),
}


def _run(tmp_path: Path, name: str, guard: bool) -> subprocess.CompletedProcess[str]:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / name).write_text(PROBES[name])
    env = {k: v for k, v in os.environ.items() if k != "EMOTIONAL_MEMORY_NO_SKIPS"}
    if guard:
        env["EMOTIONAL_MEMORY_NO_SKIPS"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-p", "no:randomly", "-rA", "-c", str(tmp_path / "pytest.ini"), str(tmp_path / name)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


@pytest.mark.parametrize("name", sorted(PROBES))
def test_without_the_guard_skips_stay_skips(tmp_path: Path, name: str) -> None:
    out = _run(tmp_path, name, guard=False)
    # 5: pytest's "no tests ran" (the module skipped whole)
    assert out.returncode in (0, 5), out.stdout + out.stderr
    assert "skipped" in out.stdout.splitlines()[-1]
    assert not re.search(r"\d+ failed", out.stdout.splitlines()[-1])


def test_a_module_level_skip_fails_the_run(tmp_path: Path) -> None:
    out = _run(tmp_path, "test_module_skip.py", guard=True)
    assert out.returncode != 0
    assert "skipped under EMOTIONAL_MEMORY_NO_SKIPS=1" in out.stdout
    assert "module probe" in out.stdout


def test_marker_and_inline_skips_fail_and_xfail_stays(tmp_path: Path) -> None:
    out = _run(tmp_path, "test_item_skips.py", guard=True)
    assert out.returncode != 0
    text = out.stdout
    assert "marker probe" in text and "inline probe" in text
    assert "XFAIL" in text and "PASSED" in text
    summary = text.splitlines()[-1]
    assert re.search(r"\b1 failed", summary) and "skipped" not in summary
