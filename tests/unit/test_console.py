"""console.py and logs.py: what the user sees while a job runs."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from emulator.jobspec import validate
from emulator.planning.plan import make_plan
from emulator.reports.console import ConsoleReporter, RecordingReporter, use_colour
from emulator.reports.progress import is_terminal
from emulator.run.logs import LogCollector


def test_prefixes_are_aligned_like_docker_compose() -> None:
    out = io.StringIO()
    reporter = ConsoleReporter([("algo-1", "data_group"), ("algo-10", "dnn")], out=out, colour=False)
    reporter.log_line("algo-1", "data_group", "hello")
    reporter.log_line("algo-10", "dnn", "world")
    assert out.getvalue().splitlines() == ["algo-1 (data_group) | hello", "algo-10 (dnn)       | world"]


def test_each_host_gets_its_own_colour() -> None:
    out = io.StringIO()
    reporter = ConsoleReporter([("algo-1", "a"), ("algo-2", "a")], out=out, colour=True)
    reporter.log_line("algo-1", "a", "x")
    reporter.log_line("algo-2", "a", "y")
    first, second = out.getvalue().splitlines()
    assert first.startswith("\x1b[") and second.startswith("\x1b[")
    assert first.split("m", 1)[0] != second.split("m", 1)[0]


def test_steps_are_numbered_on_stderr() -> None:
    out, err = io.StringIO(), io.StringIO()
    reporter = ConsoleReporter(out=out, err=err, colour=False)
    reporter.step("staging")
    reporter.step("starting")
    assert err.getvalue().splitlines() == ["[1] staging", "[2] starting"]
    assert out.getvalue() == ""


def test_no_colour_when_not_a_terminal_or_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_colour(io.StringIO()) is False
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert use_colour(io.StringIO()) is True
    monkeypatch.setenv("NO_COLOR", "1")
    assert use_colour(io.StringIO()) is False


class _CellOutput(io.StringIO):
    """Stands for ipykernel's OutStream, a notebook's sys.stdout and sys.stderr: told by its class's
    module; said to be a terminal, as the kernel may be configured to say."""

    def isatty(self) -> bool:
        return True


_CellOutput.__module__ = "ipykernel.iostream"


def test_a_notebooks_cell_gets_plain_lines_whatever_the_kernel_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    """No escape code (colour, cursor movement) and no redrawn bar in a cell: it would stay in the saved
    notebook. The kernel sets FORCE_COLOR=1 and TERM=xterm-color for the programs it runs."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    out, err = _CellOutput(), _CellOutput()
    assert not use_colour(out) and not is_terminal(out)
    reporter = ConsoleReporter([("algo-1", "a"), ("algo-2", "b")], out=out, err=err)
    assert reporter.live is False
    with reporter.task("starting hosts"):
        reporter.progress("algo-1", "a", "10%")
        reporter.log_line("algo-1", "a", "100%")
    reporter.warn("careful")
    assert out.getvalue() == "algo-1 (a) | 10%\nalgo-1 (a) | 100%\n"
    assert "\x1b" not in out.getvalue() + err.getvalue() and "\r" not in err.getvalue()
    assert err.getvalue().splitlines()[-1] == "warning: careful"


def test_log_collector_splits_chunks_into_lines_and_saves_raw_bytes(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "t.py").write_text("")
    spec = validate({"job_name": "j", "entry_point": "t.py", "source_dir": "code", "instance_type": "ml.c5.xlarge",
                     "instance_count": 1}, base_dir=tmp_path)
    plan = make_plan(spec, "j")
    (Path(plan.job_dir) / "logs").mkdir(parents=True)
    reporter = RecordingReporter()
    logs = LogCollector(plan, reporter)
    for chunk in (b"first li", b"ne\nsecond\r\nthi", b"rd \xff"):
        logs("j-algo-1", chunk)
    logs.close()
    logs("j-algo-1", b"too late\n")  # a stream that outlived the wait: dropped, no error
    assert [line for _, _, line in reporter.lines] == ["first line", "second", "third \ufffd"]
    assert (Path(plan.job_dir) / "logs" / "algo-1.log").read_bytes() == b"first line\nsecond\r\nthird \xff"
    assert logs.tail("algo-1")[-1] == "third \ufffd"


def test_progress_bars_are_redrawn_below_the_log_lines_on_a_terminal_one_line_per_host() -> None:
    out = io.StringIO()
    reporter = ConsoleReporter([("algo-1", "a"), ("algo-2", "b")], out=out, err=out, colour=False, live=True)
    reporter.progress("algo-1", "a", "10%")
    reporter.progress("algo-2", "b", "50%")
    reporter.progress("algo-1", "a", "20%")
    reporter.log_line("algo-2", "b", "a line of algo-2")
    reporter.log_line("algo-1", "a", "100%")
    up = "\x1b[{}F\x1b[J".format
    assert out.getvalue() == (
        "algo-1 (a) | 10%\n"
        + up(1) + "algo-1 (a) | 10%\nalgo-2 (b) | 50%\n"
        + up(2) + "algo-1 (a) | 20%\nalgo-2 (b) | 50%\n"
        # algo-2's line ends its bar and goes above the bars still running
        + up(2) + "algo-2 (b) | a line of algo-2\nalgo-1 (a) | 20%\n"
        + up(1) + "algo-1 (a) | 100%\n"
    )


def test_a_bar_wider_than_the_terminal_is_cut_to_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import shutil

    monkeypatch.setattr(shutil, "get_terminal_size", lambda *a: os.terminal_size((40, 24)))
    out = io.StringIO()
    reporter = ConsoleReporter([("algo-1", "a")], out=out, err=out, colour=True, live=True)
    reporter.progress("algo-1", "a", "x" * 100)
    drawn = out.getvalue().rstrip("\n")
    assert len(re.sub(r"\x1b\[[0-9;]*m", "", drawn)) == 39


def test_off_a_terminal_each_shown_progress_state_is_a_line_of_its_own() -> None:
    out = io.StringIO()
    reporter = ConsoleReporter([("algo-1", "a")], out=out, err=io.StringIO(), colour=False)
    assert reporter.live is False and reporter.progress_interval >= 1
    reporter.progress("algo-1", "a", "10%")
    reporter.log_line("algo-1", "a", "100%")
    assert out.getvalue() == "algo-1 (a) | 10%\nalgo-1 (a) | 100%\n"


def test_a_warning_goes_above_the_running_bars() -> None:
    out = io.StringIO()
    reporter = ConsoleReporter([("algo-1", "a")], out=out, err=out, colour=False, live=True)
    reporter.progress("algo-1", "a", "10%")
    reporter.warn("something")
    assert out.getvalue() == "algo-1 (a) | 10%\n\x1b[1F\x1b[Jwarning: something\nalgo-1 (a) | 10%\n"
