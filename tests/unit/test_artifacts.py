"""Packing what the hosts leave (emulator/run/artifacts.py): model.tar.gz / output.tar.gz as plain gzip tars
(tarfile, `tar` and `gzip` read them), host order and later-host-wins, no link followed, progress for
large trees only, CompressionType NONE (plain copies), and the times job.json and the summary report.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from fake_backend import FakeBackend, exits

from emulator.cli import _times
from emulator.jobspec import JobSpec, load_spec_file
from emulator.planning.plan import Plan
from emulator.reports.console import RecordingReporter
from emulator.result import JobResult
from emulator.run import artifacts, runner
from emulator.run.artifacts import merge_copy, merge_tree
from emulator.run.runner import run_job


def hosts_plan(*host_dirs: Path, uncompressed: bool = False) -> Plan:
    hosts = [SimpleNamespace(host_dir=str(d), name=d.name) for d in host_dirs]
    spec = SimpleNamespace(disable_output_compression=uncompressed)
    return cast(Plan, SimpleNamespace(hosts=hosts, spec=spec, job_dir=str(host_dirs[0].parent.parent)))


def write(root: Path, files: Mapping[str, bytes | str]) -> None:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            data = data.encode()
        path.write_bytes(data)


def tar_contents(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


def tree_contents(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def three_hosts(tmp_path: Path) -> list[Path]:
    dirs = [tmp_path / "job" / "hosts" / f"algo-{i}" for i in (1, 2, 3)]
    write(dirs[0] / "model", {"shared.txt": "algo-1", "only-1.txt": "1", "sub/deep.bin": b"\x00\x01"})
    write(dirs[1] / "model", {"shared.txt": "algo-2", "sub/deep.bin": b"from 2"})
    write(dirs[2] / "model", {"only-3.txt": "3"})
    return dirs


# --------------------------------------------------------------------------------------------------
# What is packed


def test_merge_tree_keeps_host_order_and_the_later_host_wins_a_path(tmp_path: Path, three_hosts: list[Path]) -> None:
    archive = merge_tree(hosts_plan(*three_hosts), "model", tmp_path / "model.tar.gz")

    assert tar_contents(archive) == {"only-1.txt": b"1", "only-3.txt": b"3", "shared.txt": b"algo-2",
                                     "sub/deep.bin": b"from 2"}
    with tarfile.open(archive) as tar:
        assert tar.getnames() == sorted(tar.getnames())  # one entry per path, in name order


def test_merge_tree_follows_no_link_and_reads_no_fifo(tmp_path: Path) -> None:
    host = tmp_path / "job" / "hosts" / "algo-1"
    outside = tmp_path / "outside"
    write(outside, {"secret.txt": "host file"})
    write(host / "model", {"real.txt": "r"})
    (host / "model" / "file-link").symlink_to(outside / "secret.txt")
    (host / "model" / "dir-link").symlink_to(outside)
    os.mkfifo(host / "model" / "fifo")
    other = tmp_path / "job" / "hosts" / "algo-2"
    other.mkdir()
    (other / "model").symlink_to(outside)  # the whole folder replaced by a link

    archive = merge_tree(hosts_plan(host, other), "model", tmp_path / "model.tar.gz")

    assert tar_contents(archive) == {"real.txt": b"r"}


def test_archive_is_one_plain_gzip_member_that_tar_and_gzip_read(tmp_path: Path, three_hosts: list[Path]) -> None:
    archive = merge_tree(hosts_plan(*three_hosts), "model", tmp_path / "model.tar.gz")

    raw = archive.read_bytes()
    assert raw[:3] == b"\x1f\x8b\x08"  # gzip magic, deflate
    plain = gzip.decompress(raw)  # checks the CRC and length trailer too
    assert len(plain) % tarfile.RECORDSIZE == 0  # a whole number of records, as tarfile writes
    assert plain[-1024:] == bytes(1024)  # the end-of-archive blocks
    if shutil.which("gzip"):
        subprocess.run(["gzip", "-t", str(archive)], check=True)
    out = tmp_path / "unpacked"
    out.mkdir()
    subprocess.run(["tar", "xzf", str(archive), "-C", str(out)], check=True)
    assert tree_contents(out) == tar_contents(archive)


def test_headers_keep_mode_mtime_and_owner(tmp_path: Path) -> None:
    host = tmp_path / "job" / "hosts" / "algo-1"
    write(host / "model", {"run.sh": "#!/bin/sh\n"})
    script = host / "model" / "run.sh"
    script.chmod(0o750)
    os.utime(script, (1_700_000_000, 1_700_000_000))

    with tarfile.open(merge_tree(hosts_plan(host), "model", tmp_path / "m.tar.gz")) as tar:
        member = tar.getmember("run.sh")
    assert (member.mode, member.mtime, member.uid, member.gid) == (0o750, 1_700_000_000, os.getuid(), os.getgid())
    assert member.isreg() and not tar.pax_headers


@pytest.mark.parametrize("name", ["a.txt", "sub/dir/weights.bin", "x" * 100, "name with spaces & ; $"])
@pytest.mark.parametrize("size", [0, 1, 511, 512, 10**9, 8**11 - 1])
def test_fast_header_is_byte_for_byte_what_tarfile_writes(name: str, size: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.uid, info.gid = size, 1_700_000_123, 0o644, 1000, 1000
    info.uname, info.gname = "someone", "staff"
    expected = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")

    assert artifacts._ustar_header(name, 0o644, 1000, 1000, size, 1_700_000_123, "someone", "staff") == expected


@pytest.mark.parametrize("case", [
    {"name": "n" * 101}, {"name": "gewichte-ä.bin"}, {"size": 8**11}, {"uname": "u" * 33}, {"uid": 8**7},
])
def test_what_ustar_cannot_hold_is_left_to_tarfile(case: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"name": "f", "mode": 0o644, "uid": 0, "gid": 0, "size": 1, "mtime": 0,
                              "uname": "root", "gname": "root"} | case
    assert artifacts._ustar_header(**fields) is None


def test_long_and_non_ascii_names_round_trip(tmp_path: Path) -> None:
    host = tmp_path / "job" / "hosts" / "algo-1"
    files = {"d" * 60 + "/" + "f" * 80 + ".bin": b"long", "gewichte-ä/モデル.bin": b"utf8"}
    write(host / "model", files)

    archive = merge_tree(hosts_plan(host), "model", tmp_path / "m.tar.gz")

    assert tar_contents(archive) == files
    out = tmp_path / "unpacked"
    out.mkdir()
    subprocess.run(["tar", "xzf", str(archive), "-C", str(out)], check=True)
    assert tree_contents(out) == files


def test_an_interrupted_packing_leaves_no_archive(tmp_path: Path, three_hosts: list[Path],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    real = artifacts._read_exact
    reads = iter(range(100))

    def read_then_interrupt(fd: int, size: int) -> bytes:
        if next(reads) == 2:
            raise KeyboardInterrupt
        return real(fd, size)

    monkeypatch.setattr(artifacts, "_read_exact", read_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        merge_tree(hosts_plan(*three_hosts), "model", tmp_path / "model.tar.gz")
    assert not (tmp_path / "model.tar.gz").exists()


def test_an_empty_tree_is_an_empty_archive(tmp_path: Path) -> None:
    host = tmp_path / "job" / "hosts" / "algo-1"
    host.mkdir(parents=True)
    archive = merge_tree(hosts_plan(host), "model", tmp_path / "m.tar.gz")
    with tarfile.open(archive) as tar:
        assert tar.getmembers() == []


# --------------------------------------------------------------------------------------------------
# Progress


def test_a_large_tree_reports_progress_while_it_is_packed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = tmp_path / "job" / "hosts" / "algo-1"
    (host / "model").mkdir(parents=True)
    with open(host / "model" / "weights.bin", "wb") as f:  # sparse: 120 MB that cost no disk
        f.truncate(120 * 10**6)
    monkeypatch.setattr(artifacts, "PROGRESS_SECONDS", 0.0)  # a line per chunk, however fast the machine
    reporter = RecordingReporter()

    merge_tree(hosts_plan(host), "model", tmp_path / "model.tar.gz", reporter)

    assert reporter.infos[0] == "packing model.tar.gz: 120.0 MB in 1 file"
    assert "(50 %)" in " ".join(reporter.infos)  # a line on the way, with MB done of the total
    assert all("MB/s" in line for line in reporter.infos[1:])
    assert reporter.infos[-1].startswith("  model.tar.gz: 120.0 MB in 1 file, ")


def test_many_small_files_report_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A thousand files over a limit of a thousand, not ten thousand over ten thousand: the same branch.
    monkeypatch.setattr(artifacts, "PROGRESS_FILES", 1000)
    host = tmp_path / "job" / "hosts" / "algo-1"
    (host / "model").mkdir(parents=True)
    for i in range(artifacts.PROGRESS_FILES + 1):
        (host / "model" / f"{i}.txt").touch()
    reporter = RecordingReporter()

    merge_tree(hosts_plan(host), "model", tmp_path / "model.tar.gz", reporter)

    assert reporter.infos[0] == "packing model.tar.gz: 0.0 MB in 1,001 files"
    assert reporter.infos[-1].startswith("  model.tar.gz: 0.0 MB in 1,001 files, ")


def test_a_small_tree_packs_silently(tmp_path: Path, three_hosts: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(artifacts, "PROGRESS_SECONDS", 0.0)
    reporter = RecordingReporter()
    merge_tree(hosts_plan(*three_hosts), "model", tmp_path / "model.tar.gz", reporter)
    merge_copy(hosts_plan(*three_hosts), "model", tmp_path / "copy" / "model", reporter)
    assert reporter.infos == []
    # The only words are about the paths two hosts wrote differently (shared.txt, sub/deep.bin).
    assert [w.split(" was written")[0] for w in reporter.warnings] == ["shared.txt", "shared.txt"]


# --------------------------------------------------------------------------------------------------
# CompressionType NONE: the files themselves


def test_merge_copy_copies_the_merged_files_with_mode_and_mtime(tmp_path: Path, three_hosts: list[Path]) -> None:
    (three_hosts[1] / "model" / "shared.txt").chmod(0o640)
    os.utime(three_hosts[1] / "model" / "shared.txt", (1_600_000_000, 1_600_000_000))
    (three_hosts[2] / "model" / "link").symlink_to(three_hosts[0] / "model" / "only-1.txt")

    target = merge_copy(hosts_plan(*three_hosts), "model", tmp_path / "out" / "model")

    assert tree_contents(target) == tar_contents(merge_tree(hosts_plan(*three_hosts), "model", tmp_path / "m.tgz"))
    st = (target / "shared.txt").stat()
    assert (st.st_mode & 0o777, int(st.st_mtime)) == (0o640, 1_600_000_000)
    assert not (target / "link").exists()


def test_merge_copy_copies_a_large_file_exactly(tmp_path: Path) -> None:
    host = tmp_path / "job" / "hosts" / "algo-1"
    data = os.urandom(3 * artifacts.CHUNK + 17)
    write(host / "model", {"big.bin": data})
    target = merge_copy(hosts_plan(host), "model", tmp_path / "out" / "model")
    assert (target / "big.bin").read_bytes() == data


def test_a_file_and_a_folder_of_one_name_keep_the_first_and_warn(tmp_path: Path) -> None:
    one, two = tmp_path / "job" / "hosts" / "algo-1", tmp_path / "job" / "hosts" / "algo-2"
    write(one / "model", {"ckpt": "a file"})
    write(two / "model", {"ckpt/part-0": "a file in a folder"})
    reporter = RecordingReporter()

    target = merge_copy(hosts_plan(one, two), "model", tmp_path / "out" / "model", reporter)

    assert tree_contents(target) == {"ckpt": b"a file"}
    assert reporter.warnings == [f"1 file not copied to {target}: a file and a folder of the same name (ckpt/part-0)"]


def test_hosts_writing_one_path_with_different_bytes_are_warned_about(tmp_path: Path) -> None:
    """Three hosts, each its group's rank 0 under torch_distributed, save model/model.json: one file is
    kept (the last host's) and the warning names the path, the hosts and the one kept."""
    dirs = [tmp_path / "job" / "hosts" / f"algo-{i}" for i in (1, 2, 3)]
    for i, host in enumerate(dirs, 1):
        write(host / "model", {"model.json": f'{{"group": {i}}}', "same.bin": b"identical", f"own-{i}": "x"})
    reporter = RecordingReporter()

    archive = merge_tree(hosts_plan(*dirs), "model", tmp_path / "model.tar.gz", reporter)

    assert tar_contents(archive)["model.json"] == b'{"group": 3}'
    [warning] = reporter.warnings
    assert warning.startswith("model.json was written by algo-1, algo-2, algo-3 with different contents: "
                              "model.tar.gz keeps algo-3's")
    assert "same.bin" not in warning  # the same bytes from every host lose nothing: no word
    copied = merge_copy(hosts_plan(*dirs), "model", tmp_path / "out" / "model", RecordingReporter())
    assert (copied / "model.json").read_text() == '{"group": 3}'


def test_hosts_writing_distinct_paths_or_the_same_bytes_get_no_warning(tmp_path: Path) -> None:
    dirs = [tmp_path / "job" / "hosts" / f"algo-{i}" for i in (1, 2)]
    for i, host in enumerate(dirs, 1):
        write(host / "model", {f"rank-{i}.pt": f"{i}", "config.json": "{}"})
    reporter = RecordingReporter()
    merge_tree(hosts_plan(*dirs), "model", tmp_path / "model.tar.gz", reporter)
    assert reporter.warnings == []


# --------------------------------------------------------------------------------------------------
# Through the runner (FakeBackend): the spec key, job.json, the times


SPEC = """\
job_name: art-job
entry_point: train.py
source_dir: code
instance_type: ml.c5.xlarge
instance_count: 2
output_path: out
"""


@pytest.fixture
def spec_text(tmp_path: Path) -> Callable[[str], JobSpec]:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("pass\n")

    def load(extra: str = "") -> JobSpec:
        (tmp_path / "job.yaml").write_text(SPEC + extra)
        return load_spec_file(tmp_path / "job.yaml")

    return load


def hosts_writing() -> FakeBackend:
    return FakeBackend({
        "algo-1": exits(0, files={"model/w.bin": b"one", "output/data/m.json": "{}"}),
        "algo-2": exits(0, files={"model/w.bin": b"two", "model/extra.txt": "x"}),
    })


def test_disable_output_compression_writes_the_files_under_output_model_and_data(
        spec_text: Callable[[str], JobSpec], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.01)
    result = run_job(spec_text("disable_output_compression: true\n"), backend=hosts_writing(),
                     reporter=RecordingReporter())

    out = result.job_dir / "output"
    assert result.status == "Completed"
    assert (result.model_artifact, result.output_artifact) == (out / "model", out / "data")
    assert tree_contents(out / "model") == {"w.bin": b"two", "extra.txt": b"x"}
    assert tree_contents(out / "data") == {"m.json": b"{}"}
    assert not (out / "model.tar.gz").exists() and not (out / "output.tar.gz").exists()
    doc = json.loads((result.job_dir / "job.json").read_text())
    assert doc["OutputDataConfig"]["CompressionType"] == "NONE"
    assert doc["ModelArtifacts"] == {"S3ModelArtifacts": str(out / "model")}


def test_compressed_output_is_the_default_and_job_json_says_gzip(
        spec_text: Callable[[str], JobSpec], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.01)
    spec = spec_text("")
    assert spec.disable_output_compression is False
    result = run_job(spec, backend=hosts_writing(), reporter=RecordingReporter())

    doc = json.loads((result.job_dir / "job.json").read_text())
    assert doc["OutputDataConfig"]["CompressionType"] == "GZIP"
    assert result.model_artifact == result.job_dir / "output" / "model.tar.gz"
    assert tar_contents(result.model_artifact) == {"w.bin": b"two", "extra.txt": b"x"}


def test_disable_output_compression_must_be_a_boolean(spec_text: Callable[[str], JobSpec]) -> None:
    from emulator.errors import SpecError

    with pytest.raises(SpecError) as info:
        spec_text("disable_output_compression: 'yes'\n")
    assert [p.path for p in info.value.problems] == ["disable_output_compression"]


def ticking_clock() -> Callable[[], datetime]:
    """Each call 10 s after the previous one."""
    base = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
    calls = iter(range(10_000))
    return lambda: base + timedelta(seconds=10 * next(calls))


def test_job_json_separates_training_from_packing_and_the_total(
        spec_text: Callable[[str], JobSpec], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.01)
    result = run_job(spec_text(""), backend=hosts_writing(), reporter=RecordingReporter(), now=ticking_clock())
    doc = json.loads((result.job_dir / "job.json").read_text())

    began, start, end, packed = result.began, result.start, result.end, result.packed
    assert began is not None and packed is not None
    assert began < start < end < packed
    # Completed: TrainingEndTime is after the artifacts are written, as the service's is after the upload
    assert doc["TrainingStartTime"] == start.isoformat()
    assert doc["TrainingEndTime"] == packed.isoformat()
    billable = round((packed - start).total_seconds())
    assert doc["TrainingTimeInSeconds"] == doc["BillableTimeInSeconds"] == billable
    assert doc["Emulator"]["Seconds"] == {"Training": (end - start).total_seconds(),
                                          "Artifacts": round(result.artifact_seconds, 3),
                                          "Total": (packed - began).total_seconds()}


def test_a_failed_job_ends_when_the_failure_is_seen_not_after_packing(tmp_path: Path) -> None:
    start = datetime(2024, 5, 1, tzinfo=timezone.utc)
    result = JobResult("j", "Failed", "boom", (), tmp_path, None, None, start, start + timedelta(seconds=9),
                       began=start - timedelta(seconds=2), packed=start + timedelta(seconds=12), artifact_seconds=3)
    assert result.training_end == result.end
    assert result.billable_seconds == 9
    assert result.total_seconds == 14


def test_summary_line_shows_training_total_packing_and_billable(tmp_path: Path) -> None:
    start = datetime(2024, 5, 1, tzinfo=timezone.utc)
    result = JobResult("j", "Completed", None, (), tmp_path, tmp_path / "model.tar.gz", None, start,
                       start + timedelta(seconds=9.3), began=start - timedelta(seconds=0.3),
                       packed=start + timedelta(seconds=11.8), artifact_seconds=2.5)
    assert _times(result) == "Completed: training 9.3 s, total 12.1 s (artifacts packed in 2.5 s, billable 12 s)"


def test_a_large_model_is_hashed_the_same_after_a_round_trip(tmp_path: Path) -> None:
    """Many 1 MiB chunks through the threaded writer come out in order (a smaller cousin of the
    1 GiB integration test)."""
    host = tmp_path / "job" / "hosts" / "algo-1"
    data = os.urandom(40 * artifacts.CHUNK + 123)
    write(host / "model", {"weights.bin": data})
    archive = merge_tree(hosts_plan(host), "model", tmp_path / "model.tar.gz")
    with tarfile.open(archive) as tar:
        extracted = tar.extractfile("weights.bin")
        assert extracted is not None
        assert hashlib.sha256(extracted.read()).hexdigest() == hashlib.sha256(data).hexdigest()
