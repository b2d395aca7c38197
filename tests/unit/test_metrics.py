"""Training metrics (emulator/run/metrics.py, emulator/aws/cloudwatch.py, metrics.svg): the job's metric
definitions applied to its hosts' lines as the service applies them, checked here through the spec,
a run on the in-memory engine, the SDK's own `TrainingJobAnalytics` and the command line."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from fake_backend import FakeBackend, exits
from testkit import invoke

from emulator.errors import SpecError
from emulator.jobspec import JobSpec, metric_definitions, request, validate
from emulator.reports.console import RecordingReporter
from emulator.run import metrics
from emulator.run.runner import run_job


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A state folder of the test's own: the job records the SDK session and the CLI find jobs in."""
    monkeypatch.setenv("HETERO_EMU_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


LOSS = {"Name": "train:loss", "Regex": r"loss: ([0-9.e+-]+)"}
ACCURACY = {"Name": "validation:accuracy", "Regex": r"val_acc=([0-9.]+)"}


def spec_with(tmp_path: Path, definitions: object, name: str = "metrics-job") -> JobSpec:
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "train.py").write_text("print(1)\n")
    return validate({
        "job_name": name, "entry_point": "train.py", "source_dir": "code", "output_path": "out",
        "instance_groups": [{"instance_group_name": "data", "instance_type": "ml.c5.xlarge", "instance_count": 1},
                            {"instance_group_name": "dnn", "instance_type": "ml.g5.xlarge", "instance_count": 2}],
        "metric_definitions": definitions}, base_dir=tmp_path)


# --------------------------------------------------------------------------------------------------
# Definitions: the service's limits, and a regex that could never give a value


def test_definitions_are_read_from_the_spec_and_written_back_into_the_request(tmp_path: Path) -> None:
    spec = spec_with(tmp_path, [LOSS, ACCURACY])
    assert spec.metric_definitions == (metric_definitions.Definition("train:loss", LOSS["Regex"]),
                                       metric_definitions.Definition("validation:accuracy", ACCURACY["Regex"]))
    sent = request.request_from_spec(spec, "metrics-job")
    assert sent["AlgorithmSpecification"]["MetricDefinitions"] == [LOSS, ACCURACY]
    again = request.validate_request(sent, tmp_path, "req")
    assert again.metric_definitions == spec.metric_definitions


@pytest.mark.parametrize(("definitions", "path", "said"), [
    ([{"Name": "loss", "Regex": "loss: ([0-9.]+"}], "metric_definitions[0].Regex", "is not a regular expression"),
    ([{"Name": "loss", "Regex": "loss: [0-9.]+"}], "metric_definitions[0].Regex", "has no capture group"),
    ([{"Name": "", "Regex": "(1)"}], "metric_definitions[0].Name", "1 to 255 characters"),
    ([{"Name": "x", "Regex": "(" + "a" * 500 + ")"}], "metric_definitions[0].Regex", "1 to 500 characters"),
    ([LOSS, LOSS], "metric_definitions[1].Name", "defined twice"),
    ([{"Name": f"m{i}", "Regex": "(1)"} for i in range(41)], "metric_definitions", "at most 40"),
    ([{"Name": "x", "Regex": "(1)", "Pattern": "y"}], "metric_definitions[0].Pattern", "not a MetricDefinition field"),
])
def test_a_bad_definition_is_named_by_its_field(tmp_path: Path, definitions: object, path: str, said: str) -> None:
    with pytest.raises(SpecError) as info:
        spec_with(tmp_path, definitions)
    assert [p.path for p in info.value.problems] == [path]
    assert said in info.value.problems[0].message


def test_a_requests_bad_regex_is_named_by_the_requests_field(tmp_path: Path) -> None:
    sent = request.request_from_spec(spec_with(tmp_path, [LOSS]), "metrics-job")
    sent["AlgorithmSpecification"]["MetricDefinitions"] = [{"Name": "loss", "Regex": "no group"}]
    with pytest.raises(SpecError) as info:
        request.validate_request(sent, tmp_path, "req")
    assert [p.path for p in info.value.problems] == ["AlgorithmSpecification.MetricDefinitions[0].Regex"]


