"""Lay out a job's folder on the host before the containers start, and tidy it afterwards.

`<output_path>/<job_name>/hosts/algo-N/` becomes that host's /opt/ml (bind mount), so what a host
leaves behind is kept as it was; its `code/` is a copy of the user's code. The user's data is never
written: channels are bind-mounted read-only, and the channels that cannot be (ShardedByS3Key shares,
single files, folders whose symlinks leave them) are shares of hard links (no copy of the contents)
under `.staging/`, which is removed after the job. Symlinks are followed as the upload the user would
have made follows them (the SDK's sourcedir.tar.gz, `aws s3 sync`): see `spec.paths.scan`.
"""

from __future__ import annotations

import errno
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from emulator.backend.calls import interrupts_deferred
from emulator.errors import JobFolderTaken, UsageError
from emulator.jobspec import s3
from emulator.jobspec.rules import SDK_UPLOADS
from emulator.planning import hooks, sm_debugger, sshkeys
from emulator.planning.plan import SSH_FOLDER, Plan, share_dir, tensorboard_folder
from emulator.run import job_aws

# Folders the service creates under /opt/ml before the algorithm starts.
# https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-training-algo-output.html
HOST_FOLDERS = ("model", "output/data", "checkpoints", "input/data", "code")


# What a run makes in its job folder; all of it is removed again when staging fails.
RUN_ENTRIES = ("logs", "output", "hosts", ".staging", "job.json", SSH_FOLDER, job_aws.FOLDER)

# Files copied at once: creating a file costs the filesystem's journal a wait of its own (a few
# milliseconds each on a busy disk), and copies in parallel share those waits. See
# benchmarks/staging.py.
COPY_THREADS = 32
# A staging that lasts longer than this says how far it is, again at this interval.
PROGRESS_INTERVAL = 2.0

Progress = Callable[[str], None]
# A folder's listing: its folders and its files, relative to it (`_listed`).
Tree = tuple[list[str], list[str]]


class _Count:
    """Files staged so far, told to `report` every PROGRESS_INTERVAL seconds, so that a long staging
    (20,000 files of code on 4 hosts) shows it is moving; a short one says nothing."""

    def __init__(self, total: int, report: Progress | None) -> None:
        self.total = total
        self.done = 0
        self.report = report
        self.start = self.last = time.monotonic()
        self.reported = False

    def add(self, count: int = 1) -> None:
        self.done += count
        now = time.monotonic()
        if self.report is not None and now - self.last >= PROGRESS_INTERVAL:
            self.last = now
            self.reported = True
            self.report(f"staging: {self.done:,} of {self.total:,} files")

    def finish(self) -> None:
        if self.report is not None and self.reported:
            self.report(f"staged {self.done:,} files in {time.monotonic() - self.start:.1f} s")


def folder_taken(job_dir: Path, s3_output: bool) -> bool:
    """Whether a job folder belongs to an earlier job. Under an s3:// output path the folder is the
    job's own key prefix, into which the SDK uploads the code before the job (`SDK_UPLOADS`): a
    folder holding only that is the job's, not a taken one."""
    if not os.path.lexists(job_dir):
        return False
    if not s3_output or job_dir.is_symlink() or not job_dir.is_dir():
        return True
    return not set(os.listdir(job_dir)) <= set(SDK_UPLOADS)


def stage(plan: Plan, progress: Progress | None = None) -> None:
    """Create the job folder (never reusing an earlier job's) and every host's /opt/ml tree; a long
    staging reports a count of files to `progress` every few seconds."""
    job_dir = Path(plan.job_dir)
    claimed: bool | None = None  # True: this run made the folder; False: it joined the SDK's upload
    try:
        # A Ctrl-C that lands while the folder is claimed is held until the claim is known, and so
        # comes down here, where the half-made folder is removed. Raised just after the mkdir, it
        # once left the folder while the run said it was removed (the soak of scripts/soak.sh).
        with interrupts_deferred():
            claimed = _claim(job_dir, plan.spec.output_s3_uri is not None)
        _lay_out(plan, job_dir, progress)
    except BaseException as err:
        # What this run made (never reused): a half-made folder would only make the next run with
        # this job name fail with "already exists". The SDK's upload beside it stays.
        if claimed:
            shutil.rmtree(job_dir, ignore_errors=True)
        elif claimed is False:
            for entry in RUN_ENTRIES:
                shutil.rmtree(job_dir / entry, ignore_errors=True)
        if isinstance(err, OSError):
            raise UsageError(f"cannot stage the job under {job_dir}: {err}",
                             hint="every file of source_dir, the channels and the checkpoints must be readable, "
                             "and output_path writable") from None
        raise


