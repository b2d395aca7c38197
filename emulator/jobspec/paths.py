"""Filesystem probing for the spec: what a path is (file, folder, socket, device, missing), whether a
folder the job writes can be made, how an upload that follows symlinks lists a folder (channels,
source_dir, checkpoints), and resolving a path or URI as written to an absolute path. The rules ask
these through `probes.Probes`; `probes.DISK` answers with the functions here."""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from emulator.jobspec.wording import reason

# What a path is on disk, following symlinks: "file", "dir", "missing", one of SPECIAL_KINDS, or
# "unreadable (<reason>)".
SPECIAL_KINDS = ("socket", "FIFO (named pipe)", "character device", "block device", "special file")


def kind_of(path: str | Path) -> str:
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        if err.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return "missing"
        return f"unreadable ({reason(err)})"
    except ValueError as err:  # NUL byte, unencodable character
        return f"unreadable ({reason(err)})"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISFIFO(mode):
        return "FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    return "special file"


def folder_problem(resolved: Path) -> tuple[str, str | None] | None:
    """Why a folder the emulator will write (create if missing, then create entries in) cannot be:
    (message, hint), or None when it can. Used for output_path and checkpoint_s3_uri, and for
    `render -o`."""
    probe = resolved
    kind = kind_of(probe)
    while kind == "missing" and probe.parent != probe:
        probe = probe.parent
        kind = kind_of(probe)
    if kind == "dir":
        # The run creates <job_name>/ (and any missing folders) in `probe`: that needs write and
        # search permission there and a writable filesystem. os.access asks the kernel with the
        # real uid, so it answers EROFS on a read-only mount even for root, and (as root's own mkdir
        # does) ignores permission bits for root.
        if os.access(probe, os.W_OK | os.X_OK):
            return None
        why = "on a read-only filesystem" if _read_only_fs(probe) else "not writable by this user"
        where = f"{resolved} cannot be created: {probe} is" if probe != resolved else f"{resolved} is"
        return f"{where} {why}", "choose a folder you can write to"
    if kind == "missing":
        return None
    if kind.startswith("unreadable"):
        return f"{resolved} cannot be created: {probe} is {kind}", "check its permissions"
    if probe == resolved:
        return f"{resolved} is a {kind}, not a folder", None
    return (f"{resolved} cannot be created: {probe} is a {kind}, not a folder",
            "choose a folder that exists or can be made")


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


@dataclass(frozen=True)
class Listing:
    """A folder as an upload that follows symlinks reads it: `aws s3 sync` / `cp --recursive`
    (follow-symlinks is their default) for data, the SDK's sourcedir.tar.gz for code
    (sagemaker/utils.py create_tar_file: `tarfile.open(..., dereference=True)`)."""

    files: tuple[str, ...] = ()  # the S3 keys: relative paths, links followed (files and folders), sorted
    special: tuple[tuple[str, str], ...] = ()  # (path, kind): sockets, FIFOs, devices, also behind a link
    broken: tuple[tuple[str, str], ...] = ()  # (path, why): links such an upload cannot read
    links_out: bool = False  # a link that would not resolve the same inside a bind mount of the folder


