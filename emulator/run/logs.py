"""Turn each host's raw output streams into `logs/algo-N.log`, the live console view and the last lines
kept for a FailureReason.

Two paths with different duties:

- **The file keeps every byte.** Each chunk the backend delivers is written to `logs/algo-N.log` at
  once, unchanged except for masked secrets (`emulator.planning.secrets`): `\\r\\n`, `\\r` progress updates,
  bytes that are not UTF-8 and a missing final newline stay as the container wrote them. Masking
  works on whole lines, because a chunk can end in the middle of a secret: the bytes after a
  stream's last newline wait for the next chunk. So that a line that never ends (a progress bar
  rewritten with `\\r` for an hour) cannot grow without bound, a pending part is also written at its
  last `\\r` once it reaches 64 KiB, and at any byte once it reaches 1 MiB, keeping back just enough
  bytes to hold the start of the longest secret. Memory per stream is bounded by that. The file
  never waits for the console.
- **The console may fall behind, and says so.** Chunks are queued to one console thread, which
  splits them into lines, masks them and hands them to the `Reporter`. A line rewritten with `\\r`
  is shown as a live update of that host's line (`Reporter.progress`, throttled to the reporter's
  `progress_interval`), as a terminal shows a tqdm bar. When more than `CONSOLE_BACKLOG` bytes of a
  host wait for the console (a terminal or pipe slower than the hosts), its further chunks are not
  shown; every few seconds the console prints `algo-2: 80,000 lines not shown (...), see
  logs/algo-2.log` instead. The end of what was not shown is kept (`FLOOD_TAIL_BYTES` per stream):
  when the job ends with a host's last chunks unshown, its count is said and then its last
  `TAIL_LINES` lines are shown, so a final "done" or a traceback is never among the dropped. The host is
  never slowed down by the terminal, and the job's outcome never depends on it. The training
  toolkit's ~150-line environment dump is folded there into one line per host
  (`emulator.run.toolkit_fold`); the file has it all.

Each stream (stdout, stderr) of a host keeps its own pending line, so a tqdm bar on stderr is not
glued to a print on stdout; in the file the two are interleaved in arrival order, chunk by chunk.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path

from emulator.planning.plan import HostPlan, Plan
from emulator.planning.secrets import Masker
from emulator.reports.console import Reporter
from emulator.run.metrics import Recorder
from emulator.run.toolkit_fold import EnvironmentFold

TAIL_LINES = 10
STDOUT, STDERR = 1, 2
# A pending (newline-less) part of a stream is written at its last `\r` from this size on, and
# anywhere from the hard cap on: the bound on memory per stream.
CUT_AT_CARRIAGE_RETURN = 64 * 1024
CUT_ANYWHERE = 1024 * 1024
# How much of the end of each host's output is kept (masked) to give the last lines of a FailureReason.
RECENT_BYTES = 64 * 1024
# Bytes of one host waiting for the console before its further chunks are summarised instead of
# shown: per host, so a flooding host does not hide a quiet one's lines.
CONSOLE_BACKLOG = 2 * 1024 * 1024
# The end of a stream's unshown output kept, to show its last lines when the job ends.
FLOOD_TAIL_BYTES = 64 * 1024
# How often a host's "lines not shown" count is printed while it floods (and once at the end).
DROP_REPORT_INTERVAL = 5.0
# The console thread's shortest sleep while a progress state waits to be shown.
MIN_WAKE = 0.01


def display_text(raw: bytes) -> str:
    """What a terminal shows for one line: the text after its last carriage return (a progress bar
    rewritten in place shows its last state), a CRLF's `\\r` dropped, invalid UTF-8 as U+FFFD."""
    segments = raw.rstrip(b"\r").split(b"\r")
    return segments[-1].decode("utf-8", errors="replace")


