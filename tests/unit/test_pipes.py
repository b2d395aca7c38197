"""The Pipe mode feeder (emulator.run.pipes) against real FIFOs on this machine, read by threads standing in
for the training script."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator.jobspec import InstanceGroup, JobSpec, TrainingInput
from emulator.jobspec.paths import scan
from emulator.planning.plan import make_plan
from emulator.run import pipes

# The RecordIO framing as documented (MXNet/dmlc recordio.h, read by sagemaker-tensorflow-extensions'
# RecordIOReader.cpp), written here independently of emulator.run.pipes.
MAGIC = 0xCED7230A


def decode_recordio(stream: bytes) -> list[bytes]:
    """Records of a RecordIO stream: [magic][flag<<29 | length][payload][pad to 4]; flags 1 and 2 say
    the record goes on in the next part, 3 ends it, 0 is a whole record."""
    records: list[bytes] = []
    pending: list[bytes] = []
    at = 0
    while at < len(stream):
        magic, word = struct.unpack_from("<II", stream, at)
        assert magic == MAGIC, f"bad magic at byte {at}"
        flag, length = word >> 29, word & ((1 << 29) - 1)
        payload = stream[at + 8: at + 8 + length]
        assert len(payload) == length, "truncated record"
        padded = (length + 3) // 4 * 4
        assert stream[at + 8 + length: at + 8 + padded] == b"\0" * (padded - length), "padding is not zeros"
        at += 8 + padded
        pending.append(payload)
        if flag in (0, 3):
            assert (flag == 0) == (len(pending) == 1), "a whole record inside a multipart one, or an end alone"
            records.append(b"".join(pending))
            pending = []
        else:
            assert flag in (1, 2) and (flag == 1) == (len(pending) == 1), f"flag {flag} out of place"
    assert not pending, "the stream ends inside a multipart record"
    return records


def wait_for(path: Path, timeout: float = 5.0) -> None:
    """What a reader does before opening the next epoch (PipeModeDataset's WaitForFile)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.002)


def read_epoch(path: Path, limit: int | None = None) -> bytes:
    """Read a FIFO to its EOF, or only `limit` bytes and close it early."""
    wait_for(path)
    chunks = []
    got = 0
    with open(path, "rb", buffering=0) as fifo:
        while limit is None or got < limit:
            chunk = fifo.read(1 << 16 if limit is None else min(1 << 16, limit - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    return b"".join(chunks)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    (root / "b").mkdir(parents=True)
    (root / "b" / "x.bin").write_bytes(b"BX" * 5)
    (root / "a.bin").write_bytes(b"A" * 3)
    (root / "c.bin").write_bytes(b"")
    (root / "b.bin").write_bytes(os.urandom(70_000))
    return root


@pytest.fixture
def host(tmp_path: Path) -> Path:
    folder = tmp_path / "hosts" / "algo-1" / "input" / "data"
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def feeding() -> Iterator[list[pipes.Feeders]]:
    """Feeders a test starts are closed even when it fails."""
    started: list[pipes.Feeders] = []
    yield started
    for feeders in started:
        feeders.close()


def start(feeding: list[pipes.Feeders], *sources: pipes.PipeSource) -> pipes.Feeders:
    feeders = pipes.Feeders(sources)
    feeding.append(feeders)
    feeders.start()
    return feeders


def source(folder: Path, root: Path, record_io: bool = False, channel: str = "train") -> pipes.PipeSource:
    return pipes.PipeSource(folder, channel, root, scan(root).files, record_io=record_io, label=f"algo-1 {channel}")


def test_an_epoch_is_the_channels_files_concatenated_in_s3_key_order(
    data: Path, host: Path, feeding: list[pipes.Feeders]
) -> None:
    keys = scan(data).files
    assert keys == ("a.bin", "b.bin", "b/x.bin", "c.bin")  # S3's order: "b.bin" < "b/x.bin" ('.' < '/')
    start(feeding, source(host, data))
    assert (host / "train_0").is_fifo()  # before any reader: epoch 0 is there when the container starts
    expected = b"".join((data / key).read_bytes() for key in keys)
    assert read_epoch(host / "train_0") == expected
    assert read_epoch(host / "train_1") == expected


def test_the_next_epoch_exists_when_the_reader_sees_eof_and_the_last_one_is_gone(
    data: Path, host: Path, feeding: list[pipes.Feeders]
) -> None:
    start(feeding, source(host, data))
    read_epoch(host / "train_0")
    assert (host / "train_1").is_fifo()  # no wait: made before epoch 0's write end closed
    assert not (host / "train_0").exists()


def test_closing_an_epoch_early_makes_the_next_one_whole(tmp_path: Path, host: Path,
                                                         feeding: list[pipes.Feeders]) -> None:
    big = tmp_path / "big"
    big.mkdir()
    content = os.urandom(5 * 1024 * 1024)  # more than the pipe holds: the feeder is mid-file
    (big / "part").write_bytes(content)
    feeders = start(feeding, source(host, big))
    assert read_epoch(host / "train_0", limit=10) == content[:10]
    assert hashlib.sha256(read_epoch(host / "train_1")).digest() == hashlib.sha256(content).digest()
    assert read_epoch(host / "train_2", limit=1) == content[:1]
    wait_for(host / "train_3")
    # The feeder makes epoch 3's FIFO before it closes epoch 2 and counts it (so a reader that saw
    # EOF finds the next one at once): the count follows a moment later.
    deadline = time.monotonic() + 10
    while feeders.feeders[0].epochs < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert feeders.feeders[0].epochs == 3
    assert feeders.close() == []


def test_record_io_wraps_each_file_in_one_record(data: Path, host: Path, feeding: list[pipes.Feeders]) -> None:
    start(feeding, source(host, data, record_io=True))
    stream = read_epoch(host / "train_0")
    assert decode_recordio(stream) == [(data / key).read_bytes() for key in scan(data).files]
    assert decode_recordio(read_epoch(host / "train_1")) == decode_recordio(stream)


def test_record_io_splits_a_file_longer_than_the_length_field_into_a_multipart_record(
    tmp_path: Path, host: Path, feeding: list[pipes.Feeders], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipes, "RECORDIO_MAX_LENGTH", 8)  # 2**29 - 1 in truth: a 512 MiB file
    root = tmp_path / "multi"
    root.mkdir()
    (root / "long").write_bytes(b"0123456789abcdefghijk")  # 21 bytes: parts of 8, 8, 5
    (root / "short").write_bytes(b"xyz")
    start(feeding, source(host, root, record_io=True))
    stream = read_epoch(host / "train_0")
    flags = [struct.unpack_from("<II", stream, at)[1] >> 29 for at in (0, 16, 32, 48)]
    assert flags == [1, 2, 3, 0]
    assert decode_recordio(stream) == [b"0123456789abcdefghijk", b"xyz"]


def test_each_host_of_a_sharded_pipe_channel_streams_its_share(tmp_path: Path, data: Path,
                                                               feeding: list[pipes.Feeders]) -> None:
    keys = scan(data).files
    spec = JobSpec(
        job_name="pipes", base_job_name="pipes", image_uri="img", entry_point="train.py", source_dir=None,
        instance_groups=(InstanceGroup("g", "ml.c5.xlarge", 2),), heterogeneous=False, output_path=tmp_path / "out",
        inputs={"train": TrainingInput("data", data, distribution="ShardedByS3Key", input_mode="Pipe", files=keys)},
    )
    plan = make_plan(spec, "pipes")
    assert [h.pipes for h in plan.hosts] == [{"train": keys[0::2]}, {"train": keys[1::2]}]
    for h in plan.hosts:
        assert h.shards == {}  # nothing staged
        assert not any(m.target.startswith("/opt/ml/input/data/train") for m in h.container.mounts)
        assert "Pipe" in h.files["input/config/inputdataconfig.json"]
        (Path(h.host_dir) / "input" / "data").mkdir(parents=True)
    warnings: list[str] = []
    with pipes.serve(plan, warnings.append):  # the feeding process the runner starts
        streams = [read_epoch(Path(h.host_dir) / "input" / "data" / "train_0") for h in plan.hosts]
    assert streams == [b"".join((data / key).read_bytes() for key in share) for share in (keys[0::2], keys[1::2])]
    assert warnings == []
    assert not any(p.is_fifo() for p in tmp_path.rglob("*"))


def test_the_feeding_process_stops_and_removes_its_fifos_when_the_driver_is_gone(
    data: Path, host: Path
) -> None:
    order = {"folder": str(host), "channel": "train", "root": str(data), "files": list(scan(data).files),
             "single_file": False, "record_io": False, "label": "algo-1 train"}
    proc = subprocess.Popen([sys.executable, "-I", pipes.__file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps([order]) + "\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == "ready\n"
    assert (host / "train_0").is_fifo()
    proc.stdin.close()  # what the kernel does when the driver dies
    assert proc.wait(5) == 0
    proc.stdout.close()
    assert list(host.iterdir()) == []


def test_serve_reports_a_feeders_problem_and_leaves_no_fifo(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a").write_bytes(b"a")
    spec = JobSpec(
        job_name="pipes", base_job_name="pipes", image_uri="img", entry_point="train.py", source_dir=None,
        instance_groups=(InstanceGroup("g", "ml.c5.xlarge", 1),), heterogeneous=False, output_path=tmp_path / "out",
        inputs={"train": TrainingInput("data", data, input_mode="Pipe", files=("a",))},
    )
    plan = make_plan(spec, "pipes")
    folder = Path(plan.hosts[0].host_dir) / "input" / "data"
    folder.mkdir(parents=True)
    (data / "a").unlink()
    warnings: list[str] = []
    began = time.monotonic()
    with pipes.serve(plan, warnings.append):
        read_epoch(folder / "train_0")
    assert time.monotonic() - began < 5
    assert len(warnings) == 1 and "Pipe channel algo-1 train: feeding stopped in epoch 0" in warnings[0]
    assert list(folder.iterdir()) == []


def test_closing_with_no_reader_returns_at_once_and_removes_the_fifos(
    data: Path, host: Path, feeding: list[pipes.Feeders]
) -> None:
    feeders = start(feeding, source(host, data), source(host, data, channel="eval"))
    time.sleep(0.1)  # the feeders wait for a reader that never comes
    began = time.monotonic()
    assert feeders.close() == []
    assert time.monotonic() - began < 1.0
    assert not any(f.is_alive() for f in feeders.feeders)
    assert list(host.iterdir()) == []


def test_closing_while_a_reader_stalls_mid_epoch_does_not_hang(tmp_path: Path, host: Path,
                                                               feeding: list[pipes.Feeders]) -> None:
    big = tmp_path / "big"
    big.mkdir()
    (big / "part").write_bytes(b"\1" * (8 * 1024 * 1024))
    feeders = start(feeding, source(host, big))
    with open(host / "train_0", "rb", buffering=0):  # opened, never read: the feeder's writes wait
        deadline = time.monotonic() + 5
        while feeders.feeders[0].sent == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        began = time.monotonic()
        assert feeders.close() == []
        assert time.monotonic() - began < 1.0
        assert not feeders.feeders[0].is_alive()


def test_a_file_that_vanishes_is_reported_at_close(tmp_path: Path, host: Path, feeding: list[pipes.Feeders]) -> None:
    root = tmp_path / "gone"
    root.mkdir()
    (root / "a").write_bytes(b"a")
    src = source(host, root)
    (root / "a").unlink()
    feeders = start(feeding, src)
    reader = threading.Thread(target=read_epoch, args=(host / "train_0",))
    reader.start()
    reader.join(5)
    problems = feeders.close()
    assert len(problems) == 1 and "algo-1 train" in problems[0] and "No such file" in problems[0]


def test_a_file_system_splice_cannot_read_is_streamed_through_a_buffer(
    data: Path, host: Path, feeding: list[pipes.Feeders], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> int:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "splice", refuse)
    feeders = start(feeding, source(host, data, record_io=True))
    assert decode_recordio(read_epoch(host / "train_0")) == [(data / key).read_bytes() for key in scan(data).files]
    wait_for(host / "train_1")
    total = sum(8 + len(p) + (-len(p) % 4) for p in ((data / key).read_bytes() for key in scan(data).files))
    assert feeders.feeders[0].sent == total
