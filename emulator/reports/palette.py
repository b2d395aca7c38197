"""One colour per instance group, shared by the pictures: the cluster diagram (`emulator.reports.diagram`) and
each run's timeline (`emulator.reports.timeline`), so a group looks the same in both.

The hues follow the order of the console's palette (docker compose's: cyan, yellow, green, magenta,
blue, ...; `emulator.reports.console`), which colours hosts: with the default host order algo-1, the first
host of the first group, is cyan in the console and the first group is cyan here. Fills are light so
that black text on them reads; each has a darker stroke of the same hue for outlines. Red is left out:
the pictures mark a failure in red.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Colour:
    fill: str  # light: a bar or a cluster's background, under black text
    stroke: str  # dark, same hue: outlines and coloured text


_PALETTE = (
    Colour("#a5e3ea", "#137d89"),  # cyan
    Colour("#fde28e", "#9a7400"),  # yellow
    Colour("#b9e3a8", "#3a7a27"),  # green
    Colour("#efb8e6", "#932b83"),  # magenta
    Colour("#b0cbf2", "#2b5ca6"),  # blue
    Colour("#ffc9a0", "#a9560f"),  # orange
    Colour("#d3c4f0", "#5b3fa0"),  # violet
    Colour("#cfd6dc", "#4d5b66"),  # grey
)
FAILURE = "#d62728"  # the first failing host's outline and label
# tuning.svg's trials by how they ended: blue and orange of the palette (a stopped trial is a
# completed one cut short, so a neighbouring hue), failure red, a trial still running grey.
COMPLETED = _PALETTE[4].stroke
STOPPED = _PALETTE[5].stroke
RUNNING = _PALETTE[7].stroke


def group_colours(groups: Sequence[str]) -> dict[str, Colour]:
    """Each group (in spec order) -> its colour; more groups than colours reuse them in turn."""
    return {name: _PALETTE[i % len(_PALETTE)] for i, name in enumerate(groups)}
