"""What a run writes from what it saw of its hosts (emulator/run/outputs.py): each host's result and
FailureReason, the timeline's spans, and the pictures beside job.json, each from a plan and a record
of the hosts' exits, without a run. test_runner.py and test_pictures.py check the same through whole
runs on the fake engine; these pin the cases a run reaches only by luck of timing (a host never seen
exiting, an engine that told no times) and the warnings of a picture that cannot be written."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from emulator.backend import ContainerState
from emulator.jobspec import JobSpec
from emulator.planning import secrets
from emulator.planning.plan import Plan, make_plan
from emulator.reports import diagram, metrics_chart, timeline
from emulator.result import HostResult, Status
from emulator.run import outputs
from emulator.run.outputs import HostExits

SECRET = "tok-0123456789abcdef"
MASKER = secrets.Masker({"API_TOKEN": SECRET})
NO_TAIL: dict[str, list[str]] = {}


Load = Callable[[dict[str, Any]], JobSpec]


@pytest.fixture
def plan(load: Load, valid_raw: dict[str, Any], tmp_path: Path) -> Plan:
    """conftest's heterogeneous spec: algo-1 and algo-2 in data_group, algo-3 in dnn_group."""
    built = make_plan(load(valid_raw), "out-job", job_dir=tmp_path / "job")
    for host in built.hosts:
        Path(host.host_dir).mkdir(parents=True)
    return built


def exits(plan: Plan, **kw: Any) -> HostExits:
    """A record of the hosts' exits by host name (algo-N), as the run keeps it by container name."""
    container = {h.name: h.container.name for h in plan.hosts}

    def by_container(value: Any) -> Any:
        if isinstance(value, dict):
            return {container[k]: v for k, v in value.items()}
        return {container[k] for k in value}

    fields: dict[str, Any] = {"codes": {}, "times": {}, "engine_times": {}, "oom": set(), "stopped_by_us": set(),
                              "errors": {}, "started": True}
    fields.update({k: by_container(v) if k != "started" else v for k, v in kw.items()})
    return HostExits(**fields)


def results(plan: Plan, record: HostExits, tails: dict[str, list[str]] = NO_TAIL,
            now: float = 200.0) -> dict[str, HostResult]:
    found = outputs.host_results(plan.hosts, record, 100.0, MASKER, lambda host: tails.get(host, []), now)
    return {r.host: r for r in found}


def state(code: int | None, oom: bool = False, error: str = "") -> ContainerState:
    return ContainerState("c", False, code, oom_killed=oom, error=error)


# --------------------------------------------------------------------------------------------------
# Each host's result and FailureReason


def test_each_host_gets_its_code_seconds_and_why_it_ended(plan: Plan) -> None:
    (Path(plan.host("algo-3").host_dir) / "output").mkdir()
    (Path(plan.host("algo-3").host_dir) / "output" / "failure").write_text("ValueError: bad batch\n")
    record = exits(plan, codes={"algo-1": 0, "algo-2": 143, "algo-3": 1},
                   times={"algo-1": 101.5, "algo-2": 104.0, "algo-3": 102.25}, stopped_by_us={"algo-2"})

    found = results(plan, record)

    assert [(r.host, r.group, r.instance_type) for r in found.values()] == [
        ("algo-1", "data_group", "ml.c5.xlarge"), ("algo-2", "data_group", "ml.c5.xlarge"),
        ("algo-3", "dnn_group", "ml.p3.2xlarge")]
    assert (found["algo-1"].exit_code, found["algo-1"].seconds, found["algo-1"].failure_reason) == (0, 1.5, None)
    assert found["algo-2"].failure_reason == "stopped by the emulator (exit code 143)"
    assert found["algo-3"].failure_reason == "AlgorithmError: ValueError: bad batch, exit code: 1"
    assert found["algo-3"].seconds == 2.25


def test_a_host_never_seen_exiting_has_no_code_and_runs_until_now(plan: Plan) -> None:
    found = results(plan, exits(plan, codes={"algo-1": 0}, times={"algo-1": 103.0}), now=107.5)

    assert (found["algo-2"].exit_code, found["algo-2"].seconds, found["algo-2"].failure_reason) == (None, 7.5, None)
    # A clock read before t0 (never, but a negative time would be drawn as such) counts as zero.
    assert results(plan, exits(plan), now=99.0)["algo-1"].seconds == 0.0


def test_without_a_failure_file_the_reason_has_the_exit_code_and_the_last_lines_masked(plan: Plan) -> None:
    record = exits(plan, codes={"algo-1": 2}, times={"algo-1": 101.0})

    reason = results(plan, record, {"algo-1": ["Traceback", f"KeyError: {SECRET}"]})["algo-1"].failure_reason

    assert reason == f"AlgorithmError: , exit code: 2. Last lines:\nTraceback\nKeyError: {secrets.MASK}"


