"""The local record of the hyperparameter tuning jobs run on this machine: one small JSON file per
tuning job name, as DescribeHyperParameterTuningJob and ListHyperParameterTuningJobs answer by name.

A tuning job's trials are ordinary training jobs with records of their own
(`emulator.state.job_records`); this record holds what the tuning job adds: its request, its status
and times, and for each trial its number, tuned hyperparameters, status and objective. The tuning
job's loop (`emulator.tuning.loop`) writes it as the trials start and end; the tuning service
(`emulator.tuning.service`) reads it, and writes it twice itself: at CreateHyperParameterTuningJob
(before the loop exists) and at StopHyperParameterTuningJob (Stopping). Every change is a
read-modify-write under the record's lock (`update`), so the loop's next write keeps a Stopping the
service wrote, and every write renames a whole file into place, so a reader never sees half of one.

Where: `tuning/` of the state folder (`emulator.state.state_folder`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from emulator.state.state_folder import state_dir, write_atomically

# The record's key for the process running the tuning job's loop (not a DescribeHyperParameterTuningJob field).
DRIVER_PID = "DriverPid"
# The record's key for the trials: a list of dicts, each a HyperParameterTrainingJobSummary (times as
# ISO 8601 text) with the trial's "Number" besides.
TRIALS = "Trials"


def folder() -> Path:
    return state_dir() / "tuning"


def _path(name: str) -> Path:
    # Tuning job names match ^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,31}: safe as a file name as they are (the
    # endpoint checks the pattern before any handler runs; `valid_name` checks it again here).
    return folder() / f"{name}.json"


def valid_name(name: str) -> bool:
    """Whether `name` can name a record: a tuning job name's characters (letters, digits, hyphens; no
    path separator, no dot), so that no name given over HTTP can reach another file."""
    return 0 < len(name) <= 32 and name.isascii() and all(c.isalnum() or c == "-" for c in name) \
        and name[0].isalnum()


def read(name: str) -> dict[str, Any] | None:
    """The tuning job's record, or None if there is none (or it cannot be read)."""
    if not valid_name(name):
        return None
    try:
        doc = json.loads(_path(name).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def names() -> list[str]:
    """Every recorded tuning job's name."""
    where = folder()
    return sorted(p.stem for p in where.glob("*.json")) if where.is_dir() else []


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    where = folder()
    where.mkdir(parents=True, exist_ok=True)
    with open(where / f".{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def update(name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Read the record (an empty one if there is none), let `change` edit it in place, and write it
    whole; under the record's lock, so two writers (the loop, a StopHyperParameterTuningJob) never
    lose each other's change. The record as written."""
    if not valid_name(name):
        raise ValueError(f"not a tuning job name: {name[:40]!r}")
    with _locked(name):
        doc = read(name) or {}
        change(doc)
        write_atomically(_path(name), json.dumps(doc, sort_keys=True, default=str))
        return doc


def claim(name: str, doc: dict[str, Any]) -> bool:
    """Write a new tuning job's first record, unless a record of that name exists: False then. Under the
    record's lock, so of two creates of one name a few ms apart only one succeeds."""
    if not valid_name(name):
        raise ValueError(f"not a tuning job name: {name[:40]!r}")
    with _locked(name):
        if _path(name).exists():
            return False
        write_atomically(_path(name), json.dumps(doc, sort_keys=True, default=str))
        return True
