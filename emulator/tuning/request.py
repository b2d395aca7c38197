"""CreateHyperParameterTuningJob's request checked by the service's own rules, the ones its botocore
model cannot state: which members go together, the limits across members, the strategies' and the
scalings' conditions.

The model's checks (required members, types, enums, lengths, value ranges, patterns) come first and
are not repeated here: the endpoint makes them for every operation before any handler runs
(emulator/aws/validation.py), so `problems` may assume a request of the model's shape and only reads
it defensively. Each rule names the page that states it: API_* pages are the API reference's,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_*.html, automatic-model-tuning-*.html
the developer guide's, https://docs.aws.amazon.com/sagemaker/latest/dg/. The service's own wording of
these errors is not published, so each rule is written plainly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from emulator.errors import ApiError

# The most hyperparameters one tuning job searches, all range kinds together (API_ParameterRanges:
# "the sum of the number of hyperparameters for all the ranges can't exceed the maximum number").
MAX_RANGES = 30
# The static hyperparameters Hyperband reads MaxResource from when StrategyConfig gives none, and the
# most it allows (API_HyperbandStrategyConfig).
EPOCH_KEYS = ("epochs", "numepochs", "n-epochs", "n_epochs", "num_epochs")
MAX_RESOURCE = 20_000
RANGE_KINDS = ("IntegerParameterRanges", "ContinuousParameterRanges", "CategoricalParameterRanges")


def check(request: Mapping[str, Any]) -> None:
    """Raise the service's ValidationException naming every problem of `request`; nothing if none."""
    found = problems(request)
    if found:
        raise ApiError("ValidationException", "; ".join(found))


def problems(request: Mapping[str, Any]) -> list[str]:
    """Every rule of the service `request` (a CreateHyperParameterTuningJob request that passed the
    model's checks) breaks, in order; empty when it breaks none."""
    config = _mapping(request.get("HyperParameterTuningJobConfig"))
    single = request.get("TrainingJobDefinition")
    several = request.get("TrainingJobDefinitions")
    found: list[str] = []
    # Exactly one of the two (API_CreateHyperParameterTuningJob: TrainingJobDefinition "or"
    # TrainingJobDefinitions; API_HyperParameterTrainingJobDefinition).
    if single is not None and several is not None:
        found.append("Specify either TrainingJobDefinition or TrainingJobDefinitions, not both")
    elif single is None and not several:
        found.append("Specify one of TrainingJobDefinition or TrainingJobDefinitions")
    definitions = [_mapping(d) for d in ([single] if single is not None else _sequence(several))]
    if isinstance(several, Sequence) and single is None:
        found += _several(definitions, config)
    for index, definition in enumerate(definitions):
        where = "TrainingJobDefinition" if single is not None else f"TrainingJobDefinitions[{index}]"
        objective = _mapping(definition.get("TuningObjective") or config.get("HyperParameterTuningJobObjective"))
        ranges = _mapping(definition.get("HyperParameterRanges") or config.get("ParameterRanges"))
        if objective or single is not None:  # several definitions' missing ones are named above
            found += _objective(objective, definition, where)
        found += _ranges(ranges, _mapping(definition.get("StaticHyperParameters")), config, where)
    found += _limits(config, definitions)
    found += _strategy(config, definitions)
    found += _warm_start(_mapping(request.get("WarmStartConfig")))
    return found


def _several(definitions: list[Mapping[str, Any]], config: Mapping[str, Any]) -> list[str]:
    # With several definitions each one names itself and carries its own objective and ranges; the
    # config's are the single definition's (API_HyperParameterTrainingJobDefinition: DefinitionName,
    # TuningObjective; API_HyperParameterTuningJobConfig: HyperParameterTuningJobObjective).
    found: list[str] = []
    names = [d.get("DefinitionName") for d in definitions]
    for index, definition in enumerate(definitions):
        for member in ("DefinitionName", "TuningObjective", "HyperParameterRanges"):
            if definition.get(member) is None:
                found.append(f"TrainingJobDefinitions[{index}].{member} is required when the tuning job "
                             "has several training job definitions")
    repeated = sorted({str(n) for n in names if n is not None and names.count(n) > 1})
    if repeated:
        found.append(f"DefinitionName must be unique among TrainingJobDefinitions: {', '.join(repeated)}")
    for member in ("HyperParameterTuningJobObjective", "ParameterRanges"):
        if config.get(member) is not None:
            found.append(f"HyperParameterTuningJobConfig.{member} must not be given with TrainingJobDefinitions; "
                         "give each definition its own")
    return found


