"""staging.py: the job folder laid out before the containers start, without copying channel data."""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from emulator.errors import JobFolderTaken, UsageError
from emulator.jobspec import validate
from emulator.planning.plan import Plan, make_plan
from emulator.run import staging


def _data(root: Path) -> Path:
    source = root / "data"
    (source / "sub").mkdir(parents=True)
    (source / "a.csv").write_text("a\n")
    (source / "sub" / "b.csv").write_text("b\n")
    return source


def test_share_is_hard_links_not_copies(tmp_path: Path) -> None:
    source = _data(tmp_path)
    target = tmp_path / "job" / ".staging" / "training" / "algo-1"
    staging.link_share(source, ("a.csv", "sub/b.csv"), target)
    for name in ("a.csv", "sub/b.csv"):
        assert os.stat(target / name).st_ino == os.stat(source / name).st_ino
    assert os.stat(source / "a.csv").st_nlink == 2


def test_share_of_a_single_file_channel(tmp_path: Path) -> None:
    source = _data(tmp_path) / "a.csv"
    target = tmp_path / "share"
    staging.link_share(source, ("a.csv",), target)
    assert (target / "a.csv").read_text() == "a\n"


def test_share_falls_back_to_a_copy_across_filesystems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def cross_device(src: object, dst: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(staging.os, "link", cross_device)
    source = _data(tmp_path)
    target = tmp_path / "share"
    staging.link_share(source, ("a.csv",), target)
    assert (target / "a.csv").read_text() == "a\n"
    assert os.stat(target / "a.csv").st_ino != os.stat(source / "a.csv").st_ino


def test_other_link_errors_are_not_hidden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_space(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(staging.os, "link", no_space)
    with pytest.raises(OSError, match="No space"):
        staging.link_share(_data(tmp_path), ("a.csv",), tmp_path / "share")


def test_code_folder_is_copied_not_linked(tmp_path: Path) -> None:
    source = tmp_path / "code"
    (source / "pkg").mkdir(parents=True)
    (source / "train.sh").write_text("echo hi\n")
    (source / "pkg" / "m.py").write_text("x = 1\n")
    target = tmp_path / "host" / "code"
    target.mkdir(parents=True)
    staging.copy_code(source, target)
    assert (target / "pkg" / "m.py").read_text() == "x = 1\n"
    assert os.stat(target / "train.sh").st_ino != os.stat(source / "train.sh").st_ino
    os.chmod(target / "train.sh", 0o777)  # what the toolkit does to a non-Python entry point
    assert os.stat(source / "train.sh").st_mode & 0o777 != 0o777


def test_code_symlinks_arrive_as_their_targets_as_the_sdks_tarball_has_them(tmp_path: Path) -> None:
    """sagemaker/utils.py create_tar_file packs source_dir with dereference=True: a linked module is a
    regular file with the target's contents, a linked folder a real folder of copies."""
    project = _tree(tmp_path)
    target = tmp_path / "host" / "code"
    target.mkdir(parents=True)
    staging.copy_code(project / "src" / "job", target)
    for copied in (target / "common.py", target / "lib", target / "lib" / "util.py"):
        assert not copied.is_symlink(), copied
    assert (target / "common.py").read_text() == "VALUE = 42\n"
    assert (target / "lib" / "util.py").read_text() == "def f(): return 1\n"
    assert os.stat(target / "common.py").st_ino != os.stat(project / "vendored" / "common.py").st_ino


def test_a_lone_entry_script_that_is_a_link_keeps_its_name(tmp_path: Path) -> None:
    (tmp_path / "real.py").write_text("print(1)\n")
    (tmp_path / "train.py").symlink_to("real.py")
    spec = validate({"entry_point": "train.py", "instance_type": "ml.c5.xlarge"}, base_dir=tmp_path)
    assert spec.entry_point == "train.py"
    target = tmp_path / "host" / "code"
    target.mkdir(parents=True)
    staging.copy_code(spec.source_dir, target, spec.entry_point)
    assert [p.name for p in target.iterdir()] == ["train.py"]
    assert (target / "train.py").read_text() == "print(1)\n"


def test_a_lone_entry_script_is_copied_alone(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "other.txt").write_text("not code\n")
    target = tmp_path / "host" / "code"
    target.mkdir(parents=True)
    staging.copy_code(tmp_path / "train.py", target)
    assert sorted(p.name for p in target.iterdir()) == ["train.py"]


def _plan_with_code(tmp_path: Path) -> Plan:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print(1)\n")
    spec = validate({"entry_point": "train.py", "source_dir": "code", "output_path": "out",
                     "instance_groups": [{"instance_group_name": "a", "instance_type": "ml.c5.xlarge",
                                          "instance_count": 2}]}, base_dir=tmp_path)
    return make_plan(spec, "stage-test")


def test_a_staging_failure_removes_the_half_made_job_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _plan_with_code(tmp_path)

    def unreadable(*_args: object, **_kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", "code/secret.bin")

    monkeypatch.setattr(staging, "copy_code", unreadable)
    with pytest.raises(UsageError) as info:
        staging.stage(plan)
    assert "cannot stage the job under" in info.value.message and "Permission denied" in info.value.message
    assert not Path(plan.job_dir).exists()  # the same job name can be run again
    assert (tmp_path / "code" / "train.py").read_text() == "print(1)\n"  # the user's code untouched


def test_an_interrupt_while_staging_removes_the_job_folder_and_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = _plan_with_code(tmp_path)

    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(staging, "copy_code", interrupted)
    with pytest.raises(KeyboardInterrupt):
        staging.stage(plan)
    assert not Path(plan.job_dir).exists()


def test_a_ctrl_c_just_after_the_job_folder_is_made_removes_it_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Ctrl-C lands the moment the folder exists, before anything is laid out in it (seen once
    under load: the run said the folder was removed, and it was still there)."""
    plan = _plan_with_code(tmp_path)
    job_dir, real_mkdir = Path(plan.job_dir), Path.mkdir

    def mkdir_then_ctrl_c(self: Path, *args: Any, **kwargs: Any) -> None:
        real_mkdir(self, *args, **kwargs)
        if self == job_dir:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(100):  # Python's handler raises at this loop's first check, unless held
                pass

    monkeypatch.setattr(Path, "mkdir", mkdir_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        staging.stage(plan)
    assert not job_dir.exists()


def test_an_existing_job_folder_is_never_removed_by_a_failed_stage(tmp_path: Path) -> None:
    plan = _plan_with_code(tmp_path)
    Path(plan.job_dir).mkdir(parents=True)
    (Path(plan.job_dir) / "job.json").write_text("{}")
    with pytest.raises(JobFolderTaken):
        staging.stage(plan)
    assert (Path(plan.job_dir) / "job.json").read_text() == "{}"


# --------------------------------------------------------------------------------------------------
# Symlinks as S3 would have them (README "Limits"): what a host sees is what `aws s3 sync` or the SDK
# would have uploaded, staged with hard links to the files the links lead to.


def _tree(root: Path) -> Path:
    """A project with a DVC / Hugging Face style cache, a shared module and a shared folder, linked
    into a job's code and data folders with relative links."""
    project = root / "project"
    for folder in ("cache", "vendored/lib", "src/job", "data/plain", "data/sharded/more", "data/out"):
        (project / folder).mkdir(parents=True)
    (project / "cache" / "blob1").write_text("blob one\n")
    (project / "cache" / "blob2").write_text("blob two\n")
    (project / "vendored" / "common.py").write_text("VALUE = 42\n")
    (project / "vendored" / "lib" / "util.py").write_text("def f(): return 1\n")
    (project / "src" / "job" / "train.py").write_text("import common\n")
    (project / "src" / "job" / "common.py").symlink_to("../../vendored/common.py")
    (project / "src" / "job" / "lib").symlink_to("../../vendored/lib")
    (project / "data" / "train.csv").symlink_to("../cache/blob1")
    (project / "data" / "plain" / "a.csv").write_text("a\n")
    (project / "data" / "plain" / "same.csv").symlink_to("a.csv")  # resolves the same in a bind mount
    for i, name in enumerate(("k0.csv", "k1.csv", "more/k2.csv", "more/k3.csv")):
        path = project / "data" / "sharded" / name
        if i % 2:
            path.symlink_to(os.path.relpath(project / "cache" / f"blob{(i + 1) // 2}", path.parent))
        else:
            path.write_text(f"{name}\n")
    (project / "data" / "out" / "own.csv").write_text("own\n")
    (project / "data" / "out" / "inner.csv").symlink_to("own.csv")
    (project / "data" / "out" / "blob.csv").symlink_to("../../cache/blob2")
    (project / "data" / "out" / "shelf").symlink_to(project / "vendored" / "lib")  # absolute, to a folder
    return project


def _snapshot(root: Path) -> dict[str, tuple[str, object]]:
    """Every path under root: a link's text, or a file's inode and contents (not following links)."""
    seen: dict[str, tuple[str, object]] = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            seen[str(path)] = ("link", os.readlink(path))
        elif path.is_file():
            seen[str(path)] = ("file", (path.stat().st_ino, path.read_bytes()))
    return seen


def _staged_plan(project: Path) -> Plan:
    spec = validate({
        "job_name": "links", "entry_point": "train.py", "source_dir": "src/job", "output_path": "output",
        "instance_groups": [{"instance_group_name": "a", "instance_type": "ml.c5.xlarge", "instance_count": 2}],
        "inputs": {"single": "data/train.csv", "plain": "data/plain", "out": "data/out",
                   "sharded": {"s3_data": "data/sharded", "distribution": "ShardedByS3Key"}},
    }, base_dir=project)
    plan = make_plan(spec, "links")
    staging.stage(plan)
    return plan


def _view(plan: Plan, host: str, channel: str) -> Path:
    """The folder a host sees at /opt/ml/input/data/<channel>."""
    (mount,) = [m for m in plan.host(host).container.mounts if m.target == f"/opt/ml/input/data/{channel}"]
    return Path(mount.source)


def _files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_single_file_channel_link_is_staged_under_the_links_name(tmp_path: Path) -> None:
    project = _tree(tmp_path)
    plan = _staged_plan(project)
    for host in ("algo-1", "algo-2"):
        view = _view(plan, host, "single")
        assert _files(view) == {"train.csv": "blob one\n"}
        assert not (view / "train.csv").is_symlink()
        assert os.stat(view / "train.csv").st_ino == os.stat(project / "cache" / "blob1").st_ino


def test_sharded_share_links_the_targets_under_the_links_names(tmp_path: Path) -> None:
    project = _tree(tmp_path)
    plan = _staged_plan(project)
    one, two = (_view(plan, h, "sharded") for h in ("algo-1", "algo-2"))
    # Round-robin over the sorted keys (the links' own paths): k0, k1, more/k2, more/k3.
    assert _files(one) == {"k0.csv": "k0.csv\n", "more/k2.csv": "more/k2.csv\n"}
    assert _files(two) == {"k1.csv": "blob one\n", "more/k3.csv": "blob two\n"}
    assert not any(p.is_symlink() for p in two.rglob("*"))
    assert os.stat(two / "more" / "k3.csv").st_ino == os.stat(project / "cache" / "blob2").st_ino


def test_folder_whose_links_leave_it_gets_one_share_of_hard_links_to_the_targets(tmp_path: Path) -> None:
    project = _tree(tmp_path)
    plan = _staged_plan(project)
    views = {_view(plan, h, "out") for h in ("algo-1", "algo-2")}
    assert len(views) == 1, "one share for every host of a FullyReplicated channel"
    (view,) = views
    assert view.is_relative_to(Path(plan.job_dir) / ".staging")
    assert _files(view) == {"blob.csv": "blob two\n", "inner.csv": "own\n", "own.csv": "own\n",
                            "shelf/util.py": "def f(): return 1\n"}
    assert not any(p.is_symlink() for p in view.rglob("*")), "links inside the folder are resolved too"
    for name, original in (("blob.csv", "cache/blob2"), ("inner.csv", "data/out/own.csv"),
                           ("shelf/util.py", "vendored/lib/util.py")):
        assert os.stat(view / name).st_ino == os.stat(project / original).st_ino, "a hard link, no copy"


def test_folder_without_links_leaving_it_stays_a_mount_of_the_users_folder(tmp_path: Path) -> None:
    project = _tree(tmp_path)
    plan = _staged_plan(project)
    assert _view(plan, "algo-1", "plain") == project / "data" / "plain"
    assert not (Path(plan.job_dir) / ".staging" / "plain").exists()


def test_staging_and_unstaging_leave_the_users_tree_as_it_was(tmp_path: Path) -> None:
    project = _tree(tmp_path)
    before = _snapshot(project)
    plan = _staged_plan(project)
    assert (Path(plan.job_dir) / "hosts" / "algo-1" / "code" / "common.py").read_text() == "VALUE = 42\n"
    staging.unstage(plan)
    after = _snapshot(project)
    after = {k: v for k, v in after.items() if not k.startswith(plan.job_dir)}
    assert after == before
    assert os.stat(project / "cache" / "blob1").st_nlink == 1, "every hard link of the shares is gone"


def test_a_link_target_that_refuses_a_hard_link_is_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fs.protected_hardlinks refuses (EPERM) a hard link to another user's file: a copy of the
    target, under the link's name."""
    def refused(src: object, dst: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    project = _tree(tmp_path)
    monkeypatch.setattr(staging.os, "link", refused)
    target = tmp_path / "share"
    staging.link_share(project / "data" / "out", ("blob.csv",), target)
    assert (target / "blob.csv").read_text() == "blob two\n" and not (target / "blob.csv").is_symlink()


# --------------------------------------------------------------------------------------------------
# Copying the code: copytree's result, in parallel, with a count of files for a long staging.


def test_the_parallel_copy_gives_what_copytree_gives(tmp_path: Path) -> None:
    import shutil

    source = tmp_path / "code"
    (source / "pkg" / "deep").mkdir(parents=True)
    (tmp_path / "vendored").mkdir()
    (tmp_path / "vendored" / "common.py").write_text("shared = 1\n")
    for i in range(200):
        (source / "pkg" / f"m{i}.py").write_text(f"x = {i}\n")
    (source / "run.sh").write_text("echo hi\n")
    (source / "run.sh").chmod(0o750)
    (source / "common.py").symlink_to(tmp_path / "vendored" / "common.py")  # followed: a file
    (source / "linked").symlink_to(tmp_path / "vendored")  # followed: a folder
    (source / "pkg" / "deep" / "ro.txt").write_text("read only\n")
    (source / "pkg" / "deep").chmod(0o555)
    os.utime(source / "pkg", (1_000_000_000, 1_000_000_000))
    try:
        ours, theirs = tmp_path / "ours", tmp_path / "theirs"
        staging.copy_code(source, ours)
        shutil.copytree(source, theirs, symlinks=False)

        def snapshot(root: Path) -> dict[str, tuple[bool, int, int, bytes]]:
            return {str(p.relative_to(root)): (p.is_dir(), p.stat().st_mode, int(p.stat().st_mtime),
                                               b"" if p.is_dir() else p.read_bytes())
                    for p in root.rglob("*")}

        assert snapshot(ours) == snapshot(theirs)
        assert len(snapshot(ours)) == 200 + 7
        assert not (ours / "common.py").is_symlink() and not (ours / "linked").is_symlink()
    finally:
        for root in (source, tmp_path / "ours", tmp_path / "theirs"):
            if (root / "pkg" / "deep").exists():
                (root / "pkg" / "deep").chmod(0o755)


def test_a_file_that_cannot_be_copied_fails_the_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "code"
    source.mkdir()
    for i in range(50):
        (source / f"f{i}.py").write_text("")
    real_copy = staging.shutil.copy2

    def refuse_one(src: object, dst: object) -> object:
        if str(src).endswith("f17.py"):
            raise PermissionError(errno.EACCES, "Permission denied", str(src))
        return real_copy(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(staging.shutil, "copy2", refuse_one)
    with pytest.raises(PermissionError, match="Permission denied"):
        staging.copy_code(source, tmp_path / "target")


def _plan_with_many_files(tmp_path: Path, distribution: str) -> Plan:
    (tmp_path / "code").mkdir()
    for i in range(30):
        (tmp_path / "code" / f"m{i}.py").write_text("")
    (tmp_path / "data").mkdir()
    for i in range(8):
        (tmp_path / "data" / f"part-{i}").write_text(f"{i}\n")
    (tmp_path / "data" / "link").symlink_to(tmp_path / "code" / "m0.py")  # a link out: a staged share
    spec = validate({"entry_point": "m0.py", "source_dir": "code", "output_path": "out",
                     "inputs": {"train": {"s3_data": "data", "distribution": distribution}},
                     "instance_groups": [{"instance_group_name": "a", "instance_type": "ml.c5.xlarge",
                                          "instance_count": 3}]}, base_dir=tmp_path)
    return make_plan(spec, "progress-test")


@pytest.mark.parametrize(("distribution", "total"), [("ShardedByS3Key", 3 * 30 + 9), ("FullyReplicated", 3 * 30 + 9)])
def test_a_long_staging_reports_a_count_of_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, distribution: str, total: int) -> None:
    monkeypatch.setattr(staging, "PROGRESS_INTERVAL", 0.0)  # every file is "long" here
    plan = _plan_with_many_files(tmp_path, distribution)
    said: list[str] = []
    staging.stage(plan, said.append)
    # A FullyReplicated channel's one share is counted once, a sharded one's shares add up to its files.
    assert said[0] == f"staging: 1 of {total} files"
    assert said[-2] == f"staging: {total} of {total} files"
    assert said[-1].startswith(f"staged {total} files in ")
    assert len(list((Path(plan.job_dir) / "hosts" / "algo-3" / "code").iterdir())) == 30


def test_a_short_staging_says_nothing(tmp_path: Path) -> None:
    said: list[str] = []
    staging.stage(_plan_with_many_files(tmp_path, "ShardedByS3Key"), said.append)
    assert said == []
