"""The hosts' Python start-up hook: the toolkit's vCPU count (`--cpus instance`), the wait for the job's
AWS gateway, and debugpy in the debugged host's entry point (`--debug-host`).

The emulator copies this folder into the job folder and mounts it read-only, first on PYTHONPATH, on
the hosts that need it, so every Python process there imports this module at start-up
(https://docs.python.org/3/library/site.html: "an attempt is made to import a module named
sitecustomize"). It must cost nothing and never fail in any process: the toolkit's own `train`, its
`pip install -r requirements.txt`, mpirun's helpers, torchrun, debugpy's own adapter. So it only reads
the command line and the environment, then hands over to the image's own sitecustomize (`chain`).

**The vCPU count** (docs/gpus.md, CPUs). The toolkit's `SM_NUM_CPUS` is `multiprocessing.cpu_count()`
in its own `train` process (aws/sagemaker-training-toolkit, src/sagemaker_training/environment.py
`num_cpus`): 72 on an ml.c5.18xlarge, this machine's core count here. With HETERO_EMU_CPU_COUNT set
(the type's vCPUs), `multiprocessing.cpu_count()` answers it in the `train` process only: the script
it starts, and everything else, still counts this machine's cores, so a
`DataLoader(num_workers=os.cpu_count())` does not start 72 processes on 2 cores.

**The debugger** (docs/cli.md, Debugging a host): debugpy is imported only in the process whose main
script is the entry point.

How the toolkit starts the entry point (aws/sagemaker-training-toolkit, src/sagemaker_training/process.py
`ProcessRunner._create_command`): `[sys.executable, "<entry point>", *args]` for a script,
`[sys.executable, "-m", "<module>", *args]` when the code has a setup.py, in /opt/ml/code; the MPI
runner puts `-m mpi4py` before the script (mpi.py `MasterRunner._python_command`), torchrun starts
`python -u <entry point>` per worker. The toolkit hands the script a PYTHONPATH made of its own
sys.path (environment.py `write_env_vars`), which begins with this folder, so the hook reaches the
script through every one of them. A container_entry_point that runs the script with python does too.

**The AWS gateway** (emulator/run/job_aws.py). A job's hosts name its gateway as their DNS server, and
the driver starts it beside them, not before them (the gateway's start was most of what the emulator
added to a job's start: docs/benchmarks.md). Until it answers, a name outside the job does not
resolve and AWS cannot be reached, so the host's first Python process (the toolkit's `train`, or a
container_entry_point's python) waits here, at most GATEWAY_SECONDS, until the gateway answers a DNS
query; then every later process of the host finds the mark (`WAITED`) and goes on at once. When the
driver has found that the gateway did not start it says so in the hosts' AWS folder (`GATEWAY_FAILED`)
and the wait ends; a wait that ends unanswered is said on stderr. A process of the host that is not
Python is not held (the gateway answers ~0.1-0.3 s after the hosts start).

Only the first such process of the host is debugged (several MPI ranks or torchrun workers would all
want the one port): the first to create the claim file wins.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import sys
import time

TYPE_CHECKING = False  # typing's own, without importing typing in every process of the host (mypy knows the name)
if TYPE_CHECKING:
    import socket

CODE_DIR = "/opt/ml/code"
# Set by the emulator's plan (emulator/planning/hardware.py) to the instance type's vCPUs.
CPUS_VARIABLE = "HETERO_EMU_CPU_COUNT"
# The console script the service runs (`train`, the image's CMD): its path is the main script.
TOOLKIT_COMMAND = "train"
# Set by the emulator's plan (emulator/planning/debug_host.py) on the debugged host only.
PORT_VARIABLE = "HETERO_EMU_DEBUGPY_PORT"
WAIT_VARIABLE = "HETERO_EMU_DEBUGPY_WAIT"
ENTRY_VARIABLE = "HETERO_EMU_DEBUGPY_ENTRY_POINT"
CLAIM = "/tmp/.hetero-emu-debugpy-claimed"
# Set by the emulator's plan (emulator/run/job_aws.py `with_aws`) on every host of a job with AWS
# inside: the gateway's name on the job's network.
GATEWAY_VARIABLE = "HETERO_EMU_AWS_GATEWAY"
# Written by the driver into the hosts' AWS folder (job_aws.HOSTS_TARGET) when its gateway did not start.
GATEWAY_FAILED = "/etc/hetero-emu/aws/gateway-failed"
# Made by the host's first process once its wait is over, answered or not.
WAITED = "/tmp/.hetero-emu-aws-gateway-waited"
GATEWAY_SECONDS = 10.0  # job_aws.HOLD_SECONDS: the driver's own wait for the gateway's word
DNS_PORT = 53
PROBE_NAME = "sts.amazonaws.com"  # an AWS name: the gateway answers it itself, never asking upstream
PROBE_SECONDS = 0.02  # a query is sent this often until one is answered
# Interpreter options that take a value as the next argument (python --help).
OPTIONS_WITH_VALUE = ("-W", "-X", "--check-hash-based-pycs")


def main_script(argv: list[str]) -> str | None:
    """The script a Python command line runs (relative paths are relative to the working folder), or
    None for `-c` and for the interpreter alone. `-m mpi4py SCRIPT` runs SCRIPT; `-m pkg.mod` runs
    pkg/mod.py."""
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-c":
            return None
        if arg == "-m":
            module = argv[i + 1] if i + 1 < len(argv) else ""
            if module == "mpi4py":
                rest = argv[i + 2:]
                return rest[0] if rest and not rest[0].startswith("-") else None
            return module.replace(".", "/") + ".py" if module else None
        if arg in OPTIONS_WITH_VALUE:
            i += 2
            continue
        if arg.startswith("-") and arg != "-":
            i += 1
            continue
        return arg
    return None


def is_entry_point(argv: list[str], entry_point: str, cwd: str) -> bool:
    """Whether the command line runs the job's entry point (`/opt/ml/code/<entry_point>`)."""
    script = main_script(argv)
    if script is None:
        return False
    wanted = os.path.normpath(os.path.join(CODE_DIR, entry_point))
    return os.path.normpath(os.path.join(cwd, script)) == wanted


