"""The spec's `tuning:` section (emulator/jobspec/yaml_tuning.py): each key into botocore's shape of
HyperParameterTuningJobConfig and WarmStartConfig, the SDK HyperparameterTuner's defaults, and every
bad value named `tuning.<key>` with a hint."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from emulator.errors import SpecError
from emulator.jobspec import JobSpec
from emulator.jobspec.yaml_tuning import TuningSection, parse_tuning

LR = {"type": "continuous", "min_value": 0.0001, "max_value": 0.1}


def section(**extra: Any) -> dict[str, Any]:
    return {"objective_metric_name": "validation:accuracy", "hyperparameter_ranges": {"lr": LR}, **extra}


def problems(raw: Any) -> dict[str, str]:
    """Each problem's field -> its message and hint."""
    with pytest.raises(SpecError) as caught:
        parse_tuning(raw)
    found = {p.path: f"{p.message} ({p.hint})" for p in caught.value.problems}
    assert all(p.hint for p in caught.value.problems), found
    return found


def test_the_sdk_s_defaults() -> None:
    # HyperparameterTuner(strategy="Bayesian", objective_type="Maximize", max_jobs=None -> 1,
    # max_parallel_jobs=1, early_stopping_type="Off"); nothing else unless given.
    assert parse_tuning(section()) == TuningSection(name=None, warm_start=None, config={
        "Strategy": "Bayesian",
        "HyperParameterTuningJobObjective": {"Type": "Maximize", "MetricName": "validation:accuracy"},
        "ResourceLimits": {"MaxParallelTrainingJobs": 1, "MaxNumberOfTrainingJobs": 1},
        "ParameterRanges": {"ContinuousParameterRanges": [{"Name": "lr", "MinValue": "0.0001", "MaxValue": "0.1",
                                                           "ScalingType": "Auto"}]},
        "TrainingJobEarlyStoppingType": "Off",
    })


def test_every_key_in_botocore_s_shape() -> None:
    found = parse_tuning(section(
        job_name="mnist-tuning", strategy="Random", objective_type="Minimize", max_jobs=20, max_parallel_jobs=3,
        max_runtime_in_seconds=3600, early_stopping_type="Auto", random_seed=7,
        completion_criteria={"target_objective_metric_value": 0.01, "max_number_of_training_jobs_not_improving": 4,
                             "complete_on_convergence": False},
        hyperband={"min_resource": 1, "max_resource": 9},
        warm_start={"type": "IdenticalDataAndAlgorithm", "parents": ["first-tuning", "second"]},
    ))
    assert found.name == "mnist-tuning"
    assert found.config["Strategy"] == "Random"
    assert found.config["HyperParameterTuningJobObjective"] == {"Type": "Minimize", "MetricName": "validation:accuracy"}
    assert found.config["ResourceLimits"] == {"MaxNumberOfTrainingJobs": 20, "MaxParallelTrainingJobs": 3,
                                              "MaxRuntimeInSeconds": 3600}
    assert found.config["TrainingJobEarlyStoppingType"] == "Auto"
    assert found.config["RandomSeed"] == 7
    assert found.config["TuningJobCompletionCriteria"] == {
        "TargetObjectiveMetricValue": 0.01,
        "BestObjectiveNotImproving": {"MaxNumberOfTrainingJobsNotImproving": 4},
        "ConvergenceDetected": {"CompleteOnConvergence": "Disabled"}}
    # A Random strategy with Hyperband settings is the request's rule to refuse, not the section's.
    assert found.config["StrategyConfig"] == {"HyperbandStrategyConfig": {"MinResource": 1, "MaxResource": 9}}
    assert found.warm_start == {"ParentHyperParameterTuningJobs": [{"HyperParameterTuningJobName": "first-tuning"},
                                                                   {"HyperParameterTuningJobName": "second"}],
                                "WarmStartType": "IdenticalDataAndAlgorithm"}


def test_grid_leaves_max_jobs_out_unless_given() -> None:
    grid = parse_tuning(section(strategy="Grid", hyperparameter_ranges={"opt": ["adam", "sgd"]}))
    assert grid.config["ResourceLimits"] == {"MaxParallelTrainingJobs": 1}
    given = parse_tuning(section(strategy="Grid", max_jobs=2, hyperparameter_ranges={"opt": ["adam", "sgd"]}))
    assert given.config["ResourceLimits"]["MaxNumberOfTrainingJobs"] == 2


