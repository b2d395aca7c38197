"""A job's wheelhouse as the plan gives it to the hosts: where in the cache it is (one per requirements
file and image), the read-only mount, and the variables the toolkit's unchanged `pip install -r
requirements.txt` reads to take every package from it (docs/images.md, requirements.txt).

Pure: building the wheelhouse before any container starts is emulator/run/wheelhouse.py.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

from emulator.defaults import default_cache_dir
from emulator.jobspec.requirements import Requirements

# Outside /opt/ml: not a SageMaker path, so no script or toolkit step can mistake it for one.
CONTAINER_PATH = "/opt/hetero-emu/wheelhouse"
#: The constraints the hosts' pip reads (PIP_CONSTRAINT) when the file was resolved as for another Python.
CONSTRAINTS = "constraints.txt"


def cache_key(digest: str, image: str, package: bool = False, as_python: str | None = None,
              kept: Sequence[str] = ()) -> str:
    """One wheelhouse per (requirements bytes, image): an edit or another image resolves anew. A
    package's (setup.py) holds setuptools as well; one resolved as for another Python says which, and
    what it was resolved keeping (`kept`: the pins held, then those that may move) by a short hash."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", image)[-80:]
    as_for = f"-as-py{as_python.replace('.', '')}" if as_python else ""
    if as_python and kept:
        as_for += "-" + hashlib.sha256("\0".join(kept).encode()).hexdigest()[:8]
    return f"{name}-{digest[:16]}{'-setuptools' if package else ''}{as_for}"


def cache_root() -> Path:
    return default_cache_dir() / "wheelhouses"


def location(requirements: Requirements, root: Path, image: str) -> Path:
    return root / cache_key(requirements.digest, image, requirements.package, requirements.as_python,
                            (*requirements.keep, "", *requirements.core))


def environment(requirements: Requirements | None) -> dict[str, str]:
    """The variables pip reads (https://pip.pypa.io/en/stable/topics/configuration/#environment-variables):
    the toolkit's `pip install -r requirements.txt` then takes every package from the mount."""
    if requirements is None:
        return {}
    variables = {"PIP_FIND_LINKS": CONTAINER_PATH, "PIP_NO_INDEX": "1"}
    if requirements.as_python:
        # The versions chosen as for the named Python, which that unchanged command then installs.
        variables["PIP_CONSTRAINT"] = f"{CONTAINER_PATH}/{CONSTRAINTS}"
    return variables
