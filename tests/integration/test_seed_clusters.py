"""The two example clusters of the AWS heterogeneous-cluster guide, end to end on the real engine.

What is asserted is what the REAL `sagemaker-training` toolkit (baked into the default image) tells
each host: `Environment()` reads the /opt/ml/input/config files the emulator wrote, so a wrong key
or a wrong order shows up here as a wrong `current_instance_group` or `distribution_hosts`.

A: examples/hello-hetero as is (2 x ml.c5.18xlarge with channel `training` + 1 x ml.p3dn.24xlarge).
B: 1 x ml.c5.18xlarge + 2 x ml.p3dn.24xlarge with MPI (8 processes per host) on instance_group_2;
   a probe script replaces the toolkit's `train` to read what every host is told; MPI itself runs
   under the real `train` in test_mpi_in_containers.py.
"""

from __future__ import annotations

import json
import random
import tarfile
from pathlib import Path
from typing import Any

import pytest

from emulator.jobspec import JobSpec, load_spec_file, validate
from emulator.options import RunOptions
from emulator.planning.plan import assign_hosts, make_plan
from emulator.reports.console import RecordingReporter
from emulator.run.runner import run_job

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

REPO = Path(__file__).resolve().parents[2]
HELLO_SPEC = REPO / "examples" / "hello-hetero" / "job.yaml"
G1, G2 = "instance_group_1", "instance_group_2"
C5, P3DN = "ml.c5.18xlarge", "ml.p3dn.24xlarge"

# Prints one `PROBE_JSON {...}` line with what the toolkit's Environment() says about this host.
PROBE = '''\
import json
import os
import socket

from sagemaker_training import environment

env = environment.Environment()
env_vars = env.to_env_vars()
wanted = ("SM_DISTRIBUTION_INSTANCE_GROUPS", "SM_IS_HETERO", "SM_CURRENT_INSTANCE_GROUP", "SM_HOSTS",
          "SM_CURRENT_INSTANCE_GROUP_HOSTS", "SM_INSTANCE_GROUPS")
print("PROBE_JSON " + json.dumps({
    "is_hetero": env.is_hetero,
    "current_host": env.current_host,
    "hostname": socket.gethostname(),
    "current_instance_type": env.current_instance_type,
    "current_instance_group": env.current_instance_group,
    "current_instance_group_hosts": env.current_instance_group_hosts,
    "instance_groups": env.instance_groups,
    "instance_groups_dict": env.instance_groups_dict,
    "hosts": env.hosts,
    "distribution_instance_groups": env.distribution_instance_groups,
    "distribution_hosts": env.distribution_hosts,
    "master_hostname": env.master_hostname,
    "additional_framework_parameters": env.additional_framework_parameters,
    "hyperparameters": env.hyperparameters,
    "env": {k: env_vars.get(k) for k in wanted},
    "os_env": {k: os.environ.get(k) for k in ("TRAINING_JOB_NAME", "TRAINING_JOB_ARN", "AWS_REGION", "MY_VAR")},
}, sort_keys=True), flush=True)
'''

# After PROBE: what the job's channels hold, a model file per host, and a failure on request.
PROBE_CHANNELS_AND_MODEL = '''
import sys
data = "/opt/ml/input/data"
names = sorted(os.listdir(data)) if os.path.isdir(data) else []
channels = {c: sorted(os.listdir(os.path.join(data, c))) for c in names}
print("CHANNELS_JSON " + json.dumps(channels, sort_keys=True), flush=True)
os.makedirs("/opt/ml/model", exist_ok=True)
with open(f"/opt/ml/model/{env.current_host}.txt", "w") as f:
    f.write(env.current_instance_group)
if os.environ.get("FAIL_ON") == env.current_host:
    sys.exit(f"{env.current_host} gives up")
'''


def tagged_lines(reporter: RecordingReporter, tag: str) -> dict[str, dict[str, Any]]:
    """host -> the JSON of its one `<tag> {...}` line."""
    found: dict[str, dict[str, Any]] = {}
    for host, _group, line in reporter.lines:
        if line.startswith(tag + " "):
            assert host not in found, f"{host} printed {tag} twice"
            found[host] = json.loads(line[len(tag) + 1 :])
    return found


