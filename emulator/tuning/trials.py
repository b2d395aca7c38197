"""A tuning job's trials as the service shows them, pure: the CreateTrainingJob request a trial is
made from (its definition, its tuned hyperparameters), the trial's objective from its metrics, and the
answers' counters and summaries (DescribeHyperParameterTuningJob, ListTrainingJobsForHyperParameterTuningJob).

Each rule names the page that states it: API_* pages are the API reference's
(https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_*.html).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from emulator.jobspec.metric_definitions import Sample
from emulator.tuning.stopping import best_trial
from emulator.tuning.strategies import TrialResult

# The members of a HyperParameterTrainingJobDefinition a trial's CreateTrainingJob takes as they are
# (API_HyperParameterTrainingJobDefinition beside API_CreateTrainingJob).
COPIED = ("RoleArn", "InputDataConfig", "VpcConfig", "OutputDataConfig", "StoppingCondition",
          "EnableNetworkIsolation", "EnableInterContainerTrafficEncryption", "EnableManagedSpotTraining",
          "CheckpointConfig", "RetryStrategy", "Environment")
# What a trial's TrainingJobStatusCounters member is, by its status; a Failed trial is a
# NonRetryableError (a client error: the script failed) unless its failure was the platform's
# (`retryable`). API_TrainingJobStatusCounters.
COUNTED = {"Completed": "Completed", "InProgress": "InProgress", "Stopping": "InProgress", "Stopped": "Stopped"}
# The service's FailureReason when the first trials all failed (its words, as users met them:
# https://github.com/aws/amazon-sagemaker-examples/issues/2437).
FIRST_ATTEMPTS = 5
# The hyperparameter the service adds to every trial, naming the objective metric; the definitions'
# StaticHyperParameters carry it too as DescribeHyperParameterTuningJob answers them (the SDK's
# HyperparameterTuner.attach deletes it from there unconditionally; the training toolkit keeps it out
# of the script's arguments: sagemaker_training/params.py, TUNING_METRIC_PARAM).
TUNING_METRIC = "_tuning_objective_metric"
ALL_FAILED = (f"No training job succeeded after {FIRST_ATTEMPTS} attempts. Please take a look at the training job "
              "failures to get more details.")


def definitions(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The request's training job definitions: TrainingJobDefinitions, or TrainingJobDefinition alone."""
    several = request.get("TrainingJobDefinitions")
    if isinstance(several, list) and several:
        return [dict(d) for d in several]
    return [dict(request.get("TrainingJobDefinition") or {})]


def objective_of(request: Mapping[str, Any], definition: Mapping[str, Any]) -> tuple[str, str]:
    """The (MetricName, Type) a definition's trials are judged by: its TuningObjective, else the
    config's HyperParameterTuningJobObjective."""
    given = definition.get("TuningObjective") or \
        (request.get("HyperParameterTuningJobConfig") or {}).get("HyperParameterTuningJobObjective") or {}
    return str(given.get("MetricName", "")), str(given.get("Type", "Maximize"))


def config_for(request: Mapping[str, Any], definition: Mapping[str, Any]) -> dict[str, Any]:
    """The HyperParameterTuningJobConfig a definition's strategy works by: the request's, with the
    definition's own TuningObjective, if it has one, as its objective (several definitions each have
    their own: API_HyperParameterTrainingJobDefinition, TuningObjective)."""
    config = dict(request.get("HyperParameterTuningJobConfig") or {})
    if isinstance(definition.get("TuningObjective"), Mapping):
        config["HyperParameterTuningJobObjective"] = dict(definition["TuningObjective"])
    return config


def ranges_of(request: Mapping[str, Any], definition: Mapping[str, Any]) -> Mapping[str, Any]:
    """A definition's ParameterRanges: its HyperParameterRanges, else the config's ParameterRanges."""
    return definition.get("HyperParameterRanges") or \
        (request.get("HyperParameterTuningJobConfig") or {}).get("ParameterRanges") or {}


def trial_request(definition: Mapping[str, Any], tuned: Mapping[str, str], name: str,
                  tags: Sequence[Mapping[str, Any]], metric: str | None = None) -> dict[str, Any]:
    """The CreateTrainingJob request of the trial `name`: the definition's members, its static
    hyperparameters with the tuned ones and `TUNING_METRIC` (the objective `metric`) over them, and
    the tuning job's tags (API_CreateHyperParameterTuningJob,
    Tags: "Tags that you specify for the tuning job are also added to all training jobs that the
    tuning job launches")."""
    algorithm = dict(definition.get("AlgorithmSpecification") or {})
    # AlgorithmName names an algorithm resource or a Marketplace algorithm: the training job's own
    # AlgorithmSpecification takes it as it is (no such resource is emulated: its create says so).
    spec = {k: algorithm[k] for k in ("TrainingImage", "AlgorithmName", "TrainingInputMode", "MetricDefinitions")
            if k in algorithm}
    params: dict[str, Any] = {"TrainingJobName": name, "AlgorithmSpecification": spec,
                              "HyperParameters": {**(definition.get("StaticHyperParameters") or {}), **tuned,
                                                  **({TUNING_METRIC: metric} if metric else {})}}
    for key in COPIED:
        if key in definition:
            params[key] = definition[key]
    params["ResourceConfig"] = resource_config(definition)
    checkpoint = params.get("CheckpointConfig")
    if isinstance(checkpoint, Mapping) and isinstance(checkpoint.get("S3Uri"), str):
        # Trials run at once: each resumes from and writes to a prefix of its own under the definition's,
        # or one trial would resume from another's checkpoints. Ours: the service does not document it.
        params["CheckpointConfig"] = {**checkpoint, "S3Uri": checkpoint["S3Uri"].rstrip("/") + "/" + name}
    if tags:
        params["Tags"] = [dict(t) for t in tags]
    return params