@pytest.mark.parametrize(("given", "expected"), [
    (state(137, oom=True), "algo-1 (data_group) was killed: out of memory (OOMKilled, exit code 137)"),
    (state(None, error="container gone"), "algo-1 (data_group) disappeared: container gone"),
    (state(None), "algo-1 (data_group) disappeared: its container was removed"),
    (state(137), "algo-1 (data_group) was killed (SIGKILL, exit code 137)"),
    (state(143), "algo-1 (data_group) was stopped (SIGTERM, exit code 143)"),
    (state(3), "AlgorithmError: , exit code: 3"),
])
def test_the_failure_reason_of_each_way_a_host_ends(plan: Plan, given: ContainerState, expected: str) -> None:
    assert outputs.failure_reason(plan.host("algo-1"), given, MASKER) == expected


def test_a_failure_file_is_masked_before_the_reason_is_cut_at_the_services_limit(plan: Plan) -> None:
    host = plan.host("algo-1")
    (Path(host.host_dir) / "output").mkdir()
    # The secret straddles the limit: cut first, its first part would survive.
    text = "x" * (outputs.FAILURE_REASON_LIMIT - 30) + SECRET + "y" * 3000
    (Path(host.host_dir) / "output" / "failure").write_text(text)

    reason = outputs.failure_reason(host, state(1), MASKER)

    assert len(reason) == outputs.FAILURE_REASON_LIMIT
    assert SECRET[:8] not in reason and reason.endswith(secrets.MASK + "y" * (30 - 16 - len(secrets.MASK)))


def test_a_failure_file_behind_a_link_is_not_read(plan: Plan, tmp_path: Path) -> None:
    host = plan.host("algo-1")
    (tmp_path / "elsewhere").write_text("the driver's own file\n")
    (Path(host.host_dir) / "output").mkdir()
    (Path(host.host_dir) / "output" / "failure").symlink_to(tmp_path / "elsewhere")

    assert outputs.failure_reason(host, state(1), MASKER) == "AlgorithmError: , exit code: 1"


# --------------------------------------------------------------------------------------------------
# The timeline's spans


def test_spans_take_the_engines_own_times_when_it_told_them_for_every_host(plan: Plan) -> None:
    record = exits(plan, codes={"algo-1": 0, "algo-2": 137, "algo-3": 0}, times={"algo-1": 9.0, "algo-2": 9.0},
                   engine_times={"algo-1": (1000.1, 1003.0), "algo-2": (1000.2, 1002.0), "algo-3": (1000.0, 1004.0)},
                   oom={"algo-2"}, errors={"algo-3": f"lost {SECRET}"})

    spans = outputs.timeline_spans(plan.hosts, record, 5.0, MASKER)

    assert spans == [timeline.Span("algo-1", "data_group", 1000.1, 1003.0, 0, False, ""),
                     timeline.Span("algo-2", "data_group", 1000.2, 1002.0, 137, False, "out of memory"),
                     timeline.Span("algo-3", "dnn_group", 1000.0, 1004.0, 0, False, f"lost {secrets.MASK}")]


def test_a_host_the_engine_told_nothing_of_starts_with_the_others_on_the_engines_clock(plan: Plan) -> None:
    record = exits(plan, codes={"algo-1": 0}, engine_times={"algo-1": (1000.5, 1001.0), "algo-2": (1000.2, 1002.0)})

    spans = outputs.timeline_spans(plan.hosts, record, 5.0, MASKER)

    assert (spans[2].started, spans[2].ended, spans[2].exit_code) == (1000.2, None, None)


@pytest.mark.parametrize("engine_times", [
    {},  # an engine that tells no times
    {"algo-1": (1000.0, None), "algo-2": (1000.0, 1001.0), "algo-3": (1000.0, 1001.0)},  # one not told
    {"algo-1": (1002.0, 1001.0), "algo-2": (1000.0, 1001.0), "algo-3": (1000.0, 1001.0)},  # ends before it starts
])
def test_without_every_engine_time_spans_are_on_the_drivers_clock(plan: Plan, engine_times: dict[str, Any]) -> None:
    record = exits(plan, codes={"algo-1": 0, "algo-2": 143}, times={"algo-1": 7.0, "algo-2": 8.0},
                   engine_times=engine_times, stopped_by_us={"algo-2"})

    spans = outputs.timeline_spans(plan.hosts, record, 5.0, MASKER)

    assert [(s.started, s.ended, s.exit_code, s.stopped) for s in spans] == [
        (5.0, 7.0, 0, False), (5.0, 8.0, 143, True), (5.0, None, None, False)]


def test_an_earlier_attempt_is_named_and_drawn_on_the_drivers_clock(plan: Plan) -> None:
    told = {"algo-1": (1000.0, 1001.0), "algo-2": (1000.0, 1001.0), "algo-3": (1000.0, 1001.0)}
    record = exits(plan, codes={"algo-1": 143, "algo-2": 143, "algo-3": 143},
                   times={"algo-1": 6.0, "algo-2": 6.0, "algo-3": 6.5}, engine_times=told)

    earlier = outputs.timeline_spans(plan.hosts, record, 5.0, MASKER, attempt=1)
    last = outputs.timeline_spans(plan.hosts, record, 5.0, MASKER, several=True)

    assert [s.host for s in earlier] == ["algo-1 (attempt 1)", "algo-2 (attempt 1)", "algo-3 (attempt 1)"]
    assert [(s.started, s.ended) for s in earlier] == [(5.0, 6.0), (5.0, 6.0), (5.0, 6.5)]
    assert [(s.host, s.started, s.ended) for s in last][2] == ("algo-3", 5.0, 6.5)


