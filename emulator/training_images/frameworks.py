"""Framework images: which local image stands for a PyTorch or TensorFlow version and Python.

AWS's Deep Learning Containers are one image per framework version and Python
(`pytorch-training:1.11.0-gpu-py38`, `tensorflow-training:2.9.2-gpu-py39`). None can be pulled here,
so the emulator builds its own, one per (framework, version, Python), from one recipe
(`images/framework/`, built by `emulator.backend.framework_build`): the framework at that version,
what AWS's training image of it carries for scripts (torchvision and torchaudio; Horovod), the
framework's SageMaker toolkit, MPI and sshd.

Only Debian's Pythons can be had on this machine: 3.9 (bullseye), 3.11 (bookworm) and 3.13 (trixie).
A job runs on the Python its estimator names where Debian has it, else on the nearest one the
framework's wheels exist for (py38 -> 3.9, py310 -> 3.11), and says so once.

The versions, their wheels' Pythons and the companion packages are data
(`emulator/data/frameworks.json`, made by `scripts/framework_table.py` from SDK v2's image
configuration and PyPI). Pure: no Docker, no network.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from emulator.errors import UsageError
from emulator.jobspec.wording import clip, preview

#: The Debian suite that has each CPython this machine can install (no other can be fetched here).
DEBIAN_PYTHONS: dict[str, str] = {"3.9": "bullseye", "3.11": "bookworm", "3.13": "trixie"}
#: The frameworks, with the repository AWS names its training images by and the local repository.
FRAMEWORKS: dict[str, str] = {"pytorch": "pytorch-training", "tensorflow": "tensorflow-training"}
#: The module the toolkit's `train` hands the job to in AWS's image of each framework (its
#: SAGEMAKER_TRAINING_MODULE): sagemaker_pytorch_container/training.py in
#: aws/sagemaker-pytorch-training-toolkit, sagemaker_tensorflow_container/training.py in
#: aws/sagemaker-tensorflow-training-toolkit.
TRAINING_MODULES: dict[str, str] = {
    "pytorch": "sagemaker_pytorch_container.training:main",
    "tensorflow": "sagemaker_tensorflow_container.training:main",
}
#: Distribution launchers each framework image carries besides mpirun and sshd.
EXTRA_LAUNCHERS: dict[str, tuple[str, ...]] = {"pytorch": ("torchrun",), "tensorflow": ()}
LOCAL_REPOSITORY = "hetero-emu/{repository}"
#: AWS's Hugging Face images (huggingface-pytorch-training...) stand in through `emulator.training_images.huggingface`
#: (`emulator.training_images.stand_ins` tells them from the others by it).
HUGGINGFACE_PREFIX = "huggingface-"
#: How the frameworks are named in messages.
NAMES: dict[str, str] = {"pytorch": "PyTorch", "tensorflow": "TensorFlow"}

# An ECR tag of a Deep Learning Container: `1.11.0-gpu-py38`, `2.9.2-cpu-py39-ubuntu20.04-sagemaker`.
# A bare `py3` is a py_version too: SDK v2 lists PyTorch 1.8.x for ["py3", "py36"]
# (sagemaker/image_uri_config/pytorch.json, training "1.8.1"), and `1.8.1-gpu-py3` is an ECR tag.
_ECR_TAG = re.compile(r"(?P<version>\d+\.\d+(?:\.\d+)?)-(?:cpu|gpu)-(?P<py>py\d{1,3})(?:-.*)?")
_PY = re.compile(r"py(?P<major>\d)(?P<minor>\d{1,2})?")


@dataclass(frozen=True)
class HuggingFaceLayer:
    """What a Hugging Face image adds over its framework image (`emulator.training_images.huggingface`)."""

    transformers: str  # "4.36.0"
    #: The layer's own pins (transformers, datasets, accelerate...), also at the end of `requirements`.
    packages: tuple[str, ...]


@dataclass(frozen=True)
class FrameworkImage:
    """One framework image: what a job asked for and what this machine runs for it."""

    framework: str  # "pytorch" | "tensorflow"
    version: str  # the full version: "1.11.0"
    py_version: str  # what the estimator named: "py38"
    python: str  # the Debian CPython the image runs: "3.9"
    #: The packages pip installs into the image's venv, each pinned (framework, companions, toolkits).
    requirements: tuple[str, ...]
    #: Horovod's version, compiled against the framework with MPI (TensorFlow images); None: none.
    horovod: str | None = None
    #: What AWS's training image of this version installs for scripts (scipy, pandas, opencv,
    #: tf-models-official...), pinned as pip chose them for this Python (`aws_packages`): installed by a
    #: stage of its own after the venv's, so that a change to them rebuilds only that stage.
    aws_packages: tuple[str, ...] = ()
    #: A Hugging Face image: the framework image with transformers and its companions on top.
    huggingface: HuggingFaceLayer | None = None

    def horovod_missing(self) -> str | None:
        """Why a TensorFlow image has no Horovod (None for PyTorch, or when it has one)."""
        if self.framework != "tensorflow" or self.horovod is not None:
            return None
        why = table()["tensorflow"][self.version].get("horovod_note") or "no Horovod release builds against it"
        return f"tensorflow {self.version}: no Horovod in the image ({why})"

    @property
    def suite(self) -> str:
        return DEBIAN_PYTHONS[self.python]

    @property
    def tag(self) -> str:
        py = self.python.replace(".", "")
        if self.huggingface is not None:  # named as AWS's: huggingface-pytorch-training:2.1.0-transformers4.36.0-...
            repository = LOCAL_REPOSITORY.format(repository=f"{HUGGINGFACE_PREFIX}{FRAMEWORKS[self.framework]}")
            return f"{repository}:{self.version}-transformers{self.huggingface.transformers}-py{py}"
        repository = LOCAL_REPOSITORY.format(repository=FRAMEWORKS[self.framework])
        return f"{repository}:{self.version}-py{py}"

    @property
    def substituted(self) -> bool:
        """True when the image runs another Python than the one named."""
        return _py_to_python(self.py_version) != self.python

    @property
    def build_command(self) -> str:
        """The command that builds this image (`hetero-emu image build --framework pytorch:1.11.0 --python py38`)."""
        name = f"{self.framework}:{self.version}" if self.huggingface is None else \
            f"{HUGGINGFACE_PREFIX}{self.framework}:{self.huggingface.transformers}:{self.version}"
        return f"hetero-emu image build --framework {name} --python {self.py_version}"

    @property
    def launchers(self) -> tuple[str, ...]:
        return tuple(sorted({"mpirun", "sshd", *EXTRA_LAUNCHERS[self.framework]}))

    @property
    def training_module(self) -> str:
        return TRAINING_MODULES[self.framework]

    @property
    def named_python(self) -> str | None:
        """The Python the estimator names (`py38` -> "3.8"); None for a bare `py3`, which names no minor."""
        major, minor = _py_key(self.py_version)
        return f"{major}.{minor}" if _PY.fullmatch(self.py_version) and minor else None

    def python_note(self, requirements: bool = False) -> str:
        """The line a job prints once: `pytorch 1.11.0 py38: running on Python 3.9 (Debian has no 3.8)`,
        and with `requirements` (the job has a requirements.txt, `emulator.run.wheelhouse`) `; requirements.txt
        resolved as for Python 3.8`."""
        named = self.named_python
        if named is None:
            why = f"{self.py_version} names no minor version"
        elif named in DEBIAN_PYTHONS:
            why = f"{NAMES[self.framework]} {self.version} has no wheels for {named}"
        else:
            why = f"Debian has no {named}"
        note = f"{self.framework} {self.version} {self.py_version}: running on Python {self.python} ({why})"
        return note + (f"; requirements.txt resolved as for Python {named}" if requirements and named else "")

    @property
    def framework_pins(self) -> tuple[str, ...]:
        """The framework and its companions as pinned in the image (`torch==1.11.0`, `torchvision==0.12.0`),
        and a Hugging Face image's layer (`transformers==4.36.0`, `datasets==2.18.0`: as on the service, an
        unpinned `transformers` in requirements.txt keeps the image's). Without extras: they are constraints."""
        layer = tuple(re.sub(r"\[[^\]]*\]", "", pin) for pin in self.huggingface.packages) if self.huggingface else ()
        return self.core_pins + layer

    @property
    def core_pins(self) -> tuple[str, ...]:
        """The framework and its companions alone (`torch==1.11.0`, `torchvision==0.12.0`)."""
        packages: dict[str, str] = table()[self.framework][self.version]["packages"]
        return tuple(f"{name}=={pin}" for name, pin in sorted(packages.items()))

    def to_dict(self) -> dict[str, Any]:
        found = {"Framework": self.framework, "FrameworkVersion": self.version, "PyVersion": self.py_version,
                 "Python": self.python, "Image": self.tag}
        return found | ({"TransformersVersion": self.huggingface.transformers} if self.huggingface else {})


