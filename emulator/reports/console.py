"""What the user sees while a job runs: numbered steps, `algo-N (group) |` log prefixes in a colour per
host (as docker compose does), warnings. The runner talks to a `Reporter`; tests use a recording one.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import sys
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Protocol, TextIO

from emulator.reports.progress import LogFile, StepPrinter, Task, in_notebook

# docker compose's palette order: easy to tell neighbours apart.
_COLOURS = ("36", "33", "32", "35", "34", "96", "93", "92", "95", "94")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Reporter(Protocol):
    def set_hosts(self, hosts: Sequence[tuple[str, str]]) -> None:
        """Learn the (host, group) pairs before the first log line, to align and colour prefixes."""

    def step(self, message: str) -> None: ...

    def task(self, title: str, total: int | None = None, log: LogFile | None = None) \
            -> AbstractContextManager[Task]:
        """A numbered step shown as running while the `with` block runs (`emulator.reports.progress`), then
        as done (`✓ [3] title (1.2 s)`) or failed."""

    def info(self, message: str) -> None: ...

    def warn(self, message: str) -> None: ...

    def log_line(self, host: str, group: str, line: str) -> None: ...

    def progress(self, host: str, group: str, text: str) -> None:
        """The current state of a line the host rewrites with `\\r` (a progress bar); the next
        `log_line` of that host ends it."""


def use_colour(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org) nor in a
    notebook's cell, whatever FORCE_COLOR says (`in_notebook`)."""
    if os.environ.get("NO_COLOR") or in_notebook(stream):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return bool(getattr(stream, "isatty", lambda: False)())


class ConsoleReporter:
    """Prints to stderr (steps, warnings) and stdout (host logs). Thread-safe: log lines arrive from
    one thread per host."""

    def __init__(
        self,
        hosts: Sequence[tuple[str, str]] = (),
        out: TextIO | None = None,
        err: TextIO | None = None,
        colour: bool | None = None,
        quiet: bool = False,
        live: bool | None = None,
        verbose: bool = False,
    ) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.colour = use_colour(self.out) if colour is None else colour
        self.quiet = quiet
        # On a terminal a progress bar is redrawn in place; elsewhere (a file, CI's log, a notebook) each shown
        # state is a line of its own, so fewer are shown.
        self.live = bool(getattr(self.out, "isatty", lambda: False)()) and not in_notebook(self.out) \
            if live is None else live
        self.progress_interval = 0.1 if self.live else 2.0
        # Live progress bars, one line per host, drawn below the log lines (as pip, cargo or
        # `docker compose pull` draw theirs); `_drawn` lines of the terminal hold them right now.
        self._bars: dict[str, str] = {}
        self._drawn = 0
        self._lock = threading.RLock()
        self._step = 0
        self._prefixes: dict[str, str] = {}
        self.set_hosts(hosts)
        # The running step's line (a spinner on a terminal) on stderr, below everything else.
        self.printer = StepPrinter(self.err, live=live, quiet=quiet, verbose=verbose, lock=self._lock)

    def set_hosts(self, hosts: Sequence[tuple[str, str]]) -> None:
        """Fix the prefix width and colour of each host: aligned `algo-2 (data_group) |` columns."""
        labels = {host: f"{host} ({group})" for host, group in hosts}
        width = max((len(v) for v in labels.values()), default=0)
        for i, (host, _) in enumerate(hosts):
            text = f"{labels[host]:<{width}} |"
            if self.colour:
                text = f"\x1b[{_COLOURS[i % len(_COLOURS)]}m{text}\x1b[0m"
            self._prefixes[host] = text

    def _write(self, stream: TextIO, text: str, host: str | None = None) -> None:
        with self._lock:
            self.printer.clear()
            self._erase_bars()
            if host is not None:
                # The host's next line ends its bar: a finished bar reads as its last state.
                self._bars.pop(host, None)
            stream.write(text + "\n")
            stream.flush()
            self._draw_bars()
            self.printer.redraw()

    def _erase_bars(self) -> None:
        if self._drawn:
            # Up to the first bar line, then clear to the end of the screen.
            self.out.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0

    def _draw_bars(self) -> None:
        if not self._bars:
            self.out.flush()
            return
        # A bar wider than the terminal would wrap and take two lines: cut it to fit.
        width = max(20, shutil.get_terminal_size().columns - 1)
        for host, text in self._bars.items():
            visible = len(_ANSI.sub("", self._prefixes.get(host, ""))) + 1
            self.out.write(f"{self._prefixes.get(host, host + ' |')} {text[:max(1, width - visible)]}\n")
        self._drawn = len(self._bars)
        self.out.flush()

    def step(self, message: str) -> None:
        self._step += 1
        if not self.quiet:
            self._write(self.err, self._bold(f"[{self._step}] {message}"))

    def task(self, title: str, total: int | None = None, log: LogFile | None = None) \
            -> AbstractContextManager[Task]:
        self._step += 1
        return self.printer.task(f"[{self._step}] {title}", total, log)

    def info(self, message: str) -> None:
        if not self.quiet:
            self._write(self.err, message)

    def warn(self, message: str) -> None:
        self._write(self.err, ("\x1b[33mwarning:\x1b[0m " if self.colour else "warning: ") + message)

    def log_line(self, host: str, group: str, line: str) -> None:
        if self.quiet:
            return
        self._write(self.out, f"{self._prefix(host, group)} {line}", host)

    def progress(self, host: str, group: str, text: str) -> None:
        if self.quiet:
            return
        if not self.live:
            self._write(self.out, f"{self._prefix(host, group)} {text}")
            return
        with self._lock:
            self._prefixes.setdefault(host, f"{host} ({group}) |")
            self.printer.clear()
            self._erase_bars()
            self._bars[host] = text
            self._draw_bars()
            self.printer.redraw()

    def _prefix(self, host: str, group: str) -> str:
        return self._prefixes.get(host) or f"{host} ({group}) |"

    def _bold(self, text: str) -> str:
        return f"\x1b[1m{text}\x1b[0m" if self.colour else text


class RecordingReporter:
    """Keeps everything in lists; for tests and for callers that render output themselves."""

    def __init__(self) -> None:
        self.steps: list[str] = []
        self.infos: list[str] = []
        self.warnings: list[str] = []
        self.lines: list[tuple[str, str, str]] = []
        self.updates: list[tuple[str, str, str]] = []
        self.progress_interval = 0.0
        self._lock = threading.Lock()
        # Steps run as they would on a console that shows nothing; their titles go to `steps`.
        self._printer = StepPrinter(io.StringIO(), live=False, quiet=True)

    def set_hosts(self, hosts: Sequence[tuple[str, str]]) -> None:
        self.hosts = list(hosts)

    def step(self, message: str) -> None:
        self.steps.append(message)

    def task(self, title: str, total: int | None = None, log: LogFile | None = None) \
            -> AbstractContextManager[Task]:
        self.steps.append(title)
        return self._printer.task(title, total, log)

    def info(self, message: str) -> None:
        self.infos.append(message)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def log_line(self, host: str, group: str, line: str) -> None:
        with self._lock:
            self.lines.append((host, group, line))

    def progress(self, host: str, group: str, text: str) -> None:
        with self._lock:
            self.updates.append((host, group, text))
