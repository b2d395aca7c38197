"""The process that runs one job asked for with CreateTrainingJob (`python -m emulator.aws.driver
TICKET`).

On the service a training job runs on its own, whatever becomes of the program that asked for it:
`fit(wait=False)` returns, the notebook may close, and `describe_training_job`, `stop_training_job`
or `TrainingJob.wait()` find the job later by name. So the job's driver is a process of its own, in
its own session (a Ctrl-C in the user's terminal does not reach it), running the library's `api.run`
as `hetero-emu run` does; StopTrainingJob sends it SIGTERM, which stops the job as Ctrl-C stops
`hetero-emu run` (the hosts get SIGTERM and the grace period; the job ends Stopped).

The ticket (JSON, written by `emulator.aws.training`) holds the request and how to read it: the folder
relative paths resolve against (the caller's working folder), the S3 root, the engine, the job's
CreationTime and what the service sets beside the request (its region, when the request names none).
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from emulator import api, job_records
from emulator.attempts import parse_injection
from emulator.console import ConsoleReporter
from emulator.errors import EmulatorError, Interrupted
from emulator.hardware import parse_cpu_mode, parse_gpu_mode
from emulator.options import RunOptions
from emulator.result import Status
from emulator.spec import request, s3


def write_ticket(path: Path, raw: dict[str, Any], base_dir: Path, s3_root: tuple[Path, str], engine_name: str,
                 created: datetime, overrides: dict[str, Any] | None = None,
                 images: Mapping[str, str] | None = None, hardware: Mapping[str, str | None] | None = None,
                 host_paths: list[str] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"Request": raw, "BaseDir": str(base_dir), "S3Root": str(s3_root[0]),
                                "S3Origin": s3_root[1], "Engine": engine_name, "CreationTime": created.isoformat(),
                                "Overrides": overrides or {}, "Images": dict(images or {}),
                                "Hardware": dict(hardware or {}), "HostPaths": host_paths}, sort_keys=True))


def run_options(ticket: Mapping[str, Any]) -> RunOptions:
    """How the ticket's job runs: its CreationTime, the session's image table and its `gpus`/`cpus`."""
    chosen = ticket.get("Hardware") or {}
    return RunOptions(created=datetime.fromisoformat(ticket["CreationTime"]), images=ticket.get("Images", {}),
                      gpus=None if chosen.get("Gpus") is None else parse_gpu_mode(chosen["Gpus"]),
                      cpus=parse_cpu_mode(chosen.get("Cpus") or "instance"),
                      inject=tuple(parse_injection(word) for word in chosen.get("Inject") or ()) or None)


def main(argv: list[str]) -> int:
    # SIGTERM (StopTrainingJob) stops the job as Ctrl-C does: the runner's teardown runs in `finally`.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    ticket = json.loads(Path(argv[0]).read_text())
    name = str(ticket["Request"].get("TrainingJobName"))
    try:
        with s3.given_root(ticket["S3Root"], ticket["S3Origin"]):
            # Checked again under the creator's HostPaths: a link may have changed since the create.
            spec = request.validate_request(ticket["Request"], Path(ticket["BaseDir"]), "CreateTrainingJob",
                                            ticket.get("Overrides"),
                                            host_paths=request.HostPaths.from_json(ticket.get("HostPaths")))
        result = api.run(spec, run_options(ticket), engine_name=ticket["Engine"],
                         reporter=ConsoleReporter(colour=False))
    except (KeyboardInterrupt, Interrupted):
        # Stopped before the hosts ran (building the image, staging): the run could not record it.
        sys.stderr.write("stopped (StopTrainingJob)\n")
        job_records.end(name, Status.STOPPED)
        return 130
    except EmulatorError as err:
        text = err.message + (f" ({err.hint})" if err.hint else "")
        sys.stderr.write(f"error: {text}\n")
        job_records.end(name, Status.FAILED, f"the emulator could not run the job: {text}")
        return err.exit_code
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
