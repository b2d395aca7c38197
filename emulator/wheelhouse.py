"""A job's requirements.txt, offline: its wheels built on this machine once, then given to every host
as a read-only folder the training toolkit's own install step reads (README: requirements.txt).

On the service the toolkit pip-installs `requirements.txt` from the code folder before it runs the
script: `entry_point.install` calls `modules.install_requirements` for a Python script
(`<python> -m pip install -r requirements.txt`, cwd /opt/ml/code) and `modules.install` for a
package with setup.py (`pip install . -r requirements.txt`); a shell or other command entry point
installs nothing (sagemaker-training-toolkit: src/sagemaker_training/entry_point.py `install`,
modules.py, _entry_point_type.py). The hosts here reach no package index, so the emulator builds the
wheels with the host's pip beforehand, keyed by the file's hash and the host interpreter, and sets
`PIP_FIND_LINKS` + `PIP_NO_INDEX` in the hosts' environment, which that unchanged pip command reads.

`find` (reading the file) runs while the spec is checked; the plan adds the mount and variables
(`mount`, `environment`) without I/O; `ensure` (the build) runs before any container starts.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from emulator.defaults import DEFAULT_IMAGE, default_cache_dir
from emulator.errors import WheelhouseError

REQUIREMENTS = "requirements.txt"
# Outside /opt/ml: not a SageMaker path, so no script or toolkit step can mistake it for one.
CONTAINER_PATH = "/opt/hetero-emu/wheelhouse"
# The default image's interpreter (images/training/Dockerfile: Debian bookworm's python3).
IMAGE_PYTHON = ("cpython", (3, 11))
TAIL_LINES = 20
# The host's pip, run by the interpreter running the emulator (tests put a fake one here).
PIP: tuple[str, ...] = (sys.executable, "-m", "pip")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Requirements:
    """A requirements.txt the toolkit will install: where it is and the sha256 of its bytes."""

    code: str  # the source_dir folder, or the sourcedir.tar.gz holding the file
    archive: bool
    digest: str
    # source_dir has setup.py: the toolkit runs `pip install . -r requirements.txt`, whose isolated
    # build of "." needs setuptools from the wheelhouse too (pip reads PIP_FIND_LINKS there as well).
    package: bool = False


def interpreter_tag() -> str:
    """The host interpreter wheels are built for, as part of the cache key: `cpython-311-linux`."""
    return f"{sys.implementation.cache_tag}-{sys.platform}"


def cache_key(digest: str, tag: str, package: bool = False) -> str:
    """One wheelhouse per (requirements.txt bytes, interpreter): an edit or another Python builds anew.
    A package's (setup.py) holds setuptools as well."""
    return f"{tag}-{digest[:16]}{'-setuptools' if package else ''}"


def cache_root() -> Path:
    return default_cache_dir() / "wheelhouses"


def location(requirements: Requirements, root: Path, tag: str) -> Path:
    return root / cache_key(requirements.digest, tag, requirements.package)


def environment(requirements: Requirements | None) -> dict[str, str]:
    """The variables pip reads (https://pip.pypa.io/en/stable/topics/configuration/#environment-variables):
    the toolkit's `pip install -r requirements.txt` then takes every package from the mount."""
    if requirements is None:
        return {}
    return {"PIP_FIND_LINKS": CONTAINER_PATH, "PIP_NO_INDEX": "1"}


def find(code: Path | None, *, archive: bool, entry_point: str | None, toolkit: bool) -> Requirements | None:
    """The requirements.txt at the top of the code the toolkit will pip-install, or None: none there,
    no toolkit (`container_entry_point` other than `train`), or an entry point the toolkit runs as a
    command (`.sh`, or no `.py` without setup.py), for which it installs nothing. Raises OSError."""
    if code is None or entry_point is None or not toolkit or entry_point.endswith(".sh"):
        return None
    if archive:
        names, content = _archive_member(code)
    else:
        if not code.is_dir():
            return None
        names = set(os.listdir(code))
        content = (code / REQUIREMENTS).read_bytes() if (code / REQUIREMENTS).is_file() else None
    if content is None or not (entry_point.endswith(".py") or "setup.py" in names):
        return None
    return Requirements(str(code), archive, hashlib.sha256(content).hexdigest(), package="setup.py" in names)


