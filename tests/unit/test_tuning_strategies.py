"""Hyperparameter tuning's pure pieces (emulator/tuning/): the request's parameter ranges, one value of
each scaling type, the strategies (Random, Grid, and Optuna's Bayesian and Hyperband), `make_strategy`
and the trials' names."""

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
from emulator.tuning.strategies import Bayesian, Grid, Hyperband, Random, Strategy, TrialResult, make_strategy

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


def _trials(strategy: Random | Grid | Bayesian, count: int) -> list[dict[str, str] | None]:
    history: list[TrialResult] = []
    trials = []
    for _ in range(count):
        trial = strategy.next_trial(history)
        trials.append(trial)
        if trial is not None:
            history.append(TrialResult(trial, 0.5, number=len(history) + 1))
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


# --- Bayesian (Optuna's TPE)

MINIMIZE: dict[str, Any] = {"Strategy": "Bayesian", "HyperParameterTuningJobObjective": {"Type": "Minimize",
                                                                                         "MetricName": "loss"},
                            "ResourceLimits": {"MaxNumberOfTrainingJobs": 30, "MaxParallelTrainingJobs": 1}}


def _loss(trial: dict[str, str]) -> float:
    """A made-up objective, least (0) at lr = 10 ** -2.5 and 15 epochs."""
    return (math.log10(float(trial["lr"])) + 2.5) ** 2 + (int(trial["epochs"]) - 15) ** 2 / 25


def _tuned(strategy: Strategy, count: int) -> list[TrialResult]:
    """`count` trials one after another, each told `_loss` before the next is asked for."""
    history: list[TrialResult] = []
    for number in range(1, count + 1):
        trial = strategy.next_trial(history)
        assert trial is not None
        history.append(TrialResult(trial, _loss(trial), number=number))
    return history


def test_bayesian_gives_the_same_trials_for_the_same_seed_and_objectives_and_others_for_another() -> None:
    ranges = parse_parameter_ranges(REQUEST)
    first = [t.hyperparameters for t in _tuned(make_strategy({**MINIMIZE, "RandomSeed": 5}, ranges), 15)]
    again = [t.hyperparameters for t in _tuned(make_strategy({**MINIMIZE, "RandomSeed": 5}, ranges), 15)]
    other = [t.hyperparameters for t in _tuned(make_strategy({**MINIMIZE, "RandomSeed": 6}, ranges), 15)]
    assert first == again
    assert first[0] != other[0] and first[-1] != other[-1]


def test_bayesian_trials_stay_within_their_ranges_and_are_the_strings_a_job_gets() -> None:
    for result in _tuned(Bayesian(parse_parameter_ranges(REQUEST), minimize=True, seed=1, startup_trials=5), 30):
        trial = result.hyperparameters
        assert re.fullmatch(r"\d+", trial["epochs"]) and 1 <= int(trial["epochs"]) <= 20
        assert 0.0001 <= float(trial["lr"]) <= 0.1 and trial["lr"] == repr(float(trial["lr"]))
        assert 0.9 <= float(trial["momentum"]) <= 0.999
        assert trial["optimizer"] in {"sgd", "adam"}


def test_bayesian_draws_each_scaling_type_on_its_scale_before_it_models() -> None:
    # Before its first model TPE draws from the distributions themselves: what the scaling types map to.
    strategy = Bayesian(parse_parameter_ranges(REQUEST), minimize=True, seed=2, startup_trials=10**6)
    trials = [strategy.next_trial([]) for _ in range(600)]
    lr = [math.log10(float(t["lr"])) for t in trials]
    # Log-uniform over 1e-4..1e-1: a third in each decade, the median at 10 ** -2.5 (a linear one is 0.05).
    assert statistics.median(lr) == pytest.approx(-2.5, abs=0.2)
    assert sum(v < -3 for v in lr) / len(lr) == pytest.approx(1 / 3, abs=0.06)
    # ReverseLogarithmic: 1 - x log-uniform over [0.001, 0.1], its median at 10 ** -2 (a linear one 0.05).
    assert statistics.median(math.log10(1 - float(t["momentum"])) for t in trials) == pytest.approx(-2, abs=0.2)
    assert statistics.median(int(t["epochs"]) for t in trials) == pytest.approx(10.5, abs=1.5)


