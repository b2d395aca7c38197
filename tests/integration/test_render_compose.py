"""`hetero-emu render` writes a compose project that docker-compose (v1, the machine's tool) runs as is.

Each container must see exactly the files rendered for it (DIR/hosts/algo-N/input/config/*.json),
under its own hostname, and `docker-compose down -v --remove-orphans` must leave nothing behind.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from testkit import hetero_emu as cli

pytestmark = [
    pytest.mark.docker,
    # serial: the memlock probe asks the engine what every container may get, and docker-compose, not
    # a driver of ours, runs the hosts: a leftover to the no_leftovers check of any test beside them.
    pytest.mark.serial,
    pytest.mark.usefixtures("training_image", "no_leftovers"),
    pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose (v1) is not installed"),
]

REPO = Path(__file__).resolve().parents[2]
CONFIG_FILES = ("resourceconfig.json", "hyperparameters.json", "inputdataconfig.json")

# Prints one line with the raw text of every config file this container sees, and a few facts. (No
# peer lookups: compose starts the services one by one and nothing waits for the others, unlike the
# toolkit's `train`; the hello-hetero test below covers name resolution through its TCP hop.)
PROBE = '''\
import errno, json, os, resource, socket
from pathlib import Path

config = Path("/opt/ml/input/config")
data = Path("/opt/ml/input/data")
try:
    (data / "extra.txt").write_text("x")
    added = "succeeded"
except OSError as err:
    added = errno.errorcode[err.errno]
print("SEEN " + json.dumps({
    "add_to_input_data": added,
    "hostname": socket.gethostname(),
    "files": {p.name: p.read_text() for p in sorted(config.iterdir())},
    "channels": {c.name: sorted(f.name for f in c.iterdir()) for c in sorted(data.iterdir())},
    "job": os.environ.get("TRAINING_JOB_NAME"),
    "shm_bytes": os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize,
    "memlock": resource.getrlimit(resource.RLIMIT_MEMLOCK),
    "ssh": sorted(os.listdir("/root/.ssh")) if os.path.isdir("/root/.ssh") else None,
}, sort_keys=True), flush=True)
'''


def compose(out: Path, project: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker-compose", "-f", str(out / "compose.yaml"), "-p", project, *args],
                          capture_output=True, text=True, timeout=timeout, check=False)


def run_rendered(out: Path, project: str) -> subprocess.CompletedProcess[str]:
    """`docker-compose up` in the foreground (every service runs to its end), always followed by `down`."""
    try:
        up = compose(out, project, "up", "--no-color")
        assert up.returncode == 0, up.stderr + up.stdout
        return up
    finally:
        down = compose(out, project, "down", "-v", "--remove-orphans")
        assert down.returncode == 0, down.stderr


def seen_lines(output: str) -> dict[str, dict[str, Any]]:
    """compose v1 prefixes each line with `<container name> | `; the hostname in the JSON says who."""
    out: dict[str, dict[str, Any]] = {}
    for match in re.finditer(r"^(\S+)\s+\| SEEN (.*)$", output, flags=re.M):
        info = json.loads(match.group(2))
        info["container"] = match.group(1)
        out[info["hostname"]] = info
    return out


def test_rendered_probe_project_runs_under_compose(tmp_path: Path, unlimited_memlock_allowed: bool) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "probe.py").write_text(PROBE)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "greeting.txt").write_text("hello\n")
    spec = {
        "base_job_name": "ignored",
        "source_dir": "code",
        "container_entry_point": ["python3", "/opt/ml/code/probe.py"],
        "hyperparameters": {"epochs": 2, "greeting": "hi"},
        "instance_groups": [
            {"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge", "instance_count": 2},
            {"instance_group_name": "dnn_group", "instance_type": "ml.p3.2xlarge", "instance_count": 1},
        ],
        "inputs": {"training": {"s3_data": "data", "content_type": "text/plain", "instance_groups": ["data_group"]}},
        "distribution": {"mpi": {"enabled": True}, "instance_groups": ["data_group"]},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(spec))
    job = f"render-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "rendered"

    rendered = cli("render", str(tmp_path / "job.yaml"), "-o", str(out), "--job-name", job, "--shm-size", "300m")
    assert rendered.returncode == 0, rendered.stderr
    doc = yaml.safe_load((out / "compose.yaml").read_text())
    assert sorted(doc["services"]) == ["algo-1", "algo-2", "algo-3"]
    assert json.loads((out / "plan.json").read_text())["job_name"] == job

    up = run_rendered(out, f"hetero-emu-test-{uuid.uuid4().hex[:8]}")
    seen = seen_lines(up.stdout)
    assert sorted(seen) == ["algo-1", "algo-2", "algo-3"], up.stdout[-3000:]
    for name, info in seen.items():
        assert info["container"] == f"{job}-{name}"
        assert info["job"] == job
        config_dir = out / "hosts" / name / "input" / "config"
        assert sorted(p.name for p in config_dir.iterdir()) == sorted(CONFIG_FILES)
        expected = {f: (config_dir / f).read_text() for f in CONFIG_FILES}
        assert info["files"] == expected, name
        assert json.loads(expected["resourceconfig.json"])["current_host"] == name
    assert seen["algo-1"]["channels"] == seen["algo-2"]["channels"] == {"training": ["greeting.txt"]}
    assert seen["algo-3"]["channels"] == {}
    # As under `run`: /opt/ml/input/data is read-only, with channels (algo-1, 2) or without (algo-3).
    assert {name: info["add_to_input_data"] for name, info in seen.items()} == dict.fromkeys(seen, "EROFS")
    # The container description's limits, as compose applied them: --shm-size, memlock unlimited.
    assert {info["shm_bytes"] for info in seen.values()} == {300 * 1024**2}
    # (An engine that may not give it gets none, and render says so, as run does.)
    memlocks = {tuple(info["memlock"]) for info in seen.values()}
    assert (memlocks == {(-1, -1)}) is unlimited_memlock_allowed, memlocks
    assert ("may not raise ulimit memlock" in rendered.stderr) is not unlimited_memlock_allowed
    # The MPI distribution's group gets the job's SSH keys; the other group does not.
    keys = ["authorized_keys", "config", "id_ed25519", "id_ed25519.pub", "ssh_host_ed25519_key",
            "ssh_host_ed25519_key.pub"]
    assert {name: info["ssh"] for name, info in seen.items()} == {"algo-1": keys, "algo-2": keys, "algo-3": None}


def test_rendered_hello_hetero_runs_under_compose(tmp_path: Path) -> None:
    job = f"render-test-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "rendered"
    rendered = cli("render", str(REPO / "examples" / "hello-hetero" / "job.yaml"), "-o", str(out), "--job-name", job)
    assert rendered.returncode == 0, rendered.stderr
    assert f"job {job}" in rendered.stdout

    up = run_rendered(out, f"hetero-emu-test-{uuid.uuid4().hex[:8]}")
    hello: dict[str, dict[str, Any]] = {}
    for match in re.finditer(r"^(\S+)\s+\| HELLO_JSON (.*)$", up.stdout, flags=re.M):
        info = json.loads(match.group(2))
        assert match.group(1) == f"{job}-{info['current_host']}"
        hello[info["current_host"]] = info
    assert sorted(hello) == ["algo-1", "algo-2", "algo-3"], up.stdout[-3000:]
    for name, info in hello.items():
        rc = json.loads((out / "hosts" / name / "input" / "config" / "resourceconfig.json").read_text())
        assert info["current_instance_group"] == rc["current_group_name"]
        assert info["current_instance_type"] == rc["current_instance_type"]
        assert info["hostname"] == name
        assert info["is_hetero"] is True
    assert "HELLO_TCP reply=hello algo-3, this is algo-1 of instance_group_1" in up.stdout
    for name in ("algo-1", "algo-2", "algo-3"):
        assert (out / "hosts" / name / "model" / f"{name}.txt").is_file()
        assert re.search(rf"^{re.escape(job)}-{name} exited with code 0$", up.stdout + up.stderr, flags=re.M)


# algo-1 exits at once; algo-2 starts the toolkit's `train` 3 s later, which first resolves every
# algo-N (retrying for 15 minutes). The engine's DNS has forgotten algo-1 by then: only the fixed
# addresses and /etc/hosts entries keep the job from hanging.
EARLY_EXIT_ENTRYPOINT = ["sh", "-c", 'if [ "$(hostname)" = algo-1 ]; then exit 0; fi; sleep 3; exec train']
RESOLVED = 'import socket; print("RESOLVED", socket.gethostbyname("algo-1"), flush=True)\n'


def early_exit_spec(tmp_path: Path) -> Path:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(RESOLVED)
    spec = {
        "entry_point": "train.py",
        "source_dir": "code",
        "container_entry_point": EARLY_EXIT_ENTRYPOINT,
        "instance_groups": [
            {"instance_group_name": "ga", "instance_type": "ml.c5.xlarge", "instance_count": 1},
            {"instance_group_name": "gb", "instance_type": "ml.c5.xlarge", "instance_count": 1},
        ],
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_exited_host_stays_resolvable_under_compose(tmp_path: Path) -> None:
    out = tmp_path / "rendered"
    job = f"early-{uuid.uuid4().hex[:8]}"
    rendered = cli("render", str(early_exit_spec(tmp_path)), "-o", str(out), "--job-name", job)
    assert rendered.returncode == 0, rendered.stderr
    up = run_rendered(out, job)
    assert re.search(r"^\S+\s+\| RESOLVED 10\.\d+\.\d+\.\d+$", up.stdout, flags=re.M), up.stdout[-3000:]


def test_exited_host_stays_resolvable_under_run(tmp_path: Path) -> None:
    result = cli("run", str(early_exit_spec(tmp_path)), "--output-path", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "RESOLVED" in result.stdout
