"""What a host's container really gets under `run` (issue 9, parts 2 and 5): /dev/shm's size, the
MPI ulimits, and on an MPI distribution's hosts only, the job's SSH keys read-only at /root/.ssh."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from emulator.jobspec import load_spec_file
from emulator.reports.console import RecordingReporter
from emulator.run.runner import run_job

# serial: the memlock probe asks the engine what every container may get.
pytestmark = [pytest.mark.docker, pytest.mark.serial, pytest.mark.usefixtures("training_image", "no_leftovers")]

MIB = 1024**2
GIB = 1024**3

# Shell, not Python: `df` and `ulimit` are what a user would type to check them.
PROBE = r"""
set -e
shm=$(df -B1 --output=size /dev/shm | tail -n 1 | tr -d ' ')
if [ -d /root/.ssh ]; then
  ssh=$(ls /root/.ssh | tr '\n' ' ')
  modes=$(stat -c '%n=%a' /root/.ssh/id_ed25519 /root/.ssh/ssh_host_ed25519_key | tr '\n' ' ')
  if touch /root/.ssh/x 2>/dev/null; then writable=yes; else writable=no; fi
  # The toolkit's MPI runner checks each worker with paramiko and the keys of /root/.ssh.
  paramiko=$(/opt/venv/bin/python -c "import paramiko
k = paramiko.Ed25519Key.from_private_key_file('/root/.ssh/id_ed25519')
print(k.get_base64() == open('/root/.ssh/authorized_keys').read().split()[1])")
else
  ssh=""; modes=""; writable=""; paramiko=""
fi
printf 'PROBE {"host": "%s", "shm": %s, "memlock": "%s", "stack": "%s", ' \
  "$(hostname)" "$shm" "$(ulimit -l)" "$(ulimit -s)"
printf '"ssh": "%s", "modes": "%s", "writable": "%s", "paramiko": "%s"}\n' "$ssh" "$modes" "$writable" "$paramiko"
"""


def _run(tmp_path: Path, **extra: Any) -> tuple[dict[str, dict[str, Any]], RecordingReporter]:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "probe.sh").write_text(PROBE)
    spec = {
        "base_job_name": "host-container",
        "source_dir": "code",
        "container_entry_point": ["bash", "/opt/ml/code/probe.sh"],
        "output_path": "out",
        "instance_groups": [
            {"instance_group_name": "plain", "instance_type": "ml.c5.xlarge", "instance_count": 1},
            {"instance_group_name": "mpi_group", "instance_type": "ml.m5.large", "instance_count": 2},
        ],
        "distribution": {"mpi": {"enabled": True, "processes_per_host": 2}, "instance_groups": ["mpi_group"]},
        **extra,
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(spec))
    reporter = RecordingReporter()
    result = run_job(load_spec_file(tmp_path / "job.yaml"), reporter=reporter)
    assert result.status == "Completed", result.failure_reason
    seen = [json.loads(line[6:]) for _, _, line in reporter.lines if line.startswith("PROBE ")]
    return {info["host"]: info for info in seen}, reporter


def test_hosts_see_half_their_memory_as_shm_the_mpi_ulimits_and_keys_on_mpi_hosts_only(
    tmp_path: Path, unlimited_memlock_allowed: bool
) -> None:
    seen, reporter = _run(tmp_path)
    assert sorted(seen) == ["algo-1", "algo-2", "algo-3"]
    # ml.c5.xlarge and ml.m5.large have 8 GiB: half of it, not Docker's 64 MiB.
    assert {name: info["shm"] for name, info in seen.items()} == dict.fromkeys(seen, 4 * GIB)
    assert {info["stack"] for info in seen.values()} == {str(64 * 1024)}  # KiB
    refusal = [w for w in reporter.warnings if "ulimit memlock" in w]
    if unlimited_memlock_allowed:
        assert {info["memlock"] for info in seen.values()} == {"unlimited"}
        assert not refusal
    else:
        # The job still runs, with the engine's default and a warning saying so.
        assert "unlimited" not in {info["memlock"] for info in seen.values()}
        assert len(refusal) == 1 and "may not raise ulimit memlock to unlimited" in refusal[0]
    keys = "authorized_keys config id_ed25519 id_ed25519.pub ssh_host_ed25519_key ssh_host_ed25519_key.pub "
    assert seen["algo-1"]["ssh"] == ""  # the plain group gets no keys
    for name in ("algo-2", "algo-3"):
        assert seen[name]["ssh"] == keys
        assert seen[name]["modes"] == "/root/.ssh/id_ed25519=600 /root/.ssh/ssh_host_ed25519_key=600 "
        assert seen[name]["writable"] == "no"
        assert seen[name]["paramiko"] == "True"


def test_shm_size_of_the_spec_is_what_hosts_see(tmp_path: Path) -> None:
    seen, _ = _run(tmp_path, shm_size="300m")
    assert {info["shm"] for info in seen.values()} == {300 * MIB}
