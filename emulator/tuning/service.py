"""The tuning layer's service: a machine's hyperparameter tuning jobs as the SageMaker API has them
(CreateHyperParameterTuningJob, DescribeHyperParameterTuningJob, ListHyperParameterTuningJobs,
StopHyperParameterTuningJob, ListTrainingJobsForHyperParameterTuningJob), in the API's shapes and with
its errors, beneath every front end (the AWS service of emulator/aws/training.py, so the SDK
sessions and `serve` alike; `hetero-emu tune`).

CreateHyperParameterTuningJob checks the request by the service's rules (emulator/tuning/request.py),
each definition's ranges and strategy, and a first trial's CreateTrainingJob request of each
definition by the training jobs' own checks, so a request the service refuses is refused at once.
Then the tuning job's loop (`python -m emulator.tuning.loop`, emulator/tuning/loop.py) runs on its
own, as the service's tuning job does whatever becomes of the caller; it starts the trials as
ordinary training jobs of `TrainingJobs` and writes the tuning job's record
(emulator/state/tuning_records.py), which every answer here is read from.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import random
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from emulator.errors import ApiError
from emulator.jobs.service import TrainingJobs, alive, last_line, page_start, spawn
from emulator.jobs.ticket import DriverTicket
from emulator.state import tuning_records
from emulator.tuning import request as rules
from emulator.tuning import trials
from emulator.tuning.names import trial_job_name
from emulator.tuning.ranges import parse_parameter_ranges
from emulator.tuning.strategies import TrialResult, make_strategy

# The statuses a tuning job ends in (API_DescribeHyperParameterTuningJob, HyperParameterTuningJobStatus).
FINAL = frozenset({"Completed", "Failed", "Stopped"})
NOT_FOUND = "Amazon SageMaker can't find a tuning job with name {name}"
# The record's keys that DescribeHyperParameterTuningJob does not answer.
PRIVATE = (tuning_records.DRIVER_PID, tuning_records.TRIALS, "Request", "Tags", "Folder", "StatusMessage",
           "MaxParallelHere", "Notes")


def tuning_job_arn(name: str, region: str) -> str:
    # The account is the emulator's placeholder (emulator/planning/contract.py, training_job_arn).
    return f"arn:aws:sagemaker:{region}:000000000000:hyper-parameter-tuning-job/{name.lower()}"


def loop_log(name: str) -> Path:
    """The log of a tuning job's loop: its warnings and, if it dies, its last words."""
    return tuning_records.folder() / f"{name}.log"


