"""Pipe input mode on the real engine (issue 9, part 7): a 2-host job whose script reads its Pipe
channels' FIFOs in the default image, and asks the real sagemaker-training toolkit what
inputdataconfig.json says."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest
from sagemaker.inputs import TrainingInput
from sagemaker.pytorch import PyTorch
from test_seed_clusters import log_tagged
from testkit import unique

from emulator.jobspec import load_spec_file
from emulator.reports.console import RecordingReporter
from emulator.run.runner import run_job
from emulator.sagemaker import EmulatorSession

# One group (scripts/test.sh runs pytest-xdist with --dist loadgroup): the module's job runs once, on
# one worker, for all its tests, instead of once on each worker that gets one of them.
pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers"),
              pytest.mark.xdist_group("pipes")]

# Reads as PipeModeDataset does: waits for each epoch's FIFO to appear, then reads it to EOF (or
# closes it early). Prints what it saw, and what the toolkit's Environment() says.
SCRIPT = """
import hashlib, json, os, stat, time
from sagemaker_training import environment
D = "/opt/ml/input/data"

def wait(path):
    for _ in range(1000):
        if os.path.exists(path):
            return
        time.sleep(0.01)
    raise SystemExit(path + " never appeared")

def read(path, limit=None):
    wait(path)
    digest, count = hashlib.sha256(), 0
    with open(path, "rb", buffering=0) as fifo:
        while limit is None or count < limit:
            chunk = fifo.read(1 << 20 if limit is None else limit - count)
            if not chunk:
                break
            digest.update(chunk)
            count += len(chunk)
    return {"sha256": digest.hexdigest(), "bytes": count}

env = environment.Environment()
seen = {"host": env.current_host,
        "fifos": {n: stat.S_ISFIFO(os.stat(os.path.join(D, n)).st_mode) for n in sorted(os.listdir(D))},
        "channel_input_dirs": env.channel_input_dirs, "input_data_config": env.input_data_config}
seen["train"] = [read(D + "/train_0"), read(D + "/train_1")]
seen["early"] = read(D + "/rec_0", limit=100)
seen["rec"] = read(D + "/rec_1")
seen["after"] = sorted(os.listdir(D))
seen["shards"] = read(D + "/shards_0")
print("SEEN " + json.dumps(seen))
"""

SPEC = """\
job_name: pipes-in-containers
entry_point: train.py
source_dir: code
instance_type: ml.c5.xlarge
instance_count: 2
output_path: out
input_mode: Pipe
inputs:
  train: data/train
  shards: {s3_data: data/shards, distribution: ShardedByS3Key}
  rec: {s3_data: data/rec, record_wrapping: RecordIO}
  plain: {s3_data: data/plain, input_mode: File}
"""


def recordio(payloads: list[bytes]) -> bytes:
    """The RecordIO framing, as the test's own writer: magic, length, payload, zeros to 4 bytes."""
    return b"".join(struct.pack("<II", 0xCED7230A, len(p)) + p + b"\0" * (-len(p) % 4) for p in payloads)


def digest(data: bytes) -> dict[str, Any]:
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("pipes")
    (root / "code").mkdir()
    (root / "code" / "train.py").write_text(SCRIPT)
    files: dict[str, dict[str, bytes]] = {
        # More than the pipe's 1 MiB buffer, in several files whose key order is not their creation order.
        "train": {"b/c.bin": os.urandom(700_000), "a.bin": os.urandom(1_500_000), "b.txt": b"text\n"},
        "shards": {f"part-{i}": os.urandom(10_000 + i) for i in range(5)},
        "rec": {"empty": b"", "five": b"12345", "big": os.urandom(1_000_003)},
        "plain": {"x.csv": b"1,2\n"},
    }
    for channel, content in files.items():
        for key, data in content.items():
            path = root / "data" / channel / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    (root / "job.yaml").write_text(SPEC.replace("job_name: pipes-in-containers", f"job_name: {unique('pipes')}"))
    reporter = RecordingReporter()
    result = run_job(load_spec_file(root / "job.yaml"), reporter=reporter)
    assert result.status == "Completed", result.failure_reason
    seen = {}
    for _, _, line in reporter.lines:
        if line.startswith("SEEN "):
            report = json.loads(line[5:])
            seen[report["host"]] = report
    assert set(seen) == {"algo-1", "algo-2"}
    return {"seen": seen, "files": files, "root": root, "result": result}


def in_key_order(content: dict[str, bytes], keys: list[str] | None = None) -> bytes:
    return b"".join(content[key] for key in (keys if keys is not None else sorted(content)))