class LogCollector:
    """Receives `(container_name, chunk, stream)` from the backend's log threads (one thread per host)."""

    def __init__(self, plan: Plan, reporter: Reporter) -> None:
        self.reporter = reporter
        self._by_container = {h.container.name: h for h in plan.hosts}
        # Every variable any container gets: the spec's environment and what the plan adds to it.
        self._masker = Masker(plan.spec.environment, *(h.container.environment for h in plan.hosts))
        # Bytes held back at a forced cut: one less than the longest secret, so no secret is split.
        self._hold = max((len(v.encode("utf-8")) for v in self._masker.values), default=1) - 1
        self._pending: dict[tuple[str, int], bytes] = {}
        self._recent: dict[str, bytes] = {h.name: b"" for h in plan.hosts}
        self._cut_recent: set[str] = set()
        log_dir = Path(plan.job_dir) / "logs"
        self.paths = {h.name: log_dir / f"{h.name}.log" for h in plan.hosts}
        self._files = {name: open(path, "ab") for name, path in self.paths.items()}  # noqa: SIM115
        self._lock = threading.Lock()
        self._closed = False
        # The job's metric definitions applied to each line as it is written (emulator/run/metrics.py).
        self._metrics = Recorder(Path(plan.job_dir), plan.spec.metric_definitions) \
            if plan.spec.metric_definitions else None
        self._console: _ConsoleFeed | None = None
        if not getattr(reporter, "quiet", False):
            self._console = _ConsoleFeed(reporter, self._masker, plan.hosts, self.paths)

    def __call__(self, name: str, chunk: bytes, stream: int = STDOUT) -> None:
        host = self._by_container[name]
        # One lock for all hosts: close() may run while a late stream still delivers a chunk.
        with self._lock:
            if self._closed:
                return  # a stream that outlived the wait for it: its file is closed
            key = (host.name, stream)
            data = self._pending.pop(key, b"") + chunk
            cut = self._cut(data)
            if cut < len(data):
                self._pending[key] = data[cut:]
            if cut:
                # The complete lines, masked as one block: a multi-line secret printed whole is
                # masked whole (each of its lines is a secret too, should it arrive in pieces).
                self._write(host.name, data[:cut])
            # Under the lock (a queue append): a chunk fed while close() runs would land after the
            # console's end, and a host's very last line would be lost.
            if self._console is not None:
                self._console.feed(host, stream, chunk)

    def _cut(self, data: bytes) -> int:
        """How much of `data` can be masked and written now (see the module docstring)."""
        end = data.rfind(b"\n") + 1
        if end:
            return end
        if len(data) >= CUT_AT_CARRIAGE_RETURN and (end := data.rfind(b"\r") + 1):
            return end
        if len(data) >= CUT_ANYWHERE:
            return len(data) - self._hold
        return 0

    def _write(self, host: str, data: bytes) -> None:
        masked = self._masker.mask_bytes(data)
        self._files[host].write(masked)
        self._files[host].flush()
        if self._metrics is not None:
            self._metrics.feed(host, masked, time.time())
        recent = self._recent[host] + masked[-RECENT_BYTES:]
        if len(recent) > RECENT_BYTES:
            recent = recent[-RECENT_BYTES:]
            self._cut_recent.add(host)
        self._recent[host] = recent

    def recent(self, host: str) -> bytes:
        """The end of a host's output as written to its log file (its last RECENT_BYTES, masked)."""
        with self._lock:
            return self._recent[host]

    def tail(self, host: str) -> list[str]:
        """The host's last lines as a terminal would show them (secrets masked), for a FailureReason."""
        with self._lock:
            recent = self._recent[host]
        lines = recent.split(b"\n")
        if host in self._cut_recent:
            lines = lines[1:]  # the first line was cut off at the start of the window
        if lines and not lines[-1]:
            lines.pop()  # the output ended with a newline
        return [self._masker.mask(display_text(raw)) for raw in lines[-TAIL_LINES:]]

    def close(self) -> None:
        """Write and show unterminated last lines (without adding a newline) and close the log files;
        the console shows what it still has queued, then says what it left out."""
        with self._lock:
            self._closed = True
            for (host, _), rest in sorted(self._pending.items()):
                self._write(host, rest)
            self._pending.clear()
            for f in self._files.values():
                f.close()
        if self._console is not None:
            self._console.close()


