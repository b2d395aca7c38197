"""Job networks the engine will not remove (moby#42119) and the subnets job networks get
(backend/networks.py), without Docker: the stuck check against a stub engine that refuses as Docker
20.10 does, the watcher giving up on a stuck network at once, the Docker engine's `find` marking it,
and `ps`, `clean` and a later run over the in-memory engine (tests/support/fake_backend.py)."""

from __future__ import annotations

import ipaddress
import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import docker.errors
import pytest
from fake_backend import FakeBackend, exits
from testkit import invoke

from emulator import api
from emulator.backend import Resource, registry
from emulator.backend.docker import DockerBackend
from emulator.backend.docker_parts import Tracker
from emulator.backend.engine_memory import EngineMemory
from emulator.backend.networks import (
    RESTART_FIX,
    STUCK_PAUSES,
    NetworkStuck,
    StuckNetworks,
    candidate_subnets,
    local_routes,
    remove_network,
    subnet_prefix,
)
from emulator.backend.reaper import reap
from emulator.jobspec import validate
from emulator.planning.plan import LABEL_DRIVER, LABEL_JOB, LABEL_MANAGED, network_name
from emulator.reports.console import RecordingReporter

NET_ID = "5e7" * 21 + "0"
NET = network_name("stuck-job")
# Docker 20.10's words (libnetwork network.go `delete`), as docker-py raises them.
REFUSAL = f"error while removing network: network job-net id {NET_ID} has active endpoints"


def api_error(status: int, message: str) -> docker.errors.APIError:
    return docker.errors.APIError(message, response=mock.Mock(status_code=status), explanation=message)


class Volumes:
    """The engine's volumes, where a stuck network's mark is kept (networks.StuckNetworks)."""

    def __init__(self) -> None:
        self.held: dict[str, dict[str, Any]] = {}

    def volumes(self, filters: dict[str, str]) -> dict[str, Any]:
        key = filters["label"]
        return {"Volumes": [v for v in self.held.values() if key in v["Labels"]]}

    def create_volume(self, name: str, labels: dict[str, str]) -> dict[str, Any]:
        return self.held.setdefault(name, {"Name": name, "Labels": labels})

    def remove_volume(self, name: str) -> None:
        del self.held[name]


