"""The pictures (README: *What a run leaves*, *Command line*): each run's timeline.svg, drawn from
the hosts' start and end times, and render's cluster diagram (cluster.dot, cluster.svg with Graphviz).

The SVGs are parsed as XML and the DOT text read back, so each test checks what a reader sees: which
bar stands for which host, where it starts and ends, its colour, what follows it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from fake_backend import FakeBackend, exits, runs_until_stopped

from emulator import api
from emulator.backend import ContainerState
from emulator.jobspec import JobSpec, load_spec_file
from emulator.options import RunOptions
from emulator.planning.plan import Plan, make_plan
from emulator.reports import diagram, timeline
from emulator.reports.console import RecordingReporter
from emulator.reports.timeline import Group, Span
from emulator.run import artifacts, runner
from emulator.run.runner import run_job

NS = {"svg": timeline.SVG_NS}
GROUPS = [Group("data_group", "ml.c5.xlarge"), Group("dnn_group", "ml.p3.2xlarge")]

# algo-3 (dnn_group) fails 2.4 s in; the emulator then stops the data servers; algo-4 never started.
SPANS = [
    Span("algo-1", "data_group", 100.02, 103.9, 143, stopped=True),
    Span("algo-2", "data_group", 100.03, 103.95, 143, stopped=True),
    Span("algo-3", "dnn_group", 100.0, 102.4, 1),
    Span("algo-4", "dnn_group", None, None, None),
]


def parse(svg: ET.Element | Path) -> ET.Element:
    """An SVG as a reader gets it: serialised, then parsed back."""
    if isinstance(svg, Path):
        return ET.parse(svg).getroot()
    return ET.fromstring(ET.tostring(svg))


def bars(root: ET.Element) -> dict[str, ET.Element]:
    return {r.get("data-host", ""): r for r in root.iter(f"{{{timeline.SVG_NS}}}rect")
            if "bar" in (r.get("class") or "").split()}


def texts(root: ET.Element, cls: str) -> dict[str, str]:
    return {t.get("data-host", ""): t.text or "" for t in root.iter(f"{{{timeline.SVG_NS}}}text")
            if t.get("class") == cls}


def all_text(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{{{timeline.SVG_NS}}}text")]


# --------------------------------------------------------------------------------------------------
# The timeline, from spans


def test_one_bar_per_started_host_in_host_order() -> None:
    root = parse(timeline.build("job-x", "Failed", SPANS, GROUPS, "algo-3"))

    assert list(bars(root)) == ["algo-1", "algo-2", "algo-3"]
    # Each row is labelled with its host and group, top to bottom in the order given.
    hosts = [t for t in all_text(root) if t.startswith("algo-")]
    assert hosts == ["algo-1 (data_group)", "algo-2 (data_group)", "algo-3 (dnn_group)", "algo-4 (dnn_group)"]
    ys = [float(r.get("y", "nan")) for r in bars(root).values()]
    assert ys == sorted(ys) and len(set(ys)) == 3
    assert texts(root, "exit")["algo-4"] == "not started"


def test_bars_start_and_end_at_the_hosts_times_on_one_scale() -> None:
    root = parse(timeline.build("job-x", "Failed", SPANS, GROUPS, "algo-3"))
    found = bars(root)
    x = {h: float(r.get("x", "nan")) for h, r in found.items()}
    width = {h: float(r.get("width", "nan")) for h, r in found.items()}

    # algo-3 started first (time zero), algo-1 20 ms and algo-2 30 ms later.
    assert x["algo-3"] < x["algo-1"] < x["algo-2"]
    scale = width["algo-3"] / 2.4
    assert x["algo-1"] - x["algo-3"] == pytest.approx(0.02 * scale, abs=0.15)
    assert width["algo-1"] == pytest.approx(3.88 * scale, abs=0.15)
    assert width["algo-2"] == pytest.approx(3.92 * scale, abs=0.15)
    # The axis is in seconds from the first start: its ticks are 0, 0.5, 1, ... up to at least 3.95 s.
    ticks = [float(t.text or "") for t in root.iter(f"{{{timeline.SVG_NS}}}text") if t.get("class") == "tick"]
    assert ticks[0] == 0 and ticks[-1] >= 3.95 and ticks == sorted(ticks)
    assert "seconds since the first host started" in all_text(root)


def test_bars_have_one_colour_per_group() -> None:
    spans = [*SPANS[:3], Span("algo-4", "dnn_group", 100.0, 101.0, 0)]
    found = bars(parse(timeline.build("job-x", "Failed", spans, GROUPS, None)))
    fill = {h: r.get("fill") for h, r in found.items()}

    assert fill["algo-1"] == fill["algo-2"]
    assert fill["algo-3"] == fill["algo-4"]
    assert fill["algo-1"] != fill["algo-3"]
    # The legend shows each group's colour under its name and instance type.
    root = parse(timeline.build("job-x", "Failed", spans, GROUPS, None))
    legend = {r.get("data-group"): r.get("fill") for r in root.iter(f"{{{timeline.SVG_NS}}}rect")
              if r.get("class") == "legend"}
    assert legend == {"data_group": fill["algo-1"], "dnn_group": fill["algo-3"]}
    assert "dnn_group (ml.p3.2xlarge)" in all_text(root)


def test_the_first_failure_is_marked_on_its_host_only() -> None:
    root = parse(timeline.build("job-x", "Failed", SPANS, GROUPS, "algo-3"))
    found = bars(root)

    marked = [h for h, r in found.items() if "first-failure" in (r.get("class") or "").split()]
    assert marked == ["algo-3"]
    assert found["algo-3"].get("stroke") == "#d62728"
    assert found["algo-1"].get("stroke") != "#d62728"
    assert texts(root, "first-failure") == {"algo-3": "first failure"}
    assert "Failed: algo-3 (dnn_group) failed first, exit 1 at 2.4 s" in all_text(root)


def test_exit_codes_follow_the_bars() -> None:
    spans = [*SPANS, Span("algo-5", "data_group", 100.0, 100.5, 137, note="out of memory")]
    root = parse(timeline.build("job-x", "Failed", spans, GROUPS, "algo-3"))

    assert texts(root, "exit") == {
        "algo-1": "exit 143, stopped by the emulator",
        "algo-2": "exit 143, stopped by the emulator",
        "algo-3": "exit 1",
        "algo-4": "not started",
        "algo-5": "exit 137, out of memory",
    }
    # Each exit code stands right of its own bar's end.
    found = bars(root)
    for host, text in ((t.get("data-host"), t) for t in root.iter(f"{{{timeline.SVG_NS}}}text")
                       if t.get("class") == "exit" and t.get("data-host") in found):
        bar = found[str(host)]
        assert float(text.get("x", "nan")) > float(bar.get("x", "nan")) + float(bar.get("width", "nan"))


def test_a_completed_job_marks_no_failure_and_has_a_plain_status() -> None:
    spans = [Span("algo-1", "data_group", 5.0, 6.0, 0), Span("algo-2", "dnn_group", 5.0, 9.0, 0)]
    root = parse(timeline.build("job-x", "Completed", spans, GROUPS, None))

    assert texts(root, "first-failure") == {}
    assert texts(root, "status") == {"": "Completed: 2 hosts"}
    assert texts(root, "exit") == {"algo-1": "exit 0", "algo-2": "exit 0"}


def test_a_host_with_no_exit_seen_runs_to_the_last_time_known_dashed() -> None:
    spans = [Span("algo-1", "data_group", 0.0, 3.0, 0), Span("algo-2", "dnn_group", 0.0, None, None)]
    found = bars(parse(timeline.build("job-x", "Failed", spans, GROUPS, None)))

    assert found["algo-2"].get("width") == found["algo-1"].get("width")
    assert found["algo-2"].get("stroke-dasharray")
    assert not found["algo-1"].get("stroke-dasharray")


@pytest.mark.parametrize(("total", "step"), [(3.95, 1.0), (0.3, 0.05), (42.0, 10.0), (700.0, 200.0), (0.0, 0.0002)])
def test_axis_ticks_are_round_numbers(total: float, step: float) -> None:
    assert timeline.nice_step(total) == pytest.approx(step)


def test_the_file_is_utf8_svg(tmp_path: Path) -> None:
    path = timeline.write(tmp_path / "timeline.svg", "job-ü", "Completed", SPANS[:1], GROUPS)

    assert path.read_bytes().startswith(b"<?xml version='1.0' encoding='utf-8'?>")
    root = parse(path)
    assert root.tag == f"{{{timeline.SVG_NS}}}svg"
    assert "job-ü" in all_text(root)


# --------------------------------------------------------------------------------------------------
# The timeline every run writes (runner + FakeBackend)

HETERO = """\
job_name: pic-job
entry_point: train.py
source_dir: code
instance_groups:
  - {instance_group_name: data_group, instance_type: ml.c5.xlarge, instance_count: 2}
  - {instance_group_name: dnn_group, instance_type: ml.p3.2xlarge, instance_count: 1}
