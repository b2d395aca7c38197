"""Symlinks as S3 would have them, seen from inside real containers (README "Limits").

One job of two hosts runs the real toolkit (`train`) on a project laid out as real ones are: a
DVC / Hugging Face style cache that data files link into, a module and a folder of code linked into
source_dir from a shared folder. Each host reports, for every channel, the names it sees, whether
each is a symlink, and its contents (or the error reading it), and the tests compare that with what
`aws s3 sync` and the SDK's sourcedir.tar.gz would have put on S3.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from emulator.jobspec import validate
from emulator.reports.console import RecordingReporter
from emulator.result import JobResult
from emulator.run.runner import run_job

# One group (scripts/test.sh runs pytest-xdist with --dist loadgroup): the module's job runs once, on
# one worker, for all its tests, instead of once on each worker that gets one of them.
pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("training_image", "no_leftovers"),
              pytest.mark.xdist_group("symlinks")]

Snapshot = dict[str, tuple[str, object]]
# The job's result, each host's report, the project, and the project's snapshots before and after.
Job = tuple[JobResult, dict[str, dict[str, Any]], Path, tuple[Snapshot, Snapshot]]

TRAIN = '''\
import json, os, sys
from pathlib import Path

try:  # reported, so the channels' checks do not depend on this one
    import common                  # common.py -> ../../vendored/common.py
    from lib import util           # lib -> ../../vendored/lib
    imported = [common.VALUE, util.f()]
except ImportError as err:
    imported = repr(err)

rc = json.loads(Path("/opt/ml/input/config/resourceconfig.json").read_text())
seen = {}
for channel in sorted(os.listdir("/opt/ml/input/data")):
    root = Path("/opt/ml/input/data", channel)
    found = {}
    for folder, dirs, files in os.walk(root, followlinks=True):
        for name in dirs + files:
            path = Path(folder, name)
            if path.is_dir():
                continue
            try:
                content = path.read_text()
            except OSError as err:
                content = "ERROR " + err.__class__.__name__
            found[str(path.relative_to(root))] = [path.is_symlink(), content]
    seen[channel] = found
code = {name: os.path.islink("/opt/ml/code/" + name) for name in ("common.py", "lib", "lib/util.py")}
print("SEEN " + json.dumps({"host": rc["current_host"], "channels": seen, "code_links": code,
                            "imported": imported}, sort_keys=True), flush=True)
sys.exit(0 if isinstance(imported, list) else 1)
'''


def _project(root: Path) -> Path:
    project = root / "project"
    for folder in ("cache", "vendored/lib", "src/job", "data/plain", "data/sharded/more", "data/out"):
        (project / folder).mkdir(parents=True)
    (project / "cache" / "blob1").write_text("blob one\n")
    (project / "cache" / "blob2").write_text("blob two\n")
    (project / "vendored" / "common.py").write_text("VALUE = 42\n")
    (project / "vendored" / "lib" / "util.py").write_text("def f():\n    return 7\n")
    (project / "src" / "job" / "train.py").write_text(TRAIN)
    (project / "src" / "job" / "common.py").symlink_to("../../vendored/common.py")
    (project / "src" / "job" / "lib").symlink_to("../../vendored/lib")
    (project / "data" / "train.csv").symlink_to("../cache/blob1")
    (project / "data" / "plain" / "a.csv").write_text("a\n")
    (project / "data" / "plain" / "same.csv").symlink_to("a.csv")
    (project / "data" / "sharded" / "k0.csv").write_text("k0\n")
    (project / "data" / "sharded" / "k1.csv").symlink_to("../../cache/blob1")
    (project / "data" / "sharded" / "more" / "k2.csv").write_text("k2\n")
    (project / "data" / "sharded" / "more" / "k3.csv").symlink_to("../../../cache/blob2")
    (project / "data" / "out" / "own.csv").write_text("own\n")
    (project / "data" / "out" / "inner.csv").symlink_to("own.csv")
    (project / "data" / "out" / "blob.csv").symlink_to("../../cache/blob2")
    (project / "data" / "out" / "shelf").symlink_to(project / "vendored" / "lib")  # absolute, a folder
    return project


def _snapshot(root: Path) -> Snapshot:
    """Every path under root, links not followed: a link's text, a file's inode, link count and bytes."""
    seen: Snapshot = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            seen[str(path.relative_to(root))] = ("link", os.readlink(path))
        elif path.is_file():
            status = path.stat()
            seen[str(path.relative_to(root))] = ("file", (status.st_ino, status.st_nlink, path.read_bytes()))
    return seen


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Job:
    project = _project(tmp_path_factory.mktemp("symlinks"))
    before = _snapshot(project)
    spec = validate({
        "base_job_name": "symlinks",
        "entry_point": "train.py",
        "source_dir": "src/job",
        "output_path": str(project.parent / "out"),
        "instance_groups": [{"instance_group_name": "data_group", "instance_type": "ml.c5.xlarge",
                             "instance_count": 2}],
        "inputs": {"single": "data/train.csv", "plain": "data/plain", "out": "data/out",
                   "sharded": {"s3_data": "data/sharded", "distribution": "ShardedByS3Key"}},
    }, base_dir=project)
    reporter = RecordingReporter()
    result = run_job(spec, reporter=reporter)
    seen = {}
    for _host, _group, line in reporter.lines:
        if line.startswith("SEEN "):
            report = json.loads(line[5:])
            seen[report["host"]] = report
    return result, seen, project, (before, _snapshot(project))


def _reports(job: Job) -> dict[str, dict[str, Any]]:
    """Each host's report; both hosts must have reported (a job that failed reports nothing)."""
    result, seen, _, _ = job
    assert sorted(seen) == ["algo-1", "algo-2"], (result.status, result.failure_reason)
    return seen


