"""Inspecting a job while and after it runs, in real containers: `logs --follow` shows lines before the
job ends and returns when it ends; `exec` runs a command in a running host; `--keep-on-failure` keeps
a failed job's stopped containers for `exec` (in a copy) and `docker cp`, until `clean --job`.

Every command runs as a subprocess (`python -m emulator.cli`): the real exit codes and streams.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from testkit import hetero_emu as cli
from testkit import write_script_spec

from emulator.planning.plan import LABEL_JOB, LABEL_MANAGED

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

REPO = Path(__file__).resolve().parents[2]

# Each host prints, then waits until a file appears in its /opt/ml (the test, or an exec, makes it).
WAITS_FOR_GO = """\
import json, os, sys, time
host = json.load(open("/opt/ml/input/config/resourceconfig.json"))["current_host"]
print(f"{host} before", flush=True)
while not os.path.exists("/opt/ml/go"):
    time.sleep(0.1)
print(f"{host} after", flush=True)
"""

# algo-1 writes a file outside /opt/ml (only a copy of its container holds it) and fails; algo-2 waits.
FAILS = """\
import json, time
host = json.load(open("/opt/ml/input/config/resourceconfig.json"))["current_host"]
if host == "algo-1":
    open("/tmp/scratch.txt", "w").write("written by algo-1\\n")
    raise SystemExit(3)
