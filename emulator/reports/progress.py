"""Quiet, honest progress: each step of a long piece of work (an image build, a run's start and
teardown) is one line with its elapsed time, and a tool's chatter goes to a log file instead of the
console.

On a terminal the line of the running step is redrawn in place about ten times a second (a spinner,
`12/16` when the step counts, the seconds so far) and replaced by `✓ step (12.3 s)` or `✗ step
(4.0 s)` when it ends. Elsewhere (a pipe, a file, CI's log) there are no escape codes: one line
when a step starts, a `still running` line every HEARTBEAT_SECONDS, one line when it ends. A
failed step is followed by the last TAIL_LINES lines of its output, so the cause is on screen while
the whole output stays in the log file. `verbose` streams every output line as it comes instead.

The escape codes are written here rather than with rich's Live display: the console's host log lines
arrive from one thread per host and are written by `emulator.reports.console.ConsoleReporter` under its own
lock; the running step's line is erased and redrawn around each of them under that same lock.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Protocol, TextIO

#: A running step off a terminal says it is still running this often (CI kills silent jobs).
HEARTBEAT_SECONDS = 30.0
#: How many of a failed step's last output lines are shown under its ✗ line.
TAIL_LINES = 20
#: How often a running step's line is redrawn on a terminal.
REFRESH_SECONDS = 0.1
INDENT = "      "
_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_CLEAR_LINE = "\r\x1b[K"


def is_terminal(stream: TextIO) -> bool:
    """A terminal that can redraw a line (not TERM=dumb, as Emacs' shell sets, nor a notebook's cell)."""
    return bool(getattr(stream, "isatty", lambda: False)()) and os.environ.get("TERM") != "dumb" \
        and not in_notebook(stream)


def in_notebook(stream: TextIO) -> bool:
    """Whether `stream` is a Jupyter kernel's output (ipykernel's `OutStream`, which is `sys.stdout` and
    `sys.stderr` in a notebook). A cell's output is not a terminal: it keeps every line, shows no cursor
    movement, and the kernel sets FORCE_COLOR=1 for the programs it runs, not for its own output, whose
    escape codes would stay in the saved notebook and in anything converted from it. So it gets plain
    lines. Told by the stream's class, so ipykernel is never imported here."""
    return type(stream).__module__.split(".")[0] == "ipykernel"


class StepReporter(Protocol):
    """What a long piece of work reports to: plain lines and steps. `emulator.reports.console.ConsoleReporter`
    and `StepPrinter` are two; `as_step_reporter` makes one of a function that prints a line."""

    def info(self, message: str) -> None: ...

    def task(self, title: str, total: int | None = None, log: LogFile | None = None) \
            -> contextlib.AbstractContextManager[Task]:
        """A step: shown as running while the `with` block runs, then as done or failed."""


