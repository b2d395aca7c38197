"""timeline.svg: a Gantt chart of one run's hosts, written next to job.json by every run.

One row per host (`algo-N (group)`), a bar from its start to its end in its group's colour
(`emulator.reports.palette`), its exit code after the bar, the host that failed the job outlined in red and
labelled "first failure", and a time axis in seconds since the first host started. A failure then
shows at a glance who died first and who was stopped because of it.

Pure and cheap: standard-library XML elements only (no Graphviz, which most users do not have),
built from `Span`s the runner measured; no clock, no engine. Text widths are estimated, not measured
(no font library): from DejaVu Sans' advance widths by kind of character, rounded up, so labels
never overlap the bars in the fonts viewers substitute either.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from emulator.reports import svg
from emulator.reports.palette import FAILURE, Colour, group_colours
from emulator.reports.svg import FONT, FONT_SIZE, GRID, MUTED, SVG_NS, TEXT, nice_step, text_width
from emulator.reports.svg import number as _n
from emulator.reports.svg import text as _text

FILE_NAME = "timeline.svg"

ROW = 30  # px per host row
BAR = 18  # bar height
PLOT_WIDTH = 620  # px of the time axis
MARGIN = 16
HEADER = 62  # title and subtitle above the rows
STRIPE = "#f5f6f8"


@dataclass(frozen=True)
class Span:
    """One host's run. `started` and `ended` are seconds on any one clock all spans share (the
    engine's, or the driver's own); only differences are drawn."""

    host: str
    group: str
    started: float | None  # None: never started
    ended: float | None  # None: no exit seen (the engine stopped answering)
    exit_code: int | None
    stopped: bool = False  # stopped by the emulator (after another host failed, a stop, max_run)
    note: str = ""  # anything else about its end: "out of memory", "container disappeared"


@dataclass(frozen=True)
class Group:
    name: str
    instance_type: str


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 100 else f"{value:.0f} s"


def end_label(span: Span) -> str:
    """What follows a host's bar: its exit code and, when it did not end by itself, why."""
    if span.started is None:
        return "not started"
    parts = ["exit ?" if span.exit_code is None else f"exit {span.exit_code}"]
    parts += ["stopped by the emulator"] if span.stopped else []
    parts += [span.note] if span.note else []
    return ", ".join(parts)


@dataclass(frozen=True)
class _Layout:
    """Where everything of one chart goes: the time scale, the text beside each bar, the size."""

    zero: float  # the first host's start: x = 0 s
    last: float  # the latest start or end seen: where a bar without an end stops
    step: float  # seconds between ticks
    axis_end: float  # seconds at the axis' right end, a whole number of steps
    scale: float  # px per second
    labels: list[str]  # per span: "algo-N (group)", left of the bar
    tails: list[str]  # per span: what follows the bar
    legend_items: list[str]
    left: float  # x of the axis' 0
    top: int  # y of the first row
    bottom: int  # y of the axis
    legend_y: int
    width: int
    height: int


def _lay_out(title: str, spans: Sequence[Span], groups: Sequence[Group], first_failure: str | None) -> _Layout:
    """The chart's time scale, text and size: wide enough for the longest label, tail, legend and title."""
    ran = [s for s in spans if s.started is not None]
    zero = min((s.started for s in ran if s.started is not None), default=0.0)
    last = max((t for s in ran for t in (s.started, s.ended) if t is not None), default=zero)
    total = max(last - zero, 1e-3)
    step = nice_step(total)
    axis_end = math.ceil(total / step - 1e-9) * step

    labels = [f"{s.host} ({s.group})" for s in spans]
    tails = [end_label(s) + (" first failure" if s.host == first_failure else "") for s in spans]
    left = MARGIN + max((text_width(t) for t in labels), default=0) + 12
    right = max((text_width(t) for t in tails), default=0) + 14 + MARGIN
    legend_y = HEADER + len(spans) * ROW + 68
    width = math.ceil(left + PLOT_WIDTH + right)
    legend_items = [f"{g.name} ({g.instance_type})" for g in groups]
    width = max(width, math.ceil(MARGIN * 2 + sum(text_width(t) + 40 for t in legend_items)),
                math.ceil(MARGIN * 2 + 1.1 * text_width(title, 15)))  # bold: ~10 % wider
    return _Layout(zero, last, step, axis_end, PLOT_WIDTH / axis_end, labels, tails, legend_items, left,
                   HEADER, HEADER + len(spans) * ROW, legend_y, width, legend_y + 24)


def build(title: str, status: str, spans: Sequence[Span], groups: Sequence[Group],
          first_failure: str | None = None) -> ET.Element:
    """The chart as an <svg> element. `first_failure` names the host that failed the job.

    Drawn bottom layer first: the background and titles, the row stripes, the grid and axis, one bar
    per host with its labels, the legend."""
    colours = group_colours([g.name for g in groups])
    layout = _lay_out(title, spans, groups, first_failure)
    width, height = layout.width, layout.height
    svg = ET.Element("svg", {"xmlns": SVG_NS, "width": str(width), "height": str(height),
                             "viewBox": f"0 0 {width} {height}", "font-family": FONT,
                             "font-size": str(FONT_SIZE)})
    ET.SubElement(svg, "title").text = f"{title}: {status}"
    ET.SubElement(svg, "rect", {"width": "100%", "height": "100%", "fill": "#ffffff"})
    _text(svg, MARGIN, 24, title, size=15, weight="bold")
    _text(svg, MARGIN, 44, _subtitle(status, spans, first_failure, layout.zero), fill=MUTED, cls="status")
    for i in range(len(spans)):
        if i % 2:
            ET.SubElement(svg, "rect", {"x": str(MARGIN), "y": str(layout.top + i * ROW),
                                        "width": str(width - 2 * MARGIN), "height": str(ROW), "fill": STRIPE})
    _draw_axis(svg, layout)
    for i, span in enumerate(spans):
        _draw_row(svg, layout, i, span, colours, span.host == first_failure)
    _draw_legend(svg, layout, groups, colours)
    return svg


