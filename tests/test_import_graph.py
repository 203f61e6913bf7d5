"""No import circles in ``src/emotional_memory``.

The graph is built with :mod:`ast` from the source files. What counts as an edge
``a -> b``: every ``import`` / ``from ... import`` statement anywhere in module ``a``
that names module ``b`` of the package (or a name defined in ``b``): at module level,
inside ``if TYPE_CHECKING:`` blocks and inside function bodies alike, so a circle
cannot hide behind a deferred import. Not edges: a package's own ``__init__`` being
run before its submodule (Python does that for every submodule), and PEP 562 lazy
attributes resolved by module *name* at run time (``importlib.import_module`` in a
module ``__getattr__``, used for the original's re-exported names), which the module's
own code never needs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "emotional_memory"


def module_files(root: Path) -> dict[str, Path]:
    """Module name -> file for every ``.py`` file under ``root`` (a package)."""
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package modules it imports (see the module docstring)."""
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in files)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([node.module] if node.module else []))
                for alias in node.names:
                    if f"{base}.{alias.name}" in files:  # a submodule
                        deps.add(f"{base}.{alias.name}")
                    elif base in files:  # a name defined in module ``base``
                        deps.add(base)
        deps.discard(name)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circles_in_src() -> None:
    graph = import_graph(module_files(SRC))
    assert len(graph) > 50  # the whole package was read
    assert cycles(graph) == []


# ------------------------------------------------------------- the checker itself


def _write(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return module_files(root / "pkg")


@pytest.mark.parametrize(
    "b_source",
    [
        "from pkg.a import X\n",  # top level
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import X\n",
        "def f():\n    from pkg import a\n    return a\n",  # deferred, a submodule
        "def f():\n    from .a import X\n    return X\n",  # relative
        "import pkg.a\n",
    ],
)
def test_checker_finds_every_kind_of_circle(tmp_path: Path, b_source: str) -> None:
    files = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import Y\nX = 1\n",
        "pkg/b.py": b_source + "Y = 2\n",
        "pkg/c.py": "from pkg.a import X\n",
    })
    graph = import_graph(files)
    assert cycles(graph) == [["pkg.a", "pkg.b"]]


def test_checker_finds_a_long_circle_and_ignores_chains(tmp_path: Path) -> None:
    files = _write(tmp_path, {
        "pkg/__init__.py": "from pkg.a import X\n",  # a package importing its module
        "pkg/a.py": "from pkg.sub.b import Y\nX = 1\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/b.py": "from ..c import Z\nY = 1\n",
        "pkg/c.py": "import json\nfrom pkg import a\nZ = 1\n",
        "pkg/d.py": "from pkg.a import X\nfrom pkg.c import Z\n",
    })
    assert cycles(import_graph(files)) == [["pkg.a", "pkg.c", "pkg.sub.b"]]
    files = _write(tmp_path, {"pkg/c.py": "Z = 1\n"})
    assert cycles(import_graph(files)) == []