def log_tagged(job_dir: Path, host: str, tag: str) -> dict[str, Any]:
    lines = [ln for ln in (job_dir / "logs" / f"{host}.log").read_text().splitlines() if ln.startswith(tag + " ")]
    assert len(lines) == 1, f"{host}.log: {lines}"
    return json.loads(lines[0][len(tag) + 1 :])  # type: ignore[no-any-return]


# The guide's cluster B layout: instance_group_1 = 1 x ml.c5.18xlarge, instance_group_2 = 2 x ml.p3dn.24xlarge.
GUIDE_B_HOSTS = {"algo-1": (G1, C5, ["algo-1"]), "algo-2": (G2, P3DN, ["algo-2", "algo-3"]),
                 "algo-3": (G2, P3DN, ["algo-2", "algo-3"])}


def assert_guide_b_host(info: dict[str, Any], host: str) -> None:
    """What the toolkit tells `host` of the guide's cluster B about itself and the cluster."""
    group, itype, group_hosts = GUIDE_B_HOSTS[host]
    assert info["is_hetero"] is True, host
    assert info["current_host"] == info["hostname"] == host
    assert info["current_instance_group"] == group, host
    assert info["current_instance_type"] == itype, host
    assert info["current_instance_group_hosts"] == group_hosts, host
    assert info["instance_groups"] == [G1, G2], host
    assert info["hosts"] == ["algo-1", "algo-2", "algo-3"], host


def assert_mpi_on_instance_group_2(info: dict[str, Any], host: str) -> None:
    """What the toolkit tells every host, whichever group it is in, of the guide's cluster B: MPI with
    8 processes per host on instance_group_2 (algo-2, algo-3)."""
    assert info["distribution_instance_groups"] == [G2], host
    assert info["distribution_hosts"] == ["algo-2", "algo-3"], host
    assert info["master_hostname"] == "algo-2", host
    framework = info["additional_framework_parameters"]
    assert framework["sagemaker_mpi_enabled"] is True, host
    assert framework["sagemaker_mpi_num_of_processes_per_host"] == 8, host
    assert framework["sagemaker_distribution_instance_groups"] == [G2], host
    assert json.loads(info["env"]["SM_DISTRIBUTION_INSTANCE_GROUPS"]) == [G2], host


def probe_spec(tmp_path: Path, **fields: Any) -> JobSpec:
    code = tmp_path / "code"
    code.mkdir()
    (code / "probe.py").write_text(PROBE)
    raw = {
        "source_dir": "code",
        "container_entry_point": ["python3", "/opt/ml/code/probe.py"],
        "output_path": str(tmp_path / "out"),
        **fields,
    }
    return validate(raw, base_dir=tmp_path)


def tar_members(path: Path) -> dict[str, str]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


# --------------------------------------------------------------------------------------------------
# A: examples/hello-hetero


