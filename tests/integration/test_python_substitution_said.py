"""Every front end says, once per job, that a framework stand-in runs another Python than the one the
job names (emulator/training_images/frameworks.py, docs/images.md "Which Python"): AWS's PyTorch 1.11 image is
Python 3.8, its stand-in here runs 3.9. A one-host job on the real engine through `hetero-emu run`,
`Job.run()`, SDK v2's `fit()` on an `EmulatorSession`, SDK v3's `train(logs=True)` on an
`EmulatorSessionV3`, and `hetero-emu serve`'s job page for a job created through its endpoint.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import textwrap
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from emulator import Job

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leftovers")]

REPO = Path(__file__).resolve().parents[2]
SDK3_PYTHON = REPO / ".venv-sdk3" / "bin" / "python"
ROLE = "arn:aws:iam::111122223333:role/SageMakerRole"
REGION = "us-west-2"
PY38 = f"763104351884.dkr.ecr.{REGION}.amazonaws.com/pytorch-training:1.11.0-gpu-py38"
NOTE = "pytorch 1.11.0 py38: running on Python 3.9 (Debian has no 3.8)"
SCRIPT = "import platform\nprint('PYTHON ' + platform.python_version(), flush=True)\n"


@pytest.fixture
def code(tmp_path: Path, framework_image: Callable[[str, str, str], str]) -> Path:
    framework_image("pytorch", "1.11.0", "py38")
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(SCRIPT)
    return tmp_path / "code"


def said_once(text: str) -> None:
    lines = [line for line in text.splitlines() if line.strip() == f"warning: {NOTE}"]
    assert len(lines) == 1, text[-4000:]


def spec(tmp_path: Path, name: str) -> dict[str, object]:
    return {"job_name": name, "image_uri": PY38, "entry_point": "train.py", "source_dir": "code",
            "output_path": str(tmp_path / "out"),
            "instance_groups": [{"instance_group_name": "g", "instance_type": "ml.c5.xlarge", "instance_count": 1}]}


def test_hetero_emu_run_says_it(tmp_path: Path, code: Path) -> None:
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(spec(tmp_path, "said-cli")))
    done = subprocess.run([sys.executable, "-m", "emulator", "run", "job.yaml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    said_once(done.stderr)
    assert "PYTHON 3.9." in done.stdout


def test_job_run_says_it(tmp_path: Path, code: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = Job(base_dir=tmp_path, **spec(tmp_path, "said-job")).run()
    assert result.status == "Completed", result.failure_reason
    said_once(capsys.readouterr().err)


def test_sdk_v2_fit_says_it(tmp_path: Path, code: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sagemaker.pytorch import PyTorch

    from emulator.sagemaker import EmulatorSession

    (tmp_path / "s3").mkdir()
    session = EmulatorSession(s3_root=tmp_path / "s3", region=REGION)
    estimator = PyTorch(entry_point="train.py", source_dir=str(code), framework_version="1.11.0", py_version="py38",
                        role=ROLE, sagemaker_session=session, instance_type="ml.c5.xlarge", instance_count=1)
    estimator.fit(job_name="said-sdk-v2")
    out = capsys.readouterr().out
    said_once(out)
    assert "PYTHON 3.9." in out


def test_sdk_v3_train_says_it(tmp_path: Path, code: Path) -> None:
    if not SDK3_PYTHON.is_file():
        pytest.fail(f"{SDK3_PYTHON} is missing: scripts/setup.sh makes it (SageMaker SDK v3 in a venv of its own)")
    (tmp_path / "s3").mkdir()
    client = tmp_path / "client.py"
    client.write_text(textwrap.dedent(f'''
        import logging, sys
        logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s: %(message)s")
        from sagemaker.core.training.configs import Compute, SourceCode
        from sagemaker.train import ModelTrainer
        from emulator.sagemaker import EmulatorSessionV3

        session = EmulatorSessionV3(s3_root={str(tmp_path / "s3")!r}, region="{REGION}")
        trainer = ModelTrainer(role="{ROLE}", training_image="{PY38}", sagemaker_session=session,
                               source_code=SourceCode(source_dir="code", entry_script="train.py"),
                               compute=Compute(instance_type="ml.c5.xlarge", instance_count=1),
                               base_job_name="said-sdk-v3")
        trainer.train(wait=True, logs=True)
    '''))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([str(SDK3_PYTHON), str(client)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said_once(done.stdout)


def test_serves_job_page_says_it(tmp_path: Path, code: Path) -> None:
    from serving import running_server

    with running_server(tmp_path / "server") as server:
        # The code as an SDK uploads it: a sourcedir.tar.gz in the server's S3.
        bucket = server.s3_root / "code" / "said"
        bucket.mkdir(parents=True)
        with tarfile.open(bucket / "sourcedir.tar.gz", "w:gz") as tar:
            tar.add(code / "train.py", arcname="train.py")
        sm = server.client("sagemaker")
        sm.create_training_job(
            TrainingJobName="said-serve", RoleArn=ROLE,
            AlgorithmSpecification={"TrainingImage": PY38, "TrainingInputMode": "File"},
            HyperParameters={"sagemaker_program": '"train.py"', "sagemaker_submit_directory": '"s3://code/said/sourcedir.tar.gz"'},
            ResourceConfig={"InstanceType": "ml.c5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
            OutputDataConfig={"S3OutputPath": "s3://out/jobs"}, StoppingCondition={"MaxRuntimeInSeconds": 600})
        page = urllib.request.urlopen(f"{server.url}/jobs/said-serve", timeout=30).read().decode()
        assert f'<p class="muted image-note">{NOTE}</p>' in page
        deadline = time.monotonic() + 600
        while sm.describe_training_job(TrainingJobName="said-serve")["TrainingJobStatus"] == "InProgress":
            assert time.monotonic() < deadline, "the job did not end"
            time.sleep(1)
        described = sm.describe_training_job(TrainingJobName="said-serve")
        assert described["TrainingJobStatus"] == "Completed", described.get("FailureReason")
        page = urllib.request.urlopen(f"{server.url}/jobs/said-serve", timeout=30).read().decode()
        assert page.count(NOTE) == 1
