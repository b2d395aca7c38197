"""The YAML spec's `tuning:` section: a hyperparameter tuning job over the spec's training job
(`hetero-emu tune SPEC`, docs/tuning.md), turned into CreateHyperParameterTuningJob's
HyperParameterTuningJobConfig and WarmStartConfig in botocore's shapes, ready to send.

The keys are the SageMaker Python SDK's `HyperparameterTuner` arguments, snake_case as the spec's
other keys, with the SDK's defaults (sagemaker/tuner.py, 2.257): `strategy` Bayesian, `objective_type`
Maximize, `max_jobs` 1 (none for Grid, whose number of trials is its number of combinations),
`max_parallel_jobs` 1, `early_stopping_type` Off. Its config objects become mappings:
`completion_criteria` (TuningJobCompletionCriteriaConfig), `hyperband` (StrategyConfig's
HyperbandStrategyConfig), `warm_start` (WarmStartConfig) and `hyperparameter_ranges`, each range as the
SDK's IntegerParameter, ContinuousParameter or CategoricalParameter:

    hyperparameter_ranges:
      lr: {type: continuous, min_value: 1e-4, max_value: 0.1, scaling_type: Logarithmic}
      epochs: {type: integer, min_value: 2, max_value: 10}
      optimizer: {values: [adam, sgd]}      # or just: optimizer: [adam, sgd]

A categorical value is sent JSON-encoded, as the spec's `hyperparameters` are (and as the SDK encodes
a framework estimator's categorical values, `CategoricalParameter.as_json_range`): the script decodes a
tuned value to the type it was written with, as it decodes a static one.

Checked here: what the YAML can get wrong by itself, each problem named `tuning.<key>` with a hint:
unknown keys (with a did-you-mean), types, the model's enums and bounds (botocore's service model).
Not here: the rules across members that `emulator.tuning.request.check` applies to the assembled
request (MinValue above MaxValue, a scaling a range cannot take, Grid with numeric ranges, Hyperband
settings, max_parallel_jobs above max_jobs, the objective among the metric definitions), so that each
rule is written once.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from emulator.errors import Problem, SpecError
from emulator.jobspec.fields import FieldReader
from emulator.jobspec.model import TuningSection
from emulator.jobspec.wording import did_you_mean, key_text, preview, type_name, with_article

__all__ = ["TUNING_KEYS", "TuningSection", "parse_tuning", "read_tuning"]

TUNING_KEYS = (
    "job_name",
    "strategy",
    "objective_metric_name",
    "objective_type",
    "max_jobs",
    "max_parallel_jobs",
    "max_runtime_in_seconds",
    "early_stopping_type",
    "random_seed",
    "completion_criteria",
    "hyperband",
    "hyperparameter_ranges",
    "warm_start",
)
COMPLETION_KEYS = ("target_objective_metric_value", "max_number_of_training_jobs_not_improving",
                   "complete_on_convergence")
HYPERBAND_KEYS = ("min_resource", "max_resource")
NUMERIC_RANGE_KEYS = ("type", "min_value", "max_value", "scaling_type")
WARM_START_KEYS = ("type", "parents")

# botocore's model of CreateHyperParameterTuningJob (HyperParameterTuningJobStrategyType, ...Objective,
# TrainingJobEarlyStoppingType, HyperParameterScalingType, HyperParameterTuningJobWarmStartType).
STRATEGIES = ("Bayesian", "Random", "Hyperband", "Grid")
OBJECTIVE_TYPES = ("Maximize", "Minimize")
EARLY_STOPPING_TYPES = ("Off", "Auto")
SCALING_TYPES = ("Auto", "Linear", "Logarithmic", "ReverseLogarithmic")
RANGE_TYPES = ("integer", "continuous", "categorical")
WARM_START_TYPES = ("IdenticalDataAndAlgorithm", "TransferLearning")
# HyperParameterTuningJobName: at most 32 characters, the training job's pattern otherwise.
TUNING_JOB_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,31}$")
MAX_TUNING_JOB_NAME = 32
MAX_METRIC_NAME = 255  # MetricName
MAX_PARAMETER = 256  # ParameterKey, ParameterValue
MAX_VALUES = 30  # ParameterValues
MAX_PARENTS = 5  # ParentHyperParameterTuningJobs
# HyperParameterTuningMaxRuntimeInSeconds: 2 minutes to about half a year.
MIN_RUNTIME, MAX_RUNTIME = 120, 15_768_000
MIN_NOT_IMPROVING = 3  # MaxNumberOfTrainingJobsNotImproving
# The SDK's defaults (HyperparameterTuner.__init__).
DEFAULT_STRATEGY = "Bayesian"
DEFAULT_OBJECTIVE_TYPE = "Maximize"
DEFAULT_MAX_JOBS = 1
DEFAULT_MAX_PARALLEL_JOBS = 1
DEFAULT_EARLY_STOPPING = "Off"


def parse_tuning(section: Any, where: str = "tuning") -> TuningSection:
    """The `tuning:` section as a `TuningSection`; SpecError naming every problem at once."""
    reader = FieldReader()
    found = read_tuning(reader, section, where)
    if reader.problems or found is None:
        raise SpecError(reader.problems or [Problem(where, "is not a tuning section")])
    return found


def read_tuning(reader: FieldReader, section: Any, where: str = "tuning") -> TuningSection | None:
    """The section as a `TuningSection`, each problem recorded on `reader` (None when there is one):
    the spec's rules read it this way, in the same pass as the rest of the spec."""
    if not isinstance(section, Mapping):
        reader.fail(where, f"must be a mapping, got {type_name(section)} {preview(section)}",
                    "the tuning job's settings, e.g. {objective_metric_name: ..., hyperparameter_ranges: {...}}")
        return None
    before = len(reader.problems)
    reader.unknown_keys(section, TUNING_KEYS, f"{where}.")
    name = _name(reader, section, "job_name", f"{where}.job_name")
    strategy = _choice(reader, section, "strategy", f"{where}.strategy", STRATEGIES) or DEFAULT_STRATEGY
    config: dict[str, Any] = {
        "Strategy": strategy,
        "HyperParameterTuningJobObjective": _objective(reader, section, where),
        "ResourceLimits": _limits(reader, section, where, strategy),
        "ParameterRanges": _ranges(reader, section.get("hyperparameter_ranges"), f"{where}.hyperparameter_ranges"),
        "TrainingJobEarlyStoppingType": _early_stopping(reader, section, f"{where}.early_stopping_type"),
    }
    seed = reader.integer(section, "random_seed", f"{where}.random_seed")
    if seed is not None and seed < 0:
        reader.fail(f"{where}.random_seed", f"must be 0 or more, got {seed}", "RandomSeed is a non-negative integer")
    elif seed is not None:
        config["RandomSeed"] = seed
    criteria = _completion(reader, section.get("completion_criteria"), f"{where}.completion_criteria")
    if criteria:
        config["TuningJobCompletionCriteria"] = criteria
    band = _hyperband(reader, section.get("hyperband"), f"{where}.hyperband")
    if band:
        config["StrategyConfig"] = {"HyperbandStrategyConfig": band}
    warm = _warm_start(reader, section.get("warm_start"), f"{where}.warm_start")
    if len(reader.problems) > before:
        # The shared getters' type problems carry no hint: each gets what its key takes.
        reader.problems[before:] = [p if p.hint else replace(p, hint=_HINTS.get(_last_key(p.path), "docs/tuning.md"))
                                    for p in reader.problems[before:]]
        return None
    return TuningSection(name=name, config=config, warm_start=warm)


