"""Links in Markdown files, resolved as GitHub resolves them: a relative path to a file or folder,
and a `#anchor` to a heading of the target (or of the file itself).

MkDocs checks the links of the pages under docs/ (`mkdocs build --strict`), but README.md,
CONTRIBUTING.md and tests/README-promises.md are outside its docs_dir; the unit tests check theirs
with these helpers. Only what a reader can click is read: fenced code blocks and inline code are
skipped, since a `[x](y)` there is text, not a link.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"(`+).+?\1")
# [text](target) and ![alt](target), with an optional "title"; the text may hold inline code.
_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


@dataclass(frozen=True)
class Link:
    source: Path
    line: int
    target: str

    def __str__(self) -> str:
        return f"{self.source.name}:{self.line}: {self.target}"


def prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: markup dropped, lower case, every character that is not a
    letter, digit, `-`, `_` or space removed, spaces turned into hyphens (not collapsed)."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading anchors by its text
    text = text.replace("*", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor the headings of `path` give, a repeated heading's with GitHub's `-1`, `-2` suffix."""
    seen: Counter[str] = Counter()
    found = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match[2])
        found.add(base if seen[base] == 0 else f"{base}-{seen[base]}")
        seen[base] += 1
    return found


def links(path: Path) -> list[Link]:
    """The links of `path` a reader can click, relative and external alike."""
    found = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for match in _LINK.finditer(_CODE_SPAN.sub("", line)):
            found.append(Link(path, number, match[1]))
    return found


def broken(link: Link) -> str | None:
    """Why `link` leads nowhere (a missing file or folder, a missing anchor), or None if it resolves.
    External links (`https:`, `mailto:`) are not followed."""
    if _EXTERNAL.match(link.target):
        return None
    file_part, _, anchor = link.target.partition("#")
    target = (link.source.parent / file_part).resolve() if file_part else link.source
    if not target.exists():
        return f"{link}: no such file or folder {file_part}"
    if anchor and (target.is_dir() or target.suffix != ".md"):
        return f"{link}: an anchor into {file_part}, which is not a Markdown file"
    if anchor and anchor not in anchors(target):
        return f"{link}: {target.name} has no heading whose anchor is #{anchor}"
    return None


def broken_links(*paths: Path) -> list[str]:
    """Every link of `paths` that leads nowhere, with its file, line and reason."""
    return [reason for path in paths for link in links(path) if (reason := broken(link)) is not None]
