"""The image capability: what an engine's images answer (whether one is there, its labels, id and size)
and what they build (the default image, a framework image, an image of a recipe of images/, a job's
wheelhouse), apart from what the engine is (`emulator.backend.Backend`: networks, containers, exec,
logs). An engine gives its images as `Backend.images`; both engines over docker-py give this
machine's engine's (`emulator.backend.docker_images.LocalImages`: the swarm copies an image from
there to its nodes), and tests/support/fake_backend.py gives an in-memory one.

An engine's `Capabilities.builds_images` says whether the builds may be asked for; the questions
may always be. The contract is checked with the engine's (`emulator.backend.contract_problems`).
Nothing here imports docker-py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    from emulator.reports.progress import StepReporter
    from emulator.training_images.frameworks import FrameworkImage


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
