"""A job's attempts: when each fault the run injects on purpose is due, the attempts they end, and
the time the service bills across attempts (docs/service-features.md).

The faults themselves (what `--inject`, `--interrupt-at` and the spec's `inject` name, parsed and
checked against the job) are part of the spec: emulator/jobspec/faults.py. Each is due when the
job's hosts have *run* that long in all, across attempts, so `--interrupt-at 10s --interrupt-at 25s`
interrupts the first attempt 10 s after its hosts start and the second 15 s after its own, whatever
the restart took.

Pure: the schedule and the running clock; the runner does the stopping.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.jobspec.faults import Injection


@dataclass(frozen=True)
class Attempt:
    """One run of the job's hosts: when it began and ended (seconds on the driver's monotonic clock)
    and how it ended: "interrupted", "platform-error", or the job's own end."""

    number: int
    started: float
    ended: float
    ending: str

    @property
    def seconds(self) -> float:
        return max(0.0, self.ended - self.started)


class Schedule:
    """The injections still to come, in order of their running time."""

    def __init__(self, injections: tuple[Injection, ...]) -> None:
        self._pending = sorted(injections)

    def due(self, running: float) -> Injection | None:
        """The injection due once the hosts have run `running` seconds in all (removed from the
        schedule), or None."""
        if self._pending and running >= self._pending[0].at:
            return self._pending.pop(0)
        return None

    def next_at(self) -> float | None:
        return self._pending[0].at if self._pending else None


def running_seconds(done: list[Attempt]) -> float:
    """The hosts' running time of the attempts that have ended: MaxRuntimeInSeconds' clock."""
    return sum(a.seconds for a in done)
