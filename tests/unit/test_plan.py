"""The plan: a pure function from a validated spec to hosts, groups, mounts, labels and files.

Expected values are written by hand from docs/contract.md and the SageMaker SDK's naming rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from emulator.cli import _memory
from emulator.errors import UsageError
from emulator.jobspec import JobSpec
from emulator.planning.plan import (
    EVERY_HOST,
    LABEL_GROUP,
    LABEL_HOST,
    LABEL_JOB,
    Mount,
    Plan,
    job_name_from,
    make_plan,
    memory_limit,
    parse_memory,
    shard,
    staging_dir,
)

JOB = "hetero-test"
CONFIG = "input/config/"


def hetero(*groups: tuple[str, str, int], **extra: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "job_name": JOB,
        "entry_point": "train.py",
        "source_dir": "./code",
        "instance_groups": [{"instance_group_name": n, "instance_type": t, "instance_count": c} for n, t, c in groups],
    }
    raw.update(extra)
    return raw


def names(n: int) -> list[str]:
    return [f"algo-{i}" for i in range(1, n + 1)]


def config(plan: Plan, host: str, name: str) -> Any:
    return json.loads(plan.host(host).files[CONFIG + name])


def mount_at(plan: Plan, host: str, target: str) -> Mount:
    matches = [m for m in plan.host(host).container.mounts if m.target == target]
    assert len(matches) == 1, f"{host}: expected one mount at {target}, got {plan.host(host).container.mounts}"
    return matches[0]


THREE_GROUPS = hetero(("a", "ml.c5.xlarge", 2), ("b", "ml.p3.2xlarge", 1), ("c", "ml.m5.large", 3))


@pytest.fixture
def three_groups(load: Callable[..., JobSpec]) -> JobSpec:
    return load(THREE_GROUPS)


@pytest.fixture
def with_channels(load: Callable[..., JobSpec]) -> JobSpec:
    """data_group (algo-1, algo-2) gets `training`, dnn_group (algo-3) gets `validation`."""
    return load(
        hetero(
            ("data_group", "ml.c5.xlarge", 2),
            ("dnn_group", "ml.p3.2xlarge", 1),
            inputs={
                "training": {"s3_data": "./data/train", "instance_groups": ["data_group"]},
                "validation": {"s3_data": "./data/validation", "instance_groups": ["dnn_group"]},
            },
        )
    )


# --------------------------------------------------------------------------------------------------
# Host numbering


def test_hosts_are_numbered_across_groups_in_spec_order(three_groups: JobSpec) -> None:
    plan = make_plan(three_groups, JOB)
    assert [(g.name, g.hosts) for g in plan.groups] == [
        ("a", ("algo-1", "algo-2")),
        ("b", ("algo-3",)),
        ("c", ("algo-4", "algo-5", "algo-6")),
    ]
    assert [(h.name, h.group, h.instance_type) for h in plan.hosts] == [
        ("algo-1", "a", "ml.c5.xlarge"),
        ("algo-2", "a", "ml.c5.xlarge"),
        ("algo-3", "b", "ml.p3.2xlarge"),
        ("algo-4", "c", "ml.m5.large"),
        ("algo-5", "c", "ml.m5.large"),
        ("algo-6", "c", "ml.m5.large"),
    ]


def test_shuffled_with_a_seed_is_deterministic(three_groups: JobSpec) -> None:
    first = make_plan(three_groups, JOB, host_order="shuffled", seed=1234)
    second = make_plan(three_groups, JOB, host_order="shuffled", seed=1234)
    assert first == second
    assert first.groups == second.groups
    assert first.seed == 1234
    assert first.host_order == "shuffled"


def test_different_seeds_eventually_give_a_different_assignment(three_groups: JobSpec) -> None:
    assignments = {make_plan(three_groups, JOB, host_order="shuffled", seed=s).groups for s in range(30)}
    assert len(assignments) > 1


@pytest.mark.parametrize("seed", range(15))
def test_shuffled_is_a_permutation_keeping_group_sizes(three_groups: JobSpec, seed: int) -> None:
    plan = make_plan(three_groups, JOB, host_order="shuffled", seed=seed)
    every = [h for g in plan.groups for h in g.hosts]
    assert sorted(every) == sorted(names(6))
    assert len(every) == len(set(every)) == 6
    assert [(g.name, len(g.hosts)) for g in plan.groups] == [("a", 2), ("b", 1), ("c", 3)]
    # Every host's own record agrees with its group's host list.
    for g in plan.groups:
        for host in g.hosts:
            assert plan.host(host).group == g.name


def _contiguous(hosts: tuple[str, ...]) -> bool:
    numbers = sorted(int(h.rsplit("-", 1)[1]) for h in hosts)
    return numbers == list(range(numbers[0], numbers[0] + len(numbers)))


def test_some_seed_gives_non_contiguous_groups_and_moves_algo_1(three_groups: JobSpec) -> None:
    # As the real service may: the AWS guide shows instance_group_2 with hosts ["algo-3", "algo-1"].
    non_contiguous = first_group_without_algo_1 = False
    for seed in range(200):
        plan = make_plan(three_groups, JOB, host_order="shuffled", seed=seed)
        non_contiguous |= any(not _contiguous(g.hosts) for g in plan.groups if g.hosts)
        first_group_without_algo_1 |= "algo-1" not in plan.groups[0].hosts
        if non_contiguous and first_group_without_algo_1:
            break
    assert non_contiguous, "no seed in 0..199 gave a group non-contiguous host numbers"
    assert first_group_without_algo_1, "no seed in 0..199 moved algo-1 out of the first group"


def test_shuffled_resourceconfig_matches_the_group_assignment(three_groups: JobSpec) -> None:
    plan = make_plan(three_groups, JOB, host_order="shuffled", seed=3)
    expected = [
        {"instance_group_name": g.name, "instance_type": g.instance_type, "hosts": list(g.hosts)} for g in plan.groups
    ]
    for host in plan.hosts:
        rc = config(plan, host.name, "resourceconfig.json")
        assert rc["instance_groups"] == expected
        assert rc["current_group_name"] == host.group
        assert host.name in next(g["hosts"] for g in expected if g["instance_group_name"] == host.group)


def test_spec_order_plan_records_no_seed(three_groups: JobSpec) -> None:
    plan = make_plan(three_groups, JOB, seed=99)
    assert plan.host_order == "spec"
    assert plan.seed is None


def test_unknown_host_order_is_refused(three_groups: JobSpec) -> None:
    with pytest.raises(ValueError, match="host_order"):
        make_plan(three_groups, JOB, host_order="random")


def test_ten_or_more_hosts_sort_numerically(load: Callable[..., JobSpec]) -> None:
    spec = load(hetero(("a", "ml.c5.xlarge", 5), ("b", "ml.c5.xlarge", 7)))
    plan = make_plan(spec, JOB)
    expected = names(12)  # algo-1, algo-2, ..., algo-9, algo-10, algo-11, algo-12
    assert [h.name for h in plan.hosts] == expected
    assert plan.groups[1].hosts == ("algo-6", "algo-7", "algo-8", "algo-9", "algo-10", "algo-11", "algo-12")
    rc = config(plan, "algo-10", "resourceconfig.json")
    assert rc["hosts"] == expected
    assert rc["hosts"].index("algo-2") < rc["hosts"].index("algo-10")


# --------------------------------------------------------------------------------------------------
# Job names


NOW = datetime(2024, 1, 2, 3, 4, 5, 678901)


def test_job_name_is_base_plus_sdk_timestamp(load: Callable[..., JobSpec]) -> None:
    raw = hetero(("a", "ml.c5.xlarge", 1))
    del raw["job_name"]
    raw["base_job_name"] = "hello-hetero"
    assert job_name_from(load(raw), NOW) == "hello-hetero-2024-01-02-03-04-05-678"


def test_job_name_timestamp_truncates_microseconds_to_milliseconds(load: Callable[..., JobSpec]) -> None:
    raw = hetero(("a", "ml.c5.xlarge", 1))
    del raw["job_name"]
    raw["base_job_name"] = "b"
    spec = load(raw)
    assert job_name_from(spec, datetime(2023, 12, 31, 23, 59, 59, 999999)) == "b-2023-12-31-23-59-59-999"
    assert job_name_from(spec, datetime(2023, 12, 31, 23, 59, 59, 123)) == "b-2023-12-31-23-59-59-000"


def test_long_base_is_truncated_to_a_63_char_job_name(load: Callable[..., JobSpec]) -> None:
    raw = hetero(("a", "ml.c5.xlarge", 1))
    del raw["job_name"]
    raw["base_job_name"] = "abcdefghij" * 5  # 50 chars; 63 - len("-2024-01-02-03-04-05-678") = 39 are kept
    name = job_name_from(load(raw), NOW)
    assert name == "abcdefghijabcdefghijabcdefghijabcdefghi-2024-01-02-03-04-05-678"
    assert len(name) == 63


def test_explicit_job_name_wins(load: Callable[..., JobSpec]) -> None:
    raw = hetero(("a", "ml.c5.xlarge", 1), base_job_name="ignored-base")
    raw["job_name"] = "exactly-this"
    assert job_name_from(load(raw), NOW) == "exactly-this"


# --------------------------------------------------------------------------------------------------
# Sharding


@pytest.mark.parametrize(
    ("n_files", "n_hosts"),
    [(10, 3), (3, 3), (9, 3), (1, 1), (7, 1), (2, 5), (0, 2), (100, 7)],
)
def test_shard_is_disjoint_complete_and_balanced(n_files: int, n_hosts: int) -> None:
    files = tuple(f"part-{i:04d}.csv" for i in range(n_files))
    hosts = tuple(names(n_hosts))
    shares = shard(files, hosts)
    assert set(shares) == set(hosts)
    every = [f for share in shares.values() for f in share]
    assert len(every) == len(set(every)), "a file went to two hosts"
    assert sorted(every) == sorted(files), "some file went to no host"
    sizes = [len(share) for share in shares.values()]
    assert max(sizes) - min(sizes) <= 1


def test_shard_with_more_hosts_than_files_leaves_some_hosts_empty() -> None:
    shares = shard(("x.csv", "y.csv"), ("algo-1", "algo-2", "algo-3", "algo-4"))
    assert sorted(len(s) for s in shares.values()) == [0, 0, 1, 1]
    assert sorted(f for s in shares.values() for f in s) == ["x.csv", "y.csv"]


def test_sharded_channel_gives_each_host_of_its_group_a_disjoint_share(load: Callable[..., JobSpec]) -> None:
    spec = load(
        hetero(
            ("data_group", "ml.c5.xlarge", 2),
            ("dnn_group", "ml.p3.2xlarge", 1),
            inputs={
                "training": {
                    "s3_data": "./data/train",
                    "distribution": "ShardedByS3Key",
                    "instance_groups": ["data_group"],
                }
            },
        )
    )
    plan = make_plan(spec, JOB)
    one, two = plan.host("algo-1").shards["training"], plan.host("algo-2").shards["training"]
    assert not set(one) & set(two)
    assert sorted(one + two) == ["part-0.csv", "part-1.csv", "part-2.csv"]
    assert "training" not in plan.host("algo-3").shards
    for host in ("algo-1", "algo-2"):
        mount = mount_at(plan, host, "/opt/ml/input/data/training")
        assert mount.read_only
        # A host's share is staged apart from the user's data: it is not the whole source folder.
        assert mount.source != str(spec.inputs["training"].source)
        assert config(plan, host, "inputdataconfig.json")["training"]["S3DistributionType"] == "ShardedByS3Key"
    assert (
        mount_at(plan, "algo-1", "/opt/ml/input/data/training").source
        != mount_at(plan, "algo-2", "/opt/ml/input/data/training").source
    )


# --------------------------------------------------------------------------------------------------
# Channels and mounts


def test_channels_go_only_to_the_hosts_of_their_groups(with_channels: JobSpec) -> None:
    plan = make_plan(with_channels, JOB)
    data = "/opt/ml/input/data/"
    for host, channel, other in (
        ("algo-1", "training", "validation"),
        ("algo-2", "training", "validation"),
        ("algo-3", "validation", "training"),
    ):
        h = plan.host(host)
        assert h.channels == (channel,)
        assert set(config(plan, host, "inputdataconfig.json")) == {channel}
        targets = {m.target for m in h.container.mounts}
        assert data + channel in targets
        assert not any(t.startswith(data + other) for t in targets)


def test_channel_without_groups_goes_to_every_host(load: Callable[..., JobSpec]) -> None:
    spec = load(
        hetero(
            ("data_group", "ml.c5.xlarge", 2), ("dnn_group", "ml.p3.2xlarge", 1), inputs={"training": "./data/train"}
        )
    )
    plan = make_plan(spec, JOB)
    for host in names(3):
        assert plan.host(host).channels == ("training",)
        assert set(config(plan, host, "inputdataconfig.json")) == {"training"}


def test_data_is_mounted_read_only_and_opt_ml_writable(with_channels: JobSpec, project: Path) -> None:
    plan = make_plan(with_channels, JOB)
    root = project.resolve()
    for host in names(3):
        # The code is copied into the host's own /opt/ml/code (staging), never mounted from the user.
        assert not [m for m in plan.host(host).container.mounts if m.target == "/opt/ml/code"]
        opt_ml = mount_at(plan, host, "/opt/ml")
        assert opt_ml.read_only is False
        assert opt_ml.source == str(root / "output" / JOB / "hosts" / host)
        assert plan.host(host).host_dir == opt_ml.source
    training = mount_at(plan, "algo-1", "/opt/ml/input/data/training")
    assert training == Mount(str(root / "data" / "train"), "/opt/ml/input/data/training", read_only=True)
    validation = mount_at(plan, "algo-3", "/opt/ml/input/data/validation")
    assert validation == Mount(str(root / "data" / "validation"), "/opt/ml/input/data/validation", read_only=True)


def test_input_data_itself_is_read_only_on_every_host_even_without_channels(
    with_channels: JobSpec, load: Callable[..., JobSpec]
) -> None:
    """Not only each channel: /opt/ml/input/data is a read-only mount of the staged folder holding the
    channels' mount points, so nothing can be added beside them (README: read-only inputs)."""
    no_inputs = load(hetero(("data_group", "ml.c5.xlarge", 2)))
    for plan in (make_plan(with_channels, JOB), make_plan(no_inputs, JOB)):
        for host in plan.hosts:
            mount = mount_at(plan, host.name, "/opt/ml/input/data")
            assert mount == Mount(host.host_dir + "/input/data", "/opt/ml/input/data", read_only=True)
            below = [m for m in host.container.mounts if m.target.startswith("/opt/ml/input/data/")]
            assert {m.target.rsplit("/", 1)[1] for m in below} == set(host.channels)
            assert all(m.read_only for m in below)


