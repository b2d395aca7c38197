"""The swarm harness itself (cluster.py): the cluster it makes is a real swarm of three Ready nodes
with their labels, the shared folder is the same files on every node, containers on two nodes talk
over an overlay network given the harness's MTU, added nodes join and their death is noticed, stale
clusters are removed, and the host's own engine is never in swarm mode."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import docker
import pytest
from cluster import (
    FOLDER_LABEL,
    FOLDER_PREFIX,
    HEARTBEAT_SECONDS,
    LABEL,
    NODE_NAMES,
    OVERLAY_MTU,
    OWNER_FILE,
    OWNER_LABEL,
    UNDERLAY_MTU,
    VXLAN_OVERHEAD,
    SwarmCluster,
    host_swarm_state,
    remove_cluster,
    remove_stale_clusters,
)

from emulator.backend.liveness import current_driver

pytestmark = pytest.mark.docker


def test_three_nodes_are_ready_with_their_roles_and_labels(swarm_cluster: SwarmCluster) -> None:
    nodes = swarm_cluster.swarm_nodes()
    assert sorted(nodes) == ["node-1", "node-2", "node-3"]
    assert {name: attrs["Status"]["State"] for name, attrs in nodes.items()} == dict.fromkeys(nodes, "ready")
    assert nodes["node-1"]["Spec"]["Role"] == "manager" and nodes["node-1"]["ManagerStatus"]["Leader"]
    assert nodes["node-2"]["Spec"]["Role"] == nodes["node-3"]["Spec"]["Role"] == "worker"
    assert {name: attrs["Spec"].get("Labels") or {} for name, attrs in nodes.items()} == {
        "node-1": {}, "node-2": {"hetero.role": "cpu"}, "node-3": {"hetero.role": "gpu"}}
    manager = swarm_cluster.client("node-1")
    assert manager.swarm.attrs["Spec"]["Dispatcher"]["HeartbeatPeriod"] == HEARTBEAT_SECONDS * 1_000_000_000
    # Each URL is the engine of the node it is named for, in the swarm, on overlay2.
    for node, url in swarm_cluster.node_engines.items():
        info = docker.DockerClient(base_url=url).info()
        assert (info["Name"], info["Swarm"]["LocalNodeState"], info["Driver"]) == (node, "active", "overlay2")
        # The network between the nodes is as small as this machine's eth0.
        mtu = swarm_cluster.container(node).exec_run(["cat", "/sys/class/net/eth0/mtu"]).output
        assert mtu.decode().strip() == str(UNDERLAY_MTU)
    assert swarm_cluster.manager_url == swarm_cluster.node_engines["node-1"]
    assert swarm_cluster.overlay_mtu == OVERLAY_MTU


def test_the_cli_environment_talks_to_the_swarm_and_the_host_engine_stays_out(
        docker_client: docker.DockerClient, swarm_cluster: SwarmCluster) -> None:
    if shutil.which("docker") is None:
        pytest.skip("no docker command line on this machine")
    listed = subprocess.run(["docker", "node", "ls", "--format", "{{.Hostname}}"], env=swarm_cluster.env(),
                            capture_output=True, text=True, timeout=60, check=False)
    assert listed.returncode == 0, listed.stderr
    assert sorted(listed.stdout.split()) == ["node-1", "node-2", "node-3"]
    assert host_swarm_state(docker_client) == "inactive"


def test_a_file_of_the_shared_folder_is_seen_by_a_container_on_every_node(
        swarm_cluster: SwarmCluster, training_image: str) -> None:
    folder = swarm_cluster.shared / f"job-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    (folder / "hello.txt").write_text("written on the host\n")
    swarm_cluster.load_image_everywhere(training_image)
    for node in NODE_NAMES:
        # The same path on the node is the same folder: read the host's file, write one back.
        out = swarm_cluster.client(node).containers.run(
            training_image, ["sh", "-c", f"cat {folder}/hello.txt && echo {node} > {folder}/{node}.txt"],
            volumes={str(folder): {"bind": str(folder), "mode": "rw"}}, network_mode="none", remove=True)
        assert out == b"written on the host\n"
        assert (folder / f"{node}.txt").read_text() == f"{node}\n"


SERVER = """
import socket
s = socket.create_server(("0.0.0.0", 7000))
conn, _ = s.accept()
size = 0
while chunk := conn.recv(65536):
    size += len(chunk)
conn.sendall(str(size).encode())
conn.close()
"""

# Connects to the server by name, sends 1 MB and prints: the server's address as resolved, what the
# server received ("stalled" when the transfer hangs), the container's MTU on the overlay.
CLIENT = """
import socket, sys, time
name = sys.argv[1]
address = socket.gethostbyname(name)
deadline = time.monotonic() + 30
while True:
    try:
        conn = socket.create_connection((name, 7000), timeout=10)
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.2)
try:
    conn.sendall(b"x" * 1_000_000)
    conn.shutdown(socket.SHUT_WR)
    reply = conn.recv(100).decode()
