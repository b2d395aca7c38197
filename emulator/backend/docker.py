"""The Docker engine (`--engine docker`, the default): a job's hosts as containers of this machine's
engine, on a bridge network of the job's own, through docker-py. What it shares with the swarm engine
(the watcher, exec in a running container) is in backend/docker_parts.py, its images (`images`) in
backend/docker_images.py; the few raw HTTP calls in backend/docker_http.py."""

from __future__ import annotations

import concurrent.futures
import contextlib
import ipaddress
import math
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests

from emulator.backend import Capabilities, ContainerState, ExecIO, LineSink, Resource, networks, ulimits
from emulator.backend.calls import engine_call, epoch, first_line, interrupts_deferred
from emulator.backend.docker_http import raw_socket, read_timeout
from emulator.backend.docker_parts import (
    START_WORKERS,
    SharedMembers,
    close_quietly,
    demultiplex_socket,
    exec_running,
    probe_ulimits,
    pump_exec,
    together,
)
from emulator.backend.engine_memory import EngineMemory
from emulator.backend.liveness import driver_alive
from emulator.errors import DockerUnavailable, EmulatorError, EnvironmentProblem, ImageMissing
from emulator.planning.container import GPU_CAPABILITIES, GPU_DRIVER, ContainerSpec, Ulimit
from emulator.planning.plan import (
    LABEL_DRIVER,
    LABEL_HOST,
    LABEL_JOB,
    LABEL_MANAGED,
    HostPlan,
    Plan,
    host_addresses,
    network_members,
)
from emulator.reports.console import Reporter

# `hetero-emu exec` in a stopped host commits its container first (see exec_in).
COMMIT_TIMEOUT = 300
# The engine closes a host's output stream just before it records the exit (moby
# daemon/monitor.go handleContainerExit: Reset, then SetStopped): for this long after a stream
# ended, the supervisor waits on the engine's own wait call (at most this long per poll) instead of
# a whole poll's pause.
EXIT_SETTLE_SECONDS = 1.0
EXIT_RECHECK_SECONDS = 0.2
# How many blocks of the job subnet range a network create tries before the engine picks a subnet.
CARVED_TRIES = 8
# What `docker ps --filter status=` calls the states the runner counts as running (inspect's
# State.Running, which is true when paused, or a container created and not started yet).
RUNNING_STATUSES = ["created", "running", "paused", "restarting"]


@dataclass(frozen=True)
class SubnetMemory:
    """The subnet (and gateway) a job network of this kind last got (carved, or the engine's pick), kept in the
    engine's memory (backend/engine_memory.py: the state folder) per engine address, as the ulimit
    verdicts are. Best effort both ways: an unreadable or unwritable file only costs the engine's pick."""

    engine: str
    isolated: bool
    memory: EngineMemory = EngineMemory()

    TABLE = "engine-subnets.json"

    @property
    def key(self) -> str:
        return f"{self.engine} {'internal' if self.isolated else 'bridge'}"

    def recall(self) -> dict[str, str] | None:
        config = self.memory.read(self.TABLE).get(self.key)
        if not isinstance(config, dict) or not isinstance(config.get("Subnet"), str):
            return None
        gateway = config.get("Gateway")
        return {"Subnet": config["Subnet"], **({"Gateway": gateway} if isinstance(gateway, str) else {})}

    def remember(self, config: Mapping[str, Any]) -> None:
        picked = {k: config[k] for k in ("Subnet", "Gateway") if config.get(k)}
        self.memory.write(self.TABLE, {**self.memory.read(self.TABLE), self.key: picked})


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
        # By id, so no two hosts get one GPU (`docker run --gpus '"device=0,1"'`); Docker's NVIDIA
        # driver sets NVIDIA_VISIBLE_DEVICES in the container from them.
        "device_requests": [docker.types.DeviceRequest(driver=GPU_DRIVER, device_ids=list(container.gpus),
                                                       capabilities=[list(GPU_CAPABILITIES)])]
        if container.gpus else None,
        "port_bindings": {p.container_port: (p.host_ip, p.host_port) for p in container.ports} or None,
        # The job's AWS gateway (emulator/run/job_aws.py) by its fixed address: Docker's embedded resolver
        # still answers the hosts' names and forwards every other name there.
        "dns": [addresses[name] for name in container.dns if name in addresses] or None,
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


