"""The Docker backend: the only module (with backend/image_build.py) that talks to the engine, via docker-py."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import math
import os
import select
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors
import requests

from emulator.backend import ContainerState, ExecIO, LineSink, Resource, ulimits
from emulator.backend.calls import engine_call, epoch, first_line, interrupts_deferred
from emulator.backend.liveness import current_driver, driver_alive
from emulator.backend.reaper import Reaper
from emulator.console import Reporter
from emulator.container import ContainerSpec, Ulimit
from emulator.errors import DockerUnavailable, EmulatorError, EnvironmentProblem, ImageMissing
from emulator.frameworks import FrameworkImage
from emulator.job_records import state_dir, write_atomically
from emulator.launchers import required_launchers
from emulator.plan import LABEL_DRIVER, LABEL_HOST, LABEL_JOB, LABEL_MANAGED, HostPlan, Plan, host_addresses

# Enough to start 16 hosts at once without one thread per container on a 2-core machine; the engine
# serialises part of the work anyway.
START_WORKERS = 16
# Read size of a host's output stream: large reads keep the cost per byte low (a chatty host writes
# tens of MB/s); the engine delivers what is there, so a quiet host's line still arrives at once.
READ_SIZE = 1 << 20
# `hetero-emu exec` in a stopped host commits its container first (see exec_in).
COMMIT_TIMEOUT = 300
# The engine closes a host's output stream just before it records the exit (moby
# daemon/monitor.go handleContainerExit: Reset, then SetStopped): for this long after a stream
# ended, the supervisor waits on the engine's own wait call (at most this long per poll) instead of
# a whole poll's pause.
EXIT_SETTLE_SECONDS = 1.0
EXIT_RECHECK_SECONDS = 0.2
# What `docker ps --filter status=` calls the states the runner counts as running (inspect's
# State.Running, which is true when paused, or a container created and not started yet).
RUNNING_STATUSES = ["created", "running", "paused", "restarting"]


def connect(timeout: float = 10, base_url: str | None = None) -> docker.DockerClient:
    """A client for the engine at `base_url` (tcp://, ssh://, unix://), else the one DOCKER_HOST (or the
    default socket) names, or DockerUnavailable."""
    try:
        if base_url is None:
            client = docker.from_env(timeout=int(timeout))
        else:
            client = docker.DockerClient(base_url=base_url, timeout=int(timeout), use_ssh_client=True)
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as err:
        raise DockerUnavailable(
            f"no Docker engine answers: {first_line(err)}",
            hint="start the Docker daemon (systemctl start docker) or set DOCKER_HOST",
        ) from None
    return client


_Item = TypeVar("_Item")


def together(action: Callable[[_Item], object], items: Sequence[_Item]) -> None:
    """`action` on every item at once, from up to START_WORKERS threads; interrupted, the items not
    begun are dropped (once those under way are done) and the interrupt goes on."""
    pool = ThreadPoolExecutor(max_workers=max(1, min(START_WORKERS, len(items))))
    try:
        list(pool.map(action, items))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@dataclass(frozen=True)
class SubnetMemory:
    """The subnet (and gateway) the engine last picked for a job network of this kind, kept in the
    state folder (`emulator.job_records.state_dir`) per engine address, as the ulimit verdicts are. Best
    effort both ways: an unreadable or unwritable file only costs the engine's pick."""

    engine: str
    isolated: bool

    @property
    def key(self) -> str:
        return f"{self.engine} {'internal' if self.isolated else 'bridge'}"

    @staticmethod
    def path() -> Path:
        return state_dir() / "engine-subnets.json"

    def _all(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path().read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def recall(self) -> dict[str, str] | None:
        config = self._all().get(self.key)
        if not isinstance(config, dict) or not isinstance(config.get("Subnet"), str):
            return None
        gateway = config.get("Gateway")
        return {"Subnet": config["Subnet"], **({"Gateway": gateway} if isinstance(gateway, str) else {})}

    def remember(self, config: Mapping[str, Any]) -> None:
        known = {**self._all(), self.key: {k: config[k] for k in ("Subnet", "Gateway") if config.get(k)}}
        with contextlib.suppress(OSError):
            write_atomically(self.path(), json.dumps(known, indent=1, sort_keys=True))


@dataclass(frozen=True)
class ContainerOptions:
    """docker-py's arguments for one host: `APIClient.create_container`'s (`create`, without the host and
    networking configs), `create_host_config`'s (`host_config`) and `create_endpoint_config`'s (`endpoint`)."""

    create: dict[str, Any]
    host_config: dict[str, Any]
    endpoint: dict[str, Any]


def container_options(container: ContainerSpec, network: str, addresses: Mapping[str, str],
                      driver: str) -> ContainerOptions:
    """A host's `ContainerSpec` in docker-py's terms, every field translated once (compose.service is
    the other translation; tests/unit/test_container.py checks both). Pure: no engine is asked.
    `addresses` are the job network's fixed addresses by host name (see create_network)."""
    create = {
        "image": container.image,
        "command": list(container.command),
        "entrypoint": list(container.entrypoint) if container.entrypoint is not None else None,
        "name": container.name,
        "hostname": container.hostname,
        "environment": dict(container.environment),
        "labels": {**container.labels, LABEL_DRIVER: driver},
        "working_dir": None,
        # A published port must be declared (exposed) at create time too.
        "ports": [p.container_port for p in container.ports] or None,
    }
    host_config = {
        "mounts": [docker.types.Mount(m.target, m.source, type="bind", read_only=m.read_only)
                   for m in container.mounts],
        "init": container.init,
        "extra_hosts": {name: addresses[name] for name in container.extra_hosts if name in addresses},
        # Swap limited to the same figure: an instance has no swap, so running out of memory is
        # an OOM kill, not a slow crawl. (Not privileged, no added capabilities, no Docker
        # socket, no host network: the engine's defaults, checked by tests/faults.)
        "mem_limit": container.memory_bytes,
        "memswap_limit": container.memory_bytes,
        "shm_size": container.shm_bytes,
        "ulimits": [docker.types.Ulimit(name=u.name, soft=u.soft, hard=u.hard) for u in container.ulimits],
        "devices": [d.spec() for d in container.devices] or None,
        "port_bindings": {p.container_port: (p.host_ip, p.host_port) for p in container.ports} or None,
        "network_mode": network,
        # The emulator reads each host's output over an attach made before the start (see
        # follow_logs), which gets every byte as written. No engine log driver: an engine's
        # default one may rotate (json-file with max-size drops what a slow reader has not
        # read), and it holds a line without a newline until 16 KiB have gathered
        # (moby daemon/logger/copier.go), so a `\r` progress bar could not be shown live;
        # it also halves how fast a host can write (measured: 82 vs 37-48 MB/s).
        "log_config": docker.types.LogConfig(type=docker.types.LogConfig.types.NONE),
    }
    endpoint = {"aliases": list(container.aliases), "ipv4_address": addresses.get(container.hostname)}
    return ContainerOptions(create, host_config, endpoint)


class DockerBackend:
    """Executes a Plan on a Docker engine. Engine errors become EmulatorError subclasses."""

    def __init__(self, client: docker.DockerClient | None = None) -> None:
        self._client = client
        # Per container: the thread reading its output stream, and that stream's socket.
        self._streams: dict[str, tuple[threading.Thread, socket.socket]] = {}
        # When each stream ended (monotonic), and a wake-up for the supervisor (wait_exits).
        self._stream_ends: dict[str, float] = {}
        self._stream_ended = threading.Event()
        self.stream_errors: dict[str, str] = {}
        self._addresses: dict[str, dict[str, str]] = {}
        # Per job: the watcher process, and what was created and not yet removed (id -> kind).
        self._reapers: dict[str, Reaper] = {}
        self._outstanding: dict[str, dict[str, str]] = {}
        # Set once the engine stopped answering mid-job: removal is then left to the watcher
        # instead of waiting for one timeout per container.
        self._engine_lost = False
        self._driver = current_driver()
        # Per job: what the engine could not give as the plan says (read by the runner, which warns).
        self.notes: dict[str, list[str]] = {}
        self._labels_seen: dict[str, dict[str, str]] = {}
        self._notes_lock = threading.Lock()

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            self._client = connect()
        return self._client

    @property
    def api(self) -> docker.APIClient:
        return self.client.api

    def ping(self) -> None:
        _ = self.client

    def build_default_image(self, reporter: Reporter) -> None:
        """Build the default training image offline, reporting progress (`run` does this when missing)."""
        from emulator.backend.image_build import build_default_image

        build_default_image(self.client, progress=reporter)

    def build_framework_image(self, framework: FrameworkImage, reporter: Reporter) -> None:
        """Build a framework image offline, reporting progress (`run` does this when it is missing)."""
        from emulator.backend.framework_build import build_framework_image

        build_framework_image(self.client, framework, progress=reporter)

    def image_id(self, image: str) -> str:
        """The id of an image the engine has (a wheelhouse is resolved against exactly it)."""
        try:
            return str(self.client.images.get(image).id)
        except docker.errors.DockerException as err:
            raise EnvironmentProblem(f"cannot inspect image {image}: {first_line(err)}") from None

    def build_wheelhouse(self, image: str, code: Path, out: Path, progress: Callable[[str], None],
                         shown: str) -> None:
        """Resolve a job's requirements.txt in a container of its image that reaches the package index,
        into `out` (emulator.backend.index_container.build_wheelhouse)."""
        from emulator.backend.index_container import build_wheelhouse

        build_wheelhouse(self.client, image, code, out, progress, shown)

    def image_present(self, image: str) -> bool:
        labels = self._inspect_labels(image)
        if labels is not None:
            # A run asks for the labels right after (runner.ensure_image): one inspect does for both.
            self._labels_seen[image] = labels
        return labels is not None

    def image_labels(self, image: str) -> Mapping[str, str] | None:
        seen = self._labels_seen.pop(image, None)  # once: a later run sees a rebuilt image's labels
        return seen if seen is not None else self._inspect_labels(image)

    def _inspect_labels(self, image: str) -> dict[str, str] | None:
        try:
            return dict(self.client.images.get(image).labels or {})
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as err:
            raise EnvironmentProblem(f"cannot inspect image {image}: {first_line(err)}") from None

    def reaper_environment(self) -> dict[str, str]:
        """What the watcher's environment adds to this process's to reach the same engine."""
        return {}

    def _lost_engine(self, err: BaseException) -> DockerUnavailable:
        """Mark the engine lost (teardown then leaves removal to the watcher) and say so."""
        self._engine_lost = True
        return DockerUnavailable(f"the Docker engine stopped answering: {first_line(err)}",
                                 hint="check the daemon; `hetero-emu clean` removes what is left")

    @contextlib.contextmanager
    def guard(self, plan: Plan) -> Iterator[None]:
        """While open, a detached watcher (backend/reaper.py) knows every container and network this
        run creates; if the driver dies, or leaves the block with some of them not removed (the
        engine stopped answering), the watcher removes them."""
        try:
            reaper: Reaper | None = Reaper(Path(plan.job_dir) / "logs" / "reaper.log", self.reaper_environment())
        except OSError:
            reaper = None  # cannot fork: the run still tears down in its `finally`
        if reaper is not None:
            self._reapers[plan.job_name] = reaper
        self._outstanding[plan.job_name] = {}
        try:
            yield
        finally:
            self._reapers.pop(plan.job_name, None)
            left = self._outstanding.pop(plan.job_name, {})
            if reaper is not None:
                if left:
                    reaper.hand_over()
                else:
                    reaper.release()

    def _track(self, plan: Plan, kind: str, ident: str) -> None:
        """Record what the engine created (called under _interrupts_deferred with the create)."""
        self._outstanding.setdefault(plan.job_name, {})[ident] = kind
        reaper = self._reapers.get(plan.job_name)
        if reaper is not None:
            reaper.track(kind, ident)

    def keep(self, plan: Plan) -> None:
        """Leave the job's containers and network in place: the watcher forgets them (see guard)."""
        self._untrack(plan, list(self._outstanding.get(plan.job_name, {})))
        self._addresses.pop(plan.job_name, None)

    def _untrack(self, plan: Plan, idents: Iterable[str]) -> None:
        outstanding = self._outstanding.get(plan.job_name, {})
        reaper = self._reapers.get(plan.job_name)
        for ident in idents:
            if outstanding.pop(ident, None) is not None and reaper is not None:
                reaper.forget(ident)

    def prepare(self, plan: Plan, reporter: Reporter, grace: float) -> None:
        """One machine: the image is here already (ensure_image), and so is every path."""

    @engine_call
    def create_network(self, plan: Plan) -> None:
        """A bridge network of the job's own, with a fixed address per host.

        The engine's DNS forgets a container as soon as it exits, but the toolkit resolves every
        algo-N before it runs the script, retrying for 15 minutes
        (sagemaker_training/entry_point.py `_wait_hostname_resolution`), and a host that exits 0
        early must stop nobody. So every host gets a static address and an /etc/hosts entry for
        every other host: names resolve for the whole job, as on the service. Static addresses
        need a subnet configured by the user, so the network is created once to let the engine
        pick a free subnet, then again with that subnet given explicitly. The subnet the engine
        picked last time is tried first (a network create and remove less: a bridge and its
        firewall rules each, the slowest part of a small job's start); if the engine refuses it
        (another network holds it now), the engine picks again.
        """
        labels = {**plan.labels, LABEL_DRIVER: self._driver}
        # EnableNetworkIsolation: an `internal` bridge has no route out, but the host still owns the
        # bridge's gateway address, so a container could reach every service the host listens on
        # (moby/libnetwork#1151). With inhibit_ipv4 the bridge gets no address: hosts reach each
        # other and nothing else.
        options = {"com.docker.network.bridge.inhibit_ipv4": "true"} if plan.network_isolation else None
        last_error: Exception | None = None
        subnets = SubnetMemory(ulimits.engine_key(), plan.network_isolation)
        remembered = subnets.recall()
        for given in ([remembered] if remembered else []) + [None, None, None]:
            try:
                with interrupts_deferred():
                    # internal=True: a bridge with no route out of the host, while containers on it
                    # still reach each other: what EnableNetworkIsolation means for a multi-host job.
                    if given is None:
                        probe = self.api.create_network(plan.network, driver="bridge",
                                                        internal=plan.network_isolation, options=options,
                                                        labels=labels, check_duplicate=True)
                        self._track(plan, "network", probe["Id"])
                        config = self.api.inspect_network(probe["Id"])["IPAM"]["Config"][0]
                        self.api.remove_network(probe["Id"])
                        self._untrack(plan, [probe["Id"]])
                    else:
                        config = given
                    pool = docker.types.IPAMPool(subnet=config["Subnet"], gateway=config.get("Gateway"))
                    network = self.api.create_network(plan.network, driver="bridge",
                                                      internal=plan.network_isolation, options=options,
                                                      labels=labels, check_duplicate=True,
                                                      ipam=docker.types.IPAMConfig(pool_configs=[pool]))
                    self._track(plan, "network", network["Id"])
            except docker.errors.APIError as err:
                last_error = err
                if err.status_code == 409 and given is None:  # the name is taken: a retry does not fix it
                    break
                # Another network holds the remembered subnet, or another job took the one the
                # engine picked between the two calls: let the engine pick again.
                continue
            if given is None:
                subnets.remember(config)
            self._addresses[plan.job_name] = host_addresses(config["Subnet"], config.get("Gateway"),
                                                            [h.name for h in plan.hosts])
            return
        raise EnvironmentProblem(
            f"cannot create network {plan.network}: {first_line(last_error or Exception('unknown'))}",
            hint="a network of that name may be left from an earlier run: `hetero-emu clean`",
        )

    @engine_call
    def create_container(self, plan: Plan, host: HostPlan) -> None:
        api = self.api
        options = container_options(self._within_engine_limits(plan, host.container), plan.network,
                                    self._addresses.get(plan.job_name, {}), self._driver)
        host_config = api.create_host_config(**options.host_config)
        networking = api.create_networking_config({plan.network: api.create_endpoint_config(**options.endpoint)})
        # Created and recorded together: a Ctrl-C waits the few milliseconds until the engine's
        # answer is recorded, so teardown and the watcher know every container that exists.
        with interrupts_deferred():
            try:
                created = api.create_container(**options.create, host_config=host_config,
                                               networking_config=networking)
            except docker.errors.ImageNotFound:
                raise ImageMissing(
                    f"image {host.container.image} is not in the Docker engine",
                    hint="build it (docker build / `hetero-emu image build` for the default image); "
                    "no registry is reachable to pull from",
                ) from None
            except docker.errors.APIError as err:
                hint = None
                if err.status_code == 409:
                    hint = "a container of that name is left from an earlier run: `hetero-emu clean`"
                raise EnvironmentProblem(
                    f"cannot create container {host.container.name}: {first_line(err)}", hint=hint
                ) from None
            self._track(plan, "container", created["Id"])

    def create_containers(self, plan: Plan, hosts: Sequence[HostPlan], sink: LineSink,
                          created: Callable[[str], None]) -> None:
        """Create each host's container, call `created(name)`, and attach to its output
        (`follow_logs`), the hosts concurrently: one after the other, the creates were most of the
        emulator's own start-up time (benchmarks/startup.py). A Ctrl-C or SIGTERM is held until the
        creates under way are answered and recorded, and the hosts not begun are dropped, then it is
        raised: teardown and the watcher know every container that exists. After an error, the hosts
        not begun are dropped too, and the first error in host order is raised."""
        # Asked once before the threads, so that an engine whose ulimit verdict is not cached yet
        # gets one probe, not one per thread.
        self.refused_ulimits(plan, list(dict.fromkeys(u for h in hosts for u in h.container.ulimits)))
        given_up = threading.Event()

        def create(host: HostPlan) -> None:
            if given_up.is_set():
                return
            try:
                self.create_container(plan, host)
                created(host.container.name)
                # Attached before the start: every byte a host writes is read, however fast it exits.
                self.follow_logs(host.container.name, sink)
            except BaseException:
                given_up.set()
                raise

        with interrupts_deferred(on_signal=given_up.set), \
                ThreadPoolExecutor(max_workers=max(1, min(START_WORKERS, len(hosts)))) as pool:
            futures = [pool.submit(create, host) for host in hosts]
            concurrent.futures.wait(futures)
        for future in futures:
            future.result()

    @engine_call
    def refused_ulimits(self, plan: Plan, wanted: Sequence[Ulimit]) -> set[Ulimit]:
        """The ulimits of `wanted` this engine cannot give a container (backend/ulimits.py)."""
        if not wanted:
            return set()
        return ulimits.refused(ulimits.engine_key(), wanted, lambda some: self._probe_ulimits(plan, some))

    def _within_engine_limits(self, plan: Plan, container: ContainerSpec) -> ContainerSpec:
        """The container without the ulimits this engine refuses, noting each for the runner to warn."""
        refused = self.refused_ulimits(plan, container.ulimits)
        with self._notes_lock:  # hosts are created concurrently (create_containers): each note once
            notes = self.notes.setdefault(plan.job_name, [])
            if required_launchers(plan.spec):
                # Only a distributed job pins memory; telling every other job would be noise.
                notes += [note for note in ulimits.refusal_notes(refused) if note not in notes]
        return container.without_ulimits(refused)

    def _probe_ulimits(self, plan: Plan, wanted: Sequence[Ulimit]) -> bool | None:
        """Whether the engine starts a container of the job's image with these ulimits (a throwaway
        `true`, no network; tracked like the job's containers, so a Ctrl-C leaves nothing behind).
        An image without `true` fails after the limits are set: that counts as accepted. None when
        no container could be made (no such image): no verdict."""
        api = self.api
        with interrupts_deferred():
            try:
                created = api.create_container(
                    plan.image, entrypoint=["true"], command=[], labels={**plan.labels, LABEL_DRIVER: self._driver},
                    host_config=api.create_host_config(
                        network_mode="none", ulimits=[docker.types.Ulimit(name=u.name, soft=u.soft, hard=u.hard)
                                                      for u in wanted],
                        log_config=docker.types.LogConfig(type=docker.types.LogConfig.types.NONE)),
                )
            except docker.errors.APIError:
                return None  # not a verdict on the limits: the job's own create will say what is wrong
            self._track(plan, "container", created["Id"])
        try:
            api.start(created["Id"])
            api.wait(created["Id"], timeout=60)
            return True
        except docker.errors.APIError as err:
            return ulimits.REFUSED not in str(err)
        finally:
            with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
                api.remove_container(created["Id"], force=True)
                self._untrack(plan, [created["Id"]])

    @engine_call
    def start(self, names: Sequence[str]) -> None:
        errors: list[str] = []

        def start_one(name: str) -> None:
            try:
                self.api.start(name)
            except docker.errors.APIError as err:
                errors.append(f"{name}: {first_line(err)}")

        # Interrupted: the starts not yet begun are dropped (those containers are just removed),
        # instead of starting every host only to stop it again.
        together(start_one, names)
        if errors:
            taken = any("port is already allocated" in e or "address already in use" in e for e in errors)
            raise EnvironmentProblem("cannot start containers: " + "; ".join(errors),
                                     hint="choose a free port with --debug-port PORT" if taken else None)

    @engine_call
    def follow_logs(self, name: str, sink: LineSink) -> None:
        """Attach to the container's stdout and stderr (before it starts: nothing is missed) and
        hand every chunk to `sink` from a thread of its own, until the container's streams close.

        The engine applies back-pressure on an attached stream (its buffer holds 1 MB, then the
        container's writes wait), so nothing is dropped; the flip side is that a stream must always
        be read or closed, never left open and unread, or the container (and, on Docker 20.10, the
        engine's handling of it) stalls. So the reader closes the socket whatever ends it.
        """
        try:
            attached = self.api.attach_socket(name, params={"stdout": 1, "stderr": 1, "stream": 1})
        except docker.errors.APIError as err:
            raise EnvironmentProblem(f"cannot attach to container {name}: {first_line(err)}") from None
        # docker-py hands back the socket's file object (or the socket itself over TLS); the
        # client's timeout must not end the stream of a host that is quiet for a while.
        raw: socket.socket = getattr(attached, "_sock", attached)
        raw.settimeout(None)

        def deliver(chunk: bytes, stream: int) -> None:
            try:
                sink(name, chunk, stream)
            except Exception as err:
                raise _SinkFailed(err) from err

        def pump() -> None:
            try:
                _demultiplex(raw, deliver)
            except _SinkFailed as failed:  # the log file could not be written (a full disk): say so
                self.stream_errors[name] = f"{type(failed.error).__name__}: {failed.error}"
            except OSError:
                pass  # the stream was closed under us (wait_logs gave up on it, or the engine went away)
            finally:
                _close_quietly(raw)
                # The file object docker-py returned must live as long as the reader (it owns the socket).
                with contextlib.suppress(Exception):
                    attached.close()
                self._stream_ends[name] = time.monotonic()
                self._stream_ended.set()

        thread = threading.Thread(target=pump, name=f"logs-{name}", daemon=True)
        thread.start()
        self._streams[name] = (thread, raw)

    def wait_logs(self, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout  # one deadline for all streams, not `timeout` each
        alive = dict(self._streams)
        checked: set[str] = set()
        while alive and time.monotonic() < deadline:
            for name, (thread, raw) in list(alive.items()):
                thread.join(max(0.0, min(0.25, deadline - time.monotonic())))
                if not thread.is_alive():
                    del alive[name]
                elif name not in checked and not self._engine_lost:
                    # Asked once per stream, and never of an engine that stopped answering (each
                    # question would wait out the client's timeout).
                    checked.add(name)
                    if self._never_started(name):
                        _close_quietly(raw)  # its stream ends only when it runs, which it never will
        unfinished = [name for name, (thread, _) in self._streams.items() if thread.is_alive()]
        for name in unfinished:
            # Closing (not abandoning) the stream: the engine stops writing to it.
            _close_quietly(self._streams[name][1])
        self._streams.clear()
        return unfinished

    def _never_started(self, name: str) -> bool:
        """Created and never started (a Ctrl-C before the start), or gone: no output is coming."""
        try:
            return str(self.api.inspect_container(name)["State"].get("Status")) == "created"
        except docker.errors.NotFound:
            return True
        except (docker.errors.APIError, requests.exceptions.RequestException):
            return False

    def wait_exits(self, names: Sequence[str], timeout: float) -> None:
        """Return once one of these containers may have exited, or after `timeout`: a host's output
        stream ends when it exits, so the supervisor learns of an exit at once instead of up to a
        poll later."""
        now = time.monotonic()
        settling = [name for name in names if now - self._stream_ends.get(name, -math.inf) < EXIT_SETTLE_SECONDS]
        if settling:
            # The stream has ended and the engine records the exit a moment later: its wait call
            # answers at that very moment (a fixed nap made every job's end up to a nap late).
            # Bounded: a stream that ended while its host runs on must not hold the supervisor.
            # Not exited yet (the read timed out), or already gone: the next poll tells.
            with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException, OSError):
                self.api.wait(settling[0], timeout=min(timeout, EXIT_RECHECK_SECONDS), condition="not-running")
            return
        self._stream_ended.wait(timeout)
        self._stream_ended.clear()

    def _listed_running(self, names: Sequence[str]) -> set[str]:
        """Which of these containers the engine lists as running: one call, however many hosts (an
        inspect per host made each poll of a 64-host job take a good part of a second)."""
        try:
            listed = self.api.containers(all=True, filters={"name": list(names), "status": RUNNING_STATUSES})
        except docker.errors.APIError as err:
            raise self._lost_engine(err) from None
        # The name filter matches substrings (algo-1 finds algo-10): keep the exact names.
        wanted = set(names)
        return {n.lstrip("/") for c in listed for n in c.get("Names") or []} & wanted

    @engine_call
    def states(self, names: Sequence[str]) -> list[ContainerState]:
        running_now = self._listed_running(names) if len(names) > 1 else set()
        others = [name for name in names if name not in running_now]
        if len(others) > 1:
            # Hosts that exit together are inspected together: one after the other, the 64 hosts
            # of a job that ends at once took the better part of a second.
            with ThreadPoolExecutor(max_workers=min(START_WORKERS, len(others))) as pool:
                inspected = dict(zip(others, pool.map(self._state, others), strict=True))
        else:
            inspected = {name: self._state(name) for name in others}
        return [ContainerState(name, running=True) if name in running_now else inspected[name] for name in names]

    def _state(self, name: str) -> ContainerState:
        try:
            state: dict[str, Any] = self.api.inspect_container(name)["State"]
        except docker.errors.NotFound:
            return ContainerState(name, running=False, exit_code=None, error="container disappeared")
        except docker.errors.APIError as err:
            raise self._lost_engine(err) from None
        running = bool(state.get("Running")) or state.get("Status") in ("created", "restarting")
        return ContainerState(
            name,
            running=running,
            exit_code=None if running else int(state.get("ExitCode", 0)),
            oom_killed=bool(state.get("OOMKilled")),
            error=str(state.get("Error") or ""),
            finished_at=None if running else epoch(state.get("FinishedAt")),
            started_at=epoch(state.get("StartedAt")),
        )

    @engine_call
    def stop(self, names: Sequence[str], grace: float) -> None:
        def stop_one(name: str) -> None:
            try:
                # The engine sends the image's stop signal (SIGTERM), then SIGKILL after the grace;
                # it takes whole seconds: round up so a short grace is never "kill now".
                self.api.stop(name, timeout=max(1, math.ceil(grace)))
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError:
                self._kill_quietly(name)

        # Waiting in short slices keeps the main thread interruptible: a second Ctrl-C reaches the
        # caller at once (it then kills) instead of after the whole grace period.
        pool = ThreadPoolExecutor(max_workers=max(1, min(START_WORKERS, len(names))))
        try:
            futures = [pool.submit(stop_one, name) for name in names]
            while concurrent.futures.wait(futures, timeout=0.2).not_done:
                pass
            for future in futures:
                future.result()  # an engine that stopped answering: DockerUnavailable (_engine_call)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    @engine_call
    def kill(self, names: Sequence[str]) -> None:
        def kill_one(name: str) -> None:
            try:
                self.api.kill(name)
            except docker.errors.NotFound:
                return
            except docker.errors.APIError:
                pass  # not running any more
            with contextlib.suppress(docker.errors.APIError):
                self.api.wait(name, timeout=30)  # so that its exit code is there to be read

        with ThreadPoolExecutor(max_workers=max(1, min(START_WORKERS, len(names)))) as pool:
            list(pool.map(kill_one, names))

    def _kill_quietly(self, name: str) -> None:
        with contextlib.suppress(docker.errors.APIError):
            self.api.kill(name)

    def remove(self, plan: Plan) -> None:
        if self._engine_lost:
            raise DockerUnavailable(
                f"could not remove the containers and network of job {plan.job_name}: the engine is not answering",
                hint="a watcher process removes them as soon as the engine answers again; "
                "`hetero-emu clean` does it by hand",
            )
        # By the ids this backend recorded, not by name: that covers a container whose create a
        # Ctrl-C interrupted (the runner never learnt its name), and never touches a container of
        # the same name that another run created after this one's was removed by hand.
        tracked = self._outstanding.get(plan.job_name, {})
        resources = [Resource(kind, ident, plan.job_name, {}) for ident, kind in tracked.items()]
        self.remove_resources(resources)
        self._untrack(plan, [r.name for r in resources])
        self._addresses.pop(plan.job_name, None)

    @engine_call
    def fix_ownership(self, plan: Plan, uid: int, gid: int) -> None:
        """Give every host's /opt/ml tree to uid:gid, so a user who is not root can read and delete
        what the job's containers (root) wrote. The driver cannot chown root's files itself, so a
        short-lived container of the job's image does it, with no network."""
        api = self.api
        hosts_dir = str(Path(plan.job_dir) / "hosts")
        security = " ".join(self.client.info().get("SecurityOptions") or [])
        if "name=rootless" in security:
            return  # rootless Docker: root in a container is this user already, the files are theirs
        with interrupts_deferred():
            try:
                created = api.create_container(
                    plan.image,
                    entrypoint=["chown", "-R", f"{uid}:{gid}", "/hosts"],
                    command=[],
                    user="0",
                    labels={**plan.labels, LABEL_DRIVER: self._driver},
                    host_config=api.create_host_config(
                        mounts=[docker.types.Mount("/hosts", hosts_dir, type="bind")], network_mode="none",
                        # Under userns-remap, container root is a subordinate uid of the host: only
                        # the host's own user namespace makes `chown uid:gid` mean this user.
                        userns_mode="host" if "name=userns" in security else None,
                    ),
                )
            except (docker.errors.APIError, requests.exceptions.RequestException) as err:
                raise EnvironmentProblem(f"cannot start the chown container: {first_line(err)}") from None
            self._track(plan, "container", created["Id"])
        ident = created["Id"]
        try:
            api.start(ident)
            code = api.wait(ident, timeout=300).get("StatusCode")
            if code != 0:
                raise EnvironmentProblem(f"`chown -R {uid}:{gid}` exited with code {code} in image {plan.image}")
        except (docker.errors.APIError, requests.exceptions.RequestException) as err:
            raise EnvironmentProblem(f"the chown container failed: {first_line(err)}") from None
        finally:
            with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
                api.remove_container(ident, force=True)
                self._untrack(plan, [ident])

    def find(self, job: str | None = None) -> list[Resource]:
        filters = {"label": [f"{LABEL_MANAGED}=true"] + ([f"{LABEL_JOB}={job}"] if job else [])}
        found = []
        try:
            for c in self.api.containers(all=True, filters=filters):
                labels = c.get("Labels") or {}
                name = (c.get("Names") or ["?"])[0].lstrip("/")
                found.append(Resource("container", name, labels.get(LABEL_JOB, ""), labels, c.get("Status", ""),
                                      driver_alive(labels.get(LABEL_DRIVER))))
            for n in self.api.networks(filters=filters):
                labels = n.get("Labels") or {}
                found.append(Resource("network", n["Name"], labels.get(LABEL_JOB, ""), labels, "",
                                      driver_alive(labels.get(LABEL_DRIVER))))
        except (docker.errors.APIError, requests.exceptions.RequestException) as err:
            raise DockerUnavailable(f"cannot list containers: {first_line(err)}") from None
        return found

    def stop_resources(self, resources: Iterable[Resource], grace: float) -> None:
        self.stop([r.name for r in resources if r.kind == "container"], grace)

    @engine_call
    def remove_resources(self, resources: Iterable[Resource]) -> None:
        resources = list(resources)
        problems: list[str] = []

        def remove_container(name: str) -> None:
            try:
                self.api.remove_container(name, force=True, v=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as err:
                # 409 "removal ... already in progress": the watcher (or a `clean` elsewhere) is
                # removing it right now, so it is going.
                if err.status_code != 409 or "already in progress" not in str(err):
                    problems.append(f"container {name}: {first_line(err)}")

        containers = [r.name for r in resources if r.kind == "container"]
        if containers:
            with ThreadPoolExecutor(max_workers=max(1, min(START_WORKERS, len(containers)))) as pool:
                list(pool.map(remove_container, containers))
        for r in resources:
            if r.kind != "network":
                continue
            try:
                self.api.remove_network(r.name)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as err:
                problems.append(f"network {r.name}: {first_line(err)}")
        if problems:
            raise EmulatorError("could not remove everything: " + "; ".join(problems),
                                hint="run `hetero-emu clean` once the engine is healthy")


    @engine_call
    def exec_in(self, container: Resource, command: Sequence[str], io: ExecIO) -> int:
        try:
            state = self.api.inspect_container(container.name)["State"]
        except docker.errors.NotFound:
            raise EnvironmentProblem(f"the container {container.name} is gone (removed just now?)",
                                     hint="`hetero-emu ps` lists the containers of jobs") from None
        if state.get("Running") and not state.get("Paused"):
            return self._exec_running(container.name, command, io)
        # `docker exec` cannot enter a stopped container ("is not running"); the nearest thing a
        # Docker user does by hand is `docker commit` + `docker run --volumes-from`: the same files,
        # the same mounts, in a container of its own.
        return self._exec_in_copy(container, command, io)

    def _exec_running(self, name: str, command: Sequence[str], io: ExecIO) -> int:
        api = self.api
        try:
            ident = api.exec_create(name, list(command), stdin=io.tty, tty=io.tty)["Id"]
            attached = api.exec_start(ident, tty=io.tty, socket=True)
        except docker.errors.APIError as err:
            raise EnvironmentProblem(f"cannot run {command[0]!r} in {name}: {first_line(err)}") from None
        raw: socket.socket = getattr(attached, "_sock", attached)
        raw.settimeout(None)  # a command may be quiet for longer than the client's timeout
        if io.tty and io.size:
            with contextlib.suppress(docker.errors.APIError):
                api.exec_resize(ident, height=io.size[0], width=io.size[1])
        try:
            _pump_exec(raw, io)
        finally:
            _close_quietly(raw)
            with contextlib.suppress(Exception):
                attached.close()
        # The stream ends a moment before the engine records the exit code.
        deadline = time.monotonic() + 10
        while True:
            found = api.exec_inspect(ident)
            if not found.get("Running") or time.monotonic() > deadline:
                return int(found.get("ExitCode") or 0)
            time.sleep(0.05)

    def _exec_in_copy(self, container: Resource, command: Sequence[str], io: ExecIO) -> int:
        api = self.api
        host = container.labels.get(LABEL_HOST) or container.name
        io.notice(f"{host} is not running: running the command in a copy of its container instead (a `docker "
                  "commit` of it, with its mounts, without network), removed afterwards")
        # Labelled as the job's (so `clean --job` finds it should this process die), with this
        # process as its driver (so a `clean` of gone drivers' leftovers leaves it alone meanwhile).
        labels = {**container.labels, LABEL_DRIVER: self._driver}
        image = ident = None
        try:
            with interrupts_deferred():
                try:
                    # A commit diffs the container's whole writable layer: seconds on fuse-overlayfs
                    # under load, well past the client's usual timeout.
                    with _patient(api, COMMIT_TIMEOUT):
                        image = str(api.commit(container.name, message=f"hetero-emu exec in {host}")["Id"])
                    ident = str(api.create_container(
                        image, entrypoint=[command[0]], command=list(command[1:]), hostname=host, labels=labels,
                        name=f"{container.name}-exec-{uuid.uuid4().hex[:8]}", tty=io.tty, stdin_open=io.tty,
                        host_config=api.create_host_config(
                            volumes_from=[container.name], network_mode="none", init=True,
                            log_config=docker.types.LogConfig(type=docker.types.LogConfig.types.NONE)),
                    )["Id"])
                except docker.errors.APIError as err:
                    raise EnvironmentProblem(f"cannot make a copy of {container.name} to run {command[0]!r} in: "
                                             f"{first_line(err)}") from None
            attached = api.attach_socket(ident, params={"stdin": int(io.tty), "stdout": 1, "stderr": 1,
                                                        "stream": 1})
            raw: socket.socket = getattr(attached, "_sock", attached)
            raw.settimeout(None)
            try:
                try:
                    api.start(ident)
                except docker.errors.APIError as err:
                    # e.g. the command is not in the image: exit code 127, as `docker run` says
                    io.stderr.write(f"{first_line(err)}\n".encode())
                    io.stderr.flush()
                    return 127 if "executable file not found" in str(err) or "no such file" in str(err) else 126
                if io.tty and io.size:
                    with contextlib.suppress(docker.errors.APIError):
                        api.resize(ident, height=io.size[0], width=io.size[1])
                _pump_exec(raw, io)
            finally:
                _close_quietly(raw)
                with contextlib.suppress(Exception):
                    attached.close()
            return int(api.wait(ident, timeout=30).get("StatusCode", 0))
        finally:
            with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
                if ident is not None:
                    api.remove_container(ident, force=True, v=True)
            with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
                if image is not None:
                    with _patient(api, COMMIT_TIMEOUT):
                        api.remove_image(image)


@contextlib.contextmanager
def _patient(api: docker.APIClient, timeout: float) -> Iterator[None]:
    """The client's timeout raised for one slow call (docker-py reads it per request)."""
    saved = api.timeout
    api.timeout = max(saved, timeout) if isinstance(saved, (int, float)) else timeout
    try:
        yield
    finally:
        api.timeout = saved


def _pump_exec(sock: socket.socket, io: ExecIO) -> None:
    """Copy a command's output to `io` until it ends; with a TTY, `io.stdin` goes to it meanwhile (one
    raw stream each way); without, the stream carries stdout and stderr in frames (_demultiplex)."""
    if not io.tty:
        def deliver(chunk: bytes, stream: int) -> None:
            out = io.stderr if stream == 2 else io.stdout
            out.write(chunk)
            out.flush()

        with contextlib.suppress(OSError):
            _demultiplex(sock, deliver)
        return
    done = threading.Event()
    forwarder = None
    if io.stdin is not None:
        fd = io.stdin.fileno()

        def forward() -> None:
            # The file descriptor, unbuffered, polled: a thread blocked in a read of the terminal
            # would keep the stdin object's lock at exit (a fatal error at interpreter shutdown).
            with contextlib.suppress(OSError, ValueError):
                while not done.is_set():
                    if select.select([fd], [], [], 0.1)[0]:
                        data = os.read(fd, 4096)
                        if not data:
                            return
                        sock.sendall(data)

        forwarder = threading.Thread(target=forward, name="exec-stdin", daemon=True)
        forwarder.start()
    try:
        with contextlib.suppress(OSError):
            while data := sock.recv(READ_SIZE):
                io.stdout.write(data)
                io.stdout.flush()
    finally:
        done.set()
        if forwarder is not None:
            forwarder.join(1)


class _SinkFailed(Exception):
    """The sink of an attached stream raised: the reader stops (and closes the stream) and reports it."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _demultiplex(sock: socket.socket, deliver: Callable[[bytes, int], None]) -> None:
    """Read an attached stream to its end (see `demultiplex`)."""
    demultiplex(iter(lambda: sock.recv(READ_SIZE), b""), deliver)


def demultiplex(chunks: Iterable[bytes], deliver: Callable[[bytes, int], None]) -> None:
    """Split a multiplexed output stream, read as `chunks` of any size: frames of an 8-byte header
    (stream: 1 stdout, 2 stderr; 3 zero bytes; big-endian payload length) and the payload
    (https://docs.docker.com/engine/api/v1.41/#operation/ContainerAttach; a service's logs come the
    same way). Consecutive frames of one stream are delivered as one chunk, in order."""
    buf = bytearray()
    for data in chunks:
        buf += data
        pos, current = 0, 0
        parts: list[bytes] = []
        while len(buf) - pos >= 8:
            size = int.from_bytes(buf[pos + 4:pos + 8], "big")
            if len(buf) - pos - 8 < size:
                break  # the rest of this frame is in the next read
            stream = 2 if buf[pos] == 2 else 1
            if stream != current and parts:
                deliver(b"".join(parts), current)
                parts = []
            current = stream
            parts.append(bytes(buf[pos + 8:pos + 8 + size]))
            pos += 8 + size
        if parts:
            deliver(b"".join(parts), current)
        del buf[:pos]


def _close_quietly(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)  # wakes a reader blocked in recv on this socket
    with contextlib.suppress(OSError):
        sock.close()