except TimeoutError:
    reply = "stalled"
mtu = open("/sys/class/net/eth0/mtu").read().strip()
print(address, reply, mtu)
"""


def send_across_an_overlay(cluster: SwarmCluster, image: str, options: dict[str, str]) -> tuple[list[str], str]:
    """A server on node-2 and a client on node-3 on a new attachable overlay with these driver
    options: what the client printed (CLIENT), and the server's address on the overlay."""
    for node in ("node-2", "node-3"):
        cluster.load_image(node, image)
    suffix = uuid.uuid4().hex[:8]
    network = cluster.client("node-1").networks.create(f"harness-overlay-{suffix}", driver="overlay",
                                                        attachable=True, options=options)
    server = cluster.client("node-2").containers.run(image, ["python3", "-c", SERVER], name=f"server-{suffix}",
                                                     network=network.name, detach=True)
    try:
        server.reload()
        address = server.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]
        out = cluster.client("node-3").containers.run(image, ["python3", "-c", CLIENT, server.name],
                                                      network=network.name, remove=True)
        return out.decode().split(), address
    finally:
        server.remove(force=True)
        network.remove()


def test_containers_on_two_nodes_talk_over_an_overlay_network(swarm_cluster: SwarmCluster,
                                                              training_image: str) -> None:
    # The driver option is the MTU of the network under the overlay: libnetwork gives the
    # containers' interfaces that minus VXLAN's 50 bytes (drivers/overlay: maxMTU).
    printed, address = send_across_an_overlay(swarm_cluster, training_image,
                                              {"com.docker.network.driver.mtu": str(OVERLAY_MTU)})
    assert printed == [address, "1000000", str(OVERLAY_MTU - VXLAN_OVERHEAD)]


def test_an_added_node_without_the_shared_folder_joins_and_its_death_is_noticed(swarm_cluster: SwarmCluster) -> None:
    node = swarm_cluster.add_node(shared=False)
    try:
        assert swarm_cluster.node_state(node) == "ready"
        assert swarm_cluster.swarm_nodes()[node]["Spec"]["Role"] == "worker"
        shared = str(swarm_cluster.shared)
        assert swarm_cluster.container(node).exec_run(["test", "-d", shared]).exit_code == 1
        assert swarm_cluster.container("node-1").exec_run(["test", "-d", shared]).exit_code == 0
        swarm_cluster.kill_node(node)
        killed = time.monotonic()
        while swarm_cluster.node_state(node) != "down":
            assert time.monotonic() - killed < 20, "the manager did not notice the dead node"
            time.sleep(0.2)
        swarm_cluster.timings["dead node noticed"] = time.monotonic() - killed
    finally:
        swarm_cluster.remove_node(node)
    assert node not in swarm_cluster.swarm_nodes() and node not in swarm_cluster.nodes
    assert sorted(swarm_cluster.swarm_nodes()) == ["node-1", "node-2", "node-3"]


def test_what_a_killed_session_left_is_removed_and_a_live_cluster_stays(
        docker_client: docker.DockerClient, swarm_cluster: SwarmCluster, swarm_node_image: str) -> None:
    # The identity of this very process with another start time: a process that is gone.
    machine, pid, _ = current_driver().rsplit("/", 2)
    folder = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}stale-"))
    orphan = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}orphan-"))  # a session killed before its nodes
    for made in (folder, orphan):
        (made / OWNER_FILE).write_text(f"{machine}/{pid}/0")
    labels = {LABEL: f"stale-{uuid.uuid4().hex[:8]}", OWNER_LABEL: f"{machine}/{pid}/0", FOLDER_LABEL: str(folder)}
    network = docker_client.networks.create(f"hetero-swarm-{labels[LABEL]}", labels=labels)
    container = docker_client.containers.create(swarm_node_image, name=f"hetero-swarm-{labels[LABEL]}-node-1",
                                                labels=labels, network_mode="none")
    try:
        removed = remove_stale_clusters(docker_client, swarm_node_image)
        assert sorted(removed) == sorted([container.name, network.name])
        assert not folder.exists() and not orphan.exists()
    finally:
        remove_cluster(docker_client, labels[LABEL], swarm_node_image)
        shutil.rmtree(orphan, ignore_errors=True)
    alive = docker_client.containers.list(filters={"label": f"{LABEL}={swarm_cluster.token}"})
    assert len(alive) == len(swarm_cluster.nodes) and swarm_cluster.shared.is_dir()
