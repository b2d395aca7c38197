"""Requests the service accepts, which the emulator once refused (issue 31, point 4), and what the hosts
get from them: an output path inside a channel's prefix (a notebook's `<prefix>/output` beside
`<prefix>/data`), checkpoints inside a channel, and SDK v2's code channel under network isolation.
Beside them, the refusals kept, each naming the s3:// URIs the user wrote."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from emulator.errors import SpecError
from emulator.jobspec import JobSpec, load_spec_file, s3
from emulator.jobspec.request import HostPaths, validate_request
from emulator.planning.contract import CONFIG_DIR
from emulator.planning.plan import EVERY_HOST, INPUT_DATA, make_plan
from emulator.run import hostfiles, staging

JOB = "nb-job"
BUCKET = "bkt"
CODE_IN_CONTAINER = "/opt/ml/input/data/code/sourcedir.tar.gz"  # sagemaker/estimator.py, as the SDK sets it


def sourcedir(path: Path) -> Path:
    """sourcedir.tar.gz as the SDK packs source_dir: train.py at the top, gzip."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        data = b"print('from the code channel')\n"
        info = tarfile.TarInfo("train.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An S3 root with a notebook's layout: data under s3://bkt/prefix/data, the SDK's code upload."""
    root = tmp_path / "s3"
    (root / BUCKET / "prefix" / "data").mkdir(parents=True)
    (root / BUCKET / "prefix" / "data" / "a.csv").write_text("1\n")
    (root / BUCKET / "prefix" / "data" / "b.csv").write_text("2\n")
    sourcedir(root / BUCKET / JOB / "source" / "sourcedir.tar.gz")
    return root


def request(output: str, data: str, **changes: Any) -> dict[str, Any]:
    """What SDK v2's estimator.fit() sends for a homogeneous job of two hosts."""
    raw: dict[str, Any] = {
        "TrainingJobName": JOB,
        "AlgorithmSpecification": {"TrainingImage": "hetero-emu/training:py311", "TrainingInputMode": "File"},
        "HyperParameters": {"sagemaker_program": '"train.py"',
                            "sagemaker_submit_directory": json.dumps(f"s3://{BUCKET}/{JOB}/source/sourcedir.tar.gz")},
        "ResourceConfig": {"InstanceType": "ml.c5.xlarge", "InstanceCount": 2},
        "OutputDataConfig": {"S3OutputPath": output},
        "InputDataConfig": [{"ChannelName": "train", "DataSource": {"S3DataSource": {
            "S3Uri": data, "S3DataType": "S3Prefix", "S3DataDistributionType": "FullyReplicated"}}}],
    }
    raw.update(changes)
    return raw


def load(root: Path, raw: dict[str, Any], host_paths: HostPaths | None = None) -> JobSpec:
    with s3.given_root(root, "test"):
        if host_paths is None:
            return validate_request(raw, root.parent, "CreateTrainingJob")
        return validate_request(raw, root.parent, "CreateTrainingJob", host_paths=host_paths)


def refusals(root: Path, raw: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as info:
        load(root, raw)
    return [str(p) for p in info.value.problems]


def mounts(spec: JobSpec) -> dict[str, dict[str, str]]:
    """Each host's mounts, target -> source."""
    return {h.name: {m.target: m.source for m in h.container.mounts} for h in make_plan(spec, JOB).hosts}


# --------------------------------------------------------------------------------------------------
# An output path inside a channel's prefix


@pytest.mark.parametrize("data", [f"s3://{BUCKET}/prefix", f"s3://{BUCKET}/prefix/"])
def test_an_output_path_inside_the_channels_prefix_is_accepted_and_the_channel_is_what_was_there(
        root: Path, data: str) -> None:
    """The notebook's layout: output s3://bkt/prefix/output, the channel the whole prefix. The job
    writes under <output>/<job>/ (inside the channel's folder here); every host's channel is a share
    of the files listed before the job, so the job's own folder never shows in it."""
    spec = load(root, request(f"s3://{BUCKET}/prefix/output", data))
    assert spec.inputs["train"].snapshot
    assert spec.inputs["train"].files == ("data/a.csv", "data/b.csv")
    plan = make_plan(spec, JOB)
    job_dir = root / BUCKET / "prefix" / "output" / JOB
    assert Path(plan.job_dir) == job_dir
    share = job_dir / ".staging" / "train" / EVERY_HOST
    assert {host: m[f"{INPUT_DATA}/train"] for host, m in mounts(spec).items()} == {
        "algo-1": str(share), "algo-2": str(share)}

    staging.stage(plan)
    (job_dir / "output" / "model.tar.gz").write_bytes(b"written while the job runs")
    assert sorted(str(p.relative_to(share)) for p in share.rglob("*") if p.is_file()) == ["data/a.csv", "data/b.csv"]
    assert (share / "data" / "a.csv").read_text() == "1\n"
    staging.unstage(plan)
    assert (root / BUCKET / "prefix" / "data" / "a.csv").read_text() == "1\n"  # the user's file, untouched


def test_an_output_path_that_is_the_channels_own_prefix_is_accepted(root: Path) -> None:
    spec = load(root, request(f"s3://{BUCKET}/prefix/data", f"s3://{BUCKET}/prefix/data"))
    assert spec.inputs["train"].snapshot and spec.inputs["train"].files == ("a.csv", "b.csv")
    assert spec.output_path == root / BUCKET / "prefix" / "data"


def test_a_channel_the_job_does_not_write_into_stays_a_mount_of_its_folder(root: Path) -> None:
    """The SDK's default: output to the bucket, data in s3://bkt/prefix/data beside the job's prefix."""
    spec = load(root, request(f"s3://{BUCKET}/", f"s3://{BUCKET}/prefix/data"))
    assert not spec.inputs["train"].snapshot
    assert {m[f"{INPUT_DATA}/train"] for m in mounts(spec).values()} == {str(root / BUCKET / "prefix" / "data")}


def test_a_local_output_path_inside_a_channel_folder_is_accepted(project: Path, valid_raw: dict[str, Any]) -> None:
    valid_raw["output_path"] = "./data/train/out"
    (project / "job.yaml").write_text(yaml.safe_dump(valid_raw))
    spec = load_spec_file(project / "job.yaml")
    assert spec.inputs["training"].snapshot and not spec.inputs["validation"].snapshot


def test_checkpoints_inside_a_channel_leave_the_channel_as_it_was(root: Path, tmp_path: Path) -> None:
    """A checkpoint URI inside the channel: the hosts start with the checkpoint restored, and one
    synced back (renamed into place, as `emulator.run.checkpoints` copies) leaves the channel's file."""
    (root / BUCKET / "prefix" / "data" / "ckpt").mkdir()
    (root / BUCKET / "prefix" / "data" / "ckpt" / "step.pt").write_text("old")
    raw = request(f"s3://{BUCKET}/out", f"s3://{BUCKET}/prefix/data",
                  CheckpointConfig={"S3Uri": f"s3://{BUCKET}/prefix/data/ckpt"})
    spec = load(root, raw)
    assert spec.inputs["train"].snapshot
    plan = make_plan(spec, JOB)
    staging.stage(plan)
    share = Path(plan.job_dir) / ".staging" / "train" / EVERY_HOST
    newer = tmp_path / "step.pt"
    newer.write_text("new")
    assert hostfiles.copy_regular_file_into(newer, root / BUCKET / "prefix" / "data" / "ckpt", "step.pt")
    assert (root / BUCKET / "prefix" / "data" / "ckpt" / "step.pt").read_text() == "new"  # the checkpoint URI
    assert (share / "ckpt" / "step.pt").read_text() == "old"  # the channel, as it was before the job


# --------------------------------------------------------------------------------------------------
# The refusals kept, in the user's words


def test_data_inside_the_jobs_own_folder_is_refused_naming_the_s3_uris(root: Path) -> None:
    (root / BUCKET / JOB / "mine").mkdir(parents=True)
    (root / BUCKET / JOB / "mine" / "a.csv").write_text("1\n")
    [problem] = refusals(root, request(f"s3://{BUCKET}", f"s3://{BUCKET}/{JOB}/mine"))
    assert problem.startswith("OutputDataConfig.S3OutputPath: InputDataConfig[0].DataSource.S3DataSource.S3Uri "
                              f"(s3://{BUCKET}/{JOB}/mine) lies inside the job's own folder s3://{BUCKET}/{JOB}/")
    assert str(root) not in problem


def test_an_output_path_inside_the_code_is_refused(project: Path, valid_raw: dict[str, Any]) -> None:
    valid_raw["output_path"] = "./code/out"
    (project / "job.yaml").write_text(yaml.safe_dump(valid_raw))
    with pytest.raises(SpecError) as info:
        load_spec_file(project / "job.yaml")
    assert [(p.path, p.message) for p in info.value.problems] == [
        ("output_path", "./code/out overlaps source_dir (./code)")]


# --------------------------------------------------------------------------------------------------
# SDK v2 under network isolation: the code as a channel, the submit directory a file in the container


def isolated(channel_uri: str) -> dict[str, Any]:
    """What SDK v2 sends with enable_network_isolation=True and a source_dir (sagemaker/estimator.py
    `_prepare_for_training`, sagemaker/job.py `_load_config`: the `code` channel)."""
    raw = request(f"s3://{BUCKET}/", f"s3://{BUCKET}/prefix/data", EnableNetworkIsolation=True)
    raw["HyperParameters"]["sagemaker_submit_directory"] = json.dumps(CODE_IN_CONTAINER)
    raw["InputDataConfig"].append({"ChannelName": "code", "DataSource": {"S3DataSource": {
        "S3Uri": channel_uri, "S3DataType": "S3Prefix", "S3DataDistributionType": "FullyReplicated"}}})
    return raw


@pytest.mark.parametrize("uri", [f"s3://{BUCKET}/{JOB}/source/sourcedir.tar.gz", f"s3://{BUCKET}/{JOB}/source"])
@pytest.mark.parametrize("host_paths", [None, HostPaths.only()], ids=["sdk", "serve"])
def test_the_sdks_code_channel_under_network_isolation_is_the_code(
        root: Path, uri: str, host_paths: HostPaths | None) -> None:
    spec = load(root, isolated(uri), host_paths)
    archive = root / BUCKET / JOB / "source" / "sourcedir.tar.gz"
    assert (spec.source_dir, spec.source_archive, spec.enable_network_isolation) == (archive, True, True)
    plan = make_plan(spec, JOB)
    staging.stage(plan)
    for host in plan.hosts:
        host_dir = Path(host.host_dir)
        assert (host_dir / "code" / "train.py").read_text() == "print('from the code channel')\n"
        written = json.loads(host.files[f"{CONFIG_DIR}/hyperparameters.json"])
        assert written["sagemaker_submit_directory"] == '"/opt/ml/code"'  # unpacked there, as the toolkit would
        code_channel = Path({m.target: m.source for m in host.container.mounts}[f"{INPUT_DATA}/code"])
        assert (code_channel / "sourcedir.tar.gz").read_bytes() == archive.read_bytes()


def test_a_submit_directory_in_the_container_that_no_channel_holds_is_refused(root: Path) -> None:
    raw = isolated(f"s3://{BUCKET}/{JOB}/source/sourcedir.tar.gz")
    raw["InputDataConfig"].pop()
    [problem] = refusals(root, raw)
    assert problem.startswith(f"HyperParameters.sagemaker_submit_directory: '{CODE_IN_CONTAINER}' is a file in "
                              "the container that no channel of the request holds")


def heterogeneous_isolated(groups_on_data: list[str] | None) -> dict[str, Any]:
    """SDK v2's request for a two-group estimator with enable_network_isolation=True: its `code`
    channel names no instance groups (sagemaker/job.py `_load_config`), the user's may."""
    raw = isolated(f"s3://{BUCKET}/{JOB}/source/sourcedir.tar.gz")
    raw["ResourceConfig"] = {"InstanceGroups": [
        {"InstanceGroupName": "data_group", "InstanceType": "ml.c5.xlarge", "InstanceCount": 1},
        {"InstanceGroupName": "dnn_group", "InstanceType": "ml.c5.xlarge", "InstanceCount": 1}]}
    if groups_on_data is not None:
        raw["InputDataConfig"][0]["DataSource"]["S3DataSource"]["InstanceGroupNames"] = groups_on_data
    return raw


def test_a_heterogeneous_isolated_job_whose_channels_name_groups_is_refused_as_the_service_refuses_it(
        root: Path) -> None:
    """The service's all-or-none rule (https://github.com/aws/sagemaker-python-sdk/issues/6089), in its
    words, with what to do about SDK v2's `code` channel."""
    [problem] = refusals(root, heterogeneous_isolated(["data_group"]))
    assert problem.startswith("InputDataConfig: Some channels have assigned instance groups: [train] while "
                              "others not: [code]")
    assert "SDK v2's own `code` channel under enable_network_isolation" in problem


def test_a_heterogeneous_isolated_job_whose_channels_name_no_group_gives_every_host_every_channel(
        root: Path) -> None:
    spec = load(root, heterogeneous_isolated(None))
    both = [f"{INPUT_DATA}/code", f"{INPUT_DATA}/train"]
    assert {host: sorted(m for m in targets if m.startswith(INPUT_DATA + "/"))
            for host, targets in mounts(spec).items()} == {"algo-1": both, "algo-2": both}
