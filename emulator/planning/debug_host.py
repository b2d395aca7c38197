"""The host whose script runs under debugpy, as the plan gives it (`run --debug-host algo-N`;
docs/cli.md, Debugging a host).

The choice (host, port, wait) is part of the plan: the chosen host's container, and only it, gets
the start-up hook (`emulator/data/startup/sitecustomize.py`, staged and mounted by
emulator/planning/hooks.py) read-only and first on PYTHONPATH, the variables that tell the hook which
script to debug, and debugpy's port published on 127.0.0.1 only (nobody else on the network can
attach: a debugger runs any code it likes in the script). The checks made before a run and the VS
Code configuration it prints are emulator/run/debugger.py. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.jobspec import JobSpec
from emulator.planning import hooks
from emulator.planning.container import PortBinding

# debugpy's own default port; the port inside the container, whatever the published one is.
DEBUGPY_PORT = 5678
LOCALHOST = "127.0.0.1"
# The hook's folder in the package, and where the debugged host sees it.
# Read by the hook (emulator/data/startup/sitecustomize.py, which names them too).
PORT_VARIABLE = "HETERO_EMU_DEBUGPY_PORT"
WAIT_VARIABLE = "HETERO_EMU_DEBUGPY_WAIT"
ENTRY_VARIABLE = "HETERO_EMU_DEBUGPY_ENTRY_POINT"


@dataclass(frozen=True)
class DebugTarget:
    """Which host runs its script under debugpy, the port published on 127.0.0.1, and whether the
    script waits for the debugger before its first line."""

    host: str
    port: int = DEBUGPY_PORT
    wait: bool = False


def host_environment(spec: JobSpec, target: DebugTarget, environment: dict[str, str]) -> dict[str, str]:
    """The debugged host's environment: the job's, with the hook first on PYTHONPATH (before the
    spec's own PYTHONPATH, which stays) and the hook's variables."""
    return {
        **hooks.on_pythonpath(environment),
        PORT_VARIABLE: str(DEBUGPY_PORT),
        WAIT_VARIABLE: "1" if target.wait else "0",
        ENTRY_VARIABLE: spec.entry_point or "",
        # debugpy (pydevd) warns in every debugged process that the interpreter's frozen stdlib
        # modules may miss breakpoints (those are the stdlib's, never the script's); a spec that sets
        # the variable itself keeps its value.
        "PYDEVD_DISABLE_FILE_VALIDATION": environment.get("PYDEVD_DISABLE_FILE_VALIDATION", "1"),
    }


def published_port(target: DebugTarget) -> PortBinding:
    return PortBinding(LOCALHOST, target.port, DEBUGPY_PORT)
