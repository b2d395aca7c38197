"""The tuning layer's five operations (emulator/tuning/service.py) over a real `TrainingJobs` on the
test's folders, with no loop behind them: CreateHyperParameterTuningJob's checks (the name, the
service's rules, each definition's trial as CreateTrainingJob would check it, a name taken, warm
start parents), Describe in botocore's output shape, List's filters, sorting and paging,
ListTrainingJobsForHyperParameterTuningJob's sorting by objective, Stop, a tuning job whose loop died,
and the operations through a boto3 client of the in-process stub (botocore's own parser).

Records of tuning jobs with trials are written as the loop writes them (emulator/tuning/loop.py), so
each answer's expected value is read off the test's own record."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore.validate import ParamValidator

from emulator.errors import ApiError
from emulator.jobs.service import TrainingJobs
from emulator.jobspec.request import ANY_PATH, HostPaths
from emulator.sagemaker.local import local_aws
from emulator.state import tuning_records
from emulator.tuning import service
from emulator.tuning.service import TuningJobs

REGION = "us-west-2"
ECR = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.1.0-cpu-py310"
NOBODYS_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/mine:latest"
METRIC = "validation:loss"
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))


class Loop:
    """Stands in for the loop's Popen: the test's own pid, which is alive, and `poll` None."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def poll(self) -> int | None:
        return None


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Path]]:
    """CreateHyperParameterTuningJob starts no loop: each spawn's (module, ticket) is kept instead."""
    calls: list[tuple[str, Path]] = []

    def spawn(module: str, ticket: Path, log: Path) -> Loop:
        calls.append((module, ticket))
        return Loop(os.getpid())

    monkeypatch.setattr(service, "spawn", spawn)
    return calls


def jobs(project: Path, host_paths: HostPaths = ANY_PATH) -> TuningJobs:
    """The tuning jobs over training jobs of the project folder (conftest.py's `project`: code/train.py,
    an S3 root s3/) on an engine that does not exist."""
    training = TrainingJobs(project / "s3", region=REGION, engine_name="no-such-engine", base_dir=project,
                            host_paths=host_paths)
    return TuningJobs(training)


def tuning_request(name: str = "tune", **definition: Any) -> dict[str, Any]:
    """A CreateHyperParameterTuningJob request the service accepts (one definition; `definition`
    replaces its members)."""
    return {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobConfig": {
            "Strategy": "Random", "TrainingJobEarlyStoppingType": "Off",
            "HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": METRIC},
            "ResourceLimits": {"MaxNumberOfTrainingJobs": 4, "MaxParallelTrainingJobs": 2},
            "ParameterRanges": {"ContinuousParameterRanges": [{"Name": "lr", "MinValue": "0.001",
                                                               "MaxValue": "0.1"}]}},
        "TrainingJobDefinition": {
            "AlgorithmSpecification": {"TrainingImage": ECR, "TrainingInputMode": "File",
                                       "MetricDefinitions": [{"Name": METRIC, "Regex": "loss=([0-9.]+)"}]},
            "StaticHyperParameters": {"sagemaker_program": '"train.py"', "sagemaker_submit_directory": '"code"'},
            "RoleArn": "arn:aws:iam::111122223333:role/tuning",
            "OutputDataConfig": {"S3OutputPath": "out"},
            "ResourceConfig": {"InstanceType": "ml.c5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
            "StoppingCondition": {"MaxRuntimeInSeconds": 600},
            **definition},
        "Tags": [{"Key": "team", "Value": "vision"}],
    }


def refused(code: str, call: Any, *args: Any) -> str:
    with pytest.raises(ApiError) as info:
        call(*args)
    assert info.value.code == code, info.value.message
    return info.value.message


# -- records as the loop writes them ----------------------------------------------------------------


