"""The process that runs one job asked for with CreateTrainingJob (`python -m emulator.driver TICKET`).

On the service a training job runs on its own, whatever becomes of the program that asked for it:
`fit(wait=False)` returns, the notebook may close, and `describe_training_job`, `stop_training_job`
or `TrainingJob.wait()` find the job later by name. So the job's driver is a process of its own, in
its own session (a Ctrl-C in the user's terminal does not reach it), running the library's `api.run`
as `hetero-emu run` does; StopTrainingJob sends it SIGTERM, which stops the job as Ctrl-C stops
`hetero-emu run` (the hosts get SIGTERM and the grace period; the job ends Stopped).

The ticket (`emulator.jobs.ticket.DriverTicket`, written by `emulator.jobs.service`) holds the
request, how to read it and the run's options. A front end like the CLI (it runs the library's
`api.run`), so it sits at the top beside them, not in `emulator.aws` beneath `api`.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from emulator import api
from emulator.errors import EmulatorError, Interrupted
from emulator.jobs.ticket import DriverTicket
from emulator.jobspec import request, s3
from emulator.reports.console import ConsoleReporter
from emulator.result import Status
from emulator.state import job_records


def main(argv: list[str]) -> int:
    # SIGTERM (StopTrainingJob) stops the job as Ctrl-C does: the runner's teardown runs in `finally`.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    ticket = DriverTicket.read(Path(argv[0]))
    name = ticket.job_name
    try:
        with s3.given_root(ticket.s3_root, ticket.s3_origin):
            # Checked again under the creator's HostPaths: a link may have changed since the create.
            spec = request.validate_request(ticket.request, ticket.base_dir, "CreateTrainingJob",
                                            ticket.overrides, host_paths=request.HostPaths.from_json(ticket.host_paths))
        result = api.run(spec, ticket.options, engine_name=ticket.engine, reporter=ConsoleReporter(colour=False))
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
