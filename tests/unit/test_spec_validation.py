"""Spec loading and validation: every rule of the README's *A job spec* and emulator/jobspec/rules.py, one test each.

Each rejected spec must raise one SpecError whose `.problems` name the offending field by its dotted
path. Expected values are written from the README's *A job spec* and the SageMaker API reference, not from running
the code.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from emulator import InstanceGroup, Job, TrainingInput
from emulator.errors import SpecError
from emulator.jobspec import Distribution, JobSpec, load_spec_file, parse_yaml

Raw = dict[str, Any]
Mutation = Callable[[Raw], None]

# SageMaker's StoppingCondition.MaxRuntimeInSeconds upper bound: 28 days.
TWENTY_EIGHT_DAYS = 2_419_200


def group(name: str, itype: str = "ml.c5.xlarge", count: int = 1) -> Raw:
    return {"instance_group_name": name, "instance_type": itype, "instance_count": count}


def drop(key: str) -> Mutation:
    def mutate(raw: Raw) -> None:
        del raw[key]

    return mutate


# --------------------------------------------------------------------------------------------------
# Reading the file


def test_malformed_yaml_is_one_problem_with_its_line() -> None:
    with pytest.raises(SpecError) as info:
        parse_yaml("job_name: x\ninstance_groups: [1, 2\n", "job.yaml")
    (problem,) = info.value.problems
    assert problem.path == ""
    assert "malformed YAML" in problem.message
    assert "line " in problem.message


def test_malformed_yaml_file_is_reported_by_load_spec_file(write_spec: Callable[..., Path]) -> None:
    path = write_spec("job_name: x\n  bad indentation: [\n")
    with pytest.raises(SpecError) as info:
        load_spec_file(path)
    assert any("malformed YAML" in p.message for p in info.value.problems)
    assert info.value.source == str(path)


@pytest.mark.parametrize(
    ("text", "kind"),
    [("- a\n- b\n", "got a list"), ("just some words\n", "got a string"), ("42\n", "integer")],
)
def test_spec_that_is_not_a_mapping_is_rejected(text: str, kind: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_yaml(text, "job.yaml")
    (problem,) = info.value.problems
    assert "must be a mapping" in problem.message
    assert kind in problem.message


@pytest.mark.parametrize("text", ["", "# only a comment\n", "\n\n"])
def test_empty_spec_file_is_rejected(write_spec: Callable[..., Path], text: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec_file(write_spec(text))
    (problem,) = info.value.problems
    assert "got empty" in problem.message


def test_non_utf8_spec_file_is_rejected(project: Path) -> None:
    path = project / "job.yaml"
    path.write_bytes(b"job_name: caf\xe9\n")  # latin-1, not UTF-8
    with pytest.raises(SpecError) as info:
        load_spec_file(path)
    (problem,) = info.value.problems
    assert "not UTF-8" in problem.message


def test_missing_spec_file_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_spec_file(tmp_path / "nope.yaml")
    assert "not found" in info.value.problems[0].message


# --------------------------------------------------------------------------------------------------
# Wrong types


def _set(path: tuple[Any, ...], value: Any) -> Mutation:
    def mutate(raw: Raw) -> None:
        target: Any = raw
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


WRONG_TYPES = [
    (
        "count-as-string",
        _set(("instance_groups", 0, "instance_count"), "2"),
        "instance_groups[0].instance_count",
        "integer",
    ),
    (
        "count-as-bool",
        _set(("instance_groups", 1, "instance_count"), True),
        "instance_groups[1].instance_count",
        "integer",
    ),
    (
        "count-as-float",
        _set(("instance_groups", 1, "instance_count"), 1.5),
        "instance_groups[1].instance_count",
        "integer",
    ),
    (
        "group-name-as-int",
        _set(("instance_groups", 0, "instance_group_name"), 7),
        "instance_groups[0].instance_group_name",
        "string",
    ),
    ("hyperparameters-as-list", _set(("hyperparameters",), ["epochs", 2]), "hyperparameters", "must be a mapping"),
    ("environment-as-list", _set(("environment",), ["A=1"]), "environment", "must be a mapping"),
    ("groups-as-mapping", _set(("instance_groups",), {"data_group": 2}), "instance_groups", "must be a list"),
    ("group-as-string", _set(("instance_groups", 0), "data_group"), "instance_groups[0]", "must be a mapping"),
    ("inputs-as-list", _set(("inputs",), ["./data/train"]), "inputs", "must be a mapping"),
    ("channel-as-number", _set(("inputs", "training"), 3), "inputs.training", "must be a path/URI or a mapping"),
    (
        "channel-groups-as-number",
        _set(("inputs", "training", "instance_groups"), 1),
        "inputs.training.instance_groups",
        "list of strings",
    ),
    ("max-run-as-string", _set(("max_run",), "1h"), "max_run", "integer"),
    ("isolation-as-string", _set(("enable_network_isolation",), "yes"), "enable_network_isolation", "boolean"),
    ("job-name-as-int", _set(("job_name",), 5), "job_name", "string"),
    ("distribution-as-string", _set(("distribution",), "mpi"), "distribution", "must be a mapping"),
    (
        "strategy-options-as-bool",
        _set(("distribution",), {"mpi": True, "instance_groups": ["dnn_group"]}),
        "distribution.mpi",
        "must be a mapping",
    ),
    ("container-arguments-as-int", _set(("container_arguments",), 3), "container_arguments", "list of strings"),
]


@pytest.mark.parametrize(
    ("mutate", "path", "fragment"),
    [pytest.param(m, p, f, id=i) for i, m, p, f in WRONG_TYPES],
)
def test_wrong_type_is_reported_at_its_path(
    valid_raw: Raw, expect_problem: Callable[..., Any], mutate: Mutation, path: str, fragment: str
) -> None:
    mutate(valid_raw)
    expect_problem(valid_raw, path, fragment)


# --------------------------------------------------------------------------------------------------
# Unknown keys


def _rename(path: tuple[Any, ...], old: str, new: str) -> Mutation:
    def mutate(raw: Raw) -> None:
        target: Any = raw
        for key in path:
            target = target[key]
        target[new] = target.pop(old)

    return mutate


UNKNOWN_KEYS = [
    ("top-level", _rename((), "instance_groups", "instance_grups"), "instance_grups", "'instance_groups'"),
    ("top-level-hyperparams", _rename((), "hyperparameters", "hyperparams"), "hyperparams", "'hyperparameters'"),
    (
        "in-group",
        _rename(("instance_groups", 0), "instance_count", "instance_cout"),
        "instance_groups[0].instance_cout",
        "'instance_count'",
    ),
    (
        "in-second-group",
        _rename(("instance_groups", 1), "instance_type", "instanceType"),
        "instance_groups[1].instanceType",
        "'instance_type'",
    ),
    ("in-channel", _rename(("inputs", "training"), "s3_data", "s3data"), "inputs.training.s3data", "'s3_data'"),
]


@pytest.mark.parametrize(
    ("mutate", "path", "suggestion"),
    [pytest.param(m, p, s, id=i) for i, m, p, s in UNKNOWN_KEYS],
)
def test_unknown_key_is_an_error_with_did_you_mean(
    valid_raw: Raw, expect_problem: Callable[..., Any], mutate: Mutation, path: str, suggestion: str
) -> None:
    mutate(valid_raw)
    expect_problem(valid_raw, path, "unknown key", hint=f"did you mean {suggestion}?")


def test_unknown_key_in_distribution_has_did_you_mean(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["distribution"] = {"mpi": {"enabled": True}, "instance_group": ["dnn_group"]}
    expect_problem(valid_raw, "distribution.instance_group", "unknown key", hint="did you mean 'instance_groups'?")


def test_unknown_key_without_close_match_lists_the_allowed_keys(
    valid_raw: Raw, expect_problem: Callable[..., Any]
) -> None:
    valid_raw["zzzz"] = 1
    expect_problem(valid_raw, "zzzz", "unknown key", hint="allowed: job_name")


# --------------------------------------------------------------------------------------------------
# Instance groups


def test_more_than_five_groups_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["instance_groups"] = [group(f"g{i}") for i in range(6)]
    del valid_raw["inputs"]
    expect_problem(valid_raw, "instance_groups", "at most 5 instance groups, got 6")


def test_five_groups_are_allowed(valid_raw: Raw, load: Callable[..., JobSpec]) -> None:
    valid_raw["instance_groups"] = [group(f"g{i}") for i in range(5)]
    del valid_raw["inputs"]
    spec = load(valid_raw)
    assert [g.instance_group_name for g in spec.instance_groups] == ["g0", "g1", "g2", "g3", "g4"]


def test_empty_group_name_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["instance_groups"][0]["instance_group_name"] = ""
    del valid_raw["inputs"]
    expect_problem(valid_raw, "instance_groups[0].instance_group_name", "must not be empty")


def test_group_name_longer_than_64_chars_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["instance_groups"][1]["instance_group_name"] = "g" * 65
    del valid_raw["inputs"]
    expect_problem(valid_raw, "instance_groups[1].instance_group_name", "1-64 characters")


def test_group_name_of_exactly_64_chars_is_allowed(valid_raw: Raw, load: Callable[..., JobSpec]) -> None:
    valid_raw["instance_groups"][1]["instance_group_name"] = "g" * 64
    del valid_raw["inputs"]
    assert load(valid_raw).instance_groups[1].instance_group_name == "g" * 64


def test_duplicate_group_name_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["instance_groups"][1]["instance_group_name"] = "data_group"
    expect_problem(valid_raw, "instance_groups[1].instance_group_name", "duplicate group name 'data_group'")


def test_negative_instance_count_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["instance_groups"][1]["instance_count"] = -1
    expect_problem(valid_raw, "instance_groups[1].instance_count", "must be 0 or more, got -1")


def test_zero_instance_count_is_legal_when_another_group_has_hosts(
    valid_raw: Raw, load: Callable[..., JobSpec]
) -> None:
    valid_raw["instance_groups"][1]["instance_count"] = 0
    spec = load(valid_raw)
    assert spec.instance_groups[1] == InstanceGroup("dnn_group", "ml.p3.2xlarge", 0)
    assert spec.host_count == 2


def test_all_groups_with_zero_hosts_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    for g in valid_raw["instance_groups"]:
        g["instance_count"] = 0
    expect_problem(valid_raw, "instance_groups", "every group has instance_count 0")


def test_empty_group_list_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["instance_groups"] = []
    del valid_raw["inputs"]
    expect_problem(valid_raw, "instance_groups", "at least one group")


@pytest.mark.parametrize("key", ["instance_group_name", "instance_type", "instance_count"])
def test_group_missing_a_field_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any], key: str) -> None:
    del valid_raw["instance_groups"][1][key]
    expect_problem(valid_raw, f"instance_groups[1].{key}", "missing")


@pytest.mark.parametrize(("key", "value"), [("instance_type", "ml.c5.xlarge"), ("instance_count", 2)])
def test_homogeneous_fields_with_instance_groups_are_mutually_exclusive(
    valid_raw: Raw, expect_problem: Callable[..., Any], key: str, value: Any
) -> None:
    valid_raw[key] = value
    expect_problem(valid_raw, "instance_groups", "mutually exclusive")


def test_no_instances_at_all_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    del valid_raw["instance_groups"]
    del valid_raw["inputs"]
    expect_problem(valid_raw, "instance_groups", "missing")


@pytest.mark.parametrize(
    ("typo", "suggested"),
    [("ml.c5.18xlarg", "ml.c5.18xlarge"), ("ML.P3DN.24XLARGE", "ml.p3dn.24xlarge"), ("p3dn", "ml.p3dn.24xlarge")],
)
def test_unknown_instance_type_in_a_group_suggests_close_types(
    valid_raw: Raw, expect_problem: Callable[..., Any], typo: str, suggested: str
) -> None:
    valid_raw["instance_groups"][1]["instance_type"] = typo
    expect_problem(valid_raw, "instance_groups[1].instance_type", f"unknown instance type {typo!r}", hint=suggested)


def test_unknown_homogeneous_instance_type_suggests_close_types(
    valid_raw: Raw, expect_problem: Callable[..., Any]
) -> None:
    del valid_raw["instance_groups"]
    del valid_raw["inputs"]
    valid_raw.update(instance_type="ml.m5.xlarg", instance_count=1)
    expect_problem(valid_raw, "instance_type", "unknown instance type", hint="ml.m5.xlarge")


@pytest.mark.parametrize("count", [0, -2])
def test_homogeneous_instance_count_must_be_at_least_one(
    valid_raw: Raw, expect_problem: Callable[..., Any], count: int
) -> None:
    del valid_raw["instance_groups"]
    del valid_raw["inputs"]
    valid_raw.update(instance_type="ml.m5.xlarge", instance_count=count)
    expect_problem(valid_raw, "instance_count", "at least 1")


def test_too_many_hosts_across_groups_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["instance_groups"][0]["instance_count"] = 40
    valid_raw["instance_groups"][1]["instance_count"] = 25  # 65 > MAX_HOSTS (64)
    expect_problem(valid_raw, "instance_groups", "65 hosts")


def test_too_many_homogeneous_hosts_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    del valid_raw["instance_groups"]
    del valid_raw["inputs"]
    valid_raw.update(instance_type="ml.m5.xlarge", instance_count=65)
    expect_problem(valid_raw, "instance_count", "65 hosts")


def test_exactly_max_hosts_is_allowed(valid_raw: Raw, load: Callable[..., JobSpec]) -> None:
    valid_raw["instance_groups"][0]["instance_count"] = 40
    valid_raw["instance_groups"][1]["instance_count"] = 24
    assert load(valid_raw).host_count == 64


def test_group_name_with_trailing_newline_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["instance_groups"][0]["instance_group_name"] = "data_group\n"
    del valid_raw["inputs"]
    expect_problem(valid_raw, "instance_groups[0].instance_group_name", "1-64 characters")


# --------------------------------------------------------------------------------------------------
# Channels


def test_channel_naming_an_unknown_group_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["inputs"]["training"]["instance_groups"] = ["data_grp"]
    expect_problem(
        valid_raw,
        "inputs.training.instance_groups",
        "no instance group named 'data_grp'",
        hint="did you mean 'data_group'?",
    )


def test_some_but_not_all_channels_naming_groups_is_rejected(
    valid_raw: Raw, expect_problem: Callable[..., Any]
) -> None:
    del valid_raw["inputs"]["validation"]["instance_groups"]
    # The service's own words (emulator/jobspec/rules.py cites them).
    expect_problem(valid_raw, "inputs", "Some channels have assigned instance groups: [training] while others "
                   "not: [validation]")


def test_no_channel_naming_groups_is_allowed(valid_raw: Raw, load: Callable[..., JobSpec]) -> None:
    for channel in valid_raw["inputs"].values():
        del channel["instance_groups"]
    spec = load(valid_raw)
    assert spec.inputs["training"].instance_groups == ()
    assert spec.inputs["validation"].instance_groups == ()


def test_channel_with_empty_group_list_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["inputs"]["training"]["instance_groups"] = []
    expect_problem(valid_raw, "inputs.training.instance_groups", "at least one group")


def test_channel_groups_in_a_homogeneous_job_are_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    del valid_raw["instance_groups"]
    valid_raw.update(instance_type="ml.m5.xlarge", instance_count=2)
    expect_problem(valid_raw, "inputs.training.instance_groups", "only for a heterogeneous cluster")


@pytest.mark.parametrize("name", ["train/data", "has space", "c" * 65, "ünïcode"])
def test_channel_name_breaking_the_pattern_is_rejected(
    valid_raw: Raw, expect_problem: Callable[..., Any], name: str
) -> None:
    valid_raw["inputs"][name] = valid_raw["inputs"].pop("training")
    expect_problem(valid_raw, f"inputs.{name}", "breaks SageMaker's pattern")


@pytest.mark.parametrize("name", ["train.v2", "dummy-input-channel", "c_1", "c" * 64])
def test_channel_name_within_the_pattern_is_allowed(valid_raw: Raw, load: Callable[..., JobSpec], name: str) -> None:
    valid_raw["inputs"][name] = valid_raw["inputs"].pop("training")
    assert name in load(valid_raw).inputs


def test_channel_name_with_trailing_newline_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["inputs"]["training\n"] = valid_raw["inputs"].pop("training")
    expect_problem(valid_raw, "inputs.training\n", "breaks SageMaker's pattern")


def test_channel_path_that_does_not_exist_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["inputs"]["training"]["s3_data"] = "./data/nope"
    expect_problem(valid_raw, "inputs.training.s3_data", "channel data not found")


def test_channel_without_s3_data_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    del valid_raw["inputs"]["training"]["s3_data"]
    expect_problem(valid_raw, "inputs.training.s3_data", "missing")


def test_pipe_mode_on_a_channel_is_accepted_with_its_record_wrapping(
    valid_raw: Raw, load: Callable[..., JobSpec]
) -> None:
    valid_raw["inputs"]["training"].update(input_mode="Pipe", record_wrapping="RecordIO")
    spec = load(valid_raw)
    assert spec.channel_mode("training") == "Pipe"
    assert spec.inputs["training"].record_wrapping == "RecordIO"
    assert spec.channel_mode("validation") == "File"
    assert spec.inputs["validation"].record_wrapping == "None"


def test_the_jobs_pipe_mode_is_the_default_of_every_channel(valid_raw: Raw, load: Callable[..., JobSpec]) -> None:
    valid_raw["input_mode"] = "Pipe"
    valid_raw["inputs"]["validation"]["input_mode"] = "File"
    spec = load(valid_raw)
    assert spec.channel_mode("training") == "Pipe"
    assert spec.channel_mode("validation") == "File"


@pytest.mark.parametrize("where", ["channel", "job"])
def test_pipe_mode_on_an_empty_folder_is_refused_with_a_hint(
    valid_raw: Raw, project: Path, expect_problem: Callable[..., Any], where: str
) -> None:
    (project / "data" / "empty").mkdir()
    valid_raw["inputs"]["training"]["s3_data"] = "./data/empty"
    if where == "channel":
        valid_raw["inputs"]["training"]["input_mode"] = "Pipe"
    else:
        valid_raw["input_mode"] = "Pipe"
    expect_problem(valid_raw, "inputs.training.s3_data", "holds no file to stream in Pipe mode",
                   hint="put the channel's files there, or use input_mode: File for an empty folder")


def test_record_io_wrapping_on_a_file_channel_is_refused(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["inputs"]["training"]["record_wrapping"] = "RecordIO"
    expect_problem(valid_raw, "inputs.training.record_wrapping", "emulated for Pipe channels only")


def test_a_channel_named_like_a_pipe_channels_fifo_is_refused(
    valid_raw: Raw, expect_problem: Callable[..., Any]
) -> None:
    valid_raw["inputs"]["training"]["input_mode"] = "Pipe"
    valid_raw["inputs"]["training_12"] = dict(valid_raw["inputs"]["validation"])
    expect_problem(valid_raw, "inputs.training_12", "an epoch's FIFO of the Pipe channel 'training'")


@pytest.mark.parametrize("mode", ["File", "FastFile"])
def test_file_and_fastfile_modes_are_accepted(valid_raw: Raw, load: Callable[..., JobSpec], mode: str) -> None:
    valid_raw["input_mode"] = mode
    valid_raw["inputs"]["training"]["input_mode"] = mode
    spec = load(valid_raw)
    assert spec.input_mode == mode
    assert spec.inputs["training"].input_mode == mode


def test_unknown_input_mode_is_rejected_with_did_you_mean(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["inputs"]["training"]["input_mode"] = "Files"
    expect_problem(valid_raw, "inputs.training.input_mode", "must be one of", hint="did you mean 'File'?")


def test_unknown_s3_distribution_type_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["inputs"]["training"]["distribution"] = "Sharded"
    expect_problem(valid_raw, "inputs.training.distribution", "must be one of FullyReplicated, ShardedByS3Key")


def test_sharding_an_empty_folder_is_rejected(
    valid_raw: Raw, project: Path, expect_problem: Callable[..., Any]
) -> None:
    (project / "data" / "empty").mkdir()
    valid_raw["inputs"]["training"].update(s3_data="./data/empty", distribution="ShardedByS3Key")
    expect_problem(valid_raw, "inputs.training.s3_data", "no file to shard")


def test_s3_uri_without_local_s3_root_looks_under_the_default_root(
    valid_raw: Raw, expect_problem: Callable[..., Any]
) -> None:
    valid_raw["inputs"]["training"]["s3_data"] = "s3://my-bucket/prefix/train"
    expect_problem(valid_raw, "inputs.training.s3_data", "no prefix s3://my-bucket/prefix/train under the S3 root",
                   hint="local_s3_root")


def test_unsupported_uri_scheme_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["inputs"]["training"]["s3_data"] = "gs://my-bucket/train"
    expect_problem(valid_raw, "inputs.training.s3_data", "unsupported URI scheme")


def test_local_s3_root_that_does_not_exist_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["local_s3_root"] = "./no-such-root"
    expect_problem(valid_raw, "local_s3_root", "not found")


def test_s3_uri_cannot_escape_the_local_s3_root(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["local_s3_root"] = "./s3"
    valid_raw["inputs"]["training"]["s3_data"] = "s3://my-bucket/../../data/train"
    expect_problem(valid_raw, "inputs.training.s3_data", "")


# --------------------------------------------------------------------------------------------------
# Distribution


def test_distribution_without_group_on_a_multi_group_cluster_is_rejected(
    valid_raw: Raw, expect_problem: Callable[..., Any]
) -> None:
    valid_raw["distribution"] = {"torch_distributed": {"enabled": True}}
    expect_problem(valid_raw, "distribution.instance_groups", "must name exactly one instance group")


def test_distribution_naming_two_groups_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["distribution"] = {"torch_distributed": {"enabled": True}, "instance_groups": ["data_group", "dnn_group"]}
    expect_problem(valid_raw, "distribution.instance_groups", "must name exactly one instance group")


def test_distribution_naming_an_unknown_group_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["distribution"] = {"mpi": {"enabled": True}, "instance_groups": ["dnn_grop"]}
    expect_problem(
        valid_raw,
        "distribution.instance_groups",
        "no instance group named 'dnn_grop'",
        hint="did you mean 'dnn_group'?",
    )


def test_distribution_with_two_strategies_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["distribution"] = {
        "mpi": {"enabled": True},
        "torch_distributed": {"enabled": True},
        "instance_groups": ["dnn_group"],
    }
    expect_problem(valid_raw, "distribution", "exactly one strategy, got 2")


def test_distribution_with_unknown_strategy_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["distribution"] = {"horovod": {"enabled": True}, "instance_groups": ["dnn_group"]}
    expect_problem(valid_raw, "distribution.horovod", "unknown key")
    expect_problem(valid_raw, "distribution", "exactly one strategy, got 0")


@pytest.mark.parametrize(
    ("options", "path", "hint"),
    [
        ({"mpi": {"enabled": True, "procs_per_host": 2}}, "distribution.mpi.procs_per_host",
         "did you mean 'processes_per_host'?"),
        ({"torch_distributed": {"enabled": True, "nproc_per_node": 2}}, "distribution.torch_distributed.nproc_per_node",
         "allowed: enabled"),
        ({"smdistributed": {"dataparallel": {"enabled": True, "custom_mpi_option": "-v"}}},
         "distribution.smdistributed.dataparallel.custom_mpi_option", "did you mean 'custom_mpi_options'?"),
    ],
)
def test_distribution_strategy_with_unknown_option_is_rejected(
    valid_raw: Raw, expect_problem: Callable[..., Any], options: Raw, path: str, hint: str
) -> None:
    # The SDK would drop the option silently and run the job without it.
    valid_raw["distribution"] = {**options, "instance_groups": ["dnn_group"]}
    expect_problem(valid_raw, path, "unknown key", hint=hint)


def test_unknown_smdistributed_strategy_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["distribution"] = {"smdistributed": {"dataparalel": {"enabled": True}}, "instance_groups": ["dnn_group"]}
    expect_problem(valid_raw, "distribution.smdistributed.dataparalel", "unknown smdistributed strategy",
                   hint="did you mean 'dataparallel'?")


@pytest.mark.parametrize("count", [0, -2])
def test_mpi_processes_per_host_below_one_is_rejected(
    valid_raw: Raw, expect_problem: Callable[..., Any], count: int
) -> None:
    valid_raw["distribution"] = {"mpi": {"enabled": True, "processes_per_host": count},
                                 "instance_groups": ["dnn_group"]}
    expect_problem(valid_raw, "distribution.mpi.processes_per_host", f"must be at least 1, got {count}")


def test_distribution_on_one_group_is_accepted(valid_raw: Raw, load: Callable[..., JobSpec]) -> None:
    valid_raw["distribution"] = {"torch_distributed": {"enabled": True}, "instance_groups": ["dnn_group"]}
    spec = load(valid_raw)
    assert spec.distribution == Distribution(
        "torch_distributed", {"torch_distributed": {"enabled": True}}, ("dnn_group",)
    )


def test_mpi_with_smdistributed_is_the_one_allowed_pair(valid_raw: Raw, load: Callable[..., JobSpec]) -> None:
    valid_raw["distribution"] = {
        "smdistributed": {"modelparallel": {"enabled": True}},
        "mpi": {"enabled": True, "processes_per_host": 8},
        "instance_groups": ["dnn_group"],
    }
    spec = load(valid_raw)
    assert spec.distribution is not None
    assert spec.distribution.strategy == "mpi"
    assert set(spec.distribution.options) == {"mpi", "smdistributed"}


def test_distribution_without_group_on_a_homogeneous_cluster_is_accepted(
    valid_raw: Raw, load: Callable[..., JobSpec]
) -> None:
    del valid_raw["instance_groups"]
    del valid_raw["inputs"]
    valid_raw.update(instance_type="ml.p3.16xlarge", instance_count=2, distribution={"mpi": {"enabled": True}})
    spec = load(valid_raw)
    assert spec.distribution == Distribution("mpi", {"mpi": {"enabled": True}}, ())


# --------------------------------------------------------------------------------------------------
# Names


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("my_job", "breaks SageMaker's pattern"),
        ("-leading-hyphen", "breaks SageMaker's pattern"),
        ("trailing-hyphen-", "breaks SageMaker's pattern"),
        ("has space", "breaks SageMaker's pattern"),
        ("j" * 64, "is 64 characters long: SageMaker allows at most 63"),
        ("", "must not be empty"),
    ],
)
def test_job_name_breaking_the_pattern_is_rejected(
    valid_raw: Raw, expect_problem: Callable[..., Any], name: str, fragment: str
) -> None:
    valid_raw["job_name"] = name
    expect_problem(valid_raw, "job_name", fragment)


@pytest.mark.parametrize("name", ["a", "j" * 63, "a--b", "Job-2024"])
def test_job_name_within_the_pattern_is_allowed(valid_raw: Raw, load: Callable[..., JobSpec], name: str) -> None:
    valid_raw["job_name"] = name
    assert load(valid_raw).job_name == name


@pytest.mark.parametrize("name", ["my_base", "base.name", "-base"])
def test_base_job_name_breaking_the_pattern_is_rejected(
    valid_raw: Raw, expect_problem: Callable[..., Any], name: str
) -> None:
    del valid_raw["job_name"]
    valid_raw["base_job_name"] = name
    expect_problem(valid_raw, "base_job_name", "breaks SageMaker's pattern")


def test_job_name_with_trailing_newline_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["job_name"] = "hetero-test\n"
    expect_problem(valid_raw, "job_name", "breaks SageMaker's pattern")


def test_base_job_name_defaults_to_the_image_repository_name(valid_raw: Raw, load: Callable[..., JobSpec]) -> None:
    # The SDK's base_name_from_image: the repository part of the image URI, without registry or tag.
    del valid_raw["job_name"]
    valid_raw["image_uri"] = "123456789012.dkr.ecr.us-east-1.amazonaws.com/my-trainer:1.0"
    spec = load(valid_raw)
    assert spec.job_name is None
    assert spec.base_job_name == "my-trainer"


# --------------------------------------------------------------------------------------------------
# Code


def test_missing_source_dir_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["source_dir"] = "./no-such-code"
    expect_problem(valid_raw, "source_dir", "not found")


def test_source_dir_that_is_a_file_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["source_dir"] = "./code/train.py"
    expect_problem(valid_raw, "source_dir", "is not a directory")


def test_remote_source_dir_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["source_dir"] = "https://example.com/code.tar.gz"
    expect_problem(valid_raw, "source_dir", "only local folders and s3:// archives")


def test_missing_entry_point_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    del valid_raw["entry_point"]
    expect_problem(valid_raw, "entry_point", "missing")


def test_entry_point_not_in_source_dir_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["entry_point"] = "nope.py"
    expect_problem(valid_raw, "entry_point", "not found in source_dir")


@pytest.mark.parametrize("entry", ["../code/train.py", "sub/../../train.py", "/etc/passwd"])
def test_entry_point_outside_source_dir_is_rejected(
    valid_raw: Raw, expect_problem: Callable[..., Any], entry: str
) -> None:
    valid_raw["entry_point"] = entry
    expect_problem(valid_raw, "entry_point", "must be a relative path inside source_dir")


def test_entry_point_without_source_dir_is_the_file_next_to_the_spec(
    valid_raw: Raw, project: Path, load: Callable[..., JobSpec]
) -> None:
    # As in the SDK: only the script is uploaded, so it alone becomes /opt/ml/code.
    del valid_raw["source_dir"]
    valid_raw["entry_point"] = "code/train.py"
    spec = load(valid_raw)
    assert spec.entry_point == "train.py"
    assert spec.source_dir == (project / "code" / "train.py").resolve()


def test_container_entry_point_replaces_entry_point(valid_raw: Raw, load: Callable[..., JobSpec]) -> None:
    del valid_raw["entry_point"]
    del valid_raw["source_dir"]
    valid_raw["container_entry_point"] = ["python", "-c", "print(1)"]
    spec = load(valid_raw)
    assert spec.entry_point is None
    assert spec.container_entry_point == ("python", "-c", "print(1)")


# --------------------------------------------------------------------------------------------------
# Hyperparameters, environment, limits


@pytest.mark.parametrize("key", ["sagemaker_program", "sagemaker_anything"])
def test_reserved_sagemaker_hyperparameter_is_rejected(
    valid_raw: Raw, expect_problem: Callable[..., Any], key: str
) -> None:
    valid_raw["hyperparameters"][key] = "x"
    expect_problem(valid_raw, f"hyperparameters.{key}", "reserved")


def test_invalid_environment_variable_name_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["environment"] = {"1BAD": "x"}
    expect_problem(valid_raw, "environment.1BAD", "not a valid environment variable name")


def test_structured_environment_value_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["environment"] = {"GOOD_NAME": {"nested": 1}}
    expect_problem(valid_raw, "environment.GOOD_NAME", "must be a string, number or boolean")


def test_environment_scalars_become_strings(valid_raw: Raw, load: Callable[..., JobSpec]) -> None:
    valid_raw["environment"] = {"A": 1, "B": True, "C": "text"}
    assert dict(load(valid_raw).environment) == {"A": "1", "B": "true", "C": "text"}


@pytest.mark.parametrize("value", [0, -5, TWENTY_EIGHT_DAYS + 1])
def test_max_run_out_of_range_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any], value: int) -> None:
    valid_raw["max_run"] = value
    expect_problem(valid_raw, "max_run", f"must be between 1 and {TWENTY_EIGHT_DAYS} seconds")


@pytest.mark.parametrize("value", [1, TWENTY_EIGHT_DAYS])
def test_max_run_bounds_are_allowed(valid_raw: Raw, load: Callable[..., JobSpec], value: int) -> None:
    valid_raw["max_run"] = value
    assert load(valid_raw).max_run == value


def test_max_run_defaults_to_one_day(valid_raw: Raw, load: Callable[..., JobSpec]) -> None:
    assert load(valid_raw).max_run == 86400


def test_invalid_region_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["region"] = "mars"
    expect_problem(valid_raw, "region", "not an AWS region")


def test_relative_checkpoint_local_path_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["checkpoint_local_path"] = "checkpoints"
    expect_problem(valid_raw, "checkpoint_local_path", "absolute path")


# --------------------------------------------------------------------------------------------------
# All problems at once


def test_several_problems_are_all_reported_at_once(
    valid_raw: Raw, problems: Callable[..., Any], find: Callable[..., Any]
) -> None:
    valid_raw["instance_grups"] = []
    valid_raw["job_name"] = "bad_name"
    valid_raw["instance_groups"][0]["instance_count"] = -1
    valid_raw["instance_groups"][1]["instance_type"] = "ml.p3.2xlarg"
    valid_raw["inputs"]["training"]["input_mode"] = "Pipes"
    valid_raw["inputs"]["validation"]["instance_groups"] = ["nobody"]
    valid_raw["hyperparameters"]["sagemaker_program"] = "x.py"
    valid_raw["max_run"] = 0
    found = problems(valid_raw)
    find(found, "instance_grups", "unknown key")
    find(found, "job_name", "breaks SageMaker's pattern")
    find(found, "instance_groups[0].instance_count", "must be 0 or more")
    find(found, "instance_groups[1].instance_type", "unknown instance type")
    find(found, "inputs.training.input_mode", "must be one of File, FastFile, Pipe")
    find(found, "inputs.validation.instance_groups", "no instance group named 'nobody'")
    find(found, "hyperparameters.sagemaker_program", "reserved")
    find(found, "max_run", "must be between")
    assert len(found) == 8


def test_spec_error_message_lists_every_problem(valid_raw: Raw, write_spec: Callable[..., Path]) -> None:
    valid_raw["job_name"] = "bad_name"
    valid_raw["max_run"] = 0
    path = write_spec(valid_raw)
    with pytest.raises(SpecError) as info:
        load_spec_file(path)
    text = str(info.value)
    assert "2 problems" in text
    assert "job_name:" in text and "max_run:" in text
    assert info.value.exit_code == 2


# --------------------------------------------------------------------------------------------------
# Valid specs


def test_valid_heterogeneous_spec_resolves_paths_against_the_spec_folder(
    valid_raw: Raw, project: Path, tmp_path: Path, write_spec: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_spec(valid_raw)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    spec = load_spec_file(path)
    root = project.resolve()
    assert spec.heterogeneous is True
    assert spec.job_name == "hetero-test"
    assert spec.entry_point == "train.py"
    assert spec.source_dir == root / "code"
    assert spec.output_path == root / "output"
    assert spec.spec_dir == root
    assert spec.instance_groups == (
        InstanceGroup("data_group", "ml.c5.xlarge", 2),
        InstanceGroup("dnn_group", "ml.p3.2xlarge", 1),
    )
    assert list(spec.inputs) == ["training", "validation"]
    training = spec.inputs["training"]
    assert training.source == root / "data" / "train"
    assert training.source.is_absolute()
    assert training.files == ("part-0.csv", "part-1.csv", "part-2.csv")
    assert training.instance_groups == ("data_group",)
    assert training.distribution == "FullyReplicated"
    assert training.single_file is False
    assert spec.inputs["validation"].source == root / "data" / "validation"
    assert dict(spec.hyperparameters) == {"epochs": 2, "lr": 0.01}


def test_homogeneous_spec_is_one_group_named_homogeneous_cluster(valid_raw: Raw, load: Callable[..., JobSpec]) -> None:
    del valid_raw["instance_groups"]
    valid_raw["inputs"] = {"training": "./data/train"}
    valid_raw.update(instance_type="ml.m5.xlarge", instance_count=3)
    spec = load(valid_raw)
    assert spec.heterogeneous is False
    assert spec.instance_groups == (InstanceGroup("homogeneousCluster", "ml.m5.xlarge", 3),)
    assert spec.host_count == 3


def test_channel_given_as_a_plain_string(valid_raw: Raw, project: Path, load: Callable[..., JobSpec]) -> None:
    valid_raw["inputs"] = {"training": "./data/train"}
    training = load(valid_raw).inputs["training"]
    assert training.s3_data == "./data/train"
    assert training.source == (project / "data" / "train").resolve()
    assert training.distribution == "FullyReplicated"
    assert training.instance_groups == ()
    assert training.input_mode is None
    assert training.files == ("part-0.csv", "part-1.csv", "part-2.csv")


def test_single_file_channel(valid_raw: Raw, project: Path, load: Callable[..., JobSpec]) -> None:
    valid_raw["inputs"]["training"]["s3_data"] = "./data/single.csv"
    training = load(valid_raw).inputs["training"]
    assert training.single_file is True
    assert training.source == (project / "data" / "single.csv").resolve()
    assert training.files == ("single.csv",)


def test_file_uri_channel(valid_raw: Raw, project: Path, load: Callable[..., JobSpec]) -> None:
    target = (project / "data" / "train").resolve()
    valid_raw["inputs"]["training"]["s3_data"] = target.as_uri()
    training = load(valid_raw).inputs["training"]
    assert training.source == target
    assert training.files == ("part-0.csv", "part-1.csv", "part-2.csv")


def test_s3_uri_under_the_local_s3_root(valid_raw: Raw, project: Path, load: Callable[..., JobSpec]) -> None:
    valid_raw["local_s3_root"] = "./s3"
    valid_raw["inputs"]["training"]["s3_data"] = "s3://my-bucket/prefix/train"
    training = load(valid_raw).inputs["training"]
    assert training.s3_data == "s3://my-bucket/prefix/train"
    assert training.source == (project / "s3" / "my-bucket" / "prefix" / "train").resolve()
    assert training.files == ("s3-part.csv",)


def test_nested_files_are_listed_relative_and_sorted(
    valid_raw: Raw, project: Path, load: Callable[..., JobSpec]
) -> None:
    (project / "data" / "train" / "sub").mkdir()
    (project / "data" / "train" / "sub" / "deep.csv").write_text("d\n")
    training = load(valid_raw).inputs["training"]
    assert training.files == ("part-0.csv", "part-1.csv", "part-2.csv", "sub/deep.csv")


def test_python_api_validates_to_the_same_spec_as_yaml(
    valid_raw: Raw, project: Path, load: Callable[..., JobSpec]
) -> None:
    job = Job(
        base_dir=project,
        job_name="hetero-test",
        entry_point="train.py",
        source_dir="./code",
        hyperparameters={"epochs": 2, "lr": 0.01},
        instance_groups=[
            InstanceGroup("data_group", "ml.c5.xlarge", 2),
            InstanceGroup("dnn_group", "ml.p3.2xlarge", 1),
        ],
        inputs={
            "training": TrainingInput("./data/train", instance_groups=("data_group",)),
            "validation": TrainingInput("./data/validation", instance_groups=("dnn_group",)),
        },
    )
    assert job.spec() == load(valid_raw)


def test_python_api_carries_a_pipe_channels_mode_and_record_wrapping(project: Path) -> None:
    job = Job(base_dir=project, entry_point="train.py", source_dir="./code", instance_type="ml.c5.xlarge",
              inputs={"training": TrainingInput("./data/train", input_mode="Pipe", record_wrapping="RecordIO")})
    channel = job.spec().inputs["training"]
    assert (channel.input_mode, channel.record_wrapping) == ("Pipe", "RecordIO")


def test_python_api_reports_problems_like_yaml(project: Path) -> None:
    job = Job(
        base_dir=project,
        entry_point="train.py",
        source_dir="./code",
        instance_groups=[InstanceGroup("g", "ml.c5.xlarge", -1)],
    )
    with pytest.raises(SpecError) as info:
        job.spec()
    assert any(p.path == "instance_groups[0].instance_count" for p in info.value.problems)


# --------------------------------------------------------------------------------------------------
# Found in review: explicit nulls, values without a JSON form, option shapes, paths that overlap


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda r: r.update(instance_groups=None, instance_type=None, instance_count=2), "instance_type"),
        (lambda r: r["instance_groups"][0].update(instance_count=None), "instance_groups[0].instance_count"),
        (lambda r: r["inputs"]["training"].update(s3_data=None), "inputs.training.s3_data"),
        (lambda r: r.update(entry_point=None), "entry_point"),
    ],
)
def test_explicit_null_counts_as_missing(
    valid_raw: Raw, expect_problem: Callable[..., Any], mutate: Callable[[Raw], None], path: str
) -> None:
    mutate(valid_raw)
    expect_problem(valid_raw, path, "missing")


@pytest.mark.parametrize("value", ["2024-01-01", "!!binary aGVsbG8=", "!!set {a, b}"])
def test_hyperparameter_without_a_json_form_is_rejected(
    valid_raw: Raw, expect_problem: Callable[..., Any], value: str
) -> None:
    text = yaml.safe_dump(valid_raw).replace("hyperparameters:\n", f"hyperparameters:\n  bad: {value}\n", 1)
    expect_problem(text, "hyperparameters.bad", "cannot be JSON-encoded")


@pytest.mark.parametrize(
    ("distribution", "path", "fragment"),
    [
        ({"smdistributed": {"dataparallel": True}}, "distribution.smdistributed.dataparallel", "must be a mapping"),
        ({"mpi": {"enabled": "false"}}, "distribution.mpi.enabled", "must be a boolean"),
        ({"mpi": {"enabled": True, "processes_per_host": "8"}}, "distribution.mpi.processes_per_host",
         "must be an integer"),
    ],
)
def test_distribution_options_have_the_sdk_shapes(
    valid_raw: Raw, expect_problem: Callable[..., Any], distribution: Raw, path: str, fragment: str
) -> None:
    valid_raw["distribution"] = {**distribution, "instance_groups": ["dnn_group"]}
    expect_problem(valid_raw, path, fragment)


@pytest.mark.parametrize("name", [".", ".."])
def test_dot_channel_names_are_rejected(valid_raw: Raw, expect_problem: Callable[..., Any], name: str) -> None:
    valid_raw["inputs"] = {name: {"s3_data": "./data/train"}}
    expect_problem(valid_raw, f"inputs.{name}", "channel name")


def test_checkpoints_in_the_source_dir_are_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["checkpoint_s3_uri"] = "./code"
    expect_problem(valid_raw, "checkpoint_s3_uri", "overlaps source_dir")


def test_checkpoint_uri_naming_a_file_is_rejected(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["checkpoint_s3_uri"] = "./data/single.csv"
    expect_problem(valid_raw, "checkpoint_s3_uri", "is a file")


@pytest.mark.parametrize("local", ["/opt/ml", "/opt/ml/input/data/ckpt", "/opt/ml/code/x", "/"])
def test_checkpoint_local_path_must_not_hide_opt_ml(
    valid_raw: Raw, expect_problem: Callable[..., Any], local: str
) -> None:
    valid_raw["checkpoint_local_path"] = local
    expect_problem(valid_raw, "checkpoint_local_path", "would hide or sit inside")


def test_default_output_next_to_a_lone_entry_script_is_fine(valid_raw: Raw, load: Callable[..., JobSpec]) -> None:
    del valid_raw["source_dir"]
    valid_raw["entry_point"] = "code/train.py"
    valid_raw["output_path"] = "./code/out"  # beside the script, which alone is the code
    assert load(valid_raw).output_path.name == "out"


def test_text_utf8_cannot_encode_is_named_by_its_field(tmp_path: Path) -> None:
    """A lone surrogate (only the Python API can pass one) would fail every file the plan writes."""
    from emulator.errors import SpecError
    from emulator.jobspec import validate

    raw = {"job_name": "j", "entry_point": "t.py", "output_path": str(tmp_path),
           "instance_groups": [{"instance_group_name": "\ud800", "instance_type": "ml.c5.xlarge",
                                "instance_count": 1}]}
    with pytest.raises(SpecError) as caught:
        validate(raw, base_dir=tmp_path)
    assert [p.path for p in caught.value.problems] == ["instance_groups[0].instance_group_name"]