def trial(tuning: str, number: int, status: str, value: float | None = None, *,
          created: datetime = T0) -> dict[str, Any]:
    """A trial's row in the record, as the loop writes it once the trial ended (or while it runs)."""
    name = f"{tuning}-{number:03d}-{number:08x}"
    row: dict[str, Any] = {
        "Number": number, "TrainingJobName": name, "TuningJobName": tuning,
        "TrainingJobArn": f"arn:aws:sagemaker:{REGION}:000000000000:training-job/{name}",
        "CreationTime": (created + timedelta(minutes=number)).isoformat(), "TrainingJobStatus": status,
        "TunedHyperParameters": {"lr": str(0.01 * number)}, "Intermediate": [] if value is None else [value]}
    if status in ("InProgress", "Stopping"):
        row["ObjectiveStatus"] = "Pending"
        return row
    row["TrainingStartTime"] = (created + timedelta(minutes=number, seconds=30)).isoformat()
    row["TrainingEndTime"] = (created + timedelta(minutes=number + 1)).isoformat()
    if value is not None and status != "Failed":
        row["FinalHyperParameterTuningJobObjectiveMetric"] = {"Type": "Minimize", "MetricName": METRIC,
                                                              "Value": value}
        row["ObjectiveStatus"] = "Succeeded"
    else:
        row["ObjectiveStatus"] = "Failed"
    if status == "Failed":
        row["FailureReason"] = "AlgorithmError: the script exited 1"
    return row


def written(name: str, status: str = "Completed", trials: list[dict[str, Any]] | None = None, *,
            created: datetime = T0, pid: int | None = None) -> dict[str, Any]:
    """A tuning job's record written directly, as its create and its loop would have left it."""
    request = tuning_request(name)
    doc: dict[str, Any] = {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobArn": f"arn:aws:sagemaker:{REGION}:000000000000:hyper-parameter-tuning-job/{name}",
        "HyperParameterTuningJobStatus": status, "CreationTime": created.isoformat(),
        "LastModifiedTime": (created + timedelta(hours=1)).isoformat(),
        "Request": {k: v for k, v in request.items() if k != "Tags"}, "Tags": request["Tags"],
        tuning_records.TRIALS: trials or [], "Folder": "/nowhere"}
    if status in service.FINAL:
        doc["HyperParameterTuningEndTime"] = (created + timedelta(hours=1)).isoformat()
        doc["ConsumedResources"] = {"RuntimeInSeconds": 3600}
    if pid is not None:
        doc[tuning_records.DRIVER_PID] = pid
    assert tuning_records.claim(name, doc)
    return doc


def output_problems(operation: str, answer: Mapping[str, Any]) -> list[str]:
    """Where `answer` breaks botocore's output shape of `operation`: an unknown member, a missing
    required one, a wrong type (botocore's validator walks any shape), a value outside an enum."""
    shape = botocore.session.get_session().get_service_model("sagemaker").operation_model(operation).output_shape
    report = ParamValidator().validate(dict(answer), shape)
    found = report.generate_report().splitlines() if report.has_errors() else []
    return found + _enums(answer, shape, "")


def _enums(value: Any, shape: Any, where: str) -> list[str]:
    if shape.type_name == "structure" and isinstance(value, Mapping):
        return [p for k, v in value.items() if k in shape.members for p in _enums(v, shape.members[k], f"{where}.{k}")]
    if shape.type_name == "list" and isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _enums(v, shape.member, f"{where}[{i}]")]
    allowed = getattr(shape, "enum", None)
    return [f"{where}: {value!r} not in {allowed}"] if allowed and value not in allowed else []


# -- CreateHyperParameterTuningJob ---------------------------------------------------------------------


def test_a_valid_create_records_the_tuning_job_and_starts_its_loop(project: Path,
                                                                   spawned: list[tuple[str, Path]]) -> None:
    answer = jobs(project).create(tuning_request("first"))
    assert answer == {"HyperParameterTuningJobArn":
                      f"arn:aws:sagemaker:{REGION}:000000000000:hyper-parameter-tuning-job/first"}
    assert [module for module, _ in spawned] == ["emulator.tuning.loop"]
    doc = tuning_records.read("first")
    assert doc is not None
    assert doc["HyperParameterTuningJobStatus"] == "InProgress"
    assert doc[tuning_records.DRIVER_PID] == os.getpid()
    assert doc[tuning_records.TRIALS] == []


@pytest.mark.parametrize("name", ["-starts-with-a-hyphen", "has_underscore", "dotted.name", "x" * 33, ""])
def test_a_name_the_service_refuses_is_a_validation_exception(project: Path, spawned: list[tuple[str, Path]],
                                                               name: str) -> None:
    refused("ValidationException", jobs(project).create, tuning_request(name))
    assert tuning_records.names() == []
    assert spawned == []


def test_a_request_breaking_the_services_rules_is_a_validation_exception_naming_the_rule(
        project: Path, spawned: list[tuple[str, Path]]) -> None:
    request = tuning_request()
    request["HyperParameterTuningJobConfig"]["ResourceLimits"] = {"MaxNumberOfTrainingJobs": 2,
                                                                  "MaxParallelTrainingJobs": 5}
    message = refused("ValidationException", jobs(project).create, request)
    assert "MaxParallelTrainingJobs" in message
    assert tuning_records.names() == []


