"""The ParameterRanges of a CreateHyperParameterTuningJob request, as botocore's model has them, and
one value of a range drawn from a `random.Random` with the range's scaling type, as the service
documents the types
(https://docs.aws.amazon.com/sagemaker/latest/dg/automatic-model-tuning-define-ranges.html).

A value is the string a trial's training job gets among its hyperparameters: the service passes every
hyperparameter as a string, the tuned ones too.

Auto is drawn as Linear here. The service says only that it "chooses the best scale" for an Auto range,
and how it chooses is not documented; a linear draw reaches every part of the range alike and is what
the user gets for Linear, so a tuning job run here never searches a scale the user did not ask for.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, cast, get_args

from emulator.errors import ApiError

ScalingType = Literal["Auto", "Linear", "Logarithmic", "ReverseLogarithmic"]
SCALING_TYPES: tuple[str, ...] = get_args(ScalingType)

# botocore's model: at most 30 ranges of each kind, at most 30 values in a categorical range.
MAX_RANGES_OF_A_KIND = 30
MAX_CATEGORICAL_VALUES = 30


class BadRange(ApiError):
    """A parameter range the service refuses, named by its hyperparameter (`parameter`)."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__("ValidationException", message)
        self.parameter = parameter


@dataclass(frozen=True)
class _NumericRange:
    """What an integer and a continuous range share: MinValue and MaxValue are the request's strings,
    `low` and `high` their values, checked when the range is made."""

    name: str
    min_value: str
    max_value: str
    scaling_type: ScalingType = "Auto"
    kind: ClassVar[str]

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise BadRange(self.name, f"The hyperparameter '{self.name}' of {self.kind}: MinValue {self.low} is "
                                      f"greater than MaxValue {self.high}.")
        if self.scaling_type == "Logarithmic" and self.low <= 0:
            raise BadRange(self.name, f"The hyperparameter '{self.name}': Logarithmic scaling works only for "
                                      f"ranges whose values are greater than 0, and its MinValue is {self.low}.")

    @property
    def low(self) -> float:
        raise NotImplementedError

    @property
    def high(self) -> float:
        raise NotImplementedError


@dataclass(frozen=True)
class IntegerParameterRange(_NumericRange):
    """IntegerParameterRange: MinValue and MaxValue are the request's strings, `low`/`high` their values."""

    kind: ClassVar[str] = "IntegerParameterRanges"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.scaling_type == "ReverseLogarithmic":
            raise BadRange(self.name, f"The hyperparameter '{self.name}': ReverseLogarithmic scaling is "
                                      "supported only for continuous ranges, not IntegerParameterRanges.")

    @property
    def low(self) -> int:
        return _integer(self.name, "MinValue", self.min_value)

    @property
    def high(self) -> int:
        return _integer(self.name, "MaxValue", self.max_value)

    def sample(self, rng: random.Random) -> str:
        low, high = self.low, self.high
        if self.scaling_type == "Logarithmic":
            # Log-uniform over [low, high + 1), floored: each integer k is drawn with a weight of
            # log((k + 1) / k), the discrete form of the continuous range's density. The bound keeps
            # a float rounding up to high + 1 inside the range.
            return self.text(math.floor(math.exp(rng.uniform(math.log(low), math.log(high + 1)))))
        return self.text(rng.randint(low, high))

    def text(self, value: int) -> str:
        """`value` as a trial's training job gets it: a plain integer, held within the range."""
        return str(min(max(value, self.low), self.high))

    def parse(self, text: str) -> int | None:
        """A trial's value (as `text` gives it) back as an integer, or None if it is not one of this
        range's: a warm-start parent's value read against the current range."""
        try:
            value = int(text)
        except ValueError:
            return None
        return value if self.low <= value <= self.high else None


@dataclass(frozen=True)
class ContinuousParameterRange(_NumericRange):
    """ContinuousParameterRange: MinValue and MaxValue are the request's strings, `low`/`high` their values."""

    kind: ClassVar[str] = "ContinuousParameterRanges"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.scaling_type == "ReverseLogarithmic" and not (self.low >= 0 and self.high < 1):
            raise BadRange(self.name, f"The hyperparameter '{self.name}': ReverseLogarithmic scaling works "
                                      "only for ranges entirely within 0 <= x < 1.0, and its range is "
                                      f"[{self.min_value}, {self.max_value}].")

    @property
    def low(self) -> float:
        return _number(self.name, "MinValue", self.min_value)

    @property
    def high(self) -> float:
        return _number(self.name, "MaxValue", self.max_value)

    def sample(self, rng: random.Random) -> str:
        low, high = self.low, self.high
        if self.scaling_type == "Logarithmic":
            value = math.exp(rng.uniform(math.log(low), math.log(high)))
        elif self.scaling_type == "ReverseLogarithmic":
            # 1 - x is log-uniform: values crowd towards 1, where a change matters most (a momentum
            # of 0.99 against 0.999). Both ends of 1 - x are in (0, 1] by the range's check.
            value = 1 - math.exp(rng.uniform(math.log(1 - high), math.log(1 - low)))
        else:
            value = rng.uniform(low, high)
        return self.text(value)

    def text(self, value: float) -> str:
        """`value` as a trial's training job gets it: Python's shortest round-tripping float text."""
        # exp and log can step a hair outside the bounds; the service never gives a value outside them.
        return repr(min(max(float(value), self.low), self.high))

    def parse(self, text: str) -> float | None:
        """A trial's value (as `text` gives it) back as a number, or None if it is not within this
        range: a warm-start parent's value read against the current range."""
        try:
            value = float(text)
        except ValueError:
            return None
        return value if self.low <= value <= self.high else None


