"""The CreateTrainingJob request SDK v3's ModelTrainer sends for a heterogeneous job, as it sends it:
no `sagemaker_program`, the command `/bin/bash -c "chmod +x .../sm_train.sh && .../sm_train.sh"`, and
the code and the SDK's driver scripts as channels (`code`, `sm_drivers`) uploaded under the job's own
prefix `<S3OutputPath>/<job>/input/`. Those channels are each host's own writable copy (the chmod
must work, and must not reach the S3 root); the user's channels stay read-only mounts of their data;
hyperparameters.json holds the request's keys only."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import boto3
import pytest

from emulator.aws import stub
from emulator.aws.training import SageMakerTraining
from emulator.errors import SpecError
from emulator.jobs.ticket import DriverTicket
from emulator.jobspec import JobSpec, s3
from emulator.jobspec.request import validate_request
from emulator.planning.contract import CONFIG_DIR
from emulator.planning.plan import INPUT_DATA, make_plan
from emulator.run import staging
from emulator.state import job_records

BUCKET = "sagemaker-us-west-2-000000000000"
JOB = "hetero-20240101000000"
PREFIX = f"s3://{BUCKET}/hetero/{JOB}/input"
DRIVER = "/opt/ml/input/data/sm_drivers/sm_train.sh"


def channel(name: str, uri: str, groups: list[str], **extra: Any) -> dict[str, Any]:
    return {"ChannelName": name, "DataSource": {"S3DataSource": {
        "S3DataType": "S3Prefix", "S3Uri": uri, "S3DataDistributionType": "FullyReplicated",
        "InstanceGroupNames": groups}}, **extra}


def v3_request() -> dict[str, Any]:
    """What ModelTrainer(...).train() sends (SDK 3.27), as recorded from its CreateTrainingJob call."""
    return {
        "TrainingJobName": JOB,
        "HyperParameters": {"epochs": "2"},
        "AlgorithmSpecification": {"TrainingInputMode": "File", "TrainingImage": "hetero-emu/training:py311",
                                   "ContainerEntrypoint": ["/bin/bash"],
                                   "ContainerArguments": ["-c", f"chmod +x {DRIVER} && {DRIVER}"]},
        "RoleArn": "arn:aws:iam::000000000000:role/SageMakerRole",
        "InputDataConfig": [
            channel("training", "s3://data-bucket/train", ["data"]),
            channel("code", f"{PREFIX}/code", ["data", "train"], InputMode="File"),
            channel("sm_drivers", f"{PREFIX}/sm_drivers", ["data", "train"], InputMode="File"),
        ],
        "OutputDataConfig": {"S3OutputPath": f"s3://{BUCKET}/hetero", "CompressionType": "GZIP"},
        "ResourceConfig": {"VolumeSizeInGB": 30, "InstanceGroups": [
            {"InstanceType": "ml.c5.xlarge", "InstanceCount": 1, "InstanceGroupName": "data"},
            {"InstanceType": "ml.p3.2xlarge", "InstanceCount": 2, "InstanceGroupName": "train"}]},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    }


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "s3"
    uploads = root / BUCKET / "hetero" / JOB / "input"
    (uploads / "code").mkdir(parents=True)
    (uploads / "code" / "train.py").write_text("print('hi')\n")
    (uploads / "sm_drivers" / "common").mkdir(parents=True)
    (uploads / "sm_drivers" / "sm_train.sh").write_text("#!/bin/bash\necho driver\n")
    (uploads / "sm_drivers" / "common" / "utils.py").write_text("")
    (root / "data-bucket" / "train").mkdir(parents=True)
    (root / "data-bucket" / "train" / "a.csv").write_text("1\n")
    return root


def load(root: Path, raw: dict[str, Any]) -> JobSpec:
    with s3.given_root(root, "test"):
        return validate_request(raw, root.parent, "CreateTrainingJob")


def test_the_v3_request_is_valid_and_runs_its_own_command(root: Path) -> None:
    spec = load(root, v3_request())
    assert spec.entry_point is None and spec.source_dir is None
    assert spec.container_entry_point == ("/bin/bash",)
    assert spec.container_arguments == ("-c", f"chmod +x {DRIVER} && {DRIVER}")
    assert spec.output_path == root / BUCKET / "hetero"
    assert {name: c.copied for name, c in spec.inputs.items()} == {
        "training": False, "code": True, "sm_drivers": True}


def test_the_sdks_channels_are_each_hosts_writable_copy_the_users_data_a_read_only_mount(
        root: Path, tmp_path: Path) -> None:
    plan = make_plan(load(root, v3_request()), JOB)
    job_dir = root / BUCKET / "hetero" / JOB
    for host in plan.hosts:
        mounts = {m.target: (m.source, m.read_only) for m in host.container.mounts}
        for name in ("code", "sm_drivers"):
            assert mounts[f"{INPUT_DATA}/{name}"] == (str(job_dir / ".staging" / name / host.name), False), host.name
        if host.group == "data":
            assert mounts[f"{INPUT_DATA}/training"] == (str(root / "data-bucket" / "train"), True)
        else:
            assert f"{INPUT_DATA}/training" not in mounts
        assert mounts[INPUT_DATA][1] is True  # the folder itself stays read-only

    staging.stage(plan)
    source = job_dir / "input" / "sm_drivers" / "sm_train.sh"
    for host in plan.hosts:
        copy = job_dir / ".staging" / "sm_drivers" / host.name / "sm_train.sh"
        assert copy.read_text() == source.read_text()
        assert not os.path.samefile(copy, source)  # a copy: chmod or a write stays on this host
        assert (job_dir / ".staging" / "sm_drivers" / host.name / "common" / "utils.py").is_file()
        assert (job_dir / ".staging" / "code" / host.name / "train.py").is_file()
    os.chmod(job_dir / ".staging" / "sm_drivers" / "algo-1" / "sm_train.sh", 0o755)
    assert not source.stat().st_mode & stat.S_IXUSR
    staging.unstage(plan)
    assert not (job_dir / ".staging").exists() and source.is_file()


def test_a_request_gets_its_own_hyperparameters_only(root: Path) -> None:
    plan = make_plan(load(root, v3_request()), JOB)
    for host in plan.hosts:
        # No sagemaker_job_name/region/log level: v3's driver would pass them to the script as options.
        assert json.loads(host.files[f"{CONFIG_DIR}/hyperparameters.json"]) == {"epochs": "2"}
    v2_style = v3_request()
    v2_style["HyperParameters"] = {"epochs": "2", "sagemaker_job_name": json.dumps(JOB),
                                   "sagemaker_region": '"us-west-2"', "sagemaker_container_log_level": "20"}
    written = json.loads(make_plan(load(root, v2_style), JOB).hosts[0].files[f"{CONFIG_DIR}/hyperparameters.json"])
    assert written == {"epochs": "2", "sagemaker_job_name": json.dumps(JOB), "sagemaker_region": '"us-west-2"',
                       "sagemaker_container_log_level": "20"}


def test_a_channel_under_the_job_prefix_but_not_the_sdks_upload_is_refused(root: Path) -> None:
    """Only `input/` (and v2's `source/`) of the job's own prefix is the SDK's: anything else there
    would be the job's output, which a channel must not read."""
    raw = v3_request()
    (root / BUCKET / "hetero" / JOB / "other").mkdir()
    (root / BUCKET / "hetero" / JOB / "other" / "x").write_text("")
    raw["InputDataConfig"].append(channel("other", f"s3://{BUCKET}/hetero/{JOB}/other", ["data"]))
    with pytest.raises(SpecError, match="lies inside the job's own folder"):
        load(root, raw)


def test_the_job_runs_in_the_services_region_unless_the_request_names_one(
        root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """v3 sends no `sagemaker_region`: the hosts' AWS_REGION and the job's ARN are the region of the
    service that took the request (the driver gets it with the ticket), as on SageMaker."""
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    session = boto3.Session(aws_access_key_id="x", aws_secret_access_key="y", region_name="eu-west-1")
    stub.install(session, [SageMakerTraining(root, region="eu-west-1", engine_name="no-such-engine")])
    sm: Any = session.client("sagemaker")
    v2_style = v3_request()
    v2_style.update(TrainingJobName="named-region", HyperParameters={"sagemaker_region": '"ap-south-1"'})
    for raw, region in ((v3_request(), "eu-west-1"), (v2_style, "ap-south-1")):
        name = raw["TrainingJobName"]
        sm.create_training_job(**raw)
        ticket = DriverTicket.read(job_records.state_dir() / "drivers" / f"{name}.json")
        with s3.given_root(root, "test"):
            spec = validate_request(ticket.request, root.parent, "CreateTrainingJob", ticket.overrides)
        assert spec.region == region, name
        environment = make_plan(spec, name).hosts[0].container.environment
        assert environment["AWS_REGION"] == region and f":{region}:" in environment["TRAINING_JOB_ARN"], name
        deadline = time.monotonic() + 60  # the driver ends (its engine does not exist) before the test does
        while sm.describe_training_job(TrainingJobName=name)["TrainingJobStatus"] == "InProgress":
            assert time.monotonic() < deadline, "the driver never ended"
            time.sleep(0.1)
