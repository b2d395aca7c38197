"""Hyperparameter tuning jobs on the real engine (docs/tuning.md): the SDK's own `HyperparameterTuner`,
unchanged, through `EmulatorSession` as AWS's notebooks call it, and a plain boto3 client over
`hetero-emu serve`; each trial a real container whose script prints what it got and an objective
line per epoch, and each test checking what really happened in them (the trials' host logs, their
descriptions, the containers' own clocks), not only what the tuning job says of itself.

Trials are tiny (a few epochs of a fraction of a second): the machine the suite runs on may have 2 cores.
"""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from sagemaker.estimator import Estimator
from sagemaker.exceptions import UnexpectedStatusException
from sagemaker.tuner import (
    CategoricalParameter,
    ContinuousParameter,
    HyperbandStrategyConfig,
    HyperparameterTuner,
    IntegerParameter,
    StrategyConfig,
    WarmStartConfig,
    WarmStartTypes,
)
from serving import running_server
from testkit import unique, wait_for

from emulator.defaults import DEFAULT_IMAGE
from emulator.sagemaker import EmulatorSession

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

ROLE = "arn:aws:iam::111122223333:role/SageMakerRole"
# The trial's script: the toolkit hands it the hyperparameters as `--name value` pairs. It prints
# them, the container's own start and end (time.time()) and an objective line per epoch, whose value
# is set by the tuned hyperparameters: x, lr, optimizer, layers (lower is better).
SCRIPT = textwrap.dedent('''
    import json, sys, time
    print(f"START {time.time()}", flush=True)
    argv = sys.argv[1:]
    args = {k.lstrip("-"): v for k, v in zip(argv[::2], argv[1::2])}
    print("ARGS " + json.dumps(args), flush=True)
    if args.get("fail"):
        sys.exit(1)
    score = (float(args.get("x", 0)) + 10 * float(args.get("lr", 0)) + int(args.get("layers", 0)) / 10
             + (0.5 if args.get("optimizer") == "sgd" else 0.0))
    for epoch in range(int(args.get("epochs", 3))):
        time.sleep(float(args.get("epoch_seconds", 0.2)))
        print(f"epoch={epoch} val_loss={score + 1 / (epoch + 1):.6f}", flush=True)
    print(f"END {time.time()}", flush=True)
''')
METRICS = [{"Name": "val_loss", "Regex": r"val_loss=([0-9.]+)"}]
TAGS = [{"Key": "team", "Value": "tuning-tests"}]


@pytest.fixture
def session(tmp_path: Path) -> EmulatorSession:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(SCRIPT)
    (tmp_path / "s3" / "bucket").mkdir(parents=True)
    return EmulatorSession(s3_root=tmp_path / "s3")


def estimator(session: EmulatorSession, **hyperparameters: Any) -> Estimator:
    return Estimator(image_uri=DEFAULT_IMAGE, entry_point="train.py",
                     source_dir=str(Path(session.s3_root).parent / "code"), role=ROLE, instance_count=1,
                     instance_type="ml.m5.large", sagemaker_session=session, output_path="s3://bucket/out",
                     hyperparameters=hyperparameters)


def tuner_of(est: Estimator, ranges: Mapping[str, Any], **options: Any) -> HyperparameterTuner:
    options.setdefault("base_tuning_job_name", unique("tune")[:20])
    return HyperparameterTuner(est, "val_loss", dict(ranges), metric_definitions=METRICS, objective_type="Minimize",
                               **options)


def trials_of(session: EmulatorSession, name: str) -> list[dict[str, Any]]:
    """The tuning job's trials in the order they were created."""
    return session.sagemaker_client.list_training_jobs_for_hyper_parameter_tuning_job(  # type: ignore[no-any-return]
        HyperParameterTuningJobName=name, SortBy="CreationTime", SortOrder="Ascending",
        MaxResults=100)["TrainingJobSummaries"]


