"""The engine contract: what the runner and the front ends may ask of a container engine, and nothing else.

An engine is a class registered by name in `emulator.backend.registry` (today `docker`:
backend/docker.py, and `swarm`: backend/swarm.py). It must

- implement every member of the `Backend` protocol below (its docstrings say what each must do;
  asked for what its capabilities lack, a member raises an EmulatorError saying so);
- give its images as `images`: the image capability (`emulator.backend.images.Images`: what the
  engine has and builds, the default image, framework images, a job's wheelhouse), a contract of its
  own beside this one, which holds only what an engine is (networks, containers, exec, logs, its
  machine);
- declare its `capabilities`, a `Capabilities` record of what it may lack (building images on this
  machine, probing the ulimits it refuses, publishing a port, passing a device, running a command in
  a stopped host): callers ask that record, never the class, before using such a member;
- report facts, not policy: which ulimits it refused (`refused_ulimits`), which output streams broke
  (`stream_errors`), a lost engine as DockerUnavailable; what deserves a warning, and when, is the
  runner's call (`emulator.run.runner`), made once for every engine;
- be handed what it needs from above (the folder it keeps what it learns in: an `EngineMemory`,
  by default the emulator's state folder), and decide nothing that depends on the job's meaning
  (which launchers it needs): nothing under `emulator.backend` imports the front ends' modules
  (`emulator.run.runner`, `emulator.api`, `emulator.training_images.launchers`, `emulator.state.job_records`).

The same job gives the same outcome on every engine: tests/swarm/test_engine_contract.py runs each
test on both, and asserts that every registered engine satisfies this protocol (and its images theirs).
Everything above it is tested against an in-memory engine (tests/support/fake_backend.py) instead of
stacks of mock.patch.
A second engine is one module and one `register` call. Only modules of `emulator.backend` import
docker-py (the engines and the parts they share, image builds and copies, the watcher).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, Protocol

if TYPE_CHECKING:
    from emulator.backend.images import Images
    from emulator.planning.container import Ulimit
    from emulator.planning.hardware import Machine
    from emulator.planning.plan import HostPlan, Plan

    # Only named in annotations: the watcher process (backend/reaper.py) imports this package and
    # starts faster without the plan and spec modules.
    from emulator.reports.console import Reporter


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do that another may not (as kind's ProviderInfo says it of a provider).
    Each is a fact of the engine, the same for every run; asked to do what it lacks, an engine raises
    an EmulatorError saying so (a port or a device on the swarm: UsageError, before anything starts)."""

    # The builds of its `images` (`build_default_image`, `build_framework_image`, `build_recipe_image`)
    # may be asked for, so `run` builds a missing image instead of failing with ImageMissing.
    builds_images: bool = False
    # `refused_ulimits` asks the engine which of the plan's ulimits it cannot give; without it, every
    # ulimit is given as planned.
    probes_ulimits: bool = False
    # A job's AWS gateway (emulator/run/job_aws.py) on its network, whose address the hosts are given as
    # their DNS server: without it, a job's hosts reach no AWS from inside the job.
    aws_gateway: bool = False
    # The gateway may run on another node than the driver: the endpoint's socket is in the job folder,
    # which every node sees (a swarm's), not in this machine's temporary folder.
    aws_socket_in_job_folder: bool = False
    # A container's address on the job's network is known only once it runs (a swarm's overlay has no
    # fixed addresses): the job's AWS gateway then runs before its hosts are made, as they are given its
    # address. Elsewhere it is made and started beside them (emulator/run/runner.py `create_hosts`).
    addresses_once_running: bool = False


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
    # each run's timeline (emulator.reports.timeline): the engine's own times, not when the driver polled.
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
    # A network the engine refused to remove with no endpoint left (backend/networks.py, moby#42119):
    # it stays until the engine restarts, so it blocks no later job and no `clean`.
    stuck: bool = False

    @property
    def orphaned(self) -> bool:
        """Left by a driver that is gone (killed, crashed, or exited with --keep)."""
        return self.driver_alive is False


class LineSink(Protocol):
    """Receives a container's output: `sink(container_name, chunk, stream)`, stream 1 = stdout, 2 = stderr."""

    def __call__(self, name: str, chunk: bytes, stream: int = 1) -> None: ...


class Backend(Protocol):
    """Executes a Plan on one container engine. Every method must exist on every engine; errors are
    EmulatorError subclasses (DockerUnavailable when the engine stops answering)."""

    @property
    def capabilities(self) -> Capabilities:
        """What this engine can do that another may not (a class attribute: the same for every run)."""

    @property
    def stream_errors(self) -> Mapping[str, str]:
        """Per container, why its output could not be delivered to the sink (a full disk): the stream
        was closed and the job went on; the runner says so."""

    def machine(self) -> Machine:
        """What the engine's machine has (cores, memory, the GPUs its GPU runtime can give), for
        `emulator.planning.hardware.resolve`."""
        ...

    def ping(self) -> None:
        """Raise DockerUnavailable if no engine answers."""

    @property
    def images(self) -> Images:
        """The engine's images: what it has and what it builds (backend/images.py: a capability of
        its own, with its own contract)."""

    def refused_ulimits(self, plan: Plan, wanted: Sequence[Ulimit]) -> set[Ulimit]:
        """The ulimits of `wanted` this engine cannot give the job's containers, which it then runs
        without them (`capabilities.probes_ulimits`; may start a throwaway container, whose verdict
        the engine remembers)."""

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

    def remove_resources(self, resources: Iterable[Resource]) -> None:
        """Remove these containers, then these networks. A network the engine will not remove though
        nothing is attached any more (moby#42119) is told within seconds: NetworkStuck
        (backend/networks.py) naming it, once everything else is removed, and `find` marks it `stuck`
        from then on; anything else not removed: EmulatorError."""

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


def contract_problems(engine: object) -> list[str]:
    """What an engine (an instance, as `emulator.backend.registry.engine` makes it: no engine is
    asked) lacks of the contract: a `Backend` member it does not have, or has with other parameters,
    `capabilities` that are not a `Capabilities` record, and what its `images` lack of the image
    capability (`emulator.backend.images.Images`), named `images.<member>`. [] when it has it all (the
    check tests/swarm/test_engine_contract.py makes of every registered engine, and a new engine's
    author can make of theirs)."""
    from emulator.backend.images import Images

    problems = []
    if not isinstance(getattr(engine, "capabilities", None), Capabilities):
        problems.append("capabilities: not a Capabilities record")
    problems += _members_lacking(engine, Backend, skip={"capabilities"})
    images = getattr(engine, "images", None)
    if images is not None:
        problems += [f"images.{problem}" for problem in _members_lacking(images, Images, skip=set())]
    return problems


def _members_lacking(found: object, protocol: type, skip: set[str]) -> list[str]:
    """The members of `protocol` (but `skip`) that `found` lacks, or has with other parameters."""
    import inspect

    problems = []
    for name, member in vars(protocol).items():
        if name.startswith("_") or name in skip:
            continue
        if isinstance(member, property):
            if not hasattr(found, name):
                problems.append(f"{name}: missing")
        elif callable(member):
            given_member = getattr(found, name, None)
            if not callable(given_member):
                problems.append(f"{name}(): missing")
                continue
            wanted = [(p.name, p.kind) for p in inspect.signature(member).parameters.values()][1:]  # without self
            given = [(p.name, p.kind) for p in inspect.signature(given_member).parameters.values()]
            if given != wanted:
                problems.append(f"{name}(): takes ({', '.join(n for n, _ in given)}), the contract says "
                                f"({', '.join(n for n, _ in wanted)})")
    return problems
