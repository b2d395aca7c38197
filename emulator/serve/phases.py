"""A host's phases (toolkit start, requirements, waiting for the other hosts, the script, MPI's fixed
wait, upload) with their times, read off the training toolkit's own log lines, for the live page's
timeline (`emulator.serve.page`).

The sagemaker-training toolkit logs through one logger, "sagemaker-training-toolkit", with the format
"%(asctime)s %(name)-12s %(levelname)-8s %(message)s" (sagemaker_training/logging_config.py,
`configure_logger`), so each of its lines carries the container's wall-clock time to the millisecond:

    2026-12-01 13:00:00,123 sagemaker-training-toolkit INFO     Invoking user script

A phase starts at the line that announces it and lasts until the next one starts. The messages are
the toolkit's own, as its source has them (aws/sagemaker-training-toolkit, src/sagemaker_training/;
see MARKERS). A host without toolkit lines (an image of its own, a container_entry_point, a log level
above INFO) has one phase, "script", from its start to its exit. After a host exits, "upload" lasts
until the job's TrainingEndTime: the service uploads the artifacts after the last host, and a
successful job's end is "the time after model artifacts are uploaded" (DescribeTrainingJob).

Pure: text and times in, phases out. The toolkit's times have no zone; the containers run in UTC
(no image here sets TZ), so they are read as UTC unless told otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timezone, tzinfo
from typing import NamedTuple

TOOLKIT = "toolkit"
REQUIREMENTS = "requirements"
WAITING = "waiting"
SCRIPT = "script"
MPI_WAIT = "mpi wait"
UPLOAD = "upload"
PHASES = (TOOLKIT, REQUIREMENTS, WAITING, SCRIPT, MPI_WAIT, UPLOAD)

LINE = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) sagemaker-training-toolkit [A-Z]+ +(.*)")

# Where each message is in the toolkit (src/sagemaker_training/...), and the phase it starts. Matched
# at the start of the message: some end with values ("Orted process found [psutil.Process(...)]").
MARKERS: tuple[tuple[str, str], ...] = (
    # modules.py:151 `install_requirements`, before `pip install -r requirements.txt`.
    ("Installing dependencies from requirements.txt", REQUIREMENTS),
    # mpi.py:274 `MasterRunner._wait_for_workers` (smdataparallel.py:124 the same): mpirun's host
    # waits until it can reach every other host's sshd.
    ("Waiting for MPI workers to establish their SSH connections", WAITING),
    # mpi.py:107 `WorkerRunner.run`: a worker waits until the master's port 22 answers ...
    ("Waiting for MPI Master to create SSH daemon.", WAITING),
    # mpi.py:117: ... starts its own sshd, then looks for `orted` once a second (mpi.py `_orted_process`).
    ("Waiting for MPI process to finish.", WAITING),
    # mpi.py:168 `_wait_orted_process_to_finish`: orted runs, i.e. mpirun's ranks run on this worker.
    ("Orted process found", SCRIPT),
    # mpi.py:120: orted has ended; the worker sleeps a fixed 30 s (mpi.py:121), then looks for the
    # master's status file every 30 s.
    ("Orted process exited", MPI_WAIT),
    # mpi.py:130: the worker is done.
    ("MPI process finished.", TOOLKIT),
    # logging_config.py:57 `log_script_invocation`, just before the script (or mpirun) is started.
    ("Invoking user script", SCRIPT),
    # process.py:202 `run_async`: the process' output has ended (after pip as after the script).
    ("Waiting for the process to finish and give a return code.", TOOLKIT),
    # mpi.py:428 `MasterRunner.run` (smdataparallel.py:339): mpirun succeeded; the master writes the
    # workers' status files and then sleeps a fixed 30 s (mpi.py:446) ...
    ("Begin writing status file from leader node to worker nodes", MPI_WAIT),
    # mpi.py:447 (smdataparallel.py:358): ... and is done.
    ("Finished writing status file from leader node to worker nodes", TOOLKIT),
)


class Phase(NamedTuple):
    """One phase of one host: (phase, start, end)."""

    name: str
    start: datetime
    end: datetime


class Mark(NamedTuple):
    """A toolkit line: when, and the phase it starts (None: a line that starts none)."""

    at: datetime
    phase: str | None


def phase_of(message: str) -> str | None:
    """The phase a toolkit message starts, if any."""
    return next((phase for prefix, phase in MARKERS if message.startswith(prefix)), None)


def mark(line: str, tz: tzinfo = timezone.utc) -> Mark | None:
    """The toolkit's mark of one log line, None for any other line."""
    if "sagemaker-training-toolkit" not in line:
        return None
    found = LINE.match(line)
    if found is None:
        return None
    try:
        at = datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S").replace(microsecond=int(found[2]) * 1000, tzinfo=tz)
    except ValueError:
        return None
    return Mark(at, phase_of(found[3]))


