"""The tuning job's loop (emulator/tuning/loop.py) run in the test's process against a fake
`TrainingJobs` (tests/support/fake_training.py) whose trials follow scripted lives: how many trials
run at once and in all, what each trial's CreateTrainingJob gets, the objective each trial ends with
and the best of them, early stopping and Hyperband's MaxResource stopping trials while they run, and
each way a tuning job ends (its limits, its completion criteria, its first trials all failing, a
StopHyperParameterTuningJob, a trial that cannot be created).

The expected values are worked out from the scripted lives and the service's documented rules, not
read from the loop."""

from __future__ import annotations

import copy
import itertools
import re
import threading
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from fake_training import FakeTraining, Life, Script, lasting
from testkit import wait_for

from emulator.errors import ApiError
from emulator.jobs.service import TrainingJobs
from emulator.result import Status
from emulator.state import tuning_records
from emulator.tuning import loop, trials
from emulator.tuning.loop import Tuner, parallel_here
from emulator.tuning.service import description

REGION = "us-west-2"
METRIC = "validation:loss"
ROLE = "arn:aws:iam::111122223333:role/tuning"
IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.1.0-cpu-py310"
TAGS = [{"Key": "team", "Value": "vision"}, {"Key": "cost-center", "Value": "42"}]


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(loop, "LOOK_SECONDS", 0.005)


def arn(name: str) -> str:
    return f"arn:aws:sagemaker:{REGION}:000000000000:hyper-parameter-tuning-job/{name}"


def tuning_request(name: str = "tune", *, most: int | None = 4, parallel: int = 2, objective: str = "Minimize",
                   strategy: str = "Random", early: str = "Off", hosts: int = 1,
                   ranges: Mapping[str, Any] | None = None, static: Mapping[str, str] | None = None,
                   **config: Any) -> dict[str, Any]:
    """A CreateHyperParameterTuningJob request of one definition."""
    limits: dict[str, Any] = {"MaxParallelTrainingJobs": parallel}
    if most is not None:
        limits["MaxNumberOfTrainingJobs"] = most
    return {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobConfig": {
            "Strategy": strategy, "RandomSeed": 7, "TrainingJobEarlyStoppingType": early,
            "HyperParameterTuningJobObjective": {"Type": objective, "MetricName": METRIC},
            "ResourceLimits": limits,
            "ParameterRanges": dict(ranges) if ranges is not None else {
                "ContinuousParameterRanges": [{"Name": "lr", "MinValue": "0.001", "MaxValue": "0.1"}],
                "IntegerParameterRanges": [{"Name": "batch", "MinValue": "16", "MaxValue": "128"}]},
            **config},
        "TrainingJobDefinition": {
            "AlgorithmSpecification": {"TrainingImage": IMAGE, "TrainingInputMode": "File",
                                       "MetricDefinitions": [{"Name": METRIC, "Regex": "loss=([0-9.]+)"}]},
            "StaticHyperParameters": dict(static) if static is not None else {"optimizer": "sgd"},
            "RoleArn": ROLE,
            "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
            "ResourceConfig": {"InstanceType": "ml.c5.xlarge", "InstanceCount": hosts, "VolumeSizeInGB": 30},
            "StoppingCondition": {"MaxRuntimeInSeconds": 3600}},
        "Tags": copy.deepcopy(TAGS),
    }


def claim(request: Mapping[str, Any]) -> None:
    """The tuning job's first record, as CreateHyperParameterTuningJob writes it before its loop starts."""
    name = str(request["HyperParameterTuningJobName"])
    now = datetime.now(timezone.utc).isoformat()
    assert tuning_records.claim(name, {
        "HyperParameterTuningJobName": name, "HyperParameterTuningJobArn": arn(name),
        "HyperParameterTuningJobStatus": "InProgress", "CreationTime": now, "LastModifiedTime": now,
        "Request": {k: v for k, v in request.items() if k != "Tags"}, "Tags": request.get("Tags") or [],
        tuning_records.TRIALS: []})


