"""The teaching notebook (examples/teaching/heterogeneous-cluster.ipynb) run top to bottom as a class
runs it, with nbclient in a kernel of this Python, and what each of its sections promises found in
its outputs: fit()'s output as plain lines, each host's log, the cluster's diagram and the timeline as
SVG, and the failed job's status and hosts."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "teaching" / "heterogeneous-cluster.ipynb"
KERNEL = "hetero-emu-lesson"
HOSTS = {"algo-1": "data_group", "algo-2": "data_group", "algo-3": "train_group"}


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A kernelspec of this Python, found first: a `python3` kernelspec installed on the machine may
    name another Python, without hetero-emu or the SDK."""
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return KERNEL


def outputs(notebook: nbformat.NotebookNode, tag: str) -> tuple[str, list[dict[str, str]]]:
    """The stream text and the rich outputs (by MIME type) of the code cell tagged `tag`."""
    [cell] = [c for c in notebook.cells if tag in c.metadata.get("tags", [])]
    text = "".join(o.text for o in cell.outputs if o.output_type == "stream")
    return text, [o.data for o in cell.outputs if o.output_type in ("display_data", "execute_result")]


def test_the_lesson_runs_top_to_bottom_and_shows_what_each_section_promises(tmp_path: Path, kernel: str) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    started = time.monotonic()
    # A cell that raises fails the test here, with the cell and its traceback.
    NotebookClient(notebook, timeout=300, kernel_name=kernel, resources={"metadata": {"path": str(tmp_path)}}).execute()
    print(f"the notebook ran in {time.monotonic() - started:.0f} s")

    for cell in notebook.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                assert "\x1b" not in out.text and "\r" not in out.text, out.text  # plain lines in a cell

    fit, _ = outputs(notebook, "run")
    assert "Completed - Training job completed" in fit
    for host, group in HOSTS.items():
        assert f"{host} ({group})".ljust(20) + f" | {host}: group {group}" in fit
        assert f"{host} ({group})".ljust(20) + " | [toolkit environment: " in fit  # folded, not 150 lines
    assert "Training Env:" not in fit

    _, logs = outputs(notebook, "logs")
    shown = [data["text/markdown"] for data in logs]
    assert [text.split("**")[1] for text in shown] == list(HOSTS)
    assert all("100 rows ready, 2 bad rows dropped" in text for text in shown[:2])
    assert "algo-3: 100 rows from algo-2" in shown[2] and "algo-3: model {" in shown[2]

    for tag, words in (("diagram", ("data_group", "train_group", "channel train")), ("timeline", ("Completed",))):
        _, pictures = outputs(notebook, tag)
        [svg] = [data["image/svg+xml"] for data in pictures]
        assert "<svg" in svg and all(word in svg for word in words), tag

    fault, _ = outputs(notebook, "fault")
    assert "fit() raised UnexpectedStatusException" in fault
    failed, _ = outputs(notebook, "failed")
    assert "status:           Failed" in failed and "ExecuteUserScriptError" in failed
    hosts, shown_failed = outputs(notebook, "hosts")
    assert "algo-2 (data_group): exit code 1\n" in hosts
    assert "algo-1 (data_group): exit code 143\n" in hosts and "algo-3 (train_group): exit code 143\n" in hosts
    assert "RuntimeError: algo-2 could not prepare its shard" in shown_failed[1]["text/markdown"]
    assert "algo-2 (data_group) failed first" in shown_failed[-1]["image/svg+xml"]
