"""Interim: replaced by the strategies branch."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any


def median_rule_stops(intermediate: Sequence[float], earlier: Sequence[Sequence[float]], minimize: bool) -> bool:
    epoch = len(intermediate)
    averages = [sum(e[:epoch]) / epoch for e in earlier if len(e) >= epoch]
    if not averages:
        return False
    median = statistics.median(averages)
    return intermediate[-1] > median if minimize else intermediate[-1] < median


def completion_reason(criteria: Mapping[str, Any], history: Sequence[Any], minimize: bool) -> str | None:
    target = criteria.get("TargetObjectiveMetricValue")
    if isinstance(target, (int, float)):
        for r in history:
            if r.objective is not None and (r.objective <= target if minimize else r.objective >= target):
                return "TargetObjectiveMetricValue reached"
    return None
