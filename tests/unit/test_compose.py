"""compose.py: the plan as a docker compose project (pure data, no Docker)."""

from __future__ import annotations

import copy
import ipaddress
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from testkit import invoke

from emulator.jobspec import JobSpec
from emulator.planning.compose import compose_project, compose_yaml, job_subnet, secret_variables
from emulator.planning.plan import make_plan
from emulator.planning.secrets import MASK


def _project(load: Callable[[dict[str, Any]], JobSpec], raw: dict[str, Any], job_dir: Path) -> dict[str, Any]:
    return compose_project(make_plan(load(raw), "hetero-test", job_dir=job_dir))


def test_one_service_per_host_with_fixed_names(load: Any, valid_raw: dict[str, Any], tmp_path: Path) -> None:
    doc = _project(load, valid_raw, tmp_path / "job")
    assert list(doc["services"]) == ["algo-1", "algo-2", "algo-3"]
    for host, service in doc["services"].items():
        assert service["container_name"] == f"hetero-test-{host}"
        assert service["hostname"] == host
        assert service["networks"]["job"]["aliases"] == [host]
        assert service["command"] == ["train"]
        assert "entrypoint" not in service
        assert service["init"] is True
        assert service["labels"]["io.hetero-emu.host"] == host
    assert doc["services"]["algo-3"]["labels"]["io.hetero-emu.group"] == "dnn_group"
    assert doc["networks"]["job"]["name"] == "hetero-emu-hetero-test"
    assert doc["networks"]["job"]["internal"] is False


def test_volumes_relative_inside_the_job_folder_read_only_for_data(
    load: Any, valid_raw: dict[str, Any], project: Path, tmp_path: Path
) -> None:
    doc = _project(load, valid_raw, tmp_path / "job")
    algo1 = doc["services"]["algo-1"]["volumes"]
    assert "./hosts/algo-1:/opt/ml:rw" in algo1
    for host, service in doc["services"].items():  # the channels' parent too: nothing can be added there
        assert f"./hosts/{host}/input/data:/opt/ml/input/data:ro" in service["volumes"]
    assert not any(":/opt/ml/code:" in v for v in algo1)  # a copy inside ./hosts/algo-1, not a mount
    assert f"{project / 'data' / 'train'}:/opt/ml/input/data/training:ro" in algo1
    assert not any("/opt/ml/input/data/validation" in v for v in algo1)
    algo3 = doc["services"]["algo-3"]["volumes"]
    assert f"{project / 'data' / 'validation'}:/opt/ml/input/data/validation:ro" in algo3
    assert not any("/opt/ml/input/data/training" in v for v in algo3)


def test_sharded_channel_mounts_the_staged_share(load: Any, valid_raw: dict[str, Any], tmp_path: Path) -> None:
    raw = copy.deepcopy(valid_raw)
    raw["inputs"]["training"]["distribution"] = "ShardedByS3Key"
    doc = _project(load, raw, tmp_path / "job")
    assert "./.staging/training/algo-2:/opt/ml/input/data/training:ro" in doc["services"]["algo-2"]["volumes"]


def test_a_pipe_channel_is_not_mounted_and_the_file_says_compose_cannot_feed_it(
    load: Any, valid_raw: dict[str, Any], tmp_path: Path
) -> None:
    raw = copy.deepcopy(valid_raw)
    raw["inputs"]["training"]["input_mode"] = "Pipe"
    plan = make_plan(load(raw), "hetero-test", job_dir=tmp_path / "job")
    text = compose_yaml(plan)
    assert text.startswith("# Pipe input mode channels (training) are streamed by `hetero-emu run` only")
    volumes = [v for service in yaml.safe_load(text)["services"].values() for v in service["volumes"]]
    assert not any("/opt/ml/input/data/training" in v for v in volumes)


