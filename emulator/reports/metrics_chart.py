"""metrics.svg: the values of a run's metric definitions, written next to timeline.svg by every run
that has metric definitions (docs/metrics.md).

One panel per metric (in the order the definitions give them), one line per host in its group's
colour (`emulator.reports.palette`, as timeline.svg and the cluster diagram), the x axis in seconds since the
hosts started, each panel's own y range. A metric no host printed has a panel saying so, so a regex
that never matched shows at a glance.

Pure and cheap, like timeline.svg: standard-library XML elements only, from the samples the run
recorded (emulator/run/metrics.py).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path

from emulator.jobspec.metric_definitions import Sample
from emulator.reports import svg as svg_file
from emulator.reports.palette import group_colours
from emulator.reports.svg import FONT, GRID, MUTED, SVG_NS, TEXT, nice_step
from emulator.reports.svg import number as _n
from emulator.reports.svg import text as _text

FILE_NAME = "metrics.svg"
PANEL_WIDTH = 560
PANEL_HEIGHT = 150
LEFT = 70  # room for the y labels
GAP = 44  # between panels (each panel's title sits in it)
TOP = 56
MARGIN = 16
LEGEND = 24


def build(title: str, names: Sequence[str], samples: Sequence[Sample], host_groups: Mapping[str, str],
          groups: Sequence[str], zero: float) -> ET.Element:
    """The chart: `names` the metrics (one panel each), `host_groups` host -> group, `groups` in spec
    order (their colours), `zero` the time the hosts started (seconds since the epoch)."""
    colours = group_colours(groups)
    height = TOP + len(names) * (PANEL_HEIGHT + GAP) + LEGEND + MARGIN
    width = LEFT + PANEL_WIDTH + MARGIN * 2
    svg = ET.Element("svg", {"xmlns": SVG_NS, "width": str(width), "height": str(height),
                             "viewBox": f"0 0 {width} {height}", "font-family": FONT, "font-size": "13"})
    ET.SubElement(svg, "rect", {"width": str(width), "height": str(height), "fill": "#ffffff"})
    _text(svg, MARGIN, 24, title, weight="bold", size=15)
    _text(svg, MARGIN, 42, f"{len(samples)} values of {len(names)} metric(s), one line per host; "
                           "x: seconds since the hosts started", fill=MUTED, size=12)
    span = max((s.at - zero for s in samples), default=1.0) or 1.0
    for i, name in enumerate(names):
        top = TOP + i * (PANEL_HEIGHT + GAP) + GAP // 2
        mine = [s for s in samples if s.name == name]
        _panel(svg, top, name, mine, span, zero, {h: colours[g].stroke for h, g in host_groups.items()})
    legend_y = height - MARGIN - 6
    x = float(MARGIN)
    for group in groups:
        ET.SubElement(svg, "rect", {"x": _n(x), "y": _n(legend_y - 10), "width": "14", "height": "4",
                                    "fill": colours[group].stroke})
        _text(svg, x + 20, legend_y, group, fill=TEXT, size=12)
        x += 40 + len(group) * 8
    return svg


def _panel(svg: ET.Element, top: float, name: str, samples: Sequence[Sample], span: float, zero: float,
           colour_of: Mapping[str, str]) -> None:
    _text(svg, MARGIN, top - 6, name, weight="bold")
    ET.SubElement(svg, "rect", {"x": str(LEFT), "y": _n(top), "width": str(PANEL_WIDTH), "height": str(PANEL_HEIGHT),
                                "fill": "none", "stroke": GRID})
    if not samples:
        _text(svg, LEFT + PANEL_WIDTH / 2, top + PANEL_HEIGHT / 2, "no line of any host matched this metric",
              anchor="middle", fill=MUTED, style="italic")
        return
    low, high = min(s.value for s in samples), max(s.value for s in samples)
    if high == low:
        low, high = low - 1, high + 1
    step = nice_step(high - low, 4)

    def x(at: float) -> float:
        return LEFT + (at - zero) / span * PANEL_WIDTH

    def y(value: float) -> float:
        return top + PANEL_HEIGHT - (value - low) / (high - low) * PANEL_HEIGHT

    tick = (low // step) * step
    while tick <= high:
        if tick >= low:
            ET.SubElement(svg, "line", {"x1": str(LEFT), "x2": str(LEFT + PANEL_WIDTH), "y1": _n(y(tick)),
                                        "y2": _n(y(tick)), "stroke": GRID})
            _text(svg, LEFT - 6, y(tick) + 4, f"{tick:g}", anchor="end", fill=MUTED, size=11)
        tick += step
    for host in sorted({s.host for s in samples}, key=lambda h: int(h.split("-")[1])):
        points = [s for s in samples if s.host == host]
        colour = colour_of.get(host, TEXT)
        if len(points) > 1:
            ET.SubElement(svg, "polyline", {"points": " ".join(f"{_n(x(s.at))},{_n(y(s.value))}" for s in points),
                                            "fill": "none", "stroke": colour, "stroke-width": "1.6",
                                            "data-host": host})
        last = points[-1]
        ET.SubElement(svg, "circle", {"cx": _n(x(last.at)), "cy": _n(y(last.value)), "r": "2.5", "fill": colour,
                                      "data-host": host})
        _text(svg, min(x(last.at) + 5, LEFT + PANEL_WIDTH - 40), y(last.value) - 4, host, fill=colour, size=11,
              host=host)
    _text(svg, LEFT + PANEL_WIDTH, top + PANEL_HEIGHT + 14, f"{span:.0f} s", anchor="end", fill=MUTED, size=11)


def write(path: Path, title: str, names: Sequence[str], samples: Sequence[Sample], host_groups: Mapping[str, str],
          groups: Sequence[str], zero: float) -> Path:
    """Write the chart to `path` (UTF-8 SVG)."""
    return svg_file.write(path, build(title, names, samples, host_groups, groups, zero))
