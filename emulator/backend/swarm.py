"""The Docker Swarm engine (`--engine swarm`): one job across the nodes of a swarm.

Each host is a swarm service of its own, `<job>-algo-N`, of one replica with restart condition `none`
(one task, run once: the default, `any`, would restart a failed host for ever), hostname
`algo-N` and alias `algo-N` on an attachable overlay network of the job's own, in `dnsrr` endpoint mode
(the default VIP mode needs IPVS in the node's kernel, which many lack: the name then resolves and
nothing answers). https://docs.docker.com/engine/swarm/services/ and
https://docs.docker.com/engine/api/v1.41/#operation/ServiceCreate

What differs from one machine, and why:
- A service starts when it is created: `create_containers` only records the hosts, `start` creates
  every service at once.
- The engine of a node other than the manager cannot be asked through the swarm: every bind mount
  must name a path that each node sees (a shared folder: NFS or similar), checked before the job by a
  probe on every node (`prepare`). Images reach nodes without a registry through the
  node engines the user names (HETERO_EMU_SWARM_NODES), `docker save` once and loads in parallel.
- A task is stopped by removing its service (the swarm has no "stop one task"), after its output has
  been read to the end: `service logs` disappears with the service.
- A host has no fixed address: names resolve through the overlay's DNS while the host's task exists.

What it shares with the Docker engine (the images on this machine, backend/docker_images.py; the
watcher, exec in a running container, the ulimit probe) it holds as parts (backend/docker_parts.py),
not as a kind of Docker engine.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import docker
import docker.errors
import requests

from emulator.backend import Capabilities, ContainerState, ExecIO, LineSink, Resource, ulimits
from emulator.backend.calls import engine_call, epoch, first_line, interrupts_deferred
from emulator.backend.docker_http import EngineHttp, hang_up
from emulator.backend.docker_parts import (
    READ_SIZE,
    SharedMembers,
    connect,
    demultiplex,
    exec_running,
    probe_ulimits,
    together,
)
from emulator.backend.engine_memory import EngineMemory
from emulator.backend.liveness import driver_alive
from emulator.errors import EmulatorError, EnvironmentProblem, UsageError
from emulator.planning.container import ContainerSpec, Ulimit
from emulator.planning.hardware import Machine
from emulator.planning.plan import LABEL_DRIVER, LABEL_HOST, LABEL_JOB, LABEL_MANAGED, HostPlan, Plan
from emulator.reports.console import Reporter

#: Environment variables of the swarm engine (README: "Across machines: the swarm engine").
ENV_MANAGER = "HETERO_EMU_SWARM_MANAGER"
ENV_NODES = "HETERO_EMU_SWARM_NODES"
ENV_MTU = "HETERO_EMU_SWARM_MTU"
# The generic resource kind NVIDIA's documentation has swarm nodes advertise their GPUs as.
GPU_RESOURCE = "NVIDIA-GPU"

# Task states before the container has exited (moby/swarmkit api/types.proto TaskState).
PENDING_STATES = frozenset({"new", "allocated", "pending", "assigned", "accepted", "preparing", "ready",
                            "starting", "running"})
# A task the node refused or could not start: nothing of the host ever ran.
REFUSED_STATES = frozenset({"rejected"})
# A node in one of these states runs nothing any more (swarmkit api/types.proto NodeStatus).
NODE_GONE = frozenset({"down", "disconnected", "unknown"})
# Service names are DNS labels: at most 63 characters (swarmkit manager/controlapi/service.go validateServiceName).
SERVICE_NAME_LIMIT = 63
# How long the probe of the nodes (`prepare`) and the removal of a service may take.
PROBE_TIMEOUT = 120.0
REMOVE_TIMEOUT = 120.0
# A task its node is preparing or starting (placed, no container yet).
STARTING_STATES = frozenset({"assigned", "accepted", "preparing", "ready", "starting"})
# How long a stop waits for such a task to have its container (START_WAIT): seconds on a busy node;
# the manager is asked again every START_POLL_SECONDS meanwhile.
START_WAIT = 60.0
START_POLL_SECONDS = 0.2
# The swarm is asked at most this often while the hosts run (a `docker ps` is local; a task list goes
# through the manager's raft store).
SWARM_POLL_SECONDS = 0.5
# The folder in the probe's container where each checked path is mounted.
PROBE_ROOT = "/hetero-emu-probe"
# A placement no node meets (a node id is 25 base-36 characters): see SwarmBackend._stop_by_update.
NOWHERE = "node.id==hetero-emu-stopped"


@dataclass(frozen=True)
class SwarmSettings:
    """How to reach the swarm: the manager (None: as Docker finds it, DOCKER_HOST or the default
    socket), the node engines images are copied through (node hostname -> engine URL), and the MTU of
    the job's overlay network (None: the engine's)."""

    manager: str | None = None
    node_engines: Mapping[str, str] = field(default_factory=dict)
    mtu: int | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SwarmSettings:
        env = os.environ if environ is None else environ
        engines: dict[str, str] = {}
        for item in filter(None, (part.strip() for part in env.get(ENV_NODES, "").split(","))):
            node, sep, url = item.partition("=")
            if not sep or not node or not url:
                raise UsageError(f"{ENV_NODES}: {item!r} is not NODE=URL",
                                 hint="e.g. node-2=ssh://me@node-2,node-3=tcp://10.0.0.3:2376")
            engines[node] = url
        mtu_text = env.get(ENV_MTU, "").strip()
        if mtu_text and not (mtu_text.isdigit() and 576 <= int(mtu_text) <= 9000):
            raise UsageError(f"{ENV_MTU}: {mtu_text!r} is not an MTU between 576 and 9000")
        return cls(env.get(ENV_MANAGER) or None, engines, int(mtu_text) if mtu_text else None)


def service_name(container_name: str) -> str:
    """The service of a host: its container name (`<job>-algo-N`), shortened with a hash of the whole
    when the swarm's 63-character limit would refuse it (SageMaker job names may have 63 already)."""
    if len(container_name) <= SERVICE_NAME_LIMIT:
        return container_name
    digest = hashlib.sha256(container_name.encode()).hexdigest()[:8]
    job, _, host = container_name.rpartition("-algo-")
    tail = f"-{digest}-algo-{host}" if job else f"-{digest}"
    return (job or container_name)[:SERVICE_NAME_LIMIT - len(tail)].rstrip("-.") + tail


