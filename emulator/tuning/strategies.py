"""The search strategies: which hyperparameters a tuning job's next trial gets.

Every strategy answers `next_trial(history)`: the tuned hyperparameters of the next trial, as the
strings its training job gets, or None when it has no trial left to propose. `history` is the trials
ended so far with their objective; Random and Grid do not read it, Bayesian and Hyperband learn from
it. The caller merges the static hyperparameters and enforces MaxNumberOfTrainingJobs and
MaxParallelTrainingJobs: a strategy only proposes. `make_strategy` makes the one a request asks for.

Bayesian and Hyperband are Optuna's (https://optuna.org): a study in memory, its TPE sampler seeded
by the request's RandomSeed, and for Hyperband Optuna's HyperbandPruner. Optuna is imported when one
of them is made, not with this module: it costs a fifth of a second, which a CLI that never tunes
should not pay. docs/tuning-strategies.md says how their proposals differ from the service's.
"""

from __future__ import annotations

import itertools
import math
import random
import secrets
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from emulator.errors import ApiError
from emulator.tuning.ranges import (
    CategoricalParameterRange,
    ContinuousParameterRange,
    IntegerParameterRange,
    ParameterRange,
    ParameterRanges,
)
from emulator.tuning.request import EPOCH_KEYS, MAX_RESOURCE

if TYPE_CHECKING:
    import optuna

STRATEGIES = ("Bayesian", "Random", "Hyperband", "Grid")
# Every study has this name: Optuna's HyperbandPruner puts a trial in a bracket by a hash of the
# study's name and the trial's number, so a random name (Optuna's default) would make the same
# request and the same objectives give other trials.
STUDY_NAME = "hetero-emu"
# Hyperband's reduction factor (eta): a third of a rung's trials go on to the next rung, the value
# the Hyperband paper and Optuna's HyperbandPruner take by default.
REDUCTION_FACTOR = 3
# MinResource when HyperbandStrategyConfig gives none: the service documents no default, and 1 (the
# least its model allows, botocore's HyperbandStrategyMinResource) lets Hyperband judge a trial from
# its first epoch on.
MIN_RESOURCE = 1


@dataclass(frozen=True)
class TrialResult:
    """One ended trial: the tuned hyperparameters it got, its final objective (None if it had none),
    its number (from 1 in the order the strategy proposed it; 0 for a trial of a warm-start parent
    tuning job), the objective's values reported while it ran, one an epoch, in order, and its
    TrainingJobStatus (Completed, Failed or Stopped)."""

    hyperparameters: Mapping[str, str]
    objective: float | None
    number: int = 0
    intermediate: tuple[float, ...] = ()
    status: str = "Completed"


class Strategy(Protocol):
    def next_trial(self, history: Sequence[TrialResult]) -> dict[str, str] | None:
        """The next trial's tuned hyperparameters, or None when the strategy has none left."""
        ...