class DockerBackend(SharedMembers):
    """Executes a Plan on a Docker engine. Engine errors become EmulatorError subclasses. `memory` is
    where the engine keeps what it learns about itself (ulimit verdicts, the subnet last picked)."""

    capabilities = Capabilities(builds_images=True, probes_ulimits=True, aws_gateway=True)

    def __init__(self, client: docker.DockerClient | None = None, memory: EngineMemory | None = None) -> None:
        super().__init__(client, memory)
        # Per container: the thread reading its output stream, and that stream's socket.
        self._streams: dict[str, tuple[threading.Thread, socket.socket]] = {}
        # When each stream ended (monotonic), and a wake-up for the supervisor (wait_exits).
        self._stream_ends: dict[str, float] = {}
        self._stream_ended = threading.Event()
        self._addresses: dict[str, dict[str, str]] = {}

    @property
    def api(self) -> docker.APIClient:
        return self.client.api

    @property
    def _outstanding(self) -> dict[str, dict[str, str]]:
        """Per job, what was created and not yet removed (id -> kind)."""
        return self._tracker.outstanding

    def ping(self) -> None:
        _ = self.client

    def keep(self, plan: Plan) -> None:
        super().keep(plan)
        self._addresses.pop(plan.job_name, None)

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

        Before any of that, the job gets a block of its own size (a /24 up to 253 hosts) carved out
        of a range the engine's default pools leave out (backend/networks.py), so that a job
        network does not take one of the engine's 30-odd default /16s: the engine's own pick is what
        is left when no block of that range is free.
        """
        labels = {**plan.labels, LABEL_DRIVER: self._driver}
        # EnableNetworkIsolation: an `internal` bridge has no route out, but the host still owns the
        # bridge's gateway address, so a container could reach every service the host listens on
        # (moby/libnetwork#1151). With inhibit_ipv4 the bridge gets no address: hosts reach each
        # other and nothing else.
        options = {"com.docker.network.bridge.inhibit_ipv4": "true"} if plan.network_isolation else None
        last_error: Exception | None = None
        subnets = SubnetMemory(ulimits.engine_key(), plan.network_isolation, self._memory)
        remembered = subnets.recall()
        for given in self._carved_subnets(plan, remembered) + ([remembered] if remembered else []) + [None, None, None]:
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
                if err.status_code == 409:  # the name is taken: a retry does not fix it
                    break
                # Another network holds the remembered subnet, or another job took the one the
                # engine picked between the two calls: let the engine pick again.
                continue
            if given is None or given.get("carved"):
                subnets.remember(config)
            self._addresses[plan.job_name] = host_addresses(config["Subnet"], config.get("Gateway"),
                                                            [h.name for h in network_members(plan)])
            return
        raise EnvironmentProblem(
            f"cannot create network {plan.network}: {first_line(last_error or Exception('unknown'))}",
            hint="a network of that name may be left from an earlier run: `hetero-emu clean`",
        )

    def _carved_subnets(self, plan: Plan, remembered: Mapping[str, str] | None) -> list[dict[str, str]]:
        """The first few blocks of the job subnet range free for this job (backend/networks.py), each
        with its gateway, after the one the last job got; [] when the engine cannot be listed."""
        pool = networks.job_subnet_range()
        try:
            taken = networks.engine_subnets(self.api.networks()) + networks.local_routes()
        except (docker.errors.APIError, requests.exceptions.RequestException):
            return []
        blocks = networks.candidate_subnets(len(network_members(plan)), taken, (remembered or {}).get("Subnet"), pool)
        # A few: each refusal is a job beside that took the block at the same moment.
        return [{"Subnet": block, "Gateway": str(next(ipaddress.ip_network(block).hosts())), "carved": "yes"}
                for block in blocks[:CARVED_TRIES]]

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
        return ulimits.refused(ulimits.engine_key(), wanted,
                               lambda some: probe_ulimits(self.api, plan, some, self._driver, self._tracker),
                               self._memory)

    def _within_engine_limits(self, plan: Plan, container: ContainerSpec) -> ContainerSpec:
        """The container without the ulimits this engine refuses (the runner warns about them)."""
        return container.without_ulimits(self.refused_ulimits(plan, container.ulimits))

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
        # The client's timeout must not end the stream of a host that is quiet for a while.
        raw = raw_socket(attached)
        raw.settimeout(None)

        def deliver(chunk: bytes, stream: int) -> None:
            try:
                sink(name, chunk, stream)
            except Exception as err:
                raise _SinkFailed(err) from err

        def pump() -> None:
            try:
                demultiplex_socket(raw, deliver)
            except _SinkFailed as failed:  # the log file could not be written (a full disk): say so
                self.stream_errors[name] = f"{type(failed.error).__name__}: {failed.error}"
            except OSError:
                pass  # the stream was closed under us (wait_logs gave up on it, or the engine went away)
            finally:
                close_quietly(raw)
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
                        close_quietly(raw)  # its stream ends only when it runs, which it never will
        unfinished = [name for name, (thread, _) in self._streams.items() if thread.is_alive()]
        for name in unfinished:
            # Closing (not abandoning) the stream: the engine stops writing to it.
            close_quietly(self._streams[name][1])
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
        self._tracker.remove(plan, self.remove_resources, self._engine_lost)
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
            listed = self.api.networks(filters=filters)
        except (docker.errors.APIError, requests.exceptions.RequestException) as err:
            raise DockerUnavailable(f"cannot list containers: {first_line(err)}") from None
        table = self._stuck_networks()
        stuck = table.ids()
        if job is None:
            table.keep_only(n["Id"] for n in listed)  # removed since (after an engine restart)
        for n in listed:
            labels = n.get("Labels") or {}
            is_stuck = n["Id"] in stuck
            found.append(Resource("network", n["Name"], labels.get(LABEL_JOB, ""), labels,
                                  networks.STUCK_STATUS if is_stuck else "", driver_alive(labels.get(LABEL_DRIVER)),
                                  stuck=is_stuck))
        return found

    def _stuck_networks(self) -> networks.StuckNetworks:
        return networks.StuckNetworks(self.api)

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
        job_networks = [r.name for r in resources if r.kind == "network"]
        # Each running host's endpoint deleted one at a time before the containers go concurrently:
        # endpoints deleted at once can leave the engine counting one that is gone, and the network
        # then cannot be removed until the engine restarts (backend/networks.py, moby#42119).
        for network in job_networks:
            self._disconnect_one_by_one(network)
        if containers:
            with ThreadPoolExecutor(max_workers=max(1, min(START_WORKERS, len(containers)))) as pool:
                list(pool.map(remove_container, containers))
        stuck: list[str] = []
        for network in job_networks:
            try:
                networks.remove_network(self.api, network, self._stuck_networks(), docker.errors.NotFound)
            except networks.NetworkStuck as err:
                stuck += err.networks
            except docker.errors.APIError as err:
                problems.append(f"network {network}: {first_line(err)}")
        if problems:
            stuck_note = f" (and {networks.NetworkStuck(stuck).message})" if stuck else ""
            raise EmulatorError("could not remove everything: " + "; ".join(problems) + stuck_note,
                                hint="run `hetero-emu clean` once the engine is healthy")
        if stuck:
            raise networks.NetworkStuck(stuck)

    def _disconnect_one_by_one(self, network: str) -> None:
        """Disconnect every container attached to `network` (its running ones: a stopped container
        has no endpoint), one after the other. Best effort: whatever is left goes with its container."""
        try:
            attached = list(self.api.inspect_network(network).get("Containers") or {})
        except docker.errors.APIError:
            return
        for container in attached:
            with contextlib.suppress(docker.errors.APIError):
                self.api.disconnect_container_from_network(container, network, force=True)


    @engine_call
    def exec_in(self, container: Resource, command: Sequence[str], io: ExecIO) -> int:
        try:
            state = self.api.inspect_container(container.name)["State"]
        except docker.errors.NotFound:
            raise EnvironmentProblem(f"the container {container.name} is gone (removed just now?)",
                                     hint="`hetero-emu ps` lists the containers of jobs") from None
        if state.get("Running") and not state.get("Paused"):
            return exec_running(self.api, container.name, command, io)
        # `docker exec` cannot enter a stopped container ("is not running"); the nearest thing a
        # Docker user does by hand is `docker commit` + `docker run --volumes-from`: the same files,
        # the same mounts, in a container of its own.
        return self._exec_in_copy(container, command, io)

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
                    with read_timeout(api, COMMIT_TIMEOUT):
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
            raw = raw_socket(attached)
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
                pump_exec(raw, io)
            finally:
                close_quietly(raw)
                with contextlib.suppress(Exception):
                    attached.close()
            return int(api.wait(ident, timeout=30).get("StatusCode", 0))
        finally:
            with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
                if ident is not None:
                    api.remove_container(ident, force=True, v=True)
            with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
                if image is not None:
                    with read_timeout(api, COMMIT_TIMEOUT):
                        api.remove_image(image)


class _SinkFailed(Exception):
    """The sink of an attached stream raised: the reader stops (and closes the stream) and reports it."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error