def fake(tmp_path: Path, script: Script, **kwargs: Any) -> FakeTraining:
    return FakeTraining(tmp_path / "jobs", METRIC, script, region=REGION, **kwargs)


def tuner(request: Mapping[str, Any], training: FakeTraining, **kwargs: Any) -> Tuner:
    """The tuning job's Tuner, on a machine of 16 cores unless `cores` says otherwise (so that only
    the tests of the machine's limit meet it)."""
    claim(request)
    kwargs.setdefault("cores", 16)
    return Tuner(request, cast(TrainingJobs, training), **kwargs)


def tune(request: Mapping[str, Any], training: FakeTraining, **kwargs: Any) -> str:
    """Run the tuning job to its end; its final status."""
    return tuner(request, training, **kwargs).run()


def record(name: str = "tune") -> dict[str, Any]:
    found = tuning_records.read(name)
    assert found is not None
    return found


def rows(name: str = "tune") -> dict[str, dict[str, Any]]:
    """The record's trials by training job name."""
    return {row["TrainingJobName"]: row for row in record(name)[tuning_records.TRIALS]}


class InBackground:
    """A tuner's `run` in a thread of the test, so that the test acts while it runs."""

    def __init__(self, running: Tuner) -> None:
        self.tuner = running
        self.status: str | None = None
        self.thread = threading.Thread(target=self._run, name="tuner", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.status = self.tuner.run()

    def ended(self, timeout: float = 10) -> str:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), \
            f"the tuning loop did not end: {self.tuner.finish}, running {sorted(self.tuner.running)}"
        assert self.status is not None
        return self.status


def short(number: int, hyperparameters: Mapping[str, str]) -> Life:
    return Life((1.0 / number, 0.5 / number))


# -- how many trials, how many at once ------------------------------------------------------------


def test_never_more_trials_run_at_once_than_max_parallel_and_max_number_are_made(tmp_path: Path) -> None:
    # Lives of different lengths, so that trials end out of order and the loop refills as they do.
    training = fake(tmp_path, lambda n, _: Life((0.5,) * (1 + (n * 7) % 5)))
    assert tune(tuning_request(most=9, parallel=3), training) == "Completed"
    assert len(training.trials) == 9
    assert training.most_at_once == 3
    assert "Notes" not in record()


def test_max_parallel_given_runs_one_trial_at_a_time_and_notes_why(tmp_path: Path) -> None:
    training = fake(tmp_path, lambda n, _: Life((0.5, 0.4, 0.3)))
    assert tune(tuning_request(most=4, parallel=3), training, max_parallel=1) == "Completed"
    assert len(training.trials) == 4
    assert training.most_at_once == 1
    (note,) = record()["Notes"]
    assert "MaxParallelTrainingJobs is 3" in note
    assert "max_parallel" in note


def test_a_one_core_machine_runs_one_four_host_trial_at_a_time(tmp_path: Path) -> None:
    # Two hosts per core: one core holds two hosts, less than one trial of four; at least one runs.
    training = fake(tmp_path, lambda n, _: Life((0.5, 0.4)))
    assert tune(tuning_request(most=3, parallel=3, hosts=4), training, cores=1) == "Completed"
    assert len(training.trials) == 3
    assert training.most_at_once == 1
    (note,) = record()["Notes"]
    assert "MaxParallelTrainingJobs is 3" in note


def test_parallel_here_is_what_the_machines_cores_hold() -> None:
    count, note = parallel_here(8, 4, None, 1)  # one core: two hosts, less than one 4-host trial
    assert count == 1 and note is not None and "MaxParallelTrainingJobs is 8" in note
    count, note = parallel_here(8, 2, None, 4)  # four cores: eight hosts, four 2-host trials
    assert count == 4 and note is not None
    assert parallel_here(3, 1, None, 4) == (3, None)  # three 1-host trials fit in eight hosts
    count, note = parallel_here(3, 16, 2, 1)  # the caller's own limit, whatever the cores
    assert count == 2 and note is not None and "max_parallel" in note
    assert parallel_here(2, 16, 5, 1) == (2, None)  # a caller's limit above the request's changes nothing


