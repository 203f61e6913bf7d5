"""The cheap benchmarks of ``benchmarks/`` run end to end with tiny arguments.

Each script runs in a subprocess (as a user runs it) over a few memories; the test
checks that it exits cleanly and prints every row its docstring promises, with
finite numbers. Timings are never asserted: they are meaningless at these sizes.
The expensive benchmarks (model fits, servers, MiniLM, other interpreters) are run
by hand; their argument checks are tested here where they need no run.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from typing import Any

import pytest

from support.paths import ROOT, SHARED_DATA, SRC

BENCHMARKS = ROOT / "benchmarks"
NUMBER = re.compile(r"-?[\d.]+[x%]?|nan|-?inf", re.IGNORECASE)
NAN = re.compile(r"\bnan\b", re.IGNORECASE)


def run_benchmark(script: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``python benchmarks/<script> <args>`` from the repository root, this ``src/`` first."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(SRC), str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def finite_numbers(line: str) -> list[float]:
    """The numbers printed on ``line`` (whitespace-separated cells, ``12x`` and ``50%``
    included), each checked finite."""
    numbers = [float(tok.rstrip("x%")) for tok in line.replace("|", " ").split()
               if NUMBER.fullmatch(tok)]
    assert all(math.isfinite(x) for x in numbers), line
    return numbers


def assert_finite(value: Any) -> None:
    """Every number in a JSON value is finite."""
    if isinstance(value, dict):
        for item in value.values():
            assert_finite(item)
    elif isinstance(value, list):
        for item in value:
            assert_finite(item)
    elif isinstance(value, float):
        assert math.isfinite(value)


def test_scoped_retrieve_times_a_populated_scope() -> None:
    # Fewer than 8 scopes: the measured scope used to be a hard-coded "user7", empty
    # here, so "scoped" and "alone" timed retrieves of nothing.
    out = run_benchmark("scoped_retrieve.py", "--scopes", "3", "--per-scope", "12",
                        "--dim", "16", "--repeats", "2").stdout
    rows = dict(re.findall(r"^\s+([\w+]+):\s+([\d.]+) ms$", out, re.MULTILINE))
    assert set(rows) == {"scoped", "alone", "scoped+where", "root", "root+where"}
    assert "36 memories in 3 scopes of 12" in out
    for ratio in ("scoped / alone", "scoped+where / alone", "root+where / root"):
        assert re.search(re.escape(ratio) + r"\s+=\s+[\d.]+x", out), ratio


def test_scoped_retrieve_store_flags_exclude_each_other() -> None:
    proc = run_benchmark("scoped_retrieve.py", "--sqlite", "--qdrant", check=False)
    assert proc.returncode == 2 and "not allowed with" in proc.stderr


def test_half_precision_rows() -> None:
    out = run_benchmark("half_precision.py", "--n", "300", "--dim", "16", "--queries", "5",
                        "--repeats", "2").stdout
    for mode in ("float64", "float32", "float16", "bfloat16"):
        line = next(ln for ln in out.splitlines() if ln.split()[:1] == [mode])
        assert len(finite_numbers(line)) == 6, line
    assert "score_batch identical top-5 vs float32 embeddings" in out


def test_batch_throughput_rows() -> None:
    out = run_benchmark("batch_throughput.py", "--n", "500", "--dim", "16", "--q", "4",
                        "--k", "3", "--chunk", "128", "256", "--repeats", "1",
                        "--agreement").stdout
    assert re.search(r"^bare\s+[\d.]+\s+\d+\s+100\.0%$", out, re.MULTILINE)
    for chunk in (128, 256):
        assert re.search(rf"^score_batch chunk={chunk}\s+[\d.]+\s+\d+\s+[\d.]+%$", out,
                         re.MULTILINE)
    assert "identical top-5 sets vs float32 embeddings: float16" in out


def test_retrieve_latency_rows(tmp_path: Any) -> None:
    report = tmp_path / "latency.json"
    out = run_benchmark("retrieve_latency.py", "--n", "100", "--dim", "16", "--repeats", "2",
                        "--links", "2", "--json", str(report)).stdout
    assert "links/memory 2" in out
    row = next(ln for ln in out.splitlines() if ln.split()[:1] == ["100"])
    assert len(finite_numbers(row)) == 9, row  # N, retrieve, bare, ratio, 5 parts
    data = json.loads(report.read_text())
    assert_finite(data)


def test_encode_scale_sections(tmp_path: Any) -> None:
    report = tmp_path / "encode.json"
    out = run_benchmark("encode_scale.py", "--yardstick-n", "200", "--block", "100",
                        "--n", "200", "--dim", "16", "--engine-n", "100", "--tail", "50",
                        "--single", "2", "--check", "50", "--mem-n", "100",
                        "--json", str(report)).stdout
    assert "engine == per-memory path on 50 memories: True" in out
    for part in ("ratio ", "speed-up", "one encode() at N=200", "under tracemalloc",
                 "resident store bytes per memory"):
        assert part in out, part
    assert not NAN.search(out)
    assert_finite(json.loads(report.read_text()))


def test_sqlite_speed_sections() -> None:
    out = run_benchmark("sqlite_speed.py", "--n", "200", "--block", "100", "--dim", "16",
                        "--repeats", "1", "--reopen-repeats", "2").stdout
    assert re.search(r"ratio SQLite / in-memory: [\d.]+x", out)
    assert re.search(r"ratio reopen / bare read: [\d.]+x", out)
    assert "a fresh process" in out and not NAN.search(out)


def test_scope_batch_stall_report() -> None:
    out = run_benchmark("scope_batch_stall.py", "--items", "5", "--words", "20",
                        "--stored", "20").stdout
    report = json.loads(out)
    assert set(report) == {"in_transaction", "prefetch_checkpoint_in_commit", "prefetch",
                           "transaction_ratio", "victim_max_ratio",
                           "checkpoint_transaction_ratio"}
    assert report["prefetch"]["victim_n"] > 0
    assert_finite(report)


def test_state_save_sqlite_report() -> None:
    out = run_benchmark("state_save.py", "--store", "sqlite", "--rounds", "3").stdout
    report = json.loads(out)
    assert report["store"] == "sqlite"
    assert set(report["ratios"]) == {
        "save_versioned / save", "save_versioned expected / save",
        "set_affect shared / plain", "encode shared / plain"}
    assert_finite(report)


@pytest.mark.parametrize(("script", "args", "message"), [
    ("service_throughput.py", ["--requests", "4"], "--requests must be at least 5"),
    ("service_throughput.py", ["--workers", "2"], "1 only with --store memory"),
    ("tenant_fairness.py", ["--min-batches", "1"], "--min-batches needs --rate and --writes"),
    ("list_paging.py", ["--big", "10"], "--big and --small must be at least 20"),
    ("retrieve_vs_original.py", ["--rounds", "1"], "--rounds must be at least 2"),
    ("minilm_throughput.py", ["--no-table"], "--no-table leaves nothing to measure"),
    ("retrieve_latency.py", ["--repeats", "0"], "--repeats: must be at least 1"),
    ("retrieve_latency.py", ["--n", "10", "--top-k", "20"], "exceeds the smallest --n 10"),
    ("batch_throughput.py", ["--n", "5", "--k", "10"], "--k 10 exceeds the bank's --n 5"),
    ("encode_scale.py", ["--n", "-1"], "--n: must be at least 0"),
    ("state_save.py", ["--rounds", "0"], "--rounds: must be at least 1"),
    ("postgres_scale.py", ["--n", "50"], "--n: every size at least 100"),
    ("real_recall.py", ["--datasets", "nope"], "--datasets: no NAME.json"),
])
def test_argument_errors_name_the_option(script: str, args: list[str], message: str) -> None:
    proc = run_benchmark(script, *args, check=False)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]


def test_abstention_cosine_diagnostic() -> None:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data not present (CI always has it)")
    report = json.loads(run_benchmark("abstention.py", "--cosine-only").stdout)
    assert report["n_questions"] > 0 and len(report["thresholds"]) == 3
    assert_finite(report)
