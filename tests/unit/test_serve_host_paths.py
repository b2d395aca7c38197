"""What a CreateTrainingJob sent to `hetero-emu serve` may name: S3 locations only, or local paths under
the roots given with `--allow-host-path`, resolved (links, '..') before they are compared; the
in-process session, which runs as its user, still takes any local folder. Real server processes,
real boto3 clients; no job is ever started (each request is refused before its driver would be)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from serving import Server, running_server

from emulator.jobspec import request, s3
from emulator.sagemaker.local import local_aws

ROLE = "arn:aws:iam::000000000000:role/hetero-emu"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("serve")) as running:
        yield running


@pytest.fixture(scope="module")
def allowed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root with a channel's data in it, a link out of it, and a folder beside it."""
    top = tmp_path_factory.mktemp("hosts")
    root = top / "allowed"
    (root / "data").mkdir(parents=True)
    (root / "data" / "part-0.csv").write_text("1,2\n")
    (top / "beside").mkdir()
    (top / "beside" / "secret.txt").write_text("not yours\n")
    (root / "escape").symlink_to(top / "beside")
    return root


@pytest.fixture(scope="module")
def rooted(tmp_path_factory: pytest.TempPathFactory, allowed: Path) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("serve-rooted"), ["--allow-host-path", str(allowed)]) as running:
        yield running


def client(server: Server, *, validate: bool = True) -> Any:
    return server.client("sagemaker", parameter_validation=validate)


