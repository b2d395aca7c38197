"""The notebook acceptance set (acceptance/, run on demand by acceptance/run.py) is whole: each
notebook's vendored cells are the ones its notebook.yaml runs, each override replaces text that is in
its cell exactly once and is of a kind the set allows, the cells compile as Python once overridden,
every code cell left out says why, and AWS's files are byte for byte those of the named commit."""

from __future__ import annotations

import gzip
import importlib.util
import shutil
import struct
import sys
from pathlib import Path

import pytest

ACCEPTANCE = Path(__file__).resolve().parents[2] / "acceptance"
sys.path.insert(0, str(ACCEPTANCE))

import notebook_set  # noqa: E402
import synthetic  # noqa: E402

# run.py by a name of its own: "run" is too common a module name to put on every test's path.
_spec = importlib.util.spec_from_file_location("acceptance_run", ACCEPTANCE / "run.py")
assert _spec is not None and _spec.loader is not None
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)

NOTEBOOKS = notebook_set.every()


def test_the_set_holds_heterogeneous_tensorflow_pytorch_and_hugging_face_notebooks() -> None:
    frameworks = {n.framework.split()[0] for n in NOTEBOOKS}
    assert {"tensorflow", "pytorch", "huggingface"} <= frameworks
    assert 6 <= len(NOTEBOOKS) <= 10


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.name for n in NOTEBOOKS])
def test_each_notebook_folder_is_whole(notebook: notebook_set.Notebook) -> None:
    assert notebook.problems() == []
    assert notebook.repo == "aws/amazon-sagemaker-examples"
    assert all(d.make in synthetic.MAKERS for d in notebook.data)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.name for n in NOTEBOOKS])
def test_each_notebook_runs_with_the_emulators_session_and_a_fake_role(notebook: notebook_set.Notebook) -> None:
    ran = "\n".join(notebook.cell_source(i) for i in notebook.cells)
    assert "EmulatorSession(" in ran
    assert "sagemaker.Session(" not in ran
    assert "get_execution_role()" not in ran


def test_an_override_that_is_not_in_its_cell_once_is_a_problem(tmp_path: Path) -> None:
    notebook = NOTEBOOKS[0]
    broken = notebook_set.Notebook(**{**notebook.__dict__, "overrides": (
        notebook_set.Override(notebook.cells[0], "session", "no such text", "x"),
        notebook_set.Override(notebook.cells[0], "model", "import", "x"))})
    problems = broken.problems()
    assert any("'no such text' occurs 0 times" in p for p in problems)
    assert any("kind 'model' is not one of" in p for p in problems)


def test_a_vendored_file_that_was_changed_is_a_problem(tmp_path: Path) -> None:
    notebook = next(n for n in NOTEBOOKS if n.files)
    copy = tmp_path / notebook.name
    shutil.copytree(notebook.folder, copy)
    changed = copy / notebook_set.FILES / notebook.files[0]
    changed.write_bytes(changed.read_bytes() + b"\n# edited\n")
    assert f"file {notebook.files[0]} differs from the notebook's commit" in notebook_set.load(copy).problems()


def test_aws_licence_and_notice_are_kept_beside_their_files() -> None:
    licence = (notebook_set.NOTEBOOKS / "LICENSE-amazon-sagemaker-examples.txt").read_text()
    assert "Apache License" in licence and "Version 2.0" in licence
    assert "Amazon.com" in (notebook_set.NOTEBOOKS / "NOTICE-amazon-sagemaker-examples").read_text()


def test_synthetic_mnist_is_in_the_idx_format_torchvision_reads(tmp_path: Path) -> None:
    synthetic.mnist_torchvision(tmp_path, count=3)
    raw = tmp_path / "MNIST" / "raw"
    images = (raw / "train-images-idx3-ubyte").read_bytes()
    assert struct.unpack(">IIII", images[:16]) == (2051, 3, 28, 28) and len(images) == 16 + 3 * 28 * 28
    assert gzip.decompress((raw / "t10k-labels-idx1-ubyte.gz").read_bytes())[:8] == struct.pack(">II", 2049, 3)


def test_the_cause_is_the_failure_reasons_own_error_line() -> None:
    # The training toolkit's FailureReason, as a job that failed on an import gave it.
    reason = ('AlgorithmError: NotFoundError:\nExitCode 1\nErrorMessage "ModuleNotFoundError\n \n No module named '
              '\'tensorflow_addons\'"\nCommand "/opt/venv/bin/python3.9 vit.py --EPOCHS 1", exit code: 1')
    assert run._first_line(reason) == "ModuleNotFoundError: No module named 'tensorflow_addons'"
    traceback = ('ExecuteUserScriptError:\nExitCode 1\nErrorMessage "Traceback (most recent call last):\n'
                 '  File \"train.py\", line 3\nOSError: We couldn\'t connect to \'https://huggingface.co\'"\n'
                 'Command "python train.py"')
    assert run._first_line(traceback) == "OSError: We couldn't connect to 'https://huggingface.co'"
    assert run._first_line("NoCredentialsError: Unable to locate credentials") == (
        "NoCredentialsError: Unable to locate credentials")


def test_a_download_the_notebook_makes_is_its_own_failure_and_a_missing_module_the_emulators() -> None:
    notebook = next(n for n in NOTEBOOKS if not n.known)
    assert run.classify(notebook, "OSError: We couldn't connect to 'https://huggingface.co'")["result"] == (
        "failed: notebook itself offline")
    assert run.classify(notebook, "ModuleNotFoundError: No module named 'tensorflow_addons'")["result"] == (
        "failed: emulator")
