"""The kernel is closed: it imports only jax, numpy, equinox, jaxtyping and the stdlib.

Two independent checks: a static one (every import statement of every kernel file,
parsed with ``ast``) and a dynamic one (importing the kernel in a fresh interpreter
loads no other ``emotional_memory`` module and no pydantic).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import emotional_memory

KERNEL = Path(emotional_memory.__file__).parent / "kernel"
ALLOWED_THIRD_PARTY = {"jax", "jaxlib", "numpy", "equinox", "jaxtyping"}


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """``(line, absolute module name)`` of every import in ``path`` (any nesting)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = "emotional_memory.kernel"
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the kernel package
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                if node.module is None:  # ``from .. import x``: x is a module
                    found.extend((node.lineno, f"{base}.{a.name}") for a in node.names)
                    continue
                name = f"{base}.{node.module}"
            else:
                name = node.module or ""
            found.append((node.lineno, name))
    return found


def _allowed(name: str) -> bool:
    top = name.split(".")[0]
    if name == "emotional_memory.kernel" or name.startswith("emotional_memory.kernel."):
        return True
    if top in ALLOWED_THIRD_PARTY or name == "__future__":
        return True
    return top in sys.stdlib_module_names


def test_kernel_files_import_only_the_allowed_modules() -> None:
    files = sorted(KERNEL.rglob("*.py"))
    assert len(files) >= 5  # the walk found the kernel
    bad = [
        f"{path.relative_to(KERNEL.parent)}:{line}: {name}"
        for path in files
        for line, name in _imported_modules(path)
        if not _allowed(name)
    ]
    assert bad == []


def test_static_check_catches_a_forbidden_import(tmp_path: Path) -> None:
    """The checker itself flags public-layer, pydantic and relative escapes."""
    src = tmp_path / "m.py"
    src.write_text(
        "import math\nfrom emotional_memory.retrieval import X\n"
        "def f():\n    import pydantic\nfrom .. import engine\n"
    )
    names = sorted(name for _, name in _imported_modules(src) if not _allowed(name))
    assert names == ["emotional_memory.engine", "emotional_memory.retrieval", "pydantic"]


def test_importing_the_kernel_loads_nothing_else() -> None:
    code = (
        "import json, sys\n"
        "import emotional_memory.kernel\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(KERNEL.parent.parent)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    ours = [
        m for m in loaded
        if m.startswith("emotional_memory.")
        and not m.startswith("emotional_memory.kernel")
    ]
    assert ours == []
    assert not [m for m in loaded if m.split(".")[0] in {"pydantic", "pydantic_core"}]