def test_each_host_has_its_own_opt_ml(with_channels: JobSpec) -> None:
    plan = make_plan(with_channels, JOB)
    sources = [mount_at(plan, h, "/opt/ml").source for h in names(3)]
    assert len(set(sources)) == 3


def test_single_file_channel_is_staged_so_its_folder_is_read_only_too(
    load: Callable[..., JobSpec], project: Path
) -> None:
    # Mounting only the file would leave /opt/ml/input/data/training writable (it lies in the host's
    # own /opt/ml): a script could add files to its input channel.
    spec = load(hetero(("a", "ml.c5.xlarge", 1), inputs={"training": "./data/single.csv"}))
    plan = make_plan(spec, JOB)
    host = plan.host("algo-1")
    mount = mount_at(plan, "algo-1", "/opt/ml/input/data/training")
    assert mount.read_only is True
    assert mount.source == str(staging_dir(plan.job_dir, "training", EVERY_HOST))
    assert host.shards["training"] == ("single.csv",)
    assert not any(m.source == str((project / "data" / "single.csv").resolve()) for m in host.container.mounts)


def test_single_file_channel_that_is_a_symlink_keeps_the_links_name(
    load: Callable[..., JobSpec], project: Path
) -> None:
    """`data/train.csv -> ../cache/blob1` (DVC, Hugging Face cache): S3 has the object `train.csv`."""
    (project / "cache").mkdir()
    (project / "cache" / "blob1").write_text("1\n")
    (project / "data" / "train.csv").symlink_to("../cache/blob1")
    spec = load(hetero(("a", "ml.c5.xlarge", 2), inputs={"training": "./data/train.csv"}))
    plan = make_plan(spec, JOB)
    assert [plan.host(h).shards["training"] for h in names(2)] == [("train.csv",)] * 2
    # One share for every host of a FullyReplicated channel: staged once.
    assert {mount_at(plan, h, "/opt/ml/input/data/training").source for h in names(2)} == {
        str(staging_dir(plan.job_dir, "training", EVERY_HOST))}


