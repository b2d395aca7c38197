"""A tuning job's trials as its pictures and its console table read them: from the service's own
answers (DescribeHyperParameterTuningJob, ListTrainingJobsForHyperParameterTuningJob's
HyperParameterTrainingJobSummary), in creation order, each with its final objective or none, and the
best objective so far.

Pure: reads mappings in botocore's shapes and nothing else, so the chart (`tuning_chart`) and the
table (`tuning_table`) draw what any caller got from the service, the emulator's or the real one.
Times may be datetimes (boto3 parses them) or ISO 8601 text (a JSON record); anything else, or a
member missing, is read as unknown rather than refused: a picture of a half-written record still draws.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

MAXIMIZE = "Maximize"
MINIMIZE = "Minimize"


@dataclass(frozen=True)
class Trial:
    """One training job of a tuning job, as a HyperParameterTrainingJobSummary says it."""

    name: str
    status: str  # TrainingJobStatus: InProgress, Completed, Failed, Stopping, Stopped
    objective: float | None  # FinalHyperParameterTuningJobObjectiveMetric.Value, when finite
    hyperparameters: Mapping[str, str] = field(default_factory=dict)  # TunedHyperParameters
    failure_reason: str = ""
    created: float | None = None  # CreationTime, seconds since the epoch


def trial(summary: Mapping[str, Any]) -> Trial:
    """The trial a HyperParameterTrainingJobSummary describes."""
    tuned = as_mapping(summary.get("TunedHyperParameters"))
    return Trial(
        name=str(summary.get("TrainingJobName") or ""),
        status=str(summary.get("TrainingJobStatus") or "InProgress"),
        objective=objective_value(summary),
        hyperparameters={str(k): str(v) for k, v in tuned.items()},
        failure_reason=str(summary.get("FailureReason") or ""),
        created=timestamp(summary.get("CreationTime")),
    )


def trials(summaries: Sequence[Mapping[str, Any]]) -> list[Trial]:
    """The trials in creation order (ListTrainingJobsForHyperParameterTuningJob lists them newest
    first by default); a trial without a known CreationTime keeps its place after those with one."""
    found = [trial(s) for s in summaries if isinstance(s, Mapping)]
    order = sorted(range(len(found)), key=lambda i: (found[i].created is None, found[i].created or 0.0, i))
    return [found[i] for i in order]


def objective_value(summary: Mapping[str, Any]) -> float | None:
    """A summary's final objective, or None when it has none (a failed trial, one still running) or
    when what it holds is not a finite number."""
    value = as_mapping(summary.get("FinalHyperParameterTuningJobObjectiveMetric")).get("Value")
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def objective(description: Mapping[str, Any]) -> tuple[str, str]:
    """The tuning job's objective (MetricName, Type) from its HyperParameterTuningJobConfig, else from
    its best trial's final metric; Type defaults to Maximize, the SDK's default objective_type."""
    config = as_mapping(description.get("HyperParameterTuningJobConfig"))
    goal = as_mapping(config.get("HyperParameterTuningJobObjective"))
    best = as_mapping(description.get("BestTrainingJob"))
    final = as_mapping(best.get("FinalHyperParameterTuningJobObjectiveMetric"))
    name = goal.get("MetricName") or final.get("MetricName") or ""
    kind = goal.get("Type") or final.get("Type")
    return str(name), MINIMIZE if kind == MINIMIZE else MAXIMIZE


def better(value: float, than: float | None, objective_type: str) -> bool:
    """Whether `value` beats `than` (None: nothing yet) for the objective's Type."""
    if than is None:
        return True
    return value < than if objective_type == MINIMIZE else value > than


def best_so_far(found: Sequence[Trial], objective_type: str) -> list[float | None]:
    """Per trial in order, the best objective among it and those before it (None until one has one).
    Every trial with an objective counts, a stopped one's too: its final metric is the last it reported
    (https://docs.aws.amazon.com/sagemaker/latest/dg/automatic-model-tuning-early-stopping.html)."""
    best: float | None = None
    out: list[float | None] = []
    for item in found:
        if item.objective is not None and better(item.objective, best, objective_type):
            best = item.objective
        out.append(best)
    return out


def best_trial(description: Mapping[str, Any], found: Sequence[Trial], objective_type: str) -> Trial | None:
    """The tuning job's BestTrainingJob when it names one of `found`, else the first trial with the
    best objective (the service's BestTrainingJob is the one it chose; it is trusted when given)."""
    named = as_mapping(description.get("BestTrainingJob")).get("TrainingJobName")
    for item in found:
        if named and item.name == named:
            return item
    best: Trial | None = None
    for item in found:
        if item.objective is not None and better(item.objective, best.objective if best else None, objective_type):
            best = item
    return best


def timestamp(value: Any) -> float | None:
    """Seconds since the epoch of a datetime or ISO 8601 text (naive ones read as UTC); None otherwise."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            return None
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()
    return None


def counters(description: Mapping[str, Any], member: str) -> dict[str, int]:
    """TrainingJobStatusCounters or ObjectiveStatusCounters, each counter an int (0 when missing)."""
    keys = {"TrainingJobStatusCounters": ("Completed", "InProgress", "RetryableError", "NonRetryableError",
                                          "Stopped"),
            "ObjectiveStatusCounters": ("Succeeded", "Pending", "Failed")}[member]
    given = as_mapping(description.get(member))
    return {k: v if isinstance(v, int) and not isinstance(v, bool) else 0 for k in keys for v in [given.get(k)]}


def format_value(value: float) -> str:
    """An objective as the table and the picture print it: six significant digits."""
    return f"{value:.6g}"


def as_mapping(value: Any) -> Mapping[str, Any]:
    """`value` when it is a mapping, else an empty one: a member of an answer read defensively."""
    return value if isinstance(value, Mapping) else {}