# --------------------------------------------------------------------------------------------------
# Values: the first group of each matching definition, as a number


def test_each_matching_definition_gives_its_first_group_as_a_number() -> None:
    extract = metrics.Extractor(metric_definitions.parse([LOSS, ACCURACY, {"Name": "lr", "Regex": r"lr=(\S+)"}]))
    found = extract.samples("algo-2", "epoch 3: loss: 0.25 val_acc=0.9 lr=fast", 100.0)
    assert [(s.name, s.value) for s in found] == [("train:loss", 0.25), ("validation:accuracy", 0.9)]
    assert extract.samples("algo-2", "loss: 1e-3", 1.0)[0].value == 0.001
    assert extract.samples("algo-2", "nothing here", 1.0) == []


def test_the_final_value_is_each_metrics_last_whichever_host_gave_it() -> None:
    samples = [metrics.Sample("algo-2", "loss", 0.9, 10), metrics.Sample("algo-3", "loss", 0.7, 12),
               metrics.Sample("algo-2", "loss", 0.8, 11), metrics.Sample("algo-2", "acc", 0.5, 11)]
    assert [(m["MetricName"], m["Value"]) for m in metrics.final(samples)] == [("acc", 0.5), ("loss", 0.7)]


def test_datapoints_group_by_period_with_the_statistics_asked_for() -> None:
    samples = [metrics.Sample("algo-1", "loss", v, at) for v, at in ((4.0, 100), (2.0, 130), (1.0, 170), (9.0, 400))]
    points = metrics.datapoints(samples, 100, 300, 60, ["Average", "Maximum", "SampleCount"])
    assert [(p["Timestamp"].timestamp(), p["Average"], p["Maximum"], p["SampleCount"]) for p in points] == [
        (100, 3.0, 4.0, 2.0), (160, 1.0, 1.0, 1.0)]


# --------------------------------------------------------------------------------------------------
# A run: samples as lines arrive, FinalMetricDataList, metrics.svg, CloudWatch, the SDK, the CLI


CHATTY = [b"epoch 0 loss: 0.9\n", b"progress 10%\rprogress 100%\r\n", b"epoch 1 loss: 0.5 val_acc=0.75\n",
          b"epoch 2 loss: 0.25 val_acc=0.8\n"]


def run_with_metrics(tmp_path: Path, state: Path) -> Path:
    backend = FakeBackend({"algo-1": exits(logs=[b"serving batches\n"]),
                           "algo-2": exits(logs=CHATTY), "algo-3": exits(logs=[b"epoch 0 loss: 0.7\n"])})
    result = run_job(spec_with(tmp_path, [LOSS, ACCURACY]), backend=backend, reporter=RecordingReporter())
    assert result.status == "Completed"
    return result.job_dir


def test_a_run_records_every_value_and_describes_the_final_ones(tmp_path: Path, state: Path) -> None:
    job_dir = run_with_metrics(tmp_path, state)
    samples = metrics.read(job_dir)
    assert sorted((s.host, s.name, s.value) for s in samples) == [
        ("algo-2", "train:loss", 0.25), ("algo-2", "train:loss", 0.5), ("algo-2", "train:loss", 0.9),
        ("algo-2", "validation:accuracy", 0.75), ("algo-2", "validation:accuracy", 0.8),
        ("algo-3", "train:loss", 0.7)]
    described = json.loads((job_dir / "job.json").read_text())
    assert described["AlgorithmSpecification"]["MetricDefinitions"] == [LOSS, ACCURACY]
    finals = {m["MetricName"]: m["Value"] for m in described["FinalMetricDataList"]}
    assert finals["validation:accuracy"] == 0.8 and finals["train:loss"] in (0.25, 0.7)