def scan(source: Path) -> Listing:
    """List `source` as an upload that follows links would: a linked file is a key under the link's
    own path, a linked folder's files are keys under the link's path.

    A link that dangles (or is a loop of links) cannot be read: tarfile with dereference=True raises
    FileNotFoundError on it, and `aws s3 sync` skips it with "File does not exist." (awscli
    customizations/s3/filegenerator.py triggers_warning) and exits 2. A link to a folder above itself
    would make an endless listing (tarfile recurses until it fails). Both are reported in `broken`.
    Unreadable folders are skipped, as before (staging reports what it cannot read).
    """
    kind = kind_of(source)
    if kind == "file":
        return Listing(files=(source.name,))
    if kind != "dir":
        return Listing(special=((str(source), kind),) if kind in SPECIAL_KINDS else ())
    root = os.path.realpath(source)
    if _system_folder(root):
        return Listing(broken=((str(source), SYSTEM_FOLDER),))
    files: list[str] = []
    special: list[tuple[str, str]] = []
    broken: list[tuple[str, str]] = []
    links_out = False
    # (folder as listed, its key prefix, the identities of it and every folder above it)
    stack = [(str(source), "", frozenset({_identity(source)}))]
    while stack:
        folder, prefix, above = stack.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError:
            continue
        for entry in entries:
            key, full = prefix + entry.name, entry.path
            if entry.is_symlink():
                links_out = links_out or _leaves(full, root)
                kind = kind_of(full)
            elif entry.is_file(follow_symlinks=False):  # no stat: the listing already says so
                kind = "file"
            elif entry.is_dir(follow_symlinks=False):
                kind = "dir"
            else:
                kind = kind_of(full)
            if kind == "file":
                files.append(key)
            elif kind == "dir":
                try:
                    identity = _identity(full)
                except OSError:
                    continue  # gone since it was listed (a folder that changes as it is read)
                if entry.is_symlink() and _system_folder(os.path.realpath(full)):
                    broken.append((full, SYSTEM_FOLDER))
                    continue
                if identity in above:
                    broken.append((full, f"a symlink to a folder above it ({_link_text(full)}): a loop"))
                else:
                    stack.append((full, key + "/", above | {identity}))
            elif kind in SPECIAL_KINDS:
                special.append((full, kind))
            elif kind == "missing" and entry.is_symlink():
                broken.append((full, f"a symlink that leads nowhere ({_link_text(full)}): dangling or a loop"))
    return Listing(tuple(sorted(files)), tuple(special), tuple(broken), links_out)


def given_name(text: str, resolved: Path) -> str:
    """The last component of a path or URI as written (the S3 key's last part), before any link in
    it is followed; the resolved path's name when the text ends in `..` or names no component."""
    name = Path(parse_uri(text)[1] if "://" in text else text).name
    return name if name not in ("", os.pardir) else resolved.name


# Not data: /proc, /sys and /dev are the kernel's, and "/" is everything. A walk of them never ends in
# practice: /proc/self/root leads back to "/", and every task under /proc/self/task to it again.
SYSTEM_ROOTS = ("/proc", "/sys", "/dev")
SYSTEM_FOLDER = "the whole file system or a system folder (/proc, /sys, /dev), not data"


def _system_folder(real: str) -> bool:
    return real == "/" or any(real == top or real.startswith(top + "/") for top in SYSTEM_ROOTS)


def _link_text(link: str) -> str:
    """What a symlink says, or "?" when it is gone since it was listed."""
    try:
        return os.readlink(link)
    except OSError:
        return "?"


def _identity(path: str | Path) -> tuple[int, int]:
    status = os.stat(path)
    return status.st_dev, status.st_ino


def _leaves(link: str, root: str) -> bool:
    """Whether a symlink under the folder `root` resolves differently inside a bind mount of `root`:
    there an absolute text, or a relative one that climbs above `root`, resolves in the container's
    own filesystem (dangling, or another file)."""
    try:
        text = os.readlink(link)
    except OSError:
        return True
    if os.path.isabs(text):
        return True
    where = os.path.relpath(os.path.realpath(os.path.dirname(link)), root)
    climbed = os.path.normpath(os.path.join(where, text))
    target = os.path.realpath(link)
    return climbed == os.pardir or climbed.startswith(os.pardir + os.sep) or os.path.commonpath((root, target)) != root


class BadPath(Exception):
    """A path or URI that cannot be resolved at all (NUL byte, unknown ~user, symlink loop, bad URI)."""


def resolve_path(base: Path, text: str) -> Path:
    """`text` (absolute, ~user or relative to `base`) as an absolute path without symlinks."""
    try:
        return (base / Path(text).expanduser()).resolve()
    except (OSError, ValueError, RuntimeError) as err:  # RuntimeError: unknown ~user, symlink loop
        raise BadPath(f"not a usable path: {reason(err)}") from None


def parse_uri(text: str) -> tuple[str, str]:
    """(netloc, unquoted path) of a URI."""
    try:
        parsed = urlparse(text)
    except ValueError as err:
        raise BadPath(f"not a valid URI: {reason(err)}") from None
    return parsed.netloc, unquote(parsed.path)