# What each key takes, for the problems the shared getters record without a hint.
_HINTS = {
    "job_name": "the tuning job's name, at most 32 characters",
    "strategy": f"one of {', '.join(STRATEGIES)}",
    "objective_metric_name": "the Name of one of the spec's metric_definitions",
    "objective_type": f"one of {', '.join(OBJECTIVE_TYPES)}",
    "max_jobs": "how many training jobs in all, at least 1",
    "max_parallel_jobs": "how many training jobs at once, at least 1",
    "max_runtime_in_seconds": f"a whole number of seconds, {MIN_RUNTIME} to {MAX_RUNTIME}",
    "early_stopping_type": f"one of {', '.join(EARLY_STOPPING_TYPES)}",
    "random_seed": "a whole number, 0 or more",
    "target_objective_metric_value": "the objective's value at which the tuning job ends, a number",
    "max_number_of_training_jobs_not_improving": f"a whole number of training jobs, at least {MIN_NOT_IMPROVING}",
    "complete_on_convergence": "true or false",
    "min_resource": "a whole number, at least 1 (epochs, or what the script counts)",
    "max_resource": "a whole number, at least 1 (epochs, or what the script counts)",
    "min_value": "the range's bound, a number",
    "max_value": "the range's bound, a number",
    "scaling_type": f"one of {', '.join(SCALING_TYPES)}",
    "type": "see docs/tuning.md for each section's types",
    "values": "e.g. [adam, sgd]",
    "parents": "the names of up to 5 earlier tuning jobs",
}


