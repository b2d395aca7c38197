"""A code folder's requirements.txt as the training toolkit will pip-install it: found and hashed while
the spec is checked (`find`), never installed here. `emulator.run.wheelhouse` resolves its wheels before the
job; this half only reads files, so the spec's rules can ask for it through their probes
(`emulator.jobspec.probes`) without importing what runs pip.
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

REQUIREMENTS = "requirements.txt"
# `-r other.txt`, `--requirement=other.txt`, `-c constraints.txt`: files a requirements file includes.
_INCLUDE = re.compile(r"^\s*(?:-r|--requirement|-c|--constraint)(?:\s+|=)(\S+)")
# The most of one requirements file read here. The code may come from a remote client (`serve`), and a
# small archive can hold a huge "requirements" file; a real one is a few kilobytes.
MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class Requirements:
    """A requirements.txt the toolkit will install: where it is and the sha256 of its bytes and of
    every file it includes (`-r`, `-c`)."""

    code: str  # the source_dir folder, or the sourcedir.tar.gz holding the file
    archive: bool
    digest: str
    # source_dir has setup.py: the toolkit runs `pip install . -r requirements.txt`, whose isolated
    # build of "." needs setuptools from the wheelhouse too (pip reads PIP_FIND_LINKS there as well).
    package: bool = False
    # The Python pip resolves the file as for (`3.8`), when a framework stand-in runs another one than
    # the request names, and the framework's pins kept while it does (`torch==1.11.0`); set with the
    # image that runs the job (emulator.aws.ecr_images.with_image), resolved by emulator.run.wheelhouse.
    as_python: str | None = None
    keep: tuple[str, ...] = ()
    # Of `keep`, the framework's own (torch, torchvision...): what stays when the rest cannot (a Hugging
    # Face layer's datasets, which a file asking for another datasets moves, as pip does on the service).
    core: tuple[str, ...] = ()


def find(code: Path | None, *, archive: bool, entry_point: str | None, toolkit: bool) -> Requirements | None:
    """The requirements.txt at the top of the code the toolkit will pip-install, or None: none there,
    no toolkit (`container_entry_point` other than `train`), or an entry point the toolkit runs as a
    command (`.sh`, or no `.py` without setup.py), for which it installs nothing. Raises OSError."""
    if code is None or entry_point is None or not toolkit or entry_point.endswith(".sh"):
        return None
    if archive:
        names, files = _archive_files(code)
    else:
        if not code.is_dir():
            return None
        names = set(os.listdir(code))
        folder = code.resolve()

        def files(name: str) -> bytes | None:
            path = (folder / name).resolve()
            if not (path.is_relative_to(folder) and path.is_file()):
                return None
            with path.open("rb") as file:
                return _capped(name, file.read(MAX_BYTES + 1))

    content = files(REQUIREMENTS)
    if content is None or not (entry_point.endswith(".py") or "setup.py" in names):
        return None
    return Requirements(str(code), archive, included_digest(REQUIREMENTS, files), package="setup.py" in names)


def included_digest(name: str, read: Callable[[str], bytes | None]) -> str:
    """sha256 over a requirements file and every file it includes with `-r`/`-c`, recursively (paths
    relative to the including file, as pip reads them); a file that cannot be read counts as absent."""
    digest = hashlib.sha256()
    seen: set[str] = set()
    pending = [name]
    while pending:
        current = pending.pop(0)
        if current in seen:
            continue
        seen.add(current)
        content = read(current)
        digest.update(current.encode() + b"\0" + (content if content is not None else b"(absent)") + b"\0")
        for line in (content or b"").decode("utf-8", errors="replace").splitlines():
            if match := _INCLUDE.match(line):
                pending.append(os.path.normpath(str(PurePosixPath(current).parent / match[1])))
    return digest.hexdigest()


def _archive_files(archive: Path) -> tuple[set[str], Callable[[str], bytes | None]]:
    """The top-level names of a sourcedir.tar.gz and a reader of its regular files by path (each read
    when asked for, none over MAX_BYTES)."""
    with tarfile.open(archive, mode="r:gz") as tar:
        members = {os.path.normpath(m.name): m for m in tar.getmembers()}
    top = {name.split("/")[0] for name in members}

    def read(name: str) -> bytes | None:
        member = members.get(name)
        if member is None or not member.isfile():
            return None
        if member.size > MAX_BYTES:
            return _capped(name, b"x" * (MAX_BYTES + 1))
        with tarfile.open(archive, mode="r:gz") as tar:
            extracted = tar.extractfile(member)
            return extracted.read() if extracted is not None else None
    return top, read


def _capped(name: str, content: bytes) -> bytes:
    if len(content) > MAX_BYTES:
        raise OSError(f"{name} is over {MAX_BYTES >> 20} MiB, more than a requirements file holds")
    return content
