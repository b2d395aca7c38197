"""Hugging Face images: which local image stands for AWS's Hugging Face training image of a version.

`HuggingFace(transformers_version="4.36", pytorch_version="2.1", py_version="py310")` asks SDK v2 for
`huggingface-pytorch-training:2.1.0-transformers4.36.0-gpu-py310-cu121-ubuntu20.04`: AWS's PyTorch
training image of that version with transformers, datasets, accelerate and their companions installed
on top (aws/deep-learning-containers, huggingface/pytorch/training/docker/2.1/py3/cu121/Dockerfile.gpu,
`FROM pytorch-training:2.1.0-gpu-py310-...`). None can be pulled here, so the emulator does the same:
the framework image of that PyTorch or TensorFlow version (`emulator.training_images.frameworks`, on its Python, said
out loud as there) with a layer of the Hugging Face packages at the versions AWS's image has, pinned
where pip installs them with the framework's pins on that Python (`emulator/data/huggingface.json`,
made by `scripts/huggingface_table.py`; built by `emulator.backend.huggingface_build`).

The toolkit that runs the job is the framework's (AWS's Hugging Face images inherit the framework
image's SAGEMAKER_TRAINING_MODULE). Pure: no Docker, no network.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from functools import cache
from importlib import resources
from typing import Any

from emulator.errors import UsageError
from emulator.jobspec.wording import clip, preview
from emulator.training_images import frameworks
from emulator.training_images.frameworks import DEBIAN_PYTHONS, NAMES, FrameworkImage, HuggingFaceLayer

#: AWS's ECR repository of each backend's Hugging Face training images (SDK v2's huggingface.json).
REPOSITORIES: dict[str, str] = {"pytorch": "huggingface-pytorch-training",
                                "tensorflow": "huggingface-tensorflow-training"}
#: How `hetero-emu image build --framework` names them: huggingface-pytorch:4.36.
BUILD_NAMES: dict[str, str] = {f"huggingface-{backend}": backend for backend in REPOSITORIES}
# An ECR tag of a Hugging Face training image: `2.1.0-transformers4.36.0-gpu-py310-cu121-ubuntu20.04`.
_ECR_TAG = re.compile(r"(?P<version>\d+\.\d+(?:\.\d+)?)-transformers(?P<transformers>\d+\.\d+(?:\.\d+)?)"
                      r"-(?:cpu|gpu)-(?P<py>py\d{1,3})(?:-.*)?")
# A local tag: `hetero-emu/huggingface-pytorch-training:2.1.0-transformers4.36.0-py311`.
_LOCAL_TAG = re.compile(r"(?P<version>[\d.]+)-transformers(?P<transformers>[\d.]+)-py(?P<py>\d{2,3})")


@cache
def table() -> dict[str, Any]:
    """The Hugging Face table (emulator/data/huggingface.json)."""
    text = resources.files("emulator").joinpath("data/huggingface.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def is_repository(repository: str) -> bool:
    return repository in REPOSITORIES.values()


def transformers_versions() -> tuple[str, ...]:
    """The transformers versions SDK v2 lists for training, oldest first."""
    return tuple(sorted(table()["training"], key=_key))


def pairs(backend: str) -> tuple[tuple[str, str], ...]:
    """(transformers, framework version) of every `backend` training image SDK v2 lists, oldest first."""
    return tuple((t, v) for t in transformers_versions() for v in sorted(table()["training"][t].get(backend, {}),
                                                                         key=_key))


def runnable_pairs(backend: str) -> tuple[tuple[str, str], ...]:
    """The pairs with a stand-in here: the framework has one and the layer's pins install on its Python."""
    return tuple(p for p in pairs(backend) if _problem(backend, *p) is None)


