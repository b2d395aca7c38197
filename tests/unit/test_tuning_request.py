"""CreateHyperParameterTuningJob's request checked by the service's rules (emulator/tuning/request.py):
the request the SDK v2's HyperparameterTuner sends passes them and the model's checks the endpoint
makes (emulator/aws/validation.py), and each rule refuses the request that breaks it."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any
from unittest import mock

import boto3
import botocore.session
import pytest

from emulator.aws import validation
from emulator.errors import ApiError
from emulator.tuning import request as tuning_request

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/mine:latest"
ROLE = "arn:aws:iam::123456789012:role/r"
METRICS = [{"Name": "validation:loss", "Regex": "loss=([0-9.]+)"}]


def _sdk_requests(several: bool) -> list[dict[str, Any]]:
    """What the SDK v2's tuner sends to create_hyper_parameter_tuning_job, recorded offline."""
    from sagemaker.estimator import Estimator
    from sagemaker.session import Session
    from sagemaker.tuner import CategoricalParameter, ContinuousParameter, HyperparameterTuner, IntegerParameter

    calls: list[dict[str, Any]] = []

    def record(**request: Any) -> dict[str, Any]:
        calls.append(request)
        return {}

    client = mock.Mock()
    client.create_hyper_parameter_tuning_job.side_effect = record
    boto = boto3.Session(region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
    session = Session(boto_session=boto, sagemaker_client=client, default_bucket="bucket")

    def estimator() -> Estimator:
        return Estimator(image_uri=IMAGE, role=ROLE, instance_count=1, instance_type="ml.m5.large",
                         sagemaker_session=session, output_path="s3://bucket/out", hyperparameters={"epochs": 3})

    ranges = {"lr": ContinuousParameter(1e-4, 1e-1, "Logarithmic"), "batch": IntegerParameter(16, 128),
              "opt": CategoricalParameter(["sgd", "adam"])}
    if several:
        tuner = HyperparameterTuner.create(
            estimator_dict={"first": estimator(), "second": estimator()},
            objective_metric_name_dict={"first": "validation:loss", "second": "validation:loss"},
            hyperparameter_ranges_dict={"first": ranges, "second": ranges},
            metric_definitions_dict={"first": METRICS, "second": METRICS},
            objective_type="Minimize", max_jobs=4, max_parallel_jobs=2, base_tuning_job_name="t")
        tuner.fit(inputs={"first": {"train": "s3://bucket/train"}, "second": {"train": "s3://bucket/train"}},
                  include_cls_metadata={}, wait=False)
    else:
        tuner = HyperparameterTuner(estimator(), "validation:loss", ranges, metric_definitions=METRICS,
                                    objective_type="Minimize", max_jobs=4, max_parallel_jobs=2,
                                    base_tuning_job_name="t")
        tuner.fit({"train": "s3://bucket/train"}, wait=False)
    return calls


@cache
def _recorded(several: bool) -> dict[str, Any]:
    (call,) = _sdk_requests(several)
    return call


def sdk_request(several: bool = False) -> dict[str, Any]:
    return copy.deepcopy(_recorded(several))


def _model_problems(params: dict[str, Any]) -> list[str]:
    operation = botocore.session.get_session().get_service_model("sagemaker").operation_model(
        "CreateHyperParameterTuningJob")
    return validation.problems(operation, params)


def _one(params: dict[str, Any], *words: str) -> None:
    found = tuning_request.problems(params)
    assert len(found) == 1, found
    assert all(word in found[0] for word in words), found


@pytest.mark.parametrize("several", [False, True])
def test_the_sdk_tuners_request_passes_the_model_and_the_rules(several: bool) -> None:
    params = sdk_request(several)
    assert ("TrainingJobDefinitions" in params) is several
    assert _model_problems(params) == []
    assert tuning_request.problems(params) == []
    tuning_request.check(params)


def test_the_model_check_catches_what_the_rules_leave_to_it() -> None:
    # Required members, enums, lengths and patterns are the endpoint's (emulator/aws/validation.py).
    params = sdk_request()
    params["HyperParameterTuningJobName"] = "x" * 33
    params["HyperParameterTuningJobConfig"]["Strategy"] = "Annealing"
    params["HyperParameterTuningJobConfig"]["RandomSeed"] = -1
    del params["HyperParameterTuningJobConfig"]["ResourceLimits"]["MaxParallelTrainingJobs"]
    found = " ".join(_model_problems(params))
    for words in ("hyperParameterTuningJobName", "Annealing", "randomSeed", "maxParallelTrainingJobs"):
        assert words in found


def test_check_raises_a_validation_exception_naming_every_problem() -> None:
    params = sdk_request()
    params["HyperParameterTuningJobConfig"]["Strategy"] = "Hyperband"
    params["HyperParameterTuningJobConfig"]["TrainingJobEarlyStoppingType"] = "Auto"
    params["TrainingJobDefinition"]["StaticHyperParameters"]["lr"] = "0.1"
    with pytest.raises(ApiError) as raised:
        tuning_request.check(params)
    assert raised.value.code == "ValidationException"
    assert "early stopping" in raised.value.message and "both static and tunable" in raised.value.message


def test_both_definition_members_is_refused() -> None:
    params = sdk_request()
    params["TrainingJobDefinitions"] = [copy.deepcopy(params["TrainingJobDefinition"])]
    assert "not both" in tuning_request.problems(params)[0]


def test_neither_definition_member_is_refused() -> None:
    params = sdk_request()
    del params["TrainingJobDefinition"]
    assert "Specify one of" in tuning_request.problems(params)[0]


@pytest.mark.parametrize("member", ["DefinitionName", "TuningObjective", "HyperParameterRanges"])
def test_several_definitions_each_need_a_name_an_objective_and_ranges(member: str) -> None:
    params = sdk_request(several=True)
    del params["TrainingJobDefinitions"][1][member]
    _one(params, f"TrainingJobDefinitions[1].{member} is required")


def test_several_definitions_need_distinct_names() -> None:
    params = sdk_request(several=True)
    params["TrainingJobDefinitions"][1]["DefinitionName"] = params["TrainingJobDefinitions"][0]["DefinitionName"]
    _one(params, "DefinitionName must be unique")


def test_several_definitions_take_no_objective_or_ranges_in_the_config() -> None:
    params = sdk_request(several=True)
    params["HyperParameterTuningJobConfig"]["ParameterRanges"] = {}
    _one(params, "HyperParameterTuningJobConfig.ParameterRanges must not be given")


def test_a_missing_objective_is_refused() -> None:
    params = sdk_request()
    del params["HyperParameterTuningJobConfig"]["HyperParameterTuningJobObjective"]
    _one(params, "objective is missing")


def test_the_objective_must_be_one_of_the_metric_definitions() -> None:
    params = sdk_request()
    params["HyperParameterTuningJobConfig"]["HyperParameterTuningJobObjective"]["MetricName"] = "accuracy"
    _one(params, "accuracy is not one of", "validation:loss")


def test_an_algorithm_without_metric_definitions_may_name_any_objective() -> None:
    # A built-in algorithm emits its own metrics; nothing here knows their names.
    params = sdk_request()
    del params["TrainingJobDefinition"]["AlgorithmSpecification"]["MetricDefinitions"]
    assert tuning_request.problems(params) == []


def test_a_hyperparameter_both_static_and_tunable_is_refused() -> None:
    params = sdk_request()
    params["TrainingJobDefinition"]["StaticHyperParameters"]["batch"] = "32"
    _one(params, "both static and tunable: batch")


def test_at_most_30_ranges_all_kinds_together() -> None:
    params = sdk_request()
    ranges = params["HyperParameterTuningJobConfig"]["ParameterRanges"]
    ranges["CategoricalParameterRanges"] = [{"Name": f"c{i}", "Values": ["a", "b"]} for i in range(28)]
    assert tuning_request.problems(params) == []  # 28 + 1 + 1
    ranges["CategoricalParameterRanges"].append({"Name": "c28", "Values": ["a"]})
    _one(params, "31 hyperparameter ranges", "at most 30")


def test_a_hyperparameter_has_one_range() -> None:
    params = sdk_request()
    ranges = params["HyperParameterTuningJobConfig"]["ParameterRanges"]
    ranges["CategoricalParameterRanges"].append({"Name": "lr", "Values": ["0.1"]})
    _one(params, "repeated: lr")


def test_grid_takes_categorical_ranges_only_and_as_many_jobs_as_combinations() -> None:
    params = sdk_request()
    config = params["HyperParameterTuningJobConfig"]
    config["Strategy"] = "Grid"
    assert any("categorical hyperparameter ranges only" in p for p in tuning_request.problems(params))
    del config["ParameterRanges"]["IntegerParameterRanges"], config["ParameterRanges"]["ContinuousParameterRanges"]
    combinations = 1
    for entry in config["ParameterRanges"]["CategoricalParameterRanges"]:
        combinations *= len(entry["Values"])
    config["ResourceLimits"]["MaxParallelTrainingJobs"] = 1
    config["ResourceLimits"]["MaxNumberOfTrainingJobs"] = combinations + 1
    found = tuning_request.problems(params)
    assert len(found) == 1 and "must equal the number of combinations" in found[0], found
    assert f"({combinations})" in found[0]
    config["ResourceLimits"]["MaxNumberOfTrainingJobs"] = combinations
    assert tuning_request.problems(params) == []
    del config["ResourceLimits"]["MaxNumberOfTrainingJobs"]
    assert tuning_request.problems(params) == []


def test_every_strategy_but_grid_needs_max_number_of_jobs() -> None:
    params = sdk_request()
    del params["HyperParameterTuningJobConfig"]["ResourceLimits"]["MaxNumberOfTrainingJobs"]
    _one(params, "MaxNumberOfTrainingJobs is required with the Bayesian strategy")


def test_no_more_at_once_than_in_all() -> None:
    params = sdk_request()
    params["HyperParameterTuningJobConfig"]["ResourceLimits"]["MaxParallelTrainingJobs"] = 5
    _one(params, "MaxParallelTrainingJobs (5) must not exceed MaxNumberOfTrainingJobs (4)")


@pytest.mark.parametrize(("kind", "low", "high", "scaling", "words"), [
    ("IntegerParameterRanges", "9", "3", "Auto", "MinValue 9 greater than MaxValue 3"),
    ("IntegerParameterRanges", "1.5", "3", "Auto", "needs integer MinValue"),
    ("ContinuousParameterRanges", "x", "1", "Auto", "needs numeric MinValue"),
    ("ContinuousParameterRanges", "0", "1", "Logarithmic", "greater than 0"),
    ("ContinuousParameterRanges", "0.5", "1", "ReverseLogarithmic", "within 0 <= x < 1"),
    ("IntegerParameterRanges", "0", "0", "ReverseLogarithmic", "continuous ranges only"),
])
def test_numeric_ranges_and_their_scalings(kind: str, low: str, high: str, scaling: str, words: str) -> None:
    params = sdk_request()
    params["HyperParameterTuningJobConfig"]["ParameterRanges"][kind] = [
        {"Name": "n", "MinValue": low, "MaxValue": high, "ScalingType": scaling}]
    _one(params, words)


def test_reverse_logarithmic_within_zero_and_one_is_accepted() -> None:
    params = sdk_request()
    params["HyperParameterTuningJobConfig"]["ParameterRanges"]["ContinuousParameterRanges"] = [
        {"Name": "momentum", "MinValue": "0", "MaxValue": "0.99", "ScalingType": "ReverseLogarithmic"}]
    assert tuning_request.problems(params) == []


def test_hyperband_has_its_own_early_stopping() -> None:
    params = sdk_request()
    config = params["HyperParameterTuningJobConfig"]
    config["Strategy"] = "Hyperband"
    assert tuning_request.problems(params) == []  # MaxResource from the static "epochs"
    config["TrainingJobEarlyStoppingType"] = "Auto"
    _one(params, "must be Off with the Hyperband strategy")


def test_hyperband_needs_max_resource_or_an_epochs_hyperparameter() -> None:
    params = sdk_request()
    params["HyperParameterTuningJobConfig"]["Strategy"] = "Hyperband"
    del params["TrainingJobDefinition"]["StaticHyperParameters"]["epochs"]
    _one(params, "Hyperband needs StrategyConfig.HyperbandStrategyConfig.MaxResource")
    params["HyperParameterTuningJobConfig"]["StrategyConfig"] = {"HyperbandStrategyConfig": {"MaxResource": 10}}
    assert tuning_request.problems(params) == []


@pytest.mark.parametrize(("band", "words"), [
    ({"MaxResource": 20_001}, "at most 20000"),
    ({"MinResource": 5, "MaxResource": 2}, "MinResource (5) must not exceed MaxResource (2)"),
])
def test_hyperband_resources(band: dict[str, int], words: str) -> None:
    params = sdk_request()
    params["HyperParameterTuningJobConfig"]["Strategy"] = "Hyperband"
    params["HyperParameterTuningJobConfig"]["StrategyConfig"] = {"HyperbandStrategyConfig": band}
    _one(params, words)


def test_a_hyperband_config_is_for_hyperband_only() -> None:
    params = sdk_request()
    params["HyperParameterTuningJobConfig"]["StrategyConfig"] = {"HyperbandStrategyConfig": {"MaxResource": 10}}
    _one(params, "for the Hyperband strategy only")


def test_a_random_seed_is_left_to_the_model() -> None:
    # RandomSeed's one rule (at least 0) is the model's; any seed passes the service's rules.
    params = sdk_request()
    params["HyperParameterTuningJobConfig"]["RandomSeed"] = 7
    assert tuning_request.problems(params) == [] and _model_problems(params) == []


@pytest.mark.parametrize("kind", ["IdenticalDataAndAlgorithm", "TransferLearning"])
def test_warm_start_names_each_parent_once(kind: str) -> None:
    params = sdk_request()
    params["WarmStartConfig"] = {"WarmStartType": kind,
                                 "ParentHyperParameterTuningJobs": [{"HyperParameterTuningJobName": "a"},
                                                                    {"HyperParameterTuningJobName": "b"}]}
    assert tuning_request.problems(params) == [] and _model_problems(params) == []
    params["WarmStartConfig"]["ParentHyperParameterTuningJobs"].append({"HyperParameterTuningJobName": "a"})
    _one(params, "more than once: a")


def test_at_most_five_parents_is_the_models() -> None:
    params = sdk_request()
    params["WarmStartConfig"] = {"WarmStartType": "TransferLearning", "ParentHyperParameterTuningJobs": [
        {"HyperParameterTuningJobName": f"p{i}"} for i in range(6)]}
    assert "parentHyperParameterTuningJobs" in " ".join(_model_problems(params))
