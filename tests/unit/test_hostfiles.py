"""emulator.run.hostfiles and its users: what a host left under its /opt/ml is read without following links
out of it, only from regular files, and with a bound (a script controls every entry there)."""

from __future__ import annotations

import json
import os
import stat
import tarfile
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from emulator.planning.plan import Plan
from emulator.run import hostfiles
from emulator.run.artifacts import merge_tree
from emulator.run.checkpoints import LiveSync

MARKER = "HOST-MARKER-do-not-leak"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A host folder outside every host's tree, holding a marker file (what a planted link points at)."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text(MARKER)
    return folder


@pytest.fixture
def host(tmp_path: Path) -> Path:
    root = tmp_path / "hosts" / "algo-1"
    for folder in ("model", "output/data", "checkpoints", "input/config"):
        (root / folder).mkdir(parents=True)
    return root


def plant_everything(folder: Path, outside: Path) -> None:
    """Every kind of entry that is not a regular file or a real folder."""
    (folder / "link-to-file").symlink_to(outside / "secret.txt")
    (folder / "link-to-folder").symlink_to(outside)
    (folder / "dangling").symlink_to(outside / "nowhere")
    (folder / "loop").symlink_to(folder / "loop")
    (folder / "null").symlink_to("/dev/null")
    (folder / "zero").symlink_to("/dev/zero")
    os.mkfifo(folder / "fifo")


def fake_plan(*host_dirs: Path, checkpoints: Path | None = None) -> Plan:
    hosts = [SimpleNamespace(host_dir=str(d), name=d.name) for d in host_dirs]
    return cast(Plan, SimpleNamespace(hosts=hosts, spec=SimpleNamespace(checkpoint_s3_uri=checkpoints)))


def no_marker_under(root: Path) -> bool:
    return all(MARKER not in p.read_text(errors="replace") for p in root.rglob("*")
               if p.is_file() and not p.is_symlink())


# --------------------------------------------------------------------------------------------------
# host_path


def test_host_path_of_real_folders_is_the_path(host: Path) -> None:
    assert hostfiles.host_path(host, "output/data") == host / "output" / "data"


def test_host_path_of_a_missing_entry_is_the_path(host: Path) -> None:
    assert hostfiles.host_path(host, "output/failure") == host / "output" / "failure"
    assert hostfiles.host_path(host, "nothing/below/here") == host / "nothing" / "below" / "here"


def test_host_path_refuses_a_symlinked_root(host: Path, outside: Path) -> None:
    (host / "model").rmdir()
    (host / "model").symlink_to(outside)
    assert hostfiles.host_path(host, "model") is None


def test_host_path_refuses_a_symlinked_component(host: Path, outside: Path) -> None:
    (host / "output" / "data").rmdir()
    (host / "output").rmdir()
    (host / "output").symlink_to(outside)
    assert hostfiles.host_path(host, "output/data") is None
    assert hostfiles.host_path(host, "output/failure") is None


def test_host_path_refuses_a_symlinked_last_component(host: Path, outside: Path) -> None:
    (host / "output" / "failure").symlink_to(outside / "secret.txt")
    assert hostfiles.host_path(host, "output/failure") is None


@pytest.mark.parametrize("relative", ["../algo-2/model", "/etc", "model/../../x"])
def test_host_path_refuses_paths_leaving_the_host(host: Path, relative: str) -> None:
    with pytest.raises(ValueError):
        hostfiles.host_path(host, relative)


# --------------------------------------------------------------------------------------------------
# regular_files


def test_regular_files_keeps_only_regular_files(host: Path, outside: Path) -> None:
    model = host / "model"
    (model / "sub" / "deeper").mkdir(parents=True)
    (model / "weights.bin").write_bytes(b"w")
    (model / "sub" / "deeper" / "x.txt").write_text("x")
    plant_everything(model, outside)
    plant_everything(model / "sub", outside)
    assert hostfiles.regular_files(model) == [
        ("sub/deeper/x.txt", model / "sub" / "deeper" / "x.txt"),
        ("weights.bin", model / "weights.bin"),
    ]


def test_regular_files_of_a_symlinked_root_is_empty(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "model").symlink_to(outside)
    assert hostfiles.regular_files(tmp_path / "model") == []


