"""The image capability: what an engine's images answer (whether one is there, its labels, id and size)
and what they build (the default image, a framework image, an image of a recipe of images/, a job's
wheelhouse), and their archives for a CI cache (an image's key, `docker save` and `docker load` of
it), apart from what the engine is (`emulator.backend.Backend`: networks, containers, exec,
logs). An engine gives its images as `Backend.images`; both engines over docker-py give this
machine's engine's (`emulator.backend.docker_images.LocalImages`: the swarm copies an image from
there to its nodes), and tests/support/fake_backend.py gives an in-memory one.

An engine's `Capabilities.builds_images` says whether the builds may be asked for; the questions
may always be. The contract is checked with the engine's (`emulator.backend.contract_problems`).
Nothing here imports docker-py.
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    from emulator.reports.progress import StepReporter
    from emulator.training_images.frameworks import FrameworkImage

#: Label on every image this project builds: the sha256 of its recipe (`ImageKey.recipe`). An image is up
#: to date when it carries the hash of the recipe this hetero-emu would build it from, whether it was
#: built here or loaded from an archive (`Images.load`): the label travels with the image.
RECIPE_LABEL = "hetero-emu.image.recipe"
#: The file of an image's archive in a cache folder: `<image, its / and : as _>-<16 hex of its recipe hash>.tar`.
_KEY_LENGTH = 16


@dataclass(frozen=True)
class BuildReport:
    """What a build did: `built` is False when the image was already up to date."""

    image: str
    built: bool
    seconds: float
    size_bytes: int
    steps: tuple[str, ...]
    #: Seconds spent waiting for another build (another process) to finish first; None: no wait.
    waited_seconds: float | None = None


@dataclass(frozen=True)
class ImageKey:
    """An image and the hash of the recipe it is built from, known without building it or asking the
    engine: what a CI cache is keyed by (`text`), and the name of the image's archive in a cache folder
    (`file_name`), so a folder restored under a stale key still never loads a stale image by mistake."""

    image: str
    recipe: str

    @property
    def text(self) -> str:
        """The key as CI caches take it: letters, digits, `.`, `_` and `-` only."""
        return f"{re.sub(r'[^A-Za-z0-9._-]', '_', self.image)}-{self.recipe[:_KEY_LENGTH]}"

    @property
    def file_name(self) -> str:
        return f"{self.text}.tar"

    def stale_name(self, name: str) -> bool:
        """Whether `name` is the archive of this image under another recipe's key (one to remove)."""
        stem = re.escape(self.text[:-_KEY_LENGTH])
        return name != self.file_name and re.fullmatch(rf"{stem}[0-9a-f]{{{_KEY_LENGTH}}}\.tar", name) is not None

    def up_to_date(self, labels: Mapping[str, str] | None) -> bool:
        """Whether an image with these labels (None: no such image) is the one this key's recipe makes."""
        return labels is not None and labels.get(RECIPE_LABEL) == self.recipe


def archive_problem(path: Path) -> str | None:
    """Why `path` is not an image archive as `docker save` writes one (a tar holding manifest.json),
    None when it is; asked before the engine is, so a wrong file is said plainly."""
    if not path.is_file():
        return f"{path} does not exist" if not path.exists() else f"{path} is not a file"
    try:
        with tarfile.open(path, "r:") as archive:
            archive.getmember("manifest.json")
    except KeyError:
        return f"{path} is a tar archive, but not of images (it has no manifest.json)"
    except (tarfile.TarError, EOFError):
        return f"{path} is not an image archive (not a tar file)"
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror}"
    return None


class Images(Protocol):
    """The images of one engine. Errors are EmulatorError subclasses (a build's: ImageBuildError
    naming its log file). Each build is done only when the image is not up to date (built=False
    then), unless `rebuild`, and reports its steps to `progress`."""

    def present(self, image: str) -> bool:
        """Whether the engine has an image of this name."""

    def labels(self, image: str) -> Mapping[str, str] | None:
        """The image's labels ({} when it has none), None when the engine has no such image."""

    def image_id(self, image: str) -> str:
        """The id of an image the engine has."""

    def size(self, image: str) -> int:
        """The size in bytes of an image the engine has (0 when it cannot be told)."""

    def key(self, image: str | FrameworkImage) -> ImageKey:
        """The key of a recipe's image (its variant name, a folder of images/) or of a framework image:
        its tag and its recipe's hash, as a build labels it; the engine is not asked."""

    def save(self, image: str, archive: Path) -> int:
        """Write an image the engine has, under its name, to `archive` as `docker save` does; the
        archive's size in bytes. ImageMissing when the engine has no such image."""

    def load(self, archive: Path) -> tuple[str, ...]:
        """Import an archive `save` (or `docker save`) wrote, as `docker load` does, labels and all; the
        names of the images it held. UsageError when the engine finds it is not such an archive."""

    def build_default_image(self, progress: StepReporter, *, rebuild: bool = False) -> BuildReport:
        """Build the default training image offline (`Capabilities.builds_images`)."""

    def build_framework_image(self, framework: FrameworkImage, progress: StepReporter, *,
                              rebuild: bool = False) -> BuildReport:
        """Build a framework or Hugging Face image offline but for the package index its pip installs
        from (`Capabilities.builds_images`)."""

    def build_recipe_image(self, variant: str, progress: StepReporter, *, rebuild: bool = False) -> BuildReport:
        """Build the image of a recipe of images/ offline (`Capabilities.builds_images`)."""

    def build_wheelhouse(self, image: str, code: Path, out: Path, progress: Callable[[str], None],
                         shown: str) -> None:
        """Resolve the requirements.txt in `code` against `image` (its Python, what it already has) with
        the package index reachable, and write the wheels it lacks into `out`; WheelhouseError naming
        the requirement, the Python and why (`shown` names the file)."""