def test_channel_folder_is_staged_only_when_its_links_leave_it(load: Callable[..., JobSpec], project: Path) -> None:
    (project / "data" / "train" / "inside.csv").symlink_to("part-0.csv")  # resolves the same in a bind mount
    (project / "data" / "validation" / "out.csv").symlink_to(project / "data" / "single.csv")
    spec = load(hetero(("a", "ml.c5.xlarge", 2), inputs={"train": "./data/train", "validation": "./data/validation"}))
    plan = make_plan(spec, JOB)
    for host in names(2):
        assert mount_at(plan, host, "/opt/ml/input/data/train").source == str(spec.inputs["train"].source)
        assert "train" not in plan.host(host).shards
        assert mount_at(plan, host, "/opt/ml/input/data/validation").source == str(
            staging_dir(plan.job_dir, "validation", EVERY_HOST))
        assert plan.host(host).shards["validation"] == ("out.csv", "val.csv")


@pytest.mark.parametrize(
    "text", ["{project}/data/validation/val.csv", "../../elsewhere/x.csv", "../validation/val.csv"]
)
def test_a_link_leaves_the_folder_when_a_container_would_resolve_it_elsewhere(
    load: Callable[..., JobSpec], project: Path, text: str
) -> None:
    """An absolute text (even naming a file inside), or a relative one climbing above the folder (even
    back into it by name: in the container the folder is called after the channel), resolves elsewhere
    in a bind mount."""
    (project / "elsewhere").mkdir()
    (project / "elsewhere" / "x.csv").write_text("x\n")
    (project / "data" / "validation" / "l.csv").symlink_to(text.format(project=project))
    spec = load(hetero(("a", "ml.c5.xlarge", 1), inputs={"validation": "./data/validation"}))
    assert spec.inputs["validation"].links_out