# -- what each trial's CreateTrainingJob gets ------------------------------------------------------


def test_trials_are_named_and_numbered_as_the_service_names_them_in_creation_order(tmp_path: Path) -> None:
    training = fake(tmp_path, short)
    tune(tuning_request("nightly-run", most=5, parallel=2), training)
    names = [p["TrainingJobName"] for p in training.created()]
    pattern = re.compile(r"^nightly-run-(\d{3})-[0-9a-f]{8}$")
    assert all(pattern.match(n) for n in names), names
    assert [int(pattern.match(n).group(1)) for n in names] == [1, 2, 3, 4, 5]  # type: ignore[union-attr]
    assert len({n.rsplit("-", 1)[1] for n in names}) == 5  # a token of its own each
    assert sorted(rows("nightly-run")) == sorted(names)
    assert {row["Number"] for row in rows("nightly-run").values()} == {1, 2, 3, 4, 5}


def test_each_trial_gets_the_tuning_jobs_arn_and_tags_and_static_with_tuned_hyperparameters(
        tmp_path: Path) -> None:
    training = fake(tmp_path, short)
    tune(tuning_request(most=3, static={"optimizer": "adam", "epochs": "4"}), training)
    assert {t.tuning_job_arn for t in training.trials.values()} == {arn("tune")}
    for params in training.created():
        assert params["Tags"] == TAGS
        hyper = params["HyperParameters"]
        # The service adds the objective's name to every trial's hyperparameters (the toolkit keeps it
        # from the script's arguments; HyperparameterTuner.attach reads it back).
        assert set(hyper) == {"optimizer", "epochs", "lr", "batch", "_tuning_objective_metric"}
        assert hyper["_tuning_objective_metric"] == METRIC
        assert (hyper["optimizer"], hyper["epochs"]) == ("adam", "4")
        assert 0.001 <= float(hyper["lr"]) <= 0.1
        assert 16 <= int(hyper["batch"]) <= 128
        tuned = rows()[params["TrainingJobName"]]["TunedHyperParameters"]
        assert tuned == {"lr": hyper["lr"], "batch": hyper["batch"]}
        assert params["AlgorithmSpecification"]["TrainingImage"] == IMAGE
        assert params["RoleArn"] == ROLE


def test_a_checkpoint_s3_uri_gets_a_prefix_of_each_trials_own(tmp_path: Path) -> None:
    training = fake(tmp_path, short)
    request = tuning_request(most=3)
    request["TrainingJobDefinition"]["CheckpointConfig"] = {"S3Uri": "s3://bucket/checkpoints/",
                                                            "LocalPath": "/opt/ml/checkpoints"}
    tune(request, training)
    uris = [p["CheckpointConfig"]["S3Uri"] for p in training.created()]
    assert len(set(uris)) == 3
    for params, uri in zip(training.created(), uris, strict=True):
        assert uri.startswith("s3://bucket/checkpoints/")
        assert params["TrainingJobName"] in uri
        assert params["CheckpointConfig"]["LocalPath"] == "/opt/ml/checkpoints"


# -- the objective ----------------------------------------------------------------------------------

# Trial 1 reports 0.9, 0.1, 0.5 (last 0.5); trial 2 0.2, 0.8 (last 0.8); trial 3 0.4; trial 4 completes
# without reporting the metric; trial 5 reports 0.05 and fails. Final objectives are the last values
# of the trials that ended Completed: 0.5, 0.8, 0.4. The best intermediate values (0.1 and 0.9) and
# the failed trial's 0.05 must not count.
LIVES = {1: Life((0.9, 0.1, 0.5)), 2: Life((0.2, 0.8)), 3: Life((0.4,)), 4: Life(()),
         5: Life((0.05,), Status.FAILED)}