def host_log(session: EmulatorSession, trial: str) -> str:
    """What the trial's host printed (empty before its container has started)."""
    path = Path(session.training.found(trial).job_dir) / "logs" / "algo-1.log"
    return path.read_text() if path.is_file() else ""


def container_args(log: str) -> dict[str, str]:
    lines = [line for line in log.splitlines() if line.startswith("ARGS ")]
    assert len(lines) == 1, log
    return json.loads(lines[0][len("ARGS "):])  # type: ignore[no-any-return]


def epochs_in(log: str) -> list[int]:
    return [int(line.split()[0].split("=")[1]) for line in log.splitlines() if line.startswith("epoch=")]


def stamp(log: str, word: str) -> float:
    return next(float(line.split()[1]) for line in log.splitlines() if line.startswith(word + " "))


def tuning_status(session: EmulatorSession, name: str) -> str:
    return str(session.describe_tuning_job(name)["HyperParameterTuningJobStatus"])


def same_value(tuned: str, got: str) -> bool:
    """Whether the container got the tuned value: the same string, or the same number as the toolkit
    passes it on (it decodes JSON values, so "1e-05" may arrive as "1e-05" or "0.00001")."""
    if tuned == got:
        return True
    try:
        return float(tuned) == pytest.approx(float(got), rel=1e-9)
    except ValueError:
        return False


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals that hold one instant."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = peak = 0
    for _, change in events:  # at a tie an end (-1) sorts before a start: touching is not overlapping
        running += change
        peak = max(peak, running)
    return peak


# -- 1 ---------------------------------------------------------------------------------------------


def test_random_with_a_seed_repeats_its_trials_and_each_container_gets_them(session: EmulatorSession) -> None:
    ranges = {"lr": ContinuousParameter(0.001, 0.1), "optimizer": CategoricalParameter(["sgd", "adam"])}
    tuners = [tuner_of(estimator(session, epochs=2), ranges, strategy="Random", random_seed=7, max_jobs=3,
                       max_parallel_jobs=2, tags=TAGS) for _ in range(2)]
    for tuner in tuners:  # both at once: 4 single-host trials at a time, what 2 cores hold
        tuner.fit(wait=False)
    for tuner in tuners:
        tuner.wait()
    names = [t.latest_tuning_job.name for t in tuners]
    runs = [trials_of(session, name) for name in names]
    assert [len(r) for r in runs] == [3, 3]
    assert [t["TunedHyperParameters"] for t in runs[0]] == [t["TunedHyperParameters"] for t in runs[1]]
    assert len({json.dumps(t["TunedHyperParameters"], sort_keys=True) for t in runs[0]}) == 3  # drawn, not one

    tuner, name = tuners[0], names[0]
    arn = session.describe_tuning_job(name)["HyperParameterTuningJobArn"]
    for trial in runs[0]:
        got = container_args(host_log(session, trial["TrainingJobName"]))
        for key, value in trial["TunedHyperParameters"].items():
            assert same_value(value, got[key]), (key, value, got)
        assert got["epochs"] == "2"
        described = session.describe_training_job(trial["TrainingJobName"])
        assert described["TrainingJobStatus"] == "Completed"
        assert described["TuningJobArn"] == arn
        tags = session.sagemaker_client.list_tags(ResourceArn=described["TrainingJobArn"])["Tags"]
        assert all(tag in tags for tag in TAGS), tags

    frame = tuner.analytics().dataframe()
    assert len(frame) == 3
    best = frame.loc[frame["FinalObjectiveValue"].idxmin(), "TrainingJobName"]
    assert tuner.best_training_job() == best


# -- 2 ---------------------------------------------------------------------------------------------


