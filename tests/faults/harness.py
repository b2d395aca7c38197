"""What the fault suite needs to inject faults into real runs and to time their teardown.

Every fault test runs the real command line in a subprocess (`python -m emulator.cli run ...`), so
signals, exit codes and the detached watcher process behave as they do for a user, injects one fault,
and then measures how long the engine takes to hold no container and no network of the job.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The fault tests import these from here: the command line as a process, the two-group spec.
from testkit import REPO, groups, unique
from testkit import hetero_emu as cli
from testkit import write_script_spec as write_spec

from emulator.planning.plan import LABEL_JOB, LABEL_MANAGED

__all__ = ["PRELUDE", "REPO", "ROWS", "Driver", "EngineProxy", "Row", "cli", "groups", "job_resources", "record",
           "seconds_until_gone", "unique", "write_spec"]


# A host script prelude: who am I, and a READY line once the script runs.
PRELUDE = """\
import json, os, socket, sys, time
from pathlib import Path
RC = json.loads(Path("/opt/ml/input/config/resourceconfig.json").read_text())
HOST, GROUP = RC["current_host"], RC["current_group_name"]
"""


# What a running two-host job has on the engine: two hosts, the job's AWS gateway (emulator/run/job_aws.py)
# and the network.
RUNNING_JOB = 4


def job_resources(client: Any, job: str) -> list[str]:
    """Names of every container and network labelled with this job, running or not."""
    filters = {"label": [f"{LABEL_MANAGED}=true", f"{LABEL_JOB}={job}"]}
    names = [c["Names"][0].lstrip("/") for c in client.api.containers(all=True, filters=filters)]
    names += [n["Name"] for n in client.api.networks(filters=filters)]
    return sorted(names)


def seconds_until_gone(client: Any, job: str, since: float, timeout: float = 60) -> float:
    """Poll every 0.1 s until the job holds nothing in the engine; seconds since `since`."""
    deadline = time.monotonic() + timeout
    while job_resources(client, job):
        if time.monotonic() > deadline:
            raise AssertionError(f"still there after {timeout:g} s: {job_resources(client, job)}")
        time.sleep(0.1)
    return time.monotonic() - since


class Driver:
    """`hetero-emu run` in a subprocess; its stdout and stderr are read by threads (no pipe fills up)."""

    def __init__(self, spec: Path, job: str | None, out: Path, *args: str, env: dict[str, str] | None = None,
                 user: int | None = None, group: int | None = None, extra_groups: list[int] | None = None) -> None:
        command = [sys.executable, "-m", "emulator.cli", "run", str(spec), "--output-path", str(out), *args]
        if job is not None:
            command += ["--job-name", job]
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     cwd=REPO, env={**os.environ, "NO_COLOR": "1", **(env or {})},
                                     user=user, group=group, extra_groups=extra_groups)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def wait_for(self, text: str, count: int = 1, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while self.output.count(text) < count:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"never saw {count} x {text!r}; output:\n{self.output[-3000:]}")
            time.sleep(0.05)

    def wait(self, timeout: float = 120) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(5)
        return code

    def __enter__(self) -> Driver:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@dataclass(frozen=True)
class Row:
    fault: str
    status: str
    teardown_seconds: float
    left: int


ROWS: list[Row] = []


def record(fault: str, status: str, teardown_seconds: float, left: int) -> None:
    """One row of the table the suite prints at its end (and the issue note quotes)."""
    ROWS.append(Row(fault, status, teardown_seconds, left))


class EngineProxy:
    """A unix socket that relays to the real engine, which a test can make refuse or hang.

    Point DOCKER_HOST at `unix://<path>`; `refuse()` closes it (the engine is gone: connection
    refused), `hang()` keeps every connection open but relays nothing more (the engine stopped
    answering), `resume()` makes it an engine again.
    """

    def __init__(self, path: Path, engine: str = "/var/run/docker.sock") -> None:
        self.path = path
        self.engine = engine
        self._hanging = threading.Event()
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._listen()

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    def _listen(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.path))
        listener.listen(64)
        self._listener = listener
        self._stop.clear()
        thread = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        thread.start()
        self._threads.append(thread)

    def _accept(self, listener: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.engine)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._relay, args=(client, upstream), daemon=True).start()

    def _relay(self, a: socket.socket, b: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        sel.register(a, selectors.EVENT_READ, b)
        sel.register(b, selectors.EVENT_READ, a)
        try:
            while not self._stop.is_set():
                if self._hanging.is_set():
                    time.sleep(0.05)  # hold the connection, answer nothing
                    continue
                for key, _ in sel.select(timeout=0.1):
                    data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    if not data:
                        return
                    key.data.sendall(data)
        except OSError:
            return
        finally:
            sel.close()
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.close()

    def refuse(self) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()

    def hang(self) -> None:
        self._hanging.set()

    def resume(self) -> None:
        if self._hanging.is_set():
            # Connections held while hanging stay dead: a client that timed out has given up on them.
            self._hanging.clear()
            self.refuse()
        self._listen()

    def close(self) -> None:
        self._hanging.clear()
        self.refuse()
