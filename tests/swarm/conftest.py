"""The `swarm_cluster` fixture: one real three-node Docker swarm per test session, made of
docker-in-docker containers of the host's engine (cluster.py), and the timings of making it and the
table of faults (fault_table.py) printed at the end of the session; the `engine` fixture of the engine
contract suite (each test once on this machine's engine, once on that swarm)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from cluster import CLIENT_TIMEOUT, NODE_VARIANT, SwarmCluster, host_swarm_state, remove_stale_clusters
from engines import Engine
from fault_table import ROWS, table

#: The timings of every cluster of the session (SwarmCluster.timings), for the terminal summary.
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="session")
def swarm_node_image(docker_client: docker.DockerClient) -> str:
    """The node image (images/swarm-node/), built offline once per machine, skipped when up to date."""
    from emulator.backend.image_build import build_image
    from emulator.training_images.image_recipes import load_recipe

    return build_image(docker_client, load_recipe(NODE_VARIANT), progress=lambda m: None).image


@pytest.fixture(scope="session")
def swarm_cluster(docker_client: docker.DockerClient, swarm_node_image: str) -> Iterator[SwarmCluster]:
    """A swarm of node-1 (manager), node-2 (`hetero.role=cpu`) and node-3 (`hetero.role=gpu`),
    sharing one folder at the same path; removed at the end of the session whatever happened. The
    host's own engine must not be in swarm mode, before or after."""
    assert host_swarm_state(docker_client) == "inactive", "the host's own engine is in swarm mode"
    remove_stale_clusters(docker_client, swarm_node_image)
    # A client of its own: docker_client gives up on a read after 10 s, and `docker save` of a large
    # image can be silent that long while the engine is busy with other work.
    cluster = SwarmCluster(docker.from_env(timeout=CLIENT_TIMEOUT), swarm_node_image)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
        TIMINGS.update(cluster.timings)
    assert host_swarm_state(docker_client) == "inactive", "the host's own engine was put in swarm mode"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if ROWS:
        terminalreporter.write_sep("-", "swarm fault table")
        terminalreporter.write_line(table())
    if not TIMINGS:
        return
    terminalreporter.write_sep("-", "swarm harness timings")
    for what, seconds in TIMINGS.items():
        terminalreporter.write_line(f"{what}: {seconds:.1f} s")


@pytest.fixture(params=["docker", "swarm"])
def engine(request: pytest.FixtureRequest, docker_client: docker.DockerClient, training_image: str,
           tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Engine:
    """The engine a contract test runs on. "docker": this machine's engine, the job folders under
    tmp_path. "swarm": the session's swarm_cluster, reached through the swarm engine's variables (set
    in os.environ, so a CLI subprocess gets them too), the job folders in a folder of its own under
    the share every node sees (a bind mount must name a path each node has)."""
    if request.param == "docker":
        return Engine("docker", tmp_path, docker_client)
    cluster: SwarmCluster = request.getfixturevalue("swarm_cluster")
    monkeypatch.setenv("HETERO_EMU_SWARM_MANAGER", cluster.manager_url)
    monkeypatch.setenv("HETERO_EMU_SWARM_NODES", ",".join(f"{n}={u}" for n, u in cluster.node_engines.items()))
    monkeypatch.setenv("HETERO_EMU_SWARM_MTU", str(cluster.overlay_mtu))
    folder = cluster.shared / f"{request.node.originalname}-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    return Engine("swarm", folder, docker_client, cluster)
