"""Every python block of the README runs as written, and what it claims holds.

The blocks of "Integrations", "Many users in one store" and "Production: PostgreSQL"
run in their own tests (tests/integrations, tests/engine/test_scopes.py,
tests/stores/postgres); this module runs the others, and a guard fails when a python
block appears that no test runs.  A block's trailing ``# <number>`` comment on its last
expression is a documented value: the test checks it to its printed precision.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.minilm import require_minilm
from support.paths import README

RUN_ELSEWHERE = {
    "## Integrations (optional extras)": "tests/integrations/test_readme_integrations.py",
    "## Many users in one store": "tests/engine/test_scopes.py",
    "## Production: PostgreSQL": "tests/stores/postgres/test_postgres_store_errors.py",
}
RUN_HERE = {"## Use": 1, "### Affect from text, no LLM": 2,
            "## Fit the ranking to your data": 3,
            "## Recall on real conversations: the lexical signal and fits that never lose": 1}


def python_blocks() -> dict[str, list[str]]:
    """``heading -> [code, ...]``: the README's python blocks under their nearest heading."""
    text = README.read_text(encoding="utf-8")
    out: dict[str, list[str]] = {}
    for match in re.finditer(r"```python\n(.*?)```", text, flags=re.DOTALL):
        headings = re.findall(r"^#{2,3} .*$", text[: match.start()], flags=re.MULTILINE)
        out.setdefault(headings[-1], []).append(match.group(1))
    return out


def run_block(code: str, namespace: dict[str, Any]) -> Any:
    """Execute ``code`` in ``namespace``; the value of its last statement when that
    statement is an expression (as a notebook shows it), else None."""
    tree = ast.parse(code)
    last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    if last is not None:
        tree.body.pop()
    exec(compile(tree, "README.md", "exec"), namespace)
    if last is None:
        return None
    return eval(compile(ast.Expression(last.value), "README.md", "eval"), namespace)


def documented_value(code: str) -> float:
    """The number in the trailing ``# <number>`` comment of the block's last line."""
    found = re.search(r"#\s*(-?\d+\.\d+)\s*$", code.strip().splitlines()[-1])
    assert found, "the block's last line documents no value"
    return float(found.group(1))


def decimals(value: float) -> int:
    return len(repr(value).split(".")[1])


def test_every_python_block_is_run_by_a_test() -> None:
    blocks = python_blocks()
    unrun = sorted(set(blocks) - set(RUN_ELSEWHERE) - set(RUN_HERE))
    assert not unrun, f"python blocks under {unrun} are run by no test"
    assert {h: len(blocks[h]) for h in RUN_HERE} == RUN_HERE
    for heading in RUN_ELSEWHERE:
        assert heading in blocks, f"{heading!r} has no python block any more"


def test_use(capsys: pytest.CaptureFixture[str]) -> None:
    (code,) = python_blocks()["## Use"]
    run_block(code, {})
    printed = capsys.readouterr().out.splitlines()
    documented = [line[2:] for line in code.splitlines() if line.startswith("# ")]
    assert printed == documented


def test_affect_from_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_minilm()
    monkeypatch.chdir(tmp_path)
    rate, engine_block = python_blocks()["### Affect from text, no LLM"]
    ratings = run_block(rate, {})  # (texts, 3): valence, arousal, dominance
    assert ratings.shape == (2, 3)
    assert ratings[0, 0] > 0.3 and ratings[1, 0] < -0.3
    valence = run_block(engine_block, {})
    want = documented_value(engine_block)
    assert round(valence, decimals(want)) == want
    assert (tmp_path / "memories.db").is_file()


@pytest.fixture(scope="module")
def fitted_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding ``fitted.json`` from the README's ``python -m training fit``
    on the built-in data (its default ``--dataset``, no embeddings)."""
    folder = tmp_path_factory.mktemp("fit")
    subprocess.run([sys.executable, "-m", "training", "fit", "--out", "fitted.json"],
                   cwd=folder, check=True, capture_output=True, text=True, timeout=600)
    return folder


def test_fit_then_load_and_abstain(
    fitted_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(fitted_dir)
    load, abstain, _ = python_blocks()["## Fit the ranking to your data"]
    namespace: dict[str, Any] = {}
    run_block(load, namespace)
    engine, config = namespace["engine"], namespace["config"]
    assert engine.config == config
    assert config.retrieval.relevance_calibration is not None
    for text in ("I sailed the boat to the island.", "The exam went badly."):
        engine.encode(text)
    run_block(abstain, namespace)
    threshold = namespace["threshold"]
    assert 0 < threshold < 1
    found = namespace["found"]
    assert all(e.relevance >= threshold for e in found)
    assert ("nothing relevant is stored" in capsys.readouterr().out) == (not found)


def test_fit_with_a_fitted_embedder_or_minilm(
    fitted_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_minilm()
    monkeypatch.chdir(fitted_dir)
    *_, load = python_blocks()["## Fit the ranking to your data"]
    namespace: dict[str, Any] = {}
    run_block(load, namespace)
    assert namespace["weights"] is None  # a fit without --tune-embedder names none
    from emotional_memory.embedders import MiniLMEmbedder

    assert isinstance(namespace["embedder"], MiniLMEmbedder)
    engine = namespace["engine"]
    engine.encode("We adopted a kitten.")
    assert [m.content for m in engine.retrieve("a new pet", top_k=1)] == ["We adopted a kitten."]


def test_lexical_config() -> None:
    (code,) = python_blocks()[
        "## Recall on real conversations: the lexical signal and fits that never lose"]
    namespace: dict[str, Any] = {}
    run_block(code, namespace)
    retrieval = namespace["config"].retrieval
    assert (retrieval.lexical_weight, retrieval.lexical_b) == (0.4, 0.4)
