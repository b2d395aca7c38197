"""A CreateTrainingJob request as input (issue 8, part 2): detected by its content (JSON or YAML text),
checked by the same rules as the YAML spec with problems in the request's words, hyperparameters
written as the API has them, and the way back (`render --as-request`) giving the same plan."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_invalid_corpus import CORPUS, run_cli

from emulator import api
from emulator.errors import SpecError
from emulator.jobspec import hyperparameters
from emulator.jobspec.request import RequestNames, request_from_spec
from emulator.planning.plan import make_plan


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "code" / "lib").mkdir(parents=True)
    (root / "code" / "train.py").write_text("print('hi')\n")
    (root / "code" / "lib" / "util.py").write_text("")
    (root / "run.py").write_text("print('alone')\n")
    for name in ("train", "validation"):
        (root / "data" / name).mkdir(parents=True)
        for i in range(3):
            (root / "data" / name / f"part-{i}.csv").write_text(f"{i}\n")
    (root / "data" / "single.csv").write_text("1\n")
    (root / "s3" / "bucket" / "ckpt").mkdir(parents=True)
    return root


def request(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "TrainingJobName": "req-job",
        "AlgorithmSpecification": {"TrainingImage": "hetero-emu/training:py311", "TrainingInputMode": "File"},
        "HyperParameters": {"lr": "0.01", "name": "abc", "quoted": '"x"', "list": "[1, 2]",
                            "sagemaker_program": '"train.py"', "sagemaker_submit_directory": '"code"'},
        "ResourceConfig": {"InstanceType": "ml.c5.xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
        "OutputDataConfig": {"S3OutputPath": "out"},
        "RoleArn": "arn:aws:iam::111122223333:role/x",
        "Tags": [{"Key": "a", "Value": "b"}],
    }
    base.update(extra)
    return base


def load(tmp: Path, doc: Any, name: str = "request.json", **options: Any) -> Any:
    path = tmp / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return api.load(path, **options)


def problems(tmp: Path, doc: Any, name: str = "request.json") -> list[str]:
    with pytest.raises(SpecError) as info:
        load(tmp, doc, name)
    return [str(p) for p in info.value.problems]


# --------------------------------------------------------------------------------------------------
# Input


def test_request_json_and_yaml_are_both_detected(project: Path) -> None:
    spec = load(project, request())
    assert spec.host_count == 2 and spec.entry_point == "train.py" and spec.source_dir == project / "code"
    again = load(project, yaml.safe_dump(request()), "request.yaml")
    assert again == spec


def test_hyperparameters_reach_the_file_exactly_as_given(project: Path) -> None:
    spec = load(project, request())
    written = hyperparameters.encoded(spec, "req-job")
    assert {k: written[k] for k in ("lr", "name", "quoted", "list")} == {
        "lr": "0.01", "name": "abc", "quoted": '"x"', "list": "[1, 2]"}
    assert written["sagemaker_program"] == '"train.py"'
    assert written["sagemaker_submit_directory"] == '"/opt/ml/code"'


def test_sdk_hyperparameters_become_the_spec(project: Path) -> None:
    hps = {"sagemaker_program": '"train.py"', "sagemaker_submit_directory": json.dumps(f"file://{project}/code"),
           "sagemaker_container_log_level": "10", "sagemaker_region": '"eu-west-1"',
           "sagemaker_job_name": '"ignored"', "sagemaker_mpi_enabled": "true",
           "sagemaker_mpi_num_of_processes_per_host": "2", "sagemaker_mpi_custom_mpi_options": '""',
           "sagemaker_something_new": '"kept"'}
    spec = load(project, request(HyperParameters=hps))
    assert (spec.container_log_level, spec.region, spec.source_dir) == (10, "eu-west-1", project / "code")
    assert spec.distribution is not None and spec.distribution.strategy == "mpi"
    written = hyperparameters.encoded(spec, "req-job")
    assert written["sagemaker_mpi_num_of_processes_per_host"] == "2"
    assert written["sagemaker_job_name"] == '"req-job"'
    assert written["sagemaker_something_new"] == '"kept"', "unknown sagemaker_* keys pass through as given"


def test_a_pipe_channel_and_its_record_wrapping_reach_inputdataconfig(project: Path) -> None:
    channels = [
        {"ChannelName": "train", "InputMode": "Pipe", "RecordWrapperType": "RecordIO",
         "DataSource": {"S3DataSource": {"S3Uri": "data/train", "S3DataType": "S3Prefix",
                                         "S3DataDistributionType": "ShardedByS3Key"}}},
        {"ChannelName": "validation",
         "DataSource": {"S3DataSource": {"S3Uri": "data/validation", "S3DataType": "S3Prefix"}}},
    ]
    algorithm = {"TrainingImage": "hetero-emu/training:py311", "TrainingInputMode": "Pipe"}
    spec = load(project, request(InputDataConfig=channels, AlgorithmSpecification=algorithm))
    config = json.loads(make_plan(spec, "req-job").hosts[0].files["input/config/inputdataconfig.json"])
    assert config["train"] == {"TrainingInputMode": "Pipe", "S3DistributionType": "ShardedByS3Key",
                               "RecordWrapperType": "RecordIO"}
    # TrainingInputMode is every channel's default (API_Channel.html InputMode).
    assert config["validation"]["TrainingInputMode"] == "Pipe"
    assert config["validation"]["RecordWrapperType"] == "None"


def test_a_single_script_as_the_submit_directory(project: Path) -> None:
    spec = load(project, request(HyperParameters={"sagemaker_program": '"run.py"',
                                                  "sagemaker_submit_directory": '"run.py"'}))
    assert (spec.entry_point, spec.source_dir) == ("run.py", project / "run.py")


def test_overrides_apply_to_a_request(project: Path, tmp_path: Path) -> None:
    spec = load(project, request(), job_name="other-name", output_path=tmp_path / "elsewhere")
    assert spec.job_name == "other-name" and spec.output_path == tmp_path / "elsewhere"


def test_a_yaml_spec_is_still_a_spec(project: Path) -> None:
    spec = load(project, "job_name: y\nentry_point: train.py\nsource_dir: code\ninstance_type: ml.c5.xlarge\n",
                "job.yaml")
    assert spec.hyperparameters_encoded is False


# --------------------------------------------------------------------------------------------------
# Bad input, in the request's own words


def test_problems_name_the_request_fields(project: Path) -> None:
    doc = request(
        ResourceConfig={"InstanceGroups": [
            {"InstanceGroupName": "a", "InstanceType": "ml.c5.xlarge", "InstanceCount": 1},
            {"InstanceGroupName": "b", "InstanceType": "ml.c5.xlarge", "InstanceCount": "two"}]},
        InputDataConfig=[{"ChannelName": "train", "DataSource": {"S3DataSource": {
            "S3Uri": "s3://bucket/train", "S3DataType": "ManifestFile", "InstanceGroupNames": ["a"]}}}],
        StoppingCondition={"MaxRuntimeInSeconds": 0},
        Environment={"BAD-NAME": "x"},
    )
    found = problems(project, doc)
    expected = ["ResourceConfig.InstanceGroups[1].InstanceCount: must be an integer",
                "InputDataConfig[0].DataSource.S3DataSource.S3Uri: channel data not found: no prefix s3://bucket/train",
                "InputDataConfig[0].DataSource.S3DataSource.S3DataType: 'ManifestFile' is not supported yet",
                "StoppingCondition.MaxRuntimeInSeconds: must be between 1",
                "Environment.BAD-NAME: not a valid environment variable name"]
    for fragment in expected:
        assert any(p.startswith(fragment) for p in found), (fragment, found)


def test_request_names_map_every_internal_path() -> None:
    names = RequestNames(["train", "my.channel"])
    assert names("instance_groups[1].instance_count") == "ResourceConfig.InstanceGroups[1].InstanceCount"
    assert names("inputs.my.channel.s3_data") == "InputDataConfig[1].DataSource.S3DataSource.S3Uri"
    assert names("inputs.train") == "InputDataConfig[0]"
    assert names("container_entry_point[2]") == "AlgorithmSpecification.ContainerEntrypoint[2]"
    assert names("hyperparameters.lr") == "HyperParameters.lr"
    assert names("source_dir") == "HyperParameters.sagemaker_submit_directory"
    assert names("ResourceConfig") == "ResourceConfig", "the adapter's own paths pass through"


@pytest.mark.parametrize("text", ['{"TrainingJobName": "x",}', '{"TrainingJobName": "x"', "",
                                  '{"TrainingJobName": "x", "TrainingJobName": "y"}'])
def test_malformed_json_is_one_clear_line(project: Path, text: str) -> None:
    path = project / "bad.json"
    path.write_text(text)
    outcome = run_cli(["validate", str(path)])
    assert outcome.code == 2, outcome.output
    assert "Traceback" not in outcome.output and "internal error" not in outcome.output
    assert "not valid JSON" in outcome.output or "key given twice" in outcome.output, outcome.output


def test_the_baseline_request_validates() -> None:
    outcome = run_cli(["validate", str(CORPUS / "_fixtures" / "request.json")])
    assert outcome.code == 0, outcome.output
    assert "2 group(s), 3 host(s), 1 channel(s)" in outcome.output


# --------------------------------------------------------------------------------------------------
# The way back: YAML -> request -> plan == YAML -> plan


SPECS = {
    "heterogeneous": {
        "job_name": "round-trip", "entry_point": "train.py", "source_dir": "code",
        "instance_groups": [
            {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "instance_count": 2},
            {"instance_group_name": "dnn_group", "instance_type": "ml.p3.2xlarge", "instance_count": 1}],
        "inputs": {"training": {"s3_data": "data/train", "instance_groups": ["data_group"],
                                "distribution": "ShardedByS3Key", "content_type": "text/csv"},
                   "validation": {"s3_data": "data/validation", "instance_groups": ["dnn_group"],
                                  "input_mode": "FastFile"}},
        "hyperparameters": {"epochs": 2, "lr": 0.01, "name": "x", "nested": {"a": [1, None, True]}},
        "environment": {"MY_VAR": "value", "N": 3},
        "distribution": {"torch_distributed": {"enabled": True}, "instance_groups": ["dnn_group"]},
        "checkpoint_s3_uri": "s3://bucket/ckpt", "local_s3_root": "s3", "checkpoint_local_path": "/ckpt",
        "max_run": 600, "enable_network_isolation": True, "disable_output_compression": True,
        "container_log_level": 10, "region": "eu-west-1",
    },
    "homogeneous-script-alone": {
        "base_job_name": "alone", "entry_point": "run.py", "instance_type": "ml.m5.xlarge", "instance_count": 3,
        "inputs": {"single": "data/single.csv"},
        "distribution": {"mpi": {"enabled": True, "processes_per_host": 2},
                         "smdistributed": {"dataparallel": {"enabled": True}}},
    },
    "model-parallel": {
        "job_name": "smp", "entry_point": "train.py", "source_dir": "code",
        "instance_groups": [
            {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "instance_count": 1},
            {"instance_group_name": "dnn_group", "instance_type": "ml.p4d.24xlarge", "instance_count": 2}],
        "distribution": {"mpi": {"enabled": True, "processes_per_host": 8},
                         "smdistributed": {"modelparallel": {"enabled": True,
                                                             "parameters": {"partitions": 2, "microbatches": 4}}},
                         "instance_groups": ["dnn_group"]},
    },
    "pipe": {
        "job_name": "piped", "entry_point": "train.py", "source_dir": "code", "instance_type": "ml.c5.xlarge",
        "instance_count": 2, "input_mode": "Pipe",
        "inputs": {"training": {"s3_data": "data/train", "distribution": "ShardedByS3Key",
                                "record_wrapping": "RecordIO"},
                   "validation": {"s3_data": "data/validation", "input_mode": "File"}},
    },
    "container-entry-point": {
        "job_name": "entry", "image_uri": "python:3.11-slim", "instance_type": "ml.c5.xlarge",
        "container_entry_point": ["python", "-c", "print(1)"], "container_arguments": ["--x", "1"],
        "input_mode": "FastFile",
    },
}


@pytest.mark.parametrize("name", list(SPECS))
def test_yaml_to_request_to_plan_is_the_same_plan(project: Path, tmp_path: Path, name: str) -> None:
    (project / "job.yaml").write_text(yaml.safe_dump(SPECS[name]))
    from_yaml = api.load(project / "job.yaml")
    outcome = run_cli(["render", str(project / "job.yaml"), "--as-request", "--job-name", "fixed-name"])
    assert outcome.code == 0, outcome.output
    document = json.loads(outcome.output)
    assert document["TrainingJobName"] == "fixed-name"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "request.json").write_text(json.dumps(document))  # paths are absolute: runs from anywhere
    from_request = api.load(elsewhere / "request.json")
    assert from_request.hyperparameters_encoded
    job_dir = tmp_path / "job"
    plans = [make_plan(spec, "fixed-name", "spec", None, job_dir=job_dir).to_dict()
             for spec in (from_yaml, from_request)]
    assert plans[0] == plans[1]
    if name == "model-parallel":
        # The model parallel block comes back from `mp_parameters`, not left a user hyperparameter.
        assert from_request.distribution is not None and "mp_parameters" not in from_request.hyperparameters
        assert from_request.distribution.options["smdistributed"]["modelparallel"] == \
            SPECS[name]["distribution"]["smdistributed"]["modelparallel"]
    assert request_from_spec(from_request, "fixed-name") == document, "and the way back is stable"


def test_render_as_request_to_a_file(project: Path) -> None:
    (project / "job.yaml").write_text(yaml.safe_dump(SPECS["container-entry-point"]))
    target = project / "request.json"
    outcome = run_cli(["render", str(project / "job.yaml"), "--as-request", "-o", str(target)])
    assert outcome.code == 0 and json.loads(target.read_text())["TrainingJobName"] == "entry"
    outcome = run_cli(["render", str(project / "job.yaml"), "--as-request", "-o", str(target)])
    assert outcome.code == 2 and "exists" in outcome.output


def test_tensorboard_output_config_is_synced_like_checkpoints(project: Path) -> None:
    """TensorBoardOutputConfig was accepted and unused: now its S3OutputPath is where each host's files
    under LocalPath go while the job runs, a LocalPath outside /opt/ml is mounted from the host's
    folder, and the way back to a request keeps it."""
    doc = request(TensorBoardOutputConfig={"S3OutputPath": "s3://bucket/board", "LocalPath": "/tmp/board"})
    spec = load(project, doc, s3_root=project / "s3")
    assert spec.tensorboard_output_path == project / "s3" / "bucket" / "board"
    assert (spec.tensorboard_uri, spec.tensorboard_local_path) == ("s3://bucket/board", "/tmp/board")
    plan = make_plan(spec, "req-job", "spec", 0)
    [mount] = [m for m in plan.hosts[0].container.mounts if m.target == "/tmp/board"]
    assert mount.source.endswith("/hosts/algo-1/tensorboard") and not mount.read_only
    assert request_from_spec(spec, "req-job")["TensorBoardOutputConfig"]["LocalPath"] == "/tmp/board"
    default = load(project, request(TensorBoardOutputConfig={"S3OutputPath": "board"}))
    assert default.tensorboard_local_path == "/opt/ml/output/tensorboard"
    assert not [m for m in make_plan(default, "req-job", "spec", 0).hosts[0].container.mounts
                if "tensorboard" in m.target]  # inside the host's /opt/ml already


@pytest.mark.parametrize(("board", "fragment"), [
    ({"LocalPath": "/tmp/x"}, "TensorBoardOutputConfig.S3OutputPath: missing"),
    ({"S3OutputPath": "board", "LocalPath": "relative"}, "TensorBoardOutputConfig.LocalPath: must be an absolute"),
    ({"S3OutputPath": "board", "LocalPath": "/opt/ml/model"}, "TensorBoardOutputConfig.LocalPath: /opt/ml/model "
                                                             "would hide"),
    ({"S3OutputPath": "code/board"}, "TensorBoardOutputConfig.S3OutputPath: code/board overlaps "
                                     "HyperParameters.sagemaker_submit_directory"),
])
def test_a_bad_tensorboard_output_config_is_named_by_its_field(project: Path, board: dict[str, str],
                                                               fragment: str) -> None:
    doc = request(TensorBoardOutputConfig=board,
                  InputDataConfig=[{"ChannelName": "train", "DataSource": {"S3DataSource": {
                      "S3Uri": "data/train", "S3DataType": "S3Prefix"}}}])
    found = problems(project, doc)
    assert any(p.startswith(fragment) for p in found), found