class RefusingEngine(Volumes):
    """A network whose removal the engine refuses `refusals` times (None: always) for active endpoints,
    with `attached` containers on it per its inspect."""

    def __init__(self, refusals: int | None, attached: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.refusals = refusals
        self.attached = attached or {}
        self.removes = 0
        self.gone = False

    def remove_network(self, ident: str) -> None:
        if self.gone:
            raise docker.errors.NotFound("no such network")
        self.removes += 1
        if self.refusals is None or self.refusals > 0:
            if self.refusals is not None:
                self.refusals -= 1
            raise api_error(403, REFUSAL)
        self.gone = True

    def inspect_network(self, ident: str) -> dict[str, Any]:
        return {"Id": NET_ID, "Name": "job-net", "Containers": self.attached}


def test_a_passing_refusal_is_tried_again_and_removes_the_network() -> None:
    engine, pauses = RefusingEngine(refusals=1), []
    table = StuckNetworks(engine)
    assert remove_network(engine, "job-net", table, docker.errors.NotFound, sleep=pauses.append)
    assert engine.gone and pauses == [STUCK_PAUSES[0]]
    assert table.ids() == set()


def test_a_network_refused_with_nothing_attached_is_told_stuck_within_seconds_and_marked_in_the_engine(
        ) -> None:
    engine, pauses = RefusingEngine(refusals=None), []
    table = StuckNetworks(engine)
    with pytest.raises(NetworkStuck) as info:
        remove_network(engine, "job-net", table, docker.errors.NotFound, sleep=pauses.append)
    assert sum(pauses) < 5 and engine.removes == len(STUCK_PAUSES) + 1  # not the watcher's 10 minutes
    assert info.value.networks == ["job-net"] and "moby#42119" in info.value.message
    assert RESTART_FIX in (info.value.hint or "")
    assert table.ids() == {NET_ID}
    # In the engine, not in a state folder: a `clean` or a run with another one sees it too.
    assert StuckNetworks(engine).ids() == {NET_ID} and list(engine.held) == [f"hetero-emu-stuck-network-{NET_ID[:12]}"]

    # Known stuck: tried once more (an engine restart would free it), without the pauses.
    pauses.clear()
    with pytest.raises(NetworkStuck):
        remove_network(engine, "job-net", table, docker.errors.NotFound, sleep=pauses.append)
    assert pauses == []


def test_a_refusal_with_a_container_still_attached_is_not_called_stuck() -> None:
    engine = RefusingEngine(refusals=None, attached={"c0ffee": {"Name": "algo-1"}})
    table = StuckNetworks(engine)
    with pytest.raises(docker.errors.APIError):
        remove_network(engine, "job-net", table, docker.errors.NotFound, sleep=lambda s: None)
    assert table.ids() == set()


def test_a_network_already_gone_is_no_error() -> None:
    engine = RefusingEngine(refusals=0)
    engine.gone = True
    assert remove_network(engine, "job-net", StuckNetworks(engine), docker.errors.NotFound) is False


def test_the_watcher_gives_up_on_a_stuck_network_at_once_and_removes_the_rest() -> None:
    removed: list[str] = []
    lines: list[str] = []

    def remove_network_stuck(ident: str) -> None:
        raise NetworkStuck(["job-net"])

    slept: list[float] = []
    done = reap(["c1", "c2"], ["n1"], removed.append, remove_network_stuck, lines.append, sleep=slept.append)
    assert done is False and removed == ["c1", "c2"] and slept == []  # no retry, no 10-minute patience
    assert any("left network n1" in line and "moby#42119" in line for line in lines)


def test_job_networks_get_the_smallest_block_of_at_least_a_24() -> None:
    assert subnet_prefix(1) == 24 and subnet_prefix(253) == 24
    assert subnet_prefix(254) == 23 and subnet_prefix(1000) == 22


def test_candidate_blocks_skip_held_ones_and_start_after_the_last_jobs() -> None:
    pool = ipaddress.IPv4Network("172.16.0.0/22")
    assert candidate_subnets(8, ["172.16.1.0/24", "10.0.0.0/8", "fe80::/64", "not a subnet"], None, pool) == [
        "172.16.0.0/24", "172.16.2.0/24", "172.16.3.0/24"]
    assert candidate_subnets(8, [], "172.16.2.0/24", pool)[:2] == ["172.16.3.0/24", "172.16.0.0/24"]
    # A LAN route over the whole range leaves nothing: the engine then picks (backend/docker.py).
    assert candidate_subnets(8, ["172.16.0.0/12"], None, pool) == []


def test_local_routes_are_read_from_the_kernels_table(tmp_path: Path) -> None:
    table = tmp_path / "route"
    table.write_text(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "eth0\t00000000\t010011AC\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"  # default route: skipped
        "eth0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n")  # 172.17.0.0/16
    assert local_routes(table) == ["172.17.0.0/16"]
    assert local_routes(tmp_path / "missing") == []


def test_the_docker_engines_find_marks_a_recorded_network_stuck_with_the_fix(tmp_path: Path) -> None:
    listed = [{"Id": NET_ID, "Name": "job-net", "Labels": {LABEL_MANAGED: "true", LABEL_JOB: "job",
                                                         LABEL_DRIVER: "gone-host:1:1"}},
              {"Id": "other", "Name": "job2-net", "Labels": {LABEL_MANAGED: "true", LABEL_JOB: "job2"}}]
    engine = Volumes()
    engine.containers = lambda all, filters: []  # type: ignore[attr-defined]  # noqa: A006
    engine.networks = lambda filters: listed  # type: ignore[attr-defined]
    backend = DockerBackend(client=SimpleNamespace(api=engine), memory=EngineMemory(tmp_path))  # type: ignore[arg-type]
    table = StuckNetworks(engine)
    table.record(NET_ID, "job-net")
    table.record("removed-since", "old-net")

    found = {r.name: r for r in backend.find()}
    assert found["job-net"].stuck and "sudo systemctl restart docker" in found["job-net"].status
    assert not found["job2-net"].stuck
    assert table.ids() == {NET_ID}  # a network removed since (after an engine restart) is forgotten


# Over the in-memory engine: a run, `ps`, `clean`, and the next run.

@pytest.fixture
def stuck_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeBackend:
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HETERO_EMU_ENGINE", "fake")
    fake = FakeBackend({"algo-1": exits(0), "algo-2": exits(0)}, stuck_networks=[NET])
    monkeypatch.setitem(registry._FACTORIES, "fake", lambda: fake)
    return fake


def job(tmp_path: Path, name: str) -> Any:
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "t.py").write_text("")
    return validate({"job_name": name, "entry_point": "t.py", "source_dir": "code",
                     "instance_groups": [{"instance_group_name": "g", "instance_type": "ml.c5.xlarge",
                                          "instance_count": 2}], "output_path": "out"}, base_dir=tmp_path)


def test_a_run_whose_network_sticks_says_so_at_once_and_keeps_its_outcome(
        tmp_path: Path, stuck_engine: FakeBackend) -> None:
    stuck_engine.stuck_networks = {network_name("stuck-job")}
    reporter = RecordingReporter()
    result = api.run(job(tmp_path, "stuck-job"), engine_name="fake", reporter=reporter)
    assert result.status == "Completed"
    warned = " ".join(reporter.warnings)
    assert "moby#42119" in warned and RESTART_FIX in warned
    assert stuck_engine.containers == {}  # everything else removed