def test_metrics_svg_has_a_panel_per_metric_and_a_line_per_host(tmp_path: Path, state: Path) -> None:
    job_dir = run_with_metrics(tmp_path, state)
    svg = ET.parse(job_dir / "metrics.svg").getroot()
    texts = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert "train:loss" in texts and "validation:accuracy" in texts
    lines = {e.get("data-host") for e in svg.iter("{http://www.w3.org/2000/svg}polyline")}
    assert lines == {"algo-2"}  # algo-3 gave one value: a point, not a line
    points = {e.get("data-host") for e in svg.iter("{http://www.w3.org/2000/svg}circle")}
    assert points == {"algo-2", "algo-3"}


def test_the_sdks_training_job_analytics_reads_them_unchanged(tmp_path: Path, state: Path) -> None:
    from sagemaker.analytics import TrainingJobAnalytics

    from emulator.sagemaker import EmulatorSession

    run_with_metrics(tmp_path, state)
    (tmp_path / "s3").mkdir()
    session = EmulatorSession(s3_root=tmp_path / "s3")
    frame = TrainingJobAnalytics("metrics-job", sagemaker_session=session).dataframe()
    assert set(frame["metric_name"]) == {"train:loss", "validation:accuracy"}
    # One minute (the SDK's default period) holds every value of the run: their average per metric.
    loss = frame[frame["metric_name"] == "train:loss"]["value"].tolist()
    assert loss == [pytest.approx((0.9 + 0.5 + 0.25 + 0.7) / 4)]
    cloudwatch = session.boto_session.client("cloudwatch")
    listed = cloudwatch.list_metrics(Namespace=metrics.NAMESPACE, MetricName="train:loss")["Metrics"]
    assert sorted(d["Value"] for m in listed for d in m["Dimensions"]) == [
        "metrics-job", "metrics-job/algo-2", "metrics-job/algo-3"]
    now = datetime.now(timezone.utc)
    data = cloudwatch.get_metric_data(StartTime=now - timedelta(hours=1), EndTime=now + timedelta(minutes=1),
                                      MetricDataQueries=[{"Id": "m", "MetricStat": {
                                          "Metric": {"Namespace": metrics.NAMESPACE, "MetricName": "train:loss",
                                                     "Dimensions": [{"Name": "Host",
                                                                     "Value": "metrics-job/algo-3"}]},
                                          "Period": 60, "Stat": "Maximum"}}])["MetricDataResults"]
    assert data[0]["Values"] == [0.7] and data[0]["StatusCode"] == "Complete"


def test_the_cli_prints_them_per_metric_and_host(tmp_path: Path, state: Path) -> None:
    run_with_metrics(tmp_path, state)
    shown = invoke("metrics", "metrics-job")
    assert shown.returncode == 0, shown.stderr
    rows = [line.split() for line in shown.stdout.splitlines()[1:4]]
    assert rows == [["train:loss", "algo-2", "3", "0.25", "0.25", "0.9"], ["train:loss", "algo-3", "1", "0.7",
                                                                           "0.7", "0.7"],
                    ["validation:accuracy", "algo-2", "2", "0.8", "0.75", "0.8"]]
    as_json = json.loads(invoke("metrics", "metrics-job", "--json").stdout)
    assert len(as_json) == 6 and {"host", "metric", "value", "time"} == set(as_json[0])


def test_a_job_without_definitions_has_no_metrics_and_no_chart(tmp_path: Path, state: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print(1)\n")
    spec = validate(yaml.safe_load("""
        job_name: plain
        entry_point: train.py
        source_dir: code
        output_path: out
        instance_type: ml.c5.xlarge
        instance_count: 1
        """), base_dir=tmp_path)
    result = run_job(spec, backend=FakeBackend({"algo-1": exits(logs=[b"loss: 1\n"])}), reporter=RecordingReporter())
    assert not (result.job_dir / "metrics").exists() and not (result.job_dir / "metrics.svg").exists()
    assert "FinalMetricDataList" not in json.loads((result.job_dir / "job.json").read_text())
