"""emulator/planning/container.py: one description of a host's container, translated once per engine; /dev/shm and
ulimits; the per-job SSH keys of an MPI distribution (plan, staging, render)."""

from __future__ import annotations

import copy
import dataclasses
import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_ssh_private_key, load_ssh_public_key

from emulator import api
from emulator.backend.docker import container_options
from emulator.backend.swarm import service_options
from emulator.errors import SpecError, UsageError
from emulator.jobspec import JobSpec
from emulator.planning import sshkeys
from emulator.planning.compose import compose_project, service
from emulator.planning.container import (
    FALLBACK_SHM,
    MPI_ULIMITS,
    ContainerSpec,
    Device,
    Mount,
    PortBinding,
    Ulimit,
    default_shm_bytes,
)
from emulator.planning.plan import SSH_TARGET, Plan, make_plan
from emulator.run import staging

MIB = 1024**2
GIB = 1024**3
Load = Callable[[dict[str, Any]], JobSpec]

# --------------------------------------------------------------------------------------------------
# Both engines translate every field.

ADDRESSES = {"algo-1": "10.1.1.1", "algo-2": "10.1.1.2", "algo-7": "10.7.7.7", "algo-9": "10.9.9.9"}
BASE = ContainerSpec(
    image="base-image:1", command=("train",), entrypoint=None, name="job-algo-1", hostname="algo-1",
    aliases=("algo-1",), extra_hosts=("algo-2",), init=True, labels={"base": "label"},
    environment={"BASE": "env"}, mounts=(Mount("/base-src", "/base-dst", False),), memory_bytes=None,
    shm_bytes=64 * MIB, ulimits=(), devices=(),
)
# Per field: a value other than BASE's, and the text it must show as in each engine's arguments
# (None: a value with no text of its own, such as a flag; then the arguments must only change).
SAMPLES: dict[str, tuple[Any, str | None]] = {
    "image": ("marker-image:2", "marker-image:2"),
    "command": (("marker-command",), "marker-command"),
    "entrypoint": (("marker-entry",), "marker-entry"),
    "name": ("marker-name", "marker-name"),
    "hostname": ("algo-7", "algo-7"),
    "aliases": (("marker-alias",), "marker-alias"),
    "extra_hosts": (("algo-9",), "10.9.9.9"),
    "init": (False, None),
    "labels": ({"marker.label": "v"}, "marker.label"),
    "environment": ({"MARKER_ENV": "v"}, "MARKER_ENV"),
    "mounts": ((Mount("/marker-src", "/marker-dst", True),), "/marker-dst"),
    "memory_bytes": (123456789, "123456789"),
    "shm_bytes": (987654321, "987654321"),
    "ulimits": ((Ulimit("nofile", 4242, 4343),), "4343"),
    "devices": ((Device("/dev/marker0", "/dev/marker0"),), "/dev/marker0"),
    "ports": ((PortBinding("127.0.0.1", 45678, 5678),), "45678"),
    "placement": (("node.labels.marker==yes",), "node.labels.marker==yes"),
    # docker and compose name the ids; a swarm service reserves a count of them (no marker common to all).
    "gpus": (("GPU-marker-1", "GPU-marker-2"), None),
    # The job's AWS gateway by its fixed address (emulator/run/job_aws.py).
    "dns": (("algo-7",), "10.7.7.7"),
}
# What an engine cannot give, and why. A swarm service refuses it (test below) rather than drop it.
NOT_TRANSLATED = {
    ("docker", "placement"): "one machine has nowhere else to put a host",
    ("compose", "placement"): "a compose project runs on one engine (and its 2.4 format has no deploy:)",
    ("swarm", "extra_hosts"): "a host on an overlay has no fixed address; the others resolve through its DNS",
    ("swarm", "ports"): "a published port (the debugger's) is not supported on the swarm engine",
    ("swarm", "devices"): "a service cannot take --device",
}


def _docker(container: ContainerSpec) -> str:
    options = container_options(container, "job-net", ADDRESSES, "driver")
    return json.dumps([options.create, options.host_config, options.endpoint], default=str, sort_keys=True)


def _compose(container: ContainerSpec) -> str:
    return json.dumps(service(container, ADDRESSES, "/project"), default=str, sort_keys=True)


def _swarm(container: ContainerSpec) -> str:
    return json.dumps(service_options(container, "job-net", container.image, "driver", 10, ADDRESSES), default=str,
                      sort_keys=True)


ENGINES = {"docker": _docker, "compose": _compose, "swarm": _swarm}


def test_every_field_has_a_sample() -> None:
    # A new field needs a sample here, and then must be translated by both engines to pass below.
    assert set(SAMPLES) == {f.name for f in dataclasses.fields(ContainerSpec)}