def test_ps_clean_and_a_later_run_treat_a_stuck_network_as_no_blocking_leftover(
        tmp_path: Path, stuck_engine: FakeBackend) -> None:
    stuck_engine.add_foreign_network(NET, "stuck-job")
    stuck_engine.found_stuck.add(NET)
    stuck_engine.leftovers = [Resource("container", "gone-job-algo-1", "gone-job", {}, "exited")]

    ps = invoke("ps")
    assert ps.returncode == 0
    row = next(line for line in ps.stdout.splitlines() if NET in line)
    assert " stuck " in row and "moby#42119" in row and RESTART_FIX in row

    clean = invoke("clean", "--json")
    assert clean.returncode == 0  # stuck networks alone do not fail `clean` (nor CI's .ci/run)
    report = json.loads(clean.stdout)
    assert report["stuck_networks"] == [NET]
    assert {"kind": "network", "name": NET, "job": "stuck-job"} not in report["removed"]
    said = invoke("clean")
    assert said.returncode == 0 and f"will not remove them until it restarts: {NET}" in said.stdout

    stuck_engine.leftovers = []
    reporter = RecordingReporter()
    assert api.run(job(tmp_path, "next-job"), engine_name="fake", reporter=reporter).status == "Completed"
    assert not any("still there" in w for w in reporter.warnings)


def test_a_run_of_the_stuck_networks_job_name_is_refused_with_the_fix(
        tmp_path: Path, stuck_engine: FakeBackend) -> None:
    stuck_engine.add_foreign_network(NET, "stuck-job")
    stuck_engine.found_stuck.add(NET)
    with pytest.raises(Exception) as info:
        api.run(job(tmp_path, "stuck-job"), engine_name="fake", reporter=RecordingReporter())
    assert "is stuck in the engine" in str(info.value) and RESTART_FIX in (getattr(info.value, "hint", "") or "")


class TeardownEngine(Volumes):
    """The calls a Docker teardown makes, recorded: `hosts` running containers attached to the job
    network; removing the network is refused for active endpoints `refusals` times (None: always)."""

    def __init__(self, hosts: int, refusals: int | None = 0) -> None:
        super().__init__()
        self.attached = {f"c{i}": {"Name": f"job-algo-{i}"} for i in range(1, hosts + 1)}
        self.calls: list[tuple[str, str]] = []
        self.in_flight = self.most_in_flight = 0
        self.lock = threading.Lock()
        self.network = RefusingEngine(refusals)

    def inspect_network(self, ident: str) -> dict[str, Any]:
        return {"Id": NET_ID, "Name": "job-net", "Containers": dict(self.attached)}

    def disconnect_container_from_network(self, container: str, network: str, force: bool) -> None:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(0.01)  # long enough for a second disconnect to overlap, were they concurrent
        with self.lock:
            self.in_flight -= 1
            self.calls.append(("disconnect", container))
            self.attached.pop(container, None)

    def remove_container(self, name: str, force: bool, v: bool) -> None:
        with self.lock:
            self.calls.append(("remove_container", name))

    def remove_network(self, ident: str) -> None:
        self.calls.append(("remove_network", ident))
        self.network.remove_network(ident)


def test_teardown_disconnects_each_running_host_one_at_a_time_before_removing_the_containers(
        tmp_path: Path) -> None:
    engine = TeardownEngine(hosts=8)
    backend = DockerBackend(client=SimpleNamespace(api=engine), memory=EngineMemory(tmp_path))  # type: ignore[arg-type]
    backend.remove_resources([Resource("container", f"c{i}", "job", {}) for i in range(1, 9)]
                             + [Resource("network", NET_ID, "job", {})])

    kinds = [kind for kind, _ in engine.calls]
    assert kinds.count("disconnect") == 8 and engine.most_in_flight == 1
    assert kinds.index("remove_container") > max(i for i, k in enumerate(kinds) if k == "disconnect")
    assert kinds[-1] == "remove_network" and engine.network.gone


def test_a_stuck_network_at_teardown_leaves_the_watcher_nothing_to_retry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("emulator.backend.networks.STUCK_PAUSES", (0.01,))
    engine = TeardownEngine(hosts=2, refusals=None)
    backend = DockerBackend(client=SimpleNamespace(api=engine), memory=EngineMemory(tmp_path))  # type: ignore[arg-type]
    tracker = Tracker(dict)
    plan = SimpleNamespace(job_name="job")
    told: list[str] = []
    tracker.reapers["job"] = SimpleNamespace(forget=told.append)  # type: ignore[assignment]
    tracker.outstanding["job"] = {"c1": "container", "c2": "container", NET_ID: "network"}

    with pytest.raises(NetworkStuck):
        tracker.remove(plan, backend.remove_resources, engine_lost=False)  # type: ignore[arg-type]
    assert ("remove_container", "c1") in engine.calls and ("remove_container", "c2") in engine.calls
    assert tracker.outstanding["job"] == {} and sorted(told) == sorted(["c1", "c2", NET_ID])