def choose(backend: str, transformers: str, version: str | None = None, py_version: str | None = None
           ) -> FrameworkImage:
    """The image for transformers `transformers` on `backend` `version` (default: the newest the SDK lists
    beside it) and `py_version` (default: the newest the SDK lists for the pair). Versions are full or
    the SDK's aliases (4.36, 2.1). UsageError naming what exists for anything else."""
    if backend not in REPOSITORIES:
        raise UsageError(f"unknown Hugging Face backend {backend!r}", hint=f"backends: {', '.join(REPOSITORIES)}")
    full = _full_transformers(transformers)
    listed = table()["training"][full].get(backend, {})
    if not listed:
        raise UsageError(f"transformers {full} was never released on {NAMES[backend]}",
                         hint=f"SageMaker's Hugging Face {full} images are for "
                              f"{_pairs_text(p for p in _all_pairs() if p[1] == full)}")
    if version is None:
        version = max(listed, key=_key)
    matching = [v for v in listed if v == version or v.startswith(version + ".")]
    if not matching:
        raise UsageError(f"transformers {full} was never released on {NAMES[backend]} {clip(version)}",
                         hint=f"SageMaker's {NAMES[backend]} versions for transformers {full}: "
                              f"{', '.join(sorted(listed, key=_key))}")
    full_version = max(matching, key=_key)
    row = listed[full_version]
    sdk_pys: list[str] = row["sdk_py_versions"]
    if py_version is None:
        py_version = max(sdk_pys, key=lambda p: _key(p))
    if py_version not in sdk_pys:
        raise UsageError(f"transformers {full} on {NAMES[backend]} {full_version} was never released for "
                         f"{clip(py_version)}", hint=f"SageMaker's images of it are for {', '.join(sdk_pys)}")
    problem = _problem(backend, full, full_version)
    if problem is not None:
        raise UsageError(f"no image stands in for transformers {full} on {NAMES[backend]} {full_version}: "
                         f"{problem}", hint=f"Hugging Face versions with images here: {_runnable_text()}")
    return _image(backend, full, full_version, py_version)


def from_ecr(repository: str, tag: str) -> FrameworkImage | None:
    """The image for an ECR name's repository and tag (`huggingface-pytorch-training`,
    `2.1.0-transformers4.36.0-gpu-py310-cu121-ubuntu20.04`), None when none stands in for it here
    (`no_stand_in` says why). UsageError when it could run but names a Python never released."""
    backend = next((b for b, repo in REPOSITORIES.items() if repo == repository), None)
    match = _ECR_TAG.fullmatch(tag)
    if backend is None or match is None:
        return None
    pair = _known_pair(backend, match["transformers"], match["version"])
    if pair is None or _problem(backend, *pair) is not None:
        return None
    return choose(backend, pair[0], pair[1], match["py"])


def no_stand_in(repository: str, tag: str) -> str:
    """Why no image stands in for a Hugging Face ECR repository and tag (`from_ecr` gave None)."""
    backend = next((b for b, repo in REPOSITORIES.items() if repo == repository), None)
    match = _ECR_TAG.fullmatch(tag)
    why = f"stand-ins are built for AWS's Hugging Face training images of {_runnable_text()}"
    if backend is None or match is None:
        return why
    pair = _known_pair(backend, match["transformers"], match["version"])
    if pair is None:
        return f"SDK v2 lists no Hugging Face image of transformers {match['transformers']} on " \
               f"{NAMES[backend]} {match['version']}; {why}"
    return f"transformers {pair[0]} on {NAMES[backend]} {pair[1]}: {_problem(backend, *pair)}; {why}"


def for_tag(tag: str) -> FrameworkImage | None:
    """The image a local tag names (`hetero-emu/huggingface-pytorch-training:2.1.0-transformers4.36.0-py311`),
    None for any other tag: what a job that names it directly builds when it is missing."""
    repository, _, rest = tag.partition(":")
    backend = next((b for b, repo in REPOSITORIES.items()
                    if repository == frameworks.LOCAL_REPOSITORY.format(repository=repo)), None)
    match = _LOCAL_TAG.fullmatch(rest)
    if backend is None or match is None:
        return None
    transformers, version = match["transformers"], match["version"]
    python = f"{match['py'][:1]}.{match['py'][1:]}"
    row = table()["training"].get(transformers, {}).get(backend, {}).get(version)
    if row is None or _problem(backend, transformers, version) is not None or python not in row["pythons"]:
        return None
    named = [p for p in row["sdk_py_versions"] if _python(backend, version, p) == python]
    return _image(backend, transformers, version, max(named, key=_key)) if named else None


def parse_build(value: str) -> tuple[str, str, str | None] | None:
    """`huggingface-pytorch:4.36` -> ("pytorch", "4.36", None); `huggingface-pytorch:4.6.1:1.8` names the
    PyTorch version too (the SDK lists several beside some transformers versions). None when `value`
    names no Hugging Face image (a framework's `pytorch:1.11`)."""
    name, _, rest = value.partition(":")
    if name not in BUILD_NAMES:
        return None
    transformers, _, version = rest.partition(":")
    if not re.fullmatch(r"\d+(\.\d+){1,2}", transformers) or (version and not re.fullmatch(r"\d+(\.\d+){1,2}",
                                                                                             version)):
        shape = f"{name}:TRANSFORMERS[:{NAMES[BUILD_NAMES[name]].upper()}]"
        raise UsageError(f"--framework {preview(value)} is not {shape}",
                         hint=f"e.g. {name}:4.36 or {name}:4.6.1:1.8")
    return BUILD_NAMES[name], transformers, version or None


