"""`--debug-host`: one host's script runs under debugpy in its container, and a real debugger attaches.

The test is the debugger: a minimal Debug Adapter Protocol client
(https://microsoft.github.io/debug-adapter-protocol/specification, Content-Length framed JSON over TCP,
as VS Code speaks to debugpy) attaches to 127.0.0.1:PORT with the path mapping the printed launch.json
gives, sets a breakpoint in the local copy of the script, and reads a local variable the script
computed in the container.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from emulator import api
from emulator.defaults import PYTORCH_IMAGE
from emulator.options import RunOptions
from emulator.planning.debug_host import DebugTarget
from emulator.reports.console import RecordingReporter
from emulator.result import JobResult

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

SCRIPT = """\
import os

host = os.environ["SM_CURRENT_HOST"]
numbers = [3, 4, 5]
total = sum(n * n for n in numbers)
marker = f"{host}:{total}"
print("TOTAL " + marker)
"""
BREAK_LINE = 7  # the print: `total` and `marker` are set
DEADLINE = 240.0  # seconds for the whole test; every wait below is bounded by it


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class DapClient:
    """Just enough of a DAP client: requests, their responses, and the events in between."""

    def __init__(self, port: int, deadline: float) -> None:
        self.deadline = deadline
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buffer = b""
        self.seq = 0
        self.events: list[dict[str, Any]] = []

    def close(self) -> None:
        self.sock.close()

    def send(self, command: str, **arguments: Any) -> int:
        self.seq += 1
        body = json.dumps({"seq": self.seq, "type": "request", "command": command, "arguments": arguments}).encode()
        self.sock.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return self.seq

    def read(self) -> dict[str, Any]:
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))
        while len(rest) < length:
            self.buffer = head + b"\r\n\r\n" + rest
            self._fill()
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
        self.buffer = rest[length:]
        message: dict[str, Any] = json.loads(rest[:length])
        return message

    def _fill(self) -> None:
        self.sock.settimeout(max(0.1, self.deadline - time.monotonic()))
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the debug adapter closed the connection")
        self.buffer += data

    def response(self, seq: int) -> dict[str, Any]:
        """The response to request `seq`; events read meanwhile are kept."""
        while True:
            message = self.read()
            if message["type"] == "response" and message["request_seq"] == seq:
                assert message["success"], message
                return message
            if message["type"] == "event":
                self.events.append(message)

    def request(self, command: str, **arguments: Any) -> dict[str, Any]:
        return self.response(self.send(command, **arguments))

    def event(self, name: str) -> dict[str, Any]:
        while True:
            for event in self.events:
                if event["event"] == name:
                    self.events.remove(event)
                    return event
            message = self.read()
            if message["type"] == "event":
                self.events.append(message)


def attach(port: int, deadline: float, job: threading.Thread) -> DapClient:
    """Connect and initialize, retrying until the script's debugpy listens: the engine's proxy takes
    the connection as soon as the container runs, before debugpy does, and then drops it. A job that
    ended meanwhile ends the wait (its outcome says why)."""
    while True:
        assert job.is_alive(), "the job ended before a debugger could attach"
        client = None
        try:
            client = DapClient(port, min(deadline, time.monotonic() + 10))
            client.request("initialize", clientID="hetero-emu-test", adapterID="debugpy", pathFormat="path",
                           linesStartAt1=True, columnsStartAt1=True)
            client.deadline = deadline
            return client
        except (ConnectionError, OSError):
            if client is not None:
                client.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@dataclass
class DebuggedJob:
    """What one debugged run gave: the job's result, what the run reported, and the breakpoint's frame."""

    result: JobResult
    reporter: RecordingReporter
    locals: dict[str, str]
    attached_after: float
    seconds: float


def debug_job(folder: Path, spec_text: str, target: DebugTarget, script: Path, line: int) -> DebuggedJob:
    """Run the job in a thread with `target` waiting for a debugger, attach as VS Code would with the
    printed path mapping, stop at `line` of the local `script`, read the frame's locals, continue, and
    wait for the job to end. Bounded by DEADLINE; a job still waiting when the test fails is stopped."""
    (folder / "job.yaml").write_text(spec_text)
    spec = api.load(folder / "job.yaml")
    assert spec.job_name is not None and spec.source_dir is not None
    reporter = RecordingReporter()
    outcome: dict[str, Any] = {}
    started = time.monotonic()
    deadline = started + DEADLINE

    def run() -> None:
        try:
            outcome["result"] = api.run(spec, RunOptions(debug=target), reporter=reporter)
        except BaseException as err:  # noqa: BLE001 - reported by the test's thread
            outcome["error"] = err

    runner = threading.Thread(target=run, name="debugged-job", daemon=True)
    runner.start()
    client = None
    try:
        client = attach(target.port, deadline, runner)
        attached = time.monotonic()
        # What the printed launch.json says, as VS Code would send it.
        client.send("attach", justMyCode=False,
                    pathMappings=[{"localRoot": str(spec.source_dir), "remoteRoot": "/opt/ml/code"}])
        client.event("initialized")
        breakpoints = client.request("setBreakpoints", source={"path": str(script)}, breakpoints=[{"line": line}])
        assert breakpoints["body"]["breakpoints"][0]["verified"], breakpoints
        client.request("configurationDone")
        stopped = client.event("stopped")
        assert stopped["body"]["reason"] == "breakpoint", stopped
        thread_id = stopped["body"]["threadId"]
        frame = client.request("stackTrace", threadId=thread_id, startFrame=0, levels=1)["body"]["stackFrames"][0]
        # The container's /opt/ml/code/train.py, shown as the local file through the path mapping.
        assert (frame["line"], frame["source"]["path"]) == (line, str(script))
        scopes = client.request("scopes", frameId=frame["id"])["body"]["scopes"]
        local = next(s for s in scopes if s["name"] == "Locals")
        values = {v["name"]: v["value"] for v in
                  client.request("variables", variablesReference=local["variablesReference"])["body"]["variables"]}
        client.request("continue", threadId=thread_id)
        # The script ends; as VS Code does then, the client ends the session. (debugpy's adapter, a
        # child of the script holding its output, stays while a client is connected: mpirun, which
        # reads the ranks' output to its end, would wait for it.)
        client.event("terminated")
        client.send("disconnect")
        client.close()
        runner.join(max(1.0, deadline - time.monotonic()))
        assert not runner.is_alive(), "the job did not end after the debugger continued"
    finally:
        if client is not None:
            client.close()
        if runner.is_alive():
            api.stop(spec.job_name, grace=1)  # a failed attach must not leave the job waiting
            runner.join(60)
    assert "error" not in outcome, outcome.get("error")
    return DebuggedJob(outcome["result"], reporter, values, attached - started, time.monotonic() - started)


def host_lines(reporter: RecordingReporter, host: str) -> list[str]:
    return [line for h, _, line in reporter.lines if h == host]


def write_script(folder: Path, text: str) -> Path:
    """The job's entry point, code/train.py under `folder` (the specs' source_dir: code)."""
    (folder / "code").mkdir()
    script = folder / "code" / "train.py"
    script.write_text(text)
    return script


def unique(name: str) -> str:
    return f"{name}-{int(time.time() * 1000) % 10**9}"


def test_a_debugger_attaches_to_one_host_stops_at_a_breakpoint_and_reads_a_variable(tmp_path: Path) -> None:
    script = write_script(tmp_path, SCRIPT)
    assert SCRIPT.splitlines()[BREAK_LINE - 1].startswith("print(")
    port = free_port()
    job = debug_job(tmp_path, f"job_name: {unique('debugger-test')}\n"
                    "entry_point: train.py\nsource_dir: code\noutput_path: out\nmax_run: 600\n"
                    "instance_groups:\n"
                    "  - {instance_group_name: data_group, instance_type: ml.c5.xlarge, instance_count: 1}\n"
                    "  - {instance_group_name: dnn_group, instance_type: ml.p3.2xlarge, instance_count: 1}\n",
                    DebugTarget("algo-2", port, wait=True), script, BREAK_LINE)
    assert job.locals["total"] == "50"
    assert job.locals["marker"] == "'algo-2:50'"
    assert job.result.status == "Completed" and job.result.exit_code == 0, job.result.failure_reason

    # Before the hosts started: VS Code's configuration, with this port and the local code folder.
    announced = next(i for i in job.reporter.infos if i.startswith("debugger: algo-2 (dnn_group)"))
    configuration = json.loads(announced.split("\n", 1)[1])["configurations"][0]
    assert configuration["connect"] == {"host": "127.0.0.1", "port": port}
    assert configuration["pathMappings"] == [{"localRoot": str(script.parent), "remoteRoot": "/opt/ml/code"}]
    assert f"waiting for a debugger on 127.0.0.1:{port} (algo-2 (dnn_group))" in job.reporter.infos
    # Both hosts ran the script; only algo-2 had a debugger, and it waited for it.
    first, second = host_lines(job.reporter, "algo-1"), host_lines(job.reporter, "algo-2")
    assert "TOTAL algo-1:50" in first and "TOTAL algo-2:50" in second
    assert not any("hetero-emu debugger" in line for line in first)
    assert "hetero-emu debugger: waiting for the debugger to attach" in second
    print(f"attached {job.attached_after:.1f} s after the run began; whole job {job.seconds:.1f} s")


MPI_SCRIPT = """\
import sys
from mpi4py import MPI

