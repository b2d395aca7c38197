"""A `hetero-emu serve` process for tests: started as a user starts it, stopped with Ctrl-C (SIGINT).

Each server gets its own state folder and S3 root, so tests in parallel workers never share jobs or
buckets, and a port the kernel chooses (`--port 0`), read off its first line.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

READY = re.compile(r"serving (\S+) on (http://\S+) \(S3 root (.+)\)")
START_TIMEOUT = 60.0


@dataclass
class Server:
    url: str
    region: str
    s3_root: Path
    state_dir: Path
    process: subprocess.Popen[str]
    lines: list[str]

    def exported(self) -> dict[str, str]:
        """The variables the server's first lines tell the user to export."""
        pairs = [word.split("=", 1) for line in self.lines if line.strip().startswith("export ")
                 for word in line.split("#", 1)[0].split() if "=" in word]
        return dict((k, v) for k, v in pairs)

    def client_env(self, **extra: str) -> dict[str, str]:
        """What a user exports to point an unchanged SDK or the AWS CLI at this server: what its first
        lines say, in an environment without any other AWS settings."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SAGEMAKER_"))}
        env.update(self.exported())
        env.update(HETERO_EMU_STATE_DIR=str(self.state_dir))
        env.update(extra)
        return env

    def client(self, service: str, **config: Any) -> Any:
        """A boto3 client of `service` pointed at this server with the placeholder credentials it takes,
        and no retries unless `config` says otherwise (a test sees the server's first answer)."""
        config.setdefault("retries", {"max_attempts": 1})
        session = boto3.Session(aws_access_key_id="emu", aws_secret_access_key="emu", region_name=self.region)
        return session.client(service, endpoint_url=self.url, config=Config(**config))  # type: ignore[call-overload]

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30.0) -> tuple[int, str]:
        """Stop it as Ctrl-C does; its exit code and what it printed after the first line."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            out, _ = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, _ = self.process.communicate()
        return self.process.returncode, "\n".join(self.lines) + (out or "")


# `hetero-emu serve` whose clients get argv[1] seconds to send a request head instead of
# limits.HEADER_SECONDS: the tests that wait the limit out wait less.
_SHORT_HEADS = ("import functools, sys\n"
                "from emulator.serve import limits\n"
                "limits.Limits = functools.partial(limits.Limits, header_seconds=float(sys.argv.pop(1)))\n"
                "from emulator.cli import main\n"
                "main()\n")


@contextlib.contextmanager
def running_server(tmp: Path, args: Sequence[str] = (), *, env: dict[str, str] | None = None,
                   region: str = "us-west-2", header_seconds: float | None = None,
                   program: Sequence[str] | None = None) -> Iterator[Server]:
    """A server of this checkout, or of `program` (an installed `hetero-emu`, for instance)."""
    state = tmp / "state"
    root = tmp / "s3"
    root.mkdir(parents=True, exist_ok=True)
    environ = {**os.environ, "HETERO_EMU_STATE_DIR": str(state), "AWS_REGION": region, **(env or {})}
    command = ([sys.executable, "-m", "emulator"] if header_seconds is None
               else [sys.executable, "-c", _SHORT_HEADS, str(header_seconds)])
    process = subprocess.Popen(
        [*(program or command), "serve", "--port", "0", "--s3-root", str(root), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environ)
    lines: list[str] = []
    deadline = time.monotonic() + START_TIMEOUT
    assert process.stdout is not None
    try:
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                raise AssertionError("serve ended before it served:\n" + "".join(lines))
            lines.append(line.rstrip("\n"))
            found = READY.search(line)
            if found:
                # The lines after it: what to export, the page's address.
                while not lines[-1].strip().startswith("Ctrl-C") and "Ctrl-C" not in lines[-1]:
                    lines.append(process.stdout.readline().rstrip("\n"))
                break
        else:
            raise AssertionError("serve did not say it was serving:\n" + "\n".join(lines))
        server = Server(found.group(2), found.group(1), Path(found.group(3)), state, process, lines)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
