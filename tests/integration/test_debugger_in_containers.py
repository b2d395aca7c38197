"""`--debug-host`: one host's script runs under debugpy in its container, and a real debugger attaches.

The test is the debugger: a minimal Debug Adapter Protocol client
(https://microsoft.github.io/debug-adapter-protocol/specification, Content-Length framed JSON over TCP,
as VS Code speaks to debugpy) attaches to 127.0.0.1:PORT with the path mapping the printed launch.json
gives, sets a breakpoint in the local copy of the script, and reads a local variable the script
computed in the container.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from emulator import api
from emulator.artifacts import JobResult
from emulator.console import RecordingReporter
from emulator.debugger import DebugTarget

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


def attach(port: int, deadline: float) -> DapClient:
    """Connect and initialize, retrying until the script's debugpy listens: the engine's proxy takes
    the connection as soon as the container runs, before debugpy does, and then drops it."""
    while True:
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


def test_a_debugger_attaches_to_one_host_stops_at_a_breakpoint_and_reads_a_variable(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    script = code / "train.py"
    script.write_text(SCRIPT)
    assert SCRIPT.splitlines()[BREAK_LINE - 1].startswith("print(")
    (tmp_path / "job.yaml").write_text(
        "job_name: debugger-test-" + str(int(time.time() * 1000) % 10**9) + "\n"
        "entry_point: train.py\nsource_dir: code\noutput_path: out\nmax_run: 600\n"
        "instance_groups:\n"
        "  - {instance_group_name: data_group, instance_type: ml.c5.xlarge, instance_count: 1}\n"
        "  - {instance_group_name: dnn_group, instance_type: ml.p3.2xlarge, instance_count: 1}\n")
    spec = api.load(tmp_path / "job.yaml")
    assert spec.job_name is not None
    port = free_port()
    reporter = RecordingReporter()
    outcome: dict[str, Any] = {}
    started = time.monotonic()
    deadline = started + DEADLINE

    def run() -> None:
        try:
            outcome["result"] = api.run(spec, reporter=reporter, debug=DebugTarget("algo-2", port, wait=True))
        except BaseException as err:  # noqa: BLE001 - reported by the test's thread
            outcome["error"] = err

    runner = threading.Thread(target=run, name="debugged-job", daemon=True)
    runner.start()
    client = None
    try:
        client = attach(port, deadline)
        attached = time.monotonic()
        # What the printed launch.json says, as VS Code would send it.
        client.send("attach", justMyCode=False, pathMappings=[{"localRoot": str(code), "remoteRoot": "/opt/ml/code"}])
        client.event("initialized")
        breakpoints = client.request("setBreakpoints", source={"path": str(script)},
                                     breakpoints=[{"line": BREAK_LINE}])
        assert breakpoints["body"]["breakpoints"][0]["verified"], breakpoints
        client.request("configurationDone")
        stopped = client.event("stopped")
        assert stopped["body"]["reason"] == "breakpoint", stopped
        thread_id = stopped["body"]["threadId"]
        frame = client.request("stackTrace", threadId=thread_id, startFrame=0, levels=1)["body"]["stackFrames"][0]
        # The container's /opt/ml/code/train.py, shown as the local file through the path mapping.
        assert (frame["line"], frame["source"]["path"]) == (BREAK_LINE, str(script))
        scopes = client.request("scopes", frameId=frame["id"])["body"]["scopes"]
        local = next(s for s in scopes if s["name"] == "Locals")
        values = {v["name"]: v["value"] for v in
                  client.request("variables", variablesReference=local["variablesReference"])["body"]["variables"]}
        assert values["total"] == "50"
        assert values["marker"] == "'algo-2:50'"
        client.request("continue", threadId=thread_id)
        runner.join(max(1.0, deadline - time.monotonic()))
        assert not runner.is_alive(), "the job did not end after the debugger continued"
    finally:
        if client is not None:
            client.close()
        if runner.is_alive():
            api.stop(spec.job_name, grace=1)  # a failed attach must not leave the job waiting
            runner.join(60)
    assert "error" not in outcome, outcome.get("error")
    result: JobResult = outcome["result"]
    assert result.status == "Completed" and result.exit_code == 0, result.failure_reason

    # Before the hosts started: VS Code's configuration, with this port and the local code folder.
    announced = next(i for i in reporter.infos if i.startswith("debugger: algo-2 (dnn_group)"))
    configuration = json.loads(announced.split("\n", 1)[1])["configurations"][0]
    assert configuration["connect"] == {"host": "127.0.0.1", "port": port}
    assert configuration["pathMappings"] == [{"localRoot": str(code), "remoteRoot": "/opt/ml/code"}]
    assert f"waiting for a debugger on 127.0.0.1:{port} (algo-2 (dnn_group))" in reporter.infos
    # Both hosts ran the script; only algo-2 had a debugger, and it waited for it.
    lines = {host: [line for h, _, line in reporter.lines if h == host] for host in ("algo-1", "algo-2")}
    assert "TOTAL algo-1:50" in lines["algo-1"] and "TOTAL algo-2:50" in lines["algo-2"]
    assert not any("hetero-emu debugger" in line for line in lines["algo-1"])
    assert any(line.startswith("hetero-emu debugger: waiting for the debugger") for line in lines["algo-2"])
    print(f"attached {attached - started:.1f} s after the run began; whole job {time.monotonic() - started:.1f} s")