def test_entrypoint_arguments_isolation_and_environment(load: Any, valid_raw: dict[str, Any], tmp_path: Path) -> None:
    raw = copy.deepcopy(valid_raw)
    raw["container_entry_point"] = ["python3", "/opt/ml/code/train.py"]
    raw["container_arguments"] = ["--fast"]
    raw["enable_network_isolation"] = True
    raw["environment"] = {"MY_VAR": "x"}
    doc = _project(load, raw, tmp_path / "job")
    service = doc["services"]["algo-2"]
    assert service["entrypoint"] == ["python3", "/opt/ml/code/train.py"]
    assert service["command"] == ["--fast"]
    assert service["environment"]["MY_VAR"] == "x"
    assert service["environment"]["TRAINING_JOB_NAME"] == "hetero-test"
    assert doc["networks"]["job"]["internal"] is True
    # No host address on the bridge either, as `run` does: the host's services stay out of reach.
    assert doc["networks"]["job"]["driver_opts"] == {"com.docker.network.bridge.inhibit_ipv4": "true"}


def test_memory_limit_is_the_plans(load: Any, valid_raw: dict[str, Any], tmp_path: Path) -> None:
    spec = load(valid_raw)
    limited = compose_project(make_plan(spec, "hetero-test", job_dir=tmp_path / "a", memory=512 * 1024**2))
    for service in limited["services"].values():
        assert service["mem_limit"] == service["memswap_limit"] == 512 * 1024**2
    unlimited = compose_project(make_plan(spec, "hetero-test", job_dir=tmp_path / "b", memory="none"))
    assert all("mem_limit" not in service for service in unlimited["services"].values())
    assert "driver_opts" not in unlimited["networks"]["job"]


def test_round_trips_through_yaml(load: Any, valid_raw: dict[str, Any], tmp_path: Path) -> None:
    doc = _project(load, valid_raw, tmp_path / "job")
    assert yaml.safe_load(yaml.safe_dump(doc, sort_keys=False)) == doc
    assert doc["version"] == "2.4"


def test_fixed_addresses_keep_every_host_resolvable(load: Any, valid_raw: dict[str, Any], tmp_path: Path) -> None:
    doc = _project(load, valid_raw, tmp_path / "job")
    config = doc["networks"]["job"]["ipam"]["config"][0]
    subnet = ipaddress.ip_network(config["subnet"])
    assert subnet.prefixlen == 24 and subnet.subnet_of(ipaddress.ip_network("10.200.0.0/13"))
    addresses = {h: s["networks"]["job"]["ipv4_address"] for h, s in doc["services"].items()}
    assert len(set(addresses.values())) == 3
    assert config["gateway"] not in addresses.values()
    assert all(ipaddress.ip_address(a) in subnet for a in addresses.values())
    for host, service in doc["services"].items():
        # every other host, by the address it really has; never itself (Docker adds that line)
        assert sorted(service["extra_hosts"]) == sorted(f"{h}:{a}" for h, a in addresses.items() if h != host)


def test_subnet_depends_only_on_the_job_name() -> None:
    assert job_subnet("job-a") == job_subnet("job-a")
    assert len({job_subnet(f"job-{i}")[0] for i in range(50)}) > 40


def test_dollar_signs_are_literal(load: Any, valid_raw: dict[str, Any], tmp_path: Path) -> None:
    raw = copy.deepcopy(valid_raw)
    raw["container_entry_point"] = ["sh", "-c", 'echo "$(hostname)" $HOME']
    raw["environment"] = {"PRICE": "5$"}
    service = _project(load, raw, tmp_path / "job")["services"]["algo-1"]
    assert service["entrypoint"] == ["sh", "-c", 'echo "$$(hostname)" $$HOME']
    assert service["environment"]["PRICE"] == "5$$"


# --------------------------------------------------------------------------------------------------
# Secrets: never written into compose.yaml or plan.json; compose reads them from the shell

SECRET = "s3cr3t-value-123"
SECRET_ENV = {"MY_API_KEY": SECRET, "DB_URL": f"https://me:{SECRET}@db", "MY_VAR": "plain"}


