"""The backend boundary: the few operations the runner needs from a container engine.

Only `emulator.backend.docker` imports docker-py; everything above this protocol is tested against a
fake (tests/unit/fake_backend.py) instead of stacks of mock.patch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from emulator.plan import HostPlan, Plan


@dataclass(frozen=True)
class ContainerState:
    """What the engine says about one container."""

    name: str
    running: bool
    exit_code: int | None = None
    oom_killed: bool = False
    error: str = ""
    # When it exited (seconds since the epoch), to blame the first of several hosts that fail at once.
    finished_at: float | None = None


@dataclass(frozen=True)
class Resource:
    """A container or network the emulator created, found by its labels (for ps / clean)."""

    kind: str  # "container" | "network"
    name: str
    job: str
    labels: Mapping[str, str]
    status: str = ""
    # Is the driver that made it still running? None: cannot be told (made on another machine).
    driver_alive: bool | None = False

    @property
    def orphaned(self) -> bool:
        """Left by a driver that is gone (killed, crashed, or exited with --keep)."""
        return self.driver_alive is False


LineSink = Callable[[str, bytes], None]


class Backend(Protocol):
    def ping(self) -> None:
        """Raise DockerUnavailable if no engine answers."""

    def image_present(self, image: str) -> bool: ...

    def create_network(self, plan: Plan) -> None: ...

    def create_container(self, plan: Plan, host: HostPlan) -> None: ...

    def start(self, names: Sequence[str]) -> None:
        """Start these containers together (concurrently), not one after the other."""

    def follow_logs(self, name: str, sink: LineSink) -> None:
        """Stream the container's output to sink(name, chunk) in a background thread until it exits."""

    def states(self, names: Sequence[str]) -> list[ContainerState]: ...

    def stop(self, names: Sequence[str], grace: float) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds; concurrently; already-exited is fine."""

    def remove(self, plan: Plan) -> None:
        """Remove every container and network this backend created for the job (including one whose
        create a Ctrl-C cut short); never one another run holds, whatever its name."""

    def guard(self, plan: Plan) -> AbstractContextManager[None]:
        """While open, what this run creates is removed even if the driver dies (a watcher process);
        on leaving with something not removed, the watcher keeps trying."""

    def fix_ownership(self, plan: Plan, uid: int, gid: int) -> None:
        """Give every host's /opt/ml tree (written by root in the containers) to uid:gid."""

    def wait_logs(self, timeout: float) -> None:
        """Wait until every follow_logs stream has drained."""

    def find(self, job: str | None = None) -> list[Resource]:
        """Every container and network the emulator made (of one job, or all)."""

    def stop_resources(self, resources: Iterable[Resource], grace: float) -> None: ...

    def remove_resources(self, resources: Iterable[Resource]) -> None: ...