def test_cluster_a_hello_hetero(tmp_path: Path) -> None:
    spec = load_spec_file(HELLO_SPEC, overrides={"output_path": str(tmp_path)})
    reporter = RecordingReporter()
    result = run_job(spec, reporter=reporter)

    assert result.status == "Completed", result.failure_reason
    assert result.failure_reason is None
    hello = tagged_lines(reporter, "HELLO_JSON")
    assert sorted(hello) == ["algo-1", "algo-2", "algo-3"]

    groups_dict = {
        G1: {"instance_group_name": G1, "instance_type": C5, "hosts": ["algo-1", "algo-2"]},
        G2: {"instance_group_name": G2, "instance_type": P3DN, "hosts": ["algo-3"]},
    }
    expected = {
        "algo-1": (G1, C5, ["algo-1", "algo-2"]),
        "algo-2": (G1, C5, ["algo-1", "algo-2"]),
        "algo-3": (G2, P3DN, ["algo-3"]),
    }
    for host, (group, itype, group_hosts) in expected.items():
        info = hello[host]
        assert info == log_tagged(result.job_dir, host, "HELLO_JSON"), host
        assert info["is_hetero"] is True, host
        assert info["current_host"] == host
        assert info["hostname"] == host
        assert info["current_instance_type"] == itype, host
        assert info["current_instance_group"] == group, host
        assert info["current_instance_group_hosts"] == group_hosts, host
        assert info["instance_groups"] == [G1, G2], host
        assert info["instance_groups_dict"] == groups_dict, host
        assert info["hosts"] == ["algo-1", "algo-2", "algo-3"], host
        # No distribution in this job.
        assert info["distribution_instance_groups"] == [], host
        if group == G1:
            assert info["channel_input_dirs"] == {"training": "/opt/ml/input/data/training"}, host
            assert info["channel_files"] == {"training": ["greeting.txt"]}, host
        else:
            assert info["channel_input_dirs"] == {}, host
            assert info["channel_files"] == {}, host
        # Typed by the toolkit from the JSON-encoded hyperparameters.json.
        assert info["hyperparameters"] == {"epochs": 2, "greeting": "hello"}, host
        assert type(info["hyperparameters"]["epochs"]) is int, host
        # The variables `train` hands the user script.
        sm = info["sm_env"]
        assert sm["SM_CURRENT_HOST"] == host
        assert sm["SM_CURRENT_INSTANCE_TYPE"] == itype, host
        assert sm["SM_CURRENT_INSTANCE_GROUP"] == group, host
        assert json.loads(sm["SM_CURRENT_INSTANCE_GROUP_HOSTS"]) == group_hosts, host
        assert json.loads(sm["SM_INSTANCE_GROUPS"]) == [G1, G2], host
        assert sm["SM_IS_HETERO"] == "true", host
        assert json.loads(sm["SM_HOSTS"]) == ["algo-1", "algo-2", "algo-3"], host
        assert sm["SM_HP_EPOCHS"] == "2", host
        assert sm["SM_MODEL_DIR"] == "/opt/ml/model", host
        if group == G1:
            assert json.loads(sm["SM_CHANNELS"]) == ["training"], host
            assert sm["SM_CHANNEL_TRAINING"] == "/opt/ml/input/data/training", host
        else:
            assert json.loads(sm["SM_CHANNELS"]) == [], host
            assert "SM_CHANNEL_TRAINING" not in sm, host

    # The TCP hop from instance_group_2 to the first host of instance_group_1, by its algo-N name.
    tcp = [line for host, _, line in reporter.lines if host == "algo-3" and line.startswith("HELLO_TCP reply=")]
    assert tcp == [f"HELLO_TCP reply=hello algo-3, this is algo-1 of {G1}"]
    assert any(h == "algo-1" and line.startswith("HELLO_TCP greeted algo-3") for h, _, line in reporter.lines)

    # Artifacts: every host's /opt/ml/model merged.
    assert result.model_artifact is not None
    model = tar_members(result.model_artifact)
    assert sorted(model) == ["algo-1.txt", "algo-2.txt", "algo-3.txt"]
    for host, (group, itype, _) in expected.items():
        assert model[f"{host}.txt"].startswith(f"{host} of {group} ({itype})")
    assert result.output_artifact is not None
    assert sorted(tar_members(result.output_artifact)) == ["algo-1.txt", "algo-2.txt", "algo-3.txt"]

    job = json.loads((result.job_dir / "job.json").read_text())
    assert job["TrainingJobStatus"] == "Completed"
    assert "FailureReason" not in job
    assert job["TrainingJobName"] == result.job_name
    assert result.job_name.startswith("hello-hetero-")
    assert job["ResourceConfig"]["InstanceGroups"] == [
        {"InstanceCount": 2, "InstanceGroupName": G1, "InstanceType": C5},
        {"InstanceCount": 1, "InstanceGroupName": G2, "InstanceType": P3DN},
    ]
    hosts = [{k: h[k] for k in ("Host", "InstanceGroupName", "InstanceType", "ExitCode", "FailureReason")}
             for h in job["Hosts"]]
    assert hosts == [
        {"Host": "algo-1", "InstanceGroupName": G1, "InstanceType": C5, "ExitCode": 0, "FailureReason": None},
        {"Host": "algo-2", "InstanceGroupName": G1, "InstanceType": C5, "ExitCode": 0, "FailureReason": None},
        {"Host": "algo-3", "InstanceGroupName": G2, "InstanceType": P3DN, "ExitCode": 0, "FailureReason": None},
    ]