class TuningJobs:
    """The hyperparameter tuning jobs of this machine, each trial a training job of `training`.
    `max_parallel`: the most trials this machine runs at once, whatever a request's
    MaxParallelTrainingJobs (None: as many as the request asks, with a warning when that is more than
    `trials_fit` says this machine holds)."""

    def __init__(self, training: TrainingJobs, *, max_parallel: int | None = None) -> None:
        self.training = training
        self.max_parallel = max_parallel
        self.loops: dict[str, subprocess.Popen[bytes]] = {}

    # ----------------------------------------------------------------------------------------------

    def create(self, params: dict[str, Any]) -> dict[str, Any]:
        name = str(params.get("HyperParameterTuningJobName", ""))
        if not tuning_records.valid_name(name):
            raise ApiError("ValidationException", f"HyperParameterTuningJobName '{name[:64]}' must match "
                           "^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,31}")
        rules.check(params)
        raw: dict[str, Any] = json.loads(json.dumps(params, default=str))
        arn = tuning_job_arn(name, self.training.region)
        parents = self.parents(raw)
        folder = None
        for definition in trials.definitions(raw):
            ranges = parse_parameter_ranges(trials.ranges_of(raw, definition))
            # Made once here for its checks (Grid's, the Optuna strategies'); the loop makes its own.
            make_strategy(trials.config_for(raw, definition), ranges, parents=parents,
                          static=definition.get("StaticHyperParameters") or {})
            # A trial's request as the loop will make it, checked as CreateTrainingJob checks one: a
            # definition no trial could run is refused now, not after the tuning job has started.
            sample = ranges.sample(random.Random(0))
            trial = trials.trial_request(definition, sample, trial_job_name(name, 1, "0" * 8), raw.get("Tags") or [],
                                         trials.objective_of(raw, definition)[0])
            spec = self.training.validated(trial)[1]
            folder = folder or spec.output_path / name
        now = datetime.now(timezone.utc).isoformat()
        status, objective = trials.counters([])
        doc = {"HyperParameterTuningJobName": name, "HyperParameterTuningJobArn": arn,
               "HyperParameterTuningJobStatus": "InProgress", "CreationTime": now, "LastModifiedTime": now,
               "TrainingJobStatusCounters": status, "ObjectiveStatusCounters": objective,
               "Request": {k: v for k, v in raw.items() if k != "Tags"}, "Tags": raw.get("Tags") or [],
               tuning_records.TRIALS: [], "Folder": str(folder)}
        if not tuning_records.claim(name, doc):
            raise ApiError("ResourceInUse", f"Hyperparameter tuning job names must be unique within an AWS account "
                           f"and region, and a tuning job with this name already exists ({arn})")
        ticket = tuning_records.folder() / f"{name}.ticket.json"
        training = self.training
        DriverTicket(raw, training.base_dir, training.s3_root, training.s3_origin, training.engine_name,
                     replace(training.options, created=datetime.now(timezone.utc)),
                     {"region": training.region, "max_parallel": self.max_parallel},
                     training.host_paths.to_json()).write(ticket)
        proc = spawn("emulator.tuning.loop", ticket, loop_log(name))
        self.loops[name] = proc
        tuning_records.update(name, lambda d: d.update({tuning_records.DRIVER_PID: proc.pid}))
        return {"HyperParameterTuningJobArn": arn}

    def parents(self, raw: Mapping[str, Any]) -> builtins.list[TrialResult]:
        """The ended trials of the WarmStartConfig's parent tuning jobs, which Bayesian and Hyperband
        learn from (automatic-model-tuning-warm-start.html): each parent must be a tuning job of this
        machine that has ended, and the request must keep the parent's objective and hyperparameters
        as the service's restrictions say (`trials.warm_start_problems`)."""
        warm = raw.get("WarmStartConfig")
        if not isinstance(warm, Mapping):
            return []
        found: builtins.list[TrialResult] = []
        for parent in warm.get("ParentHyperParameterTuningJobs") or []:
            parent_name = str((parent or {}).get("HyperParameterTuningJobName", ""))
            doc = tuning_records.read(parent_name)
            if doc is None:
                raise ApiError("ResourceNotFound", f"WarmStartConfig: the parent tuning job {parent_name[:64]} "
                               "was not found (a warm start's parents are tuning jobs run on this machine)")
            if doc.get("HyperParameterTuningJobStatus") not in FINAL:
                raise ApiError("ValidationException", f"WarmStartConfig: the parent tuning job {parent_name} "
                               "has not ended; a parent must be Completed, Stopped or Failed")
            problems = trials.warm_start_problems(raw, doc.get("Request") or {}, str(warm.get("WarmStartType")))
            if problems:
                raise ApiError("ValidationException", f"WarmStartConfig: the parent tuning job {parent_name}: "
                               + "; ".join(problems))
            found += trials.parent_results(doc)
        return found

    def describe(self, params: dict[str, Any]) -> dict[str, Any]:
        """DescribeHyperParameterTuningJob."""
        doc = self.found(str(params.get("HyperParameterTuningJobName", "")))
        warm = (doc.get("Request") or {}).get("WarmStartConfig") or {}
        parents = [d for p in warm.get("ParentHyperParameterTuningJobs") or []
                   if (d := tuning_records.read(str((p or {}).get("HyperParameterTuningJobName", "")))) is not None]
        return description(doc, parents=parents)

    def stop(self, params: dict[str, Any]) -> dict[str, Any]:
        """StopHyperParameterTuningJob: Stopping at once; the loop stops every running trial and ends the
        tuning job Stopped."""
        doc = self.found(str(params.get("HyperParameterTuningJobName", "")))
        name = doc["HyperParameterTuningJobName"]
        status = doc.get("HyperParameterTuningJobStatus")
        if status in FINAL:
            raise ApiError("ValidationException", f"The request was rejected because the tuning job is in status "
                           f"{status}.")
        tuning_records.update(name, lambda d: d.update({"HyperParameterTuningJobStatus": "Stopping",
                                                         "LastModifiedTime": _now()}))
        pid = doc.get(tuning_records.DRIVER_PID)
        if isinstance(pid, int) and self.loop_alive(name, pid):
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile: `checked` ends the record
                os.kill(pid, signal.SIGTERM)
        return {}

    def list(self, params: dict[str, Any]) -> dict[str, Any]:
        """ListHyperParameterTuningJobs: by name (the default), creation time or status; filters as the
        API's."""
        docs = [d for n in tuning_records.names() if (d := self.checked(tuning_records.read(n))) is not None]
        if params.get("NameContains"):
            docs = [d for d in docs if str(params["NameContains"]).lower() in d["HyperParameterTuningJobName"].lower()]
        if params.get("StatusEquals"):
            docs = [d for d in docs if d.get("HyperParameterTuningJobStatus") == params["StatusEquals"]]
        rows = [list_row(d) for d in docs]
        for key, after in (("CreationTimeAfter", True), ("CreationTimeBefore", False),
                           ("LastModifiedTimeAfter", True), ("LastModifiedTimeBefore", False)):
            bound = params.get(key)
            if isinstance(bound, datetime):
                field = key.replace("After", "").replace("Before", "")
                rows = [r for r in rows if r.get(field) and (_time(r[field]) > bound) == after]
        sort_key = {"CreationTime": "CreationTime", "Status": "HyperParameterTuningJobStatus"}.get(
            str(params.get("SortBy")), "HyperParameterTuningJobName")
        rows.sort(key=lambda r: str(r.get(sort_key)), reverse=params.get("SortOrder") == "Descending")
        return _page(rows, params, "HyperParameterTuningJobSummaries", "ListHyperParameterTuningJobs")

    def list_training_jobs(self, params: dict[str, Any]) -> dict[str, Any]:
        """ListTrainingJobsForHyperParameterTuningJob: the trials, by name (the default), creation time,
        status or final objective value (which leaves out trials without one, as the API says)."""
        doc = self.found(str(params.get("HyperParameterTuningJobName", "")))
        rows = [trials.summary(t) for t in doc.get(tuning_records.TRIALS) or []]
        if params.get("StatusEquals"):
            rows = [r for r in rows if r.get("TrainingJobStatus") == params["StatusEquals"]]
        by = str(params.get("SortBy") or "Name")
        if by == "FinalObjectiveMetricValue":
            rows = [r for r in rows if isinstance((r.get("FinalHyperParameterTuningJobObjectiveMetric") or {})
                                                  .get("Value"), (int, float))]
            rows.sort(key=lambda r: float(r["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]),
                      reverse=params.get("SortOrder") == "Descending")
        else:
            key = {"CreationTime": "CreationTime", "Status": "TrainingJobStatus"}.get(by, "TrainingJobName")
            rows.sort(key=lambda r: str(r.get(key)), reverse=params.get("SortOrder") == "Descending")
        return _page(rows, params, "TrainingJobSummaries", "ListTrainingJobsForHyperParameterTuningJob")

    # -- what the front ends read: the record as it stands ----------------------------------------

    def record(self, name: str) -> dict[str, Any] | None:
        """The tuning job's record (its trials under "Trials"), or None for a name no tuning job had."""
        return self.checked(tuning_records.read(name))

    def names(self) -> builtins.list[str]:
        return tuning_records.names()

    def found(self, name: str) -> dict[str, Any]:
        doc = self.checked(tuning_records.read(name))
        if doc is None:
            raise ApiError("ResourceNotFound", NOT_FOUND.format(name=name[:64]))
        return doc

    def checked(self, doc: dict[str, Any] | None) -> dict[str, Any] | None:
        """The record, Failed (or Stopped, if it was stopping) if its loop died without ending it, with
        the loop's last words."""
        if doc is None or doc.get("HyperParameterTuningJobStatus") in FINAL:
            return doc
        name = str(doc.get("HyperParameterTuningJobName"))
        pid = doc.get(tuning_records.DRIVER_PID)
        if not isinstance(pid, int) or self.loop_alive(name, pid):
            return doc
        stopping = doc.get("HyperParameterTuningJobStatus") == "Stopping"
        reason = None if stopping else f"the tuning job's loop ended: {last_line(loop_log(name))}"

        def end(d: dict[str, Any]) -> None:
            if d.get("HyperParameterTuningJobStatus") in FINAL:
                return
            d["HyperParameterTuningJobStatus"] = "Stopped" if stopping else "Failed"
            d["HyperParameterTuningEndTime"] = d["LastModifiedTime"] = _now()
            if reason:
                d["FailureReason"] = reason

        return tuning_records.update(name, end)

    def loop_alive(self, name: str, pid: int) -> bool:
        return alive(self.loops.get(name), pid)


def description(doc: Mapping[str, Any], *, parents: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """DescribeHyperParameterTuningJob's answer from a tuning job's record; `parents`: the records of
    its warm-start parents, whose best trial may be the OverallBestTrainingJob."""
    asked = dict(doc.get("Request") or {})
    out: dict[str, Any] = {k: v for k, v in asked.items() if k in (
        "HyperParameterTuningJobConfig", "TrainingJobDefinition", "TrainingJobDefinitions", "WarmStartConfig",
        "Autotune")}
    if isinstance(out.get("TrainingJobDefinition"), Mapping):
        out["TrainingJobDefinition"] = trials.described_definition(asked, out["TrainingJobDefinition"])
    if isinstance(out.get("TrainingJobDefinitions"), list):
        out["TrainingJobDefinitions"] = [trials.described_definition(asked, d) for d in out["TrainingJobDefinitions"]]
    out.update({k: v for k, v in doc.items() if k not in PRIVATE})
    done = list(doc.get(tuning_records.TRIALS) or [])
    out["TrainingJobStatusCounters"], out["ObjectiveStatusCounters"] = trials.counters(done)
    minimize = _minimize(asked)
    top = trials.best(done, minimize)
    if top is not None:
        out["BestTrainingJob"] = trials.summary(top)
    else:
        out.pop("BestTrainingJob", None)
    # With IdenticalDataAndAlgorithm, the best of this tuning job's and its parents' trials
    # (API_DescribeHyperParameterTuningJob, OverallBestTrainingJob).
    if (asked.get("WarmStartConfig") or {}).get("WarmStartType") == "IdenticalDataAndAlgorithm":
        overall = trials.best([*done, *(t for p in parents for t in p.get(tuning_records.TRIALS) or [])], minimize)
        if overall is not None:
            out["OverallBestTrainingJob"] = trials.summary(overall)
    return out


def with_trials(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The description with the trials' ListTrainingJobsForHyperParameterTuningJob rows, in the order
    they were created, under `TrainingJobSummaries`: what `describe`, tuning.json and the page show."""
    rows = [trials.summary(t) for t in doc.get(tuning_records.TRIALS) or []]
    return {**description(doc), "TrainingJobSummaries": rows}


def list_row(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A tuning job's ListHyperParameterTuningJobs row (HyperParameterTuningJobSummary)."""
    described = description(doc)
    config = described.get("HyperParameterTuningJobConfig") or {}
    row: dict[str, Any] = {k: described[k] for k in ("HyperParameterTuningJobName", "HyperParameterTuningJobArn",
                                     "HyperParameterTuningJobStatus", "CreationTime", "HyperParameterTuningEndTime",
                                     "LastModifiedTime", "TrainingJobStatusCounters", "ObjectiveStatusCounters")
           if k in described}
    row["Strategy"] = config.get("Strategy", "Bayesian")
    if "ResourceLimits" in config:
        row["ResourceLimits"] = config["ResourceLimits"]
    return row


def _minimize(asked: Mapping[str, Any]) -> bool:
    return trials.objective_of(asked, trials.definitions(asked)[0])[1] == "Minimize"


def _page(rows: list[dict[str, Any]], params: Mapping[str, Any], key: str, operation: str) -> dict[str, Any]:
    start = page_start(params.get("NextToken"), len(rows), operation)
    size = int(params.get("MaxResults") or 10)
    out: dict[str, Any] = {key: rows[start:start + size]}
    if start + size < len(rows):
        out["NextToken"] = str(start + size)
    return out


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _time(text: Any) -> datetime:
    stamp = text if isinstance(text, datetime) else datetime.fromisoformat(str(text))
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)
