"""tuning.svg: a tuning job's trials at a glance, written beside the tuning job (docs/tuning.md).

x: each trial in creation order; y: its final objective. A dot per trial with an objective, coloured
by how it ended (Completed blue, Stopped orange: stopped early, its objective the last it reported);
a trial without one (Failed, or its metric never matched, or still running) is a mark on the bottom
edge, since it has no value to place. A step line follows the best objective so far, the lowest for
Minimize and the highest for Maximize, and the best trial is ringed and named. The title names the
tuning job, its metric and which way is better.

Pure and cheap, as timeline.svg and metrics.svg (`emulator.reports.svg`): built from the service's own
answers in botocore's shapes (DescribeHyperParameterTuningJob and the TrainingJobSummaries of
ListTrainingJobsForHyperParameterTuningJob, read by `emulator.reports.trials`), so it draws what the
emulator's service or the real one says. Every name in it comes from the request and goes in as text
(escaped); no number it draws is NaN or infinite.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulator.jobspec.wording import clip
from emulator.reports import svg
from emulator.reports.palette import COMPLETED, FAILURE, RUNNING, STOPPED
from emulator.reports.svg import FONT, FONT_SIZE, GRID, MUTED, SVG_NS, TEXT, nice_step, text_width
from emulator.reports.svg import number as _n
from emulator.reports.svg import text as _text
from emulator.reports.trials import MINIMIZE, Trial, best_so_far, best_trial, format_value, objective, trials

FILE_NAME = "tuning.svg"
PLOT_WIDTH = 620
PLOT_HEIGHT = 300
LEFT = 86  # the y tick labels and the metric's name, turned
MARGIN = 16
TOP = 74  # the title and the subtitle
BOTTOM = 92  # the x ticks, the x label and the legend
BEST_LINE = "#1f2328"
# Names shown in the picture are clipped to this many characters (the tooltips hold them whole): a
# metric name may have 255.
SHOWN = 60


@dataclass(frozen=True)
class _Scale:
    """Where a trial's number and an objective go: x from trial 1 to n, y over the objectives' range."""

    count: int
    low: float
    high: float

    def x(self, index: int) -> float:
        """The x of the trial at `index` (from 0): the first at the left edge's inset, the last at the right's."""
        inset = min(12.0, PLOT_WIDTH / 4)
        if self.count <= 1:
            return LEFT + PLOT_WIDTH / 2
        return LEFT + inset + index * (PLOT_WIDTH - 2 * inset) / (self.count - 1)

    def y(self, value: float) -> float:
        # Halves first: high - low overflows for objectives near the float's limits; the halves cannot.
        half = self.high / 2 - self.low / 2
        share = (value / 2 - self.low / 2) / half if half > 0 else 0.5
        return TOP + PLOT_HEIGHT - share * PLOT_HEIGHT


def build(description: Mapping[str, Any], summaries: Sequence[Mapping[str, Any]]) -> ET.Element:
    """The chart as an <svg> element, from a DescribeHyperParameterTuningJob answer and the trials'
    HyperParameterTrainingJobSummary mappings (any order)."""
    found = trials(summaries)
    metric, kind = objective(description)
    best = best_trial(description, found, kind)
    job = str(description.get("HyperParameterTuningJobName") or "tuning job")
    direction = "lower is better" if kind == MINIMIZE else "higher is better"
    title = f"{clip(job, SHOWN)}: {clip(metric or 'objective', SHOWN)} ({kind}, {direction})"
    width = max(LEFT + PLOT_WIDTH + MARGIN * 2, math.ceil(MARGIN * 2 + 1.1 * text_width(title, 15)))
    height = TOP + PLOT_HEIGHT + BOTTOM
    root = ET.Element("svg", {"xmlns": SVG_NS, "width": str(width), "height": str(height),
                              "viewBox": f"0 0 {width} {height}", "font-family": FONT, "font-size": str(FONT_SIZE)})
    ET.SubElement(root, "title").text = f"{job}: {metric} ({kind})"
    ET.SubElement(root, "rect", {"width": "100%", "height": "100%", "fill": "#ffffff"})
    _text(root, MARGIN, 24, title, size=15, weight="bold", cls="title")
    _text(root, MARGIN, 44, _subtitle(description, found, best), fill=MUTED, cls="status")
    ET.SubElement(root, "rect", {"x": str(LEFT), "y": str(TOP), "width": str(PLOT_WIDTH),
                                 "height": str(PLOT_HEIGHT), "fill": "none", "stroke": GRID})
    _axis_labels(root, metric)
    if not found:
        _text(root, LEFT + PLOT_WIDTH / 2, TOP + PLOT_HEIGHT / 2, "no trial yet", anchor="middle", fill=MUTED,
              style="italic", cls="empty")
        return root
    scale = _scale(found)
    _grid(root, scale)
    _best_line(root, scale, best_so_far(found, kind))
    radius = max(1.6, min(4.0, PLOT_WIDTH / len(found) / 2.5))
    for index, item in enumerate(found):
        _trial(root, scale, index, item, radius, metric)
    if best is not None and best.objective is not None:
        _best_mark(root, scale, found.index(best), best, best.objective, radius)
    _legend(root)
    return root


def tuning_svg(description: Mapping[str, Any], summaries: Sequence[Mapping[str, Any]]) -> str:
    """The chart as SVG text (an XML declaration, then the indented document)."""
    root = build(description, summaries)
    ET.indent(root)
    return "<?xml version='1.0' encoding='utf-8'?>\n" + ET.tostring(root, encoding="unicode") + "\n"


def write(path: Path, description: Mapping[str, Any], summaries: Sequence[Mapping[str, Any]]) -> Path:
    """Write the chart to `path` (UTF-8 SVG)."""
    return svg.write(path, build(description, summaries))


def _subtitle(description: Mapping[str, Any], found: Sequence[Trial], best: Trial | None) -> str:
    status = str(description.get("HyperParameterTuningJobStatus") or "InProgress")
    counts = {label: sum(1 for t in found if t.status in statuses) for label, statuses in _KINDS}
    parts = [f"{n} {label}" for label, n in counts.items() if n]
    head = f"{status}: {len(found)} trial{'' if len(found) == 1 else 's'}" + (f" ({', '.join(parts)})" if parts else "")
    if best is None or best.objective is None:
        return head
    return f"{head}; best {clip(best.name, SHOWN)} = {format_value(best.objective)}"


# How the trials are told apart, in the legend's order: each label with the TrainingJobStatus values
# it stands for and its colour.
_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("completed", ("Completed",)),
    ("stopped", ("Stopped", "Stopping")),
    ("failed", ("Failed",)),
    ("running", ("InProgress",)),
)
_COLOURS = {"completed": COMPLETED, "stopped": STOPPED, "failed": FAILURE, "running": RUNNING}


def _kind(status: str) -> str:
    return next((label for label, statuses in _KINDS if status in statuses), "running")


def _scale(found: Sequence[Trial]) -> _Scale:
    """The y range: the objectives' own, a little wider so no dot sits on the frame; ±1 (or 5 %) around
    a single value; 0 to 1 when no trial has an objective yet."""
    values = [t.objective for t in found if t.objective is not None]
    if not values:
        return _Scale(len(found), 0.0, 1.0)
    low, high = min(values), max(values)
    pad = max(abs(low) * 0.05, 1.0) if high == low else (high / 2 - low / 2) * 0.1
    if math.isfinite(low - pad) and math.isfinite(high + pad) and high + pad > low - pad:
        low, high = low - pad, high + pad
    return _Scale(len(found), low, high)


def _grid(root: ET.Element, scale: _Scale) -> None:
    """The y ticks over the objectives' range and the x ticks at whole trial numbers."""
    grid = ET.SubElement(root, "g", {"class": "axis"})
    half = scale.high / 2 - scale.low / 2
    step = nice_step(half, 5) * 2 if half > 0 else 1.0
    first, last = math.ceil(scale.low / step), math.floor(scale.high / step)
    for k in (range(first, last + 1) if last - first <= 20 else ()):
        tick = k * step
        y = scale.y(tick)
        ET.SubElement(grid, "line", {"x1": str(LEFT), "x2": str(LEFT + PLOT_WIDTH), "y1": _n(y), "y2": _n(y),
                                     "stroke": GRID})
        _text(grid, LEFT - 6, y + 4, f"{tick:.6g}", anchor="end", fill=MUTED, size=11, cls="tick")
    every = max(1, int(nice_step(scale.count - 1, 8))) if scale.count > 1 else 1
    for number in [1, *range(every, scale.count + 1, every)] if every > 1 else range(1, scale.count + 1):
        x = scale.x(number - 1)
        ET.SubElement(grid, "line", {"x1": _n(x), "x2": _n(x), "y1": str(TOP + PLOT_HEIGHT),
                                     "y2": str(TOP + PLOT_HEIGHT + 4), "stroke": MUTED})
        _text(grid, x, TOP + PLOT_HEIGHT + 18, str(number), anchor="middle", fill=MUTED, size=11, cls="tick")


