"""The toolkit's MPI worker that misses a short job's orted (emulator/run/mpi_wait.py), on the real engine
under the real toolkit: the console says so within seconds of mpirun's success, not 20 minutes later,
and the job can be stopped at once.

A script that does nothing ends its ranks in well under the second between two of the worker's looks
for orted on an idle machine: measured here, the worker missed it in 3 runs of 3. On a busy one (the
suite's other workers) the ranks take longer and the worker sees orted. So the test runs such a job
(twice at most) and, if the worker saw orted both times, stages the state the race leaves: the real
toolkit's worker on algo-2 waiting for an orted that never comes, and on algo-1, in place of the
toolkit's leader, sshd and the line the leader logs after a successful mpirun. Either way the
console must say so within seconds, and the job stops at once.
"""

from __future__ import annotations

import calendar
import re
import threading
import time
from pathlib import Path

import pytest
import yaml
from testkit import unique, wait_for

from emulator.jobspec import load_spec_file
from emulator.options import RunOptions
from emulator.reports.console import RecordingReporter
from emulator.result import JobResult
from emulator.run.runner import request_stop, run_job

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

STUCK = "still waits for MPI's orted process"
ATTEMPTS = 2
# Stands for the toolkit's MPI leader once mpirun has succeeded (sagemaker_training/mpi.py
# MasterRunner.run): sshd for the worker to find, then the line the leader logs. algo-2 runs the
# real toolkit, whose MPI worker then waits for orted.
STAGED = """
import os, socket, subprocess, sys, time
if socket.gethostname() == "algo-1":
    subprocess.Popen(["/usr/sbin/sshd", "-D"])
    time.sleep(5)
    print("INFO     Begin writing status file from leader node to worker nodes (if any)", flush=True)
    time.sleep(600)
else:
    os.execvp("train", ["train"])
"""


def run_short_mpi_job(tmp_path: Path, staged: bool = False) -> tuple[JobResult, RecordingReporter, float | None]:
    """One run of a 2-host MPI job whose script does nothing (or, `staged`, of the race's state);
    stopped once the console says a worker is stuck. Returns the result, what was said, and the seconds
    from mpirun's success to the warning."""
    name = unique("short-mpi")
    (tmp_path / name / "code").mkdir(parents=True)
    (tmp_path / name / "code" / "train.py").write_text(STAGED if staged else "pass\n")
    spec = tmp_path / name / "job.yaml"
    spec.write_text(yaml.safe_dump({
        "job_name": name, "entry_point": "train.py", "source_dir": "code", "output_path": "out",
        "instance_groups": [{"instance_group_name": "g", "instance_type": "ml.c5.xlarge", "instance_count": 2}],
        "distribution": {"mpi": {"enabled": True}},
        **({"container_entry_point": ["python3", "/opt/ml/code/train.py"]} if staged else {})}))
    reporter = RecordingReporter()
    done: list[JobResult] = []
    runner = threading.Thread(target=lambda: done.append(run_job(load_spec_file(spec), RunOptions(),
                                                                 reporter=reporter)))
    runner.start()
    job_dir = tmp_path / name / "out" / name
    leader_log = job_dir / "logs" / "algo-1.log"

    def said() -> bool:
        return any(STUCK in w for w in reporter.warnings) or bool(done)

    wait_for(said, "the stuck-worker warning or the job's end", timeout=180)
    told_at = time.time()
    if not done:
        request_stop(job_dir)
    runner.join(timeout=120)
    assert done, "the job did not end after `hetero-emu stop`"
    # When the toolkit logged mpirun's success (its own timestamp), against when the console said so.
    found = re.search(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+ \S+ INFO +Begin writing status file",
                      leader_log.read_text(errors="replace"))
    lag = None
    if found and any(STUCK in w for w in reporter.warnings):
        lag = told_at - calendar.timegm(time.strptime(found.group(1), "%Y-%m-%d %H:%M:%S"))
    elif staged:
        lag = told_at - leader_log.stat().st_mtime  # the staged leader's line is its last write
    return done[0], reporter, lag


def assert_told_and_stopped(result: JobResult, reporter: RecordingReporter, lag: float | None) -> None:
    stuck = [w for w in reporter.warnings if STUCK in w]
    assert len(stuck) == 1 and stuck[0].startswith("algo-2 "), reporter.warnings
    assert "the service runs the same toolkit code" in stuck[0] and f"hetero-emu stop {result.job_name}" in stuck[0]
    # Said seconds after mpirun's success (the toolkit's clock has whole seconds in this match), where
    # the worker itself would fail the job 20 minutes later.
    assert lag is not None and lag < 15, lag
    assert result.status == "Stopped"


def test_a_worker_that_missed_orted_is_told_within_seconds_and_the_job_stops_at_once(tmp_path: Path) -> None:
    for attempt in range(ATTEMPTS):
        result, reporter, lag = run_short_mpi_job(tmp_path / str(attempt))
        if not any(STUCK in w for w in reporter.warnings):
            # The worker saw orted this time: the job completes as on the service, and nothing is said.
            assert result.status == "Completed", result.failure_reason
            continue
        assert_told_and_stopped(result, reporter, lag)
        return
    result, reporter, lag = run_short_mpi_job(tmp_path / "staged", staged=True)
    assert_told_and_stopped(result, reporter, lag)
