"""A real Docker swarm of several nodes on this one machine, offline: each node is a container of the
host's engine running its own Docker engine (docker-in-docker, images/swarm-node/).

The host's engine itself is never put in swarm mode: the swarm lives entirely inside the node
containers. node-1 is the manager, the others are workers; each node's engine answers on
tcp://127.0.0.1:<port> of this machine (no TLS: published on the loopback address only). One host
folder is bind-mounted into every node at the same path: it stands for the NFS share on which a real
cluster keeps the job folder and the data of jobs, so a bind mount of a path under it means the same
files on every node.

Everything made on the host's engine carries LABEL (not the emulator's `hetero-emu.managed`, so
`hetero-emu clean` never touches a test cluster), and OWNER_LABEL names the process that made it,
so a cluster left behind by a killed test session is told from one another session is using.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors
from docker.models.containers import Container

from emulator.backend.liveness import current_driver, driver_alive

#: Label on every container and network the harness makes on the host's engine: the cluster's token.
LABEL = "hetero-emu.test-swarm"
#: Label naming the process that made the cluster (emulator.backend.liveness identity).
OWNER_LABEL = "hetero-emu.test-swarm.owner"
#: Label holding the cluster's host folder, so a stale cluster's folder is removed with it.
FOLDER_LABEL = "hetero-emu.test-swarm.folder"
#: The name of a cluster's host folder starts with this (tempfile.mkdtemp in the temporary folder).
FOLDER_PREFIX = "hetero-swarm-"
#: File of a cluster's host folder naming the process that made it.
OWNER_FILE = "owner"
#: The recipe of the node image (images/swarm-node/).
NODE_VARIANT = "swarm-node"
#: The port of each node's engine inside the node (images/swarm-node/entrypoint.sh).
ENGINE_PORT = 2375
#: The swarm's management port (Docker's default for `swarm init` / `swarm join`).
SWARM_PORT = 2377
#: MTU of the network that joins the nodes: this machine's eth0 has 1400, so the harness's network
#: has it too, and what works here works on a host whose links are that small.
UNDERLAY_MTU = 1400
#: Bytes VXLAN adds to every frame an overlay network carries between nodes.
VXLAN_OVERHEAD = 50
#: The `com.docker.network.driver.mtu` an overlay network of the swarm must be given. For the overlay
#: driver that option is the MTU of the network *under* it: the containers' interfaces get it minus
#: VXLAN_OVERHEAD (libnetwork drivers/overlay, maxMTU), here 1300. Docker's default is 1500: its
#: containers' 1450-byte packets become 1500-byte VXLAN packets, more than the 1400 of the network
#: under them. Measured here: the kernel then fragments them (the VXLAN device does not set DF), so
#: traffic still flows on this harness; on links that drop fragments it would not.
OVERLAY_MTU = 1350
#: Swarm's dispatcher heartbeat (default 5 s): a node that misses its heartbeats is marked down, so
#: a short one makes a dead node noticed within seconds.
HEARTBEAT_SECONDS = 1
#: Node labels set at start, so placement constraints can be tested (node-1 has none).
NODE_LABELS: dict[str, dict[str, str]] = {
    "node-2": {"hetero.role": "cpu"},
    "node-3": {"hetero.role": "gpu"},
}
#: The nodes of a cluster at start: node-1 the manager, the others workers.
NODE_NAMES: tuple[str, ...] = ("node-1", "node-2", "node-3")
#: Read timeout of the harness's docker-py clients: loading or saving an image of ~500 MB on a busy
#: 2-core machine keeps an engine silent for longer than docker-py's default of 60 s.
CLIENT_TIMEOUT = 600
#: How long a node's engine, a join, or a node state change may take before the harness gives up.
TIMEOUT_SECONDS = 90.0

T = TypeVar("T")


class SwarmError(RuntimeError):
    """The cluster could not be made (the message carries the failing node's engine log)."""


def wait_for(what: str, check: Callable[[], T | None], timeout: float = TIMEOUT_SECONDS,
             interval: float = 0.1) -> T:
    """Poll `check` until it returns something other than None (or False); SwarmError after `timeout`."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = check()
            if value is not None and value is not False:
                return value
        except (docker.errors.DockerException, OSError) as exc:  # the engine is not up yet
            last_error = exc
        if time.monotonic() > deadline:
            raise SwarmError(f"timed out after {timeout:.0f} s waiting for {what}"
                             + (f" (last error: {last_error})" if last_error else ""))
        time.sleep(interval)


class SwarmCluster:
    """A swarm of docker-in-docker nodes on the host engine `host` (a client with a read timeout
    long enough to save an image, CLIENT_TIMEOUT), of nodes running `image` (images/swarm-node/):
    `start()` makes it, `close()` removes every container, network and folder it made. Use it as a
    context manager."""

    def __init__(self, host: docker.DockerClient, image: str, token: str | None = None,
                 workdir: Path | None = None) -> None:
        self.host = host
        self.image = image
        self.token = token or secrets.token_hex(4)
        #: The cluster's host folder: each node's /var/lib/docker, the shared folder, image tars.
        self.folder = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{self.token}-", dir=workdir))
        # Who made the folder, so a sweep can tell one a killed session left from one in use.
        (self.folder / OWNER_FILE).write_text(current_driver())
        #: The folder every node sees at the same path (the stand-in for NFS).
        self.shared = self.folder / "shared"
        self.shared.mkdir()
        self.network_name = f"hetero-swarm-{self.token}"
        #: Seconds each phase took: "nodes ready", "swarm formed", "load <image> on <node>", ...
        self.timings: dict[str, float] = {}
        self._labels = {LABEL: self.token, OWNER_LABEL: current_driver(), FOLDER_LABEL: str(self.folder)}
        self._containers: dict[str, Container] = {}
        self._urls: dict[str, str] = {}
        self._clients: dict[str, docker.DockerClient] = {}
        self._addresses: dict[str, str] = {}
        self._image_tars: dict[str, Path] = {}
        self._tar_lock = threading.Lock()
        self._added = 0

    # ------------------------------------------------------------------------------------------
    # what tests use

    @property
    def nodes(self) -> list[str]:
        """Host names of the nodes the harness runs (killed ones included until removed)."""
        return list(self._containers)

    @property
    def manager(self) -> str:
        return "node-1"

    @property
    def manager_url(self) -> str:
        """tcp://127.0.0.1:PORT of the manager's engine: the DOCKER_HOST of the swarm."""
        return self._urls[self.manager]

    @property
    def node_engines(self) -> dict[str, str]:
        """Node host name -> tcp://127.0.0.1:PORT of its engine."""
        return dict(self._urls)

    @property
    def overlay_mtu(self) -> int:
        return OVERLAY_MTU

    def client(self, node: str) -> docker.DockerClient:
        """A docker-py client of the node's engine."""
        if node not in self._clients:
            self._clients[node] = docker.DockerClient(base_url=self._urls[node], timeout=CLIENT_TIMEOUT)
        return self._clients[node]

    def container(self, node: str) -> Container:
        """The host engine's container of the node."""
        return self._containers[node]

    def address(self, node: str) -> str:
        """The node's address on the harness network (what the swarm advertises)."""
        return self._addresses[node]

    def env(self) -> dict[str, str]:
        """The environment for a CLI subprocess that should talk to the swarm (its manager)."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_CONTEXT")}
        env["DOCKER_HOST"] = self.manager_url
        return env

    def load_image(self, node: str, image: str) -> None:
        """Make `image` (an image of the host's engine) present on the node, without the swarm:
        `docker save` from the host once per image into a tar of the cluster folder, `docker load`
        of it into the node. Does nothing when the node already has the same image id."""
        image_id = str(self.host.images.get(image).id)
        with contextlib.suppress(docker.errors.ImageNotFound):
            if self.client(node).images.get(image).id == image_id:
                return
        started = time.monotonic()
        tar = self._saved(image, image_id)
        with tar.open("rb") as stream:
            self.client(node).images.load(stream)
        self.timings[f"load {image} on {node}"] = time.monotonic() - started

    def load_image_everywhere(self, image: str) -> None:
        """load_image on every running node, all at once."""
        running = [n for n in self.nodes if self._running(n)]
        self._each(running, lambda node: self.load_image(node, image))

    def kill_node(self, node: str) -> None:
        """A node dying: its container (and so its engine and every container on it) is killed."""
        self._containers[node].kill()

    def add_node(self, shared: bool = True) -> str:
        """One more worker joined to the swarm, Ready when this returns; with shared=False it lacks
        the shared folder (the fault: a node that cannot see the NFS share). Returns its host name."""
        self._added += 1
        node = f"node-{len(NODE_NAMES) + self._added}"
        self._create(node, shared=shared)
        wait_for(f"the engine of {node}", functools.partial(self._engine_answers, node))
        self._join(node)
        wait_for(f"{node} Ready", lambda: self.node_state(node) == "ready")
        return node

    def remove_node(self, node: str) -> None:
        """Remove a node: its container, its folder, and (`docker node rm --force`) its entry on the manager."""
        node_id = self.node_id(node)
        self._remove_container(node)
        if node_id is not None:
            with contextlib.suppress(docker.errors.NotFound):
                self.client(self.manager).api.remove_node(node_id, force=True)
        _rmtree(self.host, self.image, self.folder / node)

    def swarm_nodes(self) -> dict[str, dict[str, Any]]:
        """The manager's view: host name -> node attributes (`docker node inspect`)."""
        found = self.client(self.manager).nodes.list()
        # A node that has just joined may be listed before it has described itself (no
        # Description.Hostname yet, seen here while forming the swarm): it is not known by name yet.
        return {str(n.attrs["Description"]["Hostname"]): dict(n.attrs) for n in found
                if (n.attrs.get("Description") or {}).get("Hostname")}

    def node_id(self, node: str) -> str | None:
        attrs = self.swarm_nodes().get(node)
        return None if attrs is None else str(attrs["ID"])

    def node_state(self, node: str) -> str | None:
        """The node's Status.State as the manager sees it ("ready", "down", ...), None when unknown."""
        attrs = self.swarm_nodes().get(node)
        return None if attrs is None else str(attrs["Status"]["State"])

    # ------------------------------------------------------------------------------------------
    # life cycle

    def start(self) -> SwarmCluster:
        """Make the network and nodes and form the swarm; on any failure, remove what was made."""
        try:
            started = time.monotonic()
            self.host.networks.create(self.network_name, driver="bridge", labels=self._labels,
                                      options={"com.docker.network.driver.mtu": str(UNDERLAY_MTU)})
            for node in NODE_NAMES:
                self._create(node, shared=True)
            for node in NODE_NAMES:
                wait_for(f"the engine of {node}", functools.partial(self._engine_answers, node))
            self.timings["nodes ready"] = time.monotonic() - started
            formed = time.monotonic()
            self._init_swarm()
            self._each(NODE_NAMES[1:], self._join)
            wait_for("every node Ready", self._all_ready)
            self._label_nodes()
            self.timings["swarm formed"] = time.monotonic() - formed
        except BaseException as exc:
            logs = self._engine_logs()
            self.close()
            if isinstance(exc, SwarmError | docker.errors.DockerException):
                raise SwarmError(f"{exc}\n{logs}") from exc
            raise
        return self

    def close(self) -> None:
        """Remove every node container (their containers die with them), the network, the folder."""
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                client.close()
        self._clients.clear()
        remove_cluster(self.host, self.token, self.image)
        _rmtree(self.host, self.image, self.folder)

    def __enter__(self) -> SwarmCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------
    # internals

    def _create(self, node: str, *, shared: bool) -> None:
        engine_dir = self.folder / node / "docker"
        engine_dir.mkdir(parents=True)
        volumes = {str(engine_dir): {"bind": "/var/lib/docker", "mode": "rw"}}
        if shared:
            volumes[str(self.shared)] = {"bind": str(self.shared), "mode": "rw"}
        container = self.host.containers.run(
            self.image,
            detach=True,
            name=f"hetero-swarm-{self.token}-{node}",
            hostname=node,
            labels=self._labels,
            network=self.network_name,
            ports={f"{ENGINE_PORT}/tcp": ("127.0.0.1", None)},
            volumes=volumes,
            # --privileged asks for every capability, and this host's bounding set lacks
            # SYS_RESOURCE, so it fails; dockerd needs the others (SYS_ADMIN for mounts and
            # namespaces, NET_ADMIN for bridges and iptables, ...). "ALL" is the engine's own list:
            # Docker 20.10 refuses the names of newer capabilities (PERFMON, BPF). No seccomp or
            # AppArmor filter, and a cgroup namespace of its own, in which the entrypoint can
            # remount the cgroup hierarchies read-write.
            cap_add=["ALL"],
            cap_drop=["SYS_RESOURCE"],
            security_opt=["seccomp=unconfined", "apparmor=unconfined"],
            cgroupns="private",
        )
        self._containers[node] = container
        container.reload()
        port = container.attrs["NetworkSettings"]["Ports"][f"{ENGINE_PORT}/tcp"][0]["HostPort"]
        self._urls[node] = f"tcp://127.0.0.1:{port}"
        self._addresses[node] = container.attrs["NetworkSettings"]["Networks"][self.network_name]["IPAddress"]

    def _engine_answers(self, node: str) -> bool:
        container = self._containers[node]
        container.reload()
        if container.status != "running":
            raise SwarmError(f"node {node} stopped ({container.status})")
        return bool(self.client(node).ping())

    def _init_swarm(self) -> None:
        manager = self.client(self.manager)
        manager.swarm.init(advertise_addr=self.address(self.manager), listen_addr=f"0.0.0.0:{SWARM_PORT}",
                           dispatcher_heartbeat_period=HEARTBEAT_SECONDS * 1_000_000_000)

    def _join(self, node: str) -> None:
        manager = self.client(self.manager)
        manager.swarm.reload()
        token = manager.swarm.attrs["JoinTokens"]["Worker"]
        self.client(node).swarm.join(remote_addrs=[f"{self.address(self.manager)}:{SWARM_PORT}"], join_token=token,
                                     advertise_addr=self.address(node), listen_addr=f"0.0.0.0:{SWARM_PORT}")

    def _all_ready(self) -> bool:
        states = {name: attrs["Status"]["State"] for name, attrs in self.swarm_nodes().items()}
        return all(states.get(node) == "ready" for node in NODE_NAMES)

    def _label_nodes(self) -> None:
        manager = self.client(self.manager)
        for node, labels in NODE_LABELS.items():
            found = manager.nodes.get(str(self.node_id(node)))
            spec = dict(found.attrs["Spec"])
            spec["Labels"] = {**(spec.get("Labels") or {}), **labels}
            found.update(spec)

    def _saved(self, image: str, image_id: str) -> Path:
        # One `docker save` per image and cluster, even when several nodes load it at once.
        with self._tar_lock:
            tar = self._image_tars.get(image_id)
            if tar is None:
                started = time.monotonic()
                tar = self.folder / "images" / f"{image_id.replace(':', '-')}.tar"
                tar.parent.mkdir(exist_ok=True)
                with tar.open("wb") as out:
                    for chunk in self.host.images.get(image).save(named=True):
                        out.write(chunk)
                self._image_tars[image_id] = tar
                self.timings[f"save {image}"] = time.monotonic() - started
            return tar

    def _running(self, node: str) -> bool:
        container = self._containers[node]
        container.reload()
        return container.status == "running"

    def _remove_container(self, node: str) -> None:
        container = self._containers.pop(node)
        self._urls.pop(node, None)
        self._addresses.pop(node, None)
        client = self._clients.pop(node, None)
        if client is not None:
            client.close()
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True, v=True)

    def _engine_logs(self) -> str:
        """The last lines of each node's engine log, for the error of a cluster that did not form."""
        parts = []
        for node, container in self._containers.items():
            with contextlib.suppress(docker.errors.DockerException):
                tail = container.logs(tail=15).decode(errors="replace").rstrip()
                parts.append(f"--- engine log of {node} (last lines):\n{tail}")
        return "\n".join(parts)

    @staticmethod
    def _each(nodes: Sequence[str], action: Callable[[str], None]) -> None:
        """`action` on each node in threads of its own; the first error is raised after all finish."""
        errors: list[BaseException] = []

        def run(node: str) -> None:
            try:
                action(node)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(node,)) for node in nodes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]



