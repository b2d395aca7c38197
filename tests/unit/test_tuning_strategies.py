"""Hyperparameter tuning's pure pieces (emulator/tuning/): the request's parameter ranges, one value of
each scaling type, the Random and Grid strategies and the trials' names."""

from __future__ import annotations

import math
import random
import re
import statistics
from typing import Any

import pytest

from emulator.errors import ApiError
from emulator.tuning.names import trial_job_name
from emulator.tuning.ranges import (
    BadRange,
    CategoricalParameterRange,
    ContinuousParameterRange,
    IntegerParameterRange,
    ParameterRanges,
    parse_parameter_ranges,
)
from emulator.tuning.strategies import Grid, Random, TrialResult

SAMPLES = 4000

REQUEST: dict[str, Any] = {
    "IntegerParameterRanges": [{"Name": "epochs", "MinValue": "1", "MaxValue": "20", "ScalingType": "Linear"}],
    "ContinuousParameterRanges": [
        {"Name": "lr", "MinValue": "0.0001", "MaxValue": "0.1", "ScalingType": "Logarithmic"},
        {"Name": "momentum", "MinValue": "0.9", "MaxValue": "0.999", "ScalingType": "ReverseLogarithmic"},
    ],
    "CategoricalParameterRanges": [{"Name": "optimizer", "Values": ["sgd", "adam"]}],
}