def _last_key(path: str) -> str:
    """`tuning.hyperparameter_ranges.lr.values[1]` -> `values`."""
    return path.rpartition(".")[2].partition("[")[0]


def _name(reader: FieldReader, raw: Mapping[str, Any], key: str, path: str) -> str | None:
    """A tuning job's name (HyperParameterTuningJobName): the training job's pattern, 32 characters."""
    name = reader.string(raw, key, path)
    if name is None:
        return None
    if len(name) > MAX_TUNING_JOB_NAME or not TUNING_JOB_NAME.fullmatch(name):
        reader.fail(path, f"{preview(name)} is not a tuning job name",
                    f"letters, digits and single hyphens, at most {MAX_TUNING_JOB_NAME} characters")
        return None
    return name


def _choice(reader: FieldReader, raw: Mapping[str, Any], key: str, path: str, allowed: tuple[str, ...]) -> str | None:
    value = reader.string(raw, key, path)
    if value is None or value in allowed:
        return value
    near = next((a for a in allowed if a.lower() == value.lower()), None)
    hint = f"did you mean '{near}'?" if near else did_you_mean(value, allowed)
    reader.fail(path, f"{preview(value)} is not one of {', '.join(allowed)}",
                hint or "spelt as the service spells them, capitals included")
    return None


def _early_stopping(reader: FieldReader, raw: Mapping[str, Any], path: str) -> str:
    # YAML 1.1 (the spec's reader) reads a bare `Off` as false: that is the Off the user wrote.
    if raw.get("early_stopping_type") is False:
        return "Off"
    return _choice(reader, raw, "early_stopping_type", path, EARLY_STOPPING_TYPES) or DEFAULT_EARLY_STOPPING


def _objective(reader: FieldReader, raw: Mapping[str, Any], where: str) -> dict[str, str]:
    # The SDK's objective_metric_name is required; its Type defaults to Maximize.
    path = f"{where}.objective_metric_name"
    metric = reader.string(raw, "objective_metric_name", path)
    if metric is None and raw.get("objective_metric_name") is None:
        reader.fail(path, "missing: the metric the tuning job optimises",
                    "the Name of one of the spec's metric_definitions")
    elif metric is not None and len(metric) > MAX_METRIC_NAME:
        reader.fail(path, f"longer than {MAX_METRIC_NAME} characters", "the service's limit on a metric's name")
    kind = _choice(reader, raw, "objective_type", f"{where}.objective_type", OBJECTIVE_TYPES)
    return {"Type": kind or DEFAULT_OBJECTIVE_TYPE, "MetricName": metric or ""}


def _limits(reader: FieldReader, raw: Mapping[str, Any], where: str, strategy: str) -> dict[str, int]:
    """ResourceLimits. max_jobs defaults to 1 as the SDK's (HyperparameterTuner: "the default value is 1
    for all others strategies"), and to none for Grid, whose trials are its combinations."""
    most = _at_least(reader, raw, "max_jobs", f"{where}.max_jobs", 1)
    parallel = _at_least(reader, raw, "max_parallel_jobs", f"{where}.max_parallel_jobs", 1)
    limits: dict[str, int] = {"MaxParallelTrainingJobs": parallel or DEFAULT_MAX_PARALLEL_JOBS}
    if most is not None or strategy != "Grid":
        limits["MaxNumberOfTrainingJobs"] = most or DEFAULT_MAX_JOBS
    path = f"{where}.max_runtime_in_seconds"
    runtime = reader.integer(raw, "max_runtime_in_seconds", path)
    if runtime is not None and not MIN_RUNTIME <= runtime <= MAX_RUNTIME:
        reader.fail(path, f"must be between {MIN_RUNTIME} and {MAX_RUNTIME} seconds, got {runtime}",
                    "the whole tuning job's longest run (ResourceLimits.MaxRuntimeInSeconds)")
    elif runtime is not None:
        limits["MaxRuntimeInSeconds"] = runtime
    return limits


def _at_least(reader: FieldReader, raw: Mapping[str, Any], key: str, path: str, least: int) -> int | None:
    value = reader.integer(raw, key, path)
    if value is not None and value < least:
        reader.fail(path, f"must be at least {least}, got {value}")
        return None
    return value