def _archive_member(archive: Path) -> tuple[set[str], bytes | None]:
    """The top-level names of a sourcedir.tar.gz and its requirements.txt's bytes (None: none)."""
    with tarfile.open(archive, mode="r:gz") as tar:
        members = {os.path.normpath(m.name): m for m in tar.getmembers()}
        top = {name.split("/")[0] for name in members}
        member = members.get(REQUIREMENTS)
        extracted = tar.extractfile(member) if member is not None and member.isfile() else None
        return top, extracted.read() if extracted is not None else None


def check_interpreter(image: str, implementation: str = sys.implementation.name,
                      version: tuple[int, ...] = tuple(sys.version_info[:2])) -> None:
    """The wheels are built by this interpreter; the default image's is CPython 3.11, so another one
    would build wheels its pip refuses (the image builder refuses it for the same reason)."""
    if image == DEFAULT_IMAGE and (implementation, tuple(version)) != IMAGE_PYTHON:
        raise WheelhouseError(
            f"requirements.txt: the host Python is {implementation} {'.'.join(map(str, version))}, but the "
            f"default image's ({DEFAULT_IMAGE}, Debian bookworm) is CPython 3.11: wheels built here would "
            "not install there",
            hint="run hetero-emu with a CPython 3.11 interpreter",
        )


def ensure(
    requirements: Requirements,
    target: Path,
    image: str,
    progress: Progress,
    pip: Sequence[str] | None = None,
) -> bool:
    """Build the wheelhouse `target` unless it is there already; True when it was built. Raises
    WheelhouseError (naming the file and showing the tail of pip's output) when pip fails."""
    check_interpreter(image)
    shown = f"{requirements.code}{'!' if requirements.archive else '/'}{REQUIREMENTS}"
    if target.is_dir():
        progress(f"requirements.txt: wheels cached in {target}")
        return False
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.part-"))
    except OSError as err:
        raise WheelhouseError(f"cannot create the wheel cache {target.parent}: {err.strerror}",
                              hint="set XDG_CACHE_HOME to a writable folder") from None
    started = time.monotonic()
    try:
        with _code_folder(requirements) as code:
            progress(f"requirements.txt: building its wheels once: pip wheel -r {shown}")
            _pip_wheel([*(pip or PIP), "wheel", "--disable-pip-version-check", "--progress-bar", "off",
                        "--wheel-dir", str(partial), "--requirement", REQUIREMENTS,
                        *(["setuptools"] if requirements.package else [])], code, shown, progress)
        try:
            # The folder appears whole or not at all; a run that built the same key meanwhile wins.
            partial.rename(target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    count = len(list(target.glob("*.whl")))
    progress(f"requirements.txt: {count} wheel(s) in {target} ({time.monotonic() - started:.1f}s)")
    return True


@contextlib.contextmanager
def _code_folder(requirements: Requirements) -> Iterator[Path]:
    """The folder pip runs in, as the toolkit runs in /opt/ml/code (a requirement may name a path
    beside the file): source_dir itself, or a sourcedir.tar.gz unpacked into a temporary folder."""
    if not requirements.archive:
        yield Path(requirements.code)
        return
    with tempfile.TemporaryDirectory(prefix="hetero-emu-code-") as folder:
        with tarfile.open(requirements.code, mode="r:gz") as tar:
            tar.extractall(folder, filter="data")
        yield Path(folder)


def _pip_wheel(cmd: Sequence[str], cwd: Path, shown: str, progress: Progress) -> None:
    """Run pip, each of its lines a progress line; on failure the error names the file and shows the
    last lines (where pip says which requirement it could not find or build)."""
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    env: Mapping[str, str] = {**os.environ, "PIP_NO_INPUT": "1"}
    try:
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as err:
        raise WheelhouseError(f"requirements.txt: cannot run {cmd[0]}: {err.strerror}",
                              hint="the host needs pip for the interpreter that runs hetero-emu") from None
    assert proc.stdout is not None
    try:
        for raw in io.TextIOWrapper(proc.stdout, errors="replace"):
            if line := raw.rstrip():
                tail.append(line)
                progress(f"  {line}")
        code = proc.wait()
    except BaseException:
        proc.kill()  # Ctrl-C: pip must not go on building behind us
        proc.wait()
        raise
    if code != 0:
        failed = next((line for line in reversed(tail) if "ERROR" in line), None)
        raise WheelhouseError(
            f"requirements.txt: pip could not build the wheels of {shown} (exit code {code})"
            + (f": {failed.strip()}" if failed else "") + "; pip's last lines:\n"
            + "\n".join(f"    {line}" for line in tail),
            hint="fix the requirement (name, version) or make the host reach PyPI; no container was started",
        )
