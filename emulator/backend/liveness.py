"""Which driver process made a container, and is it still running? (So `clean` and the leftover
warning leave a job that another driver on this machine is running right now alone.)

The identity is `<hostname>@<boot id>/<pid>/<start time in clock ticks>`: the start time (field 22 of
/proc/<pid>/stat, see proc(5)) tells a live driver from a later process that reused its pid.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path


def _start_ticks(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after the last ')'.
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def _machine() -> str:
    """Host name and boot id: two machines of one name sharing an engine, or one machine after a
    reboot (when every old driver is gone and pids start over), are told apart."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}@{boot}" if boot else socket.gethostname()


def current_driver() -> str:
    pid = os.getpid()
    return f"{_machine()}/{pid}/{_start_ticks(pid) or '?'}"


def driver_alive(identity: str | None) -> bool | None:
    """True or False for a driver of this machine; None when it cannot be told (another machine,
    no /proc): callers then treat the job as possibly running."""
    if not identity:
        return False  # made before drivers were recorded: nobody can be running it
    host, _, rest = identity.partition("/")
    pid_text, _, ticks = rest.partition("/")
    if host.partition("@")[0] != socket.gethostname() or not pid_text.isdigit() or \
            not Path("/proc/self/stat").exists():
        return None  # another machine: nothing to check its processes with
    if host != _machine():
        return False  # this machine, an earlier boot: every driver of that boot is gone
    return _start_ticks(int(pid_text)) == ticks
