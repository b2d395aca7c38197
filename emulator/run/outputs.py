"""What a run writes from what it saw of its hosts: each host's result and FailureReason, the timeline
(timeline.svg), the metrics chart (metrics.svg) and the cluster's diagram (cluster.dot). The run
(emulator/run/runner.py) gathers the hosts' exits as they happen; these functions take that record
(`HostExits`) and the plan, never the run itself. A picture that cannot be written costs a warning,
never the job's outcome."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from emulator.backend import ContainerState
from emulator.planning import secrets
from emulator.planning.plan import HostPlan, Plan
from emulator.result import HostResult, Status
from emulator.run import hostfiles

if TYPE_CHECKING:
    from emulator.reports.timeline import Span

FAILURE_REASON_LIMIT = 1024  # the service truncates FailureReason to 1024 characters

Warn = Callable[[str], None]


@dataclass(frozen=True)
class HostExits:
    """What the run saw of one attempt's hosts, by container name: each exit code (None: the engine
    lost the container), when the driver saw it exit (time.monotonic()), the engine's own start and
    exit times, which ran out of memory, which the emulator stopped, the engine's error, and whether
    the hosts were started at all."""

    codes: Mapping[str, int | None]
    times: Mapping[str, float]
    engine_times: Mapping[str, tuple[float | None, float | None]]
    oom: Set[str]
    stopped_by_us: Set[str]
    errors: Mapping[str, str]
    started: bool


def failure_reason(host: HostPlan, state: ContainerState, masker: secrets.Masker,
                   tail: list[str] | None = None) -> str:
    """One failed host's FailureReason, worded as the service words it, masked and cut at its limit."""
    who = f"{host.name} ({host.group})"
    # None if the script made output/ or failure a link (it would be read on the host: hostfiles).
    failure_file = hostfiles.host_path(Path(host.host_dir), "output/failure")
    if state.oom_killed:
        text = f"{who} was killed: out of memory (OOMKilled, exit code {state.exit_code})"
    elif state.exit_code is None:
        text = f"{who} disappeared: {state.error or 'its container was removed'}"
    # One bounded read: 4x the limit leaves room for masking to shorten it; a huge file costs no more.
    # The service's words: the algorithm's /opt/ml/output/failure, then its exit code
    # ("AlgorithmError: ExecuteUserScriptError: ..., exit code: 1"); which host and group is the
    # emulator's own (job.json Emulator.FailedHost, the summary), never put into that text, which
    # code matching its start reads.
    elif failure_file and (detail := hostfiles.read_text_bounded(failure_file, 4 * FAILURE_REASON_LIMIT).strip()):
        text = f"AlgorithmError: {detail}, exit code: {state.exit_code}"
    elif state.exit_code == 137:
        text = f"{who} was killed (SIGKILL, exit code 137)"
    elif state.exit_code == 143:
        text = f"{who} was stopped (SIGTERM, exit code 143)"
    else:
        text = f"AlgorithmError: , exit code: {state.exit_code}"
        if tail:
            text += ". Last lines:\n" + "\n".join(tail)
    # Masked before the cut, so no part of a secret survives at the end of a truncated reason.
    return masker.mask(text)[:FAILURE_REASON_LIMIT]


def host_results(hosts: Sequence[HostPlan], exits: HostExits, t0: float, masker: secrets.Masker,
                 tail: Callable[[str], list[str]], now: float) -> tuple[HostResult, ...]:
    """Each host's result: its exit code, its seconds from `t0` (up to `now` for a host never seen
    exiting) and why it ended, if not well: its own failure, or the emulator stopping it. `tail`
    gives a host's last log lines by its name."""
    results = []
    for host in hosts:
        name = host.container.name
        code = exits.codes.get(name)
        reason = None
        exited = name in exits.codes
        if exited and code != 0 and name not in exits.stopped_by_us:
            state = ContainerState(name, False, code, oom_killed=name in exits.oom, error=exits.errors.get(name, ""))
            reason = failure_reason(host, state, masker, tail(host.name))
        elif name in exits.stopped_by_us:
            reason = f"stopped by the emulator (exit code {code})"
        seconds = exits.times.get(name, now) - t0
        results.append(HostResult(host.name, host.group, host.instance_type, code, max(0.0, seconds), reason))
    return tuple(results)


