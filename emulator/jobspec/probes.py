"""What the spec's rules ask the filesystem, as one injected object: `Validator` calls only these
probes, so the rules themselves do no I/O and a test can hand them a fake filesystem.

`Probes` is the contract; `DiskProbes` (the instance `DISK`) answers from the real filesystem with the
functions of `paths`, `s3` and `requirements`. The input adapters' loaders (`yaml_spec.validate`,
`load_spec_file`, `request.validate_request`, `load_request`) take it as their `probes` argument
and use `DISK` unless given another.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from emulator.jobspec import paths, requirements, s3
from emulator.jobspec.paths import Listing
from emulator.jobspec.requirements import Requirements


class Probes(Protocol):
    """The filesystem questions validation asks, each answered as the `paths`/`s3`/`requirements`
    function of the same name answers it (the same values, the same exceptions)."""

    def kind_of(self, path: Path) -> str:
        """What `path` is, links followed: "file", "dir", "missing", a special kind or "unreadable (...)"."""
        ...

    def resolve(self, base: Path, text: str) -> Path:
        """`text` against `base` as an absolute path without symlinks; raises `paths.BadPath`."""
        ...

    def folder_problem(self, resolved: Path) -> tuple[str, str | None] | None:
        """Why a folder the job writes cannot be made: (message, hint), or None."""
        ...

    def scan(self, source: Path) -> Listing:
        """A folder (or file) listed as an upload that follows symlinks reads it."""
        ...

    def is_archive(self, path: Path) -> bool:
        """Whether a source_dir file is a sourcedir.tar.gz."""
        ...

    def archive_problem(self, archive: Path, entry_point: str | None) -> str | None:
        """Why the toolkit could not use `archive` as sourcedir.tar.gz with `entry_point`, or None."""
        ...

    def requirements(self, code: Path | None, *, archive: bool, entry_point: str | None,
                     toolkit: bool) -> Requirements | None:
        """The requirements.txt the toolkit will pip-install from the code; raises OSError or TarError."""
        ...


class DiskProbes:
    """The probes answered by the machine's own filesystem."""

    def kind_of(self, path: Path) -> str:
        return paths.kind_of(path)

    def resolve(self, base: Path, text: str) -> Path:
        return paths.resolve_path(base, text)

    def folder_problem(self, resolved: Path) -> tuple[str, str | None] | None:
        return paths.folder_problem(resolved)

    def scan(self, source: Path) -> Listing:
        return paths.scan(source)

    def is_archive(self, path: Path) -> bool:
        return s3.is_archive(path)

    def archive_problem(self, archive: Path, entry_point: str | None) -> str | None:
        return s3.archive_problem(archive, entry_point)

    def requirements(self, code: Path | None, *, archive: bool, entry_point: str | None,
                     toolkit: bool) -> Requirements | None:
        return requirements.find(code, archive=archive, entry_point=entry_point, toolkit=toolkit)


DISK: Probes = DiskProbes()
