"""Stopping a job on the real engine: what signal a host's script receives and when, a second Ctrl-C,
and a Ctrl-C before any host runs. Each interrupt prints one line saying what it stopped.

On the service, StopTrainingJob sends SIGTERM to the container and kills it 120 s later
(https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_StopTrainingJob.html). With the
toolkit's `train` as the command, the SIGTERM goes to the toolkit, not to the script it started, so a
script's SIGTERM handler never runs (aws/sagemaker-training-toolkit#125, aws/deep-learning-containers#632);
here the toolkit dies of it at once and the script with it, instead of 120 s later. A script that is
the container's own entry point gets the SIGTERM, as it does as PID 1 on the service.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

REPO = Path(__file__).resolve().parents[2]

HANDLER = '''
import signal, sys, time
from pathlib import Path

def on_sigterm(signum, frame):
    Path("/opt/ml/model/saved-on-sigterm").write_text("saved")
    sys.exit(0)

signal.signal(signal.SIGTERM, {handler})
print("ready", flush=True)
while True:
    time.sleep(0.1)
'''


class Driver:
    """`hetero-emu run SPEC` in the background, its stderr collected line by line as it comes."""

    def __init__(self, tmp_path: Path, raw: dict[str, Any], *args: str) -> None:
        self.job = raw["job_name"]
        self.job_dir = tmp_path / "out" / self.job
        spec = tmp_path / "spec.yaml"
        spec.write_text(json.dumps(raw))  # JSON is YAML
        self.proc = subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(spec), *args], cwd=REPO,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "NO_COLOR": "1"})
        self.err: list[str] = []
        self._reader = threading.Thread(target=lambda: self.err.extend(iter(self.proc.stderr.readline, "")),  # type: ignore[union-attr]
                                        daemon=True)
        self._reader.start()

    def wait_for(self, predicate: Any, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, "".join(self.err)
            assert self.proc.poll() is None, "".join(self.err)
            time.sleep(0.05)

    def host_said_ready(self) -> bool:
        """Every host's script is running with its SIGTERM handler in place (both print "ready")."""
        logs = [self.job_dir / "logs" / f"algo-{i}.log" for i in (1, 2)]
        return all(log.is_file() and b"ready\n" in log.read_bytes() for log in logs)

    def finish(self, timeout: float = 120) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(10)
        return code

    def stderr(self) -> str:
        return "".join(self.err)

    def hosts(self) -> list[dict[str, Any]]:
        return json.loads((self.job_dir / "job.json").read_text())["Hosts"]  # type: ignore[no-any-return]


def job(tmp_path: Path, prefix: str, handler: str, *, own_entry_point: bool) -> dict[str, Any]:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text(HANDLER.format(handler=handler))
    raw: dict[str, Any] = {"job_name": f"{prefix}-{uuid.uuid4().hex[:8]}", "source_dir": "code",
                           "instance_groups": [{"instance_group_name": "g", "instance_type": "ml.c5.xlarge",
                                                "instance_count": 2}],
                           "output_path": str(tmp_path / "out")}
    if own_entry_point:
        raw["container_entry_point"] = ["python3", "/opt/ml/code/train.py"]
    else:
        raw["entry_point"] = "train.py"
    return raw


def test_under_train_a_stopped_script_gets_no_sigterm_as_on_the_service(tmp_path: Path) -> None:
    driver = Driver(tmp_path, job(tmp_path, "sig-train", "on_sigterm", own_entry_point=False), "--grace", "60")
    driver.wait_for(driver.host_said_ready)
    began = time.monotonic()
    stop = subprocess.run([sys.executable, "-m", "emulator.cli", "stop", driver.job], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    assert stop.returncode == 0, stop.stderr
    assert driver.finish() == 130, driver.stderr()
    # The toolkit died of the SIGTERM (exit 143) and took the script with it, long before the 60 s
    # grace: the script's handler never ran.
    assert time.monotonic() - began < 30
    assert not (driver.job_dir / "hosts" / "algo-1" / "model" / "saved-on-sigterm").exists()
    assert [h["ExitCode"] for h in driver.hosts()] == [143, 143]
    assert json.loads((driver.job_dir / "job.json").read_text())["TrainingJobStatus"] == "Stopped"


def test_a_script_that_is_the_entry_point_gets_sigterm_and_saves(tmp_path: Path) -> None:
    driver = Driver(tmp_path, job(tmp_path, "sig-own", "on_sigterm", own_entry_point=True), "--grace", "60")
    driver.wait_for(driver.host_said_ready)
    driver.proc.send_signal(signal.SIGINT)
    assert driver.finish() == 130, driver.stderr()
    for host in ("algo-1", "algo-2"):
        assert (driver.job_dir / "hosts" / host / "model" / "saved-on-sigterm").read_text() == "saved"
    assert [h["ExitCode"] for h in driver.hosts()] == [0, 0]
    lines = [line for line in driver.err if line.startswith("warning: interrupted")]
    assert lines == ["warning: interrupted: stopping algo-1 (g), algo-2 (g) (SIGTERM, SIGKILL after 60 s; "
                     "Ctrl-C again kills them now)\n"]


def test_a_second_ctrl_c_kills_at_once_instead_of_waiting_the_grace(tmp_path: Path) -> None:
    driver = Driver(tmp_path, job(tmp_path, "sig-twice", "signal.SIG_IGN", own_entry_point=True), "--grace", "60")
    driver.wait_for(driver.host_said_ready)
    driver.proc.send_signal(signal.SIGINT)
    driver.wait_for(lambda: "interrupted: stopping" in driver.stderr())
    time.sleep(1)
    began = time.monotonic()
    driver.proc.send_signal(signal.SIGINT)
    assert driver.finish() == 130, driver.stderr()
    assert time.monotonic() - began < 30  # not the 60 s grace
    assert "warning: interrupted again: killing algo-1 (g), algo-2 (g) now\n" in driver.err
    assert [h["ExitCode"] for h in driver.hosts()] == [137, 137]  # recorded, not null


def test_ctrl_c_while_staging_says_nothing_was_started_and_leaves_nothing(tmp_path: Path) -> None:
    raw = job(tmp_path, "sig-staging", "on_sigterm", own_entry_point=False)
    raw["instance_groups"][0]["instance_count"] = 8
    with open(tmp_path / "code" / "weights.bin", "wb") as f:
        f.truncate(400 * 1024 * 1024)  # copied into each host's /opt/ml/code: staging takes a while
    driver = Driver(tmp_path, raw)
    driver.wait_for(lambda: "staging 8 hosts" in driver.stderr())
    driver.proc.send_signal(signal.SIGINT)
    assert driver.finish() == 130, driver.stderr()
    assert driver.err[-1] == ("stopped by the user: interrupted while staging the hosts: nothing was started, and "
                              f"the half-made job folder {driver.job_dir} was removed\n")
    assert not driver.job_dir.exists()