def test_a_definition_whose_image_nothing_stands_in_for_is_refused_at_create(
        project: Path, spawned: list[tuple[str, Path]]) -> None:
    request = tuning_request(AlgorithmSpecification={
        "TrainingImage": NOBODYS_IMAGE, "TrainingInputMode": "File",
        "MetricDefinitions": [{"Name": METRIC, "Regex": "loss=([0-9.]+)"}]})
    message = refused("ValidationException", jobs(project).create, request)
    assert "mine" in message
    assert tuning_records.names() == []
    assert spawned == []


def test_a_definition_whose_output_path_is_not_allowed_is_refused_at_create(
        project: Path, spawned: list[tuple[str, Path]]) -> None:
    # Only the code folder is open to requests here (as `serve --allow-host-path` opens folders): the
    # output folder "out" of the project is not.
    tuning = jobs(project, HostPaths.only([project / "code"]))
    message = refused("ValidationException", tuning.create, tuning_request())
    assert "out" in message
    assert tuning_records.names() == []
    assert spawned == []


def test_a_second_create_of_the_same_name_is_resource_in_use(project: Path,
                                                            spawned: list[tuple[str, Path]]) -> None:
    tuning = jobs(project)
    tuning.create(tuning_request("twice"))
    refused("ResourceInUse", tuning.create, tuning_request("twice"))
    assert len(spawned) == 1


def warm(parent: str) -> dict[str, Any]:
    request = tuning_request("child")
    request["WarmStartConfig"] = {"ParentHyperParameterTuningJobs": [{"HyperParameterTuningJobName": parent}],
                                  "WarmStartType": "IdenticalDataAndAlgorithm"}
    return request


def test_a_warm_start_from_a_parent_never_run_here_is_resource_not_found(
        project: Path, spawned: list[tuple[str, Path]]) -> None:
    message = refused("ResourceNotFound", jobs(project).create, warm("never-was"))
    assert "never-was" in message
    assert tuning_records.read("child") is None


def test_a_warm_start_from_a_running_parent_is_a_validation_exception(
        project: Path, spawned: list[tuple[str, Path]]) -> None:
    written("still-going", "InProgress", [trial("still-going", 1, "InProgress")], pid=os.getpid())
    message = refused("ValidationException", jobs(project).create, warm("still-going"))
    assert "still-going" in message
    assert tuning_records.read("child") is None


def test_a_warm_start_from_an_ended_parent_is_created(project: Path, spawned: list[tuple[str, Path]]) -> None:
    written("done", "Completed", [trial("done", 1, "Completed", 0.3)])
    jobs(project).create(warm("done"))
    assert tuning_records.read("child") is not None


def test_a_warm_start_judged_by_another_metric_is_refused(project: Path, spawned: list[tuple[str, Path]]) -> None:
    written("done", "Completed", [trial("done", 1, "Completed", 0.3)])
    request = warm("done")
    request["HyperParameterTuningJobConfig"]["HyperParameterTuningJobObjective"]["MetricName"] = "train:loss"
    request["TrainingJobDefinition"]["AlgorithmSpecification"]["MetricDefinitions"].append(
        {"Name": "train:loss", "Regex": "tl=([0-9.]+)"})
    message = refused("ValidationException", jobs(project).create, request)
    assert f"'{METRIC}'" in message


def test_a_warm_start_with_more_hyperparameters_than_its_parent_is_refused(
        project: Path, spawned: list[tuple[str, Path]]) -> None:
    written("done", "Completed", [trial("done", 1, "Completed", 0.3)])
    request = warm("done")
    request["TrainingJobDefinition"]["StaticHyperParameters"]["epochs"] = "3"  # 3 names, the parent's 2 + lr
    message = refused("ValidationException", jobs(project).create, request)
    assert "as many as the parent's (3, here 4)" in message


def test_a_warm_start_that_changes_a_ranges_kind_is_refused(project: Path, spawned: list[tuple[str, Path]]) -> None:
    written("done", "Completed", [trial("done", 1, "Completed", 0.3)])
    request = warm("done")
    request["HyperParameterTuningJobConfig"]["ParameterRanges"] = {
        "CategoricalParameterRanges": [{"Name": "lr", "Values": ["0.01", "0.1"]}]}
    message = refused("ValidationException", jobs(project).create, request)
    assert "kind cannot change" in message and "lr" in message