def _ranges(reader: FieldReader, raw: Any, path: str) -> dict[str, list[dict[str, Any]]]:
    """ParameterRanges: each hyperparameter's range under its kind, in the spec's order."""
    out: dict[str, list[dict[str, Any]]] = {}
    if raw is None:
        reader.fail(path, "missing: a tuning job searches at least one hyperparameter",
                    "e.g. {lr: {type: continuous, min_value: 0.0001, max_value: 0.1}}")
        return out
    if not isinstance(raw, Mapping) or not raw:
        reader.fail(path, f"must be a mapping of hyperparameter names to ranges, got {type_name(raw)} {preview(raw)}",
                    "e.g. {lr: {type: continuous, min_value: 0.0001, max_value: 0.1}, optimizer: [adam, sgd]}")
        return out
    for name, item in raw.items():
        where = f"{path}.{key_text(name)}"
        if not isinstance(name, str) or len(name) > MAX_PARAMETER:
            reader.fail(where, f"a hyperparameter's name must be a string of at most {MAX_PARAMETER} characters")
            continue
        found = _range(reader, name, item, where)
        if found is not None:
            kind, entry = found
            out.setdefault(f"{kind.capitalize()}ParameterRanges", []).append(entry)
    return out


def _range(reader: FieldReader, name: str, item: Any, where: str) -> tuple[str, dict[str, Any]] | None:
    if isinstance(item, list):  # the shorthand: a list is a categorical range's values
        item = {"values": item}
    if not isinstance(item, Mapping):
        reader.fail(where, f"must be a range, got {type_name(item)} {preview(item)}",
                    "{type: integer|continuous, min_value, max_value[, scaling_type]} or {values: [...]}")
        return None
    kind = _choice(reader, item, "type", f"{where}.type", RANGE_TYPES)
    if "values" in item and kind not in (None, "categorical"):
        reader.fail(f"{where}.type", f"is {kind}, but the range gives values", "values make a categorical range; "
                    "an integer or continuous one gives min_value and max_value")
        return None
    if "values" in item or kind == "categorical":
        reader.unknown_keys(item, ("type", "values"), f"{where}.")
        values = _values(reader, item.get("values"), f"{where}.values")
        return ("categorical", {"Name": name, "Values": values}) if values is not None else None
    reader.unknown_keys(item, NUMERIC_RANGE_KEYS, f"{where}.")
    if kind is None:
        if item.get("type") is None:
            reader.fail(f"{where}.type", "missing: integer or continuous",
                        "as the SDK's IntegerParameter or ContinuousParameter; {values: [...]} for a categorical range")
        return None
    ends = [_end(reader, item, key, f"{where}.{key}", kind == "integer") for key in ("min_value", "max_value")]
    scaling = _choice(reader, item, "scaling_type", f"{where}.scaling_type", SCALING_TYPES) or "Auto"
    if ends[0] is None or ends[1] is None:
        return None
    return kind, {"Name": name, "MinValue": ends[0], "MaxValue": ends[1], "ScalingType": scaling}


def _end(reader: FieldReader, item: Mapping[str, Any], key: str, path: str, integer: bool) -> str | None:
    """MinValue or MaxValue: a number in the YAML (an integer for an integer range), sent as the
    service's string (the SDK's `to_string`)."""
    value = item.get(key)
    if value is None:
        reader.fail(path, "missing", "the range's bound, a number")
        return None
    numeric = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not numeric:
        want = "an integer" if integer else "a number"
        reader.fail(path, f"must be {want}, got {type_name(value)} {preview(value)}",
                    "an integer range's bounds are integers" if integer else "e.g. 0.001 or 1e-3")
        return None
    if isinstance(value, float) and not math.isfinite(value):
        reader.fail(path, f"must be a finite number, got {value}")
        return None
    return str(value)


def _values(reader: FieldReader, raw: Any, path: str) -> list[str] | None:
    """A categorical range's values, each JSON-encoded as the spec's hyperparameters are."""
    if not isinstance(raw, list) or not raw:
        reader.fail(path, f"must be a list of 1 to {MAX_VALUES} values, got {type_name(raw)} {preview(raw)}",
                    "e.g. [adam, sgd]")
        return None
    if len(raw) > MAX_VALUES:
        reader.fail(path, f"at most {MAX_VALUES} values, got {len(raw)}", "the service's limit on a categorical range")
        return None
    out: list[str] = []
    for i, value in enumerate(raw):
        where = f"{path}[{i}]"
        if not isinstance(value, (str, int, float, bool)):
            reader.fail(where, f"must be a string, number or boolean, got {with_article(type_name(value))}")
        elif isinstance(value, float) and not math.isfinite(value):
            reader.fail(where, f"must be a finite number, got {value}")
        elif len(encoded := json.dumps(value)) > MAX_PARAMETER:
            reader.fail(where, f"longer than {MAX_PARAMETER} characters once JSON-encoded",
                        "the service's limit on a hyperparameter's value")
        elif encoded in out:
            reader.fail(where, f"{preview(value)} is given twice", "give each value once")
        else:
            out.append(encoded)
    return out if len(out) == len(raw) else None


