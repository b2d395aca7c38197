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

On a framework stand-in that runs another Python than the estimator names (py38 on Python 3.9,
`emulator.training_images.frameworks`), pip would pick other releases than on the service: an unpinned `transformers`
is 4.46.3 for 3.8 but a release that needs a newer PyTorch for 3.9. So such a file is resolved as pip
resolves it for the named Python (`--python-version 3.8 --only-binary=:all:`, the image's framework
pins kept as constraints), and those versions are installed on the stand-in's Python: the wheelhouse
holds them and a `constraints.txt` naming them, which the hosts' pip honours (PIP_CONSTRAINT). A chosen
version that does not install there is said, with what pip took instead (its choice for the image's
Python), as is a file that has no resolution for the named Python from wheels alone (then it is
resolved for the image's Python, as before). `emulator.backend.index_container` runs the steps and
`emulator.backend.pip_output` words what pip says.

`find` (reading the files, in `emulator.jobspec.requirements`) runs while the spec is checked; the plan
adds the mount and variables without I/O (`emulator.planning.wheelhouse_mount`); `ensure` (the build)
runs before any container starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from emulator.backend.pip_output import WARNING
from emulator.errors import WheelhouseError

# The reading half lives with the spec's rules, which find the file; its names stay importable here.
from emulator.jobspec.requirements import REQUIREMENTS as REQUIREMENTS
from emulator.jobspec.requirements import Requirements as Requirements
from emulator.jobspec.requirements import find as find
from emulator.jobspec.requirements import included_digest as included_digest

#: The file in a wheelhouse that names the image id it was resolved against.
IMAGE_ID_FILE = ".image-id"
#: The file in a wheelhouse (written before pip runs) asking for a resolution as for another Python.
AS_FOR_FILE = ".as-for.json"
Progress = Callable[[str], None]
#: Builds a wheelhouse: (the code folder pip runs in, the folder the wheels go to, progress, the file as
#: shown to the user) -> None; raises WheelhouseError. The engine's `build_wheelhouse` is the real one.
Builder = Callable[[Path, Path, Progress, str], None]


def ensure(requirements: Requirements, target: Path, image_id: str, progress: Progress, build: Builder,
           warn: Progress | None = None) -> bool:
    """Build the wheelhouse `target` for the image `image_id` unless it is there already (resolved
    against that very image); True when it was built. `build` runs pip against the image; it raises
    WheelhouseError naming the requirement, the Python and why. Its lines that are warnings (a
    version chosen for the named Python that does not install on the image's) go to `warn`."""
    shown = f"{requirements.code}{'!' if requirements.archive else '/'}{REQUIREMENTS}"
    if _resolved_for(target) == image_id:
        progress(f"requirements.txt: wheels cached in {target}"
                 + (f" (resolved as for Python {requirements.as_python})" if requirements.as_python else ""))
        return False
    if warn is not None:
        progress = _routed(progress, warn)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.part-"))
    except OSError as err:
        raise WheelhouseError(f"cannot create the wheel cache {target.parent}: {err.strerror}",
                              hint="set XDG_CACHE_HOME to a writable folder") from None
    started = time.monotonic()
    try:
        if requirements.as_python:
            (partial / AS_FOR_FILE).write_text(json.dumps({"python": requirements.as_python,
                                                           "keep": list(requirements.keep),
                                                           "core": list(requirements.core)}) + "\n")
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


def _routed(progress: Progress, warn: Progress) -> Progress:
    """`progress`, whose lines that start with WARNING go to `warn` instead (without it)."""
    def line(text: str) -> None:
        if text.startswith(WARNING):
            warn(text.removeprefix(WARNING))
        else:
            progress(text)
    return line


def _resolved_for(target: Path) -> str | None:
    try:
        return (target / IMAGE_ID_FILE).read_text().strip()
    except OSError:
        return None


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