def test_a_logarithmic_integer_range_is_log_scaled_for_bayesian() -> None:
    ranges = parse_parameter_ranges({"IntegerParameterRanges": [
        {"Name": "n", "MinValue": "1", "MaxValue": "999", "ScalingType": "Logarithmic"}]})
    strategy = Bayesian(ranges, minimize=True, seed=3, startup_trials=10**6)
    values = [int(strategy.next_trial([])["n"]) for _ in range(400)]
    assert all(1 <= v <= 999 for v in values)
    assert statistics.median(values) < 60  # linear would put it near 500; log-uniform near sqrt(1000)


def test_bayesian_closes_in_on_the_optimum_where_random_does_not() -> None:
    ranges = parse_parameter_ranges(REQUEST)
    near = {"bayesian": 0, "random": 0}
    for seed in (0, 1, 2):
        bayesian = _tuned(Bayesian(ranges, minimize=True, seed=seed, startup_trials=8), 40)[20:]
        randomly = _tuned(Random(ranges, seed=seed), 40)[20:]
        # The last 20 trials: Random's mean loss is 2.5 to 4.5 at these seeds, TPE's below 1.
        assert statistics.mean(_loss(dict(t.hyperparameters)) for t in bayesian) < \
            statistics.mean(_loss(dict(t.hyperparameters)) for t in randomly) / 2
        for name, trials in (("bayesian", bayesian), ("random", randomly)):
            near[name] += sum(abs(math.log10(float(t.hyperparameters["lr"])) + 2.5) < 0.5 for t in trials)
    # A random lr is within half a decade of the best a third of the time: 20 of these 60 trials are
    # expected; 35 or more by chance has a probability below 1 in 10,000 (TPE has 43).
    assert near["bayesian"] >= 35 and near["bayesian"] > 1.5 * near["random"]


def test_bayesian_maximizes_when_the_objective_says_so() -> None:
    ranges = parse_parameter_ranges(REQUEST)
    config = {**MINIMIZE, "RandomSeed": 4, "HyperParameterTuningJobObjective": {"Type": "Maximize",
                                                                                "MetricName": "accuracy"}}
    strategy = make_strategy(config, ranges)
    history: list[TrialResult] = []
    for number in range(1, 31):
        trial = strategy.next_trial(history)
        assert trial is not None
        history.append(TrialResult(trial, -_loss(trial), number=number))
    assert statistics.mean(_loss(dict(t.hyperparameters)) for t in history[15:]) < 1.5


def test_bayesian_tells_failed_trials_as_failed_and_each_trial_once() -> None:
    from optuna.trial import TrialState

    strategy = Bayesian(parse_parameter_ranges(REQUEST), minimize=True, seed=1)
    first = strategy.next_trial([])
    second = strategy.next_trial([])
    history = [TrialResult(first, None, number=1, status="Failed"),
               TrialResult(second, 0.7, number=2, status="Stopped")]
    strategy.next_trial(history)
    strategy.next_trial(history)  # told already: not again
    states = [t.state for t in strategy.study.trials]
    assert states == [TrialState.FAIL, TrialState.COMPLETE, TrialState.RUNNING, TrialState.RUNNING]
    assert strategy.study.trials[1].value == 0.7


def _parents(count: int, seed: int) -> list[TrialResult]:
    """Ended trials of a parent tuning job that searched the same ranges: number 0, with their loss."""
    rng = random.Random(seed)
    ranges = parse_parameter_ranges(REQUEST)
    return [TrialResult(trial, _loss(trial)) for trial in (ranges.sample(rng) for _ in range(count))]


def test_warm_start_parents_steer_bayesian_from_its_first_trial() -> None:
    ranges = parse_parameter_ranges(REQUEST)
    with_parents, without = [], []
    for seed in range(3):
        taught = Bayesian(ranges, minimize=True, seed=seed, startup_trials=8, parents=_parents(40, seed))
        assert taught.parents_used == 40
        fresh = Bayesian(ranges, minimize=True, seed=seed, startup_trials=8)
        with_parents += [_loss(taught.next_trial([])) for _ in range(8)]
        without += [_loss(fresh.next_trial([])) for _ in range(8)]
    # Without parents the first 8 trials are random (mean loss 2 to 3); with 40 parents TPE models at once
    # (mean loss below 0.4 at these seeds).
    assert statistics.mean(with_parents) < statistics.mean(without) / 2