@pytest.mark.parametrize(("engine", "name"), [(engine, name) for engine in sorted(ENGINES) for name in sorted(SAMPLES)
                                              if (engine, name) not in NOT_TRANSLATED])
def test_every_engine_translates_every_field(engine: str, name: str) -> None:
    value, marker = SAMPLES[name]
    assert getattr(BASE, name) != value
    translate: Callable[[ContainerSpec], str] = ENGINES[engine]
    base, changed = translate(BASE), translate(dataclasses.replace(BASE, **{name: value}))
    assert changed != base, f"{name} does not change the engine's arguments"
    if marker is not None:
        assert marker not in base and marker in changed, f"{name}'s value is not in the engine's arguments"


@pytest.mark.parametrize("name", ["ports", "devices"])
def test_a_swarm_service_refuses_what_it_cannot_give(name: str) -> None:
    with pytest.raises(UsageError, match="swarm"):
        _swarm(dataclasses.replace(BASE, **{name: SAMPLES[name][0]}))


def test_docker_and_compose_say_the_same_limits() -> None:
    container = dataclasses.replace(BASE, shm_bytes=2 * GIB, memory_bytes=4 * GIB, ulimits=MPI_ULIMITS)
    host = container_options(container, "net", ADDRESSES, "driver").host_config
    composed = service(container, ADDRESSES, "/project")
    assert host["shm_size"] == composed["shm_size"] == 2 * GIB
    assert host["mem_limit"] == composed["mem_limit"] == 4 * GIB
    assert [(u["Name"], u["Soft"], u["Hard"]) for u in host["ulimits"]] == [
        (name, limits["soft"], limits["hard"]) for name, limits in composed["ulimits"].items()
    ] == [("memlock", -1, -1), ("stack", 64 * MIB, 64 * MIB)]


# --------------------------------------------------------------------------------------------------
# /dev/shm and ulimits in the plan.


def test_default_shm_is_half_the_memory_limit_else_one_gib() -> None:
    assert default_shm_bytes(8 * GIB) == 4 * GIB
    assert default_shm_bytes(None) == FALLBACK_SHM == GIB
    assert default_shm_bytes(6 * MIB) == 3 * MIB


def test_plan_gives_each_host_half_its_memory_as_shm_and_the_mpi_ulimits(
    load: Load, valid_raw: dict[str, Any], tmp_path: Path
) -> None:
    spec = load(valid_raw)
    plan = make_plan(spec, "hetero-test", job_dir=tmp_path / "job")
    for host in plan.hosts:
        assert host.container.memory_bytes is not None
        assert host.container.shm_bytes == host.container.memory_bytes // 2 > 64 * MIB
        assert host.container.ulimits == MPI_ULIMITS
    unlimited = make_plan(spec, "hetero-test", job_dir=tmp_path / "job", memory="none")
    assert {h.container.shm_bytes for h in unlimited.hosts} == {GIB}


@pytest.mark.parametrize(("given", "expected"), [("2g", 2 * GIB), ("512m", 512 * MIB), (3 * GIB, 3 * GIB),
                                                  ("1.5GiB", GIB + 512 * MIB)])
def test_shm_size_in_the_spec_sets_every_host(
    load: Load, valid_raw: dict[str, Any], tmp_path: Path, given: Any, expected: int
) -> None:
    raw = {**copy.deepcopy(valid_raw), "shm_size": given}
    plan = make_plan(load(raw), "hetero-test", job_dir=tmp_path / "job")
    assert {h.container.shm_bytes for h in plan.hosts} == {expected}
    doc = compose_project(plan)
    assert {s["shm_size"] for s in doc["services"].values()} == {expected}


@pytest.mark.parametrize(("given", "fragment"), [
    ("2q", "'2q' is not a size"),
    ("lots", "is not a size"),
    ("512k", "less than 1 MiB"),
    (0, "less than 1 MiB"),
    ("-1g", "less than 1 MiB"),
    (True, "must be a string or integer"),
    ([2], "must be a string or integer"),
    ("99999999999999999999g", "too large"),
])
def test_bad_shm_size_is_refused_naming_the_field(
    load: Load, valid_raw: dict[str, Any], given: Any, fragment: str
) -> None:
    with pytest.raises(SpecError) as info:
        load({**copy.deepcopy(valid_raw), "shm_size": given})
    (problem,) = info.value.problems
    assert problem.path == "shm_size"
    assert fragment in problem.message
    assert info.value.exit_code == 2