time.sleep(600)
"""


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "emulator.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, "NO_COLOR": "1"},
                            stdin=subprocess.DEVNULL)


def write_spec(tmp_path: Path, script: str) -> tuple[Path, str]:
    job = f"inspect-{uuid.uuid4().hex[:8]}"
    return write_script_spec(tmp_path, script, job_name=job, output_path=str(tmp_path / "out"), max_run=300), job


def job_resources(docker_client: Any, job: str) -> dict[str, str]:
    """Name -> status of every container (and network: "network") of the job."""
    filters = {"label": [f"{LABEL_MANAGED}=true", f"{LABEL_JOB}={job}"]}
    found = {c.name: c.status for c in docker_client.containers.list(all=True, filters=filters, ignore_removed=True)}
    found.update({n.name: "network" for n in docker_client.networks.list(filters=filters)})
    return found


def wait_for(condition: Any, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def go(tmp_path: Path, job: str, host: str) -> None:
    """Let `host` finish: the file its script waits for, through its /opt/ml bind mount."""
    (tmp_path / "out" / job / "hosts" / host / "go").write_text("")


def finish(run: subprocess.Popen[str], tmp_path: Path, job: str) -> None:
    """Never leave a job running behind a failed assertion."""
    if run.poll() is None:
        for host in ("algo-1", "algo-2"):
            folder = tmp_path / "out" / job / "hosts" / host
            if folder.is_dir():
                (folder / "go").write_text("")
        try:
            run.wait(60)
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait(30)


def test_logs_follow_shows_lines_while_the_job_runs_and_returns_when_it_ends(tmp_path: Path) -> None:
    spec, job = write_spec(tmp_path, WAITS_FOR_GO)
    run = start("run", str(spec))
    try:
        wait_for(lambda: (tmp_path / "out" / job / "logs" / "algo-2.log").is_file(), "the job's log files")
        follow = start("logs", job, "--follow")
        lines: list[str] = []
        assert follow.stdout is not None
        reader = threading.Thread(target=lambda: lines.extend(follow.stdout), daemon=True)  # type: ignore[arg-type]
        reader.start()
        wait_for(lambda: any("algo-2 before" in line for line in lines), "algo-2's first line, live")
        assert run.poll() is None and follow.poll() is None  # shown before the job ended
        assert not any("after" in line for line in lines)
        go(tmp_path, job, "algo-1")
        go(tmp_path, job, "algo-2")
        assert follow.wait(60) == 0  # returns by itself once the job has ended
        reader.join(10)
        assert run.wait(60) == 0
    finally:
        finish(run, tmp_path, job)
    text = "".join(lines)
    for host, group in (("algo-1", "ga"), ("algo-2", "gb")):
        assert f"{host} ({group}) | {host} before\n" in text and f"{host} ({group}) | {host} after\n" in text
    assert follow.stderr is not None and "Traceback" not in follow.stderr.read()


def test_exec_runs_a_command_in_a_running_host_and_its_exit_code_is_execs(
        tmp_path: Path, docker_client: Any) -> None:
    spec, job = write_spec(tmp_path, WAITS_FOR_GO)
    run = start("run", str(spec))
    try:
        hosts = (f"{job}-algo-1", f"{job}-algo-2")
        wait_for(lambda: [job_resources(docker_client, job).get(name) for name in hosts] == ["running"] * 2,
                 "both hosts running")
        wait_for(lambda: "algo-2 before" in (tmp_path / "out" / job / "logs" / "algo-2.log").read_text(),
                 "algo-2's script running")
        hostname = cli("exec", job, "algo-2", "--", "hostname")
        assert hostname.returncode == 0, hostname.stderr
        assert hostname.stdout == "algo-2\n" and "copy" not in hostname.stderr
        failing = cli("exec", job, "algo-2", "--", "sh", "-c", "echo to-stderr >&2; exit 7")
        assert failing.returncode == 7 and failing.stderr == "to-stderr\n" and failing.stdout == ""
        # The exec's file is what the script waits for: the job ends because of it.
        for host in ("algo-1", "algo-2"):
            assert cli("exec", job, host, "--", "touch", "/opt/ml/go").returncode == 0
        assert run.wait(60) == 0
    finally:
        finish(run, tmp_path, job)
    assert "algo-2 after" in (tmp_path / "out" / job / "logs" / "algo-2.log").read_text()

    # The job has ended and its containers are gone: one clear line, a hint, exit 3.
    ended = cli("exec", job, "algo-2", "--", "hostname")
    assert ended.returncode == 3, ended.stderr
    lines = ended.stderr.strip().splitlines()
    assert lines[0] == (f"error: job {job} is not running (it is Completed): its containers were removed, "
                        "there is no algo-2 to run a command in")
    assert lines[1].startswith("hint: ") and "--keep-on-failure" in lines[1] and len(lines) == 2
    unknown = cli("exec", "no-such-job-" + job, "algo-1", "--", "hostname")
    assert unknown.returncode == 2 and "hetero-emu ps" in unknown.stderr and "Traceback" not in unknown.stderr


# serial: the kept job outlives its driver (the CLI process), so to the no_leftovers check of a test
# running beside it on another worker it is a leftover until this test cleans it.
@pytest.mark.serial
def test_keep_on_failure_keeps_stopped_hosts_for_exec_and_docker_cp_until_clean(
        tmp_path: Path, docker_client: Any) -> None:
    spec, job = write_spec(tmp_path, FAILS)
    try:
        done = cli("run", str(spec), "--keep-on-failure", "--grace", "1", timeout=180)
        assert done.returncode == 1, done.stderr
        assert f"hetero-emu exec {job} algo-1 -- bash" in done.stderr
        assert f"hetero-emu clean --job {job}" in done.stderr
        kept = job_resources(docker_client, job)
        assert kept == {f"{job}-algo-1": "exited", f"{job}-algo-2": "exited", f"hetero-emu-{job}": "network"}
        listed = json.loads(cli("ps", "--json").stdout)
        assert {r["name"] for r in listed if r["job"] == job} == set(kept)

        # exec: in a copy of the stopped host, its own files and its mounts.
        config = cli("exec", job, "algo-1", "--", "cat", "/opt/ml/input/config/resourceconfig.json")
        assert config.returncode == 0, config.stderr
        assert json.loads(config.stdout)["current_host"] == "algo-1"
        assert "algo-1 is not running" in config.stderr and "copy" in config.stderr
        # Each copy is a commit: seconds each on a loaded engine, so one exec checks two things.
        scratch = cli("exec", job, "algo-1", "--", "sh", "-c", "hostname; cat /tmp/scratch.txt")
        assert scratch.returncode == 0 and scratch.stdout == "algo-1\nwritten by algo-1\n", scratch.stderr
        assert cli("exec", job, "algo-2", "--", "sh", "-c", "exit 5").returncode == 5
        assert job_resources(docker_client, job) == kept  # every copy was removed again

        # docker cp (the engine's archive endpoint) from the kept container.
        stream, _ = docker_client.containers.get(f"{job}-algo-1").get_archive("/tmp/scratch.txt")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.extractfile("scratch.txt")
            assert member is not None and member.read() == b"written by algo-1\n"

        cleaned = cli("clean", "--job", job)
        assert cleaned.returncode == 0 and "removed 2 container(s) and 1 network(s)" in cleaned.stdout
        assert job_resources(docker_client, job) == {}
    finally:
        cli("clean", "--job", job)
