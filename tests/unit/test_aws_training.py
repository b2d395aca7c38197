"""The SageMaker training-job API answered locally, through a real botocore client (its parameter
checks and modelled exceptions), without an engine: bad requests, unknown names, listing, the ECR
image table, and a job whose driver cannot run it (an engine that does not exist) ending Failed with
the driver's words."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, ParamValidationError

from emulator.aws import stub
from emulator.aws.training import SageMakerTraining
from emulator.errors import ImageMissing, UsageError
from emulator.state import job_records
from emulator.training_images.ecr_images import DEFAULT_IMAGE_MAP, choose_image, local_image

ECR = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.1.0-gpu-py310"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    return tmp_path


def client(project: Path, engine: str = "docker") -> Any:
    (project / "s3").mkdir(exist_ok=True)
    session = boto3.Session(aws_access_key_id="x", aws_secret_access_key="y", region_name="eu-west-1")
    stub.install(session, [SageMakerTraining(project / "s3", region="eu-west-1", engine_name=engine,
                                             base_dir=project)])
    return session.client("sagemaker")


def request(name: str = "sdk-job", **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "TrainingJobName": name,
        "AlgorithmSpecification": {"TrainingImage": ECR, "TrainingInputMode": "File"},
        "HyperParameters": {"sagemaker_program": '"train.py"', "sagemaker_submit_directory": '"code"'},
        "ResourceConfig": {"InstanceGroups": [{"InstanceGroupName": "g", "InstanceType": "ml.c5.xlarge",
                                               "InstanceCount": 2}], "VolumeSizeInGB": 30},
        "OutputDataConfig": {"S3OutputPath": "out"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "RoleArn": "arn:aws:iam::111122223333:role/x",
    }
    base.update(extra)
    return base


def test_a_bad_request_is_a_validation_exception_naming_the_field(project: Path) -> None:
    sm = client(project)
    bad = request(ResourceConfig={"InstanceGroups": [{"InstanceGroupName": "g", "InstanceType": "ml.nope.x",
                                                      "InstanceCount": 1}], "VolumeSizeInGB": 30})
    with pytest.raises(ClientError) as info:
        sm.create_training_job(**bad)
    error = info.value.response["Error"]
    assert error["Code"] == "ValidationException"
    assert "ResourceConfig.InstanceGroups[0].InstanceType" in error["Message"]
    assert job_records.find("sdk-job") is None  # nothing was started


def test_botocore_still_checks_the_parameters_itself(project: Path) -> None:
    with pytest.raises(ParamValidationError):
        client(project).create_training_job(TrainingJobName="x")


def test_an_unknown_job_is_the_services_not_found_answer(project: Path) -> None:
    sm = client(project)
    with pytest.raises(ClientError) as info:
        sm.describe_training_job(TrainingJobName="no-such-job")
    assert info.value.response["Error"] == {"Code": "ValidationException", "Message": "Requested resource not found."}
    with pytest.raises(ClientError):
        sm.stop_training_job(TrainingJobName="no-such-job")


def test_a_job_its_driver_cannot_run_ends_failed_with_the_drivers_words(project: Path) -> None:
    sm = client(project, engine="no-such-engine")
    arn = sm.create_training_job(**request())["TrainingJobArn"]
    assert arn == "arn:aws:sagemaker:eu-west-1:000000000000:training-job/sdk-job"
    first = sm.describe_training_job(TrainingJobName="sdk-job")
    assert first["TrainingJobStatus"] in ("InProgress", "Failed")
    assert first["AlgorithmSpecification"]["TrainingImage"] == ECR  # described as the request named it
    deadline = time.monotonic() + 60
    while (described := sm.describe_training_job(TrainingJobName="sdk-job"))["TrainingJobStatus"] == "InProgress":
        assert time.monotonic() < deadline, "the driver never ended"
        time.sleep(0.1)
    assert described["TrainingJobStatus"] == "Failed"
    assert "unknown engine 'no-such-engine'" in described["FailureReason"]
    assert [t["Status"] for t in described["SecondaryStatusTransitions"]] == ["Starting", "Failed"]
    assert described["CreationTime"].tzinfo is not None  # a datetime, as botocore's parser gives
    with pytest.raises(ClientError) as stop_info:
        sm.stop_training_job(TrainingJobName="sdk-job")
    assert "in status Failed" in stop_info.value.response["Error"]["Message"]


def test_a_job_name_in_use_is_refused(project: Path) -> None:
    (project / "out" / "taken" / "logs").mkdir(parents=True)
    job_records.record("taken", project / "out" / "taken", "Completed")
    with pytest.raises(ClientError) as info:
        client(project).create_training_job(**request("taken"))
    assert info.value.response["Error"]["Code"] == "ResourceInUse"
    assert "already exists" in info.value.response["Error"]["Message"]


def test_creates_with_one_name_at_the_same_moment_accept_exactly_one(project: Path) -> None:
    """Eight clients (threads, as notebooks or a retrying caller would) create one name at once: one is
    accepted and runs one driver, the rest get ResourceInUse, as the service answers."""
    import threading

    clients = [client(project, engine="no-such-engine") for _ in range(8)]
    start = threading.Barrier(len(clients))
    answers: list[str] = []

    def create(sm: Any) -> None:
        start.wait()
        try:
            sm.create_training_job(**request("racing"))
            answers.append("accepted")
        except ClientError as err:
            answers.append(err.response["Error"]["Code"])

    threads = [threading.Thread(target=create, args=(sm,)) for sm in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(answers) == ["ResourceInUse"] * 7 + ["accepted"]
    assert len(list((job_records.state_dir() / "drivers").glob("racing*.json"))) == 1


def test_a_running_job_s_name_is_refused_before_its_folder_exists(project: Path) -> None:
    job_records.record("early", project / "out" / "early", "InProgress")  # created, not staged yet
    with pytest.raises(ClientError) as info:
        client(project).create_training_job(**request("early"))
    assert info.value.response["Error"]["Code"] == "ResourceInUse"


def test_describe_keeps_every_field_of_the_request_after_the_job_ends(project: Path) -> None:
    """The audit's finding: once the job ended, job.json's own versions replaced the request's fields."""
    import json

    from emulator.planning.described_request import echoed

    asked = request("ended", StoppingCondition={"MaxRuntimeInSeconds": 600, "MaxWaitTimeInSeconds": 1200},
                    EnableManagedSpotTraining=True)
    asked["ResourceConfig"]["KeepAlivePeriodInSeconds"] = 300
    asked["AlgorithmSpecification"]["MetricDefinitions"] = [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]
    asked["HyperParameters"]["sagemaker_submit_directory"] = '"s3://bucket/ended/source/sourcedir.tar.gz"'
    job_dir = project / "out" / "ended"
    (job_dir / "logs").mkdir(parents=True)
    (job_dir / "job.json").write_text(json.dumps({
        "TrainingJobName": "ended", "TrainingJobStatus": "Completed", "SecondaryStatus": "Completed",
        "AlgorithmSpecification": {"TrainingImage": "hetero-emu/training:py311", "TrainingInputMode": "File"},
        "HyperParameters": {"sagemaker_program": '"train.py"', "sagemaker_submit_directory": '"/opt/ml/code"'},
        "ResourceConfig": {"InstanceGroups": asked["ResourceConfig"]["InstanceGroups"], "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "OutputDataConfig": {"S3OutputPath": "out", "CompressionType": "GZIP"},
        "TrainingStartTime": "2026-12-03T10:00:00+00:00", "TrainingEndTime": "2026-12-03T10:01:00+00:00",
        "CreationTime": "2026-12-03T09:59:00+00:00", "Emulator": {"HostOrder": "spec"}}))
    job_records.record("ended", job_dir, "Completed", Request=echoed(asked))
    described = client(project).describe_training_job(TrainingJobName="ended")
    assert described["StoppingCondition"] == {"MaxRuntimeInSeconds": 600, "MaxWaitTimeInSeconds": 1200}
    assert described["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 300
    assert described["AlgorithmSpecification"]["MetricDefinitions"] == [{"Name": "loss", "Regex": "loss=([0-9.]+)"}]
    assert described["AlgorithmSpecification"]["TrainingImage"] == ECR  # the request's, not the stand-in
    assert described["HyperParameters"]["sagemaker_submit_directory"] == \
        '"s3://bucket/ended/source/sourcedir.tar.gz"'
    assert described["EnableManagedSpotTraining"] is True
    # What job.json adds stays beside them.
    assert described["OutputDataConfig"]["CompressionType"] == "GZIP"
    assert described["TrainingEndTime"].year == 2026


def test_list_training_jobs_filters_sorts_and_pages(project: Path) -> None:
    for i, status in enumerate(["Completed", "Failed", "Completed"]):
        job_records.record(f"listed-{i}", project / "out" / f"listed-{i}", status,
                    CreationTime=f"2026-01-0{i + 1}T00:00:00+00:00")
    sm = client(project)
    page = sm.list_training_jobs(MaxResults=2, SortBy="CreationTime", SortOrder="Descending")
    assert [s["TrainingJobName"] for s in page["TrainingJobSummaries"]] == ["listed-2", "listed-1"]
    rest = sm.list_training_jobs(MaxResults=2, SortBy="CreationTime", SortOrder="Descending",
                                 NextToken=page["NextToken"])
    assert [s["TrainingJobName"] for s in rest["TrainingJobSummaries"]] == ["listed-0"] and "NextToken" not in rest
    done = sm.list_training_jobs(StatusEquals="Completed", NameContains="LISTED")["TrainingJobSummaries"]
    assert sorted(s["TrainingJobName"] for s in done) == ["listed-0", "listed-2"]
    paginated = [s["TrainingJobName"] for p in sm.get_paginator("list_training_jobs").paginate(
        PaginationConfig={"PageSize": 1}) for s in p["TrainingJobSummaries"]]
    assert sorted(paginated) == ["listed-0", "listed-1", "listed-2"]


@pytest.mark.parametrize(("name", "table", "expected"), [
    # AWS's framework images become the framework image of that version, on the nearest Python here.
    (ECR, DEFAULT_IMAGE_MAP, "hetero-emu/pytorch-training:2.1.0-py311"),
    ("763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:1.11.0-gpu-py38", DEFAULT_IMAGE_MAP,
     "hetero-emu/pytorch-training:1.11.0-py39"),
    ("763104351884.dkr.ecr.us-west-2.amazonaws.com/tensorflow-training:2.13-cpu-py310", DEFAULT_IMAGE_MAP,
     "hetero-emu/tensorflow-training:2.13.0-py311"),
    ("763104351884.dkr.ecr.us-west-2.amazonaws.com/tensorflow-training:2.9.2-gpu-py39-cu112-ubuntu20.04-sagemaker",
     DEFAULT_IMAGE_MAP, "hetero-emu/tensorflow-training:2.9.2-py39"),
    # The user's table wins over the framework images; its `*` only catches what nothing else does.
    (ECR, {"pytorch-training": "mine:torch", "*": "other"}, "mine:torch"),
    (ECR, {"pytorch-training:2.1.0-gpu-py310": "exact:tag", "pytorch-training": "repo"}, "exact:tag"),
    (ECR, {ECR: "whole", "pytorch-training:2.1.0-gpu-py310": "tag"}, "whole"),
    (ECR, {"*": "other"}, "hetero-emu/pytorch-training:2.1.0-py311"),
    ("123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn/my-trainer:2.13", {"*": "any"}, "any"),
    ("my-local/image:1", {"*": "any"}, "my-local/image:1"),  # not an ECR name: used as it is
])
def test_ecr_names_map_to_local_images(name: str, table: dict[str, str], expected: str) -> None:
    assert local_image(name, table) == expected


def test_an_image_the_engine_has_under_the_ecr_name_runs_as_it_is() -> None:
    asked: list[str] = []
    choice = choose_image(ECR, {"pytorch-training": "mine:torch"}, lambda name: asked.append(name) or True)
    assert (choice.image, choice.stands_in, choice.notes()) == (ECR, False, ())
    assert asked == [ECR]


def test_a_stand_in_says_what_it_stands_in_for_and_the_python_it_runs() -> None:
    name = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:1.11.0-gpu-py38"
    choice = choose_image(name, DEFAULT_IMAGE_MAP, lambda _: False)
    assert choice.notes() == (
        f"hetero-emu/pytorch-training:1.11.0-py39 stands in for {name}, which is not in the Docker engine",
        "pytorch 1.11.0 py38: running on Python 3.9 (Debian has no 3.8)")
    # The Python named where Debian has it: no second line.
    same = choose_image(name.replace("1.11.0-gpu-py38", "2.9.2-gpu-py39").replace("pytorch", "tensorflow"),
                        DEFAULT_IMAGE_MAP, lambda _: False)
    assert len(same.notes()) == 1 and same.framework is not None and same.framework.python == "3.9"


@pytest.mark.parametrize("name", [
    "123456789012.dkr.ecr.us-west-2.amazonaws.com/my-trainer:latest",
    "763104351884.dkr.ecr.us-west-2.amazonaws.com/xgboost:1.7-1",
    "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:1.5.0-gpu-py36",  # before 1.8
])
def test_an_ecr_name_with_no_stand_in_is_refused_naming_it(name: str) -> None:
    with pytest.raises(ImageMissing) as info:
        choose_image(name, DEFAULT_IMAGE_MAP, lambda _: False)
    assert name in info.value.message and "docker tag" in str(info.value.hint)


def test_a_framework_version_for_a_python_it_never_had_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"pytorch 1.11.0 was never released for py310"):
        choose_image("763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:1.11.0-gpu-py310",
                     DEFAULT_IMAGE_MAP, lambda _: False)


@pytest.mark.parametrize(("extra", "field", "said"), [
    ({"EnableManagedSpotTraining": True}, "StoppingCondition.MaxWaitTimeInSeconds", "missing"),
    ({"EnableManagedSpotTraining": True,
      "StoppingCondition": {"MaxRuntimeInSeconds": 600, "MaxWaitTimeInSeconds": 300}},
     "StoppingCondition.MaxWaitTimeInSeconds", "300 is less than the maximum runtime (600 s)"),
    ({"StoppingCondition": {"MaxRuntimeInSeconds": 600, "MaxWaitTimeInSeconds": 900}},
     "StoppingCondition.MaxWaitTimeInSeconds", "only for managed spot training"),
    ({"RetryStrategy": {"MaximumRetryAttempts": 31}}, "RetryStrategy.MaximumRetryAttempts", "between 1 and 30"),
])
def test_the_services_checks_of_spot_and_retries_refuse_the_request(project: Path, extra: dict[str, Any],
                                                                    field: str, said: str) -> None:
    with pytest.raises(ClientError) as info:
        client(project).create_training_job(**request("limits", **extra))
    error = info.value.response["Error"]
    assert error["Code"] == "ValidationException"
    assert field in error["Message"] and said in error["Message"]


def test_a_keep_alive_above_an_hour_is_refused(project: Path) -> None:
    asked = request("keep")
    asked["ResourceConfig"]["KeepAlivePeriodInSeconds"] = 3601
    with pytest.raises(ClientError) as info:
        client(project).create_training_job(**asked)
    assert "ResourceConfig.KeepAlivePeriodInSeconds: must be between 0 and 3600 seconds, got 3601" in \
        info.value.response["Error"]["Message"]


def test_spot_with_max_wait_at_least_max_run_is_accepted(project: Path) -> None:
    sm = client(project, engine="no-such-engine")
    sm.create_training_job(**request("spot-ok", EnableManagedSpotTraining=True,
                                     StoppingCondition={"MaxRuntimeInSeconds": 600, "MaxWaitTimeInSeconds": 600}))
    assert sm.describe_training_job(TrainingJobName="spot-ok")["StoppingCondition"]["MaxWaitTimeInSeconds"] == 600


def test_warm_pool_status_and_update_training_job_answer_as_the_service(project: Path) -> None:
    """A job's WarmPoolStatus in describe and in ListTrainingJobs (and its WarmPoolStatusEquals filter);
    UpdateTrainingJob changes the keep-alive, 0 ends the pool, and anything else it is given is refused."""
    from dataclasses import replace

    from emulator.jobspec import request as request_adapter
    from emulator.run import warm_pools

    asked = request("pooled")
    asked["ResourceConfig"]["KeepAlivePeriodInSeconds"] = 600
    spec = request_adapter.validate_request(asked, project)
    job_dir = project / "out" / "pooled"
    (job_dir / "logs").mkdir(parents=True)
    job_records.record("pooled", job_dir, "Completed")
    warm_pools.start(replace(spec, job_name="pooled"), "pooled", job_dir, ["algo-1", "algo-2"])
    warm_pools.retain("pooled")
    job_records.record("no-pool", project / "out" / "no-pool", "Completed")
    sm = client(project)

    described = sm.describe_training_job(TrainingJobName="pooled")
    assert described["WarmPoolStatus"]["Status"] == "Available"
    assert "WarmPoolStatus" not in sm.describe_training_job(TrainingJobName="no-pool")
    listed = sm.list_training_jobs(WarmPoolStatusEquals="Available")["TrainingJobSummaries"]
    assert [(s["TrainingJobName"], s["WarmPoolStatus"]["Status"]) for s in listed] == [("pooled", "Available")]

    with pytest.raises(ClientError) as info:
        sm.update_training_job(TrainingJobName="pooled", ResourceConfig={"KeepAlivePeriodInSeconds": 3601})
    assert "between 0 and 3600" in info.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as info:
        sm.update_training_job(TrainingJobName="pooled", ProfilerConfig={"ProfilingIntervalInMilliseconds": 500})
    assert "ProfilerConfig is not emulated" in info.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as info:
        sm.update_training_job(TrainingJobName="no-pool", ResourceConfig={"KeepAlivePeriodInSeconds": 0})
    assert "no warm pool" in info.value.response["Error"]["Message"]

    answer = sm.update_training_job(TrainingJobName="pooled", ResourceConfig={"KeepAlivePeriodInSeconds": 0})
    assert answer["TrainingJobArn"].endswith(":training-job/pooled")
    assert sm.describe_training_job(TrainingJobName="pooled")["WarmPoolStatus"]["Status"] == "Terminated"
    assert not (job_dir / "warm-pool").exists()
    assert sm.list_training_jobs(WarmPoolStatusEquals="Available")["TrainingJobSummaries"] == []


def test_a_job_that_ended_before_staging_is_described_without_asking_the_engine(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its record describes it; asking Docker for a folder's containers cost a round trip per describe,
    and a 500 whenever the engine was slow to answer."""
    from emulator import api
    from emulator.errors import DockerUnavailable

    def unreachable(name: str) -> Any:
        raise DockerUnavailable("cannot list containers: Read timed out")

    monkeypatch.setattr(api, "engine", unreachable)
    job_records.record("stopped-early", project / "out" / "stopped-early", "Stopped",
                       CreationTime="2026-12-04T10:00:00+00:00", FailureReason="stopped before its hosts started")
    described = client(project).describe_training_job(TrainingJobName="stopped-early")
    assert described["TrainingJobStatus"] == "Stopped"
    assert described["FailureReason"] == "stopped before its hosts started"


def test_a_stand_ins_notes_are_described_from_the_create_on(project: Path) -> None:
    """What stands in and on which Python is in DescribeTrainingJob while the job starts (serve's job
    page shows it from there), not only in job.json once the job has ended."""
    (project / "code" / "requirements.txt").write_text("more-itertools\n")
    sm = client(project, engine="no-such-engine")
    sm.create_training_job(**request("notes-job"))
    # The emulator's own view (serve's page, `hetero-emu describe`); the boto3 answer has only the
    # service's members.
    assert "Emulator" not in sm.describe_training_job(TrainingJobName="notes-job")
    training = SageMakerTraining(project / "s3", region="eu-west-1", engine_name="no-such-engine", base_dir=project)
    described = training.description(training.found("notes-job"))
    assert described["Emulator"]["StandIn"] == {
        "For": ECR, "Image": "hetero-emu/pytorch-training:2.1.0-py311",
        "Notes": [f"hetero-emu/pytorch-training:2.1.0-py311 stands in for {ECR}, which is not in the Docker engine",
                  "pytorch 2.1.0 py310: running on Python 3.11 (Debian has no 3.10); requirements.txt resolved as "
                  "for Python 3.10"]}
