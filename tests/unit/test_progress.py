"""emulator/reports/progress.py: one line per step, a live line on a terminal, the tail of a failed step,
the log file."""

from __future__ import annotations

import io
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from emulator.reports.console import ConsoleReporter
from emulator.reports.progress import TAIL_LINES, StepPrinter, as_step_reporter, new_log


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


DONE = re.compile(r"^✓ (?P<title>.*) \((?P<seconds>\d+\.\d) s\)$")
ESCAPE = "\x1b["


def test_off_a_terminal_a_step_is_a_line_at_its_start_and_one_at_its_end(tmp_path: Path) -> None:
    out = io.StringIO()
    printer = StepPrinter(out, live=False)
    log = new_log(tmp_path, "build-x")
    with printer.task("wheels: pip wheel (3 requirements)", log=log) as task:
        for n in range(3):
            task.log(f"Collecting pkg{n}")
    log.close()

    lines = out.getvalue().splitlines()
    assert lines[0] == "wheels: pip wheel (3 requirements) ..."
    assert DONE.match(lines[1]) and DONE.match(lines[1])["title"] == "wheels: pip wheel (3 requirements)"  # type: ignore[index]
    assert len(lines) == 2
    assert ESCAPE not in out.getvalue() and "\r" not in out.getvalue()
    text = log.path.read_text()
    assert all(f"Collecting pkg{n}" in text for n in range(3))


def test_on_a_terminal_the_running_line_is_redrawn_with_count_and_seconds() -> None:
    out = io.StringIO()
    printer = StepPrinter(out, live=True, refresh=0.01)
    with printer.task("creating network n and 4 containers", total=4) as task:
        task.advance(2)
        wait_for(lambda: "2/4" in out.getvalue())  # the ticker redrew the line
        task.advance(2)

    text = out.getvalue()
    # Redrawn in place (carriage return, clear line), with a spinner frame, the count and the seconds.
    assert re.search(r"\r\x1b\[K[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] creating network n and 4 containers 2/4 \(\d+ s\)", text)
    assert text.count("\r\x1b[K") >= 3  # drawn, redrawn by the ticker, cleared at the end
    last = text.rsplit("\r\x1b[K", 1)[1]
    assert DONE.match(last.rstrip("\n")), last
    assert last.rstrip("\n").startswith("✓ creating network n and 4 containers 4/4 (")


def test_a_failed_step_shows_the_tail_of_its_output_and_the_log_has_all(tmp_path: Path) -> None:
    out = io.StringIO()
    printer = StepPrinter(out, live=False)
    log = new_log(tmp_path, "build-x")
    with pytest.raises(RuntimeError, match="tool broke"), printer.task("base rootfs", log=log) as task:
        for n in range(TAIL_LINES + 5):
            task.log(f"line {n}")
        raise RuntimeError("tool broke")
    log.close()

    lines = out.getvalue().splitlines()
    assert lines[0] == "base rootfs ..."
    assert re.fullmatch(r"✗ base rootfs \(\d+\.\d s\)", lines[1])
    # The last TAIL_LINES lines, indented, in order; the first five only in the log file.
    assert [line.strip() for line in lines[2:]] == [f"line {n}" for n in range(5, TAIL_LINES + 5)]
    text = log.path.read_text()
    assert "line 0\n" in text and f"line {TAIL_LINES + 4}\n" in text
    assert "FAILED" in text


def test_verbose_streams_the_output_and_does_not_repeat_it_on_failure() -> None:
    out = io.StringIO()
    printer = StepPrinter(out, live=False, verbose=True)
    with pytest.raises(RuntimeError), printer.task("docker build") as task:
        task.log("Step 1/2 : FROM base")
        raise RuntimeError("no")

    lines = out.getvalue().splitlines()
    assert lines[0] == "docker build ..."
    assert lines[1].strip() == "Step 1/2 : FROM base"
    assert lines[2].startswith("✗ docker build (")
    assert len(lines) == 3


def test_quiet_shows_only_a_failed_step() -> None:
    out = io.StringIO()
    printer = StepPrinter(out, live=True, quiet=True, refresh=0.01)
    with printer.task("fine") as task:
        task.log("chatter")
        time.sleep(0.05)
    assert out.getvalue() == ""
    with pytest.raises(ValueError), printer.task("broken") as task:
        task.log("the cause")
        raise ValueError
    assert out.getvalue().splitlines()[0].startswith("✗ broken (")
    assert out.getvalue().splitlines()[1].strip() == "the cause"