@cache
def table() -> dict[str, Any]:
    """The framework table (emulator/data/frameworks.json)."""
    text = resources.files("emulator").joinpath("data/frameworks.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def versions(framework: str) -> tuple[str, ...]:
    """The full versions SDK v2 lists for training that have an image recipe here, oldest first."""
    return tuple(sorted(table()[framework], key=_version_key))


def full_version(framework: str, version: str) -> str:
    """`1.11` -> `1.11.0` (the newest patch release the table has), as the SDK's version aliases do."""
    known = versions(framework)
    if version in known:
        return version
    matching = [v for v in known if v.startswith(version + ".")]
    if not matching:
        raise UsageError(f"{framework} {clip(version)} is not one of the {framework} versions hetero-emu has an image "
                         f"for (from {known[0]})",
                         hint=f"{framework} versions: {', '.join(known)}")
    return matching[-1]


def choose(framework: str, version: str, py_version: str | None = None) -> FrameworkImage:
    """The image for `framework` `version` on `py_version` (default: the newest the SDK lists for it).

    UsageError for an unknown framework or version, a Python the SDK never lists for that version,
    or a version whose wheels exist for no Python this machine has."""
    if framework not in FRAMEWORKS:
        raise UsageError(f"unknown framework {preview(framework)}", hint=f"frameworks: {', '.join(FRAMEWORKS)}")
    full = full_version(framework, version)
    entry = table()[framework][full]
    listed: list[str] = entry["sdk_py_versions"]
    if py_version is None:
        py_version = max(listed, key=_py_key)
    if not _PY.fullmatch(py_version):
        raise UsageError(f"{preview(py_version)} is not a py_version", hint="py_version is like py38, py310")
    if py_version not in listed:
        raise UsageError(f"{framework} {full} was never released for {py_version}",
                         hint=f"SageMaker's {framework} {full} images are for {', '.join(listed)}")
    here = [p for p in entry["wheel_pythons"] if p in DEBIAN_PYTHONS]
    if not here:
        raise UsageError(
            f"{framework} {full} has no wheels for any Python this machine can run "
            f"({', '.join(DEBIAN_PYTHONS)}); its wheels are for {', '.join(entry['wheel_pythons']) or 'none'}",
            hint=f"pick a version with images here: {', '.join(runnable_versions(framework))}")
    python = nearest_python(py_version, here)
    return _image(framework, full, py_version, python)


def runnable_versions(framework: str) -> tuple[str, ...]:
    """The versions with wheels for at least one Python this machine has."""
    return tuple(v for v in versions(framework)
                 if any(p in DEBIAN_PYTHONS for p in table()[framework][v]["wheel_pythons"]))


def nearest_python(py_version: str, available: list[str]) -> str:
    """The Python named, where available, else the nearest; a tie goes to the newer (py310 -> 3.11)."""
    wanted = _py_key(py_version)
    return min(available, key=lambda p: (abs(_python_key(p)[1] - wanted[1]) + 100 * abs(_python_key(p)[0] - wanted[0]),
                                         -_python_key(p)[1]))


def requirements(framework: str, version: str, python: str) -> tuple[str, ...]:
    """The pinned packages of the image's venv: the framework, its companions, the toolkits, MPI's
    Python binding and debugpy (for --debug-host), as the table gives them for this Python."""
    entry = table()[framework][version]
    toolkits = table()["toolkits"][framework][python]
    pins = [f"{name}=={pin}" for name, pin in sorted(entry["packages"].items())]
    pins += [f"{name}=={pin}" for name, pin in sorted(toolkits.items())]
    pins += [f"{name}=={pin}" for name, pin in sorted(entry.get("python_packages", {}).get(python, {}).items())]
    return tuple(pins)


def aws_packages(framework: str, version: str, python: str) -> tuple[str, ...]:
    """The pins of what AWS's training image of `version` installs for scripts beyond the venv's (the table's
    `aws_packages`, made by scripts/aws_image_packages.py from aws/deep-learning-containers' Dockerfiles and
    pip's resolver on this Python); empty when the table has none for this Python."""
    pins: dict[str, str] = table()[framework][version].get("aws_packages", {}).get(python, {})
    return tuple(f"{name}=={pin}" for name, pin in sorted(pins.items()))


def from_ecr(repository: str, tag: str) -> FrameworkImage | None:
    """The framework image for an ECR name's repository and tag (`pytorch-training`, `1.11.0-gpu-py38`),
    None when no image can stand in for it here (another repository, a Hugging Face one included: see
    `emulator.training_images.stand_ins`; a tag of another shape, a version before the table's, or one
    whose wheels are for no Python this machine has: `no_stand_in` says why), so that only a real
    image, loaded or mapped, runs it. Raises UsageError when the version could run here but the tag
    names a Python SageMaker never released it for (as `choose`)."""
    framework = next((f for f, repo in FRAMEWORKS.items() if repo == repository), None)
    match = _ECR_TAG.fullmatch(tag)
    if framework is None or match is None:
        return None
    version = match["version"]
    # Compared on as many parts as the tag has: the SDK's alias `1.8` of the first version, 1.8.0, is no older.
    key = _version_key(version)
    if key < _version_key(versions(framework)[0])[:len(key)]:
        return None
    if full_version(framework, version) not in runnable_versions(framework):
        return None
    return choose(framework, version, match["py"])


def no_stand_in(repository: str, tag: str) -> str:
    """Why no framework image stands in for an ECR repository and tag (`from_ecr` gave None): the
    versions stand-ins exist for and, for a version the table knows, the Pythons its wheels are for."""
    firsts = {f: runnable_versions(f)[0] for f in FRAMEWORKS}
    why = ("stand-ins are built for AWS's " + " and ".join(
        f"{FRAMEWORKS[f]} images from {NAMES[f]} {'.'.join(v.split('.')[:2])}" for f, v in firsts.items()))
    framework = next((f for f, repo in FRAMEWORKS.items() if repo == repository), None)
    match = _ECR_TAG.fullmatch(tag)
    if framework is not None and match is not None:
        known = [v for v in versions(framework) if v == match["version"] or v.startswith(match["version"] + ".")]
        if known and known[-1] not in runnable_versions(framework):
            wheels = table()[framework][known[-1]]["wheel_pythons"]
            why += (f"; {NAMES[framework]} {known[-1]} has wheels only for Python {', '.join(wheels)}, "
                    f"none of which this machine runs ({', '.join(DEBIAN_PYTHONS)})")
    return why


def for_tag(tag: str) -> FrameworkImage | None:
    """The framework image a local tag names (`hetero-emu/pytorch-training:1.11.0-py39`), None for any
    other tag, a Hugging Face image's included (`emulator.training_images.stand_ins.for_tag` knows
    those too): what a job that names it directly builds when it is missing."""
    repository, _, version_py = tag.partition(":")
    framework = next((f for f, repo in FRAMEWORKS.items()
                      if repository == LOCAL_REPOSITORY.format(repository=repo)), None)
    version, _, py = version_py.rpartition("-py")
    python = f"{py[:1]}.{py[1:]}" if py[:1].isdigit() else ""
    if framework is None or version not in table()[framework] or python not in DEBIAN_PYTHONS:
        return None
    if python not in table()[framework][version]["wheel_pythons"]:
        return None
    entry = table()[framework][version]
    # The SDK's py_version this image runs for (py38 for a 3.9 image of PyTorch 1.11): what its build
    # command names.
    here = [p for p in entry["wheel_pythons"] if p in DEBIAN_PYTHONS]
    named = [p for p in entry["sdk_py_versions"] if nearest_python(p, here) == python]
    py_version = f"py{py}" if f"py{py}" in named or not named else max(named, key=_py_key)
    return _image(framework, version, py_version, python)


def _image(framework: str, version: str, py_version: str, python: str) -> FrameworkImage:
    """The FrameworkImage of a version on a Python the table has wheels for: its pins and Horovod."""
    horovod = table()[framework][version].get("horovod") if framework == "tensorflow" else None
    return FrameworkImage(framework, version, py_version, python, requirements(framework, version, python), horovod,
                          aws_packages(framework, version, python))


def parse_framework(value: str) -> tuple[str, str]:
    """`pytorch:1.11` -> ("pytorch", "1.11"): the `--framework` option of `image build`."""
    framework, _, version = value.partition(":")
    if framework not in FRAMEWORKS or not version:
        raise UsageError(f"--framework {preview(value)} is not FRAMEWORK:VERSION",
                         hint=f"e.g. pytorch:1.11 or tensorflow:2.9; frameworks: {', '.join(FRAMEWORKS)}")
    return framework, version


def _py_to_python(py_version: str) -> str:
    major, minor = _py_key(py_version)
    return f"{major}.{minor}"


def _py_key(py_version: str) -> tuple[int, int]:
    """`py38` -> (3, 8); a bare `py3` -> (3, 0), so that a version's `py36` beside it is its default."""
    match = _PY.fullmatch(py_version)
    return (int(match["major"]), int(match["minor"] or 0)) if match else (0, 0)


def _python_key(python: str) -> tuple[int, int]:
    major, minor = python.split(".")
    return int(major), int(minor)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())
