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


def test_a_tuning_notebook_checks_its_tuning_job_and_its_best_trials_model() -> None:
    notebook = notebook_set.named("pytorch-hpo-mnist")
    assert notebook.checks["tuning"] == {"tuner": {"trials": 9, "best_model_contains": ["model.pth"]}}
    ran = "\n".join(notebook.cell_source(i) for i in notebook.cells)
    # max_jobs and max_parallel_jobs are the notebook's own: no override may change them.
    assert "max_jobs=9" in ran and "max_parallel_jobs=3" in ran and "tuner.fit(" in ran


class _FakeTuner:
    def __init__(self, status: str, trials: int, model_data: str) -> None:
        self.status, self.trials, self.model_data = status, trials, model_data
        self.sagemaker_session = self

    @property
    def sagemaker_client(self) -> _FakeTuner:
        return self

    def describe(self) -> dict[str, str]:
        return {"HyperParameterTuningJobName": "hpo-1", "HyperParameterTuningJobStatus": self.status,
                "FailureReason": "No training job succeeded after 5 attempts."}

    def analytics(self) -> _FakeTuner:
        return self

    def dataframe(self) -> list[int]:
        return list(range(self.trials))

    def best_training_job(self) -> str:
        return "hpo-1-001-abcdef12"

    def describe_training_job(self, TrainingJobName: str) -> dict[str, dict[str, str]]:  # noqa: N803 - boto's
        return {"ModelArtifacts": {"S3ModelArtifacts": self.model_data}}


def _tuning_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, members: list[str]) -> notebook_set.Notebook:
    import tarfile

    (tmp_path / "b" / "hpo-1-001-abcdef12" / "output").mkdir(parents=True)
    for name in members:
        (tmp_path / name).write_bytes(b"x")
    with tarfile.open(tmp_path / "b" / "hpo-1-001-abcdef12" / "output" / "model.tar.gz", "w:gz") as tar:
        for name in members:
            tar.add(tmp_path / name, arcname=name)
    monkeypatch.setenv("HETERO_EMU_S3_ROOT", str(tmp_path))
    return notebook_set.Notebook(**{**NOTEBOOKS[0].__dict__, "checks": {
        "tuning": {"tuner": {"trials": 9, "best_model_contains": ["model.pth"]}}}})


def test_the_tuning_check_passes_on_a_completed_tuning_job_with_its_trials_and_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    notebook = _tuning_notebook(tmp_path, monkeypatch, ["model.pth"])
    run._check(notebook, {"tuner": _FakeTuner("Completed", 9, "s3://b/hpo-1-001-abcdef12/output/model.tar.gz")})


@pytest.mark.parametrize(("status", "trials", "members", "says"), [
    ("Failed", 9, ["model.pth"], "tuning job hpo-1 is Failed: No training job succeeded"),
    ("Completed", 4, ["model.pth"], "tuning job hpo-1 has 4 trials, not 9"),
    ("Completed", 9, ["other.bin"], "lacks model.pth"),
])
def test_the_tuning_check_fails_on_a_tuning_job_that_did_not_complete_or_lacks_trials_or_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: str, trials: int, members: list[str],
        says: str) -> None:
    notebook = _tuning_notebook(tmp_path, monkeypatch, members)
    tuner = _FakeTuner(status, trials, "s3://b/hpo-1-001-abcdef12/output/model.tar.gz")
    with pytest.raises(AssertionError, match=says):
        run._check(notebook, {"tuner": tuner})


def test_a_failed_trial_is_the_cause_unless_its_tuning_job_completed() -> None:
    trial = {"job": "hpo-1-001", "tuning_job": "hpo-1", "status": "Failed", "failure": "AlgorithmError: boom"}
    failed = {"job": "hpo-1", "tuning": True, "status": "Failed", "failure": "No training job succeeded"}
    assert run.failures([trial, failed]) == ["AlgorithmError: boom", "No training job succeeded"]
    assert run.failures([trial, {**failed, "status": "Completed", "failure": ""}]) == []
    assert run.failures([{"job": "train-1", "status": "Failed", "failure": "ExecuteUserScriptError"}]) == [
        "ExecuteUserScriptError"]


def test_a_tuning_jobs_rows_are_its_trials_then_itself() -> None:
    class Client:
        def describe_hyper_parameter_tuning_job(self, HyperParameterTuningJobName: str) -> dict[str, str]:  # noqa: N803
            return {"HyperParameterTuningJobStatus": "Failed", "FailureReason": "No training job succeeded"}

        def list_training_jobs_for_hyper_parameter_tuning_job(self, **_: object) -> dict[str, list[dict[str, str]]]:
            return {"TrainingJobSummaries": [{"TrainingJobName": "hpo-1-002"}, {"TrainingJobName": "hpo-1-001"}]}

        def describe_training_job(self, TrainingJobName: str) -> dict[str, object]:  # noqa: N803
            return {"TrainingJobStatus": "Failed", "FailureReason": f"{TrainingJobName} failed",
                    "Emulator": {"Image": "hetero-emu/pytorch-training:1.8.0-py39"}}

    rows = run._tuning_rows(Client(), {"job": "hpo-1", "tuning": True, "image": "pytorch-training:1.8.0-cpu-py3"})
    assert [(r["job"], r["status"]) for r in rows] == [("hpo-1-001", "Failed"), ("hpo-1-002", "Failed"),
                                                       ("hpo-1", "Failed")]
    assert rows[0]["tuning_job"] == "hpo-1" and rows[0]["ran_on"] == "hetero-emu/pytorch-training:1.8.0-py39"
    assert run.failures(rows)[0] == "hpo-1-001 failed"
