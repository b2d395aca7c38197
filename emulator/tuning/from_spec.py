"""A YAML spec's tuning job as CreateHyperParameterTuningJob's request (`hetero-emu tune`), pure: the
spec's job becomes the request's TrainingJobDefinition, as the SageMaker SDK's HyperparameterTuner
makes it of an estimator (the job's CreateTrainingJob request, `request_from_spec`, with its
hyperparameters as StaticHyperParameters, less those the tuning job tunes), and the spec's `tuning:`
section gives HyperParameterTuningJobConfig and WarmStartConfig.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from emulator.errors import Problem, SpecError
from emulator.jobspec import JobSpec
from emulator.jobspec.request import request_from_spec
from emulator.tuning.trials import COPIED

# The longest tuning job name (API_CreateHyperParameterTuningJob: HyperParameterTuningJobName).
MAX_NAME = 32


def tuning_name(spec: JobSpec, now: datetime) -> str:
    """A tuning job name from the spec's base job name, as the SDK's HyperparameterTuner makes one
    (`base_from_name` + a short timestamp, 32 characters at most)."""
    stamp = now.strftime("%y%m%d-%H%M%S")
    base = (spec.base_job_name or "tuning")[: MAX_NAME - len(stamp) - 1].rstrip("-")
    return f"{base}-{stamp}"


def tuning_request(spec: JobSpec, name: str, config: Mapping[str, Any],
                   warm_start: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """CreateHyperParameterTuningJob's request for the spec's job tuned by `config` (a
    HyperParameterTuningJobConfig)."""
    job = request_from_spec(spec, name)
    algorithm = job["AlgorithmSpecification"]
    for key in ("ContainerEntrypoint", "ContainerArguments"):
        if key in algorithm:
            # HyperParameterAlgorithmSpecification has neither (API_HyperParameterAlgorithmSpecification).
            field = {"ContainerEntrypoint": "container_entry_point", "ContainerArguments": "container_arguments"}[key]
            raise SpecError([Problem(field, "a tuning job's training jobs cannot set it (the service's "
                                     "HyperParameterAlgorithmSpecification has no such member)",
                                     f"leave {field} out of the spec to tune it")])
    tuned = {str(r.get("Name")) for kind in ("IntegerParameterRanges", "ContinuousParameterRanges",
                                             "CategoricalParameterRanges")
             for r in (config.get("ParameterRanges") or {}).get(kind) or []}
    definition: dict[str, Any] = {
        "AlgorithmSpecification": {k: algorithm[k] for k in ("TrainingImage", "TrainingInputMode", "MetricDefinitions")
                                   if k in algorithm},
        "StaticHyperParameters": {k: v for k, v in job.get("HyperParameters", {}).items() if k not in tuned},
        "ResourceConfig": job["ResourceConfig"],
    }
    for key in COPIED:
        if key in job:
            definition[key] = job[key]
    out: dict[str, Any] = {"HyperParameterTuningJobName": name, "HyperParameterTuningJobConfig": dict(config),
                           "TrainingJobDefinition": definition}
    if warm_start:
        out["WarmStartConfig"] = dict(warm_start)
    return out