def described_definition(request: Mapping[str, Any], definition: Mapping[str, Any]) -> dict[str, Any]:
    """The definition as DescribeHyperParameterTuningJob answers it, which is not quite as it was asked
    (as Terraform's provider met the service: hashicorp/terraform-provider-aws,
    internal/service/sagemaker/hyper_parameter_tuning_job.go, its normalize* functions):
    `TUNING_METRIC` among its StaticHyperParameters; and a HyperParameterTuningResourceConfig of
    one instance type (what SDK v2 always sends) answered as the ResourceConfig its trials got,
    which the SDK's HyperparameterTuner.attach reads. One with InstanceConfigs stays as asked."""
    out = {**definition, "StaticHyperParameters": {**(definition.get("StaticHyperParameters") or {}),
                                                   TUNING_METRIC: objective_of(request, definition)[0]}}
    tuning = definition.get("HyperParameterTuningResourceConfig")
    if not definition.get("ResourceConfig") and isinstance(tuning, Mapping) and not tuning.get("InstanceConfigs"):
        del out["HyperParameterTuningResourceConfig"]
        out["ResourceConfig"] = resource_config(definition)
    return out


def resource_config(definition: Mapping[str, Any]) -> dict[str, Any]:
    """The trial's ResourceConfig: the definition's, else its HyperParameterTuningResourceConfig
    (API_HyperParameterTuningResourceConfig), whose InstanceConfigs are instance types the service
    may choose among: here the first one, always (this machine runs any type the same)."""
    given = definition.get("ResourceConfig")
    if isinstance(given, Mapping) and given:
        return dict(given)
    tuning = definition.get("HyperParameterTuningResourceConfig") or {}
    configs = tuning.get("InstanceConfigs") or []
    first = configs[0] if configs else tuning
    out = {k: first[k] for k in ("InstanceType", "InstanceCount", "VolumeSizeInGB") if k in first}
    if "VolumeKmsKeyId" in tuning:
        out["VolumeKmsKeyId"] = tuning["VolumeKmsKeyId"]
    out.setdefault("VolumeSizeInGB", 30)
    return out


def objective_values(samples: Sequence[Sample], metric: str) -> list[float]:
    """The objective's values in the order the trial reported them, one per report (an "epoch" to
    early stopping): those of the first host, in algo-N order, that reported it at all. Every host of
    a data-parallel job prints the same epochs; counting them all would count each epoch N times."""
    hosts = sorted({s.host for s in samples if s.name == metric}, key=_host_key)
    if not hosts:
        return []
    return [s.value for s in sorted((s for s in samples if s.name == metric and s.host == hosts[0]),
                                    key=lambda s: s.at)]


def _host_key(host: str) -> tuple[int, str]:
    number = host.rpartition("-")[2]
    return (int(number), host) if number.isdigit() else (1 << 30, host)


def retryable(reason: str | None) -> bool:
    """Whether a Failed trial failed as the platform's fault (an internal error: the service retries
    such jobs, API_RetryStrategy), not the script's."""
    text = (reason or "").lower()
    return "internalservererror" in text or "internal server error" in text or "platform" in text


def counters(trials: Sequence[Mapping[str, Any]]) -> tuple[dict[str, int], dict[str, int]]:
    """TrainingJobStatusCounters and ObjectiveStatusCounters of the trials (API_TrainingJobStatusCounters,
    API_ObjectiveStatusCounters): every member, zeros included, as the service answers them."""
    status = {"Completed": 0, "InProgress": 0, "RetryableError": 0, "NonRetryableError": 0, "Stopped": 0}
    objective = {"Succeeded": 0, "Pending": 0, "Failed": 0}
    for trial in trials:
        state = str(trial.get("TrainingJobStatus"))
        if state == "Failed":
            status["RetryableError" if retryable(trial.get("FailureReason")) else "NonRetryableError"] += 1
        else:
            status[COUNTED.get(state, "InProgress")] += 1
        objective[str(trial.get("ObjectiveStatus", "Pending"))] += 1
    return status, objective


