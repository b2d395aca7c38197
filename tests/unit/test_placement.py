"""An instance group's `placement` (node labels its hosts need on a swarm): checked in the spec, planned
as swarm constraints, given or overridden on the command line with --placement, and absent from a
CreateTrainingJob request (the service has no such field)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_backend import FakeBackend, exits
from testkit import invoke, write_train_project
from typer.testing import CliRunner

from emulator import api
from emulator import cli as cli_module
from emulator.backend import registry
from emulator.backend.swarm import service_options
from emulator.cli import app
from emulator.errors import UsageError
from emulator.job import Job
from emulator.jobspec import InstanceGroup, JobSpec, load_spec_file
from emulator.jobspec.placement import constraints, parse_option, with_placement
from emulator.planning.plan import HostPlan, Plan, make_plan
from emulator.reports.console import RecordingReporter

Raw = dict[str, Any]


def with_labels(raw: Raw, group: int, labels: Any) -> Raw:
    raw["instance_groups"][group]["placement"] = labels
    return raw


# ---------------------------------------------------------------------------------------------------
# the spec


def test_a_groups_placement_is_kept_sorted_by_label_and_other_groups_have_none(
        valid_raw: Raw, load: Callable[[Raw], JobSpec]) -> None:
    spec = load(with_labels(valid_raw, 0, {"zone": "eu-1", "role": "cpu"}))
    assert spec.group("data_group").placement == (("role", "cpu"), ("zone", "eu-1"))
    assert spec.group("dnn_group").placement == ()


def test_placement_written_inline_in_yaml_loads(write_spec: Callable[[str], Path]) -> None:
    spec = load_spec_file(write_spec(
        "job_name: placed\nentry_point: train.py\nsource_dir: ./code\ninstance_groups:\n"
        "  - instance_group_name: data\n    instance_type: ml.c5.xlarge\n    instance_count: 2\n"
        "    placement: {role: cpu}\n"))
    assert spec.group("data").placement == (("role", "cpu"),)


def test_an_empty_placement_is_no_placement(valid_raw: Raw, load: Callable[[Raw], JobSpec]) -> None:
    assert load(with_labels(valid_raw, 1, {})).group("dnn_group").placement == ()


@pytest.mark.parametrize(
    ("labels", "path", "fragment"),
    [
        ("role=cpu", "instance_groups[1].placement", "must be a mapping of node label to value, got string"),
        (["role"], "instance_groups[1].placement", "must be a mapping of node label to value, got list"),
        ({"ro le": "cpu"}, "instance_groups[1].placement.ro le", "label key 'ro le' has characters"),
        ({"role=x": "cpu"}, "instance_groups[1].placement.role=x", "label key 'role=x' has characters"),
        ({"": "cpu"}, "instance_groups[1].placement.", "the label key is empty"),
        ({1: "cpu"}, "instance_groups[1].placement.1", "label keys must be strings, got integer"),
        ({"role": ""}, "instance_groups[1].placement.role", "the label value is empty"),
        ({"role": "a b"}, "instance_groups[1].placement.role", "label value 'a b' has characters"),
        ({"role": "a=b"}, "instance_groups[1].placement.role", "label value 'a=b' has characters"),
        ({"role": "==gpu"}, "instance_groups[1].placement.role", "label value '==gpu' has characters"),
        ({"role": "!=gpu"}, "instance_groups[1].placement.role", "label value '!=gpu' has characters"),
        ({"gpu": True}, "instance_groups[1].placement.gpu", "must be a string, got boolean"),
        ({"zone": 1}, "instance_groups[1].placement.zone", "must be a string, got integer"),
        ({"zone": None}, "instance_groups[1].placement.zone", "must be a string, got null"),
        ({"zone": ["a"]}, "instance_groups[1].placement.zone", "must be a string, got list"),
    ],
    ids=["string", "list", "space-in-key", "equals-in-key", "empty-key", "integer-key", "empty-value",
         "space-in-value", "equals-in-value", "eq-operator", "noteq-operator", "boolean", "integer", "null",
         "list-value"],
)
def test_a_bad_placement_is_a_problem_at_its_field_path(
        valid_raw: Raw, expect_problem: Callable[..., Any], labels: Any, path: str, fragment: str) -> None:
    expect_problem(with_labels(valid_raw, 1, labels), path, fragment)


def test_every_bad_label_is_reported_at_once_beside_other_problems(
        valid_raw: Raw, problems: Callable[[Raw], list[Any]]) -> None:
    raw = with_labels(valid_raw, 0, {"role": "a b", "zone": True, "ok": "fine"})
    raw["max_run"] = 0
    found = {p.path for p in problems(raw)}
    assert found == {"instance_groups[0].placement.role", "instance_groups[0].placement.zone", "max_run"}


def test_placement_is_not_a_key_of_the_job_itself(valid_raw: Raw, expect_problem: Callable[..., Any]) -> None:
    valid_raw["placement"] = {"role": "cpu"}
    expect_problem(valid_raw, "placement", "unknown key")


def test_a_request_made_from_a_placed_spec_has_no_placement_and_reads_back_without_it(
        valid_raw: Raw, load: Callable[[Raw], JobSpec], project: Path) -> None:
    spec = load(with_labels(valid_raw, 0, {"role": "cpu"}))
    request = api.as_request(spec)
    text = json.dumps(request)
    assert "placement" not in text.lower() and "node.labels" not in text
    back = api.load_mapping(request, base_dir=project)
    assert [g.placement for g in back.instance_groups] == [(), ()]
    assert [(g.instance_group_name, g.instance_count) for g in back.instance_groups] == \
        [(g.instance_group_name, g.instance_count) for g in spec.instance_groups]


# ---------------------------------------------------------------------------------------------------
# the plan


def test_each_host_gets_its_groups_labels_as_sorted_swarm_constraints(
        valid_raw: Raw, load: Callable[[Raw], JobSpec]) -> None:
    spec = load(with_labels(valid_raw, 0, {"zone": "eu-1", "role": "cpu"}))
    plan = make_plan(spec, "placed", host_order="shuffled", seed=7)
    by_group = {h.name: (h.group, h.container.placement) for h in plan.hosts}
    assert sorted(by_group.values()) == [
        ("data_group", ("node.labels.role==cpu", "node.labels.zone==eu-1")),
        ("data_group", ("node.labels.role==cpu", "node.labels.zone==eu-1")),
        ("dnn_group", ()),
    ]
    shown = {h["name"]: h["container"]["placement"] for h in plan.to_dict()["hosts"]}
    assert shown == {name: list(placement) for name, (_, placement) in by_group.items()}


def test_constraints_are_sorted_whatever_the_order_of_the_labels() -> None:
    assert constraints((("zone", "a"), ("arch", "x86_64"))) == ("node.labels.arch==x86_64", "node.labels.zone==a")
    assert constraints(()) == ()


# ---------------------------------------------------------------------------------------------------
# --placement GROUP:KEY=VALUE and with_placement


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("data_group:role=cpu", ("data_group", "role", "cpu")),
        ("g:zone=eu:1", ("g", "zone", "eu:1")),  # a value may hold ':'
        ("a:b:role=cpu", ("a:b", "role", "cpu")),  # so may a group name
        ("a=b:role=cpu", ("a=b", "role", "cpu")),  # and '=' too
        ("g:node.kind-x=v/1", ("g", "node.kind-x", "v/1")),
    ],
)
def test_the_option_splits_at_the_last_colon_before_the_last_equals_sign(
        text: str, parsed: tuple[str, str, str]) -> None:
    assert parse_option(text) == parsed


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("data_group-role=cpu", "is not GROUP:KEY=VALUE"),
        ("data_group:role", "is not GROUP:KEY=VALUE"),
        (":role=cpu", "is not GROUP:KEY=VALUE"),
        ("g:=cpu", "the label key is empty"),
        ("g:role=", "the label value is empty"),
        ("g:role=a b", "has characters a swarm constraint refuses"),
        ("g:ro!le=cpu", "has characters a swarm constraint refuses"),
    ],
)
def test_a_malformed_option_is_a_usage_error_naming_it(text: str, fragment: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_option(text)
    assert info.value.exit_code == 2
    assert info.value.message.startswith("--placement ") and fragment in info.value.message


def test_given_labels_add_to_and_override_the_spec_and_leave_it_unchanged(
        valid_raw: Raw, load: Callable[[Raw], JobSpec]) -> None:
    spec = load(with_labels(valid_raw, 0, {"role": "old", "zone": "a"}))
    placed = with_placement(spec, {"data_group": {"role": "cpu", "arch": "x86_64"}, "dnn_group": {"role": "gpu"}})
    assert placed.group("data_group").placement == (("arch", "x86_64"), ("role", "cpu"), ("zone", "a"))
    assert placed.group("dnn_group").placement == (("role", "gpu"),)
    assert spec.group("data_group").placement == (("role", "old"), ("zone", "a"))
    assert with_placement(spec, {}) is spec


def test_an_unknown_group_is_a_usage_error_naming_the_groups(
        valid_raw: Raw, load: Callable[[Raw], JobSpec]) -> None:
    with pytest.raises(UsageError) as info:
        with_placement(load(valid_raw), {"dnn_grup": {"role": "gpu"}})
    assert info.value.message == "--placement: the job has no instance group named 'dnn_grup'"
    assert info.value.hint == "did you mean 'dnn_group'? its groups: data_group, dnn_group"


def test_a_bad_label_given_to_the_api_is_a_usage_error(valid_raw: Raw, load: Callable[[Raw], JobSpec]) -> None:
    with pytest.raises(UsageError, match="label value 'a b' has characters"):
        with_placement(load(valid_raw), {"dnn_group": {"role": "a b"}})


# ---------------------------------------------------------------------------------------------------
# the library API


class PlacementRecorder(FakeBackend):
    """The in-memory engine, remembering each container's constraints as it is created."""

    def __init__(self) -> None:
        super().__init__({f"algo-{i}": exits(0) for i in (1, 2, 3)})
        self.placements: dict[str, tuple[str, ...]] = {}

    def create_container(self, plan: Plan, host: HostPlan) -> None:
        self.placements[host.name] = host.container.placement
        super().create_container(plan, host)


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def test_run_gives_the_engine_the_groups_constraints(
        valid_raw: Raw, load: Callable[[Raw], JobSpec], state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = PlacementRecorder()
    monkeypatch.setitem(registry._FACTORIES, "fake", lambda: fake)
    spec = load(with_labels(valid_raw, 0, {"role": "cpu"}))
    result = api.run(spec, engine_name="fake", reporter=RecordingReporter(), placement={"dnn_group": {"role": "gpu"}})
    assert result.status == "Completed"
    assert fake.placements == {"algo-1": ("node.labels.role==cpu",), "algo-2": ("node.labels.role==cpu",),
                               "algo-3": ("node.labels.role==gpu",)}


def test_run_with_an_unknown_group_never_asks_for_the_engine(
        valid_raw: Raw, load: Callable[[Raw], JobSpec], state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[FakeBackend] = []
    monkeypatch.setitem(registry._FACTORIES, "fake", lambda: made.append(FakeBackend()) or made[-1])
    with pytest.raises(UsageError, match="no instance group named 'gpus'"):
        api.run(load(valid_raw), engine_name="fake", reporter=RecordingReporter(), placement={"gpus": {"a": "b"}})
    assert made == []


def test_render_writes_the_given_constraints_into_plan_json(
        valid_raw: Raw, load: Callable[[Raw], JobSpec], tmp_path: Path) -> None:
    out = tmp_path / "rendered"
    api.render(load(valid_raw), out, placement={"dnn_group": {"role": "gpu"}})
    doc = json.loads((out / "plan.json").read_text())
    assert {h["name"]: h["container"]["placement"] for h in doc["hosts"]} == \
        {"algo-1": [], "algo-2": [], "algo-3": ["node.labels.role==gpu"]}


# ---------------------------------------------------------------------------------------------------
# the command line (exit codes through `main()`, in this process as tests/unit/test_cli.py does)


SPEC = """\
job_name: placed-job
entry_point: train.py
source_dir: code
instance_groups:
  - {instance_group_name: data_group, instance_type: ml.c5.xlarge, instance_count: 1, placement: {role: old}}
  - {instance_group_name: dnn_group, instance_type: ml.p3.2xlarge, instance_count: 1}
output_path: out
"""


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    return write_train_project(tmp_path / "proj", job=SPEC)




def test_render_placement_options_add_to_and_override_the_spec(proj: Path, tmp_path: Path) -> None:
    out = tmp_path / "rendered"
    proc = invoke("render", proj / "job.yaml", "-o", out, "--placement", "data_group:role=cpu",
               "--placement", "data_group:zone=a", "--placement", "dnn_group:role=gpu")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "plan.json").read_text())
    assert {h["name"]: h["container"]["placement"] for h in doc["hosts"]} == {
        "algo-1": ["node.labels.role==cpu", "node.labels.zone==a"], "algo-2": ["node.labels.role==gpu"]}


