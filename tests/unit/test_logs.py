"""LogCollector: every byte to the file at once (bounded memory, masked), the console as lines and live
`\\r` updates, per stream, summarised when it falls behind; the FailureReason tail from the file's bytes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from emulator.jobspec import validate
from emulator.planning.plan import Plan, make_plan
from emulator.reports.console import RecordingReporter
from emulator.run import logs as logs_module
from emulator.run.logs import CUT_ANYWHERE, CUT_AT_CARRIAGE_RETURN, STDERR, STDOUT, LogCollector, display_text

SECRET = "s3cr3t-value-123"


def plan_with(tmp_path: Path, environment: dict[str, str] | None = None, hosts: int = 1) -> Plan:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "t.py").write_text("")
    spec = validate({"job_name": "j", "entry_point": "t.py", "source_dir": "code", "instance_type": "ml.c5.xlarge",
                     "instance_count": hosts, "environment": environment or {}}, base_dir=tmp_path)
    plan = make_plan(spec, "j")
    (Path(plan.job_dir) / "logs").mkdir(parents=True)
    return plan


def log_bytes(plan: Plan, host: str = "algo-1") -> bytes:
    return (Path(plan.job_dir) / "logs" / f"{host}.log").read_bytes()


def test_each_complete_line_reaches_the_file_before_the_job_ends(tmp_path: Path) -> None:
    plan = plan_with(tmp_path)
    logs = LogCollector(plan, RecordingReporter())
    logs("j-algo-1", b"one\ntw")
    assert log_bytes(plan) == b"one\n"  # readable while the job runs (`hetero-emu logs`)
    logs("j-algo-1", b"o\n")
    assert log_bytes(plan) == b"one\ntwo\n"
    logs.close()


def test_a_line_that_never_ends_is_written_at_its_carriage_returns_and_then_anywhere(tmp_path: Path) -> None:
    plan = plan_with(tmp_path, {"MY_TOKEN": SECRET})
    logs = LogCollector(plan, RecordingReporter())
    bar = b"".join(b"\rprogress %06d" % i for i in range(CUT_AT_CARRIAGE_RETURN // 10))
    logs("j-algo-1", bar)
    written = log_bytes(plan)
    assert written and bar.startswith(written) and written.endswith(b"\r")
    # No \r and no \n at all: held until the hard cap, then written except the bytes that could
    # start a secret; a secret straddling that cut is still masked whole.
    blob = b"x" * (CUT_ANYWHERE - 5) + SECRET.encode() + b"y" * 100
    for i in range(0, len(blob), 4096):
        logs("j-algo-1", blob[i:i + 4096], STDOUT)
    pending = sum(len(v) for v in logs._pending.values())
    assert pending < CUT_ANYWHERE + 4096
    logs.close()
    assert log_bytes(plan) == bar + blob.replace(SECRET.encode(), b"***")


def test_stdout_and_stderr_keep_their_own_pending_lines(tmp_path: Path) -> None:
    plan = plan_with(tmp_path)
    reporter = RecordingReporter()
    logs = LogCollector(plan, reporter)
    logs("j-algo-1", b"loss=0.", STDOUT)
    logs("j-algo-1", b"\rstep 1/2\rstep 2/2\n", STDERR)
    logs("j-algo-1", b"25\n", STDOUT)
    logs.close()
    assert [line for _, _, line in reporter.lines] == ["step 2/2", "loss=0.25"]
    assert log_bytes(plan) == b"\rstep 1/2\rstep 2/2\nloss=0.25\n"


def test_a_carriage_return_bar_is_shown_as_updates_then_as_its_last_state(tmp_path: Path) -> None:
    plan = plan_with(tmp_path)
    reporter = RecordingReporter()  # progress_interval 0: every complete state is shown
    logs = LogCollector(plan, reporter)
    for i in range(0, 101, 25):
        logs("j-algo-1", b"\rprogress %d%%" % i, STDERR)
        time.sleep(0.02)
    logs("j-algo-1", b"\n", STDERR)
    logs.close()
    updates = [text for _, _, text in reporter.updates]
    # A state is shown once the next one starts; the last one is the finished line.
    assert updates and updates == sorted(updates, key=lambda t: int(t.split()[1][:-1]))
    assert set(updates) <= {"progress 0%", "progress 25%", "progress 50%", "progress 75%"}
    assert [line for _, _, line in reporter.lines] == ["progress 100%"]
    assert log_bytes(plan) == b"".join(b"\rprogress %d%%" % i for i in range(0, 101, 25)) + b"\n"


def test_updates_are_throttled_to_the_reporters_interval(tmp_path: Path) -> None:
    plan = plan_with(tmp_path)
    reporter = RecordingReporter()
    reporter.progress_interval = 60.0
    logs = LogCollector(plan, reporter)
    for i in range(50):
        logs("j-algo-1", b"\r%d" % i)
    logs("j-algo-1", b"\n")
    logs.close()
    assert len(reporter.updates) == 1
    assert [line for _, _, line in reporter.lines] == ["49"]


def fed_with_a_pause(tmp_path: Path, first: bytes, pause: float, then: bytes) -> RecordingReporter:
    """What a console showed of one host's output that came as `first`, `pause` seconds of quiet, `then`."""
    reporter = RecordingReporter()
    logs = LogCollector(plan_with(tmp_path), reporter)
    logs("j-algo-1", first)
    time.sleep(pause)
    logs("j-algo-1", then)
    logs.close()
    return reporter


