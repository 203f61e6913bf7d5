"""Run the original ``emotional_memory`` 0.18.1's tests of its optional modules against
the original and against this library, and count how many of the tests that pass on
the original also pass here (target: >= 90%).

The original's test suite is not shipped in its sdist or wheel (``pip download
emotional-memory==0.18.1 --no-binary :all:`` holds only ``src/``, the README and
``pyproject.toml``), so ``--tests`` names a directory holding the test files of the
original's repository (``tests/conftest.py`` and the ``test_*.py`` files listed in
``OPTIONAL_MODULE_TESTS``). Nothing of it is copied into this repository.

Two interpreters run the same files, each in a fresh process, from a scratch copy of the
directory so that neither writes caches next to the other:

* the original: ``--original-python`` (a venv with ``pip install
  'emotional-memory[sqlite,qdrant,redis,langchain,viz]==0.18.1' pytest pytest-asyncio
  hypothesis fakeredis``). Where that interpreter's ``sqlite3`` cannot load extensions
  (CPython built without ``--enable-loadable-sqlite-extensions``; the original's
  ``SQLiteStore`` needs ``sqlite-vec``), ``pysqlite3-binary`` stands in for ``sqlite3``
  when installed there, so the original's SQLite tests run as they do on a stock build;
* this library: ``--ours-python`` (default: this interpreter) with ``src/`` first on the
  path, plus ``--extra-path`` directories for test-only packages the original's tests
  import and this project does not need (``pip install --target DIR fakeredis
  pytest-asyncio sqlite-vec``; without ``sqlite-vec`` the original's SQLite tests skip
  themselves here and count as not passing).

Measured (2026-12-04, the original's repository tests of these 14 files; its SQLite
tests through pysqlite3): 314 pass on the original, 299 of them here (95.2%). The 15
others: 9 read the original's private SQLite layout (``_vec_ready``, ``_dim``, its
``memory_vec`` / ``memories`` tables), 3 expect ``update`` of an unknown id to be
ignored (here ``KeyError``, on every store), 1 expects ``QdrantStore`` to refuse a
memory without an embedding (kept here), 1 expects ``InMemoryStore`` to have no
``close()``, 1 reads the async engine's private ``_query_classifier``.

Prints the pass count on each side, the number and percentage of the original's passing
tests that pass here, and the ones that do not, grouped by cause (exception type and
message, as pytest reported it).

Usage:
    python benchmarks/original_ecosystem_tests.py --tests /path/to/original/tests
        [--original-python /work/venv-orig/bin/python] [--ours-python PATH]
        [--extra-path DIR ...] [--files test_x.py ...] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The original's test files that exercise its optional modules: vector and state
# stores, the LLM appraisal and HTTP helpers, the async engine and adapters, the
# integrations, the figures and the package's export lists.
OPTIONAL_MODULE_TESTS = (
    "test_qdrant_store.py",
    "test_chroma_store.py",
    "test_sqlite_store.py",
    "test_redis_state_store.py",
    "test_state_stores.py",
    "test_appraisal_llm.py",
    "test_llm_http.py",
    "test_async_engine.py",
    "test_async_adapters.py",
    "test_langchain_adapter.py",
    "test_mem0_adapter.py",
    "test_integrations_optional_imports.py",
    "test_init_exports.py",
    "test_visualization.py",
)

# Makes ``import sqlite3`` resolve to pysqlite3 (same DB-API, extension loading built
# in) in the original's interpreter only; written to a scratch directory at run time.
_SQLITE_SHIM = """\
import sqlite3 as _stdlib_sqlite3, sys
if not hasattr(_stdlib_sqlite3.Connection, "enable_load_extension"):
    try:
        import pysqlite3, pysqlite3.dbapi2
    except ImportError:
        pass
    else:
        sys.modules["sqlite3"] = pysqlite3
        sys.modules["sqlite3.dbapi2"] = pysqlite3.dbapi2
"""


def _run_suite(
    python: str, tests: Path, files: list[str], pythonpath: list[str], label: str
) -> dict[str, tuple[str, str]]:
    """Run ``files`` of ``tests`` under ``python`` and return {test id: (outcome, cause)}.

    Args:
        python: interpreter to run pytest with.
        tests: directory holding the original's ``conftest.py`` and test files.
        files: test file names to run.
        pythonpath: entries put first on ``PYTHONPATH``.
        label: name for the scratch directory (``original`` / ``ours``).

    Returns:
        Mapping from ``file::Class::test`` to ``(outcome, cause)``; outcome is one of
        ``passed``, ``failed``, ``error``, ``skipped``; cause is the reported exception
        (empty when passed). A file that fails to import yields one ``error`` entry
        named after the file.
    """
    with tempfile.TemporaryDirectory(prefix=f"orig-tests-{label}-") as scratch:
        work = Path(scratch) / "tests"
        work.mkdir()
        for name in ["conftest.py", *files]:
            src = tests / name
            if src.exists():
                shutil.copy2(src, work / name)
        for helper in ("llm_helpers.py", "strategies.py"):
            if (tests / helper).exists():
                shutil.copy2(tests / helper, work / helper)
        report = Path(scratch) / "report.xml"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([*pythonpath, str(work)])
        env.pop("PYTHONSTARTUP", None)
        env["MPLBACKEND"] = "Agg"
        cmd = [
            python, "-m", "pytest", str(work), "-q", "-p", "no:cacheprovider",
            "--continue-on-collection-errors", f"--junitxml={report}",
            "-o", "asyncio_default_fixture_loop_scope=function",
        ]  # fmt: skip
        subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True, timeout=1800)
        return _parse_junit(report, work)


def _parse_junit(report: Path, work: Path) -> dict[str, tuple[str, str]]:
    """Read pytest's JUnit XML into {test id: (outcome, cause)}."""
    results: dict[str, tuple[str, str]] = {}
    if not report.exists():
        return results
    for case in ET.parse(report).getroot().iter("testcase"):
        classname = case.get("classname", "")
        name = case.get("name", "")
        if not classname:  # a collection error: name is "tests.test_file"
            results[name.split(".")[-1] + ".py"] = ("error", _cause(_text_of(case)))
            continue
        parts = classname.split(".")
        # classname is "tests.test_file.Class" (or "tests.test_file"); keep file::Class
        module_idx = next((i for i, p in enumerate(parts) if p.startswith("test_")), 0)
        module = parts[module_idx] + ".py"
        klass = parts[module_idx + 1 :]
        test_id = "::".join([module, *klass, name]) if name else module
        outcome, cause = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                cause = _cause(node.get("message") or node.text or "")
                break
        results[test_id] = (outcome, cause)
    return results