class Tracker:
    """One host's marks, fed its log lines as they come (`feed`); keeps only the first toolkit line
    and the lines that start a phase, so a long log costs a few marks."""

    def __init__(self, tz: tzinfo = timezone.utc) -> None:
        self.tz = tz
        self.marks: list[Mark] = []

    def feed(self, line: str) -> bool:
        """Take one line; True when it added a mark (the phases changed)."""
        found = mark(line, self.tz)
        if found is None or (found.phase is None and self.marks):
            return False
        self.marks.append(found)
        return True

    def phases(self, *, started: datetime | None = None, exited: datetime | None = None,
               job_end: datetime | None = None, now: datetime | None = None) -> list[Phase]:
        return from_marks(self.marks, started=started, exited=exited, job_end=job_end, now=now)


def from_marks(marks: Iterable[Mark], *, started: datetime | None = None, exited: datetime | None = None,
               job_end: datetime | None = None, now: datetime | None = None) -> list[Phase]:
    """The phases `marks` give, for a host that started at `started` (its container's start) and
    exited at `exited` (None: it runs; its last phase then ends `now`, or at the last mark).

    The first phase, "toolkit", starts at the container's start when that is known and earlier than
    the first toolkit line (the toolkit is what the container runs; Python takes a moment to import
    it), else at that line. `job_end` (TrainingEndTime) after the exit adds "upload"."""
    listed = list(marks)
    starts: list[tuple[str, datetime]] = []
    for m in listed:
        if not starts:
            starts.append((TOOLKIT, started if started is not None and started < m.at else m.at))
        if m.phase is None or m.phase == starts[-1][0]:
            continue
        # A line stamped before the phase it would end (a clock step) starts its phase there.
        starts.append((m.phase, max(m.at, starts[-1][1])))
    if not starts:
        if started is None:
            return []
        starts.append((SCRIPT, started))
    last = exited or now or (listed[-1].at if listed else starts[-1][1])
    ends = [start for _, start in starts[1:]] + [max(last, starts[-1][1])]
    out = [Phase(name, start, end) for (name, start), end in zip(starts, ends, strict=True)]
    # A phase another began at the same moment took no time (the first toolkit line announcing the
    # requirements); the last is kept however short: it has just begun.
    out = [p for p in out[:-1] if p.end > p.start] + out[-1:]
    if exited is not None and job_end is not None and job_end > exited:
        out.append(Phase(UPLOAD, exited, job_end))
    return out


def phases(log_text: str, *, started: datetime | None = None, exited: datetime | None = None,
           job_end: datetime | None = None, now: datetime | None = None,
           tz: tzinfo = timezone.utc) -> list[Phase]:
    """The phases of one host from its whole log text (see `from_marks` for the times)."""
    tracker = Tracker(tz)
    for line in log_text.splitlines():
        tracker.feed(line)
    return tracker.phases(started=started, exited=exited, job_end=job_end, now=now)
