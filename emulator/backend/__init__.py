"""The backend boundary: the few operations the runner needs from a container engine.

Only modules of `emulator.backend` import docker-py (the engines, image builds and copies, the
reaper); everything above this protocol is tested against a fake (tests/unit/fake_backend.py)
instead of stacks of mock.patch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    # Only named in annotations: the watcher process (backend/reaper.py) imports this package and
    # starts faster without the plan and spec modules.
    from emulator.console import Reporter
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
    # When its process started (same clock as finished_at; None: never started or not told), for
    # each run's timeline (emulator.timeline): the engine's own times, not when the driver polled.
    started_at: float | None = None


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


class LineSink(Protocol):
    """Receives a container's output: `sink(container_name, chunk, stream)`, stream 1 = stdout, 2 = stderr."""

    def __call__(self, name: str, chunk: bytes, stream: int = 1) -> None: ...


class Backend(Protocol):
    def ping(self) -> None:
        """Raise DockerUnavailable if no engine answers."""

    def image_present(self, image: str) -> bool: ...

    def image_labels(self, image: str) -> Mapping[str, str] | None:
        """The image's labels ({} when it has none), None when the engine has no such image."""

    def image_id(self, image: str) -> str:
        """The id of an image the engine has."""

    def build_wheelhouse(self, image: str, code: Path, out: Path, progress: Callable[[str], None],
                         shown: str) -> None:
        """Resolve the requirements.txt in `code` against `image` (its Python, what it already has) with
        the package index reachable, and write the wheels it lacks into `out`; WheelhouseError naming
        the requirement, the Python and why (`shown` names the file)."""

    def prepare(self, plan: Plan, reporter: Reporter, grace: float) -> None:
        """Once the job folder is staged and before anything is created: ready the engine's machines
        for the job (a swarm copies the image to its nodes and checks they see the job's paths).
        `grace` is how long a stopped host gets before SIGKILL (a swarm fixes it at creation)."""

    def create_network(self, plan: Plan) -> None: ...

    def create_container(self, plan: Plan, host: HostPlan) -> None: ...

    def create_containers(self, plan: Plan, hosts: Sequence[HostPlan], sink: LineSink,
                          created: Callable[[str], None]) -> None:
        """For each host: `create_container`, `created(container name)`, then `follow_logs(name,
        sink)`; hosts may be created concurrently. After an interrupt or an error, hosts not begun
        are not created; the error (or KeyboardInterrupt) is raised once the creates under way have
        been recorded."""

    def start(self, names: Sequence[str]) -> None:
        """Start these containers together (concurrently), not one after the other."""

    def follow_logs(self, name: str, sink: LineSink) -> None:
        """Stream the container's output to `sink` in a background thread until it exits. Called
        before `start`, so that no byte is missed however fast the container exits."""

    def states(self, names: Sequence[str]) -> list[ContainerState]: ...

    def wait_exits(self, names: Sequence[str], timeout: float) -> None:
        """Return once one of these containers may have exited, or after `timeout` (a poll's pause)."""

    def stop(self, names: Sequence[str], grace: float) -> None:
        """SIGTERM, then SIGKILL after `grace` seconds; concurrently; already-exited is fine. Returns
        once all have exited. A KeyboardInterrupt while waiting propagates at once (the caller kills)."""

    def kill(self, names: Sequence[str]) -> None:
        """SIGKILL now, and return once all have exited; already-exited is fine."""

    def remove(self, plan: Plan) -> None:
        """Remove every container and network this backend created for the job (including one whose
        create a Ctrl-C cut short); never one another run holds, whatever its name."""

    def guard(self, plan: Plan) -> AbstractContextManager[None]:
        """While open, what this run creates is removed even if the driver dies (a watcher process);
        on leaving with something not removed, the watcher keeps trying."""

    def keep(self, plan: Plan) -> None:
        """The run leaves what it created in place (--keep, --keep-on-failure): the watcher of `guard`
        forgets it, so that neither the run nor the watcher removes it; `remove_resources` does later."""

    def fix_ownership(self, plan: Plan, uid: int, gid: int) -> None:
        """Give every host's /opt/ml tree (written by root in the containers) to uid:gid."""

    def wait_logs(self, timeout: float) -> list[str]:
        """Wait until every follow_logs stream has delivered its last byte; returns the containers
        whose stream had not ended by then (those streams are closed: their output may be cut)."""

    def find(self, job: str | None = None) -> list[Resource]:
        """Every container and network the emulator made (of one job, or all)."""

    def stop_resources(self, resources: Iterable[Resource], grace: float) -> None: ...

    def remove_resources(self, resources: Iterable[Resource]) -> None: ...

    def exec_in(self, container: Resource, command: Sequence[str], io: ExecIO) -> int:
        """Run `command` in a job's container and return its exit code, its output streamed to `io`.
        A running container runs it itself (`docker exec`); a stopped one (kept by --keep or
        --keep-on-failure, or a host that exited while the others run) cannot, so the command runs in
        a throwaway container made from a commit of it, with its mounts and no network, labelled as
        the job's and removed afterwards, also on Ctrl-C (`io.notice` says so)."""


@dataclass(frozen=True)
class ExecIO:
    """Where `exec_in` reads and writes: with `tty`, a terminal (stdin forwarded, one raw stream
    out); otherwise no stdin (as `docker exec` without -i) and stdout, stderr kept apart."""

    stdout: BinaryIO
    stderr: BinaryIO
    stdin: BinaryIO | None = None
    tty: bool = False
    size: tuple[int, int] | None = None  # the terminal's (rows, columns)
    notice: Callable[[str], None] = lambda message: None
