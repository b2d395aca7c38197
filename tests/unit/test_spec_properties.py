"""Property tests: whatever a spec holds, the emulator answers with a JobSpec or its own error.

Random specs are mutations of a valid one: keys dropped, added and renamed, any field (at any depth)
replaced by a random value of a random type, names full of '/', '..', control characters and
unicode, huge integers, nested junk. `validate` must return a JobSpec or raise an `EmulatorError`;
for a JobSpec, everything built from it without Docker (the plan, the /opt/ml files, the compose
project, the DescribeTrainingJob parts) must succeed and be JSON/YAML-serialisable. Raw text and bytes
fed to the YAML reader must give a mapping or a SpecError. Any other exception is a bug.

Hypothesis runs many examples per test function, and function-scoped fixtures are not reset between
them, so the project folder is module-scoped and never written by the code under test (nothing here
stages or runs a job).
"""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulator.errors import EmulatorError, SpecError
from emulator.jobspec import JobSpec, hyperparameters, load_spec_file, parse_yaml, validate
from emulator.planning import compose, contract
from emulator.planning.plan import job_name_from, make_plan, summary

# The round trips below check that a document is safe YAML; libyaml's safe loader and dumper check
# the same thing many times faster than PyYAML's pure-Python ones, which took most of each example.
SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
SafeDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

NOW = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=timezone.utc)
SETTINGS = settings(
    max_examples=300,
    deadline=None,
    database=None,  # no .hypothesis/ folder in the repository
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

VALID: dict[str, Any] = {
    "job_name": "props-job",
    "entry_point": "train.py",
    "source_dir": "code",
    "hyperparameters": {"epochs": 2, "lr": 0.01, "layers": [64, 32], "opts": {"beta": 0.9}},
    "environment": {"MY_VAR": "value", "FLAG": True},
    "instance_groups": [
        {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "instance_count": 2},
        {"instance_group_name": "dnn_group", "instance_type": "ml.p3.2xlarge", "instance_count": 1},
    ],
    "inputs": {
        "training": {"s3_data": "data/train", "distribution": "ShardedByS3Key", "content_type": "text/csv",
                     "instance_groups": ["data_group"]},
        "validation": {"s3_data": "s3://bucket/val", "input_mode": "FastFile", "instance_groups": ["dnn_group"]},
    },
    "distribution": {"torch_distributed": {"enabled": True}, "instance_groups": ["dnn_group"]},
    "local_s3_root": "s3",
    "output_path": "out",
    "checkpoint_s3_uri": "ckpt",
    "max_run": 3600,
    "container_log_level": 20,
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("props")
    (root / "code").mkdir()
    (root / "code" / "train.py").write_text("print('hi')\n")
    (root / "code" / "other.sh").write_text("echo hi\n")
    (root / "data" / "train").mkdir(parents=True)
    for i in range(4):
        (root / "data" / "train" / f"part-{i}.csv").write_text(f"{i}\n")
    (root / "data" / "single.csv").write_text("1\n")
    (root / "data" / "empty").mkdir()
    (root / "s3" / "bucket" / "val").mkdir(parents=True)
    (root / "s3" / "bucket" / "val" / "v.csv").write_text("v\n")
    (root / "ckpt").mkdir()
    return root


def test_the_base_spec_is_valid(project: Path) -> None:
    spec = validate(copy.deepcopy(VALID), base_dir=project)
    check_everything_downstream(spec, "spec", 0)


# --------------------------------------------------------------------------------------------------
# Strategies

NASTY_NAMES = [
    "", " ", ".", "..", "../x", "../../etc", "/", "/etc/passwd", "a/b", "a\\b", "a\x00b", "a\nb", "\t",
    "algo-1", "data_group", "dnn_group", "homogeneousCluster", "training", "sagemaker_program", "x" * 65,
    "g" * 64, "é", "组", "\u202e", "\ud800", "\ufffd", "-lead", "trail-", "a--b", "A_B",
]
NASTY_PATHS = [
    "code", "data/train", "data/single.csv", "data/empty", "ckpt", "out", "s3", ".", "..", "/", "/dev/null",
    "/proc/self", "/nonexistent/x", "~", "~no-such-user-props/x", "file:///nonexistent", "file://", "s3://",
    "s3://bucket", "s3://bucket/val", "s3://../x", "s3://[x", "hdfs://x", "data/train\x00x", "code/train.py/x",
]
NASTY_STRINGS = [
    "ml.c5.xlarge", "ml.p3.2xlarge", "ml.c5.xlarg", "File", "Pipe", "FastFile", "FullyReplicated",
    "ShardedByS3Key", "S3Prefix", "None", "RecordIO", "us-east-1", "mars-1", "my-image:1", "UPPER:1",
    "a b", "$HOME", "${X}", "%", "'", '"', "\x00", "\x1b[31m", "\r\n", "yes", "no", "null", "~",
]
HUGE_INTS = [0, 1, -1, 5, 64, 65, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 10**9, 10**30, 10**4000]

names = st.one_of(st.sampled_from(NASTY_NAMES), st.text(max_size=12),
                  st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=70))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(HUGE_INTS),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(NASTY_PATHS),
    st.sampled_from(NASTY_STRINGS),
    names,
    st.dates(),
    st.binary(max_size=4),
)
junk = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(names, st.integers(), st.booleans()), children, max_size=4),
    ),
    max_leaves=12,
)
FIELDS = [
    "job_name", "base_job_name", "image_uri", "entry_point", "source_dir", "hyperparameters", "environment",
    "instance_groups", "instance_type", "instance_count", "inputs", "input_mode", "distribution", "output_path",
    "checkpoint_s3_uri", "checkpoint_local_path", "max_run", "enable_network_isolation", "container_entry_point",
    "container_arguments", "container_log_level", "region", "local_s3_root", "instance_group_name", "s3_data",
    "content_type", "record_wrapping", "s3_data_type", "mpi", "smdistributed", "enabled", "processes_per_host",
]
keys = st.one_of(st.sampled_from(FIELDS), names)