def test_grid_runs_every_categorical_combination_once(session: EmulatorSession) -> None:
    ranges = {"optimizer": CategoricalParameter(["sgd", "adam"]), "layers": CategoricalParameter(["1", "2"])}
    # max_jobs is the grid's size, as the service requires when it is given. The SDK's docs say to
    # leave it out for Grid, but SDK 2.257 then sends MaxNumberOfTrainingJobs=None, which botocore
    # refuses before any request is made (on AWS as here).
    tuner = tuner_of(estimator(session, epochs=1), ranges, strategy="Grid", max_jobs=4, max_parallel_jobs=2)
    tuner.fit(wait=True)
    trials = trials_of(session, tuner.latest_tuning_job.name)
    combos = sorted((t["TunedHyperParameters"]["optimizer"], t["TunedHyperParameters"]["layers"]) for t in trials)
    assert combos == [("adam", "1"), ("adam", "2"), ("sgd", "1"), ("sgd", "2")]
    for trial in trials:
        got = container_args(host_log(session, trial["TrainingJobName"]))
        assert (got["optimizer"], got["layers"]) == (trial["TunedHyperParameters"]["optimizer"],
                                                     trial["TunedHyperParameters"]["layers"])
    assert tuning_status(session, tuner.latest_tuning_job.name) == "Completed"


# -- 3 ---------------------------------------------------------------------------------------------


def test_bayesian_the_sdks_default_keeps_trials_in_their_ranges(session: EmulatorSession) -> None:
    ranges = {"lr": ContinuousParameter(0.0001, 0.1, scaling_type="Logarithmic"),
              "layers": IntegerParameter(1, 5), "optimizer": CategoricalParameter(["sgd", "adam"])}
    tuner = tuner_of(estimator(session, epochs=2), ranges, max_jobs=4, max_parallel_jobs=2)
    assert tuner.strategy == "Bayesian"
    tuner.fit(wait=True)
    name = tuner.latest_tuning_job.name
    described = session.describe_tuning_job(name)
    assert described["HyperParameterTuningJobStatus"] == "Completed"
    config = described["HyperParameterTuningJobConfig"]
    assert config["Strategy"] == "Bayesian"
    assert config["ParameterRanges"]["ContinuousParameterRanges"][0]["ScalingType"] == "Logarithmic"
    trials = trials_of(session, name)
    assert len(trials) == 4 and all(t["TrainingJobStatus"] == "Completed" for t in trials)
    for trial in trials:
        tuned = trial["TunedHyperParameters"]
        assert 0.0001 <= float(tuned["lr"]) <= 0.1
        assert tuned["layers"].isdigit() and 1 <= int(tuned["layers"]) <= 5, tuned
        assert tuned["optimizer"] in ("sgd", "adam")
        got = container_args(host_log(session, trial["TrainingJobName"]))
        assert got["layers"] == tuned["layers"] and same_value(tuned["lr"], got["lr"])


# -- 4 ---------------------------------------------------------------------------------------------


def test_hyperband_stops_bad_trials_early_and_runs_good_ones_to_max_resource(session: EmulatorSession) -> None:
    # MinResource 2 and MaxResource 5 make one bracket (5 / 2 < the reduction factor 3), whose one
    # rung is epoch 2: there a trial that is not among the best so far stops, with epochs to spare.
    epochs = 5
    # 0.8 s an epoch: a stop decided at epoch 2 reaches the trial well before its own end, however
    # loaded the machine (the loop looks every 0.25 s; the stop then goes through the trial's driver).
    tuner = tuner_of(estimator(session, epochs=epochs, epoch_seconds=0.8), {"x": ContinuousParameter(0, 10)},
                     strategy="Hyperband", max_jobs=6, max_parallel_jobs=2, random_seed=3,
                     strategy_config=StrategyConfig(HyperbandStrategyConfig(max_resource=epochs, min_resource=2)))
    tuner.fit(wait=True)
    name = tuner.latest_tuning_job.name
    assert tuning_status(session, name) == "Completed"
    trials = trials_of(session, name)
    assert len(trials) == 6
    seen = {t["TrainingJobName"]: (t["TrainingJobStatus"], float(t["TunedHyperParameters"]["x"]),
                                   epochs_in(host_log(session, t["TrainingJobName"]))) for t in trials}
    cut = {n: x for n, (status, x, done) in seen.items() if status == "Stopped" and len(done) < epochs}
    assert cut, seen
    assert all(len(done) >= 2 for n, (_, _, done) in seen.items() if n in cut), seen  # not before MinResource
    best = tuner.best_training_job()
    assert seen[best][2] == list(range(epochs)), seen  # the best ran to MaxResource
    assert all(x > seen[best][1] for x in cut.values()), seen  # each one cut was worse than it