@pytest.mark.parametrize(
    ("option", "fragments"),
    [
        ("dnn:role=gpu", ["error: --placement: the job has no instance group named 'dnn'",
                          "its groups: data_group, dnn_group"]),
        ("dnn_group-role=gpu", ["error: --placement 'dnn_group-role=gpu' is not GROUP:KEY=VALUE"]),
        ("dnn_group:role=a b", ["error: --placement 'dnn_group:role=a b': label value 'a b' has characters"]),
    ],
    ids=["unknown-group", "no-colon", "bad-value"],
)
def test_render_refuses_a_bad_placement_before_writing_anything(
        proj: Path, tmp_path: Path, option: str, fragments: list[str]) -> None:
    out = tmp_path / "rendered"
    proc = invoke("render", proj / "job.yaml", "-o", out, "--placement", option)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr
    assert not out.exists()


def test_run_with_an_unknown_group_exits_2_and_creates_nothing(
        proj: Path, state: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeBackend()
    monkeypatch.setitem(registry._FACTORIES, "fake", lambda: fake)
    monkeypatch.setattr(cli_module.signal, "signal", lambda *args: None)  # leave pytest's handlers alone
    monkeypatch.chdir(proj)
    monkeypatch.setattr(sys, "argv", ["hetero-emu", "run", "job.yaml", "--engine", "fake",
                                      "--placement", "gpu_group:role=gpu"])
    with pytest.raises(SystemExit) as info:
        cli_module.main()
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert "--placement: the job has no instance group named 'gpu_group'" in err
    assert fake.calls == []
    assert not (proj / "out").exists()


@pytest.mark.parametrize("command", ["run", "render"])
def test_the_help_says_placement_matters_on_the_swarm_engine_only(command: str) -> None:
    text = " ".join(CliRunner().invoke(app, [command, "--help"], terminal_width=200).output.split())
    assert "--placement GROUP:KEY=VALUE" in text
    assert "Matters on the swarm engine only" in text


def test_validate_json_lists_each_groups_placement(proj: Path) -> None:
    proc = invoke("validate", "--json", proj / "job.yaml")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [g["placement"] for g in doc["instance_groups"]] == [{"role": "old"}, {}]


def test_a_python_jobs_instance_group_keeps_its_placement(project: Path) -> None:
    job = Job(job_name="placed", entry_point="train.py", source_dir="code", base_dir=project,
              instance_groups=[InstanceGroup("data", "ml.c5.xlarge", 1, placement=(("role", "cpu"),)),
                               InstanceGroup("dnn", "ml.c5.xlarge", 1)])
    assert [g.placement for g in job.spec().instance_groups] == [(("role", "cpu"),), ()]


# swarmkit's own patterns for a constraint's two sides (manager/constraint/constraint.go, `Parse`).
SWARMKIT_KEY = re.compile(r"(?i)^[a-z_][a-z0-9\-_.]+$")
SWARMKIT_VALUE = re.compile(r"(?i)^[a-z0-9:\-_\s\.\*\(\)\?\+\[\]\\\^\$\|\/]+$")


@pytest.mark.parametrize("labels", [{"role": "cpu"}, {"a": "B"}, {"node-kind_1.x": "eu-west-1:a/b"},
                                    {"k": "x*(y)?+[z]\\^$|"}])
def test_a_label_the_spec_accepts_makes_a_constraint_swarmkit_parses_into_the_service(
        valid_raw: Raw, load: Callable[[Raw], JobSpec], labels: dict[str, str]) -> None:
    spec = load(with_labels(valid_raw, 1, labels))
    dnn_host = next(h for h in make_plan(spec, "placed").hosts if h.group == "dnn_group")
    template = service_options(dnn_host.container, "net", "img", "driver", 1.0)["task_template"]
    assert template["Placement"]["Constraints"] == list(dnn_host.container.placement)
    for constraint in dnn_host.container.placement:
        key, value = constraint.split("==")
        assert SWARMKIT_KEY.fullmatch(key) and SWARMKIT_VALUE.fullmatch(value), constraint
