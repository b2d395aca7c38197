"""An in-memory `Backend` for the runner's unit tests: scriptable per host, records every call.

Each host (by its name, `algo-N`) gets a `HostScript`: exit with a code after some (real, tiny)
seconds, or run until stopped; print log chunks; write files into its /opt/ml folder (the plan's
`host_dir`) just before it exits, whatever makes it exit; be OOM-killed; ignore SIGTERM; vanish.

Time is real but short: a container's exit is decided from `time.monotonic()` when the runner asks
(`states`, `stop`), with one clock reading per call, so hosts scripted to exit at the same moment
are always seen exiting in the same poll. Nothing runs in the background except the log pumps,
which deliver a host's chunks in order and end.

A runner that keeps polling for `give_up_after` seconds (default 20) gets an AssertionError from
`states()` instead of hanging the session.

It implements the whole engine contract (emulator.backend: the `Backend` protocol and its
`Capabilities`, and its `images`, a `FakeImages`: the image capability of emulator/backend/images.py);
what it may lack is chosen per test: building images (`builds_images`: a build only adds the image's
name) and ulimits it refuses (`refused_ulimits`: it then probes them).

The fake is strict where Docker is: a bind mount whose source is missing, a network or container
name that already exists, starting an unknown container all raise. A network named in `stuck_networks`
is refused as the Docker engine refuses one it counts endpoints on that are gone (moby#42119): kept,
NetworkStuck raised, and `find` marks it stuck from then on. Misuse of the protocol by the
runner (starting twice, creating a container before the network) raises AssertionError.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import tarfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from emulator.backend import Capabilities, ContainerState, ExecIO, LineSink, Resource
from emulator.backend.images import RECIPE_LABEL, BuildReport, ImageKey
from emulator.backend.networks import NetworkStuck
from emulator.defaults import DEFAULT_IMAGE
from emulator.errors import DockerUnavailable, EnvironmentProblem, ImageMissing, UsageError
from emulator.planning.container import Ulimit
from emulator.planning.hardware import Machine
from emulator.planning.plan import LABEL_JOB, LABEL_MANAGED, HostPlan, Plan
from emulator.reports.progress import StepReporter
from emulator.run.logs import STDERR, STDOUT
from emulator.training_images.frameworks import FrameworkImage
from emulator.training_images.image_recipes import load_recipe

SIGTERM_EXIT = 143
FAKE_IMAGE_SIZE = 1000  # bytes: what `images.size` says of every image the fake engine has
SIGKILL_EXIT = 137
#: The member of a fake engine's image archive that holds the image's name and labels.
FAKE_ARCHIVE_MEMBER = "fake-image.json"


def fake_recipe_hash(image: str) -> str:
    """The recipe hash the fake engine's `images.key` gives an image (hex, as a sha256 is)."""
    return hashlib.sha256(f"fake recipe of {image}".encode()).hexdigest()


@dataclass(frozen=True)
class HostScript:
    """What one fake container does once started."""

    exit_code: int = 0
    after: float = 0.0  # seconds after start() at which it exits by itself
    until_stopped: bool = False  # never exits by itself; stop() ends it
    files: Mapping[str, str | bytes] = field(default_factory=dict)  # relative to its /opt/ml, written at exit
    logs: Sequence[str | bytes] = ()  # raw output chunks on stdout, as the engine streams them
    stderr: Sequence[str | bytes] = ()  # and on stderr, delivered after the stdout ones
    oom: bool = False  # killed by the kernel at `after`: exit 137, OOMKilled
    ignore_sigterm: bool = False  # stop() has to SIGKILL it: 137 instead of 143
    disappear: bool = False  # at `after` its container is gone (removed behind the runner's back)


def exits(code: int = 0, after: float = 0.0, **kw: object) -> HostScript:
    return HostScript(exit_code=code, after=after, **kw)  # type: ignore[arg-type]


def runs_until_stopped(**kw: object) -> HostScript:
    return HostScript(until_stopped=True, **kw)  # type: ignore[arg-type]


def oom_killed(after: float = 0.0, **kw: object) -> HostScript:
    return HostScript(exit_code=SIGKILL_EXIT, after=after, oom=True, **kw)  # type: ignore[arg-type]