# -- 5 ---------------------------------------------------------------------------------------------


def test_early_stopping_auto_stops_trials_worse_than_the_median(session: EmulatorSession) -> None:
    # One trial at a time, each one's objective set by x: RandomSeed 32 draws x = 0.77, 2.14, 3.03,
    # 9.0, 4.96, so the fourth and fifth trials are worse than the median of the trials before them
    # from their first epoch on (and the second and third worse than the first).
    epochs = 6
    # 0.6 s an epoch, for the same reason as Hyperband's 0.8 s: the stop must come before the trial's end.
    tuner = tuner_of(estimator(session, epochs=epochs, epoch_seconds=0.6), {"x": ContinuousParameter(0, 10)},
                     strategy="Random", random_seed=32, max_jobs=5, max_parallel_jobs=1, early_stopping_type="Auto")
    tuner.fit(wait=True)
    name = tuner.latest_tuning_job.name
    described = session.describe_tuning_job(name)
    assert described["HyperParameterTuningJobStatus"] == "Completed"
    assert described["HyperParameterTuningJobConfig"]["TrainingJobEarlyStoppingType"] == "Auto"
    trials = trials_of(session, name)
    seen = [(t["TrainingJobStatus"], float(t["TunedHyperParameters"]["x"]),
             epochs_in(host_log(session, t["TrainingJobName"]))) for t in trials]
    assert [round(x, 2) for _, x, _ in seen] == [0.77, 2.14, 3.03, 9.0, 4.96], seen
    assert seen[0][0] == "Completed" and seen[0][2] == list(range(epochs)), seen  # nothing earlier to compare
    stopped = [(i, x, done) for i, (status, x, done) in enumerate(seen) if status == "Stopped"]
    assert {i for i, _, _ in stopped} >= {3, 4}, seen
    assert all(done and len(done) < epochs for _, _, done in stopped), seen
    assert all(x > min(e[1] for e in seen[:i]) for i, x, _ in stopped), seen  # worse than an earlier one


# -- 6 ---------------------------------------------------------------------------------------------


def test_never_more_trials_at_once_than_max_parallel_jobs(session: EmulatorSession) -> None:
    # Each trial's script runs 4 s: long beside a container's start, so two trials started together
    # overlap even on a loaded machine (a 0.8 s script did not always: CI saw one at a time).
    tuner = tuner_of(estimator(session, epochs=4, epoch_seconds=1.0), {"x": ContinuousParameter(0, 1)},
                     strategy="Random", max_jobs=4, max_parallel_jobs=2)
    tuner.fit(wait=True)
    trials = trials_of(session, tuner.latest_tuning_job.name)
    assert len(trials) == 4
    logs = [host_log(session, t["TrainingJobName"]) for t in trials]
    inside = [(stamp(log, "START"), stamp(log, "END")) for log in logs]
    assert most_at_once(inside) <= 2, inside  # never 3 scripts at once
    described = [session.describe_training_job(t["TrainingJobName"]) for t in trials]
    said = [(d["TrainingStartTime"].timestamp(), d["TrainingEndTime"].timestamp()) for d in described]
    assert most_at_once(said) == 2, said  # 2 trials at once, never 3


# -- 7 ---------------------------------------------------------------------------------------------