def _axis_labels(root: ET.Element, metric: str) -> None:
    _text(root, LEFT + PLOT_WIDTH / 2, TOP + PLOT_HEIGHT + 36, "trial, in the order it was created",
          anchor="middle", fill=MUTED, size=12, cls="x-label")
    label = _text(root, 0, 0, clip(metric or "objective", SHOWN), anchor="middle", fill=MUTED, size=12,
                  cls="y-label")
    label.set("transform", f"translate({MARGIN + 8} {TOP + PLOT_HEIGHT / 2}) rotate(-90)")


def _best_line(root: ET.Element, scale: _Scale, best: Sequence[float | None]) -> None:
    """The best objective so far as a step line: flat until a trial beats it, then straight up or down."""
    points: list[tuple[float, float]] = []
    for index, value in enumerate(best):
        if value is None:
            continue
        x, y = scale.x(index), scale.y(value)
        if points and points[-1][1] != y:
            points.append((x, points[-1][1]))
        points.append((x, y))
    if len(points) == 1:  # one value: a short flat stroke, so the line shows at all
        x, y = points[0]
        points = [(x - 6, y), (x + 6, y)]
    if points:
        ET.SubElement(root, "polyline", {"class": "best-so-far",
                                         "points": " ".join(f"{_n(x)},{_n(y)}" for x, y in points), "fill": "none",
                                         "stroke": BEST_LINE, "stroke-width": "1.4",
                                         "stroke-linejoin": "round"})


