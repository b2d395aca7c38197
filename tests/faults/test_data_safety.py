"""The user's data: read-only in the containers and unchanged afterwards; an existing job output is never
overwritten; what the containers (root) write ends up owned by the user who ran the job."""

from __future__ import annotations

import contextlib
import grp
import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import PRELUDE, cli, groups, job_resources, record, unique, write_spec

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]


def snapshot(root: Path) -> dict[str, tuple[str, int, int, int]]:
    """Every file and folder under root: content hash, mode, mtime (ns) and link count."""
    out: dict[str, tuple[str, int, int, int]] = {}
    for path in sorted([root, *root.rglob("*")]):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        out[str(path.relative_to(root))] = (digest, st.st_mode, st.st_mtime_ns, st.st_nlink)
    return out


# Every way a script could change its input; each must fail with EROFS (errno 30).
TAMPER = PRELUDE + """
import errno, stat
attempts = {}
def attempt(what, action):
    try:
        action()
        attempts[what] = "succeeded"
    except OSError as err:
        attempts[what] = errno.errorcode.get(err.errno, str(err.errno))

root = Path("/opt/ml/input/data")
for path in sorted(p for p in root.rglob("*") if p.is_file()):
    attempt(f"append {path}", lambda: path.open("ab").write(b"tampered"))
    attempt(f"truncate {path}", lambda: os.truncate(path, 0))
    attempt(f"chmod {path}", lambda: os.chmod(path, 0o777))
    attempt(f"utime {path}", lambda: os.utime(path, (0, 0)))
    attempt(f"rename {path}", lambda: os.rename(path, str(path) + ".moved"))
    attempt(f"unlink {path}", lambda: os.unlink(path))
channels = sorted(p.name for p in root.iterdir())
for folder in sorted(p for p in root.iterdir() if p.is_dir()):
    attempt(f"create in {folder}", lambda: (folder / "new.txt").write_text("x"))
    attempt(f"mkdir in {folder}", lambda: (folder / "new").mkdir())
    attempt(f"rename {folder}", lambda: os.rename(folder, root / "renamed"))
    attempt(f"rmtree {folder}", lambda: __import__("shutil").rmtree(folder))
# The folder holding the channels: nothing may be added beside them (also on a host with no channel).
attempt(f"create in {root}", lambda: (root / "extra.txt").write_text("x"))
attempt(f"mkdir in {root}", lambda: (root / "extra").mkdir())
attempt(f"symlink in {root}", lambda: os.symlink("/etc/passwd", root / "link"))
attempt(f"chmod {root}", lambda: os.chmod(root, 0o777))
# What the script owns stays writable: write, rename, make a folder, delete.
writable = {}
for place in ("/opt/ml/model", "/opt/ml/output", "/opt/ml/checkpoints"):
    try:
        probe = Path(place) / "probe.txt"
        probe.write_text("x")
        probe.rename(Path(place) / "probe.moved")
        (Path(place) / "probe-dir").mkdir()
        (Path(place) / "probe-dir").rmdir()
        (Path(place) / "probe.moved").unlink()
        writable[place] = "ok"
    except OSError as err:
        writable[place] = errno.errorcode.get(err.errno, str(err.errno))
Path("/opt/ml/output/data/attempts.json").write_text(json.dumps(
    {"attempts": attempts, "writable": writable, "channels": channels, "left": sorted(os.listdir(root))},
    sort_keys=True))
print("ATTEMPTS", len(attempts), sorted(set(attempts.values())), flush=True)
"""


def test_input_channels_are_read_only_and_the_users_data_is_unchanged(tmp_path: Path) -> None:
    """README: "writing, renaming, deleting or adding a file anywhere under /opt/ml/input/data fails with
    EROFS", on every kind of channel mount (the user's folder, a sharded share, a single file's share),
    in /opt/ml/input/data itself (also on algo-4, which gets no channel), while /opt/ml/model, output and
    checkpoints stay writable."""
    data = tmp_path / "data"
    (data / "train").mkdir(parents=True)
    (data / "shards").mkdir()
    for i in range(4):
        (data / "train" / f"t{i}.csv").write_text(f"train,{i}\n")
        (data / "shards" / f"s{i}.csv").write_text(f"shard,{i}\n")
    (data / "single.csv").write_text("a,b\n1,2\n")
    before = snapshot(data)
    to_ab = ["ga", "gb"]
    spec = write_spec(tmp_path, TAMPER, instance_groups=groups(("ga", 1), ("gb", 2), ("gc", 1)), inputs={
        "train": {"s3_data": str(data / "train"), "instance_groups": to_ab},
        "shards": {"s3_data": str(data / "shards"), "distribution": "ShardedByS3Key", "instance_groups": to_ab},
        "single": {"s3_data": str(data / "single.csv"), "instance_groups": to_ab},
    })
    out, job = tmp_path / "out", unique("safe-input")
    result = cli("run", str(spec), "--output-path", str(out), "--job-name", job)
    assert result.returncode == 0, result.stderr[-3000:]

    for host in ("algo-1", "algo-2", "algo-3", "algo-4"):
        seen = json.loads((out / job / "hosts" / host / "output" / "data" / "attempts.json").read_text())
        attempts, channels = seen["attempts"], seen["channels"]
        assert channels == ([] if host == "algo-4" else ["shards", "single", "train"]), host
        # train, single, and this host's share of the 4 shards (round-robin over algo-1..3)
        files = {"algo-1": 4 + 1 + 2, "algo-2": 4 + 1 + 1, "algo-3": 4 + 1 + 1, "algo-4": 0}[host]
        assert len(attempts) == 6 * files + 4 * len(channels) + 4, sorted(attempts)  # every one was tried
        assert set(attempts.values()) == {"EROFS"}, {k: v for k, v in attempts.items() if v != "EROFS"}
        assert seen["left"] == channels, host  # nothing added, renamed or removed in input/data
        assert seen["writable"] == dict.fromkeys(("/opt/ml/model", "/opt/ml/output", "/opt/ml/checkpoints"), "ok")
    # Sharding used hard links: their count is back to one and nothing else changed either.
    assert snapshot(data) == before
    # Nothing a script tried landed in the staged folder behind /opt/ml/input/data either.
    for host in ("algo-1", "algo-4"):
        staged = out / job / "hosts" / host / "input" / "data"
        assert sorted(p.name for p in staged.iterdir()) == ([] if host == "algo-4" else ["shards", "single", "train"])


