"""DescribeTrainingJob answers in botocore's output shape for a job from any front end, at every moment
of its life: each write of the job's record (Starting, Downloading, Training, Stopping, the end) is
described and checked against the model, for a spec's job (`hetero-emu run`, the Python `Job`, the
pytest plugin all run a spec) and a session's request, completed, failed and stopped. What only the
request says (spot, MaxWait, keep-alive, retries) is described for both; one ARN, in the job's own
region; the SDK's `Estimator.attach` reads the answer."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from fake_backend import FakeBackend, exits, runs_until_stopped

from emulator.aws import stub
from emulator.aws.training import SageMakerTraining
from emulator.jobs import service_shape
from emulator.jobspec import JobSpec, load_spec_file
from emulator.options import RunOptions
from emulator.reports.console import RecordingReporter
from emulator.result import Status
from emulator.run import runner
from emulator.run.runner import run_job
from emulator.state import job_records

SPEC = """\
job_name: shaped
entry_point: train.py
source_dir: code
output_path: out
max_run: 3600
use_spot_instances: true
max_wait: 7200
max_retry_attempts: 3
keep_alive_period_in_seconds: 60
"""
HOMOGENEOUS = "instance_type: ml.c5.xlarge\ninstance_count: 2\n"
GROUPS = """\
instance_groups:
  - {instance_group_name: cpu, instance_type: ml.c5.xlarge, instance_count: 1}
  - {instance_group_name: gpu, instance_type: ml.g5.xlarge, instance_count: 1}
