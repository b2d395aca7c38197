"""Secrets in `environment` reach the containers unchanged, and nothing the emulator writes or prints
shows them: not logs/*.log, job.json, the console, nor the rendered plan.json and compose.yaml. The
rendered compose project still runs, taking the secret from the shell that runs docker-compose."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from testkit import hetero_emu as cli

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

SECRET = "s3cr3t-value-123"
DIGEST = hashlib.sha256(SECRET.encode()).hexdigest()

# Every host proves it got the real value (its sha256 in /opt/ml/model), then prints it in a few
# shapes; algo-2 (the trainer) also quotes it in /opt/ml/output/failure and fails the job.
LEAKY = '''\
import hashlib, json, os, sys, time
from pathlib import Path

host = json.loads(Path("/opt/ml/input/config/resourceconfig.json").read_text())["current_host"]
key = os.environ["MY_API_KEY"]
Path("/opt/ml/model", host + ".hash").write_text(hashlib.sha256(key.encode()).hexdigest())
print("the key is", key, flush=True)
print(json.dumps({"key": key, "url": os.environ["DB_URL"]}), flush=True)
sys.stdout.write("unterminated " + key)
sys.stdout.flush()
if host == "algo-2":
    time.sleep(1)
    Path("/opt/ml/output/failure").write_text("could not log in with " + key + "\\n")
    sys.exit(1)
'''

# For the compose project: only the digest, so compose's own output cannot leak anything.
PROBE = '''\
import hashlib, os
print("SECRET_HASH " + hashlib.sha256(os.environ.get("MY_API_KEY", "").encode()).hexdigest(), flush=True)
print("DB_URL_HASH " + hashlib.sha256(os.environ.get("DB_URL", "").encode()).hexdigest(), flush=True)
'''


def write_job(tmp_path: Path, script: str) -> Path:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "x.py").write_text(script)
    spec = {
        "source_dir": "code",
        "container_entry_point": ["python3", "/opt/ml/code/x.py"],
        "instance_groups": [
            {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "instance_count": 1},
            {"instance_group_name": "dnn_group", "instance_type": "ml.p3.2xlarge", "instance_count": 1},
        ],
        "environment": {"MY_API_KEY": SECRET, "DB_URL": f"https://me:{SECRET}@db", "MY_VAR": "plain"},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def no_secret_in(folder: Path) -> list[str]:
    """Files under folder whose bytes contain the secret."""
    return [str(p) for p in folder.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


def test_secret_reaches_the_container_but_not_logs_job_json_or_console(tmp_path: Path) -> None:
    job = f"secret-{uuid.uuid4().hex[:8]}"
    spec = write_job(tmp_path, LEAKY)
    proc = cli("run", str(spec), "--job-name", job, "--output-path", str(tmp_path / "out"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    job_dir = tmp_path / "out" / job

    # inside, the variable had the real value
    for host in ("algo-1", "algo-2"):
        assert (job_dir / "hosts" / host / "model" / f"{host}.hash").read_text() == DIGEST

    # outside, it is masked wherever the emulator writes or prints
    console = proc.stdout + proc.stderr
    assert SECRET not in console
    assert "the key is ***" in console
    assert no_secret_in(job_dir / "logs") == []
    assert no_secret_in(job_dir / "output") == []  # the tarballs: only digests went in
    for host in ("algo-1", "algo-2"):
        logs = (job_dir / "logs" / f"{host}.log").read_text()
        assert "the key is ***\n" in logs
        assert '{"key": "***", "url": "https://me:***@db"}\n' in logs
        # The engine's follow stream may end before a host's unterminated last line (seen when the
        # host sleeps after writing it); when it does arrive, it is masked too.
        assert "unterminated" not in logs or logs.endswith("unterminated ***")

    text = (job_dir / "job.json").read_text()
    assert SECRET not in text
    doc: dict[str, Any] = json.loads(text)
    assert doc["TrainingJobStatus"] == "Failed"
    assert doc["Environment"] == {"MY_API_KEY": "***", "DB_URL": "https://me:***@db", "MY_VAR": "plain"}
    assert doc["FailureReason"].endswith("could not log in with ***, exit code: 1"), doc["FailureReason"]
    assert "failed first: algo-2 (dnn_group)\nFailureReason: AlgorithmError: could not log in with ***, exit code: 1" \
        in proc.stderr

    # --json prints job.json: masked too
    proc = cli("run", str(spec), "--job-name", job + "-j", "--output-path", str(tmp_path / "out"), "--json")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert SECRET not in proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["Environment"]["MY_API_KEY"] == "***"


# serial: docker-compose, not a driver of ours, runs these hosts (their driver label says so), so
# while they run they are a leftover to the no_leftovers check of any test beside them.
@pytest.mark.serial
@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose (v1) is not installed")
def test_rendered_files_hold_no_secret_and_compose_takes_it_from_the_shell(tmp_path: Path) -> None:
    job = f"secret-render-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "rendered"
    rendered = cli("render", str(write_job(tmp_path, PROBE)), "-o", str(out), "--job-name", job)
    assert rendered.returncode == 0, rendered.stderr
    assert SECRET not in rendered.stdout + rendered.stderr
    assert no_secret_in(out) == []
    compose_text = (out / "compose.yaml").read_text()
    assert "export MY_API_KEY=..." in compose_text
    assert yaml.safe_load(compose_text)["services"]["algo-1"]["environment"]["MY_API_KEY"] is None

    project = f"hetero-emu-test-{uuid.uuid4().hex[:8]}"
    shell = {**os.environ, "MY_API_KEY": SECRET, "DB_URL": f"https://me:{SECRET}@db"}

    def compose(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker-compose", "-f", str(out / "compose.yaml"), "-p", project, *args],
                              capture_output=True, text=True, timeout=180, env=shell, check=False)

    try:
        up = compose("up", "--no-color")
        assert up.returncode == 0, up.stderr + up.stdout
    finally:
        down = compose("down", "-v", "--remove-orphans")
        assert down.returncode == 0, down.stderr
    hashes = re.findall(r"^\S+\s+\| SECRET_HASH (\w+)$", up.stdout, flags=re.M)
    assert hashes == [DIGEST, DIGEST], up.stdout[-3000:]
    url_digest = hashlib.sha256(f"https://me:{SECRET}@db".encode()).hexdigest()
    assert re.findall(r"^\S+\s+\| DB_URL_HASH (\w+)$", up.stdout, flags=re.M) == [url_digest, url_digest]
