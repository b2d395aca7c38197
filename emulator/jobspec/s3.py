"""S3 on a local root: `s3://bucket/key` is the path `<root>/bucket/key`.

Which root: `--s3-root` (the CLI; `emulator.api.load(s3_root=...)`), else the environment variable
`HETERO_EMU_S3_ROOT`, else the spec's `local_s3_root`, else the default `$XDG_DATA_HOME/hetero-emu/s3`
(`~/.local/share/hetero-emu/s3`). A root the user names must exist; the default is made when a job
first writes under it.

A URI is checked as the service checks it (a bucket name of 3-63 lowercase letters, digits, '.' and
'-') and must stay under the root once mapped: no '.' or '..' key segment, no link out of the root.

`sourcedir.tar.gz` (what the SDK uploads for `source_dir`, named by `sagemaker_submit_directory`) is
read here as the training toolkit reads it (sagemaker_training/files.py `download_and_extract`:
`tarfile.open(mode="r:gz")`, a member whose path leaves the folder refused) and unpacked into each
host's /opt/ml/code with tarfile's "data" filter, so nothing in it can reach outside that folder.
"""

from __future__ import annotations

import os
import re
import tarfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from emulator.jobspec.paths import BadPath, resolve_path
from emulator.jobspec.wording import preview, reason

ENV_S3_ROOT = "HETERO_EMU_S3_ROOT"
# The service's bucket naming rules (the CreateTrainingJob S3Uri pattern asks for less; a bucket that
# breaks these cannot exist).
BUCKET_PATTERN = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
URI_HINT = "s3://bucket/key: the bucket 3-63 lowercase letters, digits, '.' and '-', the key without '.' or '..' parts"

# The root given to this load by a front end (--s3-root), above the environment and the spec.
_given_root: ContextVar[tuple[Path, str] | None] = ContextVar("given_s3_root", default=None)


@contextmanager
def given_root(root: Path | str | None, origin: str = "--s3-root") -> Iterator[None]:
    """Within the block, specs are loaded with `root` as their S3 root (the --s3-root option, or
    what `origin` names: problems with the root name it)."""
    token = _given_root.set((Path(root).expanduser().absolute(), origin) if root is not None else None)
    try:
        yield
    finally:
        _given_root.reset(token)


def default_root() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "hetero-emu" / "s3"


@dataclass(frozen=True)
class Root:
    path: Path
    origin: str  # "--s3-root", "HETERO_EMU_S3_ROOT", "local_s3_root" or "the default root"
    named: bool  # named by the user (must exist), not the default (made when written)

    def describe(self) -> str:
        return f"S3 root {self.path} ({self.origin})"


def choose_root(spec_root: Path | None) -> Root:
    """The S3 root in order: --s3-root, $HETERO_EMU_S3_ROOT, the spec's local_s3_root, the default."""
    given = _given_root.get()
    if given is not None:
        return Root(given[0], given[1], True)
    env = os.environ.get(ENV_S3_ROOT)
    if env:
        return Root(Path(env).expanduser().absolute(), ENV_S3_ROOT, True)
    if spec_root is not None:
        return Root(spec_root, "local_s3_root", True)
    return Root(default_root(), "the default root", False)


class BadS3Uri(Exception):
    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def split_uri(text: str) -> tuple[str, str]:
    """(bucket, key) of `s3://bucket/key`, or BadS3Uri saying what is wrong with it."""
    if not text.startswith("s3://"):
        raise BadS3Uri(f"{preview(text)} is not a well-formed S3 URI", URI_HINT)
    bucket, _, key = text[len("s3://"):].partition("/")
    if not BUCKET_PATTERN.fullmatch(bucket) or ".." in bucket:
        raise BadS3Uri(f"{preview(text)} is not a well-formed S3 URI: {preview(bucket)} is not a bucket name",
                       URI_HINT)
    if "\0" in key or any(part in (".", "..") for part in key.split("/")):
        raise BadS3Uri(f"{preview(text)} leaves its bucket: a key with '.' or '..' parts has no place under the "
                       "S3 root", URI_HINT)
    return bucket, key


def local_path(root: Root, text: str, resolve: Callable[[Path, str], Path] = resolve_path) -> Path:
    """Where `text` (s3://bucket/key) lives under the root: `<root>/bucket/key`, links resolved (by
    `resolve`, `paths.resolve_path` unless the spec's probes give another), never outside the root."""
    bucket, key = split_uri(text)
    try:
        top = resolve(root.path, ".")
        resolved = resolve(top, os.path.join(bucket, key.strip("/")))
    except BadPath as err:
        raise BadS3Uri(f"{preview(text)} is {err}", URI_HINT) from None
    if not resolved.is_relative_to(top):
        raise BadS3Uri(f"{preview(text)} leads outside the {root.describe()} through a symlink",
                       "keep the buckets' folders and files inside the root")
    return resolved


# --------------------------------------------------------------------------------------------------
# sourcedir.tar.gz


def is_archive(path: Path) -> bool:
    return path.name.endswith((".tar.gz", ".tgz")) or (path.is_file() and tarfile.is_tarfile(path))


def archive_problem(path: Path, entry_point: str | None) -> str | None:
    """Why the toolkit could not use `path` as sourcedir.tar.gz with `entry_point` in it, or None."""
    try:
        with tarfile.open(path, mode="r:gz") as tar:
            members = tar.getmembers()
            for member in members:
                try:
                    tarfile.data_filter(member, "/opt/ml/code")
                except tarfile.FilterError as err:
                    return f"its member {preview(member.name)} would not stay a plain file in /opt/ml/code ({err})"
    except (OSError, tarfile.TarError, EOFError) as err:
        return f"not a gzip-compressed tar file, as the training toolkit reads sourcedir.tar.gz ({reason(err)})"
    if entry_point is not None:
        names = {os.path.normpath(m.name) for m in members if m.isfile() or m.issym() or m.islnk()}
        if os.path.normpath(entry_point) not in names:
            return f"it has no {preview(entry_point)} (the entry point)"
    return None


def unpack(archive: Path, target: Path) -> None:
    """Unpack sourcedir.tar.gz into a host's code folder, as the toolkit does, with tarfile's "data"
    filter (no member outside `target`, no device, no absolute or escaping link)."""
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, mode="r:gz") as tar:
        tar.extractall(target, filter="data")