def test_regular_files_of_a_file_or_nothing_is_empty(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert hostfiles.regular_files(tmp_path / "file") == []
    assert hostfiles.regular_files(tmp_path / "missing") == []


def test_regular_files_leaves_out_a_device_node(tmp_path: Path) -> None:
    try:
        os.mknod(tmp_path / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD")
    (tmp_path / "real").write_text("r")
    assert [name for name, _ in hostfiles.regular_files(tmp_path)] == ["real"]


# --------------------------------------------------------------------------------------------------
# read_text_bounded / open_regular


def test_read_text_bounded_reads_a_small_file_whole(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("boom\n")
    assert hostfiles.read_text_bounded(tmp_path / "f", 100) == "boom\n"


def test_read_text_bounded_reads_at_most_limit_bytes_of_a_huge_file(tmp_path: Path) -> None:
    huge = tmp_path / "huge"
    with huge.open("wb") as f:
        f.write(b"A" * 10)
        f.truncate(1 << 40)  # 1 TiB, sparse: reading it whole would never end (or exhaust memory)
    text = hostfiles.read_text_bounded(huge, 4096)
    assert len(text) == 4096
    assert text.startswith("A" * 10)


def test_read_text_bounded_replaces_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"bad \xff\xfe byte, then \xc3\xa9")
    assert hostfiles.read_text_bounded(tmp_path / "f", 100) == "bad \ufffd\ufffd byte, then \u00e9"


def test_read_text_bounded_cut_inside_a_character_decodes(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes("é".encode() * 3)
    assert hostfiles.read_text_bounded(tmp_path / "f", 3) == "é\ufffd"


def test_read_text_bounded_never_follows_a_link(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "failure").symlink_to(outside / "secret.txt")
    assert hostfiles.read_text_bounded(tmp_path / "failure", 1 << 20) == ""


@pytest.mark.parametrize("target", ["/dev/null", "/dev/zero"])
def test_read_text_bounded_of_a_device_link_is_empty(tmp_path: Path, target: str) -> None:
    (tmp_path / "failure").symlink_to(target)
    assert hostfiles.read_text_bounded(tmp_path / "failure", 1 << 20) == ""
    assert hostfiles.read_text_bounded(Path(target), 1 << 20) == ""  # the device itself: not regular


def test_read_text_bounded_of_a_fifo_neither_blocks_nor_reads(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "failure")
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(hostfiles.read_text_bounded(tmp_path / "failure", 100)),
                              daemon=True)
    reader.start()
    reader.join(5)
    assert not reader.is_alive(), "reading a FIFO with no writer blocked"
    assert got == [""]


def test_read_text_bounded_of_a_folder_or_nothing_is_empty(tmp_path: Path) -> None:
    assert hostfiles.read_text_bounded(tmp_path, 100) == ""
    assert hostfiles.read_text_bounded(tmp_path / "missing", 100) == ""


def test_open_regular_refuses_everything_but_a_regular_file(tmp_path: Path, outside: Path) -> None:
    plant_everything(tmp_path, outside)
    for entry in tmp_path.iterdir():
        assert hostfiles.open_regular(entry) is None, entry
    (tmp_path / "real").write_bytes(b"r")
    file = hostfiles.open_regular(tmp_path / "real")
    assert file is not None
    with file:
        assert file.read() == b"r"


# --------------------------------------------------------------------------------------------------
# copy_regular_tree


def test_copy_regular_tree_copies_regular_files_and_real_folders_only(tmp_path: Path, outside: Path) -> None:
    source, target = tmp_path / "src", tmp_path / "dst"
    (source / "sub").mkdir(parents=True)
    target.mkdir()
    (source / "step-1.pt").write_bytes(b"one")
    (source / "sub" / "step-2.pt").write_bytes(b"two")
    os.utime(source / "step-1.pt", ns=(1_000_000_000, 1_000_000_000))
    plant_everything(source, outside)
    plant_everything(source / "sub", outside)
    before = {p: p.read_bytes() for p in outside.rglob("*")}

    hostfiles.copy_regular_tree(source, target)

    copied = sorted(str(p.relative_to(target)) for p in target.rglob("*"))
    assert copied == ["step-1.pt", "sub", "sub/step-2.pt"]
    assert (target / "step-1.pt").read_bytes() == b"one"
    assert (target / "step-1.pt").stat().st_mtime_ns == 1_000_000_000
    assert {p: p.read_bytes() for p in outside.rglob("*")} == before


def test_copy_regular_tree_of_a_symlinked_source_copies_nothing(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "src").symlink_to(outside)
    (tmp_path / "dst").mkdir()
    hostfiles.copy_regular_tree(tmp_path / "src", tmp_path / "dst")
    assert list((tmp_path / "dst").iterdir()) == []


def test_copy_regular_tree_never_writes_through_a_link_in_the_target(tmp_path: Path, outside: Path) -> None:
    source, target = tmp_path / "src", tmp_path / "dst"
    (source / "folder").mkdir(parents=True)
    target.mkdir()
    (source / "latest").write_text("new")
    (source / "folder" / "secret.txt").write_text("new")
    (target / "latest").symlink_to(outside / "secret.txt")
    (target / "folder").symlink_to(outside)

    hostfiles.copy_regular_tree(source, target)

    assert (outside / "secret.txt").read_text() == MARKER  # the links' targets are untouched
    assert not (target / "latest").is_symlink() and (target / "latest").read_text() == "new"
    assert not (target / "folder").is_symlink() and (target / "folder" / "secret.txt").read_text() == "new"


def test_copy_regular_tree_keeps_the_users_entry_where_kinds_differ(tmp_path: Path) -> None:
    source, target = tmp_path / "src", tmp_path / "dst"
    (source / "was-a-file").mkdir(parents=True)
    (source / "was-a-file" / "x").write_text("host")
    (source / "was-a-folder").write_text("host")
    (target / "was-a-folder").mkdir(parents=True)
    (target / "was-a-file").write_text("user")

    hostfiles.copy_regular_tree(source, target)

    assert (target / "was-a-file").read_text() == "user"
    assert (target / "was-a-folder").is_dir()
    assert sorted(p.name for p in target.iterdir()) == ["was-a-file", "was-a-folder"]  # no temporary left


def test_copy_regular_tree_keeps_permission_bits_only(tmp_path: Path) -> None:
    source, target = tmp_path / "src", tmp_path / "dst"
    source.mkdir()
    target.mkdir()
    (source / "tool").write_bytes(b"#!/bin/sh\n")
    os.chmod(source / "tool", 0o4755)
    hostfiles.copy_regular_tree(source, target)
    assert stat.S_IMODE((target / "tool").stat().st_mode) == 0o755


# --------------------------------------------------------------------------------------------------
# remove_regular_file (a checkpoint a host deleted, deleted at the user's checkpoint folder)


def test_remove_regular_file_deletes_the_file_and_the_folders_it_leaves_empty(tmp_path: Path) -> None:
    (tmp_path / "uri" / "a" / "b").mkdir(parents=True)
    (tmp_path / "uri" / "a" / "b" / "x.pt").write_text("x")
    (tmp_path / "uri" / "a" / "keep.pt").write_text("k")
    assert hostfiles.remove_regular_file(tmp_path / "uri", "a/b/x.pt")
    assert sorted(p.name for p in (tmp_path / "uri").rglob("*")) == ["a", "keep.pt"]
    assert hostfiles.remove_regular_file(tmp_path / "uri", "a/keep.pt")
    assert list((tmp_path / "uri").iterdir()) == []  # the root itself stays
    assert not hostfiles.remove_regular_file(tmp_path / "uri", "a/keep.pt")  # nothing there now


def test_remove_regular_file_deletes_nothing_but_a_regular_file_under_the_root(tmp_path: Path, outside: Path) -> None:
    uri = tmp_path / "uri"
    uri.mkdir()
    plant_everything(uri, outside)
    (uri / "folder").mkdir()
    (uri / "folder" / "inside.pt").write_text("stays")
    for name in ("link-to-file", "link-to-folder", "dangling", "loop", "null", "fifo", "folder",
                 "link-to-folder/secret.txt", "missing/x.pt", "folder/inside.pt/x"):
        assert not hostfiles.remove_regular_file(uri, name), name
    assert sorted(p.name for p in uri.iterdir()) == ["dangling", "fifo", "folder", "link-to-file",
                                                      "link-to-folder", "loop", "null", "zero"]
    assert (outside / "secret.txt").read_text() == MARKER


@pytest.mark.parametrize("relative", ["../outside/secret.txt", "/etc/hostname", "a/../../outside/secret.txt", ""])
def test_remove_regular_file_refuses_paths_leaving_the_root(tmp_path: Path, outside: Path, relative: str) -> None:
    (tmp_path / "uri" / "a").mkdir(parents=True)
    with pytest.raises(ValueError):
        hostfiles.remove_regular_file(tmp_path / "uri", relative)
    assert (outside / "secret.txt").read_text() == MARKER


# --------------------------------------------------------------------------------------------------
# The users: merge_tree (model.tar.gz), sync_checkpoints, `hetero-emu logs`' host groups


def test_merge_tree_packs_no_host_file(tmp_path: Path, host: Path, outside: Path) -> None:
    (host / "model" / "weights.bin").write_bytes(b"w")
    plant_everything(host / "model", outside)
    other = tmp_path / "hosts" / "algo-2"
    other.mkdir()
    (other / "model").symlink_to(outside)  # the whole folder replaced by a link
    archive = merge_tree(fake_plan(host, other), "model", tmp_path / "out" / "model.tar.gz")
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == ["weights.bin"]
        assert members["weights.bin"].isreg()
        extracted = tar.extractfile("weights.bin")
        assert extracted is not None and extracted.read() == b"w"


def test_sync_checkpoints_copies_no_host_file(tmp_path: Path, host: Path, outside: Path) -> None:
    other = tmp_path / "hosts" / "algo-2"
    other.mkdir()
    users = tmp_path / "ckpt"
    sync = LiveSync(fake_plan(host, other, checkpoints=users))  # before the hosts write
    (host / "checkpoints" / "step-1.pt").write_text("1")
    plant_everything(host / "checkpoints", outside)
    (other / "checkpoints").symlink_to(outside)
    sync.final()
    assert sorted(p.name for p in users.iterdir()) == ["step-1.pt"]
    assert no_marker_under(users)
    assert (outside / "secret.txt").read_text() == MARKER


def write_config(host_dir: Path, content: str | dict[str, Any]) -> Path:
    path = host_dir / "input" / "config" / "resourceconfig.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def test_host_groups_tolerates_whatever_a_host_left(tmp_path: Path, outside: Path) -> None:
    def host_dir(name: str) -> Path:
        folder = tmp_path / "hosts" / name
        folder.mkdir(parents=True)
        return folder

    write_config(host_dir("algo-1"), {"current_host": "algo-1", "current_group_name": "ga"})
    host_dir("algo-2")  # missing
    write_config(host_dir("algo-3"), "{not json")
    write_config(host_dir("algo-4"), "[1, 2]")
    write_config(host_dir("algo-5"), "[" * 100_000)  # too deep for the parser
    write_config(host_dir("algo-6"), {"current_host": "algo-1", "current_group_name": "claims another host"})
    write_config(host_dir("algo-7"), {"current_host": "algo-7", "current_group_name": "\x1b[2Jescape"})
    write_config(host_dir("algo-8"), {"current_host": "algo-8", "current_group_name": 42})
    (outside / "rc.json").write_text(json.dumps({"current_host": "algo-9", "current_group_name": MARKER}))
    linked = write_config(host_dir("algo-9"), "")
    linked.unlink()
    linked.symlink_to(outside / "rc.json")
    (outside / "config").mkdir()
    (outside / "config" / "resourceconfig.json").write_text(json.dumps({"current_host": "algo-10",
                                                                         "current_group_name": MARKER}))
    (host_dir("algo-10") / "input").mkdir()
    (tmp_path / "hosts" / "algo-10" / "input" / "config").symlink_to(outside / "config")  # a linked folder
    fifo = write_config(host_dir("algo-11"), "")
    fifo.unlink()
    os.mkfifo(fifo)

    assert hostfiles.host_groups(tmp_path) == {"algo-1": "ga"}
