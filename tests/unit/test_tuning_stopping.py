"""A tuning job's stopping rules (emulator/tuning/stopping.py): the median rule of early stopping, the
completion criteria and the best trial. Every expected answer is worked out by hand in the test from
the service's definition, not taken from the code."""

from __future__ import annotations

from typing import Any

import pytest

from emulator.tuning.stopping import best_trial, completion_reason, earlier_curves, median_rule_stops
from emulator.tuning.strategies import TrialResult

# Three earlier trials' objective by epoch (a loss, so lower is better).
A = (1.0, 0.8, 0.6)
B = (2.0, 1.0, 0.9)
C = (0.5, 0.5, 0.5)


# --- the median rule


def test_the_median_rule_stops_a_trial_worse_than_the_median_of_running_averages() -> None:
    # After epoch 2 the running averages are A (1.0 + 0.8) / 2 = 0.9, B (2.0 + 1.0) / 2 = 1.5,
    # C (0.5 + 0.5) / 2 = 0.5; their median is 0.9.
    assert median_rule_stops([0.7, 0.95], [A, B, C], minimize=True)
    assert not median_rule_stops([0.7, 0.85], [A, B, C], minimize=True)
    assert not median_rule_stops([0.7, 0.9], [A, B, C], minimize=True)  # equal is not worse
    # Maximizing, worse is lower.
    assert median_rule_stops([0.7, 0.85], [A, B, C], minimize=False)
    assert not median_rule_stops([0.7, 0.95], [A, B, C], minimize=False)


def test_the_median_rule_compares_the_current_value_not_the_trials_own_average() -> None:
    # After epoch 3: A (1.0 + 0.8 + 0.6) / 3 = 0.8, B (2.0 + 1.0 + 0.9) / 3 = 1.3, C 0.5; median 0.8.
    # This trial's own average, (3.0 + 3.0 + 0.7) / 3 = 2.23, is far worse; its value now, 0.7, is not.
    assert not median_rule_stops([3.0, 3.0, 0.7], [A, B, C], minimize=True)
    assert median_rule_stops([0.1, 0.1, 0.81], [A, B, C], minimize=True)


def test_the_median_rule_reads_only_earlier_trials_that_reached_the_epoch() -> None:
    short = (0.01,)  # stopped after its first epoch: no running average at epoch 2
    assert median_rule_stops([0.7, 0.95], [A, B, C, short], minimize=True)
    # With four trials at epoch 2 the median is the mean of the middle two: D's average is
    # (1.2 + 1.0) / 2 = 1.1, so the averages are 0.5, 0.9, 1.1, 1.5 and the median (0.9 + 1.1) / 2 = 1.0.
    d = (1.2, 1.0)
    assert not median_rule_stops([0.7, 0.95], [A, B, C, d], minimize=True)
    assert median_rule_stops([0.7, 1.05], [A, B, C, d], minimize=True)


def test_the_median_rule_needs_three_earlier_trials_at_the_epoch() -> None:
    assert not median_rule_stops([100.0], [A, B], minimize=True)
    assert not median_rule_stops([100.0, 100.0], [A, B, (0.1,)], minimize=True)  # only two reached epoch 2
    assert median_rule_stops([100.0], [A, B, C], minimize=True)
    assert not median_rule_stops([], [A, B, C], minimize=True)


def test_earlier_curves_are_this_jobs_ended_trials_that_did_not_fail() -> None:
    history = [
        TrialResult({}, 0.6, number=1, intermediate=A),
        TrialResult({}, 0.9, number=2, intermediate=B, status="Stopped"),
        TrialResult({}, None, number=3, intermediate=(9.0,), status="Failed"),
        TrialResult({}, 0.5, number=0, intermediate=C),  # a warm-start parent's
        TrialResult({}, 0.4, number=4),  # reported no values by epoch
        TrialResult({}, 0.5, number=5, intermediate=(7.0,), status="InProgress"),
    ]
    assert earlier_curves(history) == [A, B]


# --- the best trial


def test_the_best_trial_is_the_best_objective_of_trials_that_did_not_fail() -> None:
    history = [
        TrialResult({"x": "1"}, 0.5, number=1),
        TrialResult({"x": "2"}, 0.1, number=2, status="Failed"),  # better, but failed
        TrialResult({"x": "3"}, 0.3, number=3, status="Stopped"),
        TrialResult({"x": "4"}, None, number=4),
        TrialResult({"x": "5"}, 0.9, number=5),
    ]
    assert best_trial(history, minimize=True) == history[2]
    assert best_trial(history, minimize=False) == history[4]
    assert best_trial(history[1:2] + history[3:4], minimize=True) is None
    assert best_trial([], minimize=True) is None


def test_of_equal_objectives_the_earliest_trial_is_the_best() -> None:
    history = [TrialResult({}, 0.2, number=3), TrialResult({}, 0.2, number=1), TrialResult({}, 0.2, number=2)]
    best = best_trial(history, minimize=True)
    assert best is not None and best.number == 1


# --- the completion criteria


def _ended(*objectives: float | None, status: str = "Completed") -> list[TrialResult]:
    return [TrialResult({}, objective, number=n, status=status) for n, objective in enumerate(objectives, start=1)]


def test_no_criteria_or_no_trials_never_complete() -> None:
    assert completion_reason({}, _ended(0.1, 0.2), minimize=True) is None
    assert completion_reason({"TargetObjectiveMetricValue": 1.0}, [], minimize=True) is None