def test_identical_data_and_algorithm_needs_the_parents_image_but_transfer_learning_does_not(
        project: Path, spawned: list[tuple[str, Path]]) -> None:
    written("done", "Completed", [trial("done", 1, "Completed", 0.3)])
    other = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:1.11.0-cpu-py38"
    request = warm("done")
    request["TrainingJobDefinition"]["AlgorithmSpecification"]["TrainingImage"] = other
    assert "training image" in refused("ValidationException", jobs(project).create, request)
    request["WarmStartConfig"]["WarmStartType"] = "TransferLearning"
    jobs(project).create(request)
    assert tuning_records.read("child") is not None


def test_an_identical_data_warm_starts_overall_best_may_be_a_parents_trial(project: Path) -> None:
    written("done", "Completed", [trial("done", 1, "Completed", 0.05)])
    child = written("child", "Completed", [trial("child", 1, "Completed", 0.3)])
    request = warm("done")
    tuning_records.update("child", lambda d: d["Request"].update({"WarmStartConfig": request["WarmStartConfig"]}))
    answer = jobs(project).describe({"HyperParameterTuningJobName": "child"})
    assert answer["BestTrainingJob"]["TrainingJobName"] == child[tuning_records.TRIALS][0]["TrainingJobName"]
    assert answer["OverallBestTrainingJob"]["TrainingJobName"] == "done-001-00000001"  # 0.05 < 0.3, minimized
    assert output_problems("DescribeHyperParameterTuningJob", answer) == []


# -- DescribeHyperParameterTuningJob ---------------------------------------------------------------


def test_describing_an_unknown_tuning_job_is_resource_not_found(project: Path) -> None:
    message = refused("ResourceNotFound", jobs(project).describe, {"HyperParameterTuningJobName": "ghost"})
    assert "ghost" in message


def test_a_just_created_tuning_jobs_description_is_botocores_output_shape(
        project: Path, spawned: list[tuple[str, Path]]) -> None:
    tuning = jobs(project)
    tuning.create(tuning_request("fresh"))
    answer = tuning.describe({"HyperParameterTuningJobName": "fresh"})
    assert output_problems("DescribeHyperParameterTuningJob", answer) == []
    assert answer["HyperParameterTuningJobStatus"] == "InProgress"
    assert "BestTrainingJob" not in answer


def test_an_ended_tuning_jobs_description_is_botocores_output_shape_with_its_best_trial(project: Path) -> None:
    trials = [trial("ended", 1, "Completed", 0.7), trial("ended", 2, "Completed", 0.2),
              trial("ended", 3, "Failed"), trial("ended", 4, "Stopped", 0.4), trial("ended", 5, "Completed")]
    written("ended", "Completed", trials)
    answer = jobs(project).describe({"HyperParameterTuningJobName": "ended"})
    assert output_problems("DescribeHyperParameterTuningJob", answer) == []
    assert answer["BestTrainingJob"]["TrainingJobName"] == trials[1]["TrainingJobName"]  # 0.2, minimized
    assert answer["TrainingJobStatusCounters"] == {"Completed": 3, "InProgress": 0, "RetryableError": 0,
                                                   "NonRetryableError": 1, "Stopped": 1}
    assert answer["ObjectiveStatusCounters"] == {"Succeeded": 3, "Pending": 0, "Failed": 2}
    assert answer["TrainingJobDefinition"]["AlgorithmSpecification"]["TrainingImage"] == ECR


# -- ListHyperParameterTuningJobs ------------------------------------------------------------------


@pytest.fixture
def three() -> None:
    """Three tuning jobs: alpha-one (Completed, first), beta-two (Failed, third), alpha-three (Stopped,
    second), created an hour apart."""
    written("alpha-one", "Completed", created=T0)
    written("beta-two", "Failed", created=T0 + timedelta(hours=2))
    written("alpha-three", "Stopped", created=T0 + timedelta(hours=1))


def listed(tuning: TuningJobs, **params: Any) -> list[str]:
    answer = tuning.list(params)
    assert output_problems("ListHyperParameterTuningJobs", answer) == []
    return [row["HyperParameterTuningJobName"] for row in answer["HyperParameterTuningJobSummaries"]]