def objective_status(status: str, value: float | None) -> str:
    """A trial's ObjectiveStatus (API_HyperParameterTrainingJobSummary): Pending while it runs;
    Succeeded once it ended (Completed, or Stopped: early stopping stops trials, and their last
    objective counts) with an objective; Failed when it failed or never reported one."""
    if status in ("InProgress", "Stopping"):
        return "Pending"
    return "Succeeded" if value is not None and status in ("Completed", "Stopped") else "Failed"


def best(trials: Sequence[Mapping[str, Any]], minimize: bool) -> Mapping[str, Any] | None:
    """The trial row with the best final objective (BestTrainingJob) among those whose objective
    Succeeded (Completed or Stopped with one), by `stopping.best_trial`'s rule."""
    results = [TrialResult(dict(t.get("TunedHyperParameters") or {}), _value(t), number=int(t.get("Number", 0)),
                           status=str(t.get("TrainingJobStatus"))) for t in trials]
    chosen = best_trial(results, minimize)
    return None if chosen is None else trials[next(i for i, r in enumerate(results) if r is chosen)]


def _value(trial: Mapping[str, Any]) -> float | None:
    value = (trial.get("FinalHyperParameterTuningJobObjectiveMetric") or {}).get("Value")
    return float(value) if trial.get("ObjectiveStatus") == "Succeeded" and isinstance(value, (int, float)) else None


def summary(trial: Mapping[str, Any]) -> dict[str, Any]:
    """A trial as HyperParameterTrainingJobSummary: the record's trial without what only the record keeps."""
    return {k: v for k, v in trial.items() if k not in ("Number", "Intermediate")}


def parent_results(record: Mapping[str, Any]) -> list[TrialResult]:
    """A warm-start parent's trials the strategies learn from: those whose objective Succeeded, as
    TrialResults numbered 0 (not this tuning job's own)."""
    out: list[TrialResult] = []
    for trial in record.get("Trials") or []:
        value = (trial.get("FinalHyperParameterTuningJobObjectiveMetric") or {}).get("Value")
        if trial.get("ObjectiveStatus") == "Succeeded" and isinstance(value, (int, float)):
            out.append(TrialResult(dict(trial.get("TunedHyperParameters") or {}), float(value), number=0,
                                   intermediate=tuple(trial.get("Intermediate") or ()),
                                   status=str(trial.get("TrainingJobStatus"))))
    return out


def warm_start_problems(request: Mapping[str, Any], parent: Mapping[str, Any], kind: str) -> list[str]:
    """What keeps the tuning job `request` from warm-starting from the parent tuning job whose request
    is `parent`, by the service's rules (automatic-model-tuning-warm-start.html, "Warm start tuning
    restrictions"): the same objective metric; as many static plus tunable hyperparameters; a
    hyperparameter tunable in both of the same kind; and with IdenticalDataAndAlgorithm the same
    training image and input data."""
    mine, theirs = definitions(request)[0], definitions(parent)[0]
    found = []
    if objective_of(request, mine)[0] != objective_of(parent, theirs)[0]:
        found.append(f"the objective metric must be the parent's ('{objective_of(parent, theirs)[0]}')")
    if len(_names(request, mine)) != len(_names(parent, theirs)):
        found.append(f"the static plus tunable hyperparameters must be as many as the parent's "
                     f"({len(_names(parent, theirs))}, here {len(_names(request, mine))})")
    kinds_here, kinds_there = _kinds(ranges_of(request, mine)), _kinds(ranges_of(parent, theirs))
    changed = sorted(n for n in kinds_here.keys() & kinds_there.keys() if kinds_here[n] != kinds_there[n])
    if changed:
        found.append(f"a tunable hyperparameter's kind cannot change from the parent's: {', '.join(changed)}")
    if kind == "IdenticalDataAndAlgorithm":
        image = (mine.get("AlgorithmSpecification") or {}).get("TrainingImage")
        if image != (theirs.get("AlgorithmSpecification") or {}).get("TrainingImage"):
            found.append("IdenticalDataAndAlgorithm needs the parent's training image")
        if mine.get("InputDataConfig") != theirs.get("InputDataConfig"):
            found.append("IdenticalDataAndAlgorithm needs the parent's input data (InputDataConfig)")
    return found


def _names(request: Mapping[str, Any], definition: Mapping[str, Any]) -> set[str]:
    # The SDK's own keys (sagemaker_program, ...) are static hyperparameters of every framework job; they
    # are counted as any other.
    return set(definition.get("StaticHyperParameters") or {}) | set(_kinds(ranges_of(request, definition)))


def _kinds(ranges: Mapping[str, Any]) -> dict[str, str]:
    return {str(r.get("Name")): kind for kind in ("IntegerParameterRanges", "ContinuousParameterRanges",
                                                  "CategoricalParameterRanges") for r in ranges.get(kind) or []}