def is_toolkit(argv: list[str]) -> bool:
    """Whether this process is the toolkit's `train` (python /path/to/bin/train ...): sys.orig_argv
    (3.10+) starts with the interpreter, sys.argv (older Pythons) with the script."""
    script = argv[1] if len(argv) >= 2 and "python" in os.path.basename(argv[0]) else argv[0] if argv else ""
    return os.path.basename(script) == TOOLKIT_COMMAND


def count_instance_cpus() -> None:
    count = os.environ.get(CPUS_VARIABLE, "")
    if not count.isdigit() or int(count) < 1 or not is_toolkit(list(getattr(sys, "orig_argv", sys.argv))):
        return
    cpus = int(count)
    multiprocessing.cpu_count = lambda: cpus


def dns_query(name: str, ident: int) -> bytes:
    """A DNS query (RFC 1035, 4.1) for `name`'s A record, recursion desired."""
    labels = b"".join(bytes([len(part)]) + part.encode("ascii") for part in name.split("."))
    return ident.to_bytes(2, "big") + b"\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + labels + b"\x00\x00\x01\x00\x01"


def gateway_answers(probe: socket.socket, gateway: str, port: int, query: bytes) -> bool:
    """Whether the gateway answers `query` (sent now) or an earlier one on `probe` before its timeout.
    One socket for the whole wait: a query sent before the gateway's address existed is lost, and its
    answer is not waited for; any later one counts. The gateway's name is in the host's /etc/hosts
    (emulator/run/job_aws.py `_pointed`): Docker's resolver, asked for it before the gateway runs,
    forwards the question to the gateway's own address and gives up after 10 s."""
    import socket

    try:
        probe.sendto(query, (socket.gethostbyname(gateway), port))
        return probe.recv(512)[:2] == query[:2]
    except socket.timeout:  # noqa: UP041 - an alias of TimeoutError only from Python 3.10; an image may be older
        return False
    except OSError:  # its name not yet known (a swarm's), no route to it yet
        time.sleep(PROBE_SECONDS)
        return False


