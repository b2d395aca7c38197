"""Helpers every suite shares: running `hetero-emu` (in this process, or as a real process) and
writing the small projects (a spec next to a code folder) the tests run.

tests/support is on pytest's pythonpath (pyproject.toml), so `from testkit import ...` works from
every suite.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from emulator import cli as cli_module

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class CliResult:
    """What a `hetero-emu` call printed and its exit code, named as subprocess.CompletedProcess names
    them, so a test reads the same whichever way the command ran."""

    returncode: int
    stdout: str
    stderr: str


def invoke(*args: str | Path, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> CliResult:
    """`hetero-emu ARGS` in this process: the entry point's main(), which maps every error to its exit
    code and message, inside typer's CliRunner isolation (stdout and stderr captured apart, `env` set
    for the call and put back after it). NO_COLOR=1 as in a subprocess of the suite.

    main() installs its SIGINT/SIGTERM handlers and remembers --debug and a Ctrl-C in cli._State:
    both are put back, so one call leaves nothing behind for the next test."""
    saved_argv, saved_cwd = sys.argv, os.getcwd()
    saved_signals = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with CliRunner().isolation(env={"NO_COLOR": "1", **(env or {})}) as (out, err, _):
        sys.argv = ["hetero-emu", *map(str, args)]
        try:
            if cwd is not None:
                os.chdir(cwd)
            cli_module.main()
            code = 0  # main() always exits; reaching here would be a bug the caller's assertion shows
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        finally:
            sys.argv = saved_argv
            os.chdir(saved_cwd)
            for sig, handler in saved_signals.items():
                signal.signal(sig, handler)
            cli_module._State.debug = cli_module._State.interrupted = cli_module._State.reported = False
            sys.stdout.flush()
            sys.stderr.flush()
        return CliResult(code, out.getvalue().decode(), err.getvalue().decode())


def hetero_emu(*args: str | Path, env: Mapping[str, str] | None = None, timeout: float = 180,
               cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """`python -m emulator.cli ARGS` as a process of its own, for the tests about the process (its exit
    on a signal, what reaches a real stderr) and the Docker suites, whose commands run long and start
    watchers. NO_COLOR=1 on top of this environment and `env`; stdin is /dev/null, never the terminal."""
    return subprocess.run([sys.executable, "-m", "emulator.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env={**os.environ, "NO_COLOR": "1", **(env or {})},
                          stdin=subprocess.DEVNULL, check=False)


def unique(prefix: str) -> str:
    """A job name no other test, worker or earlier run uses: tests share one engine, and a job of the
    same name there is refused (or, once its driver is gone, removed by a bare `clean`)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def groups(*spec: tuple[str, int]) -> list[dict[str, Any]]:
    """Instance groups of ml.c5.xlarge hosts: `groups(("ga", 1), ("gb", 2))`."""
    return [{"instance_group_name": n, "instance_type": "ml.c5.xlarge", "instance_count": c} for n, c in spec]


def write_script_spec(folder: Path, script: str, **fields: Any) -> Path:
    """folder/job.yaml running `python3 /opt/ml/code/x.py` (written from `script`) on two groups of one
    host, ga and gb, unless `fields` say otherwise; returns the spec's path."""
    code = folder / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "x.py").write_text(script)
    raw = {"source_dir": "code", "container_entry_point": ["python3", "/opt/ml/code/x.py"],
           "instance_groups": groups(("ga", 1), ("gb", 1)), **fields}
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def write_train_project(root: Path, **specs: str) -> Path:
    """root/code/train.py (it prints hi) and each spec text of `specs` as root/NAME.yaml; returns root."""
    (root / "code").mkdir(parents=True)
    (root / "code" / "train.py").write_text("print('hi')\n")
    for name, text in specs.items():
        (root / f"{name}.yaml").write_text(text)
    return root


def wait_for(condition: Callable[[], object], what: str, timeout: float = 10) -> None:
    """Return as soon as `condition()` is true; fail naming `what` after `timeout` seconds. A test that
    waits for what it needs instead of sleeping a fixed time is as fast as the code and does not flake
    when the machine is slow."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.005)