"""


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.01)


@pytest.fixture
def spec_text(tmp_path: Path) -> Callable[[str], JobSpec]:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("pass\n")

    def load(extra: str) -> JobSpec:
        (tmp_path / "job.yaml").write_text(SPEC + extra)
        return load_spec_file(tmp_path / "job.yaml")

    return load


def described_on_each_record(monkeypatch: pytest.MonkeyPatch, training: SageMakerTraining,
                             name: str) -> list[dict[str, Any]]:
    """Each DescribeTrainingJob answer right after each write of the job's record (the moments a
    client polling it can see), filled in as the run goes."""
    answers: list[dict[str, Any]] = []
    write = job_records.record

    def recorded(job_name: str, *args: Any, **fields: Any) -> bool:
        done = write(job_name, *args, **fields)
        if job_name == name:
            answers.append(training.describe({"TrainingJobName": name}))
        return done

    monkeypatch.setattr(job_records, "record", recorded)
    return answers


def service(tmp_path: Path, region: str = "us-west-2") -> SageMakerTraining:
    (tmp_path / "s3").mkdir(exist_ok=True)
    return SageMakerTraining(tmp_path / "s3", region=region, engine_name="no-such-engine", base_dir=tmp_path)


def shape_problems(answers: list[dict[str, Any]]) -> Iterator[tuple[str, list[str]]]:
    for answer in answers:
        found = service_shape.problems(answer)
        if found:
            yield str(answer.get("SecondaryStatus")), found


@pytest.mark.parametrize("cluster", [HOMOGENEOUS, GROUPS], ids=["homogeneous", "instance-groups"])
@pytest.mark.parametrize(("code", "ends"), [(0, Status.COMPLETED), (1, Status.FAILED)])
def test_a_spec_jobs_answers_are_the_services_shape_at_every_moment(
        spec_text: Callable[[str], JobSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: str,
        code: int, ends: Status) -> None:
    training = service(tmp_path)
    answers = described_on_each_record(monkeypatch, training, "shaped")
    result = run_job(spec_text(cluster), backend=FakeBackend({"algo-1": exits(code), "algo-2": exits(0)}),
                     reporter=RecordingReporter())
    assert result.status == ends
    answers.append(training.describe({"TrainingJobName": "shaped"}))  # after job.json is written
    assert list(dict.fromkeys(a["SecondaryStatus"] for a in answers))[:3] == ["Starting", "Downloading", "Training"]
    assert answers[-1]["TrainingJobStatus"] == ends
    assert list(shape_problems(answers)) == []
    for answer in answers:
        # What only the request says, described while the job runs and once it has ended.
        assert answer["EnableManagedSpotTraining"] is True
        assert answer["StoppingCondition"] == {"MaxRuntimeInSeconds": 3600, "MaxWaitTimeInSeconds": 7200}
        assert answer["RetryStrategy"] == {"MaximumRetryAttempts": 3}
        assert answer["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 60
        assert answer["OutputDataConfig"]["KmsKeyId"] == ""
        # The spec's region (us-east-1 by default), not the describing session's us-west-2.
        assert answer["TrainingJobArn"] == "arn:aws:sagemaker:us-east-1:000000000000:training-job/shaped"
        assert "Emulator" not in answer and "Hosts" not in answer and "InputDataConfig" not in answer


def test_a_stopped_spec_job_is_described_in_the_services_shape(
        spec_text: Callable[[str], JobSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    training = service(tmp_path)
    answers = described_on_each_record(monkeypatch, training, "shaped")
    # A Ctrl-C (or the SIGTERM StopTrainingJob sends the driver) while the hosts run.
    backend = FakeBackend({h: runs_until_stopped() for h in ("algo-1", "algo-2")}, interrupt_on_states_call=3)
    result = run_job(spec_text(HOMOGENEOUS), RunOptions(grace=0.5), backend=backend, reporter=RecordingReporter())
    assert result.status == Status.STOPPED
    answers.append(training.describe({"TrainingJobName": "shaped"}))
    assert "Stopping" in [a["TrainingJobStatus"] for a in answers]
    assert answers[-1]["TrainingJobStatus"] == "Stopped"
    assert list(shape_problems(answers)) == []


def test_a_sessions_job_is_described_in_the_services_shape_from_its_create_on(tmp_path: Path) -> None:
    """CreateTrainingJob through boto3: the answer at once (InProgress, Starting) and once its driver
    failed (no such engine: Failed) are the service's shape, in the session's region."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("pass\n")
    session = boto3.Session(aws_access_key_id="x", aws_secret_access_key="y", region_name="eu-west-1")
    training = service(tmp_path, region="eu-west-1")
    stub.install(session, [training])
    sm = session.client("sagemaker")
    sm.create_training_job(
        TrainingJobName="asked", RoleArn="arn:aws:iam::111122223333:role/x",
        AlgorithmSpecification={"TrainingImage": "my-image:1", "TrainingInputMode": "File"},
        HyperParameters={"sagemaker_program": '"train.py"', "sagemaker_submit_directory": '"code"'},
        ResourceConfig={"InstanceType": "ml.c5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
        OutputDataConfig={"S3OutputPath": "out"}, StoppingCondition={"MaxRuntimeInSeconds": 600})
    first = training.describe({"TrainingJobName": "asked"})
    training.drivers["asked"].wait(60)
    last = training.describe({"TrainingJobName": "asked"})
    assert (first["TrainingJobStatus"], last["TrainingJobStatus"]) == ("InProgress", "Failed")
    assert list(shape_problems([first, last])) == []
    assert last["TrainingJobArn"] == "arn:aws:sagemaker:eu-west-1:000000000000:training-job/asked"
    assert last["RoleArn"] == "arn:aws:iam::111122223333:role/x"


def test_the_sdks_attach_reads_a_spec_jobs_answer(spec_text: Callable[[str], JobSpec], tmp_path: Path) -> None:
    """`Estimator.attach(name)` through EmulatorSession: it read OutputDataConfig.KmsKeyId, which job.json
    did not have (KeyError for a job from any front end)."""
    from sagemaker.estimator import Estimator

    from emulator.sagemaker import EmulatorSession

    result = run_job(spec_text(HOMOGENEOUS), backend=FakeBackend({"algo-1": exits(0), "algo-2": exits(0)}),
                     reporter=RecordingReporter())
    assert result.status == Status.COMPLETED
    (tmp_path / "s3").mkdir(exist_ok=True)
    attached = Estimator.attach("shaped", sagemaker_session=EmulatorSession(s3_root=tmp_path / "s3"))
    assert (attached.instance_count, attached.instance_type) == (2, "ml.c5.xlarge")
    assert attached.output_kms_key == "" and attached.max_wait == 7200
    assert attached.model_data.endswith("/shaped/output/model.tar.gz")
