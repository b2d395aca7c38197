"""Faults across machines, on the real swarm of tests/swarm/cluster.py: a node dying mid-job, a node
without the job's image, a node that cannot see the shared folder. Each asserts what the run reports
and measures the seconds until nothing of the job is left on any surviving node (no container
labelled with the job, no service, no network); the table of them is printed at the end of the
session (conftest.py).

Every fault is made on a node added for the test (`add_node`) and removed afterwards, so the three
nodes of the session's cluster stay as other tests expect them."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cluster import NODE_NAMES, SwarmCluster
from fault_table import record

from emulator import api
from emulator.backend.swarm import ENV_MANAGER, ENV_MTU, ENV_NODES
from emulator.errors import EnvironmentProblem
from emulator.options import RunOptions
from emulator.planning.plan import LABEL_HOST, LABEL_JOB
from emulator.reports.console import RecordingReporter

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
#: Each host says READY (into its log), then runs until it is stopped.
SLEEPER = """\
import json, time
from pathlib import Path
host = json.loads(Path("/opt/ml/input/config/resourceconfig.json").read_text())["current_host"]
print("READY", host, flush=True)
time.sleep(600)
"""
#: The label the dying node is given, so that one host is placed on it.
DOOMED = {"hetero.fault": "doomed"}


@contextmanager
def swarm_env(cluster: SwarmCluster, nodes: Sequence[str]) -> Iterator[dict[str, str]]:
    """os.environ aimed at the cluster's manager, with `nodes` as the node engines images are copied
    through (the swarm engine reads them when it is made); yields the environment for a CLI run."""
    env = {ENV_MANAGER: cluster.manager_url, ENV_MTU: str(cluster.overlay_mtu),
           ENV_NODES: ",".join(f"{n}={cluster.node_engines[n]}" for n in nodes)}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield {**os.environ, "NO_COLOR": "1"}
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def job_spec(cluster: SwarmCluster, folder: Path, job: str, groups: list[dict[str, Any]]) -> Path:
    """A spec file of SLEEPER hosts whose job folder is in the cluster's shared folder."""
    import yaml

    code = folder / "code"
    code.mkdir(parents=True)
    (code / "sleeper.py").write_text(SLEEPER)
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump({
        "job_name": job, "output_path": str(cluster.shared / "out"), "source_dir": "code",
        "container_entry_point": ["python3", "/opt/ml/code/sleeper.py"], "instance_groups": groups}))
    return path


def group(name: str, count: int, **placement: str) -> dict[str, Any]:
    raw: dict[str, Any] = {"instance_group_name": name, "instance_type": "ml.c5.xlarge", "instance_count": count}
    if placement:
        raw["placement"] = placement
    return raw


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def left_of(cluster: SwarmCluster, job: str, nodes: Sequence[str]) -> list[str]:
    """What of the job is left: services and networks on the manager, containers and networks on each of `nodes`."""
    label = {"label": f"{LABEL_JOB}={job}"}
    manager = cluster.client(cluster.manager).api
    found = [f"service {s['Spec']['Name']}" for s in manager.services(filters=label)]
    for node in nodes:
        engine = cluster.client(node).api
        found += [f"{node}: container {c['Names'][0]}" for c in engine.containers(all=True, filters=label)]
        found += [f"{node}: network {n['Name']}" for n in engine.networks(filters=label)]
    return found


def seconds_until_gone(cluster: SwarmCluster, job: str, nodes: Sequence[str], since: float,
                       timeout: float = 60) -> float:
    """Poll every 0.1 s until nothing of the job is left on `nodes`; seconds since `since`."""
    deadline = time.monotonic() + timeout
    while left := left_of(cluster, job, nodes):
        assert time.monotonic() < deadline, f"still there after {timeout:g} s: {left}"
        time.sleep(0.1)
    return time.monotonic() - since


