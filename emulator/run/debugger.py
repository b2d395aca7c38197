"""Debugging one host's script with debugpy (`run --debug-host algo-N`; docs/cli.md, Debugging a host):
what a run does about it besides the plan.

What the debugged host's container gets (the start-up hook, its variables, debugpy's port published
on 127.0.0.1 only) is the plan's: emulator/planning/debug_host.py. The hook starts debugpy in the
process that runs the job's entry point (see its docstring for how the toolkit launches it). This
module checks, before anything is created, that the host exists and the port is free, and writes
the VS Code attach configuration.
"""

from __future__ import annotations

import errno
import json
import socket
from typing import Any

from emulator.errors import EnvironmentProblem, UsageError
from emulator.jobspec import JobSpec
from emulator.jobspec.model import CODE_DIR
from emulator.planning.debug_host import LOCALHOST, DebugTarget

# When the code is a sourcedir.tar.gz there is no folder of it on this machine to map.
WORKSPACE = "${workspaceFolder}"


def check_target(spec: JobSpec, target: DebugTarget) -> None:
    """The job can be debugged as asked: the host exists, the script is known, the port is valid.
    Pure: before any engine is asked (UsageError, exit code 2)."""
    count = spec.host_count
    hosts = "algo-1" if count == 1 else f"algo-1..algo-{count}"
    if target.host not in {f"algo-{i}" for i in range(1, count + 1)}:
        raise UsageError(f"--debug-host {target.host}: the job has {hosts}" if count else
                         f"--debug-host {target.host}: the job has no hosts",
                         hint=f"name one of its hosts, e.g. --debug-host algo-{max(count, 1)}")
    if spec.entry_point is None:
        raise UsageError(f"--debug-host {target.host}: the job has no entry_point, so there is no script to debug",
                         hint="give the spec an entry_point (and source_dir); the debugger starts in the "
                         "process that runs it")
    if spec.enable_network_isolation:
        raise UsageError(f"--debug-host {target.host}: enable_network_isolation is true, and an isolated job "
                         "network has no route to this machine for the debugger",
                         hint="debug the job with enable_network_isolation: false")
    if not 1 <= target.port <= 65535:
        raise UsageError(f"--debug-port {target.port}: not a TCP port", hint="a number from 1 to 65535, e.g. 5678")


def check_port_free(target: DebugTarget) -> None:
    """The port can be published on 127.0.0.1: nothing on this machine holds it (EnvironmentProblem,
    exit code 3). Asked before anything is created; the engine still refuses a port taken after."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.bind((LOCALHOST, target.port))
    except OSError as err:
        reason = "in use" if err.errno == errno.EADDRINUSE else (err.strerror or str(err))
        raise EnvironmentProblem(f"--debug-port {target.port}: port {target.port} on {LOCALHOST} is {reason}",
                                 hint="choose a free one with --debug-port PORT") from None
    finally:
        probe.close()


def local_root(spec: JobSpec) -> str:
    """The folder on this machine that is /opt/ml/code in the host: source_dir, or the folder of a
    lone entry script; VS Code's workspace folder when the code is an archive."""
    if spec.source_dir is None or spec.source_archive:
        return WORKSPACE
    return str(spec.source_dir if spec.source_dir.is_dir() else spec.source_dir.parent)


def launch_configuration(spec: JobSpec, target: DebugTarget, group: str) -> dict[str, Any]:
    """VS Code's attach configuration (a `launch.json` entry of the Python Debugger extension:
    https://code.visualstudio.com/docs/python/debugging#_debugging-by-attaching-over-a-network-connection).
    The path mapping lets a breakpoint set in the local file stop the script in /opt/ml/code;
    justMyCode false, so the toolkit and libraries can be stepped into too."""
    return {
        "name": f"hetero-emu {target.host} ({group})",
        "type": "debugpy",
        "request": "attach",
        "connect": {"host": LOCALHOST, "port": target.port},
        "pathMappings": [{"localRoot": local_root(spec), "remoteRoot": CODE_DIR}],
        "justMyCode": False,
    }


def launch_json(spec: JobSpec, target: DebugTarget, group: str) -> str:
    """The whole `.vscode/launch.json` holding that configuration, as text to paste."""
    document = {"version": "0.2.0", "configurations": [launch_configuration(spec, target, group)]}
    return json.dumps(document, indent=2)
