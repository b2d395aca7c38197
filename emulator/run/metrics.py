"""Training metrics as the service makes them: the job's metric definitions applied to every line its
hosts print (docs/metrics.md).

A `MetricDefinitions` entry is a name and a regular expression; the service searches each line of
the algorithm's output with every expression and, where one matches, takes its first capture group
as the metric's value (https://docs.aws.amazon.com/sagemaker/latest/dg/training-metrics.html,
Define training metrics). Those values are CloudWatch metrics of
the namespace `/aws/sagemaker/TrainingJobs` with the dimension `TrainingJobName` (what the SDK's
`TrainingJobAnalytics` asks for), and the last value of each is in DescribeTrainingJob's
`FinalMetricDataList`.

Here each value is a `Sample`, written as a line of JSON to `<job>/metrics/algo-N.jsonl` the moment
its log line arrives (the LogCollector feeds a `Recorder`), so CloudWatch questions are answered
while the job runs and after. Reading, statistics and the final list are pure functions of samples.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

NAMESPACE = "/aws/sagemaker/TrainingJobs"
# The API's limits (CreateTrainingJob, AlgorithmSpecification.MetricDefinitions; MetricDefinition).
MAX_DEFINITIONS = 40
MAX_NAME = 255
MAX_REGEX = 500
FOLDER = "metrics"


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


class Extractor:
    """Applies the definitions to lines: every definition whose expression matches a line gives a
    sample from its first group, when that reads as a number."""

    def __init__(self, definitions: Sequence[Definition]) -> None:
        self._patterns = [(d.name, d.compiled()) for d in definitions]

    def samples(self, host: str, line: str, at: float) -> list[Sample]:
        found = []
        for name, pattern in self._patterns:
            match = pattern.search(line)
            if match is None or match.group(1) is None:
                continue
            try:
                value = float(match.group(1))
            except ValueError:
                continue
            if math.isfinite(value):
                found.append(Sample(host, name, value, at))
        return found


class Recorder:
    """Writes each host's samples to `<job>/metrics/algo-N.jsonl` as its lines arrive (thread-safe:
    one log thread per host feeds it)."""

    def __init__(self, job_dir: Path, definitions: Sequence[Definition]) -> None:
        self._extractor = Extractor(definitions)
        self._folder = job_dir / FOLDER
        self._lock = threading.Lock()

    def feed(self, host: str, data: bytes, at: float) -> None:
        """The complete lines `data` of `host`'s output (what its log file got)."""
        found = [s for line in data.decode("utf-8", errors="replace").splitlines()
                 for s in self._extractor.samples(host, line.rsplit("\r", 1)[-1], at)]
        if not found:
            return
        with self._lock:
            self._folder.mkdir(exist_ok=True)
            with open(self._folder / f"{host}.jsonl", "a") as out:
                for s in found:
                    out.write(json.dumps({"name": s.name, "value": s.value, "at": s.at}) + "\n")


def read(job_dir: Path) -> list[Sample]:
    """Every sample a job's hosts gave so far, in time order (a half-written last line is skipped)."""
    samples = []
    for path in sorted((job_dir / FOLDER).glob("algo-*.jsonl")):
        host = path.stem
        for line in path.read_text(errors="replace").splitlines():
            try:
                item = json.loads(line)
                samples.append(Sample(host, str(item["name"]), float(item["value"]), float(item["at"])))
            except (ValueError, KeyError, TypeError):
                continue
    return sorted(samples, key=lambda s: (s.at, s.host))


def final(samples: Iterable[Sample]) -> list[dict[str, Any]]:
    """FinalMetricDataList: each metric's last value, whichever host gave it, by metric name."""
    last: dict[str, Sample] = {}
    for sample in samples:
        if sample.name not in last or sample.at >= last[sample.name].at:
            last[sample.name] = sample
    return [{"MetricName": name, "Value": s.value, "Timestamp": _time(s.at)} for name, s in sorted(last.items())]


def datapoints(samples: Iterable[Sample], start: float, end: float, period: int,
               statistics: Sequence[str]) -> list[dict[str, Any]]:
    """GetMetricStatistics' Datapoints: the samples in [start, end) grouped by `period` seconds from
    `start`, each group with the statistics asked for."""
    buckets: dict[int, list[float]] = {}
    for sample in samples:
        if start <= sample.at < end:
            buckets.setdefault(int((sample.at - start) // period), []).append(sample.value)
    points = []
    for index, values in sorted(buckets.items()):
        every = {"SampleCount": float(len(values)), "Average": sum(values) / len(values), "Sum": sum(values),
                 "Minimum": min(values), "Maximum": max(values)}
        points.append({"Timestamp": _time(start + index * period), "Unit": "None",
                       **{name: every[name] for name in statistics if name in every}})
    return points


def _time(at: float) -> datetime:
    return datetime.fromtimestamp(at, timezone.utc)
