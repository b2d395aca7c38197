"""The command line as a user meets it: exit codes, messages without tracebacks, clean stdout for --json.

Every command runs in a subprocess (`python -m emulator.cli`), so exit codes and the split between
stdout and stderr are the real ones.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from testkit import hetero_emu as cli
from testkit import write_script_spec as write_spec

from emulator.planning.plan import LABEL_JOB, LABEL_MANAGED

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

REPO = Path(__file__).resolve().parents[2]
HELLO_SPEC = REPO / "examples" / "hello-hetero" / "job.yaml"


def job_resources(docker_client: Any, job: str) -> list[str]:
    filters = {"label": [f"{LABEL_MANAGED}=true", f"{LABEL_JOB}={job}"]}
    return ([c.name for c in docker_client.containers.list(all=True, filters=filters, ignore_removed=True)]
            + [n.name for n in docker_client.networks.list(filters=filters)])


def job_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


# --------------------------------------------------------------------------------------------------
# Environment problems: exit 3, a message and a hint, no traceback, nothing left


def test_missing_image_exits_3(tmp_path: Path, docker_client: Any) -> None:
    spec = write_spec(tmp_path, "print('never runs')\n", image_uri="no-such-image:1", base_job_name="no-image")
    out = tmp_path / "out"
    done = cli("run", str(spec), "--output-path", str(out))

    assert done.returncode == 3, done.stderr
    assert "no-such-image:1" in done.stderr
    assert "hint:" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    # Nothing was created: no image pulled or built, no job folder, no container (no_leftovers).
    assert not docker_client.images.list(name="no-such-image")
    assert job_dirs(out) == []


def test_run_no_build_with_the_default_image_missing_exits_3_and_builds_nothing(
    tmp_path: Path, docker_client: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    # The real default image is there (and must stay): the run is pointed at a default tag the engine
    # does not have, in process, so `--no-build` meets a missing default image on the real engine.
    from emulator import cli as cli_module
    from emulator.run import preflight

    missing = f"hetero-emu/no-such-default:{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(preflight, "DEFAULT_IMAGE", missing)  # what the run's preflight calls the default
    monkeypatch.setattr(cli_module.signal, "signal", lambda *args: None)  # leave pytest's handlers alone
    spec = write_spec(tmp_path, "print('never runs')\n", image_uri=missing, base_job_name="no-build")
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["hetero-emu", "run", str(spec), "--output-path", str(out), "--no-build"])

    with pytest.raises(SystemExit) as info:
        cli_module.main()

    err = capsys.readouterr().err
    assert info.value.code == 3, err
    assert f"error: the default image {missing} is not built yet (and --no-build builds nothing)" in err
    assert "hint: build it with `hetero-emu image build`" in err
    assert "building" not in err and "Traceback" not in err
    assert not docker_client.images.list(name=missing.split(":")[0])
    assert job_dirs(out) == []


def test_no_docker_engine_exits_3(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = cli("run", str(HELLO_SPEC), "--output-path", str(out), env={"DOCKER_HOST": "unix:///nonexistent.sock"})

    assert done.returncode == 3, done.stderr
    assert "Docker" in done.stderr
    assert "hint:" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert job_dirs(out) == []


def test_no_docker_engine_ps_exits_3() -> None:
    done = cli("ps", "--json", env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert done.returncode == 3, done.stderr
    assert "Docker" in done.stderr and "Traceback" not in done.stderr


def test_invalid_spec_exits_2_before_docker(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "print('never runs')\n", max_runn=5)
    done = cli("run", str(spec), "--output-path", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    assert "max_runn" in done.stderr and "did you mean 'max_run'" in done.stderr
    assert "Traceback" not in done.stderr


# --------------------------------------------------------------------------------------------------
# Jobs through the CLI


def test_demo(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    done = cli("demo", "--output-path", str(out))

    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    header = next((ln for ln in done.stderr.splitlines() if ln.startswith("HOST")), "")
    assert header.split() == ["HOST", "GROUP", "INSTANCE", "TYPE", "EXIT", "SECONDS"], done.stderr[-2000:]
    for name, group in (("algo-1", "data_group"), ("algo-2", "data_group"), ("algo-3", "dnn_group")):
        row = next(ln.split() for ln in done.stderr.splitlines() if ln.startswith(name + " "))
        assert row[1] == group and row[3] == "0", row
    assert "Completed" in done.stderr
    # Host logs on stdout, each line prefixed `algo-N (group) |` (padded to one width).
    assert re.search(r"^algo-3 \(dnn_group\) +\| DNN_RESULT \{", done.stdout, flags=re.M), done.stdout[-2000:]
    assert re.search(r"^algo-1 \(data_group\) \| DATA ", done.stdout, flags=re.M)
    (job,) = job_dirs(out)
    assert job.name.startswith("data-offload-")
    assert (job / "output" / "model.tar.gz").is_file()
    assert json.loads((job / "job.json").read_text())["TrainingJobStatus"] == "Completed"


def test_run_json_keeps_stdout_clean(tmp_path: Path) -> None:
    done = cli("run", str(HELLO_SPEC), "--output-path", str(tmp_path / "out"), "--json")

    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)  # the whole of stdout is one JSON document
    assert doc["TrainingJobStatus"] == "Completed"
    assert [h["Host"] for h in doc["Hosts"]] == ["algo-1", "algo-2", "algo-3"]
    assert "HELLO" not in done.stdout
    assert "HELLO_JSON" in done.stderr  # the host logs went to stderr instead
    assert Path(doc["ModelArtifacts"]["S3ModelArtifacts"]).is_file()

    # `logs` replays a finished job's host logs from its folder, with the `algo-N (group) |` prefix.
    job_dir = Path(doc["ModelArtifacts"]["S3ModelArtifacts"]).parents[1]
    logs = cli("logs", str(job_dir), "--host", "algo-3")
    assert logs.returncode == 0, logs.stderr
    lines = logs.stdout.splitlines()
    assert lines and all(ln.startswith("algo-3 (instance_group_2) |") for ln in lines), lines[:3]
    assert "algo-3 (instance_group_2) | HELLO_TCP reply=hello algo-3, this is algo-1 of instance_group_1" in lines


def test_failed_job_exits_1(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "import sys\nsys.exit(4)\n", base_job_name="cli-fails")
    done = cli("run", str(spec), "--output-path", str(tmp_path / "out"), "--json")
    assert done.returncode == 1, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert doc["TrainingJobStatus"] == "Failed"
    assert doc["FailureReason"].startswith("AlgorithmError: , exit code: 4")
    assert doc["Emulator"]["FailedHost"].startswith("algo-")


def test_quiet_shuffled_run_prints_only_the_summary_with_the_seed(tmp_path: Path) -> None:
    """README: `--quiet`: no progress or host logs; the summary is a table of hosts (group, type, exit
    code, seconds), the status and the artifacts' paths; with `--host-order shuffled` the seed is
    printed and stored in job.json (replayable with --seed); the log files are kept all the same."""
    spec = write_spec(tmp_path, "import socket\nprint('HOST_SAYS', socket.gethostname(), flush=True)\n")
    done = cli("run", str(spec), "--output-path", str(tmp_path / "out"), "--quiet", "--host-order", "shuffled",
               "--seed", "7")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "HOST_SAYS" not in done.stdout + done.stderr
    assert not re.search(r"^\[\d+\] ", done.stderr, flags=re.M), done.stderr  # no numbered steps
    doc_path = Path(re.search(r"^job:\s+(\S+)$", done.stderr, flags=re.M).group(1))  # type: ignore[union-attr]
    doc = json.loads(doc_path.read_text())
    assert doc["Emulator"]["Seed"] == 7
    assert "host order seed: 7" in done.stderr
    table = [line.split() for line in done.stderr.splitlines() if line.startswith(("HOST ", "algo-"))]
    assert table[0] == ["HOST", "GROUP", "INSTANCE", "TYPE", "EXIT", "SECONDS"]
    rows = {row[0]: row[1:] for row in table[1:]}
    assert {h["Host"]: [h["InstanceGroupName"], h["InstanceType"], "0"] for h in doc["Hosts"]} == {
        host: row[:3] for host, row in rows.items()}
    assert all(float(row[3]) >= 0 for row in rows.values())
    model = Path(re.search(r"^model:\s+(\S+)$", done.stderr, flags=re.M).group(1))  # type: ignore[union-attr]
    assert model == doc_path.parent / "output" / "model.tar.gz" and model.is_file()
    for host in ("algo-1", "algo-2"):
        assert f"HOST_SAYS {host}" in (doc_path.parent / "logs" / f"{host}.log").read_text()


# serial: the kept job outlives its driver (the CLI process), so to the no_leftovers check of a test
# running beside it on another worker it is a leftover until this test cleans it.
@pytest.mark.serial
def test_ps_json_and_clean_of_a_kept_job(tmp_path: Path, docker_client: Any) -> None:
    listed = cli("ps", "--json")
    assert listed.returncode == 0, listed.stderr
    assert isinstance(json.loads(listed.stdout), list)

    job = f"cli-keep-{uuid.uuid4().hex[:8]}"
    spec = write_spec(tmp_path, "print('kept')\n")
    try:
        done = cli("run", str(spec), "--output-path", str(tmp_path / "out"), "--job-name", job, "--keep", "--json")
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout)["TrainingJobStatus"] == "Completed"
        assert f"hetero-emu clean --job {job}" in done.stderr

        listed = cli("ps", "--json")
        assert listed.returncode == 0, listed.stderr
        mine = sorted((r["kind"], r["name"], r["host"], r["group"]) for r in json.loads(listed.stdout)
                      if r["job"] == job)
        assert mine == [
            ("container", f"{job}-algo-1", "algo-1", "ga"),
            ("container", f"{job}-algo-2", "algo-2", "gb"),
            ("network", f"hetero-emu-{job}", None, None),
        ]

        cleaned = cli("clean", "--job", job, "--json")
        assert cleaned.returncode == 0, cleaned.stderr
        assert sorted(r["name"] for r in json.loads(cleaned.stdout)["removed"]) == [
            f"{job}-algo-1", f"{job}-algo-2", f"hetero-emu-{job}"]
        assert job_resources(docker_client, job) == []
        assert all(r["job"] != job for r in json.loads(cli("ps", "--json").stdout))
    finally:
        cli("clean", "--job", job)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupt_stops_and_cleans_up(tmp_path: Path, docker_client: Any, signum: int) -> None:
    # Ctrl-C, or SIGTERM from a CI timeout: hosts stopped, artifacts and job.json written, nothing left.
    job = f"cli-signal-{uuid.uuid4().hex[:8]}"
    spec = write_spec(tmp_path, "import time\nprint('READY', flush=True)\ntime.sleep(600)\n")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(spec), "--output-path", str(out),
                             "--job-name", job], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO, env={**os.environ, "NO_COLOR": "1"})
    try:
        assert proc.stdout is not None
        ready = 0
        deadline = time.monotonic() + 60
        while ready < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            ready += "READY" in line
        assert ready == 2, "the hosts never started"
        t0 = time.monotonic()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err[-2000:]
        assert time.monotonic() - t0 < 30
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        cli("clean", "--job", job)
    doc = json.loads((out / job / "job.json").read_text())
    assert doc["TrainingJobStatus"] == "Stopped"
    assert [h["ExitCode"] for h in doc["Hosts"]] == [143, 143]
    assert (out / job / "output" / "model.tar.gz").is_file()
    assert job_resources(docker_client, job) == []