def make_strategy(config: Mapping[str, Any], ranges: ParameterRanges, *, parents: Sequence[TrialResult] = (),
                  static: Mapping[str, str] = MappingProxyType({})) -> Strategy:
    """The strategy a request's HyperParameterTuningJobConfig (`config`, botocore's shape) asks for,
    over `ranges`, seeded by its RandomSeed when it has one.

    `parents` are the ended trials of the warm-start parent tuning jobs
    (automatic-model-tuning-warm-start.html): Bayesian and Hyperband learn from them as from trials
    of their own; Random and Grid ignore them, as the service's do not read results. A parent counts
    with those of its hyperparameters that are ranges of this job and whose values lie within them
    (with TransferLearning a child may search other ranges than its parent did); a parent with an
    objective but none of its values fitting, or without an objective, or Failed, is not used.

    `static` is the training job's static hyperparameters: Hyperband reads MaxResource from its
    epochs when HyperbandStrategyConfig gives none (API_HyperbandStrategyConfig). With several
    TrainingJobDefinitions the caller passes a definition's TuningObjective as the config's
    HyperParameterTuningJobObjective.
    """
    name = str(config.get("Strategy", "Bayesian"))
    seed = _seed(config.get("RandomSeed"))
    limits = _mapping(config.get("ResourceLimits"))
    most = limits.get("MaxNumberOfTrainingJobs")
    if name == "Random":
        return Random(ranges, seed)
    if name == "Grid":
        return Grid(ranges, most if isinstance(most, int) else None)
    if name not in STRATEGIES:
        raise ApiError("ValidationException", f"Strategy '{name}' is not one of {', '.join(STRATEGIES)}.")
    objective = _mapping(config.get("HyperParameterTuningJobObjective"))
    if objective.get("Type") not in ("Minimize", "Maximize"):
        raise ApiError("ValidationException", f"The {name} strategy needs HyperParameterTuningJobObjective.Type, "
                                              "Minimize or Maximize.")
    minimize = objective["Type"] == "Minimize"
    startup = _startup_trials(most if isinstance(most, int) else None)
    if name == "Bayesian":
        return Bayesian(ranges, minimize=minimize, seed=seed, parents=parents, startup_trials=startup)
    band = _mapping(_mapping(config.get("StrategyConfig")).get("HyperbandStrategyConfig"))
    low, high = _resources(band, static)
    return Hyperband(ranges, minimize=minimize, min_resource=low, max_resource=high, seed=seed, parents=parents,
                     startup_trials=startup)


