"""A spec's job and its `tuning:` section as CreateHyperParameterTuningJob's request
(emulator/tuning/from_spec.py, `hetero-emu tune`): the request passes the service's rules, the spec's
hyperparameters become the definition's static ones less those tuned, and its trials' requests are
what CreateTrainingJob accepts, checked by the training jobs' own checks."""

from __future__ import annotations

import random
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from emulator import api
from emulator.errors import SpecError
from emulator.jobs.service import TrainingJobs
from emulator.tuning import request as rules
from emulator.tuning import trials
from emulator.tuning.from_spec import MAX_NAME, tuning_name, tuning_request
from emulator.tuning.ranges import parse_parameter_ranges


def spec_of(project: Path, **extra: Any) -> Any:
    raw: dict[str, Any] = {
        "base_job_name": "a-rather-long-base-job-name-for-tuning", "entry_point": "train.py", "source_dir": "code",
        "instance_type": "ml.c5.xlarge", "hyperparameters": {"epochs": 4, "lr": 0.5},
        "metric_definitions": [{"Name": "val_loss", "Regex": "val_loss=([0-9.]+)"}],
        "inputs": {"training": "data/train"},
        "tuning": {"objective_metric_name": "val_loss", "objective_type": "Minimize", "strategy": "Random",
                   "max_jobs": 3, "max_parallel_jobs": 2,
                   "hyperparameter_ranges": {"lr": {"type": "continuous", "min_value": 0.001, "max_value": 0.1}}},
        **extra}
    return api.load_mapping(raw, base_dir=project)


def test_the_request_keeps_the_services_rules_and_tunes_what_the_section_names(project: Path) -> None:
    spec = spec_of(project)
    asked = tuning_request(spec, "tune-1", spec.tuning.config)
    assert rules.problems(asked) == []
    definition = asked["TrainingJobDefinition"]
    # lr is tuned: not static, though the spec gives it a value; epochs stays static, as the spec encodes it.
    assert "lr" not in definition["StaticHyperParameters"]
    assert definition["StaticHyperParameters"]["epochs"] == "4"
    assert definition["AlgorithmSpecification"]["MetricDefinitions"] == [{"Name": "val_loss",
                                                                         "Regex": "val_loss=([0-9.]+)"}]
    assert asked["HyperParameterTuningJobConfig"]["Strategy"] == "Random"


def test_each_trials_request_is_one_create_training_job_accepts(project: Path) -> None:
    spec = spec_of(project)
    asked = tuning_request(spec, "tune-1", spec.tuning.config)
    definition = trials.definitions(asked)[0]
    tuned = parse_parameter_ranges(trials.ranges_of(asked, definition)).sample(random.Random(1))
    params = trials.trial_request(definition, tuned, "tune-1-001-0a0b0c0d", [])
    training = TrainingJobs(project / "s3", region="us-west-2", engine_name="no-such-engine", base_dir=project)
    job = training.validated(params)[1]
    assert job.hyperparameters["lr"] == tuned["lr"]  # a string, as the service passes every hyperparameter
    assert set(job.inputs) == {"training"}


def test_a_job_with_its_own_entry_point_command_cannot_be_tuned(project: Path) -> None:
    spec = spec_of(project, container_entry_point=["python", "train.py"])
    with pytest.raises(SpecError) as info:
        tuning_request(spec, "tune-1", spec.tuning.config)
    assert info.value.problems[0].path == "container_entry_point"


def test_a_tuning_name_fits_the_services_32_characters(project: Path) -> None:
    name = tuning_name(spec_of(project), datetime(2026, 12, 5, 18, 1, 2, tzinfo=timezone.utc))
    assert len(name) <= MAX_NAME and name.endswith("-261205-180102") and name.startswith("a-rather-long")