def _draw_axis(svg: ET.Element, layout: _Layout) -> None:
    """The grid and the time axis, under the bars."""
    top, bottom, left = layout.top, layout.bottom, layout.left
    axis = ET.SubElement(svg, "g", {"class": "axis"})
    ticks = int(round(layout.axis_end / layout.step))
    for k in range(ticks + 1):
        x = left + k * layout.step * layout.scale
        ET.SubElement(axis, "line", {"x1": _n(x), "y1": str(top), "x2": _n(x), "y2": str(bottom + 4),
                                     "stroke": GRID if k else MUTED, "stroke-width": "1"})
        _text(axis, x, bottom + 20, _tick(k * layout.step), anchor="middle", fill=MUTED, size=12, cls="tick")
    ET.SubElement(axis, "line", {"x1": _n(left), "y1": str(bottom), "x2": _n(left + PLOT_WIDTH), "y2": str(bottom),
                                 "stroke": MUTED, "stroke-width": "1"})
    _text(axis, left + PLOT_WIDTH / 2, bottom + 38, "seconds since the first host started", anchor="middle",
          fill=MUTED, size=12)


def _draw_row(svg: ET.Element, layout: _Layout, i: int, span: Span, colours: Mapping[str, Colour],
              failed_first: bool) -> None:
    """One host's row: its label, its bar (outlined in red for the first failure, dashed without an
    end) with a tooltip, and its exit after the bar."""
    label, tail, zero, scale, left = layout.labels[i], layout.tails[i], layout.zero, layout.scale, layout.left
    y = layout.top + i * ROW
    middle = y + ROW / 2 + FONT_SIZE * 0.35
    _text(svg, left - 12, middle, label, anchor="end", cls="host")
    if span.started is None:
        _text(svg, left + 6, middle, tail, fill=MUTED, style="italic", cls="exit", host=span.host)
        return
    start = (span.started - zero) * scale
    end = ((span.ended if span.ended is not None else layout.last) - zero) * scale
    colour = colours.get(span.group)
    bar = {"class": "bar first-failure" if failed_first else "bar", "data-host": span.host,
           "data-group": span.group, "x": _n(left + start), "y": _n(y + (ROW - BAR) / 2),
           "width": _n(max(end - start, 2.0)), "height": str(BAR), "rx": "3",
           "fill": colour.fill if colour else "#dddddd",
           "stroke": FAILURE if failed_first else (colour.stroke if colour else MUTED),
           "stroke-width": "3" if failed_first else "1"}
    if span.ended is None:
        bar["stroke-dasharray"] = "4 3"
    rect = ET.SubElement(svg, "rect", bar)
    ET.SubElement(rect, "title").text = (
        f"{label}: started {_seconds(span.started - zero)}, "
        + (f"ended {_seconds(span.ended - zero)} ({_seconds(span.ended - span.started)})"
           if span.ended is not None else "no end seen")
        + f", {end_label(span)}")
    x = left + max(end, start + 2.0) + 8
    # Dark red for a host that failed by itself; grey for one the emulator stopped (a consequence).
    fill = TEXT if span.exit_code == 0 else MUTED if span.stopped else "#8a1c1c"
    _text(svg, x, middle, end_label(span), fill=fill, cls="exit", host=span.host)
    if failed_first:
        _text(svg, x + text_width(end_label(span) + " "), middle, "first failure", fill=FAILURE,
              weight="bold", cls="first-failure", host=span.host)


def _draw_legend(svg: ET.Element, layout: _Layout, groups: Sequence[Group], colours: Mapping[str, Colour]) -> None:
    """A swatch and `group (instance type)` per group, below the axis."""
    x = float(MARGIN)
    for group, item in zip(groups, layout.legend_items, strict=True):
        colour = colours[group.name]
        ET.SubElement(svg, "rect", {"class": "legend", "data-group": group.name, "x": _n(x),
                                    "y": str(layout.legend_y - 11), "width": "14", "height": "14", "rx": "2",
                                    "fill": colour.fill, "stroke": colour.stroke})
        _text(svg, x + 20, layout.legend_y, item, cls="legend")
        x += text_width(item) + 40


def _subtitle(status: str, spans: Sequence[Span], first_failure: str | None, zero: float) -> str:
    failed = next((s for s in spans if s.host == first_failure), None)
    if failed is not None and failed.ended is not None:
        return (f"{status}: {failed.host} ({failed.group}) failed first, exit {failed.exit_code} "
                f"at {_seconds(failed.ended - zero)}")
    return f"{status}: {len(spans)} host" + ("" if len(spans) == 1 else "s")


def _tick(value: float) -> str:
    return f"{value:g}"


def write(path: Path, title: str, status: str, spans: Sequence[Span], groups: Sequence[Group],
          first_failure: str | None = None) -> Path:
    """Write the chart to `path` (UTF-8 SVG)."""
    return svg.write(path, build(title, status, spans, groups, first_failure))
