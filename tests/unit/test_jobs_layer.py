"""The jobs layer's reads (emulator/jobs/service.py): the records, `wait`, the engine's containers and the
typed record, which every front end uses instead of the record store or the engine registry."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from fake_backend import FakeBackend

from emulator.backend import Resource
from emulator.errors import ApiError
from emulator.jobs.service import TrainingJobs
from emulator.result import Status
from emulator.state import job_records


@pytest.fixture
def jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TrainingJobs:
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    return TrainingJobs(tmp_path / "s3", region="eu-west-1", base_dir=tmp_path)


def later(seconds: float, action: object) -> threading.Thread:
    def run() -> None:
        time.sleep(seconds)
        action()  # type: ignore[operator]

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_wait_returns_when_the_job_ends_with_its_ended_record(jobs: TrainingJobs, tmp_path: Path) -> None:
    job_records.record("w-job", tmp_path / "w-job", Status.IN_PROGRESS, SecondaryStatus="Training")
    writer = later(0.1, lambda: job_records.record("w-job", tmp_path / "w-job", Status.IN_PROGRESS,
                                                   SecondaryStatus="Uploading"))
    ender = later(0.3, lambda: job_records.record("w-job", tmp_path / "w-job", Status.COMPLETED,
                                                  SecondaryStatus="Completed"))
    started = time.monotonic()
    ended = jobs.wait("w-job", timeout=20)
    writer.join()
    ender.join()
    # Not at the Uploading step: only the end ends the wait.
    assert ended.status == Status.COMPLETED and ended.doc["SecondaryStatus"] == "Completed"
    assert time.monotonic() - started < 10


def test_wait_for_change_returns_at_the_first_change_of_the_record(jobs: TrainingJobs, tmp_path: Path) -> None:
    job_records.record("c-job", tmp_path / "c-job", Status.IN_PROGRESS, SecondaryStatus="Starting")
    writer = later(0.1, lambda: job_records.record("c-job", tmp_path / "c-job", Status.IN_PROGRESS,
                                                   SecondaryStatus="Training"))
    changed = jobs.wait("c-job", timeout=20, for_change=True)
    writer.join()
    assert changed.status == Status.IN_PROGRESS and changed.doc["SecondaryStatus"] == "Training"


def test_wait_gives_up_after_its_timeout_with_the_record_as_it_stands(jobs: TrainingJobs, tmp_path: Path) -> None:
    job_records.record("t-job", tmp_path / "t-job", Status.IN_PROGRESS, SecondaryStatus="Training")
    started = time.monotonic()
    now = jobs.wait("t-job", timeout=0.2)
    assert 0.2 <= time.monotonic() - started < 5
    assert now.status == Status.IN_PROGRESS


def test_wait_for_an_unknown_job_is_the_services_validation_error(jobs: TrainingJobs) -> None:
    with pytest.raises(ApiError) as raised:
        jobs.wait("no-such-job", timeout=0.1)
    assert raised.value.code == "ValidationException"
    assert raised.value.message == "Requested resource not found."


def test_wait_ends_a_job_whose_driver_died(jobs: TrainingJobs, tmp_path: Path) -> None:
    """A driver killed (SIGKILL) never writes the end: the wait's look at the record ends it as Failed,
    with the driver log's last line, and returns instead of waiting forever."""
    job_records.record("d-job", tmp_path / "d-job", Status.IN_PROGRESS, DriverPid=2 ** 22 + 12345)
    ended = jobs.wait("d-job", timeout=20)
    assert ended.status == Status.FAILED
    assert str(ended.doc["FailureReason"]).startswith("the job's driver ended")


def test_records_and_record_are_the_stores(jobs: TrainingJobs, tmp_path: Path) -> None:
    job_records.record("r-one", tmp_path / "r-one", Status.COMPLETED)
    job_records.record("r-two", tmp_path / "r-two", Status.IN_PROGRESS)
    assert [r.job_name for r in jobs.records()] == ["r-two", "r-one"]
    found = jobs.record("r-one")
    assert found is not None and found.job_dir == tmp_path / "r-one"
    assert jobs.record("r-three") is None