def job(name: str, **changes: Any) -> dict[str, Any]:
    """A CreateTrainingJob request the service would take, with `changes` on top (None removes a key)."""
    params: dict[str, Any] = {
        "TrainingJobName": name, "RoleArn": ROLE,
        "AlgorithmSpecification": {"TrainingImage": "hetero-emu/training:py311", "TrainingInputMode": "File"},
        "HyperParameters": {"sagemaker_program": json.dumps("train.py"),
                            "sagemaker_submit_directory": json.dumps("s3://code/sourcedir.tar.gz")},
        "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
        "OutputDataConfig": {"S3OutputPath": "s3://out/jobs"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    }
    for key, value in changes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = value
    return params


def channel(uri: str) -> list[dict[str, Any]]:
    return [{"ChannelName": "train", "DataSource": {"S3DataSource": {"S3Uri": uri, "S3DataType": "S3Prefix"}}}]


def refusal(server: Server, params: dict[str, Any], *, validate: bool = True) -> str:
    """The ValidationException's message for `params`; the job must not exist afterwards."""
    sagemaker = client(server, validate=validate)
    with pytest.raises(ClientError) as caught:
        sagemaker.create_training_job(**params)
    error = caught.value.response["Error"]
    assert error["Code"] == "ValidationException", error
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    listed = sagemaker.list_training_jobs(NameContains=params.get("TrainingJobName") or "none")
    assert listed["TrainingJobSummaries"] == []
    assert not list((server.state_dir / "drivers").glob("*.json"))  # no driver was handed a job
    return str(error["Message"])


PATTERN = "Member must satisfy regular expression pattern: (https|s3)://([^/]+)/?(.*)"


@pytest.mark.parametrize(("field", "params"), [
    ("inputDataConfig.1.member.dataSource.s3DataSource.s3Uri", {"InputDataConfig": channel("file:///etc/shadow")}),
    ("inputDataConfig.1.member.dataSource.s3DataSource.s3Uri", {"InputDataConfig": channel("/etc")}),
    ("outputDataConfig.s3OutputPath", {"OutputDataConfig": {"S3OutputPath": "file:///tmp/anywhere"}}),
    ("checkpointConfig.s3Uri", {"CheckpointConfig": {"S3Uri": "file:///root/.ssh"}}),
    ("tensorBoardOutputConfig.s3OutputPath", {"TensorBoardOutputConfig": {"S3OutputPath": "/var/tmp/tb"}}),
    ("debugHookConfig.s3OutputPath", {"DebugHookConfig": {"S3OutputPath": "file:///etc/cron.d"}}),
    ("profilerConfig.s3OutputPath", {"ProfilerConfig": {"S3OutputPath": "/etc"}}),
])
def test_a_host_path_where_an_s3_uri_belongs_is_the_services_validation_error(server: Server, field: str,
                                                                              params: dict[str, Any]) -> None:
    message = refusal(server, job(f"host-{field.split('.')[0].lower()[:20]}", **params))
    assert message.startswith("1 validation error detected: Value '")
    assert f"at '{field}' failed to satisfy constraint: {PATTERN}" in message


@pytest.mark.parametrize("where", ["/etc", "file:///etc", "~root", "code/../../etc"])
def test_a_host_folder_as_the_submit_directory_is_refused(server: Server, where: str) -> None:
    hyper = {"sagemaker_program": json.dumps("passwd"), "sagemaker_submit_directory": json.dumps(where)}
    message = refusal(server, job("host-code", HyperParameters=hyper))
    assert "HyperParameters.sagemaker_submit_directory" in message and "is not an S3 URI" in message
    assert "/etc/passwd" not in message


def test_a_program_without_a_submit_directory_is_a_host_path_too(server: Server) -> None:
    message = refusal(server, job("host-program", HyperParameters={"sagemaker_program": json.dumps("/etc/passwd")}))
    assert "HyperParameters.sagemaker_program: '/etc/passwd' is not an S3 URI" in message


def test_with_credentials_on_every_address_the_rule_is_the_same(tmp_path: Path) -> None:
    with running_server(tmp_path, ["--host", "0.0.0.0", "--credentials", "emu:emu"]) as served:
        served.url = served.url.replace("0.0.0.0", "127.0.0.1")
        message = refusal(served, job("host-open", InputDataConfig=channel("file:///etc/shadow")))
    assert PATTERN in message


def test_a_missing_role_and_output_are_named(server: Server) -> None:
    message = refusal(server, job("no-role", RoleArn=None, OutputDataConfig=None), validate=False)
    assert message.startswith("2 validation errors detected: ")
    assert "Value null at 'roleArn' failed to satisfy constraint: Member must not be null" in message
    assert "Value null at 'outputDataConfig' failed to satisfy constraint: Member must not be null" in message


# --------------------------------------------------------------------------------------------------
# --allow-host-path


def test_a_path_under_an_allowed_root_gets_through(rooted: Server, allowed: Path) -> None:
    """The path passes the rule; the request is refused only for what the test leaves out on purpose
    (the script), which the job's own rules find after the path was let through."""
    for uri in (str(allowed / "data"), f"file://{allowed}/data", f"file://{allowed}/out/../data"):
        params = job("rooted-ok", InputDataConfig=channel(uri),
                     OutputDataConfig={"S3OutputPath": f"file://{allowed}/out"},
                     HyperParameters={})
        message = refusal(rooted, params)
        assert "sagemaker_program: missing" in message, message
        assert "not an S3 URI" not in message and "allow-host-path" not in message


@pytest.mark.parametrize("outside", [
    "/etc",                       # another folder
    "{root}/../beside",           # '..' out of the root
    "file://{root}/escape",       # a link out of the root
    "{root}/escape/secret.txt",   # a file behind that link
    "{root}-sibling",             # a name that merely starts with the root's
])
def test_a_path_outside_the_allowed_roots_is_refused(rooted: Server, allowed: Path, outside: str) -> None:
    uri = outside.format(root=allowed)
    message = refusal(rooted, job("rooted-out", InputDataConfig=channel(uri)))
    assert "not under a folder this server was started with --allow-host-path" in message
    assert str(allowed) not in message.replace(uri, "")  # the roots themselves are not told


def test_an_output_outside_the_allowed_roots_is_refused(rooted: Server) -> None:
    message = refusal(rooted, job("rooted-write", CheckpointConfig={"S3Uri": "file:///etc/cron.d"}))
    assert "CheckpointConfig.S3Uri: 'file:///etc/cron.d' is not an S3 URI" in message


def test_an_allowed_root_must_be_a_folder(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="--allow-host-path .*: not a folder"), \
            running_server(tmp_path, ["--allow-host-path", str(tmp_path / "missing")]):
        pass


# --------------------------------------------------------------------------------------------------
# the in-process session


def test_the_in_process_session_still_takes_local_folders(tmp_path: Path) -> None:
    aws = local_aws(s3_root=tmp_path, images=None, region="us-west-2", engine="docker", origin="test")
    assert aws.training.host_paths.any_path and aws.training.own_patterns == frozenset()
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    (tmp_path / "data").mkdir()
    raw = job("local", InputDataConfig=channel(f"file://{tmp_path}/data"),
              OutputDataConfig={"S3OutputPath": str(tmp_path / "out")},
              HyperParameters={"sagemaker_program": json.dumps("train.py"),
                               "sagemaker_submit_directory": json.dumps(str(tmp_path / "code"))})
    with s3.given_root(tmp_path):
        spec = request.validate_request(raw, tmp_path, "test", host_paths=aws.training.host_paths)
    assert spec.source_dir == tmp_path / "code" and spec.output_path == tmp_path / "out"
