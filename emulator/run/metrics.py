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
import threading
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from emulator.jobspec.metric_definitions import Definition

# What `read` gives: its callers (the CloudWatch answers, the live page, `api.job_metrics`) name it here.
from emulator.jobspec.metric_definitions import Sample as Sample

NAMESPACE = "/aws/sagemaker/TrainingJobs"
FOLDER = "metrics"


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