def service_options(container: ContainerSpec, network: str, image: str, driver: str,
                    grace: float, addresses: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A host's `ContainerSpec` as the arguments of docker-py's `APIClient.create_service`: every field
    translated once (docker.container_options and compose.service are the other translations;
    tests/unit/test_container.py checks all three). Pure: no engine is asked. `image` is the
    reference the nodes run (the image's id: see SwarmBackend.prepare); `addresses` the job's hosts'
    addresses on its network that are known (a running task's: an overlay has no fixed ones), by
    hostname, for the DNS servers the container names."""
    mounts = [docker.types.Mount(m.target, m.source, type="bind", read_only=m.read_only) for m in container.mounts]
    # No --shm-size for services: /dev/shm is a tmpfs mount of that size instead (what `docker
    # service create --mount type=tmpfs,destination=/dev/shm,tmpfs-size=...` does).
    mounts.append(docker.types.Mount("/dev/shm", "", type="tmpfs", tmpfs_size=container.shm_bytes))
    spec = docker.types.ContainerSpec(
        image=image,
        # A service's Command replaces the image's ENTRYPOINT, its Args the CMD.
        command=list(container.entrypoint) if container.entrypoint is not None else None,
        args=list(container.command),
        hostname=container.hostname,
        env=dict(container.environment),
        labels={**container.labels, LABEL_DRIVER: driver},
        mounts=mounts,
        init=container.init,
        stop_grace_period=int(max(1.0, grace) * 1e9),
        hosts=None,  # no fixed addresses on an overlay: the other hosts resolve through its DNS
        # The job's AWS gateway (emulator/run/job_aws.py) by the address its running task has: as on the
        # docker engine, the embedded resolver still answers the hosts' names and forwards the rest.
        dns_config=docker.types.DNSConfig(nameservers=[addresses[n] for n in container.dns if n in addresses])
        if container.dns and addresses else None,
    )
    # docker-py has no argument for these two; API 1.41 takes them in the task's ContainerSpec.
    spec["Ulimits"] = [{"Name": u.name, "Soft": u.soft, "Hard": u.hard} for u in container.ulimits]
    if container.ports:
        raise UsageError("a published port (the debugger's) is not supported on the swarm engine",
                         hint="debug on the docker engine (--engine docker)")
    if container.devices:
        raise UsageError("devices are not supported on the swarm engine (services cannot take --device)")
    # GPUs as swarm gives them: the count of the kind the nodes advertise (`node-generic-resources`),
    # which the manager reserves on the node `spread` pinned the host to; it cannot take device ids.
    gpus = {GPU_RESOURCE: len(container.gpus)} if container.gpus else None
    resources = docker.types.Resources(mem_limit=container.memory_bytes, generic_resources=gpus) \
        if container.memory_bytes or gpus else None
    template = docker.types.TaskTemplate(
        container_spec=spec,
        resources=resources,
        restart_policy=docker.types.RestartPolicy(condition="none"),
        placement=docker.types.Placement(constraints=list(container.placement)) if container.placement else None,
        networks=[docker.types.NetworkAttachmentConfig(network, aliases=list(container.aliases))],
    )
    return {
        "task_template": template,
        "name": service_name(container.name),
        "labels": {**container.labels, LABEL_DRIVER: driver},
        # One task, run once: a replicated service of one replica that is never restarted. Not mode
        # `replicated-job`, which says the same: Docker 20.10 never removes a job's tasks, nor their
        # containers on the nodes, when the job's service is removed (measured: every exited host
        # stayed on its node), so nothing could be left clean.
        "mode": docker.types.ServiceMode("replicated", replicas=1),
        "endpoint_spec": docker.types.EndpointSpec(mode="dnsrr"),
    }


@dataclass(frozen=True)
class Node:
    """A ready, active node of the swarm, as placement sees it."""

    id: str
    hostname: str
    labels: Mapping[str, str]
    # The GPUs the node advertises to the swarm (generic resources of kind GPU_RESOURCE).
    gpus: int = 0


def _allows(node: Node, constraint: str) -> bool:
    """Whether `node` meets one constraint of the form the plan writes, `node.labels.KEY==VALUE`
    (emulator.jobspec.placement), or `!=`."""
    negated = "!=" in constraint
    key, _, value = constraint.partition("!=" if negated else "==")
    key = key.strip().removeprefix("node.labels.")
    return (node.labels.get(key) == value.strip()) != negated


def spread(hosts: Sequence[tuple[str, Sequence[str]]], nodes: Sequence[Node],
           gpus: Mapping[str, int] | None = None) -> dict[str, str]:
    """Each host's node: the allowed node (its group's placement) with the fewest hosts so far, in
    host order; ties go to the node first by hostname. The swarm's own scheduler does not spread
    one-task services created together (measured: every host of a job on one node), so each service
    is pinned with `node.id==`. A host no node allows is an EnvironmentProblem naming its labels:
    its task would wait for such a node for ever. A host that needs `gpus[name]` GPUs goes to a node
    with that many left, or is an EnvironmentProblem saying what to set up."""
    count = {node.id: 0 for node in nodes}
    left = {node.id: node.gpus for node in nodes}
    chosen: dict[str, str] = {}
    for name, constraints in hosts:
        allowed = [node for node in sorted(nodes, key=lambda n: n.hostname)
                   if all(_allows(node, c) for c in constraints)]
        if not allowed:
            raise EnvironmentProblem(
                f"no ready node of the swarm meets the placement of {name} ({', '.join(constraints)})",
                hint="label a node (`docker node update --label-add KEY=VALUE NODE`), or change the group's placement")
        need = (gpus or {}).get(name, 0)
        if need:
            allowed = [node for node in allowed if left[node.id] >= need]
            if not allowed:
                raise EnvironmentProblem(f"no ready node of the swarm has the {need} GPUs {name} needs left",
                                         hint=GPU_SETUP_HINT)
        best = min(allowed, key=lambda node: count[node.id])
        count[best.id] += 1
        left[best.id] -= need
        chosen[name] = best.id
    return chosen


# What each GPU node of a swarm needs before the swarm engine can give a host its GPUs.
GPU_SETUP_HINT = ("on each GPU node: NVIDIA's container toolkit as the engine's default runtime, and its GPUs "
                  "advertised in /etc/docker/daemon.json "
                  "(`\"node-generic-resources\": [\"NVIDIA-GPU=GPU-<uuid>\", ...]`, one per GPU, then restart "
                  "dockerd); or run with --gpus emulate or --gpus none")


def node_gpus(node: Mapping[str, Any]) -> tuple[str, ...]:
    """The GPUs a node (the API's node object) advertises: a named resource by its id, a discrete
    one as `<node>:<n>`."""
    found: list[str] = []
    for resource in ((node.get("Description") or {}).get("Resources") or {}).get("GenericResources") or []:
        named, discrete = resource.get("NamedResourceSpec") or {}, resource.get("DiscreteResourceSpec") or {}
        if named.get("Kind") == GPU_RESOURCE:
            found.append(str(named.get("Value")))
        elif discrete.get("Kind") == GPU_RESOURCE:
            found.extend(f"{node.get('ID', '')[:12]}:{i}" for i in range(int(discrete.get("Value") or 0)))
    return tuple(found)


@dataclass
class _Stream:
    """One host's output: what the live `service logs --follow` delivered so far, per stream, so the
    final read (everything the service logged) delivers exactly the rest."""

    service: str
    sink: LineSink
    delivered: dict[int, int] = field(default_factory=lambda: {1: 0, 2: 0})
    finished: bool = False
    response: Any = None
    thread: threading.Thread | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Finished(Exception):
    """The live stream of a host whose whole log has been read: stop reading it."""


@dataclass(frozen=True)
class _Task:
    """The one task of a host's service, as the manager last told it."""

    state: str
    node: str
    exit_code: int | None
    error: str
    timestamp: float | None
    container: str = ""


class SwarmBackend(SharedMembers):
    """Executes a Plan on a Docker swarm, through its manager (`manager`, `api`). The image checks and
    builds are on this machine's engine (`client`), where the image is copied from; the watcher is
    aimed at the manager. `memory` is where the ulimit verdicts are kept."""

    capabilities = Capabilities(builds_images=True, probes_ulimits=True, aws_gateway=True,
                                aws_socket_in_job_folder=True, addresses_once_running=True)

    def __init__(self, settings: SwarmSettings | None = None, client: docker.DockerClient | None = None,
                 memory: EngineMemory | None = None) -> None:
        super().__init__(client, memory)
        self.settings = settings if settings is not None else SwarmSettings.from_env()
        self._grace = 10.0
        self._image_ref: dict[str, str] = {}
        self._services: dict[str, str] = {}  # container name -> service id
        self._hosts: dict[str, tuple[Plan, HostPlan]] = {}  # container name -> its job's plan, the host
        self._logs: dict[str, _Stream] = {}
        self._final: dict[str, ContainerState] = {}
        self._nodes: dict[str, str] = {}  # node id -> hostname
        self._last_poll = 0.0
        self._manager: docker.DockerClient | None = None
        self._refused: dict[str, set[Ulimit]] = {}  # per job: the ulimits some node refuses
        self._node_of: dict[str, str] = {}  # container name -> the node id `spread` chose

    # -- the manager ------------------------------------------------------------------------------

    @property
    def manager(self) -> docker.DockerClient:
        """The swarm manager's engine: HETERO_EMU_SWARM_MANAGER, else as Docker finds it (DOCKER_HOST,
        the CLI's current context, the default socket). `client` stays this machine's engine
        (DOCKER_HOST or the socket): where the image is built and copied from."""
        if self._manager is None:
            self._manager = connect(base_url=self.manager_url())
        return self._manager

    def manager_url(self) -> str | None:
        """The manager's address, None for the one DOCKER_HOST or the default socket gives."""
        if self.settings.manager is None and not os.environ.get("DOCKER_HOST"):
            return _context_host()
        return self.settings.manager

    @property
    def api(self) -> docker.APIClient:
        return self.manager.api

    def ping(self) -> None:
        try:
            swarm = self.manager.info().get("Swarm") or {}
        except (docker.errors.APIError, requests.exceptions.RequestException) as err:
            raise self._lost_engine(err) from None
        if swarm.get("LocalNodeState") != "active" or not swarm.get("ControlAvailable"):
            where = self.settings.manager or os.environ.get("DOCKER_HOST") or "the local Docker engine"
            raise EnvironmentProblem(
                f"{where} is not a swarm manager (swarm state: {swarm.get('LocalNodeState') or 'unknown'})",
                hint=f"point {ENV_MANAGER} or DOCKER_HOST at a manager of the swarm (`docker swarm init` makes one)",
            )

    @engine_call
    def machine(self) -> Machine:
        """The manager's cores and memory, and every GPU the ready nodes advertise; GPUs cannot be
        shared (a generic resource is reserved whole)."""
        info = self.manager.info()
        gpus = tuple(gpu for node in self._ready_nodes() for gpu in node_gpus(node))
        return Machine(int(info.get("NCPU") or 1), int(info.get("MemTotal") or 0), gpu_runtime=bool(gpus),
                       gpus=gpus, can_share=False, gpu_hint=GPU_SETUP_HINT,
                       no_gpu=f"no ready node of the swarm advertises GPUs (generic resources {GPU_RESOURCE})")

    def reaper_environment(self) -> dict[str, str]:
        url = self.manager_url()
        return {"DOCKER_HOST": url} if url else {}

    # -- the nodes: images and shared folders ---------------------------------------------------

    def _ready_nodes(self) -> list[dict[str, Any]]:
        nodes = self.api.nodes()
        self._nodes = {n["ID"]: n.get("Description", {}).get("Hostname", n["ID"][:12]) for n in nodes}
        return [n for n in nodes
                if n.get("Status", {}).get("State") == "ready" and n.get("Spec", {}).get("Availability") == "active"]

    @engine_call
    def prepare(self, plan: Plan, reporter: Reporter, grace: float) -> None:
        """Before any host is created: the job's image on every node (copied where it lacks), and
        every path the hosts mount seen by every node, or one error naming the node."""
        self._grace = grace
        nodes = self._ready_nodes()
        if not nodes:
            raise EnvironmentProblem("the swarm has no node that is ready and active",
                                     hint="`docker node ls` on the manager shows the nodes")
        self._node_of.update(spread(
            [(h.container.name, h.container.placement) for h in plan.hosts],
            [Node(n["ID"], n.get("Description", {}).get("Hostname", n["ID"][:12]),
                  (n.get("Spec") or {}).get("Labels") or {}, len(node_gpus(n))) for n in nodes],
            {h.container.name: len(h.container.gpus) for h in plan.hosts if h.container.gpus}))
        # By id: a task naming an image id never pulls (moby daemon/cluster/executor/container/adapter.go
        # pullImage: "Skip pulling if the image is referenced by image ID"), so a node uses the copy it
        # has, the very same image everywhere, and no registry is asked.
        if plan.aws is not None:
            # The job's AWS gateway relays to the driver's socket in the job folder, which only a
            # container on this machine's kernel can connect to (a socket is no file a network share
            # carries): on this machine's node when it is one. Elsewhere (the nodes are containers of
            # this machine, as in the tests) it may run on any node; on a node of another machine it
            # says it cannot reach the socket and the job runs without AWS (emulator/run/job_aws.py).
            here = next((n["ID"] for n in nodes
                         if n.get("Description", {}).get("Hostname") == socket.gethostname()), None)
            if here is not None:
                self._node_of[plan.aws.gateway.container.name] = here
        ref = str(self.client.images.get(plan.image).id)
        self._copy_image(plan.image, ref, nodes, reporter)
        self._image_ref[plan.job_name] = ref
        with reporter.task(f"checking that the {len(nodes)} nodes see the job's folders"):
            refused = self._refused_ulimits(plan, ref)
            self._check_paths(plan, ref)
        self._refused[plan.job_name] = refused

    @engine_call
    def refused_ulimits(self, plan: Plan, wanted: Sequence[Ulimit]) -> set[Ulimit]:
        """The ulimits of `wanted` some node refuses: for a prepared job, what the nodes said
        (`prepare`); otherwise (`render --engine swarm`) what the manager's own engine says."""
        if plan.job_name in self._refused:
            return self._refused[plan.job_name] & set(wanted)
        if not wanted:
            return set()
        return ulimits.refused(ulimits.engine_key(), wanted,
                               lambda some: probe_ulimits(self.api, plan, some, self._driver, self._tracker),
                               self._memory)

    def _copy_image(self, name: str, image_id: str, nodes: list[dict[str, Any]], reporter: Reporter) -> None:
        """Load the image into every node engine the user named that lacks it: `docker save` once,
        the loads in parallel. A node without a named engine is checked by the probe instead."""
        manager_node = (self.manager.info().get("Swarm") or {}).get("NodeID")
        lacking: dict[str, docker.DockerClient] = {}
        for node in nodes:
            hostname = node.get("Description", {}).get("Hostname", "")
            url = self.settings.node_engines.get(hostname)
            if node["ID"] == manager_node:
                if self.settings.manager is None:
                    continue  # the manager is this machine's engine, which has the image
                url = url or self.settings.manager
            if url is None:
                continue
            client = _node_client(hostname, url)
            try:
                client.images.get(image_id)
            except docker.errors.ImageNotFound:
                lacking[hostname] = client
        if not lacking:
            return
        from emulator.backend.image_copy import copy_image

        copy_image(self.client, name, image_id, lacking, reporter)

    def _on_every_node(self, plan: Plan, what: str, image: str, args: Sequence[str],
                       mounts: Sequence[docker.types.Mount] = (),
                       limits: Sequence[Ulimit] = ()) -> dict[str, _Task | None]:
        """Run `/bin/sh -c ARGS` once on every node (a `global` service never restarted, labelled and tracked like the
        job's hosts, removed before returning); each node's hostname -> its task, None when it did not
        end within PROBE_TIMEOUT."""
        spec = docker.types.ContainerSpec(image=image, command=["/bin/sh", "-c"], args=list(args), mounts=list(mounts),
                                          labels=dict(plan.labels))
        spec["Ulimits"] = [{"Name": u.name, "Soft": u.soft, "Hard": u.hard} for u in limits]
        nodes = {n["ID"]: n.get("Description", {}).get("Hostname", n["ID"][:12]) for n in self._ready_nodes()}
        created: str | None = None
        try:
            with interrupts_deferred():
                created = self.api.create_service(
                    docker.types.TaskTemplate(container_spec=spec,
                                              restart_policy=docker.types.RestartPolicy(condition="none")),
                    name=service_name(f"{plan.job_name}-{what}"), labels={**plan.labels, LABEL_DRIVER: self._driver},
                    mode=docker.types.ServiceMode("global"))["ID"]  # not global-job: see service_options
                self._track(plan, "service", created)
            deadline = time.monotonic() + PROBE_TIMEOUT
            while True:
                ended = {t.node: t for t in self._tasks([created]) if t.state not in PENDING_STATES}
                if all(node in ended for node in nodes) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        finally:
            if created is not None:
                self._remove_services([created])
                self._untrack(plan, [created])
        return {hostname: ended.get(node_id) for node_id, hostname in sorted(nodes.items(), key=lambda i: i[1])}

    def _refused_ulimits(self, plan: Plan, image: str) -> set[Ulimit]:
        """The ulimits some node refuses (a dockerd without CAP_SYS_RESOURCE, as in a container): asked
        once per swarm with a throwaway job on every node, remembered like the Docker engine's."""
        wanted = list(dict.fromkeys(u for h in plan.hosts for u in h.container.ulimits))
        if not wanted:
            return set()

        def probe(some: Sequence[Ulimit]) -> bool | None:
            tasks = self._on_every_node(plan, "ulimit-check", image, ["true"], limits=some)
            if any(t is not None and ulimits.REFUSED in t.error for t in tasks.values()):
                return False
            return True if all(t is not None and t.state == "complete" for t in tasks.values()) else None

        return ulimits.refused(f"swarm {self.manager_url() or ulimits.engine_key()}", wanted, probe, self._memory)

    def _check_paths(self, plan: Plan, image: str) -> None:
        """Every node sees every path a host mounts: a job on every node mounts them all and looks for
        a file the driver has just written in the job folder. A node that lacks a path rejects the
        task ("bind source path does not exist"); one with a folder of that name that is not this
        machine's (not shared) fails the check; one without the image rejects it too."""
        job_dir = Path(plan.job_dir)
        sources = sorted({m.source for h in plan.hosts for m in h.container.mounts
                          if not Path(m.source).is_relative_to(job_dir)})
        marker = f".node-check-{os.getpid()}-{time.time_ns()}"
        checked = [str(job_dir), *sources]
        mounts = [docker.types.Mount(f"{PROBE_ROOT}/{i}", src, type="bind", read_only=True)
                  for i, src in enumerate(checked)]
        (job_dir / marker).write_text("written by the driver: every node must see this file\n")
        try:
            tasks = self._on_every_node(plan, "node-check", image, [f"test -f {PROBE_ROOT}/0/{marker}"], mounts)
        finally:
            (job_dir / marker).unlink(missing_ok=True)
        problems = []
        for hostname, task in tasks.items():
            if task is None:
                problems.append(f"node {hostname}: the check did not finish in {PROBE_TIMEOUT:g} s")
            elif task.state == "complete":
                continue
            elif "No such image" in task.error:
                problems.append(f"node {hostname} does not have the image {plan.image}")
            elif "bind source path does not exist" in task.error:
                missing = task.error.rsplit(":", 1)[-1].strip()
                problems.append(f"node {hostname} cannot see {missing or 'a path the hosts mount'}")
            elif task.exit_code == 1:
                problems.append(f"node {hostname} has a folder {checked[0]}, but not the one on this machine: "
                                "the job folder is not shared with it")
            else:
                problems.append(f"node {hostname}: {task.error or task.state} (exit code {task.exit_code})")
        if problems:
            raise EnvironmentProblem(
                "not every node of the swarm can run this job:\n  " + "\n  ".join(problems),
                hint="every node needs the image and must see the job folder and the data at the same paths "
                f"(a shared folder: README, Across machines); name node engines in {ENV_NODES} to copy "
                "the image, or drain a node (`docker node update --availability drain NODE`) to leave it out")

    # -- the hosts ------------------------------------------------------------------------------

    @engine_call
    def create_network(self, plan: Plan) -> None:
        """An attachable overlay network of the job's own (`internal` for EnableNetworkIsolation)."""
        options = {"com.docker.network.driver.mtu": str(self.settings.mtu)} if self.settings.mtu else None
        with interrupts_deferred():
            try:
                network = self.api.create_network(plan.network, driver="overlay", attachable=True, scope="swarm",
                                                  internal=plan.network_isolation, options=options,
                                                  labels={**plan.labels, LABEL_DRIVER: self._driver},
                                                  check_duplicate=True)
            except docker.errors.APIError as err:
                raise EnvironmentProblem(f"cannot create network {plan.network}: {first_line(err)}",
                                         hint="a network of that name may be left from an earlier run: "
                                         "`hetero-emu clean --engine swarm`") from None
            self._track(plan, "network", network["Id"])

    def create_container(self, plan: Plan, host: HostPlan) -> None:
        """Nothing is created yet: a service starts running as soon as it exists (see `start`)."""
        self._hosts[host.container.name] = (plan, host)

    def create_containers(self, plan: Plan, hosts: Sequence[HostPlan], sink: LineSink,
                          created: Callable[[str], None]) -> None:
        for host in hosts:
            service_options(host.container, plan.network, "check", self._driver, self._grace)  # refuses early
            self.create_container(plan, host)
            self._logs[host.container.name] = _Stream(service_name(host.container.name), sink)
            created(host.container.name)

    @engine_call
    def start(self, names: Sequence[str]) -> None:
        """Create every host's service at once (each starts its task as it is created), then follow
        each one's output."""
        errors: list[str] = []

        def create(name: str) -> None:
            plan, host = self._hosts[name]
            image = self._image_ref.get(plan.job_name, host.container.image)
            container = host.container.without_ulimits(self._refused.get(plan.job_name, set()))
            if name in self._node_of:
                container = replace(container, placement=(*container.placement, f"node.id=={self._node_of[name]}"))
            addresses = self._addresses(plan, container.dns) if container.dns else None
            options = service_options(container, plan.network, image, self._driver, self._grace, addresses)
            with interrupts_deferred():
                try:
                    service = self.api.create_service(**options)["ID"]
                except docker.errors.APIError as err:
                    errors.append(f"{options['name']}: {first_line(err)}")
                    return
                self._services[name] = service
                self._track(plan, "service", service)
            self._follow(name)

        together(create, names)
        if errors:
            raise EnvironmentProblem("cannot create the hosts' services: " + "; ".join(errors))

    def _addresses(self, plan: Plan, hostnames: Sequence[str]) -> dict[str, str]:
        """The addresses on the job's network of the job's hosts named (the AWS gateway's, which runs
        before the hosts start), from their running tasks; a host with no running task is left out."""
        found: dict[str, str] = {}
        for name, (job_plan, host) in list(self._hosts.items()):
            service = self._services.get(name)
            if job_plan.job_name != plan.job_name or host.container.hostname not in hostnames or service is None:
                continue
            for task in self.api.tasks(filters={"service": service, "desired-state": "running"}):
                for attachment in task.get("NetworksAttachments") or ():
                    if (attachment.get("Network") or {}).get("Spec", {}).get("Name") == plan.network:
                        # "10.0.3.5/24": the address and its network's prefix length.
                        for address in (attachment.get("Addresses") or [])[:1]:
                            found[host.container.hostname] = address.split("/")[0]
        return found

    def follow_logs(self, name: str, sink: LineSink) -> None:
        self._logs[name] = _Stream(service_name(name), sink)
        if name in self._services:
            self._follow(name)

    def _follow(self, name: str) -> None:
        """`service logs --follow` in a thread of its own: the host's output live. Its end is not
        awaited (the stream stays open as long as the service exists): `_finish_logs` reads the whole
        log once the task has ended and delivers what the live stream had not."""
        stream = self._logs[name]

        def pump() -> None:
            def deliver(data: bytes, kind: int) -> None:
                with stream.lock:
                    if stream.finished:
                        raise _Finished
                    self._deliver(name, stream, kind, data)

            try:
                response = self._service_logs(self._services[name], follow=True)
                stream.response = response
                with contextlib.closing(response):
                    demultiplex(response.iter_content(chunk_size=None), deliver)
            except Exception:  # noqa: BLE001 - finished, hung up on, or the service is gone: the final read covers it
                return

        stream.thread = threading.Thread(target=pump, name=f"logs-{name}", daemon=True)
        stream.thread.start()

    def _service_logs(self, service: str, follow: bool) -> Any:
        return EngineHttp(self.api).service_logs(service, follow=follow, timeout=None if follow else 60)

    def _deliver(self, name: str, stream: _Stream, kind: int, data: bytes) -> None:
        kind = 2 if kind == 2 else 1
        stream.delivered[kind] += len(data)
        try:
            stream.sink(name, data, kind)
        except Exception as err:  # noqa: BLE001 - a log file that cannot be written (a full disk)
            self.stream_errors[name] = f"{type(err).__name__}: {err}"

    def _finish_logs(self, name: str) -> bool:
        """Read the host's whole log (its task has ended, or is about to be removed) and deliver what
        the live stream had not; then close the live stream. False when it could not be read."""
        stream = self._logs.get(name)
        if stream is None or stream.finished:
            return True
        service = self._services.get(name)
        whole: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}
        ok = True
        if service is not None:
            try:
                # Read through requests, which ends the (chunked, kept-alive) answer where the
                # engine ends it; a read of the raw socket waits for a close that never comes.
                response = self._service_logs(service, follow=False)
                with contextlib.closing(response):
                    demultiplex(response.iter_content(chunk_size=READ_SIZE),
                                lambda data, kind: whole[kind].extend(data))
            except (docker.errors.APIError, requests.exceptions.RequestException, OSError):
                ok = False
        with stream.lock:
            stream.finished = True
            for kind in (1, 2):
                rest = bytes(whole[kind][stream.delivered[kind]:])
                if rest:
                    self._deliver(name, stream, kind, rest)
        if stream.response is not None:
            hang_up(stream.response)
        return ok

    def wait_logs(self, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        unfinished = []
        for name in list(self._logs):
            if time.monotonic() > deadline or not self._finish_logs(name):
                unfinished.append(name)
                with self._logs[name].lock:
                    self._logs[name].finished = True
        self._logs.clear()
        return unfinished

    def _tasks(self, services: Sequence[str]) -> list[_Task]:
        """The latest task of these services on each node (a global job has one per node)."""
        if not services:
            return []
        found: dict[str, tuple[int, _Task]] = {}
        for raw in self.api.tasks(filters={"service": list(services)}):
            key = f"{raw.get('ServiceID')}/{raw.get('NodeID') or raw.get('ID')}"
            version = int((raw.get("Version") or {}).get("Index", 0))
            if key not in found or version > found[key][0]:
                found[key] = (version, _parse_task(raw))
        return [task for _, task in found.values()]

    def _task_of(self, names: Sequence[str]) -> dict[str, _Task | None | Literal["removed"]]:
        """Each host's latest task, by the job's label: one manager call per job, however many hosts
        (the engine's `service` filter refuses the lot when one of them was removed). "removed": its
        service is gone (`hetero-emu stop`, `clean`, or by hand); None: no task yet."""
        ids = {self._services[n]: n for n in names if n in self._services}
        result: dict[str, _Task | None | Literal["removed"]] = {n: None for n in names}
        jobs = {self._hosts[n][0].job_name for n in ids.values() if n in self._hosts}
        by_service: dict[str, list[dict[str, Any]]] = {}
        for job in sorted(jobs):
            for raw in self.api.tasks(filters={"label": f"{LABEL_JOB}={job}"}):
                by_service.setdefault(str(raw.get("ServiceID")), []).append(raw)
        missing = [service for service in ids if service not in by_service]
        existing = {str(s["ID"]) for s in self.api.services(filters={"id": missing})} if missing else set()
        for service, name in ids.items():
            raws = sorted(by_service.get(service, []), key=lambda r: int((r.get("Version") or {}).get("Index", 0)))
            tasks = [_parse_task(raw) for raw in raws]
            # The task that ran, once there is one: a host stopped through the swarm has a later,
            # never-placed task too (_stop_by_update).
            ran = [task for task in tasks if task.container]
            if tasks:
                result[name] = (ran or tasks)[-1]
            elif service not in existing:
                result[name] = "removed"
        return result

    @engine_call
    def states(self, names: Sequence[str]) -> list[ContainerState]:
        asking = [n for n in names if n not in self._final]
        try:
            tasks = self._task_of(asking)
            gone_nodes = self._gone_nodes()
        except docker.errors.APIError as err:
            raise self._lost_engine(err) from None
        self._last_poll = time.monotonic()
        for name in asking:
            task = tasks.get(name)
            state = self._state_of(name, task, gone_nodes)
            if not state.running:
                self._final[name] = state
                threading.Thread(target=self._finish_logs, args=(name,), daemon=True).start()
        return [self._final.get(name) or ContainerState(name, running=True) for name in names]

    def _gone_nodes(self) -> dict[str, Any]:
        """The nodes that run nothing any more (NODE_GONE), by id."""
        return {n["ID"]: n for n in self.api.nodes() if (n.get("Status") or {}).get("State") in NODE_GONE}

    def _state_of(self, name: str, task: _Task | None | Literal["removed"],
                  gone_nodes: Mapping[str, Any]) -> ContainerState:
        if task == "removed":
            return ContainerState(name, running=False, error="its service was removed (hetero-emu stop or clean, "
                                  "or docker service rm)", finished_at=time.time())
        if task is None:
            if name in self._services:
                return ContainerState(name, running=True)  # created, not scheduled yet
            return ContainerState(name, running=False, error="its service was never created")
        node = self._nodes.get(task.node) or (gone_nodes.get(task.node, {}).get("Description") or {}).get(
            "Hostname", task.node[:12])
        if task.state in REFUSED_STATES:
            host = self._hosts[name][1].name if name in self._hosts else name
            raise EnvironmentProblem(f"node {node} refused to run {host}: {task.error or task.state}",
                                     hint="every node must have the image and see each mounted path "
                                     "(README, Across machines)")
        if task.state in PENDING_STATES:
            if task.node in gone_nodes:
                return ContainerState(name, running=False, error=f"its node {node} went down "
                                      f"({gone_nodes[task.node]['Status'].get('State')})",
                                      finished_at=time.time())
            return ContainerState(name, running=True)
        if task.state == "orphaned":
            return ContainerState(name, running=False, error=f"its node {node} went down", finished_at=task.timestamp)
        if task.exit_code is None:
            return ContainerState(name, running=False, error=f"{task.state} on node {node}: {task.error}".rstrip(": "),
                                  finished_at=task.timestamp)
        return ContainerState(name, running=False, exit_code=task.exit_code, finished_at=task.timestamp,
                              error="" if task.exit_code == 0 else task.error if "exit code" not in task.error else "")

    def wait_exits(self, names: Sequence[str], timeout: float) -> None:
        time.sleep(max(timeout, SWARM_POLL_SECONDS - (time.monotonic() - self._last_poll)))

    @engine_call
    def stop(self, names: Sequence[str], grace: float) -> None:
        """Stop hosts and wait for their ends. A host on a node whose engine the user named is stopped
        there (`docker stop`: SIGTERM, SIGKILL after `grace`); any other through the manager
        (_stop_by_update: SIGTERM, SIGKILL after the grace period the service was created with).
        Either way its task ends as a host that exited does, with its exit code. The services are
        removed in `remove`, at the end, as the Docker engine's containers."""
        self._signal(names, lambda api, container: api.stop(container, timeout=max(1, math.ceil(grace))))
        self._await_ends(names, self._grace + REMOVE_TIMEOUT)

    @engine_call
    def kill(self, names: Sequence[str]) -> None:
        """SIGKILL through the engine of the node that runs the host, where the user named it; the
        swarm itself has nothing quicker than the stop (a task's grace period cannot be changed)."""
        self._signal(names, lambda api, container: api.kill(container))
        self._await_ends(names, self._grace + REMOVE_TIMEOUT)

    def _signal(self, names: Sequence[str], act: Callable[[docker.APIClient, str], object]) -> None:
        """`act` on each running host's container through its node's engine, else stop it through the manager."""
        names = [n for n in names if n in self._services and n not in self._final]
        tasks = self._started(names)

        def one(name: str) -> None:
            task = tasks.get(name)
            node = self._nodes.get(task.node, "") if isinstance(task, _Task) else ""
            url = self.settings.node_engines.get(node)
            if isinstance(task, _Task) and task.container and url:
                try:
                    act(_node_client(node, url).api, task.container)
                    return
                except (EmulatorError, docker.errors.APIError, requests.exceptions.RequestException):
                    pass  # that engine cannot do it: the swarm still can
            self._stop_by_update(name)

        together(one, names)

    def _started(self, names: Sequence[str]) -> dict[str, _Task | None | Literal["removed"]]:
        """Each host's task, once none is still being prepared or started on its node (at most
        START_WAIT). The swarm places and starts a task after `start` returns, seconds later on a busy
        node, and a stop can come first (max_run, a failing host, Ctrl-C). Stopped once it runs, the
        host ends as on the Docker engine, where every host runs once `start` returns: with the
        SIGTERM's exit code. Stopped through the manager before its container existed, its task was
        shut down with no exit code and the task replacing it waited, never placed, so the stop
        waited REMOVE_TIMEOUT for an end that never came. A task no node took yet is not waited for."""
        deadline = time.monotonic() + START_WAIT
        while True:
            tasks = self._task_of(names)
            starting = [t for t in tasks.values()
                        if isinstance(t, _Task) and not t.container and t.node and t.state in STARTING_STATES]
            if starting:
                gone = self._gone_nodes()
                starting = [t for t in starting if t.node not in gone]
            if not starting or time.monotonic() > deadline:
                return tasks
            time.sleep(START_POLL_SECONDS)

    def _stop_by_update(self, name: str) -> None:
        """Stop a host through the manager alone: update its service to a placement no node meets.
        The update stops the running task first (update order stop-first, the swarm's default) and
        keeps it in the service's task history with its exit code; the task that replaces it waits,
        never placed, until the service is removed at the end. Scaling the service to 0 stops the
        task the same way but deletes it at once, exit code and all (Docker 20.10), so the host's
        end was unknown."""
        with contextlib.suppress(docker.errors.NotFound):
            service = self.api.inspect_service(self._services[name])
            template = dict(service["Spec"]["TaskTemplate"])
            template["Placement"] = {**(template.get("Placement") or {}), "Constraints": [NOWHERE]}
            self.api.update_service(service["ID"], version=service["Version"]["Index"], task_template=template,
                                    fetch_current_spec=True)

    def _await_ends(self, names: Sequence[str], timeout: float) -> None:
        """Until each host's task has ended, at most `timeout`: its state is then kept for `states`,
        and its log read to the end. A task deleted on the way (its service scaled to 0 by hand,
        Docker 20.10) leaves its last state seen as what is known of its end; the live log stream
        has followed it to its last line."""
        deadline = time.monotonic() + timeout
        pending = list(names)
        last: dict[str, _Task] = {}
        while pending:
            gone_nodes = self._gone_nodes()  # a host on a node that died will not report its end
            for name, task in self._task_of(pending).items():
                if isinstance(task, _Task):
                    last[name] = task
                    state = self._state_of(name, task, gone_nodes)
                elif task is None:  # the stopped task is gone with what it told
                    seen = last.get(name)
                    state = ContainerState(name, running=False, exit_code=seen.exit_code if seen else None,
                                           finished_at=time.time(), error="stopped: its task was removed")
                else:
                    state = self._state_of(name, task, gone_nodes)
                if not state.running:
                    self._final[name] = state
                    self._finish_logs(name)
                    pending.remove(name)
            if pending:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)

    def _remove_services(self, services: Sequence[str]) -> dict[str, _Task]:
        """Remove services and wait until their tasks are gone from every node (a network cannot be
        removed while a task is attached to it); returns each one's last task seen."""
        last: dict[str, _Task] = {}
        ids = []
        for service in services:
            with contextlib.suppress(docker.errors.NotFound):
                ids.append(str(self.api.inspect_service(service)["ID"]))  # a name given: its tasks name the id
                self.api.remove_service(service)
        deadline = time.monotonic() + REMOVE_TIMEOUT
        remaining = ids
        while remaining and time.monotonic() < deadline:
            try:
                # Unfiltered: the engine's `service` filter refuses a service that no longer exists.
                raws = [t for t in self.api.tasks() if t.get("ServiceID") in remaining]
                gone = self._gone_nodes() if raws else {}
            except docker.errors.APIError:
                raws, gone = [], {}
            alive = set()
            for raw in raws:
                service = str(raw.get("ServiceID"))
                task = _parse_task(raw)
                if task.exit_code is not None or service not in last:
                    last[service] = task
                # A node that went down never reports its task removed: the manager lists it until
                # the node returns or is removed (measured: still there REMOVE_TIMEOUT later, so a
                # job with a dead node took 130 s to end). Its container went with the node, and
                # the job's network is removed all the same (tests/swarm/test_swarm_faults.py).
                if task.node not in gone:
                    alive.add(service)
            remaining = [s for s in remaining if s in alive]
            if remaining:
                time.sleep(0.2)
        return last

    def remove(self, plan: Plan) -> None:
        for name in [h.container.name for h in plan.hosts]:
            self._finish_logs(name)
        self._tracker.remove(plan, self.remove_resources, self._engine_lost)
        self._wait_nodes_clear(plan.job_name)
        for host in plan.hosts:
            self._services.pop(host.container.name, None)
            self._hosts.pop(host.container.name, None)
            self._node_of.pop(host.container.name, None)
        self._image_ref.pop(plan.job_name, None)
        self._refused.pop(plan.job_name, None)

    def _wait_nodes_clear(self, job: str) -> None:
        """Wait until no container of the job is left on the nodes whose engines the user named. The
        manager forgets an exited task as soon as its service is removed, before the node's agent
        has removed the container (measured: a second or two later), so the manager cannot tell."""
        clients = []
        for node, url in self.settings.node_engines.items():
            with contextlib.suppress(EnvironmentProblem):
                clients.append(_node_client(node, url))
        deadline = time.monotonic() + REMOVE_TIMEOUT
        def holds_some(client: docker.DockerClient) -> bool:
            try:
                return bool(client.api.containers(all=True, filters={"label": f"{LABEL_JOB}={job}"}, quiet=True))
            except (docker.errors.APIError, requests.exceptions.RequestException):
                return False  # a node that stopped answering has nothing more to say here

        while clients and time.monotonic() < deadline:
            clients = [c for c in clients if holds_some(c)]
            if clients:
                time.sleep(0.2)

    @engine_call
    def fix_ownership(self, plan: Plan, uid: int, gid: int) -> None:
        """Give the hosts' files (written by root on the nodes, in the shared job folder) to uid:gid,
        with a one-task job of the job's image on any node."""
        hosts_dir = str(Path(plan.job_dir) / "hosts")
        spec = docker.types.ContainerSpec(image=self._image_ref.get(plan.job_name, plan.image),
                                          command=["chown", "-R", f"{uid}:{gid}", "/hosts"], user="0",
                                          mounts=[docker.types.Mount("/hosts", hosts_dir, type="bind")],
                                          labels=dict(plan.labels))
        with interrupts_deferred():
            service = self.api.create_service(
                docker.types.TaskTemplate(container_spec=spec,
                                          restart_policy=docker.types.RestartPolicy(condition="none")),
                name=service_name(f"{plan.job_name}-chown"), labels={**plan.labels, LABEL_DRIVER: self._driver},
                mode=docker.types.ServiceMode("replicated", replicas=1))["ID"]  # not a job: see service_options
            self._track(plan, "service", service)
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                tasks = self._tasks([service])
                if tasks and tasks[0].state not in PENDING_STATES:
                    if tasks[0].exit_code != 0:
                        raise EnvironmentProblem(f"`chown -R {uid}:{gid}` failed on the swarm: "
                                                 f"{tasks[0].error or tasks[0].state}")
                    return
                time.sleep(0.2)
            raise EnvironmentProblem("the chown job on the swarm did not finish in 300 s")
        finally:
            self._remove_services([service])
            self._untrack(plan, [service])

    # -- finding and cleaning up (ps, logs, stop, clean) -----------------------------------------

    def find(self, job: str | None = None) -> list[Resource]:
        filters = {"label": [f"{LABEL_MANAGED}=true"] + ([f"{LABEL_JOB}={job}"] if job else [])}
        found = []
        try:
            services = self.api.services(filters=filters)
            # By label, not by service: the engine refuses a list naming a service removed meanwhile.
            tasks = {t.get("ServiceID"): _parse_task(t) for t in
                     (self.api.tasks(filters={"label": filters["label"]}) if services else [])}
            for s in services:
                labels = (s.get("Spec") or {}).get("Labels") or {}
                task = tasks.get(s["ID"])
                if LABEL_HOST not in labels:
                    status = "helper"  # the node check or the chown job of a run
                elif task is None:
                    status = "pending"
                else:
                    status = task.state if task.exit_code is None else f"{task.state} ({task.exit_code})"
                found.append(Resource("container", s["Spec"]["Name"], labels.get(LABEL_JOB, ""), labels, status,
                                      driver_alive(labels.get(LABEL_DRIVER))))
            for n in self.api.networks(filters=filters):
                if n.get("Driver") != "overlay":
                    continue
                labels = n.get("Labels") or {}
                found.append(Resource("network", n["Name"], labels.get(LABEL_JOB, ""), labels, "",
                                      driver_alive(labels.get(LABEL_DRIVER))))
        except docker.errors.APIError as err:
            raise EnvironmentProblem(f"the swarm manager cannot list the jobs: {first_line(err)}") from None
        except requests.exceptions.RequestException as err:
            raise self._lost_engine(err) from None
        return found

    def stop_resources(self, resources: Iterable[Resource], grace: float) -> None:
        """Stop hosts (`hetero-emu stop`). A job whose driver runs on this machine was asked first (the
        stop request in its job folder) and stops its hosts itself, reading each one's log to the end
        before its service goes: it is given the time. Otherwise the services are removed here (each
        task stops with the grace period it was created with)."""
        hosts = [r for r in resources if r.kind == "container"]
        if hosts and all(r.driver_alive for r in hosts):
            deadline = time.monotonic() + grace + REMOVE_TIMEOUT
            names = {r.name for r in hosts}
            while time.monotonic() < deadline:
                if not names & {r.name for r in self.find(hosts[0].job) if r.kind == "container"}:
                    return
                time.sleep(0.5)
        self.remove_resources(hosts)

    @engine_call
    def remove_resources(self, resources: Iterable[Resource]) -> None:
        resources = list(resources)
        services = [r.name for r in resources if r.kind in ("container", "service")]
        self._remove_services(services)
        # As `remove` does: the manager forgets the tasks before the nodes have removed their
        # containers, so without this `clean` returned with the job's containers still on the nodes.
        for job in sorted({r.job for r in resources if r.job}):
            self._wait_nodes_clear(job)
        problems = []
        for r in resources:
            if r.kind != "network":
                continue
            deadline = time.monotonic() + 30
            while True:
                try:
                    self.api.remove_network(r.name)
                    break
                except docker.errors.NotFound:
                    break
                except docker.errors.APIError as err:
                    # Tasks being torn down on a node still hold an endpoint for a moment.
                    if time.monotonic() > deadline:
                        problems.append(f"network {r.name}: {first_line(err)}")
                        break
                    time.sleep(0.5)
        if problems:
            raise EmulatorError("could not remove everything: " + "; ".join(problems),
                                hint="run `hetero-emu clean --engine swarm` once the swarm is healthy")

    @engine_call
    def exec_in(self, container: Resource, command: Sequence[str], io: ExecIO) -> int:
        """`exec` in a running host: through the engine of the node that runs its task, which the user
        names in HETERO_EMU_SWARM_NODES (the swarm itself cannot run a command in a task)."""
        tasks = self.api.tasks(filters={"service": [container.name]})
        task = _parse_task(sorted(tasks, key=lambda r: int((r.get("Version") or {}).get("Index", 0)))[-1]) \
            if tasks else None
        if task is None or task.state != "running" or not task.container:
            raise EnvironmentProblem(f"{container.name} is not running on the swarm (its task: "
                                     f"{task.state if task else 'none'})",
                                     hint="on the swarm engine, exec reaches running hosts only")
        self._ready_nodes()
        node = self._nodes.get(task.node, task.node[:12])
        url = self.settings.node_engines.get(node)
        if url is None:
            raise UsageError(f"{container.name} runs on node {node}, whose engine this machine cannot reach",
                             hint=f"name it in {ENV_NODES} (e.g. {node}=ssh://USER@{node})")
        return exec_running(_node_client(node, url).api, task.container, command, io)


def _parse_task(raw: Mapping[str, Any]) -> _Task:
    status = raw.get("Status") or {}
    container = status.get("ContainerStatus") or {}
    state = str(status.get("State", ""))
    code = container.get("ExitCode")
    # ExitCode is 0 in a task that has not exited: it counts only once the task is complete or failed.
    exited = state in ("complete", "failed", "shutdown") and bool(container.get("ContainerID"))
    return _Task(state=state, node=str(raw.get("NodeID") or ""),
                 exit_code=int(code) if exited and code is not None else None,
                 error=str(status.get("Err") or ""), timestamp=epoch(status.get("Timestamp")),
                 container=str(container.get("ContainerID") or ""))


def _context_host() -> str | None:
    """The engine of the Docker CLI's current context (`docker context use NAME`), as `docker` itself
    finds it when DOCKER_HOST is unset; None for the default context (the default socket)."""
    with contextlib.suppress(Exception):
        from docker.context import ContextAPI

        context = ContextAPI.get_current_context()
        if context is not None and context.Name != "default":
            return str(context.Host)
    return None


def _node_client(node: str, url: str) -> docker.DockerClient:
    try:
        return connect(base_url=url)
    except EnvironmentProblem as err:
        raise EnvironmentProblem(f"the engine of node {node} ({url}) does not answer: {err.message}",
                                 hint=f"check {ENV_NODES}") from None

