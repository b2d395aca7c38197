"""The process that runs one hyperparameter tuning job (`python -m emulator.tuning.loop TICKET`).

On the service a tuning job runs on its own, whatever becomes of the program that asked for it, so it
is a process of its own here, in its own session, as a training job's driver is (emulator/driver.py).
It proposes trials with the request's strategy (emulator/tuning/strategies.py), starts each as an
ordinary training job of `TrainingJobs` (its own driver process, its own record, tagged and named as
the service names trials), never more at once than MaxParallelTrainingJobs, watches each trial's
objective as its hosts report it (the metric definitions' samples, emulator/run/metrics.py), stops a
trial early where the request's early stopping or Hyperband says so, and ends the tuning job when its
limits or completion criteria say, writing the tuning job's record (emulator/state/tuning_records.py)
at every change. StopHyperParameterTuningJob sends it SIGTERM: it stops every running trial and ends
the tuning job Stopped.

Rules the service documents are cited where they apply; where it does not say, docs/tuning.md says
what this loop does instead.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from emulator.errors import ApiError, EmulatorError
from emulator.jobs.service import TrainingJobs
from emulator.jobs.ticket import DriverTicket
from emulator.jobspec.request import HostPaths
from emulator.planning import contract
from emulator.reports import tuning_chart
from emulator.run import metrics
from emulator.state import tuning_records
from emulator.state.state_folder import write_atomically
from emulator.tuning import stopping, trials
from emulator.tuning.names import trial_job_name
from emulator.tuning.ranges import parse_parameter_ranges
from emulator.tuning.request import EPOCH_KEYS
from emulator.tuning.service import with_trials
from emulator.tuning.strategies import Strategy, TrialResult, make_strategy

# How often the loop looks at its running trials: each look reads their records and metric files.
LOOK_SECONDS = 0.25
# The most trial hosts this machine runs at once unless the caller says otherwise (`max_parallel`):
# a trial's hosts are containers of a few hundred MB each, and past this many a 2-core machine
# spends its time switching between them. MaxParallelTrainingJobs above it is cut to it, with a warning.
HOSTS_PER_CORE = 2


@dataclass
class Running:
    """A trial whose training job has not ended."""

    number: int
    name: str
    definition: int
    tuned: dict[str, str]
    values: list[float] = field(default_factory=list)
    stopped_early: bool = False
    start_recorded: bool = False  # its TrainingStartTime is in the tuning job's record


class Tuner:
    """One tuning job's trials from start to end (`run`)."""

    def __init__(self, request: Mapping[str, Any], training: TrainingJobs, *, max_parallel: int | None = None,
                 cores: int | None = None) -> None:
        self.request = request
        self.name = str(request["HyperParameterTuningJobName"])
        self.training = training
        self.config: Mapping[str, Any] = request.get("HyperParameterTuningJobConfig") or {}
        self.definitions = trials.definitions(request)
        self.tags = list(request.get("Tags") or [])
        self.arn = str((tuning_records.read(self.name) or {}).get("HyperParameterTuningJobArn", ""))
        metric, kind = trials.objective_of(request, self.definitions[0])
        self.metrics = [trials.objective_of(request, d)[0] for d in self.definitions]
        self.minimize = kind == "Minimize"
        self.objective_type = kind
        parents = _parents(request)
        self.strategies: list[Strategy] = []
        for definition in self.definitions:
            ranges = parse_parameter_ranges(trials.ranges_of(request, definition))
            self.strategies.append(make_strategy(trials.config_for(request, definition), ranges, parents=parents,
                                                 static=definition.get("StaticHyperParameters") or {}))
        limits = self.config.get("ResourceLimits") or {}
        grid = self.config.get("Strategy") == "Grid"
        most = limits.get("MaxNumberOfTrainingJobs")
        self.max_jobs: int | None = most if isinstance(most, int) else (None if grid else 1)
        asked = int(limits.get("MaxParallelTrainingJobs") or 1)
        self.parallel, self.note = parallel_here(asked, self._hosts_per_trial(), max_parallel, cores)
        runtime = limits.get("MaxRuntimeInSeconds")
        self.deadline = time.monotonic() + runtime if isinstance(runtime, int) else None
        self.early = self.config.get("TrainingJobEarlyStoppingType") == "Auto"
        self.hyperband = self.config.get("Strategy") == "Hyperband"
        self.max_resource = _max_resource(self.config, self.definitions)
        self.running: dict[str, Running] = {}
        self.ended: list[tuple[Running, TrialResult]] = []
        self.exhausted: set[int] = set()
        self.launched = 0
        self.stop_asked = False
        self.finish: tuple[str, str | None] | None = None  # (status, FailureReason or message)
        self.started = time.monotonic()

    # ----------------------------------------------------------------------------------------------

    def run(self) -> str:
        """Run the tuning job to its end; its final status."""
        if self.note:
            print(f"warning: {self.note}", flush=True)
            tuning_records.update(self.name, lambda d: d.update({"Notes": [self.note]}))
        while True:
            self._look()
            self._decide()
            if self.finish is None:
                self._launch()
            if not self.running and (self.finish is not None or self._nothing_left()):
                break
            time.sleep(LOOK_SECONDS)
        if self.finish is None and self.ended and all(r.status == "Failed" for _, r in self.ended):
            # It ran fewer trials than FIRST_ATTEMPTS, all failed: a Grid of few combinations
            # (MaxNumberOfTrainingJobs, which `_all_failed` counts, is None with Grid).
            self.finish = ("Failed", trials.ALL_FAILED)
        status, why = self.finish or ("Completed", None)
        self._end(status, why)
        return status

    def ask_stop(self) -> None:
        self.stop_asked = True

    # ----------------------------------------------------------------------------------------------

    def _look(self) -> None:
        """Each running trial's status and objective so far; the ended ones moved to `ended`."""
        starts: dict[str, str] = {}
        for name, trial in list(self.running.items()):
            record = self.training.record(name)
            if record is None:
                continue
            record = self.training.checked(record)
            if not trial.start_recorded and record.training_start_time:
                starts[name] = record.training_start_time
                trial.start_recorded = True
            samples = metrics.read(record.job_dir)
            trial.values = trials.objective_values(samples, self.metrics[trial.definition])
            if record.status.is_final:
                del self.running[name]
                # The description: the record with the ended job's job.json (its times, its FailureReason).
                self._ended(trial, str(record.status), self.training.description(record))
            elif not trial.stopped_early and self._stop_early(trial):
                trial.stopped_early = True
                with contextlib.suppress(ApiError):
                    self.training.stop({"TrainingJobName": name})
        if starts:
            self._record_starts(starts)

    def _stop_early(self, trial: Running) -> bool:
        """Whether the trial is to stop now: the median rule with early stopping Auto
        (automatic-model-tuning-early-stopping.html), Hyperband's pruner, or Hyperband's MaxResource
        reached ("Once a job reaches the MaxResource value, it is stopped", API_HyperbandStrategyConfig)."""
        if not trial.values:
            return False
        if self.early:
            earlier = stopping.earlier_curves([result for _, result in self.ended])
            return stopping.median_rule_stops(trial.values, earlier, self.minimize)
        if self.hyperband:
            if self.max_resource is not None and len(trial.values) >= self.max_resource:
                # At MaxResource a trial whose own epochs are no more ends by itself, Completed: stopped
                # now it would end Stopped in the middle of finishing. One that would run on is stopped.
                return self._runs_past_max_resource(trial.definition)
            prune = getattr(self.strategies[trial.definition], "should_stop", None)
            return bool(prune(trial.number, trial.values)) if prune is not None else False
        return False

    def _runs_past_max_resource(self, definition: int) -> bool:
        """Whether the definition's trials would report more epochs than MaxResource: their static
        epochs hyperparameter is larger, or they have none to tell (then they are stopped there)."""
        epochs = _static_epochs(self.definitions[definition])
        return epochs is None or epochs > (self.max_resource or 0)

    def _ended(self, trial: Running, status: str, doc: Mapping[str, Any]) -> None:
        value = trial.values[-1] if trial.values else None
        result = TrialResult(trial.tuned, value if status in ("Completed", "Stopped") else None,
                             number=trial.number, intermediate=tuple(trial.values), status=status)
        self.ended.append((trial, result))
        reason = doc.get("FailureReason")

        def change(d: dict[str, Any]) -> None:
            for row in d.get(tuning_records.TRIALS) or []:
                if row.get("TrainingJobName") == trial.name:
                    row["TrainingJobStatus"] = status
                    for key in ("TrainingStartTime", "TrainingEndTime"):
                        if doc.get(key):
                            row[key] = doc[key]
                    row.setdefault("TrainingEndTime", _now())
                    if status == "Failed" and reason:
                        row["FailureReason"] = str(reason)[:1024]
                    if result.objective is not None:
                        row["FinalHyperParameterTuningJobObjectiveMetric"] = {
                            "Type": self.objective_type, "MetricName": self.metrics[trial.definition],
                            "Value": result.objective}
                    row["ObjectiveStatus"] = trials.objective_status(status, result.objective)
                    row["Intermediate"] = list(trial.values)
            d["LastModifiedTime"] = _now()

        self._pictures(tuning_records.update(self.name, change))

    def _decide(self) -> None:
        """Whether the tuning job is to end once its running trials have (and which trials to stop)."""
        if self.finish is not None:
            return
        record = tuning_records.read(self.name) or {}
        if self.stop_asked or record.get("HyperParameterTuningJobStatus") == "Stopping":
            self.finish = ("Stopped", None)
        elif self.deadline is not None and time.monotonic() >= self.deadline:
            # The tuning job's time is up: its running trials are stopped (as users see the service do:
            # https://github.com/aws/sagemaker-python-sdk/issues/3983) and it ends Completed, having
            # done what its limits allowed.
            self.finish = ("Completed", "MaxRuntimeInSeconds reached")
        elif self._all_failed():
            self.finish = ("Failed", trials.ALL_FAILED)
        else:
            reason = stopping.completion_reason(self.config.get("TuningJobCompletionCriteria") or {},
                                                [r for _, r in sorted(self.ended, key=lambda e: e[0].number)],
                                                self.minimize)
            if reason:
                self.finish = ("Completed", reason)
        if self.finish is not None:
            self._stop_running()
            if self.finish[0] != "Failed":
                status = "Stopping" if self.finish[0] == "Stopped" else None
                message = self.finish[1]
                tuning_records.update(self.name, lambda d: d.update(
                    {k: v for k, v in (("HyperParameterTuningJobStatus", status), ("StatusMessage", message))
                     if v is not None}))

    def _stop_running(self) -> None:
        for name in list(self.running):
            with contextlib.suppress(ApiError):
                self.training.stop({"TrainingJobName": name})

    def _all_failed(self) -> bool:
        """The service ends a tuning job Failed when its first trials all fail (its FailureReason:
        `trials.ALL_FAILED`): here when the first FIRST_ATTEMPTS trials (or all of them, if it runs
        fewer) failed, and none has succeeded."""
        done = [r for _, r in self.ended]
        if any(r.status != "Failed" for r in done):
            return False
        enough = min(trials.FIRST_ATTEMPTS, self.max_jobs or trials.FIRST_ATTEMPTS)
        return len(done) >= enough

    def _nothing_left(self) -> bool:
        if self.max_jobs is not None and self.launched >= self.max_jobs:
            return True
        return len(self.exhausted) == len(self.strategies)

    def _launch(self) -> None:
        while len(self.running) < self.parallel and not self._nothing_left():
            number = self.launched + 1
            index = self._next_definition(number)
            history = [r for t, r in self.ended if t.definition == index]
            tuned = self.strategies[index].next_trial(history)
            if tuned is None:
                self.exhausted.add(index)
                continue
            name = trial_job_name(self.name, number)
            params = trials.trial_request(self.definitions[index], tuned, name, self.tags,
                                          self.metrics[index])
            try:
                self.training.create(params, tuning_job_arn=self.arn)
            except (ApiError, EmulatorError) as err:
                # A trial that cannot be created now (its output folder taken, its image gone) would
                # fail again for the next: the tuning job fails, naming why.
                self.finish = ("Failed", f"could not create the training job {name}: {err.message}")
                # The tuning job has failed: the trials still running are stopped, as at any other end
                # (`_decide`), not waited for.
                self._stop_running()
                return
            self.launched = number
            self.running[name] = Running(number, name, index, dict(tuned))
            definition_name = self.definitions[index].get("DefinitionName")
            row: dict[str, Any] = {"Number": number, "TrainingJobName": name, "TuningJobName": self.name,
                                   "TrainingJobArn": contract.training_job_arn(name, self.training.region),
                                   "CreationTime": _now(), "TrainingJobStatus": "InProgress",
                                   "TunedHyperParameters": dict(tuned), "ObjectiveStatus": "Pending"}
            if definition_name:
                row["TrainingJobDefinitionName"] = definition_name
            self._add(row)

    def _add(self, row: dict[str, Any]) -> None:
        tuning_records.update(self.name, lambda d: d.setdefault(tuning_records.TRIALS, []).append(row))

    def _next_definition(self, number: int) -> int:
        """Which definition trial `number` comes from: the definitions in turn, skipping those whose
        strategy has no trial left (several definitions: API_CreateHyperParameterTuningJob,
        TrainingJobDefinitions)."""
        left = [i for i in range(len(self.definitions)) if i not in self.exhausted]
        return left[(number - 1) % len(left)]

    def _hosts_per_trial(self) -> int:
        config = trials.resource_config(self.definitions[0])
        groups = config.get("InstanceGroups")
        if isinstance(groups, list) and groups:
            return sum(int(g.get("InstanceCount", 1)) for g in groups if isinstance(g, Mapping))
        return int(config.get("InstanceCount", 1) or 1)

    def _record_starts(self, starts: Mapping[str, str]) -> None:
        """The trials' TrainingStartTime, once each, as their records first say it."""

        def change(d: dict[str, Any]) -> None:
            for row in d.get(tuning_records.TRIALS) or []:
                if row.get("TrainingJobName") in starts:
                    row.setdefault("TrainingStartTime", starts[row["TrainingJobName"]])

        tuning_records.update(self.name, change)

    def _end(self, status: str, why: str | None) -> None:
        runtime = int(time.monotonic() - self.started)
        done = [r for _, r in sorted(self.ended, key=lambda e: e[0].number)]
        details = {"NumberOfTrainingJobsObjectiveNotImproving": stopping.not_improving(done, self.minimize)}

        def change(d: dict[str, Any]) -> None:
            d["HyperParameterTuningJobStatus"] = status
            d["HyperParameterTuningEndTime"] = d["LastModifiedTime"] = _now()
            d["ConsumedResources"] = {"RuntimeInSeconds": runtime}
            if status == "Failed" and why:
                d["FailureReason"] = why
            elif why:
                d["StatusMessage"] = why
            if details:
                d["TuningJobCompletionDetails"] = details

        self._pictures(tuning_records.update(self.name, change))

    def _pictures(self, record: Mapping[str, Any]) -> None:
        """tuning.json (DescribeHyperParameterTuningJob's answer with the trials' rows, as job.json
        describes a training job) and tuning.svg (the objective per trial and the best so far) in the
        tuning job's folder, beside its trials' folders; rewritten as each trial ends. A folder that
        cannot be written costs the files only."""
        folder = record.get("Folder")
        if not isinstance(folder, str):
            return
        described = with_trials(record)
        with contextlib.suppress(OSError):
            Path(folder).mkdir(parents=True, exist_ok=True)
            write_atomically(Path(folder) / "tuning.json", json.dumps(described, indent=2, sort_keys=True, default=str))
            tuning_chart.write(Path(folder) / tuning_chart.FILE_NAME, described, described["TrainingJobSummaries"])