def remove_cluster(host: docker.DockerClient, token: str | None, image: str) -> list[str]:
    """Remove the containers, networks and folders labelled with the cluster `token` (any token:
    None) and return their names. Node containers are force-removed: their engines and every
    container inside die with them."""
    selector = LABEL if token is None else f"{LABEL}={token}"
    removed: list[str] = []
    folders: set[str] = set()
    for container in host.containers.list(all=True, filters={"label": selector}, ignore_removed=True):
        folders.add(container.labels.get(FOLDER_LABEL, ""))
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True, v=True)
            removed.append(container.name)
    for network in host.networks.list(filters={"label": selector}):
        folders.add((network.attrs.get("Labels") or {}).get(FOLDER_LABEL, ""))
        with contextlib.suppress(docker.errors.NotFound):
            network.remove()
            removed.append(str(network.name))
    for folder in sorted(f for f in folders if _is_cluster_folder(f)):
        _rmtree(host, image, Path(folder))
    return removed


def remove_stale_clusters(host: docker.DockerClient, image: str, workdir: Path | None = None) -> list[str]:
    """Remove the clusters whose maker is gone (a killed test session), and the host folders such a
    session left in `workdir` (the temporary folder) even when it had no container yet; a cluster
    another running process made stays. Returns the names of the containers and networks removed."""
    tokens: set[str] = set()
    objects: list[dict[str, str]] = [
        c.labels for c in host.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True)]
    objects += [n.attrs.get("Labels") or {} for n in host.networks.list(filters={"label": LABEL})]
    for labels in objects:
        if driver_alive(labels.get(OWNER_LABEL)) is False:
            tokens.add(labels[LABEL])
    removed = [name for token in sorted(tokens) for name in remove_cluster(host, token, image)]
    for folder in Path(workdir or tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*/"):
        with contextlib.suppress(OSError):
            if driver_alive((folder / OWNER_FILE).read_text().strip()) is False:
                _rmtree(host, image, folder)
    return removed


def host_swarm_state(host: docker.DockerClient) -> str:
    """The host engine's own swarm state (`docker info`: Swarm.LocalNodeState), "inactive" when it is
    not part of any swarm, as the harness requires."""
    return str(host.info()["Swarm"]["LocalNodeState"])


def _is_cluster_folder(path: str) -> bool:
    # Only a folder the harness itself made (mkdtemp with its prefix) is ever removed from a label.
    return bool(path) and Path(path).name.startswith(FOLDER_PREFIX) and Path(path).is_absolute()


def _rmtree(host: docker.DockerClient, image: str, folder: Path) -> None:
    """Remove a folder holding a node's /var/lib/docker, whose files belong to root: directly when
    this process may, else from a throwaway container of the node image (which runs as root)."""
    if not folder.exists():
        return
    shutil.rmtree(folder, ignore_errors=True)
    if not folder.exists():
        return
    with contextlib.suppress(docker.errors.DockerException):
        host.containers.run(image, entrypoint=["rm", "-rf", f"/mnt/{folder.name}"], remove=True,
                            volumes={str(folder.parent): {"bind": "/mnt", "mode": "rw"}}, network_mode="none")