def test_sharding_is_over_the_keys_so_links_do_not_move_files_between_hosts(
    load: Callable[..., JobSpec], project: Path
) -> None:
    """Replacing part-1.csv by a link to the same bytes elsewhere changes no host's share."""
    raw = hetero(("a", "ml.c5.xlarge", 2), inputs={"training": {"s3_data": "./data/train",
                                                               "distribution": "ShardedByS3Key"}})
    before = make_plan(load(raw), JOB)
    (project / "part-1.csv").write_bytes((project / "data" / "train" / "part-1.csv").read_bytes())
    (project / "data" / "train" / "part-1.csv").unlink()
    (project / "data" / "train" / "part-1.csv").symlink_to(project / "part-1.csv")
    after = make_plan(load(raw), JOB)
    assert [after.host(h).shards for h in names(2)] == [before.host(h).shards for h in names(2)]


# --------------------------------------------------------------------------------------------------
# Names, labels, environment, command


def test_container_names_are_job_dash_host(with_channels: JobSpec) -> None:
    plan = make_plan(with_channels, JOB)
    assert [h.container.name for h in plan.hosts] == ["hetero-test-algo-1", "hetero-test-algo-2", "hetero-test-algo-3"]


def test_labels_name_job_host_and_group(with_channels: JobSpec) -> None:
    plan = make_plan(with_channels, JOB)
    expected = {"algo-1": "data_group", "algo-2": "data_group", "algo-3": "dnn_group"}
    for host, grp in expected.items():
        labels = plan.host(host).container.labels
        assert labels[LABEL_JOB] == "hetero-test"
        assert labels[LABEL_HOST] == host
        assert labels[LABEL_GROUP] == grp
    assert plan.labels[LABEL_JOB] == "hetero-test"
    assert len({LABEL_JOB, LABEL_HOST, LABEL_GROUP}) == 3


