"""Building ahead the image a job will need, so that its first run does not wait for it.

A job whose image is missing builds it before it starts (minutes for a framework image;
emulator/run/build_status.py says so while it waits). `hetero-emu image build --for FILE` (a YAML spec or
a CreateTrainingJob request), `EmulatorSession.prebuild(estimator)` and `EmulatorSessionV3.prebuild(
model_trainer)` build that image first, by the rules a run chooses it by (`emulator.training_images.ecr_images`:
a real image in the engine wins, then the session's table, then the framework image an ECR name of
AWS's PyTorch or TensorFlow training image stands for) and, as `image build` does, only when it is
not up to date. It acts on an engine's images (`emulator.backend.images.Images`), so it sits above
the backend, with the run whose image it builds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from emulator.backend.images import BuildReport, Images
from emulator.backend.registry import engine
from emulator.defaults import DEFAULT_ENGINE
from emulator.errors import ImageMissing
from emulator.reports.progress import StepReporter, as_step_reporter
from emulator.training_images.ecr_images import DEFAULT_IMAGE_MAP, choose_image
from emulator.training_images.image_recipes import variant_for_tag
from emulator.training_images.stand_ins import for_tag


def engine_images(engine_name: str = DEFAULT_ENGINE) -> Images:
    """The images of the engine called `engine_name` (this machine's Docker engine by default), once
    it answers: DockerUnavailable before anything is chosen or built when it does not."""
    backend = engine(engine_name)
    backend.ping()
    return backend.images


def build_for(name: str, *, images: Mapping[str, str] | None = None, rebuild: bool = False,
              progress: StepReporter | Callable[[str], None] = print, verbose: bool = False,
              engine_name: str = DEFAULT_ENGINE) -> BuildReport:
    """Build the image a job naming image `name` runs (an ECR name or a local one; `images` is the
    session's table of ECR names, default: none beyond the framework images), or do nothing when it
    is up to date; the build report. An image the engine has that no recipe here builds (one loaded
    or tagged) has nothing to build; ImageMissing when the image is neither there nor buildable."""
    started = time.monotonic()
    engine_has = engine_images(engine_name)
    steps = as_step_reporter(progress, verbose)
    choice = choose_image(name, DEFAULT_IMAGE_MAP if images is None else images, engine_has.present)
    for note in choice.notes():  # which image stands in, on which Python: as the job will say
        steps.info(note)
    framework = for_tag(choice.image)
    if framework is not None:
        if (missing := framework.horovod_missing()) is not None:
            steps.info(missing)
        return engine_has.build_framework_image(framework, steps, rebuild=rebuild)
    variant = variant_for_tag(choice.image)
    if variant is not None:
        return engine_has.build_recipe_image(variant, steps, rebuild=rebuild)
    if engine_has.present(choice.image):
        steps.info(f"{choice.image} is in the Docker engine and no recipe here builds it: nothing to build")
        return BuildReport(choice.image, False, time.monotonic() - started, engine_has.size(choice.image), ())
    raise ImageMissing(f"image {choice.image} is not in the Docker engine, and no recipe here builds it",
                       hint="load or tag it first (docker load / docker tag); no registry is reachable here")