def _claim(job_dir: Path, s3_output: bool) -> bool:
    """Make the job folder, never reusing an earlier job's: True when this run made it, False when
    it joins the SDK's upload there (claimed with its logs/ folder, made once)."""
    try:
        job_dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            job_dir.mkdir()
        except FileExistsError:
            if folder_taken(job_dir, s3_output):
                raise
            (job_dir / "logs").mkdir()
            return False
    except FileExistsError:
        raise JobFolderTaken(
            f"the job's output folder already exists: {job_dir}",
            hint="an existing job's output is never overwritten: use another job_name, or move it away",
        ) from None
    except OSError as err:
        raise UsageError(f"cannot create the output folder {job_dir}: {err.strerror}",
                         hint="check output_path and its permissions") from None
    return True


def _lay_out(plan: Plan, job_dir: Path, progress: Progress | None) -> None:
    (job_dir / "logs").mkdir(exist_ok=True)
    (job_dir / "output").mkdir()
    if plan.ssh_dir is not None:
        # New keys for every job (render too, so the compose project runs MPI as `run` does). The files
        # are the driver's: `config` only when that is root (see sshkeys.write_keys). Under rootless
        # Docker the driver's user is the container's root and could have it too; it is left out
        # there as well, which the default image's own ssh configuration makes up for.
        sshkeys.write_keys(Path(plan.ssh_dir), plan.job_name, client_config=os.getuid() == 0)
    if plan.hook_dir is not None:
        hooks.stage(Path(plan.hook_dir))
    job_aws.stage(plan)  # the job's AWS: its certificates, the hosts' config (nothing for an isolated job)
    lay_out_hosts(plan, progress)


def lay_out_hosts(plan: Plan, progress: Progress | None = None) -> None:
    """Every host's /opt/ml tree: its folders, a copy of the code, its config files, the channels'
    shares (made once per job) and the checkpoints restored from the checkpoint URI."""
    spec = plan.spec
    # Each tree is listed once, however many hosts get a copy of it.
    code = _listed(spec.source_dir) if spec.source_dir is not None and spec.source_dir.is_dir() \
        and not spec.source_archive else None
    checkpoints = _listed(spec.checkpoint_s3_uri) if spec.checkpoint_s3_uri is not None \
        and spec.checkpoint_s3_uri.is_dir() else None
    # A FullyReplicated channel's one share serves every host: counted once.
    shares = {share_dir(plan.job_dir, channel, spec.inputs[channel], host.name): len(files)
              for host in plan.hosts for channel, files in host.shards.items()}
    per_host = sum(len(tree[1]) for tree in (code, checkpoints) if tree is not None)
    count = _Count(per_host * len(plan.hosts) + sum(shares.values()), progress)
    for host in plan.hosts:
        root = Path(host.host_dir)
        for folder in (*HOST_FOLDERS, *filter(None, [tensorboard_folder(spec)]),
                       *(u.folder for u in sm_debugger.uploads(spec, plan.job_name))):
            (root / folder).mkdir(parents=True, exist_ok=True)
        for name in host.channels:
            if name not in host.pipes:  # a Pipe channel has FIFOs there instead (emulator.run.pipes)
                (root / "input" / "data" / name).mkdir(parents=True, exist_ok=True)
        if spec.source_archive and spec.source_dir is not None:
            s3.unpack(spec.source_dir, root / "code")  # sourcedir.tar.gz, as the toolkit unpacks it
        else:
            copy_code(spec.source_dir, root / "code", spec.entry_point, tree=code, done=count.add)
        for relative, content in host.files.items():
            target = root / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
        for channel, files in host.shards.items():
            share = share_dir(plan.job_dir, channel, spec.inputs[channel], host.name)
            if not share.exists():  # a FullyReplicated channel's one share is staged for its first host
                link_share(spec.inputs[channel].source, files, share, copy=spec.inputs[channel].copied,
                           done=count.add)
        if checkpoints is not None and spec.checkpoint_s3_uri is not None:
            # The service downloads checkpoint_s3_uri into checkpoint_local_path before the job.
            copy_tree(spec.checkpoint_s3_uri, root / "checkpoints", checkpoints, count.add)
    count.finish()


def copy_code(source: Path | None, target: Path, entry_point: str | None = None, *, tree: Tree | None = None,
              done: Callable[[int], None] = lambda count: None) -> None:
    """Give a host its own copy of the code, as the service unpacks sourcedir.tar.gz on each host.

    A copy, not a mount: the toolkit writes there (it makes a non-Python entry point executable
    and may install requirements.txt), which must neither fail on a read-only mount nor touch the
    user's files. Symlinks are followed, files and folders, as the SDK packs the folder:
    sagemaker/utils.py create_tar_file opens the tarball with `dereference=True` (called by
    fw_utils.tar_and_upload_dir), so `common.py -> ../../vendored/common.py` arrives as a regular file
    with the target's contents. The spec refused links that dangle or loop (`spec.paths.scan`).
    A lone script (`source` a file) is copied under the entry point's name, not its link target's.
    `tree` is the folder's listing when it was made already (`_listed`), `done` counts the files.
    """
    if source is None:
        return
    if source.is_dir():
        copy_tree(source, target, tree or _listed(source), done)
    else:
        shutil.copy2(source, target / (entry_point or source.name))
        done(1)