class LogFile:
    """A log file the steps' tool output goes to, line by line (flushed, so `tail -f` follows it)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115 (closed by close())
        self._lock = threading.Lock()

    def write_line(self, line: str) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.write(line + "\n")
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def new_log(folder: Path, name: str, keep: int = 20) -> LogFile:
    """A new log file `folder/<name>-<UTC timestamp>.log`; all but the newest `keep` older logs of that
    name are deleted, so a machine that builds often does not fill up with them."""
    stamp = datetime.now().astimezone().strftime("%Y%m%dT%H%M%S")
    path = folder / f"{name}-{stamp}.log"
    n = 1
    while path.exists():
        n += 1
        path = folder / f"{name}-{stamp}-{n}.log"
    log = LogFile(path)
    old = sorted(folder.glob(f"{name}-*.log"), key=lambda p: p.stat().st_mtime)
    for stale in old[:-keep] if keep else old:
        if stale != path:
            stale.unlink(missing_ok=True)
    return log


class Task:
    """One running step. `advance()` counts (`12/16`), `log(line)` records a line of its tool output:
    into the log file, into the tail shown if the step fails, and on the console when verbose."""

    def __init__(self, printer: StepPrinter, title: str, total: int | None, log: LogFile | None) -> None:
        self.printer = printer
        self.title = title
        self.total = total
        self.done = 0
        self.started = time.monotonic()
        self.logfile = log
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        #: False: no ✓ line when the step succeeds (the caller says what came of it).
        self.show_success = True

    def advance(self, count: int = 1) -> None:
        self.done += count

    def update(self, done: int, total: int | None = None) -> None:
        self.done = done
        if total is not None:
            self.total = total

    def log(self, line: str) -> None:
        if self.logfile is not None:
            self.logfile.write_line(line)
        self.tail.append(line)
        if self.printer.verbose:
            self.printer.line(INDENT + line)

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    def counter(self) -> str:
        if self.total is None:
            return ""
        return f" {self.done}/{self.total}"


class StepPrinter:
    """Renders steps to a text stream (see the module's docstring). `live`: redraw the running step's
    line in place (a terminal); `quiet`: show nothing but failed steps; `verbose`: stream each
    `Task.log` line. `lock` is shared with whoever else writes to the terminal (`line` and the
    `clear`/`redraw` pair, called with the lock held, keep the running step's line at the bottom)."""

    def __init__(self, stream: TextIO, *, live: bool | None = None, quiet: bool = False, verbose: bool = False,
                 lock: threading.RLock | None = None, heartbeat: float = HEARTBEAT_SECONDS,
                 refresh: float = REFRESH_SECONDS) -> None:
        self.stream = stream
        self.live = is_terminal(stream) if live is None else live
        self.quiet = quiet
        self.verbose = verbose
        self.lock = lock or threading.RLock()
        self.heartbeat = heartbeat
        self.refresh = refresh
        self._running: Task | None = None
        self._drawn = False

    # -- output around the running step's line

    def line(self, text: str) -> None:
        """Print a line above the running step's line (which is redrawn below it)."""
        with self.lock:
            self.clear()
            self.stream.write(text + "\n")
            self.redraw()

    def info(self, message: str) -> None:
        if not self.quiet:
            self.line(message)

    def clear(self) -> None:
        if self._drawn:
            self.stream.write(_CLEAR_LINE)
            self._drawn = False

    def redraw(self) -> None:
        task = self._running
        if task is not None and self.live and not self.quiet:
            frame = _SPINNER[int(task.seconds / self.refresh) % len(_SPINNER)] if self.refresh else _SPINNER[0]
            end = f"{task.counter()} ({task.seconds:.0f} s)"
            # A line wider than the terminal would wrap, and `\r` would then redraw only its last part.
            room = max(10, shutil.get_terminal_size().columns - 3 - len(end))
            title = task.title if len(task.title) <= room else task.title[:room - 1] + "…"
            self.stream.write(f"{_CLEAR_LINE}{frame} {title}{end}")
            self._drawn = True
        self.stream.flush()

    # -- steps

    @contextlib.contextmanager
    def task(self, title: str, total: int | None = None, log: LogFile | None = None) -> Iterator[Task]:
        task = Task(self, title, total, log)
        if log is not None:
            log.write_line(f"==> {task.title}")
        with self.lock:
            outer, self._running = self._running, task
            if not self.live and not self.quiet:
                self.clear()
                self.stream.write(f"{task.title} ...\n")
            self.redraw()
        stop = threading.Event()
        ticker = threading.Thread(target=self._tick, args=(task, stop), name=f"progress {title[:40]}", daemon=True)
        ticker.start()
        try:
            yield task
        except BaseException as exc:
            stop.set()
            ticker.join()
            self._end(task, outer, ok=False, interrupted=isinstance(exc, KeyboardInterrupt))
            raise
        stop.set()
        ticker.join()
        self._end(task, outer, ok=True)

    def _tick(self, task: Task, stop: threading.Event) -> None:
        interval = self.refresh if self.live else self.heartbeat
        while not stop.wait(interval):
            with self.lock:
                if self._running is not task or self.quiet:
                    continue
                if self.live:
                    self.redraw()
                else:
                    self.stream.write(f"{INDENT}... {task.title} still running{task.counter()} "
                                      f"({task.seconds:.0f} s)\n")
                    self.stream.flush()

    def _end(self, task: Task, outer: Task | None, *, ok: bool, interrupted: bool = False) -> None:
        seconds = task.seconds
        if task.logfile is not None:
            task.logfile.write_line(f"<== {'done' if ok else 'FAILED'} in {seconds:.1f} s: {task.title}")
        with self.lock:
            self.clear()
            self._running = outer
            if ok and task.show_success and not self.quiet:
                self.stream.write(f"✓ {task.title}{task.counter()} ({seconds:.1f} s)\n")
            elif not ok:
                # Shown even when quiet: it is the cause of the error that follows.
                end = "interrupted after " if interrupted else ""
                self.stream.write(f"✗ {task.title}{task.counter()} ({end}{seconds:.1f} s)\n")
                if not self.verbose and not interrupted:  # verbose: the lines are on screen already
                    for line in task.tail:
                        self.stream.write(INDENT + line + "\n")
            self.redraw()


class _LineSink(io.TextIOBase):
    """A text stream that hands each complete line to a function (a `progress=print` callback)."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self.emit = emit
        self._buffer = ""

    def write(self, s: str) -> int:
        self._buffer += s
        *lines, self._buffer = self._buffer.split("\n")
        for line in lines:
            self.emit(line)
        return len(s)


def as_step_reporter(progress: StepReporter | Callable[[str], None], verbose: bool = False) -> StepReporter:
    """A StepReporter as it is, or one that hands each line (no escape codes) to `progress`."""
    if hasattr(progress, "task"):
        return progress  # type: ignore[return-value]
    return StepPrinter(_LineSink(progress), live=False, verbose=verbose)  # type: ignore[arg-type]
