"""Shared fixtures for the unit tests: no engine, a project folder on disk and helpers to load specs
from it.

Every spec is written as YAML into a temporary project folder and loaded with
`emulator.jobspec.load_spec_file`, so the tests go through the same path as `hetero-emu validate`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker.api.client
import pytest
import requests
import yaml

from emulator.errors import Problem, SpecError
from emulator.jobspec import JobSpec, load_spec_file

# A valid heterogeneous spec (the AWS guide's first cluster); tests copy and break it.
VALID_HETERO: dict[str, Any] = {
    "job_name": "hetero-test",
    "entry_point": "train.py",
    "source_dir": "./code",
    "hyperparameters": {"epochs": 2, "lr": 0.01},
    "instance_groups": [
        {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "instance_count": 2},
        {"instance_group_name": "dnn_group", "instance_type": "ml.p3.2xlarge", "instance_count": 1},
    ],
    "inputs": {
        "training": {"s3_data": "./data/train", "instance_groups": ["data_group"]},
        "validation": {"s3_data": "./data/validation", "instance_groups": ["dnn_group"]},
    },
}

TRAIN_FILES = ("part-0.csv", "part-1.csv", "part-2.csv")

#: Every unit test's DOCKER_HOST: a socket that does not exist.
NO_ENGINE = "unix:///nonexistent/hetero-emu-unit-tests.sock"


def _no_engine_answers(self: docker.api.client.APIClient, request: requests.PreparedRequest,
                       **kwargs: Any) -> requests.Response:
    raise requests.exceptions.ConnectionError(f"a unit test talks to no Docker engine ({request.method} "
                                              f"{request.url}): engines are faked (fake_backend.py)")


@pytest.fixture(scope="module", autouse=True)
def no_engine() -> Iterator[None]:
    """Unit tests never touch an engine, whatever the shell exports: DOCKER_HOST names a socket that does
    not exist, for this process and every process a test starts (module-scoped, so a module's `serve`
    process too), and every request of docker-py in this process fails as it would at that socket,
    naming itself, before it leaves the process: a test that needs an engine fails with the
    DockerUnavailable that says so. The tests of what happens without an engine see just that."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DOCKER_HOST", NO_ENGINE)
        for name in ("DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "HETERO_EMU_SWARM_MANAGER",
                     "HETERO_EMU_SWARM_NODES"):
            patch.delenv(name, raising=False)
        patch.setattr(docker.api.client.APIClient, "send", _no_engine_answers)
        yield


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder holding code/train.py, two data folders, a single file and a local S3 root."""
    root = tmp_path / "project"
    (root / "code").mkdir(parents=True)
    (root / "code" / "train.py").write_text("print('hello')\n")
    (root / "data" / "train").mkdir(parents=True)
    for name in TRAIN_FILES:
        (root / "data" / "train" / name).write_text(f"{name}\n")
    (root / "data" / "validation").mkdir()
    (root / "data" / "validation" / "val.csv").write_text("v\n")
    (root / "data" / "single.csv").write_text("1,2,3\n")
    bucket = root / "s3" / "my-bucket" / "prefix" / "train"
    bucket.mkdir(parents=True)
    (bucket / "s3-part.csv").write_text("s3\n")
    return root


@pytest.fixture
def valid_raw() -> dict[str, Any]:
    """A fresh deep copy of a valid heterogeneous spec, to be broken by a test."""
    return copy.deepcopy(VALID_HETERO)


@pytest.fixture
def write_spec(project: Path) -> Callable[[str | dict[str, Any]], Path]:
    """Write YAML text (or a mapping, dumped as YAML) to project/job.yaml and return its path."""

    def write(spec: str | dict[str, Any]) -> Path:
        text = spec if isinstance(spec, str) else yaml.safe_dump(spec, sort_keys=False)
        path = project / "job.yaml"
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def load(write_spec: Callable[[str | dict[str, Any]], Path]) -> Callable[[str | dict[str, Any]], JobSpec]:
    """Write a spec into the project folder and load it; returns the validated JobSpec."""

    def load_(spec: str | dict[str, Any]) -> JobSpec:
        return load_spec_file(write_spec(spec))

    return load_


@pytest.fixture
def problems(write_spec: Callable[[str | dict[str, Any]], Path]) -> Callable[[str | dict[str, Any]], list[Problem]]:
    """Write a spec, expect SpecError from loading it, return its problems."""

    def problems_(spec: str | dict[str, Any]) -> list[Problem]:
        with pytest.raises(SpecError) as info:
            load_spec_file(write_spec(spec))
        assert info.value.problems, "a SpecError must carry at least one problem"
        return info.value.problems

    return problems_


def _find_problem(found: list[Problem], path: str, fragment: str, hint: str | None = None) -> Problem:
    """The one problem at `path` whose message contains `fragment` (and whose hint contains `hint`)."""
    for p in found:
        if p.path == path and fragment in p.message and (hint is None or (p.hint and hint in p.hint)):
            return p
    listing = "\n".join(f"  {p.path!r}: {p.message!r} (hint {p.hint!r})" for p in found)
    raise AssertionError(f"no problem at {path!r} with {fragment!r} (hint {hint!r}); got:\n{listing}")


@pytest.fixture
def find() -> Callable[..., Problem]:
    """`find(problems, path, fragment, hint=None)`: the matching problem, or an AssertionError listing all."""
    return _find_problem


@pytest.fixture
def expect_problem(
    problems: Callable[[str | dict[str, Any]], list[Problem]],
) -> Callable[..., Problem]:
    """Load a spec, expect it to be rejected with a problem at `path` mentioning `fragment`."""

    def expect(spec: str | dict[str, Any], path: str, fragment: str, hint: str | None = None) -> Problem:
        return _find_problem(problems(spec), path, fragment, hint)

    return expect