def test_cli_shm_size_overrides_the_spec(
    write_spec: Callable[[dict[str, Any]], Path], valid_raw: dict[str, Any]
) -> None:
    path = write_spec({**valid_raw, "shm_size": "1g"})
    assert api.load(path).shm_size == GIB
    assert api.load(path, shm_size="3g").shm_size == 3 * GIB
    with pytest.raises(SpecError) as info:
        api.load(path, shm_size="3q")
    assert [p.path for p in info.value.problems] == ["shm_size"]


def test_python_job_takes_shm_size(project: Path) -> None:
    from emulator import InstanceGroup, Job

    job = Job(entry_point="train.py", source_dir="code", base_dir=project, shm_size="2g",
              instance_groups=[InstanceGroup("a", "ml.c5.xlarge", 1)])
    assert job.spec().shm_size == 2 * GIB


# --------------------------------------------------------------------------------------------------
# The per-job SSH keys of an MPI distribution.

MPI_DISTRIBUTIONS = [
    {"mpi": {"enabled": True, "processes_per_host": 2}},
    {"smdistributed": {"dataparallel": {"enabled": True}}},
    {"pytorchddp": {"enabled": True}},
    {"mpi": {"enabled": True}, "smdistributed": {"modelparallel": {"enabled": True, "parameters": {"partitions": 2}}}},
]


def _ssh_mounts(plan: Plan) -> dict[str, list[Mount]]:
    return {h.name: [m for m in h.container.mounts if m.target == SSH_TARGET] for h in plan.hosts}


@pytest.mark.parametrize("strategy", MPI_DISTRIBUTIONS, ids=["mpi", "dataparallel", "pytorchddp", "modelparallel"])
def test_mpi_hosts_mount_the_job_keys_read_only_and_no_other_group(
    load: Load, valid_raw: dict[str, Any], tmp_path: Path, strategy: dict[str, Any]
) -> None:
    raw = {**copy.deepcopy(valid_raw), "distribution": {**strategy, "instance_groups": ["data_group"]}}
    plan = make_plan(load(raw), "hetero-test", job_dir=tmp_path / "job")
    assert plan.ssh_dir == str(tmp_path / "job" / "ssh")
    mounts = _ssh_mounts(plan)
    data_hosts = [h.name for h in plan.hosts if h.group == "data_group"]
    assert data_hosts == ["algo-1", "algo-2"]
    for name in data_hosts:
        assert mounts[name] == [Mount(str(tmp_path / "job" / "ssh"), "/root/.ssh", read_only=True)]
    assert mounts["algo-3"] == []  # dnn_group runs the script as a plain process


@pytest.mark.parametrize("distribution", [
    None,
    {"torch_distributed": {"enabled": True}, "instance_groups": ["dnn_group"]},
], ids=["none", "torch_distributed"])
def test_no_keys_without_an_mpi_distribution(
    load: Load, valid_raw: dict[str, Any], tmp_path: Path, distribution: dict[str, Any] | None
) -> None:
    raw = copy.deepcopy(valid_raw)
    if distribution is not None:
        raw["distribution"] = distribution
    plan = make_plan(load(raw), "hetero-test", job_dir=tmp_path / "job")
    assert plan.ssh_dir is None
    assert all(not mounts for mounts in _ssh_mounts(plan).values())
    staging.stage(plan)
    assert not (tmp_path / "job" / "ssh").exists()


@pytest.mark.parametrize("enabled", [True, False])
def test_homogeneous_mpi_gives_every_host_the_keys_when_enabled(load: Load, tmp_path: Path, enabled: bool) -> None:
    raw = {"job_name": "homog", "entry_point": "train.py", "source_dir": "./code", "instance_type": "ml.c5.xlarge",
           "instance_count": 3, "distribution": {"mpi": {"enabled": enabled}}}
    plan = make_plan(load(raw), "homog", job_dir=tmp_path / "job")
    assert [len(mounts) for mounts in _ssh_mounts(plan).values()] == [1 if enabled else 0] * 3
    assert (plan.ssh_dir is not None) is enabled


def test_model_parallel_v2_runs_under_torchrun_and_gets_no_keys(load: Load, tmp_path: Path) -> None:
    raw = {"job_name": "smp2", "entry_point": "train.py", "source_dir": "./code", "instance_type": "ml.c5.xlarge",
           "instance_count": 2, "distribution": {"torch_distributed": {"enabled": True},
                                                 "smdistributed": {"modelparallel": {"enabled": True}}}}
    plan = make_plan(load(raw), "smp2", job_dir=tmp_path / "job")
    assert plan.ssh_dir is None and all(not mounts for mounts in _ssh_mounts(plan).values())


