"""The training toolkit's MPI worker race, told at once instead of after 20 minutes.

On every host of an MPI distribution but the first, the toolkit's `WorkerRunner` starts sshd, logs
"Waiting for MPI process to finish." and then looks for a process named `orted` once a second, for
at most 20 minutes (aws/sagemaker-training-toolkit, src/sagemaker_training/mpi.py `_orted_process`:
`for _ in range(20 * 60)` ... `time.sleep(1)`). When the ranks end in under about a second, `orted`
can come and go between two looks: the worker never sees it, waits the whole 20 minutes, and then
fails the job with `TypeError: 'NoneType' object is not iterable` (`psutil.wait_procs(None)`),
although every rank succeeded. The service runs the same code and does the same, so the emulator
keeps the behaviour, but says what is happening as soon as it is certain: `mpirun` on the first host
has succeeded (the toolkit logs that it writes the workers' status files only after a successful
mpirun, then sleeps 30 s before it exits; or that host has exited 0) and a worker, a few seconds
later, has still not logged that it found `orted` (mpirun waits for every orted, so once it has ended
there is none left to find).

Pure: fed the hosts' exits and their recent output, it answers the message once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

# What the toolkit's worker logs before it starts looking for orted, and once it has found it
# (mpi.py `WorkerRunner.run`, `_wait_orted_process_to_finish`).
WAITING = b"Waiting for MPI process to finish."
FOUND = b"Orted process found"
# What the toolkit's MasterRunner logs once mpirun has returned 0 (`process.check_error` raises on
# any other exit), before its fixed 30 s sleep (mpi.py `MasterRunner.run`).
MPIRUN_DONE = b"Begin writing status file from leader node"
# How long after the first host's exit a worker may still log FOUND: it looks once a second, and its
# output reaches the driver through the engine's stream.
SETTLE_SECONDS = 3.0
# The toolkit's longest wait for orted.
TOOLKIT_WAIT_MINUTES = 20


class WorkerWait:
    """Watches one job's MPI hosts: `leader` runs mpirun, `workers` wait for its orted."""

    def __init__(self, job_name: str, leader: str, workers: Sequence[str]) -> None:
        self.job_name = job_name
        self.leader = leader
        self.workers = tuple(workers)
        self._leader_done: float | None = None
        self._told = False

    def poll(self, now: float, exit_codes: Mapping[str, int | None],
             recent: Callable[[str], bytes]) -> str | None:
        """The message, once, when a worker is stuck: `exit_codes` of the hosts that exited so far,
        `recent(host)` the end of a host's output."""
        if self._told or not self.workers:
            return None
        if self._leader_done is None:
            succeeded = exit_codes.get(self.leader) == 0 and self.leader in exit_codes
            if not succeeded and MPIRUN_DONE not in recent(self.leader):
                return None
            self._leader_done = now
        if now - self._leader_done < SETTLE_SECONDS:
            return None
        stuck = [w for w in self.workers if w not in exit_codes and WAITING in (seen := recent(w))
                 and FOUND not in seen.split(WAITING)[-1]]
        if not stuck:
            return None
        self._told = True
        return message(self.job_name, self.leader, stuck)


def message(job_name: str, leader: str, stuck: Sequence[str]) -> str:
    who = ", ".join(stuck)
    return (f"{who} still wait{'s' if len(stuck) == 1 else ''} for MPI's orted process, although mpirun on "
            f"{leader} has succeeded: the ranks ended before the training toolkit's worker, which looks for orted "
            f"once a second, saw it. The toolkit now waits up to {TOOLKIT_WAIT_MINUTES} minutes "
            "and then fails the job with \"TypeError: 'NoneType' object is not iterable\", though every rank "
            "succeeded; the service runs the same toolkit code and would do the same. To avoid it, let the script "
            "run for more than a few seconds (a short test script can end with time.sleep(5)). To stop the job "
            f"now: Ctrl-C, or `hetero-emu stop {job_name}` (StopTrainingJob from the SDK).")
