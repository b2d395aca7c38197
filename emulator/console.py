"""What the user sees while a job runs: numbered steps, `algo-N (group) |` log prefixes in a colour per
host (as docker compose does), warnings. The runner talks to a `Reporter`; tests use a recording one.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from typing import Protocol, TextIO

# docker compose's palette order: easy to tell neighbours apart.
_COLOURS = ("36", "33", "32", "35", "34", "96", "93", "92", "95", "94")


class Reporter(Protocol):
    def set_hosts(self, hosts: Sequence[tuple[str, str]]) -> None:
        """Learn the (host, group) pairs before the first log line, to align and colour prefixes."""

    def step(self, message: str) -> None: ...

    def info(self, message: str) -> None: ...

    def warn(self, message: str) -> None: ...

    def log_line(self, host: str, group: str, line: str) -> None: ...


def use_colour(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    if os.environ.get("NO_COLOR"):
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
    ) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.colour = use_colour(self.out) if colour is None else colour
        self.quiet = quiet
        self._lock = threading.Lock()
        self._step = 0
        self._prefixes: dict[str, str] = {}
        self.set_hosts(hosts)

    def set_hosts(self, hosts: Sequence[tuple[str, str]]) -> None:
        """Fix the prefix width and colour of each host: aligned `algo-2 (data_group) |` columns."""
        labels = {host: f"{host} ({group})" for host, group in hosts}
        width = max((len(v) for v in labels.values()), default=0)
        for i, (host, _) in enumerate(hosts):
            text = f"{labels[host]:<{width}} |"
            if self.colour:
                text = f"\x1b[{_COLOURS[i % len(_COLOURS)]}m{text}\x1b[0m"
            self._prefixes[host] = text

    def _write(self, stream: TextIO, text: str) -> None:
        with self._lock:
            stream.write(text + "\n")
            stream.flush()

    def step(self, message: str) -> None:
        self._step += 1
        if not self.quiet:
            self._write(self.err, self._bold(f"[{self._step}] {message}"))

    def info(self, message: str) -> None:
        if not self.quiet:
            self._write(self.err, message)

    def warn(self, message: str) -> None:
        self._write(self.err, ("\x1b[33mwarning:\x1b[0m " if self.colour else "warning: ") + message)

    def log_line(self, host: str, group: str, line: str) -> None:
        if self.quiet:
            return
        prefix = self._prefixes.get(host) or f"{host} ({group}) |"
        self._write(self.out, f"{prefix} {line}")

    def _bold(self, text: str) -> str:
        return f"\x1b[1m{text}\x1b[0m" if self.colour else text


class RecordingReporter:
    """Keeps everything in lists; for tests and for callers that render output themselves."""

    def __init__(self) -> None:
        self.steps: list[str] = []
        self.infos: list[str] = []
        self.warnings: list[str] = []
        self.lines: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()

    def set_hosts(self, hosts: Sequence[tuple[str, str]]) -> None:
        self.hosts = list(hosts)

    def step(self, message: str) -> None:
        self.steps.append(message)

    def info(self, message: str) -> None:
        self.infos.append(message)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def log_line(self, host: str, group: str, line: str) -> None:
        with self._lock:
            self.lines.append((host, group, line))