def test_ranges_of_each_kind_in_the_spec_s_order() -> None:
    found = parse_tuning(section(hyperparameter_ranges={
        "epochs": {"type": "integer", "min_value": 2, "max_value": 10, "scaling_type": "Linear"},
        "lr": {"type": "continuous", "min_value": 1e-4, "max_value": 1, "scaling_type": "Logarithmic"},
        "batch": {"type": "integer", "min_value": 16, "max_value": 128},
        "optimizer": {"values": ["adam", "sgd"]},
        "layers": [1, 2.5, True],
        "momentum": {"type": "categorical", "values": ["x"]},
    }))
    assert found.config["ParameterRanges"] == {
        "IntegerParameterRanges": [
            {"Name": "epochs", "MinValue": "2", "MaxValue": "10", "ScalingType": "Linear"},
            {"Name": "batch", "MinValue": "16", "MaxValue": "128", "ScalingType": "Auto"}],
        "ContinuousParameterRanges": [
            {"Name": "lr", "MinValue": "0.0001", "MaxValue": "1", "ScalingType": "Logarithmic"}],
        # JSON-encoded as the spec's hyperparameters are: a string in quotes, true in JSON's spelling.
        "CategoricalParameterRanges": [
            {"Name": "optimizer", "Values": ['"adam"', '"sgd"']},
            {"Name": "layers", "Values": ["1", "2.5", "true"]},
            {"Name": "momentum", "Values": ['"x"']}],
    }


def test_a_bare_off_is_off() -> None:
    # YAML 1.1 reads `early_stopping_type: Off` as false.
    assert parse_tuning(section(early_stopping_type=False)).config["TrainingJobEarlyStoppingType"] == "Off"


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"strategy": "bayesian"}, "tuning.strategy", "did you mean 'Bayesian'?"),
    ({"strategy": "Annealing"}, "tuning.strategy", "not one of Bayesian, Random, Hyperband, Grid"),
    ({"objective_type": "max"}, "tuning.objective_type", "not one of Maximize, Minimize"),
    ({"objective_metric_name": 3}, "tuning.objective_metric_name", "must be a string"),
    ({"objective_metric_name": "m" * 256}, "tuning.objective_metric_name", "longer than 255"),
    ({"job_name": "my_tuning"}, "tuning.job_name", "not a tuning job name"),
    ({"job_name": "a" * 33}, "tuning.job_name", "at most 32 characters"),
    ({"max_jobs": 0}, "tuning.max_jobs", "at least 1"),
    ({"max_jobs": "10"}, "tuning.max_jobs", "must be an integer"),
    ({"max_parallel_jobs": 0}, "tuning.max_parallel_jobs", "at least 1"),
    ({"max_runtime_in_seconds": 60}, "tuning.max_runtime_in_seconds", "between 120 and 15768000"),
    ({"early_stopping_type": "On"}, "tuning.early_stopping_type", "not one of Off, Auto"),
    ({"random_seed": -1}, "tuning.random_seed", "0 or more"),
    ({"max_jobs_count": 3}, "tuning.max_jobs_count", "unknown key"),
    ({"completion_criteria": 5}, "tuning.completion_criteria", "must be a mapping"),
    ({"completion_criteria": {"max_number_of_training_jobs_not_improving": 2}},
     "tuning.completion_criteria.max_number_of_training_jobs_not_improving", "at least 3"),
    ({"completion_criteria": {"target_objective_metric_value": float("inf")}},
     "tuning.completion_criteria.target_objective_metric_value", "finite"),
    ({"completion_criteria": {"complete_on_convergence": "Enabled"}},
     "tuning.completion_criteria.complete_on_convergence", "must be a boolean"),
    ({"completion_criteria": {"target": 1}}, "tuning.completion_criteria.target", "unknown key"),
    ({"hyperband": {"min_resource": 0}}, "tuning.hyperband.min_resource", "at least 1"),
    ({"hyperband": {"max_resorce": 9}}, "tuning.hyperband.max_resorce", "did you mean 'max_resource'?"),
    ({"warm_start": {"parents": ["a"]}}, "tuning.warm_start.type", "missing"),
    ({"warm_start": {"type": "TransferLearning"}}, "tuning.warm_start.parents", "missing"),
    ({"warm_start": {"type": "TransferLearning", "parents": list("abcdef")}}, "tuning.warm_start.parents",
     "1 to 5"),
    ({"warm_start": {"type": "TransferLearning", "parents": ["bad_name"]}}, "tuning.warm_start.parents[0]",
     "not a tuning job name"),
    ({"warm_start": {"type": "Transfer", "parents": ["a"]}}, "tuning.warm_start.type", "not one of"),
])
def test_each_bad_value_names_its_key(change: dict[str, Any], field: str, words: str) -> None:
    found = problems(section(**change))
    assert list(found) == [field]
    assert words in found[field]


def test_the_section_must_be_a_mapping() -> None:
    assert list(problems([1, 2])) == ["tuning"]


def test_the_objective_and_the_ranges_are_required() -> None:
    found = problems({})
    assert sorted(found) == ["tuning.hyperparameter_ranges", "tuning.objective_metric_name"]