def _values(r: IntegerParameterRange | ContinuousParameterRange, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [float(r.sample(rng)) for _ in range(SAMPLES)]


# --- parsing


def test_a_request_parses_into_its_ranges_in_the_request_order() -> None:
    ranges = parse_parameter_ranges(REQUEST)
    assert ranges.integer == (IntegerParameterRange("epochs", "1", "20", "Linear"),)
    assert [r.name for r in ranges.continuous] == ["lr", "momentum"]
    assert ranges.continuous[0].low == 0.0001 and ranges.continuous[0].scaling_type == "Logarithmic"
    assert ranges.categorical == (CategoricalParameterRange("optimizer", ("sgd", "adam")),)
    assert [r.name for r in ranges.all] == ["epochs", "lr", "momentum", "optimizer"]


def test_scaling_type_defaults_to_auto_and_no_ranges_is_empty() -> None:
    ranges = parse_parameter_ranges({"IntegerParameterRanges": [{"Name": "n", "MinValue": "1", "MaxValue": "3"}]})
    assert ranges.integer[0].scaling_type == "Auto"
    assert parse_parameter_ranges(None) == ParameterRanges()
    assert parse_parameter_ranges({}).all == ()


@pytest.mark.parametrize(("request_ranges", "name", "words"), [
    ({"IntegerParameterRanges": [{"Name": "n", "MinValue": "1.5", "MaxValue": "3"}]}, "n", "not an integer"),
    ({"ContinuousParameterRanges": [{"Name": "lr", "MinValue": "x", "MaxValue": "1"}]}, "lr", "not a number"),
    ({"ContinuousParameterRanges": [{"Name": "lr", "MinValue": "0", "MaxValue": "inf"}]}, "lr", "not a finite"),
    ({"IntegerParameterRanges": [{"Name": "n", "MinValue": "5", "MaxValue": "3"}]}, "n", "greater than MaxValue"),
    ({"ContinuousParameterRanges": [{"Name": "lr", "MinValue": "0", "MaxValue": "1",
                                     "ScalingType": "Logarithmic"}]}, "lr", "greater than 0"),
    ({"IntegerParameterRanges": [{"Name": "n", "MinValue": "-2", "MaxValue": "3",
                                  "ScalingType": "Logarithmic"}]}, "n", "greater than 0"),
    ({"IntegerParameterRanges": [{"Name": "n", "MinValue": "1", "MaxValue": "3",
                                  "ScalingType": "ReverseLogarithmic"}]}, "n", "continuous ranges"),
    ({"ContinuousParameterRanges": [{"Name": "m", "MinValue": "0.5", "MaxValue": "1",
                                     "ScalingType": "ReverseLogarithmic"}]}, "m", "0 <= x < 1.0"),
    ({"ContinuousParameterRanges": [{"Name": "m", "MinValue": "-0.1", "MaxValue": "0.5",
                                     "ScalingType": "ReverseLogarithmic"}]}, "m", "0 <= x < 1.0"),
    ({"ContinuousParameterRanges": [{"Name": "m", "MinValue": "0", "MaxValue": "1",
                                     "ScalingType": "Exponential"}]}, "m", "not one of Auto"),
    ({"CategoricalParameterRanges": [{"Name": "opt", "Values": []}]}, "opt", "at least one value"),
    ({"CategoricalParameterRanges": [{"Name": "opt", "Values": [str(i) for i in range(31)]}]}, "opt", "at most 30"),
    ({"IntegerParameterRanges": [{"Name": "n", "MinValue": "1", "MaxValue": "3"}],
      "CategoricalParameterRanges": [{"Name": "n", "Values": ["1"]}]}, "n", "more than one range"),
    ({"AutoParameters": [{"Name": "lr", "ValueHint": "0.1"}]}, "lr", "not emulated"),
])
def test_a_bad_range_is_refused_with_its_name(request_ranges: dict[str, Any], name: str, words: str) -> None:
    with pytest.raises(BadRange) as caught:
        parse_parameter_ranges(request_ranges)
    assert caught.value.parameter == name
    assert caught.value.code == "ValidationException"
    assert f"'{name}'" in caught.value.message and words in caught.value.message


def test_more_than_thirty_ranges_of_a_kind_are_refused() -> None:
    many = [{"Name": f"p{i}", "Values": ["a"]} for i in range(31)]
    with pytest.raises(BadRange, match="at most 30 ranges"):
        parse_parameter_ranges({"CategoricalParameterRanges": many})


# --- the scaling types


@pytest.mark.parametrize("scaling", ["Auto", "Linear"])
def test_a_linear_integer_range_gives_every_value_alike(scaling: str) -> None:
    r = IntegerParameterRange("n", "1", "4", scaling)  # type: ignore[arg-type]
    rng = random.Random(1)
    values = [r.sample(rng) for _ in range(SAMPLES)]
    assert set(values) == {"1", "2", "3", "4"}
    assert all(abs(values.count(v) / SAMPLES - 0.25) < 0.03 for v in set(values))


@pytest.mark.parametrize("scaling", ["Auto", "Linear"])
def test_a_linear_continuous_range_stays_in_range_with_its_median_at_the_middle(scaling: str) -> None:
    values = _values(ContinuousParameterRange("lr", "2", "10", scaling))  # type: ignore[arg-type]
    assert all(2 <= v <= 10 for v in values)
    assert statistics.median(values) == pytest.approx(6, abs=0.3)


def test_a_logarithmic_continuous_range_has_its_median_near_the_geometric_mean() -> None:
    values = _values(ContinuousParameterRange("lr", "0.0001", "1", "Logarithmic"))
    assert all(0.0001 <= v <= 1 for v in values)
    assert math.log10(statistics.median(values)) == pytest.approx(-2, abs=0.15)
    # A quarter of the draws in each of the four decades: linear would put 90% in the top one.
    assert sum(v < 0.001 for v in values) / SAMPLES == pytest.approx(0.25, abs=0.03)


def test_a_logarithmic_integer_range_favours_the_small_values() -> None:
    values = _values(IntegerParameterRange("n", "1", "999", "Logarithmic"))
    assert all(v == int(v) and 1 <= v <= 999 for v in values)
    assert statistics.median(values) == pytest.approx(math.sqrt(1 * 1000), rel=0.2)
    assert min(values) == 1  # the lower end is reached


def test_a_reverse_logarithmic_range_crowds_towards_one() -> None:
    values = _values(ContinuousParameterRange("momentum", "0", "0.999", "ReverseLogarithmic"))
    assert all(0 <= v <= 0.999 for v in values)
    # 1 - x is log-uniform over [0.001, 1]: its median is the geometric mean, 10 ** -1.5.
    assert math.log10(1 - statistics.median(values)) == pytest.approx(-1.5, abs=0.15)


def test_a_value_is_the_string_a_training_job_gets() -> None:
    rng = random.Random(3)
    assert re.fullmatch(r"-?\d+", IntegerParameterRange("n", "-5", "5").sample(rng))
    value = ContinuousParameterRange("lr", "0.1", "0.2").sample(rng)
    assert float(value) == float(repr(float(value))) and 0.1 <= float(value) <= 0.2
    assert CategoricalParameterRange("opt", ("sgd", "adam")).sample(rng) in {"sgd", "adam"}


def test_a_range_of_one_value_gives_that_value() -> None:
    rng = random.Random(0)
    assert IntegerParameterRange("n", "7", "7", "Logarithmic").sample(rng) == "7"
    assert float(ContinuousParameterRange("lr", "0.5", "0.5").sample(rng)) == 0.5


# --- Random


def _trials(strategy: Random | Grid, count: int) -> list[dict[str, str] | None]:
    history: list[TrialResult] = []
    trials = []
    for _ in range(count):
        trial = strategy.next_trial(history)
        trials.append(trial)
        if trial is not None:
            history.append(TrialResult(trial, 0.5))
    return trials


def test_random_gives_the_same_trials_for_the_same_seed_and_others_for_another() -> None:
    ranges = parse_parameter_ranges(REQUEST)
    first = _trials(Random(ranges, seed=42), 20)
    assert first == _trials(Random(ranges, seed=42), 20)
    assert first != _trials(Random(ranges, seed=43), 20)
    assert all(t is not None and set(t) == {"epochs", "lr", "momentum", "optimizer"} for t in first)


def test_random_without_a_seed_draws_one_and_keeps_it() -> None:
    ranges = parse_parameter_ranges(REQUEST)
    a, b = Random(ranges), Random(ranges)
    assert a.seed != b.seed
    assert _trials(a, 5) == _trials(Random(ranges, seed=a.seed), 5)


def test_random_trials_stay_within_their_ranges() -> None:
    for trial in _trials(Random(parse_parameter_ranges(REQUEST), seed=7), 200):
        assert trial is not None
        assert 1 <= int(trial["epochs"]) <= 20
        assert 0.0001 <= float(trial["lr"]) <= 0.1
        assert 0.9 <= float(trial["momentum"]) <= 0.999
        assert trial["optimizer"] in {"sgd", "adam"}


# --- Grid


GRID_REQUEST: dict[str, Any] = {"CategoricalParameterRanges": [
    {"Name": "optimizer", "Values": ["sgd", "adam", "rmsprop"]},
    {"Name": "batch", "Values": ["32", "64"]},
]}


def test_grid_gives_every_combination_once_in_a_stable_order_then_none() -> None:
    grid = Grid(parse_parameter_ranges(GRID_REQUEST))
    assert grid.combinations == 6
    trials = _trials(grid, 8)
    assert trials[:6] == [
        {"optimizer": "sgd", "batch": "32"}, {"optimizer": "sgd", "batch": "64"},
        {"optimizer": "adam", "batch": "32"}, {"optimizer": "adam", "batch": "64"},
        {"optimizer": "rmsprop", "batch": "32"}, {"optimizer": "rmsprop", "batch": "64"},
    ]
    assert trials[6:] == [None, None]
    assert _trials(Grid(parse_parameter_ranges(GRID_REQUEST)), 6) == trials[:6]


def test_grid_takes_max_jobs_only_when_it_is_the_number_of_combinations() -> None:
    assert Grid(parse_parameter_ranges(GRID_REQUEST), max_number_of_training_jobs=6).combinations == 6
    with pytest.raises(ApiError, match="distinct categorical combinations, 6, not 4"):
        Grid(parse_parameter_ranges(GRID_REQUEST), max_number_of_training_jobs=4)


def test_grid_refuses_a_range_that_is_not_categorical_and_an_empty_grid() -> None:
    with pytest.raises(ApiError, match="categorical parameter ranges only; 'epochs', 'lr', 'momentum'") as caught:
        Grid(parse_parameter_ranges(REQUEST))
    assert caught.value.code == "ValidationException"
    with pytest.raises(ApiError, match="at least one categorical"):
        Grid(ParameterRanges())


# --- the trials' names


def test_a_trial_is_named_as_the_service_names_it() -> None:
    assert trial_job_name("mytuning", 1, "a1b2c3d4") == "mytuning-001-a1b2c3d4"
    assert trial_job_name("mytuning", 1234, "a1b2c3d4") == "mytuning-1234-a1b2c3d4"
    assert re.fullmatch(r"t-017-[0-9a-f]{8}", trial_job_name("t", 17))
    assert len(trial_job_name("x" * 32, 999)) <= 63
    with pytest.raises(ValueError, match="starts at 1"):
        trial_job_name("t", 0)