def timeline_spans(hosts: Sequence[HostPlan], exits: HostExits, t0: float, masker: secrets.Masker,
                   attempt: int | None = None, several: bool = False) -> list[Span]:
    """Each host's start and end: the engine's own times when it told them for every host that
    exited (Docker's State.StartedAt/FinishedAt: exact, and the start of each host as it happened),
    else the driver's clock (the hosts' common start, each exit when a poll saw it). A job of
    several attempts (`several`, or an earlier `attempt` drawn) is drawn on the driver's clock
    throughout, each earlier attempt's hosts named with its number."""
    from emulator.reports.timeline import Span

    several = several or attempt is not None
    exact = not several and bool(exits.engine_times) and all(
        started is not None and ended is not None and ended >= started
        for started, ended in exits.engine_times.values())
    # A host never seen exiting (the engine stopped answering) ran from the common start.
    first = min((started for started, _ in exits.engine_times.values() if started is not None), default=None)
    spans = []
    for host in hosts:
        name = host.container.name
        if exact:
            started, ended = exits.engine_times.get(name, (first if exits.started else None, None))
        else:
            started = t0 if exits.started else None
            ended = exits.times.get(name) if exits.started else None
        note = "out of memory" if name in exits.oom else masker.mask(exits.errors.get(name, ""))
        label = host.name if attempt is None else f"{host.name} (attempt {attempt})"
        spans.append(Span(label, host.group, started, ended, exits.codes.get(name), name in exits.stopped_by_us,
                          note))
    return spans


def write_timeline(plan: Plan, status: Status, spans: Sequence[Span], failed: str | None, warn: Warn) -> None:
    """timeline.svg beside job.json (written before it, so a reader that finds job.json finds the
    chart too); `failed`: the host blamed for a Failed job."""
    # Imported here: the chart's XML modules are needed once, at the end of a run, not at startup.
    from emulator.reports import timeline

    groups = [timeline.Group(g.name, g.instance_type) for g in plan.groups]
    try:
        timeline.write(Path(plan.job_dir) / timeline.FILE_NAME, plan.job_name, status, list(spans), groups, failed)
    except OSError as err:
        warn(f"{timeline.FILE_NAME} not written: {err}")


def write_cluster_dot(plan: Plan, warn: Warn) -> str | None:
    """cluster.dot in the job folder (the diagram `render` draws); returns its text, which the job's
    record keeps for `hetero-emu serve`'s job page (also when the file could not be written), or None
    when the diagram could not be drawn. A picture only: whatever goes wrong costs a warning."""
    source: str | None = None
    try:
        from emulator.reports import diagram

        source = diagram.graph(plan).source
        (Path(plan.job_dir) / diagram.DOT_FILE).write_text(source)
    except Exception as err:  # nothing about the picture may fail the job
        warn(f"cluster.dot not written: {err}")
    return source


def write_metrics_chart(plan: Plan, start: datetime, warn: Warn) -> None:
    """metrics.svg beside timeline.svg when the job has metric definitions, its time axis from
    `start` (the hosts' start)."""
    if not plan.spec.metric_definitions:
        return
    from emulator.reports import metrics_chart
    from emulator.run import metrics

    try:
        metrics_chart.write(Path(plan.job_dir) / metrics_chart.FILE_NAME, plan.job_name,
                            [d.name for d in plan.spec.metric_definitions], metrics.read(Path(plan.job_dir)),
                            {h.name: h.group for h in plan.hosts}, [g.name for g in plan.groups],
                            start.timestamp())
    except OSError as err:
        warn(f"{metrics_chart.FILE_NAME} not written: {err}")
