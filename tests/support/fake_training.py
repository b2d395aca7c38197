"""A fake `TrainingJobs` for the tuning loop's tests (emulator/tuning/loop.py): each trial it creates
follows a scripted life instead of running a driver.

The loop talks to its training jobs through `create`, `record`, `checked`, `stop` and `region`, and
reads each trial's objective from `<job_dir>/metrics/algo-N.jsonl`; this fake has exactly those.
A trial's life (`Life`) is the objective values its host reports, one per tick, then the status it
ends in. Time is ticks, not seconds: each `checked(record)` of a running trial (the loop checks every
running trial once per look) is one tick of that trial, which writes its next value as a metric
sample, or ends it when it has none left. A `stop` takes effect at the trial's next tick: it ends
Stopped without reporting more.

It records what a test asserts on: every create's request and `tuning_job_arn` (`created`), every
stop (`stops`, with how many values the trial had reported by then) and the most trials running at
once (`most_at_once`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from emulator.errors import ApiError
from emulator.result import Status


@dataclass(frozen=True)
class Life:
    """A trial's scripted life: the objective values it reports, one per tick, then how it ends.
    `reason`: the FailureReason of a Failed trial."""

    values: tuple[float, ...] = ()
    ends: Status = Status.COMPLETED
    reason: str = "AlgorithmError: the script exited 1"


def lasting(ticks: int = 100_000, value: float = 1.0) -> Life:
    """A trial that runs until it is stopped (in practice: its ticks outlast any test)."""
    return Life((value,) * ticks)


# Which life trial `number` (from 1, in creation order) with tuned and static `hyperparameters` has.
Script = Callable[[int, Mapping[str, str]], Life]
# A create that raises instead (an ApiError, as the real create's checks raise), by trial number.
Refusal = Callable[[int, Mapping[str, Any]], ApiError | None]
# A decoy metric every trial reports beside the objective, with other values: the loop must not read it.
DECOY = "train:decoy"


@dataclass
class FakeRecord:
    """What the loop reads of a training job's record (emulator.state.job_records.JobRecord)."""

    job_name: str
    job_dir: Path
    status: Status
    doc: dict[str, Any] = field(default_factory=dict)
    training_start_time: str | None = None


@dataclass
class Trial:
    number: int
    params: dict[str, Any]
    tuning_job_arn: str | None
    life: Life
    record: FakeRecord
    reported: int = 0
    stop_asked: bool = False


@dataclass(frozen=True)
class Stop:
    """A `stop` of a trial: which, and how many values it had reported by then."""

    name: str
    reported: int
    was_running: bool


class FakeTraining:
    """Stands in for emulator.jobs.service.TrainingJobs before the tuning loop (see the module's doc)."""

    def __init__(self, root: Path, metric: str, script: Script, *, refuse: Refusal | None = None,
                 region: str = "us-west-2") -> None:
        self.root = root
        self.metric = metric
        self.script = script
        self.refuse = refuse
        self.region = region
        self.trials: dict[str, Trial] = {}
        self.stops: list[Stop] = []
        self.most_at_once = 0
        self._clock = 0.0
        self._lock = threading.Lock()

    # -- what the loop calls ---------------------------------------------------------------------

    def create(self, params: dict[str, Any], *, tuning_job_arn: str | None = None) -> dict[str, Any]:
        with self._lock:
            number = len(self.trials) + 1
            refused = self.refuse(number, params) if self.refuse is not None else None
            if refused is not None:
                raise refused
            name = str(params["TrainingJobName"])
            assert name not in self.trials, f"the loop created {name} twice"
            record = FakeRecord(name, self.root / name, Status.IN_PROGRESS,
                                {"TrainingJobName": name, "TrainingJobStatus": "InProgress"},
                                training_start_time=_now())
            record.job_dir.mkdir(parents=True)
            hyperparameters = {str(k): str(v) for k, v in (params.get("HyperParameters") or {}).items()}
            self.trials[name] = Trial(number, json.loads(json.dumps(params)), tuning_job_arn,
                                      self.script(number, hyperparameters), record)
            self.most_at_once = max(self.most_at_once, len(self.running()))
            return {"TrainingJobArn": f"arn:aws:sagemaker:{self.region}:000000000000:training-job/{name}"}

    def record(self, name: str) -> FakeRecord | None:
        trial = self.trials.get(name)
        return trial.record if trial is not None else None

    def checked(self, record: FakeRecord) -> FakeRecord:
        """One tick of the trial: its next value reported, or its end."""
        with self._lock:
            trial = self.trials[record.job_name]
            if not trial.record.status.is_final:
                self._tick(trial)
            return trial.record

    def description(self, record: FakeRecord) -> dict[str, Any]:
        """DescribeTrainingJob's view of the trial: its record's fields (an ended job's FailureReason)."""
        return dict(record.doc)

    def stop(self, params: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            name = str(params.get("TrainingJobName"))
            trial = self.trials.get(name)
            if trial is None:
                raise ApiError("ResourceNotFound", "Requested resource not found.")
            running = not trial.record.status.is_final
            self.stops.append(Stop(name, trial.reported, running))
            if not running:
                raise ApiError("ValidationException", "The request was rejected because the training job is "
                               f"in status {trial.record.status}.")
            trial.stop_asked = True
            trial.record.status = Status.STOPPING
            return {}

    # -- what the tests read ---------------------------------------------------------------------

    def running(self) -> list[str]:
        return [name for name, t in self.trials.items() if not t.record.status.is_final]

    def created(self) -> list[dict[str, Any]]:
        """Each create's request, in creation order."""
        return [t.params for t in sorted(self.trials.values(), key=lambda t: t.number)]

    def stopped_names(self) -> list[str]:
        return [s.name for s in self.stops]

    def status(self, name: str) -> Status:
        return self.trials[name].record.status

    # ----------------------------------------------------------------------------------------------

    def _tick(self, trial: Trial) -> None:
        if trial.stop_asked:
            self._end(trial, Status.STOPPED)
        elif trial.reported < len(trial.life.values):
            value = trial.life.values[trial.reported]
            trial.reported += 1
            self._clock += 1.0
            with open(_metrics_file(trial.record.job_dir), "a") as out:
                out.write(json.dumps({"name": self.metric, "value": value, "at": self._clock}) + "\n")
                out.write(json.dumps({"name": DECOY, "value": -value - 1000.0, "at": self._clock}) + "\n")
        else:
            self._end(trial, trial.life.ends)

    def _end(self, trial: Trial, status: Status) -> None:
        trial.record.status = status
        trial.record.doc.update({"TrainingJobStatus": str(status), "TrainingEndTime": _now()})
        if status == Status.FAILED:
            trial.record.doc["FailureReason"] = trial.life.reason


def _metrics_file(job_dir: Path) -> Path:
    (job_dir / "metrics").mkdir(exist_ok=True)
    return job_dir / "metrics" / "algo-1.jsonl"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()