def test_a_stop_in_the_middle_ends_every_trial_and_starts_none(session: EmulatorSession) -> None:
    tuner = tuner_of(estimator(session, epochs=100, epoch_seconds=0.2), {"x": ContinuousParameter(0, 1)},
                     strategy="Random", max_jobs=4, max_parallel_jobs=2)
    tuner.fit(wait=False)
    name = tuner.latest_tuning_job.name

    def training() -> bool:
        found = trials_of(session, name)
        return bool(found) and all(
            "epoch=" in host_log(session, t["TrainingJobName"]) for t in found) and len(found) == 2

    wait_for(training, "two trials printing epochs", timeout=120)
    tuner.stop_tuning_job()
    assert tuning_status(session, name) in ("Stopping", "Stopped")
    wait_for(lambda: tuning_status(session, name) == "Stopped", "the tuning job Stopped", timeout=120)
    time.sleep(1)  # a trial the loop would wrongly start after the stop has had time to appear
    trials = trials_of(session, name)
    assert len(trials) == 2, trials
    for trial in trials:
        described = session.describe_training_job(trial["TrainingJobName"])
        assert described["TrainingJobStatus"] in ("Stopped", "Completed")
        assert trial["TrainingJobStatus"] == described["TrainingJobStatus"]
        assert "END " not in host_log(session, trial["TrainingJobName"])  # cut short, not run out
    tuner.wait()  # the SDK takes Stopped as an end, not an error


# -- 8 ---------------------------------------------------------------------------------------------


def test_attach_to_an_ended_tuning_job(session: EmulatorSession) -> None:
    tuner = tuner_of(estimator(session, epochs=1, depth="3"), {"x": ContinuousParameter(0, 1)}, strategy="Random",
                     max_jobs=2, max_parallel_jobs=2)
    tuner.fit(wait=True)
    name = tuner.latest_tuning_job.name
    attached = HyperparameterTuner.attach(name, sagemaker_session=session)
    assert attached.best_training_job() == tuner.best_training_job()
    assert attached.objective_metric_name == "val_loss" and attached.objective_type == "Minimize"
    assert attached.max_jobs == 2 and attached.max_parallel_jobs == 2 and attached.strategy == "Random"
    assert attached.metric_definitions == METRICS
    assert attached.hyperparameter_ranges()["ContinuousParameterRanges"][0]["Name"] == "x"
    rebuilt = attached.estimator
    assert rebuilt.image_uri == DEFAULT_IMAGE and rebuilt.instance_type == "ml.m5.large"
    assert rebuilt.output_path == "s3://bucket/out"
    static = rebuilt.hyperparameters()
    assert static["epochs"] == "1" and static["depth"] == '"3"'  # as the SDK sent them (JSON), not x
    assert static["sagemaker_program"] == '"train.py"' and "x" not in static
    best = attached.best_estimator()
    assert best.latest_training_job.name == tuner.best_training_job()


def test_a_warm_start_learns_from_its_parent_and_names_the_overall_best(session: EmulatorSession) -> None:
    # The SDK's own WarmStartConfig: a Bayesian child of an ended Random parent, same data and image.
    parent = tuner_of(estimator(session, epochs=1), {"x": ContinuousParameter(0, 1)}, strategy="Random",
                      random_seed=5, max_jobs=3, max_parallel_jobs=2)
    parent.fit(wait=True)
    parent_name = parent.latest_tuning_job.name
    warm = WarmStartConfig(WarmStartTypes.IDENTICAL_DATA_AND_ALGORITHM, parents={parent_name})
    child = tuner_of(estimator(session, epochs=1), {"x": ContinuousParameter(0, 1)}, strategy="Bayesian",
                     max_jobs=2, max_parallel_jobs=1, warm_start_config=warm)
    child.fit(wait=True)
    described = session.describe_tuning_job(child.latest_tuning_job.name)
    assert described["HyperParameterTuningJobStatus"] == "Completed"
    assert described["WarmStartConfig"]["ParentHyperParameterTuningJobs"] == [
        {"HyperParameterTuningJobName": parent_name}]
    # The overall best is the least objective of the parent's and the child's trials, worked out here.
    everyone = trials_of(session, parent_name) + trials_of(session, child.latest_tuning_job.name)
    least = min(everyone, key=lambda t: t["FinalHyperParameterTuningJobObjectiveMetric"]["Value"])
    assert described["OverallBestTrainingJob"]["TrainingJobName"] == least["TrainingJobName"]
    # A warm start that changes the objective is refused, as the service refuses it.
    other = HyperparameterTuner(estimator(session, epochs=1), "train_loss", {"x": ContinuousParameter(0, 1)},
                                metric_definitions=[*METRICS, {"Name": "train_loss", "Regex": r"tl=([0-9.]+)"}],
                                objective_type="Minimize", strategy="Bayesian", max_jobs=1,
                                warm_start_config=WarmStartConfig(WarmStartTypes.TRANSFER_LEARNING,
                                                                  parents={parent_name}))
    with pytest.raises(ClientError, match="objective metric"):
        other.fit(wait=False)


