"""The service's job lifecycle and in-container contract, on the real engine, with small inline scripts.

Each test writes its own code folder (and data) into tmp_path and runs one small job (2-4 hosts)
through `emulator.run.runner.run_job`. Scripts learn who they are from resourceconfig.json directly, so
a failure here points at the emulator, not at a helper library.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from testkit import hetero_emu as cli

from emulator.jobspec import JobSpec, validate
from emulator.options import RunOptions
from emulator.planning.plan import LABEL_GROUP, LABEL_HOST, LABEL_JOB, LABEL_MANAGED
from emulator.reports.console import RecordingReporter
from emulator.run.runner import run_job
from emulator.state import job_records

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

REPO = Path(__file__).resolve().parents[2]

# Shared prelude of every script: who am I, and a helper to print one tagged JSON line.
PRELUDE = '''\
import json, os, sys, time
from pathlib import Path

RC = json.loads(Path("/opt/ml/input/config/resourceconfig.json").read_text())
HOST = RC["current_host"]
GROUP = RC["current_group_name"]


def report(tag, payload):
    print(tag + " " + json.dumps(payload, sort_keys=True), flush=True)
'''


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make_spec(tmp_path: Path, script: str, *, name: str = "x.py", **fields: Any) -> JobSpec:
    """A spec running `python3 /opt/ml/code/<name>` (PRELUDE + script) unless `fields` say otherwise."""
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / name).write_text(PRELUDE + textwrap.dedent(script))
    raw: dict[str, Any] = {
        "source_dir": "code",
        "container_entry_point": ["python3", f"/opt/ml/code/{name}"],
        "output_path": str(tmp_path / "out"),
        **fields,
    }
    if "entry_point" in fields:
        raw.pop("container_entry_point")
    return validate(raw, base_dir=tmp_path)


def groups(*spec: tuple[str, int]) -> list[dict[str, Any]]:
    return [{"instance_group_name": n, "instance_type": "ml.c5.xlarge", "instance_count": c} for n, c in spec]


def tagged(reporter: RecordingReporter, tag: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for host, _group, line in reporter.lines:
        if line.startswith(tag + " "):
            out[host] = json.loads(line[len(tag) + 1 :])
    return out


def checksums(root: Path) -> dict[str, tuple[str, int, int]]:
    """relative path -> (sha256, mode, mtime_ns) of every file and folder under root."""
    out: dict[str, tuple[str, int, int]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        out[str(path.relative_to(root))] = (digest, st.st_mode, st.st_mtime_ns)
    return out


def tar_members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def job_doc(result: Any) -> dict[str, Any]:
    return json.loads((result.job_dir / "job.json").read_text())  # type: ignore[no-any-return]


def host(result: Any, name: str) -> Any:
    return next(h for h in result.hosts if h.host == name)


def engine_names(docker_client: Any, job: str) -> tuple[list[str], list[str]]:
    filters = {"label": [f"{LABEL_MANAGED}=true", f"{LABEL_JOB}={job}"]}
    containers = sorted(c.name for c in docker_client.containers.list(all=True, filters=filters, ignore_removed=True))
    networks = sorted(n.name for n in docker_client.networks.list(filters=filters))
    return containers, networks


# --------------------------------------------------------------------------------------------------
# Data: channel isolation, read-only inputs, sharding


def test_channel_goes_only_to_its_group(tmp_path: Path) -> None:
    for channel, files in {"alpha": ["a1.csv", "a2.csv"], "beta": ["b1.csv"]}.items():
        folder = tmp_path / "data" / channel
        folder.mkdir(parents=True)
        for f in files:
            (folder / f).write_text(f"{channel},{f}\n")
    spec = make_spec(
        tmp_path,
        '''
        data = Path("/opt/ml/input/data")
        report("SEEN", {
            "inputdataconfig": json.loads(Path("/opt/ml/input/config/inputdataconfig.json").read_text()),
            "data_dirs": sorted(p.name for p in data.iterdir()),
            "alpha": sorted(p.name for p in (data / "alpha").iterdir()) if (data / "alpha").exists() else None,
            "beta": sorted(p.name for p in (data / "beta").iterdir()) if (data / "beta").exists() else None,
        })
        ''',
        base_job_name="lc-channels",
        instance_groups=groups(("g_alpha", 2), ("g_beta", 1)),
        inputs={
            "alpha": {"s3_data": "data/alpha", "content_type": "text/csv", "instance_groups": ["g_alpha"]},
            "beta": {"s3_data": "data/beta", "input_mode": "FastFile", "instance_groups": ["g_beta"]},
        },
    )
    reporter = RecordingReporter()
    result = run_job(spec, reporter=reporter)
    assert result.status == "Completed", result.failure_reason
    seen = tagged(reporter, "SEEN")
    alpha_cfg = {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated",
                 "RecordWrapperType": "None", "ContentType": "text/csv"}
    beta_cfg = {"TrainingInputMode": "FastFile", "S3DistributionType": "FullyReplicated",
                "RecordWrapperType": "None"}
    for name in ("algo-1", "algo-2"):
        assert seen[name] == {"inputdataconfig": {"alpha": alpha_cfg}, "data_dirs": ["alpha"],
                              "alpha": ["a1.csv", "a2.csv"], "beta": None}, name
    assert seen["algo-3"] == {"inputdataconfig": {"beta": beta_cfg}, "data_dirs": ["beta"],
                              "alpha": None, "beta": ["b1.csv"]}
    # The host folders on disk say the same.
    for name, channels in {"algo-1": ["alpha"], "algo-2": ["alpha"], "algo-3": ["beta"]}.items():
        cfg = result.job_dir / "hosts" / name / "input" / "config" / "inputdataconfig.json"
        assert sorted(json.loads(cfg.read_text())) == channels


def test_input_data_is_read_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "a.txt").write_text("original a\n")
    (data / "sub" / "b.txt").write_text("original b\n")
    before = checksums(data)
    spec = make_spec(
        tmp_path,
        '''
        import errno, shutil
        root = Path("/opt/ml/input/data/training")
        attempts = {
            "create": lambda: (root / "new.txt").write_text("x"),
            "append": lambda: open(root / "a.txt", "a").write("tampered"),
            "truncate": lambda: open(root / "sub" / "b.txt", "w").close(),
            "delete": lambda: (root / "a.txt").unlink(),
            "rename": lambda: (root / "a.txt").rename(root / "c.txt"),
            "mkdir": lambda: (root / "newdir").mkdir(),
            "chmod": lambda: os.chmod(root / "a.txt", 0o777),
            "rmtree": lambda: shutil.rmtree(root / "sub"),
        }
        out = {}
        for name, attempt in attempts.items():
            try:
                attempt()
                out[name] = "succeeded"
            except OSError as err:
                out[name] = errno.errorcode.get(err.errno, str(err.errno))
        out["a"] = (root / "a.txt").read_text()
        report("WRITES", out)
        ''',
        base_job_name="lc-readonly",
        instance_type="ml.c5.xlarge",
        instance_count=2,
        inputs={"training": {"s3_data": "data"}},
    )
    reporter = RecordingReporter()
    result = run_job(spec, reporter=reporter)
    assert result.status == "Completed", result.failure_reason
    seen = tagged(reporter, "WRITES")
    assert sorted(seen) == ["algo-1", "algo-2"]
    for name, attempts in seen.items():
        assert attempts.pop("a") == "original a\n", name
        assert attempts == dict.fromkeys(attempts, "EROFS"), f"{name}: {attempts}"
    assert checksums(data) == before


def test_sharded_by_s3_key(tmp_path: Path) -> None:
    data = tmp_path / "data"
    files = ["part-0.csv", "part-1.csv", "part-2.csv", "part-3.csv", "nested/part-4.csv"]
    for f in files:
        (data / f).parent.mkdir(parents=True, exist_ok=True)
        (data / f).write_text(f"contents of {f}\n")
    before = checksums(data)
    spec = make_spec(
        tmp_path,
        '''
        import hashlib
        root = Path("/opt/ml/input/data/shards")
        got = {}
        if root.exists():
            for p in sorted(root.rglob("*")):
                if p.is_file():
                    got[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
        try:
            with open(root / "part-0.csv", "a") as f:
                f.write("tampered")
            tamper = "succeeded"
        except OSError as err:
            tamper = err.errno
        report("SHARD", {"files": got, "exists": root.exists(), "tamper": tamper,
                         "config": json.loads(Path("/opt/ml/input/config/inputdataconfig.json").read_text())})
        ''',
        base_job_name="lc-sharded",
        instance_groups=groups(("data_group", 3), ("dnn_group", 1)),
        inputs={"shards": {"s3_data": "data", "distribution": "ShardedByS3Key", "instance_groups": ["data_group"]}},
    )
    reporter = RecordingReporter()
    result = run_job(spec, reporter=reporter)
    assert result.status == "Completed", result.failure_reason
    seen = tagged(reporter, "SHARD")
    assert sorted(seen) == ["algo-1", "algo-2", "algo-3", "algo-4"]

    data_hosts = ["algo-1", "algo-2", "algo-3"]
    together: list[str] = []
    for name in data_hosts:
        assert seen[name]["exists"] is True, name
        assert seen[name]["config"] == {"shards": {"TrainingInputMode": "File", "S3DistributionType": "ShardedByS3Key",
                                                   "RecordWrapperType": "None"}}, name
        together += seen[name]["files"]
        for rel, digest in seen[name]["files"].items():
            assert digest == before[rel][0], f"{name}: {rel} differs from the user's file"
        assert seen[name]["tamper"] == 30, f"{name}: writing a shard file gave {seen[name]['tamper']}"  # EROFS
    # Every file exactly once across the group, and a fair split (5 files over 3 hosts: 2, 2, 1).
    assert sorted(together) == sorted(files)
    assert sorted(len(seen[h]["files"]) for h in data_hosts) == [1, 2, 2]
    assert seen["algo-4"] == {"files": {}, "exists": False, "tamper": 2, "config": {}}  # ENOENT: no channel

    # The user's files are unchanged and the hard-link staging is gone.
    assert checksums(data) == before
    assert all((data / f).stat().st_nlink == 1 for f in files)
    assert not (result.job_dir / ".staging").exists()


# --------------------------------------------------------------------------------------------------
# Lifecycle: who stops whom


def test_early_exit_zero_stops_nobody(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        '''
        import socket
        if GROUP == "server":
            report("EXIT", {"host": HOST})
            sys.exit(0)
        time.sleep(3)
        Path("/opt/ml/model/late.txt").write_text(HOST + " finished after the server left")
        # The server's name still resolves after it exited (the toolkit resolves every algo-N).
        report("EXIT", {"host": HOST, "server": socket.gethostbyname("algo-1")})
        ''',
        base_job_name="lc-early-exit",
        instance_groups=groups(("server", 1), ("trainer", 1)),
    )
    reporter = RecordingReporter()
    result = run_job(spec, reporter=reporter)

    assert result.status == "Completed", result.failure_reason
    assert result.failure_reason is None
    server, trainer = host(result, "algo-1"), host(result, "algo-2")
    assert server.exit_code == 0 and trainer.exit_code == 0
    assert server.failure_reason is None and trainer.failure_reason is None
    assert trainer.seconds >= 2.5, trainer
    assert server.seconds < trainer.seconds
    assert not any("stopping" in m for m in reporter.infos + reporter.warnings), reporter.infos
    exits = tagged(reporter, "EXIT")
    assert sorted(exits) == ["algo-1", "algo-2"]
    assert exits["algo-2"]["server"].count(".") == 3, exits
    late = result.job_dir / "hosts" / "algo-2" / "model" / "late.txt"
    assert late.read_text() == "algo-2 finished after the server left"
    assert result.model_artifact is not None
    assert tar_members(result.model_artifact) == {"late.txt": b"algo-2 finished after the server left"}
    assert [h["ExitCode"] for h in job_doc(result)["Hosts"]] == [0, 0]


def test_one_failing_host_fails_the_job(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        '''
        Path("/opt/ml/model/" + HOST + ".txt").write_text(HOST)
        Path("/opt/ml/output/data/" + HOST + ".txt").write_text(HOST)
        if GROUP == "crashers":
            time.sleep(1)
            Path("/opt/ml/output/failure").write_text("boom-reason: the crasher gave up")
            sys.exit(3)
        print("sleeping", flush=True)
        time.sleep(600)
        ''',
        base_job_name="lc-failing",
        instance_groups=groups(("crashers", 1), ("sleepers", 1)),
    )
    reporter = RecordingReporter()
    t0 = time.monotonic()
    result = run_job(spec, reporter=reporter)
    wall = time.monotonic() - t0

    assert result.status == "Failed"
    assert result.exit_code == 1
    assert wall < 30, f"the job took {wall:.1f} s: the sleeper was not stopped promptly"
    reason = result.failure_reason or ""
    assert reason == "AlgorithmError: boom-reason: the crasher gave up, exit code: 3", reason
    assert result.failed_host == "algo-1 (crashers)"
    crasher, sleeper = host(result, "algo-1"), host(result, "algo-2")
    assert crasher.exit_code == 3
    assert sleeper.exit_code not in (0, None)
    # SIGTERM reached the sleeper at once (not SIGKILL after the grace period).
    assert sleeper.seconds - crasher.seconds < 5, (crasher, sleeper)
    assert "stopped" in (sleeper.failure_reason or ""), sleeper

    doc = job_doc(result)
    assert doc["TrainingJobStatus"] == "Failed"
    assert doc["FailureReason"] == reason
    assert [(h["Host"], h["ExitCode"]) for h in doc["Hosts"]] == [("algo-1", 3), ("algo-2", sleeper.exit_code)]
    assert "boom-reason" in doc["Hosts"][0]["FailureReason"]
    # Artifacts of both hosts are still collected.
    assert result.model_artifact is not None and result.output_artifact is not None
    assert tar_members(result.model_artifact) == {"algo-1.txt": b"algo-1", "algo-2.txt": b"algo-2"}
    assert tar_members(result.output_artifact) == {"algo-1.txt": b"algo-1", "algo-2.txt": b"algo-2"}


def test_host_ignoring_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        '''
        import signal
        if HOST == "algo-1":
            time.sleep(1)
            sys.exit(2)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ignoring SIGTERM", flush=True)
        time.sleep(600)
        ''',
        base_job_name="lc-sigkill",
        instance_type="ml.c5.xlarge",
        instance_count=2,
    )
    t0 = time.monotonic()
    result = run_job(spec, RunOptions(grace=2), reporter=RecordingReporter())
    wall = time.monotonic() - t0
    assert result.status == "Failed"
    assert (result.failure_reason or "").startswith("AlgorithmError: ")
    assert result.failed_host == "algo-1 (homogeneousCluster)"
    stubborn = host(result, "algo-2")
    assert stubborn.exit_code == 137, stubborn
    assert 1.5 <= stubborn.seconds - host(result, "algo-1").seconds < 10, result.hosts
    assert wall < 30


def test_failure_without_failure_file_uses_exit_code_and_log_tail(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        '''
        if HOST == "algo-2":
            print("last words of " + HOST, flush=True)
            sys.exit(7)
        time.sleep(600)
        ''',
        base_job_name="lc-exit-code",
        instance_groups=groups(("one", 1), ("two", 1)),
    )
    result = run_job(spec, reporter=RecordingReporter())
    assert result.status == "Failed"
    reason = result.failure_reason or ""
    assert reason == "AlgorithmError: , exit code: 7. Last lines:\nlast words of algo-2", reason
    assert result.failed_host == "algo-2 (two)"
    assert host(result, "algo-2").exit_code == 7


def test_failure_through_the_toolkit_train(tmp_path: Path) -> None:
    # The toolkit's `train` runs the script, writes /opt/ml/output/failure itself and exits 1; the
    # other host's `train` gets SIGTERM (through the container's init) and stops at once.
    spec = make_spec(
        tmp_path,
        '''
        if HOST == "algo-2":
            raise ValueError("boom from the user script")
        time.sleep(600)
        ''',
        name="train.py",
        entry_point="train.py",
        base_job_name="lc-toolkit-fails",
        instance_groups=groups(("one", 1), ("two", 1)),
    )
    t0 = time.monotonic()
    result = run_job(spec, reporter=RecordingReporter())
    assert time.monotonic() - t0 < 30
    assert result.status == "Failed"
    reason = result.failure_reason or ""
    assert reason.startswith("AlgorithmError: ") and result.failed_host == "algo-2 (two)", reason
    assert "ExecuteUserScriptError" in reason, reason
    failure = (result.job_dir / "hosts" / "algo-2" / "output" / "failure").read_text()
    assert failure.strip() and failure.strip() in reason
    assert host(result, "algo-2").exit_code == 1
    stopped = host(result, "algo-1")
    assert stopped.exit_code == 143, stopped  # SIGTERM reached the toolkit: no SIGKILL needed
    assert "ValueError: boom from the user script" in (result.job_dir / "logs" / "algo-2.log").read_text()


def test_model_artifacts_merged_in_host_order(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        '''
        model = Path("/opt/ml/model")
        (model / "sub").mkdir(exist_ok=True)
        (model / f"{HOST}.txt").write_text(f"model of {HOST}")
        (model / "sub" / f"{HOST}.bin").write_bytes(HOST.encode() * 3)
        (model / "shared.txt").write_text(HOST)  # every host writes it: the last host wins
        out = Path("/opt/ml/output/data")
        (out / f"{HOST}.json").write_text(json.dumps({"host": HOST, "group": GROUP}))
        (out / "shared.txt").write_text(HOST)
        ''',
        name="train.py",
        entry_point="train.py",  # the toolkit's `train` runs it
        base_job_name="lc-merge",
        instance_groups=groups(("g1", 1), ("g2", 2)),
    )
    result = run_job(spec, reporter=RecordingReporter())
    assert result.status == "Completed", result.failure_reason
    hosts = ["algo-1", "algo-2", "algo-3"]
    assert result.model_artifact is not None and result.output_artifact is not None
    model = tar_members(result.model_artifact)
    assert model == {
        **{f"{h}.txt": f"model of {h}".encode() for h in hosts},
        **{f"sub/{h}.bin": h.encode() * 3 for h in hosts},
        "shared.txt": b"algo-3",
    }
    output = tar_members(result.output_artifact)
    assert output["shared.txt"] == b"algo-3"
    assert {k: json.loads(v) for k, v in output.items() if k.endswith(".json")} == {
        "algo-1.json": {"host": "algo-1", "group": "g1"},
        "algo-2.json": {"host": "algo-2", "group": "g2"},
        "algo-3.json": {"host": "algo-3", "group": "g2"},
    }
    assert job_doc(result)["ModelArtifacts"] == {"S3ModelArtifacts": str(result.model_artifact)}


def test_max_run_exceeded(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        '''
        if HOST == "algo-1":
            sys.exit(0)
        time.sleep(600)
        ''',
        base_job_name="lc-max-run",
        instance_type="ml.c5.xlarge",
        instance_count=2,
        max_run=2,
    )
    t0 = time.monotonic()
    result = run_job(spec, reporter=RecordingReporter())
    wall = time.monotonic() - t0

    # As the service ends it (API_DescribeTrainingJob): Stopped, MaxRuntimeExceeded, artifacts uploaded.
    assert result.status == "Stopped" and result.exit_code == 1
    assert result.secondary_status == "MaxRuntimeExceeded"
    assert result.failure_reason is None
    assert 2 <= wall < 30, wall
    assert host(result, "algo-1").exit_code == 0
    assert host(result, "algo-2").exit_code not in (0, None)
    doc = job_doc(result)
    assert doc["TrainingJobStatus"] == "Stopped"
    assert doc["SecondaryStatus"] == "MaxRuntimeExceeded"
    assert "ModelArtifacts" in doc
    assert doc["StoppingCondition"] == {"MaxRuntimeInSeconds": 2}


def test_max_run_makes_the_job_stopping_through_the_grace_then_stopped(tmp_path: Path) -> None:
    """At MaxRuntimeInSeconds the service stops the job as StopTrainingJob does: Stopping (status and
    secondary status) while the hosts have their grace, then Stopped, MaxRuntimeExceeded. Each host's
    script is the container's entry point, so it gets the SIGTERM, and takes 3 s to save its model
    before it exits; the job's record is read all the while."""
    job = unique("lc-max-run-stopping")
    spec = make_spec(
        tmp_path,
        '''
        import signal

        def save(*_):
            print("SIGTERM: saving", flush=True)
            time.sleep(3)
            Path(f"/opt/ml/model/{HOST}.txt").write_text("saved")
            sys.exit(0)

        signal.signal(signal.SIGTERM, save)
        print("ready", flush=True)
        time.sleep(600)
        ''',
        job_name=job,
        instance_groups=groups(("g1", 1), ("g2", 1)),
        max_run=2,
    )
    seen: list[tuple[str, str]] = []
    done = threading.Event()

    def look() -> None:
        record = job_records.find(job)
        if record is not None:
            entry = (str(record.status), str(record.doc.get("SecondaryStatus")))
            if not seen or seen[-1] != entry:
                seen.append(entry)

    def watch() -> None:
        while not done.is_set():
            look()
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = run_job(spec, RunOptions(grace=30), reporter=RecordingReporter())
    finally:
        done.set()
        watcher.join()
    look()  # the final status, written as run_job returns

    assert result.status == "Stopped" and result.secondary_status == "MaxRuntimeExceeded"
    # Each host saved its model in the grace and exited of its own: no SIGKILL.
    assert {h.host: h.exit_code for h in result.hosts} == {"algo-1": 0, "algo-2": 0}
    assert result.model_artifact is not None
    assert sorted(tar_members(result.model_artifact)) == ["algo-1.txt", "algo-2.txt"]
    # The record as DescribeTrainingJob answers it: InProgress, Stopping through the grace, Stopped.
    statuses = [status for i, (status, _) in enumerate(seen) if i == 0 or seen[i - 1][0] != status]
    assert statuses == ["InProgress", "Stopping", "Stopped"], seen
    assert ("Stopping", "Stopping") in seen and seen[-1] == ("Stopped", "MaxRuntimeExceeded"), seen
    transitions = job_doc(result)["SecondaryStatusTransitions"]
    assert [t["Status"] for t in transitions] == ["Starting", "Downloading", "Training", "Stopping", "Uploading",
                                                  "MaxRuntimeExceeded"]
    stopping = transitions[3]
    assert stopping["StatusMessage"] == "Stopping the training job"
    lasted = datetime.fromisoformat(stopping["EndTime"]) - datetime.fromisoformat(stopping["StartTime"])
    assert lasted.total_seconds() >= 2.5, stopping  # the hosts' 3 s of saving