def parallel_here(asked: int, hosts_per_trial: int, given: int | None, cores: int | None) -> tuple[int, str | None]:
    """How many trials run at once here, and the warning when that is fewer than MaxParallelTrainingJobs:
    `given` (the caller's own limit) if any, else as many as this machine holds
    (HOSTS_PER_CORE hosts per core, at least one trial)."""
    if given is not None:
        if given < asked:
            return given, (f"MaxParallelTrainingJobs is {asked}; running at most {given} trials at once, as "
                           "asked (max_parallel)")
        return asked, None
    import os

    holds = max(1, (HOSTS_PER_CORE * (cores or os.cpu_count() or 1)) // max(1, hosts_per_trial))
    if asked > holds:
        return holds, (f"MaxParallelTrainingJobs is {asked}, but this machine holds {holds} trial(s) of "
                       f"{hosts_per_trial} host(s) at once ({HOSTS_PER_CORE} hosts per core): running {holds} at "
                       "once; set max_parallel (EmulatorSession(max_parallel_trials=...), hetero-emu tune "
                       "--max-parallel) to choose")
    return asked, None


def _max_resource(config: Mapping[str, Any], definitions: Sequence[Mapping[str, Any]]) -> int | None:
    """Hyperband's MaxResource: its StrategyConfig's, else a static epochs hyperparameter's
    (API_HyperbandStrategyConfig)."""
    band = ((config.get("StrategyConfig") or {}).get("HyperbandStrategyConfig") or {})
    if isinstance(band.get("MaxResource"), int):
        return int(band["MaxResource"])
    return next((e for d in definitions if (e := _static_epochs(d)) is not None), None)


def _static_epochs(definition: Mapping[str, Any]) -> int | None:
    """The definition's static epochs hyperparameter (the first of EPOCH_KEYS it has), as a number."""
    static = definition.get("StaticHyperParameters") or {}
    for key in EPOCH_KEYS:
        if key in static:
            with contextlib.suppress(TypeError, ValueError):
                return int(str(static[key]).strip('"'))
    return None


def _parents(request: Mapping[str, Any]) -> list[TrialResult]:
    """The warm start parents' ended trials, as the create checked them."""
    out: list[TrialResult] = []
    for parent in (request.get("WarmStartConfig") or {}).get("ParentHyperParameterTuningJobs") or []:
        out += trials.parent_results(tuning_records.read(str((parent or {}).get("HyperParameterTuningJobName", "")))
                                     or {})
    return out


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def main(argv: list[str]) -> int:
    ticket = DriverTicket.read(Path(argv[0]))
    options = ticket.options
    training = TrainingJobs(ticket.s3_root, region=str(ticket.overrides["region"]), images=options.images or {},
                            engine_name=ticket.engine, base_dir=ticket.base_dir, s3_origin=ticket.s3_origin,
                            gpus=options.gpus, cpus=options.cpus, inject=tuple(options.inject or ()),
                            host_paths=HostPaths.from_json(ticket.host_paths))
    given = ticket.overrides.get("max_parallel")
    tuner = Tuner(ticket.request, training, max_parallel=given if isinstance(given, int) else None)
    # SIGTERM (StopHyperParameterTuningJob): the loop stops its trials and ends the tuning job Stopped.
    signal.signal(signal.SIGTERM, lambda *_: tuner.ask_stop())
    try:
        status = tuner.run()
    except BaseException as err:  # the tuning job must not stay InProgress with no loop behind it
        message = f"the tuning job's loop failed: {type(err).__name__}: {err}"
        print(message, file=sys.stderr, flush=True)
        for name in list(tuner.running):
            with contextlib.suppress(Exception):
                training.stop({"TrainingJobName": name})
        tuning_records.update(tuner.name, lambda d: d.update({
            "HyperParameterTuningJobStatus": "Failed", "FailureReason": message[:1024],
            "HyperParameterTuningEndTime": _now(), "LastModifiedTime": _now()}))
        raise
    return 0 if status != "Failed" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
