"""The user's own SageMaker Python SDK v3 code (`ModelTrainer`), unchanged but for
`sagemaker_session=EmulatorSessionV3(...)`, on the real engine: the guide's heterogeneous cluster with
a channel on one instance group through `train(wait=True, logs=True)`, with what the REAL
sagemaker-training toolkit tells each host asserted as for SDK v2; a failing script raising v3's own
`FailedStatusError`.

SDK v3 cannot be installed beside v2 (the main venv's), so the user code (tests/data/sdk_v3/
model_trainer.py) runs in `.venv-sdk3` (made by scripts/setup.sh) as a subprocess; it prints v3's log
lines and a `RESULT {json}` line. The SDK builds the request itself: its role check, the uploads of
the code and its driver scripts as channels, the bash command that runs them, its wait loop reading
CloudWatch Logs.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
from test_seed_clusters import GUIDE_B_HOSTS, PROBE, PROBE_CHANNELS_AND_MODEL, assert_guide_b_host, log_tagged

# The guide's image is an AWS PyTorch image, which runs as the framework image of PyTorch 2.1.0 on
# Python 3.11 (emulator/training_images/ecr_images.py).
pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "pytorch_image", "no_leftovers")]

REPO = Path(__file__).resolve().parents[2]
SDK3_PYTHON = REPO / ".venv-sdk3" / "bin" / "python"
USER_CODE = REPO / "tests" / "data" / "sdk_v3" / "model_trainer.py"
G1, G2 = "instance_group_1", "instance_group_2"
C5, P3DN = "ml.c5.18xlarge", "ml.p3dn.24xlarge"
DATA = "your-training-data-storage"
BUCKET = "sagemaker-us-west-2-000000000000"  # the default bucket: region and the placeholder account

# The probe, then the script's own arguments (v3's driver passes hyperparameters as options), what
# the job's channels hold, and a model file per host.
SCRIPT = PROBE + '''
import sys
print("ARGV_JSON " + json.dumps(sys.argv[1:]), flush=True)
''' + PROBE_CHANNELS_AND_MODEL


@pytest.fixture(scope="module")
def sdk3_python() -> Path:
    if not SDK3_PYTHON.is_file():
        reason = f"{SDK3_PYTHON} is missing: scripts/setup.sh makes it (SageMaker SDK v3 in a venv of its own)"
        if os.environ.get("EMULATOR_REQUIRE_DOCKER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return SDK3_PYTHON


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(SCRIPT)
    (tmp_path / "s3" / DATA / "folder1").mkdir(parents=True)
    (tmp_path / "s3" / DATA / "folder1" / "a.csv").write_text("1,2\n")
    return tmp_path


def run_v3(python: Path, project: Path, base_job_name: str, **environment: str) -> tuple[dict[str, Any], str]:
    """The user's v3 code in its own venv: its RESULT and everything it printed."""
    args = {"s3_root": str(project / "s3"), "source_dir": str(project / "code"), "base_job_name": base_job_name,
            "environment": environment, "channel": f"s3://{DATA}/folder1"}
    # The checkout's emulator, whichever copy .venv-sdk3 was installed from.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([str(python), str(USER_CODE), json.dumps(args)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=project)
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and len(results) == 1, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return json.loads(results[0][len("RESULT "):]), done.stdout


def job_dir(project: Path, base_job_name: str, job: str) -> Path:
    # ModelTrainer's default output path: s3://<default bucket>/<base_job_name>, the job under it.
    return project / "s3" / BUCKET / base_job_name / job


