"""Checkpoints synced while the job runs, as the service syncs them (docs/outputs.md, Checkpoints).

On the service, files a script writes to its checkpoint folder (`/opt/ml/checkpoints`, or the
configured local path) are uploaded to the checkpoint URI while the job runs, not only at its end
(https://docs.aws.amazon.com/sagemaker/latest/dg/model-checkpoints.html): a job that is stopped,
interrupted or killed leaves its last checkpoints there. Here a thread looks at every host's folder
once a second and copies each regular file that has not changed since the last look (a file still
being written changes between two looks), so a closed file is at the URI within about 2 s. The
copy is the end-of-job one, file by file (`emulator.hostfiles`: no link followed, renamed into
place). The end of the job (or of an attempt) copies every file that changed (`LiveSync.final`).

Only what a host wrote goes back, as the service uploads only files that changed since they were
downloaded: every host starts with the URI's checkpoints restored, and a host that never touched
them (the one that is not rank 0) would otherwise copy its stale restored copy over the new one
another host wrote.

TensorBoard's output (TensorBoardOutputConfig) goes the same way to its S3 output path, while the job
runs, from each host's TensorBoard folder (nothing is restored there before the job), and so do
SageMaker Debugger's tensors and profiler files (emulator/sm_debugger.py).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from emulator import contract, hostfiles, sm_debugger
from emulator.plan import Plan, tensorboard_folder

SYNC_SECONDS = 1.0


class LiveSync:
    """One job's checkpoint folders (or, with `folder` and `target`, another folder of each host's,
    such as TensorBoard's), copied to the target as their files settle. `scan()` is one look (the
    thread calls it every SYNC_SECONDS; tests call it directly)."""

    def __init__(self, plan: Plan, folder: str = "checkpoints", target: Path | None = None,
                 what: str = "checkpoints") -> None:
        self.folder = folder
        self.what = what
        self.target = plan.spec.checkpoint_s3_uri if folder == "checkpoints" and target is None else target
        self.hosts = [(h.name, Path(h.host_dir)) for h in plan.hosts]
        # (host, relative path) -> (size, mtime_ns) seen at the last look, and what was copied last;
        # the checkpoints restored before the hosts start count as copied (they came from the URI).
        self._seen: dict[tuple[str, str], tuple[int, int]] = {}
        self._copied: dict[tuple[str, str], tuple[int, int]] = dict(self._states())
        self.copies = 0

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
        self.target.mkdir(parents=True, exist_ok=True)
        folders = dict(self.hosts)
        for (host, relative), state in list(self._states()):
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
        folders = dict(self.hosts)
        for key, state in list(self._states()):
            settled = self._seen.get(key) == state
            self._seen[key] = state
            if settled and self._copied.get(key) != state:
                host, relative = key
                folder = hostfiles.host_path(folders[host], self.folder)
                self.target.mkdir(parents=True, exist_ok=True)
                if folder is not None and hostfiles.copy_regular_file_into(folder / relative, self.target, relative):
                    self.copies += 1
                self._copied[key] = state


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