def build_target(value: str, py_version: str | None) -> FrameworkImage | None:
    """The image `hetero-emu image build --framework VALUE --python PY` builds when VALUE names a Hugging
    Face image (`parse_build`), None otherwise."""
    parsed = parse_build(value)
    return None if parsed is None else choose(parsed[0], parsed[1], parsed[2], py_version)


def _image(backend: str, transformers: str, version: str, py_version: str) -> FrameworkImage:
    python = _python(backend, version, py_version)
    base = frameworks.for_tag(f"{frameworks.LOCAL_REPOSITORY.format(repository=frameworks.FRAMEWORKS[backend])}:"
                              f"{version}-py{python.replace('.', '')}")
    if base is None:  # _problem said the framework runs here: its table and ours disagree
        raise UsageError(f"{NAMES[backend]} {version} has no framework image on Python {python}",
                         hint="regenerate emulator/data/huggingface.json (scripts/huggingface_table.py)")
    pins = tuple(f"{name}=={pin}" for name, pin in
                 sorted(table()["training"][transformers][backend][version]["pythons"][python]["packages"].items()))
    layer = HuggingFaceLayer(transformers, pins)
    return replace(base, py_version=py_version, requirements=base.requirements + pins, huggingface=layer)


def _python(backend: str, version: str, py_version: str) -> str:
    here = [p for p in frameworks.table()[backend][version]["wheel_pythons"] if p in DEBIAN_PYTHONS]
    return frameworks.nearest_python(py_version, here)


def _problem(backend: str, transformers: str, version: str) -> str | None:
    """Why a listed pair has no stand-in here, None when it has one."""
    if version not in frameworks.table()[backend]:
        firsts = {f: frameworks.runnable_versions(f)[0] for f in frameworks.FRAMEWORKS}
        return (f"framework images here start at {' and '.join(f'{NAMES[f]} {v}' for f, v in firsts.items())}, "
                f"and {NAMES[backend]} {version} is older")
    if version not in frameworks.runnable_versions(backend):
        wheels = frameworks.table()[backend][version]["wheel_pythons"]
        return (f"{NAMES[backend]} {version} has wheels only for Python {', '.join(wheels) or 'none'}, none of "
                f"which this machine runs ({', '.join(DEBIAN_PYTHONS)})")
    row = table()["training"][transformers][backend][version]
    layers = sorted(row.get("pythons", {}).items())
    errors = [f"Python {p}: {layer['error']}" for p, layer in layers if "error" in layer]
    if errors or not row.get("pythons"):
        return "; ".join(errors) or "no layer in emulator/data/huggingface.json"
    return None


def _known_pair(backend: str, transformers: str, version: str) -> tuple[str, str] | None:
    """The listed (transformers, version) an ECR tag names. The SDK writes the versions as the user gave
    them: `HuggingFace(transformers_version="4.12", pytorch_version="1.9")` asks for
    `1.9-transformers4.12-gpu-py38-...`, so both go through SDK v2's aliases (4.12 -> 4.12.3, and the
    newest 1.9.x listed beside it)."""
    full = table()["version_aliases"].get(transformers, transformers)
    listed = table()["training"].get(full, {}).get(backend, {})
    found = [v for v in listed if v == version or v.startswith(version + ".")]
    return (full, max(found, key=_key)) if found else None


def _full_transformers(version: str) -> str:
    aliases: dict[str, str] = table()["version_aliases"]
    full = aliases.get(version, version)
    if full not in table()["training"]:
        raise UsageError(f"transformers {clip(version)} is not a version SageMaker has a Hugging Face training "
                         "image of",
                         hint=f"transformers versions: {', '.join(transformers_versions())}")
    return full


def _all_pairs() -> list[tuple[str, str, str]]:
    return [(b, t, v) for b in REPOSITORIES for t, v in pairs(b)]


def _pairs_text(found: Any) -> str:
    return ", ".join(f"{NAMES[b]} {v}" for b, _, v in found)


def _runnable_text() -> str:
    parts = []
    for backend in REPOSITORIES:
        runnable = runnable_pairs(backend)
        if runnable:
            parts.append(f"{NAMES[backend]} ({', '.join(f'transformers {t} on {v}' for t, v in runnable)})")
    return "; ".join(parts) or "none"


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))
