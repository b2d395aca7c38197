"""When a tuning job stops a trial early, when it stops launching trials, and which trial is its best:
pure functions of the trials' objectives, for the tuning loop to call.

- `median_rule_stops`: TrainingJobEarlyStoppingType Auto, the median rule the service documents
  (https://docs.aws.amazon.com/sagemaker/latest/dg/automatic-model-tuning-early-stopping.html),
  compared with `earlier_curves(history)`.
- `completion_reason`: TuningJobCompletionCriteria (API_TuningJobCompletionCriteria,
  API_BestObjectiveNotImproving, API_ConvergenceDetected in
  https://docs.aws.amazon.com/sagemaker/latest/APIReference/): the tuning job's status message when
  one is met.
- `best_trial`: the trial DescribeHyperParameterTuningJob names BestTrainingJob.

Where the service leaves a rule unsaid (how many earlier trials the median needs, how much a
"better" objective must improve, what convergence is) the choice is ours, stated at its constant.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from emulator.tuning.strategies import TrialResult

# The median rule applies once this many earlier trials reached the epoch: the service does not say,
# and over one or two trials the median is one trial's luck, which would stop half of all trials.
MEDIAN_RULE_MIN_TRIALS = 3
# "failed to improve model performance by 1% or greater over prior training jobs"
# (API_BestObjectiveNotImproving): an objective improves when it beats the best before it by at
# least 1% of that best's magnitude (any better value when the best is 0).
IMPROVEMENT = 0.01
# ConvergenceDetected: the service defines convergence only as "a lack of significant improvement
# (1% or less) against an objective metric" (API_ConvergenceDetected) and publishes no test. Ours:
# over the last trials with an objective (a window of CONVERGENCE_MIN_WINDOW of them, or
# CONVERGENCE_PERCENT of them all, whichever is more), the best objective improved by 1% of the
# objectives' range (the worst minus the best) or less; it needs more trials than the window, so
# that there is a best before it.
CONVERGENCE_MIN_WINDOW = 10
CONVERGENCE_PERCENT = 20
CONVERGENCE_IMPROVEMENT = 0.01
# The statuses of a trial whose objective counts: a trial stopped early keeps the objective it had
# when it stopped (the service ranks those too); a Failed trial has none that counts.
COUNTED = ("Completed", "Stopped")


def median_rule_stops(intermediate: Sequence[float], earlier: Sequence[Sequence[float]], minimize: bool) -> bool:
    """Whether the median rule stops a trial whose objective's values so far are `intermediate` (one
    an epoch, in order), checked after its latest epoch e: the running average of each earlier
    trial's objective over its epochs 1..e, for the earlier trials that reached e; the median of
    those averages; stop if the trial's value at e is worse than it (higher when minimizing, lower
    when maximizing). Equal is not worse. Fewer than MEDIAN_RULE_MIN_TRIALS earlier trials that
    reached e never stop a trial.

    `earlier` is the earlier trials' curves: `earlier_curves(history)` gives the ones the emulator
    compares with (see there).
    """
    if not intermediate:
        return False
    epoch = len(intermediate)
    current = intermediate[-1]
    averages = [statistics.fmean(curve[:epoch]) for curve in earlier if len(curve) >= epoch]
    if len(averages) < MEDIAN_RULE_MIN_TRIALS or math.isnan(current):
        return False
    median = statistics.median(averages)
    return current > median if minimize else current < median


def earlier_curves(history: Sequence[TrialResult]) -> list[tuple[float, ...]]:
    """The curves the median rule compares a running trial with: the intermediate values of this
    tuning job's trials that have ended Completed or Stopped. Not those still running (their
    curves are unfinished, and counting them would make a decision depend on how parallel trials
    happen to interleave), not Failed ones (a crash's curve says nothing of its hyperparameters),
    not a warm-start parent's (number 0: the service's "previous training jobs" are the job's own)."""
    return [r.intermediate for r in history if r.number > 0 and r.status in COUNTED and r.intermediate]


def best_trial(history: Sequence[TrialResult], minimize: bool) -> TrialResult | None:
    """The trial with the best objective among those Completed or Stopped with one (a Failed trial
    never); of equal objectives the earliest number. None if no trial has one. The caller chooses
    what `history` holds: the job's own trials for BestTrainingJob, with the parents' too for
    OverallBestTrainingJob (API_DescribeHyperParameterTuningJob)."""
    counted = _counted(history)
    if not counted:
        return None
    sign = 1.0 if minimize else -1.0
    return min(counted, key=lambda r: (sign * _objective(r), r.number))


def completion_reason(criteria: Mapping[str, Any], history: Sequence[TrialResult], minimize: bool) -> str | None:
    """Why the tuning job should launch no more trials by its TuningJobCompletionCriteria
    (`criteria`, botocore's shape), as its status message; None while none is met. The criteria read
    this job's own trials (numbers from 1) that ended with an objective, in number order; checked
    in this order:

    - TargetObjectiveMetricValue: a trial's objective reached it (<= when minimizing, >= when
      maximizing).
    - BestObjectiveNotImproving.MaxNumberOfTrainingJobsNotImproving (N): the last N trials each
      failed to improve on the best before it by 1% (IMPROVEMENT); the first trial sets the best.
    - ConvergenceDetected.CompleteOnConvergence Enabled: our rule, at CONVERGENCE_MIN_WINDOW.
    """
    trials = sorted((r for r in _counted(history) if r.number > 0), key=lambda r: r.number)
    if not trials:
        return None
    target = criteria.get("TargetObjectiveMetricValue")
    if isinstance(target, (int, float)) and not isinstance(target, bool):
        reached = next((r for r in trials if _at_least(_objective(r), float(target), minimize)), None)
        if reached is not None:
            return (f"The objective metric reached TargetObjectiveMetricValue {target:g}: training job "
                    f"{reached.number} has {_objective(reached):g}.")
    most = _mapping(criteria.get("BestObjectiveNotImproving")).get("MaxNumberOfTrainingJobsNotImproving")
    if isinstance(most, int) and not isinstance(most, bool) and most > 0:
        streak = _not_improving(trials, minimize)
        if streak >= most:
            return (f"The best objective has not improved by 1% or more in the last {streak} training jobs "
                    f"(MaxNumberOfTrainingJobsNotImproving {most}).")
    if _mapping(criteria.get("ConvergenceDetected")).get("CompleteOnConvergence") == "Enabled":
        window = _converged(trials, minimize)
        if window:
            return (f"The tuning job converged: the best objective improved by 1% of the objective's range "
                    f"or less over the last {window} training jobs.")
    return None


def not_improving(history: Sequence[TrialResult], minimize: bool) -> int:
    """TuningJobCompletionDetails.NumberOfTrainingJobsObjectiveNotImproving: this job's trials since the
    last that improved the best by 1% or more ("not improving (1% or less)",
    API_HyperParameterTuningJobCompletionDetails), by the rule BestObjectiveNotImproving uses."""
    trials = sorted((r for r in _counted(history) if r.number > 0), key=lambda r: r.number)
    return _not_improving(trials, minimize) if trials else 0


def _not_improving(trials: Sequence[TrialResult], minimize: bool) -> int:
    """How many trials at the end of `trials` (in number order) did not improve on the best before
    them; the first trial sets the best. A trial better by less than 1% does not count as improving,
    but it is the best the next trial must beat."""
    pick = min if minimize else max
    best = _objective(trials[0])
    streak = 0
    for r in trials[1:]:
        value = _objective(r)
        gain = best - value if minimize else value - best
        streak = 0 if gain > 0 and gain >= IMPROVEMENT * abs(best) else streak + 1
        best = pick(best, value)
    return streak


def _converged(trials: Sequence[TrialResult], minimize: bool) -> int:
    """The window of our convergence rule if `trials` converged, else 0."""
    window = max(CONVERGENCE_MIN_WINDOW, -(-len(trials) * CONVERGENCE_PERCENT // 100))  # rounded up
    if len(trials) <= window:
        return 0
    values = [_objective(r) for r in trials]
    pick = min if minimize else max
    before, now = pick(values[:-window]), pick(values)
    spread = max(values) - min(values)
    return window if abs(now - before) <= CONVERGENCE_IMPROVEMENT * spread else 0


def _at_least(value: float, target: float, minimize: bool) -> bool:
    return value <= target if minimize else value >= target


def _counted(history: Sequence[TrialResult]) -> list[TrialResult]:
    return [r for r in history if r.status in COUNTED and r.objective is not None and math.isfinite(r.objective)]


def _objective(r: TrialResult) -> float:
    assert r.objective is not None  # _counted keeps only trials with one
    return r.objective


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
