"""The image capability (`emulator.backend.images.Images`) on this machine's Docker engine: what both
engines over docker-py give as their `images` (the swarm copies an image from here to its nodes), and
what `hetero-emu image build` and a prebuild build with.

The builds themselves are in their own modules, imported on use (an engine that only runs a job
never loads them): backend/image_build.py (an image of a recipe), backend/framework_build.py (a
framework image), backend/huggingface_build.py (a Hugging Face layer over one), and
backend/index_container.py (a job's wheelhouse). Which of the two framework builders an image needs
is decided here, so that neither imports the other back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import docker
import docker.errors

from emulator.backend.calls import first_line
from emulator.errors import EnvironmentProblem

if TYPE_CHECKING:
    from pathlib import Path

    from emulator.backend.images import BuildReport
    from emulator.reports.progress import StepReporter
    from emulator.training_images.frameworks import FrameworkImage


class LocalImages:
    """The images of this machine's engine (`client()`, asked on first use): whether one is there, its
    labels, id and size, and the builds (the default image, a framework image, a recipe's image, a
    job's wheelhouse)."""

    def __init__(self, client: Callable[[], docker.DockerClient]) -> None:
        self._client = client
        self._labels_seen: dict[str, dict[str, str]] = {}

    def present(self, image: str) -> bool:
        labels = self._inspect_labels(image)
        if labels is not None:
            # A run asks for the labels right after (runner.ensure_image): one inspect does for both.
            self._labels_seen[image] = labels
        return labels is not None

    def labels(self, image: str) -> Mapping[str, str] | None:
        seen = self._labels_seen.pop(image, None)  # once: a later run sees a rebuilt image's labels
        return seen if seen is not None else self._inspect_labels(image)

    def _inspect_labels(self, image: str) -> dict[str, str] | None:
        try:
            return dict(self._client().images.get(image).labels or {})
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as err:
            raise EnvironmentProblem(f"cannot inspect image {image}: {first_line(err)}") from None

    def image_id(self, image: str) -> str:
        """The id of an image the engine has (a wheelhouse is resolved against exactly it)."""
        try:
            return str(self._client().images.get(image).id)
        except docker.errors.DockerException as err:
            raise EnvironmentProblem(f"cannot inspect image {image}: {first_line(err)}") from None

    def size(self, image: str) -> int:
        from emulator.backend.image_build import image_size

        return image_size(self._client(), image)

    def build_wheelhouse(self, image: str, code: Path, out: Path, progress: Callable[[str], None],
                         shown: str) -> None:
        """Resolve a job's requirements.txt in a container of its image that reaches the package index,
        into `out` (emulator.backend.index_container.build_wheelhouse)."""
        from emulator.backend.index_container import build_wheelhouse

        build_wheelhouse(self._client(), image, code, out, progress, shown)

    def build_default_image(self, progress: StepReporter, *, rebuild: bool = False) -> BuildReport:
        """Build the default training image offline (`run` does this when it is missing)."""
        from emulator.backend.image_build import build_default_image

        return build_default_image(self._client(), rebuild=rebuild, progress=progress)

    def build_framework_image(self, framework: FrameworkImage, progress: StepReporter, *,
                              rebuild: bool = False) -> BuildReport:
        """Build a framework image, or a Hugging Face image (its framework image first, then its
        layer), offline but for the package index (`run` does this when it is missing)."""
        if framework.huggingface is not None:
            from emulator.backend.huggingface_build import build_huggingface_image

            return build_huggingface_image(self._client(), framework, rebuild=rebuild, progress=progress,
                                           cache_dir=None, verbose=False)
        from emulator.backend import framework_build

        return framework_build.build_framework_image(self._client(), framework, rebuild=rebuild, progress=progress)

    def build_recipe_image(self, variant: str, progress: StepReporter, *, rebuild: bool = False) -> BuildReport:
        """Build the image of a recipe of images/ offline (`run` does this when it is missing)."""
        from emulator.backend.image_build import build_image
        from emulator.training_images.image_recipes import load_recipe

        return build_image(self._client(), load_recipe(variant), rebuild=rebuild, progress=progress)