# --------------------------------------------------------------------------------------------------
# Names, networks, --keep


def test_keep_leaves_containers_until_clean(tmp_path: Path, docker_client: Any) -> None:
    job = unique("lc-keep")
    spec = make_spec(tmp_path, 'report("HI", {"host": HOST})\n', job_name=job,
                     instance_groups=groups(("ga", 1), ("gb", 1)))
    try:
        reporter = RecordingReporter()
        result = run_job(spec, RunOptions(keep=True), reporter=reporter)
        assert result.status == "Completed", result.failure_reason
        assert any(f"hetero-emu clean --job {job}" in m for m in reporter.infos), reporter.infos

        containers, networks = engine_names(docker_client, job)
        assert containers == [f"{job}-algo-1", f"{job}-algo-2"]
        assert networks == [f"hetero-emu-{job}"]
        for name, group in (("algo-1", "ga"), ("algo-2", "gb")):
            attrs = docker_client.api.inspect_container(f"{job}-{name}")
            assert attrs["Config"]["Hostname"] == name
            labels = attrs["Config"]["Labels"]
            assert (labels[LABEL_JOB], labels[LABEL_HOST], labels[LABEL_GROUP]) == (job, name, group)
            assert attrs["State"]["ExitCode"] == 0
            endpoint = attrs["NetworkSettings"]["Networks"][f"hetero-emu-{job}"]
            assert name in (endpoint.get("Aliases") or []), endpoint

        done = cli("clean", "--job", job)
        assert done.returncode == 0, done.stderr
        assert "removed 2 container(s) and 1 network(s)" in done.stdout
        assert engine_names(docker_client, job) == ([], [])
    finally:
        cli("clean", "--job", job)


