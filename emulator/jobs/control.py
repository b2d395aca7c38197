"""What the jobs layer does to a job that runs in the engine: stop it. Every front end's stop (the
CLI's `stop`, the Python API, StopTrainingJob of a job whose driver is gone) comes here."""

from __future__ import annotations

from pathlib import Path

from emulator.backend.registry import engine
from emulator.defaults import DEFAULT_ENGINE
from emulator.errors import UsageError
from emulator.options import DEFAULT_GRACE
from emulator.planning.plan import LABEL_JOB_DIR
from emulator.run.runner import request_stop


def stop(job: str, *, grace: float = DEFAULT_GRACE, engine_name: str = DEFAULT_ENGINE) -> int:
    """Stop a running job's hosts (SIGTERM, then SIGKILL after `grace`), as StopTrainingJob; its driver
    then reports Stopped, collects and cleans up. Returns how many containers were stopped."""
    backend = engine(engine_name)
    found = [r for r in backend.find(job) if r.kind == "container"]
    if not found:
        raise UsageError(f"no running job named {job!r}", hint="`hetero-emu ps` lists them")
    job_dir = Path(found[0].labels.get(LABEL_JOB_DIR, ""))
    if job_dir.is_dir():
        request_stop(job_dir)  # first, so the driver reads the exits as a stop, not a failure
    backend.stop_resources(found, grace)
    return len(found)