def test_a_parent_counts_with_its_values_that_fit_and_is_left_out_without_any() -> None:
    ranges = parse_parameter_ranges(REQUEST)
    fits = {"epochs": "15", "lr": "0.01", "momentum": "0.9", "optimizer": "adam"}
    parents = [
        TrialResult(fits, 0.0),
        TrialResult({**fits, "lr": "5.0", "extra": "x"}, 1.0),  # lr outside today's range: the rest counts
        TrialResult({"epochs": "99", "lr": "9", "other": "1"}, 2.0),  # nothing fits: left out
        TrialResult(fits, None, status="Failed"),  # no objective: left out
        TrialResult(fits, 3.0, status="Stopped"),  # stopped early: its final objective counts
    ]
    strategy = Bayesian(ranges, minimize=True, seed=0, parents=parents)
    assert strategy.parents_used == 3
    added = strategy.study.trials
    assert added[0].params == {"epochs": 15, "lr": 0.01, "momentum": pytest.approx(0.1), "optimizer": "adam"}
    assert "lr" not in added[1].params and added[1].params["epochs"] == 15
    assert [t.value for t in added] == [0.0, 1.0, 3.0]


def test_random_and_grid_ignore_parents() -> None:
    ranges = parse_parameter_ranges(REQUEST)
    taught = make_strategy({"Strategy": "Random", "RandomSeed": 9}, ranges, parents=_parents(5, 0))
    assert isinstance(taught, Random)
    assert _trials(taught, 5) == _trials(Random(ranges, seed=9), 5)
    grid = make_strategy({"Strategy": "Grid"}, parse_parameter_ranges(GRID_REQUEST), parents=_parents(5, 0))
    assert isinstance(grid, Grid) and grid.combinations == 6


# --- make_strategy


def test_make_strategy_makes_the_strategy_the_config_names() -> None:
    ranges = parse_parameter_ranges(REQUEST)
    assert isinstance(make_strategy({"Strategy": "Random", "RandomSeed": 3}, ranges), Random)
    bayesian = make_strategy({**MINIMIZE, "RandomSeed": 3}, ranges)
    assert isinstance(bayesian, Bayesian) and bayesian.seed == 3 and bayesian.minimize
    hyperband = make_strategy({**MINIMIZE, "Strategy": "Hyperband", "StrategyConfig": {
        "HyperbandStrategyConfig": {"MinResource": 2, "MaxResource": 27}}}, ranges)
    assert isinstance(hyperband, Hyperband)
    assert (hyperband.min_resource, hyperband.max_resource) == (2, 27)


def test_hyperband_takes_max_resource_from_the_epochs_static_hyperparameter() -> None:
    ranges = parse_parameter_ranges(REQUEST)
    hyperband = make_strategy({**MINIMIZE, "Strategy": "Hyperband"}, ranges, static={"num_epochs": "12", "x": "1"})
    assert isinstance(hyperband, Hyperband)
    assert (hyperband.min_resource, hyperband.max_resource) == (1, 12)


@pytest.mark.parametrize(("config", "static", "words"), [
    ({"Strategy": "Annealing"}, {}, "not one of Bayesian"),
    ({"Strategy": "Bayesian", "ResourceLimits": {"MaxNumberOfTrainingJobs": 5}}, {}, "needs HyperParameterTuning"),
    ({**MINIMIZE, "Strategy": "Hyperband"}, {"batch": "3"}, "needs HyperbandStrategyConfig.MaxResource"),
    ({**MINIMIZE, "Strategy": "Hyperband"}, {"epochs": "ten"}, "static hyperparameter epochs"),
    ({**MINIMIZE, "Strategy": "Hyperband"}, {"epochs": "20001"}, "from 1 to 20000"),
    ({**MINIMIZE, "Strategy": "Hyperband", "StrategyConfig": {"HyperbandStrategyConfig": {"MinResource": 9}}},
     {"epochs": "4"}, "MinResource (9) must not exceed MaxResource (4"),
    ({**MINIMIZE, "RandomSeed": "7"}, {}, "RandomSeed must be an integer"),
])
def test_make_strategy_refuses_what_it_cannot_run(config: dict[str, Any], static: dict[str, str], words: str) -> None:
    with pytest.raises(ApiError, match=re.escape(words)) as caught:
        make_strategy(config, parse_parameter_ranges(REQUEST), static=static)
    assert caught.value.code == "ValidationException"


