"""A run's status journal: the job's TrainingJobStatus, SecondaryStatus and SecondaryStatusTransitions as
the run goes, written to the job's record at each step so that DescribeTrainingJob (any front end's,
`hetero-emu serve`'s page) shows the job while it runs, as the service does."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from emulator.backend.liveness import current_driver
from emulator.jobspec import JobSpec
from emulator.planning import described_request
from emulator.result import SecondaryStatus, Status
from emulator.state import job_records

# The message of each SecondaryStatus a job ends with, as the service words it.
FINAL_MESSAGES = {SecondaryStatus.COMPLETED: "Training job completed", SecondaryStatus.FAILED: "Training job failed",
                  SecondaryStatus.STOPPED: "Training job stopped",
                  SecondaryStatus.MAX_RUNTIME_EXCEEDED: "Training job stopped",
                  SecondaryStatus.MAX_WAIT_TIME_EXCEEDED: "Training job stopped"}


class StatusJournal:
    """One job's statuses. `asked`: the job came from a CreateTrainingJob request, whose record already
    holds the request; a spec's job has its request (emulator/planning/described_request.py) written
    with its first step."""

    def __init__(self, spec: JobSpec, job_name: str, job_dir: Path, now: Callable[[], datetime], *,
                 asked: bool) -> None:
        self.spec = spec
        self.job_name = job_name
        self.job_dir = job_dir
        self.now = now
        self.asked = asked
        self.creation: datetime | None = None  # CreationTime: the SDK session's create call, else staging's start
        self.transitions: list[dict[str, Any]] = []  # SecondaryStatusTransitions
        self.training_start: datetime | None = None  # TrainingStartTime: the hosts run
        # The cluster's diagram (DOT), kept in the job's record for `serve`'s page: the record lies in
        # the state folder, out of reach of S3, which can overwrite anything in an s3:// job folder.
        self.cluster_dot: str | None = None
        # Being stopped: asked to (Ctrl-C, SIGTERM from StopTrainingJob, `hetero-emu stop`) or at max_run or max_wait.
        self.stopping = False
        self.recorded = False  # the record has the job's request and ARN (`record`)

    def transition(self, secondary: SecondaryStatus, message: str, at: datetime | None = None,
                   record: bool = True) -> None:
        """A SecondaryStatusTransitions entry (the service's statuses and messages), stored in the job
        record at once so `describe_training_job` shows it while the job runs."""
        stamp = (at or self.now()).isoformat()
        if self.transitions:
            self.transitions[-1]["EndTime"] = stamp
        entry = {"Status": secondary, "StartTime": stamp, "StatusMessage": message}
        if secondary in FINAL_MESSAGES:
            entry["EndTime"] = stamp
        self.transitions.append(entry)
        if record:
            self.record(Status.STOPPING if self.stopping else Status.IN_PROGRESS)

    def begin_stopping(self) -> None:
        """The job is being stopped, whoever stops it (StopTrainingJob, `hetero-emu stop`, Ctrl-C, its
        MaxRuntimeInSeconds or MaxWaitTimeInSeconds): Stopping (TrainingJobStatus and SecondaryStatus)
        through the grace period and the upload, then Stopped with the cause's SecondaryStatus.
        DescribeTrainingJob's TrainingJobStatus has "Stopping - The training job is stopping" and
        SecondaryStatus "Stopping - Stopping the training job" under it; the limits' MaxRuntimeExceeded
        and MaxWaitTimeExceeded are among Stopped's (botocore's sagemaker service-2.json,
        DescribeTrainingJobResponse.SecondaryStatus)."""
        if not self.stopping:
            self.stopping = True
            self.transition(SecondaryStatus.STOPPING, "Stopping the training job")

    def record(self, status: Status) -> None:
        # Every job's record holds the CreateTrainingJob request it describes (emulator/planning/described_request.py):
        # a session's driver recorded it at CreateTrainingJob; a spec's job becomes that request here,
        # once, so DescribeTrainingJob is the same for a job from any front end.
        first = {} if self.recorded else described_request.first_fields(self.spec, self.job_name, asked=self.asked)
        self.recorded = True
        job_records.record(self.job_name, self.job_dir, status, **first,
                           SecondaryStatus=self.transitions[-1]["Status"] if self.transitions else status,
                           SecondaryStatusTransitions=self.transitions,
                           CreationTime=(self.creation or self.now()).isoformat(),
                           **({"TrainingStartTime": self.training_start.isoformat()} if self.training_start else {}),
                           **({job_records.CLUSTER_DOT: self.cluster_dot} if self.cluster_dot else {}),
                           # Who runs it: `logs --follow` ends when this process is gone, even if it never said.
                           Driver=current_driver())