class _ConsoleFeed:
    """The console side of a LogCollector: a queue bounded in bytes and one thread that turns chunks
    into `Reporter.log_line` / `Reporter.progress` calls, masking every line it shows."""

    def __init__(self, reporter: Reporter, masker: Masker, hosts: tuple[HostPlan, ...],
                 paths: Mapping[str, Path]) -> None:
        self.reporter = reporter
        self.masker = masker
        self.interval = float(getattr(reporter, "progress_interval", 0.1))
        self.paths = paths
        self.groups = {h.name: h.group for h in hosts}
        # (host, stream, chunk, last): a chunk of None marks a gap: what followed was not queued;
        # `last` marks a flooded stream's last lines, queued when the feed closes.
        self._queue: deque[tuple[str, int, bytes | None, bool]] = deque()
        # The end of each stream's output since its last shown chunk, while it is not shown.
        self._unshown: dict[tuple[str, int], bytearray] = {}
        self._queued: dict[str, int] = {}
        self._dropped: dict[str, int] = {}
        self._reported_at: dict[str, float] = {}
        self._gap: set[tuple[str, int]] = set()
        self._cond = threading.Condition()
        self._closing = False
        self._partial: dict[tuple[str, int], bytes] = {}
        # The latest progress state not shown yet (throttled), and when each key last showed one.
        self._progress: dict[tuple[str, int], str] = {}
        self._shown_at: dict[tuple[str, int], float] = {}
        self._folds = {(h.name, stream): EnvironmentFold(f"logs/{Path(paths[h.name]).name}")
                       for h in hosts for stream in (STDOUT, STDERR)}
        self._thread = threading.Thread(target=self._run, name="console", daemon=True)
        self._thread.start()

    def feed(self, host: HostPlan, stream: int, chunk: bytes) -> None:
        key = (host.name, stream)
        with self._cond:
            queued = self._queued.get(host.name, 0)
            if queued + len(chunk) > CONSOLE_BACKLOG:
                self._dropped[host.name] = self._dropped.get(host.name, 0) + max(1, chunk.count(b"\n"))
                unshown = self._unshown.setdefault(key, bytearray())
                unshown += chunk[-FLOOD_TAIL_BYTES:]
                del unshown[:-FLOOD_TAIL_BYTES]
                if key not in self._gap:
                    self._gap.add(key)
                    self._queue.append((host.name, stream, None, False))
                    self._cond.notify()
                return
            self._gap.discard(key)
            self._unshown.pop(key, None)  # what was not shown is a middle part now: the end is shown
            self._queue.append((host.name, stream, chunk, False))
            self._queued[host.name] = queued + len(chunk)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            for (host, stream), unshown in sorted(self._unshown.items()):
                last = _last_lines(bytes(unshown), full=len(unshown) < FLOOD_TAIL_BYTES)
                # Shown now, so no longer counted among the lines not shown.
                shown = last.count(b"\n") + (0 if last.endswith(b"\n") else 1)
                left = self._dropped.get(host, 0) - shown
                if left > 0:
                    self._dropped[host] = left
                else:
                    self._dropped.pop(host, None)
                self._queue.append((host, stream, last, True))
            self._unshown.clear()
            self._closing = True
            self._cond.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._queue and not self._closing:
                    self._cond.wait(self._idle_timeout())
                batch = list(self._queue)
                self._queue.clear()
                self._queued.clear()
                closing = self._closing
            for host, stream, chunk, last in batch:
                if last:
                    self._report_dropped(time.monotonic(), final=True, only=host)
                    self.reporter.warn(f"{host}: the last lines of its output:")
                self._show(host, stream, chunk)
            now = time.monotonic()
            self._show_due_progress(now)
            self._report_dropped(now, final=closing and not batch)
            if closing and not batch:
                break
        # Unterminated last lines are shown as lines; progress states they supersede are not.
        for (host, stream), rest in sorted(self._partial.items()):
            if rest:
                self._line((host, stream), rest)
        for key in self._folds:
            self._show_held(key)  # the output ended inside what looked like the toolkit's block

    def _idle_timeout(self) -> float | None:
        """How long the thread may sleep with nothing queued (called holding the lock): until a held
        progress state is due, or a flood's next drop count; otherwise until it is fed. Waking every
        `interval` instead spun a whole core when the interval is 0 (RecordingReporter), which on a
        small machine slowed the very containers whose output it waited for."""
        timeouts = [max(self.interval, MIN_WAKE)] if self._progress else []
        if self._dropped:
            timeouts.append(DROP_REPORT_INTERVAL)
        return min(timeouts, default=None)

    def _report_dropped(self, now: float, final: bool, only: str | None = None) -> None:
        """Say how many lines of each host (or of `only`) were not shown: at most every
        DROP_REPORT_INTERVAL seconds while it floods, and whatever is left at the end (final). While
        it floods, the lines that may yet be shown as its last ones are held back from the count, so
        the counts and the lines shown add up to the host's lines."""
        due: dict[str, int] = {}
        with self._cond:
            for host, count in list(self._dropped.items()):
                if only not in (None, host) or not (
                        final or now - self._reported_at.get(host, float("-inf")) >= DROP_REPORT_INTERVAL):
                    continue
                held = 0 if final else sum(min(TAIL_LINES, data.count(b"\n") + 1)
                                           for (h, _), data in self._unshown.items() if h == host)
                if count - held > 0:
                    due[host] = count - held
                    self._reported_at[host] = now
                if held:
                    self._dropped[host] = min(held, count)
                else:
                    del self._dropped[host]
        for host, count in due.items():
            self.reporter.warn(f"{host}: {count:,} line{'s' if count != 1 else ''} not shown (the console fell "
                               f"behind), see {self.paths[host]}")

    def _show(self, host: str, stream: int, chunk: bytes | None) -> None:
        key = (host, stream)
        if chunk is None:
            # Output went missing here: a half line before the gap would be glued to one after it.
            self._partial.pop(key, None)
            self._progress.pop(key, None)
            self._show_held(key)  # a block with a gap in it is not folded
            return
        data = self._partial.pop(key, b"") + chunk
        *lines, rest = data.split(b"\n")
        for raw in lines:
            self._line(key, raw)
            self._progress.pop(key, None)
        if b"\r" in rest:
            # A progress bar. A state is complete once something follows its `\r` (tqdm writes `\r`,
            # then the state): a `\r` at the very end may be the first half of a CRLF whose `\n` is in
            # the next chunk, and that line must not show twice. The last complete state is shown,
            # the ones before it are superseded.
            trailing = rest.endswith(b"\r")
            done, sep, current = (rest[:-1] if trailing else rest).rpartition(b"\r")
            state = next((s for s in reversed(done.split(b"\r")) if s), None) if sep else None
            if state is not None:
                self._progress[key] = state.decode("utf-8", errors="replace")
                self._show_due_progress(time.monotonic(), only=key)
            if sep and len(rest) >= CUT_AT_CARRIAGE_RETURN:
                # Superseded states are never shown again: keep the line's memory bounded.
                rest = b"\r" + current + (b"\r" if trailing else b"")
        if len(rest) >= CUT_ANYWHERE:
            self._line(key, rest)  # a line this long is shown in pieces
            rest = b""
        if rest:
            self._partial[key] = rest

    def _line(self, key: tuple[str, int], raw: bytes) -> None:
        self._show_lines(key[0], self._folds[key].feed(self.masker.mask(display_text(raw))))

    def _show_held(self, key: tuple[str, int]) -> None:
        self._show_lines(key[0], self._folds[key].flush())

    def _show_lines(self, host: str, lines: list[str]) -> None:
        for text in lines:
            self.reporter.log_line(host, self.groups[host], text)

    def _show_due_progress(self, now: float, only: tuple[str, int] | None = None) -> None:
        for key in [only] if only is not None else list(self._progress):
            if key in self._progress and now - self._shown_at.get(key, float("-inf")) >= self.interval:
                self._shown_at[key] = now
                host = key[0]
                self.reporter.progress(host, self.groups[host], self.masker.mask(self._progress.pop(key)))


def _last_lines(data: bytes, full: bool) -> bytes:
    """The last TAIL_LINES lines of `data`, an unterminated last one among them; `full`: `data` starts
    at a line's start, else its first, cut line is left out."""
    pieces = data.split(b"\n")
    if not full:
        pieces = pieces[1:]
    if not pieces:
        return b""
    # Ending in a newline, the last piece is empty and joins back as that newline.
    return b"\n".join(pieces[-(TAIL_LINES + 1):] if not pieces[-1] else pieces[-TAIL_LINES:])
