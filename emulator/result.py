"""What a run of a job returns: each host's exit and the job's status, times and artifacts, and the
statuses a job goes through (`Status`, DescribeTrainingJob's TrainingJobStatus, and `SecondaryStatus`, the
steps of its SecondaryStatusTransitions).

`emulator.run.runner.run_job` makes a JobResult, `emulator.run.artifacts.describe` turns it into job.json
(DescribeTrainingJob's shape), and every front end (the CLI's summary, `Job.run`, the pytest
plugin) reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any


class _ServiceText(str, Enum):
    """A `str` Enum: a member is equal to its text and is written as it (json.dumps, f-strings), so
    job.json, the job records and DescribeTrainingJob's answers hold the service's strings. Text read
    back from those files becomes a member with `Status(text)` (or `SecondaryStatus(text)`)."""

    def __str__(self) -> str:
        # The service's text, also in f-strings (Python 3.11 formats a mixed-in Enum by its __str__).
        return str(self.value)


class Status(_ServiceText):
    """A training job's TrainingJobStatus, as the service spells it (torchx's AppState, for SageMaker)."""

    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    FAILED = "Failed"
    STOPPING = "Stopping"
    STOPPED = "Stopped"

    @property
    def is_final(self) -> bool:
        """The job has ended and its status will not change again."""
        return self in (Status.COMPLETED, Status.FAILED, Status.STOPPED)


class SecondaryStatus(_ServiceText):
    """The SecondaryStatus values a run goes through, as the service spells them: the steps of
    SecondaryStatusTransitions, then how the job ended (MaxRuntimeExceeded for a job stopped at max_run)."""

    STARTING = "Starting"
    DOWNLOADING = "Downloading"
    TRAINING = "Training"
    UPLOADING = "Uploading"
    STOPPING = "Stopping"
    COMPLETED = "Completed"
    FAILED = "Failed"
    STOPPED = "Stopped"
    MAX_RUNTIME_EXCEEDED = "MaxRuntimeExceeded"
    MAX_WAIT_TIME_EXCEEDED = "MaxWaitTimeExceeded"  # a managed spot job past its MaxWaitTimeInSeconds
    INTERRUPTED = "Interrupted"  # managed spot: the capacity was reclaimed; the job starts again
    RESTARTING = "Restarting"  # RetryStrategy: the job starts again after an internal error


@dataclass(frozen=True)
class HostResult:
    host: str
    group: str
    instance_type: str
    exit_code: int | None
    seconds: float
    failure_reason: str | None = None


@dataclass(frozen=True)
class JobResult:
    job_name: str
    status: Status  # Completed | Failed | Stopped
    failure_reason: str | None
    hosts: tuple[HostResult, ...]
    job_dir: Path
    model_artifact: Path | None
    output_artifact: Path | None
    start: datetime  # the hosts were started: TrainingStartTime
    end: datetime  # the last host exited (and its log was read)
    secondary_status: SecondaryStatus | None = None  # None: the same as status
    seed: int | None = None
    began: datetime | None = None  # the run began (staging); None: same as start
    packed: datetime | None = None  # the artifacts were written; None: same as end
    artifact_seconds: float = 0.0  # packing (or copying) the artifacts
    # DescribeTrainingJob's CreationTime (the job was asked for) and SecondaryStatusTransitions.
    created: datetime | None = None
    transitions: tuple[dict[str, Any], ...] = ()
    # The containers and network were left in place, stopped (--keep, or --keep-on-failure on a failure).
    kept: bool = False
    # Which image stood in for the one the job named, and on which Python (emulator.training_images.ecr_images).
    image_notes: tuple[str, ...] = ()
    # The host whose failure failed the job, as `algo-2 (dnn_group)`: the emulator's own note beside
    # the service's FailureReason, which names no host.
    failed_host: str | None = None
    # The hosts' running time of the attempts before the last (spot interruptions, retries): billed,
    # while the restarts between attempts are not.
    earlier_attempts_seconds: float = 0.0
    # Each attempt that ended early: its number, how it ended and how long its hosts ran.
    attempts: tuple[dict[str, Any], ...] = ()
    # TrainingStartTime of the last attempt's hosts (None: `start`, the only attempt).
    last_start: datetime | None = None

    @property
    def exit_code(self) -> int:
        """0 Completed; 130 stopped by the user (Ctrl-C, `hetero-emu stop`, StopTrainingJob); 1 otherwise,
        also for a job the service stopped at max_run or max_wait (Stopped, MaxRuntimeExceeded or
        MaxWaitTimeExceeded): its work did not finish, which a CI job must not take for a user's stop."""
        if self.status == Status.STOPPED and self.secondary_status in (SecondaryStatus.MAX_RUNTIME_EXCEEDED,
                                                                       SecondaryStatus.MAX_WAIT_TIME_EXCEEDED):
            return 1
        return {Status.COMPLETED: 0, Status.STOPPED: 130}.get(self.status, 1)

    @property
    def seconds(self) -> float:
        """Training: from the hosts' start until the last host exited."""
        return (self.end - self.start).total_seconds()

    @property
    def total_seconds(self) -> float:
        """The whole run as waited for: staging, containers, training, artifacts (not the teardown after)."""
        return ((self.packed or self.end) - (self.began or self.start)).total_seconds()

    @property
    def training_end(self) -> datetime:
        """TrainingEndTime as the service defines it: "For successful jobs and stopped jobs, this is the
        time after model artifacts are uploaded. For failed jobs, this is the time when SageMaker detects
        a job failure" (DescribeTrainingJob). Billing runs from TrainingStartTime to this time."""
        return self.end if self.status == Status.FAILED else (self.packed or self.end)

    @property
    def training_seconds(self) -> float:
        """TrainingTimeInSeconds: TrainingEndTime - TrainingStartTime, restarts between attempts included."""
        return (self.training_end - self.start).total_seconds()

    @property
    def billable_seconds(self) -> float:
        """BillableTimeInSeconds: the time the hosts ran, across attempts ("the absolute wall-clock time"
        the instances are billed for, DescribeTrainingJob); the restarts between attempts are not
        billed. One attempt: TrainingTimeInSeconds."""
        return self.earlier_attempts_seconds + (self.training_end - (self.last_start or self.start)).total_seconds()
