"""Building ahead the image a job will need, so that its first run does not wait for it.

A job whose image is missing builds it before it starts (minutes for a framework image;
emulator/run/build_status.py says so while it waits). `hetero-emu image build --for FILE` (a YAML spec or
a CreateTrainingJob request), `EmulatorSession.prebuild(estimator)` and `EmulatorSessionV3.prebuild(
model_trainer)` build that image first, by the rules a run chooses it by (`emulator.training_images.ecr_images`:
a real image in the engine wins, then the session's table, then the framework image an ECR name of
AWS's PyTorch or TensorFlow training image stands for) and, as `image build` does, only when it is
not up to date.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from emulator.errors import ImageMissing
from emulator.reports.progress import StepReporter, as_step_reporter
from emulator.training_images.ecr_images import DEFAULT_IMAGE_MAP, choose_image
from emulator.training_images.image_recipes import load_recipe, variant_for_tag
from emulator.training_images.stand_ins import for_tag

if TYPE_CHECKING:  # the backend imports docker: only when a build is asked for
    from emulator.backend.image_build import BuildReport


def build_for(name: str, *, images: Mapping[str, str] | None = None, rebuild: bool = False,
              progress: StepReporter | Callable[[str], None] = print, verbose: bool = False) -> BuildReport:
    """Build the image a job naming image `name` runs (an ECR name or a local one; `images` is the
    session's table of ECR names, default: none beyond the framework images), or do nothing when it
    is up to date; the build report. An image the engine has that no recipe here builds (one loaded
    or tagged) has nothing to build; ImageMissing when the image is neither there nor buildable."""
    from emulator.backend import image_build
    from emulator.backend.docker_parts import connect
    from emulator.backend.framework_build import build_framework_image

    started = time.monotonic()
    client = connect()
    steps = as_step_reporter(progress, verbose)

    def present(image: str) -> bool:
        return image_build.image_present(client, image)

    choice = choose_image(name, DEFAULT_IMAGE_MAP if images is None else images, present)
    for note in choice.notes():  # which image stands in, on which Python: as the job will say
        steps.info(note)
    framework = for_tag(choice.image)
    if framework is not None:
        if (missing := framework.horovod_missing()) is not None:
            steps.info(missing)
        return build_framework_image(client, framework, rebuild=rebuild, progress=steps, verbose=verbose)
    variant = variant_for_tag(choice.image)
    if variant is not None:
        return image_build.build_image(client, load_recipe(variant), rebuild=rebuild, progress=steps,
                                       verbose=verbose)
    if present(choice.image):
        steps.info(f"{choice.image} is in the Docker engine and no recipe here builds it: nothing to build")
        return image_build.BuildReport(choice.image, False, time.monotonic() - started,
                                       image_build.image_size(client, choice.image), ())
    raise ImageMissing(f"image {choice.image} is not in the Docker engine, and no recipe here builds it",
                       hint="load or tag it first (docker load / docker tag); no registry is reachable here")