def test_two_epochs_each_give_the_channels_files_in_key_order(job: dict[str, Any]) -> None:
    expected = digest(in_key_order(job["files"]["train"]))  # a.bin, b.txt, b/c.bin
    for host in ("algo-1", "algo-2"):
        assert job["seen"][host]["train"] == [expected, expected]


def test_epoch_0_fifos_are_there_when_the_script_starts_and_file_channels_are_folders(job: dict[str, Any]) -> None:
    for host in ("algo-1", "algo-2"):
        assert job["seen"][host]["fifos"] == {"plain": False, "rec_0": True, "shards_0": True, "train_0": True}


def test_an_epoch_closed_early_is_followed_by_a_whole_one(job: dict[str, Any]) -> None:
    files = job["files"]["rec"]
    stream = recordio([files[key] for key in sorted(files)])  # big, empty, five
    for host in ("algo-1", "algo-2"):
        assert job["seen"][host]["early"] == digest(stream[:100])
        assert job["seen"][host]["rec"] == digest(stream)


def test_each_finished_epoch_is_replaced_by_the_next(job: dict[str, Any]) -> None:
    for host in ("algo-1", "algo-2"):
        assert job["seen"][host]["after"] == ["plain", "rec_2", "shards_0", "train_2"]


def test_each_host_of_a_sharded_channel_streams_its_share(job: dict[str, Any]) -> None:
    files = job["files"]["shards"]
    keys = sorted(files)
    assert job["seen"]["algo-1"]["shards"] == digest(in_key_order(files, keys[0::2]))
    assert job["seen"]["algo-2"]["shards"] == digest(in_key_order(files, keys[1::2]))


def test_the_real_toolkit_reads_pipe_from_inputdataconfig(job: dict[str, Any]) -> None:
    seen = job["seen"]["algo-1"]
    config = seen["input_data_config"]
    assert config["train"] == {"TrainingInputMode": "Pipe", "S3DistributionType": "FullyReplicated",
                               "RecordWrapperType": "None"}
    assert config["rec"]["RecordWrapperType"] == "RecordIO"
    assert config["shards"]["S3DistributionType"] == "ShardedByS3Key"
    assert config["plain"]["TrainingInputMode"] == "File"
    assert seen["channel_input_dirs"]["train"] == "/opt/ml/input/data/train"


def test_no_fifo_is_left_in_the_job_folder(job: dict[str, Any]) -> None:
    hosts = Path(job["result"].job_dir) / "hosts"
    left = [p for p in hosts.rglob("*") if p.is_fifo()]
    assert left == []
    assert sorted(p.name for p in (hosts / "algo-1" / "input" / "data").iterdir()) == ["plain"]


SDK_SCRIPT = """
import hashlib, json, time, os
from sagemaker_training import environment
path = "/opt/ml/input/data/train_0"
while not os.path.exists(path):
    time.sleep(0.01)
with open(path, "rb") as fifo:
    data = fifo.read()
print("PIPE_JSON " + json.dumps({"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
                                 "config": environment.Environment().input_data_config}))
"""


def test_the_sdks_training_input_in_pipe_mode_streams_the_channel(tmp_path: Path) -> None:
    """SDK v2 code unchanged but for the session: TrainingInput(input_mode="Pipe", record_wrapping=
    "RecordIO") reaches the host as a FIFO of RecordIO records, and the toolkit reads Pipe back."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(SDK_SCRIPT)
    files = {"part-0": os.urandom(3000), "part-1": b"abc"}
    for key, data in files.items():
        (tmp_path / "s3" / "bucket" / "pipe-data" / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "s3" / "bucket" / "pipe-data" / key).write_bytes(data)
    session = EmulatorSession(s3_root=tmp_path / "s3")
    estimator = PyTorch(entry_point="train.py", source_dir=str(tmp_path / "code"), framework_version="2.1.0",
                        py_version="py310", role="arn:aws:iam::111122223333:role/SageMakerRole",
                        sagemaker_session=session, instance_type="ml.c5.xlarge", instance_count=1)
    estimator.fit(inputs={"train": TrainingInput("s3://bucket/pipe-data", input_mode="Pipe",
                                                 record_wrapping="RecordIO")}, job_name="sdk-pipe", logs=False)
    seen = log_tagged(Path(session.training.found("sdk-pipe").job_dir), "algo-1", "PIPE_JSON")
    assert {k: seen[k] for k in ("sha256", "bytes")} == digest(recordio([files["part-0"], files["part-1"]]))
    assert seen["config"]["train"]["TrainingInputMode"] == "Pipe"
    assert seen["config"]["train"]["RecordWrapperType"] == "RecordIO"
