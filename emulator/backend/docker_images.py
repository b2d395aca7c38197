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

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

import docker
import docker.errors

from emulator.backend.calls import first_line
from emulator.backend.docker_http import read_timeout
from emulator.backend.images import ImageKey
from emulator.errors import EmulatorError, EnvironmentProblem, ImageMissing, UsageError

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

    def key(self, image: str | FrameworkImage) -> ImageKey:
        """The tag and recipe hash a build of `image` (a variant name or a framework image) labels it
        with, from the recipe files alone (the builders' own hash functions, so the two cannot differ)."""
        if isinstance(image, str):
            from emulator.backend.image_build import recipe_hash
            from emulator.training_images.image_recipes import load_recipe

            recipe = load_recipe(image)
            return ImageKey(recipe.tag, recipe_hash(recipe))
        if image.huggingface is not None:
            from emulator.backend import huggingface_build

            return ImageKey(image.tag, huggingface_build.recipe_hash(image))
        from emulator.backend import framework_build

        return ImageKey(image.tag, framework_build.recipe_hash(image))

    def save(self, image: str, archive: Path) -> int:
        """`docker save` of the image by its name (so a load tags it again), streamed to `archive`."""
        api = self._client().api
        with _archive_errors(f"save image {image}", f"write {archive}", refused=EnvironmentProblem, hint=None):
            if self._inspect_labels(image) is None:  # not present(): it keeps the labels for a run
                raise ImageMissing(f"the Docker engine has no image {image} to save",
                                   hint="build it first: hetero-emu image build")
            # Gigabytes are written as the engine reads its layers: no read limit while it does.
            with read_timeout(api, None), archive.open("wb") as out:
                for chunk in api.get_image(image):
                    out.write(chunk)
        return archive.stat().st_size

    def load(self, archive: Path) -> tuple[str, ...]:
        """`docker load` of `archive`, streamed from the file (a framework image's gigabytes are never
        held in memory); the names the engine says it loaded."""
        api = self._client().api
        loaded: list[str] = []
        hint = "give an archive `hetero-emu image save` wrote"
        with (_archive_errors(f"load {archive}", f"read {archive}", refused=UsageError, hint=hint),
              read_timeout(api, None), archive.open("rb") as data):
            for event in api.load_image(data):
                if event.get("error"):
                    raise UsageError(f"the Docker engine cannot load {archive}: {event['error']}", hint=hint)
                found = re.match(r"Loaded image(?: ID)?: (\S+)", str(event.get("stream", "")).strip())
                if found:
                    loaded.append(found.group(1))
        return tuple(loaded)

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


@contextlib.contextmanager
def _archive_errors(doing: str, file_doing: str, *, refused: type[EmulatorError], hint: str | None) -> Iterator[None]:
    """A save's or a load's failures as EmulatorErrors: the engine refusing (`refused`: a load refuses a
    wrong file, the user's; a save's refusal is the engine's), the engine gone, the file unreadable or
    unwritable (`file_doing`)."""
    try:
        yield
    except docker.errors.APIError as err:
        raise refused(f"the Docker engine cannot {doing}: {first_line(err)}", hint=hint) from None
    except docker.errors.DockerException as err:
        raise EnvironmentProblem(f"cannot {doing}: {first_line(err)}") from None
    except OSError as exc:
        raise refused(f"cannot {file_doing}: {exc.strerror}", hint=hint) from None