rank = MPI.COMM_WORLD.Get_rank()
total = MPI.COMM_WORLD.allreduce(rank + 1)
sys.stdout.write(f"RANK {rank} TOTAL {total}\\n")
"""
# mpirun --tag-output prefixes every chunk a rank writes, so one rank's line can arrive in pieces.
MPI_TAG = re.compile(r"\[\d+,\d+\]<std(?:out|err)>:")


def test_under_mpi_the_first_rank_on_mpiruns_host_is_debugged_and_the_others_run_on(tmp_path: Path) -> None:
    script = write_script(tmp_path, MPI_SCRIPT)
    job = debug_job(tmp_path, f"job_name: {unique('debugger-mpi')}\n"
                    "entry_point: train.py\nsource_dir: code\noutput_path: out\nmax_run: 600\n"
                    "instance_groups:\n"
                    "  - {instance_group_name: data_group, instance_type: ml.c5.xlarge, instance_count: 1}\n"
                    "  - {instance_group_name: dnn_group, instance_type: ml.p3.2xlarge, instance_count: 2}\n"
                    "distribution:\n  mpi: {enabled: true, processes_per_host: 2}\n"
                    "  instance_groups: [dnn_group]\n",
                    DebugTarget("algo-2", free_port(), wait=True), script, 6)
    # 4 ranks (2 hosts x 2): the allreduce of rank + 1 is 10 in the debugged rank too.
    assert job.locals["total"] == "10"
    assert job.result.status == "Completed", job.result.failure_reason
    mpirun_host = host_lines(job.reporter, "algo-2")
    assert sum("hetero-emu debugger: debugpy listens" in line for line in mpirun_host) == 1
    untagged = [MPI_TAG.sub("", line) for line in mpirun_host]
    assert all(f"RANK {rank} TOTAL 10" in untagged for rank in range(4)), untagged
    assert not any("hetero-emu debugger" in line for host in ("algo-1", "algo-3")
                   for line in host_lines(job.reporter, host))
    print(f"MPI: attached {job.attached_after:.1f} s after the run began; whole job {job.seconds:.1f} s")


TORCH_SCRIPT = """\
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
value = torch.tensor([dist.get_rank() + 1])
dist.all_reduce(value)
total = int(value.item())
print(f"RANK {dist.get_rank()} TOTAL {total}")
dist.destroy_process_group()
"""


@pytest.mark.usefixtures("pytorch_image")
def test_under_torchrun_the_worker_on_the_debugged_host_is_debugged(tmp_path: Path) -> None:
    script = write_script(tmp_path, TORCH_SCRIPT)
    job = debug_job(tmp_path, f"job_name: {unique('debugger-torch')}\n"
                    f"image_uri: {PYTORCH_IMAGE}\n"
                    "entry_point: train.py\nsource_dir: code\noutput_path: out\nmax_run: 600\n"
                    "instance_groups:\n"
                    "  - {instance_group_name: data_group, instance_type: ml.c5.xlarge, instance_count: 1}\n"
                    "  - {instance_group_name: dnn_group, instance_type: ml.g5.xlarge, instance_count: 2}\n"
                    "distribution:\n  torch_distributed: {enabled: true}\n  instance_groups: [dnn_group]\n",
                    DebugTarget("algo-3", free_port(), wait=True), script, 9)
    # torchrun's worker on algo-3 (rank 1 of the dnn_group's world of 2), stopped after the all_reduce.
    assert job.locals["total"] == "3"
    assert job.result.status == "Completed", job.result.failure_reason
    assert "RANK 1 TOTAL 3" in host_lines(job.reporter, "algo-3")
    assert "RANK 0 TOTAL 3" in host_lines(job.reporter, "algo-2")
    assert "hetero-emu debugger: debugger attached" in host_lines(job.reporter, "algo-3")
    assert not any("hetero-emu debugger" in line for host in ("algo-1", "algo-2")
                   for line in host_lines(job.reporter, host))
    print(f"torchrun: attached {job.attached_after:.1f} s after the run began; whole job {job.seconds:.1f} s")


def test_a_debug_port_in_use_exits_3_before_anything_is_created(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(SCRIPT)
    (tmp_path / "job.yaml").write_text("base_job_name: debugger-port\nentry_point: train.py\nsource_dir: code\n"
                                       "output_path: out\ninstance_type: ml.c5.xlarge\ninstance_count: 2\n")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "emulator.cli", "run", str(tmp_path / "job.yaml"),
                               "--debug-host", "algo-2", "--debug-port", str(port)],
                              capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.splitlines() == [f"error: --debug-port {port}: port {port} on 127.0.0.1 is in use",
                                        "hint: choose a free one with --debug-port PORT"]
    assert not (tmp_path / "out").exists()  # and no_leftovers: no container or network
