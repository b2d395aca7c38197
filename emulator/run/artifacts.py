"""What a finished job leaves: model.tar.gz, output.tar.gz and job.json (DescribeTrainingJob's shape).

Packing is a tar stream (tarfile's headers) written into python-isal's threaded gzip writer: ISA-L's
deflate in worker threads, outside the GIL, while this thread reads the files; the result is one
plain gzip member that `tar xzf`, `gzip -t` and Python's tarfile read.
"""

from __future__ import annotations

import filecmp
import grp
import os
import pwd
import stat
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol

from isal import igzip_threaded

from emulator.jobspec import hyperparameters
from emulator.planning import contract, described_request
from emulator.planning.plan import Plan
from emulator.planning.secrets import Masker, mask_environment
from emulator.result import JobResult
from emulator.run import hostfiles, metrics
from emulator.state import job_records

# ISA-L's level 1 of 0-3, chosen on measurements (benchmarks/artifacts.py, 2-core machine): level 1
# packs random data at ~600 MB/s with no growth, and float32 weights to 0.926 of their size, as small
# as zlib's level 6 makes them (0.928) at 31 MB/s; level 0 has no stored-block fallback and inflates
# incompressible data by 23 %; levels 2 and 3 are no smaller on model-like data and up to 2x slower.
# (tarfile's "w:gz" used zlib level 9: ~32 MB/s on one core.)
GZIP_LEVEL = 1
# isal's compression workers (this thread reads the files and writes tar headers). Measured on 2
# cores: 2 workers pack 100,000 small files 10-20 % faster than 1, and 1 GiB as fast (~550 MB/s,
# where writing the archive is the limit); more than 4 buys nothing at 600 MB/s per worker.
GZIP_THREADS = max(1, min(4, os.cpu_count() or 1))
CHUNK = 1 << 20  # read size for large files; also isal's block size
# A tree this large gets progress lines (Reporter.info); a smaller one packs in about a second.
PROGRESS_BYTES = 100 * 10**6
PROGRESS_FILES = 10_000
PROGRESS_SECONDS = 3.0


class ProgressReporter(Protocol):
    """The part of `emulator.reports.console.Reporter` packing uses."""

    def info(self, message: str) -> None: ...

    def warn(self, message: str) -> None: ...


Listing = list[tuple[str, str, int]]  # (name in the artifact, path on disk, size when listed)


def chosen_files(plan: Plan, relative: str) -> tuple[Listing, dict[str, list[str]]]:
    """Every host's regular files under `/opt/ml/<relative>`, merged in host order, sorted by name;
    and the paths more than one host wrote with different bytes: path -> the hosts, in host order.

    Where two hosts wrote the same path, the later host wins, as later uploads of the same S3 key
    do. Only regular files, and no link followed (see `emulator.run.hostfiles`): the script owns the
    host's folder, and a link it planted (`/opt/ml/model -> /etc`) would resolve in the host's
    filesystem here. A FIFO or device is skipped, never read.
    """
    chosen: dict[str, tuple[str, str, int]] = {}
    writers: dict[str, list[tuple[str, str]]] = {}
    for host in plan.hosts:
        root = hostfiles.host_path(Path(host.host_dir), relative)
        if root is None:
            continue
        for item in hostfiles.scan_regular(root):
            chosen[item[0]] = item
            writers.setdefault(item[0], []).append((host.name, item[1]))
    clashes = {name: [h for h, _ in hosts] for name, hosts in writers.items()
               if len(hosts) > 1 and not _same_bytes([path for _, path in hosts])}
    return [chosen[name] for name in sorted(chosen)], dict(sorted(clashes.items()))


def _same_bytes(paths: list[str]) -> bool:
    """Whether every file holds the same bytes: hosts that save one identical model (data parallel,
    weights in step) lose nothing when one copy is kept."""
    try:
        return all(filecmp.cmp(paths[0], other, shallow=False) for other in paths[1:])
    except OSError:
        return False