def test_the_guides_cluster_through_model_trainer_with_a_channel_on_one_group(
        sdk3_python: Path, project: Path) -> None:
    result, printed = run_v3(sdk3_python, project, "guide-v3")
    assert "raised" not in result, result
    assert result["status"] == "Completed"
    assert result["v2_session_imported"] is False  # emulator.sagemaker imports the v2 module only when asked
    job = result["job"]
    folder = job_dir(project, "guide-v3", job)

    for host, (group, _, _) in GUIDE_B_HOSTS.items():
        info = log_tagged(folder, host, "PROBE_JSON")
        assert_guide_b_host(info, host)
        # Only the user's hyperparameters: v3 sends no sagemaker_* ones, and its driver makes each an option.
        assert info["hyperparameters"] == {"epochs": 2}, host
        assert log_tagged(folder, host, "ARGV_JSON") == ["--epochs", "2"], host  # type: ignore[comparison-overlap]
        assert info["os_env"]["TRAINING_JOB_NAME"] == job
        assert info["os_env"]["AWS_REGION"] == "us-west-2", host  # the session's region
        # The SDK's code and driver channels on every host (it gives them to all groups); the user's
        # channel only on instance_group_1.
        channels = log_tagged(folder, host, "CHANNELS_JSON")
        assert channels["code"] == ["train.py"], host
        assert "sm_train.sh" in channels["sm_drivers"], host
        assert sorted(channels) == (["code", "sm_drivers", "training"] if group == G1 else ["code", "sm_drivers"])
        assert channels.get("training", ["a.csv"]) == ["a.csv"], host

    # Where the service puts the model, under the S3 root, as the SDK's TrainingJob describes it.
    assert result["model"] == f"s3://{BUCKET}/guide-v3/{job}/output/model.tar.gz"
    with tarfile.open(folder / "output" / "model.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["algo-1.txt", "algo-2.txt", "algo-3.txt"]
    # The SDK's uploads stay where it put them, untouched by the hosts' chmod of their copies.
    driver = folder / "input" / "sm_drivers" / "sm_train.sh"
    assert driver.is_file() and not os.access(driver, os.X_OK)
    described = json.loads((folder / "job.json").read_text())
    assert described["TrainingJobStatus"] == "Completed"
    assert [(h["Host"], h["InstanceGroupName"], h["ExitCode"]) for h in described["Hosts"]] == [
        ("algo-1", G1, 0), ("algo-2", G2, 0), ("algo-3", G2, 0)]

    # logs=True: v3 prints each host's lines from CloudWatch Logs, one stream per host, then the status.
    streams = {line[:-1] for line in printed.splitlines() if line.startswith(f"sagemaker.core.resources: {job}/")}
    assert {s.rsplit("-", 1)[0] for s in streams} == {f"sagemaker.core.resources: {job}/{h}" for h in GUIDE_B_HOSTS}
    assert "\nPROBE_JSON " in printed and "\nCHANNELS_JSON " in printed
    assert printed.count("\nARGV_JSON ") == 3
    assert "Final Resource Status: [bold]Completed" in printed


def test_a_failing_script_raises_v3s_failed_status_error(sdk3_python: Path, project: Path) -> None:
    result, printed = run_v3(sdk3_python, project, "guide-v3-fails", FAIL_ON="algo-2")
    assert result["raised"] == "sagemaker.core.utils.exceptions.FailedStatusError", result
    assert result["status"] == "Failed"
    message = result["message"]
    assert "Final Resource State: Failed" in message
    assert "Failure Reason: AlgorithmError: " in message and ", exit code: 1" in message
    # What v3's driver wrote to /opt/ml/output/failure, as the service's FailureReason carries it.
    assert "CalledProcessError: Command '['/opt/venv/bin/python3', 'train.py', '--epochs', '2']' returned " \
           "non-zero exit status 1." in message
    assert "algo-2 gives up" in printed  # the script's own last words, in its host's log lines
    folder = job_dir(project, "guide-v3-fails", result["job"])
    described = json.loads((folder / "job.json").read_text())
    assert described["TrainingJobStatus"] == "Failed"
    assert described["FailureReason"] in message
    # algo-2 failed; the others ended on their own or were stopped with the job, whichever came first.
    assert {h["Host"]: h["ExitCode"] for h in described["Hosts"]}["algo-2"] == 1
    assert "Final Resource Status: [bold]Failed" in printed