def containers(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every mapping and list inside `value` (the root included)."""
    found: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        found.append(path)
        for k, v in value.items():
            found.extend(containers(v, (*path, k)))
    elif isinstance(value, list):
        found.append(path)
        for i, v in enumerate(value):
            found.extend(containers(v, (*path, i)))
    return found


def at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


@st.composite
def mutated_specs(draw: st.DrawFn) -> dict[str, Any]:
    raw: dict[str, Any] = copy.deepcopy(VALID)
    for _ in range(draw(st.integers(min_value=1, max_value=5))):
        target = at(raw, draw(st.sampled_from(containers(raw))))
        op = draw(st.sampled_from(["replace", "replace", "drop", "add", "rename", "append"]))
        if isinstance(target, dict):
            existing = list(target)
            if op in ("replace", "drop", "rename") and existing:
                key = draw(st.sampled_from(existing))
                if op == "replace":
                    target[key] = draw(junk)
                elif op == "drop":
                    del target[key]
                else:
                    target[draw(keys)] = target.pop(key)
            else:
                target[draw(keys)] = draw(junk)
        elif isinstance(target, list):
            if op in ("replace", "drop") and target:
                index = draw(st.integers(min_value=0, max_value=len(target) - 1))
                if op == "replace":
                    target[index] = draw(junk)
                else:
                    del target[index]
            else:
                target.append(draw(junk))
    return raw


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20),
              st.sampled_from(NASTY_STRINGS)),
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(st.text(max_size=8), children,
                                                                               max_size=3)),
    max_leaves=8,
)
plausible_names = st.one_of(st.sampled_from(["data_group", "dnn_group", "g", "x" * 64, "é组", "a b", "..", "-"]),
                            st.text(min_size=1, max_size=10))
env_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)
channel_names = st.from_regex(r"[A-Za-z0-9._-]{1,12}", fullmatch=True)


@st.composite
def plausible_specs(draw: st.DrawFn) -> dict[str, Any]:
    """Mostly-valid specs with every option in play, so that many reach the plan and compose."""
    group_names = draw(st.lists(plausible_names, min_size=1, max_size=draw(st.sampled_from([5, 5, 5, 6])),
                                unique=True))
    heterogeneous = draw(st.booleans()) or len(group_names) > 1
    raw: dict[str, Any] = {
        draw(st.sampled_from(["job_name", "base_job_name"])): draw(
            st.one_of(st.from_regex(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}", fullmatch=True), names)
            if draw(st.integers(0, 9)) == 0 else st.from_regex(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,30}", fullmatch=True)),
        "entry_point": draw(st.sampled_from(["train.py"] * 8 + ["other.sh", "missing.py"])),
        "source_dir": "code",
        "hyperparameters": draw(st.dictionaries(st.text(max_size=12), json_values, max_size=4)),
        "environment": draw(st.dictionaries(env_names, st.one_of(st.text(max_size=12), st.integers(),
                                                                  st.booleans(), st.sampled_from(NASTY_STRINGS)),
                                            max_size=4)),
        "max_run": draw(st.integers(min_value=1, max_value=2_419_200)),
        "enable_network_isolation": draw(st.booleans()),
        "region": draw(st.sampled_from(["us-east-1", "eu-central-1", "ap-southeast-2"])),
    }
    if heterogeneous:
        raw["instance_groups"] = [
            {"instance_group_name": name, "instance_type": draw(st.sampled_from(["ml.c5.xlarge", "ml.p3.2xlarge"])),
             "instance_count": draw(st.sampled_from([1, 2, 0, 3, 12, 1]))}
            for name in group_names
        ]
    else:
        raw["instance_type"] = "ml.m5.large"
        raw["instance_count"] = draw(st.integers(min_value=1, max_value=70))
    assign = heterogeneous and draw(st.booleans())
    inputs: dict[str, Any] = {}
    for name in draw(st.lists(channel_names, max_size=4, unique=True)):
        channel: dict[str, Any] = {
            "s3_data": draw(st.sampled_from(["data/train", "data/single.csv", "s3://bucket/val"] * 3
                                            + ["data/empty"])),
            "distribution": draw(st.sampled_from(["FullyReplicated", "ShardedByS3Key"])),
            "input_mode": draw(st.sampled_from(["File", "FastFile"])),
        }
        if draw(st.booleans()):
            channel["content_type"] = draw(st.sampled_from(["text/csv", "application/x-parquet", "é/$x"]))
        if assign:
            channel["instance_groups"] = draw(st.lists(st.sampled_from(group_names), min_size=1, max_size=2,
                                                       unique=True))
        inputs[name] = channel
    raw["inputs"] = inputs
    raw["local_s3_root"] = "s3"
    if draw(st.booleans()):
        strategy = draw(st.sampled_from(["mpi", "torch_distributed", "pytorchddp", "smdistributed",
                                         "parameter_server", "multi_worker_mirrored_strategy"]))
        options: dict[str, Any] = {"enabled": draw(st.booleans())}
        if strategy == "mpi":
            options["processes_per_host"] = draw(st.integers(min_value=1, max_value=8))
            options["custom_mpi_options"] = draw(st.sampled_from(["", "-x NCCL_DEBUG=INFO", "$X"]))
        if strategy == "smdistributed":
            options = {"dataparallel": options}
        raw["distribution"] = {strategy: options, "instance_groups": [draw(st.sampled_from(group_names))]}
    if draw(st.booleans()):
        raw["container_entry_point"] = draw(st.lists(st.sampled_from(["python3", "sh", "-c", "echo $HOME ${X}",
                                                                      "é", "a b"]), min_size=1, max_size=3))
    if draw(st.booleans()):
        raw["container_arguments"] = draw(st.lists(st.text(max_size=10), min_size=1, max_size=3))
    if draw(st.booleans()):
        raw["checkpoint_s3_uri"] = "ckpt"
        raw["checkpoint_local_path"] = draw(st.sampled_from(["/opt/ml/checkpoints", "/ckpt", "/tmp/é"]))
    return raw


# --------------------------------------------------------------------------------------------------
# What a valid JobSpec must survive


def check_everything_downstream(spec: JobSpec, host_order: str, seed: int) -> None:
    job_name = job_name_from(spec, NOW)
    plan = make_plan(spec, job_name, host_order, seed)
    document = plan.to_dict()
    json.dumps(document, allow_nan=True)
    assert contract.dumps(document)
    for host in plan.hosts:
        for name, content in host.files.items():
            assert name.endswith(".json")
            json.loads(content)
    json.dumps(hyperparameters.encoded(spec, job_name))
    json.dumps(contract.describe_resource_config(spec))
    json.dumps(contract.describe_input_data_config(spec))
    project = compose.compose_project(plan)
    json.dumps(project)
    yaml.load(yaml.dump(project, Dumper=SafeDumper), Loader=SafeLoader)
    yaml.load(compose.compose_yaml(plan), Loader=SafeLoader)
    assert summary(plan)


def validated(raw: Any, base: Path) -> JobSpec | None:
    try:
        return validate(raw, base_dir=base)
    except EmulatorError as err:
        assert str(err)  # the message itself must be printable
        return None


@pytest.mark.slow  # 300 examples, each planned and rendered
@SETTINGS
@given(raw=mutated_specs(), host_order=st.sampled_from(["spec", "shuffled"]), seed=st.integers(-(2**40), 2**40))
def test_mutated_spec_gives_a_jobspec_or_our_error(
    project: Path, raw: dict[str, Any], host_order: str, seed: int
) -> None:
    spec = validated(raw, project)
    if spec is not None:
        check_everything_downstream(spec, host_order, seed)


@pytest.mark.slow  # 300 examples, each planned and rendered
@SETTINGS
@given(raw=plausible_specs(), host_order=st.sampled_from(["spec", "shuffled"]), seed=st.integers(0, 2**32))
def test_plausible_spec_reaches_the_plan_or_gives_our_error(
    project: Path, raw: dict[str, Any], host_order: str, seed: int
) -> None:
    spec = validated(raw, project)
    if spec is not None:
        check_everything_downstream(spec, host_order, seed)


@pytest.mark.slow  # 300 examples, each planned and rendered
@SETTINGS
@given(raw=st.dictionaries(keys, junk, max_size=8))
def test_junk_mapping_gives_a_jobspec_or_our_error(project: Path, raw: dict[str, Any]) -> None:
    spec = validated(raw, project)
    if spec is not None:
        check_everything_downstream(spec, "spec", 0)


@settings(SETTINGS, max_examples=100)
@given(raw=junk)
def test_anything_at_all_gives_our_error(project: Path, raw: Any) -> None:
    """The Python API takes any object: a non-mapping is a SpecError too."""
    spec = validated(raw, project)
    if spec is not None:
        check_everything_downstream(spec, "spec", 0)


@settings(SETTINGS, max_examples=50)
@given(group=names, channel=names, env=names)
def test_names_anywhere_give_a_jobspec_or_our_error(project: Path, group: str, channel: str, env: str) -> None:
    raw = copy.deepcopy(VALID)
    raw["instance_groups"][1]["instance_group_name"] = group
    raw["distribution"]["instance_groups"] = [group]
    raw["inputs"]["validation"]["instance_groups"] = [group]
    raw["inputs"][channel] = raw["inputs"].pop("training")
    raw["environment"][env] = "x"
    raw["hyperparameters"][env] = group
    spec = validated(raw, project)
    if spec is not None:
        check_everything_downstream(spec, "shuffled", 7)


# --------------------------------------------------------------------------------------------------
# Raw YAML text and bytes

TOKENS = [
    "job_name: ", "inputs:", "instance_groups:", "hyperparameters:", "- ", ": ", "? ", "&a ", "*a", "&b ", "*b",
    "<<: *a", "[", "]", "{", "}", ", ", "'", '"', "\n", "\n  ", "\n    ", "\t", "#", "---\n", "...\n",
    "%YAML 1.1\n", "%TAG ! tag:x:\n", "!!binary ", "!!set ", "!!python/object:os.system ", "!!int ", "!!float ",
    "!!timestamp ", "!foo ", "|\n  ", ">\n  ", "2024-02-30", "9" * 50, "1e999", ".nan", "0x", "0o", "~", "null",
    "yes", "\\x00", "\"\\0\"", "\"\\ud800\"", "\ufeff", "\x00", "\x85", "\u2028", "é", "a", "b",
]
yamlish = st.lists(st.sampled_from(TOKENS), max_size=40).map("".join)


def parsed(text: str) -> dict[str, Any] | None:
    try:
        data = parse_yaml(text, "props.yaml")
    except SpecError as err:
        assert err.problems and str(err)
        return None
    assert isinstance(data, dict)
    return data


@SETTINGS
@given(text=st.one_of(st.text(max_size=200), yamlish))
def test_any_text_parses_to_a_mapping_or_a_spec_error(project: Path, text: str) -> None:
    data = parsed(text)
    if data is not None:
        validated(data, project)


@settings(SETTINGS, max_examples=100)
@given(raw=mutated_specs(), cut=st.integers(min_value=0, max_value=400), junk_text=yamlish)
def test_damaged_spec_text_parses_to_a_mapping_or_a_spec_error(
    project: Path, raw: dict[str, Any], cut: int, junk_text: str
) -> None:
    try:
        text = yaml.safe_dump(raw, allow_unicode=True)
    except yaml.YAMLError:
        return  # a value PyYAML cannot write (e.g. a lone surrogate); nothing to damage
    parsed(text[:cut] + junk_text + text[cut:])


@settings(SETTINGS, max_examples=150)
@given(data=st.binary(max_size=300))
def test_any_bytes_load_to_a_jobspec_or_a_spec_error(project: Path, data: bytes) -> None:
    path = project / "random.yaml"
    path.write_bytes(data)
    try:
        spec = load_spec_file(path)
    except SpecError as err:
        assert err.problems
        return
    check_everything_downstream(spec, "spec", 0)