def _warn_clashes(progress: ProgressReporter | None, clashes: dict[str, list[str]], artifact: str) -> None:
    """Several hosts wrote one path with different bytes: one file is kept, the rest are lost without a
    word on the service too (each host's upload of one S3 key replaces the last). With
    torch_distributed every group is its own world with its own rank 0, so each group's rank 0 saving
    `model.json` is a real job's mistake, not a contrived one."""
    if not clashes or progress is None:
        return
    name, hosts = next(iter(clashes.items()))
    more = f" (and {len(clashes) - 1} more path{'s' if len(clashes) > 2 else ''})" if len(clashes) > 1 else ""
    progress.warn(f"{name} was written by {', '.join(hosts)} with different contents{more}: {artifact} keeps "
                  f"{hosts[-1]}'s and the others are lost, as on the service, where each host's upload of one "
                  "S3 key replaces the one before; save from one host (e.g. where SM_CURRENT_HOST is the first "
                  "of SM_HOSTS) or give each host its own file name")


class _Progress:
    """Info lines while a large tree is packed: one at the start, one every PROGRESS_SECONDS, one at
    the end. A small tree (at most PROGRESS_BYTES and PROGRESS_FILES) packs silently."""

    def __init__(self, reporter: ProgressReporter | None, verb: str, label: str, files: Listing,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total = sum(size for _, _, size in files)
        self.count = len(files)
        large = self.total > PROGRESS_BYTES or self.count > PROGRESS_FILES
        self.reporter = reporter if large else None
        self.label, self.clock = label, clock
        self.done = self.files = 0
        self.started = clock()
        self.next = self.started + PROGRESS_SECONDS
        if self.reporter is not None:
            self.reporter.info(f"{verb} {label}: {_mb(self.total)} in {_files(self.count)}")

    def advance(self, size: int, files: int = 0) -> None:
        self.done += size
        self.files += files
        if self.reporter is not None and (now := self.clock()) >= self.next:
            self.next = now + PROGRESS_SECONDS
            percent = 100 * self.done / self.total if self.total else 100 * self.files / max(1, self.count)
            self.reporter.info(f"  {self.label}: {_mb(self.done)} of {_mb(self.total)} ({percent:.0f} %), "
                               f"{self.files:,} of {self.count:,} files, {self._rate(now)}")

    def finish(self) -> None:
        if self.reporter is not None:
            now = self.clock()
            self.reporter.info(f"  {self.label}: {_mb(self.done)} in {_files(self.files)}, "
                               f"{now - self.started:.1f} s, {self._rate(now)}")

    def _rate(self, now: float) -> str:
        return f"{self.done / 1e6 / max(now - self.started, 1e-6):.0f} MB/s"


def _mb(size: int) -> str:
    return f"{size / 1e6:,.1f} MB"


def _files(count: int) -> str:
    return f"{count:,} file" + ("" if count == 1 else "s")


_BLOCK = tarfile.BLOCKSIZE
_RECORD = tarfile.RECORDSIZE


class _Owners:
    """uname/gname for tar headers, looked up once per id (tarfile's gettarinfo asks pwd/grp, which
    reads /etc/passwd and /etc/group, for every file)."""

    def __init__(self) -> None:
        self.users: dict[int, str] = {}
        self.groups: dict[int, str] = {}

    def user(self, uid: int) -> str:
        return _name_of(self.users, uid, lambda: pwd.getpwuid(uid).pw_name)

    def group(self, gid: int) -> str:
        return _name_of(self.groups, gid, lambda: grp.getgrgid(gid).gr_name)


def _name_of(cache: dict[int, str], ident: int, look_up: Callable[[], str]) -> str:
    """The name of a user or group id, looked up once; "" for an id with no name (as tarfile writes)."""
    if ident not in cache:
        try:
            cache[ident] = look_up()
        except KeyError:
            cache[ident] = ""
    return cache[ident]


def _tar_header(name: str, st: os.stat_result, owners: _Owners) -> bytes:
    """The header tarfile's addfile writes for this file (PAX format, as `tarfile.open(..., "w:gz")`
    wrote), built from the fstat of the open file."""
    # A whole-second mtime: a float one costs a PAX extended header per file (tarfile writes
    # "mtime=1700000000.123" for gettarinfo's float), doubling the header work for small files.
    mtime, mode, size = int(st.st_mtime), stat.S_IMODE(st.st_mode), st.st_size
    uname, gname = owners.user(st.st_uid), owners.group(st.st_gid)
    fast = _ustar_header(name, mode, st.st_uid, st.st_gid, size, mtime, uname, gname)
    if fast is not None:
        return fast
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, mtime, mode
    info.uid, info.gid, info.uname, info.gname = st.st_uid, st.st_gid, uname, gname
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


_OCTAL_7 = 8**7  # the largest value + 1 an 8-byte octal field holds (7 digits and a NUL)
_OCTAL_11 = 8**11  # the same for a 12-byte field (sizes and mtimes)


def _ustar_header(name: str, mode: int, uid: int, gid: int, size: int, mtime: int, uname: str,
                  gname: str) -> bytes | None:
    """tarfile's own header bytes for the common case, or None where tarfile must write it.

    Measured (benchmarks/artifacts.py): tarfile's `TarInfo.tobuf` costs ~20 us a file, most of the
    time of packing 100,000 small files. Where every field fits a plain ustar header (an ASCII name of
    at most 100 characters, names of owners of at most 32, numbers that fit their octal fields),
    tarfile's PAX format writes no extended header and these exact bytes (tests compare the two);
    anything else (long or non-ASCII names, files of 8 GiB or more) goes through tarfile.
    """
    if not (len(name) <= 100 and name.isascii() and len(uname) <= 32 and uname.isascii()
            and len(gname) <= 32 and gname.isascii() and 0 <= uid < _OCTAL_7 and 0 <= gid < _OCTAL_7
            and size < _OCTAL_11 and 0 <= mtime < _OCTAL_11):
        return None
    header = b"".join((
        name.encode("ascii").ljust(100, b"\0"),
        b"%07o\0%07o\0%07o\0%011o\0%011o\0" % (mode, uid, gid, size, mtime),
        b"        ",  # the checksum, counted as spaces
        tarfile.REGTYPE,
        bytes(100),  # linkname
        tarfile.POSIX_MAGIC,
        uname.encode("ascii").ljust(32, b"\0"),
        gname.encode("ascii").ljust(32, b"\0"),
        bytes(8 + 8 + 155 + 12),  # devmajor, devminor, prefix, and the block's padding
    ))
    return header[:148] + b"%06o\0" % sum(header) + header[155:]


def _read_exact(fd: int, size: int) -> bytes:
    """`size` bytes from `fd`; zeros for what is missing if the file shrank since its fstat (the header
    already says `size`: the archive stays well formed). The hosts have exited: it does not happen
    unless something else writes into the job folder."""
    parts: list[bytes] = []
    got = 0
    while got < size:
        chunk = os.read(fd, size - got)
        if not chunk:
            parts.append(bytes(size - got))
            break
        parts.append(chunk)
        got += len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _padding(size: int) -> bytes:
    return bytes(-size % _BLOCK)


def merge_tree(plan: Plan, relative: str, archive: Path, progress: ProgressReporter | None = None) -> Path:
    """Tar every host's `/opt/ml/<relative>` into one gzip archive (`chosen_files`: host order, later
    host wins a path, regular files only, no link followed).

    Paths are relative to the folder, as the service packs /opt/ml/model. `progress` gets info lines
    for a large tree (`_Progress`).
    """
    files, clashes = chosen_files(plan, relative)
    _warn_clashes(progress, clashes, archive.name)
    archive.parent.mkdir(parents=True, exist_ok=True)
    meter = _Progress(progress, "packing", archive.name, files)
    try:
        _write_archive(archive, files, meter)
    except BaseException:
        # Interrupted (Ctrl-C) or failed (disk full): isal's writer still closes the gzip stream
        # properly, which would leave a valid-looking gzip of a cut tar. No archive beats that one.
        archive.unlink(missing_ok=True)
        raise
    meter.finish()
    return archive


def _write_archive(archive: Path, files: Listing, meter: _Progress) -> None:
    owners = _Owners()
    offset = 0
    with igzip_threaded.open(  # type: ignore[no-untyped-call]
            archive, "wb", compresslevel=GZIP_LEVEL, threads=GZIP_THREADS, block_size=CHUNK) as gz:
        for name, path, _ in files:
            # None also for a file root wrote with mode 600, which stays unreadable to a user who is
            # not root when its ownership could not be fixed (runner.fix_ownership warns): leave it
            # out, not crash. From the open descriptor (fstat), not the name: what is packed is what
            # was checked.
            opened = hostfiles.open_regular_fd(path)
            if opened is None:
                continue
            fd, st = opened
            try:
                offset += _pack_file(gz, _tar_header(name, st, owners), fd, st.st_size, meter)
            finally:
                os.close(fd)
        # The end of a tar: two zero blocks, then zeros up to a whole record, as tarfile.close writes.
        end = 2 * _BLOCK
        end += -(offset + end) % _RECORD
        gz.write(bytes(end))


def _pack_file(gz: IO[bytes], header: bytes, fd: int, size: int, meter: _Progress) -> int:
    """Write one member (header, data, padding); returns its length in the tar stream."""
    if size <= CHUNK:
        # One write per small file: the per-call cost is what 100,000 small files add up.
        gz.write(header + _read_exact(fd, size) + _padding(size))
    else:
        gz.write(header)
        left = size
        while left:
            chunk = _read_exact(fd, min(CHUNK, left))
            gz.write(chunk)
            left -= len(chunk)
            meter.advance(len(chunk))
        gz.write(_padding(size))
    meter.advance(size if size <= CHUNK else 0, files=1)
    return len(header) + size + len(_padding(size))


def merge_copy(plan: Plan, relative: str, target: Path, progress: ProgressReporter | None = None) -> Path:
    """The uncompressed counterpart of `merge_tree` (CompressionType NONE): the merged files copied
    under `target` as they are, with their permission bits and modification times.

    Where one host left a file `a` and another a folder `a/` (S3 keys `a` and `a/b` can coexist, a
    folder cannot), the first in name order is kept and the other skipped with a warning.
    """
    files, clashes = chosen_files(plan, relative)
    _warn_clashes(progress, clashes, f"{target.parent.name}/{target.name}/")
    target.mkdir(parents=True, exist_ok=True)
    meter = _Progress(progress, "copying", f"{target.parent.name}/{target.name}/", files)
    skipped: list[str] = []
    made = {""}  # folders under target made so far ("" is target itself)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for name, path, _ in files:
        opened = hostfiles.open_regular_fd(path)
        if opened is None:
            continue
        fd, st = opened
        try:
            folder = os.path.dirname(name)
            try:
                if folder not in made:
                    os.makedirs(os.path.join(target, folder), exist_ok=True)
                    made.add(folder)
                # O_EXCL | O_NOFOLLOW: the target folder is new and the driver's; nothing there is followed.
                out = os.open(os.path.join(target, name), flags, 0o600)
            except (FileExistsError, NotADirectoryError, IsADirectoryError):
                skipped.append(name)
                continue
            try:
                _copy_fd(fd, out, st.st_size, meter)
                os.fchmod(out, stat.S_IMODE(st.st_mode) & 0o777)
                os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
            finally:
                os.close(out)
        finally:
            os.close(fd)
        meter.advance(0, files=1)
    meter.finish()
    if skipped and progress is not None:
        progress.warn(f"{_files(len(skipped))} not copied to {target}: a file and a folder of the same name "
                      f"({', '.join(skipped[:5])}{' ...' if len(skipped) > 5 else ''})")
    return target


def _copy_fd(src: int, dst: int, size: int, meter: _Progress) -> None:
    """A small file in one read and write; a large one in-kernel (copy_file_range, a reflink where the
    filesystem shares blocks), with plain reads and writes where the kernel refuses it (across some
    filesystems, old kernels)."""
    copied = 0
    if size > CHUNK:
        try:
            while copied < size:
                n = os.copy_file_range(src, dst, min(16 * CHUNK, size - copied), copied, copied)
                if n == 0:
                    break
                copied += n
                meter.advance(n)
        except OSError:
            os.lseek(src, copied, os.SEEK_SET)
            os.lseek(dst, copied, os.SEEK_SET)
    while copied < size:
        chunk = os.read(src, min(CHUNK, size - copied))
        if not chunk:
            break
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view):]
        copied += len(chunk)
        meter.advance(len(chunk))