# --------------------------------------------------------------------------------------------------
# B: MPI on instance_group_2


def test_cluster_b_mpi_on_one_group(tmp_path: Path) -> None:
    spec = probe_spec(
        tmp_path,
        base_job_name="seed-b",
        hyperparameters={"epochs": 3},
        instance_groups=[
            {"instance_group_name": G1, "instance_type": C5, "instance_count": 1},
            {"instance_group_name": G2, "instance_type": P3DN, "instance_count": 2},
        ],
        distribution={"mpi": {"enabled": True, "processes_per_host": 8}, "instance_groups": [G2]},
    )
    reporter = RecordingReporter()
    result = run_job(spec, reporter=reporter)

    assert result.status == "Completed", result.failure_reason
    seen = tagged_lines(reporter, "PROBE_JSON")
    assert sorted(seen) == ["algo-1", "algo-2", "algo-3"]
    groups = {"algo-1": (G1, C5, ["algo-1"]), "algo-2": (G2, P3DN, ["algo-2", "algo-3"]),
              "algo-3": (G2, P3DN, ["algo-2", "algo-3"])}
    for host, (group, itype, group_hosts) in groups.items():
        info = seen[host]
        assert info["is_hetero"] is True, host
        assert info["current_host"] == info["hostname"] == host
        assert info["current_instance_group"] == group, host
        assert info["current_instance_type"] == itype, host
        assert info["current_instance_group_hosts"] == group_hosts, host
        assert_mpi_on_instance_group_2(info, host)
        assert info["hyperparameters"] == {"epochs": 3}, host
        env = info["env"]
        assert json.loads(env["SM_DISTRIBUTION_INSTANCE_GROUPS"]) == [G2], host
        assert json.loads(env["SM_IS_HETERO"]) is True, host
        assert env["SM_CURRENT_INSTANCE_GROUP"] == group, host
        assert json.loads(env["SM_HOSTS"]) == ["algo-1", "algo-2", "algo-3"], host
        assert json.loads(env["SM_CURRENT_INSTANCE_GROUP_HOSTS"]) == group_hosts, host
        assert json.loads(env["SM_INSTANCE_GROUPS"]) == [G1, G2], host

    job = json.loads((result.job_dir / "job.json").read_text())
    assert job["HyperParameters"]["sagemaker_distribution_instance_groups"] == json.dumps([G2])
    assert job["HyperParameters"]["sagemaker_mpi_num_of_processes_per_host"] == "8"
    assert job["AlgorithmSpecification"]["ContainerEntrypoint"] == ["python3", "/opt/ml/code/probe.py"]


# --------------------------------------------------------------------------------------------------
# Homogeneous, and a shuffled host order


