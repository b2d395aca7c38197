"""A host's phases read off the training toolkit's own log lines (emulator/serve/phases.py).

The excerpts are written from the toolkit's real messages (aws/sagemaker-training-toolkit,
src/sagemaker_training/; each line's source is in the comment beside it), in its log format
"%(asctime)s %(name)-12s %(levelname)-8s %(message)s" (logging_config.py:29)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

from emulator.serve.phases import MPI_WAIT, REQUIREMENTS, SCRIPT, TOOLKIT, UPLOAD, WAITING, Tracker, mark, phases

T0 = datetime(2026, 12, 1, 13, 0, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def tk(seconds: float, message: str, level: str = "INFO") -> str:
    stamp = at(seconds)
    return f"{stamp:%Y-%m-%d %H:%M:%S},{stamp.microsecond // 1000:03d} sagemaker-training-toolkit {level:<8} {message}"


def names(found: Sequence[tuple[str, datetime, datetime]]) -> list[tuple[str, float, float]]:
    return [(name, (start - T0).total_seconds(), (end - T0).total_seconds()) for name, start, end in found]


# One host of a plain job with a requirements.txt: pip through process.check_error, then the script.
PLAIN = "\n".join([
    tk(1.2, "No Neurons detected (normal if no neurons installed)"),  # environment.py:339
    tk(1.35, "Installing dependencies from requirements.txt"),  # modules.py:151
    "Collecting six==1.17.0 (from -r requirements.txt (line 1))",
    "Successfully installed six-1.17.0",
    tk(6.01, "Waiting for the process to finish and give a return code."),  # process.py:202
    tk(6.011, "Done waiting for a return code. Received 0 from exiting process."),  # process.py:204
    tk(6.6, "Invoking user script"),  # logging_config.py:57 (log_script_invocation)
    "",
    "Training Env:",
    "",
    "{",
    '    "current_host": "algo-1",',
    "}",
    "",
    "Environment variables:",
    "",
    "SM_CURRENT_HOST=algo-1",
    "",
    "Invoking script with the following command:",
    "",
    "/opt/venv/bin/python3 train.py --epochs 2",
    "",
    "",
    "epoch 1 loss 0.5",
    "2026-12-01 13:00:15,000 root         INFO     Invoking user script (the script's own logger, not a mark)",
    tk(20.0, "Waiting for the process to finish and give a return code."),  # process.py:202
    tk(20.001, "Done waiting for a return code. Received 0 from exiting process."),  # process.py:204
    tk(20.002, "Reporting training SUCCESS"),  # trainer.py:106
])

# The MPI master (the distribution's first host): mpi.py MasterRunner.
MPI_MASTER = "\n".join([
    tk(1.0, "Starting MPI run as worker node."),  # mpi.py:267 (_setup)
    tk(1.001, "Creating SSH daemon."),  # mpi.py:268
    tk(1.01, "Waiting for MPI workers to establish their SSH connections"),  # mpi.py:274
    tk(1.02, "Cannot connect to host algo-4"),  # mpi.py:498 (_can_connect)
    tk(2.03, "Can connect to host algo-4"),  # mpi.py:495
    tk(2.031, "Worker algo-4 available for communication"),  # mpi.py:281
    tk(2.05, "Env Hosts: ['algo-3', 'algo-4'] Hosts: ['algo-3', 'algo-4'] process_per_hosts: 1 "
             "num_processes: 2"),  # mpi.py:294
    tk(2.051, "Network interface name: eth0"),  # mpi.py:300
    tk(2.1, "Invoking user script"),  # logging_config.py:57, from mpi.py MasterRunner.run
    "mpirun --host algo-3,algo-4 -np 2 ... /opt/venv/bin/python3 -m mpi4py train.py",
    "[1,0]<stdout>:rank 0 of 2",
    tk(10.0, "Waiting for the process to finish and give a return code."),  # process.py:202
    tk(10.001, "Done waiting for a return code. Received 0 from exiting process."),  # process.py:204
    tk(10.002, "Begin writing status file from leader node to worker nodes (if any)"),  # mpi.py:428
    tk(10.01, "Start writing mpirun finished status to algo-4"),  # mpi.py:509
    tk(10.2, "Finished writing status file"),  # mpi.py:517: one worker's file, not the end of the wait
    tk(40.4, "Finished writing status file from leader node to worker nodes (if any)"),  # mpi.py:447
    tk(40.5, "Reporting training SUCCESS"),  # trainer.py:106
])

# An MPI worker: mpi.py WorkerRunner.run.
MPI_WORKER = "\n".join([
    tk(1.0, "Starting MPI run as worker node."),  # mpi.py:105
    tk(1.001, "Waiting for MPI Master to create SSH daemon."),  # mpi.py:107
    tk(1.3, "Cannot connect to host algo-3"),  # mpi.py:498
    tk(2.002, "Can connect to host algo-3"),  # mpi.py:495
    tk(2.003, "MPI Master online, creating SSH daemon."),  # mpi.py:109
    tk(2.004, "Writing environment variables to /etc/environment for the MPI process."),  # mpi.py:111
    tk(2.02, "Waiting for MPI process to finish."),  # mpi.py:117
    tk(3.1, "Process[es]: [psutil.Process(pid=52, name='orted', status='sleeping')]"),  # mpi.py:180
    tk(3.101, "Orted process found [psutil.Process(pid=52, name='orted', status='sleeping')]"),  # mpi.py:168
    tk(3.102, "Waiting for orted process [psutil.Process(pid=52, name='orted', status='sleeping')]"),  # mpi.py:169
    tk(10.05, "Invoked on_terminate from psutil.wait_for_procs"),  # mpi.py:162
    tk(10.051, "process psutil.Process(pid=52, status='terminated') terminated with exit code 0"),  # mpi.py:163
    tk(10.052, "Reporting status for ORTEd process. gone: [psutil.Process(pid=52)] alive: []"),  # mpi.py:119
    tk(10.053, "Orted process exited"),  # mpi.py:120, then time.sleep(30) (mpi.py:121)
    tk(40.06, "Begin looking for status file on algo-4"),  # mpi.py:122
    tk(40.061, "MPI training job status file found. Exit gracefully"),  # mpi.py:126
    tk(40.062, "End looking for status file"),  # mpi.py:129
    tk(40.063, "MPI process finished."),  # mpi.py:130
    tk(40.1, "Reporting training SUCCESS"),  # trainer.py:106
])

# A torch_distributed host: torch_distributed.py TorchDistributedRunner, then the framework's script.
TORCHRUN = "\n".join([
    tk(2.0, "Starting distributed training through torchrun"),  # torch_distributed.py:70
    tk(2.5, "Invoking user script"),  # logging_config.py:57
    "torchrun --nnodes 2 --nproc_per_node 1 --master_addr algo-1 --master_port 7777 --node_rank 1 train.py",
    tk(30.0, "Waiting for the process to finish and give a return code."),  # process.py:202
    tk(30.5, "Reporting training FAILURE", level="ERROR"),  # trainer.py:112
])


def test_a_plain_host_installs_its_requirements_then_runs_its_script_then_uploads() -> None:
    found = phases(PLAIN, started=at(0.5), exited=at(20.4), job_end=at(23))

    assert names(found) == [(TOOLKIT, 0.5, 1.35), (REQUIREMENTS, 1.35, 6.01), (TOOLKIT, 6.01, 6.6),
                            (SCRIPT, 6.6, 20.0), (TOOLKIT, 20.0, 20.4), (UPLOAD, 20.4, 23.0)]


def test_the_phases_are_tuples_of_phase_start_and_end() -> None:
    first = phases(PLAIN, started=at(0.5), exited=at(20.4))[0]

    assert tuple(first) == (TOOLKIT, at(0.5), at(1.35))
    assert first.start.tzinfo is not None  # the toolkit's times are the containers' UTC


def test_without_the_containers_start_the_toolkit_begins_at_its_first_line() -> None:
    assert names(phases(PLAIN))[0] == (TOOLKIT, 1.2, 1.35)


def test_the_mpi_master_waits_for_its_workers_runs_mpirun_then_waits_a_fixed_time() -> None:
    found = phases(MPI_MASTER, started=at(0.6), exited=at(40.7), job_end=at(44))

    assert names(found) == [(TOOLKIT, 0.6, 1.01), (WAITING, 1.01, 2.1), (SCRIPT, 2.1, 10.0), (TOOLKIT, 10.0, 10.002),
                            (MPI_WAIT, 10.002, 40.4), (TOOLKIT, 40.4, 40.7), (UPLOAD, 40.7, 44.0)]


def test_an_mpi_worker_waits_for_the_master_and_orted_runs_its_ranks_then_waits_30_s() -> None:
    found = phases(MPI_WORKER, started=at(0.6), exited=at(40.2), job_end=at(44))

    assert names(found) == [(TOOLKIT, 0.6, 1.001), (WAITING, 1.001, 3.101), (SCRIPT, 3.101, 10.053),
                            (MPI_WAIT, 10.053, 40.063), (TOOLKIT, 40.063, 40.2), (UPLOAD, 40.2, 44.0)]
    wait = next(p for p in found if p.name == MPI_WAIT)
    assert (wait.end - wait.start).total_seconds() >= 30  # mpi.py:121 `time.sleep(30)`


def test_a_torchrun_host_runs_its_script_and_a_failed_job_ends_at_its_end_time() -> None:
    # A failed job's TrainingEndTime is "when SageMaker detects a job failure": no upload after it.
    found = phases(TORCHRUN, started=at(1.5), exited=at(31), job_end=at(31))

    assert names(found) == [(TOOLKIT, 1.5, 2.5), (SCRIPT, 2.5, 30.0), (TOOLKIT, 30.0, 31.0)]


def test_a_host_without_toolkit_lines_has_one_phase_the_script() -> None:
    log = "my own entry point\nstep 1\nstep 2\n"  # a container_entry_point job

    assert names(phases(log, started=at(1), exited=at(9), job_end=at(12))) == [(SCRIPT, 1, 9), (UPLOAD, 9, 12)]
    assert phases(log) == []  # nor a start: nothing to draw


def test_a_running_hosts_last_phase_lasts_until_now_or_its_last_line() -> None:
    running = "\n".join(MPI_WORKER.splitlines()[:9])  # up to "Orted process found"

    assert names(phases(running, started=at(0.6), now=at(5)))[-1] == (SCRIPT, 3.101, 5.0)
    assert names(phases(running, started=at(0.6)))[-1] == (SCRIPT, 3.101, 3.101)


def test_only_the_toolkits_own_lines_mark_a_phase() -> None:
    log = "\n".join([
        "Invoking user script",  # no time stamp
        "2026-12-01 13:00:01,000 my-logger    INFO     Invoking user script",  # another logger
        "[1,0]<stdout>:2026-12-01 13:00:01,000 sagemaker-training-toolkit INFO     Invoking user script",  # a rank's
        "2026-13-45 13:00:01,000 sagemaker-training-toolkit INFO     Invoking user script",  # no such date
    ])

    assert phases(log) == []
    assert mark(tk(3, "Invoking user script")) == (at(3), SCRIPT)
    assert mark(tk(3, "Imported framework sagemaker_pytorch_container.training")) == (at(3), None)


def test_a_line_stamped_before_the_phase_it_ends_starts_its_phase_there() -> None:
    log = "\n".join([tk(1, "No Neurons detected (normal if no neurons installed)"),  # environment.py:339
                     tk(5, "Installing dependencies from requirements.txt"), tk(4, "Invoking user script")])

    # The requirements took no time then, and are left out.
    assert names(phases(log, exited=at(6))) == [(TOOLKIT, 1, 5), (SCRIPT, 5, 6)]


def test_a_first_toolkit_line_that_starts_a_phase_leaves_no_empty_toolkit_phase() -> None:
    log = tk(2, "Invoking user script")

    assert names(phases(log, exited=at(3))) == [(SCRIPT, 2, 3)]


def test_the_tracker_keeps_only_the_lines_that_matter() -> None:
    tracker = Tracker()
    changed = [tracker.feed(line) for line in PLAIN.splitlines()]
    for i in range(10000):
        tracker.feed(f"epoch {i}")
        tracker.feed(tk(21, f"Done waiting for a return code. Received {i} from exiting process."))

    assert len(tracker.marks) == 5  # the first toolkit line and the four that start a phase
    assert sum(changed) == 5
    assert names(tracker.phases(exited=at(21))) == names(phases(PLAIN, exited=at(21)))