# -- 9 ---------------------------------------------------------------------------------------------


def serve_request(name: str, **config: Any) -> dict[str, Any]:
    limits = {"MaxNumberOfTrainingJobs": 2, "MaxParallelTrainingJobs": 2, **config.pop("limits", {})}
    return {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobConfig": {
            "Strategy": "Random", "ResourceLimits": limits,
            "HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": "val_loss"},
            "ParameterRanges": {"ContinuousParameterRanges": [{"Name": "x", "MinValue": "0", "MaxValue": "1"}]}},
        "TrainingJobDefinition": {
            "StaticHyperParameters": {"epochs": "1", "sagemaker_program": '"train.py"',
                                      "sagemaker_submit_directory": '"s3://tuned/code/sourcedir.tar.gz"'},
            "AlgorithmSpecification": {"TrainingImage": DEFAULT_IMAGE, "TrainingInputMode": "File",
                                       "MetricDefinitions": METRICS},
            "RoleArn": ROLE, "OutputDataConfig": {"S3OutputPath": "s3://tuned/output"},
            "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 30},
            "StoppingCondition": {"MaxRuntimeInSeconds": 600}},
    }


def source_archive() -> bytes:
    """The trial's script as the SDK uploads code: a sourcedir.tar.gz."""
    import io
    import tarfile

    source = io.BytesIO()
    with tarfile.open(fileobj=source, mode="w:gz") as tar:
        body = SCRIPT.encode()
        info = tarfile.TarInfo("train.py")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    return source.getvalue()


def put_code(server: Any) -> None:
    s3 = server.client("s3")
    s3.create_bucket(Bucket="tuned", CreateBucketConfiguration={"LocationConstraint": server.region})
    s3.put_object(Bucket="tuned", Key="code/sourcedir.tar.gz", Body=source_archive())