def _seed(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError("ValidationException", f"RandomSeed must be an integer, not {value!r}.")
    return value


def _startup_trials(most: int | None) -> int:
    """How many trials TPE draws at random before it models the objective: a third of the tuning
    job's trials, at least 3 and at most Optuna's own default of 10. With Optuna's 10 alone a tuning
    job of 10 trials (a common local budget) would be a random search."""
    if most is None:
        return 10
    return min(10, max(3, most // 3))


def _resources(band: Mapping[str, Any], static: Mapping[str, str]) -> tuple[int, int]:
    """MinResource and MaxResource of HyperbandStrategyConfig (`band`); MaxResource, when not given,
    from the first of the epochs keys in `static` (API_HyperbandStrategyConfig)."""
    low = band.get("MinResource", MIN_RESOURCE)
    high = band.get("MaxResource")
    where = "HyperbandStrategyConfig.MaxResource"
    if high is None:
        key = next((k for k in EPOCH_KEYS if k in static), None)
        if key is None:
            raise ApiError("ValidationException", "Hyperband needs HyperbandStrategyConfig.MaxResource, or one "
                                                  f"of {', '.join(EPOCH_KEYS)} in the static hyperparameters.")
        where = f"the static hyperparameter {key}"
        high = _whole(static[key])
    if not isinstance(low, int) or low < 1:
        raise ApiError("ValidationException", f"HyperbandStrategyConfig.MinResource must be a positive integer, "
                                              f"not {low!r}.")
    if not isinstance(high, int) or not 1 <= high <= MAX_RESOURCE:
        raise ApiError("ValidationException", f"Hyperband's MaxResource ({where}) must be an integer from 1 to "
                                              f"{MAX_RESOURCE}, not {high!r}.")
    if low > high:
        raise ApiError("ValidationException", f"HyperbandStrategyConfig.MinResource ({low}) must not exceed "
                                              f"MaxResource ({high}, {where}).")
    return low, high


def _whole(text: str) -> int | str:
    """`text` as a whole number ("10" or "10.0"), else `text` itself for the error to show."""
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() else text


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


class Random:
    """The Random strategy: each trial draws every range anew, independently of the trials before.

    Seeded by the request's RandomSeed, the same seed gives the same trials in the same order; without
    one, a fresh seed (kept in `seed`, so a run can say which it used). Never runs out: the caller stops
    at MaxNumberOfTrainingJobs.
    """

    def __init__(self, ranges: ParameterRanges, seed: int | None = None) -> None:
        self.ranges = ranges
        self.seed = secrets.randbits(32) if seed is None else seed
        self._rng = random.Random(self.seed)

    def next_trial(self, history: Sequence[TrialResult]) -> dict[str, str] | None:
        return self.ranges.sample(self._rng)


class Grid:
    """The Grid strategy: every combination of the categorical ranges' values once, in a stable order
    (the ranges in the request's order, the first varying slowest; each range's values in its order).

    As the service documents it (automatic-model-tuning-how-it-works.html, Grid search): only
    categorical ranges; the number of trials is the number of combinations, so MaxNumberOfTrainingJobs
    need not be given, and if it is, it must equal that number.
    """

    def __init__(self, ranges: ParameterRanges, max_number_of_training_jobs: int | None = None) -> None:
        numeric: list[IntegerParameterRange | ContinuousParameterRange] = [*ranges.integer, *ranges.continuous]
        if numeric:
            names = ", ".join(f"'{r.name}'" for r in numeric)
            raise ApiError("ValidationException", "The Grid strategy searches categorical parameter ranges "
                                                  f"only; {names} must be given as CategoricalParameterRanges.")
        if not ranges.categorical:
            raise ApiError("ValidationException", "The Grid strategy needs at least one categorical "
                                                  "parameter range.")
        self.ranges = ranges
        self.combinations = 1
        for r in ranges.categorical:
            self.combinations *= len(r.values)
        if max_number_of_training_jobs is not None and max_number_of_training_jobs != self.combinations:
            raise ApiError("ValidationException", "With the Grid strategy MaxNumberOfTrainingJobs, if given, "
                                                  "must equal the number of distinct categorical combinations, "
                                                  f"{self.combinations}, not {max_number_of_training_jobs}.")
        self._left: Iterator[tuple[str, ...]] = itertools.product(*(r.values for r in ranges.categorical))

    def next_trial(self, history: Sequence[TrialResult]) -> dict[str, str] | None:
        combination = next(self._left, None)
        if combination is None:
            return None
        return {r.name: value for r, value in zip(self.ranges.categorical, combination, strict=True)}


class _Optuna:
    """What Bayesian and Hyperband share: an Optuna study in memory over the ranges, told each ended
    trial of `history` once, by its number.

    The study's parameters are the ranges, named alike, in Optuna's distributions: an integer range
    an IntDistribution, a continuous one a FloatDistribution, a categorical one a
    CategoricalDistribution of its values; Logarithmic is `log=True`, Auto and Linear are linear (as
    ranges.py draws Auto). ReverseLogarithmic has no Optuna distribution: the study's parameter is
    1 - x, log-scaled over [1 - MaxValue, 1 - MinValue] (in (0, 1] by the range's check), and the
    trial gets x = 1 - that, so values crowd towards 1 as the service's do.

    A trial of `history` that this strategy did not propose (a number it has not given, or one from
    an earlier run of the tuning job) is learned from as a warm-start parent is; one numbered 0 is
    left out, parents come through `parents`.
    """

    def __init__(self, ranges: ParameterRanges, *, minimize: bool, seed: int | None, parents: Sequence[TrialResult],
                 startup_trials: int, pruner: optuna.pruners.BasePruner | None = None) -> None:
        import optuna

        # Optuna logs every trial at INFO: the tuning job's own log says what a user needs.
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.ranges = ranges
        self.seed = secrets.randbits(32) if seed is None else seed
        self.minimize = minimize
        self._distributions = {r.name: _distribution(r) for r in ranges.all}
        with warnings.catch_warnings():
            # Optuna 4 marks constant_liar experimental (5 makes it the default): it keeps trials
            # proposed while others still run (MaxParallelTrainingJobs > 1) from crowding one point.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=startup_trials, constant_liar=True)
        self.study = optuna.create_study(study_name=STUDY_NAME, direction="minimize" if minimize else "maximize",
                                         sampler=sampler, pruner=pruner)
        self._asked: dict[int, optuna.trial.Trial] = {}
        self._told: set[int] = set()
        self._reported: dict[int, int] = {}
        self.parents_used = sum(self._learn(p) for p in parents)

    def next_trial(self, history: Sequence[TrialResult]) -> dict[str, str]:
        """Tell the study every trial of `history` it has not been told, then ask it for the next."""
        for result in sorted(history, key=lambda r: r.number):
            if result.number == 0 or result.number in self._told:
                continue
            self._told.add(result.number)
            trial = self._asked.get(result.number)
            if trial is None:
                self._learn(result)
            else:
                self._tell(trial, result)
        trial = self.study.ask(self._distributions)
        self._asked[len(self._asked) + 1] = trial
        return {r.name: _text(r, trial.params[r.name]) for r in self.ranges.all}

    def _tell(self, trial: optuna.trial.Trial, result: TrialResult) -> None:
        from optuna.trial import TrialState

        if result.status == "Failed" or result.objective is None or not math.isfinite(result.objective):
            self.study.tell(trial, state=TrialState.FAIL)
        else:
            self.study.tell(trial, result.objective)

    def _learn(self, result: TrialResult) -> bool:
        """Add a trial this study did not propose (a parent's); False if it has nothing to teach."""
        from optuna.trial import create_trial

        outcome = self._outcome(result)
        params = {}
        for r in self.ranges.all:
            value = r.parse(result.hyperparameters[r.name]) if r.name in result.hyperparameters else None
            if value is not None:
                params[r.name] = _internal(r, value)
        if outcome is None or not params:
            return False
        state, value = outcome
        self.study.add_trial(create_trial(params=params, distributions={n: self._distributions[n] for n in params},
                                          state=state, value=value,
                                          intermediate_values=dict(enumerate(result.intermediate, start=1))))
        return True

    def _outcome(self, result: TrialResult) -> tuple[optuna.trial.TrialState, float] | None:
        """How a parent is added: completed with its objective; None (not added) without one."""
        from optuna.trial import TrialState

        if result.status == "Failed" or result.objective is None or not math.isfinite(result.objective):
            return None
        return TrialState.COMPLETE, result.objective


class Bayesian(_Optuna):
    """The Bayesian strategy: Optuna's TPE sampler, which models which values gave good objectives
    and proposes where that model expects better ones (automatic-model-tuning-how-it-works.html,
    Bayesian optimization; the service models with a Gaussian process, docs/tuning-strategies.md).

    Its first trials (`startup_trials`, warm-start parents included) are random; later ones follow
    the trials told. A Failed trial, or one without an objective, is told as failed: TPE leaves it
    out of its model (a crash says nothing of how good its values are). A trial Stopped by early
    stopping is told its final objective, as the service counts it. Seeded by `seed` (a fresh one
    kept in `seed` if None): the same seed, ranges and told objectives, in the same order, give the
    same trials. Never runs out.
    """

    def __init__(self, ranges: ParameterRanges, *, minimize: bool, seed: int | None = None,
                 parents: Sequence[TrialResult] = (), startup_trials: int = 10) -> None:
        super().__init__(ranges, minimize=minimize, seed=seed, parents=parents, startup_trials=startup_trials)


class Hyperband(_Optuna):
    """The Hyperband strategy: trials proposed by Optuna's TPE sampler and stopped early by Optuna's
    HyperbandPruner (reduction factor 3) between MinResource and MaxResource epochs.

    TPE, not random proposals as in the Hyperband paper: the service says its Hyperband uses both
    intermediate and final results to allocate its resources, and Optuna's benchmarks found its
    HyperbandPruner the pruner that works best with TPE. TPE reads a pruned trial by its last
    intermediate value.

    `should_stop` is asked as a trial runs. A trial it stopped comes back in `history` with status
    Stopped and is told as pruned, unless it had reached MaxResource epochs (it then ran its whole
    budget and is told its objective as a completed trial).
    """

    def __init__(self, ranges: ParameterRanges, *, minimize: bool, min_resource: int, max_resource: int,
                 seed: int | None = None, parents: Sequence[TrialResult] = (), startup_trials: int = 10) -> None:
        import optuna

        self.min_resource = min_resource
        self.max_resource = max_resource
        pruner = optuna.pruners.HyperbandPruner(min_resource=min_resource, max_resource=max_resource,
                                                reduction_factor=REDUCTION_FACTOR)
        super().__init__(ranges, minimize=minimize, seed=seed, parents=parents, startup_trials=startup_trials,
                         pruner=pruner)

    def should_stop(self, number: int, intermediate: Sequence[float]) -> bool:
        """Whether trial `number` should stop now, its objective's values so far `intermediate` (one an
        epoch, in order). Each value not reported before is reported at its epoch (index + 1); the
        answer is the pruner's, or True once the trial has MaxResource epochs: "Once a job reaches
        the MaxResource value, it is stopped" (API_HyperbandStrategyConfig). Before MinResource
        epochs the pruner never stops a trial. False for a trial already told ended."""
        trial = self._asked.get(number)
        if trial is None:
            raise ValueError(f"Trial {number} was not proposed by this strategy.")
        if number in self._told:
            return False
        self._report(number, trial, intermediate)
        if len(intermediate) >= self.max_resource:
            return True
        return bool(intermediate) and trial.should_prune()

    def _report(self, number: int, trial: optuna.trial.Trial, intermediate: Sequence[float]) -> None:
        done = self._reported.get(number, 0)
        for index in range(done, len(intermediate)):
            trial.report(float(intermediate[index]), index + 1)
        self._reported[number] = max(done, len(intermediate))

    def _tell(self, trial: optuna.trial.Trial, result: TrialResult) -> None:
        from optuna.trial import TrialState

        number = result.number
        self._report(number, trial, result.intermediate)
        if result.status == "Stopped" and len(result.intermediate) < self.max_resource:
            self.study.tell(trial, state=TrialState.PRUNED)
        else:
            super()._tell(trial, result)

    def _outcome(self, result: TrialResult) -> tuple[optuna.trial.TrialState, float] | None:
        # A parent stopped early is one Hyperband pruned: its intermediate values teach the pruner
        # and TPE reads its last one, as for a trial of this job; added as completed, its final
        # objective would rank it among trials that ran their whole budget.
        from optuna.trial import TrialState

        if result.status == "Stopped" and result.intermediate and len(result.intermediate) < self.max_resource:
            return TrialState.PRUNED, float(result.intermediate[-1])
        return super()._outcome(result)


def _distribution(r: ParameterRange) -> optuna.distributions.BaseDistribution:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(r, CategoricalParameterRange):
        return CategoricalDistribution(r.values)
    log = r.scaling_type == "Logarithmic"
    if isinstance(r, IntegerParameterRange):
        return IntDistribution(r.low, r.high, log=log)
    if r.scaling_type == "ReverseLogarithmic":
        return FloatDistribution(1 - r.high, 1 - r.low, log=True)
    return FloatDistribution(r.low, r.high, log=log)


def _internal(r: ParameterRange, value: int | float | str) -> int | float | str:
    """A range's value as the study's parameter holds it (1 - x for ReverseLogarithmic)."""
    if isinstance(r, ContinuousParameterRange) and r.scaling_type == "ReverseLogarithmic":
        return 1 - float(value)
    return value


def _text(r: ParameterRange, value: Any) -> str:
    """The study's parameter value as the string the trial's training job gets."""
    if isinstance(r, CategoricalParameterRange):
        return str(value)
    if isinstance(r, IntegerParameterRange):
        return r.text(int(value))
    if r.scaling_type == "ReverseLogarithmic":
        return r.text(1 - float(value))
    return r.text(float(value))
