"""README promises that no other unit test held: each test names the README sentence it keeps true.

The map from every README promise to its test is tests/README-promises.md.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from testkit import invoke

from emulator.backend.docker import DockerBackend
from emulator.backend.liveness import driver_alive
from emulator.compose import COMPOSE_DRIVER
from emulator.plan import make_plan, shard
from emulator.spec import JobSpec

Raw = dict[str, Any]


def run_cli(argv: list[str]) -> tuple[int, str]:
    """`hetero-emu ARGV` through the entry point's main(), in this process: (exit code, stdout + stderr)."""
    result = invoke(*argv)
    return result.returncode, result.stdout + result.stderr


# --------------------------------------------------------------------------------------------------
# "`--debug` (anywhere on the command line) shows tracebacks."


def test_debug_shows_the_traceback_that_is_hidden_otherwise(
    tmp_path: Path
) -> None:
    missing = str(tmp_path / "no-such-spec.yaml")
    code, plain = run_cli(["validate", missing])
    assert code == 2 and "Traceback" not in plain
    assert "no-such-spec.yaml" in plain
    for args in (["--debug", "validate", missing], ["validate", missing, "--debug"]):
        code, debug = run_cli(args)
        assert code == 2  # the same outcome, with the traceback added
        assert "Traceback (most recent call last)" in debug and "no-such-spec.yaml" in debug


# --------------------------------------------------------------------------------------------------
# "`output_path` / `checkpoint_s3_uri` may not overlap the code or a channel": inside them (tested in
# test_spec_validation) and around them, which a project folder as output_path would be.


@pytest.mark.parametrize("field", ["output_path", "checkpoint_s3_uri"])
def test_a_folder_holding_the_code_and_the_data_is_refused_for_output_and_checkpoints(
    field: str, valid_raw: Raw, problems: Callable[[Raw], list[Any]]
) -> None:
    valid_raw[field] = "."  # the project folder: it holds ./code and ./data/*
    found = {(p.path, p.message.split(" overlaps ", 1)[1].split(" ", 1)[0]) for p in problems(valid_raw)
             if " overlaps " in p.message}
    assert found == {(field, "source_dir"), (field, "inputs.training.s3_data"), (field, "inputs.validation.s3_data")}


# --------------------------------------------------------------------------------------------------
# "`ShardedByS3Key`: each host of the channel's groups gets a disjoint share of the files (round-robin
# over sorted keys), together all."


def test_sharding_is_round_robin_over_the_sorted_keys() -> None:
    keys = ("a.csv", "b.csv", "c.csv", "d.csv", "e.csv")  # channels list their keys sorted (spec.paths.scan)
    assert shard(keys, ("algo-1", "algo-2")) == {"algo-1": ("a.csv", "c.csv", "e.csv"), "algo-2": ("b.csv", "d.csv")}


def test_a_channels_keys_are_listed_sorted(load: Callable[[Raw], JobSpec], project: Path, valid_raw: Raw) -> None:
    for name in ("z.csv", "m.csv", "a.csv"):
        (project / "data" / "train" / name).write_text(name)
    files = load(valid_raw).inputs["training"].files
    assert list(files) == sorted(files) and "z.csv" in files


# --------------------------------------------------------------------------------------------------
# "Containers started by `docker-compose up` from a rendered project are labelled `docker-compose`: no
# driver can be checked, so only `clean --job` or `--all` removes them." (`clean` leaves alone what
# cannot be told: test_liveness::test_clean_removes_only_what_a_gone_driver_left.)


def test_a_compose_containers_driver_cannot_be_told() -> None:
    assert driver_alive(COMPOSE_DRIVER) is None


# --------------------------------------------------------------------------------------------------
# Whose files: "`chown -R uid:gid` in a short-lived container of the job's image, with no network ...
# Under rootless Docker nothing is needed (container root is you); under userns-remap the chown
# container runs in the host's user namespace." Engines of each kind are not at hand in CI, so the
# engine's answer (`docker info` SecurityOptions) is stubbed and what the backend asks for is checked.


class StubAPI:
    def __init__(self) -> None:
        self.containers: list[dict[str, Any]] = []
        self.removed: list[str] = []

    def create_host_config(self, **options: Any) -> dict[str, Any]:
        return options

    def create_container(self, image: str, **options: Any) -> dict[str, str]:
        self.containers.append({"image": image, **options})
        return {"Id": f"chown-{len(self.containers)}"}

    def start(self, ident: str) -> None:
        pass

    def wait(self, ident: str, timeout: float) -> dict[str, int]:
        return {"StatusCode": 0}

    def remove_container(self, ident: str, force: bool) -> None:
        self.removed.append(ident)


class StubClient:
    def __init__(self, security_options: list[str]) -> None:
        self.api = StubAPI()
        self._security = security_options

    def info(self) -> dict[str, Any]:
        return {"SecurityOptions": self._security}


@pytest.mark.parametrize(("security", "userns_mode"), [
    (["name=seccomp,profile=builtin"], None),
    (["name=seccomp,profile=builtin", "name=userns"], "host"),
])
def test_ownership_is_given_back_by_a_chown_container_without_network(
    security: list[str], userns_mode: str | None, load: Callable[[Raw], JobSpec], valid_raw: Raw, tmp_path: Path
) -> None:
    plan = make_plan(load(valid_raw), "hetero-test", job_dir=tmp_path / "job")
    client = StubClient(security)
    DockerBackend(client).fix_ownership(plan, 4242, 4343)  # type: ignore[arg-type]
    (made,) = client.api.containers
    assert made["image"] == plan.image
    assert made["entrypoint"] == ["chown", "-R", "4242:4343", "/hosts"] and made["user"] == "0"
    host_config = made["host_config"]
    assert host_config["network_mode"] == "none"
    assert host_config["userns_mode"] == userns_mode
    (mount,) = host_config["mounts"]
    assert (mount["Source"], mount["Target"]) == (str(tmp_path / "job" / "hosts"), "/hosts")
    assert client.api.removed == ["chown-1"]  # short-lived


def test_rootless_docker_needs_no_chown_container(
    load: Callable[[Raw], JobSpec], valid_raw: Raw, tmp_path: Path
) -> None:
    plan = make_plan(load(valid_raw), "hetero-test", job_dir=tmp_path / "job")
    client = StubClient(["name=seccomp,profile=builtin", "name=rootless"])
    DockerBackend(client).fix_ownership(plan, 4242, 4343)  # type: ignore[arg-type]
    assert client.api.containers == []


# --------------------------------------------------------------------------------------------------
# The watcher "removes exactly those ids, retrying until the engine answers (for up to 10 minutes)".


def test_the_watcher_keeps_trying_for_ten_minutes() -> None:
    from emulator.backend import reaper

    assert reaper.REAP_PATIENCE == 10 * 60