def _completion(reader: FieldReader, raw: Any, path: str) -> dict[str, Any]:
    """TuningJobCompletionCriteria, from the SDK's TuningJobCompletionCriteriaConfig arguments."""
    if raw is None or not _is_mapping(reader, raw, path, "{max_number_of_training_jobs_not_improving: 5}"):
        return {}
    reader.unknown_keys(raw, COMPLETION_KEYS, f"{path}.")
    out: dict[str, Any] = {}
    target = reader.typed(raw, "target_objective_metric_value", f"{path}.target_objective_metric_value", (int, float))
    if target is not None and not math.isfinite(target):
        reader.fail(f"{path}.target_objective_metric_value", f"must be a finite number, got {target}")
    elif target is not None:
        out["TargetObjectiveMetricValue"] = float(target)
    key = "max_number_of_training_jobs_not_improving"
    patience = _at_least(reader, raw, key, f"{path}.{key}", MIN_NOT_IMPROVING)
    if patience is not None:
        out["BestObjectiveNotImproving"] = {"MaxNumberOfTrainingJobsNotImproving": patience}
    converge = reader.boolean(raw, "complete_on_convergence", f"{path}.complete_on_convergence")
    if converge is not None:
        out["ConvergenceDetected"] = {"CompleteOnConvergence": "Enabled" if converge else "Disabled"}
    return out


def _hyperband(reader: FieldReader, raw: Any, path: str) -> dict[str, int]:
    """HyperbandStrategyConfig: MinResource and MaxResource, each at least 1 (the model's bound)."""
    if raw is None or not _is_mapping(reader, raw, path, "{min_resource: 1, max_resource: 27}"):
        return {}
    reader.unknown_keys(raw, HYPERBAND_KEYS, f"{path}.")
    out = {}
    for key, member in (("min_resource", "MinResource"), ("max_resource", "MaxResource")):
        value = _at_least(reader, raw, key, f"{path}.{key}", 1)
        if value is not None:
            out[member] = value
    return out


def _warm_start(reader: FieldReader, raw: Any, path: str) -> dict[str, Any] | None:
    """WarmStartConfig, from the SDK's WarmStartConfig(warm_start_type, parents): both required."""
    if raw is None or not _is_mapping(reader, raw, path, "{type: TransferLearning, parents: [earlier-tuning]}"):
        return None
    reader.unknown_keys(raw, WARM_START_KEYS, f"{path}.")
    kind = _choice(reader, raw, "type", f"{path}.type", WARM_START_TYPES)
    if raw.get("type") is None:
        reader.fail(f"{path}.type", "missing", f"one of {', '.join(WARM_START_TYPES)}")
    parents = reader.string_list(raw, "parents", f"{path}.parents")
    if raw.get("parents") is None:
        reader.fail(f"{path}.parents", "missing", "the names of up to 5 earlier tuning jobs")
    elif parents is not None and not 1 <= len(parents) <= MAX_PARENTS:
        reader.fail(f"{path}.parents", f"must name 1 to {MAX_PARENTS} tuning jobs, got {len(parents)}",
                    "the service's limit")
    elif parents is not None:
        for i, parent in enumerate(parents):
            if len(parent) > MAX_TUNING_JOB_NAME or not TUNING_JOB_NAME.fullmatch(parent):
                reader.fail(f"{path}.parents[{i}]", f"{preview(parent)} is not a tuning job name",
                            f"letters, digits and single hyphens, at most {MAX_TUNING_JOB_NAME} characters")
    if kind is None or parents is None:
        return None
    return {"ParentHyperParameterTuningJobs": [{"HyperParameterTuningJobName": p} for p in parents],
            "WarmStartType": kind}


def _is_mapping(reader: FieldReader, raw: Any, path: str, example: str) -> bool:
    if isinstance(raw, Mapping):
        return True
    reader.fail(path, f"must be a mapping, got {type_name(raw)} {preview(raw)}", f"e.g. {example}")
    return False
