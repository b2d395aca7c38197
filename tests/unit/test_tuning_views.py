"""tuning.svg and the console's table of a tuning job's trials (emulator/reports/tuning_chart.py,
tuning_table.py), from answers in botocore's shapes as the service gives them."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from emulator.reports import tuning_chart, tuning_table
from emulator.reports.svg import SVG_NS

NS = {"svg": SVG_NS}
START = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)


def describe(kind: str = "Maximize", name: str = "mnist-tuning", metric: str = "validation:accuracy",
             **extra: Any) -> dict[str, Any]:
    return {"HyperParameterTuningJobName": name, "HyperParameterTuningJobStatus": "InProgress",
            "HyperParameterTuningJobConfig": {
                "Strategy": "Random", "HyperParameterTuningJobObjective": {"Type": kind, "MetricName": metric},
                "ResourceLimits": {"MaxNumberOfTrainingJobs": 20, "MaxParallelTrainingJobs": 2}},
            **extra}


def summary(number: int, status: str = "Completed", value: float | None = None, *, iso: bool = False,
            job: str = "mnist-tuning", reason: str | None = None, **tuned: str) -> dict[str, Any]:
    created = START + timedelta(minutes=number)
    out: dict[str, Any] = {
        "TrainingJobName": f"{job}-{number:03d}-0123abcd",
        "TrainingJobArn": f"arn:aws:sagemaker:us-east-1:000000000000:training-job/{job}-{number:03d}-0123abcd",
        "TuningJobName": job, "CreationTime": created.isoformat() if iso else created,
        "TrainingJobStatus": status, "TunedHyperParameters": tuned or {"lr": "0.01"},
        "ObjectiveStatus": "Succeeded" if value is not None else "Failed"}
    if value is not None:
        out["FinalHyperParameterTuningJobObjectiveMetric"] = {"Type": "Maximize", "MetricName": "validation:accuracy",
                                                              "Value": value}
    if reason is not None:
        out["FailureReason"] = reason
    return out


def parse(text: str) -> ET.Element:
    assert text.startswith("<?xml")
    return ET.fromstring(text)


def trial_marks(root: ET.Element) -> list[ET.Element]:
    return [e for e in root.iter() if "trial" in (e.get("class") or "").split()]


def best_points(root: ET.Element) -> list[tuple[float, float]]:
    line = root.find(".//svg:polyline[@class='best-so-far']", NS)
    assert line is not None
    return [(float(x), float(y)) for x, y in (p.split(",") for p in line.get("points", "").split())]


# -- the chart


def test_no_trial_yet_draws_a_frame_that_says_so() -> None:
    root = parse(tuning_chart.tuning_svg(describe(), []))
    assert trial_marks(root) == []
    assert [e.text for e in root.iter(f"{{{SVG_NS}}}text") if e.get("class") == "empty"] == ["no trial yet"]
    assert root.find(".//svg:polyline", NS) is None


def test_one_trial_is_one_dot_ringed_as_the_best() -> None:
    root = parse(tuning_chart.tuning_svg(describe(), [summary(1, value=0.5)]))
    marks = trial_marks(root)
    assert len(marks) == 1 and marks[0].tag == f"{{{SVG_NS}}}circle"
    label = next(e for e in root.iter(f"{{{SVG_NS}}}text") if e.get("class") == "best-label")
    assert label.text == "best: mnist-tuning-001-0123abcd (0.5)"
    assert root.find(".//svg:circle[@class='best']", NS) is not None


def test_a_dot_per_trial_in_creation_order_whatever_the_list_order() -> None:
    values = [0.2, 0.5, 0.4, 0.9, 0.1]
    summaries = [summary(i + 1, value=v, iso=i % 2 == 0) for i, v in enumerate(values)]
    root = parse(tuning_chart.tuning_svg(describe(), list(reversed(summaries))))  # List answers newest first
    marks = trial_marks(root)
    assert [m.get("data-trial") for m in marks] == [f"mnist-tuning-{i:03d}-0123abcd" for i in range(1, 6)]
    xs = [float(m.get("cx", "nan")) for m in marks]
    assert xs == sorted(xs) and len(set(xs)) == 5
    # Higher values are higher on the page: smaller y.
    ys = [float(m.get("cy", "nan")) for m in marks]
    assert sorted(range(5), key=lambda i: ys[i]) == [3, 1, 2, 0, 4]


@pytest.mark.parametrize("kind", ["Maximize", "Minimize"])
def test_the_best_line_never_gets_worse(kind: str) -> None:
    values = [0.3, 0.1, 0.6, 0.2, 0.8, 0.05, 0.7]
    root = parse(tuning_chart.tuning_svg(describe(kind), [summary(i + 1, value=v) for i, v in enumerate(values)]))
    points = best_points(root)
    ys = [y for _, y in points]
    # Maximize: the best so far only rises on the page (y falls); Minimize: it only sinks.
    assert all(b <= a for a, b in zip(ys, ys[1:], strict=False)) if kind == "Maximize" else \
        all(b >= a for a, b in zip(ys, ys[1:], strict=False))
    # It ends at the best trial's dot: 0.8 for Maximize (trial 5), 0.05 for Minimize (trial 6).
    best = "mnist-tuning-005-0123abcd" if kind == "Maximize" else "mnist-tuning-006-0123abcd"
    dot = next(m for m in trial_marks(root) if m.get("data-trial") == best)
    assert ys[-1] == pytest.approx(float(dot.get("cy", "nan")))
    # Steps: every segment is flat or upright.
    assert all(a[0] == b[0] or a[1] == b[1] for a, b in zip(points, points[1:], strict=False))


def test_failed_trials_sit_on_the_bottom_edge_as_crosses() -> None:
    summaries = [summary(1, value=0.4), summary(2, "Failed", reason="AlgorithmError: boom"),
                 summary(3, "Stopped", value=0.6), summary(4, "InProgress")]
    root = parse(tuning_chart.tuning_svg(describe(), summaries))
    marks = {m.get("data-trial", "")[-12:-9]: m for m in trial_marks(root)}
    assert marks["002"].tag == f"{{{SVG_NS}}}path" and "failed" in marks["002"].get("class", "")
    assert "stopped" in marks["003"].get("class", "") and marks["003"].get("fill") != marks["001"].get("fill")
    bottom = tuning_chart.TOP + tuning_chart.PLOT_HEIGHT
    assert bottom - 10 < float(marks["004"].get("cy", "nan")) < bottom  # running: hollow, on the edge
    title = marks["002"].find("svg:title", NS)
    assert title is not None and "AlgorithmError: boom" in (title.text or "")


def test_all_failed_has_no_best_and_no_line() -> None:
    root = parse(tuning_chart.tuning_svg(describe(), [summary(i, "Failed") for i in range(1, 4)]))
    assert len(trial_marks(root)) == 3
    assert root.find(".//svg:polyline", NS) is None
    assert root.find(".//svg:circle[@class='best']", NS) is None


def test_hostile_names_are_text_not_markup() -> None:
    hostile = '<script>alert(1)</script>&"'
    description = describe(name=hostile, metric=f"m{hostile}")
    text = tuning_chart.tuning_svg(description, [summary(1, value=1.0, job=hostile, **{hostile: hostile})])
    assert "<script>" not in text
    root = parse(text)
    assert root.find(".//script") is None and root.find(".//svg:script", NS) is None
    assert any(hostile in (e.text or "") for e in root.iter(f"{{{SVG_NS}}}text"))


def test_many_trials_and_extreme_values_draw_no_nan() -> None:
    summaries = [summary(i, value=(-1) ** i * 1.7e308 if i < 3 else float(i)) for i in range(1, 501)]
    summaries.append(summary(501, value=float("nan")))
    summaries.append(summary(502, value=float("inf")))
    text = tuning_chart.tuning_svg(describe(), summaries)
    assert not re.search(r"\b(nan|inf)\b", text, re.IGNORECASE)
    root = parse(text)
    assert len(trial_marks(root)) == 502
    # NaN and infinite objectives count as none: their trials sit on the bottom edge, as hollow dots.
    bottom = tuning_chart.TOP + tuning_chart.PLOT_HEIGHT
    last = trial_marks(root)[-2:]
    assert all(float(m.get("cy", "nan")) > bottom - 10 for m in last)


def test_identical_objectives_still_fit_the_plot() -> None:
    root = parse(tuning_chart.tuning_svg(describe(), [summary(i, value=1e20) for i in range(1, 4)]))
    ys = [float(m.get("cy", "nan")) for m in trial_marks(root)]
    assert all(tuning_chart.TOP < y < tuning_chart.TOP + tuning_chart.PLOT_HEIGHT for y in ys)


def test_the_title_names_the_job_metric_and_direction() -> None:
    root = parse(tuning_chart.tuning_svg(describe("Minimize", metric="val:loss"), []))
    title = next(e for e in root.iter(f"{{{SVG_NS}}}text") if e.get("class") == "title")
    assert title.text == "mnist-tuning: val:loss (Minimize, lower is better)"


def test_the_best_trial_is_the_service_s_when_it_names_one() -> None:
    # The service chose trial 1 (say a tie broken its own way): the picture names its choice.
    description = describe(BestTrainingJob=summary(1, value=0.5))
    root = parse(tuning_chart.tuning_svg(description, [summary(1, value=0.5), summary(2, value=0.5)]))
    label = next(e for e in root.iter(f"{{{SVG_NS}}}text") if e.get("class") == "best-label")
    assert "mnist-tuning-001-0123abcd" in (label.text or "")


# -- the table


def visible(line: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", line)


def test_header_says_what_is_searched_and_titles_the_columns() -> None:
    title, columns = tuning_table.header(describe("Minimize", metric="val:loss")).split("\n")
    assert title == "mnist-tuning: Random search, minimize val:loss; 20 trials, 2 at a time"
    assert columns.split() == ["trial", "status", "objective", "(min)", "tuned", "hyperparameters"]
    # The titles stand where the rows' columns start.
    row = tuning_table.row(summary(1, value=0.25), "Minimize", best_so_far=False)
    assert columns.index("status") == row.index("Completed")


def test_rows_line_up_and_fit_a_hundred_columns() -> None:
    long = {f"hyperparameter_{i}": "0.000123456789012345" for i in range(6)}
    rows = [tuning_table.row(summary(1, value=0.91234567, **long), "Maximize", True),
            tuning_table.row(summary(2, "Failed", reason="AlgorithmError: exit 1"), "Maximize", False),
            tuning_table.row(summary(3, "Stopped", value=12345.678), "Maximize", False)]
    assert all(len(r) <= 100 for r in rows)
    starts = {r.index(s) for r, s in zip(rows, ("Completed", "Failed", "Stopped"), strict=True)}
    assert len(starts) == 1
    assert rows[0].startswith("* mnist-tuning-001-0123abcd")
    assert rows[1].startswith("  mnist-tuning-002")
    # Six significant digits; a long drawn value shortened; the row cut with an ellipsis.
    assert "0.912346" in rows[0] and "hyperparameter_0=0.000123457" in rows[0] and rows[0].endswith("…")


def test_a_failed_row_has_no_objective_and_says_why() -> None:
    row = tuning_table.row(summary(2, "Failed", reason="AlgorithmError: exit 1", lr="0.5"), "Maximize", False)
    fields = row.split()
    assert fields[1:4] == ["Failed", "-", "lr=0.5"]
    assert row.endswith("| AlgorithmError: exit 1")


def test_a_long_name_keeps_its_end() -> None:
    row = tuning_table.row(summary(7, value=1.0, job="a-very-long-tuning-job-name-xyz"), "Maximize", False)
    # 44 characters into 30: an ellipsis and the last 29 (the trial's number and token whole).
    assert row.split()[0] == "…ing-job-name-xyz-007-0123abcd"
    assert len(row.split()[0]) == 30


def test_colour_only_when_asked_and_the_text_is_the_same() -> None:
    plain = tuning_table.row(summary(1, value=0.5), "Maximize", True)
    painted = tuning_table.row(summary(1, value=0.5), "Maximize", True, colour=True)
    assert "\x1b[" not in plain
    assert "\x1b[32mCompleted" in painted and "\x1b[1m* " in painted
    assert visible(painted) == plain


def test_control_characters_never_reach_the_terminal() -> None:
    row = tuning_table.row(summary(1, value=0.5, **{"x": "\x1b[2J\nboom"}), "Maximize", False)
    assert "\x1b" not in row and "\n" not in row
    assert "x=\\x1b[2J\\nboom" in row


def test_final_lines_give_status_counters_and_the_best_trial() -> None:
    best = summary(4, value=0.93, lr="0.01", optimizer='"adam"')
    description = describe(
        HyperParameterTuningJobStatus="Completed", BestTrainingJob=best,
        TrainingJobStatusCounters={"Completed": 17, "InProgress": 0, "RetryableError": 1, "NonRetryableError": 1,
                                   "Stopped": 1},
        ObjectiveStatusCounters={"Succeeded": 18, "Pending": 0, "Failed": 2})
    assert tuning_table.final_lines(description) == [
        "mnist-tuning: Completed",
        "trials: 17 completed, 1 stopped, 2 failed (1 retryable), 0 in progress; objectives: 18 succeeded, "
        "2 failed, 0 pending",
        "best: mnist-tuning-004-0123abcd, validation:accuracy = 0.93 (maximize)",
        "  lr = 0.01",
        '  optimizer = "adam"',
    ]


def test_final_lines_without_a_best_trial_say_so() -> None:
    description = describe(HyperParameterTuningJobStatus="Failed", FailureReason="All training jobs failed")
    lines = tuning_table.final_lines(description)
    assert lines[0] == "mnist-tuning: Failed (All training jobs failed)"
    assert lines[1].startswith("trials: 0 completed")
    assert lines[2] == "best: none yet (no trial has reported the objective)"