def _objective(objective: Mapping[str, Any], definition: Mapping[str, Any], where: str) -> list[str]:
    # A tuning job optimises one metric (API_HyperParameterTuningJobObjective); for an algorithm of
    # one's own its value comes from the definition's MetricDefinitions, so it must be one of them
    # (automatic-model-tuning-define-metrics-variables.html). A built-in algorithm (or a marketplace
    # AlgorithmName) emits its metrics without definitions: only definitions given are checked.
    if not objective:
        return [f"{where}: the tuning job's objective is missing: give HyperParameterTuningJobConfig."
                "HyperParameterTuningJobObjective (or the definition's TuningObjective)"]
    metric = objective.get("MetricName")
    algorithm = _mapping(definition.get("AlgorithmSpecification"))
    defined = [_mapping(m).get("Name") for m in _sequence(algorithm.get("MetricDefinitions"))]
    if defined and metric not in defined:
        return [f"{where}: the objective metric {metric} is not one of the algorithm's MetricDefinitions "
                f"({', '.join(str(n) for n in defined)})"]
    return []


def _ranges(ranges: Mapping[str, Any], static: Mapping[str, Any], config: Mapping[str, Any],
            where: str) -> list[str]:
    found: list[str] = []
    named = [(kind, _mapping(r)) for kind in RANGE_KINDS for r in _sequence(ranges.get(kind))]
    # At most 30 hyperparameters to search, all kinds together (API_ParameterRanges, the note).
    if len(named) > MAX_RANGES:
        found.append(f"{where}: {len(named)} hyperparameter ranges; a tuning job searches at most {MAX_RANGES}")
    names = [str(r.get("Name")) for _, r in named]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        found.append(f"{where}: each hyperparameter has one range; repeated: {', '.join(repeated)}")
    # A hyperparameter is either static or tuned (automatic-model-tuning-define-ranges.html; the
    # warm start rules count "static plus tunable" as distinct hyperparameters).
    both = sorted(set(names) & {str(k) for k in static})
    if both:
        found.append(f"{where}: hyperparameters both static and tunable: {', '.join(both)}")
    # Grid search takes categorical ranges only (automatic-model-tuning-how-it-works.html, Grid search).
    if config.get("Strategy") == "Grid" and any(kind != "CategoricalParameterRanges" for kind, _ in named):
        found.append(f"{where}: the Grid strategy searches categorical hyperparameter ranges only")
    for kind, item in named:
        if kind != "CategoricalParameterRanges":
            found += _numeric(kind, item, where)
    return found


def _numeric(kind: str, item: Mapping[str, Any], where: str) -> list[str]:
    name, scaling = item.get("Name"), item.get("ScalingType", "Auto")
    integer = kind == "IntegerParameterRanges"
    low, high = _number(item.get("MinValue"), integer), _number(item.get("MaxValue"), integer)
    if low is None or high is None:
        # MinValue and MaxValue are strings in the model (API_IntegerParameterRange,
        # API_ContinuousParameterRange); the service reads them as numbers.
        return [f"{where}: the range of {name} needs {'integer' if integer else 'numeric'} MinValue and MaxValue"]
    found = []
    if low > high:
        found.append(f"{where}: the range of {name} has MinValue {low} greater than MaxValue {high}")
    # Scalings (automatic-model-tuning-define-ranges.html, Hyperparameter scaling types): logarithmic
    # for ranges of values greater than 0 only; reverse logarithmic for continuous ranges within
    # 0 <= x < 1 only (API_IntegerParameterRange's ScalingType offers no ReverseLogarithmic).
    if scaling == "Logarithmic" and low <= 0:
        found.append(f"{where}: Logarithmic scaling of {name} needs a range of values greater than 0")
    if scaling == "ReverseLogarithmic":
        if integer:
            found.append(f"{where}: ReverseLogarithmic scaling is for continuous ranges only, not {name}")
        elif not (low >= 0 and high < 1):
            found.append(f"{where}: ReverseLogarithmic scaling of {name} needs a range within 0 <= x < 1")
    return found


