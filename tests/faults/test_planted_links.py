"""A script owns its host's /opt/ml: links it plants there resolve in the container while it runs, but
on the host when the driver reads them afterwards. On the real engine, a script plants every kind of
link (and a FIFO) where the driver reads, then fails: nothing of the host's files may reach the
artifacts, the user's checkpoint folder, job.json or the console, and the host's files stay as they were.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
import time
import uuid
from pathlib import Path

import pytest
from harness import PRELUDE, cli, job_resources, record, write_spec

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]


def snapshot(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every entry under root: content hash (files), mode and mtime (ns)."""
    out: dict[str, tuple[str, int, int]] = {}
    for path in sorted([root, *root.rglob("*")]):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        out[str(path.relative_to(root))] = (digest, st.st_mode, st.st_mtime_ns)
    return out


def tar_texts(archive: Path) -> dict[str, str]:
    with tarfile.open(archive) as tar:
        out = {}
        for member in tar.getmembers():
            data = tar.extractfile(member) if member.isreg() else None
            out[member.name] = data.read().decode(errors="replace") if data is not None else f"<{member.type!r}>"
        return out


def planting_script(secrets: Path) -> str:
    """Both hosts plant links to the host's `secrets` folder (a path that dangles inside the container)
    and exit 1; algo-1 replaces its whole model folder by such a link, algo-2 puts a FIFO in its own."""
    return PRELUDE + f"""
import shutil
SECRETS = {str(secrets)!r}
ml = Path("/opt/ml")
if HOST == "algo-1":
    shutil.rmtree(ml / "model")
    os.symlink(SECRETS + "/model-dir", ml / "model")
else:
    (ml / "model" / "real.bin").write_bytes(b"trained")
    os.mkfifo(ml / "model" / "pipe")
    os.symlink(SECRETS + "/secret.txt", ml / "model" / "leak.txt")
os.symlink(SECRETS + "/secret.txt", ml / "output" / "data" / "leak.txt")
ckpt = ml / "checkpoints"
(ckpt / f"{{HOST}}.pt").write_text(HOST)
os.symlink(SECRETS + "/secret.txt", ckpt / f"stolen-{{HOST}}")
os.symlink(SECRETS + "/model-dir", ckpt / f"stolen-dir-{{HOST}}")
os.symlink("/dev/zero", ckpt / f"zero-{{HOST}}")
os.symlink(SECRETS + "/failure.txt", ml / "output" / "failure")
config = ml / "input" / "config" / "resourceconfig.json"
config.unlink()
if HOST == "algo-1":
    os.symlink(SECRETS + "/resourceconfig.json", config)
else:
    config.write_text("{{not json")
print("PLANTED", HOST, flush=True)
# The first exit stops the other host: algo-1 fails first, and only once algo-2 has planted
# everything too (algo-2 says so over the job's network; a fixed pause lost the race to a fast start).
if HOST == "algo-1":
    server = socket.create_server(("", 7000))
    server.settimeout(120)
    server.accept()
else:
    for _ in range(1200):
        try:
            socket.create_connection(("algo-1", 7000), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    time.sleep(3)
sys.exit(1)
"""


def test_links_a_script_plants_under_opt_ml_are_never_followed_on_the_host(
    tmp_path: Path, docker_client: object
) -> None:
    marker = f"HOST-MARKER-{uuid.uuid4().hex}"
    secrets = tmp_path / "host-secrets"
    (secrets / "model-dir").mkdir(parents=True)
    (secrets / "secret.txt").write_text(f"{marker} secret file\n")
    (secrets / "failure.txt").write_text(f"{marker} failure text\n")
    (secrets / "model-dir" / "weights.bin").write_text(f"{marker} host model\n")
    (secrets / "resourceconfig.json").write_text(json.dumps({"current_host": "algo-1",
                                                             "current_group_name": marker}))
    before = snapshot(secrets)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "epoch-0.pt").write_text("from an earlier run")

    spec = write_spec(tmp_path / "project", planting_script(secrets), checkpoint_s3_uri=str(ckpt))
    out, job = tmp_path / "out", f"planted-{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    result = cli("run", str(spec), "--output-path", str(out), "--job-name", job)  # a hang raises TimeoutExpired
    console = result.stdout + result.stderr
    assert result.returncode == 1, console[-3000:]
    assert "PLANTED algo-1" in console and "PLANTED algo-2" in console, console[-3000:]
    assert "Traceback" not in console and "internal error" not in console, console[-3000:]

    job_dir = out / job
    doc = json.loads((job_dir / "job.json").read_text())
    assert doc["TrainingJobStatus"] == "Failed"
    # The failure file was a link: FailureReason falls back to the exit code and the last log lines.
    assert doc["FailureReason"].startswith("AlgorithmError: , exit code: 1. Last lines:"), doc["FailureReason"]

    model = tar_texts(job_dir / "output" / "model.tar.gz")
    assert model == {"real.bin": "trained"}  # algo-2's regular file only: no link, no FIFO, no host file
    output = tar_texts(job_dir / "output" / "output.tar.gz")
    assert output == {}

    assert sorted(p.name for p in ckpt.iterdir()) == ["algo-1.pt", "algo-2.pt", "epoch-0.pt"]
    assert not any(p.is_symlink() for p in ckpt.rglob("*"))
    leaked = {
        "model.tar.gz": json.dumps(model),
        "output.tar.gz": json.dumps(output),
        "checkpoints": json.dumps({str(p): p.read_text(errors="replace") for p in ckpt.rglob("*") if p.is_file()}),
        "job.json": (job_dir / "job.json").read_text(),
        "console": console,
    }
    assert not [where for where, text in leaked.items() if marker in text]
    assert snapshot(secrets) == before

    # `hetero-emu logs` reads the hosts' resourceconfig.json, now a link and garbage: groups fall back to "?".
    logs = cli("logs", str(job_dir))
    assert logs.returncode == 0, logs.stderr[-2000:]
    assert "algo-1 (?) | PLANTED algo-1" in logs.stdout and "algo-2 (?) | PLANTED algo-2" in logs.stdout, logs.stdout
    assert marker not in logs.stdout + logs.stderr

    record("planted links: model, checkpoints, failure file, resourceconfig.json, FIFO",
           "Failed; nothing of the host read", time.monotonic() - t0,
           len(job_resources(docker_client, job)))
