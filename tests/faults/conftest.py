"""The fault suite prints its table (fault, status reached, seconds to full teardown, resources left)
at the end of the session, and writes it to $FAULTS_TABLE when that is set."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness import ROWS


def table() -> str:
    lines = ["| fault | status reached | seconds to full teardown | resources left |", "|---|---|---|---|"]
    lines += [f"| {r.fault} | {r.status} | {r.teardown_seconds:.1f} | {r.left} |" for r in ROWS]
    return "\n".join(lines)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not ROWS:
        return
    terminalreporter.write_sep("-", "fault table")
    terminalreporter.write_line(table())
    target = os.environ.get("FAULTS_TABLE")
    if target:
        Path(target).write_text(table() + "\n")
