"""staging.py: the job folder laid out before the containers start, without copying channel data."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from emulator import staging
from emulator.errors import JobFolderTaken, UsageError
from emulator.plan import Plan, make_plan
from emulator.spec import validate


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


def test_code_folder_is_copied_not_linked_and_symlinks_stay_links(tmp_path: Path) -> None:
    source = tmp_path / "code"
    (source / "pkg").mkdir(parents=True)
    (source / "train.sh").write_text("echo hi\n")
    (source / "pkg" / "m.py").write_text("x = 1\n")
    (tmp_path / "secret").write_text("outside\n")
    (source / "link").symlink_to(tmp_path / "secret")
    target = tmp_path / "host" / "code"
    target.mkdir(parents=True)
    staging.copy_code(source, target)
    assert (target / "pkg" / "m.py").read_text() == "x = 1\n"
    assert os.stat(target / "train.sh").st_ino != os.stat(source / "train.sh").st_ino
    assert (target / "link").is_symlink()
    os.chmod(target / "train.sh", 0o777)  # what the toolkit does to a non-Python entry point
    assert os.stat(source / "train.sh").st_mode & 0o777 != 0o777


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


def test_an_existing_job_folder_is_never_removed_by_a_failed_stage(tmp_path: Path) -> None:
    plan = _plan_with_code(tmp_path)
    Path(plan.job_dir).mkdir(parents=True)
    (Path(plan.job_dir) / "job.json").write_text("{}")
    with pytest.raises(JobFolderTaken):
        staging.stage(plan)
    assert (Path(plan.job_dir) / "job.json").read_text() == "{}"