@dataclass(frozen=True)
class CategoricalParameterRange:
    """CategoricalParameterRange: its values, in the request's order."""

    name: str
    values: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise BadRange(self.name, f"The hyperparameter '{self.name}': a categorical range needs at "
                                      "least one value.")
        if len(self.values) > MAX_CATEGORICAL_VALUES:
            raise BadRange(self.name, f"The hyperparameter '{self.name}': a categorical range has at most "
                                      f"{MAX_CATEGORICAL_VALUES} values, not {len(self.values)}.")

    def sample(self, rng: random.Random) -> str:
        return rng.choice(self.values)

    def parse(self, text: str) -> str | None:
        """`text` if it is one of this range's values, else None."""
        return text if text in self.values else None


ParameterRange = IntegerParameterRange | ContinuousParameterRange | CategoricalParameterRange


@dataclass(frozen=True)
class ParameterRanges:
    """A request's ParameterRanges, each kind in the request's order."""

    integer: tuple[IntegerParameterRange, ...] = ()
    continuous: tuple[ContinuousParameterRange, ...] = ()
    categorical: tuple[CategoricalParameterRange, ...] = ()

    @property
    def all(self) -> tuple[ParameterRange, ...]:
        """Every range in one stable order (integer, continuous, categorical): the order values are drawn in."""
        return (*self.integer, *self.continuous, *self.categorical)

    def sample(self, rng: random.Random) -> dict[str, str]:
        """One value of every range, as the hyperparameters a trial's training job gets."""
        return {r.name: r.sample(rng) for r in self.all}


def parse_parameter_ranges(request: Mapping[str, Any] | None) -> ParameterRanges:
    """The request's ParameterRanges dict (botocore's shape) as `ParameterRanges`; raises `BadRange`
    naming the first range the service would refuse."""
    request = request or {}
    if request.get("AutoParameters"):
        name = str(request["AutoParameters"][0].get("Name", ""))
        raise BadRange(name, "AutoParameters (Autotune) is not emulated: give the hyperparameter "
                             f"'{name}' an integer, continuous or categorical range.")
    for kind in ("IntegerParameterRanges", "ContinuousParameterRanges", "CategoricalParameterRanges"):
        if len(request.get(kind) or ()) > MAX_RANGES_OF_A_KIND:
            raise BadRange("", f"{kind} has at most {MAX_RANGES_OF_A_KIND} ranges.")
    ranges = ParameterRanges(
        integer=tuple(IntegerParameterRange(*_numeric(item)) for item in request.get("IntegerParameterRanges") or ()),
        continuous=tuple(ContinuousParameterRange(*_numeric(item))
                         for item in request.get("ContinuousParameterRanges") or ()),
        categorical=tuple(CategoricalParameterRange(str(item["Name"]), tuple(str(v) for v in item.get("Values") or ()))
                          for item in request.get("CategoricalParameterRanges") or ()),
    )
    seen: set[str] = set()
    for r in ranges.all:
        if r.name in seen:
            raise BadRange(r.name, f"The hyperparameter '{r.name}' has more than one range.")
        seen.add(r.name)
    return ranges


def _numeric(item: Mapping[str, Any]) -> tuple[str, str, str, ScalingType]:
    name = str(item["Name"])
    scaling = str(item.get("ScalingType", "Auto"))
    if scaling not in SCALING_TYPES:
        raise BadRange(name, f"The hyperparameter '{name}': ScalingType '{scaling}' is not one of "
                             f"{', '.join(SCALING_TYPES)}.")
    return name, str(item["MinValue"]), str(item["MaxValue"]), cast(ScalingType, scaling)


def _integer(name: str, field: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise BadRange(name, f"The hyperparameter '{name}': {field} '{text}' is not an integer.") from None


def _number(name: str, field: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadRange(name, f"The hyperparameter '{name}': {field} '{text}' is not a number.") from None
    if not math.isfinite(value):
        raise BadRange(name, f"The hyperparameter '{name}': {field} '{text}' is not a finite number.")
    return value