def await_gateway(seconds: float = GATEWAY_SECONDS, port: int = DNS_PORT, failed: str = GATEWAY_FAILED,
                  waited: str = WAITED) -> None:
    """Hold the host's first process until the job's AWS gateway answers, at most `seconds`; every later
    process finds `waited` and goes on at once (one stat)."""
    gateway = os.environ.get(GATEWAY_VARIABLE)
    if not gateway or os.path.exists(waited):
        return
    import socket

    deadline = time.monotonic() + seconds
    query = dns_query(PROBE_NAME, os.getpid() & 0xFFFF)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.settimeout(PROBE_SECONDS)
        while not gateway_answers(probe, gateway, port, query):
            if os.path.exists(failed):
                say_aws("the job's AWS gateway did not start (the driver says why): going on without AWS")
                break
            if time.monotonic() > deadline:
                say_aws(f"the job's AWS gateway ({gateway}) did not answer within {seconds:.0f} s: going on; "
                        "AWS and names outside the job may not resolve")
                break
    with contextlib.suppress(OSError):
        os.close(os.open(waited, os.O_CREAT | os.O_WRONLY, 0o644))


def say_aws(message: str) -> None:
    sys.stderr.write(f"hetero-emu: {message}\n")
    sys.stderr.flush()


def claim() -> bool:
    """True for the first process of the host to ask (the file is made atomically)."""
    try:
        os.close(os.open(CLAIM, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError:
        return False
    return True


def say(message: str) -> None:
    sys.stderr.write(f"hetero-emu debugger: {message}\n")
    sys.stderr.flush()


def start() -> None:
    port, entry_point = os.environ.get(PORT_VARIABLE), os.environ.get(ENTRY_VARIABLE)
    wait = os.environ.get(WAIT_VARIABLE) == "1"
    if not port or not entry_point:
        return
    if not is_entry_point(list(getattr(sys, "orig_argv", sys.argv)), entry_point, os.getcwd()) or not claim():
        return
    # The script's own children (DataLoader workers, a subprocess) are not the entry point: debugpy
    # follows them itself when they are Python.
    for name in (PORT_VARIABLE, WAIT_VARIABLE, ENTRY_VARIABLE):
        os.environ.pop(name, None)
    try:
        import debugpy
    except ImportError:
        say(f"debugpy is not installed in this image ({sys.executable}): {entry_point} runs without a debugger "
            "(add `debugpy` to the image)")
        return
    try:
        debugpy.listen(("0.0.0.0", int(port)))
    except Exception as err:  # noqa: BLE001 - the script runs on without a debugger, and says why
        say(f"debugpy could not listen on port {port}: {err}; {entry_point} runs without a debugger")
        return
    say(f"debugpy listens on port {port} in pid {os.getpid()} ({entry_point})")
    if wait:
        say("waiting for the debugger to attach")
        debugpy.wait_for_client()
        say("debugger attached")


def chain() -> None:
    """Import the sitecustomize this one hides (Debian's python has one), as if this were not here."""
    here = os.path.dirname(os.path.abspath(__file__))
    saved_path, saved_module = list(sys.path), sys.modules.pop(__name__, None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    except Exception as err:  # noqa: BLE001 - site.py would only have printed it too
        say(f"the image's own sitecustomize failed: {type(err).__name__}: {err}")
    finally:
        sys.path[:] = saved_path
        if saved_module is not None:
            sys.modules[__name__] = saved_module


with contextlib.suppress(Exception):  # never break a process of the host
    count_instance_cpus()
with contextlib.suppress(Exception):
    await_gateway()
try:
    start()
except Exception as problem:  # noqa: BLE001 - never break a process of the host
    say(f"not started: {type(problem).__name__}: {problem}")
chain()
