"""A job's requirements.txt, offline: its wheels resolved once against the job's own image, then given
to every host as a read-only folder the training toolkit's own install step reads (docs/images.md, requirements.txt).

On the service the toolkit pip-installs `requirements.txt` from the code folder before it runs the
script: `entry_point.install` calls `modules.install_requirements` for a Python script
(`<python> -m pip install -r requirements.txt`, cwd /opt/ml/code) and `modules.install` for a
package with setup.py (`pip install . -r requirements.txt`); a shell or other command entry point
installs nothing (sagemaker-training-toolkit: src/sagemaker_training/entry_point.py `install`,
modules.py, _entry_point_type.py). The hosts here reach no package index, so beforehand pip decides
what to fetch in a short-lived container of the job's image that does reach it
(`emulator.backend.index_container.build_wheelhouse`): what the image already satisfies (torchvision
on a PyTorch image) is not fetched, and every wheel matches the image's Python and ABI. The hosts get
`PIP_FIND_LINKS` + `PIP_NO_INDEX`, which that unchanged pip command reads.

A wheelhouse is cached per (image name, requirements bytes with every nested `-r`/`-c` file) and
holds the id of the image it was resolved against: a rebuilt image resolves it again.

`find` (reading the files, in `emulator.spec.requirements`) runs while the spec is checked; the plan
adds the mount and variables (`mount`, `environment`) without I/O; `ensure` (the build) runs before
any container starts.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from emulator.defaults import default_cache_dir
from emulator.errors import WheelhouseError

# The reading half lives with the spec's rules, which find the file; its names stay importable here.
from emulator.spec.requirements import REQUIREMENTS as REQUIREMENTS
from emulator.spec.requirements import Requirements as Requirements
from emulator.spec.requirements import find as find
from emulator.spec.requirements import included_digest as included_digest

# Outside /opt/ml: not a SageMaker path, so no script or toolkit step can mistake it for one.
CONTAINER_PATH = "/opt/hetero-emu/wheelhouse"
#: The file in a wheelhouse that names the image id it was resolved against.
IMAGE_ID_FILE = ".image-id"
TAIL_LINES = 20
Progress = Callable[[str], None]
#: Builds a wheelhouse: (the code folder pip runs in, the folder the wheels go to, progress, the file as
#: shown to the user) -> None; raises WheelhouseError. The engine's `build_wheelhouse` is the real one.
Builder = Callable[[Path, Path, Progress, str], None]


def cache_key(digest: str, image: str, package: bool = False) -> str:
    """One wheelhouse per (requirements bytes, image): an edit or another image resolves anew. A
    package's (setup.py) holds setuptools as well."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", image)[-80:]
    return f"{name}-{digest[:16]}{'-setuptools' if package else ''}"


def cache_root() -> Path:
    return default_cache_dir() / "wheelhouses"


def location(requirements: Requirements, root: Path, image: str) -> Path:
    return root / cache_key(requirements.digest, image, requirements.package)


def environment(requirements: Requirements | None) -> dict[str, str]:
    """The variables pip reads (https://pip.pypa.io/en/stable/topics/configuration/#environment-variables):
    the toolkit's `pip install -r requirements.txt` then takes every package from the mount."""
    if requirements is None:
        return {}
    return {"PIP_FIND_LINKS": CONTAINER_PATH, "PIP_NO_INDEX": "1"}


def ensure(requirements: Requirements, target: Path, image_id: str, progress: Progress, build: Builder) -> bool:
    """Build the wheelhouse `target` for the image `image_id` unless it is there already (resolved
    against that very image); True when it was built. `build` runs pip against the image; it raises
    WheelhouseError naming the requirement, the Python and why."""
    shown = f"{requirements.code}{'!' if requirements.archive else '/'}{REQUIREMENTS}"
    if _resolved_for(target) == image_id:
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
            progress(f"requirements.txt: resolving {shown} against the job's image, once")
            build(code, partial, progress, shown)
        (partial / IMAGE_ID_FILE).write_text(image_id + "\n")
        # The folder appears whole or not at all: an older one (another image id) is set aside first.
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        with contextlib.suppress(FileNotFoundError):
            target.rename(old)
        try:
            partial.rename(target)
        except OSError:
            if _resolved_for(target) != image_id:  # a run that built the same key meanwhile wins
                raise
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    count = len(list(target.glob("*.whl")))
    progress(f"requirements.txt: {count} wheel(s) in {target} ({time.monotonic() - started:.1f}s)")
    return True


def _resolved_for(target: Path) -> str | None:
    try:
        return (target / IMAGE_ID_FILE).read_text().strip()
    except OSError:
        return None


def pip_failure(lines: Sequence[str], python: str) -> str:
    """What pip's output says went wrong, in one phrase naming the requirement and the Python: no
    release for this Python, not found, a conflict, a source package that does not build, no index."""
    text = "\n".join(lines)
    # The resolver's own probe of the index (emulator.backend.index_container), after pip failed.
    unreachable = re.search(r"^INDEX_UNREACHABLE (.*)$", text, re.MULTILINE)
    if unreachable:
        return f"the package index could not be reached from the image's container: {unreachable[1][:300]}"
    missing = re.search(r"No matching distribution found for (\S+)", text)
    ignored = re.search(r"Ignored the following versions that require a different python version: (.*)", text)
    if missing and ignored:
        return (f"{missing[1]}: no release of it installs on Python {python} (releases for other Pythons: "
                f"{ignored[1].strip()[:200]})")
    network = re.search(r"(Could not fetch URL .*|.*(?:Max retries exceeded|Temporary failure in name resolution|"
                        r"Network is unreachable|Connection refused|ProxyError|SSLError|"
                        r"CERTIFICATE_VERIFY_FAILED).*)", text)
    if missing and network:
        return f"the package index could not be reached from the image's container ({network[0].strip()[:200]})"
    if missing:
        return f"{missing[1]}: not found on the package index for Python {python} (no such package or version)"
    if "ResolutionImpossible" in text or "conflict is caused by" in text:
        cause = text.split("The conflict is caused by:", 1)[-1].split("\n\n", 1)[0] if "conflict is caused by" in text \
            else ""
        causes = "; ".join(line.strip() for line in cause.splitlines() if line.strip())[:400]
        return f"conflicting requirements for Python {python}" + (f": {causes}" if causes else "")
    built = re.search(r"(?:Failed to build|Failed building wheel for|Could not build wheels for) ([\w.-]+)", text)
    if built:
        return (f"{built[1]}: no wheel of it for Python {python}, and its source package does not build "
                "there (see pip's lines)")
    if network:
        return f"the package index could not be reached from the image's container ({network[0].strip()[:200]})"
    error = next((line.strip() for line in reversed(lines) if "ERROR" in line), None)
    return error or f"pip failed on Python {python}"


def failure(shown: str, lines: Sequence[str], python: str, exit_code: int) -> WheelhouseError:
    """The error for a pip that failed resolving `shown` (a requirements.txt), with pip's last lines."""
    tail = list(lines)[-TAIL_LINES:]
    return WheelhouseError(
        f"requirements.txt: {pip_failure(lines, python)} ({shown}, pip exit code {exit_code}); pip's last lines:\n"
        + "\n".join(f"    {line}" for line in tail),
        hint="fix that requirement for the image's Python, or pin one that has a wheel for it; no container "
        "of the job was started",
    )


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
