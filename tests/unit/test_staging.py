"""staging.py: the job folder laid out before the containers start, without copying channel data."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from emulator import staging


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