def test_environment_has_training_job_variables_and_the_spec_environment(load: Callable[..., JobSpec]) -> None:
    spec = load(hetero(("a", "ml.c5.xlarge", 2), environment={"MY_VAR": "value"}, region="eu-west-1"))
    plan = make_plan(spec, JOB)
    for host in plan.hosts:
        env = host.container.environment
        assert env["TRAINING_JOB_NAME"] == "hetero-test"
        assert env["AWS_REGION"] == "eu-west-1"
        assert env["MY_VAR"] == "value"
        assert re.fullmatch(r"arn:aws:sagemaker:eu-west-1:\d{12}:training-job/hetero-test", env["TRAINING_JOB_ARN"])


def test_command_is_train_by_default(with_channels: JobSpec) -> None:
    plan = make_plan(with_channels, JOB)
    assert plan.entrypoint is None
    assert plan.command == ("train",)


def test_container_entry_point_and_arguments_replace_train(load: Callable[..., JobSpec]) -> None:
    raw = hetero(("a", "ml.c5.xlarge", 1), container_entry_point=["python3"], container_arguments=["-c", "pass"])
    plan = make_plan(load(raw), JOB)
    assert plan.entrypoint == ("python3",)
    assert plan.command == ("-c", "pass")


def test_job_dir_is_output_path_slash_job_name(with_channels: JobSpec, project: Path) -> None:
    plan = make_plan(with_channels, JOB)
    assert plan.job_dir == str(project.resolve() / "output" / "hetero-test")