def test_list_sorts_by_name_creation_time_or_status(project: Path, three: None) -> None:
    tuning = jobs(project)
    assert listed(tuning) == ["alpha-one", "alpha-three", "beta-two"]
    assert listed(tuning, SortBy="Name", SortOrder="Descending") == ["beta-two", "alpha-three", "alpha-one"]
    assert listed(tuning, SortBy="CreationTime") == ["alpha-one", "alpha-three", "beta-two"]
    assert listed(tuning, SortBy="CreationTime", SortOrder="Descending") == ["beta-two", "alpha-three",
                                                                             "alpha-one"]
    assert listed(tuning, SortBy="Status") == ["alpha-one", "beta-two", "alpha-three"]  # Completed, Failed, Stopped


def test_list_filters_by_name_status_and_creation_time(project: Path, three: None) -> None:
    tuning = jobs(project)
    assert listed(tuning, NameContains="ALPHA") == ["alpha-one", "alpha-three"]
    assert listed(tuning, StatusEquals="Failed") == ["beta-two"]
    assert listed(tuning, CreationTimeAfter=T0 + timedelta(minutes=30)) == ["alpha-three", "beta-two"]
    assert listed(tuning, CreationTimeBefore=T0 + timedelta(minutes=90)) == ["alpha-one", "alpha-three"]
    assert listed(tuning, NameContains="alpha", StatusEquals="Failed") == []


def test_list_pages_with_next_token(project: Path, three: None) -> None:
    tuning = jobs(project)
    first = tuning.list({"MaxResults": 2})
    assert [r["HyperParameterTuningJobName"] for r in first["HyperParameterTuningJobSummaries"]] == [
        "alpha-one", "alpha-three"]
    second = tuning.list({"MaxResults": 2, "NextToken": first["NextToken"]})
    assert [r["HyperParameterTuningJobName"] for r in second["HyperParameterTuningJobSummaries"]] == ["beta-two"]
    assert "NextToken" not in second


@pytest.mark.parametrize("token", ["not-a-token", "99", "-1"])
def test_a_next_token_list_never_gave_is_a_validation_exception(project: Path, three: None, token: str) -> None:
    refused("ValidationException", jobs(project).list, {"NextToken": token})


# -- ListTrainingJobsForHyperParameterTuningJob -------------------------------------------------------


def trial_names(tuning: TuningJobs, **params: Any) -> list[str]:
    answer = tuning.list_training_jobs({"HyperParameterTuningJobName": "graded", **params})
    assert output_problems("ListTrainingJobsForHyperParameterTuningJob", answer) == []
    return [row["TrainingJobName"] for row in answer["TrainingJobSummaries"]]


@pytest.fixture
def graded() -> list[str]:
    """A tuning job's trials: 1 Completed 0.7, 2 Failed, 3 Completed 0.2, 4 Stopped 0.5, 5 Completed
    with no objective, 6 running; their names in number order."""
    rows = [trial("graded", 1, "Completed", 0.7), trial("graded", 2, "Failed"), trial("graded", 3, "Completed", 0.2),
            trial("graded", 4, "Stopped", 0.5), trial("graded", 5, "Completed"), trial("graded", 6, "InProgress")]
    written("graded", "InProgress", rows)
    return [r["TrainingJobName"] for r in rows]


def test_trials_sorted_by_objective_leave_out_those_without_one(project: Path, graded: list[str]) -> None:
    tuning = jobs(project)
    assert trial_names(tuning, SortBy="FinalObjectiveMetricValue") == [graded[2], graded[3], graded[0]]
    assert trial_names(tuning, SortBy="FinalObjectiveMetricValue", SortOrder="Descending") == [
        graded[0], graded[3], graded[2]]


def test_trials_filter_by_status_and_sort_by_name(project: Path, graded: list[str]) -> None:
    tuning = jobs(project)
    assert trial_names(tuning) == graded
    assert trial_names(tuning, StatusEquals="Completed") == [graded[0], graded[2], graded[4]]
    assert trial_names(tuning, StatusEquals="InProgress") == [graded[5]]
    assert trial_names(tuning, SortBy="CreationTime", SortOrder="Descending") == graded[::-1]


def test_trials_of_an_unknown_tuning_job_are_resource_not_found(project: Path) -> None:
    refused("ResourceNotFound", jobs(project).list_training_jobs, {"HyperParameterTuningJobName": "ghost"})


# -- StopHyperParameterTuningJob, and a loop that died --------------------------------------------------


