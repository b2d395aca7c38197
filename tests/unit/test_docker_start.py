"""How backend/docker.py starts a job quickly without losing what the slow way guaranteed, against a
stub engine (no Docker): hosts created and attached concurrently, yet a Ctrl-C still leaves no
container unrecorded and starts no new create; one `docker ps` per poll instead of an inspect per
host; an exit noticed when the host's stream ends; the engine's last subnet reused for the next job
network (a /24 of the job range first), and the engine asked again when another network holds it; the
image inspected once for its presence and its labels."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import docker.errors
import pytest
import requests

from emulator.backend import docker as backend_docker
from emulator.backend.docker import DockerBackend, SubnetMemory
from emulator.jobspec import JobSpec
from emulator.planning.plan import Plan, make_plan


def api_error(status: int, message: str) -> docker.errors.APIError:
    return docker.errors.APIError(message, response=mock.Mock(status_code=status))


class StubEngine:
    """The few APIClient calls the start of a job makes, recorded; every created container runs."""

    def __init__(self, on_create: Callable[[str], None] = lambda name: None) -> None:
        self.lock = threading.Lock()
        self.on_create = on_create
        self.calls: list[tuple[str, Any]] = []
        self.created: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.status: dict[str, str] = {}  # container name -> docker ps status
        self.subnets_held: set[str] = set()  # refused at create (a job beside took it)
        self.subnets_listed: list[str] = []  # what `docker network ls` shows other networks hold
        self.engine_ends: list[socket.socket] = []

    def _call(self, name: str, arg: Any = None) -> None:
        with self.lock:
            self.calls.append((name, arg))

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    # containers
    def create_host_config(self, **options: Any) -> dict[str, Any]:
        return options

    def create_endpoint_config(self, **options: Any) -> dict[str, Any]:
        return options

    def create_networking_config(self, endpoints: dict[str, Any]) -> dict[str, Any]:
        return endpoints

    def create_container(self, **options: Any) -> dict[str, str]:
        name = options["name"]
        self._call("create_container", name)
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            self.on_create(name)
        finally:
            with self.lock:
                self.in_flight -= 1
        with self.lock:
            self.created.append(name)
            self.status[name] = "created"
        return {"Id": f"id-{name}"}

    def attach_socket(self, name: str, params: dict[str, int]) -> socket.socket:
        self._call("attach_socket", name)
        ours, engine = socket.socketpair()
        self.engine_ends.append(engine)
        return ours

    def containers(self, all: bool, filters: dict[str, list[str]]) -> list[dict[str, Any]]:  # noqa: A002
        self._call("containers", filters)
        # As the engine does: a name filter matches any part of the name.
        return [{"Names": [f"/{name}"]} for name, status in self.status.items()
                if status in filters["status"] and any(part in name for part in filters["name"])]

    def inspect_container(self, name: str) -> dict[str, Any]:
        self._call("inspect_container", name)
        status = self.status[name]
        return {"State": {"Status": status, "Running": status == "running", "ExitCode": 0 if status == "exited" else 0,
                          "FinishedAt": "2026-12-01T13:00:00.5Z"}}

    def wait(self, name: str, timeout: float, condition: str) -> dict[str, int]:
        """The engine records the exit 0.02 s after the call; a read timeout if the host runs on."""
        self._call("wait", (name, condition))
        if self.status.get(name) == "running":
            time.sleep(timeout)
            raise requests.exceptions.ReadTimeout("read timed out")
        time.sleep(0.02)
        return {"StatusCode": 0}

    # networks
    def create_network(self, name: str, **options: Any) -> dict[str, str]:
        ipam = options.get("ipam")
        subnet = ipam["Config"][0]["Subnet"] if ipam else None
        self._call("create_network", subnet)
        if subnet in self.subnets_held:
            raise api_error(403, "Pool overlaps with other one on this address space")
        return {"Id": f"net-{len(self.calls)}"}

    def networks(self) -> list[dict[str, Any]]:
        self._call("networks")
        return [{"IPAM": {"Config": [{"Subnet": subnet}]}} for subnet in self.subnets_listed]

    def inspect_network(self, ident: str) -> dict[str, Any]:
        self._call("inspect_network", ident)
        return {"IPAM": {"Config": [{"Subnet": "172.30.0.0/16", "Gateway": "172.30.0.1"}]}}

    def remove_network(self, ident: str) -> None:
        self._call("remove_network", ident)


def backend_on(engine: StubEngine, monkeypatch: pytest.MonkeyPatch) -> DockerBackend:
    backend = DockerBackend(client=SimpleNamespace(api=engine))  # type: ignore[arg-type]
    # The ulimit probe (backend/ulimits.py) is tested on its own: every limit is accepted here.
    monkeypatch.setattr(DockerBackend, "refused_ulimits", lambda self, plan, wanted: set())
    return backend


@pytest.fixture
def plan_of(load: Callable[[dict[str, Any]], JobSpec], valid_raw: dict[str, Any],
            tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Plan]:
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))

    def plan(job: str) -> Plan:
        valid_raw["instance_groups"][0]["instance_count"] = 3
        valid_raw["instance_groups"][1]["instance_count"] = 3
        return make_plan(load(valid_raw), job, job_dir=tmp_path / job)

    return plan


def close_streams(engine: StubEngine) -> None:
    for end in engine.engine_ends:
        end.close()


def test_hosts_are_created_concurrently_each_recorded_and_attached(
    plan_of: Callable[[str], Plan], monkeypatch: pytest.MonkeyPatch,
) -> None:
    overlapping = threading.Event()

    def create(name: str) -> None:
        # Each create waits until a second one is under way: creates made one after the other wait
        # the 5 s out, and the in-flight assertion below fails.
        if engine.in_flight > 1:
            overlapping.set()
        overlapping.wait(5)

    engine = StubEngine(on_create=create)
    backend, plan = backend_on(engine, monkeypatch), plan_of("job-a")
    recorded: list[str] = []
    names = [h.container.name for h in plan.hosts]
    backend._outstanding[plan.job_name] = {}

    backend.create_containers(plan, plan.hosts, lambda name, chunk, stream=1: None, recorded.append)
    close_streams(engine)

    assert sorted(recorded) == sorted(names) == sorted(engine.created)
    assert engine.most_in_flight > 1  # not one after the other
    assert set(backend._outstanding[plan.job_name]) == {f"id-{n}" for n in names}  # teardown knows each
    attached = [arg for name, arg in engine.calls if name == "attach_socket"]
    assert sorted(attached) == sorted(names)


def test_a_ctrl_c_while_creating_waits_for_the_creates_under_way_and_begins_no_other(
    plan_of: Callable[[str], Plan], monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = plan_of("job-b")
    first, second = plan.hosts[0].container.name, plan.hosts[1].container.name

    def create(name: str) -> None:
        if name == second:
            os.kill(os.getpid(), signal.SIGINT)  # lands on the main thread while two creates are under way
        time.sleep(0.2)

    engine = StubEngine(on_create=create)
    backend = backend_on(engine, monkeypatch)
    monkeypatch.setattr(backend_docker, "START_WORKERS", 2)
    backend._outstanding[plan.job_name] = {}
    recorded: list[str] = []

    with pytest.raises(KeyboardInterrupt):
        backend.create_containers(plan, plan.hosts, lambda name, chunk, stream=1: None, recorded.append)
    close_streams(engine)

    assert sorted(engine.created) == sorted([first, second])  # the rest were never begun
    assert sorted(recorded) == sorted([first, second])
    assert set(backend._outstanding[plan.job_name]) == {f"id-{first}", f"id-{second}"}
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_failed_create_is_raised_and_no_further_host_is_begun(
    plan_of: Callable[[str], Plan], monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = plan_of("job-c")
    failing, beside = plan.hosts[0].container.name, plan.hosts[1].container.name

    def create(name: str) -> None:
        if name == failing:
            time.sleep(0.1)  # while the second host's create is under way
            raise api_error(409, "Conflict: the name is in use")
        time.sleep(0.3)

    engine = StubEngine(on_create=create)
    backend = backend_on(engine, monkeypatch)
    monkeypatch.setattr(backend_docker, "START_WORKERS", 2)
    backend._outstanding[plan.job_name] = {}

    with pytest.raises(backend_docker.EnvironmentProblem, match=f"cannot create container {failing}"):
        backend.create_containers(plan, plan.hosts, lambda name, chunk, stream=1: None, lambda name: None)
    close_streams(engine)

    assert engine.created == [beside]  # the one under way was finished (and recorded); none begun after
    assert set(backend._outstanding[plan.job_name]) == {f"id-{beside}"}


def test_a_poll_lists_the_running_hosts_once_and_inspects_only_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = StubEngine()
    engine.status = {"job-algo-1": "exited", "job-algo-2": "running", "job-algo-10": "running",
                     "job-algo-3": "created"}
    backend = backend_on(engine, monkeypatch)

    states = backend.states(["job-algo-1", "job-algo-2", "job-algo-3"])

    assert [(s.name, s.running, s.exit_code) for s in states] == [
        ("job-algo-1", False, 0), ("job-algo-2", True, None), ("job-algo-3", True, None)]
    # algo-10 matched the name filter for algo-1 but is not algo-1: only the exited host is inspected.
    assert engine.names() == ["containers", "inspect_container"]
    assert engine.calls[1] == ("inspect_container", "job-algo-1")


def test_the_supervisor_wakes_when_a_hosts_stream_ends_not_a_poll_later(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = StubEngine()
    backend = backend_on(engine, monkeypatch)
    backend.follow_logs("job-algo-1", lambda name, chunk, stream=1: None)

    began = time.monotonic()
    backend.wait_exits(["job-algo-1"], timeout=0.3)  # nothing ended: a whole poll's pause
    assert time.monotonic() - began >= 0.3

    threading.Timer(0.05, close_streams, [engine]).start()  # the host exits
    began = time.monotonic()
    backend.wait_exits(["job-algo-1"], timeout=5)
    assert time.monotonic() - began < 1

    # Its stream has ended but the engine has not recorded the exit yet: the engine's own wait call
    # answers when it has (0.02 s here), not a poll later, and not in 5 s.
    engine.calls.clear()
    engine.status["job-algo-1"] = "exited"
    began = time.monotonic()
    backend.wait_exits(["job-algo-1"], timeout=5)
    assert time.monotonic() - began < 0.15
    assert engine.calls == [("wait", ("job-algo-1", "not-running"))]

    # A stream that ended while its host runs on holds the supervisor at most one poll.
    engine.status["job-algo-1"] = "running"
    began = time.monotonic()
    backend.wait_exits(["job-algo-1"], timeout=5)
    assert 0.15 <= time.monotonic() - began < 1


def test_a_job_network_gets_a_24_of_the_job_range_in_one_create_and_the_next_job_the_next(
    plan_of: Callable[[str], Plan], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not a whole /16 of the engine's default pools (about 30 in all): a /24 of 172.16.0.0/16, which
    those pools leave out (backend/networks.py)."""
    monkeypatch.setattr(backend_docker.networks, "local_routes", lambda: [])
    engine = StubEngine()
    engine.subnets_listed = ["172.17.0.0/16", "172.16.0.0/24"]  # the default bridge, a stuck job network
    backend = backend_on(engine, monkeypatch)
    backend.create_network(plan_of("job-d"))

    assert engine.calls == [("networks", None), ("create_network", "172.16.1.0/24")]
    assert backend._addresses["job-d"]["algo-1"] == "172.16.1.2"  # the gateway (.1) is skipped

    engine.calls.clear()
    backend_on(engine, monkeypatch).create_network(plan_of("job-e"))
    assert engine.calls == [("networks", None), ("create_network", "172.16.2.0/24")]