def test_the_engine_is_made_at_its_first_use_and_answers_the_jobs_containers(
    jobs: TrainingJobs, monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[str] = []
    fake = FakeBackend()
    fake.leftovers.append(Resource("container", "hetero-emu-e-job-algo-1", "e-job", {}))

    def factory(name: str) -> FakeBackend:
        made.append(name)
        return fake

    monkeypatch.setattr("emulator.jobs.service.engine", factory)
    assert made == []  # a TrainingJobs made for describes never makes an engine
    assert [r.name for r in jobs.resources("e-job")] == ["hetero-emu-e-job-algo-1"]
    assert jobs.resources("other-job") == []
    jobs.container_states([])
    assert [c[0] for c in fake.calls] == ["find", "find", "states"]
    assert made == ["docker"]  # one engine, the default one, made once


def test_the_typed_record_reads_each_field_and_takes_a_wrong_type_for_absent(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    request = {"AlgorithmSpecification": {"TrainingImage": "763104351884.dkr.ecr.us-east-1.amazonaws.com/x:1"}}
    job_records.record("typed", tmp_path / "typed", Status.IN_PROGRESS, Request=request,
                       TrainingJobArn="arn:aws:sagemaker:us-east-1:000000000000:training-job/typed",
                       LocalImage="hetero-emu/training:py311", ImageNotes=["no CUDA"], DriverPid=42,
                       Tags=[{"Key": "team", "Value": "a"}], ClusterDot="graph {}", CreationTime="2026-12-05T10:00:00")
    record = job_records.find("typed")
    assert record is not None
    assert record.request == request and record.requested_image == request["AlgorithmSpecification"]["TrainingImage"]
    assert record.arn == "arn:aws:sagemaker:us-east-1:000000000000:training-job/typed"
    assert (record.local_image, record.image_notes, record.driver_pid) == ("hetero-emu/training:py311", ["no CUDA"], 42)
    assert record.tags == [{"Key": "team", "Value": "a"}]
    assert (record.cluster_dot, record.creation_time, record.training_start_time) == \
        ("graph {}", "2026-12-05T10:00:00", None)
    # A record edited by hand with the wrong types: each field reads as absent, none raises.
    path = tmp_path / "state" / "jobs" / "typed.json"
    doc = json.loads(path.read_text())
    doc.update(Request="x", TrainingJobArn=7, ImageNotes="no", DriverPid=True, Tags={"Key": "k"}, ClusterDot=[])
    path.write_text(json.dumps(doc))
    wrong = job_records.find("typed")
    assert wrong is not None
    assert (wrong.request, wrong.requested_image, wrong.arn, wrong.image_notes, wrong.driver_pid, wrong.tags,
            wrong.cluster_dot) == ({}, None, None, [], None, [], None)


def test_hetero_emu_describe_of_a_running_job_is_the_jobs_layers_description(
    jobs: TrainingJobs, tmp_path: Path,
) -> None:
    """`hetero-emu describe` (emulator.api) of a job that runs describes it as DescribeTrainingJob does
    through boto3, the request echoed with the status, not a note of its status alone: one description
    whichever front end asks."""
    from emulator import api
    from emulator.jobs import service_shape

    folder = tmp_path / "out" / "running-job"
    (folder / "logs").mkdir(parents=True)
    request = {"TrainingJobName": "running-job", "RoleArn": "arn:aws:iam::000000000000:role/r",
               "AlgorithmSpecification": {"TrainingImage": "hetero-emu/training:py311", "TrainingInputMode": "File"},
               "HyperParameters": {"epochs": "3"},
               "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
               "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
               "StoppingCondition": {"MaxRuntimeInSeconds": 600}, "EnableManagedSpotTraining": False}
    job_records.record("running-job", folder, Status.IN_PROGRESS, Request=request, SecondaryStatus="Training",
                       TrainingJobArn="arn:aws:sagemaker:eu-west-1:000000000000:training-job/running-job")
    cli_doc = api.describe("running-job")
    boto3_doc = service_shape.service_answer(jobs.description(jobs.found("running-job")))
    assert cli_doc["HyperParameters"] == {"epochs": "3"} and cli_doc["ResourceConfig"]["InstanceCount"] == 2
    assert cli_doc["SecondaryStatus"] == "Training" and cli_doc["TrainingJobStatus"] == "InProgress"
    # What both say, they say alike (the shape adds only what the service always returns: the false flags,
    # KmsKeyId "", ModelArtifacts); and the CLI's has every member of the request.
    shared = [key for key in boto3_doc if key in cli_doc and key != "OutputDataConfig"]
    assert set(request) - {"TrainingJobName", "OutputDataConfig"} <= set(shared)
    for key in shared:
        assert json.loads(json.dumps(cli_doc[key], default=str)) == json.loads(json.dumps(boto3_doc[key], default=str))
