"""What the SVG pictures share: the namespace, the font and its estimated widths, the greys, tick
steps, coordinates and text elements, and writing the file (timeline.svg, metrics.svg, tuning.svg).

Pure and cheap: standard-library XML elements only (no Graphviz, no font library). Text goes in as an
element's text, never pasted into markup, so ElementTree escapes whatever a name holds (`<`, `&`,
quotes): a job, host or metric name comes from the user's request and is drawn as written.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

SVG_NS = "http://www.w3.org/2000/svg"
FONT = "DejaVu Sans, Verdana, Helvetica, Arial, sans-serif"
FONT_SIZE = 13
GRID = "#e2e5e9"
TEXT = "#1f2328"
MUTED = "#5f6670"
# DejaVu Sans' advance widths in em (its hmtx table), grouped: narrow, digits, wide; anything
# else is taken as a lowercase letter. Rounded up, and scaled by WIDTH_SLACK for wider fonts.
_NARROW = {**dict.fromkeys(" .,:;'|!", 0.32), **dict.fromkeys("ijl", 0.28), **dict.fromkeys("ftr()[]-", 0.41)}
_WIDE = {**dict.fromkeys("mwMW", 0.98), **dict.fromkeys("ABCDEFGHIJKLNOPQRSTUVXYZ_", 0.76)}
_DIGIT = 0.64
_LOWER = 0.62
WIDTH_SLACK = 1.06


def nice_step(total: float, ticks: int = 6) -> float:
    """A tick interval of 1, 2 or 5 times a power of ten giving about `ticks` ticks over `total`."""
    raw = max(total, 1e-3) / ticks
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def text_width(text: str, size: float = FONT_SIZE) -> float:
    """About how many px `text` takes at `size` px (a little more, never much less)."""
    ems = sum(_NARROW.get(ch) or _WIDE.get(ch) or (_DIGIT if ch.isdigit() else _LOWER) for ch in text)
    return ems * size * WIDTH_SLACK


def number(value: float) -> str:
    """A coordinate with no more digits than a screen can show."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


def text(parent: ET.Element, x: float, y: float, content: str, *, anchor: str = "start", fill: str = TEXT,
         size: int = FONT_SIZE, weight: str = "normal", style: str = "normal", cls: str = "",
         host: str = "") -> ET.Element:
    """A <text> element at (x, y) holding `content` as text (escaped when written)."""
    attributes = {"x": number(x), "y": number(y), "fill": fill}
    if anchor != "start":
        attributes["text-anchor"] = anchor
    if size != FONT_SIZE:
        attributes["font-size"] = str(size)
    if weight != "normal":
        attributes["font-weight"] = weight
    if style != "normal":
        attributes["font-style"] = style
    if cls:
        attributes["class"] = cls
    if host:
        attributes["data-host"] = host
    element = ET.SubElement(parent, "text", attributes)
    element.text = content
    return element


def write(path: Path, svg: ET.Element) -> Path:
    """Write `svg` to `path` as an indented UTF-8 SVG file."""
    tree = ET.ElementTree(svg)
    ET.indent(tree)
    with path.open("wb") as out:
        tree.write(out, encoding="utf-8", xml_declaration=True)
    return path
