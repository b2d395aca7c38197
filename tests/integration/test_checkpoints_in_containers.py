"""Checkpoints synced while a real job runs (docs/outputs.md, Checkpoints): a checkpoint a host has
closed is at the checkpoint URI within about 2 s, while the host runs on."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import yaml
from testkit import unique, wait_for

from emulator.jobspec import load_spec_file
from emulator.options import RunOptions
from emulator.reports.console import RecordingReporter
from emulator.result import JobResult
from emulator.run.runner import run_job

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers")]

# Each epoch: a checkpoint written and closed, its closing time noted beside it, then 3 s of work.
SCRIPT = '''
import os, time
for epoch in range(3):
    with open(f"/opt/ml/checkpoints/epoch-{epoch}.ckpt", "wb") as out:
        out.write(os.urandom(1 << 20))
    with open(f"/opt/ml/output/data/closed-{epoch}", "w") as note:
        note.write(repr(time.time()))
    time.sleep(3)
'''


def start_checkpointing_job(tmp_path: Path, script: str, prefix: str,
                            instance_count: int) -> tuple[threading.Thread, list[JobResult]]:
    """The script run as a job with the checkpoint URI `tmp_path/ckpt`, on a thread: the thread, and
    the list its result is put in when the job has ended."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(script)
    (tmp_path / "ckpt").mkdir(exist_ok=True)
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({
        "job_name": unique(prefix), "entry_point": "train.py", "source_dir": "code", "output_path": "out",
        "checkpoint_s3_uri": "ckpt", "instance_type": "ml.c5.xlarge", "instance_count": instance_count}))
    done: list[JobResult] = []
    runner = threading.Thread(target=lambda: done.append(run_job(load_spec_file(spec), RunOptions(),
                                                                 reporter=RecordingReporter())))
    runner.start()
    return runner, done


def test_a_closed_checkpoint_is_at_the_uri_within_seconds_while_the_job_runs(tmp_path: Path) -> None:
    runner, done = start_checkpointing_job(tmp_path, SCRIPT, "ckpt-live", 1)
    arrived = {}
    try:
        for epoch in range(3):
            copied = tmp_path / "ckpt" / f"epoch-{epoch}.ckpt"
            wait_for(lambda copied=copied: copied.is_file() or bool(done), f"{copied.name} at the URI", timeout=120)
            arrived[epoch] = time.time()
            assert not done, f"epoch-{epoch}.ckpt reached the URI only when the job ended"
    finally:
        runner.join(120)
    (result,) = done
    assert result.status == "Completed", result.failure_reason
    notes = result.job_dir / "hosts" / "algo-1" / "output" / "data"
    for epoch, seen in arrived.items():
        closed = float((notes / f"closed-{epoch}").read_text())
        assert seen - closed < 3.5, (epoch, seen - closed)
        assert (tmp_path / "ckpt" / f"epoch-{epoch}.ckpt").stat().st_size == 1 << 20


# TensorBoard's event files, written where the SDK's TensorBoardOutputConfig says (here a folder
# outside /opt/ml, as container_local_output_path allows), then 4 s of work.
BOARD_SCRIPT = '''
import os, time
# What the service writes for CheckpointConfig and TensorBoardOutputConfig, as the host reads it.
for name in ("checkpointconfig.json", "tensorboardoutputconfig.json"):
    print("CONFIG " + name + " " + open("/opt/ml/input/config/" + name).read().replace("\\n", " "), flush=True)
os.makedirs("/tmp/board/run-1", exist_ok=True)
with open("/tmp/board/run-1/events.out.tfevents.1", "wb") as out:
    out.write(b"scalars " * 1000)
time.sleep(4)
'''


def test_tensorboard_files_reach_their_output_path_while_the_job_runs(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(BOARD_SCRIPT)
    name = unique("tb-live")
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({
        "job_name": name, "entry_point": "train.py", "source_dir": "code", "output_path": "out",
        "tensorboard_output_config": {"s3_output_path": "board", "container_local_output_path": "/tmp/board"},
        "checkpoint_s3_uri": "ckpt", "checkpoint_local_path": "/state",
        "instance_type": "ml.c5.xlarge", "instance_count": 1}))
    done: list[JobResult] = []
    reporter = RecordingReporter()
    runner = threading.Thread(target=lambda: done.append(run_job(load_spec_file(spec), RunOptions(),
                                                                 reporter=reporter)))
    runner.start()
    # Under the job's name, as the service uploads them (the SDK's latest_job_tensorboard_artifacts_path()).
    copied = tmp_path / "board" / name / "tensorboard-output" / "run-1" / "events.out.tfevents.1"
    try:
        wait_for(lambda: copied.is_file() or bool(done), "the event file at the output path", timeout=120)
        assert not done, "the TensorBoard file reached its output path only when the job ended"
    finally:
        runner.join(120)
    (result,) = done
    assert result.status == "Completed", result.failure_reason
    assert copied.read_bytes() == b"scalars " * 1000
    configs = {line.split()[1]: json.loads(line.split(" ", 2)[2]) for _, _, line in reporter.lines
               if line.startswith("CONFIG ")}
    board = f"{tmp_path / 'board'}/{name}/tensorboard-output"
    assert configs == {"checkpointconfig.json": {"LocalPath": "/state"},
                       "tensorboardoutputconfig.json": {"LocalPath": "/tmp/board/", "S3OutputPath": board}}


# Rank 0 writes two checkpoints (a folder each), lets them reach the URI, then prunes the first and
# the checkpoint restored from the URI; the other host keeps its restored copy untouched.
PRUNE_SCRIPT = '''
import json, os, shutil, time
ckpt = "/opt/ml/checkpoints"
host = json.load(open("/opt/ml/input/config/resourceconfig.json"))["current_host"]
assert os.path.isfile(f"{ckpt}/restored.ckpt"), os.listdir(ckpt)
if host == "algo-1":
    for step in (1, 2):
        os.makedirs(f"{ckpt}/step-{step}")
        for part in ("model.pt", "optimizer.pt"):
            with open(f"{ckpt}/step-{step}/{part}", "wb") as out:
                out.write(os.urandom(1 << 16))
    time.sleep(4)
    shutil.rmtree(f"{ckpt}/step-1")
    os.remove(f"{ckpt}/restored.ckpt")
time.sleep(8)
'''


def test_a_checkpoint_the_script_deletes_is_deleted_at_the_uri_while_the_job_runs(tmp_path: Path) -> None:
    uri = tmp_path / "ckpt"
    uri.mkdir()
    (uri / "restored.ckpt").write_bytes(b"from an earlier job")
    runner, done = start_checkpointing_job(tmp_path, PRUNE_SCRIPT, "ckpt-prune", 2)
    try:
        wait_for(lambda: (uri / "step-1" / "optimizer.pt").is_file() or bool(done), "step-1 at the URI", timeout=120)
        wait_for(lambda: not (uri / "step-1").exists() or bool(done), "step-1 deleted at the URI", timeout=60)
        assert not done, "the deleted checkpoint left the URI only when the job ended"
    finally:
        runner.join(120)
    (result,) = done
    assert result.status == "Completed", result.failure_reason
    left = sorted(str(p.relative_to(uri)) for p in uri.rglob("*"))
    assert left == ["step-2", "step-2/model.pt", "step-2/optimizer.pt"]
    # algo-2 still holds what was restored to it: its copy, untouched, did not go back.
    assert (result.job_dir / "hosts" / "algo-2" / "checkpoints" / "restored.ckpt").is_file()
