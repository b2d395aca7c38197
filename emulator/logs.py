"""Turn each host's raw output stream into lines: saved to logs/algo-N.log, shown with a prefix, and
the last few kept for the FailureReason when a host dies without writing /opt/ml/output/failure.

Secret values of the job's environment (see `emulator.secrets`) are masked in all three. Masking
works on whole lines, because a chunk from the engine can end in the middle of a secret: so a line
reaches the log file when its newline arrives (or, for an unterminated last line, when the job
ends), not chunk by chunk. The file keeps the container's bytes otherwise unchanged: `\\r\\n`, bytes
that are not UTF-8 and a missing final newline stay as they were (secrets are matched as UTF-8
bytes there); the console and the tail get the line decoded with U+FFFD for invalid bytes.
"""

from __future__ import annotations

import threading
from collections import deque
from pathlib import Path

from emulator.console import Reporter
from emulator.plan import Plan
from emulator.secrets import Masker

TAIL_LINES = 10


class LogCollector:
    """Receives `(container_name, chunk)` from the backend's log threads (one thread per host)."""

    def __init__(self, plan: Plan, reporter: Reporter) -> None:
        self.reporter = reporter
        self._by_container = {h.container_name: h for h in plan.hosts}
        # Every variable any container gets: the spec's environment and what the plan adds to it.
        self._masker = Masker(plan.spec.environment, *(h.environment for h in plan.hosts))
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
            data = self._partial.pop(host.name, b"") + chunk
            end = data.rfind(b"\n") + 1
            if end < len(data):
                self._partial[host.name] = data[end:]
            if end:
                # The complete lines, masked as one block: a multi-line secret printed whole is
                # masked whole (each of its lines is a secret too, should it arrive in pieces).
                self._write(host.name, data[:end])
                for raw in data[: end - 1].split(b"\n"):
                    self._emit(host.name, host.group, raw)

    def _write(self, host: str, data: bytes) -> None:
        self._files[host].write(self._masker.mask_bytes(data))
        self._files[host].flush()

    def _emit(self, host: str, group: str, raw: bytes) -> None:
        line = self._masker.mask(raw.decode("utf-8", errors="replace").rstrip("\r"))
        self._tails[host].append(line)
        self.reporter.log_line(host, group, line)

    def tail(self, host: str) -> list[str]:
        """The host's last lines (secrets masked), for a FailureReason."""
        return list(self._tails[host])

    def close(self) -> None:
        """Write and show unterminated last lines (without adding a newline) and close the log files."""
        with self._lock:
            self._closed = True
            for host in self._by_container.values():
                rest = self._partial.pop(host.name, b"")
                if rest:
                    self._write(host.name, rest)
                    self._emit(host.name, host.group, rest)
            for f in self._files.values():
                f.close()