def test_job_importing_a_linked_module_completes(job: Job) -> None:
    seen = _reports(job)
    assert job[0].status == "Completed", job[0].failure_reason
    for host, report in seen.items():
        assert report["imported"] == [42, 7], host
        # As the SDK's tarball (dereference=True) unpacks: regular files and folders, no links.
        assert report["code_links"] == {"common.py": False, "lib": False, "lib/util.py": False}, host


def test_single_file_channel_link_appears_under_its_own_name(job: Job) -> None:
    seen = _reports(job)
    for host, report in seen.items():
        assert report["channels"]["single"] == {"train.csv": [False, "blob one\n"]}, host


def test_sharded_channel_with_links_gives_the_targets_under_the_links_names(
    job: Job
) -> None:
    seen = _reports(job)
    # Round-robin over the sorted keys (k0.csv, k1.csv, more/k2.csv, more/k3.csv): the same split as
    # without links.
    assert seen["algo-1"]["channels"]["sharded"] == {"k0.csv": [False, "k0\n"], "more/k2.csv": [False, "k2\n"]}
    assert seen["algo-2"]["channels"]["sharded"] == {"k1.csv": [False, "blob one\n"],
                                                     "more/k3.csv": [False, "blob two\n"]}


def test_channel_folder_with_links_leaving_it_shows_their_targets(
    job: Job
) -> None:
    seen = _reports(job)
    for host, report in seen.items():
        assert report["channels"]["out"] == {
            "own.csv": [False, "own\n"], "inner.csv": [False, "own\n"], "blob.csv": [False, "blob two\n"],
            "shelf/util.py": [False, "def f():\n    return 7\n"]}, host


def test_channel_folder_whose_links_stay_inside_is_the_users_folder(
    job: Job
) -> None:
    """No staging cost: a plain bind mount, where a link inside the folder resolves as on the host."""
    seen = _reports(job)
    for host, report in seen.items():
        assert report["channels"]["plain"] == {"a.csv": [False, "a\n"], "same.csv": [True, "a\n"]}, host


def test_the_users_tree_is_unchanged_and_the_shares_are_gone(job: Job) -> None:
    result, _, _, (before, after) = job
    assert after == before  # same links, same inodes, link counts (no share left) and bytes
    assert not (result.job_dir / ".staging").exists()
