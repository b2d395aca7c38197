"""Checkpoints synced while the job runs, as the service syncs them (docs/outputs.md, Checkpoints).

On the service, files a script writes to its checkpoint folder (`/opt/ml/checkpoints`, or the
configured local path) are uploaded to the checkpoint URI while the job runs, not only at its end
(https://docs.aws.amazon.com/sagemaker/latest/dg/model-checkpoints.html): a job that is stopped,
interrupted or killed leaves its last checkpoints there. Here a thread looks at every host's folder
once a second and copies each regular file that has not changed since the last look (a file still
being written changes between two looks), so a closed file is at the URI within about 2 s. The
copy is the end-of-job one, file by file (`emulator.run.hostfiles`: no link followed, renamed into
place). The end of the job (or of an attempt) copies every file that changed (`LiveSync.final`).

Only what a host wrote goes back, as the service uploads only files that changed since they were
downloaded: every host starts with the URI's checkpoints restored, and a host that never touched
them (the one that is not rank 0) would otherwise copy its stale restored copy over the new one
another host wrote.

Deletes reach the URI too: the service keeps the checkpoint folder in sync with S3 both ways ("If a
checkpoint is deleted in the SageMaker container, it will also be deleted in the S3 folder",
https://docs.aws.amazon.com/sagemaker/latest/dg/model-checkpoints.html). A file a host had (restored
to it, or copied from it) that is gone from its folder at two looks in a row (a file deleted and at
once written again is no delete), or at the end, is deleted at the URI with the folders that leaves
empty (S3 has no folders). Only what that host had: a file another host wrote after the start was
never on this one, so its absence here deletes nothing. What cannot be told (a link on the way, a
folder that cannot be searched) deletes nothing, and the delete walks the URI's folders without
following a link (`hostfiles.remove_regular_file`).

TensorBoard's output (TensorBoardOutputConfig) goes the same way to its S3 output path, while the job
runs, from each host's TensorBoard folder (nothing is restored there before the job), and so do
SageMaker Debugger's tensors and profiler files (emulator/planning/sm_debugger.py); those two are upload-only.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

from emulator.planning import contract, sm_debugger
from emulator.planning.plan import Plan, tensorboard_folder
from emulator.run import hostfiles

SYNC_SECONDS = 1.0


class LiveSync:
    """One job's checkpoint folders (or, with `folder` and `target`, another folder of each host's,
    such as TensorBoard's), copied to the target as their files settle; for checkpoints, what a host
    deletes is deleted there as well. `scan()` is one look (the thread calls it every SYNC_SECONDS;
    tests call it directly)."""

    def __init__(self, plan: Plan, folder: str = "checkpoints", target: Path | None = None,
                 what: str = "checkpoints") -> None:
        self.folder = folder
        self.what = what
        checkpoints = folder == "checkpoints" and target is None
        self.target = plan.spec.checkpoint_s3_uri if checkpoints else target
        # Deletes are the checkpoints' alone: AWS documents a sync both ways for checkpoints only
        # (model-checkpoints.html); TensorBoard's and Debugger's output it describes as saved to S3
        # (API_TensorBoardOutputConfig.html, debugger-configure-hook.html), and nothing is restored
        # from those prefixes into a later job, so they stay upload-only.
        self.deletes = checkpoints
        self.hosts = [(h.name, Path(h.host_dir)) for h in plan.hosts]
        self._host_dirs = dict(self.hosts)
        # (host, relative path) -> (size, mtime_ns) seen at the last look, and what was copied last;
        # the checkpoints restored before the hosts start count as copied (they came from the URI).
        # The keys of `_copied` are what each host had at the URI: what it may delete there.
        self._seen: dict[tuple[str, str], tuple[int, int]] = {}
        self._copied: dict[tuple[str, str], tuple[int, int]] = dict(self._states())
        self._gone: set[tuple[str, str]] = set()  # had, and found gone at the last look
        self.copies = 0
        self.deleted = 0

    def _states(self) -> Iterator[tuple[tuple[str, str], tuple[int, int]]]:
        """Every regular file of every host's checkpoint folder, with its (size, mtime_ns)."""
        for host, host_dir in self.hosts:
            folder = hostfiles.host_path(host_dir, self.folder)
            if folder is None:
                continue
            for relative, path in hostfiles.regular_files(folder):
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                yield (host, relative), (st.st_size, st.st_mtime_ns)

    def final(self) -> list[str]:
        """Copy every file that changed since it was last copied (or restored), settled or not, in
        host order: the end of the job. Returns what a file/folder clash kept out, as `host:path`
        (S3 keys `c` and `c/x` can coexist, local paths cannot)."""
        skipped: list[str] = []
        if self.target is None:
            return skipped
        states = dict(self._states())
        self._delete_gone(states, wait=False)  # the hosts have exited: a file gone now stays gone
        self.target.mkdir(parents=True, exist_ok=True)
        folders = self._host_dirs
        for (host, relative), state in states.items():
            if self._copied.get((host, relative)) == state:
                continue
            folder = hostfiles.host_path(folders[host], self.folder)
            if folder is not None and not hostfiles.copy_regular_file_into(folder / relative, self.target, relative):
                skipped.append(f"{host}:{relative}")
            self._copied[(host, relative)] = state
        return skipped

    def scan(self) -> None:
        if self.target is None:
            return
        states = dict(self._states())
        # Deletes first: a host that replaced a file by a folder of that name gets the folder's files
        # copied once the file is gone at the URI.
        self._delete_gone(states, wait=True)
        folders = self._host_dirs
        for key, state in states.items():
            settled = self._seen.get(key) == state
            self._seen[key] = state
            if settled and self._copied.get(key) != state:
                host, relative = key
                folder = hostfiles.host_path(folders[host], self.folder)
                self.target.mkdir(parents=True, exist_ok=True)
                if folder is not None and hostfiles.copy_regular_file_into(folder / relative, self.target, relative):
                    self.copies += 1
                self._copied[key] = state

    def _delete_gone(self, present: Mapping[tuple[str, str], tuple[int, int]], wait: bool) -> None:
        """Delete at the target each file a host had there and no longer has (`_gone_from_host`); with
        `wait`, only one found gone at the last look as well."""
        if not self.deletes or self.target is None:
            return
        gone = {key for key in self._copied if key not in present and self._gone_from_host(*key)}
        due = gone & self._gone if wait else gone
        self._gone = gone - due
        for key in sorted(due):
            if hostfiles.remove_regular_file(self.target, key[1]):
                self.deleted += 1
            # No longer this host's at the target: written again, it is a new file to copy.
            del self._copied[key]
            self._seen.pop(key, None)

    def _gone_from_host(self, host: str, relative: str) -> bool:
        """Whether the host's regular file `relative` is surely gone: nothing there (or under a file),
        or a folder, FIFO or device in its place. A link on the way or in its place, or a folder that
        cannot be searched, is not sure, and deletes nothing."""
        path = hostfiles.host_path(self._host_dirs[host], f"{self.folder}/{relative}")
        if path is None:
            return False
        try:
            return not stat.S_ISREG(path.lstat().st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return True
        except OSError:
            return False


def syncs(plan: Plan) -> list[LiveSync]:
    """What the job copies while it runs: its checkpoints to the checkpoint URI and its TensorBoard
    files to the TensorBoard output path, each when configured."""
    found = [LiveSync(plan)] if plan.spec.checkpoint_s3_uri is not None else []
    board = tensorboard_folder(plan.spec)
    if board is not None and plan.spec.tensorboard_output_path is not None:
        # Under the job's name, as the service uploads them (contract.TENSORBOARD_PREFIX).
        target = plan.spec.tensorboard_output_path / plan.job_name / contract.TENSORBOARD_PREFIX
        found.append(LiveSync(plan, board, target, "TensorBoard files"))
    found += [LiveSync(plan, u.folder, u.target, u.what) for u in sm_debugger.uploads(plan.spec, plan.job_name)
              if u.target is not None]
    return found


@contextlib.contextmanager
def live(plan: Plan) -> Iterator[list[LiveSync]]:
    """Sync the job's checkpoints and TensorBoard files while the block runs (`syncs`; none, no
    thread); a sync that fails (a full disk) stops syncing, never the job: the end-of-job copy says
    what it could not copy."""
    found = syncs(plan)
    if not found:
        yield found
        return
    done = threading.Event()

    def loop() -> None:
        while not done.wait(SYNC_SECONDS):
            try:
                for sync in found:
                    sync.scan()
            except OSError:
                return

    thread = threading.Thread(target=loop, name="checkpoint-sync", daemon=True)
    thread.start()
    try:
        yield found
    finally:
        done.set()
        thread.join(timeout=30)