@pytest.mark.parametrize("ended", ["Completed", "Failed", "Stopped"])
def test_stopping_an_ended_tuning_job_is_a_validation_exception(project: Path, ended: str) -> None:
    written("over", ended)
    message = refused("ValidationException", jobs(project).stop, {"HyperParameterTuningJobName": "over"})
    assert ended in message
    assert jobs(project).describe({"HyperParameterTuningJobName": "over"})["HyperParameterTuningJobStatus"] == ended


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process standing in for a running loop, ended after the test whatever happened."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_stopping_a_running_tuning_job_marks_it_stopping_and_signals_its_loop(
        project: Path, sleeper: subprocess.Popen[bytes]) -> None:
    written("busy", "InProgress", [trial("busy", 1, "InProgress")], pid=sleeper.pid)
    tuning = jobs(project)
    assert tuning.stop({"HyperParameterTuningJobName": "busy"}) == {}
    assert sleeper.wait(timeout=10) == -signal.SIGTERM
    doc = tuning_records.read("busy")
    assert doc is not None and doc["HyperParameterTuningJobStatus"] == "Stopping"


def test_a_tuning_job_whose_loop_died_reads_as_failed_with_the_loops_last_line(project: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    written("orphan", "InProgress", [trial("orphan", 1, "InProgress")], pid=dead.pid)
    service.loop_log("orphan").write_text("warning: something\nMemoryError: the loop ran out of memory\n\n")
    answer = jobs(project).describe({"HyperParameterTuningJobName": "orphan"})
    assert answer["HyperParameterTuningJobStatus"] == "Failed"
    assert "MemoryError: the loop ran out of memory" in answer["FailureReason"]
    assert "warning: something" not in answer["FailureReason"]


def test_a_stopping_tuning_job_whose_loop_died_reads_as_stopped(project: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    written("halted", "Stopping", pid=dead.pid)
    answer = jobs(project).describe({"HyperParameterTuningJobName": "halted"})
    assert answer["HyperParameterTuningJobStatus"] == "Stopped"
    assert "FailureReason" not in answer


# -- through boto3 ---------------------------------------------------------------------------------


def test_a_boto3_client_of_the_in_process_stub_describes_and_lists_tuning_jobs(tmp_path: Path) -> None:
    trials = [trial("seen", 1, "Completed", 0.6), trial("seen", 2, "Completed", 0.1), trial("seen", 3, "Failed")]
    written("seen", "Completed", trials)
    written("other", "Failed", created=T0 + timedelta(days=1))
    (tmp_path / "s3").mkdir()
    aws = local_aws(s3_root=tmp_path / "s3", images=None, region=REGION, engine="docker", origin="test")
    client = aws.boto_session.client("sagemaker")

    described = client.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="seen")
    assert described["HyperParameterTuningJobStatus"] == "Completed"
    assert described["CreationTime"] == T0  # a datetime, as botocore parses a timestamp
    assert described["BestTrainingJob"]["TrainingJobName"] == trials[1]["TrainingJobName"]
    assert described["BestTrainingJob"]["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] == 0.1
    assert described["TrainingJobStatusCounters"]["NonRetryableError"] == 1
    assert described["ObjectiveStatusCounters"] == {"Succeeded": 2, "Pending": 0, "Failed": 1}

    listed = client.list_hyper_parameter_tuning_jobs(SortBy="CreationTime", SortOrder="Descending")
    summaries = listed["HyperParameterTuningJobSummaries"]
    assert [s["HyperParameterTuningJobName"] for s in summaries] == ["other", "seen"]
    assert summaries[1]["Strategy"] == "Random"
    assert summaries[1]["ResourceLimits"]["MaxNumberOfTrainingJobs"] == 4
    assert isinstance(summaries[0]["CreationTime"], datetime)
    later = client.list_hyper_parameter_tuning_jobs(CreationTimeAfter=T0 + timedelta(hours=1))
    assert [s["HyperParameterTuningJobName"] for s in later["HyperParameterTuningJobSummaries"]] == ["other"]

    ranked = client.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="seen", SortBy="FinalObjectiveMetricValue")["TrainingJobSummaries"]
    assert [t["TrainingJobName"] for t in ranked] == [trials[1]["TrainingJobName"], trials[0]["TrainingJobName"]]
    assert all("Number" not in t and "Intermediate" not in t for t in ranked)

    with pytest.raises(client.exceptions.ResourceNotFound):
        client.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="ghost")