def collect(plan: Plan, progress: ProgressReporter | None = None) -> tuple[Path, Path]:
    """model.tar.gz and output.tar.gz under the job's output/, or with `disable_output_compression`
    the folders output/model/ and output/data/ holding the files themselves.

    CompressionType NONE: "After the model and data are written to those locations, they're uploaded
    to your Amazon S3 bucket as compressed files by default. You can save time on large data file
    compression by uploading model and data outputs to your S3 bucket as uncompressed files"
    (SageMaker developer guide, model-train-storage-uncompressed).
    """
    out = Path(plan.job_dir) / "output"
    if plan.spec.disable_output_compression:
        return (merge_copy(plan, "model", out / "model", progress),
                merge_copy(plan, "output/data", out / "data", progress))
    return (merge_tree(plan, "model", out / "model.tar.gz", progress),
            merge_tree(plan, "output/data", out / "output.tar.gz", progress))


def describe(plan: Plan, result: JobResult) -> dict[str, Any]:
    """job.json: the DescribeTrainingJob response shape, plus one entry per host.

    Secrets are masked (see `emulator.planning.secrets`): Environment by name, the FailureReasons by value,
    since a host's /opt/ml/output/failure or last log lines may quote a secret.
    """
    spec = plan.spec
    masker = Masker(spec.environment, *(h.container.environment for h in plan.hosts))

    def reason(text: str | None) -> str | None:
        return masker.mask_truncated(text) if text else text

    doc: dict[str, Any] = {
        "TrainingJobName": plan.job_name,
        "TrainingJobArn": contract.training_job_arn(plan.job_name, spec.region),
        "TrainingJobStatus": result.status,
        "SecondaryStatus": result.secondary_status or result.status,
        "AlgorithmSpecification": {
            # As the request named it (an ECR name stays an ECR name); what ran is under Emulator.Image.
            "TrainingImage": spec.requested_image or plan.image,
            "TrainingInputMode": spec.input_mode,
            **({"ContainerEntrypoint": list(plan.entrypoint)} if plan.entrypoint is not None else {}),
            **({"ContainerArguments": list(plan.command)} if spec.container_arguments else {}),
            **({"MetricDefinitions": [{"Name": d.name, "Regex": d.regex} for d in spec.metric_definitions]}
               if spec.metric_definitions else {}),
        },
        "HyperParameters": hyperparameters.encoded(spec, plan.job_name),
        "ResourceConfig": contract.describe_resource_config(spec),
        "InputDataConfig": contract.describe_input_data_config(spec),
        # The service echoes CompressionType (GZIP unless the request said NONE).
        "OutputDataConfig": {"S3OutputPath": spec.output_s3_uri or str(spec.output_path),
                             "CompressionType": "NONE" if spec.disable_output_compression else "GZIP"},
        "StoppingCondition": {"MaxRuntimeInSeconds": spec.max_run},
        "EnableNetworkIsolation": spec.enable_network_isolation,
        "CreationTime": (result.created or result.began or result.start).isoformat(),
        "LastModifiedTime": (result.packed or result.end).isoformat(),
        "SecondaryStatusTransitions": list(result.transitions),
        "TrainingStartTime": result.start.isoformat(),
        "TrainingEndTime": result.training_end.isoformat(),
        # At least 1 s each, as the API's model allows no less (a job that ended within a second).
        "TrainingTimeInSeconds": max(1, int(round(result.training_seconds))),
        "BillableTimeInSeconds": max(1, int(round(result.billable_seconds))),
        "Environment": mask_environment(spec.environment),
        "Emulator": {
            "HostOrder": plan.host_order, "Seed": plan.seed, "Network": plan.network, "Image": plan.image,
            # The host whose failure failed the job (FailureReason, as the service words it, names none).
            **({"FailedHost": result.failed_host} if result.failed_host else {}),
            # The attempts a spot interruption or a retried platform error ended (emulator/run/attempts.py).
            **({"Attempts": list(result.attempts)} if result.attempts else {}),
            # Which local image stood in for the one the job named, and on which Python
            # (emulator.training_images.ecr_images).
            **({"StandIn": {"For": spec.requested_image, "Image": plan.image, "Notes": list(spec.image_notes)}}
               if spec.requested_image else {}),
            # How the hosts got their types' GPUs and vCPUs, and what this machine could not give them.
            "Hardware": {"Gpus": plan.hardware.gpus, "Cpus": plan.hardware.cpus,
                         "GpuDevices": {h: list(ids) for h, ids in plan.hardware.devices.items()},
                         "Notes": [*plan.hardware.notes, *plan.hardware.warnings]},
            # What the summary prints: the hosts' run, packing the artifacts, and the whole run.
            "Seconds": {"Training": round(result.seconds, 3), "Artifacts": round(result.artifact_seconds, 3),
                        "Total": round(result.total_seconds, 3)},
        },
        "Hosts": [
            {
                "Host": h.host,
                "InstanceGroupName": h.group,
                "InstanceType": h.instance_type,
                "ExitCode": h.exit_code,
                "FailureReason": reason(h.failure_reason),
                "Seconds": round(h.seconds, 3),
            }
            for h in result.hosts
        ],
    }
    if spec.metric_definitions:
        # Each metric's last value (emulator/run/metrics.py), as DescribeTrainingJob gives it.
        doc["FinalMetricDataList"] = [{**m, "Timestamp": m["Timestamp"].isoformat()}
                                      for m in metrics.final(metrics.read(Path(plan.job_dir)))]
    if result.failure_reason:
        doc["FailureReason"] = reason(result.failure_reason)
    if result.model_artifact is not None:
        # With CompressionType NONE this is the folder (an S3 prefix on the service): the SDK's
        # Estimator.model_data reads it so, appending the "/" hosting needs when it is missing, and
        # returns {"S3DataSource": {"S3Uri": ..., "S3DataType": "S3Prefix", "CompressionType": "None"}}.
        # An s3:// output path: the key the service writes, <S3OutputPath>/<job>/output/model.tar.gz
        # (the file lies there under the local S3 root).
        where = (f"{spec.output_s3_uri}/{plan.job_name}/output/{result.model_artifact.name}" if spec.output_s3_uri
                 else str(result.model_artifact))
        doc["ModelArtifacts"] = {"S3ModelArtifacts": where}
    if spec.checkpoint_s3_uri is not None:
        doc["CheckpointConfig"] = {"S3Uri": spec.checkpoint_uri or str(spec.checkpoint_s3_uri),
                                   "LocalPath": spec.checkpoint_local_path}
    if spec.tensorboard_output_path is not None:
        doc["TensorBoardOutputConfig"] = {"S3OutputPath": spec.tensorboard_uri or str(spec.tensorboard_output_path),
                                          "LocalPath": spec.tensorboard_local_path}
    # Beneath it, the request the job describes (emulator/planning/described_request.py): what only the request says
    # (spot, MaxWaitTimeInSeconds, the keep-alive, RetryStrategy, RoleArn, the debugger's configs)
    # is described for a job from any front end. A session's request is laid over this again when it
    # is described (emulator/jobs/service.py), as it was sent.
    return described_request.merged(described_request.described_request(spec, plan.job_name), doc)



def write_description(plan: Plan, result: JobResult) -> Path:
    doc = describe(plan, result)
    # A tuning job's trial names its tuning job, as its DescribeTrainingJob does (API_DescribeTrainingJob,
    # TuningJobArn): the tuning layer recorded it when it created the job.
    record = job_records.find(plan.job_name)
    if record is not None and record.job_dir == Path(plan.job_dir) and isinstance(record.doc.get("TuningJobArn"), str):
        doc["TuningJobArn"] = record.doc["TuningJobArn"]
    path = Path(plan.job_dir) / "job.json"
    path.write_text(contract.dumps(doc))
    return path