def test_homogeneous_cluster(tmp_path: Path) -> None:
    hyperparameters = {"epochs": 2, "lr": 0.01, "flag": True, "name": "007", "layers": [64, 32],
                       "opts": {"a": 1, "b": None}, "empty": ""}
    spec = probe_spec(tmp_path, base_job_name="seed-homog", instance_type="ml.m5.xlarge", instance_count=2,
                      hyperparameters=hyperparameters, environment={"MY_VAR": "my value"}, region="eu-west-1")
    reporter = RecordingReporter()
    result = run_job(spec, reporter=reporter)

    assert result.status == "Completed", result.failure_reason
    seen = tagged_lines(reporter, "PROBE_JSON")
    assert sorted(seen) == ["algo-1", "algo-2"]
    for host, info in seen.items():
        assert info["is_hetero"] is False, host
        assert info["current_host"] == info["hostname"] == host
        assert info["current_instance_group"] == "homogeneousCluster", host
        assert info["current_instance_type"] == "ml.m5.xlarge", host
        assert info["current_instance_group_hosts"] == ["algo-1", "algo-2"], host
        assert info["instance_groups"] == ["homogeneousCluster"], host
        assert info["hosts"] == ["algo-1", "algo-2"], host
        assert info["env"]["SM_IS_HETERO"] == "false", host
        # Every value JSON-encoded by the SDK's rule and decoded by the toolkit: types survive, and
        # "007" stays a string.
        assert info["hyperparameters"] == hyperparameters, host
        assert info["os_env"] == {
            "TRAINING_JOB_NAME": result.job_name,
            "TRAINING_JOB_ARN": f"arn:aws:sagemaker:eu-west-1:000000000000:training-job/{result.job_name}",
            "AWS_REGION": "eu-west-1",
            "MY_VAR": "my value",
        }, host
    job = json.loads((result.job_dir / "job.json").read_text())
    assert job["ResourceConfig"] == {"InstanceCount": 2, "InstanceType": "ml.m5.xlarge", "VolumeSizeInGB": 30}
    assert [h["InstanceGroupName"] for h in job["Hosts"]] == ["homogeneousCluster"] * 2


# With this seed, 4 hosts shuffled into two groups of 2 give instance_group_1 = [algo-4, algo-2]:
# algo-1 is not in the first group and the group's hosts are not consecutive.
SHUFFLE_SEED = 7


def test_shuffled_host_order(tmp_path: Path) -> None:
    spec = probe_spec(
        tmp_path,
        base_job_name="seed-shuffled",
        instance_groups=[
            {"instance_group_name": G1, "instance_type": C5, "instance_count": 2},
            {"instance_group_name": G2, "instance_type": P3DN, "instance_count": 2},
        ],
    )
    plan_groups = {g.name: list(g.hosts) for g in assign_hosts(spec, "shuffled", SHUFFLE_SEED)}
    # The seed still does what this test needs (the shuffle is random.Random(seed).shuffle).
    names = ["algo-1", "algo-2", "algo-3", "algo-4"]
    random.Random(SHUFFLE_SEED).shuffle(names)
    assert plan_groups == {G1: names[:2], G2: names[2:]}
    assert "algo-1" not in plan_groups[G1]
    numbers = sorted(int(h.split("-")[1]) for h in plan_groups[G1])
    assert numbers[-1] - numbers[0] + 1 != len(numbers), "instance_group_1 should be non-contiguous"
    assert make_plan(spec, "x", "shuffled", SHUFFLE_SEED).groups == assign_hosts(spec, "shuffled", SHUFFLE_SEED)

    reporter = RecordingReporter()
    result = run_job(spec, RunOptions(host_order="shuffled", seed=SHUFFLE_SEED), reporter=reporter)

    assert result.status == "Completed", result.failure_reason
    assert result.seed == SHUFFLE_SEED
    assert any(f"seed {SHUFFLE_SEED}" in m for m in reporter.infos), reporter.infos
    seen = tagged_lines(reporter, "PROBE_JSON")
    assert sorted(seen) == ["algo-1", "algo-2", "algo-3", "algo-4"]
    group_of = {h: g for g, hosts in plan_groups.items() for h in hosts}
    for host, info in seen.items():
        group = group_of[host]
        assert info["current_host"] == info["hostname"] == host
        assert info["current_instance_group"] == group, host
        assert info["current_instance_group_hosts"] == plan_groups[group], host
        assert info["current_instance_type"] == (C5 if group == G1 else P3DN), host
        assert {g: d["hosts"] for g, d in info["instance_groups_dict"].items()} == plan_groups, host
        assert info["hosts"] == ["algo-1", "algo-2", "algo-3", "algo-4"], host

    job = json.loads((result.job_dir / "job.json").read_text())
    assert job["Emulator"]["HostOrder"] == "shuffled"
    assert job["Emulator"]["Seed"] == SHUFFLE_SEED
    assert {h["Host"]: h["InstanceGroupName"] for h in job["Hosts"]} == group_of