def test_secrets_are_listed_by_name_only(load: Any, valid_raw: dict[str, Any], tmp_path: Path) -> None:
    raw = copy.deepcopy(valid_raw)
    raw["environment"] = SECRET_ENV
    plan = make_plan(load(raw), "hetero-test", job_dir=tmp_path / "job")
    doc = compose_project(plan)
    for service in doc["services"].values():
        env = service["environment"]
        # None is YAML null: `docker-compose up` takes the value from its own environment
        assert env["MY_API_KEY"] is None
        assert env["DB_URL"] is None  # contains the secret: a masked value would break the container
        assert env["MY_VAR"] == "plain"
        assert env["TRAINING_JOB_NAME"] == "hetero-test"
    assert secret_variables(plan) == ["DB_URL", "MY_API_KEY"]
    assert plan.hosts[0].container.environment["MY_API_KEY"] == SECRET  # the plan itself keeps the real value

    text = compose_yaml(plan)
    assert SECRET not in text
    header = text[: text.index("version:")]
    assert all(line.startswith("#") for line in header.splitlines())
    assert "#   export DB_URL=..." in header and "#   export MY_API_KEY=..." in header
    assert yaml.safe_load(text) == doc
    assert "  MY_API_KEY: null\n" in text


def test_no_comment_without_secrets(load: Any, valid_raw: dict[str, Any], tmp_path: Path) -> None:
    plan = make_plan(load(valid_raw), "hetero-test", job_dir=tmp_path / "job")
    assert secret_variables(plan) == []
    assert compose_yaml(plan).startswith("version:")


def test_plan_to_dict_masks_secrets(load: Any, valid_raw: dict[str, Any], tmp_path: Path) -> None:
    raw = copy.deepcopy(valid_raw)
    raw["environment"] = SECRET_ENV
    plan = make_plan(load(raw), "hetero-test", job_dir=tmp_path / "job")
    data = plan.to_dict()
    assert SECRET not in json.dumps(data)
    for host in data["hosts"]:
        assert host["container"]["environment"]["MY_API_KEY"] == MASK
        assert host["container"]["environment"]["DB_URL"] == f"https://me:{MASK}@db"
        assert host["container"]["environment"]["MY_VAR"] == "plain"
    assert dict(plan.hosts[0].container.environment)["MY_API_KEY"] == SECRET


def test_render_writes_and_prints_no_secret(
    write_spec: Callable[[dict[str, Any]], Path], valid_raw: dict[str, Any], tmp_path: Path
) -> None:
    raw = copy.deepcopy(valid_raw)
    raw["environment"] = SECRET_ENV
    spec_path = write_spec(raw)
    out = tmp_path / "rendered"
    outputs = []
    for args in (["render", str(spec_path), "-o", str(out)], ["validate", str(spec_path)],
                 ["validate", "--json", str(spec_path)]):
        proc = invoke(*args)
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout + proc.stderr)
    assert all(SECRET not in text for text in outputs)
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {"plan.json", "compose.yaml"} <= {p.name for p in files}
    for path in files:
        assert SECRET.encode() not in path.read_bytes(), path
    assert json.loads((out / "plan.json").read_text())["hosts"][0]["container"]["environment"]["MY_API_KEY"] == MASK


def test_compose_containers_say_no_driver_runs_them(load: Any, valid_raw: dict[str, Any], tmp_path: Path) -> None:
    # Without it, `clean` would take a project someone runs with docker-compose for a job left behind.
    from emulator.backend.liveness import driver_alive
    from emulator.planning.plan import LABEL_DRIVER

    doc = _project(load, valid_raw, tmp_path / "job")
    labels = [service["labels"][LABEL_DRIVER] for service in doc["services"].values()]
    labels.append(doc["networks"]["job"]["labels"][LABEL_DRIVER])
    assert all(driver_alive(label) is None for label in labels)