def test_hosts_resolve_each_other_by_name(tmp_path: Path) -> None:
    # The toolkit's `train` waits until every algo-N resolves before it runs the script.
    spec = make_spec(
        tmp_path,
        '''
        import socket
        me = socket.gethostbyname(socket.gethostname())
        peers = {h: socket.gethostbyname(h) for h in RC["hosts"]}
        report("DNS", {"hostname": socket.gethostname(), "me": me, "peers": peers,
                       "job": os.environ.get("TRAINING_JOB_NAME")})
        ''',
        name="train.py",
        entry_point="train.py",
        base_job_name="lc-dns",
        instance_groups=groups(("ga", 1), ("gb", 2)),
    )
    reporter = RecordingReporter()
    result = run_job(spec, reporter=reporter)
    assert result.status == "Completed", result.failure_reason
    seen = tagged(reporter, "DNS")
    assert sorted(seen) == ["algo-1", "algo-2", "algo-3"]
    own = {name: info["me"] for name, info in seen.items()}
    assert len(set(own.values())) == 3, own
    for name, info in seen.items():
        assert info["hostname"] == name
        assert info["peers"] == own, f"{name} resolves {info['peers']}, the hosts say {own}"
        assert info["job"] == result.job_name


def test_empty_group_and_checkpoints(tmp_path: Path) -> None:
    # A group of 0 hosts is legal: it shows in the resource config with no host. Checkpoints are
    # seeded from checkpoint_s3_uri before the job and every host's are synced back after it.
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "epoch-1.pt").write_text("from an earlier run")
    spec = make_spec(
        tmp_path,
        '''
        ckpt = Path("/opt/ml/checkpoints")
        seen = sorted(p.name for p in ckpt.iterdir())
        (ckpt / f"{HOST}.pt").write_text(HOST)
        report("CKPT", {"seen": seen, "groups": RC["instance_groups"]})
        ''',
        base_job_name="lc-ckpt",
        instance_groups=groups(("workers", 2), ("idle", 0)),
        checkpoint_s3_uri="ckpt",
    )
    reporter = RecordingReporter()
    result = run_job(spec, reporter=reporter)
    assert result.status == "Completed", result.failure_reason
    assert [h.host for h in result.hosts] == ["algo-1", "algo-2"]
    seen = tagged(reporter, "CKPT")
    for name in ("algo-1", "algo-2"):
        assert seen[name]["seen"] == ["epoch-1.pt"], name
        assert seen[name]["groups"] == [
            {"instance_group_name": "workers", "instance_type": "ml.c5.xlarge", "hosts": ["algo-1", "algo-2"]},
            {"instance_group_name": "idle", "instance_type": "ml.c5.xlarge", "hosts": []},
        ], name
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["algo-1.pt", "algo-2.pt", "epoch-1.pt"]
    assert job_doc(result)["CheckpointConfig"]["LocalPath"] == "/opt/ml/checkpoints"


def test_stop_command_stops_the_job(tmp_path: Path) -> None:
    job = unique("lc-stop")
    code = tmp_path / "code"
    code.mkdir()
    (code / "x.py").write_text("import time\nprint('READY', flush=True)\ntime.sleep(600)\n")
    spec_path = tmp_path / "job.yaml"
    spec_path.write_text(json.dumps({  # JSON is YAML
        "job_name": job, "source_dir": "code", "container_entry_point": ["python3", "/opt/ml/code/x.py"],
        "instance_groups": groups(("ga", 1), ("gb", 1)),
    }))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(spec_path), "--output-path", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, "NO_COLOR": "1"})
    try:
        assert proc.stdout is not None
        ready = 0
        while ready < 2:
            line = proc.stdout.readline()
            assert line, "the job ended before its hosts were ready"
            ready += "READY" in line
        stopped = cli("stop", job, "--grace", "5")
        assert stopped.returncode == 0, stopped.stderr
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        cli("clean", "--job", job)
    doc = json.loads((out / job / "job.json").read_text())
    assert (proc.returncode, doc["TrainingJobStatus"]) == (130, "Stopped"), (err[-1500:], doc.get("FailureReason"))
