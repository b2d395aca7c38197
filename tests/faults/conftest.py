"""The fault suite prints its table (fault, status reached, seconds to full teardown, resources left)
at the end of the session, and writes it to $FAULTS_TABLE when that is set."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import ROWS


def watchers_under(folder: Path) -> list[str]:
    """Command lines of watcher processes (backend/reaper.py) logging under `folder`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        text = [a.decode(errors="replace") for a in argv if a]
        if "emulator.backend.reaper" in text and any(a.startswith(str(folder)) for a in text):
            found.append(" ".join(text))
    return found


@pytest.fixture(scope="session", autouse=True)
def no_watcher_left_running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Nothing the suite started is left running: every watcher process exits once its job is gone."""
    yield
    base = tmp_path_factory.getbasetemp()
    deadline = time.monotonic() + 15
    while watchers_under(base) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = watchers_under(base)
    assert not left, f"watcher processes still running: {left}"


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