inputs:
  training:
    s3_data: data/train
    distribution: ShardedByS3Key
    instance_groups: [data_group]
  validation:
    s3_data: data/validation
    instance_groups: [dnn_group]
distribution:
  mpi: {enabled: true}
  instance_groups: [dnn_group]
output_path: out
max_run: 60
"""


@pytest.fixture(autouse=True)
def fast_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.01)


@pytest.fixture
def spec(project: Path) -> JobSpec:
    """HETERO over conftest's project: 3 training files, 1 validation file."""
    (project / "job.yaml").write_text(HETERO)
    return load_spec_file(project / "job.yaml")


def run_fake(spec: JobSpec, fake: FakeBackend) -> Any:
    try:
        return run_job(spec, RunOptions(grace=2.5), backend=fake, reporter=RecordingReporter())
    except KeyboardInterrupt:  # never let it escape into pytest (it would end the session)
        pytest.fail("KeyboardInterrupt escaped run_job")


def test_a_failed_run_writes_its_timeline_next_to_job_json(spec: JobSpec) -> None:
    fake = FakeBackend({"algo-1": exits(0, 0.05), "algo-2": runs_until_stopped(), "algo-3": exits(3, 0.2)})
    result = run_fake(spec, fake)

    assert result.status == "Failed"
    root = parse(result.job_dir / "timeline.svg")
    assert (result.job_dir / "job.json").is_file()
    found = bars(root)
    assert list(found) == ["algo-1", "algo-2", "algo-3"]
    assert [h for h, r in found.items() if "first-failure" in (r.get("class") or "")] == ["algo-3"]
    assert texts(root, "exit") == {"algo-1": "exit 0", "algo-2": "exit 143, stopped by the emulator",
                                   "algo-3": "exit 3"}
    width = {h: float(r.get("width", "nan")) for h, r in found.items()}
    # The engine's own times: algo-1 ran 0.05 s, algo-3 0.2 s, algo-2 until the emulator stopped it.
    assert width["algo-3"] / width["algo-1"] == pytest.approx(4, rel=0.05)
    assert width["algo-2"] > width["algo-3"]
    assert "pic-job" in all_text(root)


