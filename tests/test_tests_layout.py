"""The layout of ``tests/`` itself, read from the source with :mod:`ast`.

* No module under ``tests/`` imports a test module (``test_*``, ``conftest``), at
  module level or inside a function: shared code lives in ``tests/support/``.
* Test module basenames are unique across folders: pytest's default import mode puts
  each test folder on ``sys.path`` and imports a module by its basename, so two
  ``test_x.py`` would collide.
* ``tests/support/`` is the only package (``__init__.py``) under ``tests/``, the
  other folders stay plain so that basenames keep identifying modules.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from support.paths import TESTS


def _is_test_module(name: str) -> bool:
    """Whether a module name names a test module or a conftest of ``tests/``: a
    top-level ``test_*`` / ``conftest`` (test folders are on ``sys.path``), or one
    under ``tests.`` (a library's ``jax.test_util`` is none of them)."""
    head, _, last = name.rpartition(".")
    local = not head or head == "tests" or head.startswith(("tests.", "."))
    return local and (last.startswith("test_") or last == "conftest")


def imported_test_modules(source: str) -> list[str]:
    """The test modules (and conftests) ``source`` imports, anywhere in it.

    Args:
        source: Python source text.

    Returns:
        The imported module names (``from x import test_y`` gives ``x.test_y``).
    """
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if _is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            if node.module and _is_test_module(base):
                found.append(base)
            else:
                found += [name for a in node.names
                          if _is_test_module(name := f"{base}.{a.name}".lstrip("."))]
    return found


PY_FILES = sorted(TESTS.rglob("*.py"))


def test_the_detector_sees_every_form_of_import() -> None:
    source = """
import test_scopes
import tests.engine.test_scopes as s
from test_lexical import tiny_dataset
from tests.stores import test_stores
def f():
    from conftest import pg_dsn
from . import test_engine
from support.lexical import tiny_dataset
import testing, contest, jax.test_util
from jax import test_util
"""
    assert sorted(imported_test_modules(source)) == sorted([
        "test_scopes", "tests.engine.test_scopes", "test_lexical", "tests.stores.test_stores",
        "conftest", "test_engine"])


def test_no_module_imports_a_test_module() -> None:
    offenders = {
        str(path.relative_to(TESTS)): found
        for path in PY_FILES
        if (found := imported_test_modules(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}


def test_test_module_basenames_are_unique() -> None:
    names = Counter(p.name for p in PY_FILES if p.name.startswith("test_"))
    assert [name for name, n in names.items() if n > 1] == []


def test_only_the_support_folder_is_a_package() -> None:
    packages = [p.parent.relative_to(TESTS) for p in TESTS.rglob("__init__.py")]
    assert packages == [Path("support")]


def test_every_test_path_named_in_the_docs_exists() -> None:
    """README, docs/, the sources and benchmarks cite tests by path: each must exist
    (a moved test module leaves no stale pointer)."""
    import re

    root = TESTS.parent
    texts = [root / "README.md", *(root / "docs").rglob("*.md"),
             *(root / "src").rglob("*.py"), *(root / "src").rglob("*.md"),
             *(root / "benchmarks").rglob("*.py")]
    stale = sorted(
        f"{path.relative_to(root)}: {cited}"
        for path in texts if path.is_file()
        for cited in set(re.findall(r"tests/[\w/]+\.py", path.read_text(encoding="utf-8")))
        if not (root / cited).is_file()
    )
    assert not stale, "cited test paths that do not exist:\n" + "\n".join(stale)