# --------------------------------------------------------------------------------------------------
# Purity


def test_planning_twice_gives_equal_plans(with_channels: JobSpec) -> None:
    assert make_plan(with_channels, JOB) == make_plan(with_channels, JOB)


def test_planning_writes_nothing_to_disk(with_channels: JobSpec, project: Path) -> None:
    before = sorted(p for p in project.rglob("*"))
    make_plan(with_channels, JOB)
    assert sorted(p for p in project.rglob("*")) == before


def test_plan_to_dict_is_json_serialisable(with_channels: JobSpec) -> None:
    data = make_plan(with_channels, JOB).to_dict()
    text = json.dumps(data)
    assert json.loads(text) == data
    assert "spec" not in data
    assert [h["name"] for h in data["hosts"]] == names(3)
    assert data["job_name"] == "hetero-test"


def test_plans_for_different_jobs_differ(with_channels: JobSpec) -> None:
    assert make_plan(with_channels, "job-one") != make_plan(with_channels, "job-two")


# --------------------------------------------------------------------------------------------------
# Zero-count groups


def test_zero_count_group_appears_in_resourceconfig_with_no_hosts(load: Callable[..., JobSpec]) -> None:
    spec = load(hetero(("data_group", "ml.c5.xlarge", 2), ("dnn_group", "ml.p3.2xlarge", 0)))
    plan = make_plan(spec, JOB)
    assert [h.name for h in plan.hosts] == ["algo-1", "algo-2"]
    assert plan.groups[1].hosts == ()
    for host in ("algo-1", "algo-2"):
        rc = config(plan, host, "resourceconfig.json")
        assert rc["instance_groups"] == [
            {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "hosts": ["algo-1", "algo-2"]},
            {"instance_group_name": "dnn_group", "instance_type": "ml.p3.2xlarge", "hosts": []},
        ]
        assert rc["hosts"] == ["algo-1", "algo-2"]


# --------------------------------------------------------------------------------------------------
# Memory limits (--memory): each host's instance type's memory by default

GIB = 1024**3
MIB = 1024**2


def published_memory_gib(instance_type: str) -> float:
    """The memory AWS publishes for an instance type, straight from the catalogue's data file."""
    text = resources.files("emulator").joinpath("data", "instance_types.json").read_text(encoding="utf-8")
    return float(json.loads(text)[instance_type]["memory_gib"])