@dataclass
class FakeContainer:
    name: str
    job: str
    labels: Mapping[str, str]
    script: HostScript
    host: HostPlan | None = None
    started_at: float | None = None
    exit_code: int | None = None
    finished: bool = False
    oom: bool = False
    stopped: bool = False  # ended by a stop() call
    gone: bool = False  # vanished (HostScript.disappear)
    finished_at: float | None = None  # when it exited (the scripted moment, not when it was noticed)

    @property
    def running(self) -> bool:
        return not self.finished


@dataclass(frozen=True)
class StopCall:
    names: tuple[str, ...]
    grace: float
    running: tuple[str, ...]  # which of `names` were running when stop() was called


class FakeImages:
    """Implements emulator.backend.images.Images in memory: the images a FakeBackend has (`names`; `add`
    one as a build or a `docker load` would) and their labels, the builds and wheelhouses asked for.
    Every call goes to the engine's call log (`record`), named `images.<member>`. A build labels its
    image with the fake recipe hash `key` gives (`fake_recipe_hash`); `save` writes a small real tar
    archive (manifest.json and the image's name and labels) that `load` reads back."""

    def __init__(self, names: Iterable[str], labels_of: Mapping[str, Mapping[str, str]], builds: bool,
                 record: Callable[..., None]) -> None:
        self.names = set(names)
        # image -> its labels (the images this project builds say which launchers they carry)
        self.labels_of = dict(labels_of)
        self.builds = builds
        self._record = record
        self.built: list[str] = []  # the images the build_* members built
        # build_wheelhouse: each call's image; a failure to raise instead of writing wheels; the id each
        # image has (bump it to stand for a rebuilt image).
        self.wheelhouse_builds: list[str] = []
        self.wheelhouse_failure: BaseException | None = None
        self.image_ids: dict[str, str] = {}

    def add(self, image: str) -> None:
        self.names.add(image)

    def present(self, image: str) -> bool:
        self._record("images.present", image)
        return image in self.names

    def labels(self, image: str) -> dict[str, str] | None:
        self._record("images.labels", image)
        return dict(self.labels_of.get(image, {})) if image in self.names else None

    def image_id(self, image: str) -> str:
        self._record("images.image_id", image)
        return self.image_ids.get(image, f"sha256:id-of-{image}")

    def size(self, image: str) -> int:
        self._record("images.size", image)
        return FAKE_IMAGE_SIZE if image in self.names else 0

    def build_wheelhouse(self, image: str, code: Path, out: Path, progress: Callable[[str], None],
                         shown: str) -> None:
        """Like pip in the image: one wheel per `name==version` line of the code's requirements.txt."""
        self._record("images.build_wheelhouse", image)
        self.wheelhouse_builds.append(image)
        if self.wheelhouse_failure is not None:
            raise self.wheelhouse_failure
        for line in (code / "requirements.txt").read_text().splitlines():
            if line.strip() and not line.startswith(("#", "-")):
                name, version = line.strip().split("==")
                progress(f"  Collecting {line.strip()}")
                (out / f"{name}-{version}-py3-none-any.whl").write_text("wheel")

    def key(self, image: str | FrameworkImage) -> ImageKey:
        self._record("images.key", image)
        tag = load_recipe(image).tag if isinstance(image, str) else image.tag
        return ImageKey(tag, fake_recipe_hash(tag))

    def save(self, image: str, archive: Path) -> int:
        self._record("images.save", image)
        if image not in self.names:
            raise ImageMissing(f"the Docker engine has no image {image} to save")
        record = json.dumps({"image": image, "labels": self.labels_of.get(image, {})}).encode()
        with tarfile.open(archive, "w") as out:
            for name, data in (("manifest.json", b"[]"), (FAKE_ARCHIVE_MEMBER, record)):
                member = tarfile.TarInfo(name)
                member.size = len(data)
                out.addfile(member, io.BytesIO(data))
        return archive.stat().st_size

    def load(self, archive: Path) -> tuple[str, ...]:
        self._record("images.load", archive)
        with tarfile.open(archive, "r:") as held:
            member = held.extractfile(FAKE_ARCHIVE_MEMBER) if FAKE_ARCHIVE_MEMBER in held.getnames() else None
            if member is None:
                raise UsageError(f"the Docker engine cannot load {archive}: not an archive of the fake engine")
            record = json.loads(member.read())
        self.names.add(record["image"])
        self.labels_of[record["image"]] = record["labels"]
        return (record["image"],)

    def build_default_image(self, progress: StepReporter, *, rebuild: bool = False) -> BuildReport:
        return self._build(DEFAULT_IMAGE, rebuild)

    def build_framework_image(self, framework: FrameworkImage, progress: StepReporter, *,
                              rebuild: bool = False) -> BuildReport:
        return self._build(framework.tag, rebuild)

    def build_recipe_image(self, variant: str, progress: StepReporter, *, rebuild: bool = False) -> BuildReport:
        return self._build(load_recipe(variant).tag, rebuild)

    def _build(self, image: str, rebuild: bool) -> BuildReport:
        """As a real build: only what is missing or out of date (or asked again with `rebuild`) is built."""
        self._record("images.build", image)
        if not self.builds:
            raise UsageError("this fake engine builds no images (FakeBackend(builds_images=True) does)")
        # Up to date as a real build decides it, by the recipe label (one loaded from an archive
        # included); an image a test gives without that label counts as built here.
        recipe = self.labels_of.get(image, {}).get(RECIPE_LABEL, fake_recipe_hash(image))
        if image in self.names and recipe == fake_recipe_hash(image) and not rebuild:
            return BuildReport(image, False, 0.0, FAKE_IMAGE_SIZE, ())
        self.built.append(image)
        self.names.add(image)
        self.labels_of[image] = {**self.labels_of.get(image, {}), RECIPE_LABEL: fake_recipe_hash(image)}
        return BuildReport(image, True, 0.0, FAKE_IMAGE_SIZE, (f"built {image}",))