@pytest.mark.parametrize("outcome", ["Completed", "Stopped"])
def test_every_outcome_writes_a_timeline(spec: JobSpec, outcome: str) -> None:
    if outcome == "Completed":
        fake = FakeBackend({"algo-1": exits(0, 0.01), "algo-2": exits(0, 0.02), "algo-3": exits(0, 0.03)})
    else:  # Ctrl-C while the hosts run
        fake = FakeBackend({h: runs_until_stopped() for h in ("algo-1", "algo-2", "algo-3")},
                           interrupt_on_states_call=3)
    result = run_fake(spec, fake)

    assert result.status == outcome
    root = parse(result.job_dir / "timeline.svg")
    assert list(bars(root)) == ["algo-1", "algo-2", "algo-3"]
    assert texts(root, "first-failure") == {}
    assert texts(root, "status") == {"": f"{outcome}: 3 hosts"}


def test_the_timeline_is_there_before_job_json(spec: JobSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    # A reader that finds job.json (the run's end) finds the chart too.
    seen: list[bool] = []
    write_description = artifacts.write_description

    def spy(plan: Plan, result: Any) -> Path:
        seen.append((Path(plan.job_dir) / "timeline.svg").is_file())
        return write_description(plan, result)

    monkeypatch.setattr(artifacts, "write_description", spy)
    run_fake(spec, FakeBackend())

    assert seen == [True]


class NoTimesBackend(FakeBackend):
    """An engine that tells exit codes but not when its containers started and ended."""

    def states(self, names: Any) -> list[ContainerState]:
        return [ContainerState(s.name, s.running, s.exit_code, s.oom_killed, s.error)
                for s in super().states(names)]


def test_without_the_engines_times_the_drivers_clock_draws_the_bars(spec: JobSpec) -> None:
    # algo-3 exits a whole second after the others: the driver sees each exit at a poll, so a busy
    # machine that polls late still draws it far longer.
    fake = NoTimesBackend({"algo-1": exits(0, 0.0), "algo-2": exits(0, 0.0), "algo-3": exits(0, 1.0)})
    result = run_fake(spec, fake)

    found = bars(parse(result.job_dir / "timeline.svg"))
    assert len({r.get("x") for r in found.values()}) == 1  # the common start
    assert float(found["algo-3"].get("width", "0")) > 2 * float(found["algo-1"].get("width", "0"))


def test_a_timeline_that_cannot_be_written_is_a_warning_not_a_failure(spec: JobSpec,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: Path, *args: Any, **kwargs: Any) -> Path:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(timeline, "write", refuse)
    reporter = RecordingReporter()
    result = run_job(spec, RunOptions(grace=2.5), backend=FakeBackend(), reporter=reporter)

    assert result.status == "Completed"
    assert (result.job_dir / "job.json").is_file()
    assert any("timeline.svg not written" in w and "Permission denied" in w for w in reporter.warnings)


# --------------------------------------------------------------------------------------------------
# The cluster diagram


def plan_of(spec: JobSpec) -> Plan:
    return make_plan(spec, "pic-job", job_dir=Path("/tmp/never-written"))


EDGE = re.compile(r'^\s*(channel_\d+) -> "?host_([^" ]+)"? \[label="([^"]*)" lhead=(cluster_group_\d+)\]$', re.M)
CLUSTER = re.compile(r'subgraph (cluster_group_\d+) \{\n\s*(.*?)\n((?:\s*"?host_.*\n)*)', re.M)


def clusters(source: str) -> dict[str, tuple[str, list[str]]]:
    """cluster id -> (its attribute line, its host nodes)."""
    return {m[1]: (m[2], re.findall(r'"?host_(algo-\d+)"? \[', m[3])) for m in CLUSTER.finditer(source)}


def test_the_dot_has_a_cluster_per_group_with_its_hosts(spec: JobSpec) -> None:
    source = diagram.graph(plan_of(spec)).source
    found = clusters(source)

    assert [hosts for _, hosts in found.values()] == [["algo-1", "algo-2"], ["algo-3"]]
    assert 'label="data_group\\nml.c5.xlarge x 2"' in found["cluster_group_0"][0]
    assert 'label="dnn_group\\nml.p3.2xlarge x 1\\ndistribution: mpi (mpirun over SSH)"' in found["cluster_group_1"][0]
    # Both groups inside the job's network.
    assert source.index("subgraph cluster_network") < source.index("subgraph cluster_group_0")
    assert 'label="network hetero-emu-pic-job"' in source
    # Each host of a sharded channel shows its share: 3 files over 2 hosts.
    assert 'label="algo-1\\ntraining: 2 files"' in source
    assert 'label="algo-2\\ntraining: 1 file"' in source


def test_channels_point_only_at_the_groups_they_reach(spec: JobSpec) -> None:
    source = diagram.graph(plan_of(spec)).source
    edges = EDGE.findall(source)

    assert 'channel_0 [label="channel training\\ndata/train\\n3 files"' in source
    assert 'channel_1 [label="channel validation\\ndata/validation\\n1 file"' in source
    assert [(channel, cluster, label) for channel, _, label, cluster in edges] == [
        ("channel_0", "cluster_group_0", "ShardedByS3Key\\nFile"),
        ("channel_1", "cluster_group_1", "FullyReplicated\\nFile"),
    ]
    # Each edge ends at a host inside the cluster it is clipped to.
    found = clusters(source)
    for _, host, _, cluster in edges:
        assert host in found[cluster][1]


def test_a_channel_without_groups_reaches_every_group(spec: JobSpec, project: Path) -> None:
    text = HETERO.replace("distribution:\n  mpi: {enabled: true}\n  instance_groups: [dnn_group]\n", "")
    text = text.replace("    instance_groups: [data_group]\n", "").replace("    instance_groups: [dnn_group]\n", "")
    assert "instance_groups: [" not in text
    (project / "job.yaml").write_text(text)
    source = diagram.graph(plan_of(load_spec_file(project / "job.yaml"))).source

    assert sorted((c, g) for c, _, _, g in EDGE.findall(source)) == [
        ("channel_0", "cluster_group_0"), ("channel_0", "cluster_group_1"),
        ("channel_1", "cluster_group_0"), ("channel_1", "cluster_group_1")]
    assert "distribution" not in source
    assert "penwidth=3.5" not in source


def test_only_the_distribution_group_is_bold(spec: JobSpec) -> None:
    found = clusters(diagram.graph(plan_of(spec)).source)

    assert "penwidth=3.5" in found["cluster_group_1"][0]
    assert "penwidth=3.5" not in found["cluster_group_0"][0]


@pytest.mark.parametrize(("distribution", "marked"), [
    ("smdistributed: {dataparallel: {enabled: true}}", "distribution: smdistributed (mpirun over SSH)"),
    ("torch_distributed: {enabled: true}", "distribution: torch_distributed (torchrun)"),
])
def test_the_distribution_marker_names_the_strategy_and_its_launcher(project: Path, distribution: str,
                                                                     marked: str) -> None:
    (project / "job.yaml").write_text(HETERO.replace("mpi: {enabled: true}", distribution))
    found = clusters(diagram.graph(plan_of(load_spec_file(project / "job.yaml"))).source)

    assert f'\\n{marked}"' in found["cluster_group_1"][0] and "penwidth=3.5" in found["cluster_group_1"][0]
    assert "distribution" not in found["cluster_group_0"][0]


def test_a_disabled_strategy_marks_no_group(project: Path) -> None:
    # Only a homogeneous cluster may carry one (with no instance_groups): it distributes nothing.
    (project / "job.yaml").write_text("job_name: pic-job\nentry_point: train.py\nsource_dir: code\n"
                                      "instance_type: ml.c5.xlarge\ninstance_count: 2\n"
                                      "distribution: {mpi: {enabled: false}}\n")
    source = diagram.graph(plan_of(load_spec_file(project / "job.yaml"))).source

    assert "homogeneousCluster" in source
    assert "distribution" not in source and "penwidth=3.5" not in source


def test_the_group_colours_are_the_timelines(spec: JobSpec) -> None:
    found = clusters(diagram.graph(plan_of(spec)).source)
    svg = parse(timeline.build("pic-job", "Completed", [Span("algo-1", "data_group", 0, 1, 0),
                                                         Span("algo-3", "dnn_group", 0, 1, 0)], GROUPS))
    fills = {h: r.get("fill") for h, r in bars(svg).items()}

    assert f'fillcolor="{fills["algo-1"]}"' in found["cluster_group_0"][0]
    assert f'fillcolor="{fills["algo-3"]}"' in found["cluster_group_1"][0]


def test_names_are_drawn_as_written(spec: JobSpec, project: Path) -> None:
    # A group name may hold quotes and backslashes (anything but "/" and control characters).
    weird = 'a"b\\nc'
    text = HETERO.replace("dnn_group", "'" + weird.replace("'", "''") + "'")
    (project / "job.yaml").write_text(text)
    source = diagram.graph(plan_of(load_spec_file(project / "job.yaml"))).source

    assert 'label="a\\"b\\\\nc\\nml.p3.2xlarge x 1' in source


def require_dot() -> None:
    if shutil.which("dot") is None:
        if os.environ.get("EMULATOR_REQUIRE_DOCKER") == "1":
            pytest.fail("Graphviz's dot is not installed (scripts/setup.sh installs it)")
        pytest.skip("Graphviz's dot is not installed")


def svg_texts(path: Path) -> list[str]:
    root = ET.parse(path).getroot()
    return [t.text or "" for t in root.iter(f"{{{timeline.SVG_NS}}}text")]


def test_render_draws_the_cluster_as_svg(spec: JobSpec, tmp_path: Path) -> None:
    require_dot()
    warnings: list[str] = []
    out = tmp_path / "rendered"
    api.render(spec, out, warn=warnings.append)

    assert warnings == []
    assert (out / "cluster.dot").read_text().startswith("digraph cluster {")
    root = ET.parse(out / "cluster.svg").getroot()
    words = svg_texts(out / "cluster.svg")
    for expected in ("data_group", "ml.c5.xlarge x 2", "dnn_group", "distribution: mpi (mpirun over SSH)",
                     "algo-1", "algo-2", "algo-3", "channel training", "channel validation", "ShardedByS3Key",
                     "network hetero-emu-pic-job"):
        assert expected in words
    titles = {g.get("class"): [] for g in root.iter(f"{{{timeline.SVG_NS}}}g")}
    for g in root.iter(f"{{{timeline.SVG_NS}}}g"):
        title = g.find("svg:title", NS)
        titles[g.get("class")].append(title.text if title is not None else "")
    assert titles["edge"] == ["channel_0->host_algo-1", "channel_1->host_algo-3"]
    assert "cluster_group_0" in titles["cluster"] and "cluster_group_1" in titles["cluster"]


def test_render_without_graphviz_writes_the_dot_and_says_how_to_get_the_svg(
        spec: JobSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    warnings: list[str] = []
    out = tmp_path / "rendered"
    api.render(spec, out, warn=warnings.append)

    assert (out / "cluster.dot").is_file()
    assert not (out / "cluster.svg").exists()
    assert warnings == ["cluster.svg not drawn: Graphviz's `dot` is not installed (apt-get install graphviz); "
                        "cluster.dot is there"]



def test_a_tuning_jobs_trial_names_its_tuning_job_in_job_json(spec: JobSpec) -> None:
    # The tuning layer records the trial (with its TuningJobArn) before its driver runs it.
    from emulator.result import Status
    from emulator.state import job_records

    arn = "arn:aws:sagemaker:us-west-2:000000000000:hyper-parameter-tuning-job/tune-1"
    job_records.record("pic-job", spec.output_path / "pic-job", Status.IN_PROGRESS, TuningJobArn=arn)
    result = run_fake(spec, FakeBackend())

    assert json.loads((result.job_dir / "job.json").read_text())["TuningJobArn"] == arn


def test_a_job_no_tuning_job_made_has_no_tuning_job_arn(spec: JobSpec) -> None:
    result = run_fake(spec, FakeBackend())

    assert "TuningJobArn" not in json.loads((result.job_dir / "job.json").read_text())