def test_instance_memory_is_the_published_figure() -> None:
    # AWS publishes 8 GiB for ml.c5.xlarge (c5.xlarge: 4 vCPUs, 8 GiB) and 61 GiB for ml.p3.2xlarge.
    assert published_memory_gib("ml.c5.xlarge") == 8
    assert memory_limit("instance", "ml.c5.xlarge") == 8 * GIB
    assert memory_limit("instance", "ml.p3.2xlarge") == int(published_memory_gib("ml.p3.2xlarge") * GIB) == 61 * GIB


def test_instance_memory_keeps_a_fractional_figure() -> None:
    assert published_memory_gib("ml.c4.xlarge") == 7.5
    assert memory_limit("instance", "ml.c4.xlarge") == 7 * GIB + 512 * MIB


def test_instance_memory_of_a_type_without_figures_is_no_limit() -> None:
    assert memory_limit("instance", "ml.no-such.xlarge") is None


def test_memory_none_and_bytes() -> None:
    assert memory_limit("none", "ml.c5.xlarge") is None
    assert memory_limit(3 * GIB, "ml.c5.xlarge") == 3 * GIB
    assert memory_limit(512 * MIB, "ml.p3.2xlarge") == 512 * MIB  # the same for every type


def test_every_host_gets_its_memory_limit(three_groups: JobSpec) -> None:
    by_type = {h.name: h.instance_type for h in make_plan(three_groups, JOB).hosts}
    assert set(by_type.values()) == {"ml.c5.xlarge", "ml.p3.2xlarge", "ml.m5.large"}

    default = make_plan(three_groups, JOB)  # "instance"
    assert {h.name: h.container.memory_bytes for h in default.hosts} == {
        name: int(published_memory_gib(t) * GIB) for name, t in by_type.items()
    }
    fixed = make_plan(three_groups, JOB, memory=2 * GIB)
    assert [h.container.memory_bytes for h in fixed.hosts] == [2 * GIB] * 6
    unlimited = make_plan(three_groups, JOB, memory="none")
    assert [h.container.memory_bytes for h in unlimited.hosts] == [None] * 6
    assert make_plan(three_groups, JOB, memory="instance") == default


def test_memory_limit_is_in_plan_json(three_groups: JobSpec) -> None:
    data = make_plan(three_groups, JOB, memory=2 * GIB).to_dict()
    assert {h["container"]["memory_bytes"] for h in data["hosts"]} == {2 * GIB}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512m", 512 * MIB),
        ("2g", 2 * GIB),
        ("1.5G", GIB + 512 * MIB),
        ("2gib", 2 * GIB),
        ("2GB", 2 * GIB),
        ("8192k", 8 * MIB),
        (" 1t ", 1024 * GIB),
        ("8388608", 8 * MIB),  # plain bytes, as docker takes them
        ("instance", "instance"),
        ("INSTANCE", "instance"),
        ("none", "none"),
    ],
)
def test_parse_memory_accepts(text: str, expected: object) -> None:
    assert parse_memory(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("12", "less than 6 MiB"),  # 12 bytes: surely a typo
        ("5m", "less than 6 MiB"),
        ("-1g", "less than 6 MiB"),
        ("0", "less than 6 MiB"),
        ("x", "is not a size"),
        ("nan", "is not a size"),
        ("inf", "is not a size"),
        ("", "is not a size"),
        ("g", "is not a size"),
        ("2q", "is not a size"),
        ("2gg", "is not a size"),
        ("lots", "is not a size"),
        ("1e308t", "is too large"),  # would overflow int()
        ("99999999999999999999g", "is too large"),  # past the engine's signed 64 bits
    ],
)
def test_parse_memory_refuses(text: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_memory(text)
    assert fragment in str(info.value)
    assert repr(text) in str(info.value)


def test_cli_memory_option_turns_a_bad_size_into_a_usage_error() -> None:
    with pytest.raises(UsageError) as info:
        _memory("2q")
    assert info.value.exit_code == 2
    assert info.value.message.startswith("--memory: ")
    assert "'2q' is not a size" in info.value.message
    assert _memory("2g") == 2 * GIB