def hosts_created(cluster: SwarmCluster, job: str, since: int) -> list[str]:
    """Names of the services of the job's hosts the manager created since `since` (epoch seconds):
    the helpers (the node checks) carry no host label."""
    events = cluster.client(cluster.manager).api.events(
        since=since, until=int(time.time()) + 1, filters={"type": "service", "event": "create"}, decode=True)
    names = [str(e["Actor"]["Attributes"].get("name", "")) for e in events]
    return [n for n in names if n.startswith(f"{job}-algo-")]


def label_node(cluster: SwarmCluster, node: str, labels: dict[str, str]) -> None:
    """Give a node labels, through the manager (`docker node update --label-add`)."""
    entry = cluster.client(cluster.manager).nodes.get(cluster.node_id(node))
    spec = dict(entry.attrs["Spec"])
    spec["Labels"] = {**(spec.get("Labels") or {}), **labels}
    entry.update(spec)


def node_of_hosts(cluster: SwarmCluster, job: str) -> dict[str, str]:
    """Each host of the job (algo-N) -> the host name of the node its task was given to. Whatever the
    task's state: a node reports a task running a moment after its container has started (and said
    READY), so a filter on "running" once missed a host that was running."""
    manager = cluster.client(cluster.manager).api
    names = {attrs["ID"]: name for name, attrs in cluster.swarm_nodes().items()}
    services = manager.services(filters={"label": f"{LABEL_JOB}={job}"})
    hosts = {s["ID"]: s["Spec"]["Labels"][LABEL_HOST] for s in services if LABEL_HOST in s["Spec"]["Labels"]}
    tasks = manager.tasks(filters={"service": list(hosts)}) if hosts else []
    return {hosts[t["ServiceID"]]: names.get(t["NodeID"], "?") for t in tasks if t.get("NodeID")}


@contextmanager
def extra_node(cluster: SwarmCluster, image: str, *, shared: bool, with_image: bool = True) -> Iterator[str]:
    """A node added for one fault, so the session's three stay as other tests expect; the three have
    the image, the new one too unless `with_image` is false. Removed afterwards, whatever happened."""
    cluster.load_image_everywhere(image)
    node = cluster.add_node(shared=shared)
    try:
        if with_image:
            cluster.load_image(node, image)
        yield node
    finally:
        cluster.remove_node(node)


def cli_run(spec: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "emulator", "run", str(spec), "--engine", "swarm"],
                          capture_output=True, text=True, timeout=300, cwd=REPO, env=env, check=False)


# --------------------------------------------------------------------------------------------------
# 1. A node dies mid-job


def test_a_node_dying_mid_job_fails_its_host_names_the_node_and_stops_the_rest(
        swarm_cluster: SwarmCluster, training_image: str, tmp_path: Path) -> None:
    cluster = swarm_cluster
    with extra_node(cluster, training_image, shared=True) as node:
        label_node(cluster, node, DOOMED)
        job = unique("swarm-node-dies")
        # `rest` spreads over node-1..3 (a host each, by hostname), `doomed` goes to the new node.
        spec = api.load(job_spec(cluster, tmp_path, job, [group("rest", 3), group("doomed", 1, **DOOMED)]))
        logs = cluster.shared / "out" / job / "logs"
        killed: dict[str, Any] = {}

        def kill_when_all_run() -> None:
            try:
                deadline = time.monotonic() + 240
                while sum("READY" in p.read_text() for p in logs.glob("algo-*.log")) < 4:
                    assert time.monotonic() < deadline, "the four hosts never all said READY"
                    time.sleep(0.1)
                killed["placed"] = node_of_hosts(cluster, job)
                killed["at"] = time.monotonic()
                cluster.kill_node(node)
            except BaseException as err:  # noqa: BLE001 - reported by the test's thread
                killed["error"] = err

        killer = threading.Thread(target=kill_when_all_run, daemon=True)
        with swarm_env(cluster, [*NODE_NAMES, node]):
            killer.start()
            result = api.run(spec, RunOptions(grace=5), engine_name="swarm", reporter=RecordingReporter())
            returned = time.monotonic()
        killer.join(5)
        assert "error" not in killed, killed.get("error")
        survivors = list(NODE_NAMES)
        teardown = seconds_until_gone(cluster, job, survivors, killed["at"])
        record(f"a worker node dies mid-job (driver returned in {returned - killed['at']:.1f} s)",
               result.status, teardown, len(left_of(cluster, job, survivors)))

        assert killed["placed"] == {"algo-1": "node-1", "algo-2": "node-2", "algo-3": "node-3", "algo-4": node}
        assert result.status == "Failed"
        assert result.failure_reason is not None
        assert "algo-4 (doomed)" in result.failure_reason and f"its node {node} went down" in result.failure_reason
        hosts = {h.host: h for h in result.hosts}
        assert f"its node {node} went down" in (hosts["algo-4"].failure_reason or "")
        for other in ("algo-1", "algo-2", "algo-3"):
            # Stopped by the emulator: SIGTERM through the engine of their node, which reports the exit.
            assert (hosts[other].failure_reason or "").startswith("stopped by the emulator"), hosts[other]
            assert hosts[other].exit_code == 143, hosts[other]
        assert returned - killed["at"] < 60


