"""The notebooks run top to bottom without an error (executed with nbclient).

The kernel is this interpreter (the venv's), whatever kernelspecs the machine has:
a ``python3`` kernelspec whose argv names ``sys.executable`` is put first on
``JUPYTER_PATH`` for the test.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
DATA_DIR = ROOT.parent / "shared" / "data"


@pytest.fixture
def venv_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    spec_dir = tmp_path / "jupyter" / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (test interpreter)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return "python3"


def execute(path: Path, kernel_name: str) -> tuple[nbformat.NotebookNode, KernelManager]:
    nb = nbformat.read(path, as_version=4)
    km = KernelManager(kernel_name=kernel_name)
    client = NotebookClient(nb, km=km, timeout=600, kernel_name=kernel_name,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    return nb, km


def errors(nb: nbformat.NotebookNode) -> list[str]:
    return [
        f"{out.get('ename')}: {out.get('evalue')}"
        for cell in nb.cells if cell.cell_type == "code"
        for out in cell.get("outputs", []) if out.get("output_type") == "error"
    ]


def text_of(nb: nbformat.NotebookNode) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                parts.append(out["text"])
    return "".join(parts)


@pytest.mark.parametrize("dataset", ["auto", "builtin"])
def test_fit_weights_notebook(
    dataset: str, venv_kernel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if dataset == "auto" and not DATA_DIR.is_dir():
        pytest.skip("../shared/data not present: 'auto' is the builtin case")
    monkeypatch.setenv("EM_NOTEBOOK_DATA", dataset)
    nb, km = execute(NOTEBOOKS / "fit_weights.ipynb", venv_kernel)
    assert km.kernel_spec is not None
    assert km.kernel_spec.argv[0] == sys.executable
    assert not errors(nb)
    out = text_of(nb)
    expected_source = "realistic_recall_v2" if dataset == "auto" else "built-in dataset"
    assert expected_source in out
    assert "out-of-fold top-1" in out
    images = [o for c in nb.cells for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert len(images) == 3
