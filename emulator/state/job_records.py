"""A local record of the jobs run on this machine: job name -> job folder and status.

Containers and networks are found by their Docker labels while they exist (`ps`, `stop`, `clean`);
once a job has ended they are gone, but its folder stays, and a user (or the SDK's
`describe_training_job`) still names the job, not the folder. So each run records its folder and
status here, one small JSON file per job name, as DescribeTrainingJob/ListTrainingJobs answer by
name on the service. The record only points at the folder: job.json there stays the description.

Where: `jobs/` of the state folder (`emulator.state.state_folder`: `$HETERO_EMU_STATE_DIR`, else
`$XDG_STATE_HOME/hetero-emu`, else `~/.local/state/hetero-emu`). A record that cannot be written
(a read-only home) costs only the lookup by name: the job itself is never failed for it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from emulator.result import Status
from emulator.state import blocking

# Where the records live and how each is written (re-exported: callers name them as job_records's).
from emulator.state.state_folder import state_dir as state_dir
from emulator.state.state_folder import write_atomically as write_atomically


@dataclass(frozen=True)
class JobRecord:
    job_name: str
    job_dir: Path
    status: Status  # InProgress | Completed | Failed | Stopped
    modified: str  # ISO 8601, UTC
    doc: dict[str, Any] = field(default_factory=dict, compare=False)  # the whole record, as stored
    # The identity of the file it was read from (`identity`): another version of the record has another
    # one. None when unknown (a record made in memory, or a file changed too recently to tell).
    version: tuple[int, int, int] | None = field(default=None, compare=False)

    # What the record holds, by name and type: a job's record is stored as the JSON of DescribeTrainingJob's
    # fields (`record`), and these read it for every caller, with what a hand-edited file may have
    # got wrong (a wrong type) read as absent.

    @property
    def request(self) -> dict[str, Any]:
        """The CreateTrainingJob request the job describes (DescribeTrainingJob echoes it): a session's
        as sent, a spec's job's as the SDK would have sent it (emulator/planning/described_request.py); {} before the
        job's run first recorded it. The caller's own copy, one level deep."""
        value = self.doc.get("Request")
        return dict(value) if isinstance(value, dict) else {}

    @property
    def arn(self) -> str | None:
        """TrainingJobArn, in the job's own region, once recorded (at create, or the run's first record)."""
        return self._text("TrainingJobArn")

    @property
    def requested_image(self) -> str | None:
        """The training image the request named (an ECR name stays one)."""
        value = self.request.get("AlgorithmSpecification")
        image = value.get("TrainingImage") if isinstance(value, dict) else None
        return image if isinstance(image, str) and image else None

    @property
    def local_image(self) -> str | None:
        """The local image CreateTrainingJob chose for the requested one."""
        return self._text("LocalImage")

    @property
    def image_notes(self) -> list[str]:
        """Why the local image stands in for the requested one (what it lacks of AWS's)."""
        value = self.doc.get("ImageNotes")
        return [str(note) for note in value] if isinstance(value, list) else []

    @property
    def tags(self) -> list[dict[str, Any]]:
        """The Tags CreateTrainingJob gave (ListTags); a spec's job has none."""
        value = self.doc.get("Tags")
        return [dict(tag) for tag in value if isinstance(tag, dict)] if isinstance(value, list) else []

    @property
    def driver_pid(self) -> int | None:
        """The pid of the driver process CreateTrainingJob started for the job (None for a run's own job)."""
        value = self.doc.get("DriverPid")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def driver(self) -> str | None:
        """Which process runs the job (`emulator.backend.liveness.current_driver`), to tell a dead one."""
        return self._text("Driver")

    @property
    def creation_time(self) -> str:
        """CreationTime (ISO 8601), else the last change."""
        return self._text("CreationTime") or self.modified

    @property
    def training_start_time(self) -> str | None:
        """TrainingStartTime (ISO 8601): set once the hosts started."""
        return self._text("TrainingStartTime")

    @property
    def cluster_dot(self) -> str | None:
        """The cluster's diagram as DOT text (CLUSTER_DOT), once the hosts are staged."""
        return self._text(CLUSTER_DOT)

    def _text(self, key: str) -> str | None:
        value = self.doc.get(key)
        return value if isinstance(value, str) and value else None

    @property
    def transitions(self) -> list[dict[str, Any]]:
        """SecondaryStatusTransitions so far (DescribeTrainingJob's shape, times as ISO 8601 text)."""
        value = self.doc.get("SecondaryStatusTransitions")
        # Copies: a record read is shared by every reader of the same file (`_read`), and `end` edits
        # the last transition before writing the record again.
        return [dict(t) if isinstance(t, dict) else t for t in value] if isinstance(value, list) else []


# The record's field with the cluster's diagram as DOT text (emulator/reports/diagram.py, written by the run
# once the hosts are staged), which `hetero-emu serve`'s page draws: not a DescribeTrainingJob field.
CLUSTER_DOT = "ClusterDot"


def _path(job_name: str) -> Path:
    # Job names match ^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}: safe as a file name as they are.
    return state_dir() / "jobs" / f"{job_name}.json"


def now_text() -> str:
    return datetime.now(timezone.utc).isoformat()


def record(job_name: str, job_dir: Path, status: Status, **fields: Any) -> bool:
    """Write (or update) the job's record; False if it could not be written. `fields` are stored with
    it (DescribeTrainingJob's names: SecondaryStatus, SecondaryStatusTransitions, CreationTime, ...);
    fields an earlier write of the same job (same folder) stored are kept."""
    path = _path(job_name)
    earlier = _read(path)
    kept = earlier.doc if earlier is not None and earlier.job_dir == Path(job_dir) else {}
    stamp = now_text()
    doc = {**kept, **fields, "TrainingJobName": job_name, "JobDir": str(job_dir), "TrainingJobStatus": status,
           "LastModifiedTime": stamp}
    doc.setdefault("CreationTime", stamp)
    try:
        write_atomically(path, json.dumps(doc, sort_keys=True))
    except OSError:
        return False
    return True


def find(job_name: str) -> JobRecord | None:
    return _read(_path(job_name))


def all_jobs() -> list[JobRecord]:
    """Every recorded job, the most recently changed first."""
    folder = state_dir() / "jobs"
    paths = list(folder.glob("*.json")) if folder.is_dir() else []
    if len(paths) > QUICK_JOBS:
        blocking.may_block()  # so many reads are no work for `hetero-emu serve`'s event loop
    found = [r for p in paths if (r := _read(p)) is not None]
    return sorted(found, key=lambda r: r.modified, reverse=True)


# The most records `all_jobs` reads where it must not wait (emulator/state/blocking.py): a few ms of reads.
QUICK_JOBS = 200


def identity(st: os.stat_result) -> tuple[int, int, int] | None:
    """A file's identity for the caches of what was read from it: (inode, size, mtime), or None while
    the file changed too recently for that to be trusted. A file rewritten in the same clock tick
    (mtimes are as coarse as the kernel's tick, 4 ms on many) with the same size could reuse a freed
    inode number, so a file younger than `SETTLED_NS` is read again each time, as git treats an index
    entry written in the same second as its file ("racy git":
    https://git-scm.com/docs/racy-git)."""
    if time.time_ns() - st.st_mtime_ns < SETTLED_NS:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


SETTLED_NS = 100_000_000  # 0.1 s: far above any file system's timestamp granularity on Linux


def _read(path: Path) -> JobRecord | None:
    try:
        key = identity(os.stat(path))
    except OSError:
        return None
    cached = _RECORDS.get(str(path))
    if cached is not None and key is not None and cached[0] == key:
        return _own(cached[1])
    try:
        # Read after the stat: a file replaced in between is cached under the old key, which the next
        # stat no longer matches.
        doc = json.loads(path.read_text())
        # A status that is not one of the service's (a record edited by hand) makes the record unreadable,
        # as a malformed one is (Status raises ValueError).
        found = JobRecord(str(doc["TrainingJobName"]), Path(doc["JobDir"]), Status(doc["TrainingJobStatus"]),
                          str(doc.get("LastModifiedTime", "")), doc, key)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if key is None:
        return found
    if len(_RECORDS) >= _RECORDS_KEPT:
        _RECORDS.clear()
    _RECORDS[str(path)] = (key, found)
    return _own(found)


def _own(kept: JobRecord) -> JobRecord:
    """The kept record with a dict of the reader's own: a top-level change (a test, a caller setting a
    field before writing) stays the reader's. What is nested (the request, the transitions) is shared
    with the other readers and is not changed in place by any caller (`transitions` hands out copies)."""
    return JobRecord(kept.job_name, kept.job_dir, kept.status, kept.modified, dict(kept.doc), kept.version)


# Each record as parsed, kept while its file stays the same file: `hetero-emu serve` reads a record
# three times per DescribeTrainingJob (the job, its folder, its warm pool) and every record per
# ListTrainingJobs, and a stat costs a tenth of a read and parse. Every write renames a new file into
# place (`write_atomically`), so a changed record is another inode, size or mtime (`identity`): never a
# stale answer. Each reader gets its own `doc` dict (`_own`); what is nested in it is shared.
_RECORDS: dict[str, tuple[tuple[int, int, int], JobRecord]] = {}
_RECORDS_KEPT = 4096  # records; more are read again, after the cache is emptied


def end(job_name: str, status: Status, reason: str | None = None) -> JobRecord | None:
    """Record that a job ended (`Failed` or `Stopped`) before its run could say so itself: its driver
    could not start it, was stopped before the hosts were, or died. A job whose record already says
    how it ended is left as it is; one Stopping (StopTrainingJob recorded it while its image built)
    has not ended yet. Returns the record as it stands."""
    earlier = find(job_name)
    if earlier is None or earlier.status not in (Status.IN_PROGRESS, Status.STOPPING):
        return earlier
    stamp = now_text()
    transitions = earlier.transitions
    if transitions:
        transitions[-1]["EndTime"] = stamp
    message = reason or {Status.STOPPED: "Training job stopped"}.get(status, "Training job failed")
    transitions.append({"Status": status, "StartTime": stamp, "EndTime": stamp, "StatusMessage": message})
    fields: dict[str, Any] = {"SecondaryStatus": status, "SecondaryStatusTransitions": transitions}
    if reason:
        fields["FailureReason"] = reason
    record(job_name, earlier.job_dir, status, **fields)
    return find(job_name)