def _listed(source: Path) -> Tree:
    """The folders and the files under `source`, relative to it, parents before children, symlinks
    followed (a linked folder is entered, a linked file is a file), as copytree(symlinks=False) walks."""
    folders: list[str] = []
    files: list[str] = []

    def refuse(err: OSError) -> None:
        raise err  # an unreadable folder fails the staging, as copytree's would

    for root, dirnames, filenames in os.walk(source, onerror=refuse, followlinks=True):
        relative = os.path.relpath(root, source)
        prefix = "" if relative == "." else relative + os.sep
        folders += [prefix + name for name in sorted(dirnames)]
        files += [prefix + name for name in sorted(filenames)]
    return folders, files


def copy_tree(source: Path, target: Path, tree: Tree, done: Callable[[int], None] = lambda count: None) -> None:
    """shutil.copytree(source, target, symlinks=False, dirs_exist_ok=True) over a listing made once
    (`_listed`), with the files copied COPY_THREADS at a time: each file's contents, mode and times
    (copy2), then each folder's mode and times, deepest first, as copytree sets them after its
    contents. `done(1)` after each file. The first error stops it (an OSError)."""
    folders, files = tree
    target.mkdir(parents=True, exist_ok=True)
    for folder in folders:
        os.makedirs(target / folder, exist_ok=True)
    with ThreadPoolExecutor(COPY_THREADS) as pool:
        try:
            for _ in pool.map(lambda name: shutil.copy2(source / name, target / name), files):
                done(1)
        except BaseException:
            pool.shutdown(cancel_futures=True)  # the copies not begun yet: staging failed anyway
            raise
    for folder in reversed(folders):
        shutil.copystat(source / folder, target / folder)
    shutil.copystat(source, target)


def link_share(source: Path, files: tuple[str, ...], target: Path, copy: bool = False,
               done: Callable[[int], None] = lambda count: None) -> None:
    """Put a share of a channel under `target`, as hard links where the filesystem allows, or as
    copies when `copy` (a host's writable copy of the SDK's own channel: a write through a hard link,
    chmod too, would change the file in the S3 root).

    `files` are keys as S3 would list them (`spec.paths.scan`): a symlink's own path, the file it leads
    to linked under it. A hard link costs no data copy, so staging time does not grow with the
    data; across filesystems (EXDEV) or where links are refused (EPERM under
    fs.protected_hardlinks for another user's file), the file is copied instead.
    """
    target.mkdir(parents=True, exist_ok=True)
    single = not source.is_dir()
    made = {str(target)}  # folders of the share already made: one mkdir per folder, not per file
    for relative in files:
        src = _followed(str(source if single else source / relative))
        dst = os.path.join(target, relative)
        folder = os.path.dirname(dst)
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        if copy:
            shutil.copy2(src, dst)
        else:
            try:
                os.link(src, dst)
            except OSError as err:
                if err.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EACCES):
                    raise
                shutil.copy2(src, dst)
        done(1)


# The kernel's own limit of symlinks followed in one lookup (Linux MAXSYMLINKS), past which ELOOP.
MAX_SYMLINKS = 40


def _followed(path: str) -> str:
    """The path of the file a symlink at `path` leads to (`path` itself if it is no link).

    link(2) does not follow a symlink given as its source on Linux (and os.link calls link() without
    AT_SYMLINK_FOLLOW whatever follow_symlinks says): it would hard-link the link itself, which then
    dangles or points elsewhere in the container. Only the last component needs following: the
    kernel resolves linked folders on the way, so this costs a readlink per link instead of a
    realpath's lstat per path component.
    """
    for _ in range(MAX_SYMLINKS):
        if not os.path.islink(path):
            return path
        # Relative to the link's own folder, as the kernel reads it (an absolute text replaces it).
        path = os.path.join(os.path.dirname(path), os.readlink(path))
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)


def fresh_hosts(plan: Plan, progress: Progress | None = None) -> None:
    """New instances for a job started again (a spot interruption, a retry): each host's /opt/ml
    as the service's new instances have it, with nothing the last attempt left but what reached the
    checkpoint URI. rmtree follows no link the script made."""
    for host in plan.hosts:
        shutil.rmtree(host.host_dir, ignore_errors=True)
    lay_out_hosts(plan, progress)


def unstage(plan: Plan) -> None:
    """Remove the hard-link shares (the user's files they point to are untouched) and each host's copy
    of the code: the service keeps no copy of `source_dir`, and one per host would leave its size again
    for every host of every run (a 500 MB source_dir on 4 hosts: 2 GB). rmtree follows no link, so a
    script that made its code folder a link leaves the link's target alone."""
    shutil.rmtree(Path(plan.job_dir) / ".staging", ignore_errors=True)
    job_aws.unstage(plan)
    for host in plan.hosts:
        shutil.rmtree(Path(host.host_dir) / "code", ignore_errors=True)