def test_boto3_over_serve_runs_a_hand_written_tuning_job(tmp_path: Path) -> None:
    import botocore.exceptions

    with running_server(tmp_path / "server") as server:
        put_code(server)
        client = server.client("sagemaker")
        name = unique("served")
        arn = client.create_hyper_parameter_tuning_job(**serve_request(name))["HyperParameterTuningJobArn"]
        assert arn.endswith(f":hyper-parameter-tuning-job/{name}")

        def ended() -> bool:
            return client.describe_hyper_parameter_tuning_job(  # type: ignore[no-any-return]
                HyperParameterTuningJobName=name)["HyperParameterTuningJobStatus"] != "InProgress"

        wait_for(ended, "the tuning job's end", timeout=180)
        described = client.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)
        assert described["HyperParameterTuningJobStatus"] == "Completed", described.get("FailureReason")
        assert described["TrainingJobStatusCounters"]["Completed"] == 2
        assert described["BestTrainingJob"]["FinalHyperParameterTuningJobObjectiveMetric"]["MetricName"] == "val_loss"
        listed = client.list_hyper_parameter_tuning_jobs()["HyperParameterTuningJobSummaries"]
        assert [(j["HyperParameterTuningJobName"], j["HyperParameterTuningJobStatus"], j["Strategy"])
                for j in listed] == [(name, "Completed", "Random")]
        trials = client.list_training_jobs_for_hyper_parameter_tuning_job(
            HyperParameterTuningJobName=name)["TrainingJobSummaries"]
        assert len(trials) == 2 and {t["TrainingJobStatus"] for t in trials} == {"Completed"}
        for trial in trials:
            # The trial ran the script: its objective is the script's last val_loss for its x (1 epoch: x + 1).
            value = trial["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]
            assert value == pytest.approx(float(trial["TunedHyperParameters"]["x"]) + 1, abs=1e-5)
            assert client.describe_training_job(TrainingJobName=trial["TrainingJobName"])["TuningJobArn"] == arn

        bad = serve_request(unique("served"), limits={"MaxParallelTrainingJobs": 3})
        with pytest.raises(botocore.exceptions.ClientError) as refused:
            client.create_hyper_parameter_tuning_job(**bad)
        error = refused.value.response["Error"]
        assert error["Code"] == "ValidationException"
        assert "MaxParallelTrainingJobs" in error["Message"], error


def test_serve_stop_jobs_on_exit_stops_its_tuning_jobs_and_their_trials(tmp_path: Path) -> None:
    with running_server(tmp_path / "server", ["--stop-jobs-on-exit"]) as server:
        put_code(server)
        client = server.client("sagemaker")
        name = unique("served")
        request = serve_request(name, limits={"MaxNumberOfTrainingJobs": 4, "MaxParallelTrainingJobs": 1})
        request["TrainingJobDefinition"]["StaticHyperParameters"].update({"epochs": "200", "epoch_seconds": "0.5"})
        client.create_hyper_parameter_tuning_job(**request)

        def a_trial_runs() -> bool:
            rows = client.list_training_jobs_for_hyper_parameter_tuning_job(
                HyperParameterTuningJobName=name)["TrainingJobSummaries"]
            return bool(rows) and "val_loss" in trial_log(server.state_dir, rows[0]["TrainingJobName"])

        wait_for(a_trial_runs, "the first trial's first epoch", timeout=180)
        code, output = server.stop()
        assert code in (0, 130) and "Traceback" not in output, output
    record = server.state_dir / "tuning" / f"{name}.json"
    wait_for(lambda: json.loads(record.read_text())["HyperParameterTuningJobStatus"] == "Stopped",
             "the tuning job stopped", timeout=120)
    rows = json.loads(record.read_text())["Trials"]
    assert [r["TrainingJobStatus"] for r in rows] == ["Stopped"]  # the one trial, and none after it


def trial_log(state_dir: Path, trial: str) -> str:
    """What a trial's host printed, by its record in the server's state folder."""
    found = state_dir / "jobs" / f"{trial}.json"
    if not found.is_file():
        return ""
    log = Path(json.loads(found.read_text())["JobDir"]) / "logs" / "algo-1.log"
    return log.read_text() if log.is_file() else ""


# -- 10 --------------------------------------------------------------------------------------------


def test_when_every_trial_fails_the_tuning_job_fails_after_five(session: EmulatorSession) -> None:
    tuner = tuner_of(estimator(session, fail=1), {"x": ContinuousParameter(0, 1)}, strategy="Random",
                     max_jobs=6, max_parallel_jobs=2)
    with pytest.raises(UnexpectedStatusException) as raised:
        tuner.fit(wait=True)
    name = tuner.latest_tuning_job.name
    described = session.describe_tuning_job(name)
    assert described["HyperParameterTuningJobStatus"] == "Failed"
    assert described["FailureReason"].startswith("No training job succeeded after 5 attempts")
    assert "No training job succeeded after 5 attempts" in str(raised.value)
    trials = trials_of(session, name)
    failed = [t for t in trials if t["TrainingJobStatus"] == "Failed"]
    # The fifth failure ends it: a trial still running then (the sixth, or the fifth when the sixth
    # failed first) is stopped.
    assert len(failed) >= 5 and len(trials) <= 6, trials
    assert all(t["TrainingJobStatus"] == "Stopped" for t in trials if t not in failed), trials
    assert described["TrainingJobStatusCounters"]["NonRetryableError"] == len(failed)
    for trial in failed:  # each ran the script, which failed
        assert "ARGS " in host_log(session, trial["TrainingJobName"])
        reason = session.describe_training_job(trial["TrainingJobName"])["FailureReason"]
        assert reason
        # ListTrainingJobsForHyperParameterTuningJob's row says why, as DescribeTrainingJob does.
        assert trial["FailureReason"] == reason[:1024]


# -- 11 --------------------------------------------------------------------------------------------

# A trial of a framework estimator as AWS's notebooks tune them: PyTorch's own image, torchrun across
# two hosts (the SDK's torch_distributed), managed spot with a checkpoint location. Each rank tells
# the world it saw and the sum of a gloo all_reduce, and leaves a checkpoint naming its trial's lr.
TORCHRUN_SCRIPT = textwrap.dedent('''
    import json, os, sys
    import torch
    import torch.distributed as dist
    argv = sys.argv[1:]
    args = {k.lstrip("-"): v for k, v in zip(argv[::2], argv[1::2])}
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    os.makedirs("/opt/ml/checkpoints", exist_ok=True)
    with open(f"/opt/ml/checkpoints/rank-{rank}.json", "w") as out:
        json.dump({"lr": args["lr"], "world": world, "sum": value.item()}, out)
    if rank == 0:
        print(f"val_loss={float(args['lr']):.6f}", flush=True)
    dist.destroy_process_group()
''')


def test_trials_of_a_framework_image_run_torchrun_on_spot_with_checkpoints_of_their_own(
        session: EmulatorSession, pytorch_image: str) -> None:
    from sagemaker.pytorch import PyTorch

    code = Path(session.s3_root).parent / "code"
    (code / "train.py").write_text(TORCHRUN_SCRIPT)
    est = PyTorch(entry_point="train.py", source_dir=str(code), role=ROLE, framework_version="2.1.0",
                  py_version="py310", instance_count=2, instance_type="ml.g5.xlarge",
                  distribution={"torch_distributed": {"enabled": True}}, use_spot_instances=True,
                  max_run=600, max_wait=1200, checkpoint_s3_uri="s3://bucket/ckpt",
                  output_path="s3://bucket/out", sagemaker_session=session)
    tuner = tuner_of(est, {"lr": ContinuousParameter(0.1, 0.9)}, strategy="Random", max_jobs=2,
                     max_parallel_jobs=1)
    tuner.fit(wait=True)
    name = tuner.latest_tuning_job.name
    assert tuning_status(session, name) == "Completed"
    trials = trials_of(session, name)
    assert len(trials) == 2 and {t["TrainingJobStatus"] for t in trials} == {"Completed"}, trials
    for trial in trials:
        job = trial["TrainingJobName"]
        lr = trial["TunedHyperParameters"]["lr"]
        described = session.describe_training_job(job)
        assert described["AlgorithmSpecification"]["TrainingImage"].endswith("pytorch-training:2.1.0-gpu-py310")
        assert described["EnableManagedSpotTraining"] is True
        assert described["BillableTimeInSeconds"] <= described["TrainingTimeInSeconds"]
        # Each trial's checkpoints under a prefix of its own: no trial resumes from another's.
        assert described["CheckpointConfig"]["S3Uri"] == f"s3://bucket/ckpt/{job}"
        saved = sorted((Path(session.s3_root) / "bucket" / "ckpt" / job).glob("rank-*.json"))
        assert [p.name for p in saved] == ["rank-0.json", "rank-1.json"], saved
        for path in saved:  # both hosts' ranks in one world of 2, each with this trial's lr
            seen = json.loads(path.read_text())
            assert seen["world"] == 2 and seen["sum"] == 3.0 and same_value(lr, seen["lr"]), seen
        objective = trial["FinalHyperParameterTuningJobObjectiveMetric"]
        assert objective["MetricName"] == "val_loss"
        assert objective["Value"] == pytest.approx(float(lr), abs=1e-6)