def test_hosts_that_never_started_have_no_times(plan: Plan) -> None:
    for record in (exits(plan, started=False),
                   exits(plan, started=False, engine_times={"algo-1": (1000.0, 1001.0)}, codes={"algo-1": None})):
        assert [(s.started, s.ended) for s in outputs.timeline_spans(plan.hosts, record, 5.0, MASKER)][1:] == [
            (None, None), (None, None)]


# --------------------------------------------------------------------------------------------------
# The pictures beside job.json


class Warnings(list[str]):
    def __call__(self, message: str) -> None:
        self.append(message)


def test_the_timeline_is_written_in_the_job_folder_with_the_failed_host(plan: Plan) -> None:
    Path(plan.job_dir).mkdir(exist_ok=True)
    spans = [timeline.Span("algo-1", "data_group", 0.0, 2.0, 143, True), timeline.Span("algo-2", "data_group", 0.0,
             2.0, 143, True), timeline.Span("algo-3", "dnn_group", 0.0, 1.0, 1)]
    warnings = Warnings()

    outputs.write_timeline(plan, Status.FAILED, spans, "algo-3", warnings)

    written = (Path(plan.job_dir) / timeline.FILE_NAME).read_text()
    assert written.rstrip().endswith("</svg>") and "first-failure" in written and "out-job" in written
    assert warnings == []


def test_a_timeline_that_cannot_be_written_is_a_warning(plan: Plan, tmp_path: Path) -> None:
    blocked = make_plan(plan.spec, "out-job", job_dir=tmp_path / "a-file" / "job")
    (tmp_path / "a-file").write_text("not a folder")
    warnings = Warnings()

    outputs.write_timeline(blocked, Status.COMPLETED, [], None, warnings)

    assert len(warnings) == 1 and warnings[0].startswith(f"{timeline.FILE_NAME} not written: ")


def test_the_cluster_dot_is_written_and_its_text_returned_for_the_record(plan: Plan, tmp_path: Path) -> None:
    Path(plan.job_dir).mkdir(exist_ok=True)
    warnings = Warnings()

    source = outputs.write_cluster_dot(plan, warnings)

    assert source == diagram.graph(plan).source == (Path(plan.job_dir) / diagram.DOT_FILE).read_text()
    assert warnings == []
    # The file cannot be written: the record still gets the text, the user a warning.
    blocked = make_plan(plan.spec, "out-job", job_dir=tmp_path / "missing" / "job")
    assert outputs.write_cluster_dot(blocked, warnings) == diagram.graph(blocked).source
    assert len(warnings) == 1 and warnings[0].startswith("cluster.dot not written: ")


def test_a_diagram_that_cannot_be_drawn_is_a_warning_and_no_text(plan: Plan, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_plan: Plan) -> Any:
        raise RuntimeError("no graph today")

    monkeypatch.setattr(diagram, "graph", broken)
    warnings = Warnings()

    assert outputs.write_cluster_dot(plan, warnings) is None
    assert warnings == ["cluster.dot not written: no graph today"]


def metrics_plan(load: Load, valid_raw: dict[str, Any], job_dir: Path) -> Plan:
    spec = load({**valid_raw, "metric_definitions": [{"Name": "train:loss", "Regex": "loss: ([0-9.]+)"}]})
    return make_plan(spec, "out-job", job_dir=job_dir)


def test_the_metrics_chart_is_written_only_for_a_job_with_metric_definitions(plan: Plan, load: Load,
                                                                            valid_raw: dict[str, Any]) -> None:
    Path(plan.job_dir).mkdir(exist_ok=True)
    start = datetime(2026, 1, 2, tzinfo=timezone.utc)
    warnings = Warnings()

    outputs.write_metrics_chart(plan, start, warnings)
    assert not (Path(plan.job_dir) / metrics_chart.FILE_NAME).exists()

    outputs.write_metrics_chart(metrics_plan(load, valid_raw, Path(plan.job_dir)), start, warnings)
    assert (Path(plan.job_dir) / metrics_chart.FILE_NAME).read_text().rstrip().endswith("</svg>")
    assert warnings == []


def test_a_metrics_chart_that_cannot_be_written_is_a_warning(load: Load, valid_raw: dict[str, Any],
                                                             tmp_path: Path) -> None:
    warnings = Warnings()

    # The job folder was never made: nothing can be written in it.
    missing = metrics_plan(load, valid_raw, tmp_path / "missing")
    outputs.write_metrics_chart(missing, datetime.now(timezone.utc), warnings)

    assert len(warnings) == 1 and warnings[0].startswith(f"{metrics_chart.FILE_NAME} not written: ")