# --------------------------------------------------------------------------------------------------
# 2. A node without the image, 3. a node that cannot see the shared folder


def refused_before_any_host(cluster: SwarmCluster, tmp_path: Path, nodes: Sequence[str], fault: str,
                            expected: Sequence[str]) -> None:
    """Run a job with the API, then with the CLI: EnvironmentProblem (exit 3, one readable message
    without a traceback) whose message holds each of `expected`; no host was ever created, and
    nothing of either job is left on any node."""
    job = unique("swarm-refused")
    spec_path = job_spec(cluster, tmp_path / "api", job, [group("g", 2)])
    since = int(time.time()) - 1
    with swarm_env(cluster, nodes) as env:
        with pytest.raises(EnvironmentProblem) as raised:
            api.run(api.load(spec_path), RunOptions(grace=5), engine_name="swarm", reporter=RecordingReporter())
        ended = time.monotonic()
        teardown = seconds_until_gone(cluster, job, cluster.nodes, ended)
        record(fault, "EnvironmentProblem (exit 3) before any host", teardown,
               len(left_of(cluster, job, cluster.nodes)))
        for text in expected:
            assert text.format(job_dir=cluster.shared / "out" / job) in raised.value.message, raised.value.message
        assert hosts_created(cluster, job, since) == []

        cli_job = unique("swarm-refused-cli")
        cli_spec = job_spec(cluster, tmp_path / "cli", cli_job, [group("g", 2)])
        done = cli_run(cli_spec, env)
    assert done.returncode == 3, done.stdout + done.stderr
    for text in expected:
        assert text.format(job_dir=cluster.shared / "out" / cli_job) in done.stderr, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert hosts_created(cluster, cli_job, since) == []
    assert left_of(cluster, cli_job, cluster.nodes) == []


def test_a_node_without_the_image_is_named_before_any_host_starts(
        swarm_cluster: SwarmCluster, training_image: str, tmp_path: Path) -> None:
    with extra_node(swarm_cluster, training_image, shared=True, with_image=False) as node:
        # Not in HETERO_EMU_SWARM_NODES: the engine cannot copy the image into it.
        refused_before_any_host(swarm_cluster, tmp_path, NODE_NAMES,
                                "a node without the image (not among the node engines)",
                                [f"node {node} does not have the image {training_image}"])


def test_a_node_that_cannot_see_the_shared_folder_is_named_with_the_folder_before_any_host_starts(
        swarm_cluster: SwarmCluster, training_image: str, tmp_path: Path) -> None:
    with extra_node(swarm_cluster, training_image, shared=False) as node:
        refused_before_any_host(swarm_cluster, tmp_path, [*NODE_NAMES, node],
                                "a node that cannot see the shared folder", [f"node {node} cannot see {{job_dir}}"])
