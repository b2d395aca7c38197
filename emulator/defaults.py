"""Defaults shared across the emulator.

`DEFAULT_IMAGE` names the training image a job runs when its spec names none. No registry is
reachable where the emulator runs (images/README.md), so this tag is never pulled: it is built locally by
`emulator.backend.image_build.build_default_image` (`hetero-emu image build`). The `py311` suffix tells
users which Python their entry script gets (Debian bookworm's 3.11), the one property of the
image a training script most often depends on.

This module must stay free of heavy imports (docker, yaml, ...) so that pure modules such as the
spec loader and the planner can import it cheaply.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_IMAGE = "hetero-emu/training:py311"
#: The engine every front end runs jobs on unless told otherwise (`--engine`): its name in
#: `emulator.backend.registry`, which front ends never import (they name an engine; `emulator.api`
#: and the jobs layer look it up).
DEFAULT_ENGINE = "docker"
#: The PyTorch framework image a job is pointed at when it needs `torchrun` and names no PyTorch
#: version (emulator.training_images.frameworks: PyTorch 2.1.0, the SDK's py310 run on Python 3.11; built when missing,
#: or with `hetero-emu image build --framework pytorch:2.1.0 --python py310`).
PYTORCH_IMAGE = "hetero-emu/pytorch-training:2.1.0-py311"


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/hetero-emu`, else `~/.cache/hetero-emu`: rootfs tarballs and wheels (the
    image's and the jobs' requirements.txt wheelhouses)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hetero-emu"