def test_a_block_a_job_beside_took_at_the_same_moment_is_followed_by_the_next(
    plan_of: Callable[[str], Plan], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(backend_docker.networks, "local_routes", lambda: [])
    engine = StubEngine()
    engine.subnets_held.add("172.16.0.0/24")  # not listed yet: the engine refuses the create
    backend_on(engine, monkeypatch).create_network(plan_of("job-g"))
    assert engine.calls == [("networks", None), ("create_network", "172.16.0.0/24"),
                            ("create_network", "172.16.1.0/24")]


def test_with_the_job_range_full_a_remembered_subnet_another_network_holds_lets_the_engine_pick_again(
    plan_of: Callable[[str], Plan], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HETERO_EMU_JOB_SUBNETS", "10.8.0.0/24")
    engine = StubEngine()
    engine.subnets_listed = ["10.8.0.0/16"]
    SubnetMemory(backend_docker.ulimits.engine_key(), False).remember({"Subnet": "10.9.0.0/24", "Gateway": "10.9.0.1"})
    engine.subnets_held.add("10.9.0.0/24")
    backend = backend_on(engine, monkeypatch)

    backend.create_network(plan_of("job-f"))

    assert engine.calls[:2] == [("networks", None), ("create_network", "10.9.0.0/24")]
    assert engine.names()[2:] == ["create_network", "inspect_network", "remove_network", "create_network"]
    assert SubnetMemory(backend_docker.ulimits.engine_key(), False).recall() == {
        "Subnet": "172.30.0.0/16", "Gateway": "172.30.0.1"}


def test_the_image_is_inspected_once_for_its_presence_and_its_labels() -> None:
    images = mock.Mock()
    images.get.return_value = SimpleNamespace(labels={"hetero-emu.launchers": "mpirun"})
    backend = DockerBackend(client=SimpleNamespace(images=images))  # type: ignore[arg-type]

    assert backend.images.present("img")
    assert backend.images.labels("img") == {"hetero-emu.launchers": "mpirun"}
    assert images.get.call_count == 1
    # Remembered for that one question only: asked again later, the engine is asked again.
    images.get.return_value = SimpleNamespace(labels={})
    assert backend.images.labels("img") == {}
    assert images.get.call_count == 2


def test_a_missing_image_is_not_present_and_has_no_labels() -> None:
    images = mock.Mock()
    images.get.side_effect = docker.errors.ImageNotFound("no such image")
    backend = DockerBackend(client=SimpleNamespace(images=images))  # type: ignore[arg-type]

    assert not backend.images.present("img")
    assert backend.images.labels("img") is None


def test_hosts_that_exited_together_are_each_inspected_and_reported_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = StubEngine()
    engine.status = {f"job-algo-{i}": "exited" for i in range(1, 6)} | {"job-algo-6": "running"}
    backend = backend_on(engine, monkeypatch)
    names = [f"job-algo-{i}" for i in (6, 3, 1, 5, 2, 4)]

    states = backend.states(names)

    assert [(s.name, s.running) for s in states] == [(n, n == "job-algo-6") for n in names]
    assert sorted(arg for call, arg in engine.calls if call == "inspect_container") == sorted(names[1:])
