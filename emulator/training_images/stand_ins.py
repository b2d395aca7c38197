"""Which framework image stands in for an image name, of every kind: AWS's ECR names of its PyTorch,
TensorFlow and Hugging Face training images, and the local tags of those images.

A Hugging Face image is a layer over a framework image (`emulator.training_images.huggingface`, which
builds on `emulator.training_images.frameworks`), and its names start with `huggingface-`. Telling
the two kinds apart is done here, once, so that `frameworks` need not import `huggingface` back.
Pure: no Docker, no network.
"""

from __future__ import annotations

from emulator.training_images import frameworks, huggingface
from emulator.training_images.frameworks import HUGGINGFACE_PREFIX, LOCAL_REPOSITORY, FrameworkImage


def from_ecr(repository: str, tag: str) -> FrameworkImage | None:
    """The image that stands in for an ECR name's repository and tag (`pytorch-training`,
    `1.11.0-gpu-py38`; `huggingface-pytorch-training`, `2.1.0-transformers4.36.0-gpu-py310-...`), None
    when none can here (`no_stand_in` says why). UsageError when the version could run here but the tag
    names a Python SageMaker never released it for."""
    if repository.startswith(HUGGINGFACE_PREFIX):
        return huggingface.from_ecr(repository, tag)
    return frameworks.from_ecr(repository, tag)


def no_stand_in(repository: str, tag: str) -> str:
    """Why no image stands in for an ECR repository and tag (`from_ecr` gave None)."""
    if repository.startswith(HUGGINGFACE_PREFIX):
        return huggingface.no_stand_in(repository, tag)
    return frameworks.no_stand_in(repository, tag)


def for_tag(tag: str) -> FrameworkImage | None:
    """The framework or Hugging Face image a local tag names (`hetero-emu/pytorch-training:1.11.0-py39`),
    None for any other tag: what a job that names it directly builds when it is missing."""
    if tag.startswith(LOCAL_REPOSITORY.format(repository=HUGGINGFACE_PREFIX)):
        return huggingface.for_tag(tag)
    return frameworks.for_tag(tag)
