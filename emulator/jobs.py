"""A local record of the jobs run on this machine: job name -> job folder and status.

Containers and networks are found by their Docker labels while they exist (`ps`, `stop`, `clean`);
once a job has ended they are gone, but its folder stays, and a user (or the SDK's
`describe_training_job`) still names the job, not the folder. So each run records its folder and
status here, one small JSON file per job name, as DescribeTrainingJob/ListTrainingJobs answer by
name on the service. The record only points at the folder: job.json there stays the description.

Where: `$HETERO_EMU_STATE_DIR`, else `$XDG_STATE_HOME/hetero-emu`, else `~/.local/state/hetero-emu`
(the XDG base directory spec's place for state that outlives a run). A record that cannot be written
(a read-only home) costs only the lookup by name: the job itself is never failed for it.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path


@dataclass(frozen=True)
class JobRecord:
    job_name: str
    job_dir: Path
    status: str  # InProgress | Completed | Failed | Stopped
    modified: str  # ISO 8601, UTC


def state_dir() -> Path:
    if os.environ.get("HETERO_EMU_STATE_DIR"):
        return Path(os.environ["HETERO_EMU_STATE_DIR"])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "hetero-emu"


def _path(job_name: str) -> Path:
    # Job names match ^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}: safe as a file name as they are.
    return state_dir() / "jobs" / f"{job_name}.json"


def record(job_name: str, job_dir: Path, status: str) -> bool:
    """Write (or update) the job's record; False if it could not be written."""
    path = _path(job_name)
    doc = {"TrainingJobName": job_name, "JobDir": str(job_dir), "TrainingJobStatus": status,
           "LastModifiedTime": datetime.now(timezone.utc).isoformat()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written whole and renamed: a reader never sees half a record.
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".job-")
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, sort_keys=True)
        os.replace(temp, path)
    except OSError:
        return False
    return True


def find(job_name: str) -> JobRecord | None:
    return _read(_path(job_name))


def all_jobs() -> list[JobRecord]:
    """Every recorded job, the most recently changed first."""
    folder = state_dir() / "jobs"
    found = [r for p in folder.glob("*.json") if (r := _read(p)) is not None] if folder.is_dir() else []
    return sorted(found, key=lambda r: r.modified, reverse=True)


def _read(path: Path) -> JobRecord | None:
    try:
        doc = json.loads(path.read_text())
        return JobRecord(str(doc["TrainingJobName"]), Path(doc["JobDir"]), str(doc["TrainingJobStatus"]),
                         str(doc.get("LastModifiedTime", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None
