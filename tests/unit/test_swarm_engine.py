"""emulator/backend/swarm.py without a swarm: the settings, a host's service as the engine is asked
for it, and how the manager's task and node records become a host's state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from emulator.backend import registry, swarm
from emulator.backend.swarm import (
    ENV_MTU,
    ENV_NODES,
    NOWHERE,
    SERVICE_NAME_LIMIT,
    Node,
    SwarmBackend,
    SwarmSettings,
    _parse_task,
    service_name,
    service_options,
    spread,
)
from emulator.errors import EnvironmentProblem, UsageError
from emulator.jobspec import validate
from emulator.planning.container import ContainerSpec, Mount, Ulimit
from emulator.planning.plan import make_plan

HOST = ContainerSpec(
    image="img:1", command=("train",), entrypoint=None, name="job-algo-2", hostname="algo-2", aliases=("algo-2",),
    extra_hosts=("algo-1",), init=True, labels={"io.hetero-emu.job": "job"}, environment={"A": "1"},
    mounts=(Mount("/jobs/job/hosts/algo-2", "/opt/ml", False), Mount("/data/train", "/opt/ml/input/data/train", True)),
    memory_bytes=2 * 1024**3, shm_bytes=1024**3, ulimits=(Ulimit("memlock", -1, -1),),
    placement=("node.labels.role==gpu",),
)


def test_settings_come_from_the_environment() -> None:
    settings = SwarmSettings.from_env({"HETERO_EMU_SWARM_MANAGER": "tcp://m:2375",
                                       ENV_NODES: "node-2=tcp://n2:2375, node-3=ssh://me@n3",
                                       ENV_MTU: "1350"})
    assert settings.manager == "tcp://m:2375"
    assert dict(settings.node_engines) == {"node-2": "tcp://n2:2375", "node-3": "ssh://me@n3"}
    assert settings.mtu == 1350
    assert SwarmSettings.from_env({}) == SwarmSettings()


@pytest.mark.parametrize(("variable", "value", "named"), [(ENV_NODES, "node-2", "NODE=URL"),
                                                          (ENV_NODES, "=tcp://x", "NODE=URL"),
                                                          (ENV_MTU, "big", "MTU"), (ENV_MTU, "100", "MTU")])
def test_bad_settings_are_a_usage_error_naming_the_variable(variable: str, value: str, named: str) -> None:
    with pytest.raises(UsageError) as caught:
        SwarmSettings.from_env({variable: value})
    assert variable in caught.value.message and named in caught.value.message + (caught.value.hint or "")


def test_the_engine_is_registered_as_swarm() -> None:
    assert "swarm" in registry.names()
    assert isinstance(registry.engine("swarm"), SwarmBackend)  # no engine is asked until it is used


def test_a_service_is_the_containers_name_unless_the_swarm_would_refuse_it() -> None:
    assert service_name("job-algo-2") == "job-algo-2"
    long = "j" * 63 + "-algo-12"
    short = service_name(long)
    assert len(short) <= SERVICE_NAME_LIMIT and short.endswith("-algo-12")
    assert short != service_name("j" * 62 + "k-algo-12")  # the hash keeps two long jobs apart


def test_a_host_is_a_run_once_job_that_is_never_restarted_on_a_dnsrr_overlay() -> None:
    options = service_options(HOST, "job-net", "sha256:abc", "driver-1", grace=7)
    assert options["name"] == "job-algo-2"
    assert options["mode"] == {"replicated": {"Replicas": 1}}
    assert options["endpoint_spec"]["Mode"] == "dnsrr"
    template = options["task_template"]
    assert template["RestartPolicy"]["Condition"] == "none"
    assert template["Networks"] == [{"Target": "job-net", "Aliases": ["algo-2"], "DriverOpts": None}]
    assert template["Placement"]["Constraints"] == ["node.labels.role==gpu"]
    assert template["Resources"]["Limits"]["MemoryBytes"] == 2 * 1024**3
    spec = template["ContainerSpec"]
    assert spec["Image"] == "sha256:abc"  # by id: the node uses its own copy, no pull
    assert spec["Hostname"] == "algo-2" and spec["Args"] == ["train"] and spec.get("Command") is None
    assert spec["StopGracePeriod"] == 7 * 10**9
    assert spec["Ulimits"] == [{"Name": "memlock", "Soft": -1, "Hard": -1}]
    assert spec["Labels"]["io.hetero-emu.driver"] == "driver-1"
    mounts = {m["Target"]: m for m in spec["Mounts"]}
    assert mounts["/opt/ml"]["Source"] == "/jobs/job/hosts/algo-2" and not mounts["/opt/ml"]["ReadOnly"]
    assert mounts["/opt/ml/input/data/train"]["ReadOnly"]
    assert mounts["/dev/shm"]["Type"] == "tmpfs" and mounts["/dev/shm"]["TmpfsOptions"]["SizeBytes"] == 1024**3


def test_an_entrypoint_replaces_the_images_and_the_command_follows_it() -> None:
    import dataclasses

    spec = service_options(dataclasses.replace(HOST, entrypoint=("python", "x.py"), command=("--a",)),
                           "n", "i", "d", 1)["task_template"]["ContainerSpec"]
    assert spec["Command"] == ["python", "x.py"] and spec["Args"] == ["--a"]


def _task(state: str, exit_code: int | None = None, err: str = "", container: str = "c1",
          node: str = "n1") -> dict[str, Any]:
    status: dict[str, Any] = {"State": state, "Err": err, "Timestamp": "2026-12-01T10:00:01.5Z",
                              "ContainerStatus": {"ContainerID": container}}
    if exit_code is not None:
        status["ContainerStatus"]["ExitCode"] = exit_code
    return {"ID": "t1", "ServiceID": "s1", "NodeID": node, "Status": status, "Version": {"Index": 3}}


def test_an_exit_code_counts_only_once_the_task_has_ended() -> None:
    assert _parse_task(_task("running", 0)).exit_code is None  # the engine says 0 before the exit
    assert _parse_task(_task("complete", 0)).exit_code == 0
    failed = _parse_task(_task("failed", 3, "task: non-zero exit (3)"))
    assert failed.exit_code == 3 and failed.timestamp == pytest.approx(1796119201.5)
    assert _parse_task(_task("rejected", None, "No such image", container="")).exit_code is None


def _backend_with(name: str = "job-algo-2") -> SwarmBackend:
    backend = SwarmBackend(SwarmSettings())
    backend._services[name] = "s1"
    backend._nodes = {"n1": "node-1", "n2": "node-2"}
    return backend


def test_a_running_task_on_a_node_that_went_down_is_a_host_that_is_gone_naming_the_node() -> None:
    backend = _backend_with()
    state = backend._state_of("job-algo-2", _parse_task(_task("running", node="n2")),
                              {"n2": {"Status": {"State": "down"}}})
    assert not state.running and state.exit_code is None
    assert "node-2" in state.error and "down" in state.error


def test_a_rejected_task_is_an_error_naming_the_node_and_the_reason() -> None:
    backend = _backend_with()
    task = _parse_task(_task("rejected", err='invalid mount config for type "bind": bind source path does not '
                             "exist: /shared/job", container="", node="n2"))
    with pytest.raises(EnvironmentProblem) as caught:
        backend._state_of("job-algo-2", task, {})
    assert "node-2" in caught.value.message and "/shared/job" in caught.value.message


def test_exit_codes_and_pending_tasks() -> None:
    backend = _backend_with()
    assert backend._state_of("job-algo-2", _parse_task(_task("preparing")), {}).running
    assert backend._state_of("job-algo-2", None, {}).running  # created, not scheduled yet
    done = backend._state_of("job-algo-2", _parse_task(_task("failed", 2, "task: non-zero exit (2)")), {})
    assert (done.running, done.exit_code) == (False, 2)


NODES = [Node("id1", "node-1", {}), Node("id2", "node-2", {"role": "cpu"}), Node("id3", "node-3", {"role": "gpu"})]


def test_hosts_are_spread_evenly_over_the_nodes_in_host_order() -> None:
    chosen = spread([(f"job-algo-{i}", ()) for i in range(1, 7)], NODES)
    assert list(chosen.values()) == ["id1", "id2", "id3", "id1", "id2", "id3"]


def test_a_groups_placement_keeps_its_hosts_on_the_labelled_nodes_and_the_rest_spread_around_them() -> None:
    chosen = spread([("job-algo-1", ("node.labels.role==gpu",)), ("job-algo-2", ("node.labels.role==gpu",)),
                     ("job-algo-3", ()), ("job-algo-4", ("node.labels.role!=gpu",))], NODES)
    assert chosen["job-algo-1"] == chosen["job-algo-2"] == "id3"
    assert chosen["job-algo-3"] == "id1"  # the least used node, first by hostname
    assert chosen["job-algo-4"] == "id2"


def test_a_placement_no_node_meets_is_an_error_naming_the_host_and_the_labels() -> None:
    with pytest.raises(EnvironmentProblem) as caught:
        spread([("job-algo-1", ("node.labels.role==tpu",))], NODES)
    assert "job-algo-1" in caught.value.message and "role==tpu" in caught.value.message
    assert "--label-add" in (caught.value.hint or "")


class _DeadNodeManager:
    """A manager whose removed service keeps its task on node n2, which went down: the listing a dead
    node leaves until it returns or is removed."""

    def __init__(self) -> None:
        self.removed: list[str] = []
        self.task_calls = 0

    def inspect_service(self, service: str) -> dict[str, Any]:
        return {"ID": "s1"}

    def remove_service(self, service: str) -> None:
        self.removed.append(service)

    def tasks(self) -> list[dict[str, Any]]:
        self.task_calls += 1
        return [_task("running", node="n2")]

    def nodes(self) -> list[dict[str, Any]]:
        return [{"ID": "n1", "Status": {"State": "ready"}}, {"ID": "n2", "Status": {"State": "down"}}]


def test_removing_a_service_whose_node_went_down_does_not_wait_for_its_task(monkeypatch: pytest.MonkeyPatch) -> None:
    manager = _DeadNodeManager()
    monkeypatch.setattr(SwarmBackend, "api", property(lambda self: manager))
    last = SwarmBackend(SwarmSettings())._remove_services(["job-algo-2"])
    assert manager.removed == ["job-algo-2"] and manager.task_calls == 1  # asked once, not for REMOVE_TIMEOUT
    assert last["s1"].node == "n2" and last["s1"].state == "running"


class _StoppingManager:
    """A manager as the swarm answers a stop asked of it alone: once the service is updated, the task
    that ran is shut down by its node and kept with its exit code, and the task that replaces it waits,
    never placed (a later version, no container)."""

    def __init__(self) -> None:
        self.templates: list[dict[str, Any]] = []

    def inspect_service(self, service: str) -> dict[str, Any]:
        return {"ID": "s1", "Version": {"Index": 5},
                "Spec": {"TaskTemplate": {"ContainerSpec": {"Image": "sha256:1"},
                                          "Placement": {"Constraints": ["node.id==n1"]}}}}

    def update_service(self, service: str, version: int, task_template: dict[str, Any],
                       fetch_current_spec: bool) -> None:
        assert (service, version, fetch_current_spec) == ("s1", 5, True)
        self.templates.append(task_template)

    def tasks(self, filters: dict[str, str]) -> list[dict[str, Any]]:
        assert filters == {"label": "io.hetero-emu.job=job"}
        if not self.templates:
            return [_task("running")]
        replacement = {**_task("pending", container=""), "ID": "t2", "Version": {"Index": 9}}
        return [replacement, _task("shutdown", 143)]

    def nodes(self) -> list[dict[str, Any]]:
        return [{"ID": "n1", "Status": {"State": "ready"}}]


def test_a_host_stopped_through_the_manager_alone_ends_with_its_exit_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No node engine named: the host's service is updated to a placement no node meets, which stops
    its task and keeps it (scaled to 0, the task went with its exit code); its state is that task's."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "t.py").write_text("")
    plan = make_plan(validate({"job_name": "job", "entry_point": "t.py", "source_dir": "code",
                               "instance_type": "ml.c5.xlarge", "instance_count": 2}, base_dir=tmp_path), "job")
    manager = _StoppingManager()
    monkeypatch.setattr(SwarmBackend, "api", property(lambda self: manager))
    backend = _backend_with("job-algo-2")
    backend._hosts["job-algo-2"] = (plan, plan.hosts[1])
    backend.stop(["job-algo-2"], grace=5)
    (template,) = manager.templates
    assert template["Placement"]["Constraints"] == [NOWHERE]
    assert template["ContainerSpec"] == {"Image": "sha256:1"}  # the rest of the task as it was
    (state,) = backend.states(["job-algo-2"])
    assert (state.running, state.exit_code) == (False, 143)


class _StartingManager(_StoppingManager):
    """A manager whose task is still being prepared on its node (placed, no container) for the first
    two lists of tasks: stopped through the manager then, the task would have been shut down with
    no exit code, and its never-placed replacement would have waited for ever."""

    def __init__(self, node: str = "n1") -> None:
        super().__init__()
        self.node, self.lists, self.updated_after = node, 0, -1

    def update_service(self, service: str, version: int, task_template: dict[str, Any],
                       fetch_current_spec: bool) -> None:
        self.updated_after = self.lists
        super().update_service(service, version, task_template, fetch_current_spec)

    def tasks(self, filters: dict[str, str]) -> list[dict[str, Any]]:
        self.lists += 1
        if self.templates and self.updated_after <= 2:  # shut down before its container existed
            replacement = {**_task("pending", container=""), "ID": "t2", "Version": {"Index": 9}}
            return [replacement, _task("shutdown", container="", node=self.node)]
        if not self.templates and self.lists <= 2:
            return [_task("preparing", container="", node=self.node)]
        return super().tasks(filters)


def _stopped_on(manager: _StartingManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "t.py").write_text("")
    plan = make_plan(validate({"job_name": "job", "entry_point": "t.py", "source_dir": "code",
                               "instance_type": "ml.c5.xlarge", "instance_count": 2}, base_dir=tmp_path), "job")
    monkeypatch.setattr(SwarmBackend, "api", property(lambda self: manager))
    # No real waiting: the manager is asked again at once, and a stop waits for no end beyond the grace.
    monkeypatch.setattr(swarm, "START_POLL_SECONDS", 0.0)
    monkeypatch.setattr(swarm, "REMOVE_TIMEOUT", 0.0)
    backend = _backend_with("job-algo-2")
    backend._hosts["job-algo-2"] = (plan, plan.hosts[1])
    backend._grace = 0.0  # the services' grace period (prepare sets it)
    backend.stop(["job-algo-2"], grace=0)
    return backend.states(["job-algo-2"])


def test_a_host_its_node_is_still_starting_is_stopped_once_it_runs_and_ends_with_its_exit_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = _StartingManager()
    (state,) = _stopped_on(manager, tmp_path, monkeypatch)
    assert manager.updated_after == 3  # stopped at the first list that showed its container
    assert (state.running, state.exit_code) == (False, 143)


def test_a_task_no_node_has_taken_is_stopped_without_waiting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager = _StartingManager(node="")
    _stopped_on(manager, tmp_path, monkeypatch)
    assert manager.updated_after == 1
