"""The search strategies: which hyperparameters a tuning job's next trial gets.

Every strategy answers `next_trial(history)`: the tuned hyperparameters of the next trial, as the
strings its training job gets, or None when it has no trial left to propose. `history` is the trials
ended so far with their objective; Random and Grid do not read it, Bayesian and Hyperband (Optuna,
a later change) will. The caller merges the static hyperparameters and enforces MaxNumberOfTrainingJobs
and MaxParallelTrainingJobs: a strategy only proposes.
"""

from __future__ import annotations

import itertools
import random
import secrets
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from emulator.errors import ApiError
from emulator.tuning.ranges import ContinuousParameterRange, IntegerParameterRange, ParameterRanges


@dataclass(frozen=True)
class TrialResult:
    """One ended trial: the tuned hyperparameters it got and its final objective (None if it had none)."""

    hyperparameters: Mapping[str, str]
    objective: float | None
    number: int = 0
    intermediate: tuple[float, ...] = ()
    status: str = "Completed"


class Strategy(Protocol):
    def next_trial(self, history: Sequence[TrialResult]) -> dict[str, str] | None:
        """The next trial's tuned hyperparameters, or None when the strategy has none left."""
        ...


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


def make_strategy(config: Mapping[str, object], ranges: ParameterRanges, *, parents: Sequence[TrialResult] = (),
                  static: Mapping[str, str] | None = None) -> Strategy:
    """The strategy the request's HyperParameterTuningJobConfig names (interim: Random and Grid)."""
    limits = config.get("ResourceLimits") or {}
    seed = config.get("RandomSeed")
    if config.get("Strategy") == "Grid":
        most = limits.get("MaxNumberOfTrainingJobs") if isinstance(limits, Mapping) else None
        return Grid(ranges, most if isinstance(most, int) else None)
    return Random(ranges, seed if isinstance(seed, int) else None)