# --- Hyperband (TPE and Optuna's HyperbandPruner)


def _hyperband(seed: int = 0, min_resource: int = 1) -> Hyperband:
    return Hyperband(parse_parameter_ranges(REQUEST), minimize=True, min_resource=min_resource, max_resource=9,
                     seed=seed)


def _run(strategy: Hyperband, history: list[TrialResult], curve: list[float]) -> int:
    """Run one trial epoch by epoch until `should_stop` says stop or its curve ends; its epochs."""
    trial = strategy.next_trial(history)
    number = len(history) + 1
    epochs = len(curve)
    for epoch in range(1, len(curve) + 1):
        if strategy.should_stop(number, curve[:epoch]):
            epochs = epoch
            break
    status = "Stopped" if epochs < len(curve) or epochs == strategy.max_resource else "Completed"
    history.append(TrialResult(trial, curve[epochs - 1], number=number, intermediate=tuple(curve[:epochs]),
                               status=status))
    return epochs


GOOD = [1.0 - 0.05 * epoch for epoch in range(1, 10)]


def test_hyperband_stops_trials_much_worse_than_earlier_ones_early_and_lets_the_best_run() -> None:
    strategy = _hyperband()
    history: list[TrialResult] = []
    for _ in range(9):
        _run(strategy, history, GOOD)
    bad = [_run(strategy, history, [50.0] * 9) for _ in range(9)]
    # Hyperband's brackets: in the most patient one a trial's first rung is MaxResource itself, so
    # not every bad trial can stop early; most do, at their bracket's first rung.
    assert sum(epochs < 9 for epochs in bad) >= 5
    best = [_run(strategy, history, [0.1] * 9) for _ in range(4)]
    assert best == [9, 9, 9, 9]  # better than every trial before at every rung: never stopped early


def test_hyperband_does_not_stop_a_trial_before_min_resource() -> None:
    strategy = _hyperband(min_resource=3)
    history: list[TrialResult] = []
    for _ in range(9):
        _run(strategy, history, GOOD)
    strategy.next_trial(history)
    assert not strategy.should_stop(10, [50.0]) and not strategy.should_stop(10, [50.0, 50.0])
    assert strategy.should_stop(10, [50.0] * 9)  # MaxResource reached: the service stops it there


def test_hyperband_tells_a_stopped_trial_as_pruned_and_one_at_max_resource_as_complete() -> None:
    from optuna.trial import TrialState

    strategy = _hyperband()
    first, second, third = (strategy.next_trial([]) for _ in range(3))
    history = [TrialResult(first, 2.0, number=1, intermediate=(3.0, 2.0), status="Stopped"),
               TrialResult(second, 0.5, number=2, intermediate=tuple([0.5] * 9), status="Stopped"),
               TrialResult(third, None, number=3, intermediate=(1.0,), status="Failed")]
    strategy.next_trial(history)
    told = strategy.study.trials
    assert [t.state for t in told[:3]] == [TrialState.PRUNED, TrialState.COMPLETE, TrialState.FAIL]
    assert told[0].intermediate_values == {1: 3.0, 2: 2.0}  # reported by the telling, epoch by epoch
    assert told[1].value == 0.5


def test_hyperband_is_deterministic_for_a_seed_and_refuses_a_trial_it_did_not_propose() -> None:
    def epochs(seed: int) -> list[tuple[dict[str, str], int]]:
        strategy = _hyperband(seed)
        history: list[TrialResult] = []
        for index in range(12):
            _run(strategy, history, [float(index % 4)] * 9)
        return [(dict(t.hyperparameters), len(t.intermediate)) for t in history]

    assert epochs(3) == epochs(3)
    assert epochs(3) != epochs(4)
    with pytest.raises(ValueError, match="not proposed"):
        _hyperband().should_stop(1, [1.0])