def test_an_idle_console_sleeps_until_it_is_fed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the RecordingReporter's 0 s progress interval the console thread once woke without end
    while the hosts were quiet, a whole core taken from their containers."""
    wakes = []
    real = logs_module._ConsoleFeed._show_due_progress
    monkeypatch.setattr(logs_module._ConsoleFeed, "_show_due_progress",
                        lambda self, now, only=None: (wakes.append(only), real(self, now, only))[1])
    reporter = fed_with_a_pause(tmp_path, b"one line\n", 0.5, b"two\n")
    assert [line for _, _, line in reporter.lines] == ["one line", "two"]
    assert len([only for only in wakes if only is None]) <= 5, len(wakes)


def test_a_crlf_split_between_chunks_is_one_line_and_no_update(tmp_path: Path) -> None:
    reporter = fed_with_a_pause(tmp_path, b"windows line\r", 0.05, b"\nnext\r\n")
    assert reporter.updates == []
    assert [line for _, _, line in reporter.lines] == ["windows line", "next"]


@pytest.mark.slow  # a 20,000-line flood through a console held back on purpose
def test_a_slow_console_is_summarised_and_the_file_still_gets_every_byte(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs_module, "CONSOLE_BACKLOG", 64 * 1024)
    plan = plan_with(tmp_path, hosts=2)

    # The console shows nothing until the whole flood is fed: it has fallen behind at the end whatever
    # the machine's load (a console that caught up between two chunks showed the last ones as they came,
    # and ended with no "last lines", which a loaded machine's scheduling could make happen).
    fed = threading.Event()

    class SlowConsole(RecordingReporter):
        def log_line(self, host: str, group: str, line: str) -> None:
            fed.wait(30)
            time.sleep(0.0005)
            super().log_line(host, group, line)

    reporter = SlowConsole()
    logs = LogCollector(plan, reporter)
    block = b"".join(b"line %07d of a flood\n" % i for i in range(20_000))
    done = threading.Event()

    def quiet_host() -> None:
        logs("j-algo-2", b"a quiet host's line\n")
        done.set()

    for i in range(0, len(block), 8192):
        logs("j-algo-1", block[i:i + 8192])
    fed.set()
    threading.Thread(target=quiet_host).start()
    done.wait(5)
    logs.close()
    assert log_bytes(plan, "algo-1") == block
    shown = [line for host, _, line in reporter.lines if host == "algo-1"]
    not_shown = sum(int(w.split()[1].replace(",", "")) for w in reporter.warnings
                    if w.startswith("algo-1:") and "not shown" in w)
    assert 0 < len(shown) < 20_000 and not_shown > 0
    counts = [w for w in reporter.warnings if "not shown" in w]
    assert counts and all("not shown (the console fell behind), see" in w and w.endswith("algo-1.log")
                          for w in counts)
    # The flood's last lines are always shown, after the count of what was not.
    assert shown[-3:] == [f"line {i:07d} of a flood" for i in range(19_997, 20_000)]
    assert reporter.warnings[-1] == "algo-1: the last lines of its output:"
    # The flooding host's backlog does not hide another host's line.
    assert ("algo-2", "ml.c5.xlarge", "a quiet host's line") not in reporter.lines  # group name, not type
    assert any(host == "algo-2" and line == "a quiet host's line" for host, _, line in reporter.lines)


def test_a_flooded_hosts_last_lines_are_shown_when_the_job_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The audit's finding: under a flood the console dropped each host's last lines too (a final
    "done" was missing). Every line after the backlog filled is dropped here; the last TAIL_LINES of
    each stream are shown at the end, a line without a newline among them, and the count of lines not
    shown leaves them out."""
    monkeypatch.setattr(logs_module, "CONSOLE_BACKLOG", 100)
    plan = plan_with(tmp_path, hosts=2)
    reporter = RecordingReporter()
    logs = LogCollector(plan, reporter)
    # Hold the console thread back: everything after the first 100 bytes is over the backlog.
    feed = logs._console
    assert feed is not None
    with feed._cond:
        for i in range(500):
            logs("j-algo-1", b"step %03d\n" % i)
        logs("j-algo-1", b"training done")  # the last line, unterminated
        for i in range(300):
            logs("j-algo-2", b"ERR %03d\n" % i, logs_module.STDERR)
    logs.close()
    one = [line for host, _, line in reporter.lines if host == "algo-1"]
    assert one[-logs_module.TAIL_LINES:] == [f"step {i:03d}" for i in range(491, 500)] + ["training done"]
    two = [line for host, _, line in reporter.lines if host == "algo-2"]
    assert two[-logs_module.TAIL_LINES:] == [f"ERR {i:03d}" for i in range(290, 300)]
    not_shown = {w.split(":")[0]: int(w.split()[1].replace(",", "")) for w in reporter.warnings if "not shown" in w}
    assert not_shown["algo-1"] + len(one) == 501 and not_shown["algo-2"] + len(two) == 300
    assert log_bytes(plan, "algo-1").endswith(b"step 499\ntraining done")


def test_tail_comes_from_the_files_bytes_even_when_the_console_dropped_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs_module, "CONSOLE_BACKLOG", 10)
    plan = plan_with(tmp_path, {"DB_PASSWORD": SECRET})
    logs = LogCollector(plan, RecordingReporter())
    for i in range(30):
        logs("j-algo-1", b"line %d\n" % i)
    logs("j-algo-1", f"\rstep 1\rstep 2 {SECRET}\nTraceback: boom".encode())
    logs.close()
    assert logs.tail("algo-1") == [f"line {i}" for i in range(22, 30)] + ["step 2 ***", "Traceback: boom"]


def test_display_text_is_what_a_terminal_shows() -> None:
    assert display_text(b"a\rb\rc") == "c"
    assert display_text(b"done\r") == "done"
    assert display_text(b"\r100%|#####|") == "100%|#####|"
    assert display_text(b"bad \xff") == "bad \ufffd"