@pytest.mark.parametrize(("ranges", "field", "words"), [
    ({}, "tuning.hyperparameter_ranges", "must be a mapping of hyperparameter names to ranges"),
    ({"lr": 0.1}, "tuning.hyperparameter_ranges.lr", "must be a range"),
    ({"lr": {"min_value": 0, "max_value": 1}}, "tuning.hyperparameter_ranges.lr.type", "missing"),
    ({"lr": {"type": "float", "min_value": 0, "max_value": 1}}, "tuning.hyperparameter_ranges.lr.type",
     "not one of integer, continuous, categorical"),
    ({"lr": {"type": "continuous", "max_value": 1}}, "tuning.hyperparameter_ranges.lr.min_value", "missing"),
    ({"lr": {"type": "continuous", "min_value": "a", "max_value": 1}}, "tuning.hyperparameter_ranges.lr.min_value",
     "must be a number"),
    ({"lr": {"type": "continuous", "min_value": 0, "max_value": float("nan")}},
     "tuning.hyperparameter_ranges.lr.max_value", "finite"),
    ({"n": {"type": "integer", "min_value": 1.5, "max_value": 3}}, "tuning.hyperparameter_ranges.n.min_value",
     "must be an integer"),
    ({"lr": {**LR, "scaling_type": "Log"}}, "tuning.hyperparameter_ranges.lr.scaling_type", "not one of"),
    ({"lr": {**LR, "step": 2}}, "tuning.hyperparameter_ranges.lr.step", "unknown key"),
    ({"opt": []}, "tuning.hyperparameter_ranges.opt.values", "1 to 30 values"),
    ({"opt": list(range(31))}, "tuning.hyperparameter_ranges.opt.values", "at most 30"),
    ({"opt": ["a", {"b": 1}]}, "tuning.hyperparameter_ranges.opt.values[1]", "string, number or boolean"),
    ({"opt": ["a", "a"]}, "tuning.hyperparameter_ranges.opt.values[1]", "given twice"),
    ({"opt": ["x" * 300]}, "tuning.hyperparameter_ranges.opt.values[0]", "longer than 256"),
    ({"opt": {"values": ["a"], "min_value": 1}}, "tuning.hyperparameter_ranges.opt.min_value", "unknown key"),
    ({"opt": {"type": "integer", "values": [1, 2]}}, "tuning.hyperparameter_ranges.opt.type", "gives values"),
    ({"x" * 257: ["a"]}, "tuning.hyperparameter_ranges." + "x" * 257, "at most 256 characters"),
])
def test_each_bad_range_names_its_key(ranges: dict[str, Any], field: str, words: str) -> None:
    found = problems(section(hyperparameter_ranges=ranges))
    assert list(found) == [field]
    assert words in found[field]


def test_every_problem_at_once() -> None:
    found = problems({"strategy": "x", "max_jobs": 0, "hyperparameter_ranges": {"lr": 1}})
    assert sorted(found) == ["tuning.hyperparameter_ranges.lr", "tuning.max_jobs", "tuning.objective_metric_name",
                             "tuning.strategy"]


def test_the_request_s_own_rules_are_left_to_it() -> None:
    # MinValue above MaxValue, Logarithmic from 0, Grid over a numeric range, Hyperband with Auto early
    # stopping, more at once than in all: emulator/tuning/request.py refuses each on the assembled request.
    found = parse_tuning(section(
        strategy="Hyperband", early_stopping_type="Auto", max_jobs=2, max_parallel_jobs=5,
        hyperparameter_ranges={"lr": {"type": "continuous", "min_value": 1, "max_value": 0,
                                      "scaling_type": "Logarithmic"}}))
    assert found.config["ParameterRanges"]["ContinuousParameterRanges"][0]["MinValue"] == "1"


# -- in the spec


def test_a_spec_with_a_tuning_section_loads_and_holds_it(valid_raw: dict[str, Any],
                                                         load: Callable[[dict[str, Any]], JobSpec]) -> None:
    valid_raw["tuning"] = section(max_jobs=4)
    spec = load(valid_raw)
    assert spec.tuning is not None
    assert spec.tuning.config["ResourceLimits"]["MaxNumberOfTrainingJobs"] == 4


def test_a_spec_without_one_has_none(valid_raw: dict[str, Any], load: Callable[[dict[str, Any]], JobSpec]) -> None:
    assert load(valid_raw).tuning is None


def test_the_section_s_problems_come_with_the_spec_s(valid_raw: dict[str, Any],
                                                     load: Callable[[dict[str, Any]], JobSpec]) -> None:
    valid_raw["tuning"] = section(strategy="Bayes")
    valid_raw["max_run"] = 0
    with pytest.raises(SpecError) as caught:
        load(valid_raw)
    assert {p.path for p in caught.value.problems} == {"max_run", "tuning.strategy"}


def test_a_misspelt_tuning_key_gets_a_did_you_mean(valid_raw: dict[str, Any],
                                                   load: Callable[[dict[str, Any]], JobSpec]) -> None:
    valid_raw["tunning"] = section()
    with pytest.raises(SpecError) as caught:
        load(valid_raw)
    assert [(p.path, p.hint) for p in caught.value.problems] == [("tunning", "did you mean 'tuning'?")]
