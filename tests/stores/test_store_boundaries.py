"""The stores layout is a contract: who may import whom, and size limits.

Read from the source with :mod:`ast` (every import statement, at module level, under
``TYPE_CHECKING`` and inside functions alike):

- a backend folder (``stores/<backend>/``) imports from ``emotional_memory.stores``
  only ``stores.base``, ``stores._shared`` and itself;
- no module imports an underscore name from a module of another folder;
- the run-time import closure of ``stores/postgres/`` (``TYPE_CHECKING`` imports
  left out: they never run) holds no module of ``stores/memory/``, ``stores/sqlite/``,
  ``stores/vectordb/`` or the in-process row engine;
- no file in ``stores/`` is over 800 lines and no function over 120.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
STORES = SRC / "emotional_memory" / "stores"
BACKENDS = ("memory", "sqlite", "postgres", "vectordb", "redis")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted((SRC / "emotional_memory").rglob("*.py"))}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks (never run)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def imports(path: Path, *, run_time: bool = False) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every import statement in ``path`` (absolute names);
    ``run_time``: only those that can run (not under ``TYPE_CHECKING``)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[str, list[str]]] = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_nodes(tree) if run_time else set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            out.append((base, [a.name for a in node.names]))
    return out


def targets(module: str, names: list[str]) -> set[str]:
    """The package modules an import statement reaches."""
    found = {module} if module in MODULES else set()
    found |= {f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES}
    return found


def folder(module: str) -> str:
    """The folder a module belongs to (its package, for a module file)."""
    path = MODULES[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def test_backends_import_only_the_contract_shared_code_and_themselves() -> None:
    bad: list[str] = []
    for backend in BACKENDS:
        own = f"emotional_memory.stores.{backend}"
        for path in sorted((STORES / backend).rglob("*.py")):
            for module, names in imports(path):
                for target in targets(module, names):
                    if not target.startswith("emotional_memory.stores"):
                        continue
                    allowed = (
                        target == "emotional_memory.stores.base"
                        or target.startswith("emotional_memory.stores._shared")
                        or target == own
                        or target.startswith(own + ".")
                    )
                    if not allowed:
                        bad.append(f"{module_name(path)} -> {target}")
    assert not bad, "\n".join(bad)


def test_no_underscore_name_crosses_folders() -> None:
    bad: list[str] = []
    for name, path in MODULES.items():
        if not name.startswith("emotional_memory.stores"):
            continue
        for module, names in imports(path):
            if module not in MODULES or folder(module) == folder(name):
                continue
            crossing = [
                n for n in names
                if n.startswith("_") and f"{module}.{n}" not in MODULES
            ]
            if crossing:
                bad.append(f"{name} imports {crossing} from {module}")
    assert not bad, "\n".join(bad)


def closure(start: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(start)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for target_module, names in imports(MODULES[module], run_time=True):
            todo.extend(targets(target_module, names) - seen)
            # importing a submodule runs its packages' __init__ first
            parts = target_module.split(".")
            todo.extend(
                ".".join(parts[:i]) for i in range(2, len(parts))
                if ".".join(parts[:i]) in MODULES and ".".join(parts[:i]) not in seen
            )
    return seen


def test_postgres_pulls_in_no_other_backend() -> None:
    start = [m for m in MODULES if m.startswith("emotional_memory.stores.postgres")]
    reached = closure(start)
    foreign = sorted(
        m for m in reached
        if m.startswith(("emotional_memory.stores.memory", "emotional_memory.stores.vectordb",
                         "emotional_memory.stores.sqlite", "emotional_memory.stores._shared.rows"))
    )
    assert not foreign, foreign


def test_no_file_or_function_is_too_big() -> None:
    big: list[str] = []
    for path in sorted(STORES.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > 800:
            big.append(f"{path.relative_to(SRC)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > 120:
                    big.append(f"{path.relative_to(SRC)}:{node.name}: {length} lines")
    assert not big, "\n".join(big)


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    """The import reader resolves relative imports and names (the checks can fail)."""
    path = STORES / "postgres" / "read.py"
    found = {t for m, n in imports(path) for t in targets(m, n)}
    assert "emotional_memory.stores.base" in found or any(
        t.startswith("emotional_memory.stores._shared") for t in found
    )
    assert folder("emotional_memory.stores.postgres.read") == "emotional_memory.stores.postgres"
    assert "emotional_memory.stores._shared.rows.store" in closure(
        ["emotional_memory.stores.memory.store"]
    )
