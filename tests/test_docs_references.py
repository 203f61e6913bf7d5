"""What the README, ``docs/*.md`` and the folder READMEs under ``src/`` name exists.

* every dotted ``emotional_memory.X`` name imports (a module, or an attribute of one),
  or is a span name the source emits;
* every repository path they cite outside ``tests/`` (``src/``, ``benchmarks/``,
  ``training/``, ``docs/``, ``notebooks/``, ``.ci/``, and the package's own folders,
  ``stores/...``, ``kernel/...``, written from ``src/emotional_memory/``) exists;
* every ``--flag`` is one of ``emotional-memory``'s, ``python -m training``'s or a
  benchmark script's, and a flag written after ``emotional-memory serve|mcp`` or
  ``python -m training SUB`` belongs to that subcommand;
* the imports of the python blocks of ``docs/*.md`` (which no test runs) resolve.

Test paths are checked by ``tests/test_tests_layout.py``; the README's python blocks
run in ``tests/test_readme_examples.py`` and the tests it names.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest

from support.paths import ROOT, SRC

PACKAGE = SRC / "emotional_memory"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        *sorted(PACKAGE.rglob("README.md"))]
FLAG = r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9](?![\w-])"
PIP_FLAGS = {"--no-deps"}  # pip's, named in prose about ``pip install`` lines


def _label(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _resolve(dotted: str) -> str | None:
    """None when ``dotted`` imports as a module or a module's attribute, else why not."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return f"{'.'.join(parts[:cut])} has no {'.'.join(parts[cut:])}"
            obj = getattr(obj, name)
        return None
    return "no such module"


def test_every_dotted_name_imports() -> None:
    sources = "\n".join(p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py"))
    bad = []
    for doc in DOCS:
        for dotted in sorted(set(re.findall(r"\bemotional_memory(?:\.[A-Za-z_]\w*)+",
                                            doc.read_text(encoding="utf-8")))):
            why = _resolve(dotted)
            if why is not None and f'"{dotted}"' not in sources:  # not a span name either
                bad.append(f"{_label(doc)}: {dotted} ({why})")
    assert not bad, "\n".join(bad)


def test_every_cited_repository_path_exists() -> None:
    prefixes = "src|benchmarks|training|docs|notebooks|\\.ci|" + "|".join(
        sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"))
    cited = re.compile(rf"(?<![\w/.-])((?:{prefixes})/[\w./-]*\w)")
    bad = []
    for doc in DOCS:
        for path in sorted(set(cited.findall(doc.read_text(encoding="utf-8")))):
            if not any((base / path).exists() for base in (ROOT, doc.parent, PACKAGE)):
                bad.append(f"{_label(doc)}: {path}")
    assert not bad, "cited paths that do not exist:\n" + "\n".join(bad)


def _parsers() -> tuple[dict[str, set[str]], dict[str, set[str]], str]:
    """(``emotional-memory`` subcommand -> flags, ``python -m training`` subcommand ->
    flags, the benchmark scripts' sources)."""
    from emotional_memory.server import cli

    def flags(parser: Any) -> dict[str, set[str]]:
        sub = next(a for a in parser._actions if isinstance(a.choices, dict)).choices
        return {name: {o for a in p._actions for o in a.option_strings}
                for name, p in sub.items()}

    import sys

    sys.path.insert(0, str(ROOT))
    try:
        from training.cli import build_parser
    finally:
        sys.path.remove(str(ROOT))
    bench = "\n".join(p.read_text(encoding="utf-8")
                      for p in sorted((ROOT / "benchmarks").glob("*.py")))
    return flags(cli._parser()), flags(build_parser()), bench


def test_every_flag_is_a_command_line_flag() -> None:
    serve, training, bench = _parsers()
    known = set().union(*serve.values(), *training.values())
    bad = []
    for doc in DOCS:
        text = re.sub(r"pip install[^`\n]*", "", doc.read_text(encoding="utf-8"))  # pip's
        for flag in sorted(set(re.findall(FLAG, text))):
            if flag not in known | PIP_FLAGS and f'"{flag}"' not in bench:
                bad.append(f"{_label(doc)}: {flag}")
    assert not bad, "flags no command line has:\n" + "\n".join(bad)


def _command_lines(text: str) -> list[str]:
    """Inline code spans and the lines of fenced blocks (continuations joined)."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.DOTALL)
    lines = [line for b in blocks for line in re.sub(r"\\\n\s*", " ", b).splitlines()]
    spans = re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.DOTALL))
    return lines + [" ".join(s.split()) for s in spans]


def test_a_subcommands_flags_are_its_own() -> None:
    """``emotional-memory mcp --keys`` or ``python -m training reembed --out`` would pass
    the test above (another subcommand has the flag) and fail when run."""
    serve, training, _ = _parsers()
    command = re.compile(r"emotional-memory (serve|mcp)\b|python -m training ([a-z]+)\b")
    bad, checked = [], 0
    for doc in DOCS:
        for line in _command_lines(doc.read_text(encoding="utf-8")):
            found = list(command.finditer(line))
            for i, match in enumerate(found):
                end = found[i + 1].start() if i + 1 < len(found) else len(line)
                rest = re.split(r"#|\||&&|;", line[match.end():end])[0]
                own = serve[match[1]] if match[1] else training.get(match[2])
                if own is None:
                    bad.append(f"{_label(doc)}: {match[0]} (no such subcommand)")
                    continue
                named = re.findall(FLAG, rest)
                checked += len(named)
                bad += [f"{_label(doc)}: {match[0]} {flag}" for flag in named if flag not in own]
    assert checked > 20, checked  # the docs' command lines were found
    assert not bad, "flags their subcommand does not take:\n" + "\n".join(bad)


@pytest.mark.parametrize("doc", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_the_imports_of_a_docs_python_block_resolve(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    bad = []
    for block in re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL):
        for module, names in re.findall(r"^from ([\w.]+) import ([\w, ]+)$", block, re.M):
            if not module.startswith("emotional_memory"):
                continue
            bad += [f"{module}.{n.strip()}" for n in names.split(",")
                    if _resolve(f"{module}.{n.strip()}") is not None]
    assert not bad, f"{doc.name}: {bad}"