def _limits(config: Mapping[str, Any], definitions: list[Mapping[str, Any]]) -> list[str]:
    # ResourceLimits (API_ResourceLimits): MaxNumberOfTrainingJobs bounds every strategy but Grid,
    # whose number of training jobs is the number of combinations of its categorical values: "If
    # specified, the value of MaxNumberOfTrainingJobs should equal the total number of distinct
    # categorical combinations possible" (automatic-model-tuning-how-it-works.html, Grid search);
    # never more at once than in all.
    limits = _mapping(config.get("ResourceLimits"))
    most, parallel = limits.get("MaxNumberOfTrainingJobs"), limits.get("MaxParallelTrainingJobs")
    grid = config.get("Strategy") == "Grid"
    if grid and isinstance(most, int) and most != (combinations := _grid_size(config, definitions)):
        return [f"ResourceLimits.MaxNumberOfTrainingJobs ({most}) must equal the number of combinations of "
                f"the categorical values with the Grid strategy ({combinations}), or be left out"]
    if not grid and most is None:
        return [f"ResourceLimits.MaxNumberOfTrainingJobs is required with the {config.get('Strategy')} strategy"]
    if isinstance(most, int) and isinstance(parallel, int) and parallel > most:
        return [f"ResourceLimits.MaxParallelTrainingJobs ({parallel}) must not exceed "
                f"MaxNumberOfTrainingJobs ({most})"]
    return []


def _grid_size(config: Mapping[str, Any], definitions: list[Mapping[str, Any]]) -> int:
    """The grid's training jobs: each definition's combinations of categorical values, added up."""
    total = 0
    for definition in definitions or [{}]:
        ranges = _mapping(definition.get("HyperParameterRanges") or config.get("ParameterRanges"))
        size = 1
        for entry in _sequence(ranges.get("CategoricalParameterRanges")):
            size *= len(_sequence(_mapping(entry).get("Values")))
        total += size
    return total


def _strategy(config: Mapping[str, Any], definitions: list[Mapping[str, Any]]) -> list[str]:
    found: list[str] = []
    hyperband = config.get("Strategy") == "Hyperband"
    # Hyperband stops trials itself: TrainingJobEarlyStoppingType must be Off with it
    # (API_HyperParameterTuningJobConfig, TrainingJobEarlyStoppingType).
    if hyperband and config.get("TrainingJobEarlyStoppingType") == "Auto":
        found.append("TrainingJobEarlyStoppingType must be Off with the Hyperband strategy, which has its "
                     "own early stopping")
    strategy_config = _mapping(config.get("StrategyConfig"))
    band = _mapping(strategy_config.get("HyperbandStrategyConfig"))
    # StrategyConfig.HyperbandStrategyConfig is for Hyperband only
    # (API_HyperParameterTuningJobStrategyConfig).
    if band and not hyperband:
        found.append("StrategyConfig.HyperbandStrategyConfig is supported for the Hyperband strategy only")
    if hyperband:
        found += _hyperband(band, definitions)
    return found


def _hyperband(band: Mapping[str, Any], definitions: list[Mapping[str, Any]]) -> list[str]:
    # MaxResource, when not given, is read from the static hyperparameters' epochs keys, else "it
    # generates a validation error"; at most 20,000; MinResource no more than it
    # (API_HyperbandStrategyConfig).
    found: list[str] = []
    low, high = band.get("MinResource"), band.get("MaxResource")
    if high is None:
        for index, definition in enumerate(definitions):
            static = _mapping(definition.get("StaticHyperParameters"))
            if not any(key in static for key in EPOCH_KEYS):
                found.append(f"Hyperband needs StrategyConfig.HyperbandStrategyConfig.MaxResource, or one of "
                             f"{', '.join(EPOCH_KEYS)} in the static hyperparameters (definition {index})")
    elif isinstance(high, int) and high > MAX_RESOURCE:
        found.append(f"HyperbandStrategyConfig.MaxResource must be at most {MAX_RESOURCE}")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        found.append(f"HyperbandStrategyConfig.MinResource ({low}) must not exceed MaxResource ({high})")
    return found


def _warm_start(warm: Mapping[str, Any]) -> list[str]:
    # Up to 5 parents, each once (API_HyperParameterTuningJobWarmStartConfig; the model bounds the
    # count). Whether the parents exist and match the WarmStartType (IdenticalDataAndAlgorithm: the
    # same data, image and objective; TransferLearning: the objective and the number of static plus
    # tunable hyperparameters) is checked against the parents themselves, by the API
    # (automatic-model-tuning-warm-start.html).
    names = [str(_mapping(p).get("HyperParameterTuningJobName"))
             for p in _sequence(warm.get("ParentHyperParameterTuningJobs"))]
    repeated = sorted({n for n in names if names.count(n) > 1})
    return [f"WarmStartConfig names a parent tuning job more than once: {', '.join(repeated)}"] if repeated else []


def _number(value: Any, integer: bool) -> float | None:
    try:
        number = int(value) if integer else float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _sequence(value: Any) -> Sequence[Any]:
    return value if isinstance(value, (list, tuple)) else ()
