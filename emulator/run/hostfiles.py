"""Reading what a host left: its /opt/ml tree belongs to the container, so nothing in it is followed out.

`<job_dir>/hosts/algo-N` is bind-mounted at /opt/ml, so the training script controls every entry
under it, including symlinks, FIFOs and device nodes (containers run as root). A symlink resolves in
the container's filesystem while the script runs, but in the *host's* when the driver reads it after
the job: `/opt/ml/model -> /etc` would pack the host's /etc into model.tar.gz, `/opt/ml/output/failure
-> /home/me/.ssh/id_rsa` would print the key as FailureReason, `checkpoints/x -> /dev/zero` would fill
the disk. So every read the driver makes under a host folder goes through this module, which:

- refuses a path whose any component under the host folder is a symlink (`host_path`);
- keeps only regular files, walking without following links (`regular_files`, `copy_regular_tree`);
- opens with O_NOFOLLOW | O_NONBLOCK and checks the open file is regular (`open_regular`): a link
  planted in the last component fails to open instead of being followed, and a FIFO neither blocks
  the open (O_NONBLOCK) nor gets read (it is not regular);
- reads free text with a bound (`read_text_bounded`): a file of any size costs at most `limit` bytes.

What the driver writes or deletes for a host's files (the user's checkpoint folder) goes through no
link either: copies are renamed into place (`copy_regular_file_into`), deletes walk the folders by
descriptor with O_NOFOLLOW (`remove_regular_file`).

The hosts have exited when the driver reads (artifacts, checkpoints and FailureReason are collected
after the last container stopped), so what is checked is what is read.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from emulator.jobspec import GROUP_NAME_PATTERN

# Added to every open: never follow a link in the last component (ELOOP instead), never block on a
# FIFO with no writer, never leak the descriptor into a child process.
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def host_path(host_dir: Path, relative: str) -> Path | None:
    """`host_dir / relative`, or None when any component under `host_dir` is a symlink.

    `host_dir` itself is the driver's (the mount point, which the container cannot replace); every
    component below it is checked with lstat. A missing component ends the check: nothing below it
    exists, and the caller finds nothing there. A component that cannot be checked (permission) is
    treated as a link: what cannot be vouched for is not read.
    """
    parts = PurePosixPath(relative).parts
    if PurePosixPath(relative).is_absolute() or ".." in parts:
        raise ValueError(f"not a path inside a host folder: {relative!r}")
    path = host_dir
    for part in parts:
        path = path / part
        try:
            if stat.S_ISLNK(path.lstat().st_mode):
                return None
        except (FileNotFoundError, NotADirectoryError):
            return host_dir / relative
        except OSError:
            return None
    return path


def _is_real_dir(path: Path) -> bool:
    """A folder, not a link to one (Path.is_dir follows links)."""
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def regular_files(root: Path) -> list[tuple[str, Path]]:
    """Every regular file under `root` as (path relative to root, path), sorted; [] unless root is a real folder.

    Symlinks (to files or folders, dangling or looping), FIFOs, sockets and devices are left out:
    a link would be read on the host, a FIFO blocks its reader, /dev/zero never ends. Folders that
    cannot be listed are skipped (os.walk's default), as the old rglob-based walk did.
    """
    return [(name, Path(path)) for name, path, _ in scan_regular(root)]


def scan_regular(root: Path) -> list[tuple[str, str, int]]:
    """`regular_files` as (relative name, path, size at listing time), sorted, with strings for speed.

    One scandir per folder and no stat per file beyond the one scandir caches: the type comes from
    the directory entry (d_type, an lstat only where the filesystem does not report it), so a link
    is never entered or taken for a file. Packing 100,000 small files spends most of its time here
    and in the per-file open, so no Path objects are made. The size is for progress reports only:
    what is packed is decided by the fstat of the open file (`open_regular_fd`).
    """
    if not _is_real_dir(root):
        return []  # scandir would follow a symlinked root
    found: list[tuple[str, str, int]] = []
    pending = [(str(root), "")]
    while pending:
        top, prefix = pending.pop()
        try:
            with os.scandir(top) as entries:
                listed = list(entries)
        except OSError:
            continue  # a folder that cannot be listed is skipped, as os.walk does
        for entry in listed:
            try:
                if entry.is_dir(follow_symlinks=False):
                    pending.append((entry.path, prefix + entry.name + "/"))
                elif entry.is_file(follow_symlinks=False):
                    found.append((prefix + entry.name, entry.path, entry.stat(follow_symlinks=False).st_size))
            except OSError:
                continue
    found.sort()
    return found


def open_regular_fd(path: str) -> tuple[int, os.stat_result] | None:
    """`open_regular` without the file object: a raw descriptor and its fstat, or None.

    The caller closes the descriptor. For packing many small files, where a buffered file object
    per file costs more than the read itself.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _OPEN_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            return fd, st
    except OSError:
        pass
    os.close(fd)
    return None


def open_regular(path: Path) -> BinaryIO | None:
    """`path` opened for reading if it is a regular file right now, else None (also on any OSError).

    The check is on the open descriptor (fstat), not on the name, so the file read is the file checked.
    """
    try:
        file = open(path, "rb", opener=lambda name, flags: os.open(name, flags | _OPEN_FLAGS))  # noqa: SIM115
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            return file
    except OSError:
        pass
    file.close()
    return None


def read_text_bounded(path: Path, limit: int) -> str:
    """At most `limit` bytes of the regular file `path`, decoded as UTF-8 (bad bytes replaced); "" if it
    is not a regular file or cannot be read.

    For free text a host leaves for the driver to show (/opt/ml/output/failure): a file of any size
    costs at most `limit` bytes of memory, and a link, FIFO or device yields "" instead of the host's
    file, a hang or an endless read. A cut may split a multi-byte character: it decodes as U+FFFD.
    """
    file = open_regular(path)
    if file is None:
        return ""
    chunks: list[bytes] = []
    size = 0
    try:
        with file:
            while size < limit:
                chunk = file.read(limit - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
    except OSError:
        return ""
    return b"".join(chunks).decode("utf-8", errors="replace")


def copy_regular_tree(source: Path, target: Path) -> list[str]:
    """Copy the regular files and real folders under `source` into the existing folder `target`.

    For checkpoints going back to the user's checkpoint folder. `shutil.copytree` follows links, so a
    host's `checkpoints/x -> /etc/shadow` would copy the host's file to the user (and into the next
    job); here links, FIFOs, sockets and devices in `source` are skipped and no link is entered.

    Nothing is written through a link either: each file is written to a new temporary file next to
    its destination and renamed over it, so an existing link (or FIFO) there is replaced, never
    followed, and the driver writes nowhere outside `target`. A folder in `target` that is a link
    is replaced by a real folder (the link's own target is untouched). Where one side has a file and
    the other a folder of the same name, the user's entry is kept and the host's skipped: the
    skipped paths (relative to `source`) are returned, for a warning.

    Contents and modification times are kept; of the mode only the permission bits (a set-user-ID
    file a container wrote as root does not become one in the user's folder). A source file that
    cannot be read is skipped (as merge_tree skips it); errors writing `target` are raised.
    """
    skipped: list[str] = []
    if not _is_real_dir(source):
        return skipped
    for top, dirs, files in os.walk(source, followlinks=False):
        rel = Path(top).relative_to(source)
        dest_dir = target / rel
        if rel != Path(".") and not _make_real_dir(dest_dir):
            dirs[:] = []  # the user has a file there: keep it, skip the host's folder
            skipped.append(str(rel))
            continue
        dirs[:] = sorted(d for d in dirs if _is_real_dir(Path(top) / d))
        for name in sorted(files):
            if not _copy_regular_file(Path(top) / name, dest_dir, name):
                skipped.append(str(rel / name))
    return skipped


def copy_regular_file_into(source: Path, target: Path, relative: str) -> bool:
    """Copy one regular file `source` to `target / relative` as copy_regular_tree copies each file
    (real folders made on the way, written through no link, renamed into place); False when a file of
    the user's is where a folder of the path must be, or a folder where the file must be (kept)."""
    parts = PurePosixPath(relative).parts
    dest_dir = target
    for part in parts[:-1]:
        dest_dir = dest_dir / part
        if not _make_real_dir(dest_dir):
            return False
    return _copy_regular_file(source, dest_dir, parts[-1])


def remove_regular_file(root: Path, relative: str) -> bool:
    """Delete the regular file `root / relative`, then the folders under `root` that this leaves empty
    (S3, which the folder stands for, has no empty folders); True when a file was deleted.

    For a checkpoint a host deleted, at the user's checkpoint folder. Nothing but a regular file is
    deleted and nothing outside `root`: each folder on the way is opened relative to the one above it
    with O_NOFOLLOW (a link there, even one swapped in after a check, fails to open), and the file is
    checked and unlinked by name in the folder held open. A missing file, a folder or a link in its
    place, or a link on the way deletes nothing (False). A folder is removed only while empty (rmdir),
    `root` never.
    """
    parts = PurePosixPath(relative).parts
    if not parts or PurePosixPath(relative).is_absolute() or ".." in parts:
        raise ValueError(f"not a path inside a folder: {relative!r}")
    folders: list[int] = []  # root, then each folder on the way, held open
    try:
        folders.append(os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        for part in parts[:-1]:
            folders.append(os.open(part, os.O_RDONLY | os.O_DIRECTORY | _OPEN_FLAGS, dir_fd=folders[-1]))
        if not stat.S_ISREG(os.stat(parts[-1], dir_fd=folders[-1], follow_symlinks=False).st_mode):
            return False
        os.unlink(parts[-1], dir_fd=folders[-1])
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return False  # not there, or a link where a folder was: nothing of the user's to delete
        raise
    else:
        # Deepest first; a folder still holding something (or no longer a folder) ends the climb.
        for depth in range(len(parts) - 2, -1, -1):
            try:
                os.rmdir(parts[depth], dir_fd=folders[depth])
            except OSError:
                break
        return True
    finally:
        for fd in folders:
            os.close(fd)


def _make_real_dir(path: Path) -> bool:
    """Make `path` a real folder (replacing a link or other non-file there); False if a file is there."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        path.mkdir()
        return True
    if stat.S_ISDIR(mode):
        return True
    if stat.S_ISREG(mode):
        return False
    path.unlink()
    path.mkdir()
    return True


def _copy_regular_file(source: Path, dest_dir: Path, name: str) -> bool:
    """False when a folder of that name is in the way (kept); True otherwise, copied or unreadable."""
    src = open_regular(source)
    if src is None:
        return True
    with src:
        st = os.fstat(src.fileno())
        # A fixed prefix: the host's name may already be as long as a name can be.
        fd, temp = tempfile.mkstemp(dir=dest_dir, prefix=".hetero-emu-")
        try:
            with os.fdopen(fd, "wb") as dst:
                shutil.copyfileobj(src, dst)
                os.fchmod(dst.fileno(), stat.S_IMODE(st.st_mode) & 0o777)
                dst.flush()
                os.utime(dst.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))
            try:
                os.replace(temp, dest_dir / name)
            except IsADirectoryError:
                os.unlink(temp)  # the user has a folder there: keep it
                return False
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise
    return True


def host_groups(folder: Path) -> dict[str, str]:
    """Each host's group, from its resourceconfig.json; a host whose file says nothing usable is left
    out (its logs show group "?").

    The file lies under the host's /opt/ml, which the script owns: it may have removed, rewritten or
    linked it, so it is read without following links and with a bound, and trusted only for a group
    name of the spec's shape, under the folder's own host name.
    """
    out = {}
    for host_dir in folder.glob("hosts/algo-*"):
        config = host_path(host_dir, "input/config/resourceconfig.json")
        text = read_text_bounded(config, 1 << 20) if config is not None else ""
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):  # ValueError also for "" (missing, unreadable or a link)
            continue
        if not isinstance(data, dict) or data.get("current_host") != host_dir.name:
            continue
        group = data.get("current_group_name")
        if isinstance(group, str) and GROUP_NAME_PATTERN.fullmatch(group):
            out[host_dir.name] = group
    return out