def _mpi_plan(load: Load, valid_raw: dict[str, Any], job_dir: Path, name: str = "hetero-test") -> Plan:
    raw = {**copy.deepcopy(valid_raw), "distribution": {"mpi": {"enabled": True}, "instance_groups": ["dnn_group"]}}
    return make_plan(load(raw), name, job_dir=job_dir)


def test_staging_writes_the_job_keys_with_private_files_0600(
    load: Load, valid_raw: dict[str, Any], tmp_path: Path
) -> None:
    plan = _mpi_plan(load, valid_raw, tmp_path / "job")
    staging.stage(plan)
    folder = tmp_path / "job" / "ssh"
    assert sorted(p.name for p in folder.iterdir()) == sorted(sshkeys.FILES)
    assert stat.S_IMODE(folder.stat().st_mode) & 0o077 == 0
    for name in ("id_ed25519", "ssh_host_ed25519_key"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600
        private = load_ssh_private_key((folder / name).read_bytes(), password=None)
        assert isinstance(private, Ed25519PrivateKey)
        public = load_ssh_public_key((folder / f"{name}.pub").read_bytes())
        assert isinstance(public, Ed25519PublicKey)
        assert public.public_bytes_raw() == private.public_key().public_bytes_raw()
        assert (folder / name).read_bytes().startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----")
    assert (folder / "authorized_keys").read_bytes() == (folder / "id_ed25519.pub").read_bytes()
    assert (folder / "config").read_text().split() == [
        "Host", "*", "StrictHostKeyChecking", "no", "UserKnownHostsFile", "/dev/null", "LogLevel", "ERROR"]
    # The user key and the host key are two keys.
    user, host = ((folder / name).read_bytes().split()[1] for name in ("id_ed25519.pub", "ssh_host_ed25519_key.pub"))
    assert user != host


def test_every_job_gets_new_keys(load: Load, valid_raw: dict[str, Any], tmp_path: Path) -> None:
    keys = []
    for name in ("job-a", "job-b"):
        staging.stage(_mpi_plan(load, valid_raw, tmp_path / name, name))
        keys.append({(tmp_path / name / "ssh" / f).read_bytes() for f in ("id_ed25519", "ssh_host_ed25519_key")})
    assert not keys[0] & keys[1]


def test_render_names_the_key_folder_but_prints_no_key(
    load: Load, valid_raw: dict[str, Any], tmp_path: Path
) -> None:
    raw = {**copy.deepcopy(valid_raw), "distribution": {"mpi": {"enabled": True}, "instance_groups": ["dnn_group"]}}
    out = tmp_path / "rendered"
    plan = api.render(load(raw), out)
    private = (out / "ssh" / "id_ed25519").read_text()
    host_private = (out / "ssh" / "ssh_host_ed25519_key").read_text()
    body = "".join(private.splitlines()[1:-1])
    written = (out / "plan.json").read_text() + (out / "compose.yaml").read_text() + repr(plan)
    assert body and body[:40] not in written and "".join(host_private.splitlines()[1:-1])[:40] not in written
    assert "OPENSSH PRIVATE KEY" not in written
    algo3 = compose_project(plan)["services"]["algo-3"]["volumes"]
    assert "./ssh:/root/.ssh:ro" in algo3


# --------------------------------------------------------------------------------------------------
# Ulimits an engine refuses (backend/ulimits.py): probed once per engine, remembered, left out.


def test_refused_ulimits_are_probed_once_per_engine_and_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from emulator.backend import ulimits

    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    memlock, stack = MPI_ULIMITS
    probes: list[tuple[str, ...]] = []

    def probe(wanted: Any) -> bool:
        probes.append(tuple(u.name for u in wanted))
        return memlock not in wanted  # this engine may not raise memlock

    assert ulimits.refused("engine-a", MPI_ULIMITS, probe) == {memlock}
    assert probes == [("memlock", "stack"), ("memlock",), ("stack",)]  # together, then one by one
    assert ulimits.refused("engine-a", MPI_ULIMITS, probe) == {memlock}
    assert len(probes) == 3  # remembered: no second probe
    assert ulimits.refused("engine-b", MPI_ULIMITS, lambda wanted: True) == set()  # another engine: its own verdict
    assert json.loads(ulimits.cache_path().read_text())["engine-a memlock=-1:-1"] is False


def test_a_driver_that_is_not_root_writes_no_client_config(
    load: Load, valid_raw: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ssh refuses a ~/.ssh/config owned by another user than root: a non-root driver's file would be.
    monkeypatch.setattr(staging.os, "getuid", lambda: 1000)
    staging.stage(_mpi_plan(load, valid_raw, tmp_path / "job"))
    assert sorted(p.name for p in (tmp_path / "job" / "ssh").iterdir()) == sorted(set(sshkeys.FILES) - {"config"})
