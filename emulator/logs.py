"""Turn each host's raw output stream into lines: saved to logs/algo-N.log, shown with a prefix, and
the last few kept for the FailureReason when a host dies without writing /opt/ml/output/failure."""

from __future__ import annotations

import threading
from collections import deque
from pathlib import Path

from emulator.console import Reporter
from emulator.plan import Plan

TAIL_LINES = 10


class LogCollector:
    """Receives `(container_name, chunk)` from the backend's log threads (one thread per host)."""

    def __init__(self, plan: Plan, reporter: Reporter) -> None:
        self.reporter = reporter
        self._by_container = {h.container_name: h for h in plan.hosts}
        self._partial: dict[str, bytes] = {}
        self._tails: dict[str, deque[str]] = {h.name: deque(maxlen=TAIL_LINES) for h in plan.hosts}
        self._files = {h.name: open(Path(plan.job_dir) / "logs" / f"{h.name}.log", "ab") for h in plan.hosts}  # noqa: SIM115
        self._lock = threading.Lock()
        self._closed = False

    def __call__(self, container: str, chunk: bytes) -> None:
        host = self._by_container[container]
        # One lock for all hosts: close() may run while a late stream still delivers a chunk.
        with self._lock:
            if self._closed:
                return  # a stream that outlived wait_logs' timeout: its file is closed
            self._files[host.name].write(chunk)
            self._files[host.name].flush()
            data = self._partial.pop(host.name, b"") + chunk
            *lines, rest = data.split(b"\n")
            if rest:
                self._partial[host.name] = rest
            for raw in lines:
                self._emit(host.name, host.group, raw)

    def _emit(self, host: str, group: str, raw: bytes) -> None:
        line = raw.decode("utf-8", errors="replace").rstrip("\r")
        self._tails[host].append(line)
        self.reporter.log_line(host, group, line)

    def tail(self, host: str) -> list[str]:
        return list(self._tails[host])

    def close(self) -> None:
        """Flush unterminated last lines and close the log files."""
        with self._lock:
            self._closed = True
            for host in self._by_container.values():
                rest = self._partial.pop(host.name, b"")
                if rest:
                    self._emit(host.name, host.group, rest)
            for f in self._files.values():
                f.close()
