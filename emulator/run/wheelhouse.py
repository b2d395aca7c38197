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
resolved for the image's Python, as before). `emulator.backend.index_container` runs the steps.

`find` (reading the files, in `emulator.jobspec.requirements`) runs while the spec is checked; the plan
adds the mount and variables without I/O (`emulator.planning.wheelhouse_mount`); `ensure` (the build)
runs before any container starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

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
#: How a progress line that is a warning starts (`ensure` gives it to its `warn`).
WARNING = "warning: "
TAIL_LINES = 20
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


class ResolveLines:
    """The resolving script's output (`emulator.backend.index_container`) as the user reads it: its
    markers become progress lines (a warning starts with WARNING), pip's own lines are shown indented
    and kept for a failure's message (only those of the last resolution: what failed)."""

    def __init__(self, image: str, progress: Progress) -> None:
        self.image = image
        self.progress = progress
        self.python = "?"  # the image's, as the script says
        self.named: str | None = None  # the Python resolved as for, when asked
        self.lines: list[str] = []

    def __call__(self, text: str) -> None:
        marker, _, rest = text.partition(" ")
        said = self._said(marker, rest.split())
        if said is None:
            self.lines.append(text)
            self.progress(f"  {text}")
        elif said:
            self.progress(said)

    def _said(self, marker: str, words: list[str]) -> str | None:
        """The line a marker of the script says ("" for none), None for a line of pip's."""
        python, named = self.python, self.named
        instead = f"resolved for Python {python}, the image's, instead"
        if marker == "PYTHON" and words:
            self.python = words[0]
            return f"requirements.txt: pip of {self.image} (Python {self.python}) decides what the image lacks"
        if marker == "ASFOR" and words:
            self.named = words[0]
            return (f"requirements.txt: pip chooses the versions as for Python {self.named}, the job's (the image "
                    f"runs {python}), keeping {', '.join(words[1:]) or 'what the image has'}")
        if marker == "ASFOR_LAYER_MOVES":
            return (f"requirements.txt: with {', '.join(words)} kept, pip finds no resolution for Python {named}; "
                    "it lets them move, as pip on the service upgrades what the file asks to")
        if marker == "ASFOR_CHOSEN":
            return (f"requirements.txt: for Python {named} pip chooses {', '.join(words)}" if words else
                    f"requirements.txt: for Python {named} the image already has everything it asks for")
        if marker == "ASFOR_NONE":
            return (f"{WARNING}requirements.txt: pip finds no resolution for Python {named} from wheels alone "
                    f"(its lines above say why); {instead}")
        if marker == "ASFOR_NOT_HERE" and len(words) == 2:
            name = words[0].split("==")[0]
            then = (f"{name}=={words[1]}, pip's choice for Python {python}, instead" if words[1] != "-" else
                    f"Python {python} needs no {name}")
            return (f"{WARNING}requirements.txt: {words[0]}, pip's choice for Python {named}, does not install on "
                    f"Python {python}: {then}")
        if marker == "ASFOR_CONFLICT":
            return (f"{WARNING}requirements.txt: the versions pip chose for Python {named} do not resolve together "
                    f"on Python {python} (its lines above say why); {instead}")
        if marker == "ASFOR_BUILD_FAILED":
            return (f"{WARNING}requirements.txt: a version pip chose for Python {named} does not build on Python "
                    f"{python} (its lines above say which); {instead}")
        if marker == "RESOLVE":
            self.lines.clear()
            return ""
        if marker == "SDIST" and words:
            chosen = f" (pip's choice for Python {named})" if words[1:] == ["as-for"] else ""
            return (f"requirements.txt: {words[0]}{chosen} has no wheel for Python {python}: pip builds it from its "
                    "source package (this can take minutes)")
        if marker == "FETCH" and words and words[0].isdigit():
            count = int(words[0])
            return (f"requirements.txt: {count} package(s) to fetch" if count else
                    "requirements.txt: the image already has everything it asks for")
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