def test_a_long_step_off_a_terminal_says_it_is_still_running() -> None:
    out = io.StringIO()
    printer = StepPrinter(out, live=False, heartbeat=0.02)
    with printer.task("pip wheel"):
        wait_for(lambda: "still running" in out.getvalue())
    lines = out.getvalue().splitlines()
    assert any(re.fullmatch(r"\s+\.\.\. pip wheel still running \(\d+ s\)", line) for line in lines[1:-1]), lines
    assert ESCAPE not in out.getvalue()


def test_an_interrupted_step_says_so_without_a_tail() -> None:
    out = io.StringIO()
    printer = StepPrinter(out, live=False)
    with pytest.raises(KeyboardInterrupt), printer.task("mmdebstrap") as task:
        task.log("Get:1 http://deb.debian.org")
        raise KeyboardInterrupt
    assert re.fullmatch(r"✗ mmdebstrap \(interrupted after \d+\.\d s\)", out.getvalue().splitlines()[-1])


def test_a_line_printing_callback_gets_plain_lines() -> None:
    got: list[str] = []
    steps = as_step_reporter(got.append)
    steps.info("building x")
    with steps.task("wheels") as task:
        task.log("not shown")
    assert got[:2] == ["building x", "wheels ..."]
    assert got[2].startswith("✓ wheels (")
    assert len(got) == 3


def test_old_logs_of_a_name_are_pruned(tmp_path: Path) -> None:
    for n in range(5):
        (tmp_path / f"build-x-2020010{n}T000000.log").write_text("old")
        time.sleep(0.01)
    (tmp_path / "build-other-20200101T000000.log").write_text("other")
    log = new_log(tmp_path, "build-x", keep=3)
    log.close()
    left = sorted(p.name for p in tmp_path.glob("build-x-*.log"))
    assert log.path.name in left and len(left) == 3
    assert "build-x-20200104T000000.log" in left and "build-x-20200100T000000.log" not in left
    assert (tmp_path / "build-other-20200101T000000.log").exists()


def test_console_log_lines_print_above_the_running_step_line() -> None:
    out, err = io.StringIO(), io.StringIO()
    reporter = ConsoleReporter([("algo-1", "a")], out=out, err=err, colour=False, live=True)
    reporter.printer.refresh = 10.0  # no ticker redraws: only the ones around the log line
    with reporter.task("starting algo-1 together"):
        reporter.log_line("algo-1", "a", "hello")
    assert out.getvalue() == "algo-1 (a) | hello\n"
    # Drawn, cleared for the log line, drawn again, cleared for the end line.
    assert len(re.findall(r"\r\x1b\[K[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] \[1\] starting algo-1 together \(\d+ s\)", err.getvalue())) == 2
    assert re.search(r"\r\x1b\[K✓ \[1\] starting algo-1 together \(\d+\.\d s\)\n$", err.getvalue())


def test_console_tasks_are_numbered_with_the_steps_and_silent_when_quiet() -> None:
    err = io.StringIO()
    reporter = ConsoleReporter(out=io.StringIO(), err=err, colour=False, live=False)
    reporter.step("staging")
    with reporter.task("creating network n and 2 containers", total=2) as task:
        task.advance()
        task.advance()
    lines = err.getvalue().splitlines()
    assert lines[:2] == ["[1] staging", "[2] creating network n and 2 containers ..."]
    assert re.fullmatch(r"✓ \[2\] creating network n and 2 containers 2/2 \(\d+\.\d s\)", lines[2])
    quiet_err = io.StringIO()
    quiet = ConsoleReporter(out=io.StringIO(), err=quiet_err, colour=False, live=True, quiet=True)
    with quiet.task("removing 2 containers"):
        pass
    assert quiet_err.getvalue() == ""


def test_log_lines_from_other_threads_do_not_interleave_with_the_step_line() -> None:
    out = io.StringIO()
    reporter = ConsoleReporter([("algo-1", "a")], out=out, err=out, colour=False, live=True)
    reporter.printer.refresh = 0.001

    def write_lines() -> None:
        for i in range(200):
            reporter.log_line("algo-1", "a", f"x{i}")

    with reporter.task("starting"):
        writers = [threading.Thread(target=write_lines) for _ in range(4)]
        for w in writers:
            w.start()
        for w in writers:
            w.join()
    # Every log line is whole and starts right after a cleared step line or a newline.
    for chunk in out.getvalue().split("\r\x1b[K"):
        for line in chunk.splitlines()[:-1] if not chunk.endswith("\n") else chunk.splitlines():
            assert line.startswith(("algo-1 (a) | x", "✓ [1] starting")), repr(line)