def _trial(root: ET.Element, scale: _Scale, index: int, item: Trial, radius: float, metric: str) -> None:
    """One trial: a dot at its objective, or a mark on the bottom edge when it has none, with a tooltip
    naming it, its objective and its hyperparameters."""
    kind = _kind(item.status)
    x = scale.x(index)
    y = scale.y(item.objective) if item.objective is not None else TOP + PLOT_HEIGHT - radius - 1
    mark = _mark(root, kind, x, y, radius, item.objective is not None)
    mark.set("class", f"trial {kind}")
    mark.set("data-trial", item.name)
    mark.set("data-status", item.status)
    shown = f"{metric} = {format_value(item.objective)}" if item.objective is not None else "no objective"
    tuned = ", ".join(f"{k}={v}" for k, v in item.hyperparameters.items())
    why = f"; {item.failure_reason}" if item.failure_reason else ""
    ET.SubElement(mark, "title").text = f"trial {index + 1}, {item.name}: {item.status}, {shown}{why}" + \
        (f"\n{tuned}" if tuned else "")


def _mark(parent: ET.Element, kind: str, x: float, y: float, r: float, valued: bool) -> ET.Element:
    """A trial's mark: a dot in its kind's colour when it has a value; without one a cross when it
    failed, else a hollow dot (still running, or stopped before any objective)."""
    colour = _COLOURS[kind]
    if valued:
        return ET.SubElement(parent, "circle", {"cx": _n(x), "cy": _n(y), "r": _n(r), "fill": colour})
    if kind == "failed":
        return ET.SubElement(parent, "path", {"d": f"M{_n(x - r)},{_n(y - r)}L{_n(x + r)},{_n(y + r)}"
                                                   f"M{_n(x - r)},{_n(y + r)}L{_n(x + r)},{_n(y - r)}",
                                              "stroke": colour, "stroke-width": "1.6", "fill": "none"})
    return ET.SubElement(parent, "circle", {"cx": _n(x), "cy": _n(y), "r": _n(r), "fill": "#ffffff",
                                            "stroke": colour})


def _best_mark(root: ET.Element, scale: _Scale, index: int, best: Trial, value: float, radius: float) -> None:
    """A ring round the best trial's dot and its name beside it: right of the dot when it fits in the
    plot, else left of it, else from the plot's left edge."""
    x, y = scale.x(index), scale.y(value)
    ET.SubElement(root, "circle", {"class": "best", "cx": _n(x), "cy": _n(y), "r": _n(radius + 4), "fill": "none",
                                   "stroke": BEST_LINE, "stroke-width": "1.4"})
    label = f"best: {clip(best.name, SHOWN)} ({format_value(value)})"
    room = text_width(label, 12)
    if x + radius + 8 + room <= LEFT + PLOT_WIDTH:
        label_x, anchor = x + radius + 8, "start"
    elif x - radius - 8 - room >= LEFT:
        label_x, anchor = x - radius - 8, "end"
    else:
        label_x, anchor = LEFT + 4.0, "start"
    label_y = min(max(y - 8, TOP + 14), TOP + PLOT_HEIGHT - 6)
    _text(root, label_x, label_y, label, anchor=anchor, fill=TEXT, size=12, weight="bold", cls="best-label")


def _legend(root: ET.Element) -> None:
    """A swatch per kind of trial and the best-so-far line, below the x label."""
    y = TOP + PLOT_HEIGHT + 66
    x = float(LEFT)
    for label, _ in _KINDS:
        _mark(root, label, x + 5, y - 4, 4, label in ("completed", "stopped")).set("class", "legend")
        _text(root, x + 14, y, label, size=12, cls="legend")
        x += 14 + text_width(label, 12) + 18
    ET.SubElement(root, "line", {"class": "legend", "x1": _n(x), "x2": _n(x + 18), "y1": _n(y - 4), "y2": _n(y - 4),
                                 "stroke": BEST_LINE, "stroke-width": "1.4"})
    _text(root, x + 24, y, "best so far", size=12, cls="legend")