def test_the_target_objective_is_reached_at_or_beyond_it() -> None:
    criteria = {"TargetObjectiveMetricValue": 0.25}
    assert completion_reason(criteria, _ended(0.5, 0.3), minimize=True) is None
    reason = completion_reason(criteria, _ended(0.5, 0.25), minimize=True)
    assert reason is not None and "0.25" in reason and "training job 2" in reason
    assert completion_reason(criteria, _ended(0.1, 0.2), minimize=False) is None
    assert completion_reason(criteria, _ended(0.1, 0.3), minimize=False) is not None
    # A failed trial's objective does not count, nor a parent's.
    assert completion_reason(criteria, _ended(0.1, status="Failed"), minimize=True) is None
    assert completion_reason(criteria, [TrialResult({}, 0.1, number=0)], minimize=True) is None


def test_best_objective_not_improving_counts_trials_that_do_not_beat_the_best_by_one_percent() -> None:
    criteria: dict[str, Any] = {"BestObjectiveNotImproving": {"MaxNumberOfTrainingJobsNotImproving": 3}}
    # Minimizing: 10 sets the best; 9 improves by 10%; 8.95 by 0.05 (< 1% of 9 = 0.09): not improving;
    # 8.92 by 0.03 (< 0.0895) and 8.9 by 0.02 (< 0.0892): three in a row that do not improve.
    assert completion_reason(criteria, _ended(10, 9, 8.95, 8.92), minimize=True) is None
    reason = completion_reason(criteria, _ended(10, 9, 8.95, 8.92, 8.9), minimize=True)
    assert reason is not None and "last 3 training jobs" in reason
    # A trial that improves by 1% or more starts the count again: 8.0 beats the best, 8.92, by 10%.
    assert completion_reason(criteria, _ended(10, 9, 8.95, 8.92, 8.0), minimize=True) is None
    # Maximizing: 0.5, then 0.504 (+0.8%), 0.505, 0.3: none beats the best by 1%.
    assert completion_reason(criteria, _ended(0.5, 0.504, 0.505, 0.3), minimize=False) is not None
    assert completion_reason(criteria, _ended(0.5, 0.504, 0.505, 0.6), minimize=False) is None


def test_best_objective_not_improving_skips_failed_trials_and_reads_trials_in_number_order() -> None:
    criteria: dict[str, Any] = {"BestObjectiveNotImproving": {"MaxNumberOfTrainingJobsNotImproving": 3}}
    failed = [TrialResult({}, None, number=n, status="Failed") for n in (3, 4, 5)]
    assert completion_reason(criteria, _ended(1.0, 0.5) + failed, minimize=True) is None
    # Ended out of order: by number it is 1.0, 0.5, 0.6, 0.7, 0.8, three trials not improving on 0.5.
    shuffled = [TrialResult({}, v, number=n) for n, v in ((4, 0.7), (1, 1.0), (5, 0.8), (3, 0.6), (2, 0.5))]
    assert completion_reason(criteria, shuffled, minimize=True) is not None


def test_convergence_is_the_best_improving_by_one_percent_of_the_range_or_less_over_the_window() -> None:
    criteria = {"ConvergenceDetected": {"CompleteOnConvergence": "Enabled"}}
    # 12 trials: the window is max(10, 20% of 12) = 10. The best before it (trials 1-2) is 1.0, the
    # best now 0.97: it improved by 0.03; the objectives' range is 5.0 - 0.97 = 4.03, 1% of it 0.0403.
    values = [5.0, 1.0] + [0.99, 1.2, 0.98, 3.0, 0.97, 1.5, 2.0, 1.1, 1.0, 4.0]
    reason = completion_reason(criteria, _ended(*values), minimize=True)
    assert reason is not None and "last 10 training jobs" in reason
    # A trial at 0.9 makes it 0.1 over the window, more than 1% of the range (4.1): not converged.
    assert completion_reason(criteria, _ended(*values[:-1], 0.9), minimize=True) is None
    # Ten trials are no more than the window: never converged.
    assert completion_reason(criteria, _ended(*[1.0] * 10), minimize=True) is None
    assert completion_reason(criteria, _ended(*[1.0] * 11), minimize=True) is not None
    assert completion_reason({"ConvergenceDetected": {"CompleteOnConvergence": "Disabled"}},
                             _ended(*[1.0] * 11), minimize=True) is None


def test_convergence_widens_its_window_to_a_fifth_of_the_trials() -> None:
    criteria = {"ConvergenceDetected": {"CompleteOnConvergence": "Enabled"}}
    # 60 trials: the window is 12. The best, 0.5, came at trial 49 (the 12th from the end): inside
    # the window, so the best improved by 0.5 over it. At trial 48 it is before the window.
    values: list[float | None] = [1.0] * 60
    values[48] = 0.5
    assert completion_reason(criteria, _ended(*values), minimize=True) is None
    values[48], values[47] = 1.0, 0.5
    assert completion_reason(criteria, _ended(*values), minimize=True) is not None


@pytest.mark.parametrize("minimize", [True, False])
def test_the_target_is_checked_before_the_other_criteria(minimize: bool) -> None:
    criteria: dict[str, Any] = {"TargetObjectiveMetricValue": 0.5,
                                "BestObjectiveNotImproving": {"MaxNumberOfTrainingJobsNotImproving": 3}}
    reason = completion_reason(criteria, _ended(0.5, 0.5, 0.5, 0.5), minimize=minimize)
    assert reason is not None and "TargetObjectiveMetricValue" in reason