def _text_of(case: ET.Element) -> str:
    """The last line of a collection error's report (the exception raised)."""
    node = case.find("error")
    if node is None:
        return ""
    lines = [ln for ln in (node.text or node.get("message") or "").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("E ")]
    return (errors[-1][1:].strip() if errors else lines[-1]) if lines else ""


def _cause(message: str) -> str:
    """Shorten a pytest failure message to a groupable cause (first line, ids masked)."""
    line = message.strip().splitlines()[0] if message.strip() else "(no message)"
    line = re.sub(r"0x[0-9a-f]+", "0x…", line)
    line = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uuid>", line)
    return line[:160]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=Path, required=True, help="the original's tests/")
    parser.add_argument("--original-python", default="/work/venv-orig/bin/python")
    parser.add_argument("--ours-python", default=sys.executable)
    parser.add_argument("--extra-path", action="append", default=[], help="test-only deps")
    parser.add_argument("--files", nargs="*", default=list(OPTIONAL_MODULE_TESTS))
    parser.add_argument("--json", type=Path, help="write the per-test outcomes here")
    args = parser.parse_args(argv)
    for option in ("original_python", "ours_python"):
        if not os.access(getattr(args, option), os.X_OK):
            parser.error(f"--{option.replace('_', '-')} {getattr(args, option)}: "
                         "no such executable")

    files = [f for f in args.files if (args.tests / f).exists()]
    missing = sorted(set(args.files) - set(files))
    if not files:
        parser.error(f"--tests {args.tests}: none of the test files ({', '.join(args.files)})")
    if missing:
        print(f"not found in {args.tests} (skipped): {', '.join(missing)}")

    with tempfile.TemporaryDirectory(prefix="sqlite-shim-") as shim_dir:
        (Path(shim_dir) / "sitecustomize.py").write_text(_SQLITE_SHIM)
        original = _run_suite(
            args.original_python, args.tests, files, [shim_dir, *args.extra_path], "original"
        )
    ours = _run_suite(
        args.ours_python, args.tests, files, [str(ROOT / "src"), *args.extra_path], "ours"
    )

    passing_original = sorted(t for t, (o, _) in original.items() if o == "passed")
    if not passing_original:
        print("no test passed on the original: check --original-python", file=sys.stderr)
        return 2
    kept = [t for t in passing_original if ours.get(t, ("missing", ""))[0] == "passed"]
    lost = [t for t in passing_original if t not in set(kept)]

    def tally(res: dict[str, tuple[str, str]]) -> str:
        counts: dict[str, int] = defaultdict(int)
        for outcome, _ in res.values():
            counts[outcome] += 1
        return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))

    print(f"files: {len(files)}")
    print(f"original: {tally(original)}")
    print(f"ours:     {tally(ours)}")
    per_file: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for t in passing_original:
        per_file[t.split("::")[0]][0] += 1
    for t in kept:
        per_file[t.split("::")[0]][1] += 1
    for name, (n_orig, n_ours) in sorted(per_file.items()):
        print(f"  {name:42s} {n_ours:4d} / {n_orig:<4d}")
    pct = 100.0 * len(kept) / len(passing_original)
    print(f"pass on ours of those passing on the original: {len(kept)} / "
          f"{len(passing_original)} = {pct:.1f}% (target >= 90%)")  # fmt: skip

    groups: dict[str, list[str]] = defaultdict(list)
    for t in lost:
        outcome, cause = ours.get(t, ("missing", ""))
        if outcome == "missing":  # the whole file failed to import
            file_error = ours.get(t.split("::")[0], ("error", "not collected"))
            cause = f"collection error: {file_error[1]}"
        groups[f"[{outcome}] {cause}"].append(t)
    if groups:
        print("\nnot passing on ours, by cause:")
        for cause, ids in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            print(f"- {cause}  ({len(ids)})")
            for t in ids:
                print(f"    {t}")
    if args.json:
        args.json.write_text(
            json.dumps({"original": original, "ours": ours, "kept": kept, "lost": lost}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
