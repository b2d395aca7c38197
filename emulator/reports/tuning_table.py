"""The console's table of a tuning job's trials (`hetero-emu tune`, docs/tuning.md): a header, then a
row per trial as it ends, then the job's end: its status, its counters and the best trial with its
hyperparameters.

Fixed-width columns, so that rows printed one at a time, minutes apart, line up without knowing what
comes next: the best-so-far mark, the trial's name, its status, its objective, its tuned
hyperparameters (shortened so a row fits WIDTH columns). A name keeps its end (`…-007-a1b2c3d4`), the
part that tells trials apart. Colours follow the console's (`emulator.reports.console`): ANSI codes
only when the caller says (`use_colour`: a terminal, no NO_COLOR), green for Completed, yellow for
Stopped, red for Failed, bold for the best so far.

Pure, and read from the service's answers in botocore's shapes (`emulator.reports.trials`). Every text
from the request (names, hyperparameters, a failure reason) is shown with its control characters
escaped: a value holding an escape code must not repaint the user's terminal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from emulator.reports.trials import MINIMIZE, as_mapping, counters, format_value, objective, objective_value, trial

WIDTH = 100
MARK = 2  # "* " on the best so far
NAME = 30
STATUS = 10  # InProgress
OBJECTIVE = 12
TUNED = WIDTH - MARK - NAME - 1 - STATUS - 1 - OBJECTIVE - 2
BEST = "*"

_STATUS_COLOURS = {"Completed": "32", "Stopped": "33", "Stopping": "33", "Failed": "31"}
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def header(description: Mapping[str, Any], colour: bool = False) -> str:
    """Two lines: what the tuning job searches for (its name, strategy, objective, limits), then the
    columns' titles."""
    config = as_mapping(description.get("HyperParameterTuningJobConfig"))
    limits = as_mapping(config.get("ResourceLimits"))
    metric, kind = objective(description)
    name = safe(str(description.get("HyperParameterTuningJobName") or "tuning job"))
    most, parallel = limits.get("MaxNumberOfTrainingJobs"), limits.get("MaxParallelTrainingJobs")
    size = f"{most} trials" if isinstance(most, int) else "every combination"
    at_once = f", {parallel} at a time" if isinstance(parallel, int) else ""
    title = (f"{name}: {config.get('Strategy') or 'Bayesian'} search, {kind.lower()} {safe(metric)}; "
             f"{size}{at_once}")
    direction = "(min)" if kind == MINIMIZE else "(max)"
    columns = (" " * MARK + f"{'trial':<{NAME}} {'status':<{STATUS}} {'objective ' + direction:>{OBJECTIVE}}  "
               "tuned hyperparameters")
    return f"{_bold(title, colour)}\n{columns.rstrip()}"


def row(summary: Mapping[str, Any], objective_type: str, best_so_far: bool, colour: bool = False) -> str:
    """One ended trial (a HyperParameterTrainingJobSummary): its name, status, objective and tuned
    hyperparameters, marked when it is the best so far for `objective_type` (the caller knows the
    trials before it). A failed trial shows `-` for its objective and its reason after its values."""
    item = trial(summary)
    status = item.status[:STATUS]
    value = format_value(item.objective) if item.objective is not None else "-"
    tuned = " ".join(f"{safe(k)}={_short(safe(v))}" for k, v in item.hyperparameters.items())
    if item.failure_reason:
        tuned = f"{tuned} | {safe(item.failure_reason)}" if tuned else safe(item.failure_reason)
    named = f"{BEST} " if best_so_far else " " * MARK
    named += f"{_tail(safe(item.name), NAME):<{NAME}}"
    coloured_status = _paint(f"{status:<{STATUS}}", _STATUS_COLOURS.get(item.status), colour)
    line = f"{_bold(named, colour and best_so_far)} {coloured_status} {value:>{OBJECTIVE}}  {_clip(tuned, TUNED)}"
    return line.rstrip()


def final_lines(description: Mapping[str, Any], colour: bool = False) -> list[str]:
    """The tuning job's end (a DescribeHyperParameterTuningJob answer): its status and failure reason,
    the trials' and objectives' counters, and the best trial with its objective and every tuned
    hyperparameter, one a line."""
    status = str(description.get("HyperParameterTuningJobStatus") or "InProgress")
    name = safe(str(description.get("HyperParameterTuningJobName") or "tuning job"))
    reason = description.get("FailureReason")
    lines = [f"{name}: {_paint(status, _STATUS_COLOURS.get(status), colour)}"
             + (f" ({safe(str(reason))})" if reason else "")]
    jobs = counters(description, "TrainingJobStatusCounters")
    goals = counters(description, "ObjectiveStatusCounters")
    failed = jobs["RetryableError"] + jobs["NonRetryableError"]
    lines.append(f"trials: {jobs['Completed']} completed, {jobs['Stopped']} stopped, {failed} failed "
                 f"({jobs['RetryableError']} retryable), {jobs['InProgress']} in progress; objectives: "
                 f"{goals['Succeeded']} succeeded, {goals['Failed']} failed, {goals['Pending']} pending")
    best = as_mapping(description.get("BestTrainingJob"))
    metric, kind = objective(description)
    value = objective_value(best)
    if not best or value is None:
        lines.append("best: none yet (no trial has reported the objective)")
        return lines
    lines.append(_bold(f"best: {safe(str(best.get('TrainingJobName') or ''))}, {safe(metric)} = "
                       f"{format_value(value)} ({kind.lower()})", colour))
    for key, tuned in as_mapping(best.get("TunedHyperParameters")).items():
        lines.append(f"  {safe(str(key))} = {safe(str(tuned))}")
    return lines


def safe(text: str) -> str:
    """`text` with its control characters (an escape code, a newline) written as escapes: one line,
    and nothing the terminal acts on."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def _short(value: str) -> str:
    """A long number (a continuous range's draw: 0.012345678901234) to six significant digits; any
    other value as it is."""
    if len(value) <= 8:
        return value
    try:
        return format_value(float(value))
    except ValueError:
        return value


def _tail(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[len(text) - width + 1:]


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def _paint(text: str, code: str | None, colour: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if colour and code else text


def _bold(text: str, colour: bool) -> str:
    return f"\x1b[1m{text}\x1b[0m" if colour else text
