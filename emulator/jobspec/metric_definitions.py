"""A job's metric definitions (CreateTrainingJob's AlgorithmSpecification.MetricDefinitions, the
spec's `metric_definitions`; docs/metrics.md): each a name and a regular expression whose first
capture group is the metric's value, checked as the API checks them, and the `Sample` one match gives.

They are part of what a job is asked for, so the spec's rules check them here; applying them to the
hosts' lines as a job runs, and what CloudWatch answers from the samples, is emulator/run/metrics.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The API's limits (CreateTrainingJob, AlgorithmSpecification.MetricDefinitions; MetricDefinition).
MAX_DEFINITIONS = 40
MAX_NAME = 255
MAX_REGEX = 500


@dataclass(frozen=True)
class Definition:
    """One MetricDefinition: the metric's name and the expression whose first group is its value."""

    name: str
    regex: str

    def compiled(self) -> re.Pattern[str]:
        return re.compile(self.regex)


@dataclass(frozen=True)
class Sample:
    """One value of one metric, from one host's line, at `at` (seconds since the epoch)."""

    host: str
    name: str
    value: float
    at: float


def problems(definitions: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """What is wrong with MetricDefinitions as the request gives them: (field path below the list,
    message) pairs; none for a good list."""
    found: list[tuple[str, str]] = []
    if len(definitions) > MAX_DEFINITIONS:
        found.append(("", f"has {len(definitions)} entries: SageMaker allows at most {MAX_DEFINITIONS}"))
    names: set[str] = set()
    for i, entry in enumerate(definitions):
        where = f"[{i}]"
        if not isinstance(entry, Mapping):
            found.append((where, "must be a mapping with Name and Regex"))
            continue
        unknown = sorted(set(entry) - {"Name", "Regex"})
        if unknown:
            found.append((f"{where}.{unknown[0]}", "is not a MetricDefinition field (Name, Regex)"))
        name, regex = entry.get("Name"), entry.get("Regex")
        if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME:
            found.append((f"{where}.Name", f"must be a string of 1 to {MAX_NAME} characters"))
        elif name in names:
            found.append((f"{where}.Name", f"{name!r} is defined twice"))
        else:
            names.add(name)
        if not isinstance(regex, str) or not 1 <= len(regex) <= MAX_REGEX:
            found.append((f"{where}.Regex", f"must be a string of 1 to {MAX_REGEX} characters"))
            continue
        try:
            pattern = re.compile(regex)
        except re.error as err:
            found.append((f"{where}.Regex", f"{regex!r} is not a regular expression: {err}"))
            continue
        if pattern.groups < 1:
            found.append((f"{where}.Regex", f"{regex!r} has no capture group: the metric's value is the first "
                                            "group, e.g. 'loss: ([0-9.e+-]+)'"))
    return found


def parse(definitions: Sequence[Mapping[str, Any]]) -> tuple[Definition, ...]:
    """Definitions from a list `problems` found nothing wrong with."""
    return tuple(Definition(str(d["Name"]), str(d["Regex"])) for d in definitions)
