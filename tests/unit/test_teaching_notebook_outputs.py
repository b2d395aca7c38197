"""The teaching notebook (examples/teaching) is committed without outputs: a class runs it and sees
its own, and a diff of the notebook shows only what changed in it. Running it needs Docker:
tests/integration/test_teaching_notebook.py."""

from __future__ import annotations

import json
from pathlib import Path

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "teaching" / "heterogeneous-cluster.ipynb"


def test_the_teaching_notebook_is_committed_without_outputs() -> None:
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    code = [cell for cell in cells if cell["cell_type"] == "code"]
    assert code
    left = [i for i, cell in enumerate(code) if cell["outputs"] or cell["execution_count"] is not None]
    assert not left, f"code cells {left} hold outputs: clear them (Jupyter: Edit > Clear Outputs of All Cells)"