@pytest.mark.parametrize(("objective", "best_number", "best_value"), [("Minimize", 3, 0.4), ("Maximize", 2, 0.8)])
def test_the_objective_is_each_trials_last_value_and_the_best_is_by_the_objectives_type(
        tmp_path: Path, objective: str, best_number: int, best_value: float) -> None:
    training = fake(tmp_path, lambda n, _: LIVES[n])
    assert tune(tuning_request(most=5, parallel=2, objective=objective), training) == "Completed"
    by_number = {row["Number"]: row for row in rows().values()}
    finals = {n: (row.get("FinalHyperParameterTuningJobObjectiveMetric") or {}).get("Value")
              for n, row in by_number.items()}
    assert finals == {1: 0.5, 2: 0.8, 3: 0.4, 4: None, 5: None}
    assert by_number[1]["FinalHyperParameterTuningJobObjectiveMetric"] == {
        "Type": objective, "MetricName": METRIC, "Value": 0.5}
    assert {n: row["ObjectiveStatus"] for n, row in by_number.items()} == {
        1: "Succeeded", 2: "Succeeded", 3: "Succeeded", 4: "Failed", 5: "Failed"}
    assert {n: row["TrainingJobStatus"] for n, row in by_number.items()} == {
        1: "Completed", 2: "Completed", 3: "Completed", 4: "Completed", 5: "Failed"}
    assert by_number[5]["FailureReason"] == LIVES[5].reason

    described = description(record())
    best = described["BestTrainingJob"]
    assert best["TrainingJobName"] == by_number[best_number]["TrainingJobName"]
    assert best["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] == best_value
    assert described["TrainingJobStatusCounters"] == {"Completed": 4, "InProgress": 0, "RetryableError": 0,
                                                      "NonRetryableError": 1, "Stopped": 0}
    assert described["ObjectiveStatusCounters"] == {"Succeeded": 3, "Pending": 0, "Failed": 2}
    assert described["HyperParameterTuningJobStatus"] == "Completed"


# -- stopping trials while they run -------------------------------------------------------------------

EPOCHS = 12


def good(number: int, hyperparameters: Mapping[str, str]) -> Life:
    """A loss falling from 1.0 by 0.05 an epoch, the same for every trial but the fourth, whose loss
    is 50 at every epoch: far worse than every earlier trial at the same epoch."""
    if number == 4:
        return Life((50.0,) * EPOCHS)
    return Life(tuple(1.0 - 0.05 * epoch for epoch in range(EPOCHS)))


def test_early_stopping_auto_stops_a_trial_far_worse_than_the_earlier_ones_while_it_runs(tmp_path: Path) -> None:
    training = fake(tmp_path, good)
    assert tune(tuning_request(most=4, parallel=1, early="Auto"), training) == "Completed"
    fourth = training.created()[3]["TrainingJobName"]
    (stop,) = training.stops
    assert stop.name == fourth
    assert stop.was_running
    assert stop.reported < EPOCHS
    assert training.status(fourth) == Status.STOPPED
    assert rows()[fourth]["TrainingJobStatus"] == "Stopped"


def test_with_early_stopping_off_no_trial_is_stopped(tmp_path: Path) -> None:
    training = fake(tmp_path, good)
    assert tune(tuning_request(most=4, parallel=1, early="Off"), training) == "Completed"
    assert training.stops == []
    assert {row["TrainingJobStatus"] for row in rows().values()} == {"Completed"}
    assert len(training.trials) == 4


def test_hyperband_stops_a_trial_once_it_reports_max_resource_values(tmp_path: Path) -> None:
    training = fake(tmp_path, lambda n, _: Life((0.5,) * 10))
    request = tuning_request(most=2, parallel=2, strategy="Hyperband",
                             StrategyConfig={"HyperbandStrategyConfig": {"MinResource": 1, "MaxResource": 3}})
    assert tune(request, training) == "Completed"
    assert sorted(training.stopped_names()) == sorted(training.trials)
    for stop in training.stops:
        assert stop.was_running
        assert stop.reported <= 3
    assert {training.status(n) for n in training.trials} == {Status.STOPPED}


def test_a_hyperband_trial_whose_own_epochs_are_max_resource_ends_completed_not_stopped(tmp_path: Path) -> None:
    # Equal values: no pruner stops them before MaxResource; at MaxResource they end by themselves.
    training = fake(tmp_path, lambda n, _: Life((0.5,) * 3))
    request = tuning_request(most=2, parallel=2, strategy="Hyperband", static={"epochs": "3"},
                             StrategyConfig={"HyperbandStrategyConfig": {"MinResource": 1, "MaxResource": 3}})
    assert tune(request, training) == "Completed"
    assert training.stops == []
    assert {training.status(n) for n in training.trials} == {Status.COMPLETED}


# -- how a tuning job ends ----------------------------------------------------------------------------


def test_the_first_five_trials_all_failing_fail_the_tuning_job_and_start_no_sixth(tmp_path: Path) -> None:
    training = fake(tmp_path, lambda n, _: Life((), Status.FAILED))
    assert tune(tuning_request(most=10, parallel=1), training) == "Failed"
    assert len(training.trials) == 5
    assert record()["HyperParameterTuningJobStatus"] == "Failed"
    assert record()["FailureReason"] == trials.ALL_FAILED
    assert description(record())["TrainingJobStatusCounters"]["NonRetryableError"] == 5


def test_one_success_among_the_first_five_keeps_the_tuning_job_going(tmp_path: Path) -> None:
    training = fake(tmp_path, lambda n, _: Life((0.3,)) if n == 4 else Life((), Status.FAILED))
    assert tune(tuning_request(most=7, parallel=1), training) == "Completed"
    assert len(training.trials) == 7


def ask_stop(running: Tuner) -> None:
    running.ask_stop()


def stopping_record(running: Tuner) -> None:
    """What StopHyperParameterTuningJob writes (emulator/tuning/service.py, `stop`)."""
    tuning_records.update(running.name, lambda d: d.update({"HyperParameterTuningJobStatus": "Stopping"}))


@pytest.mark.parametrize("stop", [ask_stop, stopping_record], ids=["ask_stop", "record-stopping"])
def test_stopping_the_tuning_job_stops_every_running_trial_and_starts_none(
        tmp_path: Path, stop: Any) -> None:
    training = fake(tmp_path, lambda n, _: lasting())
    running = tuner(tuning_request(most=6, parallel=2), training)
    background = InBackground(running)
    wait_for(lambda: len(training.running()) == 2, "two trials running")
    stop(running)
    assert background.ended() == "Stopped"
    assert len(training.trials) == 2
    assert sorted(training.stopped_names()) == sorted(training.trials)
    assert all(s.was_running for s in training.stops)
    assert record()["HyperParameterTuningJobStatus"] == "Stopped"
    assert {row["TrainingJobStatus"] for row in rows().values()} == {"Stopped"}


def test_max_runtime_passed_stops_the_running_trials_and_completes_the_tuning_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(loop, "time", SimpleNamespace(monotonic=lambda: now[0], sleep=time.sleep))
    training = fake(tmp_path, lambda n, _: lasting())
    running = tuner(tuning_request(most=6, parallel=2, ResourceLimits={
        "MaxNumberOfTrainingJobs": 6, "MaxParallelTrainingJobs": 2, "MaxRuntimeInSeconds": 600}), training)
    background = InBackground(running)
    wait_for(lambda: len(training.running()) == 2, "two trials running")
    assert training.stops == []
    now[0] += 601
    assert background.ended() == "Completed"
    assert len(training.trials) == 2
    assert sorted(training.stopped_names()) == sorted(training.trials)
    assert "MaxRuntimeInSeconds" in record()["StatusMessage"]
    assert record()["HyperParameterTuningJobStatus"] == "Completed"


def test_the_target_objective_reached_completes_the_tuning_job_early(tmp_path: Path) -> None:
    # Minimize with target 0.5: trial 1 ends at 0.9, trial 2 at 0.3, which reaches it.
    training = fake(tmp_path, lambda n, _: Life((1.0, 0.9)) if n == 1 else Life((0.6, 0.3)))
    request = tuning_request(most=10, parallel=1,
                             TuningJobCompletionCriteria={"TargetObjectiveMetricValue": 0.5})
    assert tune(request, training) == "Completed"
    assert len(training.trials) == 2
    assert record()["HyperParameterTuningJobStatus"] == "Completed"


def test_a_trial_that_cannot_be_created_fails_the_tuning_job_naming_it(tmp_path: Path) -> None:
    def refuse(number: int, params: Mapping[str, Any]) -> ApiError | None:
        return ApiError("ValidationException", "the image is gone") if number == 2 else None

    training = fake(tmp_path, lambda n, _: Life((0.5, 0.4)), refuse=refuse)
    assert tune(tuning_request(most=4, parallel=1), training) == "Failed"
    (first,) = training.trials
    reason = record()["FailureReason"]
    assert re.search(r"tune-002-[0-9a-f]{8}", reason), reason
    assert "the image is gone" in reason
    assert first not in reason
    assert record()["HyperParameterTuningJobStatus"] == "Failed"


def test_a_trial_that_cannot_be_created_stops_the_trials_still_running(tmp_path: Path) -> None:
    def refuse(number: int, params: Mapping[str, Any]) -> ApiError | None:
        return ApiError("ValidationException", "the output folder is taken") if number == 3 else None

    training = fake(tmp_path, lambda n, _: lasting(), refuse=refuse)
    running = tuner(tuning_request(most=4, parallel=3), training, max_parallel=3)
    assert InBackground(running).ended() == "Failed"
    assert len(training.trials) == 2
    assert sorted(training.stopped_names()) == sorted(training.trials)
    assert "the output folder is taken" in record()["FailureReason"]


def test_grid_runs_every_combination_once_without_max_number_of_training_jobs(tmp_path: Path) -> None:
    ranges = {"CategoricalParameterRanges": [{"Name": "optimizer", "Values": ["sgd", "adam"]},
                                             {"Name": "depth", "Values": ["2", "4", "8"]}]}
    training = fake(tmp_path, short)
    request = tuning_request(most=None, parallel=2, strategy="Grid", ranges=ranges, static={"epochs": "3"})
    assert tune(request, training) == "Completed"
    combinations = [(p["HyperParameters"]["optimizer"], p["HyperParameters"]["depth"]) for p in training.created()]
    assert sorted(combinations) == sorted(itertools.product(["sgd", "adam"], ["2", "4", "8"]))
    assert training.most_at_once <= 2


def test_a_grid_whose_every_trial_failed_fails_though_it_ran_fewer_than_five(tmp_path: Path) -> None:
    # Two combinations, both failing: every trial the tuning job runs failed, as with
    # MaxNumberOfTrainingJobs 2 (the first trials "or all of them, if it runs fewer").
    ranges = {"CategoricalParameterRanges": [{"Name": "optimizer", "Values": ["sgd", "adam"]}]}
    training = fake(tmp_path, lambda n, _: Life((), Status.FAILED))
    request = tuning_request(most=None, parallel=2, strategy="Grid", ranges=ranges, static={"epochs": "3"})
    assert tune(request, training) == "Failed"
    assert len(training.trials) == 2
    assert record()["FailureReason"] == trials.ALL_FAILED


def test_max_number_of_training_jobs_below_five_all_failing_fails_the_tuning_job(tmp_path: Path) -> None:
    training = fake(tmp_path, lambda n, _: Life((), Status.FAILED))
    assert tune(tuning_request(most=2, parallel=1), training) == "Failed"
    assert len(training.trials) == 2
    assert record()["FailureReason"] == trials.ALL_FAILED