class FakeBackend:
    """Implements emulator.backend.Backend in memory."""

    def __init__(
        self,
        scripts: Mapping[str, HostScript] | None = None,
        *,
        images: Iterable[str] = (DEFAULT_IMAGE,),
        engine_up: bool = True,
        fail_create: Mapping[str, BaseException] | None = None,
        interrupt_on_states_call: int | None = None,
        leftovers: Iterable[Resource] = (),
        give_up_after: float = 20.0,
        lose_engine_on_states_call: int | None = None,
        interrupt_on_stop: bool = False,
        labels_of: Mapping[str, Mapping[str, str]] | None = None,
        builds_images: bool = False,
        refused_ulimits: Iterable[Ulimit] | None = None,
        machine: Machine | None = None,
        late_report: Iterable[str] = (),
        stuck_networks: Iterable[str] = (),
    ) -> None:
        # Of the engine contract's capabilities: building images and probing ulimits as chosen.
        self.capabilities = Capabilities(builds_images=builds_images, probes_ulimits=refused_ulimits is not None)
        self.refused = set(refused_ulimits or ())
        # The engine's machine: this test machine's shape (2 cores, 24 GiB, no GPU) unless a test says.
        self.the_machine = machine or Machine(cpus=2, memory_bytes=24 * 1024**3)
        # A log file that could not be written, by container (a test sets it; the Docker engine's
        # stream reader does).
        self.stream_errors: dict[str, str] = {}
        self.scripts = dict(scripts or {})
        self.images = FakeImages(images, labels_of or {}, builds_images, self._record)
        self.engine_up = engine_up
        self.fail_create = dict(fail_create or {})
        self.interrupt_on_states_call = interrupt_on_states_call
        self.leftovers = list(leftovers)
        # A runner that never stops a host which runs until stopped would hang the test session:
        # states() fails the test instead, this many seconds after start().
        self.give_up_after = give_up_after
        # Hosts whose exit the engine reports only after a stop() (a poll that has not seen it yet).
        self.late_report = set(late_report)
        # From this states() call on, the engine stops answering (states and remove raise).
        self.lose_engine_on_states_call = lose_engine_on_states_call
        # The first stop() raises KeyboardInterrupt: a second Ctrl-C during the grace period.
        self.interrupt_on_stop = interrupt_on_stop
        self.killed: list[str] = []
        # Networks the engine refuses to remove with nothing attached (moby#42119), and those it has
        # refused so far: the Docker engine's `find` marks these stuck (backend/networks.py).
        self.stuck_networks = set(stuck_networks)
        self.found_stuck: set[str] = set()
        self._started_events: dict[str, threading.Event] = {}
        self.engine_lost = False
        # guard(): what was still held (containers + networks) when each guard closed.
        self.guards_left: list[list[str]] = []
        self.guards_open = 0
        self.ownership_calls: list[tuple[str, int, int]] = []
        self.kept: list[str] = []  # keep() calls, by job
        # exec_in: what each call ran (container, command, whether it ran in a copy), and what a
        # command answers: its exit code and output, by the command's first word (default: 0, none).
        self.exec_calls: list[tuple[str, tuple[str, ...], bool]] = []
        self.exec_answers: dict[str, tuple[int, bytes]] = {}

        self._lock = threading.RLock()
        self.containers: dict[str, FakeContainer] = {}  # what the fake engine holds now
        self.networks: dict[str, str] = {}  # network name -> job
        self.calls: list[tuple[object, ...]] = []  # every call, in order
        self.created: list[str] = []
        self.removed: list[str] = []
        self.networks_created: list[str] = []
        self.networks_removed: list[str] = []
        self.start_calls: list[tuple[str, ...]] = []
        self.stop_calls: list[StopCall] = []
        self.remove_calls: list[str] = []
        self.states_calls = 0
        self.followed: list[str] = []
        # host -> container path -> sorted files under that mount's source, seen at create time
        self.mounts_seen: dict[str, dict[str, list[str]]] = {}
        self._log_threads: list[tuple[str, threading.Thread]] = []

    # -- helpers for tests

    def add_foreign_container(self, name: str, job: str, running: bool = True) -> None:
        """A container some other driver made (e.g. another run of the same job name)."""
        labels = {LABEL_MANAGED: "true", LABEL_JOB: job}
        c = FakeContainer(name, job, labels, runs_until_stopped(), started_at=time.monotonic())
        if not running:
            c.finished, c.exit_code = True, 0
        self.containers[name] = c

    def add_foreign_network(self, name: str, job: str) -> None:
        self.networks[name] = job

    def call_names(self) -> list[str]:
        return [str(c[0]) for c in self.calls]

    @property
    def stopped_while_running(self) -> set[str]:
        """Containers a stop() call found running (i.e. that did not exit by themselves first)."""
        return {n for call in self.stop_calls for n in call.running}

    # -- the protocol

    def _record(self, *call: object) -> None:
        with self._lock:
            self.calls.append(call)

    def machine(self) -> Machine:
        return self.the_machine

    def ping(self) -> None:
        self._record("ping")
        if not self.engine_up:
            raise DockerUnavailable("no Docker engine answers: fake engine is down", hint="start it")

    def refused_ulimits(self, plan: Plan, wanted: Sequence[Ulimit]) -> set[Ulimit]:
        self._record("refused_ulimits", plan.job_name, tuple(u.name for u in wanted))
        if not self.capabilities.probes_ulimits:
            raise UsageError("this fake engine probes no ulimits (FakeBackend(refused_ulimits=...) does)")
        return self.refused & set(wanted)

    def prepare(self, plan: Plan, reporter: object, grace: float) -> None:
        self._record("prepare", plan.job_name, grace)

    def create_network(self, plan: Plan) -> None:
        self._record("create_network", plan.network)
        with self._lock:
            if plan.network in self.networks:
                raise EnvironmentProblem(f"cannot create network {plan.network}: already exists")
            self.networks[plan.network] = plan.job_name
            self.networks_created.append(plan.network)

    def create_container(self, plan: Plan, host: HostPlan) -> None:
        self._record("create_container", host.container.name)
        with self._lock:
            assert plan.network in self.networks, "container created before its network"
            if host.name in self.fail_create:
                raise self.fail_create[host.name]
            if host.container.name in self.containers:
                raise EnvironmentProblem(f"cannot create container {host.container.name}: name in use (409)")
            for mount in host.container.mounts:
                if not Path(mount.source).exists():
                    raise EnvironmentProblem(f"bind source path does not exist: {mount.source}")
            self.mounts_seen[host.name] = {
                m.target: sorted(
                    str(p.relative_to(m.source)) for p in Path(m.source).rglob("*") if p.is_file()
                )
                if Path(m.source).is_dir()
                else [Path(m.source).name]
                for m in host.container.mounts
            }
            self.containers[host.container.name] = FakeContainer(
                host.container.name, plan.job_name, dict(host.container.labels),
                self.scripts.get(host.name, HostScript()), host,
            )
            self.created.append(host.container.name)

    def create_containers(self, plan: Plan, hosts: Sequence[HostPlan], sink: LineSink,
                          created: Callable[[str], None]) -> None:
        # One after the other: a KeyboardInterrupt from `fail_create` leaves the later hosts uncreated.
        for host in hosts:
            self.create_container(plan, host)
            created(host.container.name)
            self.follow_logs(host.container.name, sink)

    def start(self, names: Sequence[str]) -> None:
        self._record("start", tuple(names))
        now = time.monotonic()
        with self._lock:
            self.start_calls.append(tuple(names))
            for name in names:
                c = self.containers.get(name)
                assert c is not None, f"start of unknown container {name}"
                assert c.started_at is None, f"{name} started twice"
                c.started_at = now
                self._started_events.setdefault(name, threading.Event()).set()

    def follow_logs(self, name: str, sink: LineSink) -> None:
        self._record("follow_logs", name)
        c = self.containers[name]
        assert c.started_at is None, f"{name}: its output followed after it started (bytes could be missed)"
        chunks = [(x.encode() if isinstance(x, str) else x, STDOUT) for x in c.script.logs]
        chunks += [(x.encode() if isinstance(x, str) else x, STDERR) for x in c.script.stderr]
        self.followed.append(name)
        started = self._started_events.setdefault(name, threading.Event())

        def pump() -> None:
            # As an attached stream: nothing before the container starts; a container that never
            # starts never ends its stream (wait_logs gives up on it).
            if not started.wait(self.give_up_after):
                return
            for chunk, stream in chunks:
                sink(name, chunk, stream)

        thread = threading.Thread(target=pump, name=f"fake-logs-{name}", daemon=True)
        thread.start()
        self._log_threads.append((name, thread))

    def wait_logs(self, timeout: float) -> list[str]:
        self._record("wait_logs", timeout)
        deadline = time.monotonic() + timeout
        for _, thread in self._log_threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        unfinished = [name for name, thread in self._log_threads if thread.is_alive()]
        self._log_threads = []
        return unfinished

    def _finish(self, c: FakeContainer, code: int, *, oom: bool = False, stopped: bool = False) -> None:
        if c.host is not None:
            root = Path(c.host.host_dir)
            for relative, content in c.script.files.items():
                target = root / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(content, bytes):
                    target.write_bytes(content)
                else:
                    target.write_text(content)
        c.finished, c.exit_code, c.oom, c.stopped = True, code, oom, stopped
        if c.finished_at is None:
            c.finished_at = time.monotonic()

    def _settle(self, c: FakeContainer, now: float) -> None:
        """Let a container exit by itself if its time has come."""
        s = c.script
        if c.finished or c.started_at is None or s.until_stopped or now < c.started_at + s.after:
            return
        c.finished_at = c.started_at + s.after
        if s.disappear:
            self._finish(c, -1)
            c.gone = True
            self.containers.pop(c.name, None)
        elif s.oom:
            self._finish(c, SIGKILL_EXIT, oom=True)
        else:
            self._finish(c, s.exit_code)

    def states(self, names: Sequence[str]) -> list[ContainerState]:
        self._record("states", tuple(names))
        with self._lock:
            self.states_calls += 1
            if self.states_calls == self.interrupt_on_states_call:
                raise KeyboardInterrupt
            if self.states_calls == self.lose_engine_on_states_call or self.engine_lost:
                self.engine_lost = True
                raise DockerUnavailable("the Docker engine stopped answering: fake")
            now = time.monotonic()
            started = [c.started_at for c in self.containers.values() if c.started_at is not None]
            if started and now - min(started) > self.give_up_after:
                raise AssertionError(f"the runner is still polling {self.give_up_after:g} s after start()")
            out = []
            # The engine's times are seconds since the epoch, as Docker's State.FinishedAt.
            epoch = time.time() - now
            for name in names:
                c = self.containers.get(name)
                if c is not None:
                    self._settle(c, now)
                c = self.containers.get(name)
                if c is None:
                    out.append(ContainerState(name, running=False, exit_code=None, error="container disappeared"))
                elif c.running or (c.host is not None and c.host.name in self.late_report and not self.stop_calls):
                    out.append(ContainerState(name, running=True))
                else:
                    out.append(ContainerState(
                        name, running=False, exit_code=c.exit_code, oom_killed=c.oom,
                        finished_at=None if c.finished_at is None else c.finished_at + epoch,
                        started_at=None if c.started_at is None else c.started_at + epoch))
            return out

    def wait_exits(self, names: Sequence[str], timeout: float) -> None:
        time.sleep(timeout)

    def stop(self, names: Sequence[str], grace: float) -> None:
        self._record("stop", tuple(names), grace)
        if self.interrupt_on_stop:
            # A Ctrl-C while the grace period runs: nothing has exited yet.
            self.interrupt_on_stop = False
            raise KeyboardInterrupt
        running = self._end_running(names, lambda c: SIGKILL_EXIT if c.script.ignore_sigterm else SIGTERM_EXIT)
        self.stop_calls.append(StopCall(tuple(names), grace, tuple(running)))

    def kill(self, names: Sequence[str]) -> None:
        self._record("kill", tuple(names))
        self.killed += self._end_running(names, lambda c: SIGKILL_EXIT)

    def _end_running(self, names: Sequence[str], exit_code: Callable[[FakeContainer], int]) -> list[str]:
        """End those of `names` that run now with exit_code(container); returns their names."""
        ended = []
        with self._lock:
            now = time.monotonic()
            for name in names:
                c = self.containers.get(name)
                if c is None:
                    continue
                self._settle(c, now)
                if c.running and c.started_at is not None:
                    ended.append(name)
                    self._finish(c, exit_code(c), stopped=True)
        return ended

    def remove(self, plan: Plan) -> None:
        self._record("remove", plan.job_name)
        with self._lock:
            if self.engine_lost:
                raise DockerUnavailable("could not remove: the engine is not answering")
            self.remove_calls.append(plan.job_name)
            # What this fake created for the job, as the Docker backend removes by the ids it recorded.
            for name in self.created:
                c = self.containers.get(name)
                if c is not None and c.job == plan.job_name:
                    del self.containers[name]
                    self.removed.append(name)
            if plan.network in self.networks_created:
                self._remove_network(plan.network)
            self._raise_stuck([plan.network])

    @contextlib.contextmanager
    def guard(self, plan: Plan) -> Iterator[None]:
        self._record("guard", plan.job_name)
        self.guards_open += 1
        try:
            yield
        finally:
            self.guards_open -= 1
            with self._lock:
                held = [n for n, c in self.containers.items() if c.job == plan.job_name]
                held += [n for n, j in self.networks.items() if j == plan.job_name]
            self.guards_left.append(sorted(held))

    def keep(self, plan: Plan) -> None:
        self._record("keep", plan.job_name)
        self.kept.append(plan.job_name)

    def exec_in(self, container: Resource, command: Sequence[str], io: ExecIO) -> int:
        self._record("exec_in", container.name, tuple(command))
        with self._lock:
            c = self.containers.get(container.name)
            if c is None:
                raise EnvironmentProblem(f"the container {container.name} is gone")
            self._settle(c, time.monotonic())
            copy = not c.running or c.started_at is None
        if copy:
            io.notice(f"{container.name} is not running: running the command in a copy of its container")
        self.exec_calls.append((container.name, tuple(command), copy))
        code, output = self.exec_answers.get(command[0], (0, b""))
        io.stdout.write(output)
        return code

    def fix_ownership(self, plan: Plan, uid: int, gid: int) -> None:
        self._record("fix_ownership", plan.job_name)
        self.ownership_calls.append((plan.job_name, uid, gid))

    def find(self, job: str | None = None) -> list[Resource]:
        self._record("find", job)
        with self._lock:
            found = [
                Resource("container", c.name, c.job, dict(c.labels), "running" if c.running else "exited")
                for c in self.containers.values()
            ]
            found += [
                Resource("network", n, j, {LABEL_MANAGED: "true", LABEL_JOB: j}, stuck=n in self.found_stuck)
                for n, j in self.networks.items()
            ]
            found += self.leftovers
        return [r for r in found if job in (None, r.job)]

    def stop_resources(self, resources: Iterable[Resource], grace: float) -> None:
        self.stop([r.name for r in resources if r.kind == "container"], grace)

    def remove_resources(self, resources: Iterable[Resource]) -> None:
        self._record("remove_resources")
        with self._lock:
            for r in resources:
                if r.kind == "container" and self.containers.pop(r.name, None) is not None:
                    self.removed.append(r.name)
                elif r.kind == "network":
                    self._remove_network(r.name)
            self._raise_stuck([r.name for r in resources if r.kind == "network"])

    def _remove_network(self, name: str) -> None:
        if name in self.stuck_networks and name in self.networks:
            self.found_stuck.add(name)
        elif self.networks.pop(name, None) is not None:
            self.networks_removed.append(name)

    def _raise_stuck(self, names: Iterable[str]) -> None:
        """As the Docker engine's removal does, once everything else is removed."""
        stuck = [n for n in names if n in self.found_stuck and n in self.networks]
        if stuck:
            raise NetworkStuck(stuck)