def test_an_existing_job_output_is_never_overwritten(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, PRELUDE + "Path('/opt/ml/model/m.txt').write_text(HOST)\n")
    out, job = tmp_path / "out", unique("safe-output")
    first = cli("run", str(spec), "--output-path", str(out), "--job-name", job)
    assert first.returncode == 0, first.stderr[-2000:]
    before = snapshot(out / job)

    again = cli("run", str(spec), "--output-path", str(out), "--job-name", job)
    assert again.returncode == 2
    assert f"the job's output folder already exists: {out / job}" in again.stderr
    assert "Traceback" not in again.stderr
    assert snapshot(out / job) == before


# --------------------------------------------------------------------------------------------------
# Ownership


USER = 4242  # no passwd entry needed: the kernel only knows numbers


@pytest.fixture
def user_folder() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="hetero-emu-user-"))
    folder.chmod(0o755)
    os.chown(folder, USER, USER)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def preload_what_a_run_imports(tmp: Path) -> None:
    """Import in this process every module a real `run` imports (learnt from `-X importtime` of a
    tiny job run as root), so that a forked child which is no longer root never has to read one."""
    spec = write_spec(tmp, PRELUDE)
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "emulator.cli", "run", str(spec),
                             "--output-path", str(tmp / "out")], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name and not name.startswith("emulator.backend.reaper"):
                # Optional extras (urllib3's SOCKS support) warn when imported without their deps.
                with contextlib.suppress(Exception), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    importlib.import_module(name)


def run_as(uid: int, gid: int, groups_: list[int], folder: Path, argv: list[str]) -> int:
    """Run the real CLI in a forked child that has dropped root for uid:gid, before any file access.

    A fork rather than a subprocess: the interpreter lives under /root (mode 700), which the user
    cannot reach; the child has every module it needs loaded already. The watcher process cannot be
    started by such a child (it would exec that interpreter), which the driver tolerates.
    """
    import emulator.cli
    import emulator.jobspec.instance_types

    emulator.jobspec.instance_types.catalog()  # package data, cached: the repo may sit in a folder the user cannot read
    log = folder / "driver.log"
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.setgroups(groups_)
            os.setgid(gid)
            os.setuid(uid)
            os.environ.update({"HOME": str(folder), "NO_COLOR": "1"})
            os.chdir(folder)
            sys.argv = ["hetero-emu", *argv]
            try:
                emulator.cli.main()
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_outputs_belong_to_the_user_who_ran_the_job(user_folder: Path, docker_client: Any, tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to become another user")  # pragma: no cover - CI runs as root
    try:
        docker_gid = grp.getgrnam("docker").gr_gid
    except KeyError:
        docker_gid = os.stat("/var/run/docker.sock").st_gid
    # The containers (root) write files only root could read or delete, in folders only root could enter.
    script = PRELUDE + """
secret = Path("/opt/ml/model/private")
secret.mkdir(mode=0o700)
(secret / "weights.bin").write_bytes(os.urandom(64))
os.chmod(secret / "weights.bin", 0o600)
Path("/opt/ml/output/data/metrics.json").write_text("{}")
Path("/opt/ml/checkpoints/step-1").write_text("1")
os.chmod("/opt/ml/output/data", 0o700)
print("wrote as uid", os.getuid(), flush=True)
"""
    preload_what_a_run_imports(tmp_path)
    spec = write_spec(user_folder, script)
    for path in [user_folder, *user_folder.rglob("*")]:
        os.chown(path, USER, USER)
    job = unique("safe-owner")
    out = user_folder / "out"
    t0 = time.monotonic()
    code = run_as(USER, USER, [docker_gid], user_folder, ["run", str(spec), "--output-path", str(out),
                                                          "--job-name", job])
    log = (user_folder / "driver.log").read_text()
    assert code == 0, log[-3000:]
    assert "wrote as uid 0" in (out / job / "logs" / "algo-1.log").read_text()

    job_dir = out / job
    owners = {str(p.relative_to(job_dir)): (p.lstat().st_uid, p.lstat().st_gid) for p in job_dir.rglob("*")}
    wrong = {p: o for p, o in owners.items() if o != (USER, USER)}
    assert not wrong, wrong
    assert "hosts/algo-1/model/private/weights.bin" in owners

    removed = subprocess.run(["rm", "-rf", str(job_dir)], user=USER, group=USER, capture_output=True, text=True,
                             check=False)
    assert removed.returncode == 0, removed.stderr
    assert not job_dir.exists()
    record("data safety: a user who is not root runs a job, then deletes all it produced",
           "Completed; every file theirs", time.monotonic() - t0, len(job_resources(docker_client, job)))
